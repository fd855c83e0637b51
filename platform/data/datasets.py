"""Dataset registry: embedded data that needs no download, and torchvision datasets read from a data root.

Each loader returns a train and a test :class:`ArrayDataset` of contiguous float32 inputs (N×C×H×W images
or N×D vectors) and int64 labels; the runtime puts them in the object store once per node. A missing data
root or missing files fail at config-validation time with one error that says which files are expected,
where, and how to get them.

Embedded (always available):

- ``digits``: scikit-learn's 8×8 digits, [0, 1], fixed stratified 80/20 split (not in any method page).
- ``digits32``: the same images and split, bilinearly upscaled to 32×32 and repeated to 3 channels, so
  CIFAR-shaped models can be smoke-tested without a download (not in any method page).
- ``synthetic``: the Synthetic(α, β) generator of the FedProx paper (Li et al. 2020), also shipped by LEAF.
- ``sample_image``: scikit-learn's bundled photos, the *source image* of the single-image method
  (docs/methods/single_image.md §2.3). Not a labelled dataset: :func:`load_source_image` reads it and the public
  data layer (``platform.data.patch_pool_source``, ``public.source: image``) cuts the method's crop pool from it.

Read with torchvision's own dataset classes from ``dataset.root`` (``download=dataset.download``):
``mnist``, ``fashion_mnist``, ``emnist`` (``dataset.split``), ``cifar10``, ``cifar100`` (with coarse labels),
``stl10`` (labelled train/test; ``unlabeled`` for public data) and ``svhn``.

Normalisation is a named option (``dataset.normalization``, :data:`NORMALIZATIONS`); each dataset has the
default its method page (docs/methods/) uses. With ``stand_in`` (``dataset.stand_in``, copied from the
experiment's), :func:`read_split` generates every torchvision split instead (:mod:`platform.data.stand_in`) and no
files or root are needed.
"""
from __future__ import annotations

import os
import pickle
from dataclasses import dataclass
from typing import Callable, NamedTuple, Optional

import numpy as np

from platform.config.public_data import SOURCE_IMAGES
from platform.data.source_images import NOISE_IMAGE_SHAPE, load_source_image  # noqa: F401 - re-exported
from platform.data.stand_in import generate_split
from platform.errors import ConfigError, did_you_mean

DIGITS_TEST_FRACTION = 0.2
DIGITS_SPLIT_SEED = 20_240_601  # fixed, independent of experiment seeds: the held-out test set never moves

# Synthetic(α, β) defaults: FedProx's hardest setting Synthetic(1, 1) with its 30 devices.
SYNTHETIC_DEFAULTS = {"alpha": 1.0, "beta": 1.0, "clients": 30, "seed": 0}
SYNTHETIC_DIM = 60
SYNTHETIC_CLASSES = 10
SYNTHETIC_TEST_FRACTION = 0.2  # per generating client; the split is fixed by the generator seed

_CHUNK = 4096  # images converted (and resized) at a time, to bound float temporaries on large datasets


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


# ----------------------------------------------------------------------------------------------------------
# Normalisation
# ----------------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Normalization:
    mean: tuple[float, ...]  # per channel; one value = the same for every channel
    std: tuple[float, ...]
    doc: str


