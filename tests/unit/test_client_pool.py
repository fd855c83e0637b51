"""The client actor's logic without Ray: one model per architecture, persistent client state, pre-reduction."""
from dataclasses import dataclass

import numpy as np
import pytest
import torch

import algorithms
from algorithms.base import Algorithm, ClientUpdate
from platform.preflight import load_experiment
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


def test_a_new_client_pool_imports_torch_dynamo_in_the_background_and_trains_after_it():
    """A client actor starts local training's first import (torch._dynamo, ~1.3 s) when it is created, in a thread;
    its first training waits for that import and trains as usual. In a fresh process, as an actor's is."""
    import subprocess
    import sys

    from tests.conftest import REPO_ROOT

    script = (
        "import sys, numpy as np\n"
        "from platform.preflight import load_experiment\n"
        "from platform.data import load_dataset\n"
        "from platform.runtime import actors\n"
        "config = load_experiment({'algorithm': {'name': 'fedavg'}, 'rounds': 1,\n"
        "                          'clients': {'num_clients': 2, 'clients_per_round': 2}})\n"
        "train, _ = load_dataset(config.dataset)\n"
        "assert 'torch._dynamo' not in sys.modules\n"
        "pool = actors.ClientPool(config, (train.x, train.y), {0: np.arange(20), 1: np.arange(20, 40)},\n"
        "                         train.input_shape, train.num_classes)\n"
        "assert [t.name for t in actors._WARMING] == ['import-torch-dynamo'], actors._WARMING\n"
        "from algorithms.common import get_flat_weights\n"
        "payload = {'weights': get_flat_weights(pool.models[config.model.name])}\n"
        "result = pool.train(payload, [0, 1], 0, reduce=False)\n"
        "assert not actors._WARMING[0].is_alive() and 'torch._dynamo' in sys.modules\n"
        "print(len(result.updates))\n")
    done = subprocess.run([sys.executable, "-c", script], cwd=REPO_ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "2", done.stdout
