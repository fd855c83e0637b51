"""A method of one's own, named ``package.module:ClassName`` and never registered, through the whole platform.

The FedAvgM class below is the one docs/how-to/adding_a_method.md walks through. The sweep imports it by path on the
driver and in every Ray worker (the local Ray runs from the repository root, which is on the workers' path).
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Sequence

import torch
import yaml

from algorithms.base import ClientUpdate, Metric, ServerContext, ServerState, reduce_updates
from algorithms.common.params import spec
from algorithms.fedavg import FedAvg

PLUGIN = "tests.integration.test_plugin_algorithm:FedAvgM"


# --- the method (same code as docs/how-to/adding_a_method.md) --------------------------------------------------------

@dataclass(frozen=True)
class FedAvgMHyperparams:
    beta: float = spec(0.9, doc="Server momentum β (Hsu et al. 2019, Alg. 1).", ge=0, lt=1)
    server_lr: float = spec(1.0, doc="Server learning rate η_s.", gt=0)


class FedAvgM(FedAvg):
    """FedAvgM: FedAvg with server momentum (Hsu, Qi & Brown 2019): v ← β·v + Δ, θ ← θ + η_s·v."""

    name = "fedavgm"
    Hyperparams = FedAvgMHyperparams
    heterogeneous_models = False  # one velocity for one global model
    metrics = (Metric("velocity_norm", "min", "L2 norm of the server velocity v after the round"),)

    def aggregate(self, state: ServerState, updates: Sequence[ClientUpdate],
                  ctx: ServerContext) -> tuple[ServerState, dict]:
        delta = reduce_updates(updates).tensors["delta"]  # Δ = Σ_k (N_k/N) Δ_k
        velocity = self.hp.beta * state.optimizer.get("velocity", torch.zeros_like(delta)) + delta
        weights = state.weights + self.hp.server_lr * velocity
        new_state = ServerState(weights=weights, optimizer={**state.optimizer, "velocity": velocity},
                                extra=state.extra)
        return new_state, {"velocity_norm": float(velocity.norm())}


# --- A: the interface, without Ray -----------------------------------------------------------------------------------

def _updates(seed: int, dim: int) -> list[ClientUpdate]:
    g = torch.Generator().manual_seed(seed)
    return [ClientUpdate(weight=float(n), tensors={"delta": torch.randn(dim, generator=g)}, metrics={"train_loss": 1.0})
            for n in (7, 20, 33)]


def test_plugin_resolves_by_path_and_matches_fedavg_without_ray():
    from algorithms import ALGORITHMS, resolve_algorithm
    from algorithms.base import aggregate_round

    assert resolve_algorithm(PLUGIN) is FedAvgM
    assert FedAvgM not in ALGORITHMS.values()  # a plug-in needs no registration
    torch.manual_seed(0)
    ctx = ServerContext.for_model(torch.nn.Linear(6, 3), num_classes=3)  # server_lr 1, server_momentum 0
    fedavg = FedAvg()
    start = fedavg.init_server_state(ctx)
    dim = start.weights.numel()
    rounds = [_updates(1, dim), _updates(2, dim)]

    # beta = 0, server_lr = 1: one step is exactly FedAvg's
    plain = FedAvgM(FedAvgM.Hyperparams(beta=0.0, server_lr=1.0))
    mine, metrics = plain.aggregate(plain.init_server_state(ctx), rounds[0], ctx)
    theirs, _ = fedavg.aggregate(start, rounds[0], ctx)
    assert torch.equal(mine.weights, theirs.weights)
    assert mine.round == 0  # aggregate never counts rounds; the runtime (aggregate_round) does
    assert set(metrics) == {"velocity_norm"} and set(metrics) <= set(FedAvgM.declared_metrics())
    assert FedAvgM.declared_metrics()["velocity_norm"].mode == "min"

    # beta > 0: the second step carries momentum, so it leaves FedAvg's path ...
    momentum = FedAvgM(FedAvgM.Hyperparams(beta=0.5))
    state, fed_state = momentum.init_server_state(ctx), start
    norms = []
    for updates in rounds:
        state, metrics = aggregate_round(momentum, state, updates, ctx)
        fed_state, _ = aggregate_round(fedavg, fed_state, updates, ctx)
        norms.append(metrics["velocity_norm"])
    assert state.round == 2 and "velocity" in state.optimizer
    assert not torch.allclose(state.weights, fed_state.weights)
    delta = [reduce_updates(u).tensors["delta"] for u in rounds]
    expected_velocity = 0.5 * delta[0] + delta[1]
    assert torch.allclose(state.optimizer["velocity"], expected_velocity)
    assert torch.allclose(state.weights, start.weights + delta[0] + expected_velocity)
    assert norms[1] == float(expected_velocity.norm())
    # ... and onto the path of FedAvg's own server momentum (server.momentum = beta), the same update
    ctx_m = ServerContext.for_model(ctx.model, num_classes=3, server_momentum=0.5)
    fed_m = start
    for updates in rounds:
        fed_m, _ = aggregate_round(fedavg, fed_m, updates, ctx_m)
    assert torch.allclose(state.weights, fed_m.weights)


# --- B: a sweep over the plug-in, real Ray Tune + Optuna + MLflow ----------------------------------------------------

SPACE = {
    "description": "plug-in FedAvgM beta",
    "base": {"rounds": 3, "clients": {"num_clients": 6, "clients_per_round": 6, "batch_size": 16, "momentum": 0.9},
             "algorithm": {"name": PLUGIN}},
    "parameters": {"algorithm.beta": {"grid": [0.0, 0.5]}},
    "search": {"searcher": "grid", "num_samples": 1, "seeds": [0], "metric": "val_accuracy"},  # mode omitted
    "resources": {"cpu": 1},
}


def _write(path, space) -> str:
    path.write_text(yaml.safe_dump(space, sort_keys=False))
    return str(path)


def test_sweep_over_a_plugin_algorithm(ray_local, tracking_uri, tmp_path, capsys):
    from platform.config.search_space import load_search_space
    from platform.sweep.command import main
    from tests.conftest import REPO_ROOT, mlflow_runs, run_cli

    path = _write(tmp_path / "plugin_beta.yaml", SPACE)
    assert load_search_space(path).search.mode == "max"  # val_accuracy's declared direction
    by_velocity = _write(tmp_path / "by_velocity.yaml", {**SPACE, "search": {**SPACE["search"],
                                                                            "metric": "velocity_norm"}})
    assert load_search_space(by_velocity).search.mode == "min"  # the plug-in's own declared direction

    rc = main([path, "--tracking-uri", tracking_uri, "--storage-path", str(tmp_path / "tune"), "--quiet"])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "selecting on val_accuracy (max)" in out and "best of 2 trial(s) (0 failed)" in out
    client, runs = mlflow_runs(tracking_uri, "plugin_beta")
    children = [r for r in runs if "mlflow.parentRunId" in r.data.tags]
    assert len(runs) == 3 and len(children) == 2
    assert all(r.info.status == "FINISHED" for r in runs)
    velocity = {}
    for child in children:
        assert child.data.params["algorithm.name"] == PLUGIN
        assert child.data.params["algorithm.server_lr"] == "1.0"
        history = client.get_metric_history(child.info.run_id, "velocity_norm")
        assert sorted(m.step for m in history) == [1, 2, 3]
        assert [m.step for m in client.get_metric_history(child.info.run_id, "val_accuracy")] == [1, 2, 3]
        velocity[child.data.params["algorithm.beta"]] = [m.value for m in sorted(history, key=lambda m: m.step)]
    assert sorted(velocity) == ["0.0", "0.5"]
    # the same seed gives the same first step (v starts at 0); momentum shows from the second round on
    assert abs(velocity["0.0"][0] - velocity["0.5"][0]) <= 1e-4 * velocity["0.0"][0]
    assert velocity["0.0"][1:] != velocity["0.5"][1:]

    # a plug-in path that names nothing: one line on algorithm.name, exit 2
    bad = run_cli("platform.sweep", path, "--set", "algorithm.name=tests.integration.test_plugin_algorithm:Nope",
                  "--tracking-uri", f"sqlite:///{tmp_path / 'nope.db'}", "--storage-path", str(tmp_path / "nope"),
                  cwd=REPO_ROOT, timeout=180)
    lines = [ln for ln in bad.stderr.splitlines() if ln.strip()]
    assert bad.returncode == 2 and len(lines) == 1, bad.stderr
    assert lines[0].startswith("error: algorithm.name:") and "Nope" in lines[0], lines[0]
    assert not os.path.exists(tmp_path / "nope.db") and not os.path.exists(tmp_path / "nope")


def test_selecting_on_an_undeclared_metric_fails_before_writing(tmp_path, capsys):
    from platform.sweep.command import main

    path = _write(tmp_path / "unknown_metric.yaml", {**SPACE, "search": {**SPACE["search"], "metric": "not_a_metric"}})
    db, storage = tmp_path / "out" / "mlflow.db", tmp_path / "out" / "tune"
    rc = main([path, "--tracking-uri", f"sqlite:///{db}", "--storage-path", str(storage), "--quiet"])
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert rc == 2 and len(lines) == 1, err
    assert lines[0].startswith("error: search.metric:") and "not_a_metric" in lines[0], lines[0]
    assert "known: " in lines[0] and "val_accuracy (max)" in lines[0] and "velocity_norm (min)" in lines[0], lines[0]
    assert not db.exists() and not storage.exists() and not (tmp_path / "out").exists()
