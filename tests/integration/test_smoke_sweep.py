"""A finished tiny smoke sweep (real Ray, real SQLite store), checked through the MLflow and Optuna APIs, then the
deep link it prints opened in a real browser: a real ``mlflow server`` on that store, headless Chromium. The link must open the sweep's trials -- not
its parent -- in the machine-learning runs table, with the swept params and the search metric as columns and
sorted best first; the parent run's description must name the best trial and link to it."""
from __future__ import annotations

import contextlib
import io
import math
import os
import re
import shutil
from dataclasses import dataclass
from urllib.parse import urlsplit, urlunsplit

import pytest

from platform.results.mlflow_ui import free_port, run_link, start_server, stop_server, wait_for_server  # noqa: E402

SWEPT = ["algorithm.name", "algorithm.mu", "clients.lr"]  # search_spaces/smoke.yaml
METRIC = "val_accuracy"
TRIALS = 3
WAIT_S = 60  # the first page load compiles MLflow's JavaScript: seconds on a busy 2-CPU machine
NO_BROWSER = "no chromium/chromedriver: apt install chromium chromium-driver"


def start_chromium(width: int = 1920, height: int = 1080, returning_user: bool = True):
    """Headless Chromium through /usr/bin/chromedriver (else whatever chromedriver is on PATH, else
    selenium-manager), in a fresh profile of its own; skips the test when there is no browser. ``returning_user``:
    as one who has closed MLflow's Assistant panel before; else a first visit, on which MLflow 3.17 opens it."""
    try:
        from selenium import webdriver
        from selenium.common.exceptions import WebDriverException
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        pytest.skip("selenium is not installed: pip install -e '.[test]'")

    options = webdriver.ChromeOptions()
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", f"--window-size={width},{height}"):
        options.add_argument(arg)
    browser_path = next(filter(None, map(shutil.which, ("chromium", "chromium-browser", "google-chrome"))), None)
    if browser_path is None:
        pytest.skip(NO_BROWSER)
    options.binary_location = browser_path
    driver_path = "/usr/bin/chromedriver" if os.path.exists("/usr/bin/chromedriver") else shutil.which("chromedriver")
    if driver_path:
        driver = webdriver.Chrome(service=Service(driver_path), options=options)
    else:
        try:  # selenium-manager (shipped with selenium) finds a matching driver, or downloads one if it can
            driver = webdriver.Chrome(options=options)
        except WebDriverException as err:
            pytest.skip(f"{NO_BROWSER} ({type(err).__name__}: {str(err).splitlines()[0]})")
    if returning_user:  # MLflow's assistant panel opens on a first visit and squeezes the runs table
        driver.execute_cdp_cmd("Page.addScriptToEvaluateOnNewDocument", {"source": (
            "localStorage.setItem('mlflow.assistant.fab.autoOpenedOnFirstLoad_v1', 'true');"
            "localStorage.setItem('mlflow.assistant.panelOpen_v1', 'false');")})
    return driver


@dataclass
class Sweep:
    experiment_id: str
    parent_id: str
    children: dict  # run id -> mlflow Run
    link: str  # the printed deep link, pointed at the test's server
    ui: str  # the test's server
    stdout: str  # what the sweep printed
    uri: str  # its MLflow store


@pytest.fixture(scope="module")
def browser():
    driver = start_chromium()
    yield driver
    driver.quit()


@pytest.fixture(scope="module")
def store(tmp_path_factory, empty_mlflow_store):
    """An empty, initialised SQLite store (so that the server and the sweep never race to create its tables): a copy
    of the session's new store."""
    root = tmp_path_factory.mktemp("ui_store")
    shutil.copyfile(empty_mlflow_store, root / "mlflow.db")
    return root, f"sqlite:///{root / 'mlflow.db'}"


@pytest.fixture(scope="module")
def mlflow_server(store):
    """``mlflow server`` on the store, started now and always stopped; the sweep runs while it boots."""
    root, uri = store
    port, log = free_port(), str(root / "mlflow_server.log")
    process = start_server(uri, port, log, cwd=str(root))
    try:
        yield f"http://127.0.0.1:{port}", process, log
    finally:
        stop_server(process)


