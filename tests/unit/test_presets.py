"""A search space's ``presets:`` block: parsing, how an overlay lands on the file, citations, and selection."""
import copy

import pytest
import yaml

from platform.config.presets import apply_preset, check_citations, parse_presets, same_value, select_preset
from platform.config.search_space import load_search_space
from platform.errors import ConfigError

#: What the test preset inherits from its base and the platform's defaults: cited as the test space's own choices
#: (platform/preflight/citations.py requires a citation of every value that shapes the experiment).
INHERITED = ("dataset.name", "dataset.normalization", "partition.kind", "partition.min_share", "partition.equal_sizes",
             "partition.val_fraction", "partition.test_fraction", "server.val_fraction", "server.val_source",
             "public.source", "model.name", "algorithm.name", "clients.num_clients", "clients.local_epochs",
             "clients.batch_size", "clients.optimizer", "clients.momentum", "clients.weight_decay", "clients.augment",
             "server.lr", "server.momentum", "mode", "search.searcher", "search.scheduler.kind",
             "search.scheduler.reduction_factor", "search.seeds", "search.trials_per_cell", "sizes.per_client",
             "sizes.server_validation", "sizes.test")

SPACE = {
    "description": "test space",
    "base": {"dataset": {"name": "digits"}, "partition": {"kind": "dirichlet", "alpha": 0.5}, "model": {"name": "cnn"},
             "algorithm": {"name": "fedavg"}, "clients": {"num_clients": 10, "clients_per_round": 10, "lr": 0.05},
             "rounds": 3, "seed": 0},
    "parameters": {"clients.lr": {"loguniform": [0.01, 0.1]}, "clients.momentum": {"choice": [0.0, 0.9]}},
    "search": {"searcher": "tpe", "num_samples": 4, "scheduler": {"kind": "asha", "grace_period": 1}},
    "resources": {"cpu": 1, "gpu": 0},
    "presets": {
        "paper": {
            "title": "ten clients of five",
            "document": "feded.md",
            "base": {"clients.clients_per_round": 5, "partition": {"alpha": None}, "rounds": 4},
            "scenarios": {"partition.alpha": [10, 0.1]},
            "parameters": {"clients.lr": {"loguniform": [0.001, 0.1]}, "clients.momentum": None},
            "search": {"num_samples": 2, "scheduler": {"grace_period": 2}},
            "resources": {"gpu": 0.5},
            "cite": {
                "clients.clients_per_round": {"paper": 5, "where": "§4.1"},
                "partition.alpha": {"paper": None, "where": "platform", "note": "a scenario dimension"},
                "rounds": {"paper": 200, "where": "§4.1", "deviation": "4 rounds here"},
                "scenarios.partition.alpha": {"paper": [10, 0.1], "where": "Table 4.1"},
                "parameters.clients.lr": {"paper": [0.001, 0.1], "where": "§4.3"},
                "parameters.clients.momentum": {"paper": None, "where": "platform", "note": "not swept"},
                "search.num_samples": {"paper": None, "where": "platform"},
                "search.scheduler.grace_period": {"paper": None, "where": "platform"},
                "resources.gpu": {"paper": None, "where": "platform"},
                **{key: {"paper": None, "where": "platform", "note": "the test space's own"} for key in INHERITED},
            },
        },
    },
}


def _write(tmp_path, space, name="space"):
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(space, sort_keys=False))
    return str(path)


def test_overlay_lands_on_each_section():
    preset = parse_presets(SPACE["presets"])["paper"]
    raw = apply_preset(SPACE, preset)
    assert raw["base"]["clients"] == {"num_clients": 10, "clients_per_round": 5, "lr": 0.05}
    assert "alpha" not in raw["base"]["partition"]  # null removes a key
    assert raw["base"]["rounds"] == 4
    assert raw["scenarios"] == {"partition.alpha": [10, 0.1]}
    assert raw["parameters"] == {"clients.lr": {"loguniform": [0.001, 0.1]}}  # null drops a parameter
    assert raw["search"]["scheduler"] == {"kind": "asha", "grace_period": 2}  # merged, not replaced
    assert raw["search"]["num_samples"] == 2 and raw["search"]["searcher"] == "tpe"
    assert raw["resources"] == {"cpu": 1, "gpu": 0.5}
    assert "presets" not in raw
    assert SPACE["base"]["clients"]["clients_per_round"] == 10  # the file itself is unchanged


