"""FedDF on the platform (real Ray actors): per-round distillation metrics, homogeneous and mixed architectures."""
import math

from platform.config.experiment import build_experiment
from platform.runtime.trial import run_rounds, start_federations, stop_federations

ROUNDS = 3


def _config(**model):
    data = {"dataset": {"name": "digits"}, "public": {"source": "train_split", "split": "first_half"},
            "algorithm": {"name": "feddf", "distill_steps": 20},
            "clients": {"num_clients": 6, "clients_per_round": 6, "batch_size": 16, "lr": 0.05,
                        "momentum": 0.9},
            "rounds": ROUNDS, "resources": {"cpu": 1}}
    if model:
        data["model"] = model
    return build_experiment(data)


def _run(config) -> list[dict]:
    feds = start_federations(config, [config.seed])
    try:
        return list(run_rounds(feds, config.rounds))
    finally:
        stop_federations(feds)


def _check_distillation(metrics: list[dict]) -> None:
    assert [m["round"] for m in metrics] == list(range(1, ROUNDS + 1))
    for m in metrics:
        assert math.isfinite(m["distill_loss"]) and m["distill_loss"] >= 0
        assert m["distill_steps"] == 20 and m["fedavg_init"] == 1.0
        assert 0 <= m["student_agreement"] <= 1
        assert "val_accuracy" in m and "test_accuracy" in m


def test_feddf_reports_distillation_metrics_each_round(ray_local):
    metrics = _run(_config())
    _check_distillation(metrics)
    assert metrics[-1]["test_loss"] < metrics[0]["test_loss"]  # it learns


def test_feddf_heterogeneous_reports_each_architecture(ray_local):
    metrics = _run(_config(name="cnn", architectures=["cnn", "mlp"]))
    _check_distillation(metrics)
    for m in metrics:
        assert {"test_accuracy.cnn", "test_accuracy.mlp", "val_accuracy.cnn", "val_accuracy.mlp"} <= set(m)
