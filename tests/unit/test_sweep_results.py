"""Sweep tables, plots and the report, on a real SQLite MLflow store written the way a sweep writes it (the store
contract of per-seed metrics ``<metric>/seed_<s>``, ``space.*`` / ``search.*`` params on the parent,
inactive conditional parameters not logged). No Ray."""
from __future__ import annotations

import html.parser
import math
import os
import shutil
import time

import numpy as np
import pytest
import yaml

from platform.errors import ConfigError

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
SPACE_PARAMS = {
    "space.algorithm.name": "choice['fedavg', 'fedprox']",
    "space.algorithm.mu": "loguniform[0.001, 1.0] when {'algorithm.name': 'fedprox'}",
    "space.clients.lr": "loguniform[0.01, 0.3]",
}
# (algorithm, mu, lr): fedprox's mu is conditional, so fedavg trials do not log it
TRIALS = [("fedavg", None, 0.05), ("fedavg", None, 0.1), ("fedprox", 0.01, 0.05), ("fedprox", 0.1, 0.2)]
ROUNDS = 3


def _client(uri):
    from mlflow.tracking import MlflowClient

    return MlflowClient(tracking_uri=uri)


@pytest.fixture(scope="module")
def empty_store(tmp_path_factory) -> str:
    """An empty, migrated SQLite store, made once: each test copies it (creating one costs seconds)."""
    path = tmp_path_factory.mktemp("template") / "mlflow.db"
    _client(f"sqlite:///{path}").search_experiments()
    return str(path)


@pytest.fixture
def tracking_uri(tmp_path, empty_store):
    shutil.copyfile(empty_store, tmp_path / "mlflow.db")
    return f"sqlite:///{tmp_path / 'mlflow.db'}"


def _log(client, run_id, metrics: dict, step: int = 0, params: dict | None = None) -> None:
    from mlflow.entities import Metric, Param

    now = int(time.time() * 1000)
    client.log_batch(run_id, metrics=[Metric(k, float(v), now, step) for k, v in metrics.items()],
                     params=[Param(k, str(v)) for k, v in (params or {}).items()])


def build_sweep(uri: str, name: str = "toy", trials=TRIALS, seeds=(0, 1), scenarios: dict | None = None,
                per_seed: bool = True, status: str = "completed", value_seed: int = 0,
                search: dict | None = None, start_time: int | None = None, rounds: int = ROUNDS,
                tags: dict | None = None) -> tuple[str, dict]:
    """A sweep's parent run and one child per trial (per cell with ``scenarios`` {key: [values]}), as the contract
    describes (the parent started at ``start_time`` ms, else now); returns (parent run id, {child run id: {metric:
    {seed: final value}}})."""
    from platform.results.tracking import artifact_location

    client = _client(uri)
    experiment = client.get_experiment_by_name(name)
    experiment_id = experiment.experiment_id if experiment else client.create_experiment(
        name, artifact_location=artifact_location(uri, name))
    parent = client.create_run(experiment_id, start_time=start_time, run_name=f"sweep-{value_seed}", tags={
        "fedsweep.search_space": name, "status": "running",
        "fedsweep.description": "Does FedProx's proximal term help on skewed digits? Details follow here.",
        **(tags or {})})
    parent_id = parent.info.run_id
    params = {**SPACE_PARAMS, "search.metric": "val_accuracy", "search.mode": "max",
              "search.seeds": str(list(seeds)), "search.searcher": "tpe", "search.num_samples": str(len(trials)),
              "base.algorithm.name": "fedavg", **(search or {})}
    for key, values in (scenarios or {}).items():
        params[f"scenario.{key}"] = str(values)
    _log(client, parent_id, {}, params=params)
    rng = np.random.default_rng(value_seed)
    cells = [dict(zip(scenarios, v)) for v in __import__("itertools").product(*scenarios.values())] \
        if scenarios else [None]
    finals: dict = {}
    for number, cell in enumerate(cells, start=1):
        for algorithm, mu, lr in trials:
            tags = {"mlflow.parentRunId": parent_id, "status": "completed", "fedsweep.search_space": name}
            label = None
            if cell:
                label = ", ".join(f"{k}={v}" for k, v in cell.items())
                tags.update({"fedsweep.scenario": label, "fedsweep.scenario_cell": str(number)})
            run = client.create_run(experiment_id, run_name=f"{algorithm} lr={lr}", tags=tags)
            run_id = run.info.run_id
            trial_params = {"algorithm.name": algorithm, "clients.lr": lr, "search.seeds": list(seeds), **(cell or {})}
            if mu is not None:
                trial_params["algorithm.mu"] = mu
            _log(client, run_id, {}, params=trial_params)
            values: dict = {}
            for step in range(1, rounds + 1):
                per = {m: {s: float(rng.uniform(0.3, 0.95)) for s in seeds}
                       for m in ("val_accuracy", "test_accuracy", "val_loss")}
                metrics = {}
                for m, by_seed in per.items():
                    metrics[m] = float(np.mean(list(by_seed.values())))
                    if len(seeds) > 1:
                        metrics[f"{m}_std"] = float(np.std(list(by_seed.values())))
                    if per_seed:
                        metrics.update({f"{m}/seed_{s}": v for s, v in by_seed.items()})
                _log(client, run_id, metrics, step)
                values = per
            _log(client, run_id, {"rounds_completed": rounds}, rounds)
            client.set_terminated(run_id, "FINISHED")
            finals[run_id] = values
    client.set_tag(parent_id, "status", status)
    if status != "running":
        client.set_terminated(parent_id, "FINISHED")
    return parent_id, finals