@pytest.fixture(scope="module")
def sweep(store, mlflow_server, ray_local) -> Sweep:
    from mlflow.tracking import MlflowClient

    from platform.sweep.command import main

    root, uri = store
    out = io.StringIO()
    with contextlib.redirect_stdout(out):  # smoke's ASHA grace period is 3 rounds: the shortest sweep it takes
        rc = main(["smoke", "--tracking-uri", uri, "--storage-path", str(root / "tune"), "--cache-dir",
                   str(root / "cache"), "--num-samples", str(TRIALS), "--set", "rounds=3"])
    stdout = out.getvalue()
    assert rc == 0, stdout
    printed = re.findall(r"^open: (\S+)$", stdout, re.MULTILINE)
    assert len(printed) == 1 and printed[0].startswith("http://127.0.0.1:5000/#/experiments/"), stdout

    client = MlflowClient(tracking_uri=uri)
    experiment_id = client.get_experiment_by_name("smoke").experiment_id
    runs = client.search_runs([experiment_id], max_results=100)
    (parent,) = [r for r in runs if "mlflow.parentRunId" not in r.data.tags]
    children = {r.info.run_id: r for r in runs if r.data.tags.get("mlflow.parentRunId") == parent.info.run_id}
    assert len(children) == TRIALS and all(r.info.status == "FINISHED" for r in children.values()), stdout

    ui, process, log = mlflow_server
    wait_for_server(ui, process, log)
    link = urlunsplit(urlsplit(printed[0])._replace(netloc=urlsplit(ui).netloc))
    return Sweep(experiment_id, parent.info.run_id, children, link, ui, stdout, uri)


def wait(driver, seconds: float = WAIT_S):
    from selenium.common.exceptions import StaleElementReferenceException
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(driver, seconds, ignored_exceptions=(StaleElementReferenceException,))  # React re-renders


def runs_table(driver) -> list[tuple[str, str]]:
    """(run id, shown val_accuracy) per row of the runs table, top to bottom, once it shows every run its footer
    counts ("N matching runs") and the shared view's filter is applied; [] until then."""
    from selenium.webdriver.common.by import By

    if "searchFilter=" not in driver.current_url:
        return []
    footer = re.search(r"(\d+) matching runs", driver.find_element(By.TAG_NAME, "body").text)
    rows = driver.find_elements(By.CSS_SELECTOR, ".ag-pinned-left-cols-container .ag-row[row-id]")
    if not footer or not rows or len(rows) != int(footer.group(1)):
        return []
    table = []
    for row in sorted(rows, key=lambda r: int(r.get_attribute("row-index"))):
        index, run_id = row.get_attribute("row-index"), row.get_attribute("row-id")
        cells = driver.find_elements(By.CSS_SELECTOR, f'.ag-center-cols-container .ag-row[row-index="{index}"] '
                                                      f'[col-id="metrics.`{METRIC}`"]')
        if not cells or not cells[0].text.strip():
            return []
        table.append((run_id, cells[0].text.strip()))
    return table


def test_deep_link_opens_the_sweeps_trials_in_the_ml_runs_table_best_first(browser, sweep):
    from selenium.webdriver.common.by import By

    browser.get(sweep.link)
    table = wait(browser).until(runs_table, f"the runs table of {sweep.link} never filled")

    # the machine-learning view: its side bar (Runs, Models, Traces), not GenAI's (Overview, ..., Evaluation runs)
    assert "workflowType=machine_learning" in browser.current_url
    assert browser.find_elements(By.XPATH, "//aside//a[normalize-space()='Runs']")
    assert not browser.find_elements(By.CSS_SELECTOR, "aside a[href*='/evaluation-runs'], aside a[href*='/overview']")

    headers = {h.text.strip() for h in browser.find_elements(By.CSS_SELECTOR, ".ag-header-cell")}
    assert set(SWEPT) | {METRIC, "Run Name"} <= headers, headers

    # exactly the sweep's trials, flat (the parent neither listed nor folding them away)
    shown_ids = [run_id for run_id, _ in table]
    assert sorted(shown_ids) == sorted(sweep.children) and sweep.parent_id not in shown_ids

    shown = [float(value) for _, value in table]
    assert shown == sorted(shown, reverse=True), table  # best first: val_accuracy is maximised
    ranks = [sweep.children[run_id].data.metrics["rank"] for run_id in shown_ids]
    assert ranks == list(range(1, len(ranks) + 1)), ranks  # in the console's and the report's order, ties included
    for run_id, value in zip(shown_ids, shown):
        assert math.isclose(value, sweep.children[run_id].data.metrics[METRIC], abs_tol=1e-3), (run_id, value)


