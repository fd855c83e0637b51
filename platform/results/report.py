"""One sweep's results as ``report.md`` and ``report.html``, written to a directory and logged to the sweep's parent
run under ``report/`` (the command is :mod:`platform.report`).

The report holds: the question and the sweep's settings; the ablation table (per arm, i.e. per value of each
categorical swept parameter and per scenario cell, the arm's best trial on the selection metric with that metric and
test_accuracy as mean ± population std over seeds); the best trial per study (scenario cell), ranked as the console
ranks them, with its lead over the runner-up and whether that is within noise, and one sentence per swept parameter
on how far it moves the metric in units of the seeds' std (:mod:`platform.results.report_ranking`); the learning
curves of the best and the worst trial; one sensitivity plot per swept parameter; the paper's values beside ours
where the search space has a ``reference:`` block; and, with ``--compare``, the arms several sweeps share side by
side. It reads the store only, so it works on a sweep still running (each trial's latest values). Every figure comes
from :func:`platform.results.sweep_artifacts.trials_table`.
"""
from __future__ import annotations

import base64
import html
import os
import re
from dataclasses import dataclass, field
from typing import Any, Optional, Sequence, Union

from platform.cli import results_home
from platform.config.run_schema import is_number
from platform.errors import UserError
from platform.results.report_ranking import (best_row, ranked_rows, spread_sentences, trial_name, winner_sentence,
                                             winners)
from platform.results.sweep_artifacts import (TEST_METRIC, learning_curves_png, sensitivity_plots, table_metrics,
                                              trial_frame, trials_table, warn, write_table_files)
from platform.results.sweep_results import (Objective, SweepResults, SweptParameter, mlflow_client, same_value,
                                            value_text)

ARTIFACT_REPORT = "report"  # on the parent run: report/report.md, report/report.html and the PNGs
INACTIVE = "—"  # an arm where a conditional parameter is not active, a missing figure


# ---------------------------------------------------------------------------------------------------------------------
# What to select on, what to compare against

def resolve_objective(results: SweepResults, metric: Optional[str]) -> Objective:
    """The selection objective: ``--metric`` (its mode: the sweep's where it is a search metric, else the one the
    sweep's algorithms declare), else the sweep's (first) search metric. A metric no trial logged is a UserError."""
    if metric is None:
        return results.objective
    logged = {name for t in results.trials for name in t.metrics}
    if results.trials and metric not in logged:
        raise UserError(f"--metric: no trial of sweep {results.parent_run_id} logged {metric!r}; logged: "
                        f"{', '.join(table_metrics(results)) or 'none'}")
    for objective in results.objectives:
        if objective.metric == metric:
            return objective
    return Objective(metric, declared_mode(results, metric))


def declared_mode(results: SweepResults, metric: str) -> str:
    """The direction the sweep's algorithms declare for ``metric`` (min for an undeclared ``*loss``, else max)."""
    try:
        from algorithms import resolve_algorithm

        for name in results.algorithms:
            declared = resolve_algorithm(name).declared_metrics()
            if metric in declared:
                return declared[metric].mode
    except Exception:  # noqa: BLE001 - a plug-in algorithm that no longer imports: fall back on the name
        pass
    return "min" if metric.endswith("loss") else "max"


def find_reference(space: str, preset: Optional[str] = None):
    """The space's ``reference:`` block (with ``preset`` laid over the file: the sweep's preset); None when it has none
    or its file is not found (the store outlives files)."""
    from platform.config.search_space import load_reference

    try:
        return load_reference(space, preset)
    except UserError as err:
        if "unknown search space" in str(err):
            return None
        raise


def default_out_dir(results: SweepResults, others: Sequence[SweepResults]) -> str:
    name = f"{results.space}-{results.short_id}" + "".join(f"-vs-{o.short_id}" for o in others)
    return os.path.join(results_home(), "reports", name)


# ---------------------------------------------------------------------------------------------------------------------
# Arms: the ablation's rows

@dataclass(frozen=True)
class Arm:
    key: tuple  # ((column, text), ...): the scenario cell and each categorical parameter's value
    trials: int  # trials the arm ran (any status)
    best: Optional[dict]  # its best trial's row of the trial frame (None: no trial reported the metric yet)