@pytest.fixture(scope="module")
def store(tmp_path_factory, empty_store):
    """The toy sweep (4 trials × 2 seeds), built once for the tests that only read it (reports add artifacts)."""
    path = tmp_path_factory.mktemp("toy") / "mlflow.db"
    shutil.copyfile(empty_store, path)
    uri = f"sqlite:///{path}"
    parent_id, finals = build_sweep(uri)
    return uri, parent_id, finals


def test_trials_table_has_a_row_per_trial_and_seed_with_the_logged_values(store):
    import pyarrow as pa

    from platform.results.sweep_artifacts import trials_table
    from platform.results.sweep_results import load_sweep

    uri, parent_id, finals = store
    results = load_sweep(uri, parent_id)
    assert results.space == "toy" and results.seeds == (0, 1) and results.objective.metric == "val_accuracy"
    assert results.parameters["algorithm.name"].categorical and results.parameters["clients.lr"].kind == "loguniform"
    assert results.parameters["algorithm.mu"].when == (("algorithm.name", "fedprox"),)
    table = trials_table(results)
    assert table.num_rows == len(TRIALS) * 2
    assert table.schema.field("val_accuracy").type == pa.float64()
    assert table.schema.field("clients.lr").type == pa.float64()
    assert table.schema.field("algorithm.name").type == pa.string()
    assert table.schema.field("seed").type == pa.int64()
    for row in table.to_pylist():
        logged = finals[row["run_id"]]
        for metric in ("val_accuracy", "test_accuracy", "val_loss"):
            assert row[metric] == logged[metric][row["seed"]]  # the seed's final value, exactly
        values = list(logged["val_accuracy"].values())
        assert math.isclose(row["val_accuracy_mean"], np.mean(values))
        assert math.isclose(row["val_accuracy_std"], np.std(values))
        assert row["rounds_completed"] == ROUNDS and row["status"] == "completed" and row["cell"] is None
        assert (row["algorithm.mu"] is None) == (row["algorithm.name"] == "fedavg")  # inactive: null


def test_table_files_round_trip(store, tmp_path):
    import pyarrow.csv as pacsv
    import pyarrow.parquet as pq

    from platform.results.sweep_artifacts import trials_table, write_table_files
    from platform.results.sweep_results import load_sweep

    uri, parent_id, _ = store
    table = trials_table(load_sweep(uri, parent_id))
    csv_path, parquet_path = write_table_files(table, str(tmp_path / "out"))
    assert pq.read_table(parquet_path).equals(table)
    assert pacsv.read_csv(csv_path).num_rows == table.num_rows


