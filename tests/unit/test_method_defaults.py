"""A method's own config defaults (``Algorithm.config_defaults``): applied under the user's config, checked against
the config's fields. FedED's are the thesis's client training (docs/methods/feded.md §3, §6)."""
import pytest

from algorithms.fedavg import FedAvg
from platform.config.experiment import ClientsConfig, method_defaults
from platform.preflight import load_experiment
from platform.errors import ConfigError

HERE = "tests.unit.test_method_defaults"
THESIS_CLIENTS = {"local_epochs": 20, "batch_size": 64, "optimizer": "sgd", "lr": 1e-3, "momentum": 0.9}


class EpochsDefault(FedAvg):  # never registered: named as tests.unit.test_method_defaults:EpochsDefault
    config_defaults = {"clients": {"local_epochs": 7}, "server": {"val_fraction": 0.2}}


class UnknownKey(FedAvg):
    config_defaults = {"clients": {"local_epoch": 20}}


class UnknownSection(FedAvg):
    config_defaults = {"client": {"local_epochs": 20}}


class AlgorithmSection(FedAvg):
    config_defaults = {"algorithm": {"mu": 0.1}}


class NotAMapping(FedAvg):
    config_defaults = {"clients": 20}


class BadValue(FedAvg):
    config_defaults = {"clients": {"lr": -1.0}}


def _clients(config) -> dict:
    return {key: getattr(config.clients, key) for key in THESIS_CLIENTS}


def test_feded_declares_the_thesis_client_training():
    assert method_defaults("feded") == {"clients": THESIS_CLIENTS}


def test_an_absent_key_takes_feded_s_default():
    config = load_experiment({"algorithm": {"name": "feded"}, "public": {"source": "train_split"}})
    assert _clients(config) == THESIS_CLIENTS
    # the effective values are the config's own: logged, flattened and in the one-round cache key
    assert config.flat()["clients.local_epochs"] == 20 and config.flat()["clients.momentum"] == 0.9
    assert config.clients.num_clients == ClientsConfig().num_clients  # keys FedED does not name: global defaults


def test_an_explicit_key_wins_from_the_file_and_from_set():
    config = load_experiment({"algorithm": {"name": "feded"}, "public": {"source": "train_split"},
                              "clients": {"lr": 0.05, "batch_size": 16}}, ["clients.local_epochs=2"])
    assert _clients(config) == {**THESIS_CLIENTS, "lr": 0.05, "batch_size": 16, "local_epochs": 2}
    # an explicit value equal to the global default still wins (momentum 0 is not "absent")
    config = load_experiment({"algorithm": {"name": "feded"}, "public": {"source": "train_split"}},
                             ["clients.momentum=0"])
    assert config.clients.momentum == 0.0 and config.clients.local_epochs == 20


def test_the_method_is_resolved_before_its_defaults_apply_even_when_drawn_by_a_search_space(tmp_path):
    import yaml

    from platform.config.search_space import load_search_space

    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump({"base": {"rounds": 1, "public": {"source": "train_split"},
                                             "clients": {"batch_size": 8}},
                                    "parameters": {"algorithm.name": {"choice": ["fedavg", "feded"]}},
                                    "search": {"metric": "val_accuracy"}}))
    space = load_search_space(str(path))
    feded = space.trial_config({"algorithm.name": "feded"})
    fedavg = space.trial_config({"algorithm.name": "fedavg"})
    assert _clients(feded) == {**THESIS_CLIENTS, "batch_size": 8}  # the base's key wins, the rest are FedED's
    assert (fedavg.clients.local_epochs, fedavg.clients.lr, fedavg.clients.batch_size) == (1, 0.05, 8)


def test_other_methods_are_unaffected():
    defaults = ClientsConfig()
    for name in ("fedavg", "fedprox", "fedkp", "feddf", "mnfl"):
        assert method_defaults(name) == {}
    config = load_experiment({"algorithm": {"name": "fedprox"}})
    assert (config.clients.local_epochs, config.clients.batch_size, config.clients.lr, config.clients.momentum) == \
        (defaults.local_epochs, defaults.batch_size, defaults.lr, defaults.momentum) == (1, 32, 0.05, 0.0)


def test_a_method_outside_the_package_gets_its_defaults_under_the_user_s():
    config = load_experiment({"algorithm": {"name": f"{HERE}:EpochsDefault"}})
    assert config.clients.local_epochs == 7 and config.server.val_fraction == 0.2
    config = load_experiment({"algorithm": {"name": f"{HERE}:EpochsDefault"}, "server": {"val_fraction": 0.0},
                              "clients": None})  # an empty section in YAML is None: the defaults still fill it
    assert config.clients.local_epochs == 7 and config.server.val_fraction == 0.0


@pytest.mark.parametrize("cls,field,said", [
    ("UnknownKey", "clients.local_epoch", "unknown field; allowed in clients: num_clients"),
    ("UnknownSection", "client", "not a config section; allowed: dataset"),
    ("AlgorithmSection", "algorithm", "belong in its Hyperparams"),
    ("NotAMapping", "clients", "must be a {key: value} mapping"),
])
def test_a_bad_hook_names_the_field(cls, field, said):
    with pytest.raises(ConfigError) as info:
        load_experiment({"algorithm": {"name": f"{HERE}:{cls}"}})
    assert info.value.field == field and said in str(info.value) and "config_defaults" in str(info.value)
    assert "\n" not in str(info.value)


def test_a_bad_default_value_says_it_comes_from_the_method_and_a_user_value_replaces_it():
    with pytest.raises(ConfigError) as info:
        load_experiment({"algorithm": {"name": f"{HERE}:BadValue"}})
    assert info.value.field == "clients.lr" and "must be > 0" in str(info.value)
    assert "config_defaults" in str(info.value) and "BadValue" in str(info.value)
    assert load_experiment({"algorithm": {"name": f"{HERE}:BadValue"}, "clients": {"lr": 0.1}}).clients.lr == 0.1
    with pytest.raises(ConfigError) as info:  # the user's own bad value: no word about the method
        load_experiment({"algorithm": {"name": "feded"}, "public": {"source": "train_split"},
                         "clients": {"lr": -1}})
    assert info.value.field == "clients.lr" and "config_defaults" not in str(info.value)
