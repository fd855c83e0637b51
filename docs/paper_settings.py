"""The papers' own settings of the named sweeps, as a table per preset, generated from the spaces' ``presets:``
blocks (platform/config/presets.py): every value that shapes the experiment, whether the preset sets it or inherits
it from the space's base and the platform's defaults (platform/preflight/citations.py), with the sizes the data plan
gives (on stand-in labels: the real split sizes, no files needed), the document's value, where the document gives
it, and the deviation with its reason.

A module of docs/generate.py, which writes docs/reference/paper_settings.md from :func:`render`
(``python docs/generate.py``; ``--check`` compares, ``--problems`` lists every uncited value).
tests/unit/test_paper_settings.py checks that the committed page equals :func:`render`, so it cannot drift.
"""
from __future__ import annotations

import math
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
if os.path.dirname(HERE) not in sys.path:  # run as a script from anywhere: the repository's packages first
    sys.path.insert(0, os.path.dirname(HERE))

from platform.config.presets import PLATFORM, Preset, same_value  # noqa: E402
from platform.config.search_space import load_search_space  # noqa: E402
from platform.config.space_files import read_search_space  # noqa: E402
from platform.preflight.citations import citation_problems, effective_settings, size_settings  # noqa: E402
from platform.preflight.data_plan import data_plan  # noqa: E402

#: The named sweeps, in the order the document lists them.
SPACES = ("feded_beta", "mnfl_rho", "single_image_pruning", "fedaux_dp", "fedkp_bandwidth", "fedpa_shrinkage_burnin")
OUTPUT = os.path.join(HERE, "reference", "paper_settings.md")


def _value(value) -> str:
    """A value as the table shows it: YAML-like scalars, lists in brackets, a distribution by its bounds."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return "inf" if math.isinf(value) else f"{value:g}"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_value(v) for v in value) + "]"
    if isinstance(value, dict):
        if set(value) >= {"source", "values"}:  # a reference block
            return f"{len(value.get('values') or [])} reference values"
        parts = []
        for key, item in value.items():
            parts.append(f"when {_when(item)}" if key == "when" else f"{key} {_value(item)}")
        return ", ".join(parts)
    return str(value)


def _when(condition: dict) -> str:
    return ", ".join(f"{k} = {_value(v)}" for k, v in condition.items())


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ").strip()


def loaded(name: str, preset: str):
    """(the space loaded with ``preset`` on stand-in data, its base config's data plan)."""
    space = load_search_space(name, {"stand_in": True}, preset=preset)
    return space, data_plan(space.trial_config({}))


def resolved_rows(space, plan) -> dict:
    """What the preset's table lists: every value it sets, then every value it inherits that shapes the experiment,
    then the sizes (key -> (ours, inherited?))."""
    preset = space.preset
    rows = {key: (value, False) for key, value in preset.values().items()}
    if preset.document:
        inherited = {**effective_settings(space), **size_settings(plan)}
        rows.update({key: (value, True) for key, value in inherited.items() if key not in rows})
    return rows


def preset_table(space, plan) -> list[str]:
    """The rows of one preset: setting, ours, the document's, where, deviation or note."""
    preset: Preset = space.preset
    lines = ["| Setting | Ours | Paper | Where | Deviation (reason) / note |", "|---|---|---|---|---|"]
    for key, (ours, inherited) in resolved_rows(space, plan).items():
        shown = f"`{key}`" + (" (inherited)" if inherited and not key.startswith("sizes.") else "")
        cite = preset.cite.get(key)
        if cite is None:  # refused before a preset is used; show it rather than hide it
            lines.append(f"| {shown} | {_cell(_value(ours))} | ? | ? | NOT CITED |")
            continue
        where = "platform (our choice)" if cite.where == PLATFORM else cite.where
        paper = "-" if cite.where == PLATFORM and cite.paper is None else _value(cite.paper)
        if cite.deviation:
            remark = f"**deviation:** {cite.deviation}"
        elif cite.where != PLATFORM and not same_value(ours, cite.paper) and not (
                key.startswith("sizes.") and cite.paper is None):
            remark = "**differs, no deviation given**"
        else:
            remark = ""
        if cite.note:
            remark = f"{remark}; {cite.note}" if remark else cite.note
        lines.append(f"| {shown} | {_cell(_value(ours))} | {_cell(paper)} | {_cell(where)} | {_cell(remark)} |")
    return lines


def problems() -> list[str]:
    """Every preset's uncited or disagreeing values, one line each (``space --preset name: key: what``)."""
    out = []
    for name in SPACES:
        for preset in read_search_space(name)[2]:
            space, plan = loaded(name, preset)
            out += [f"{name} --preset {preset}: {line}" for line in citation_problems(space, plan)]
    return out


def render() -> str:
    """docs/reference/paper_settings.md, from the presets of :data:`SPACES`."""
    out = ["# The papers' settings of the named sweeps", "",
           "Generated by `python docs/generate.py` from the `presets:` blocks of the search spaces (see "
           "`platform/config/presets.py`); do not edit by hand. Run one with `python -m platform.sweep SPACE "
           "--preset NAME` (`--dry-run` shows the resolved settings). Without `--preset` each space runs its "
           "embedded default (scikit-learn digits), unchanged. How to run one and what it costs: "
           "[The papers' settings and their cost](../how-to/paper_settings.md).", "",
           "Each table lists every value that shapes the experiment: first those the preset sets, then those it "
           "inherits from the space's base and the platform's defaults (marked *inherited*), then the sizes the "
           "data plan gives (`sizes.*`: each client's training samples after every carve-out, the server's "
           "validation split, the test split, the public pool; on stand-in labels, whose split sizes are the "
           "real ones, so no files are needed). For each: ours, the document's (`paper`, in the config's units; a "
           "swept range as its bounds or values), where the document gives it, and, where ours differs, the "
           "deviation and its reason. `platform` marks our own choices that the document does not make, each with "
           "its reason. `null` in *Ours* removes the key (its default applies); in *Paper* it means the document "
           "gives no value.", ""]
    for name in SPACES:
        _, _, presets = read_search_space(name)
        out += [f"## `{name}`", ""]
        for preset in presets.values():
            document = (f"[docs/methods/{preset.document}](../methods/{preset.document})" if preset.document
                        else "-")
            out += [f"### `--preset {preset.name}`: {preset.title}", "", f"Document: {document}.", ""]
            out += preset_table(*loaded(name, preset.name))
            out.append("")
    return "\n".join(out).rstrip() + "\n"
