"""``public.source: image``: the seeded, stage-cached crop pool every method sees (docs/methods/single_image.md §2).

Real components throughout: the bundled photos and PNG/text files written here, the stage cache on tmp_path, a
local Ray for ``share_dataset`` and a local MLflow store in tmp_path (SQLite; MLflow 3 refuses the plain file
store) whose artifacts are files, for the logged grid. Pools stay at ≤ 500 crops.
"""
from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from algorithms.common.patch_pool import make_patch_pool, pool_to_float
from platform.stages.cache import StageCache
from platform.config.experiment import DatasetConfig, build_experiment
from platform.data import load_dataset
from platform.data.datasets import NORMALIZATIONS
from platform.config.public_data import DEFAULT_POOL_SIZE, PatchPoolConfig, PublicDataConfig
from platform.data.patch_pool_source import load_public_image, patch_grid_png, resolve_source_image
from platform.data.public import check_public_available, split_public, take_public
from platform.preflight import load_experiment
from platform.errors import ConfigError
from platform.config.schema import build

ROOT = Path(__file__).resolve().parents[2]
DIGITS32 = DatasetConfig(name="digits32", normalization="cifar10")
DIGITS = DatasetConfig(name="digits")


def _public(**kwargs) -> PublicDataConfig:
    return build(PublicDataConfig, {"source": "image", **kwargs}, "public")


def _digest(x: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(x).tobytes()).hexdigest()


@pytest.fixture(scope="module")
def digits32_train():
    return load_dataset(DIGITS32)[0]


def _png(path: Path, height: int, width: int, seed: int = 0) -> Path:
    rng = np.random.default_rng(seed)
    Image.fromarray(rng.integers(0, 256, size=(height, width, 3), dtype=np.uint8)).save(path)
    return path


# --- determinism and the cache -----------------------------------------------------------------------------------

def test_pool_is_seeded_and_bit_identical_across_calls_and_processes(digits32_train):
    cfg = _public(size=120)
    local, a = split_public(digits32_train, cfg, 7, DIGITS32)
    _, b = split_public(digits32_train, cfg, 7, DIGITS32)
    assert local is digits32_train and np.array_equal(a, b)
    # public.seed replaces the shared data's seed; null means that seed
    _, seeded = split_public(digits32_train, _public(size=120, seed=7), 99, DIGITS32)
    _, other = split_public(digits32_train, _public(size=120, seed=8), 7, DIGITS32)
    assert np.array_equal(seeded, a) and not np.array_equal(other, a)
    code = ("from platform.config.experiment import DatasetConfig\n"
            "from platform.data import load_dataset\n"
            "from platform.config.public_data import PublicDataConfig\nfrom platform.data.public import split_public\n"
            "from platform.config.schema import build\n"
            "import hashlib\n"
            "d = DatasetConfig(name='digits32', normalization='cifar10')\n"
            "cfg = build(PublicDataConfig, {'source': 'image', 'size': 120}, 'public')\n"
            "_, x = split_public(load_dataset(d)[0], cfg, 7, d)\n"
            "print(hashlib.sha256(x.tobytes()).hexdigest())\n")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == _digest(a)


def test_stage_cache_returns_the_same_pool_and_records_a_hit(tmp_path, digits32_train, capsys):
    cache = StageCache(str(tmp_path / "cache"))
    cfg = _public(size=100, image="flower")
    first = take_public(digits32_train, cfg, 3, DIGITS32, cache=cache)
    assert "patch pool: generating 100 crops of 32×32 from flower (seed 3)" in capsys.readouterr().out
    second = take_public(digits32_train, cfg, 3, DIGITS32, cache=cache)
    assert capsys.readouterr().out == ""  # a hit prints nothing
    assert np.array_equal(first.x, second.x) and np.array_equal(first.samples, second.samples)
    assert cache.count("patch_pool", "computed") == 1 and cache.count("patch_pool", "hit") == 1
    # the cached pool is the uncached one, and a new seed is a new entry
    assert np.array_equal(split_public(digits32_train, cfg, 3, DIGITS32)[1], first.x)
    take_public(digits32_train, cfg, 4, DIGITS32, cache=cache)
    assert cache.count("patch_pool", "computed") == 2


