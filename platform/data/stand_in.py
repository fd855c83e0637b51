"""Stand-in data: generated images of a torchvision dataset's real shapes, classes and sizes, for dry runs, tests and
cost estimates where the files are absent (``stand_in: true`` in the experiment config, the ``--stand-in`` flag).

Results on stand-in data are not the paper's: the images are synthetic. What is the paper's is everything a run's
cost and plumbing depend on: the number of samples of every split, the channels, the height and width, the number of
classes (and CIFAR-100's 20 coarse labels), so partitions, public pools, models, batches and rounds are exactly the
ones the real data would give.

:func:`generate_split` returns what the real reader returns (``platform.data.datasets.read_split`` wraps it in its
``RawSplit``): uint8 images N×C×H×W, int64 labels in ``[0, num_classes)`` (None for STL-10 ``unlabeled``), the number
of classes and, for CIFAR-100, the coarse labels. Resizing, normalisation, partitions and public splits downstream
are unchanged.

**The images.** Each class has a prototype: a smooth random field (a low-resolution grid of 7 cells a side at 28
pixels, 8 at 32 and 96, bilinearly upsampled; for CIFAR-100 half of it is its superclass's field), 40 % of it, over
one field shared by every class, 60 %, in [0, 195]. A sample is its class's prototype shifted (cyclically) by up to ±2
steps each way (a step is 2 pixels at 28 and 32 pixels, 6 at STL-10's 96) plus uniform noise in {0, 4, ..., 60} per
pixel. So the classes are learnable but not at a glance: on MNIST at fraction 0.02 a nearest-class-mean rule gets
about 75 % of the test split and a linear model on standardised pixels about 98 % (chance 10 %;
``tests/unit/test_stand_in.py`` checks the first). Labels are balanced within every chunk of :data:`CHUNK` samples
(the real byclass/bymerge splits are not balanced; the stand-in is), except where :data:`TABLE` gives the real
samples per class: MNIST's labels are its real counts (digit 5 the rarest, 5,421 of 60,000) in a fixed order, so a
partition that follows the labels (the FedKP thesis's class-balanced trim) gives the sizes the real files give.
Train, test and the other splits share the prototypes, so a model trained on one split is tested on the same
classes.

**Determinism.** The prototypes depend on the dataset (and EMNIST split) only; the samples of chunk ``k`` of a split
on (dataset, EMNIST split, split, k) only, through fixed seeds independent of every experiment seed. A split generated
with ``stand_in_fraction`` f < 1 is the first ``round(f·N)`` samples of the full one.

**Sizes** (:data:`TABLE`, checked against the datasets' own documentation):

- MNIST, Fashion-MNIST: 60,000 train / 10,000 test, 1×28×28, 10 classes (the TensorFlow Datasets catalog pages
  ``mnist`` and ``fashion_mnist``, which list the same files torchvision reads).
- EMNIST (Cohen et al. 2017, arXiv:1702.05373, Table II; the binary files torchvision reads), 1×28×28: byclass
  697,932 / 116,323 with 62 classes; bymerge 697,932 / 116,323 with 47; balanced 112,800 / 18,800 with 47; letters
  124,800 / 20,800 with 26 (torchvision's letters labels are 1..26, which ``_read_emnist`` maps to 0..25: the
  stand-in draws 0..25 directly); digits 240,000 / 40,000 with 10; mnist 60,000 / 10,000 with 10.
- CIFAR-10, CIFAR-100: 50,000 train / 10,000 test, 3×32×32, 10 and 100 classes; CIFAR-100's fine-to-coarse map is
  the dataset's own (the ``coarse_labels`` of its pickles, as the widely used ``sparse2coarse`` table lists it).
- STL-10 (Coates et al. 2011; TFDS ``stl10``): train 5,000 (500 a class), test 8,000 (800 a class), unlabeled
  100,000, 3×96×96, 10 classes.
- SVHN cropped digits (Netzer et al. 2011; TFDS ``svhn_cropped``): train 73,257, test 26,032, extra 531,131,
  3×32×32, 10 classes.

Generation works in chunks of :data:`CHUNK` samples into one preallocated uint8 array (no float temporaries). On a
busy 2-core machine: MNIST train 0.12 s (0.003 s at fraction 0.02), CIFAR-10 train 0.3-0.5 s (0.01 s), STL-10
unlabeled 4-7 s (0.07 s), of which 1.6 s or more is the first touch of its 2.8 GB; the 1920×2560 photo 0.5 s.

:func:`stand_in_photo` is the stand-in for a single-image source photo read from a file (``public.image`` a path): a
deterministic smooth random RGB field of the given size; ``platform.data.patch_pool_source`` asks for the paper's
1920×2560 (``platform.data.datasets.NOISE_IMAGE_SHAPE``).
"""
from __future__ import annotations

