"""Ray runtime: a parameter-server actor, a pool of client actors, and the round loop that drives them."""
from platform.runtime.federation import Federation, SharedData, share_dataset
from platform.runtime.placement import Placement

__all__ = ["Federation", "Placement", "SharedData", "share_dataset"]