def test_log_sweep_artifacts_logs_the_table_and_a_plot_per_parameter(store, tmp_path):
    import pyarrow.parquet as pq

    from platform.results.sweep_artifacts import log_sweep_artifacts, trials_table
    from platform.results.sweep_results import load_sweep

    uri, parent_id, _ = store
    logged = log_sweep_artifacts(uri, parent_id)
    assert sorted(logged) == sorted(["trials/trials.csv", "trials/trials.parquet", "sensitivity/algorithm.name.png",
                                     "sensitivity/algorithm.mu.png", "sensitivity/clients.lr.png"])
    directory = _client(uri).download_artifacts(parent_id, "", str(tmp_path))
    assert pq.read_table(os.path.join(directory, "trials", "trials.parquet")).equals(
        trials_table(load_sweep(uri, parent_id)))
    for name in ("algorithm.name", "algorithm.mu", "clients.lr"):
        with open(os.path.join(directory, "sensitivity", f"{name}.png"), "rb") as fh:
            assert fh.read(8) == PNG_SIGNATURE


def test_sensitivity_points_are_every_seed_and_every_trial_mean(tracking_uri):
    from platform.results.sweep_artifacts import sensitivity_series, trials_table
    from platform.results.sweep_results import load_sweep

    parent_id, finals = build_sweep(tracking_uri, scenarios={"partition.alpha": [0.1, 1.0]})
    results = load_sweep(tracking_uri, parent_id)
    table = trials_table(results)
    lr = sensitivity_series(table, results.parameters["clients.lr"], "val_accuracy")
    assert [s.cell for s in lr] == ["partition.alpha=0.1", "partition.alpha=1.0"]  # one series per cell
    for series in lr:
        assert len(series.seed_points) == len(TRIALS) * 2 and len(series.trial_means) == len(TRIALS)
        assert [x for x, _ in series.trial_means] == sorted(x for x, _ in series.trial_means)  # joined in x order
    logged = sorted(v for f in finals.values() for v in f["val_accuracy"].values())
    assert sorted(y for s in lr for _, y in s.seed_points) == logged
    means = sorted(float(np.mean(list(f["val_accuracy"].values()))) for f in finals.values())
    assert np.allclose(sorted(y for s in lr for _, y in s.trial_means), means)
    mu = sensitivity_series(table, results.parameters["algorithm.mu"], "val_accuracy")
    assert sum(len(s.trial_means) for s in mu) == 2 * 2  # fedavg trials have no mu: left out
    names = sensitivity_series(table, results.parameters["algorithm.name"], "val_accuracy")
    assert [x for x, _ in names[0].trial_means] == ["fedavg", "fedavg", "fedprox", "fedprox"]  # the choice's order


def test_log_sweep_artifacts_never_raises(tracking_uri, capsys):
    from platform.results.sweep_artifacts import log_sweep_artifacts
    from platform.results.sweep_results import load_sweep

    parent_id, _ = build_sweep(tracking_uri, trials=[], status="interrupted")  # no trial ran
    assert load_sweep(tracking_uri, parent_id).trials == ()
    assert log_sweep_artifacts(tracking_uri, parent_id) == ["trials/trials.csv", "trials/trials.parquet"]
    assert capsys.readouterr().err.count("warning: no sensitivity plot") == 3  # one line per parameter
    assert log_sweep_artifacts(tracking_uri, "0" * 32) == []
    assert capsys.readouterr().err.count("warning:") == 1


def test_a_store_without_per_seed_metrics_gives_one_row_per_trial(tracking_uri):
    from platform.results.sweep_artifacts import trials_table
    from platform.results.sweep_results import load_sweep

    parent_id, finals = build_sweep(tracking_uri, per_seed=False)
    rows = trials_table(load_sweep(tracking_uri, parent_id)).to_pylist()
    assert len(rows) == len(TRIALS) and all(r["seed"] is None for r in rows)
    for row in rows:
        values = list(finals[row["run_id"]]["test_accuracy"].values())
        assert math.isclose(row["test_accuracy"], np.mean(values)) and math.isclose(row["test_accuracy_mean"],
                                                                                    np.mean(values))
        assert math.isclose(row["test_accuracy_std"], np.std(values))  # the logged _std