NORMALIZATIONS: dict[str, Normalization] = {
    "none": Normalization((), (), "no normalisation: pixels stay in [0, 1] (docs/methods/fedkp_fedpa.md §7.2 MNIST)"),
    "mnist": Normalization((0.1307,), (0.3081,), "MNIST mean/std; docs/methods/feded.md §4.1 uses it for MNIST and "
                                                 "EMNIST"),
    "fashion_mnist": Normalization((0.2860,), (0.3530,), "Fashion-MNIST mean/std (no method page states one)"),
    "imagenet": Normalization((0.485, 0.456, 0.406), (0.229, 0.224, 0.225),
                              "ImageNet mean/std; docs/methods/feded.md §4.1 uses it for CIFAR-10"),
    "cifar10": Normalization((0.4914, 0.4822, 0.4465), (0.2023, 0.1994, 0.2010),
                             "the usual CIFAR-10 mean/std (docs/methods/fedaux.md §6.1, docs/methods/single_image.md "
                             "§2.2)"),
    "cifar100": Normalization((0.5071, 0.4867, 0.4408), (0.2675, 0.2565, 0.2761),
                              "CIFAR-100 mean/std of docs/methods/single_image.md §2.2"),
    "cifar100_fedkp": Normalization((0.5071, 0.4865, 0.4409), (0.1642, 0.1496, 0.1728),
                                    "CIFAR-100 mean/std exactly as the FedKP code (docs/methods/fedkp_fedpa.md §8.2)"),
    "half": Normalization((0.5,), (0.5,), "mean 0.5, std 0.5: maps [0, 1] to [-1, 1] (MedMNIST in "
                                          "docs/methods/single_image.md §2.2)"),
}


def normalization_name(cfg) -> str:
    """The normalisation a dataset config uses: ``cfg.normalization``, else the dataset's default."""
    name = getattr(cfg, "normalization", None)
    return name if name is not None else DATASETS[cfg.name].default_normalization


def normalise_in_place(x: np.ndarray, norm: Normalization) -> np.ndarray:
    if not norm.mean:
        return x
    channels = x.shape[1]
    mean = np.broadcast_to(np.asarray(norm.mean, dtype=np.float32), (channels,)).reshape(1, -1, 1, 1)
    std = np.broadcast_to(np.asarray(norm.std, dtype=np.float32), (channels,)).reshape(1, -1, 1, 1)
    for i in range(0, len(x), _CHUNK):
        x[i:i + _CHUNK] -= mean
        x[i:i + _CHUNK] /= std
    return x


def normalize(x: np.ndarray, dataset_cfg) -> np.ndarray:
    """A normalised float32 copy of images ``x`` (N×C×H×W in [0, 1]) with ``dataset_cfg``'s normalisation, for
    methods that build their own public pool (single-image crops are normalised with the *private* dataset's
    statistics, docs/methods/single_image.md §2.2)."""
    out = np.array(x, dtype=np.float32, copy=True, order="C")
    return normalise_in_place(out, NORMALIZATIONS[normalization_name(dataset_cfg)])


# ----------------------------------------------------------------------------------------------------------
# Image conversion: uint8 -> float32 [0, 1], optional resize and channel change, in chunks
# ----------------------------------------------------------------------------------------------------------

def to_float_images(x: np.ndarray, size: Optional[tuple[int, int]] = None,
                    channels: Optional[int] = None) -> np.ndarray:
    """uint8 (or [0, 1] float) N×C×H×W -> contiguous float32 in [0, 1], resized and re-channelled if asked.

    Resizing is bilinear with antialiasing (torch ``interpolate``), e.g. STL-10's 96×96 to CIFAR's 32×32
    (docs/methods/fedaux.md §6.1 [code]). 1 -> 3 channels repeats the grey channel; 3 -> 1 takes ITU-R 601 luma
    (0.299, 0.587, 0.114), as PIL's ``convert("L")``. Work goes in chunks so a 100k-image uint8 array never
    exists as float all at once before resizing.
    """
    n, c, h, w = x.shape
    out_c = channels or c
    out_hw = tuple(size) if size is not None else (h, w)
    scale = 255.0 if x.dtype == np.uint8 else 1.0
    out = np.empty((n, out_c, *out_hw), dtype=np.float32)
    if out_c == c and out_hw == (h, w):
        for i in range(0, n, _CHUNK):
            np.divide(x[i:i + _CHUNK], np.float32(scale), out=out[i:i + _CHUNK], dtype=np.float32)
        return out
    import torch
    import torch.nn.functional as F

    luma = torch.tensor([0.299, 0.587, 0.114], dtype=torch.float32).view(1, 3, 1, 1)
    for i in range(0, n, _CHUNK):
        t = torch.from_numpy(np.ascontiguousarray(x[i:i + _CHUNK])).to(torch.float32) / scale
        if out_c != c:
            if c == 1:
                t = t.expand(-1, out_c, -1, -1)
            elif c == 3 and out_c == 1:
                t = (t * luma).sum(dim=1, keepdim=True)
            else:
                raise ValueError(f"cannot convert {c}-channel images to {out_c} channels")
        if out_hw != (h, w):
            t = F.interpolate(t, size=out_hw, mode="bilinear", align_corners=False, antialias=True)
        out[i:i + _CHUNK] = t.clamp(0.0, 1.0).numpy()
    return out


