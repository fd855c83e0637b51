"""Public (auxiliary, unlabelled) data for the distillation methods: FedED, MNFL, FedDF/FedAUX, single image.

``split_public(train, cfg, seed, dataset_cfg, cache=None) -> (local_train, public_x)``. Public *labels are never
returned*: the methods only ever see inputs (docs/methods/feded.md §4.2 "auxiliary labels are never used";
docs/methods/mnfl.md §4 "labels are not required"; docs/methods/fedaux.md §6.1 unlabelled STL-10).

Sources (``public.source``):

- ``none``: no public data; the training set is returned unchanged with an empty ``public_x``.
- ``train_split``: carve the public pool out of the private training set (docs/methods/feded.md §4.2):
  ``first_half`` puts training indices [0, ⌊fraction·N⌋) in the pool and [⌊fraction·N⌋, N) in the local pool
  (torchvision order, the same for every seed); ``random`` uses a seeded permutation instead. ``size = n``
  takes the first n of the pool, so pools are nested across sizes (and, for ``first_half``, across seeds).
- ``dataset``: another dataset's images (MNIST for EMNIST/Fashion-MNIST and CIFAR-100 for CIFAR-10 in
  docs/methods/mnfl.md §4; STL-10 ``unlabeled``, CIFAR-100 train+test or SVHN for CIFAR-10 in docs/methods/fedaux.md
  §6.1), conformed to the private input shape (bilinear resize, channels repeated or converted to luma) and
  normalised with the *private* dataset's normalisation, since the same models consume both. ``size = n``
  takes the first n in the dataset's order (``first_half``) or a seeded random n (``random``).
- ``image``: the single-image method's crop pool (docs/methods/single_image.md §2): ``public_x`` holds ``size``
  (N_pool, default 50,000) seeded crops of one photo (``image``: a bundled name or a path to an image file), float32
  ``[N_pool, C, S, S]`` with ``S`` the private images' side, normalised with the *private* dataset's
  normalisation (§2.2, crops are normalised at load time with the private dataset's statistics) and in luma
  when the private images have one channel. Transforms: ``patches`` (:class:`PatchPoolConfig`, the official
  defaults); seed: ``seed``, else the shared data's seed, so the pool is the same for every replicate seed. The
  uint8 pool goes through the stage cache (``cache``), so trials and later runs read it from disk. Details, the
  size limits and the deviation from the paper's per-run seeding: :mod:`platform.data.patch_pool_source`.

With ``stand_in`` (``dataset_cfg.stand_in``) a public dataset is generated like the private one
(:mod:`platform.data.stand_in`, its real split sizes) and a source photo given as a file path is replaced by a
generated one of the paper's size; bundled photos are used as they are.

:func:`take_public` returns the same split as a :class:`PublicSplit`, which also carries the first 64 uint8 crops
(``samples``) for the logged grid ``public/patches.png``.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Optional

import numpy as np

from platform.config.experiment import DatasetConfig
from platform.config.public_data import PublicDataConfig
from platform.data.datasets import (DATASETS, EXTRA_SPLIT_FILES, NORMALIZATIONS, ArrayDataset, normalise_in_place,
                                    check_dataset_available, normalization_name, read_split, to_float_images)
from platform.data.patch_pool_source import check_image_source, patch_pool, plan_patch_pool, pool_inputs, pool_samples
from platform.errors import ConfigError

if TYPE_CHECKING:  # pragma: no cover
    from platform.stages.cache import StageCache

def _image_datasets() -> list[str]:
    """Datasets that can serve as public data: torchvision image datasets with a raw-image reader."""
    return [name for name, s in DATASETS.items() if s.read is not None]


def _dataset_splits(name: str) -> tuple[str, ...]:
    splits = DATASETS[name].splits
    return splits + (("train+test",) if "train" in splits and "test" in splits else ())


def check_public_dataset(cfg: PublicDataConfig, path: str = "public") -> None:
    """``source: dataset``: a known public image dataset and one of its splits (one :class:`ConfigError`)."""
    if cfg.source != "dataset":
        return
    if cfg.dataset is None:
        raise ConfigError(f"{path}.dataset", f"required when {path}.source is dataset; allowed: "
                                             f"{', '.join(_image_datasets())}")
    if cfg.dataset not in _image_datasets():
        raise ConfigError(f"{path}.dataset", f"unknown public dataset {cfg.dataset!r}; allowed: "
                                             f"{', '.join(_image_datasets())}")
    allowed = _dataset_splits(cfg.dataset)
    if cfg.dataset_split not in allowed:
        raise ConfigError(f"{path}.dataset_split", f"{cfg.dataset} has no split {cfg.dataset_split!r}; "
                                                   f"allowed: {', '.join(allowed)}")


def _public_dataset_cfg(cfg: PublicDataConfig, dataset_cfg):
    """A dataset config for the public dataset: its name, its root (or the private one), the private
    ``download`` and ``stand_in`` settings, none of the private dataset's specific knobs."""
    root = cfg.root if cfg.root is not None else dataset_cfg.root
    return DatasetConfig(name=cfg.dataset, root=root, download=dataset_cfg.download,
                         stand_in=getattr(dataset_cfg, "stand_in", False),
                         stand_in_fraction=getattr(dataset_cfg, "stand_in_fraction", 1.0))


