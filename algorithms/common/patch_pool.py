"""The single-image method's distillation pool: many small augmented crops of one photo (docs/methods/single_image.md
§2).

:func:`make_patch_pool` expands one source image into ``size`` crops of ``out_size``×``out_size`` pixels,
deterministically from ``seed``, with the official pipeline of §2.2 (in this order, all on the uint8 image):

1. **Initial random crop**: a square of side ``floor(init_crop · min(H, W))`` (default 0.5) at a uniform position
   (avoids over-sampling the image centre).
2. **Random-resized crop, no fallback**: area fraction ``U(scale)`` of the initial crop (default ``(1/500, 1)``),
   aspect ratio log-uniform in ``ratio`` (default ``(3/4, 4/3)``); a box that does not fit is redrawn until one
   does (no centre-crop fallback); resized with bicubic interpolation (antialiased) to
   ``int(√2 · out_size)`` (45 for 32) — the √2 margin leaves room for the rotation.
3. **Affine**: rotation ``U(±rot_deg)`` (default 30) and x-shear ``U(±shear_deg)`` (default 30) about the
   centre, no translation, no scale, bilinear, fill 0.
4. **Flips**: none by default (``hflip=False``, ``vflip=False``: the official code adds neither, §2.2 item 4
   and §8 A1); when enabled each is applied with probability 0.5.
5. **Centre crop** to ``out_size``.
6. **Colour jitter** with probability ``jitter_p`` (default 0.5): brightness/contrast/saturation factors
   ``U(1 ± 0.4)`` and hue shift ``U(±0.1)``, the four applied in a random order (as ``ColorJitter`` does).
   No blur, no normalisation at generation time.
7. Optional JPEG round trip with PIL (``jpeg_quality``, default ``None`` = off; the authors stored crops as JPEG, which
   is lossy, §8 A21).

Determinism (how randomness is drawn). One ``torch.Generator`` (CPU) is seeded once with ``seed``; crops are made
in index order 0, 1, …, size−1, and every random number of crop ``k`` is drawn from that generator before any of
crop ``k+1``, in this fixed order: initial-crop top, left (``torch.randint``); per RRC attempt two float64
uniforms (area, log-ratio) and, once a box fits, its top, left (``torch.randint``); two float64 uniforms (angle,
shear); one uniform per enabled flip; one uniform for "jitter or not" and, if jittering, ``torch.randperm(4)``
(op order) and four float64 uniforms (the factors). Nothing else consumes randomness: no global RNG, no Python
``random``, no worker threads. Consequences:

* the pool is a pure function of (image, size, out_size, seed, settings), bit-identical across calls and
  processes (the pixel ops are deterministic CPU kernels);
* the pool is **prefix-stable**: the first ``m`` crops of a pool of size ``n ≥ m`` equal the pool of size
  ``m`` (crop ``k`` depends only on the draws of crops ``0..k``), so a larger pool never reshuffles a smaller one;
* crop count is exactly ``size`` (the official code made ``T·floor(N/T)`` crops over ``T`` threads, §2.2 [C];
  with per-thread seeds ``seed·t`` — not replicated).

The geometric steps are per crop (every crop has its own box, angle and shear); they run in a plain loop over
uint8 tensors with ``torchvision.transforms.v2.functional`` and write into one preallocated output tensor, so
memory is ``size·3·out_size²`` bytes (150 MB for 50k crops of 32×32). :func:`pool_to_float` normalises a pool
(or a batch of it) with the **target private dataset's** mean/std (§2.2 "Storage and loading").

Bad settings raise :class:`algorithms.errors.ConfigError` naming the config field (``public.size``,
``public.patch_size`` (the crop side; the platform takes it from the private images), ``public.image``, and
``public.patches.<setting>`` for the transform settings, which :func:`validate_settings` checks alone). The method
page sets no upper limit on the pool size (§2.1: the number of crops is free), so only ``size < 1`` is rejected here
(the platform refuses pools larger than the image's pixel count, :mod:`platform.data.patch_pool_source`). Pure
PyTorch + torchvision + numpy.
"""
from __future__ import annotations

import math
from typing import Sequence

import numpy as np
import torch

from algorithms.errors import ConfigError

__all__ = ["make_patch_pool", "pool_to_float", "image_to_uint8_chw", "validate_settings", "DEFAULT_SETTINGS"]

#: The official generator's settings (docs/methods/single_image.md §2.2 [C], §8 A1); keyword arguments of
#: :func:`make_patch_pool`.
DEFAULT_SETTINGS = {
    "init_crop": 0.5,
    "scale": (1.0 / 500.0, 1.0),
    "ratio": (3.0 / 4.0, 4.0 / 3.0),
    "rot_deg": 30.0,
    "shear_deg": 30.0,
    "hflip": False,
    "vflip": False,
    "jitter_p": 0.5,
    "jitter": (0.4, 0.4, 0.4, 0.1),
    "jpeg_quality": None,
}