def test_an_image_file_is_keyed_by_its_content(tmp_path, digits32_train, monkeypatch):
    path = _png(tmp_path / "photo.png", 90, 120)
    monkeypatch.chdir(tmp_path)
    cfg = _public(size=50, image="photo.png")  # relative to the current directory, kept absolute
    assert cfg.image == str(path)
    image = load_public_image(cfg.image)
    assert image.shape == (3, 90, 120) and image.dtype == np.float32
    assert np.array_equal(image, np.asarray(Image.open(path).convert("RGB")).transpose(2, 0, 1) / np.float32(255))
    cache = StageCache(str(tmp_path / "cache"))
    first = take_public(digits32_train, cfg, 0, DIGITS32, cache=cache)
    _png(path, 90, 120, seed=1)  # new content at the same path: a new pool, not the cached one
    os.utime(path, ns=(1, 1))
    second = take_public(digits32_train, cfg, 0, DIGITS32, cache=cache)
    assert cache.count("patch_pool", "computed") == 2 and not np.array_equal(first.x, second.x)


# --- shapes and normalisation ------------------------------------------------------------------------------------

def test_rgb_pool_is_normalised_with_the_private_statistics(digits32_train):
    split = take_public(digits32_train, _public(size=80), 1, DIGITS32)
    assert split.x.shape == (80, 3, 32, 32) and split.x.dtype == np.float32
    assert split.samples.shape == (64, 3, 32, 32) and split.samples.dtype == np.uint8
    pool = make_patch_pool(load_public_image("china"), 80, 32, seed=1)
    assert np.array_equal(split.samples, pool[:64].numpy())
    norm = NORMALIZATIONS["cifar10"]
    np.testing.assert_allclose(split.x, pool_to_float(pool, norm.mean, norm.std).numpy(), atol=1e-6)


def test_grey_private_data_get_luma_crops_of_their_side():
    train = load_dataset(DIGITS)[0]  # 1×8×8, no normalisation
    split = take_public(train, _public(size=40), 2, DIGITS)
    assert split.x.shape == (40, 1, 8, 8) and split.x.dtype == np.float32
    pool = make_patch_pool(load_public_image("china"), 40, 8, seed=2)
    np.testing.assert_allclose(split.x, pool_to_float(pool, 0.0, 1.0, grayscale=True).numpy(), atol=1e-6)
    assert 0.0 <= split.x.min() and split.x.max() <= 1.0


def test_defaults_are_the_official_pipeline():
    cfg = build(PublicDataConfig, {"source": "image"}, "public")
    assert cfg.size is None and cfg.seed is None and cfg.image == "china" and DEFAULT_POOL_SIZE == 50_000
    assert cfg.patches == PatchPoolConfig() and cfg.patches.settings() == {
        "init_crop": 0.5, "scale": (0.002, 1.0), "ratio": (0.75, 4 / 3), "rot_deg": 30.0, "shear_deg": 30.0,
        "hflip": False, "vflip": False, "jitter_p": 0.5, "jitter": (0.4, 0.4, 0.4, 0.1), "jpeg_quality": None}
    custom = _public(patches={"rot_deg": 10, "scale": [0.01, 1], "jpeg_quality": 90})
    assert custom.patches.rot_deg == 10.0 and custom.patches.scale == (0.01, 1.0)
    assert resolve_source_image("noise").pixels == 1920 * 2560


# --- bad input: one ConfigError naming the field -----------------------------------------------------------------

def _check(data: dict, dataset=DIGITS32) -> None:
    check_public_available(build(PublicDataConfig, data, "public"), dataset)


def test_bad_images_name_public_image(tmp_path):
    (tmp_path / "notes.png").write_text("not an image")
    cases = [({"image": "ameyoko"}, "china, flower, noise"),
             ({"image": str(tmp_path / "missing.jpg")}, "no image file"),
             ({"image": str(tmp_path / "notes.png")}, "cannot read"),
             ({"image": str(tmp_path)}, "not a file")]
    for data, needle in cases:
        with pytest.raises(ConfigError) as info:
            _check({"source": "image", **data})
        assert info.value.field == "public.image" and needle in str(info.value), str(info.value)


def test_pools_larger_than_the_image_allows_are_refused(tmp_path):
    small = str(_png(tmp_path / "small.png", 40, 50))
    with pytest.raises(ConfigError) as info:
        _check({"source": "image", "image": small, "size": 2001}, DIGITS)
    assert info.value.field == "public.size" and "40×50 = 2000 pixels" in str(info.value)
    _check({"source": "image", "image": small, "size": 2000}, DIGITS)  # at the limit: fine
    with pytest.raises(ConfigError) as info:  # 32×32 crops, initial crop floor(0.5 · 40) = 20
        _check({"source": "image", "image": small, "size": 10})
    assert info.value.field == "public.patches.init_crop" and "= 20 pixels" in str(info.value)
    with pytest.raises(ConfigError) as info:  # the default N_pool against a bundled photo
        _check({"source": "image", "size": 427 * 640 + 1})
    assert info.value.field == "public.size"
    with pytest.raises(ConfigError) as info:  # dataset.image_size counts
        _check({"source": "image", "image": small, "size": 10}, DatasetConfig(name="digits", image_size=24))
    assert info.value.field == "public.patches.init_crop"