def check_public_available(cfg: PublicDataConfig, dataset_cfg, path: str = "public") -> None:
    """Fail early (config time), with one :class:`ConfigError`, if a public dataset's files are missing, or the
    source image is missing, unreadable or too small for the pool (:func:`check_image_source`)."""
    if cfg.source == "image":
        check_image_source(cfg, dataset_cfg, path)
        return
    if cfg.source != "dataset":
        return
    pub = _public_dataset_cfg(cfg, dataset_cfg)
    field = f"{path}.root" if cfg.root is not None else "dataset.root"
    check_dataset_available(pub, field=field, extra_files=EXTRA_SPLIT_FILES.get((cfg.dataset, cfg.dataset_split),
                                                                                ()))


def public_subset(ds: ArrayDataset, idx: np.ndarray) -> ArrayDataset:
    return ArrayDataset(np.ascontiguousarray(ds.x[idx]), ds.y[idx], ds.num_classes,
                        None if ds.groups is None else ds.groups[idx],
                        None if ds.coarse_y is None else ds.coarse_y[idx])


def _take(pool_n: int, size: Optional[int], what: str, path: str) -> int:
    if size is None:
        return pool_n
    if size > pool_n:
        raise ConfigError(f"{path}.size", f"at most {pool_n} ({what}), got {size}")
    return size


def train_split_indices(n: int, cfg: PublicDataConfig, seed: int,
                        path: str = "public") -> tuple[np.ndarray, np.ndarray]:
    """Source ``train_split`` of a training set of ``n`` samples: (the public pool's indices, the clients' local
    indices, sorted). The pool is ⌊fraction·n⌋ samples, of which the first ``size`` are taken (ConfigError on
    ``<path>.size`` when the pool is smaller)."""
    pool_n = int(n * cfg.fraction)
    if cfg.split == "first_half":
        pool, local = np.arange(pool_n), np.arange(pool_n, n)
    else:
        perm = np.random.default_rng(seed).permutation(n)
        pool, local = perm[:pool_n], np.sort(perm[pool_n:])
    size = _take(pool_n, cfg.size, f"the pool holds {cfg.fraction:g} of {n} training samples", path)
    return pool[:size], local


def public_splits(cfg: PublicDataConfig) -> tuple[str, ...]:
    """The splits of the public dataset that source ``dataset`` reads (``train+test``: both)."""
    return ("train", "test") if cfg.dataset_split == "train+test" else (cfg.dataset_split,)


def public_dataset_take(total: int, cfg: PublicDataConfig, path: str = "public") -> int:
    """How many of a public dataset's ``total`` images source ``dataset`` takes (ConfigError on ``<path>.size``
    when it holds fewer)."""
    return _take(total, cfg.size, f"{cfg.dataset} {cfg.dataset_split} holds {total} images", path)


@dataclass(frozen=True)
class PublicSplit:
    """What :func:`take_public` returns: the clients' local training set, the public inputs (float32, no labels)
    and, for source image, the first crops of the pool as uint8 [≤64, 3, S, S] (for the logged grid)."""

    local: ArrayDataset
    x: np.ndarray
    samples: Optional[np.ndarray] = None


