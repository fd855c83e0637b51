"""Sweeps whose Tune storage and stage cache are a bucket on a real S3-compatible server (moto's server mode on
127.0.0.1), run by a driver joined to the two-node local Ray cluster: trials, checkpoints and cache entries land in
the bucket, a second sweep hits the cache and detects a truncated cache object (recomputed), and an interrupted
sweep resumed from another working directory completes with one child run per trial."""
import json
import os
import signal
import subprocess
import sys
import time

import pyarrow.fs as pafs
import pytest
import yaml

from tests.conftest import mlflow_runs

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

BASE = {"dataset": {"name": "digits"}, "partition": {"kind": "dirichlet", "alpha": 0.5}, "model": {"name": "cnn"},
        "algorithm": {"name": "fedavg"},
        "clients": {"num_clients": 6, "clients_per_round": 6, "local_epochs": 1, "batch_size": 16, "lr": 0.05,
                    "momentum": 0.9},
        "seed": 0}
# one-round analysis: each trial's client models are trained once per partition (the stage cache); two partitions,
# so two cache entries, one per trial
CACHED = {"description": "one-round trials with a cached client stage",
          "base": {**BASE, "mode": "one_round", "rounds": 1},
          "parameters": {"partition.alpha": {"grid": [0.5, 1.0]}},
          "search": {"searcher": "grid", "num_samples": 1, "metric": "val_accuracy", "seeds": [0],
                     "max_concurrent_trials": 2},
          "resources": {"cpu": 1}}
# rounds with a checkpoint after each: the trials --resume continues (interrupted at round 2: 4 rounds left, so the
# Ctrl-C lands while they run)
ROUNDS = {"description": "checkpointed trials",
          "base": {**BASE, "rounds": 6},
          "parameters": {"clients.lr": {"grid": [0.05, 0.02]}},
          "search": {"searcher": "grid", "num_samples": 1, "metric": "val_accuracy", "seeds": [0],
                     "checkpoint_every": 1, "max_concurrent_trials": 2},
          "resources": {"cpu": 1}}


def _objects(fs, prefix: str) -> list[str]:
    return [i.path for i in fs.get_file_info(pafs.FileSelector(prefix, recursive=True, allow_not_found=True))
            if i.type == pafs.FileType.File]