# Where the runs table's column headers and run names are: each header's rect, whether it is painted at its left
# edge, middle and right edge (not clipped by the grid, not under the Assistant panel) and whether it scrolls (not
# one of the pinned checkbox, Run Name and Created columns); each row's name and whether it shows whole (no "...").
TABLE_GEOMETRY_JS = """
const box = e => {
    const r = e.getBoundingClientRect(); return {left: r.left, right: r.right, top: r.top, bottom: r.bottom}; };
const shown = (e, r) => [r.left + 3, (r.left + r.right) / 2, r.right - 3].every(x => {
    const hit = document.elementFromPoint(x, (r.top + r.bottom) / 2); return !!hit && e.contains(hit); });
const scroller = document.querySelector('.ag-center-cols-viewport');
const columns = Array.from(document.querySelectorAll('.ag-header-cell[col-id]')).map(h => {
    const r = box(h);
    return {id: h.getAttribute('col-id'), ...r, shown: shown(h, r), scrolled: !!h.closest('.ag-header-viewport')};
});
const names = Array.from(document.querySelectorAll(
        '.ag-pinned-left-cols-container .ag-row[row-id] [col-id="attributes.`Run Name`"] a')).map(a => {
    const range = document.createRange(); range.selectNodeContents(a);
    const cell = a.closest('.ag-cell').getBoundingClientRect();
    return {text: a.innerText.trim(), whole: range.getBoundingClientRect().right <= cell.right};
});
const assistant = Array.from(document.querySelectorAll('[data-assistant-ui="true"]'))
    .map(e => box(e).right - box(e).left);
return {innerWidth: window.innerWidth, scrollLeft: scroller ? scroller.scrollLeft : null, columns: columns,
        names: names, assistant: assistant};
"""
RUN_NAME = "attributes.`Run Name`"


def settled_geometry(driver):
    """TABLE_GEOMETRY_JS's answer once two polls half a second apart agree: AG Grid applies the view's column
    state (order, widths) after its first render."""
    polls = []

    def poll(d):
        polls.append(d.execute_script(TABLE_GEOMETRY_JS))
        return polls[-1] if len(polls) > 1 and polls[-1] == polls[-2] and polls[-1]["columns"] else False

    return wait(driver).until(poll, "the runs table's columns never settled")


def test_first_visit_at_1600_px_shows_rank_and_val_accuracy_beside_the_run_names(sweep, tmp_path):
    """A first visit -- a fresh browser profile, so MLflow 3.17 opens its Assistant panel over a quarter of the
    window and shows its shared-view banner -- in a 1600x1000 window: the rank and val_accuracy columns are the first
    that scroll, right of the pinned run names, and on screen without scrolling; each trial's name shows whole and
    the names differ."""
    driver = start_chromium(1600, 1000, returning_user=False)
    try:
        driver.get(sweep.link)
        wait(driver).until(runs_table, f"the runs table of {sweep.link} never filled")
        geometry = settled_geometry(driver)
        driver.save_screenshot(str(tmp_path / "first_visit_1600.png"))
    finally:
        driver.quit()

    assert geometry["innerWidth"] == 1600 and geometry["scrollLeft"] == 0, geometry
    columns = {c["id"]: c for c in geometry["columns"]}
    rank, metric = "metrics.`rank`", f"metrics.`{METRIC}`"
    scrolled = [c["id"] for c in sorted(geometry["columns"], key=lambda c: c["left"]) if c["scrolled"]]
    assert scrolled[:2] == [rank, metric], (scrolled, geometry["assistant"])
    for key in (RUN_NAME, rank, metric):
        assert key in columns, (key, sorted(columns))
        column = columns[key]
        assert 0 <= column["left"] < column["right"] <= geometry["innerWidth"], (key, column, geometry["innerWidth"])
        assert column["shown"], (key, column, f"assistant panel: {geometry['assistant']} px")
    names = [n["text"] for n in geometry["names"]]
    assert sorted(names) == sorted(r.info.run_name for r in sweep.children.values()), names
    assert len(set(names)) == len(names) and all(n["whole"] for n in geometry["names"]), geometry["names"]


