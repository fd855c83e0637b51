"""``public.source: image``: the single-image method's public data, a seeded pool of crops of one photo.

(docs/methods/single_image.md §2; §8 A1, A17, A21.) Every method sees the *pool*, never the photo: ``public_x`` is
float32 ``[N_pool, C, S, S]``, one row per crop, put in the object store once per sweep like any other public data.

Steps (each a small function below):

1. **The photo** (``public.image``): a name from :data:`platform.data.datasets.SOURCE_IMAGES` (``china``,
   ``flower``, ``noise``), or a path to an image file (absolute, or relative to the current directory of the
   process that loads the config, ``~`` expanded; stored as an absolute path). Files are decoded with PIL and
   converted to RGB (:func:`load_public_image`, float32 3×H×W in [0, 1] like
   :func:`platform.data.datasets.load_source_image`). A missing or undecodable file is a :class:`ConfigError` on
   ``public.image`` when the config loads (:func:`check_image_source`); like a data root, the file must be
   visible wherever a config is loaded (every node of a cluster). ``platform.sweep.command`` hands trials the absolute
   path, since Tune runs them in their own directories. With ``stand_in`` (``dataset.stand_in``) a path is not
   read: a generated photo of the paper's size (:data:`platform.data.datasets.NOISE_IMAGE_SHAPE`, 1920×2560;
   :func:`platform.data.stand_in.stand_in_photo`) replaces it, whether the file exists or not, so a stand-in run is
   the same on every machine; a bundled name is used as it is.
2. **The crops**: :func:`algorithms.common.patch_pool.make_patch_pool` (the official pipeline of §2.2, uint8
   ``[N_pool, 3, S, S]``) with ``N_pool = public.size`` (default 50,000, the paper's main pool, §2.4), the
   crop side ``S`` = the private images' side (they must be square), the transform settings of
   ``public.patches`` (:class:`PatchPoolConfig`, the official defaults) and the seed ``public.seed`` (null: the
   seed of the shared data, the base config's partition stream).
3. **The stage cache**: the uint8 pool is stored under stage ``patch_pool``, keyed by the image's identity (its
   name, or its absolute path and the SHA-256 of the file's bytes), ``N_pool``, ``S``, the transform settings, the
   seed and the code version of ``algorithms.common.patch_pool`` and this module, so every trial and every
   ``platform.run`` after the first reads it from disk (50,000 crops of 32×32 take 150 MB and about a minute to
   make). One line is printed when a pool is generated.
4. **Float inputs** (:func:`pool_inputs`): ``x/255`` normalised with the *private* dataset's normalisation (§2.2
   "Storage and loading", as ``source: dataset`` does), converted to one channel (ITU-R 601 luma) when the
   private images have one channel (§2.2: grayscale for OrganAMNIST / PneumoniaMNIST).

**The pool is shared data**: like the other public splits it is made once per sweep, the same for every replicate
seed. The paper seeded it with each run's seed (42 or 84, §2.2 [C]); this is a deliberate deviation, so that
replicates differ only in their training randomness and the pool is generated once.

**A pool larger than the image allows** is refused when the config loads, with one :class:`ConfigError`:
``N_pool`` above the number of pixels ``H·W`` of the photo (``public.size``: at most one crop per source pixel;
the paper's 0.5 M-pixel image gave 50,000 crops), or a crop side above the initial square crop
``floor(init_crop · min(H, W))`` (``public.patches.init_crop``: crops would be upsampled from less than their own
size).

The first :data:`SAMPLE_COUNT` crops (uint8) travel with the shared data so the drivers can log them as a grid
(:func:`patch_grid_png`, artifact ``public/patches.png``) without the cache.
"""
from __future__ import annotations

import functools
import hashlib
import math
import os
import sys
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Callable, Optional

import numpy as np

from platform.config.public_data import (SOURCE_IMAGES, PatchPoolConfig, PublicDataConfig, image_reference,
                                         is_image_name, pool_size)
from platform.data.datasets import DATASETS, NOISE_IMAGE_SHAPE, Normalization, load_source_image
from platform.data.stand_in import stand_in_photo
from platform.errors import ConfigError
from platform.stages.cache import Stage, code_version

