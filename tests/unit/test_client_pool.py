"""The client actor's logic without Ray: one model per architecture, persistent client state, pre-reduction."""
from dataclasses import dataclass

import numpy as np
import pytest
import torch

import algorithms
from algorithms.base import Algorithm, ClientUpdate
from platform.config import load_experiment
from platform.data import load_dataset
from platform.runtime.actors import ClientPool


@dataclass(frozen=True)
class _NoHyperparams:
    pass


class _Recorder(Algorithm):
    """Reports which model class each client trained with and counts its visits in persistent state."""

    name = "recorder"
    Hyperparams = _NoHyperparams
    summable = False
    heterogeneous_models = True
    keeps_client_state = True

    def client_update(self, payload, client):
        client.state["visits"] = client.state.get("visits", 0) + 1
        return ClientUpdate(weight=1.0, tensors={"x": torch.zeros(1)},
                            metrics={"visits": client.state["visits"], "client": client.client_id,
                                     "params": sum(p.numel() for p in client.model.parameters())})


@pytest.fixture
def recorder(monkeypatch):
    monkeypatch.setitem(algorithms.ALGORITHMS, "recorder", _Recorder)


class _UndeclaredState(_Recorder):
    name = "undeclared"
    keeps_client_state = False


def test_client_state_needs_declaring(monkeypatch):
    """Undeclared state would be lost when a client trains on another actor, or raced by a launched-ahead round."""
    monkeypatch.setitem(algorithms.ALGORITHMS, "undeclared", _UndeclaredState)
    config = load_experiment({"algorithm": {"name": "undeclared"}, "clients": {"num_clients": 2, "clients_per_round": 2}})
    train, _ = load_dataset(config.dataset)
    pool = ClientPool(config, (train.x, train.y), {0: np.arange(10), 1: np.arange(10, 20)}, train.input_shape,
                      train.num_classes)
    with pytest.raises(RuntimeError, match="keeps_client_state"):
        pool.train({}, [0], 0)


def test_heterogeneous_clients_get_their_architecture_and_keep_state(recorder):
    config = load_experiment({"algorithm": {"name": "recorder"},
                              "model": {"architectures": ["cnn", "mlp"], "assignment": "blocks"},
                              "clients": {"num_clients": 4, "clients_per_round": 4}})
    train, _ = load_dataset(config.dataset)
    shards = {k: np.arange(k * 10, k * 10 + 10) for k in range(4)}
    pool = ClientPool(config, (train.x, train.y), shards, train.input_shape, train.num_classes)
    assert len(pool.models) == 2  # built once per architecture, not per client
    first = pool.train({}, [0, 1, 2, 3], 0)
    params = {int(u.metrics["client"]): u.metrics["params"] for u in first.updates}
    assert params[0] == params[1] != params[2] == params[3]  # clients 0-1 cnn, 2-3 mlp
    assert [u.architecture for u in first.updates] == ["cnn", "cnn", "mlp", "mlp"]
    assert first.states == {k: {"visits": 1} for k in range(4)}  # returned for the server's store
    second = pool.train({}, [1, 2], 1, states={1: first.states[1], 2: first.states[2]})
    assert [u.metrics["visits"] for u in second.updates] == [2, 2]
    assert first.states[1] == {"visits": 1}  # the pool works on a copy of what it was given