def _sweep(args, env, cwd, interrupt_at=None):
    """``python -m platform.sweep args`` as a user would; with ``interrupt_at``, Ctrl-C once a printed line has it.
    Returns (exit code, everything printed)."""
    began = time.time()
    proc = subprocess.Popen([sys.executable, "-m", "platform.sweep", *args], cwd=cwd, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    seen, deadline = [], time.time() + 240
    for line in proc.stdout:
        seen.append(line)
        if interrupt_at and (interrupt_at in line or time.time() > deadline):
            proc.send_signal(signal.SIGINT)
            break
    rest, _ = proc.communicate(timeout=300)
    print(f"sweep {' '.join(args[:1])}: exit {proc.returncode} after {time.time() - began:.0f} s")  # shown on failure
    return proc.returncode, "".join(seen) + rest


def _parent_ids(uri: str) -> set[str]:
    """The parent runs (one per sweep) of the ``cached`` experiment so far."""
    return {r.info.run_id for r in mlflow_runs(uri, "cached")[1] if "mlflow.parentRunId" not in r.data.tags}


def _cached_by_alpha(uri: str, earlier: set[str]) -> dict:
    """``client_stage_cached`` (1.0: the trial's client stage came from the cache) of the child runs of the one sweep
    whose parent run is not in ``earlier``, by the trial's ``partition.alpha``."""
    (parent,) = _parent_ids(uri) - earlier
    _, runs = mlflow_runs(uri, "cached")
    return {r.data.params["partition.alpha"]: r.data.metrics["client_stage_cached"] for r in runs
            if r.data.tags.get("mlflow.parentRunId") == parent}


def test_sweeps_keep_trials_checkpoints_and_cache_in_the_bucket(cluster, s3_bucket, tmp_path):
    from platform.stages.cache import Stage, StageCache
    from platform.runtime.federation import ONE_ROUND_STAGE
    from platform.stages.storage import filesystem

    home = tmp_path / "home"  # the results home: nothing of the sweep's storage may land here
    env = {**cluster["env"], "FEDSWEEP_HOME": str(home)}
    for name, space in (("cached", CACHED), ("rounds", ROUNDS)):
        (tmp_path / f"{name}.yaml").write_text(yaml.safe_dump(space, sort_keys=False))
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    tune, cache_root = f"s3://{s3_bucket}/tune", f"s3://{s3_bucket}/cache"
    common = ["--address", cluster["gcs_address"], "--storage-path", tune, "--cache-dir", cache_root,
              "--tracking-uri", uri]
    fs, _ = filesystem(tune)
    cache = StageCache(cache_root)

    # 1. each trial (Ray places them on the two 1-CPU nodes) computes its client stage and stores it in the bucket
    code, out = _sweep([str(tmp_path / "cached.yaml"), *common], env, str(tmp_path))
    assert code == 0, out[-4000:]
    assert _cached_by_alpha(uri, set()) == {"0.5": 0.0, "1.0": 0.0}
    manifests = sorted(p for p in _objects(fs, f"{s3_bucket}/cache/{ONE_ROUND_STAGE}") if p.endswith(".json"))
    assert len(manifests) == 2, _objects(fs, s3_bucket)
    assert cache.count(ONE_ROUND_STAGE, "computed") == 2 and cache.count(ONE_ROUND_STAGE, "hit") == 0
    sweep_dirs = {p.split("/")[2] for p in _objects(fs, f"{s3_bucket}/tune")}
    assert len(sweep_dirs) == 1
    state = json.loads(fs.open_input_stream(f"{s3_bucket}/tune/{sweep_dirs.pop()}/fedsweep_sweep.json").read())
    assert state["status"] == "completed"

    # 2. one entry's value truncated (a torn upload, a bad copy); a second sweep hits the whole entry and detects the
    # truncated one by its checksum, recomputes it and stores it whole again
    entries = {}
    for manifest in manifests:
        meta = json.loads(fs.open_input_stream(manifest).read())
        entries[str(meta["fields"]["partition.alpha"])] = manifest.rsplit("/", 1)[1][:-len(".json")]
    blob = cache.path(Stage(ONE_ROUND_STAGE, "", ()), entries["1.0"])
    whole = cache.store.read(blob)
    cache.store.write(blob, whole[: len(whole) // 2])
    earlier = _parent_ids(uri)
    code, out = _sweep([str(tmp_path / "cached.yaml"), *common], env, str(tmp_path))
    assert code == 0, out[-4000:]
    assert _cached_by_alpha(uri, earlier) == {"0.5": 1.0, "1.0": 0.0}
    assert cache.count(ONE_ROUND_STAGE, "hit") == 1 and cache.count(ONE_ROUND_STAGE, "corrupt") == 1
    assert cache.count(ONE_ROUND_STAGE, "computed") == 3
    assert [p for p in _objects(fs, f"{s3_bucket}/cache/{ONE_ROUND_STAGE}") if ".corrupt-" in p]
    meta = json.loads(cache.store.read(cache.store.join(ONE_ROUND_STAGE, f"{entries['1.0']}.json")))
    assert len(cache.store.read(cache.store.join(ONE_ROUND_STAGE, meta["blob"]))) == meta["bytes"]  # whole again

    # 3. checkpointed trials interrupted, then resumed from another working directory with the printed hint
    code, out = _sweep([str(tmp_path / "rounds.yaml"), *common], env, str(tmp_path), interrupt_at=" round 2/6")
    assert code == 130, out[-4000:]
    hint = next(line for line in out.splitlines() if "continue with: " in line).split("continue with: ")[1].split()
    assert hint[3] == "--resume" and hint[5:] == ["--storage-path", tune], hint
    sweep_id = hint[4]
    assert [p for p in _objects(fs, f"{s3_bucket}/tune/{sweep_id}") if "/checkpoint_" in p]
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    code, out = _sweep([*hint[3:], "--address", cluster["gcs_address"]], env, str(elsewhere))
    assert code == 0, out[-4000:]
    client, runs = mlflow_runs(uri, "rounds")
    children = [r for r in runs if "mlflow.parentRunId" in r.data.tags]
    trial_ids = [c.data.tags["fedsweep.trial_id"] for c in children]
    assert len(children) == 2 == len(set(trial_ids)), trial_ids  # one child run per trial
    for child in children:
        assert child.info.status == "FINISHED" and child.data.tags["status"] == "completed"
        steps = [m.step for m in client.get_metric_history(child.info.run_id, "val_accuracy")]
        assert steps == list(range(1, 7)), steps
    assert not os.path.exists(home / "ray_results") and not os.path.exists(home / "cache")
    # nothing secret in the bucket (Tune's pickled experiment and filesystem included) or in the MLflow store
    secret = cluster["env"]["AWS_SECRET_ACCESS_KEY"].encode()
    for path in _objects(fs, s3_bucket):
        assert secret not in fs.open_input_stream(path).read(), path
    assert secret not in (tmp_path / "mlflow.db").read_bytes()
