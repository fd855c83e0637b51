"""The per-client state store: exact round trips, a hard memory bound with LRU spills, atomic writes."""
import os
import tempfile

import numpy as np
import pytest
import torch

from platform.runtime import state_store as ss
from platform.runtime.state_store import ClientStateStore, state_bytes


def assert_same(a, b):
    """Exact, type-checked equality of nested states."""
    assert type(a) is type(b), (type(a), type(b))
    if isinstance(a, torch.Tensor):
        assert a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b)
    elif isinstance(a, np.ndarray):
        assert a.dtype == b.dtype and a.shape == b.shape and np.array_equal(a, b)
    elif isinstance(a, dict):
        assert list(a) == list(b)
        for k in a:
            assert_same(a[k], b[k])
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b)
        for x, y in zip(a, b):
            assert_same(x, y)
    else:
        assert a == b


def make_state(i, n=256):
    g = torch.Generator().manual_seed(i)
    return {"w": torch.randn(n, generator=g), "step": i}


def spilled_files(store):
    d = store.spill_dir
    return sorted(f for f in os.listdir(d)) if d and os.path.isdir(d) else []


@pytest.fixture
def private_tmp(tmp_path, monkeypatch):
    """Make tempfile.gettempdir() point into tmp_path, so private spill dirs land there."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    return tmp_path


def test_nested_round_trip_delete_and_unknown(tmp_path):
    store = ClientStateStore(max_bytes=1 << 20, spill_dir=str(tmp_path / "spill"))
    state = {
        "w": torch.arange(12, dtype=torch.float32).reshape(3, 4),
        "mask": np.array([1, 0, 1], dtype=np.int64),
        "round": 7,
        "opt": {"lr": 0.05, "buf": [torch.ones(2, dtype=torch.float64), np.float32(1.5)], "pair": (1, "a")},
        "hist": [1, 2.5, "x"],
    }
    store.put(3, state)
    assert 3 in store and len(store) == 1 and store.clients() == [3]
    assert_same(store.get(3), state)
    assert store.get(4) == {} and 4 not in store
    assert store.memory_bytes == state_bytes(state) == 48 + 24 + 16 + 64 * 8  # 8 scalar leaves
    store.put(3, {})
    assert 3 not in store and len(store) == 0 and store.get(3) == {} and store.memory_bytes == 0
    store.put(5, state)
    store.delete(5)
    assert store.clients() == [] and store.memory_bytes == 0
    # the same round trip through disk
    disk = ClientStateStore(max_bytes=0, spill_dir=str(tmp_path / "disk"))
    disk.put(3, state)
    assert disk.memory_bytes == 0 and spilled_files(disk) == ["3.pt"]
    assert_same(disk.get(3), state)
    assert disk.get_many([3, 9]).keys() == {3}


def test_put_detaches_and_moves_to_cpu(tmp_path):
    w = torch.randn(4, requires_grad=True)
    big = torch.arange(1000.0)
    store = ClientStateStore(max_bytes=1 << 20, spill_dir=str(tmp_path))
    store.put(0, {"w": w * 2, "view": big[:3]})
    got = store.get(0)
    assert not got["w"].requires_grad and got["w"].grad_fn is None and got["w"].device.type == "cpu"
    assert got["view"].untyped_storage().nbytes() == 12  # a view is not kept with its whole storage


def test_spill_keeps_memory_bounded_and_reads_back_exactly(tmp_path):
    states = {i: make_state(i) for i in range(10)}
    per = state_bytes(states[0])
    store = ClientStateStore(max_bytes=3 * per, spill_dir=str(tmp_path / "spill"))
    for i, s in states.items():
        store.put(i, s)
        assert store.memory_bytes <= store.max_bytes
    assert store.memory_bytes == 3 * per
    files = spilled_files(store)
    assert len(files) == 7 and all(f.endswith(".pt") for f in files)
    assert store.spills == 7 and len(store) == 10 and store.clients() == list(range(10))
    for i in range(10):
        assert_same(store.get(i), states[i])
        assert store.memory_bytes <= store.max_bytes
        assert len(spilled_files(store)) == 7  # one loaded in, one spilled out (or none, if in memory)
    assert store.loads == 10  # a sequential scan cycles the LRU: 7, 8, 9 get evicted before they are read
    assert store.get_many(range(12)).keys() == set(range(10))


def test_lru_order_decides_what_is_spilled(tmp_path):
    per = state_bytes(make_state(0))
    store = ClientStateStore(max_bytes=3 * per, spill_dir=str(tmp_path))
    for i in range(3):
        store.put(i, make_state(i))
    store.get(0)  # order now 1, 2, 0
    store.put(3, make_state(3))
    assert spilled_files(store) == ["1.pt"]
    store.put(2, make_state(20))  # order now 0, 3, 2
    store.put(4, make_state(4))
    assert spilled_files(store) == ["0.pt", "1.pt"]
    store.get(1)  # loaded back as most recent; evicts 3 (order was 3, 2, 4)
    assert spilled_files(store) == ["0.pt", "3.pt"]
    assert_same(store.get(2), make_state(20))


def test_oversized_entry_goes_to_disk_and_zero_bound(tmp_path):
    small = make_state(1, n=16)
    big = make_state(2, n=4096)
    store = ClientStateStore(max_bytes=state_bytes(big) - 1, spill_dir=str(tmp_path / "a"))
    store.put(1, small)
    store.put(2, big)
    assert spilled_files(store) == ["2.pt"] and store.memory_bytes == state_bytes(small)
    assert_same(store.get(2), big)
    assert spilled_files(store) == ["2.pt"] and store.memory_bytes == state_bytes(small)  # stays on disk
    store.put(2, small)  # now fits: back in memory, old file gone
    assert spilled_files(store) == [] and store.memory_bytes == 2 * state_bytes(small)

    zero = ClientStateStore(max_bytes=0, spill_dir=str(tmp_path / "b"))
    for i in range(5):
        zero.put(i, make_state(i, n=8))
        assert zero.memory_bytes == 0
    for i in range(5):
        assert_same(zero.get(i), make_state(i, n=8))
    assert zero.memory_bytes == 0 and len(spilled_files(zero)) == 5
    with pytest.raises(ValueError):
        ClientStateStore(max_bytes=-1)


def test_thousand_personalised_digits_models(tmp_path):
    bound = 4 * 1024 * 1024
    store = ClientStateStore(max_bytes=bound, spill_dir=str(tmp_path))
    g = torch.Generator().manual_seed(0)
    models = {}
    for c in range(1000):
        w = torch.randn(4138, generator=g)
        models[c] = w
        store.put(c, {"weights": w, "opt": {"lr": 0.01, "momentum": 0.9, "step": c}})
        assert store.memory_bytes <= bound
    assert store.spills > 0 and len(store) == 1000
    for c in range(1000):
        got = store.get(c)
        assert torch.equal(got["weights"], models[c]) and got["opt"] == {"lr": 0.01, "momentum": 0.9, "step": c}
        assert store.memory_bytes <= bound


def test_snapshot_is_read_only_and_restore_round_trips(tmp_path):
    states = {i: make_state(i) for i in range(8)}
    per = state_bytes(states[0])
    store = ClientStateStore(max_bytes=3 * per, spill_dir=str(tmp_path / "a"))
    store.put_many(states)
    mem, files, spills = store.memory_bytes, spilled_files(store), store.spills
    mtimes = {f: os.stat(os.path.join(store.spill_dir, f)).st_mtime_ns for f in files}
    snap = store.snapshot()
    assert list(snap) == list(range(8))
    for i in range(8):
        assert_same(snap[i], states[i])
    assert store.memory_bytes == mem and spilled_files(store) == files and store.spills == spills
    assert {f: os.stat(os.path.join(store.spill_dir, f)).st_mtime_ns for f in files} == mtimes

    other = ClientStateStore(max_bytes=2 * per, spill_dir=str(tmp_path / "b"))
    other.put(99, make_state(99))
    other.restore(snap)
    assert other.clients() == list(range(8))
    for i in range(8):
        assert_same(other.get(i), states[i])
        assert other.memory_bytes <= 2 * per


def test_clear_removes_dir_and_stale_dirs_are_swept(private_tmp):
    root = private_tmp / ss.SPILL_ROOT_NAME
    root.mkdir()
    dead = 999999
    while ss._pid_alive(dead):
        dead += 1
    stale = root / f"{dead}-deadbeef"
    stale.mkdir()
    (stale / "0.pt").write_bytes(b"x")
    live = root / f"{os.getpid()}-0000aaaa"
    live.mkdir()
    other = root / "not-a-pid"
    other.mkdir()

    store = ClientStateStore(max_bytes=0)
    assert store.spill_dir is None and stale.exists()  # nothing happens before the first spill
    store.put(1, make_state(1))
    d = store.spill_dir
    assert os.path.dirname(d) == str(root) and os.path.basename(d).startswith(f"{os.getpid()}-")
    assert os.path.exists(os.path.join(d, "1.pt"))
    assert not stale.exists() and live.exists() and other.exists()

    store.clear()
    assert not os.path.exists(d) and len(store) == 0 and store.get(1) == {}
    store.put(2, make_state(2))  # usable after clear: the directory is made again
    assert_same(store.get(2), make_state(2))
    store.close()
    assert not os.path.exists(d)

    given = private_tmp / "given"
    s2 = ClientStateStore(max_bytes=0, spill_dir=str(given))
    s2.put(1, make_state(1))
    assert given.is_dir()
    s2.clear()
    assert not given.exists()


def test_failed_spill_leaves_no_file_and_keeps_entry(tmp_path, monkeypatch):
    per = state_bytes(make_state(0))
    store = ClientStateStore(max_bytes=2 * per, spill_dir=str(tmp_path))
    store.put(0, make_state(0))
    store.put(1, make_state(1))
    real_save = torch.save

    def broken_save(obj, f, *args, **kwargs):
        f.write(b"PK\x03\x04 half a file")
        raise OSError("disk full")

    monkeypatch.setattr(ss.torch, "save", broken_save)
    with pytest.raises(OSError, match="disk full"):
        store.put(2, make_state(2))  # must spill client 0, which fails
    assert os.listdir(tmp_path) == []  # no 0.pt, no temp file
    assert 0 in store and len(store) == 3
    assert_same(store.get(0), make_state(0))  # still in memory
    assert store.spills == 0 and store.loads == 0

    # an oversized put that fails to write leaves the previous state in place
    with pytest.raises(OSError):
        store.put(1, make_state(1, n=10_000))
    assert os.listdir(tmp_path) == [] and torch.equal(store.get(1)["w"], make_state(1)["w"])

    monkeypatch.setattr(ss.torch, "save", real_save)
    store.put(3, make_state(3))  # writes work again and the bound is restored
    assert store.memory_bytes <= store.max_bytes
    for i in (0, 2, 3):
        assert_same(store.get(i), make_state(i))