import functools
import zlib
from dataclasses import dataclass
from typing import Optional

import numpy as np

STAND_IN_SEED = 20_250_531  # fixed, independent of experiment seeds
CHUNK = 2048  # samples generated at a time; also the unit of label balance and of determinism
SHIFTS = 2  # a sample's prototype moves by up to ±SHIFTS steps in each direction
PROTOTYPE_MAX = 195  # prototype range [0, 195] plus noise [0, 60] never exceeds 255
_NIBBLES = np.uint64(0x0F0F0F0F0F0F0F0F)  # noise: 4 random bits a pixel, times 4, in {0, 4, ..., 60}


@dataclass(frozen=True)
class StandInSpec:
    """One dataset (EMNIST: one of its splits) as stored: sizes per split, channels, height, width, classes."""

    sizes: dict  # split -> number of samples
    channels: int
    height: int
    width: int
    num_classes: int
    unlabeled: tuple = ()  # splits without labels (STL-10 unlabeled)
    coarse: Optional[tuple] = None  # fine -> coarse label map (CIFAR-100)
    class_counts: Optional[dict] = None  # split -> the real samples per class, where they are unequal (MNIST)


# CIFAR-100's superclass of each fine label 0..99 (the dataset's coarse_labels; 5 fine labels per superclass).
CIFAR100_COARSE = (4, 1, 14, 8, 0, 6, 7, 7, 18, 3, 3, 14, 9, 18, 7, 11, 3, 9, 7, 11, 6, 11, 5, 10, 7, 6, 13, 15, 3, 15,
                   0, 11, 1, 10, 12, 14, 16, 9, 11, 5, 5, 19, 8, 8, 15, 13, 14, 17, 18, 10, 16, 4, 17, 4, 2, 0, 17, 4,
                   18, 17, 10, 3, 2, 12, 12, 16, 12, 1, 9, 19, 2, 10, 0, 1, 16, 12, 9, 13, 15, 13, 16, 19, 2, 4, 6, 19,
                   5, 5, 8, 19, 18, 1, 2, 15, 6, 0, 17, 8, 14, 13)

_MNIST_SIZES = {"train": 60_000, "test": 10_000}
# MNIST's samples per digit 0-9 (the files' own counts; digit 5 is the rarest: 5,421 and 892)
MNIST_CLASS_COUNTS = {"train": (5923, 6742, 5958, 6131, 5842, 5421, 5918, 6265, 5851, 5949),
                      "test": (980, 1135, 1032, 1010, 982, 892, 958, 1028, 974, 1009)}
TABLE: dict[str, StandInSpec] = {
    "mnist": StandInSpec(_MNIST_SIZES, 1, 28, 28, 10, class_counts=MNIST_CLASS_COUNTS),
    "fashion_mnist": StandInSpec(_MNIST_SIZES, 1, 28, 28, 10),
    "cifar10": StandInSpec({"train": 50_000, "test": 10_000}, 3, 32, 32, 10),
    "cifar100": StandInSpec({"train": 50_000, "test": 10_000}, 3, 32, 32, 100, coarse=CIFAR100_COARSE),
    "stl10": StandInSpec({"train": 5_000, "test": 8_000, "unlabeled": 100_000}, 3, 96, 96, 10,
                         unlabeled=("unlabeled",)),
    "svhn": StandInSpec({"train": 73_257, "test": 26_032, "extra": 531_131}, 3, 32, 32, 10),
}
EMNIST_TABLE: dict[str, StandInSpec] = {
    "byclass": StandInSpec({"train": 697_932, "test": 116_323}, 1, 28, 28, 62),
    "bymerge": StandInSpec({"train": 697_932, "test": 116_323}, 1, 28, 28, 47),
    "balanced": StandInSpec({"train": 112_800, "test": 18_800}, 1, 28, 28, 47),
    "letters": StandInSpec({"train": 124_800, "test": 20_800}, 1, 28, 28, 26),
    "digits": StandInSpec({"train": 240_000, "test": 40_000}, 1, 28, 28, 10),
    "mnist": StandInSpec(_MNIST_SIZES, 1, 28, 28, 10),
}


def spec_of(name: str, variant: Optional[str] = None) -> StandInSpec:
    """The table entry of dataset ``name`` (EMNIST: of its split ``variant``)."""
    if name == "emnist":
        return EMNIST_TABLE[variant]
    return TABLE[name]