if TYPE_CHECKING:  # pragma: no cover
    import torch

    from platform.stages.cache import StageCache

SAMPLE_COUNT = 64  # crops kept for the logged grid (8×8)
STAGE_NAME = "patch_pool"
_CHUNK = 4096  # crops converted to float at a time

# The side of each dataset's images as loaded (before ``dataset.image_size``), for the config-time fit check; a
# dataset missing here is checked when its images are loaded (:func:`plan_patch_pool`).
_NATIVE_SIDES = {"digits": 8, "digits32": 32, "mnist": 28, "fashion_mnist": 28, "emnist": 28, "cifar10": 32,
                 "cifar100": 32, "stl10": 96, "svhn": 32}


# --- the photo ---------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class SourceImage:
    """The photo the pool is cut from: its name or absolute path, its size, and (files) its content hash; or, with
    ``stand_in``, the generated photo that replaces the file at ``ref``."""

    ref: str
    height: int
    width: int
    sha256: Optional[str] = None  # SHA-256 of the file's bytes; None for a bundled image or a stand-in
    stand_in: bool = False  # a generated photo (platform.data.stand_in) in place of the file ``ref``

    @property
    def pixels(self) -> int:
        return self.height * self.width

    @property
    def label(self) -> str:
        if self.stand_in:
            return f"a stand-in photo for {os.path.basename(self.ref)}"
        return self.ref if self.sha256 is None else os.path.basename(self.ref)

    def identity(self) -> dict:
        """The cache-key fields that identify the image (a stand-in: only its size; it never depends on the file)."""
        if self.stand_in:
            return {"image": "stand_in", "image_height": self.height, "image_width": self.width}
        return {"image": self.ref} if self.sha256 is None else {"image": self.ref, "image_sha256": self.sha256}

    def pixels_array(self) -> np.ndarray:
        """The photo as float32 3×H×W in [0, 1]."""
        return stand_in_photo((self.height, self.width)) if self.stand_in else load_public_image(self.ref)


@functools.lru_cache(maxsize=None)
def _named_image_size(name: str) -> tuple[int, int]:
    if name == "noise":
        return NOISE_IMAGE_SHAPE
    _, height, width = load_source_image(name).shape
    return height, width


def _decode_rgb(data: bytes):
    import io

    from PIL import Image

    with Image.open(io.BytesIO(data)) as im:
        im.load()
        return im.convert("RGB")


@functools.lru_cache(maxsize=16)
def _inspect_file(path: str, mtime_ns: int, size: int) -> tuple[int, int, str]:
    """(height, width, sha256) of an image file, fully decoded once per (path, mtime, size)."""
    with open(path, "rb") as fh:
        data = fh.read()
    rgb = _decode_rgb(data)
    return rgb.height, rgb.width, hashlib.sha256(data).hexdigest()


def _image_names() -> str:
    return ", ".join(SOURCE_IMAGES)


def resolve_source_image(value: str, field: str = "public.image", stand_in: bool = False) -> SourceImage:
    """The photo ``public.image`` names, checked: a bundled name, or a readable image file (decoded once); with
    ``stand_in``, a path (existing or not) stands for a generated photo of the paper's size."""
    if is_image_name(value):
        return SourceImage(value, *_named_image_size(value))
    path = image_reference(value)
    if stand_in:
        return SourceImage(path, *NOISE_IMAGE_SHAPE, stand_in=True)
    if not os.path.exists(path):
        raise ConfigError(field, f"no image file {path!r}; give one of {_image_names()} or the path of an image "
                                 f"file")
    if not os.path.isfile(path):
        raise ConfigError(field, f"{path!r} is not a file; give one of {_image_names()} or the path of an image "
                                 f"file")
    stat = os.stat(path)
    try:
        height, width, sha = _inspect_file(path, stat.st_mtime_ns, stat.st_size)
    except Exception as err:  # noqa: BLE001 - PIL raises many types (OSError, SyntaxError, DecompressionBombError)
        raise ConfigError(field, f"cannot read {path!r} as an image ({type(err).__name__}: "
                                 f"{str(err).splitlines()[0] if str(err) else 'no detail'})") from None
    return SourceImage(path, height, width, sha)


