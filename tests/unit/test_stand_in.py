"""``stand_in``: generated data of the real datasets' shapes, classes and sizes in place of every dataset read from
files (platform.data.stand_in), through the production paths: load_dataset, public data, the source photo, preflight.

Only MNIST is generated at its full size (once); the other splits are checked against the table and generated at a
small fraction, so the file runs in a few seconds."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from platform.config.experiment import DatasetConfig, build_experiment
from platform.config.public_data import PublicDataConfig
from platform.config.schema import build
from platform.data import load_dataset
from platform.data.datasets import DATASETS, EMNIST_SPLITS, NOISE_IMAGE_SHAPE, check_dataset_available, read_split
from platform.data.patch_pool_source import generate_pool, plan_patch_pool, resolve_source_image
from platform.data.public import check_public_available, take_public
from platform.data.stand_in import (CHUNK, CIFAR100_COARSE, EMNIST_TABLE, TABLE, generate_split, spec_of, split_size,
                                    stand_in_photo)
from platform.errors import ConfigError
from platform.preflight import check_experiment, load_experiment

TORCHVISION = [name for name, spec in DATASETS.items() if spec.read is not None]
# (dataset, EMNIST split, split) -> (N, C, H, W, classes): the real datasets as torchvision reads them
REAL = {
    ("mnist", None, "train"): (60_000, 1, 28, 28, 10), ("mnist", None, "test"): (10_000, 1, 28, 28, 10),
    ("fashion_mnist", None, "train"): (60_000, 1, 28, 28, 10), ("fashion_mnist", None, "test"): (10_000, 1, 28, 28, 10),
    ("emnist", "letters", "train"): (124_800, 1, 28, 28, 26), ("emnist", "letters", "test"): (20_800, 1, 28, 28, 26),
    ("emnist", "byclass", "train"): (697_932, 1, 28, 28, 62), ("emnist", "byclass", "test"): (116_323, 1, 28, 28, 62),
    ("emnist", "bymerge", "train"): (697_932, 1, 28, 28, 47), ("emnist", "bymerge", "test"): (116_323, 1, 28, 28, 47),
    ("emnist", "balanced", "train"): (112_800, 1, 28, 28, 47), ("emnist", "balanced", "test"): (18_800, 1, 28, 28, 47),
    ("emnist", "digits", "train"): (240_000, 1, 28, 28, 10), ("emnist", "digits", "test"): (40_000, 1, 28, 28, 10),
    ("emnist", "mnist", "train"): (60_000, 1, 28, 28, 10), ("emnist", "mnist", "test"): (10_000, 1, 28, 28, 10),
    ("cifar10", None, "train"): (50_000, 3, 32, 32, 10), ("cifar10", None, "test"): (10_000, 3, 32, 32, 10),
    ("cifar100", None, "train"): (50_000, 3, 32, 32, 100), ("cifar100", None, "test"): (10_000, 3, 32, 32, 100),
    ("stl10", None, "train"): (5_000, 3, 96, 96, 10), ("stl10", None, "test"): (8_000, 3, 96, 96, 10),
    ("stl10", None, "unlabeled"): (100_000, 3, 96, 96, 10),
    ("svhn", None, "train"): (73_257, 3, 32, 32, 10), ("svhn", None, "test"): (26_032, 3, 32, 32, 10),
    ("svhn", None, "extra"): (531_131, 3, 32, 32, 10),
}


def _stand_in(name: str, fraction: float = 1.0, **kw) -> DatasetConfig:
    return DatasetConfig(name=name, stand_in=True, stand_in_fraction=fraction, **kw)


def test_the_table_covers_every_torchvision_dataset_split_and_emnist_split():
    assert set(TABLE) | {"emnist"} == set(TORCHVISION)
    assert set(EMNIST_TABLE) == set(EMNIST_SPLITS)
    assert {(n, v, s) for n, v, s in REAL} == {(n, v, s) for n in TORCHVISION
                                                for v in (EMNIST_TABLE if n == "emnist" else [None])
                                                for s in spec_of(n, v).sizes}
    for name in TORCHVISION:
        assert tuple(spec_of(name, "letters").sizes) == DATASETS[name].splits  # exactly the splits read_split takes
        assert spec_of(name, "letters").channels == DATASETS[name].channels
    for variant, classes in EMNIST_SPLITS.items():
        assert EMNIST_TABLE[variant].num_classes == classes
    # CIFAR-100's own fine -> coarse map: 20 superclasses of 5 fine classes each
    assert len(CIFAR100_COARSE) == 100 and np.bincount(CIFAR100_COARSE).tolist() == [5] * 20


@pytest.mark.parametrize("key", sorted(REAL, key=str))
def test_every_split_has_the_real_shape_classes_and_size(key):
    name, variant, split = key
    n, c, h, w, classes = REAL[key]
    assert split_size(name, split, variant) == n  # fraction 1: the real size, checked without generating it
    fraction = 0.002
    x, y, num_classes, coarse = generate_split(name, split, variant, fraction)
    assert x.dtype == np.uint8 and x.shape == (round(n * fraction), c, h, w) and x.flags.c_contiguous
    assert num_classes == classes
    if split == "unlabeled":
        assert y is None and coarse is None
    else:
        assert y.dtype == np.int64 and y.min() >= 0 and y.max() < classes
        assert (coarse is not None) == (name == "cifar100")


def test_full_mnist_is_fast_has_the_real_class_counts_and_is_as_the_reader_gives_it():
    import time

    start = time.perf_counter()
    raw = read_split("mnist", None, "train", cfg=_stand_in("mnist"))
    took = time.perf_counter() - start
    assert took < 5, f"60,000 stand-in MNIST images took {took:.1f} s"  # ~0.15 s; generous for busy CI machines
    assert raw.x.shape == (60_000, 1, 28, 28) and raw.x.dtype == np.uint8 and raw.y.dtype == np.int64
    counts = np.bincount(raw.y, minlength=10)
    assert raw.num_classes == 10 and raw.coarse_y is None  # the real digits' counts: 5 the rarest (5,421)
    assert counts.tolist() == [5923, 6742, 5958, 6131, 5842, 5421, 5918, 6265, 5851, 5949]
    test = read_split("mnist", None, "test", cfg=_stand_in("mnist"))
    assert np.bincount(test.y, minlength=10).tolist() == [980, 1135, 1032, 1010, 982, 892, 958, 1028, 974, 1009]
    assert raw.x.std() > 20  # images, not a constant


def test_deterministic_and_a_fraction_is_a_prefix_of_the_full_split():
    a = generate_split("cifar100", "train", None, 0.1)
    b = generate_split("cifar100", "train", None, 0.1)
    small = generate_split("cifar100", "train", None, 0.03)
    assert all(np.array_equal(u, v) for u, v in zip((a[0], a[1], a[3]), (b[0], b[1], b[3])))
    assert len(a[1]) == 5_000 and len(small[1]) == 1_500 and 5_000 > CHUNK  # a prefix across chunk boundaries
    assert np.array_equal(a[0][:1_500], small[0]) and np.array_equal(a[1][:1_500], small[1])
    assert np.array_equal(a[3], np.asarray(CIFAR100_COARSE)[a[1]])
    # each (dataset, EMNIST split, split) has its own stream
    assert not np.array_equal(generate_split("cifar100", "test", None, 0.01)[0][:50], a[0][:50])
    assert not np.array_equal(generate_split("cifar10", "train", None, 0.01)[0][:50], a[0][:50])
    letters = generate_split("emnist", "train", "letters", 0.001)[0]
    assert not np.array_equal(letters, generate_split("emnist", "train", "digits", 0.0005)[0][:len(letters)])


def test_fraction_scales_every_split():
    for fraction, n in ((1.0, 50_000), (0.5, 25_000), (0.02, 1_000), (1e-9, 1)):
        assert split_size("cifar10", "train", None, fraction) == n
    train, test = load_dataset(_stand_in("cifar10", 0.02))
    assert (len(train), len(test)) == (1_000, 200)


def test_stand_in_mnist_is_learnable():
    """A nearest-class-mean classifier fit on 1,200 stand-in MNIST images (fraction 0.02) beats chance (10 %) by far
    on the stand-in test split: the classes have structure a model can learn in a few rounds."""
    train, test = load_dataset(_stand_in("mnist", 0.02, normalization="none"))
    x, xt = train.x.reshape(len(train), -1), test.x.reshape(len(test), -1)
    means = np.stack([x[train.y == k].mean(axis=0) for k in range(10)])
    distances = (xt ** 2).sum(1)[:, None] - 2 * xt @ means.T + (means ** 2).sum(1)[None]
    accuracy = float((distances.argmin(axis=1) == test.y).mean())
    assert accuracy > 0.5, accuracy  # ~0.75; chance is 0.1


@pytest.mark.parametrize("name,split,classes,shape", [("mnist", None, 10, (1, 28, 28)),
                                                      ("cifar100", None, 100, (3, 32, 32)),
                                                      ("emnist", "byclass", 62, (1, 28, 28))])
def test_load_dataset_without_a_root(name, split, classes, shape):
    cfg = _stand_in(name, 0.001, split=split)
    assert cfg.root is None
    train, test = load_dataset(cfg)
    assert train.x.dtype == np.float32 and train.input_shape == shape and train.num_classes == classes
    assert test.input_shape == shape and len(test) > 0
    assert (train.coarse_y is not None) == (name == "cifar100")


def test_emnist_letters_labels_are_zero_based_like_the_reader():
    train, _ = load_dataset(_stand_in("emnist", 0.01, split="letters"))
    assert train.num_classes == 26 and train.y.min() == 0 and train.y.max() == 25


def test_preflight_passes_without_files_under_stand_in_and_fails_without_it(tmp_path):
    paper = {"dataset": {"name": "cifar10", "root": str(tmp_path / "absent")},
             "public": {"source": "dataset", "dataset": "stl10", "dataset_split": "unlabeled", "size": 80_000}}
    with pytest.raises(ConfigError) as info:
        load_experiment(paper)
    assert info.value.field == "dataset.root"
    config = load_experiment({**paper, "stand_in": True})
    assert config.dataset.stand_in and config.dataset.stand_in_fraction == 1.0
    check_dataset_available(_stand_in("svhn"), extra_files=("extra_32x32.mat",))
    no_root = build_experiment({"stand_in": True, "dataset": {"name": "emnist", "split": "byclass"}})
    check_experiment(no_root)
    with pytest.raises(ConfigError) as info:  # the same config without stand_in still needs its files
        check_experiment(dataclasses.replace(no_root, stand_in=False))
    assert info.value.field == "dataset.root"
    embedded = load_experiment({"stand_in": True})  # digits: unchanged
    assert load_dataset(embedded.dataset)[0].input_shape == (1, 8, 8)


def test_public_stl10_unlabeled_feeds_the_public_data_path():
    config = build_experiment({"stand_in": True, "stand_in_fraction": 0.01, "dataset": {"name": "cifar10"},
                               "public": {"source": "dataset", "dataset": "stl10", "dataset_split": "unlabeled",
                                          "size": 800}})
    check_public_available(config.public, config.dataset)
    train, _ = load_dataset(config.dataset)
    split = take_public(train, config.public, 0, config.dataset)
    assert split.x.shape == (800, 3, 32, 32) and split.x.dtype == np.float32  # 96×96 resized to the private 32×32
    assert split.local is train
    # the whole unlabeled split at fraction 0.01: 1,000 of its 100,000 images
    whole = dataclasses.replace(config.public, size=None)
    assert take_public(train, whole, 0, config.dataset).x.shape[0] == 1_000


def test_a_source_photo_file_becomes_a_generated_photo_of_the_papers_size(tmp_path, monkeypatch):
    absent = str(tmp_path / "street.jpg")
    public = build(PublicDataConfig, {"source": "image", "image": absent, "size": 64}, "public")
    with pytest.raises(ConfigError) as info:
        check_public_available(public, DatasetConfig(name="cifar10", root=str(tmp_path)))
    assert info.value.field == "public.image"
    check_public_available(public, _stand_in("cifar10"))
    image = resolve_source_image(absent, stand_in=True)
    assert image.stand_in and (image.height, image.width) == NOISE_IMAGE_SHAPE
    assert image.identity() == {"image": "stand_in", "image_height": 1920, "image_width": 2560}
    assert resolve_source_image("noise", stand_in=True) == resolve_source_image("noise")  # bundled: unchanged
    plan = plan_patch_pool(public, (3, 32, 32), seed=0, stand_in=True)
    assert plan.stage_fields()["image"] == "stand_in"
    assert plan.stage().version != plan_patch_pool(build(PublicDataConfig, {"source": "image", "size": 64}, "public"),
                                                   (3, 32, 32), seed=0).stage().version
    import algorithms.common.patch_pool as crops

    seen = []
    monkeypatch.setattr(crops, "make_patch_pool", lambda image, *args, **kw: seen.append((image, args)))
    small = dataclasses.replace(plan, image=dataclasses.replace(plan.image, height=120, width=160))
    generate_pool(small)  # the pool is cut from the generated photo (the crops themselves: test_public_pool.py)
    assert np.array_equal(seen[0][0], stand_in_photo((120, 160))) and seen[0][1] == (64, 32, 0)
    photo = stand_in_photo((48, 64))
    assert photo.shape == (3, 48, 64) and photo.dtype == np.float32 and 0 <= photo.min() and photo.max() <= 1
    assert np.array_equal(photo, stand_in_photo((48, 64)))


def test_stand_in_runs_never_share_data_or_cache_entries_with_real_ones():
    from platform.runtime.federation import SharedData, one_round_stage_fields
    from platform.runtime.pretrain import pretrain_fields
    from platform.stages.memo import memo_fields

    real = build_experiment({"dataset": {"name": "cifar10", "root": "/data"}})
    fake = build_experiment({"dataset": {"name": "cifar10", "root": "/data"}, "stand_in": True})
    smaller = build_experiment({"dataset": {"name": "cifar10", "root": "/data"}, "stand_in": True,
                                "stand_in_fraction": 0.5})
    for fields in (one_round_stage_fields, lambda c: memo_fields(c, None), lambda c: pretrain_fields(c, "cnn")):
        keys = [fields(c) for c in (real, fake, smaller)]
        assert keys[0] != keys[1] and keys[1] != keys[2] and keys[0] != keys[2]
    shared = SharedData(fake.dataset, None, None, np.zeros(1), (3, 32, 32), 10, public=fake.public,
                        val_fraction=fake.server.val_fraction)
    assert shared.serves(fake) and not shared.serves(real) and not shared.serves(smaller)
    # MLflow logs every config field (config.flat()): the flag and its copy in the dataset section
    assert {k: v for k, v in fake.flat().items() if "stand_in" in k} == {
        "stand_in": True, "stand_in_fraction": 1.0, "dataset.stand_in": True, "dataset.stand_in_fraction": 1.0}


@pytest.mark.parametrize("data,field,words", [
    ({"stand_in_fraction": 0.5}, "stand_in_fraction", "only applies with stand_in: true"),
    ({"stand_in": True, "stand_in_fraction": 0}, "stand_in_fraction", "must be > 0"),
    ({"stand_in": True, "stand_in_fraction": 1.5}, "stand_in_fraction", "must be <= 1"),
    ({"stand_in": "yes"}, "stand_in", "true or false"),
    ({"dataset": {"stand_in": True}}, "dataset.stand_in", "set stand_in there"),
    ({"dataset": {"stand_in_fraction": 0.5}}, "dataset.stand_in_fraction", "set stand_in_fraction there"),
])
def test_bad_stand_in_settings_are_one_line_config_errors(data, field, words):
    with pytest.raises(ConfigError) as info:
        build_experiment(data)
    assert info.value.field == field and words in str(info.value) and "\n" not in str(info.value)
