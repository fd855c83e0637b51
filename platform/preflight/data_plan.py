"""The sizes a config's data will have, from the config alone: no image is read or made, no file or Ray is needed.

:func:`data_plan` follows the labels through the steps a run takes (:func:`platform.runtime.federation.
load_shared_data`, then :func:`platform.runtime.federation.client_splits`), calling the same functions: the public
pool's carve-out (:func:`platform.data.public.train_split_indices`, :func:`platform.data.public.public_dataset_take`),
the server's validation split (:func:`platform.data.splits.server_validation_from`), the partition and each
client's own split (both in :func:`platform.data.splits.client_index_splits`). So a partition the data cannot
satisfy raises here the :class:`ConfigError` the run would raise as it builds its data, and the dry run fails where
the run would.

The labels: the embedded datasets' own (they are small); a torchvision dataset's own, read from its files where they
are; else its stand-in labels (:func:`platform.data.stand_in.generate_labels`: the real split sizes and classes,
MNIST's real class counts, the others balanced within every chunk of 2,048). The sizes of every split are the real
ones; a partition that follows the labels (Dirichlet, the balanced trim of ``lda``) may give clients a few samples
more or fewer on real files whose classes are unequal and whose counts the stand-in does not carry (EMNIST
byclass, SVHN).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import numpy as np

from platform.config.experiment import check_setting_with_data
from platform.data.datasets import DATASETS, check_dataset_available, load_dataset, read_split, stand_in_variant
from platform.data.public import public_dataset_take, public_splits, train_split_indices
from platform.data.splits import client_index_splits, server_validation_from
from platform.data.stand_in import generate_labels, split_size
from platform.errors import ConfigError
from platform.runtime.seeding import client_split_seed


@dataclass(frozen=True)
class DataPlan:
    """The sizes of one config's data: the training split as stored, the public pool, the server's validation split,
    the clients' pool and every client's training (and own validation and test) samples."""

    dataset: str
    labels_from: str  # "the embedded data", "the dataset's files" or "stand-in labels..."
    train: int  # the training split as stored
    test: int  # the test split
    public_source: str
    public: int  # public inputs (0 without public data)
    server_val: int  # the server's validation split
    server_val_source: str  # server.val_source: "train" (the training pool) or "test" (the test split)
    pool: int  # what the partition shares out
    client_train: tuple  # per client
    client_val: tuple = ()
    client_test: tuple = ()

    def lines(self) -> list[str]:
        """What the dry run prints."""
        out = [f"data sizes ({self.labels_from}): {self.dataset} train {self.train:,}, test {self.test:,}"
               + (f"; public ({self.public_source}) {self.public:,}" if self.public_source != "none" else "")
               + f"; server validation split {self.server_val:,} (from the "
               + ("test split" if self.server_val_source == "test" else "training pool") + ")"
               + f"; clients' pool {self.pool:,}"]
        out.append(f"per client ({len(self.client_train)} clients), training samples: {_spread(self.client_train)}")
        if self.client_val:
            out.append(f"  own validation split: {_spread(self.client_val)}")
        if self.client_test:
            out.append(f"  own test split: {_spread(self.client_test)}")
        return out


def _spread(sizes) -> str:
    sizes = np.asarray(sizes)
    if sizes.min() == sizes.max():
        return f"{int(sizes[0]):,} each"
    return f"min {int(sizes.min()):,} / median {float(np.median(sizes)):,.0f} / max {int(sizes.max()):,}"


def _labels(config) -> tuple[np.ndarray, Optional[np.ndarray], Optional[np.ndarray], np.ndarray, str]:
    """(training labels, their groups, their coarse labels, test labels, where the labels come from)."""
    cfg = config.dataset
    if DATASETS[cfg.name].read is None:  # embedded: small, loaded as the run loads it
        train, test = load_dataset(cfg)
        return train.y, train.groups, train.coarse_y, test.y, "the embedded data"
    variant = stand_in_variant(cfg)
    stand_in = getattr(cfg, "stand_in", False)
    if not stand_in and _files_found(cfg):  # the real labels (reading the images too: seconds at most)
        train, test = (read_split(cfg.name, cfg.root, split, False, cfg) for split in ("train", "test"))
        return train.y, None, train.coarse_y, test.y, "the dataset's files"
    fraction = cfg.stand_in_fraction if stand_in else 1.0
    y, _, coarse = generate_labels(cfg.name, "train", variant, fraction)
    test_y = generate_labels(cfg.name, "test", variant, fraction)[0]
    return y, None, coarse, test_y, "stand-in labels" if stand_in else "stand-in labels: the files are absent"


def _files_found(cfg) -> bool:
    try:
        check_dataset_available(cfg)
    except ConfigError:
        return False
    return True


def _public_size(config, n_train: int) -> tuple[int, Optional[np.ndarray]]:
    """(public inputs, the clients' local indices of the training split: None when it is not carved)."""
    public = config.public
    if public.source == "train_split":
        pool, local = train_split_indices(n_train, public, config.split_seed())
        return len(pool), local
    if public.source == "dataset":
        fraction = config.dataset.stand_in_fraction if getattr(config.dataset, "stand_in", False) else 1.0
        total = sum(split_size(public.dataset, s, None, fraction) for s in public_splits(public))
        return public_dataset_take(total, public), None
    if public.source == "image":
        return int(public.size or 0), None
    return 0, None


def data_plan(config) -> DataPlan:
    """The sizes ``config``'s data will have (module doc); raises the partition's :class:`ConfigError` where the
    run would."""
    labels, groups, coarse, test_labels, source = _labels(config)
    n_test = len(test_labels)
    n_train = len(labels)
    public, local = _public_size(config, n_train)
    if local is not None:
        labels, groups, coarse = (None if a is None else a[local] for a in (labels, groups, coarse))
    server_val = 0
    carved = server_validation_from(config.server, labels, test_labels, config.split_seed())
    if carved is not None:
        source_split, keep, held = carved
        server_val = len(held)
        if source_split == "test":
            n_test = len(keep)
        else:
            labels, groups, coarse = (None if a is None else a[keep] for a in (labels, groups, coarse))
    train, val, test = client_index_splits(labels, config.partition, config.clients.num_clients,
                                           config.stream_seed("partition"), client_split_seed(config), groups, coarse)
    sizes = [tuple(len(part) for part in parts) if parts is not None else () for parts in (train, val, test)]
    check_setting_with_data(config, public)  # what the driver checks once the data is built
    return DataPlan(config.dataset.name, source, n_train, n_test, config.public.source, public, server_val,
                    config.server.val_source, len(labels), *sizes)


def check_cells(space) -> None:
    """:func:`data_plan` of every scenario cell's base config (the dry run prints the base's): the first cell whose
    data cannot be built raises its :class:`ConfigError`, the cell named."""
    from platform.config.search_space import cell_label

    for i, cell in enumerate(space.cells() if space.scenarios else []):
        try:
            data_plan(space.cell_space(i).trial_config({}))
        except ConfigError as err:
            raise ConfigError(err.field, f"{err.message} (scenario cell {cell_label(cell)})") from None


__all__ = ["DataPlan", "check_cells", "data_plan"]