def load_public_image(value: str, field: str = "public.image") -> np.ndarray:
    """The photo as float32 3×H×W in [0, 1]: a bundled name (:func:`load_source_image`) or an image file (PIL,
    converted to RGB)."""
    if is_image_name(value):
        return load_source_image(value, field=field)
    path = resolve_source_image(value, field).ref
    with open(path, "rb") as fh:
        rgb = _decode_rgb(fh.read())
    array = np.asarray(rgb, dtype=np.uint8)  # H×W×3
    return np.ascontiguousarray(array.transpose(2, 0, 1).astype(np.float32) / np.float32(255.0))


# --- the plan: what determines the pool --------------------------------------------------------------------------

def check_pool_fits(image: SourceImage, size: int, side: Optional[int], patches: PatchPoolConfig,
                    path: str = "public") -> None:
    """Refuse a pool larger than the image allows (module doc): one :class:`ConfigError` with the numbers."""
    if size > image.pixels:
        raise ConfigError(f"{path}.size", f"a pool of {size} crops is larger than the source image allows: at most "
                                          f"one crop per pixel, {image.height}×{image.width} = {image.pixels} "
                                          f"pixels in {image.label}")
    initial = math.floor(patches.init_crop * min(image.height, image.width))
    if side is not None and side > initial:
        raise ConfigError(f"{path}.patches.init_crop",
                          f"the {side}×{side} crops (the private images' side) do not fit the initial square crop "
                          f"floor({patches.init_crop:g} · min({image.height}, {image.width})) = {initial} pixels of "
                          f"{image.label}; raise init_crop or use a larger image")


def private_side(dataset_cfg) -> Optional[int]:
    """The private images' side as configured (``dataset.image_size`` or the dataset's own), None if unknown."""
    size = getattr(dataset_cfg, "image_size", None)
    return size if size is not None else _NATIVE_SIDES.get(dataset_cfg.name)


def check_image_source(cfg: "PublicDataConfig", dataset_cfg, path: str = "public") -> None:
    """Config-time checks of ``source: image``: image data, a readable photo, a pool that fits it."""
    if DATASETS[dataset_cfg.name].channels is None:
        raise ConfigError(f"{path}.source", f"image crops need image training data; {dataset_cfg.name} is vector "
                                            f"data (use train_split)")
    image = resolve_source_image(cfg.image, f"{path}.image", stand_in=getattr(dataset_cfg, "stand_in", False))
    check_pool_fits(image, pool_size(cfg), private_side(dataset_cfg), cfg.patches, path)


@dataclass(frozen=True)
class PatchPoolPlan:
    """Everything the uint8 pool depends on (and so its cache key)."""

    image: SourceImage
    size: int  # N_pool
    side: int  # crop side S = the private images' side
    seed: int
    patches: PatchPoolConfig

    def describe(self) -> str:
        return f"{self.size} crops of {self.side}×{self.side} from {self.image.label} (seed {self.seed})"

    def stage_fields(self) -> dict:
        return {**self.image.identity(), "size": self.size, "side": self.side, "seed": self.seed,
                **{f"patches.{k}": v for k, v in self.patches.settings().items()}}

    def stage(self) -> "Stage":
        import algorithms.common.patch_pool

        makers = [algorithms.common.patch_pool, sys.modules[__name__]]
        if self.image.stand_in:
            makers.append(stand_in_photo)  # the module that generates the photo
        return Stage(STAGE_NAME, code_version(*makers), tuple(sorted(self.stage_fields())))


