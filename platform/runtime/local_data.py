"""The data of one experiment in this process, before (or without) Ray: the training pool, the test split, the
public inputs and the server's validation split (:func:`load_shared_data`), and each client's splits
(:func:`client_splits_of`). Nothing here imports Ray, so a process without it (``--estimate`` on a machine without
Ray, the benchmarks that drive the actors' classes directly) loads data as a trial does."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import numpy as np

from platform.config.experiment import check_setting_with_data
from platform.data import load_dataset
from platform.data.public import public_subset, take_public
from platform.data.splits import client_index_splits, server_validation_from
from platform.runtime.seeding import client_split_seed
from platform.runtime.shards import ClientShards, ClientSplits


@dataclass(frozen=True)
class LocalData:
    """What :func:`share_dataset` puts in the object store, still in this process (:func:`load_shared_data`)."""

    train: object  # ArrayDataset: the clients' training pool (without the public and the server's validation split)
    test: object  # ArrayDataset
    public_x: Optional[np.ndarray] = None
    public_samples: Optional[np.ndarray] = None
    val: Optional[tuple] = None  # the server's validation split (x, y)


def load_shared_data(config, cache=None) -> LocalData:
    """Load the config's dataset, take its public split (if any) and the server's validation split from the
    training pool (never from the test set): all of :func:`share_dataset` but the object store. Needs no Ray, so a
    command can do it while its Ray instance starts (platform.run).

    Both splits are part of the shared data, so they are the same for every seed of a sweep, and for
    ``platform.run --set seed=S`` (seeded by ``seeds.split``, :meth:`ExperimentConfig.split_seed`, never by the
    replicate seed; the ``first_half`` public split of docs/methods/feded.md §4.2 does not depend on any seed; the
    source-image crop pool uses ``public.seed`` when set). ``cache``: the stage cache the source-image crop pool
    is read from or stored in (None: generated here, not stored).
    """
    train, test = load_dataset(config.dataset)
    public_x = val = samples = None
    if config.public.source != "none":
        split = take_public(train, config.public, config.split_seed(), config.dataset, cache=cache)
        train, public_x, samples = split.local, split.x, split.samples
        del split
    carved = server_validation_from(config.server, train.y, test.y, config.split_seed())
    if carved is not None:  # from the test split, its rest stays held out for test_*
        source, keep, held = carved
        held_from = test if source == "test" else train
        val = (np.ascontiguousarray(held_from.x[held]), held_from.y[held])
        if source == "test":
            test = public_subset(test, keep)
        else:
            train = public_subset(train, keep)
    check_setting_with_data(config, 0 if public_x is None else len(public_x))  # before any client trains
    return LocalData(train, test, public_x, samples, val)


def client_splits_of(config, labels: np.ndarray, groups: Optional[np.ndarray] = None,
                     coarse: Optional[np.ndarray] = None) -> ClientSplits:
    """Every client's training indices (the partition) and, with ``partition.val_fraction`` or ``test_fraction`` >
    0, its own validation and test indices: each client's data split stratified by label, seeded by the partition
    seed (its own stream), so the splits are the same in every trial. ``labels``: the clients' pool's."""
    train, val, test = client_index_splits(labels, config.partition, config.clients.num_clients,
                                           config.stream_seed("partition"), client_split_seed(config), groups, coarse)
    return ClientSplits(ClientShards.from_parts(train), None if val is None else ClientShards.from_parts(val),
                        None if test is None else ClientShards.from_parts(test))


__all__ = ["LocalData", "client_splits_of", "load_shared_data"]