@pytest.mark.parametrize("data,field,needle", [
    ({"source": "dataset", "dataset": "cifar100", "patches": {"rot_deg": 10}}, "public.patches.rot_deg",
     "source is image"),
    ({"source": "train_split", "seed": 3}, "public.seed", "source is image"),
    ({"source": "none", "size": 10}, "public.size", "none"),
    ({"source": "image", "patches": {"rot_deg": 200}}, "public.patches.rot_deg", "<= 180"),
    ({"source": "image", "patches": {"scale": [0.5, 0.1]}}, "public.patches.scale", "invalid range"),
    ({"source": "image", "patches": {"jitter": [0.4, 0.4, 0.4, 0.9]}}, "public.patches.jitter", "hue"),
    ({"source": "image", "patches": {"blur": 1}}, "public.patches.blur", "unknown key"),
])
def test_config_errors_name_the_field(data, field, needle):
    with pytest.raises(ConfigError) as info:
        build(PublicDataConfig, data, "public")
    assert info.value.field == field and needle in str(info.value), str(info.value)


def test_config_load_checks_the_image_and_the_data():
    base = {"dataset": {"name": "digits32"}, "algorithm": {"name": "fedavg"}}
    with pytest.raises(ConfigError) as info:
        load_experiment({**base, "public": {"source": "image", "image": "/nonexistent.png"}})
    assert info.value.field == "public.image"
    with pytest.raises(ConfigError) as info:
        load_experiment({**base, "dataset": {"name": "synthetic"}, "model": {"name": "mlp"},
                         "public": {"source": "image"}})
    assert info.value.field == "public.source" and "vector data" in str(info.value)
    assert load_experiment({**base, "public": {"source": "image", "size": 500}}).public.size == 500


# --- shared data and the logged grid -----------------------------------------------------------------------------

def test_patch_grid_png_is_8_by_8(tmp_path):
    samples = np.random.default_rng(0).integers(0, 256, size=(64, 3, 8, 8), dtype=np.uint8)
    path = patch_grid_png(samples, str(tmp_path / "grid.png"))
    with Image.open(path) as im:
        assert im.size == (8 * 66 + 2, 8 * 66 + 2)  # 8× zoom to 64 px, 2-px gutters
        arr = np.asarray(im)
    assert np.array_equal(arr[2:66, 2:66], samples[0].transpose(1, 2, 0).repeat(8, 0).repeat(8, 1))
    assert np.array_equal(arr[2:66, 68:132], samples[1].transpose(1, 2, 0).repeat(8, 0).repeat(8, 1))


def test_shared_pool_and_logged_grid(tmp_path, ray_local, tracking_uri):
    from platform.runtime.federation import share_dataset
    from platform.results.tracking import Tracker, log_patch_samples

    config = build_experiment({"dataset": {"name": "digits32"}, "algorithm": {"name": "fedavg"}, "seed": 5,
                               "public": {"source": "image", "size": 200}})
    cache = StageCache(str(tmp_path / "cache"))
    shared = share_dataset(config, cache=cache)
    public_x = ray_local.get(shared.public_ref)
    train = load_dataset(config.dataset)[0]
    _, expected = split_public(train, config.public, config.split_seed(), config.dataset)
    assert public_x.shape == (200, 3, 32, 32) and np.array_equal(public_x, expected)
    assert shared.public_samples.shape == (64, 3, 32, 32) and shared.public_samples.dtype == np.uint8
    assert shared.serves(config) and cache.count("patch_pool", "computed") == 1
    share_dataset(config, cache=cache)
    assert cache.count("patch_pool", "hit") == 1

    tracker = Tracker(tracking_uri, "patches")  # SQLite in tmp_path, artifacts in tmp_path/mlartifacts
    run_id = tracker.start_run("parent", tags={})
    assert log_patch_samples(tracker, run_id, shared) == "public/patches.png"
    artifacts = [a.path for a in tracker.client.list_artifacts(run_id, "public")]
    assert artifacts == ["public/patches.png"]
    assert (tmp_path / "mlartifacts").is_dir()
    local = tracker.client.download_artifacts(run_id, "public/patches.png", str(tmp_path))
    with Image.open(local) as im:
        assert im.size == (8 * 66 + 2, 8 * 66 + 2)
    # other sources log nothing
    other = build_experiment({"dataset": {"name": "digits32"}, "algorithm": {"name": "fedavg"},
                              "public": {"source": "train_split", "size": 10}})
    assert log_patch_samples(tracker, run_id, share_dataset(other)) is None