def test_a_name_selects_the_newest_sweep(tracking_uri):
    from platform.results.sweep_results import load_sweep

    now = int(time.time() * 1000)  # distinct start times: "newest" never rests on the clock's millisecond
    build_sweep(tracking_uri, value_seed=1, start_time=now - 60_000)
    newest, _ = build_sweep(tracking_uri, value_seed=2, start_time=now - 30_000)
    assert load_sweep(tracking_uri, "toy").parent_run_id == newest


def _report(uri, tmp_path, *args) -> str:
    from platform.report import main

    out = tmp_path / "report"
    assert main([*args, "--tracking-uri", uri, "--out", str(out)]) == 0
    return (out / "report.md").read_text()


def _stored_per_seed(uri, run_id, metric) -> np.ndarray:
    metrics = _client(uri).get_run(run_id).data.metrics
    return np.array([v for k, v in sorted(metrics.items()) if k.startswith(f"{metric}/seed_")])


def _table_rows(markdown: str, first_header: str) -> list[list[str]]:
    lines = markdown.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"| {first_header} |"))
    rows = []
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        rows.append([c.strip().strip("*").strip() for c in line.strip("|").split(" | ")])
    return rows


def test_ablation_numbers_are_the_stored_seeds_mean_and_std(store, tmp_path, capsys):
    uri, parent_id, _ = store
    markdown = _report(uri, tmp_path, parent_id)
    rows = _table_rows(markdown, "`algorithm.name`")
    assert [r[0] for r in rows] == ["fedavg", "fedprox"]  # one row per arm, in the choice's order
    client = _client(uri)
    children = client.search_runs([client.get_run(parent_id).info.experiment_id],
                                  filter_string=f"tags.`mlflow.parentRunId` = '{parent_id}'")
    best_means = {}
    for row in rows:
        arm = [c for c in children if c.data.params["algorithm.name"] == row[0]]
        means = {c.info.run_id: _stored_per_seed(uri, c.info.run_id, "val_accuracy").mean() for c in arm}
        best = max(means, key=means.get)
        best_means[row[0]] = means[best]
        assert best[:8] in row[1]
        for column, metric in ((3, "val_accuracy"), (4, "test_accuracy")):
            values = _stored_per_seed(uri, best, metric)
            assert row[column].lstrip("★ ") == f"{values.mean():.4f} ± {values.std(ddof=0):.4f}"
        assert row[5] == "2" and row[6] == "2"  # n seeds, trials in the arm
    winner = max(best_means, key=best_means.get)
    marked = [r for r in markdown.splitlines() if "★" in r and r.startswith("| **")]
    assert len(marked) == 1 and marked[0].startswith(f"| **{winner}**")  # the best arm: bold and starred


def test_one_seed_prints_na_never_zero(tracking_uri, tmp_path):
    parent_id, _ = build_sweep(tracking_uri, seeds=(3,))
    rows = _table_rows(_report(tracking_uri, tmp_path, parent_id), "`algorithm.name`")
    assert rows and all(r[3].endswith("± n/a") and r[4].endswith("± n/a") and r[5] == "1" for r in rows)


class _Page(html.parser.HTMLParser):
    def __init__(self):
        super().__init__()
        self.tags: list[str] = []
        self.images: list[str] = []
        self.cells: list[str] = []
        self._in_cell = False

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        self._in_cell = tag in ("td", "th")
        if tag == "img":
            self.images.append(dict(attrs)["src"])

    def handle_endtag(self, tag):
        if tag in ("td", "th"):
            self._in_cell = False

    def handle_data(self, data):
        if self._in_cell:
            self.cells.append(data)


