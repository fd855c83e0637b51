"""The dataset layer: embedded datasets, torchvision datasets read from small files in their real on-disk
formats (written here into tmp_path), normalisation, availability errors, and public-data splits.

The torchvision files are tiny but byte-for-byte in the real formats (IDX ubyte, CIFAR pickles, STL-10
binaries, SVHN .mat) and go through the production ``load_dataset`` path and torchvision's own classes.
The only thing patched is torchvision's MD5 check for CIFAR/STL-10/SVHN (tiny files cannot match the real
checksums); one test keeps it on to check that a failed check becomes one ConfigError.
"""
from __future__ import annotations

import os
import pickle
import struct

import numpy as np
import pytest

from platform.config.experiment import DatasetConfig
from platform.preflight import load_experiment
from platform.data import DATASETS, NORMALIZATIONS, ArrayDataset, load_dataset
from platform.data.datasets import generate_synthetic, load_source_image, normalize
from platform.config.public_data import PublicDataConfig
from platform.data.public import check_public_available, check_public_dataset, split_public
from platform.errors import ConfigError
from platform.config.schema import build

RNG = np.random.default_rng(12345)


def _cfg(**kw) -> DatasetConfig:
    return build(DatasetConfig, kw, "dataset")


def _public(**kw) -> PublicDataConfig:
    return build(PublicDataConfig, kw, "public")


def _config_error(data) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        load_experiment(data)
    assert "\n" not in str(info.value)
    return info.value


# ---------------------------------------------------------------------------------------------------------
# Writers for the real on-disk formats
# ---------------------------------------------------------------------------------------------------------

