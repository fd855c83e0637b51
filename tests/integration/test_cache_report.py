"""A corrupt stage-cache entry read inside a trial: it was reported only in the Ray worker's own
stderr (a ``.err`` log no one reads). Now the driver's console shows one line naming the entry, and the trial's MLflow
run carries it (tag ``fedsweep.cache_corrupt``, metric ``cache_corrupt_entries``); the entry is recomputed, the
trial completes, and no run is left RUNNING. Real Ray, real MLflow (SQLite), a real damaged file."""
import pytest
import yaml

from tests.conftest import mlflow_runs

ONE_ROUND = {
    "description": "one-round FedKP: the client stage is cached",
    "base": {"dataset": {"name": "digits"}, "partition": {"kind": "iid"}, "model": {"name": "cnn"},
             "algorithm": {"name": "fedkp"}, "mode": "one_round", "rounds": 1, "seed": 0,
             "clients": {"num_clients": 4, "clients_per_round": 4, "local_epochs": 1, "batch_size": 32, "lr": 0.05}},
    "parameters": {"algorithm.bandwidth_scaling": {"grid": [1.0]}},
    "search": {"searcher": "grid", "num_samples": 1, "seeds": [0], "metric": "val_accuracy", "mode": "max"},
    "resources": {"cpu": 1},
}


def _sweep_args(space: dict, name: str, tracking_uri: str, tmp_path) -> tuple[list, object]:
    """``space`` written as ``<name>.yaml``; the sweep's arguments (this test's store, Tune storage and stage
    cache) and the cache directory."""
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(space))
    cache_dir = tmp_path / "cache"
    return [str(path), "--tracking-uri", tracking_uri, "--storage-path", str(tmp_path / "tune"),
            "--cache-dir", str(cache_dir)], cache_dir


def _flip_a_byte(blob) -> None:
    """One flipped byte in the middle: the entry's checksum no longer matches."""
    data = bytearray(blob.read_bytes())
    data[len(data) // 2] ^= 0xFF
    blob.write_bytes(bytes(data))


def test_a_corrupt_entry_read_in_a_trial_reaches_the_console_and_mlflow(ray_local, tracking_uri, tmp_path, capsys):
    from platform.config.run_schema import METRIC_CACHE_CORRUPT, TAG_CACHE_CORRUPT
    from platform.stages.cache import StageCache
    from platform.sweep.command import main

    args, cache_dir = _sweep_args(ONE_ROUND, "cached", tracking_uri, tmp_path)
    assert main(args) == 0  # computes the client stage
    first = capsys.readouterr()
    assert " was corrupt" not in first.out + first.err
    (blob,) = (cache_dir / "one_round_clients").glob("*.pt")
    _flip_a_byte(blob)

    assert main(args) == 0  # the same stage again: the corrupt entry is found in the trial, moved aside, recomputed
    second = capsys.readouterr()
    reports = [ln for ln in second.err.splitlines() if " was corrupt" in ln or " is corrupt" in ln]
    assert len(reports) == 1, second.err
    assert reports[0].startswith(f"warning: [trial 1/1] stage cache entry {blob} was corrupt (ValueError: checksum ")
    assert reports[0].endswith("and recomputed") and f"moved to {blob}.corrupt-" in reports[0], reports[0]
    cache = StageCache(str(cache_dir))
    assert cache.count("one_round_clients", "corrupt") == 1 and cache.count("one_round_clients", "computed") == 2

    client, runs = mlflow_runs(tracking_uri, "cached")
    assert all(r.info.status == "FINISHED" for r in runs) and len(runs) == 4  # two sweeps, a trial each
    children = sorted((r for r in runs if "mlflow.parentRunId" in r.data.tags), key=lambda r: r.info.start_time)
    assert TAG_CACHE_CORRUPT not in children[0].data.tags and METRIC_CACHE_CORRUPT not in children[0].data.metrics
    assert children[1].data.tags[TAG_CACHE_CORRUPT] == reports[0].split("[trial 1/1] ", 1)[1]
    assert children[1].data.metrics[METRIC_CACHE_CORRUPT] == 1
    assert children[1].data.tags["status"] == "completed" and children[1].data.metrics["client_stage_cached"] == 0


@pytest.mark.slow
def test_a_corrupt_entry_read_on_the_driver_reaches_the_parent_run(ray_local, tracking_uri, tmp_path, capsys):
    """The crop pool of a source image is built on the driver, before any trial (``share_dataset``): a corrupt
    entry found there was a console line only. Now the sweep's parent run carries it too (tag and count)."""
    from platform.config.run_schema import METRIC_CACHE_CORRUPT, TAG_CACHE_CORRUPT
    from platform.sweep.command import main

    space = {**ONE_ROUND, "description": "FedAvg with a source-image crop pool (built on the driver)",
             "base": {**ONE_ROUND["base"], "algorithm": {"name": "fedavg"}, "mode": "rounds",
                      "public": {"source": "image", "image": "strokes", "size": 200}},
             "parameters": {"clients.lr": {"grid": [0.05]}}}
    args, cache_dir = _sweep_args(space, "pooled", tracking_uri, tmp_path)
    assert main(args) == 0  # builds the crop pool
    capsys.readouterr()
    blobs = list((cache_dir / "patch_pool").glob("*.pt"))
    assert len(blobs) == 1, list(cache_dir.iterdir())
    _flip_a_byte(blobs[0])

    assert main(args) == 0  # found corrupt on the driver, moved aside, built again
    err = capsys.readouterr().err
    reports = [ln for ln in err.splitlines() if f"stage cache entry {blobs[0]} is corrupt" in ln]
    assert len(reports) == 1, err

    client, runs = mlflow_runs(tracking_uri, "pooled")
    parents = sorted((r for r in runs if "mlflow.parentRunId" not in r.data.tags), key=lambda r: r.info.start_time)
    assert len(parents) == 2 and all(r.info.status == "FINISHED" for r in runs)
    assert TAG_CACHE_CORRUPT not in parents[0].data.tags
    assert parents[1].data.tags[TAG_CACHE_CORRUPT].startswith(f"stage cache entry {blobs[0]} was corrupt")
    assert parents[1].data.metrics[METRIC_CACHE_CORRUPT] == 1