def split_public(train: ArrayDataset, cfg: PublicDataConfig, seed: int, dataset_cfg, path: str = "public",
                 cache: Optional["StageCache"] = None) -> tuple[ArrayDataset, np.ndarray]:
    """The clients' local training set and the public inputs (float32, no labels). See the module doc.

    ``cache``: the stage cache for the source-image crop pool (None: generated here, not stored)."""
    split = take_public(train, cfg, seed, dataset_cfg, path, cache)
    return split.local, split.x


def take_public(train: ArrayDataset, cfg: PublicDataConfig, seed: int, dataset_cfg, path: str = "public",
                cache: Optional["StageCache"] = None) -> PublicSplit:
    """:func:`split_public` with the source image's sample crops (:class:`PublicSplit`)."""
    if cfg.source == "image":
        plan = plan_patch_pool(cfg, train.input_shape, seed, path, stand_in=getattr(dataset_cfg, "stand_in", False))
        pool = patch_pool(plan, cache)
        x = pool_inputs(pool, train.input_shape[0], NORMALIZATIONS[normalization_name(dataset_cfg)])
        split = PublicSplit(train, x, pool_samples(pool))
    else:
        split = PublicSplit(*_split_public(train, cfg, seed, dataset_cfg, path))
    check_public_shape(split.x.shape[1:], split.local.input_shape, cfg, path)
    return split


def check_public_shape(public_shape: tuple, private_shape: tuple, cfg: PublicDataConfig, path: str = "public") -> None:
    """The same models consume public and private inputs, so a public pool whose per-sample shape differs from the
    private inputs' (public data conformed wrongly) is refused with a :class:`ConfigError` on ``<path>.source``
    naming both shapes. Every source conforms its pool today; this guards against one that does not."""
    public_shape, private_shape = tuple(int(d) for d in public_shape), tuple(int(d) for d in private_shape)
    if public_shape != private_shape:
        what = f"{cfg.source}" + (f" {cfg.dataset}" if cfg.source == "dataset" else "")
        raise ConfigError(f"{path}.source", f"the public inputs ({what}) have shape {public_shape} per sample but "
                                            f"the private inputs have {private_shape}; the same models consume both")


def _split_public(train: ArrayDataset, cfg: PublicDataConfig, seed: int, dataset_cfg,
                  path: str) -> tuple[ArrayDataset, np.ndarray]:
    if cfg.source == "none":
        return train, np.empty((0, *train.input_shape), dtype=np.float32)
    if cfg.source == "train_split":
        pool, local = train_split_indices(len(train), cfg, seed, path)
        return public_subset(train, local), np.ascontiguousarray(train.x[pool])
    # source == "dataset"
    if train.x.ndim != 4:
        raise ConfigError(f"{path}.source", f"public images need image training data; {dataset_cfg.name} is "
                                            f"vector data (use train_split)")
    check_public_available(cfg, dataset_cfg, path)
    pub = _public_dataset_cfg(cfg, dataset_cfg)
    field = f"{path}.root" if cfg.root is not None else "dataset.root"
    raws = [read_split(cfg.dataset, pub.root, s, pub.download, pub, field=field).x for s in public_splits(cfg)]
    total = sum(len(r) for r in raws)
    size = public_dataset_take(total, cfg, path)
    if cfg.split == "first_half" and len(raws) == 1:
        picked = raws[0][:size]  # a view: no copy of e.g. STL-10's 100k unlabelled images
    else:
        order = (np.arange(size) if cfg.split == "first_half"
                 else np.random.default_rng(seed).permutation(total)[:size])
        offsets = np.cumsum([0] + [len(r) for r in raws])
        which = np.searchsorted(offsets, order, side="right") - 1
        picked = np.empty((size, *raws[0].shape[1:]), dtype=raws[0].dtype)
        for i, raw in enumerate(raws):
            mask = which == i
            picked[mask] = raw[order[mask] - offsets[i]]
    channels, height, width = train.input_shape
    x = to_float_images(picked, size=(height, width), channels=channels)
    return train, normalise_in_place(x, NORMALIZATIONS[normalization_name(dataset_cfg)])


__all__ = ["PublicSplit", "check_public_available", "check_public_dataset", "check_public_shape", "split_public",
           "take_public"]
