"""The papers' settings of the six named sweeps (``presets:`` blocks): every preset loads fully validated,
every value it sets is cited, a wrong value is refused, docs/reference/paper_settings.md is generated from them,
each ``paper`` preset runs the paper's main dataset, and every section or table a citation names exists in its spec
digest."""
from __future__ import annotations

import dataclasses
import importlib.util
import os
import re

import pytest

from platform.config.presets import check_citations
from platform.config.search_space import load_search_space
from platform.config.space_files import read_search_space
from platform.errors import ConfigError
from platform.preflight import check_settings

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SPACES = ("feded_beta", "mnfl_rho", "single_image_pruning", "fedaux_dp", "fedkp_bandwidth", "fedpa_shrinkage_burnin")

#: The dataset of each space's ``paper`` preset (the issue's table: the document's main setting).
PAPER_DATASETS = {"feded_beta": "mnist", "fedkp_bandwidth": "mnist", "fedpa_shrinkage_burnin": "mnist",
                  "mnfl_rho": "emnist", "fedaux_dp": "cifar10", "single_image_pruning": "cifar10"}
#: Secondary presets the issue names, with their datasets.
SECONDARY_DATASETS = {("fedpa_shrinkage_burnin", "paper_emnist62"): "emnist",
                      ("fedpa_shrinkage_burnin", "paper_cifar100"): "cifar100",
                      ("feded_beta", "paper_cifar10"): "cifar10", ("mnfl_rho", "paper_cifar10"): "cifar10"}

#: Presets that vary the embedded default instead of giving a paper's setting (a named arm: digits, CPU).
EMBEDDED_VARIANTS = {("single_image_pruning", "mismatched_photo")}

#: Config fields other branches add: a preset may set them before they are merged here.
PENDING_FIELDS = {"clients.augment", "clients.augment_padding", "clients.precision", "stand_in"}


def _presets(name):
    return read_search_space(name)[2]


def _all_presets():
    return [(name, preset) for name in SPACES for preset in _presets(name)]


def _pending(name: str, preset: str) -> set[str]:
    """The fields a preset sets that this branch's config does not know yet (PENDING_FIELDS)."""
    from platform.config.experiment import ClientsConfig, ExperimentConfig

    known = {f"clients.{f.name}" for f in dataclasses.fields(ClientsConfig)}
    known |= {f.name for f in dataclasses.fields(ExperimentConfig)}
    sets = set(_presets(name)[preset].values())
    return {key for key in sets & PENDING_FIELDS if key not in known}


@pytest.mark.parametrize("name,preset", _all_presets())
def test_every_preset_loads_fully_validated(name, preset):
    pending = _pending(name, preset)
    if pending:
        pytest.skip(f"sets {', '.join(sorted(pending))}, which another branch adds to the config")
    space = load_search_space(name, preset=preset, check=check_settings)
    assert space.preset_name == preset
    if (name, preset) in EMBEDDED_VARIANTS:
        assert space.trial_config({}).dataset.name in ("digits", "digits32")
        assert space.trial_config({}).resources.gpu == 0
        return
    assert space.search.max_concurrent_trials is None  # Tune fits as many trials as the cluster holds
    assert space.trial_config({}).resources.gpu > 0  # every paper preset asks for a GPU


@pytest.mark.parametrize("name", SPACES)
def test_the_embedded_default_still_loads(name):
    space = load_search_space(name, check=check_settings)
    assert space.preset is None and space.trial_config({}).dataset.name in ("digits", "digits32")


@pytest.mark.parametrize("name,preset", _all_presets())
def test_every_preset_is_cited(name, preset):
    check_citations(_presets(name)[preset])


def test_mnfl_table_4_runs_at_the_sensitivity_runs_rates():
    """Table 4 (rho) is a sensitivity run: eta1 = eta2 = eta3 = 0.01 on every dataset, CIFAR-10 included (not the
    heterogeneous accuracy runs' 0.02)."""
    for preset in ("paper", "paper_cifar10"):
        config = load_search_space("mnfl_rho", preset=preset).trial_config({})
        mnfl = config.algorithm.params
        distill_lr = mnfl.distill_lr if mnfl.distill_lr is not None else config.clients.lr  # null: the local rate
        assert (config.clients.lr, distill_lr, mnfl.coefficient_lr) == (0.01, 0.01, 0.01), preset


def test_a_value_that_differs_from_its_citation_is_refused():
    preset = _presets("fedkp_bandwidth")["paper"]
    base = dict(preset.overlay["base"], **{"clients.lr": 0.02})  # the document says 0.01, no deviation given
    wrong = dataclasses.replace(preset, overlay={**preset.overlay, "base": base})
    with pytest.raises(ConfigError) as err:
        check_citations(wrong)
    assert err.value.field == "presets.paper.cite.clients.lr"
    assert "\n" not in str(err.value) and "0.02" in str(err.value) and "deviation" in str(err.value)
    cite = dict(preset.cite)
    cite["clients.lr"] = dataclasses.replace(cite["clients.lr"], deviation="a reason")
    check_citations(dataclasses.replace(wrong, cite=cite))  # with its reason, the same value is accepted


def test_an_uncited_value_is_refused():
    preset = _presets("fedaux_dp")["paper"]
    cite = {k: v for k, v in preset.cite.items() if k != "rounds"}
    with pytest.raises(ConfigError) as err:
        check_citations(dataclasses.replace(preset, cite=cite))
    assert err.value.field == "presets.paper.cite.rounds" and "\n" not in str(err.value)