# ----------------------------------------------------------------------------------------------------------
# Registry
# ----------------------------------------------------------------------------------------------------------

class RawSplit(NamedTuple):
    """One split as stored: images N×C×H×W (uint8 for torchvision data), labels (None if unlabelled)."""

    x: np.ndarray
    y: Optional[np.ndarray]
    num_classes: int
    coarse_y: Optional[np.ndarray] = None


@dataclass(frozen=True)
class DatasetSpec:
    load: Callable  # (DatasetConfig) -> (train, test)
    required_files: tuple[str, ...] = ()  # relative to the data root (default variant); empty = embedded
    how_to_get: str = ""
    channels: Optional[int] = None  # image channels; None = vectors (synthetic) or not a dataset
    default_normalization: str = "none"
    read: Optional[Callable] = None  # (root, split, download, cfg) -> RawSplit: raw images, e.g. for public data
    splits: tuple[str, ...] = ("train", "test")  # what `read` accepts
    files_for: Optional[Callable] = None  # (cfg) -> required files when they depend on a config (EMNIST split)
    source_image: bool = False  # a source image for public data, not a labelled dataset

    def files(self, cfg=None) -> tuple[str, ...]:
        return self.files_for(cfg) if self.files_for is not None and cfg is not None else self.required_files


def _how(cls_expr: str, name: str) -> str:
    return (f"`python -c \"import torchvision; torchvision.datasets.{cls_expr}\"` on a machine with a network "
            f"and copy the root here, or set dataset.download: true where this machine has one "
            f"({name} is read by torchvision, which checks the files' MD5 sums)")


# --- embedded ---------------------------------------------------------------------------------------------

def digits_images_and_labels() -> tuple[np.ndarray, np.ndarray]:
    """scikit-learn's digits as ``load_digits()`` returns them (``images`` [1797, 8, 8] float64, ``target``), read
    from the file it bundles (``sklearn/datasets/data/digits.csv.gz``) exactly as it reads it, without importing
    scikit-learn: its import (scipy, joblib, ...) took 0.9 s of every run on digits, against 0.02 s for the file.
    Where that file is not found, through ``load_digits``."""
    import gzip
    from importlib.util import find_spec

    spec = find_spec("sklearn")  # finds the package without importing it
    path = (os.path.join(spec.submodule_search_locations[0], "datasets", "data", "digits.csv.gz")
            if spec is not None and spec.submodule_search_locations else None)
    if path is None or not os.path.isfile(path):
        from sklearn.datasets import load_digits

        bunch = load_digits()
        return bunch.images, bunch.target
    with open(path, "rb") as compressed:
        data = np.loadtxt(gzip.open(compressed, mode="rt", encoding="utf-8"), delimiter=",")
    return data[:, :-1].reshape(-1, 8, 8), data[:, -1].astype(int, copy=False)


def _digits_arrays():
    images, target = digits_images_and_labels()
    x = (images.astype(np.float32) / 16.0)[:, None, :, :]
    y = target.astype(np.int64)
    rng = np.random.RandomState(DIGITS_SPLIT_SEED)
    test_idx = []
    for c in range(10):
        idx = np.flatnonzero(y == c)
        rng.shuffle(idx)
        test_idx.append(idx[: int(round(len(idx) * DIGITS_TEST_FRACTION))])
    test_mask = np.zeros(len(y), dtype=bool)
    test_mask[np.concatenate(test_idx)] = True
    return x, y, test_mask