_MAX_RRC_ATTEMPTS = 10_000  # P(box fits) ≥ ~0.5 with the default ranges; this bound is never reached in practice


def image_to_uint8_chw(image, field: str = "public.image") -> torch.Tensor:
    """The source image as a contiguous uint8 tensor [3, H, W].

    Accepts a numpy array or tensor, [3, H, W] / [1, H, W] (channels first), [H, W, 3] / [H, W, 1] (channels
    last) or [H, W] (grey, repeated to 3 channels); uint8, or float in [0, 1] (rounded to uint8, e.g.
    :func:`platform.data.datasets.load_source_image`'s float32 3×H×W). When both the first and the last dimension
    could be channels, channels first wins.
    """
    if isinstance(image, np.ndarray):
        t = torch.from_numpy(np.ascontiguousarray(image))
    elif isinstance(image, torch.Tensor):
        t = image.detach().cpu()
    else:
        raise ConfigError(field, f"the source image must be a numpy array or tensor, got {type(image).__name__}")
    if t.ndim == 2:
        t = t.unsqueeze(0)
    elif t.ndim == 3:
        if t.shape[0] in (1, 3):
            pass
        elif t.shape[-1] in (1, 3):
            t = t.permute(2, 0, 1)
        else:
            raise ConfigError(field, f"the source image must have 1 or 3 channels, got shape {tuple(t.shape)}")
    else:
        raise ConfigError(field, f"the source image must be [3,H,W], [H,W,3] or [H,W], got shape {tuple(t.shape)}")
    if t.shape[0] == 1:
        t = t.expand(3, -1, -1)
    if t.dtype == torch.uint8:
        pass
    elif t.is_floating_point():
        if t.numel() and (float(t.min()) < 0.0 or float(t.max()) > 1.0):
            raise ConfigError(field, "a float source image must hold values in [0, 1]")
        t = (t.double() * 255.0).round().to(torch.uint8)
    else:
        raise ConfigError(field, f"the source image must be uint8 or float in [0, 1], got {t.dtype}")
    if t.shape[1] < 1 or t.shape[2] < 1:
        raise ConfigError(field, f"the source image is empty (shape {tuple(t.shape)})")
    return t.contiguous()


def _pair(value, field: str, low_ok) -> tuple[float, float]:
    try:
        lo, hi = (float(v) for v in value)
    except (TypeError, ValueError):
        raise ConfigError(field, f"must be a pair (low, high), got {value!r}") from None
    if not (math.isfinite(lo) and math.isfinite(hi) and low_ok(lo) and lo <= hi):
        raise ConfigError(field, f"invalid range ({lo}, {hi})")
    return lo, hi


def validate_settings(settings: dict, field: str = "public.patches") -> dict:
    """The transform settings (:data:`DEFAULT_SETTINGS` updated by ``settings``) checked and normalised, without
    looking at an image; errors name ``<field>.<setting>`` (the config section ``public.patches``)."""
    unknown = set(settings) - set(DEFAULT_SETTINGS)
    if unknown:
        raise ConfigError(field, f"unknown transform setting(s) {sorted(unknown)}; allowed: "
                                 f"{sorted(DEFAULT_SETTINGS)}")
    v = dict(DEFAULT_SETTINGS, **settings)
    init_crop = float(v["init_crop"])
    if not 0.0 < init_crop <= 1.0:
        raise ConfigError(f"{field}.init_crop", f"must be in (0, 1], got {v['init_crop']!r}")
    v["init_crop"] = init_crop
    v["scale"] = _pair(v["scale"], f"{field}.scale", lambda lo: lo > 0.0)
    if v["scale"][1] > 1.0:
        raise ConfigError(f"{field}.scale", f"area fractions must lie in (0, 1], got {v['scale']}")
    v["ratio"] = _pair(v["ratio"], f"{field}.ratio", lambda lo: lo > 0.0)
    for key in ("rot_deg", "shear_deg"):
        val = float(v[key])
        if not (math.isfinite(val) and 0.0 <= val <= 180.0):
            raise ConfigError(f"{field}.{key}", f"must be in [0, 180] degrees, got {v[key]!r}")
        v[key] = val
    jp = float(v["jitter_p"])
    if not 0.0 <= jp <= 1.0:
        raise ConfigError(f"{field}.jitter_p", f"must be a probability in [0, 1], got {v['jitter_p']!r}")
    v["jitter_p"] = jp
    try:
        b, c, sat, hue = (float(x) for x in v["jitter"])
    except (TypeError, ValueError):
        raise ConfigError(f"{field}.jitter", f"must be (brightness, contrast, saturation, hue), got "
                                             f"{v['jitter']!r}") from None
    if min(b, c, sat) < 0.0 or max(b, c, sat) > 1.0 or not 0.0 <= hue <= 0.5:
        raise ConfigError(f"{field}.jitter", "brightness/contrast/saturation must be in [0, 1] and hue in [0, 0.5]")
    v["jitter"] = (b, c, sat, hue)
    q = v["jpeg_quality"]
    if q is not None and (isinstance(q, bool) or not isinstance(q, (int, np.integer)) or not 1 <= q <= 100):
        raise ConfigError(f"{field}.jpeg_quality", f"must be null (off) or an integer in [1, 100], got {q!r}")
    v["hflip"], v["vflip"] = bool(v["hflip"]), bool(v["vflip"])
    return v


