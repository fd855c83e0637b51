"""What a command would run, before it runs: ``--dry-run`` (the resolved settings, no Ray).

``--dry-run`` loads and validates the space (preset and ``--set`` applied), prints the resolved base config, the
cells with their trials, the seeds, rounds and resources per trial, and whether the data files are where the config
says; nothing starts, so it takes seconds and works where the files are absent.

``--estimate`` (:mod:`platform.preflight.estimate`) measures a trial's first rounds and predicts the sweep.
"""
from __future__ import annotations

from typing import Optional

from platform.config.schema import to_dict
from platform.errors import ConfigError
from platform.preflight.citations import check_effective_citations
from platform.preflight.data_plan import check_cells, data_plan


def missing_data(config) -> Optional[str]:
    """Why the config's data files (private and public) are not where it says, in a few words; None when they are."""
    from platform.data.datasets import check_dataset_available
    from platform.data.public import check_public_available

    try:
        check_dataset_available(config.dataset)
        check_public_available(config.public, config.dataset)
    except ConfigError as err:
        return str(err).split("; ")[0]
    return None


def data_status(config) -> str:
    """One line: where the trial's data come from, and whether its files are there."""
    name = config.dataset.name
    if getattr(config, "stand_in", False):
        return f"data: stand-in for {name} (generated, the real one's shapes, classes and sizes)"
    reason = missing_data(config)
    if reason is not None:
        return f"data: {name}: NOT FOUND ({reason}); add --stand-in to run on generated data of its shapes"
    where = f" under {config.dataset.root}" if config.dataset.root else " (embedded)"
    return f"data: {name}{where}: found"


CORE_SECTIONS = ("dataset", "partition", "model", "algorithm", "clients", "server", "resources")


def _config_lines(config) -> list[str]:
    """The resolved config as YAML: every section the experiment is about, and the others only where they differ
    from their defaults (named in one line otherwise)."""
    import yaml

    from platform.config.experiment import build_experiment

    data = to_dict(config)
    try:
        default = to_dict(build_experiment({"algorithm": {"name": config.algorithm.name}}))
    except ConfigError:  # a method that refuses the bare defaults (MNFL, pFedDF: no public data): plain defaults
        from platform.config.experiment import ExperimentConfig

        default = to_dict(ExperimentConfig())
    shown = {k: v for k, v in data.items()
             if k in CORE_SECTIONS or not isinstance(v, dict) or v != default.get(k)}
    # knobs of a kind the config does not use: the synthetic generator's, the source image's crops
    if isinstance(shown.get("dataset"), dict) and config.dataset.name != "synthetic":
        shown["dataset"] = {k: v for k, v in shown["dataset"].items() if not k.startswith("synthetic_")}
    if isinstance(shown.get("public"), dict) and config.public.source != "image":
        shown["public"] = {k: v for k, v in shown["public"].items() if k not in ("image", "seed", "patches")}
    lines = ["  " + line for line in yaml.safe_dump(shown, sort_keys=False, default_flow_style=None,
                                                     width=110).rstrip().splitlines()]
    hidden = [k for k in data if k not in shown]
    if hidden:
        lines.append(f"  # at their defaults: {', '.join(hidden)}")
    return lines


def _resources(config, search=None) -> str:
    r = config.resources
    text = f"cpu {r.cpu:g}, gpu {r.gpu:g}" + (f", {r.actors} client actor(s)" if r.actors else "")
    if search is not None:
        most = search.max_concurrent_trials
        text += f"; at most {most} trial(s) at once" if most else "; trials at once: as many as the cluster fits"
    return text


def _heading(kind: str, name: str, preset) -> str:
    which = f" --preset {preset.name} ({preset.title})" if preset is not None else " (embedded default)"
    return f"{kind} {name}{which}: dry run, nothing started"


def sweep_plan(space, base_config) -> str:
    """The ``platform.sweep --dry-run`` text of a loaded space."""
    from platform.config.trials import grid_subset_note

    lines = [_heading("sweep", space.name, space.preset)]
    lines += [f"note: {note}" for note in space.notes]
    if space.preset is not None and space.preset.document:
        lines.append(f"settings from: docs/methods/{space.preset.document} (docs/reference/paper_settings.md cites each value)")
    lines.append(data_status(base_config))
    plan = data_plan(base_config)  # raises the ConfigError the run would raise as it builds its data
    lines += plan.lines()
    check_effective_citations(space, plan)  # the sizes too: each client's, the validation split's, the public pool's
    check_cells(space)
    lines.append("resolved base config" + (" (scenario keys vary by cell, below):" if space.scenarios else ":"))
    lines += _config_lines(base_config)
    cells = space.trials_per_cell()
    searcher = space.search.searcher
    if space.parameters:
        lines.append("swept: " + "; ".join(f"{k} {d.kind}{list(d.args)}" + (f" when {d.when}" if d.when else "")
                                           for k, d in space.parameters.items()))
    if space.scenarios:
        lines.append(f"scenario cells: {len(cells)} ({' x '.join(space.scenarios)}), one study each, in this order:")
        rounds_key = "rounds" in space.scenarios
        subsets = [grid_subset_note(space.cell_space(i)) for i in range(len(cells))]
        for i, (label, trials) in enumerate(cells):
            extra = f", {space.cell_space(i).trial_config({}).rounds} rounds" if rounds_key else ""
            lines.append(f"  cell {i + 1:>2}  {label}: {trials} trial(s) ({searcher}){extra}")
            if subsets[i] and len(set(subsets)) > 1:
                lines.append(f"           {subsets[i]}")
        if subsets[0] and len(set(subsets)) == 1:
            lines.append(f"  every cell: {subsets[0]}")
    else:
        lines.append(f"trials: {cells[0][1]} ({searcher})")
        if grid_subset_note(space):
            lines.append(f"  {grid_subset_note(space)}")
    if searcher == "grid" and space.search.num_samples > 1:
        lines.append(f"each grid point runs {space.search.num_samples} times (search.num_samples / --repeats)")
    total = sum(t for _, t in cells)
    seeds = space.seeds
    lines.append(f"seeds: {seeds} (replicates inside every trial)")
    lines.append(f"rounds per trial: {base_config.rounds} (mode {base_config.mode})")
    scheduler = space.search.scheduler
    if scheduler.kind == "asha":
        lines.append(f"early stopping: ASHA, grace period {scheduler.grace_period} round(s)")
    lines.append(f"resources per trial: {_resources(base_config, space.search)}")
    lines.append(f"total: {total} trial(s) x {len(seeds)} seed(s) = {total * len(seeds)} run(s), "
                 f"selecting on {', '.join(m for m in space.search.metrics)}")
    lines.append("its cost: --estimate instead of --dry-run measures its trials where they will run and predicts "
                 "the sweep's wall time")
    return "\n".join(lines)


def run_plan(config, name: str, preset=None) -> str:
    """The ``platform.run --dry-run`` text of one experiment config."""
    lines = [_heading("run", name, preset), data_status(config), *data_plan(config).lines(),
             "resolved config:"]
    lines += _config_lines(config)
    lines.append(f"seed: {config.seed}; rounds: {config.rounds} (mode {config.mode}); resources: {_resources(config)}")
    return "\n".join(lines)
