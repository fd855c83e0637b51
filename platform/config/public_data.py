"""The config sections about public (auxiliary) data: where it comes from (:class:`PublicDataConfig`), the crops of
one photo (:class:`PatchPoolConfig`), and self-supervised pre-training on it (:class:`PretrainConfig`).

Types, defaults and the rules between their own fields only. What needs the data catalog or the file system (is a
public dataset known, does it have that split, are its files there, does a pool fit its photo) is checked by
:mod:`platform.preflight`; how the data is made is :mod:`platform.data.public`,
:mod:`platform.data.patch_pool_source` and :mod:`platform.runtime.pretrain`.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, fields
from typing import Optional, Union

from algorithms.common.patch_pool import DEFAULT_SETTINGS, validate_settings
from platform.config.schema import spec
from platform.errors import ConfigError

SOURCE_IMAGES: dict[str, str] = {
    "china": "scikit-learn's china.jpg (427×640 photo of a temple)",
    "flower": "scikit-learn's flower.jpg (427×640 photo of a flower)",
    "noise": "i.i.d. uniform RGB noise, 1920×2560, fixed seed (docs/methods/single_image.md §2.3 [R])",
    "strokes": "generated grey pen strokes on black, 768×1024, fixed seed (an image that suits handwriting)",
}
DEFAULT_POOL_SIZE = 50_000  # N_pool of the paper's main runs (docs/methods/single_image.md §2.4)
PUBLIC_SOURCES = ("none", "train_split", "dataset", "image")
PUBLIC_SPLITS = ("first_half", "random")
PUBLIC_DATASET_SPLITS = ("train", "test", "train+test", "unlabeled", "extra")
PRETRAIN_METHODS = ("none", "simclr")


def is_image_name(value: str) -> bool:
    """Whether ``public.image`` names a bundled source image (else it is a path)."""
    return value in SOURCE_IMAGES


def image_reference(value: str) -> str:
    """A bundled image's name unchanged; a path made absolute (``~`` expanded, relative to the current
    directory)."""
    return value if is_image_name(value) else os.path.abspath(os.path.expanduser(value))


def pool_size(cfg: PublicDataConfig) -> int:
    """N_pool: ``public.size``, or :data:`DEFAULT_POOL_SIZE` when null."""
    return cfg.size if cfg.size is not None else DEFAULT_POOL_SIZE


@dataclass(frozen=True)
class PatchPoolConfig:
    """``public.patches``: the crop transforms of docs/methods/single_image.md §2.2 (official code's defaults,
    §8 A1)."""

    init_crop: float = spec(DEFAULT_SETTINGS["init_crop"], doc="Side of the initial random square crop as a "
                                                               "fraction of min(H, W) "
                                                               "(docs/methods/single_image.md §2.2 step 1: 0.5).",
                            gt=0, le=1)
    scale: tuple[float, float] = spec(tuple(DEFAULT_SETTINGS["scale"]), doc="Random-resized-crop area fraction "
                                      "range of the initial crop (docs/methods/single_image.md §2.2 step 2: "
                                      "[1/500, 1]).")
    ratio: tuple[float, float] = spec(tuple(DEFAULT_SETTINGS["ratio"]), doc="Random-resized-crop aspect-ratio "
                                      "range, log-uniform (docs/methods/single_image.md §2.2 step 2: [3/4, 4/3]).")
    rot_deg: float = spec(DEFAULT_SETTINGS["rot_deg"], doc="Rotation uniform in ±rot_deg degrees "
                                                           "(docs/methods/single_image.md §2.2 step 3: 30; the "
                                                           "paper's '35°' is in no code).", ge=0, le=180)
    shear_deg: float = spec(DEFAULT_SETTINGS["shear_deg"], doc="x-shear uniform in ±shear_deg degrees "
                                                               "(docs/methods/single_image.md §2.2 step 3: 30).",
                            ge=0, le=180)
    hflip: bool = spec(DEFAULT_SETTINGS["hflip"], doc="Random horizontal flip (p 0.5); off in the official "
                                                      "pipeline (docs/methods/single_image.md §2.2 step 4, "
                                                      "§8 A1).")
    vflip: bool = spec(DEFAULT_SETTINGS["vflip"], doc="Random vertical flip (p 0.5); off "
                                                      "(docs/methods/single_image.md §2.2 step 4).")
    jitter_p: float = spec(DEFAULT_SETTINGS["jitter_p"], doc="Probability of colour jitter per crop "
                                                             "(docs/methods/single_image.md §2.2 step 6: 0.5).",
                           ge=0, le=1)
    jitter: tuple[float, float, float, float] = spec(tuple(DEFAULT_SETTINGS["jitter"]), doc="Colour jitter "
                                                     "(brightness, contrast, saturation, hue) "
                                                     "(docs/methods/single_image.md §2.2 step 6: "
                                                     "[0.4, 0.4, 0.4, 0.1]).")
    jpeg_quality: Optional[int] = spec(DEFAULT_SETTINGS["jpeg_quality"], doc="JPEG round trip of every crop at "
                                       "this quality, as the authors stored crops "
                                       "(docs/methods/single_image.md §8 A21); null = off.",
                                       ge=1, le=100)

    def settings(self) -> dict:
        """The keyword arguments of :func:`~algorithms.common.patch_pool.make_patch_pool`."""
        return {f.name: getattr(self, f.name) for f in fields(self)}

    def validate(self, path: str) -> None:
        validate_settings(self.settings(), path or "public.patches")


@dataclass(frozen=True)
class PublicDataConfig:
    source: str = spec("none", doc="Where public data come from: none | train_split (docs/methods/feded.md §4.2) | "
                                   "dataset (another dataset, docs/methods/mnfl.md §4, docs/methods/fedaux.md §6.1) "
                                   "| image "
                                   "(single source image, docs/methods/single_image.md §2.3).", choices=PUBLIC_SOURCES)
    split: str = spec("first_half", doc="first_half: the pool is the first ⌊fraction·N⌋ training indices and "
                                        "size n takes its first n, nested and the same for every seed "
                                        "(docs/methods/feded.md §4.2); random: a seeded permutation. With source "
                                        "dataset: the first n of that dataset, or a seeded random n.",
                      choices=PUBLIC_SPLITS)
    size: Optional[int] = spec(None, doc="|D_0|, the number of public samples; null = the whole pool. Source image: "
                                         f"N_pool, the number of crops; null = {DEFAULT_POOL_SIZE} (the paper's "
                                         "main pool, docs/methods/single_image.md §2.4); at most the photo's pixel "
                                         "count "
                                         "H·W.", ge=1)
    fraction: float = spec(0.5, doc="train_split: share of the training set that becomes the pool (1/2 in "
                                    "docs/methods/feded.md §4.2).", gt=0, lt=1)
    dataset: Optional[str] = spec(None, doc="source dataset: the public dataset's name (e.g. stl10, cifar100, "
                                            "mnist, svhn); see platform.data.DATASETS.")
    dataset_split: str = spec("train", doc="source dataset: which of its splits: train | test | train+test "
                                           "(CIFAR-100 in docs/methods/fedaux.md §6.1) | unlabeled (STL-10) | extra "
                                           "(SVHN).", choices=PUBLIC_DATASET_SPLITS)
    root: Optional[str] = spec(None, doc="source dataset: its data root; null = dataset.root.")
    image: str = spec("china", doc="source image: the photo the crops are cut from, a name (" + "; ".join(
        f"{k} = {v}" for k, v in SOURCE_IMAGES.items()) + ") or the path of an image file (absolute, or relative to "
        "the current directory, ~ expanded; kept as an absolute path; read with PIL as RGB). Checked when the "
        "config loads.")
    seed: Optional[int] = spec(None, doc="source image: the crop pool's seed; null = the shared data's seed (the "
                                         "base config's partition stream). The pool is shared data, the same for "
                                         "every replicate seed of a sweep; the paper seeded it with each run's "
                                         "seed (42/84, docs/methods/single_image.md §2.2), a deliberate "
                                         "deviation.", ge=0)
    patches: PatchPoolConfig = spec(factory=PatchPoolConfig, doc="source image: the crop transforms "
                                                                 "(docs/methods/single_image.md §2.2, official "
                                                                 "defaults).")

    def __post_init__(self):
        # A path is kept absolute, so a run that later changes directory (a Ray job, a Tune trial) finds it.
        object.__setattr__(self, "image", image_reference(self.image))

    def validate(self, path: str) -> None:
        path = path or "public"
        # source dataset: which datasets and splits exist is the data catalog's to say (platform.preflight)
        if self.source != "dataset":
            for key, default in (("dataset", None), ("root", None), ("dataset_split", "train")):
                if getattr(self, key) != default:
                    raise ConfigError(f"{path}.{key}", f"only applies when {path}.source is dataset "
                                                       f"(source is {self.source!r})")
        if self.source == "none" and self.size is not None:
            raise ConfigError(f"{path}.size", f"does not apply to source {self.source!r}")
        if self.source != "image":
            if self.seed is not None:
                raise ConfigError(f"{path}.seed", f"only applies when {path}.source is image "
                                                  f"(source is {self.source!r})")
            default = PatchPoolConfig()
            for name, value in self.patches.settings().items():
                if value != getattr(default, name):
                    raise ConfigError(f"{path}.patches.{name}", f"only applies when {path}.source is image "
                                                                f"(source is {self.source!r})")
        if self.source != "train_split" and self.fraction != 0.5:
            raise ConfigError(f"{path}.fraction", f"only applies when {path}.source is train_split")


@dataclass(frozen=True)
class PretrainConfig:
    """Self-supervised pre-training of h_0 on the public data (docs/methods/fedaux.md §3.2 P1; see
    platform.runtime.pretrain)."""

    method: str = spec("none", doc="none, or simclr: SimCLR pre-training of every architecture's feature extractor "
                                   "on the public data (docs/methods/fedaux.md §3.2 P1); FedAvg+P / FedDF+P / FedAUX.",
                       choices=PRETRAIN_METHODS)
    epochs: int = spec(50, doc="Pre-training epochs over the public pool; the reference code ran 100 "
                               "(docs/methods/fedaux.md §5). "
                               "50 keeps the embedded default (digits32) at about a minute on 2 busy CPUs.", ge=1)
    batch_size: int = spec(512, doc="B, images per global batch (2B views), drop_last; capped at the pool size and "
                                    "rounded down to a multiple of workers (docs/methods/fedaux.md §3.2 P1: 512).",
                           ge=2)
    lr: float = spec(1e-3, doc="Adam learning rate (docs/methods/fedaux.md §3.2 P1).", gt=0)
    weight_decay: float = spec(1e-6, doc="Adam weight decay (docs/methods/fedaux.md §3.2 P1, [code]).", ge=0)
    temperature: float = spec(0.5, doc="τ of the NT-Xent loss (docs/methods/fedaux.md §3.2 P1, [code]).", gt=0)
    projection_dim: int = spec(128, doc="Output of the projection head Linear(H→H, no bias) → BN → ReLU → "
                                        "Linear(H→projection_dim) (docs/methods/fedaux.md §3.2 P1, [code]).", ge=1)
    workers: int = spec(2, doc="Ray Train workers (data-parallel, DDP when > 1); part of the cache key.", ge=1)
    use_gpu: Union[bool, str] = spec("auto", doc="auto: a GPU per worker when the cluster has one for every "
                                                 "worker; true: require it; false: CPUs only.")
    cpus_per_worker: Optional[float] = spec(None, doc="CPUs each Ray Train worker reserves (fractions allowed); "
                                                      "null = the cluster's CPUs / workers, at most 1.", gt=0)

    def validate(self, path: str) -> None:
        path = path or "pretrain"
        if self.use_gpu not in (True, False, "auto"):
            raise ConfigError(f"{path}.use_gpu", f"must be auto, true or false, got {self.use_gpu!r}")
