"""Every value that shapes a preset's experiment is cited, inherited ones and the data plan's sizes included
(platform/preflight/citations.py): the shipped presets pass, and each way a citation can be missing or wrong is
refused with one line naming it."""
from __future__ import annotations

import dataclasses

import pytest

from platform.config.presets import Citation
from platform.config.search_space import load_search_space
from platform.config.space_files import read_search_space
from platform.errors import ConfigError
from platform.preflight.citations import check_effective_citations, citation_problems, effective_settings
from platform.preflight.data_plan import data_plan

SPACES = ("feded_beta", "mnfl_rho", "single_image_pruning", "fedaux_dp", "fedkp_bandwidth", "fedpa_shrinkage_burnin")


def _loaded(name, preset, overrides=None):
    space = load_search_space(name, {"stand_in": True, **(overrides or {})}, preset=preset)
    return space, data_plan(space.trial_config({}))


def _with_cite(space, **changes):
    """``space`` with its preset's citations changed: key -> Citation, or None to drop it."""
    cite = dict(space.preset.cite)
    for key, citation in changes.items():
        key = key.replace("__", ".")
        if citation is None:
            cite.pop(key, None)
        else:
            cite[key] = citation
    return dataclasses.replace(space, preset=dataclasses.replace(space.preset, cite=cite))


@pytest.mark.parametrize("name,preset", [(n, p) for n in SPACES for p in read_search_space(n)[2]])
def test_every_preset_cites_every_value_that_shapes_its_experiment(name, preset):
    space, plan = _loaded(name, preset)
    assert citation_problems(space, plan) == []


def test_what_counts_as_shaping_the_experiment():
    space, _ = _loaded("fedkp_bandwidth", "paper")
    settings = effective_settings(space)
    # inherited from the platform's defaults: the server's validation carve-out, the optimiser's momentum, ...
    for key in ("server.val_fraction", "server.val_source", "clients.weight_decay", "clients.augment", "rounds",
                "search.searcher", "search.scheduler.kind", "search.seeds"):
        assert key in settings, key
    # the arms' budgets: 20 TPE trials for each FedKP variant and alpha, one run for FedAvg (nothing to sweep)
    assert settings["search.trials_per_cell"] == [20, 20, 20, 20, 1, 1]
    # what the cells vary and the sampler sweeps is cited under scenarios./parameters., not as a base value
    assert "partition.alpha" not in settings and "algorithm.bandwidth_scaling" not in settings


def test_an_uncited_inherited_value_is_refused():
    space, plan = _loaded("fedkp_bandwidth", "paper")
    with pytest.raises(ConfigError) as err:
        check_effective_citations(_with_cite(space, server__val_fraction=None), plan)
    assert err.value.field == "presets.paper.cite.server.val_fraction"
    assert "missing" in err.value.message and "0.1" in err.value.message and "\n" not in str(err.value)


def test_an_inherited_value_that_differs_from_its_citation_is_refused():
    space, plan = _loaded("fedkp_bandwidth", "paper")
    wrong = Citation("clients.weight_decay", 0.0005, "§10.3")
    with pytest.raises(ConfigError) as err:
        check_effective_citations(_with_cite(space, clients__weight_decay=wrong), plan)
    assert err.value.field == "presets.paper.cite.clients.weight_decay"
    assert "0.0005" in err.value.message and "deviation" in err.value.message
    explained = dataclasses.replace(wrong, deviation="a reason")
    check_effective_citations(_with_cite(space, clients__weight_decay=explained), plan)  # with its reason: accepted


def test_a_size_that_differs_from_the_cited_one_is_refused():
    """MNIST's 60,000 training images over 100 clients: 540 each once the validation split comes from the test
    split (Appendix C); a citation of 480 (what a 10 % carve-out of the training pool left) is refused."""
    space, plan = _loaded("fedkp_bandwidth", "paper")
    assert plan.client_train == (540,) * 100
    wrong = Citation("sizes.per_client", 480, "§7.2")
    with pytest.raises(ConfigError) as err:
        check_effective_citations(_with_cite(space, sizes__per_client=wrong), plan)
    assert err.value.field == "presets.paper.cite.sizes.per_client" and "540" in err.value.message
    check_effective_citations(_with_cite(space, sizes__per_client=wrong))  # without the plan sizes are not compared


def test_a_platform_choice_needs_its_reason():
    space, plan = _loaded("fedkp_bandwidth", "paper")
    bare = Citation("clients.augment", None, "platform")
    with pytest.raises(ConfigError) as err:
        check_effective_citations(_with_cite(space, clients__augment=bare), plan)
    assert err.value.field == "presets.paper.cite.clients.augment" and "note" in err.value.message


def test_a_citation_of_nothing_the_experiment_has_is_refused():
    space, plan = _loaded("fedkp_bandwidth", "paper")
    stray = Citation("clients.lr_decay", 0.5, "§10.3")
    with pytest.raises(ConfigError) as err:
        check_effective_citations(_with_cite(space, clients__lr_decay=stray), plan)
    assert err.value.field == "presets.paper.cite.clients.lr_decay" and "neither" in err.value.message


def test_a_value_set_on_the_command_line_is_the_users():
    """--set of a cited value (and of a size's cause) is the user's experiment: nothing is refused."""
    space, plan = _loaded("fedkp_bandwidth", "paper", {"clients.momentum": 0.5, "clients.num_clients": 50})
    assert "clients.momentum" not in effective_settings(space)
    assert citation_problems(space, plan) == []


def test_a_variant_of_the_embedded_default_cites_nothing():
    space, plan = _loaded("single_image_pruning", "mismatched_photo")
    assert not space.preset.document and citation_problems(space, plan) == []


def test_the_dry_run_refuses_a_preset_whose_size_is_miscited():
    from platform.preflight.plan import sweep_plan

    space, _ = _loaded("fedkp_bandwidth", "paper")
    wrong = _with_cite(space, sizes__per_client=Citation("sizes.per_client", 480, "§7.2"))
    with pytest.raises(ConfigError, match="sizes.per_client"):
        sweep_plan(wrong, wrong.trial_config({}))
    text = sweep_plan(space, space.trial_config({}))
    assert "540 each" in text