def test_html_report_is_self_contained_and_holds_the_tables(store, tmp_path, capsys):
    import base64

    uri, parent_id, _ = store
    markdown = _report(uri, tmp_path, parent_id)
    page = _Page()
    page.feed((tmp_path / "report" / "report.html").read_text())
    assert page.tags.count("table") == 1 and "fedprox" in page.cells and "fedavg" in page.cells
    pngs = [os.path.join(tmp_path / "report", p) for p in ("learning_curves.png", "sensitivity/clients.lr.png")]
    assert len(page.images) == markdown.count("![") == 4  # learning curves + 3 sensitivity plots
    for src in page.images:
        assert src.startswith("data:image/png;base64,")
        assert base64.b64decode(src.split(",", 1)[1])[:8] == PNG_SIGNATURE
    for path in pngs:
        with open(path, "rb") as fh:
            assert fh.read(8) == PNG_SIGNATURE
    artifacts = {a.path for a in _client(uri).list_artifacts(parent_id, "report")}
    assert {"report/report.md", "report/report.html", "report/learning_curves.png", "report/sensitivity"} <= artifacts


def test_report_on_a_running_sweep_says_so(tracking_uri, tmp_path, capsys):
    parent_id, _ = build_sweep(tracking_uri, status="running")
    assert "**Status:** **still running**" in _report(tracking_uri, tmp_path, "toy")


def test_scenario_cells_times_categorical_values_are_the_arms(tracking_uri, tmp_path, capsys):
    from platform.results.sweep_artifacts import trials_table
    from platform.results.sweep_results import load_sweep

    parent_id, _ = build_sweep(tracking_uri, scenarios={"partition.alpha": [0.1, 1.0]})
    results = load_sweep(tracking_uri, parent_id)
    table = trials_table(results)
    assert table.num_rows == 2 * len(TRIALS) * 2 and set(table.column("partition.alpha").to_pylist()) == {0.1, 1.0}
    rows = _table_rows(_report(tracking_uri, tmp_path, parent_id), "scenario cell")
    assert [(r[0], r[1]) for r in rows] == [("partition.alpha=0.1", "fedavg"), ("partition.alpha=0.1", "fedprox"),
                                            ("partition.alpha=1.0", "fedavg"), ("partition.alpha=1.0", "fedprox")]


def test_compare_shows_both_sweeps_per_shared_arm(tracking_uri, tmp_path, capsys):
    first, _ = build_sweep(tracking_uri, value_seed=1)
    second, _ = build_sweep(tracking_uri, name="toy_again", value_seed=2)
    markdown = _report(tracking_uri, tmp_path, first, "--compare", second)
    assert f"**A: toy@{first[:8]}** (`{first}`" in markdown and f"**B: toy_again@{second[:8]}** (`{second}`" in markdown
    rows = _table_rows(markdown, "`algorithm.name` | A: `val_accuracy`")
    assert [r[0] for r in rows] == ["fedavg", "fedprox"] and all(len(r) == 1 + 2 * 4 for r in rows)
    for row in rows:  # each sweep's arm figures; the better sweep starred
        a, b = (float(row[1 + 4 * i].lstrip("★ ").split(" ± ")[0]) for i in range(2))
        assert a != b and row[1 + 4 * (0 if a > b else 1)].startswith("★") and row[4] == row[8] == "2"
    overall = _table_rows(markdown, "sweep")
    assert [r[0] for r in overall] == [f"A: toy@{first[:8]}", f"B: toy_again@{second[:8]}"]
    assert "not logged to any sweep's run" in capsys.readouterr().out
    assert not {a.path for a in _client(tracking_uri).list_artifacts(first)} & {"report"}  # A's run untouched


def test_two_identical_sweeps_have_no_better_one(tracking_uri, tmp_path, capsys):
    first, _ = build_sweep(tracking_uri, value_seed=1)
    twin, _ = build_sweep(tracking_uri, name="toy_twin", value_seed=1)  # the same values
    markdown = _report(tracking_uri, tmp_path, first, "--compare", twin)
    rows = _table_rows(markdown, "`algorithm.name` | A: `val_accuracy`")
    assert rows and not any(cell.startswith("★") for row in rows for cell in row)  # no arm of either is better
    overall = markdown.split("Overall best trial per sweep:", 1)[1]
    assert "**A: toy" not in overall and "**B: toy_twin" not in overall  # nor overall


