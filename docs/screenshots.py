"""Screenshots of a finished sweep for the docs: the MLflow runs table its deep link opens, its parent run, and
(optionally) its Optuna study in optuna-dashboard. Needs chromium and chromedriver (apt install chromium
chromium-driver) and selenium.

Taken the way a user gets there: a fresh browser profile (a first visit) opens the printed ``open:`` link, then
closes what MLflow 3.17 shows on a first visit, the Assistant panel and the shared-view banner, by clicking them
away as the tutorial (docs/tutorial.md, "Compare the trials in MLflow") tells a user to.

    python docs/screenshots.py --tracking-uri sqlite:///mlflow.db --space smoke
    python docs/screenshots.py --tracking-uri sqlite:///mlflow.db --space smoke \\
        --optuna-storage sqlite:///optuna.db --study smoke-20260101-120000

Writes mlflow_runs_table.png, mlflow_parent_run.png (and optuna_dashboard.png) into --out (default: docs/images/).
"""
from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from contextlib import ExitStack

from platform.results.mlflow_ui import (deep_link, free_port, run_link, start_server, stop_server, view_key,
                                wait_for_server)

WINDOW = (1600, 1000)
ASSISTANT_CLOSE = "mlflow.assistant.chat_panel.close"  # the Assistant panel's x (MLflow 3.17)
SHARED_VIEW_DISMISS = "shared_view.dismiss"  # the end of the shared-view banner's dismiss button's component id
WAIT_S = 60
SETTLE_S = 1.5  # let charts and fonts finish drawing after the awaited element appears


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tracking-uri", required=True, help="the MLflow store the sweep wrote to")
    parser.add_argument("--space", required=True, help="search space name: its latest sweep is shown")
    parser.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "images"),
                        help="directory for the PNGs (default: docs/images/)")
    parser.add_argument("--ui-url", help="an MLflow UI already serving the store (default: start one)")
    parser.add_argument("--optuna-storage", help="Optuna storage URL of the sweep's study (with --study)")
    parser.add_argument("--study", help="Optuna study name to show in optuna-dashboard")
    return parser


