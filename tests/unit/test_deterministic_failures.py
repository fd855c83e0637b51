"""Which trial failures a retry would repeat: a config error, however Ray wraps it, is failed once;
a lost process or node is retried (``search.max_failures``). Ray's own exception classes, as Tune receives them."""
from ray.exceptions import ActorDiedError, RayTaskError

from platform.errors import ConfigError
from platform.sweep.tune_fixes import deterministic


def _as_ray_delivers(cause: BaseException) -> BaseException:
    try:
        raise cause
    except BaseException as err:  # noqa: BLE001 - the traceback Ray keeps
        return RayTaskError("train", "Traceback (most recent call last): ...", err).as_instanceof_cause()


def test_a_config_error_is_deterministic_however_ray_wraps_it():
    error = ConfigError("partition.samples_per_client", "1000 per client x 6 clients exceeds the 1294 samples")
    assert deterministic(error)
    assert deterministic(_as_ray_delivers(error))
    chained = RuntimeError("the trial failed")
    chained.__cause__ = error
    assert deterministic(_as_ray_delivers(chained))


def test_a_lost_process_or_an_ordinary_error_is_not():
    assert not deterministic(ActorDiedError())
    assert not deterministic(_as_ray_delivers(MemoryError("out of memory")))
    assert not deterministic(_as_ray_delivers(RuntimeError("CUDA error: an illegal memory access")))
    assert not deterministic(None)