def test_reference_values_are_printed_next_to_ours(store, tmp_path, monkeypatch, capsys):
    uri, parent_id, finals = store
    spaces = tmp_path / "spaces"
    spaces.mkdir()
    (spaces / "toy.yaml").write_text(yaml.safe_dump({
        "description": "toy", "base": {"rounds": 3},
        "parameters": {"algorithm.name": {"choice": ["fedavg", "fedprox"]},
                       "algorithm.mu": {"loguniform": [0.001, 1.0], "when": {"algorithm.name": "fedprox"}},
                       "clients.lr": {"loguniform": [0.01, 0.3]}},
        "search": {"seeds": [0, 1]},
        "reference": {"source": "a paper, Table 1", "note": "their data differ",
                      "values": [{"label": "FedProx", "arm": {"algorithm.name": "fedprox"}, "metric": "test_accuracy",
                                  "value": 0.9, "std": 0.01}]}}))
    monkeypatch.setenv("FEDSWEEP_SEARCH_SPACES", str(spaces))
    rows = _table_rows(_report(uri, tmp_path, parent_id), "paper")
    client = _client(uri)
    fedprox = [r for r in finals if client.get_run(r).data.params["algorithm.name"] == "fedprox"]
    best = max(fedprox, key=lambda r: _stored_per_seed(uri, r, "val_accuracy").mean())
    test = _stored_per_seed(uri, best, "test_accuracy")
    assert rows == [["FedProx", "algorithm.name=fedprox", "`test_accuracy`", "0.9000 ± 0.0100",
                     f"{test.mean():.4f} ± {test.std():.4f}", "2", rows[0][6]]] and best[:8] in rows[0][6]


def test_metric_option_selects_in_the_metric_direction(store, tmp_path, capsys):
    uri, parent_id, finals = store
    markdown = _report(uri, tmp_path, parent_id, "--metric", "val_loss")
    assert "**Selection:** `val_loss` (min)" in markdown  # the direction the algorithms declare
    rows = _table_rows(markdown, "`algorithm.name`")
    client = _client(uri)
    for row in rows:
        arm = [r for r in finals if client.get_run(r).data.params["algorithm.name"] == row[0]]
        best = min(arm, key=lambda r: np.mean(list(finals[r]["val_loss"].values())))
        assert best[:8] in row[1]


def test_multi_objective_sweeps_select_on_the_first_objective(tracking_uri):
    from platform.results.sweep_artifacts import trials_table
    from platform.results.sweep_results import Objective, load_sweep

    parent_id, _ = build_sweep(tracking_uri, search={"search.metric": "['val_accuracy', 'val_loss']",
                                                     "search.mode": "['max', 'min']"})
    results = load_sweep(tracking_uri, parent_id)
    assert results.objectives == (Objective("val_accuracy", "max"), Objective("val_loss", "min"))
    assert results.objective == Objective("val_accuracy", "max")
    assert {"val_loss_mean", "val_loss_std", "test_accuracy_mean"} <= set(trials_table(results).column_names)


@pytest.mark.parametrize("args, names", [
    (["nope"], "sweep: no sweep of search space 'nope'"),
    (["0123456789abcdef0123456789abcdef"], "sweep: no run 0123456789abcdef0123456789abcdef"),
    (["toy", "--compare", "missing"], "--compare: no sweep of search space 'missing'"),
    (["toy", "--metric", "nonsense"], "--metric: no trial of sweep"),
])
def test_bad_input_is_one_line_and_exit_2(store, args, names, capsys):
    from platform.report import main

    uri, _, _ = store
    assert main([*args, "--tracking-uri", uri]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"error: {names}") and len(err.splitlines()) == 1


def test_a_trial_run_id_or_a_missing_store_is_refused(store, tmp_path, capsys):
    from platform.report import main

    uri, parent_id, finals = store
    child = next(iter(finals))
    assert main([child, "--tracking-uri", uri]) == 2
    assert f"is a trial of sweep {parent_id}" in capsys.readouterr().err
    missing = f"sqlite:///{tmp_path / 'none.db'}"
    assert main(["toy", "--tracking-uri", missing]) == 2
    assert "--tracking-uri: no MLflow store" in capsys.readouterr().err and not (tmp_path / "none.db").exists()


# The reference: block (platform/config/reference.py)

PARAMETERS = {"algorithm.beta": {"grid": [1, 2, 3]}, "algorithm.name": {"choice": ["fedavg", "fedprox"]}}
SCENARIOS = {"partition.alpha": [0.1, 1.0]}