def _finish(x: np.ndarray, cfg) -> np.ndarray:
    """Optional resize (``dataset.image_size``) and the configured normalisation, on float [0, 1] images."""
    size = getattr(cfg, "image_size", None)
    if size is not None and x.shape[2:] != (size, size):
        x = to_float_images(x, size=(size, size))
    x = np.ascontiguousarray(x, dtype=np.float32)  # loaders pass fresh arrays: normalising in place is safe
    name = normalization_name(cfg)
    if name != "none":
        x = normalise_in_place(x, NORMALIZATIONS[name])
    return x


def _load_digits(cfg) -> tuple[ArrayDataset, ArrayDataset]:
    """scikit-learn's bundled 8×8 handwritten digits (1,797 images), scaled to [0, 1], fixed stratified split."""
    x, y, test_mask = _digits_arrays()
    return (ArrayDataset(_finish(np.ascontiguousarray(x[~test_mask]), cfg), y[~test_mask], 10),
            ArrayDataset(_finish(np.ascontiguousarray(x[test_mask]), cfg), y[test_mask], 10))


def _load_digits32(cfg) -> tuple[ArrayDataset, ArrayDataset]:
    """``digits`` bilinearly upscaled to 32×32 and repeated to 3 channels (same split), CIFAR-shaped."""
    x, y, test_mask = _digits_arrays()
    parts = []
    for mask in (~test_mask, test_mask):
        x32 = to_float_images(np.ascontiguousarray(x[mask]), size=(32, 32), channels=3)
        parts.append(ArrayDataset(_finish(x32, cfg), y[mask], 10))
    return parts[0], parts[1]


