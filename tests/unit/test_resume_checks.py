"""What ``--resume`` checks before Ray starts, on real files: the space file must be the one the sweep started with
(its sha256 is in the stored invocation; an invocation stored without one is not checked), and every state file it
would read must read (the newest of each of Tune's patterns, as Tune picks it): a truncated one is refused in one
line naming it. Also Tune's state reaches the storage whole (platform/sweep/tune_fixes.py's copy)."""
import hashlib
import json
import os
import pickle
import threading
import types

import pytest
import yaml

from platform.errors import UserError
from platform.sweep import tune_fixes
from platform.sweep.command import build_parser, resolve_resume
from platform.sweep.state import STATE_FILE, start_state

SWEEP = "edited-20261128-110000-abcdef"


def _sweep(tmp_path, space_sha256=True) -> tuple[str, str]:
    """A space file and an interrupted sweep of it under tmp_path/tune: (the space file, the storage)."""
    space = tmp_path / "edited.yaml"
    space.write_text(yaml.safe_dump({"base": {"rounds": 2}, "parameters": {"clients.lr": {"grid": [0.1]}}}))
    invocation = {"name": str(space), "overrides": ["rounds=2"], "num_samples": None, "repeats": None,
                  "tracking_uri": f"sqlite:///{tmp_path}/m.db", "cache_dir": None, "no_cache": False,
                  "optuna_storage": None, "preset": None, "stand_in": False}
    if space_sha256:
        invocation["space_sha256"] = hashlib.sha256(space.read_bytes()).hexdigest()
    start_state(str(tmp_path / "tune" / SWEEP), "parent-run-id", invocation["tracking_uri"],
                types.SimpleNamespace(path=str(space)), invocation)
    return str(space), str(tmp_path / "tune")


def _resume(storage: str):
    return resolve_resume(build_parser().parse_args(["--resume", SWEEP, "--storage-path", storage]))


def test_an_edited_space_file_is_refused_naming_it_and_what_to_do(tmp_path):
    space, storage = _sweep(tmp_path)
    assert _resume(storage).endswith(SWEEP)
    stored = hashlib.sha256(open(space, "rb").read()).hexdigest()
    with open(space, "a") as fh:
        fh.write("# one comment more\n")
    with pytest.raises(UserError) as info:
        _resume(storage)
    text = str(info.value)
    assert text.startswith(f"--resume: {space} changed since sweep {SWEEP} started (sha256 {stored[:12]} then, "), text
    assert text.endswith(f"put the file back as it was (sha256 {stored[:12]}), or start a new sweep: python -m "
                         f"platform.sweep {space} --set rounds=2"), text
    assert "\n" not in text


def test_a_sweep_stored_without_the_hash_resumes_as_it_did(tmp_path):
    space, storage = _sweep(tmp_path, space_sha256=False)
    with open(space, "a") as fh:
        fh.write("# edited\n")
    assert _resume(storage).endswith(SWEEP)


def _tune_state(sweep_dir: str) -> dict[str, bytes]:
    """Tune-like state files in ``sweep_dir``: an older and a newer experiment state, the searcher's pickle, the
    search generator's (a pickle named .json) and the study's segment record."""
    files = {"experiment_state-2026-11-28_10-00-00.json": b"{\"trial_data\": [",  # older: Tune reads the newest
             "experiment_state-2026-11-28_11-00-00.json": json.dumps({"trial_data": []}).encode(),
             "searcher-state-2026-11-28_11-00-00.pkl": pickle.dumps({"searcher": list(range(100))}),
             "search_gen_state-2026-11-28_11-00-00.json": pickle.dumps({"counter": 3}),
             "segments.json": json.dumps({"segments": {}}).encode()}
    for name, data in files.items():
        with open(os.path.join(sweep_dir, name), "wb") as fh:
            fh.write(data)
    return files


@pytest.mark.parametrize("name", [STATE_FILE, "experiment_state-2026-11-28_11-00-00.json",
                                  "searcher-state-2026-11-28_11-00-00.pkl", "search_gen_state-2026-11-28_11-00-00.json",
                                  "segments.json"])