def _parse(values, **top):
    from platform.config.reference import parse_reference
    from platform.config.search_space import parse_distribution

    parameters = {k: parse_distribution(k, d) for k, d in PARAMETERS.items()}
    return parse_reference({"source": "paper", "values": values, **top}, parameters, SCENARIOS)


def test_reference_block_parses():
    reference = _parse([{"arm": {"algorithm.beta": 2.0}, "scenario": {"partition.alpha": 0.1},
                         "metric": "test_accuracy", "value": 0.97, "std": 0.01, "label": "w2"}])
    value = reference.values[0]
    assert (value.arm, value.scenario, value.metric, value.value, value.std, value.label) == (
        {"algorithm.beta": 2.0}, {"partition.alpha": 0.1}, "test_accuracy", 0.97, 0.01, "w2")


@pytest.mark.parametrize("values, top, field", [
    ([{"metric": "test_accuracy", "value": 0.5}, {"value": 0.5}], {}, "reference.values[1].metric"),
    ([{"metric": "test_accuracy", "value": 93.05}], {}, "reference.values[0].value"),
    ([{"metric": "test_accuracy", "value": 0.9, "std": -1}], {}, "reference.values[0].std"),
    ([{"metric": "test_accuracy", "value": 0.9, "arm": {"clients.lr": 0.1}}], {}, "reference.values[0].arm.clients.lr"),
    ([{"metric": "test_accuracy", "value": 0.9, "arm": {"algorithm.beta": [1, 2]}}], {},
     "reference.values[0].arm.algorithm.beta"),
    ([{"metric": "test_accuracy", "value": 0.9, "scenario": {"partition.beta": 5}}], {},
     "reference.values[0].scenario.partition.beta"),
    ([{"metric": "test_accuracy", "value": 0.9, "paper": 1}], {}, "reference.values[0].paper"),
    ([], {}, "reference.values"),
    ([{"metric": "test_accuracy", "value": 0.9}], {"source": ""}, "reference.source"),
    ([{"metric": "test_accuracy", "value": 0.9}], {"table": 1}, "reference.table"),
])
def test_reference_errors_name_the_field(values, top, field):
    with pytest.raises(ConfigError) as err:
        _parse(values, **top)
    assert err.value.field == field and str(err.value).startswith(f"{field}: ")


def test_a_reference_metric_no_algorithm_declares_is_refused_at_load(tmp_path):
    from platform.config.search_space import load_search_space

    path = tmp_path / "typo.yaml"
    path.write_text(yaml.safe_dump({
        "base": {"rounds": 2}, "parameters": {"clients.lr": {"loguniform": [0.01, 0.1]}},
        "reference": {"source": "paper", "values": [{"metric": "test_acuracy", "value": 0.9}]}}))
    with pytest.raises(ConfigError) as err:
        load_search_space(str(path))
    assert err.value.field == "reference.values[0].metric" and "unknown metric 'test_acuracy'" in str(err.value)


@pytest.mark.parametrize("name", ["feded_beta", "mnfl_rho", "single_image_pruning"])
def test_shipped_references_match_their_spaces(name):
    from platform.config.search_space import load_reference, load_search_space
    from platform.results.sweep_results import same_value

    space = load_search_space(name)
    reference = load_reference(name)
    assert reference == space.reference and reference.values and "digits" in reference.note
    cells = space.cells()
    for value in reference.values:  # every row names a cell and values the sweep runs
        assert any(all(same_value(cell[k], v) for k, v in value.scenario.items()) for cell in cells)
        for key, wanted in value.arm.items():
            assert any(same_value(wanted, candidate) for candidate in space.parameters[key].args)
        assert 0 < value.value < 1


