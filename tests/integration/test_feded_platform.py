"""FedED on the platform: a trial that finds the cached client stage trains no client and no autoencoder."""
import yaml

from tests.conftest import REPO_ROOT, mlflow_runs


def test_feded_beta_trials_share_one_client_stage(ray_local, tracking_uri, tmp_path, capsys):
    from platform.stages.cache import StageCache
    from platform.sweep.command import main

    space = yaml.safe_load(open(f"{REPO_ROOT}/search_spaces/feded_beta.yaml"))
    space["scenarios"]["partition.alpha"] = [0.01]  # one upstream config (one alpha) for both trials
    space["parameters"]["algorithm.beta"] = {"grid": [1, 6]}  # two trials
    space["search"]["seeds"] = [1]
    space["base"]["clients"]["local_epochs"] = 2  # small, to keep CI fast
    space["base"]["algorithm"].update({"ae_epochs": 2, "student_steps": 50})
    path = tmp_path / "feded_small.yaml"
    path.write_text(yaml.safe_dump(space, sort_keys=False))
    cache_dir = tmp_path / "cache"
    rc = main([str(path), "--tracking-uri", tracking_uri, "--storage-path", str(tmp_path / "tune"),
               "--cache-dir", str(cache_dir)])
    out = capsys.readouterr().out
    assert rc == 0, out
    cache = StageCache(str(cache_dir))
    # the client stage (local training, predictions, autoencoders, reconstruction losses) ran once
    assert cache.count("one_round_clients", "computed") == 1
    assert cache.count("one_round_clients", "hit") == 1
    client, runs = mlflow_runs(tracking_uri, "feded_small")
    children = [r for r in runs if "mlflow.parentRunId" in r.data.tags]
    assert sorted(r.data.metrics["final_client_stage_cached"] for r in children) == [0.0, 1.0]
    assert all(r.data.tags["status"] == "completed" for r in children)
