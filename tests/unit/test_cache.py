"""The stage cache: computed once per distinct upstream config, atomic, shared across processes."""
import json
import multiprocessing
import os

import pytest
import torch

from platform.stages.cache import Stage, StageCache, stage_key

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
        p.join()  # each imports torch: slow on a loaded machine; pytest-timeout guards a hang
    assert all(p.exitcode == 0 for p in procs)
    assert len(os.listdir(counter)) == 1


def _names(cache) -> list[str]:
    """The names under the stage's directory (or prefix)."""
    import pyarrow.fs as pafs

    from platform.stages.storage import filesystem

    fs, inner = filesystem(cache.store.join(STAGE.name))
    return [i.base_name for i in fs.get_file_info(pafs.FileSelector(inner))]


def _damage(cache, manifest: str, blob: str, damage: str) -> None:
    data = cache.store.read(blob)
    if damage == "flip":
        cache.store.write(blob, data[:-200] + bytes([data[-200] ^ 0xFF]) + data[-199:])
    elif damage == "truncate":
        cache.store.write(blob, data[: len(data) // 2])
    elif damage == "empty":
        cache.store.write(blob, b"")
    elif damage == "bad_manifest":
        cache.store.write(manifest, b'{"blob": ')
    elif damage == "no_value":
        cache.store.move_aside(blob, blob + ".gone")


@pytest.fixture(params=["local", "s3"])
def cache_root(request, tmp_path):
    """The cache's root on local disk, or a prefix of a bucket on a real S3-compatible server."""
    if request.param == "local":
        return str(tmp_path / "cache")
    bucket = request.getfixturevalue("s3_bucket")
    return f"s3://{bucket}/cache"


@pytest.mark.parametrize("damage", ["flip", "truncate", "empty", "bad_manifest", "no_value"])
def test_corrupt_entry_is_reported_moved_aside_and_recomputed(cache_root, capsys, damage):
    """An entry whose value fails its checksum, is missing, or whose manifest does not parse is never used: one
    warning naming it, the entry moved aside, the value computed again and stored whole (on disk and on S3)."""
    cache = StageCache(cache_root)
    config = {"dataset.name": "digits", "partition.alpha": 0.5, "seed": 0}
    cache.get_or_compute(STAGE, config, lambda: {"w": torch.arange(1000.0)})
    key = stage_key(STAGE.name, STAGE.version, config)
    manifest, blob = cache.manifest_path(STAGE, key), cache.path(STAGE, key)
    assert blob.startswith(cache_root) and cache.store.exists(blob)
    _damage(cache, manifest, blob, damage)
    value, hit = cache.get_or_compute(STAGE, config, lambda: {"w": torch.zeros(3)})
    assert not hit and torch.equal(value["w"], torch.zeros(3))
    err = capsys.readouterr().err
    named = manifest if damage == "bad_manifest" else blob
    assert f"stage cache entry {named} is corrupt" in err and "recomputed" in err
    assert [n for n in _names(cache) if n.startswith(os.path.basename(manifest) + ".corrupt-")]
    again, hit = cache.get_or_compute(STAGE, config, lambda: {"w": torch.ones(3)})
    assert hit and torch.equal(again["w"], torch.zeros(3))  # the recomputed entry is whole and verified
    assert cache.count("clients", "corrupt") == 1


def test_s3_hit_across_cache_instances_and_layout(s3_bucket):
    """Two caches on the same bucket prefix (two trials on two nodes) share entries: the second is a hit. The value
    is stored under its content hash, the manifest beside it, and events count across both."""
    import pyarrow.fs as pafs

    root = f"s3://{s3_bucket}/cache"
    config = {"dataset.name": "digits", "partition.alpha": 0.5, "seed": 0}
    first, hit1 = StageCache(root).get_or_compute(STAGE, config, lambda: {"w": torch.arange(5.0)})
    second, hit2 = StageCache(root).get_or_compute(STAGE, config, lambda: {"w": torch.zeros(5)})
    assert (hit1, hit2) == (False, True) and torch.equal(second["w"], torch.arange(5.0))
    key = stage_key(STAGE.name, STAGE.version, config)
    cache = StageCache(root)
    fs = cache.store.fs
    names = sorted(i.base_name for i in fs.get_file_info(pafs.FileSelector(f"{s3_bucket}/cache/clients"))
                   if i.type == pafs.FileType.File)
    meta = json.loads(cache.store.read(cache.manifest_path(STAGE, key)))
    assert names == sorted([f"{key}.json", meta["blob"]]) and meta["blob"] == f"{key}.{meta['sha256'][:16]}.pt"
    assert cache.count("clients", "computed") == 1 and cache.count("clients", "hit") == 1


def test_s3_value_without_manifest_is_a_miss_not_an_entry(s3_bucket):
    """A writer that died after its value and before its manifest leaves no entry: the next reader computes."""
    root = f"s3://{s3_bucket}/cache"
    config = {"dataset.name": "digits", "partition.alpha": 0.5, "seed": 0}
    cache = StageCache(root)
    cache.get_or_compute(STAGE, config, lambda: 1)
    key = stage_key(STAGE.name, STAGE.version, config)
    cache.store.fs.delete_file(cache.store._inner(cache.manifest_path(STAGE, key)))  # as if never committed
    assert cache.get_or_compute(STAGE, config, lambda: 2) == (2, False)


def test_s3_two_writers_of_one_key_leave_a_whole_entry(s3_bucket):
    """Two nodes that both missed a key and computed different values (a non-deterministic stage) race to write
    it: each value has its own name, the last manifest wins, and the entry reads back whole as one of the two."""
    import threading

    root = f"s3://{s3_bucket}/cache"
    config = {"dataset.name": "digits", "partition.alpha": 0.5, "seed": 0}
    values = [torch.full((20000,), float(i)) for i in range(4)]
    threads = [threading.Thread(target=StageCache(root)._write_entry,
                                args=(STAGE, stage_key(STAGE.name, STAGE.version, config), {"w": v}, {}))
               for v in values]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    value, hit = StageCache(root).get_or_compute(STAGE, config, lambda: {"w": torch.zeros(1)})
    assert hit and any(torch.equal(value["w"], v) for v in values)
