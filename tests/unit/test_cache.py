"""The stage cache: computed once per distinct upstream config, atomic, shared across processes."""
import multiprocessing
import os

import pytest
import torch

from platform.cache import Stage, StageCache, stage_key

STAGE = Stage("clients", "v1", ("dataset.name", "partition.alpha", "seed"))


def test_second_lookup_is_a_hit_and_returns_the_same_value(tmp_path):
    cache = StageCache(str(tmp_path))
    calls = []
    config = {"dataset.name": "digits", "partition.alpha": 0.5, "seed": 0, "clients.lr": 0.1}

    def compute():
        calls.append(1)
        return {"w": torch.arange(5.0)}

    first, hit1 = cache.get_or_compute(STAGE, config, compute)
    second, hit2 = cache.get_or_compute(STAGE, {**config, "clients.lr": 0.9}, compute)  # a field the stage ignores
    assert (hit1, hit2) == (False, True) and len(calls) == 1
    assert torch.equal(first["w"], second["w"])
    assert cache.count("clients", "computed") == 1 and cache.count("clients", "hit") == 1


def test_key_changes_with_declared_fields_and_version():
    base = {"dataset.name": "digits", "partition.alpha": 0.5, "seed": 0}
    assert stage_key("s", "v1", base) != stage_key("s", "v1", {**base, "seed": 1})
    assert stage_key("s", "v1", base) != stage_key("s", "v2", base)
    assert stage_key("s", "v1", base) == stage_key("s", "v1", {**base, "partition.alpha": 0.5})
    assert stage_key("s", "v1", {"a": 1.0}) == stage_key("s", "v1", {"a": 1})


def test_missing_dependency_field_is_an_error(tmp_path):
    with pytest.raises(KeyError, match="partition.alpha"):
        StageCache(str(tmp_path)).get_or_compute(STAGE, {"dataset.name": "d", "seed": 0}, lambda: 1)


def test_failed_compute_leaves_no_entry(tmp_path):
    cache = StageCache(str(tmp_path))
    config = {"dataset.name": "digits", "partition.alpha": 0.5, "seed": 0}

    def boom():
        raise RuntimeError("client training failed")

    with pytest.raises(RuntimeError):
        cache.get_or_compute(STAGE, config, boom)
    files = os.listdir(tmp_path / "clients")
    assert not [f for f in files if f.endswith(".pt")], files
    value, hit = cache.get_or_compute(STAGE, config, lambda: 7)
    assert (value, hit) == (7, False)


def test_disabled_cache_always_computes(tmp_path):
    cache = StageCache(str(tmp_path), enabled=False)
    config = {"dataset.name": "digits", "partition.alpha": 0.5, "seed": 0}
    assert cache.get_or_compute(STAGE, config, lambda: 1) == (1, False)
    assert cache.get_or_compute(STAGE, config, lambda: 2) == (2, False)
    assert cache.count("clients", "computed-uncached") == 2


def _worker(root, counter_dir):
    import time

    def compute():
        open(os.path.join(counter_dir, f"computed-{os.getpid()}"), "w").close()
        time.sleep(0.5)  # long enough that the other process asks while this one computes
        return torch.ones(3)

    cache = StageCache(root)
    value, _ = cache.get_or_compute(STAGE, {"dataset.name": "digits", "partition.alpha": 0.5, "seed": 0}, compute)
    assert torch.equal(value, torch.ones(3))


def test_concurrent_processes_compute_once(tmp_path):
    counter = tmp_path / "counter"
    counter.mkdir()
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_worker, args=(str(tmp_path / "cache"), str(counter))) for _ in range(3)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
    assert all(p.exitcode == 0 for p in procs)
    assert len(os.listdir(counter)) == 1


@pytest.mark.parametrize("damage", ["flip", "truncate", "empty", "no_checksum"])
def test_corrupt_entry_is_reported_moved_aside_and_recomputed(tmp_path, capsys, damage):
    """An entry that fails its checksum (or whose checksum record is gone) is never used: one warning naming its
    file, the file moved aside, the value computed again and stored whole."""
    cache = StageCache(str(tmp_path))
    config = {"dataset.name": "digits", "partition.alpha": 0.5, "seed": 0}
    cache.get_or_compute(STAGE, config, lambda: {"w": torch.arange(1000.0)})
    path = cache.path(STAGE, stage_key(STAGE.name, STAGE.version, config))
    data = open(path, "rb").read()
    if damage == "flip":
        data = data[:-200] + bytes([data[-200] ^ 0xFF]) + data[-199:]
    elif damage == "truncate":
        data = data[: len(data) // 2]
    elif damage == "empty":
        data = b""
    if damage == "no_checksum":
        os.unlink(path[:-3] + ".json")
    else:
        open(path, "wb").write(data)
    value, hit = cache.get_or_compute(STAGE, config, lambda: {"w": torch.zeros(3)})
    assert not hit and torch.equal(value["w"], torch.zeros(3))
    err = capsys.readouterr().err
    assert f"stage cache entry {path} is corrupt" in err and "recomputed" in err
    assert [f for f in os.listdir(os.path.dirname(path)) if ".pt.corrupt-" in f]
    again, hit = cache.get_or_compute(STAGE, config, lambda: {"w": torch.ones(3)})
    assert hit and torch.equal(again["w"], torch.zeros(3))  # the recomputed entry is whole and verified
    assert cache.count("clients", "corrupt") == 1