def _write_idx(path, array: np.ndarray) -> None:
    """IDX (ubyte): magic 0x0000 08 <ndim>, big-endian uint32 sizes, then the bytes."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    array = np.ascontiguousarray(array, dtype=np.uint8)
    header = bytes([0, 0, 0x08, array.ndim]) + struct.pack(">" + "I" * array.ndim, *array.shape)
    with open(path, "wb") as fh:
        fh.write(header + array.tobytes())


def _write_mnist_like(root, folder: str, prefix: dict, n: dict, num_labels: int, label_offset: int = 0):
    data = {}
    for part in ("train", "test"):
        images = RNG.integers(0, 256, (n[part], 28, 28), dtype=np.uint8)
        labels = (np.arange(n[part]) % num_labels + label_offset).astype(np.uint8)
        _write_idx(os.path.join(root, folder, "raw", f"{prefix[part]}-images-idx3-ubyte"), images)
        _write_idx(os.path.join(root, folder, "raw", f"{prefix[part]}-labels-idx1-ubyte"), labels)
        data[part] = (images, labels)
    return data


def write_mnist(root, folder="MNIST", n=None):
    return _write_mnist_like(root, folder, {"train": "train", "test": "t10k"}, n or {"train": 12, "test": 6}, 10)


def write_emnist(root, split="letters", n=None):
    num, offset = {"letters": (26, 1), "balanced": (47, 0), "byclass": (62, 0)}[split]
    return _write_mnist_like(root, "EMNIST", {p: f"emnist-{split}-{p}" for p in ("train", "test")},
                             n or {"train": 70, "test": 30}, num, offset)


def _pickle(path, obj) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as fh:
        pickle.dump(obj, fh, protocol=2)


def write_cifar10(root, per_batch=4, n_test=5):
    base = os.path.join(root, "cifar-10-batches-py")
    batches = []
    for i in range(1, 6):
        data = RNG.integers(0, 256, (per_batch, 3072), dtype=np.uint8)
        labels = [int(v) for v in RNG.integers(0, 10, per_batch)]
        _pickle(os.path.join(base, f"data_batch_{i}"), {"batch_label": f"training batch {i} of 5", "data": data,
                                                         "labels": labels, "filenames": [b"x.png"] * per_batch})
        batches.append((data, labels))
    test = RNG.integers(0, 256, (n_test, 3072), dtype=np.uint8)
    test_labels = [int(v) for v in RNG.integers(0, 10, n_test)]
    _pickle(os.path.join(base, "test_batch"), {"batch_label": "testing batch 1 of 1", "data": test,
                                               "labels": test_labels})
    _pickle(os.path.join(base, "batches.meta"), {"label_names": [f"class{i}" for i in range(10)],
                                                 "num_cases_per_batch": per_batch, "num_vis": 3072})
    return batches, (test, test_labels)


def write_cifar100(root, n_train=10, n_test=6):
    base = os.path.join(root, "cifar-100-python")
    out = {}
    for part, n in (("train", n_train), ("test", n_test)):
        data = RNG.integers(0, 256, (n, 3072), dtype=np.uint8)
        fine = [int(v) for v in RNG.integers(0, 100, n)]
        coarse = [f // 5 for f in fine]
        _pickle(os.path.join(base, part), {"filenames": [b"x.png"] * n, "batch_label": part, "fine_labels": fine,
                                           "coarse_labels": coarse, "data": data})
        out[part] = (data, fine, coarse)
    _pickle(os.path.join(base, "meta"), {"fine_label_names": [f"f{i}" for i in range(100)],
                                         "coarse_label_names": [f"c{i}" for i in range(20)]})
    return out


def write_stl10(root, n=None):
    """STL-10 binaries: uint8 images 3×96×96 stored column-major per channel; labels 1..10."""
    n = n or {"train": 4, "test": 3, "unlabeled": 5}
    base = os.path.join(root, "stl10_binary")
    os.makedirs(base, exist_ok=True)
    out = {}
    for part, count in n.items():
        images = RNG.integers(0, 256, (count, 3, 96, 96), dtype=np.uint8)  # N×C×H×W as a viewer sees it
        with open(os.path.join(base, f"{part}_X.bin"), "wb") as fh:
            fh.write(np.ascontiguousarray(images.transpose(0, 1, 3, 2)).tobytes())  # column-major on disk
        labels = None
        if part != "unlabeled":
            labels = (np.arange(count) % 10 + 1).astype(np.uint8)
            with open(os.path.join(base, f"{part}_y.bin"), "wb") as fh:
                fh.write(labels.tobytes())
        out[part] = (images, labels)
    return out


def write_svhn(root, n=None):
    from scipy.io import savemat

    n = n or {"train": 7, "test": 4}
    os.makedirs(root, exist_ok=True)
    out = {}
    for part, count in n.items():
        images = RNG.integers(0, 256, (count, 3, 32, 32), dtype=np.uint8)
        labels = (np.arange(count) % 10 + 1).astype(np.uint8)  # SVHN labels digit 0 as 10
        savemat(os.path.join(root, f"{part}_32x32.mat"),
                {"X": images.transpose(2, 3, 1, 0), "y": labels.reshape(-1, 1)})
        out[part] = (images, labels)
    return out


@pytest.fixture
def no_md5(monkeypatch):
    """Tiny files cannot match the real MD5s: check existence only, as torchvision does when md5 is None."""
    def exists(fpath, md5=None):
        return os.path.isfile(fpath)

    for module in ("cifar", "stl10", "svhn"):
        monkeypatch.setattr(f"torchvision.datasets.{module}.check_integrity", exists)


def _expected(images_nchw: np.ndarray, norm: str) -> np.ndarray:
    x = images_nchw.astype(np.float32) / np.float32(255.0)
    n = NORMALIZATIONS[norm]
    if not n.mean:
        return x
    c = x.shape[1]
    mean = np.broadcast_to(np.asarray(n.mean, np.float32), (c,)).reshape(1, -1, 1, 1)
    std = np.broadcast_to(np.asarray(n.std, np.float32), (c,)).reshape(1, -1, 1, 1)
    return (x - mean) / std


def _check_arrays(ds: ArrayDataset) -> None:
    assert ds.x.dtype == np.float32 and ds.y.dtype == np.int64
    assert ds.x.flags.c_contiguous and ds.y.flags.c_contiguous


# ---------------------------------------------------------------------------------------------------------
# torchvision datasets from real-format files
# ---------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("name,folder,default_norm", [("mnist", "MNIST", "mnist"),
                                                       ("fashion_mnist", "FashionMNIST", "fashion_mnist")])
def test_mnist_like_idx_files(tmp_path, name, folder, default_norm):
    data = write_mnist(tmp_path, folder)
    train, test = load_dataset(_cfg(name=name, root=str(tmp_path)))
    for ds, part in ((train, "train"), (test, "test")):
        images, labels = data[part]
        _check_arrays(ds)
        assert ds.x.shape == (len(labels), 1, 28, 28) and ds.num_classes == 10
        assert np.array_equal(ds.y, labels.astype(np.int64))
        np.testing.assert_allclose(ds.x, _expected(images[:, None], default_norm), rtol=0, atol=1e-6)
    raw, _ = load_dataset(_cfg(name=name, root=str(tmp_path), normalization="none"))
    assert np.array_equal(raw.x, data["train"][0][:, None].astype(np.float32) / np.float32(255))


def test_emnist_letters_shift_and_orientation(tmp_path):
    data = write_emnist(tmp_path, "letters")
    train, test = load_dataset(_cfg(name="emnist", root=str(tmp_path)))  # letters is the default split
    assert train.num_classes == 26 and train.x.shape == (70, 1, 28, 28)
    assert np.array_equal(train.y, data["train"][1].astype(np.int64) - 1)
    assert train.y.min() == 0 and train.y.max() == 25 and test.y.max() <= 25
    np.testing.assert_allclose(train.x, _expected(data["train"][0][:, None], "mnist"), atol=1e-6)  # as stored
    upright, _ = load_dataset(_cfg(name="emnist", root=str(tmp_path), emnist_upright=True))
    assert np.array_equal(upright.x, train.x.transpose(0, 1, 3, 2))


@pytest.mark.parametrize("split,classes", [("balanced", 47), ("byclass", 62)])
def test_emnist_other_splits_keep_labels(tmp_path, split, classes):
    data = write_emnist(tmp_path, split)
    train, test = load_dataset(_cfg(name="emnist", root=str(tmp_path), split=split))
    assert train.num_classes == classes and np.array_equal(test.y, data["test"][1].astype(np.int64))


def test_cifar10_pickles(tmp_path, no_md5):
    batches, (test_data, test_labels) = write_cifar10(tmp_path)
    train, test = load_dataset(_cfg(name="cifar10", root=str(tmp_path)))
    _check_arrays(train)
    assert train.x.shape == (20, 3, 32, 32) and test.x.shape == (5, 3, 32, 32) and train.num_classes == 10
    assert np.array_equal(train.y, np.concatenate([b[1] for b in batches]))
    rows = np.concatenate([b[0] for b in batches]).reshape(-1, 3, 32, 32)  # R, G, B planes, row-major
    np.testing.assert_allclose(train.x, _expected(rows, "imagenet"), atol=1e-6)  # docs/methods/feded.md §4.1 default
    other, _ = load_dataset(_cfg(name="cifar10", root=str(tmp_path), normalization="cifar10"))
    np.testing.assert_allclose(other.x, _expected(rows, "cifar10"), atol=1e-6)
    assert np.array_equal(test.y, test_labels) and train.coarse_y is None


def test_cifar100_fine_and_coarse_labels(tmp_path, no_md5):
    data = write_cifar100(tmp_path)
    train, test = load_dataset(_cfg(name="cifar100", root=str(tmp_path)))
    assert train.num_classes == 100 and train.x.shape == (10, 3, 32, 32)
    for ds, part in ((train, "train"), (test, "test")):
        _, fine, coarse = data[part]
        assert np.array_equal(ds.y, fine) and np.array_equal(ds.coarse_y, coarse)
        assert ds.coarse_y.dtype == np.int64
    np.testing.assert_allclose(train.x, _expected(data["train"][0].reshape(-1, 3, 32, 32), "cifar100"), atol=1e-6)


def test_stl10_binaries_and_resize(tmp_path, no_md5):
    data = write_stl10(tmp_path)
    train, test = load_dataset(_cfg(name="stl10", root=str(tmp_path), normalization="none"))
    assert train.x.shape == (4, 3, 96, 96) and test.x.shape == (3, 3, 96, 96) and train.num_classes == 10
    assert np.array_equal(train.y, data["train"][1].astype(np.int64) - 1)  # 1..10 -> 0..9
    np.testing.assert_array_equal(train.x, data["train"][0].astype(np.float32) / np.float32(255))  # orientation
    small, _ = load_dataset(_cfg(name="stl10", root=str(tmp_path), image_size=32))
    assert small.x.shape == (4, 3, 32, 32) and small.x.dtype == np.float32 and small.x.flags.c_contiguous


def test_svhn_mat_files(tmp_path, no_md5):
    data = write_svhn(tmp_path)
    train, test = load_dataset(_cfg(name="svhn", root=str(tmp_path), normalization="none"))
    assert train.x.shape == (7, 3, 32, 32) and test.x.shape == (4, 3, 32, 32)
    labels = data["train"][1].astype(np.int64)
    assert np.array_equal(train.y, np.where(labels == 10, 0, labels))
    np.testing.assert_array_equal(train.x, data["train"][0].astype(np.float32) / np.float32(255))


def test_corrupt_file_fails_md5_as_one_config_error(tmp_path):
    write_cifar10(tmp_path)  # real MD5 checks on: the tiny files do not match
    with pytest.raises(ConfigError) as info:
        load_dataset(_cfg(name="cifar10", root=str(tmp_path)))
    msg = str(info.value)
    assert info.value.field == "dataset.root" and "corrupt" in msg and "CIFAR10(" in msg and "\n" not in msg


# ---------------------------------------------------------------------------------------------------------
# Missing roots and files: one ConfigError naming the files, where, and how to get them
# ---------------------------------------------------------------------------------------------------------

TORCHVISION = ["mnist", "fashion_mnist", "emnist", "cifar10", "cifar100", "stl10", "svhn"]


@pytest.mark.parametrize("name", TORCHVISION)
def test_missing_root_and_files_name_the_files(tmp_path, name):
    files = DATASETS[name].files(_cfg(name=name))
    err = _config_error({"dataset": {"name": name}})
    assert err.field == "dataset.root" and "set dataset.root" in str(err) and files[0] in str(err)
    err = _config_error({"dataset": {"name": name, "root": str(tmp_path / "nowhere")}})
    assert err.field == "dataset.root" and "does not exist" in str(err)
    assert all(f in str(err) for f in files) and "torchvision.datasets." in str(err)
    err = _config_error({"dataset": {"name": name, "root": str(tmp_path)}})
    assert f"{len(files)} file(s) of {name} missing" in str(err) and all(f in str(err) for f in files)
    with pytest.raises(ConfigError, match="missing under"):
        load_dataset(_cfg(name=name, root=str(tmp_path)))


def test_emnist_files_follow_the_split_and_gz_is_named(tmp_path):
    write_emnist(tmp_path, "letters")
    err = _config_error({"dataset": {"name": "emnist", "root": str(tmp_path), "split": "balanced"}})
    assert "emnist-balanced-train-images-idx3-ubyte" in str(err) and "letters" not in str(err).split("get them")[0]
    raw = tmp_path / "MNIST" / "raw"
    raw.mkdir(parents=True)
    (raw / "train-images-idx3-ubyte.gz").write_bytes(b"")
    err = _config_error({"dataset": {"name": "mnist", "root": str(tmp_path)}})
    assert "4 file(s)" in str(err) and "gunzip" in str(err)


def test_download_skips_the_file_check_but_needs_a_root(tmp_path):
    config = load_experiment({"dataset": {"name": "cifar10", "download": True, "root": str(tmp_path / "new")}})
    assert config.dataset.download
    err = _config_error({"dataset": {"name": "cifar10", "download": True}})
    assert err.field == "dataset.root" and "downloads into it" in str(err)


def test_truncated_idx_file_is_one_config_error(tmp_path):
    write_mnist(tmp_path)
    path = tmp_path / "MNIST" / "raw" / "train-images-idx3-ubyte"
    path.write_bytes(path.read_bytes()[:10])
    with pytest.raises(ConfigError) as info:
        load_dataset(_cfg(name="mnist", root=str(tmp_path)))
    assert info.value.field == "dataset.root" and "could not read mnist (train)" in str(info.value)


# ---------------------------------------------------------------------------------------------------------
# Config validation
# ---------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("dataset,field,needles", [
    ({"name": "imagenet1k"}, "dataset.name", ["digits", "synthetic", "cifar100", "stl10", "svhn"]),
    ({"name": "mnist", "normalization": "zscore"}, "dataset.normalization", ["none", "mnist", "imagenet", "cifar10"]),
    ({"name": "mnist", "normalization": "imagenet"}, "dataset.normalization", ["3 channels", "mnist"]),
    ({"name": "synthetic", "normalization": "mnist"}, "dataset.normalization", ["none"]),
    ({"name": "emnist", "split": "kanji"}, "dataset.split", ["letters", "balanced", "byclass"]),
    ({"name": "mnist", "split": "letters"}, "dataset.split", ["emnist"]),
    ({"name": "digits", "emnist_upright": True}, "dataset.emnist_upright", ["emnist"]),
    ({"name": "digits", "synthetic_alpha": 0.5}, "dataset.synthetic_alpha", ["synthetic"]),
    ({"name": "mnist", "root": "/x", "synthetic_class_means": True}, "dataset.synthetic_class_means", ["synthetic"]),
    ({"name": "synthetic", "synthetic_alpha": -1}, "dataset.synthetic_alpha", [">= 0"]),
    ({"name": "synthetic", "image_size": 32}, "dataset.image_size", ["vector"]),
    ({"name": "sample_image"}, "dataset.name", ["source image", "public.source: image", "china", "flower"]),
])
def test_bad_dataset_options_list_what_is_allowed(dataset, field, needles):
    err = _config_error({"dataset": dataset})
    assert err.field == field and all(n in str(err) for n in needles), str(err)


def test_sample_image_is_not_a_labelled_dataset():
    with pytest.raises(ConfigError, match="source image"):
        load_dataset(DatasetConfig(name="sample_image"))


def test_every_default_normalization_exists():
    for name, spec in DATASETS.items():
        assert spec.default_normalization in NORMALIZATIONS, name


# ---------------------------------------------------------------------------------------------------------
# Embedded datasets
# ---------------------------------------------------------------------------------------------------------

def test_digits32_is_digits_upscaled_to_three_channels():
    train, test = load_dataset(_cfg(name="digits"))
    train32, test32 = load_dataset(_cfg(name="digits32"))
    assert train32.x.shape == (len(train), 3, 32, 32) and np.array_equal(train32.y, train.y)
    assert np.array_equal(test32.y, test.y) and train32.x.flags.c_contiguous
    assert np.array_equal(train32.x[:, 0], train32.x[:, 2]) and 0 <= train32.x.min() and train32.x.max() <= 1
    np.testing.assert_allclose(train32.x.mean(axis=(1, 2, 3)), train.x.mean(axis=(1, 2, 3)), atol=0.02)


def test_synthetic_is_deterministic_grouped_and_held_out():
    cfg = _cfg(name="synthetic", synthetic_clients=12, synthetic_seed=3)
    (train, test), (train_b, test_b) = load_dataset(cfg), load_dataset(cfg)
    _check_arrays(train)
    assert train.x.shape[1:] == (60,) and train.num_classes == 10
    assert np.array_equal(train.x, train_b.x) and np.array_equal(test.y, test_b.y)
    assert set(np.unique(train.groups)) == set(range(12)) == set(np.unique(test.groups))
    x, y, groups = generate_synthetic(1.0, 1.0, 12, 3)
    for k in range(12):  # each client's samples split 80/20 between train and test, nothing lost or shared
        n_k = int((groups == k).sum())
        n_test = int((test.groups == k).sum())
        assert n_test + int((train.groups == k).sum()) == n_k and n_test == max(1, round(0.2 * n_k))
        assert n_k >= 50  # lognormal(4, 2) + 50
    both = np.concatenate([train.x, test.x])
    assert len(np.unique(both, axis=0)) == len(x)
    through_cfg, _ = load_dataset(_cfg(name="synthetic", synthetic_clients=12, synthetic_seed=3,
                                       synthetic_alpha=2.0, synthetic_class_means=True))
    assert np.array_equal(through_cfg.x, train.x) and not np.array_equal(through_cfg.y, train.y)
    other, _ = load_dataset(_cfg(name="synthetic", synthetic_clients=12, synthetic_seed=4))
    assert other.x.shape != train.x.shape or not np.array_equal(other.x, train.x)


def test_synthetic_alpha_beta_and_sizes_change_the_data():
    x0, y0, g0 = generate_synthetic(0.0, 0.0, 5, 0, samples=200)
    xa, ya, _ = generate_synthetic(1.0, 0.0, 5, 0, samples=200)
    xb, yb, _ = generate_synthetic(0.0, 1.0, 5, 0, samples=200)
    assert np.array_equal(np.bincount(g0), [200] * 5)
    # As in the paper, one u_k per client shifts every logit by the same u_k(Σx + 1): α cannot move labels.
    assert np.array_equal(x0, xa) and np.array_equal(y0, ya)
    xc0, yc0, _ = generate_synthetic(0.0, 0.0, 5, 0, samples=200, class_means=True)
    xc, yc, _ = generate_synthetic(2.0, 0.0, 5, 0, samples=200, class_means=True)
    assert np.array_equal(xc0, xc) and (yc0 != yc).mean() > 0.1  # per-class means: α moves the labels
    assert not np.array_equal(x0, xb)  # β moves the input means
    # Σ_jj = j^{-1.2}: per-client input variance falls with the coordinate index
    x, _, _ = generate_synthetic(1.0, 1.0, 1, 7, samples=20_000)
    np.testing.assert_allclose(x.var(axis=0)[[0, 9, 59]], [1.0, 10 ** -1.2, 60 ** -1.2], rtol=0.1)
    # a larger β spreads client means further apart
    spread = [generate_synthetic(0.0, b, 40, 1, samples=50)[0].reshape(40, 50, 60).mean(axis=(1, 2)).std()
              for b in (0.0, 5.0)]
    assert spread[1] > 3 * spread[0]


@pytest.mark.parametrize("name", ["china", "flower.jpg"])
def test_sample_image_is_three_channel_unit_range(name):
    image = load_source_image(name)
    assert image.dtype == np.float32 and image.ndim == 3 and image.shape[0] == 3 and image.shape[1:] == (427, 640)
    assert 0.0 <= image.min() and image.max() <= 1.0 and image.std() > 0.05


def test_noise_source_image_is_seeded_and_unknown_names_listed():
    a, b = load_source_image("noise"), load_source_image("noise")
    assert a.shape == (3, 1920, 2560) and np.array_equal(a, b)
    with pytest.raises(ConfigError, match="allowed: china, flower, noise, strokes"):
        load_source_image("ameyoko.jpg")


def test_strokes_source_image_is_seeded_sparse_ink_on_black():
    """The generated image for handwriting: the same pixels every call, grey (three equal channels), mostly blank
    background with bright strokes, as the digits are, unlike a photo."""
    a, b = load_source_image("strokes"), load_source_image("strokes")
    assert a.shape == (3, 768, 1024) and a.dtype == np.float32 and np.array_equal(a, b)
    assert np.array_equal(a[0], a[1]) and np.array_equal(a[0], a[2])
    assert 0.0 <= a.min() and a.max() <= 1.0
    ink = a[0] > 0.5
    assert 0.05 < ink.mean() < 0.3  # strokes cover a minority of the image
    assert (a[0] < 0.05).mean() > 0.6  # most of it is blank, as the digits' background
    # a photo is neither: china's pixels are mostly mid-grey
    photo = load_source_image("china")
    assert (photo.mean(axis=0) < 0.05).mean() < 0.2


def test_normalize_uses_the_private_datasets_statistics():
    x = np.full((2, 3, 4, 4), 0.5, dtype=np.float32)
    out = normalize(x, _cfg(name="digits32", normalization="cifar10"))
    np.testing.assert_allclose(out[0, :, 0, 0], (0.5 - np.array([0.4914, 0.4822, 0.4465])) /
                               np.array([0.2023, 0.1994, 0.2010]), rtol=1e-5)
    assert np.array_equal(x, np.full_like(x, 0.5))  # input untouched


# ---------------------------------------------------------------------------------------------------------
# Public data
# ---------------------------------------------------------------------------------------------------------

def _indexed(n=101) -> ArrayDataset:
    """A dataset whose inputs encode their index, so public/local membership can be read off."""
    x = np.arange(n, dtype=np.float32).reshape(n, 1, 1, 1)
    return ArrayDataset(x, np.arange(n, dtype=np.int64) % 10, 10, groups=np.arange(n) % 3,
                        coarse_y=np.arange(n) % 2)


def test_first_half_pool_is_nested_disjoint_and_the_same_for_every_seed():
    train = _indexed(101)
    local, pub = split_public(train, _public(source="train_split"), 0, DatasetConfig())
    assert np.array_equal(pub.ravel(), np.arange(50)) and np.array_equal(local.x.ravel(), np.arange(50, 101))
    assert np.array_equal(local.y, train.y[50:]) and np.array_equal(local.groups, train.groups[50:])
    assert np.array_equal(local.coarse_y, train.coarse_y[50:])
    sizes = {}
    for seed in (1, 2):
        for n in (10, 30):
            local_n, sizes[seed, n] = split_public(train, _public(source="train_split", size=n), seed, DatasetConfig())
            assert np.array_equal(local_n.x, local.x)  # the local pool does not depend on |D_0|
    assert np.array_equal(sizes[1, 10], sizes[1, 30][:10]) and np.array_equal(sizes[1, 30], sizes[2, 30])
    assert isinstance(pub, np.ndarray) and pub.dtype == np.float32 and pub.shape[1:] == train.input_shape


def test_random_pool_is_seeded_nested_and_disjoint():
    train = _indexed(101)
    cfg = _public(source="train_split", split="random", size=40)
    local, pub = split_public(train, cfg, 5, DatasetConfig())
    local_b, pub_b = split_public(train, cfg, 5, DatasetConfig())
    _, pub_c = split_public(train, cfg, 6, DatasetConfig())
    _, pub_small = split_public(train, _public(source="train_split", split="random", size=10), 5, DatasetConfig())
    ids, local_ids = pub.ravel().astype(int), local.x.ravel().astype(int)
    assert np.array_equal(pub, pub_b) and not np.array_equal(pub, pub_c) and np.array_equal(pub_small, pub[:10])
    assert len(local) == 51 and not set(ids) & set(local_ids) and np.all(np.diff(local_ids) > 0)
    assert np.array_equal(local.y, train.y[local_ids])


def test_public_none_and_too_large_size():
    train = _indexed(20)
    local, pub = split_public(train, _public(), 0, DatasetConfig())
    assert local is train and pub.shape == (0, 1, 1, 1)
    with pytest.raises(ConfigError) as info:
        split_public(train, _public(source="train_split", size=11), 0, DatasetConfig())
    assert info.value.field == "public.size" and "at most 10" in str(info.value)


def test_public_image_source_returns_a_crop_pool_of_the_private_side():
    # more in tests/unit/test_public_pool.py
    train, _ = load_dataset(_cfg(name="digits"))
    local, pub = split_public(train, _public(source="image", image="flower", size=20), 0, _cfg(name="digits"))
    assert local is train and pub.shape == (20, 1, 8, 8) and pub.dtype == np.float32
    assert 0 <= pub.min() and pub.max() <= 1  # digits: no normalisation


def test_public_dataset_is_conformed_and_normalised_like_the_private_data(tmp_path, no_md5):
    data = write_cifar100(tmp_path, n_train=10, n_test=6)
    private_cfg = _cfg(name="digits32", normalization="cifar10")
    train, _ = load_dataset(private_cfg)
    cfg = _public(source="dataset", dataset="cifar100", root=str(tmp_path), size=4)
    local, pub = split_public(train, cfg, 0, private_cfg)
    assert local is train and pub.shape == (4, 3, 32, 32) and pub.dtype == np.float32
    np.testing.assert_allclose(pub, _expected(data["train"][0][:4].reshape(-1, 3, 32, 32), "cifar10"), atol=1e-6)
    # train+test, a seeded random subset: nested across sizes, order kept across the two splits
    both = np.concatenate([data["train"][0], data["test"][0]]).reshape(-1, 3, 32, 32)
    cfg = _public(source="dataset", dataset="cifar100", dataset_split="train+test", split="random", size=12,
                  root=str(tmp_path))
    _, pub12 = split_public(train, cfg, 3, private_cfg)
    order = np.random.default_rng(3).permutation(16)[:12]
    np.testing.assert_allclose(pub12, _expected(both[order], "cifar10"), atol=1e-6)


def test_public_stl10_unlabeled_resized_and_mnist_to_three_channels(tmp_path, no_md5):
    write_stl10(tmp_path)
    mnist = write_mnist(tmp_path)
    private_cfg = _cfg(name="digits32")
    train, _ = load_dataset(private_cfg)
    _, pub = split_public(train, _public(source="dataset", dataset="stl10", dataset_split="unlabeled"), 0,
                          _cfg(name="digits32", root=str(tmp_path)))
    assert pub.shape == (5, 3, 32, 32) and 0 <= pub.min() and pub.max() <= 1  # digits32 default: none
    _, pub = split_public(train, _public(source="dataset", dataset="mnist", root=str(tmp_path)), 0, private_cfg)
    assert pub.shape == (12, 3, 32, 32) and np.array_equal(pub[:, 0], pub[:, 1])
    np.testing.assert_allclose(pub.mean(axis=(1, 2, 3)), mnist["train"][0].mean(axis=(1, 2)) / 255, atol=0.02)


def test_public_dataset_missing_files_is_one_config_error(tmp_path):
    cfg = _public(source="dataset", dataset="stl10", dataset_split="unlabeled", root=str(tmp_path / "none"))
    with pytest.raises(ConfigError) as info:
        check_public_available(cfg, DatasetConfig(name="cifar10", root=str(tmp_path)))
    assert info.value.field == "public.root" and "unlabeled_X.bin" in str(info.value)
    cfg = _public(source="dataset", dataset="svhn", dataset_split="extra")
    (tmp_path / "train_32x32.mat").write_bytes(b"")
    (tmp_path / "test_32x32.mat").write_bytes(b"")
    with pytest.raises(ConfigError) as info:
        split_public(load_dataset(_cfg(name="digits32"))[0], cfg, 0, _cfg(name="digits32", root=str(tmp_path)))
    msg = str(info.value)
    assert info.value.field == "dataset.root" and "1 file(s)" in msg and "extra_32x32.mat" in msg


@pytest.mark.parametrize("data,field,needle", [
    ({"source": "dataset"}, "public.dataset", "stl10"),
    ({"source": "dataset", "dataset": "imagenet"}, "public.dataset", "cifar100"),
    ({"source": "dataset", "dataset": "cifar100", "dataset_split": "unlabeled"}, "public.dataset_split",
     "train+test"),
    ({"source": "train_split", "dataset": "stl10"}, "public.dataset", "source is dataset"),
    ({"source": "none", "size": 10}, "public.size", "none"),
    ({"source": "train_split", "seed": 3}, "public.seed", "source is image"),
    ({"source": "both"}, "public.source", "train_split"),
    ({"source": "train_split", "split": "last_half"}, "public.split", "first_half"),
    ({"source": "dataset", "dataset": "stl10", "fraction": 0.3}, "public.fraction", "train_split"),
])
def test_public_config_errors_name_the_field(data, field, needle):
    """The section's own rules when it is built; the public dataset and its split against the catalog at pre-flight."""
    with pytest.raises(ConfigError) as info:
        check_public_dataset(build(PublicDataConfig, data, "public"))
    assert info.value.field == field and needle in str(info.value), str(info.value)


