"""Per-(stream, round, client) seeds, so results do not depend on which actor hosts a client; one config per
seed replicate."""
from __future__ import annotations

import dataclasses

import numpy as np
import torch


def derived_seed(*keys: int) -> int:
    return int(np.random.SeedSequence([int(k) for k in keys]).generate_state(1, dtype=np.uint64)[0] >> np.uint64(1))


CLIENT_SPLIT_KEY = 0x5B17  # the per-client train/val/test split's stream, derived from the partition seed


def client_split_seed(config) -> int:
    """The seed of every client's own train/val/test split: derived from the partition stream's seed."""
    return derived_seed(config.stream_seed("partition"), CLIENT_SPLIT_KEY)


def generator(*keys: int) -> torch.Generator:
    return torch.Generator().manual_seed(derived_seed(*keys))


def sample_clients(num_clients: int, per_round: int, sampling_seed: int, round_index: int) -> np.ndarray:
    """Clients taking part in round ``round_index``: uniform without replacement, seeded per round."""
    rng = np.random.default_rng(derived_seed(sampling_seed, round_index))
    if per_round >= num_clients:
        return np.arange(num_clients)
    return np.sort(rng.choice(num_clients, size=per_round, replace=False))


def replicate_over_seeds(config, seeds) -> list:
    """One config per seed (the sweep's ``seeds`` list); each stream seed then derives from it, except an explicit
    ``seeds.<stream>`` (the same in every replicate) and, with ``seeds.partition_from_seed``, the partition seed,
    which is the replicate's seed itself (:meth:`platform.config.experiment.ExperimentConfig.stream_seed`)."""
    return [dataclasses.replace(config, seed=int(s)) for s in seeds]
