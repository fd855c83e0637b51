"""Dataset registry: embedded data that needs no download, and torchvision datasets read from a data root.

Each loader returns a train and a test :class:`ArrayDataset` of float32 inputs (N×C×H×W) and int64 labels.
A missing data root or missing files fail at config-validation time with one error that says which
files are expected, where, and how to get them.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Callable, Optional

import numpy as np

from platform.errors import ConfigError

DIGITS_TEST_FRACTION = 0.2
DIGITS_SPLIT_SEED = 20_240_601  # fixed, independent of experiment seeds: the held-out test set never moves


@dataclass(frozen=True)
class ArrayDataset:
    x: np.ndarray  # float32, N×C×H×W (images) or N×D (vectors)
    y: np.ndarray  # int64 class labels
    num_classes: int
    groups: Optional[np.ndarray] = None  # natural client id per sample (LEAF synthetic, EMNIST writers), if any
    coarse_y: Optional[np.ndarray] = None  # coarse labels (CIFAR-100 superclasses), if any

    def __len__(self) -> int:
        return len(self.y)

    @property
    def input_shape(self) -> tuple[int, ...]:
        return tuple(self.x.shape[1:])


@dataclass(frozen=True)
class DatasetSpec:
    load: Callable  # (DatasetConfig) -> (train, test)
    required_files: tuple[str, ...] = ()  # relative to the data root; empty = embedded
    how_to_get: str = ""


def _load_digits(cfg) -> tuple[ArrayDataset, ArrayDataset]:
    """scikit-learn's bundled 8×8 handwritten digits (1,797 images), scaled to [0, 1], fixed stratified split."""
    from sklearn.datasets import load_digits

    bunch = load_digits()
    x = (bunch.images.astype(np.float32) / 16.0)[:, None, :, :]
    y = bunch.target.astype(np.int64)
    rng = np.random.RandomState(DIGITS_SPLIT_SEED)
    test_idx = []
    for c in range(10):
        idx = np.flatnonzero(y == c)
        rng.shuffle(idx)
        test_idx.append(idx[: int(round(len(idx) * DIGITS_TEST_FRACTION))])
    test_mask = np.zeros(len(y), dtype=bool)
    test_mask[np.concatenate(test_idx)] = True
    return (ArrayDataset(np.ascontiguousarray(x[~test_mask]), y[~test_mask], 10),
            ArrayDataset(np.ascontiguousarray(x[test_mask]), y[test_mask], 10))


def _normalise(x: np.ndarray, mean, std) -> np.ndarray:
    mean = np.asarray(mean, dtype=np.float32).reshape(1, -1, 1, 1)
    std = np.asarray(std, dtype=np.float32).reshape(1, -1, 1, 1)
    return ((x - mean) / std).astype(np.float32)


def _torchvision_loader(cls_name: str, mean, std, channels_last: bool):
    def load(cfg) -> tuple[ArrayDataset, ArrayDataset]:
        import torchvision.datasets as tvd

        cls = getattr(tvd, cls_name)
        parts = []
        for train in (True, False):
            ds = cls(root=cfg.root, train=train, download=cfg.download)
            data = np.asarray(ds.data)
            x = data.astype(np.float32) / 255.0
            x = x.transpose(0, 3, 1, 2) if channels_last else x[:, None, :, :]
            y = np.asarray(ds.targets, dtype=np.int64)
            parts.append(ArrayDataset(np.ascontiguousarray(_normalise(x, mean, std)), y, len(ds.classes)))
        return parts[0], parts[1]

    return load


_MNIST_FILES = ("train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte",
                "t10k-labels-idx1-ubyte")

DATASETS: dict[str, DatasetSpec] = {
    "digits": DatasetSpec(_load_digits),
    "mnist": DatasetSpec(
        _torchvision_loader("MNIST", (0.1307,), (0.3081,), channels_last=False),
        tuple(f"MNIST/raw/{f}" for f in _MNIST_FILES),
        "torchvision.datasets.MNIST(root, download=True) on a machine with a network, then copy the root here",
    ),
    "fashion_mnist": DatasetSpec(
        _torchvision_loader("FashionMNIST", (0.2860,), (0.3530,), channels_last=False),
        tuple(f"FashionMNIST/raw/{f}" for f in _MNIST_FILES),
        "torchvision.datasets.FashionMNIST(root, download=True) on a machine with a network",
    ),
    "cifar10": DatasetSpec(
        _torchvision_loader("CIFAR10", (0.485, 0.456, 0.406), (0.229, 0.224, 0.225), channels_last=True),
        tuple(f"cifar-10-batches-py/{f}" for f in
              ("data_batch_1", "data_batch_2", "data_batch_3", "data_batch_4", "data_batch_5", "test_batch")),
        "torchvision.datasets.CIFAR10(root, download=True) on a machine with a network",
    ),
}


def check_dataset_available(cfg) -> None:
    """Fail early, with one clear error, if a dataset's files are not where the config says."""
    spec = DATASETS[cfg.name]
    if not spec.required_files or cfg.download:
        return
    if not cfg.root:
        raise ConfigError("dataset.root", f"dataset {cfg.name!r} is read from a data root; set dataset.root "
                                          f"(or dataset.download: true where a network exists)")
    if not os.path.isdir(cfg.root):
        raise ConfigError("dataset.root", f"data root {cfg.root!r} does not exist; {cfg.name} expects "
                                          f"{os.path.join(cfg.root, spec.required_files[0])} and "
                                          f"{len(spec.required_files) - 1} more files; get them with "
                                          f"{spec.how_to_get}")
    missing = [f for f in spec.required_files
               if not (os.path.isfile(os.path.join(cfg.root, f)) or os.path.isfile(os.path.join(cfg.root, f + ".gz")))]
    if missing:
        raise ConfigError("dataset.root", f"{len(missing)} file(s) of {cfg.name} missing under {cfg.root!r}: "
                                          f"{', '.join(missing)}; get them with {spec.how_to_get}")


def load_dataset(cfg) -> tuple[ArrayDataset, ArrayDataset]:
    check_dataset_available(cfg)
    return DATASETS[cfg.name].load(cfg)