def _validate(size, out_size, height, width, s) -> dict:
    if isinstance(size, bool) or not isinstance(size, (int, np.integer)) or size < 1:
        raise ConfigError("public.size", f"the pool size must be an integer ≥ 1 (number of crops), got {size!r}")
    if isinstance(out_size, bool) or not isinstance(out_size, (int, np.integer)) or out_size < 1:
        raise ConfigError("public.patch_size", f"the patch side must be an integer ≥ 1, got {out_size!r}")
    if out_size > min(height, width):
        raise ConfigError("public.patch_size", f"a {out_size}×{out_size} patch is larger than the "
                                               f"{height}×{width} source image")
    v = validate_settings(s)
    if math.floor(v["init_crop"] * min(height, width)) < 1:
        raise ConfigError("public.patches.init_crop", f"{v['init_crop']} of a {height}×{width} image is less than "
                                                      f"one pixel")
    return v


def _uniform(g: torch.Generator, n: int) -> list[float]:
    return torch.rand(n, generator=g, dtype=torch.float64).tolist()


def _randint(g: torch.Generator, high: int) -> int:
    """Uniform integer in [0, high)."""
    return int(torch.randint(high, (1,), generator=g).item())


def _jpeg_roundtrip(patch: torch.Tensor, quality: int) -> torch.Tensor:
    """Encode/decode one uint8 [3, S, S] crop as JPEG with PIL (as the authors stored crops; deterministic)."""
    import io

    from PIL import Image

    buf = io.BytesIO()
    Image.fromarray(patch.permute(1, 2, 0).contiguous().numpy()).save(buf, format="JPEG", quality=quality)
    buf.seek(0)
    with Image.open(buf) as im:
        arr = np.asarray(im.convert("RGB"), dtype=np.uint8)
    return torch.from_numpy(arr.copy()).permute(2, 0, 1)