def split_size(name: str, split: str, variant: Optional[str] = None, fraction: float = 1.0) -> int:
    """Samples a stand-in split holds: ``round(fraction · N)`` of the real split's N, at least 1."""
    return max(1, int(round(spec_of(name, variant).sizes[split] * fraction)))


def _seed(*parts) -> list[int]:
    return [STAND_IN_SEED, *(zlib.crc32(str(p).encode()) if isinstance(p, str) else int(p) for p in parts)]


def _smooth_fields(rng: np.random.Generator, count: int, channels: int, height: int, width: int,
                   cells: int) -> np.ndarray:
    """``count`` random fields in [0, 1], float32 count×channels×height×width: a ``cells``-a-side uniform grid,
    bilinearly upsampled (a matrix product per axis), stretched to the full range."""
    def upsample(n_out: int, n_in: int) -> np.ndarray:
        pos = np.clip((np.arange(n_out) + 0.5) * n_in / n_out - 0.5, 0, n_in - 1)
        low = np.floor(pos).astype(int)
        high = np.minimum(low + 1, n_in - 1)
        weights = np.zeros((n_out, n_in), dtype=np.float32)
        weights[np.arange(n_out), low] += 1 - (pos - low)
        weights[np.arange(n_out), high] += pos - low
        return weights

    grid = rng.random((count, channels, cells, cells), dtype=np.float32)
    fields = upsample(height, cells) @ grid @ upsample(width, cells).T
    lo = fields.min(axis=(2, 3), keepdims=True)
    hi = fields.max(axis=(2, 3), keepdims=True)
    return (fields - lo) / np.maximum(hi - lo, 1e-6)