def test_parent_run_description_names_the_best_trial_and_links_to_it(browser, sweep):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ec

    top = max(r.data.metrics[METRIC] for r in sweep.children.values())
    winners = {run_id: r.info.run_name for run_id, r in sweep.children.items() if r.data.metrics[METRIC] == top}

    browser.get(f"{sweep.ui}/{run_link(sweep.experiment_id, sweep.parent_id)}")
    description = wait(browser).until(ec.presence_of_element_located(
        (By.CSS_SELECTOR, "[data-testid='note-editor-preview-content']")))
    for show_more in browser.find_elements(By.XPATH, "//button[normalize-space()='Show more']"):
        show_more.click()  # the UI folds descriptions taller than 100 px
    links = wait(browser).until(lambda _: description.find_elements(By.CSS_SELECTOR, "a[href*='/runs/']"))
    best = [a for a in links if any(f"/runs/{run_id}" in a.get_attribute("href") and a.text == name
                                    for run_id, name in winners.items())]
    assert best, (winners, [(a.text, a.get_attribute("href")) for a in links], description.text)
    best_id = re.search(r"/runs/(\w+)", best[0].get_attribute("href")).group(1)

    # the link works from the UI: it opens (in a new tab, as the UI does for description links) the best run
    main_tab = browser.current_window_handle
    best[0].click()
    wait(browser).until(lambda d: len(d.window_handles) == 2)
    browser.switch_to.window(next(h for h in browser.window_handles if h != main_tab))
    try:
        wait(browser).until(ec.url_contains(f"/runs/{best_id}"))
        assert urlsplit(browser.current_url).netloc == urlsplit(sweep.ui).netloc
        wait(browser).until(ec.presence_of_element_located(
            (By.XPATH, f"//*[self::h1 or self::h2 or self::h3][normalize-space()='{winners[best_id]}']")))
    finally:
        browser.close()
        browser.switch_to.window(main_tab)