def test_report_header_shows_the_whole_question_the_preset_and_the_overrides(tracking_uri, tmp_path, capsys):
    """the question is never cut inside "(Alg. 9)"; the preset and the command's --set overrides are listed
    at the top; a one-round sweep gets no learning curves (a single dot)."""
    question = ("One question: how sensitive is FedKP's one-round aggregate to s (spec §10.3), for plain FedKP (Alg. 9) "
                "and for FedKP_cm (Alg. 10)?")
    parent_id, _ = build_sweep(tracking_uri, rounds=1, tags={
        "fedsweep.description": question + " Held at the thesis's values (Fig. 3). More follows.",
        "fedsweep.preset": "paper",
        "fedsweep.command": "python -m platform.sweep toy --preset paper --set rounds=1 --set 'clients.lr=0.1' "
                            "--num-samples 4"})
    markdown = _report(tracking_uri, tmp_path, parent_id)
    assert f"**Question.** {question}\n" in markdown
    setting = next(line for line in markdown.splitlines() if line.startswith("- **Setting:**"))
    assert "preset `paper`" in setting
    assert "overrides: `--set rounds=1`, `--set clients.lr=0.1`, `--num-samples 4`" in setting
    assert "None: the trials ran one round." in markdown and not (tmp_path / "report" / "learning_curves.png").exists()


def test_question_ends_at_the_first_sentence_outside_brackets_and_abbreviations():
    from platform.results.report import question_of

    assert question_of("Is A (Fig. 8, eq. 3.4) better than B? Then more.") == "Is A (Fig. 8, eq. 3.4) better than B?"
    assert question_of("See Alg. 2 for the method. Then more.") == "See Alg. 2 for the method."
    assert question_of("A question without an end\n\nSecond paragraph.") == "A question without an end"


def test_html_tables_fit_1280_px(tmp_path):
    """The report's widest table, a comparison of three sweeps on long metric names, fits a 1280 px window in
    Chromium (headers wrap at "_" and "."); skipped without a browser."""
    from tests.integration.test_smoke_sweep import start_chromium

    from platform.results.report import TextTable, render_html

    metrics = ["client_val_accuracy_p10", "test_accuracy"]
    headers = ["`algorithm.name`"] + [f"{letter}: `{m}`" for letter in "ABC" for m in metrics] + [
        f"{letter}: {what}" for letter in "ABC" for what in ("n", "trials")]
    rows = [["fedprox"] + ["★ 0.9123 ± 0.0101"] * 6 + ["3"] * 6 for _ in range(3)]
    (tmp_path / "page.html").write_text(render_html([TextTable(headers, rows)], "t", str(tmp_path)))
    driver = start_chromium(1280, 900)
    try:
        driver.get(f"file://{tmp_path / 'page.html'}")
        width = driver.execute_script("return document.querySelector('table').getBoundingClientRect().right")
        assert width <= 1280, width
    finally:
        driver.quit()


def test_a_trial_stopped_early_is_marked_in_the_sensitivity_plot(tracking_uri, tmp_path):
    """ASHA's stopped trials report an earlier round's value: the plot draws them hollow, and says so."""
    import pyarrow as pa

    from platform.results.sweep_artifacts import sensitivity_png, sensitivity_series, trials_table
    from platform.results.sweep_results import load_sweep

    parent_id, _ = build_sweep(tracking_uri)
    results = load_sweep(tracking_uri, parent_id)
    table = trials_table(results)
    runs = table.column("run_id").to_pylist()
    stopped_run = runs[0]
    rounds = [1 if r == stopped_run else ROUNDS for r in runs]
    table = table.set_column(table.schema.get_field_index("rounds_completed"), "rounds_completed",
                             pa.array(rounds, pa.int64()))
    (lr,) = sensitivity_series(table, results.parameters["clients.lr"], "val_accuracy")
    stopped_lr = table.column("clients.lr").to_pylist()[runs.index(stopped_run)]
    assert [x for x, _ in lr.stopped_early] == [stopped_lr] and len(lr.trial_means) == len(TRIALS)
    (full,) = sensitivity_series(trials_table(results), results.parameters["clients.lr"], "val_accuracy")
    assert full.stopped_early == ()  # every trial ran every round: nothing hollow
    for key in ("clients.lr", "algorithm.name"):  # a numeric and a categorical parameter
        path = sensitivity_png(results, table, results.parameters[key], str(tmp_path / f"{key}.png"))
        with open(path, "rb") as fh:
            assert fh.read(8) == PNG_SIGNATURE