def _prototypes(name: str, variant: Optional[str], spec: StandInSpec) -> np.ndarray:
    """uint8 [classes · (2·SHIFTS+1)², C·H·W]: every class's prototype at every shift (row ``c·S² + s``)."""
    rng = np.random.default_rng(_seed(name, variant or "", "prototypes"))
    c, h, w, k = spec.channels, spec.height, spec.width, spec.num_classes
    cells = max(4, min(h, 32) // 4)  # 7 at 28 pixels, 8 at 32 and 96: the same structure
    shared = _smooth_fields(rng, 1, c, h, w, cells)
    own = _smooth_fields(rng, k, c, h, w, cells)
    if spec.coarse is not None:  # fine classes of one superclass look alike
        coarse = _smooth_fields(rng, max(spec.coarse) + 1, c, h, w, cells)
        own = 0.5 * own + 0.5 * coarse[np.asarray(spec.coarse)]
    protos = np.rint((0.6 * shared + 0.4 * own) * PROTOTYPE_MAX).astype(np.uint8)
    step = max(1, h // 14)
    offsets = [(dy * step, dx * step) for dy in range(-SHIFTS, SHIFTS + 1) for dx in range(-SHIFTS, SHIFTS + 1)]
    table = np.empty((k, len(offsets), c, h, w), dtype=np.uint8)
    for i, (dy, dx) in enumerate(offsets):
        table[:, i] = np.roll(protos, (dy, dx), axis=(2, 3))
    return table.reshape(k * len(offsets), c * h * w)


def _add_noise(out: np.ndarray, rng: np.random.Generator) -> None:
    """Add uniform noise in {0, 4, ..., 60} to every pixel of ``out`` (uint8 m×D, D even), in place. Each random byte
    of the bit generator's raw output (the fastest bits numpy draws) serves two pixels of one sample, its low nibble
    one in the first half of the sample and its high nibble one in the second, so sample i's noise is the same
    whatever m is."""
    m, dim = out.shape
    half = dim // 2
    raw = rng.bit_generator.random_raw(-(-m * half // 8))
    for part, shift in ((out[:, :half], 0), (out[:, half:], 4)):
        nibbles = (raw >> np.uint64(shift)) & _NIBBLES if shift else raw & _NIBBLES
        nibbles <<= np.uint64(2)  # 0x0F << 2 = 0x3C: no carry into the next byte
        part += nibbles.view(np.uint8)[:m * half].reshape(m, half)


def _chunk_rng(name: str, variant: Optional[str], split: str, start: int) -> np.random.Generator:
    """The generator of the chunk that begins at sample ``start`` of a split."""
    return np.random.default_rng(_seed(name, variant or "", split, start // CHUNK))


def _chunk_labels(rng: np.random.Generator, m: int, spec: StandInSpec, full: Optional[np.ndarray] = None,
                  start: int = 0) -> np.ndarray:
    """A chunk's labels: its generator's first draw, over a full chunk, so a shorter (fraction) split is a prefix of
    the full one; where the real class counts are known (``full``: :func:`_full_labels`), that split's slice
    (the draw is made all the same, so the chunk's later draws do not move)."""
    drawn = rng.permutation(np.arange(CHUNK) % spec.num_classes)[:m]
    return drawn if full is None else full[start:start + m]


@functools.lru_cache(maxsize=8)
def _full_labels(name: str, variant: Optional[str], split: str) -> Optional[np.ndarray]:
    """The whole split's labels where the table gives its real class counts: those counts in a fixed seeded order
    (read-only); None elsewhere (labels balanced within every chunk)."""
    counts = (spec_of(name, variant).class_counts or {}).get(split)
    if counts is None:
        return None
    labels = np.random.default_rng(_seed(name, variant or "", split, "labels")).permutation(
        np.repeat(np.arange(len(counts), dtype=np.int64), counts))
    labels.setflags(write=False)
    return labels


def generate_labels(name: str, split: str, variant: Optional[str] = None, fraction: float = 1.0):
    """The labels :func:`generate_split` gives the same split, without its images: ``(y, num_classes, coarse_y)``
    (y and coarse_y None for an unlabelled split). Milliseconds, for plans that need only sizes and labels."""
    spec = spec_of(name, variant)
    if split not in spec.sizes:
        raise ValueError(f"{name} has no split {split!r}; it has {', '.join(spec.sizes)}")
    n = split_size(name, split, variant, fraction)
    if split in spec.unlabeled:
        return None, spec.num_classes, None
    y = np.empty(n, dtype=np.int64)
    full = _full_labels(name, variant, split)
    for start in range(0, n, CHUNK):
        y[start:start + CHUNK] = _chunk_labels(_chunk_rng(name, variant, split, start), min(CHUNK, n - start), spec,
                                               full, start)
    coarse_y = None if spec.coarse is None else np.asarray(spec.coarse, dtype=np.int64)[y]
    return y, spec.num_classes, coarse_y


def generate_split(name: str, split: str, variant: Optional[str] = None, fraction: float = 1.0):
    """Stand-in images of one split: ``(x, y, num_classes, coarse_y)`` as the real reader returns them (uint8
    N×C×H×W, int64 labels or None, the number of classes, CIFAR-100's coarse labels or None); see the module doc.

    ``variant``: the EMNIST split (letters, byclass, ...). ``fraction``: share of the real size (0 < f ≤ 1)."""
    spec = spec_of(name, variant)
    if split not in spec.sizes:
        raise ValueError(f"{name} has no split {split!r}; it has {', '.join(spec.sizes)}")
    n = split_size(name, split, variant, fraction)
    table = _prototypes(name, variant, spec)
    per_class = (2 * SHIFTS + 1) ** 2
    dim = spec.channels * spec.height * spec.width
    x = np.empty((n, dim), dtype=np.uint8)
    y = np.empty(n, dtype=np.int64)
    full = _full_labels(name, variant, split)
    for start in range(0, n, CHUNK):
        rng, m = _chunk_rng(name, variant, split, start), min(CHUNK, n - start)
        labels = _chunk_labels(rng, m, spec, full, start)
        shifts = rng.integers(0, per_class, CHUNK)[:m]
        out = x[start:start + m]
        np.take(table, labels * per_class + shifts, axis=0, out=out, mode="clip")  # "raise" would buffer
        _add_noise(out, rng)
        y[start:start + m] = labels
    coarse_y = None if spec.coarse is None else np.asarray(spec.coarse, dtype=np.int64)[y]
    labelled = split not in spec.unlabeled
    return (x.reshape(n, spec.channels, spec.height, spec.width), y if labelled else None, spec.num_classes,
            coarse_y if labelled else None)


def stand_in_photo(shape: tuple[int, int]) -> np.ndarray:
    """The stand-in for a source photo read from a file: float32 3×H×W in [0, 1], a deterministic smooth random
    RGB field at two scales plus pixel noise, so crops of it have structure at every size."""
    height, width = shape
    rng = np.random.default_rng(_seed("photo", height, width))
    photo = 0.55 * _smooth_fields(rng, 1, 3, height, width, 8)[0]
    photo += 0.35 * _smooth_fields(rng, 1, 3, height, width, 48)[0]
    photo += 0.1 * rng.random((3, height, width), dtype=np.float32)
    return np.clip(photo, 0.0, 1.0, out=photo)


__all__ = ["CIFAR100_COARSE", "EMNIST_TABLE", "StandInSpec", "TABLE", "generate_split", "spec_of", "split_size",
           "stand_in_photo"]