def _paper_settings_module():
    spec = importlib.util.spec_from_file_location("paper_settings", os.path.join(REPO, "docs", "paper_settings.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_docs_paper_settings_is_generated_from_the_presets():
    module = _paper_settings_module()
    assert tuple(module.SPACES) == SPACES
    with open(os.path.join(REPO, "docs", "reference", "paper_settings.md"), encoding="utf-8") as fh:
        assert fh.read() == module.render(), "docs/reference/paper_settings.md is stale: run python docs/generate.py"


@pytest.mark.parametrize("name", SPACES)
def test_paper_presets_run_the_papers_main_dataset(name):
    presets = _presets(name)
    assert presets["paper"].values()["dataset.name"] == PAPER_DATASETS[name]
    for (space, preset), dataset in SECONDARY_DATASETS.items():
        if space == name:
            assert presets[preset].values()["dataset.name"] == dataset


METHODS = os.path.join(REPO, "docs", "methods")  # the project's own digest of each document


SECTION = re.compile(r"§(\d+(?:\.\d+)*)")
TABLE = re.compile(r"\b(Table|Fig\.)\s*([A-Z]?\d+(?:\.\d+)?)")


def _section_found(text: str, section: str) -> bool:
    return re.search(rf"^#+\s+{re.escape(section)}[.\s]", text, re.M) is not None


@pytest.mark.parametrize("name,preset", [(n, p) for n, p in _all_presets() if (n, p) not in EMBEDDED_VARIANTS])
def test_every_cited_section_and_table_is_in_its_document(name, preset):
    chosen = _presets(name)[preset]
    assert chosen.document, "a paper's preset names its document (a variant of the embedded default: EMBEDDED_VARIANTS)"
    with open(os.path.join(METHODS, chosen.document), encoding="utf-8") as fh:
        text = fh.read()
    flat = re.sub(r"(Fig\.)\s+", r"\1", text)
    for key, cite in chosen.cite.items():
        for section in SECTION.findall(cite.where):
            assert _section_found(text, section), f"{name} --preset {preset}: {key} cites §{section}, not a " \
                                                  f"section of {chosen.document}"
        for kind, number in TABLE.findall(cite.where):
            assert f"{kind}{number}" in flat.replace(" ", "") or f"{kind} {number}" in text, \
                f"{name} --preset {preset}: {key} cites {kind} {number}, not in {chosen.document}"


@pytest.mark.parametrize("name,preset", [("mnfl_rho", None), ("mnfl_rho", "paper"), ("fedkp_bandwidth", "paper"),
                                         ("fedpa_shrinkage_burnin", "paper_cifar100")])
def test_dry_run_plan_of_a_preset(name, preset):
    """--dry-run's plan, without data files: MNFL (which refuses the bare defaults the plan compares against) and
    the slips' fixes as the dry run shows them."""
    from platform.preflight.plan import sweep_plan

    space = load_search_space(name, preset=preset, check=check_settings)
    text = sweep_plan(space, space.trial_config({}))
    if preset:
        assert "docs/reference/paper_settings.md" in text and "as many as the cluster fits" in text
    if (name, preset) == ("fedkp_bandwidth", "paper"):  # alpha as cells 10 and 0.1, and a FedAvg arm
        assert "algorithm.name=fedavg, partition.alpha=10.0: 1 trial(s)" in text
        assert "algorithm.name=fedavg, partition.alpha=0.1: 1 trial(s)" in text
        # §7.2: every class trimmed to 5,400 (MNIST's rarest digit has 5,421), 540 a client; the validation split
        # from the test split (§10.1), so no carve-out shrinks the pool (from the training pool: 480 a client)
        assert "per client (100 clients), training samples: 540 each" in text
        assert "server validation split 1,000 (from the test split); clients' pool 60,000" in text
    if (name, preset) == ("fedpa_shrinkage_burnin", "paper_cifar100"):  # burn-in at 1/4, 1/2, 3/4 of T = 800
        assert space.scenarios["algorithm.burnin_rounds"] == (200, 400, 600) and "rounds per trial: 800" in text
        assert "per client (500 clients), training samples: 100 each" in text  # §7.4: all 50,000, 100 a client


def test_the_slips_in_the_paper_presets():
    """single_image: the paper's 78k ResNet-8 and its ranges; fedaux: delta as cells; feded: the CE arm."""
    si = _presets("single_image_pruning")["paper"].values()
    assert si["model.name"] == "resnet8_narrow"
    assert si["parameters.algorithm.kmeans_k"]["choice"][-1] == 1000
    assert 0.1 in si["parameters.algorithm.entropy_rate"]["choice"]
    aux = load_search_space("fedaux_dp", preset="paper", check=check_settings)
    assert aux.scenarios["algorithm.delta"] == (1e-6, 1e-5, 1e-4)
    assert load_search_space("fedaux_dp", preset="paper_fedprox_p", check=check_settings) \
        .trial_config({}).algorithm.name == "fedprox"
    feded = load_search_space("feded_beta", preset="paper", check=check_settings)
    assert feded.scenarios["algorithm.loss"] == ("mse_logits", "ce_hard")
    baselines = load_search_space("feded_beta", preset="paper_baselines", check=check_settings)
    assert baselines.scenarios["algorithm.name"] == ("fedavg", "fedprox")
