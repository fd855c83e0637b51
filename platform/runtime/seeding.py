"""Per-(stream, round, client) seeds, so results do not depend on which actor hosts a client."""
from __future__ import annotations

import numpy as np
import torch


def derived_seed(*keys: int) -> int:
    return int(np.random.SeedSequence([int(k) for k in keys]).generate_state(1, dtype=np.uint64)[0] >> np.uint64(1))


def generator(*keys: int) -> torch.Generator:
    return torch.Generator().manual_seed(derived_seed(*keys))


def sample_clients(num_clients: int, per_round: int, sampling_seed: int, round_index: int) -> np.ndarray:
    """Clients taking part in round ``round_index``: uniform without replacement, seeded per round."""
    rng = np.random.default_rng(derived_seed(sampling_seed, round_index))
    if per_round >= num_clients:
        return np.arange(num_clients)
    return np.sort(rng.choice(num_clients, size=per_round, replace=False))