def make_patch_pool(image, size: int, out_size: int = 32, seed: int = 0, **settings) -> torch.Tensor:
    """``size`` augmented crops of ``image`` as a uint8 tensor [size, 3, out_size, out_size] (module docstring).

    ``settings`` (defaults in :data:`DEFAULT_SETTINGS`, the official code's, docs/methods/single_image.md §2.2 /
    §8 A1): ``init_crop``, ``scale``, ``ratio``, ``rot_deg``, ``shear_deg``, ``hflip``, ``vflip``, ``jitter_p``,
    ``jitter`` (brightness, contrast, saturation, hue) and ``jpeg_quality``. Deterministic from ``seed`` and
    prefix-stable in ``size``.
    """
    img = image_to_uint8_chw(image)
    _, height, width = img.shape
    v = _validate(size, out_size, height, width, settings)
    size, out_size = int(size), int(out_size)
    side0 = math.floor(v["init_crop"] * min(height, width))
    rrc_side = max(int(math.sqrt(2.0) * out_size), out_size)  # 45 for 32
    area0 = float(side0 * side0)
    s_lo, s_hi = v["scale"]
    log_r_lo, log_r_hi = math.log(v["ratio"][0]), math.log(v["ratio"][1])
    b, c, sat, hue = v["jitter"]
    jpeg = v["jpeg_quality"]
    from torchvision.transforms import InterpolationMode  # imported here: torchvision costs 1.5 s at every start
    from torchvision.transforms.v2 import functional as TF

    g = torch.Generator(device="cpu")
    g.manual_seed(int(seed))
    out = torch.empty((size, 3, out_size, out_size), dtype=torch.uint8)
    for k in range(size):
        # 1. initial square crop
        top0, left0 = _randint(g, height - side0 + 1), _randint(g, width - side0 + 1)
        # 2. random-resized crop without fallback (redraw until the box fits)
        for _ in range(_MAX_RRC_ATTEMPTS):
            u_area, u_ratio = _uniform(g, 2)
            area = area0 * (s_lo + (s_hi - s_lo) * u_area)
            aspect = math.exp(log_r_lo + (log_r_hi - log_r_lo) * u_ratio)
            w = int(round(math.sqrt(area * aspect)))
            h = int(round(math.sqrt(area / aspect)))
            if 0 < w <= side0 and 0 < h <= side0:
                break
        else:  # pragma: no cover - needs pathological ranges
            raise ConfigError("public.patches.scale",
                              f"no random-resized-crop box fits after {_MAX_RRC_ATTEMPTS} draws")
        i, j = _randint(g, side0 - h + 1), _randint(g, side0 - w + 1)
        patch = TF.resized_crop(img, top0 + i, left0 + j, h, w, [rrc_side, rrc_side],
                                interpolation=InterpolationMode.BICUBIC, antialias=True)
        # 3. rotation + x-shear about the centre, no translation/scale, bilinear, fill 0
        u_angle, u_shear = _uniform(g, 2)
        angle = v["rot_deg"] * (2.0 * u_angle - 1.0)
        shear = v["shear_deg"] * (2.0 * u_shear - 1.0)
        patch = TF.affine(patch, angle=angle, translate=[0, 0], scale=1.0, shear=[shear, 0.0],
                          interpolation=InterpolationMode.BILINEAR, fill=0)
        # 4. flips (off in the official pipeline)
        if v["hflip"] and _uniform(g, 1)[0] < 0.5:
            patch = TF.horizontal_flip(patch)
        if v["vflip"] and _uniform(g, 1)[0] < 0.5:
            patch = TF.vertical_flip(patch)
        # 5. centre crop to the model's input side
        patch = TF.center_crop(patch, [out_size, out_size])
        # 6. colour jitter with probability jitter_p, the four ops in a random order
        if _uniform(g, 1)[0] < v["jitter_p"]:
            order = torch.randperm(4, generator=g).tolist()
            fb, fc, fs, fh = _uniform(g, 4)
            for op in order:
                if op == 0 and b > 0:
                    patch = TF.adjust_brightness(patch, 1.0 - b + 2.0 * b * fb)
                elif op == 1 and c > 0:
                    patch = TF.adjust_contrast(patch, 1.0 - c + 2.0 * c * fc)
                elif op == 2 and sat > 0:
                    patch = TF.adjust_saturation(patch, 1.0 - sat + 2.0 * sat * fs)
                elif op == 3 and hue > 0:
                    patch = TF.adjust_hue(patch, hue * (2.0 * fh - 1.0))
        # 7. optional lossy storage round trip
        if jpeg is not None:
            patch = _jpeg_roundtrip(patch, int(jpeg))
        out[k] = patch
    return out


def pool_to_float(pool: torch.Tensor, mean: Sequence[float], std: Sequence[float], *,
                  grayscale: bool = False, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Normalise a uint8 pool [N, 3, S, S] (or one crop [3, S, S]): ``(x/255 − mean)/std`` per channel.

    ``mean``/``std`` are the target private dataset's statistics (docs/methods/single_image.md §2.2; e.g. CIFAR-10
    (0.4914, 0.4822, 0.4465) / (0.2023, 0.1994, 0.2010)); one value broadcasts over channels. ``grayscale=True``
    first converts to one channel (ITU-R 601 luma, as for OrganAMNIST / PneumoniaMNIST). Works on any device the
    pool is on.
    """
    if pool.dtype != torch.uint8:
        raise ValueError(f"pool must be uint8, got {pool.dtype}")
    if pool.ndim not in (3, 4) or pool.shape[-3] != 3:
        raise ValueError(f"pool must be [N, 3, S, S] or [3, S, S], got shape {tuple(pool.shape)}")
    x = pool.to(dtype) / 255.0
    if grayscale:
        from torchvision.transforms.v2 import functional as TF

        x = TF.rgb_to_grayscale(x, num_output_channels=1)
    channels = x.shape[-3]
    m = torch.as_tensor(mean, dtype=dtype, device=x.device).reshape(-1)
    s = torch.as_tensor(std, dtype=dtype, device=x.device).reshape(-1)
    if m.numel() not in (1, channels) or s.numel() not in (1, channels):
        raise ValueError(f"mean/std must have 1 or {channels} values, got {m.numel()} and {s.numel()}")
    if bool((s <= 0).any()):
        raise ValueError("std must be positive")
    shape = (-1, 1, 1)
    return (x - m.reshape(shape)) / s.reshape(shape)