def generate_synthetic(alpha: float, beta: float, num_clients: int, seed: int, samples: Optional[int] = None,
                       class_means: bool = False) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Synthetic(α, β) of the FedProx paper (Li et al. 2020; LEAF ships the same generator).

    For generating client k (its own random streams, seeded by (seed, k, ·), so client k's data do not
    depend on how many clients there are):

    - u_k ~ N(0, α), B_k ~ N(0, β)  (α, β used as standard deviations, as the authors' generator does);
    - W_k ∈ R^{10×60} ~ N(u_k, 1) entrywise, b_k ∈ R^{10} ~ N(u_k, 1) (the paper's shared u_k);
    - v_k ∈ R^{60} ~ N(B_k, 1); x ~ N(v_k, Σ) with Σ diagonal, Σ_jj = j^{-1.2};
    - y = argmax softmax(W_k x + b_k) (= argmax of the logits);
    - n_k = int(lognormal(4, 2)) + 50 samples (the authors' generator), or ``samples`` for equal sizes.

    Caveat [derived]: with one u_k per client, W_k x + b_k = u_k(Σ_j x_j + 1)·1 + (zero-mean part), i.e. u_k
    adds the *same* amount to every logit, so the argmax, hence the labels, do not depend on α at all (the
    same holds for the authors' generator). ``class_means=True`` (extension, not in the paper) draws one
    u_kc ~ N(0, α) per class instead, so α really skews each client's labelling model.

    Returns x (N×60 float32), y (int64), group (int64 generating-client id), grouped by client.
    """
    std_x = np.power(np.arange(1, SYNTHETIC_DIM + 1, dtype=np.float64), -1.2) ** 0.5
    xs, ys, gs = [], [], []
    for k in range(num_clients):
        # Separate streams for size, inputs and model: α (and class_means) never move the inputs, β never the model.
        size_rng, x_rng, model_rng = (np.random.default_rng([seed, k, part]) for part in range(3))
        n_k = samples if samples is not None else int(size_rng.lognormal(4.0, 2.0)) + 50
        b_shift = x_rng.normal(0.0, beta)
        v = x_rng.normal(b_shift, 1.0, SYNTHETIC_DIM)
        x = v + x_rng.standard_normal((n_k, SYNTHETIC_DIM)) * std_x
        u_k = model_rng.normal(0.0, alpha, SYNTHETIC_CLASSES) if class_means else model_rng.normal(0.0, alpha)
        w = model_rng.normal(np.reshape(u_k, (-1, 1)), 1.0, (SYNTHETIC_CLASSES, SYNTHETIC_DIM))
        b = model_rng.normal(u_k, 1.0, SYNTHETIC_CLASSES)
        xs.append(x)
        ys.append(np.argmax(x @ w.T + b, axis=1))
        gs.append(np.full(n_k, k))
    return (np.concatenate(xs).astype(np.float32), np.concatenate(ys).astype(np.int64),
            np.concatenate(gs).astype(np.int64))


def _synthetic_setting(cfg, key: str):
    value = getattr(cfg, f"synthetic_{key}", None)
    return SYNTHETIC_DEFAULTS[key] if value is None else value


def _load_synthetic(cfg) -> tuple[ArrayDataset, ArrayDataset]:
    """Synthetic(α, β) with a fixed per-client 80/20 train/test split (seeded by the generator seed). ``groups`` is
    the generating client on both sides, so a natural partition and per-client test accuracy are both possible."""
    seed = _synthetic_setting(cfg, "seed")
    x, y, groups = generate_synthetic(_synthetic_setting(cfg, "alpha"), _synthetic_setting(cfg, "beta"),
                                      _synthetic_setting(cfg, "clients"), seed,
                                      getattr(cfg, "synthetic_samples", None),
                                      bool(getattr(cfg, "synthetic_class_means", None)))
    test_mask = np.zeros(len(y), dtype=bool)
    rng = np.random.default_rng([seed, 2**31])  # a stream no client uses
    for k in np.unique(groups):
        idx = np.flatnonzero(groups == k)
        n_test = max(1, int(round(len(idx) * SYNTHETIC_TEST_FRACTION)))
        test_mask[rng.permutation(idx)[:n_test]] = True
    parts = [ArrayDataset(np.ascontiguousarray(x[m]), y[m], SYNTHETIC_CLASSES, groups=groups[m])
             for m in (~test_mask, test_mask)]
    return parts[0], parts[1]


# --- source images (single-image method): platform.data.source_images ----------------------------------

def _load_sample_image(cfg):
    raise ConfigError("dataset.name", _SOURCE_IMAGE_MESSAGE)


_SOURCE_IMAGE_MESSAGE = ("sample_image is a source image for public data (the single-image method, "
                         "docs/methods/single_image.md), not a labelled dataset; use public.source: image with "
                         f"public.image: one of {', '.join(SOURCE_IMAGES)} or the path of an image file")


# --- torchvision ------------------------------------------------------------------------------------------

def _tv(name: str):
    import torchvision.datasets as tvd

    return getattr(tvd, name)


def _read_mnist_like(cls_name: str, num_classes: int):
    def read(root, split, download, cfg=None) -> RawSplit:
        ds = _tv(cls_name)(root=root, train=(split == "train"), download=download)
        return RawSplit(ds.data.numpy()[:, None, :, :], ds.targets.numpy().astype(np.int64), num_classes)

    return read


EMNIST_SPLITS: dict[str, int] = {"letters": 26, "balanced": 47, "byclass": 62, "bymerge": 47, "digits": 10,
                                 "mnist": 10}
EMNIST_DEFAULT_SPLIT = "letters"  # docs/methods/feded.md §4.1; docs/methods/mnfl.md §10 item 22


def _emnist_split(cfg) -> str:
    split = getattr(cfg, "split", None) if cfg is not None else None
    return split or EMNIST_DEFAULT_SPLIT


def _read_emnist(root, split, download, cfg=None) -> RawSplit:
    """EMNIST through torchvision. ``letters`` labels 1..26 become 0..25 (docs/methods/feded.md §4.1 [code]).

    torchvision returns the images as stored in the EMNIST files, i.e. transposed relative to MNIST. We keep
    that by default (what plain torchvision gives; docs/methods/feded.md §4.1 lists no transpose, and a CNN trained
    and tested on one orientation does not care) unless ``dataset.emnist_upright`` asks for MNIST's
    orientation, which matters when MNIST is EMNIST's public data (docs/methods/mnfl.md §4).
    """
    variant = _emnist_split(cfg)
    ds = _tv("EMNIST")(root=root, split=variant, train=(split == "train"), download=download)
    x = ds.data.numpy()[:, None, :, :]
    if cfg is not None and getattr(cfg, "emnist_upright", False):
        x = x.transpose(0, 1, 3, 2)
    y = ds.targets.numpy().astype(np.int64)
    if variant == "letters":
        y = y - 1
    return RawSplit(x, y, EMNIST_SPLITS[variant])


def _emnist_files(cfg) -> tuple[str, ...]:
    variant = _emnist_split(cfg)
    return tuple(f"EMNIST/raw/emnist-{variant}-{part}-{kind}" for part in ("train", "test")
                 for kind in ("images-idx3-ubyte", "labels-idx1-ubyte"))


def _read_cifar(cls_name: str, base_folder: str, coarse: bool):
    def read(root, split, download, cfg=None) -> RawSplit:
        ds = _tv(cls_name)(root=root, train=(split == "train"), download=download)
        coarse_y = None
        if coarse:
            # torchvision keeps only the fine labels; the coarse ones are in the same pickles.
            with open(os.path.join(root, base_folder, "train" if split == "train" else "test"), "rb") as fh:
                coarse_y = np.asarray(pickle.load(fh, encoding="latin1")["coarse_labels"], dtype=np.int64)
        return RawSplit(ds.data.transpose(0, 3, 1, 2), np.asarray(ds.targets, dtype=np.int64), len(ds.classes),
                        coarse_y)

    return read


def _read_stl10(root, split, download, cfg=None) -> RawSplit:
    ds = _tv("STL10")(root=root, split=split, download=download)
    labels = None if split == "unlabeled" else np.asarray(ds.labels, dtype=np.int64)
    return RawSplit(ds.data, labels, 10)


def _read_svhn(root, split, download, cfg=None) -> RawSplit:
    ds = _tv("SVHN")(root=root, split=split, download=download)  # torchvision maps label 10 to digit 0
    return RawSplit(ds.data, np.asarray(ds.labels, dtype=np.int64), 10)


def stand_in_variant(cfg, name: Optional[str] = None) -> Optional[str]:
    """The variant a stand-in of dataset ``name`` (default ``cfg.name``) is generated for: EMNIST's split, else
    None (:mod:`platform.data.stand_in`)."""
    return _emnist_split(cfg) if (name or cfg.name) == "emnist" else None


def read_split(name: str, root: str, split: str, download: bool = False, cfg=None,
               field: str = "dataset.root") -> RawSplit:
    """One split of a torchvision dataset as stored (uint8 N×C×H×W), generated when ``cfg.stand_in``. Read failures
    (a corrupt or partial file fails torchvision's MD5 check or does not parse; a failed download) become one
    :class:`ConfigError` on ``field``."""
    if getattr(cfg, "stand_in", False):
        variant = stand_in_variant(cfg, name)
        return RawSplit(*generate_split(name, split, variant, getattr(cfg, "stand_in_fraction", 1.0)))
    spec = DATASETS[name]
    try:
        return spec.read(root, split, download, cfg)
    except ConfigError:
        raise
    except (RuntimeError, ValueError, AssertionError, EOFError, OSError, pickle.UnpicklingError) as err:
        detail = " ".join(str(err).split())
        raise ConfigError(field, f"torchvision could not read {name} ({split}) under {root!r}: {detail}; "
                                 f"the files may be corrupt or partial; get them again with {spec.how_to_get}"
                          ) from None


def _torchvision_loader(name: str):
    def load(cfg) -> tuple[ArrayDataset, ArrayDataset]:
        parts = []
        for split in ("train", "test"):
            raw = read_split(name, cfg.root, split, cfg.download, cfg)
            size = getattr(cfg, "image_size", None)
            x = to_float_images(raw.x, size=(size, size) if size is not None else None)
            parts.append(ArrayDataset(_finish(x, cfg), raw.y, raw.num_classes, coarse_y=raw.coarse_y))
        return parts[0], parts[1]

    return load


_MNIST_FILES = ("train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte",
                "t10k-labels-idx1-ubyte")

DATASETS: dict[str, DatasetSpec] = {
    "digits": DatasetSpec(_load_digits, channels=1),
    "digits32": DatasetSpec(_load_digits32, channels=3),
    "synthetic": DatasetSpec(_load_synthetic, channels=None),
    "sample_image": DatasetSpec(_load_sample_image, source_image=True),
    "mnist": DatasetSpec(
        _torchvision_loader("mnist"), tuple(f"MNIST/raw/{f}" for f in _MNIST_FILES),
        _how("MNIST('ROOT', download=True)", "mnist"), channels=1, default_normalization="mnist",
        read=_read_mnist_like("MNIST", 10)),
    "fashion_mnist": DatasetSpec(
        _torchvision_loader("fashion_mnist"), tuple(f"FashionMNIST/raw/{f}" for f in _MNIST_FILES),
        _how("FashionMNIST('ROOT', download=True)", "fashion_mnist"), channels=1,
        default_normalization="fashion_mnist", read=_read_mnist_like("FashionMNIST", 10)),
    "emnist": DatasetSpec(
        _torchvision_loader("emnist"), _emnist_files(None),
        _how("EMNIST('ROOT', split='letters', download=True)", "emnist") + "; one download holds every split",
        channels=1, default_normalization="mnist", read=_read_emnist, files_for=_emnist_files),
    "cifar10": DatasetSpec(
        _torchvision_loader("cifar10"),
        tuple(f"cifar-10-batches-py/{f}" for f in
              ("data_batch_1", "data_batch_2", "data_batch_3", "data_batch_4", "data_batch_5", "test_batch",
               "batches.meta")),
        _how("CIFAR10('ROOT', download=True)", "cifar10"), channels=3, default_normalization="imagenet",
        read=_read_cifar("CIFAR10", "cifar-10-batches-py", coarse=False)),
    "cifar100": DatasetSpec(
        _torchvision_loader("cifar100"), tuple(f"cifar-100-python/{f}" for f in ("train", "test", "meta")),
        _how("CIFAR100('ROOT', download=True)", "cifar100"), channels=3, default_normalization="cifar100",
        read=_read_cifar("CIFAR100", "cifar-100-python", coarse=True)),
    "stl10": DatasetSpec(
        _torchvision_loader("stl10"),
        tuple(f"stl10_binary/{f}" for f in ("train_X.bin", "train_y.bin", "unlabeled_X.bin", "test_X.bin",
                                             "test_y.bin")),
        _how("STL10('ROOT', download=True)", "stl10"), channels=3, default_normalization="imagenet",
        read=_read_stl10, splits=("train", "test", "unlabeled")),
    "svhn": DatasetSpec(
        _torchvision_loader("svhn"), ("train_32x32.mat", "test_32x32.mat"),
        _how("SVHN('ROOT', split='train', download=True)", "svhn")
        + "; likewise split='test' (and 'extra' if used)",
        channels=3, default_normalization="half", read=_read_svhn, splits=("train", "test", "extra")),
}

# Files a split needs beyond the dataset's standard set (torchvision checks per split for SVHN only).
EXTRA_SPLIT_FILES: dict[tuple[str, str], tuple[str, ...]] = {("svhn", "extra"): ("extra_32x32.mat",)}


# ----------------------------------------------------------------------------------------------------------
# Validation and availability
# ----------------------------------------------------------------------------------------------------------

_SYNTHETIC_FIELDS = ("synthetic_alpha", "synthetic_beta", "synthetic_clients", "synthetic_samples",
                     "synthetic_seed", "synthetic_class_means")


def validate_dataset_config(cfg, path: str) -> None:
    """Cross-field rules of ``DatasetConfig`` (called from its ``validate``)."""
    if cfg.name not in DATASETS:
        raise ConfigError(f"{path}.name", f"unknown dataset {cfg.name!r}{did_you_mean(cfg.name, DATASETS)}; "
                                          f"allowed: {', '.join(DATASETS)}")
    spec = DATASETS[cfg.name]
    if spec.source_image:
        raise ConfigError(f"{path}.name", _SOURCE_IMAGE_MESSAGE)
    norm = cfg.normalization
    if norm is not None:
        if norm not in NORMALIZATIONS:
            raise ConfigError(f"{path}.normalization",
                              f"unknown normalization {norm!r}; allowed: {', '.join(NORMALIZATIONS)}")
        if spec.channels is None and norm != "none":
            raise ConfigError(f"{path}.normalization", f"{cfg.name} is vector data; only 'none' applies")
        if spec.channels == 1 and len(NORMALIZATIONS[norm].mean) == 3:
            raise ConfigError(f"{path}.normalization", f"{norm!r} has 3 channels but {cfg.name} has 1; "
                                                       f"allowed for 1-channel data: " + ", ".join(
                                                           k for k, v in NORMALIZATIONS.items() if len(v.mean) < 3))
    if cfg.split is not None:
        if cfg.name != "emnist":
            raise ConfigError(f"{path}.split", f"only applies to dataset emnist, not {cfg.name}")
        if cfg.split not in EMNIST_SPLITS:
            raise ConfigError(f"{path}.split", f"unknown EMNIST split {cfg.split!r}; allowed: "
                                               f"{', '.join(EMNIST_SPLITS)}")
    if cfg.emnist_upright and cfg.name != "emnist":
        raise ConfigError(f"{path}.emnist_upright", f"only applies to dataset emnist, not {cfg.name}")
    if cfg.name != "synthetic":
        for key in _SYNTHETIC_FIELDS:
            if getattr(cfg, key) is not None:
                raise ConfigError(f"{path}.{key}", f"only applies to dataset synthetic, not {cfg.name}")
    if cfg.image_size is not None and spec.channels is None:
        raise ConfigError(f"{path}.image_size", f"{cfg.name} is vector data; image_size only applies to images")


def _missing(root: str, files) -> list[str]:
    return [f for f in files if not os.path.isfile(os.path.join(root, f))]


def check_dataset_available(cfg, field: str = "dataset.root", extra_files: tuple[str, ...] = ()) -> None:
    """Fail early, with one clear error, if a dataset's files are not where the config says (none with stand_in)."""
    if cfg.name not in DATASETS:
        raise ConfigError(field.rsplit(".", 1)[0] + ".name",
                          f"unknown dataset {cfg.name!r}; allowed: {', '.join(DATASETS)}")
    spec = DATASETS[cfg.name]
    if spec.source_image:
        raise ConfigError(field.rsplit(".", 1)[0] + ".name", _SOURCE_IMAGE_MESSAGE)
    files = spec.files(cfg) + tuple(extra_files)
    if not files or getattr(cfg, "stand_in", False):
        return
    if not cfg.root:
        raise ConfigError(field, f"dataset {cfg.name!r} is read from a data root; set {field} (with "
                                 f"dataset.download: true, torchvision downloads into it where a network "
                                 f"exists); it expects {', '.join(files)} under it; get them with {spec.how_to_get}")
    if cfg.download:
        return
    if not os.path.isdir(cfg.root):
        raise ConfigError(field, f"data root {cfg.root!r} does not exist; {cfg.name} expects "
                                 f"{', '.join(os.path.join(cfg.root, f) for f in files)}; "
                                 f"get them with {spec.how_to_get}")
    missing = _missing(cfg.root, files)
    if missing:
        zipped = [f for f in missing if os.path.isfile(os.path.join(cfg.root, f + ".gz"))]
        hint = (f" ({', '.join(f + '.gz' for f in zipped)} found: torchvision reads them decompressed, "
                f"run gunzip on them)" if zipped else "")
        raise ConfigError(field, f"{len(missing)} file(s) of {cfg.name} missing under {cfg.root!r}: "
                                 f"{', '.join(missing)}{hint}; get them with {spec.how_to_get}")


def load_dataset(cfg) -> tuple[ArrayDataset, ArrayDataset]:
    check_dataset_available(cfg)
    return DATASETS[cfg.name].load(cfg)
