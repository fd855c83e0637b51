"""Rules of the algorithm interface that need no Ray: layering, registration, metric declarations, client
evaluation summaries, run-config resolution and the cache's code version."""
import ast
import os

import numpy as np
import pytest
import torch

import algorithms
from algorithms.base import (STANDARD_METRICS, Algorithm, ClientUpdate, group_by_architecture, reduce_updates,
                             register, resolve_algorithm)
from platform.errors import ConfigError

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_algorithms_never_import_platform():
    offenders = []
    for root, _, files in os.walk(os.path.join(REPO, "algorithms")):
        for name in files:
            if not name.endswith(".py"):
                continue
            path = os.path.join(root, name)
            tree = ast.parse(open(path).read())
            for node in ast.walk(tree):
                modules = ([a.name for a in node.names] if isinstance(node, ast.Import)
                           else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
                offenders += [f"{os.path.relpath(path, REPO)}: {m}" for m in modules
                              if m == "platform" or m.startswith("platform.") or m.split(".")[0] in ("ray", "mlflow")]
    assert offenders == []


def test_every_builtin_method_is_registered_and_declares_the_standard_metrics():
    assert set(algorithms.ALGORITHMS) >= {"fedavg", "fedprox", "fedkp", "fedkp_cm", "fedkppa", "fedpa", "sgld",
                                          "feded"}
    for cls in algorithms.ALGORITHMS.values():
        declared = cls.declared_metrics()
        assert {m.name for m in STANDARD_METRICS} <= set(declared)
        assert all(m.mode in ("max", "min") for m in declared.values())


def test_register_refuses_a_taken_name_and_resolve_names_the_field():
    class Impostor(Algorithm):
        name = "fedavg"

    with pytest.raises(ValueError, match="taken"):
        register(Impostor)
    assert algorithms.ALGORITHMS["fedavg"] is not Impostor
    for bad, words in (("nope", "unknown algorithm"), ("no_such_module_x:Cls", "cannot import"),
                       ("algorithms.fedavg:Missing", "not an Algorithm")):
        with pytest.raises(ConfigError) as info:
            resolve_algorithm(bad)
        assert info.value.field == "algorithm.name" and words in str(info.value)
    assert resolve_algorithm("algorithms.fedprox:FedProx") is algorithms.ALGORITHMS["fedprox"]


def test_updates_of_different_architectures_are_never_averaged_together():
    a = ClientUpdate(1.0, {"delta": torch.ones(2)}, architecture="cnn")
    b = ClientUpdate(1.0, {"delta": torch.zeros(2)}, architecture="mlp")
    with pytest.raises(ValueError, match="architectures"):
        reduce_updates([a, b])
    groups = group_by_architecture([a, b, a])
    assert list(groups) == ["cnn", "mlp"] and len(groups["cnn"]) == 2
    assert reduce_updates(groups["cnn"]).architecture == "cnn"


def test_client_evaluations_are_weighted_by_split_size_with_a_10th_percentile():
    from platform.runtime.actors import summarise_client_evaluations

    evaluations = [({"train": 10, "val": 1, "test": 4}, {"val_accuracy": 1.0, "test_accuracy": 0.5}),
                   ({"train": 10, "val": 3, "test": 0}, {"val_accuracy": 0.0, "test_accuracy": 0.9}),
                   ({"train": 10, "val": 4, "test": 4}, {"val_accuracy": 0.5, "test_accuracy": 0.7})]
    out = summarise_client_evaluations(evaluations)
    assert out["client_val_accuracy"] == pytest.approx((1 * 1.0 + 3 * 0.0 + 4 * 0.5) / 8)
    assert out["client_val_accuracy_p10"] == pytest.approx(np.percentile([1.0, 0.0, 0.5], 10))
    assert out["client_test_accuracy"] == pytest.approx(0.6)  # the client with no test split is left out
    assert summarise_client_evaluations([]) == {}


def test_run_accepts_a_search_space_path_like_its_name(tmp_path):
    from platform.run import resolve_config

    by_name, name = resolve_config("smoke", ["rounds=2"])
    by_path, path_name = resolve_config(os.path.join(REPO, "search_spaces", "smoke.yaml"), ["rounds=2"])
    assert by_name == by_path and name == path_name == "smoke" and by_path.rounds == 2
    experiment = tmp_path / "exp.yaml"
    experiment.write_text("algorithm: {name: fedprox, mu: 0.5}\nrounds: 3\n")
    config, exp_name = resolve_config(str(experiment), [])
    assert config.algorithm.params.mu == 0.5 and exp_name == "exp"


def test_search_space_metric_must_be_declared_and_mode_defaults_to_it(tmp_path):
    import yaml

    from platform.config.search_space import load_search_space

    def space(search, base=None):
        path = tmp_path / "s.yaml"
        path.write_text(yaml.safe_dump({"base": base or {"rounds": 2},
                                        "parameters": {"algorithm.name": {"choice": ["fedavg", "feded"]}},
                                        "search": search}))
        return load_search_space(str(path))

    assert space({"metric": "val_loss"}).search.mode == "min"
    with pytest.raises(ConfigError) as info:
        space({"metric": "ensemble_accuracy"})  # FedED's own: fedavg does not report it
    assert info.value.field == "search.metric" and "fedavg" in str(info.value) and "val_accuracy (max)" in str(info.value)
    with pytest.raises(ConfigError, match="mode max"):
        space({"metric": "val_accuracy", "mode": "min"})
    with pytest.raises(ConfigError, match="val_fraction"):
        space({"metric": "val_accuracy"}, {"rounds": 2, "server": {"val_fraction": 0.0}})


def test_stage_code_version_follows_the_source(tmp_path, monkeypatch):
    import importlib
    import sys

    from platform.stages.cache import code_version

    module_path = tmp_path / "stage_mod_for_test.py"
    module_path.write_text("def compute():\n    return 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    module = importlib.import_module("stage_mod_for_test")
    before = code_version(module.compute)
    assert before == code_version(module) and len(before) == 16
    module_path.write_text("def compute():\n    return 2\n")
    assert code_version(module) != before  # the file changed: a new version, old cache entries are not reused
    sys.modules.pop("stage_mod_for_test", None)