def arm_columns(results: SweepResults) -> list[str]:
    """The columns that tell arms apart: the scenario cell, then each categorical swept parameter."""
    categorical = [k for k, p in results.parameters.items() if p.categorical and k not in results.scenarios]
    return (["cell"] if results.scenarios else []) + categorical


def _text(value: Any) -> str:
    if value is None or (isinstance(value, float) and value != value):
        return INACTIVE
    return value_text(value)


def arms(results: SweepResults, frame, objective: Objective) -> list[Arm]:
    """The sweep's arms in cell order, then in each categorical parameter's value order; each with its best trial on
    ``objective`` (:func:`platform.results.report_ranking.best_row`: the console's order; running trials compete
    with their latest values)."""
    columns = arm_columns(results)
    cells = list(dict.fromkeys(frame["cell"].tolist())) if "cell" in columns else []

    def order(key: tuple) -> tuple:
        rank = []
        for column, text in key:
            if column == "cell":
                rank.append(cells.index(text) if text in cells else len(cells))
            else:
                values = [value_text(v) for v in results.parameters[column].values]
                rank.append(values.index(text) if text in values else len(values))
        return tuple(rank)

    groups: dict[tuple, list[dict]] = {}
    for row in frame.to_dict("records"):
        key = tuple((column, _text(row[column])) for column in columns)
        groups.setdefault(key, []).append(row)
    out = []
    for key in sorted(groups, key=order):
        out.append(Arm(key, len(groups[key]), best_row(groups[key], objective)))
    return out


def best_arm_index(arm_list: Sequence[Arm], objective: Objective) -> Optional[int]:
    """The arm whose best trial ranks first (:func:`platform.results.report_ranking.best_row`); None without one."""
    top = best_row([a.best for a in arm_list if a.best], objective)
    return None if top is None else next(i for i, a in enumerate(arm_list) if a.best is top)


def better_arm_index(arm_list: Sequence[Arm], objective: Objective) -> Optional[int]:
    """:func:`best_arm_index` where its mean on the objective is strictly better than every other arm's; None on a
    tie (two identical sweeps have no better one)."""
    best = best_arm_index(arm_list, objective)
    if best is None:
        return None
    key = f"{objective.metric}_mean"
    top = arm_list[best].best.get(key)
    others = [a.best.get(key) for i, a in enumerate(arm_list) if i != best and a.best is not None]
    return None if any(other == top for other in others) else best


def _number(value: Any) -> bool:
    return is_number(value) and value == value


def mean_std(row: Optional[dict], metric: str) -> str:
    """``0.9123 ± 0.0101`` (4 decimals); ``± n/a`` where there is no std (one seed); ``—`` without a value."""
    if row is None or not _number(row.get(f"{metric}_mean")):
        return INACTIVE
    std = row.get(f"{metric}_std")
    return f"{row[f'{metric}_mean']:.4f} ± " + (f"{std:.4f}" if _number(std) else "n/a")


def _seeds_n(row: Optional[dict]) -> str:
    return str(int(row["n_seeds"])) if row is not None and _number(row.get("n_seeds")) else INACTIVE


def _swept_values(results: SweepResults, row: dict) -> str:
    """The best trial's non-categorical swept values, e.g. ``clients.lr=0.0462, algorithm.mu=0.04312``."""
    keys = [k for k, p in results.parameters.items() if not p.categorical and k not in results.scenarios]
    return ", ".join(f"{k}={value_text(row[k])}" for k in keys if _number(row.get(k))) or INACTIVE


# ---------------------------------------------------------------------------------------------------------------------
# Document blocks, rendered as Markdown and as HTML

@dataclass
class Heading:
    text: str
    level: int = 2


@dataclass
class Paragraph:
    text: str  # inline `code` and **bold** allowed


@dataclass
class Bullets:
    items: list


@dataclass
class Details:
    summary: str
    text: str


@dataclass
class Image:
    path: str  # relative to the report's directory
    alt: str


@dataclass
class TextTable:
    headers: list
    rows: list
    bold: set = field(default_factory=set)  # row indices shown in bold (the best arm)


Block = Union[Heading, Paragraph, Bullets, Details, Image, TextTable]


