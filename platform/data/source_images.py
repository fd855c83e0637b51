"""The single-image method's bundled source images (docs/methods/single_image.md §2.3), as float32 3×H×W in [0, 1].

- ``china``, ``flower``: scikit-learn's sample photos. The paper's street and pathology photos are not available
  offline (not bundled, no download), so these stand in (deviation: different content, 427×640 ≈ 0.27 M pixels
  instead of the paper's 0.5 M or 4.9 M pixel budgets).
- ``noise``: i.i.d. uniform RGB noise (the method page's replacement for the authors' empty noise file, §2.3 [R]).
- ``strokes``: generated pen strokes, bright on a dark background, for handwriting-like private data (the
  embedded digits). The paper's finding is that the image must suit the private data: its street photo's crops
  resemble CIFAR-10's objects, and a mismatched image (its noise row, Table 7) loses 36 points. A temple photo's
  crops are far from upscaled 8×8 handwriting, so for the digits the image is generated to have what digits
  have and photos lack: a blank background and a few thick smooth strokes, curves and loops per crop, at the
  stroke width digits have after the crop pipeline's rescaling (about a sixth of a 32-pixel crop at the
  pool's median scale). It draws no digit and reads no private data: it was fixed before any run, from these
  statistics alone, and then compared with the photo on validation accuracy (docs/benchmarks/reproduction.md, row 7).
"""
from __future__ import annotations

import numpy as np

from platform.config.public_data import SOURCE_IMAGES
from platform.errors import ConfigError

NOISE_IMAGE_SEED = 20_240_612
NOISE_IMAGE_SHAPE = (1920, 2560)  # H×W of the paper's street image (docs/methods/single_image.md §2.3)
STROKES_IMAGE_SEED = 20_261_128
STROKES_IMAGE_SHAPE = (768, 1024)  # 0.79 M pixels: room for the paper's 50k-crop pool (one crop per pixel at most)
_STROKE_CELL = 192  # one shape (1-3 strokes) per cell of this side, about what a median crop shows
_STROKE_WIDTH = (14, 30)  # pixels in the source; 3-6 pixels of a 32-pixel crop at the median crop scale


def load_source_image(name: str, field: str = "public.image") -> np.ndarray:
    """A bundled source image (one of :data:`SOURCE_IMAGES`) as float32 3×H×W in [0, 1]."""
    key = name[:-4] if name.endswith(".jpg") else name
    if key not in SOURCE_IMAGES:
        raise ConfigError(field, f"unknown source image {name!r}; allowed: {', '.join(SOURCE_IMAGES)}")
    if key == "noise":
        rng = np.random.default_rng(NOISE_IMAGE_SEED)
        return rng.random((3, *NOISE_IMAGE_SHAPE), dtype=np.float32)
    if key == "strokes":
        return strokes_image()
    from sklearn.datasets import load_sample_image

    image = load_sample_image(f"{key}.jpg")  # H×W×3 uint8
    return np.ascontiguousarray(image.transpose(2, 0, 1).astype(np.float32) / np.float32(255.0))


def _bezier(points: np.ndarray, steps: int = 160) -> list[tuple[float, float]]:
    """Points along the cubic Bézier curve with control points ``points`` (4×2)."""
    t = np.linspace(0.0, 1.0, steps)[:, None]
    p0, p1, p2, p3 = points
    curve = (1 - t) ** 3 * p0 + 3 * (1 - t) ** 2 * t * p1 + 3 * (1 - t) * t ** 2 * p2 + t ** 3 * p3
    return [(float(x), float(y)) for x, y in curve]


def strokes_image(seed: int = STROKES_IMAGE_SEED, shape: tuple[int, int] = STROKES_IMAGE_SHAPE) -> np.ndarray:
    """Grey pen strokes on black, float32 3×H×W in [0, 1], a pure function of ``seed`` and ``shape``.

    One shape per cell of a jittered grid: one to three cubic Bézier strokes or an ellipse (a loop), each of
    width ``U(_STROKE_WIDTH)`` and brightness ``U(0.7, 1)``, then a Gaussian blur of 2 pixels (soft edges, as
    upscaled digits have)."""
    from PIL import Image, ImageDraw, ImageFilter

    height, width = shape
    rng = np.random.default_rng(seed)
    canvas = Image.new("L", (width, height), 0)
    draw = ImageDraw.Draw(canvas)
    for top in range(0, height, _STROKE_CELL):
        for left in range(0, width, _STROKE_CELL):
            centre = np.array([left, top]) + _STROKE_CELL * rng.uniform(0.3, 0.7, size=2)
            reach = _STROKE_CELL * rng.uniform(0.25, 0.45)
            for _ in range(int(rng.integers(1, 4))):
                stroke = int(rng.integers(*_STROKE_WIDTH))
                ink = int(255 * rng.uniform(0.7, 1.0))
                if rng.random() < 0.3:  # a loop
                    rx, ry = reach * rng.uniform(0.4, 0.9, size=2)
                    cx, cy = centre + rng.uniform(-0.3, 0.3, size=2) * reach
                    draw.ellipse([cx - rx, cy - ry, cx + rx, cy + ry], outline=ink, width=stroke)
                else:
                    control = centre + rng.uniform(-1.0, 1.0, size=(4, 2)) * reach
                    radius = stroke / 2  # a round pen: discs along the curve (PIL's wide lines have ragged joints)
                    for x, y in _bezier(control):
                        draw.ellipse([x - radius, y - radius, x + radius, y + radius], fill=ink)
    grey = np.asarray(canvas.filter(ImageFilter.GaussianBlur(2)), dtype=np.float32) / np.float32(255.0)
    return np.ascontiguousarray(np.broadcast_to(grey, (3, height, width)))
