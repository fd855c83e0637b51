"""Every value that shapes a preset's experiment carries a citation: the *resolved* settings, not only the ones the
preset writes down.

A preset (:mod:`platform.config.presets`) cites each value it sets, checked when it loads. What it inherits (the
space's base, the platform's defaults) shapes the experiment as much: the server's validation split carved out of the
clients' pool, the local optimiser's momentum, the scheduler, each client's size after every carve-out. So the preset
also cites those, under the same ``cite:`` block, as *inherited* values; :func:`check_effective_citations` resolves the
preset over the space's base over the platform defaults and requires a citation of every value that

- shapes the data: the dataset and its normalisation, the partition and its knobs, the server's validation split,
  the clients' own splits, the public data and its size;
- shapes training: the model (and the clients' architectures), the algorithm, the optimiser, learning rate, momentum,
  weight decay, epochs, batch, augmentation, the server's step, rounds and mode;
- shapes the search: what it sweeps (``parameters.<key>``) and over which cells (``scenarios.<key>``), the searcher,
  the trials per arm (scenario cell) and the scheduler, the replicate seeds;
- results from all that (``sizes.*``, from :func:`platform.preflight.data_plan.data_plan`): each client's training
  samples, the server's validation split, the test split and the public pool.

A value the space sweeps (``parameters:``) or varies by cell (``scenarios:``) is cited under that section
(``parameters.<key>``, ``scenarios.<key>``), not as a base value, and a value ``--set`` gives on the command line is
the user's, not the preset's.

An inherited citation is checked as a set one is: the resolved value must equal the document's (``paper``), or the
citation says why not (``deviation``), or ``where: platform`` marks it as our own choice with its reason (``note``).
A size the document does not give cites ``paper: null`` with a ``note`` saying what it follows from.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from platform.config.presets import PLATFORM, Preset, same_value
from platform.errors import ConfigError

#: Per partition kind, the knobs it reads besides the clients' own splits (val_fraction, test_fraction).
PARTITION_KNOBS = {
    "iid": (),
    "dirichlet": ("alpha", "min_share", "equal_sizes"),
    "lda": ("alpha", "samples_per_client", "lda_quirk_compat"),
    "hierarchical_lda": ("alpha", "beta", "samples_per_client", "lda_quirk_compat"),
    "classes_per_client": ("classes_per_client",),
    "unequal_classes": ("alpha", "min_per_class"),
    "natural": (),
}
#: Per public source, the knobs it reads.
PUBLIC_KNOBS = {
    "none": (),
    "train_split": ("fraction", "split", "size"),
    "dataset": ("dataset", "dataset_split", "split", "size"),
    "image": ("image", "size"),
}
SIZE_KEYS = ("sizes.per_client", "sizes.server_validation", "sizes.test", "sizes.public")


def effective_settings(space) -> dict[str, Any]:
    """The resolved value of every experiment-shaping key of ``space`` (its base config and search), by its citation
    key, less those it sweeps, varies by cell or takes from ``--set`` (module doc)."""
    config = space.trial_config({})
    out: dict[str, Any] = {}
    dataset = config.dataset
    out["dataset.name"] = dataset.name
    if dataset.name == "emnist":
        out["dataset.split"] = dataset.split or "letters"
    out["dataset.normalization"] = dataset.normalization
    if dataset.image_size is not None:
        out["dataset.image_size"] = dataset.image_size
    partition = config.partition
    out["partition.kind"] = partition.kind
    for knob in PARTITION_KNOBS.get(partition.kind, ()):
        out[f"partition.{knob}"] = getattr(partition, knob)
    if partition.sampling_alpha is not None:
        out["partition.sampling_alpha"] = partition.sampling_alpha
    out["partition.val_fraction"] = partition.val_fraction
    out["partition.test_fraction"] = partition.test_fraction
    out["server.val_fraction"] = config.server.val_fraction
    if config.server.val_fraction > 0:
        out["server.val_source"] = config.server.val_source
    public = config.public
    out["public.source"] = public.source
    for knob in PUBLIC_KNOBS.get(public.source, ()):
        out[f"public.{knob}"] = getattr(public, knob)
    out["model.name"] = config.model.name
    if config.model.architectures:
        out["model.architectures"] = list(config.model.architectures)
        out["model.assignment"] = config.model.assignment
    out["algorithm.name"] = config.algorithm.name
    clients = config.clients
    for knob in ("num_clients", "clients_per_round", "local_epochs", "batch_size", "optimizer", "lr"):
        out[f"clients.{knob}"] = getattr(clients, knob)
    if clients.optimizer == "sgd":
        out["clients.momentum"] = clients.momentum
    out["clients.weight_decay"] = clients.weight_decay
    out["clients.augment"] = clients.augment
    if clients.augment != "none":
        out["clients.augment_padding"] = clients.augment_padding
    out["server.lr"] = config.server.lr
    out["server.momentum"] = config.server.momentum
    out["rounds"] = config.rounds
    out["mode"] = config.mode
    search = space.search
    out["search.searcher"] = search.searcher
    out["search.num_samples"] = search.num_samples
    out["search.scheduler.kind"] = search.scheduler.kind
    if search.scheduler.kind == "asha":
        out["search.scheduler.grace_period"] = search.scheduler.grace_period
        out["search.scheduler.reduction_factor"] = search.scheduler.reduction_factor
    out["search.seeds"] = list(space.seeds)
    if space.scenarios:
        out["search.trials_per_cell"] = [trials for _, trials in space.trials_per_cell()]
    for key, values in space.scenarios.items():
        out[f"scenarios.{key}"] = list(values)
    for key, dist in space.parameters.items():
        out[f"parameters.{key}"] = {dist.kind: list(dist.args), **({"when": dict(dist.when)} if dist.when else {})}
    varied = set(space.parameters) | set(space.scenarios) | set(space.overrides)
    return {key: value for key, value in out.items() if key not in varied}


def size_settings(plan) -> dict[str, Any]:
    """The sizes a :class:`~platform.preflight.data_plan.DataPlan` gives, by their citation keys: a size every client
    shares as one number, unequal ones as ``{min, median, max}``."""
    sizes = np.asarray(plan.client_train)
    if sizes.size and sizes.min() == sizes.max():
        per_client: Any = int(sizes[0])
    else:
        per_client = {"min": int(sizes.min()), "median": float(np.median(sizes)), "max": int(sizes.max())}
    out = {"sizes.per_client": per_client, "sizes.server_validation": plan.server_val, "sizes.test": plan.test}
    if plan.public_source != "none":
        out["sizes.public"] = plan.public
    return out


def _checked(preset: Preset, resolved: dict[str, Any], sets: set) -> list[str]:
    """The lines of what is wrong with ``preset``'s citations of ``resolved`` (empty when nothing is)."""
    problems = []
    for key, value in resolved.items():
        citation = preset.cite.get(key)
        if citation is None:
            source = ("the data plan gives" if key.startswith("sizes.")
                      else "inherited from the space's base or the platform's defaults")
            problems.append(f"{key}: missing: the experiment runs with {key} = {value!r} ({source}); cite it "
                            f"(paper, where) or mark it as our choice (where: platform, note: why)")
            continue
        if key in sets:  # set by the preset: checked against the value it sets when it loads
            continue
        if citation.where == PLATFORM or citation.deviation is not None:
            if citation.where == PLATFORM and not (citation.note or citation.deviation):
                problems.append(f"{key}: where: platform needs a note giving the reason for our value {value!r}")
            continue
        if citation.paper is None and key.startswith("sizes.") and citation.note:
            continue  # the document gives no size; the note says what ours follows from
        if not same_value(value, citation.paper):
            problems.append(f"{key}: the experiment runs with {value!r} but the document's value is "
                            f"{citation.paper!r} ({citation.where}); make them agree or give the deviation and "
                            f"its reason")
    return problems