def test_resources_kept_in_base_are_merged_there():
    space = copy.deepcopy(SPACE)
    space["base"]["resources"] = space.pop("resources")
    raw = apply_preset(space, parse_presets(space["presets"])["paper"])
    assert raw["base"]["resources"] == {"cpu": 1, "gpu": 0.5} and "resources" not in raw


def test_selected_preset_loads_and_the_default_stays(tmp_path):
    path = _write(tmp_path, SPACE)
    default = load_search_space(path)
    assert default.preset is None and default.presets == ("paper",)
    assert default.base["clients"]["clients_per_round"] == 10 and not default.scenarios
    paper = load_search_space(path, preset="paper")
    assert paper.preset_name == "paper"
    assert [c["partition.alpha"] for c in paper.cells()] == [10, 0.1]
    assert paper.trial_config({}).clients.clients_per_round == 5
    assert paper.trial_config({}).resources.gpu == 0.5
    assert list(paper.parameters) == ["clients.lr"]
    # --set still applies on top of the preset
    pinned = load_search_space(path, {"clients.clients_per_round": 2}, preset="paper")
    assert pinned.trial_config({}).clients.clients_per_round == 2


def test_unknown_preset_names_the_allowed_ones(tmp_path):
    path = _write(tmp_path, SPACE)
    with pytest.raises(ConfigError, match=r"^--preset: unknown preset 'papr' for search space 'space' \(did you mean 'paper'\?\); "
                                            r"allowed: paper$"):
        load_search_space(path, preset="papr")
    plain = copy.deepcopy(SPACE)
    del plain["presets"]
    with pytest.raises(ConfigError, match="allowed: none"):
        load_search_space(_write(tmp_path, plain, "plain"), preset="paper")


@pytest.mark.parametrize("change, field", [
    (lambda p: p["cite"].pop("rounds"), "presets.paper.cite.rounds: missing"),
    (lambda p: p["base"].__setitem__("clients.clients_per_round", 6),
     "presets.paper.cite.clients.clients_per_round: the preset sets 6 but the document's value is 5 (§4.1)"),
    (lambda p: p["parameters"].__setitem__("clients.lr", {"loguniform": [0.001, 1.0]}),
     "presets.paper.cite.parameters.clients.lr: the preset sets"),
])
def test_citations_must_agree_with_the_values(change, field):
    raw = copy.deepcopy(SPACE["presets"])
    change(raw["paper"])
    preset = parse_presets(raw)["paper"]
    with pytest.raises(ConfigError) as err:
        check_citations(preset)
    assert str(err.value).startswith(field) and "\n" not in str(err.value)


def test_a_deviation_explains_a_different_value():
    preset = parse_presets(SPACE["presets"])["paper"]
    check_citations(preset)  # rounds 4 against the paper's 200, with its deviation
    assert preset.cite["rounds"].deviation == "4 rounds here"


@pytest.mark.parametrize("raw, field", [
    ({"paper": {"bases": {}}}, "presets.paper.bases: unknown key"),
    ({"paper": []}, "presets.paper: must be a mapping"),
    ({"pa-per": {}}, "presets.pa-per: a preset name"),
    ({"paper": {"scenarios": {"partition.alpha": 3}}}, "presets.paper.scenarios.partition.alpha: must be a non-empty"),
    ({"paper": {"cite": {"rounds": {"paper": 3}}}}, "presets.paper.cite.rounds: must be a mapping with paper"),
    ({"paper": {"cite": {"rounds": {"paper": 3, "where": "§1", "sorce": "x"}}}},
     "presets.paper.cite.rounds.sorce: unknown key"),
    ([1], "presets: must map preset names"),
])
def test_malformed_presets_are_one_line_errors(raw, field):
    with pytest.raises(ConfigError) as err:
        parse_presets(raw)
    assert str(err.value).startswith(field)


def test_same_value_compares_numbers_lists_and_distributions():
    assert same_value(0.1, 0.1000000000001)
    assert not same_value(0.1, 0.11)
    assert same_value({"loguniform": [0.01, 10.0]}, [0.01, 10])
    assert same_value({"choice": [1, 2], "when": {"a": 1}}, [1, 2])
    assert not same_value(True, 1)
    assert same_value(float("inf"), float("inf")) and not same_value(float("inf"), 1e308)
    assert select_preset({}, None, "x") is None