def _md_cell(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def render_markdown(blocks: Sequence[Block]) -> str:
    lines: list[str] = []
    for block in blocks:
        if isinstance(block, Heading):
            lines += ["#" * block.level + " " + block.text, ""]
        elif isinstance(block, Paragraph):
            lines += [block.text, ""]
        elif isinstance(block, Bullets):
            lines += [f"- {item}" for item in block.items] + [""]
        elif isinstance(block, Details):
            lines += [f"<details><summary>{html.escape(block.summary, quote=False)}</summary>", "", block.text, "",
                      "</details>", ""]
        elif isinstance(block, Image):
            lines += [f"![{block.alt}]({block.path})", ""]
        elif isinstance(block, TextTable):
            lines.append("| " + " | ".join(_md_cell(h) for h in block.headers) + " |")
            lines.append("|" + "|".join("---" for _ in block.headers) + "|")
            for i, row in enumerate(block.rows):
                cells = [_md_cell(c) for c in row]
                if i in block.bold:
                    cells = [f"**{c}**" if c and c != INACTIVE else c for c in cells]
                lines.append("| " + " | ".join(cells) + " |")
            lines.append("")
    return "\n".join(lines).rstrip() + "\n"


def _inline_html(text: str, header: bool = False) -> str:
    """``text`` with `code` and **bold** as HTML; a figure "0.9123 ± 0.0101" breaks before "±" only; in a
    ``header``, a name may break after "_" and "." (``client_val_accuracy_p10``): a table of metric columns fits a
    1280 px page."""
    escaped = html.escape(str(text), quote=False).replace(" ± ", " ±\u00a0")
    if header:
        escaped = re.sub(r"([_.])", r"\1<wbr>", escaped)
    escaped = re.sub(r"`([^`]+)`", r"<code>\1</code>", escaped)
    return re.sub(r"\*\*([^*]+)\*\*", r"<strong>\1</strong>", escaped)


# Tables wrap (headers at "_" and ".", names at spaces, figures before "±"): a report's metric columns fit a 1280 px
# window (tests/integration/test_report.py measures it in Chromium).
_STYLE = ("body{font-family:system-ui,sans-serif;max-width:72rem;margin:2rem auto;padding:0 1rem;line-height:1.45}"
          "table{border-collapse:collapse;margin:0.5rem 0 1.5rem}th,td{border:1px solid #ccc;padding:0.25rem 0.5rem;"
          "text-align:left;vertical-align:top}th{background:#f3f3f3}tr.best td{font-weight:bold;background:#fff8d6}"
          "div.table{overflow-x:auto}"
          "img{max-width:100%}code{background:#f3f3f3;padding:0 0.2rem}")


def render_html(blocks: Sequence[Block], title: str, directory: str) -> str:
    """A self-contained page: the PNGs embedded as base64."""
    parts = [f"<!DOCTYPE html><html><head><meta charset=\"utf-8\"><title>{html.escape(title)}</title>"
             f"<style>{_STYLE}</style></head><body>"]
    for block in blocks:
        if isinstance(block, Heading):
            parts.append(f"<h{block.level}>{_inline_html(block.text)}</h{block.level}>")
        elif isinstance(block, Paragraph):
            parts.append(f"<p>{_inline_html(block.text)}</p>")
        elif isinstance(block, Bullets):
            parts.append("<ul>" + "".join(f"<li>{_inline_html(i)}</li>" for i in block.items) + "</ul>")
        elif isinstance(block, Details):
            parts.append(f"<details><summary>{_inline_html(block.summary)}</summary><p>{_inline_html(block.text)}</p>"
                         f"</details>")
        elif isinstance(block, Image):
            with open(os.path.join(directory, block.path), "rb") as fh:
                data = base64.b64encode(fh.read()).decode("ascii")
            parts.append(f"<p><img alt=\"{html.escape(block.alt)}\" src=\"data:image/png;base64,{data}\"></p>")
        elif isinstance(block, TextTable):
            head = "".join(f"<th>{_inline_html(h, header=True)}</th>" for h in block.headers)
            rows = "".join(("<tr class=\"best\">" if i in block.bold else "<tr>")
                           + "".join(f"<td>{_inline_html(c)}</td>" for c in row) + "</tr>"
                           for i, row in enumerate(block.rows))
            parts.append(f"<div class=\"table\"><table><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>"
                         f"</div>")
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"


# ---------------------------------------------------------------------------------------------------------------------
# The report's sections

def _sentence(text: str) -> str:
    text = " ".join(text.split())
    return text if text.endswith((".", "?", "!")) else text + "."


# Words a "." follows inside a sentence ("Alg. 9", "Fig. 8", "eq. 3.4", "e.g. ..."): never the end of one.
_ABBREVIATIONS = {"alg", "algs", "fig", "figs", "eq", "eqs", "sec", "secs", "tab", "ch", "app", "thm", "def", "no",
                  "nos", "cf", "e.g", "i.e", "vs", "al", "approx", "resp", "ref", "refs", "p", "pp", "vol", "ed"}


def question_of(description: str) -> str:
    """The description's question: its first sentence (a space's description starts with its question), never cut
    inside brackets or after an abbreviation ("(Alg. 9)", "Fig. 8"); the whole first paragraph when no sentence ends
    in it."""
    paragraph = re.split(r"\n\s*\n", description.strip(), maxsplit=1)[0]
    text = " ".join(paragraph.split())
    depth = 0
    for i, char in enumerate(text):
        if char in "([{":
            depth += 1
        elif char in ")]}":
            depth = max(depth - 1, 0)
        elif char in ".?!" and depth == 0 and (i + 1 == len(text) or text[i + 1] == " "):
            after = text[i + 2:i + 3]
            if char == "." and (text[:i].rsplit(" ", 1)[-1].lstrip("(\"'").lower() in _ABBREVIATIONS
                                or (after and not after.isupper())):
                continue  # "Alg. 9", "e.g. the", "4.3. then": the sentence goes on
            return text[:i + 1]
    return text


def header_blocks(results: SweepResults, objective: Objective) -> list[Block]:
    from collections import Counter

    statuses = Counter(t.status for t in results.trials)
    status = (f"**still running** (trials as far as they got: each one's latest values)" if results.running
              else results.status)
    setting = (f"preset `{results.preset}` (`--preset {results.preset}`; its values and sources: "
               f"docs/reference/paper_settings.md)" if results.preset else "the space's embedded default (no `--preset`)")
    overrides = results.overrides
    setting += ("; overrides: " + ", ".join(f"`{o}`" if o.startswith("--") else f"`--set {o}`" for o in overrides)
                if overrides else "; no `--set` overrides")
    items = [f"**Status:** {status}", f"**Setting:** {setting}",
             f"**Parent run:** `{results.parent_run_id}` ({results.parent_name}), experiment {results.experiment_id}",
             f"**Seeds:** {', '.join(map(str, results.seeds)) or 'n/a'} (mean ± population std over seeds)",
             f"**Searcher:** {results.searcher or 'n/a'}" + (f", {results.num_samples} sample(s)"
                                                             + (" per cell" if results.scenarios else "")
                                                             if results.num_samples else ""),
             f"**Selection:** `{objective.metric}` ({objective.mode})"
             + (f"; objectives {', '.join(f'`{o.metric}` ({o.mode})' for o in results.objectives)}"
                if len(results.objectives) > 1 else "")
             + ("" if objective.metric == TEST_METRIC else f"; `{TEST_METRIC}` reported, never selected on"),
             f"**Trials:** {len(results.trials)}" + (" (" + ", ".join(f"{n} {s}" for s, n in statuses.items()) + ")"
                                                     if statuses else "")]
    for key, dimension in results.scenarios.items():
        items.append(f"**Scenario** `{key}`: {', '.join(value_text(v) for v in dimension.values)} (a study per cell)")
    for key, parameter in results.parameters.items():
        when = f" when {', '.join(f'{k}={v}' for k, v in parameter.when)}" if parameter.when else ""
        values = ", ".join(value_text(v) for v in parameter.values)
        items.append(f"**Swept** `{key}`: {parameter.kind} [{values}]{when}")
    blocks: list[Block] = [Heading(f"Sweep report: {results.space}", 1)]
    if results.description:
        blocks += [Paragraph(f"**Question.** {question_of(results.description)}")]
    blocks.append(Bullets(items))
    if results.description and question_of(results.description) != " ".join(results.description.split()):
        blocks.append(Details("The search space's full description", " ".join(results.description.split())))
    return blocks


def ablation_blocks(results: SweepResults, frame, objective: Objective) -> list[Block]:
    arm_list = arms(results, frame, objective)
    columns = arm_columns(results)
    blocks: list[Block] = [Heading("Ablation: the best trial per arm" if columns else "Best trial")]
    if not any(a.best for a in arm_list):
        return blocks + [Paragraph(f"No trial has reported `{objective.metric}` yet.")]
    metrics = list(dict.fromkeys([objective.metric, TEST_METRIC]))
    numeric = any(not p.categorical for k, p in results.parameters.items() if k not in results.scenarios)
    headers = [("scenario cell" if c == "cell" else f"`{c}`") for c in columns] + ["best trial"]
    headers += (["its swept values"] if numeric else []) + [f"`{m}`" for m in metrics] + ["n", "trials"]
    best_index = best_arm_index(arm_list, objective) if sum(1 for a in arm_list if a.best) > 1 else None
    rows = []
    for i, arm in enumerate(arm_list):
        best = arm.best
        name = INACTIVE if best is None else trial_name(best)
        row = [text for _, text in arm.key] + [("★ " if i == best_index else "") + name]
        row += ([_swept_values(results, best) if best else INACTIVE] if numeric else [])
        row += [mean_std(best, m) for m in metrics] + [_seeds_n(best), str(arm.trials)]
        rows.append(row)
    what = ("arm (a value of each categorical parameter" + (" in a scenario cell" if results.scenarios else "")
            + ")" if any(c != "cell" for c in columns) else "scenario cell")
    note = (f"Per {what}: its best trial on `{objective.metric}` ({objective.mode}); mean ± population std over that "
            f"trial's seeds (n/a with one seed); n = seeds; trials = the arm's trials; ★ and bold = the best "
            f"arm.") if columns else (
        f"The best trial on `{objective.metric}` ({objective.mode}); mean ± population std over its seeds (n/a with one "
        f"seed); n = seeds.")
    return blocks + [Paragraph(note), TextTable(headers, rows, {best_index} if best_index is not None else set())]


def winner_blocks(results: SweepResults, frame, objective: Objective) -> list[Block]:
    """Each study's best trial (per scenario cell) as the console names it, its lead over the runner-up and whether
    the seeds can tell them apart; then one sentence per swept parameter: the metric's range over it in units of the
    seeds' std."""
    found = winners(results, frame, objective)
    if not found:
        return []
    sentences = [winner_sentence(w, objective) for w in found]
    blocks: list[Block] = [
        Heading("The best per scenario cell, and the noise" if results.scenarios else "The best, and the noise"),
        Paragraph(f"Ranked as the sweep's console ranks them: `{objective.metric}`'s mean over seeds "
                  f"({objective.mode}), then the smaller std, then the earlier trial. The lead over the runner-up "
                  f"comes with its standard error over seeds and Welch's t-test p-value; it is within noise where it "
                  f"is not larger than its standard error (or a trial ran one seed)."),
        Bullets(sentences) if len(sentences) > 1 else Paragraph(sentences[0])]
    spread = spread_sentences(results, frame, objective)
    return blocks + ([Paragraph("How far each swept parameter moves it:"), Bullets(spread)] if spread else [])


def best_and_worst(results: SweepResults, frame, objective: Objective) -> list[tuple[str, Any]]:
    """[("best", trial), ("worst", trial)] on ``objective`` over the whole sweep
    (:func:`platform.results.report_ranking.ranked_rows`; one entry when only one trial reported)."""
    ranked = ranked_rows(frame.to_dict("records"), objective)
    if not ranked:
        return []
    by_id = {t.run_id: t for t in results.trials}
    chosen = [("best", by_id[ranked[0]["run_id"]])]
    if len(ranked) > 1:
        chosen.append(("worst", by_id[ranked[-1]["run_id"]]))
    return chosen


def plot_blocks(results: SweepResults, table, frame, objective: Objective, out: str) -> tuple[list[Block], list[str]]:
    blocks: list[Block] = []
    written: list[str] = []
    chosen = best_and_worst(results, frame, objective)
    if chosen and max((t.rounds_completed or 0) for _, t in chosen) <= 1:  # a curve of one round is a single dot
        blocks += [Heading("Learning curves"), Paragraph("None: the trials ran one round.")]
    elif chosen:
        try:
            path = learning_curves_png(results, chosen, list(dict.fromkeys([objective.metric, TEST_METRIC])),
                                       os.path.join(out, "learning_curves.png"))
            written.append(path)
            blocks += [Heading("Learning curves"),
                       Paragraph(f"The {' and the '.join(label for label, _ in chosen)} trial on "
                                 f"`{objective.metric}`: mean over seeds per round, ± std band."),
                       Image(os.path.relpath(path, out), "learning curves of the best and the worst trial")]
        except Exception as err:  # noqa: BLE001 - the tables are the record
            warn(f"no learning curves: {err}")
    paths = sensitivity_plots(results, table, os.path.join(out, "sensitivity"), objective)
    if paths:
        blocks += [Heading("Sensitivity"),
                   Paragraph(f"`{objective.metric}` against each swept parameter: small points per seed, large ones "
                             f"each trial's mean over seeds" + ("; one colour per scenario cell." if results.scenarios
                                                                else "."))]
        blocks += [Image(os.path.relpath(p, out), f"sensitivity of {objective.metric} to "
                                                  f"{os.path.basename(p)[:-len('.png')]}") for p in paths]
        written += paths
    return blocks, written


def _matches(row: dict, wanted: dict, dimensions: dict) -> bool:
    for key, value in wanted.items():
        dimension: Optional[SweptParameter] = dimensions.get(key)
        have = row.get(key)
        if dimension is None or have is None:
            return False
        if dimension.numeric or dimension.boolean:
            if not same_value(have, value):
                return False
        elif have != value_text(value):
            return False
    return True


def reference_blocks(results: SweepResults, frame, objective: Objective, reference) -> list[Block]:
    """The paper's values beside ours: per reference value, the best trial (on the selection metric) among those in
    its scenario cell with its arm's values, and that trial's figure for the reference's metric."""
    if reference is None:
        return []
    rows = []
    records = frame.to_dict("records")
    for value in reference.values:
        best = best_row([r for r in records if _matches(r, value.scenario, results.scenarios)
                         and _matches(r, value.arm, results.parameters)], objective)
        paper = f"{value.value:.4f}" + (f" ± {value.std:.4f}" if value.std is not None else "")
        rows.append([value.label or INACTIVE,
                     ", ".join(f"{k}={value_text(v)}" for k, v in {**value.scenario, **value.arm}.items()) or "all",
                     f"`{value.metric}`", paper, mean_std(best, value.metric), _seeds_n(best),
                     INACTIVE if best is None else trial_name(best)])
    return [Heading("Reference values"),
            Paragraph(" ".join(_sentence(t) for t in (f"Source: {reference.source}", reference.note,
                                                       f"Ours: the best trial on `{objective.metric}` among those "
                                                       f"with the row's values") if t)),
            TextTable(["paper", "where", "metric", "paper value", "ours (mean ± std)", "n", "our trial"], rows)]


SWEEPS_PER_TABLE = 3  # the comparison's arm table: more sweeps than this are split into several tables


def comparison_blocks(sweeps: Sequence[SweepResults], objective: Objective) -> list[Block]:
    """The arms every sweep has, one column group per sweep, then one row per sweep for its overall best."""
    letters = [chr(ord("A") + i) if i < 26 else str(i + 1) for i in range(len(sweeps))]
    labels = [f"{letter}: {s.space}@{s.short_id}" for letter, s in zip(letters, sweeps)]
    frames = [trial_frame(trials_table(s, [objective.metric])) for s in sweeps]
    per_sweep = [{a.key: a for a in arms(s, f, objective)} for s, f in zip(sweeps, frames)]
    shared = [k for k in per_sweep[0] if all(k in p for p in per_sweep[1:])]
    metrics = list(dict.fromkeys([objective.metric, TEST_METRIC]))
    blocks: list[Block] = [Heading("Comparison"),
                           Paragraph("Sweeps: " + "; ".join(f"**{label}** (`{s.parent_run_id}`, {s.status})"
                                                           for label, s in zip(labels, sweeps))
                                     + f". Per arm the best trial on `{objective.metric}` ({objective.mode}), mean ± "
                                       f"std over seeds; ★ = the better sweep's mean (not a test; a tie has no ★).")]
    columns = [c for c, _ in shared[0]] if shared and shared[0] else []
    if shared and columns:
        winners = [better_arm_index([p[key] for p in per_sweep], objective) for key in shared]
        for start in range(0, len(sweeps), SWEEPS_PER_TABLE):  # a table fits a 1280 px page: split by sweeps
            chunk = range(start, min(start + SWEEPS_PER_TABLE, len(sweeps)))
            headers = [("scenario cell" if c == "cell" else f"`{c}`") for c in columns]
            for i in chunk:
                headers += [f"{letters[i]}: `{m}`" for m in metrics] + [f"{letters[i]}: n", f"{letters[i]}: trials"]
            rows = []
            for key, winner in zip(shared, winners):
                row = [text for _, text in key]
                for i in chunk:
                    arm = per_sweep[i][key]
                    figures = [mean_std(arm.best, m) for m in metrics]
                    if i == winner and len(sweeps) > 1:
                        figures[0] = "★ " + figures[0]
                    row += figures + [_seeds_n(arm.best), str(arm.trials)]
                rows.append(row)
            blocks.append(TextTable(headers, rows))
    else:
        blocks.append(Paragraph("The sweeps share no arm (their scenario cells or categorical parameters differ): "
                                "overall best only."))
    rows = []
    for label, sweep, frame in zip(labels, sweeps, frames):
        overall = arms_overall(frame, objective)
        rows.append([label, sweep.status, INACTIVE if overall is None else trial_name(overall),
                     *[mean_std(overall, m) for m in metrics], _seeds_n(overall), str(len(frame))])
    best = better_arm_index([Arm((), 0, arms_overall(f, objective)) for f in frames], objective)
    blocks += [Paragraph("Overall best trial per sweep:"),
               TextTable(["sweep", "status", "best trial", *[f"`{m}`" for m in metrics], "n", "trials"], rows,
                         {best} if best is not None and len(sweeps) > 1 else set())]
    return blocks


def arms_overall(frame, objective: Objective) -> Optional[dict]:
    """The sweep's best trial on ``objective`` over all its arms (None before any trial reported)."""
    return best_row(frame.to_dict("records"), objective)


# ---------------------------------------------------------------------------------------------------------------------
# Writing and logging

def write_report(results: SweepResults, objective: Objective, out: str, others: Sequence[SweepResults] = (),
                 reference=None) -> list[str]:
    """Write ``report.md``, ``report.html`` and their PNGs into ``out``; the paths written."""
    os.makedirs(out, exist_ok=True)
    extra = [objective.metric, *(v.metric for v in (reference.values if reference else ()))]
    table = trials_table(results, extra)
    frame = trial_frame(table)
    blocks = (header_blocks(results, objective) + ablation_blocks(results, frame, objective)
              + winner_blocks(results, frame, objective))
    plots, written = plot_blocks(results, table, frame, objective, out)
    blocks += reference_blocks(results, frame, objective, reference) + plots
    if others:
        blocks += comparison_blocks([results, *others], objective)
    written += write_table_files(table, out)
    blocks.append(Paragraph("Every trial × seed: `trials.csv` and `trials.parquet` beside this report."))
    md_path, html_path = os.path.join(out, "report.md"), os.path.join(out, "report.html")
    with open(md_path, "w") as fh:
        fh.write(render_markdown(blocks))
    with open(html_path, "w") as fh:
        fh.write(render_html(blocks, f"Sweep report: {results.space}", out))
    return [md_path, html_path, *written]


def log_report(results: SweepResults, out: str, paths: Sequence[str]) -> list[str]:
    """Log the report's files to the parent run under ``report/`` (subdirectories kept); the artifact paths."""
    client = mlflow_client(results.tracking_uri)
    logged = []
    for path in paths:
        relative = os.path.relpath(os.path.dirname(path), out)
        artifact_dir = ARTIFACT_REPORT if relative == "." else f"{ARTIFACT_REPORT}/{relative}"
        client.log_artifact(results.parent_run_id, path, artifact_dir)
        logged.append(f"{artifact_dir}/{os.path.basename(path)}")
    return logged