def latest_sweep(tracking_uri: str, space: str):
    """The parent run of the latest sweep of ``space``: tag ``fedsweep.search_space`` and no parent run."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=tracking_uri)
    experiments = [e.experiment_id for e in client.search_experiments()]
    runs = client.search_runs(experiments, f"tags.`fedsweep.search_space` = '{space}'",
                              order_by=["attributes.start_time DESC"], max_results=100)
    parents = [r for r in runs if "mlflow.parentRunId" not in r.data.tags]
    if not parents:
        raise SystemExit(f"no sweep of search space {space!r} in {tracking_uri}")
    return parents[0]


def chromium():
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--hide-scrollbars",
                f"--window-size={WINDOW[0]},{WINDOW[1]}"):
        options.add_argument(arg)
    browser_path = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
    if browser_path:
        options.binary_location = browser_path
    driver_path = shutil.which("chromedriver")
    driver = webdriver.Chrome(service=Service(driver_path) if driver_path else None, options=options)
    width, height = WINDOW  # the page itself, not the window around it
    driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride",
                           {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False})
    return driver  # a new profile: the UI sees a first visit, as a user opening the printed link does


def close_first_visit_panels(driver) -> list[str]:
    """Do what the tutorial tells a first-time user (Compare the trials in MLflow): close the MLflow Assistant panel that MLflow
    3.17 opens on a first visit (its x; the UI remembers it) and dismiss the "You're viewing a shared view" banner
    above the runs table. Returns what was closed."""
    from selenium.webdriver.common.by import By

    closed = []
    for selector, what in ((f"button[data-component-id='{ASSISTANT_CLOSE}']", "the Assistant panel"),
                           (f"button[data-component-id$='{SHARED_VIEW_DISMISS}']", "the shared-view banner")):
        for button in driver.find_elements(By.CSS_SELECTOR, selector):
            if button.is_displayed():
                button.click()
                closed.append(what)
    return closed


def wait_for(driver, condition, what: str):
    from selenium.common.exceptions import StaleElementReferenceException
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(driver, WAIT_S, ignored_exceptions=(StaleElementReferenceException,)).until(
        condition, f"timed out waiting for {what} at {driver.current_url}")


def shoot(driver, path: str) -> None:
    time.sleep(SETTLE_S)
    driver.save_screenshot(path)
    print(f"wrote {path}")


def runs_table(driver, url: str, path: str) -> None:
    from selenium.webdriver.common.by import By

    def loaded(d):
        footer = re.search(r"(\d+) matching runs", d.find_element(By.TAG_NAME, "body").text)
        return footer and len(d.find_elements(By.CSS_SELECTOR, ".ag-pinned-left-cols-container .ag-row")) == int(
            footer.group(1))

    driver.get(url)  # the printed open: link, on a first visit
    wait_for(driver, loaded, "the runs table")
    closed = close_first_visit_panels(driver)
    print(f"closed {' and '.join(closed)}, as the tutorial says" if closed else "no first-visit panel to close")
    shoot(driver, path)


def parent_run(driver, url: str, path: str) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ec

    driver.get(url)
    wait_for(driver, ec.presence_of_element_located((By.CSS_SELECTOR, "[data-testid='note-editor-preview-content']")),
             "the run description")
    for show_more in driver.find_elements(By.XPATH, "//button[normalize-space()='Show more']"):
        show_more.click()  # the UI folds descriptions taller than 100 px
    shoot(driver, path)


def optuna_dashboard(driver, storage: str, study: str, path: str, workdir: str) -> None:
    import optuna
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ec

    study_id = optuna.storages.get_storage(storage).get_study_id_from_name(study)
    executable = (shutil.which("optuna-dashboard", path=os.path.dirname(sys.executable))
                  or shutil.which("optuna-dashboard"))
    if executable is None:
        raise SystemExit("optuna-dashboard is not installed (pip install optuna-dashboard)")
    port = free_port()
    log_path = os.path.join(workdir, "optuna_dashboard.log")
    with open(log_path, "ab") as log:
        process = subprocess.Popen([executable, storage, "--host", "127.0.0.1", "--port", str(port)], stdout=log,
                                   stderr=subprocess.STDOUT, cwd=workdir, start_new_session=True)
    try:
        url = f"http://127.0.0.1:{port}"
        wait_for_server(url, process, log_path, health_path="/")
        driver.get(f"{url}/dashboard/studies/{study_id}")
        wait_for(driver, ec.presence_of_element_located((By.CSS_SELECTOR, ".js-plotly-plot .main-svg")),
                 "the study's plots")
        shoot(driver, path)
    finally:
        stop_server(process)


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    if bool(args.optuna_storage) != bool(args.study):
        build_parser().error("--optuna-storage and --study go together")
    parent = latest_sweep(args.tracking_uri, args.space)
    experiment_id, parent_id = parent.info.experiment_id, parent.info.run_id
    os.makedirs(args.out, exist_ok=True)
    with ExitStack() as stack:
        workdir = stack.enter_context(tempfile.TemporaryDirectory(prefix="fedsweep_screenshots_"))
        ui = args.ui_url
        if ui is None:
            port, log = free_port(), os.path.join(workdir, "mlflow_server.log")
            server = start_server(args.tracking_uri, port, log, cwd=workdir)
            stack.callback(stop_server, server)
            ui = f"http://127.0.0.1:{port}"
            wait_for_server(ui, server, log)
        driver = chromium()
        stack.callback(driver.quit)
        runs_table(driver, deep_link(ui, experiment_id, view_key(parent_id)),
                   os.path.join(args.out, "mlflow_runs_table.png"))
        parent_run(driver, f"{ui.rstrip('/')}/{run_link(experiment_id, parent_id)}",
                   os.path.join(args.out, "mlflow_parent_run.png"))
        if args.study:
            optuna_dashboard(driver, args.optuna_storage, args.study, os.path.join(args.out, "optuna_dashboard.png"),
                             workdir)
    return 0


if __name__ == "__main__":
    sys.exit(main())