def test_smoke_sweep_writes_parent_and_child_runs(sweep):
    """The sweep the browser tests open, checked through the MLflow and Optuna APIs."""
    from tests.conftest import mlflow_runs

    out, tracking_uri = sweep.stdout, sweep.uri
    assert "best of 3 trial(s)" in out and f"mlflow ui --backend-store-uri {tracking_uri}" in out
    client, runs = mlflow_runs(tracking_uri, "smoke")
    parents = [r for r in runs if "mlflow.parentRunId" not in r.data.tags]
    children = [r for r in runs if "mlflow.parentRunId" in r.data.tags]
    assert len(parents) == 1 and len(children) == 3
    assert len({c.info.run_name for c in children}) == 3, [c.info.run_name for c in children]
    parent = parents[0]
    assert parent.info.status == "FINISHED" and parent.data.tags["fedsweep.search_space"] == "smoke"
    assert parent.data.tags["mlflow.source.git.commit"] and "platform.sweep" in parent.data.tags["fedsweep.command"]
    assert "best_val_accuracy" in parent.data.metrics and "best_trial_test_accuracy" in parent.data.metrics
    for child in children:
        assert child.data.tags["mlflow.parentRunId"] == parent.info.run_id
        assert child.data.tags["status"] in ("completed", "early-stopped")
        assert child.info.status == "FINISHED"
        assert child.data.params["dataset.name"] == "digits" and "clients.lr" in child.data.params
        history = client.get_metric_history(child.info.run_id, "test_accuracy")
        steps = [m.step for m in history]
        assert steps == list(range(1, len(steps) + 1)) and len(steps) >= 1
        for key in ("test_loss", "train_loss", "seconds"):
            assert len(client.get_metric_history(child.info.run_id, key)) == len(steps)
        assert child.data.metrics["rounds_completed"] == len(steps)
        if child.data.params["algorithm.name"] == "fedavg":
            assert "algorithm.mu" not in child.data.params
        else:
            assert 0.001 <= float(child.data.params["algorithm.mu"]) <= 1.0
        # named by its number, then its swept values rounded (the exact ones in its params); the headline metrics per
        # seed beside the mean
        number, algorithm = child.info.run_name.split()[:2]
        assert number == f"#{child.data.tags['fedsweep.trial_number']}", child.info.run_name
        assert algorithm == child.data.params["algorithm.name"], child.info.run_name
        lr = float(child.data.params["clients.lr"])
        assert f"lr={lr:.4g}" in child.info.run_name  # the exact value in the params: checked against Optuna's below
        assert child.data.metrics["test_accuracy/seed_0"] == child.data.metrics["test_accuracy"]
    _check_answer_is_published(client, parent, children, out)


def _check_answer_is_published(client, parent, children, out):
    """The parent names the best trial (description, params, tag), the printed deep link's view exists, and the
    persistent Optuna study holds every trial with its MLflow run and plots on the parent."""
    import optuna

    from platform.results.mlflow_ui import run_link

    top = max(c.data.metrics["final_val_accuracy"] for c in children)
    winners = {c.info.run_id: c for c in children if math.isclose(c.data.metrics["final_val_accuracy"], top)}
    assert parent.data.tags["best_trial_run_id"] in winners  # any of the tied best (trials run concurrently)
    best = winners[parent.data.tags["best_trial_run_id"]]
    assert parent.data.params["best.algorithm.name"] == best.data.params["algorithm.name"]
    # 4 significant digits on the parent (0.1848, not 0.18483120598659894); the exact value on the trial
    assert parent.data.params["best.clients.lr"] == f"{float(best.data.params['clients.lr']):.4g}"
    note = parent.data.tags["mlflow.note.content"]
    assert f"[{best.info.run_name}]({run_link(parent.info.experiment_id, best.info.run_id)})" in note
    assert "`algorithm.mu`: loguniform" in note and "**Status:** completed" in note
    link = next(line.split(" ", 1)[1] for line in out.splitlines() if line.startswith("open: "))
    key = link.split("viewStateShareKey=")[1].split("&")[0]
    experiment = client.get_experiment(parent.info.experiment_id)
    assert f"mlflow.sharedViewState.{key}" in experiment.tags and "workflowType=machine_learning" in link
    storage = next(line for line in out.splitlines() if line.startswith("optuna: ")).split()[2]
    study = optuna.load_study(study_name=parent.data.tags["fedsweep.optuna_studies"], storage=storage)
    assert sorted(t.user_attrs["mlflow_run_id"] for t in study.trials) == sorted(c.info.run_id for c in children)
    for trial in study.trials:
        child = next(c for c in children if c.info.run_id == trial.user_attrs["mlflow_run_id"])
        assert trial.value == child.data.metrics["final_val_accuracy"]
        # the run's params hold the exact drawn values; only its name rounds them
        assert float(child.data.params["clients.lr"]) == trial.params["clients.lr"]
        assert trial.user_attrs["run_name"] == child.info.run_name
        assert max(trial.intermediate_values) == child.data.metrics["rounds_completed"]
    plots = {a.path for a in client.list_artifacts(parent.info.run_id, "optuna")}
    assert {"optuna/optuna_plots.html", "optuna/optimization_history.png"} <= plots