@pytest.mark.parametrize("keep", [0.5, 0.0])
def test_a_truncated_state_file_is_refused_in_one_line(tmp_path, name, keep):
    space, storage = _sweep(tmp_path)
    sweep_dir = os.path.join(storage, SWEEP)
    _tune_state(sweep_dir)
    assert _resume(storage).endswith(SWEEP)  # whole (the older, truncated experiment state is not read)
    path = os.path.join(sweep_dir, name)
    data = open(path, "rb").read()
    with open(path, "wb") as fh:
        fh.write(data[: int(len(data) * keep)])
    with pytest.raises(UserError) as info:
        _resume(storage)
    text = str(info.value)
    assert text.startswith(f"--resume: sweep {SWEEP} cannot be continued: its state {path} ("), text
    store = "" if name == STATE_FILE else f" --tracking-uri sqlite:///{tmp_path}/m.db"  # the store is in STATE_FILE
    assert (f"is truncated or unreadable; close its runs with python -m platform.sweep --repair{store}, then start a "
            f"new sweep: python -m platform.sweep {space if name != STATE_FILE else 'edited'}") in text, text
    assert "\n" not in text


def test_tunes_state_reaches_a_local_storage_whole(tmp_path):
    """The copy of Tune's staging directory to a local storage (what its syncer runs, replaced by
    :func:`tune_fixes.copy_whole`): a reader of the destination sees the old file or the new one, never a part,
    while the file is copied over and over; no temporary file is left."""
    staging, storage = tmp_path / "staging", tmp_path / "storage"
    (staging / "trial").mkdir(parents=True)
    old, new = b"o" * 3_000_000, b"n" * 6_000_000
    (staging / "experiment_state-1.json").write_bytes(old)
    (staging / "trial" / "result.json").write_bytes(b"{}")
    tune_fixes.copy_whole(str(staging), str(storage))
    (staging / "experiment_state-1.json").write_bytes(new)
    seen, done = set(), threading.Event()

    def read():
        while not done.is_set():
            seen.add(len((storage / "experiment_state-1.json").read_bytes()))

    reader = threading.Thread(target=read)
    reader.start()
    try:
        for _ in range(10):
            tune_fixes.copy_whole(str(staging), str(storage))
    finally:
        done.set()
        reader.join()
    assert seen <= {len(old), len(new)} and len(seen) >= 1, seen
    assert (storage / "experiment_state-1.json").read_bytes() == new
    assert (storage / "trial" / "result.json").read_bytes() == b"{}"
    assert sorted(p.name for p in storage.iterdir()) == ["experiment_state-1.json", "trial"]


def test_tunes_own_writers_are_replaced_where_tune_has_them():
    from ray.train._internal.storage import _FilesystemSyncer
    from ray.tune.execution.tune_controller import TuneController

    assert tune_fixes.whole_state_writes()
    assert TuneController.save_to_dir.__module__ == tune_fixes.__name__
    import pyarrow.fs as pafs

    syncer = _FilesystemSyncer(storage_filesystem=pafs.LocalFileSystem())
    assert syncer._sync_up_command("/a", "/b")[0] is tune_fixes.copy_whole


def test_a_truncated_state_in_a_bucket_is_refused_naming_its_uri(s3_bucket):
    """The same check through the bucket's filesystem (a real S3-compatible server): the state is listed and read
    there, and the line names the object's URI."""
    from platform.stages.storage import write_bytes
    from platform.sweep.state import check_state_readable

    sweep = f"s3://{s3_bucket}/tune/{SWEEP}"
    write_bytes(f"{sweep}/{STATE_FILE}", json.dumps({"tracking_uri": "sqlite:///m.db", "invocation": None}).encode())
    write_bytes(f"{sweep}/experiment_state-2026-11-28_11-00-00.json", b"{}")
    write_bytes(f"{sweep}/searcher-state-2026-11-28_11-00-00.pkl", pickle.dumps(list(range(50))))
    check_state_readable(sweep)
    write_bytes(f"{sweep}/segment-002/searcher-state-2026-11-28_12-00-00.pkl", pickle.dumps(list(range(50)))[:40])
    with pytest.raises(UserError) as info:
        check_state_readable(sweep)
    assert str(info.value).startswith(f"--resume: sweep {SWEEP} cannot be continued: its state {sweep}/segment-002/"
                                      f"searcher-state-2026-11-28_12-00-00.pkl (pickle exhausted before"), info.value