def check_effective_citations(space, plan=None) -> None:
    """Every experiment-shaping value of preset-loaded ``space`` is cited and agrees with its citation (module doc);
    with ``plan`` (its base config's data plan) the sizes too. One :class:`ConfigError` naming the first that is not;
    nothing to check without a preset."""
    problems = citation_problems(space, plan)
    if problems:
        key, _, message = problems[0].partition(": ")
        more = f" ({len(problems) - 1} more: python docs/generate.py --problems)" if len(problems) > 1 else ""
        raise ConfigError(f"presets.{space.preset.name}.cite.{key}", message + more)


def citation_problems(space, plan=None) -> list[str]:
    """What :func:`check_effective_citations` would refuse, one ``"key: what is wrong"`` line each. The sizes are
    compared only where the command line changes nothing but ``stand_in`` (a ``--set`` of a size's cause changes the
    size)."""
    preset = space.preset
    if preset is None or not preset.document:  # no document: a variant of the embedded default, nothing to cite
        return []
    resolved = effective_settings(space)
    if plan is not None and set(space.overrides) <= {"stand_in"}:
        resolved.update(size_settings(plan))
    sets = set(preset.values())
    problems = _checked(preset, resolved, sets)
    known = set(resolved) | sets | set(SIZE_KEYS) | set(space.overrides) | set(space.parameters) | set(space.scenarios)
    problems += [f"{key}: cites a value that is neither set by the preset nor one the experiment resolves"
                 for key in preset.cite if key not in known and key != "reference"]
    return problems


__all__ = ["check_effective_citations", "citation_problems", "effective_settings", "size_settings"]