def test_channel_conversion_without_resize():
    from platform.data.datasets import to_float_images

    grey = RNG.integers(0, 256, (3, 1, 5, 5), dtype=np.uint8)
    rgb = to_float_images(grey, channels=3)
    assert rgb.shape == (3, 3, 5, 5) and all(np.array_equal(rgb[:, c], grey[:, 0] / np.float32(255)) for c in range(3))
    colour = RNG.integers(0, 256, (2, 3, 5, 5), dtype=np.uint8)
    luma = to_float_images(colour, channels=1)
    expected = np.tensordot([0.299, 0.587, 0.114], colour / 255.0, axes=([0], [1]))
    np.testing.assert_allclose(luma[:, 0], expected, atol=1e-6)


def test_digits_are_sklearns_load_digits_read_without_importing_sklearn():
    """The digits are read from the file scikit-learn bundles (its import cost every run on digits 0.9 s): the same
    arrays as ``load_digits``, and scikit-learn is not imported."""
    import subprocess
    import sys

    from sklearn.datasets import load_digits

    from platform.data.datasets import digits_images_and_labels
    from tests.conftest import REPO_ROOT

    images, target = digits_images_and_labels()
    bunch = load_digits()
    assert images.dtype == bunch.images.dtype and target.dtype == bunch.target.dtype
    assert np.array_equal(images, bunch.images) and np.array_equal(target, bunch.target)
    done = subprocess.run([sys.executable, "-c", "import sys; from platform.data import load_dataset; "
                                                 "from platform.config.experiment import DatasetConfig; "
                                                 "load_dataset(DatasetConfig(name='digits')); "
                                                 "print('sklearn' in sys.modules)"],
                          cwd=REPO_ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False", done.stdout