def plan_patch_pool(cfg: "PublicDataConfig", input_shape: tuple, seed: int, path: str = "public",
                    stand_in: bool = False) -> PatchPoolPlan:
    """The pool for private images of ``input_shape`` (C, H, W; square), checked against the photo (``stand_in``: a
    photo given as a path is generated, :func:`resolve_source_image`)."""
    if len(input_shape) != 3:
        raise ConfigError(f"{path}.source", f"image crops need image training data (C, H, W); the training inputs "
                                            f"have shape {tuple(input_shape)} (use train_split)")
    channels, height, width = input_shape
    if height != width:
        raise ConfigError(f"{path}.source", f"crops are square but the private images are {height}×{width}; set "
                                            f"dataset.image_size")
    if channels not in (1, 3):
        raise ConfigError(f"{path}.source", f"crops are RGB or grey; the private images have {channels} channels")
    image = resolve_source_image(cfg.image, f"{path}.image", stand_in=stand_in)
    size = pool_size(cfg)
    check_pool_fits(image, size, int(height), cfg.patches, path)
    return PatchPoolPlan(image, size, int(height), int(cfg.seed if cfg.seed is not None else seed), cfg.patches)


# --- the pool ----------------------------------------------------------------------------------------------------

def generate_pool(plan: PatchPoolPlan) -> "torch.Tensor":
    """The uint8 pool [N_pool, 3, S, S] (no cache)."""
    from algorithms.common.patch_pool import make_patch_pool

    return make_patch_pool(plan.image.pixels_array(), plan.size, plan.side, plan.seed, **plan.patches.settings())


def patch_pool(plan: PatchPoolPlan, cache: Optional["StageCache"] = None,
               log: Callable[[str], None] = print) -> "torch.Tensor":
    """The uint8 pool through the stage cache (``cache`` None: generated here, not stored)."""
    def compute():
        log(f"patch pool: generating {plan.describe()}…")
        return generate_pool(plan)

    if cache is None:
        return compute()
    pool, _ = cache.get_or_compute(plan.stage(), plan.stage_fields(), compute)
    return pool


def pool_inputs(pool: "torch.Tensor", channels: int, norm: Normalization) -> np.ndarray:
    """float32 [N, channels, S, S]: ``x/255``, luma when ``channels`` is 1, normalised with ``norm``; in chunks."""
    from algorithms.common.patch_pool import pool_to_float

    n, _, side, _ = pool.shape
    mean, std = (norm.mean, norm.std) if norm.mean else ((0.0,), (1.0,))
    out = np.empty((n, channels, side, side), dtype=np.float32)
    for i in range(0, n, _CHUNK):
        out[i:i + _CHUNK] = pool_to_float(pool[i:i + _CHUNK], mean, std, grayscale=channels == 1).numpy()
    return out


def pool_samples(pool: "torch.Tensor", count: int = SAMPLE_COUNT) -> np.ndarray:
    """The first ``count`` crops as uint8 [count, 3, S, S] (a copy, independent of the pool)."""
    return pool[:count].numpy().copy()


def patch_grid_png(samples: np.ndarray, path: str, columns: int = 8, min_tile: int = 64) -> str:
    """Write uint8 crops [n, 3, S, S] as a PNG grid (``columns`` wide, 2-pixel white gutters, each crop enlarged
    with nearest-neighbour to at least ``min_tile`` pixels) at ``path``; return the path."""
    from PIL import Image

    samples = np.asarray(samples, dtype=np.uint8)
    n, _, side, _ = samples.shape
    zoom = max(1, math.ceil(min_tile / side))
    tile, gap = side * zoom, 2
    rows = max(1, math.ceil(n / columns))
    grid = np.full((rows * (tile + gap) + gap, columns * (tile + gap) + gap, 3), 255, dtype=np.uint8)
    for k in range(n):
        r, c = divmod(k, columns)
        crop = samples[k].transpose(1, 2, 0).repeat(zoom, axis=0).repeat(zoom, axis=1)
        top, left = gap + r * (tile + gap), gap + c * (tile + gap)
        grid[top:top + tile, left:left + tile] = crop
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    Image.fromarray(grid).save(path, format="PNG")
    return path


__all__ = ["PatchPoolPlan", "SAMPLE_COUNT", "SourceImage", "check_image_source", "check_pool_fits", "generate_pool",
           "load_public_image", "patch_grid_png", "patch_pool", "plan_patch_pool", "pool_inputs", "pool_samples",
           "private_side", "resolve_source_image"]
