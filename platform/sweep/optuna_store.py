"""A sweep's persistent Optuna study: every finished trial, with its per-round values, in an RDB that
``optuna-dashboard`` and ``optuna.load_study`` open.

The study is the record of the sweep, whatever its searcher (TPE, random or grid): the Tune callback adds each
trial when it ends (:meth:`StudyRecorder.record`), COMPLETE with its last value of the search metric(s), PRUNED
when ASHA stopped it early, FAIL when it failed, with the search metric per round as intermediate values and the
MLflow run as user attributes. The sampler keeps its own in-memory study (Tune pickles it for ``--resume``); a
resumed sweep reopens the same study name, so its history continues.

Storage: ``--optuna-storage URL``, else ``$FEDSWEEP_OPTUNA_STORAGE``, else ``sqlite:///optuna.db`` beside a SQLite
MLflow store (not inside it: both keep an ``alembic_version`` table), else in the results home. Study names are
the sweep's Tune experiment name (``<space>-<time>-<hex>``), with ``/<the cell's values>`` per scenario cell, e.g.
``fedaux_dp-20261126-011227-624ecf/lam=0.01`` (``platform.sweep.cells.study_names``).
"""
from __future__ import annotations

import os
import sys
import warnings
from typing import Any, Optional

from platform.cli import probe_write, results_home, sqlite_path
from platform.config.run_schema import diverged, is_number, setting_metrics
from platform.errors import UserError, disk_full
from platform.results.tracking import check_sqlite_file, sqlite_store_lock

STUDY_FILE = "optuna.db"
ENV_STORAGE = "FEDSWEEP_OPTUNA_STORAGE"


def storage_url(tracking_uri: str, cli_url: Optional[str] = None) -> str:
    """Where the sweep's studies go (see the module doc)."""
    url = cli_url or os.environ.get(ENV_STORAGE)
    if url:
        return url
    if sqlite_path(tracking_uri):
        directory = os.path.dirname(sqlite_path(tracking_uri))
    else:
        directory = results_home()
    return f"sqlite:///{os.path.join(directory, STUDY_FILE)}"


def check_storage(url: str, flag: str = "--optuna-storage") -> None:
    """Fail early, with one line naming ``flag`` (the option, or the variable the URL came from), when the storage
    URL cannot be opened: not a URL, or a ``sqlite:///`` file that is no SQLite database (a directory, a device, a
    text file) or in a directory that does not exist or cannot be written."""
    if not url.strip():
        raise UserError(f"{flag}: is empty; give an RDB URL (e.g. sqlite:///optuna.db, postgresql://user@host/db), "
                        f"or leave it out for the default beside the MLflow store")
    if "://" not in url:
        raise UserError(f"{flag}: {url!r} is not an RDB URL (e.g. sqlite:///optuna.db, "
                        f"postgresql://user@host/db)")
    if sqlite_path(url):
        check_sqlite_file(sqlite_path(url), flag, STUDY_FILE)
        directory = os.path.dirname(sqlite_path(url))
        if not os.path.isdir(directory):
            raise UserError(f"{flag}: directory {directory} does not exist; create it or give another "
                            f"sqlite:///<dir>/optuna.db")
        reason = probe_write(directory)  # a file really written and removed: os.access says yes to /proc for root
        if reason:
            raise UserError(f"{flag}: directory {directory} is not writable (cannot create a file: "
                            f"{reason}); give a directory this user can write")


def dashboard_command(url: str) -> str:
    return f"optuna-dashboard {url}"


def optuna_distribution(dist):
    """The Optuna distribution of one of the space's parameters (:class:`platform.config.search_space.Distribution`)."""
    from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution

    if dist.kind in ("choice", "grid"):
        return CategoricalDistribution(list(dist.args))
    if dist.kind == "int":
        return IntDistribution(int(dist.args[0]), int(dist.args[1]))
    return FloatDistribution(float(dist.args[0]), float(dist.args[1]), log=dist.kind == "loguniform")


_LOST: dict[str, str] = {}  # study name -> why its storage went away, in this process


def lost_studies() -> dict[str, str]:
    """The studies whose storage went away while this process recorded them, ``{study name: why}``: the closing
    lines and the parent run's description leave them out of what optuna-dashboard opens."""
    return dict(_LOST)


class StudyRecorder:
    """Adds a sweep's (or a scenario cell's) finished trials to its persistent study. Pickles with the Tune callback
    (the storage is reopened lazily).

    A SQLite storage that goes away mid-sweep (its file deleted, replaced, truncated or overwritten: SQLite would go
    on writing to the deleted file, unseen) is found before each trial is added: the study is then ``lost`` (one
    warning line; :func:`lost_studies`), nothing more is written to it, and the sweep goes on (MLflow holds every
    trial). A full disk under it is raised (the sweep stops, :mod:`platform.sweep.faults`)."""

    def __init__(self, url: str, study_name: str, objectives: list[tuple[str, str]], parameters: dict):
        self.url = url
        self.study_name = study_name
        self.objectives = list(objectives)
        self.parameters = parameters
        self._study = None
        self._file = None  # (device, inode) of the SQLite file the study was opened in
        self.lost: Optional[str] = None  # why the storage went away mid-sweep

    def __getstate__(self):
        return {**self.__dict__, "_study": None, "_file": None}

    @property
    def study(self):
        if self._study is None:
            import optuna

            optuna.logging.set_verbosity(optuna.logging.WARNING)
            with sqlite_store_lock(self.url):  # a new storage's schema, one process at a time
                self._study = optuna.create_study(
                    storage=self.url, study_name=self.study_name, load_if_exists=True,
                    directions=["maximize" if mode == "max" else "minimize" for _, mode in self.objectives])
            names = [metric for metric, _ in self.objectives]
            if self._study.metric_names != names:  # the dashboard's axis titles ("Objective 0" without)
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")  # Optuna marks set_metric_names experimental
                    self._study.set_metric_names(names)
            if sqlite_path(self.url):
                info = os.stat(sqlite_path(self.url))
                self._file = (info.st_dev, info.st_ino)
        return self._study

    def _gone(self) -> Optional[str]:
        """Why the SQLite file the study was opened in is no longer it (deleted, replaced, cut to less than SQLite's
        header, overwritten); None while it is (or before the study was opened, or for another RDB)."""
        from platform.results.tracking import SQLITE_HEADER

        path = sqlite_path(self.url)
        if not path or self._file is None:
            return None
        try:
            info = os.stat(path)
            with open(path, "rb") as fh:
                header = fh.read(len(SQLITE_HEADER))
        except FileNotFoundError:
            return f"{path} was deleted"
        except OSError as err:
            return f"{path} cannot be read ({err.strerror})"
        if (info.st_dev, info.st_ino) != self._file:
            return f"{path} was replaced by another file"
        if header != SQLITE_HEADER:
            return f"{path} was truncated or overwritten ({info.st_size} bytes, no SQLite header)"
        return None

    def _lose(self, why: str) -> None:
        self.lost = _LOST[self.study_name] = why
        print(f"warning: Optuna study {self.study_name} is lost: {why}; the sweep goes on without it (every trial is "
              f"in MLflow), and optuna-dashboard has nothing of it to open", file=sys.stderr, flush=True)

    def record(self, params: dict, last: dict, history: dict, state: str, attrs: dict) -> None:
        """Add one ended trial. ``last``: its last reported metrics; ``history``: {round: search metric value};
        ``state``: "complete", "pruned" or "fail"; ``attrs``: user attributes (run id, run name, status...)."""
        import optuna
        from optuna.trial import TrialState, create_trial

        names = [metric for metric, _ in self.objectives]
        values = [last.get(metric) for metric in names]
        # a value to rank: a number, not NaN, infinite only where it is a setting (ε = ∞); Optuna takes inf
        finite = all(is_number(v) for v in values) and not diverged(last, names, setting_metrics())
        trial_state = {"complete": TrialState.COMPLETE, "pruned": TrialState.PRUNED, "fail": TrialState.FAIL}[state]
        if trial_state == TrialState.COMPLETE and not finite:
            trial_state = TrialState.FAIL  # a diverged trial (NaN, an infinite loss) has no value to rank
        distributions = {k: optuna_distribution(self.parameters[k]) for k in params if k in self.parameters}
        intermediate = ({int(r): float(v) for r, v in history.items() if v == v and abs(v) != float("inf")}
                        if len(self.objectives) == 1 else {})
        gone = None if self.lost else self._gone()
        if gone:
            self._lose(gone)
        if self.lost:
            return
        try:
            trial = create_trial(
                params={k: params[k] for k in distributions}, distributions=distributions,
                values=[float(v) for v in values] if trial_state == TrialState.COMPLETE else None,
                intermediate_values=intermediate, state=trial_state,
                user_attrs={k: _attr(v) for k, v in attrs.items()})
            self.study.add_trial(trial)
        except (ValueError, optuna.exceptions.OptunaError) as err:  # the record must not fail a sweep
            if disk_full(err) is not None:  # but a full disk stops it, as everywhere
                raise
            broken = next((why for why in _BROKEN if why in str(err)), None)
            if broken and sqlite_path(self.url):
                self._lose(f"{sqlite_path(self.url)}: {broken}")
                return
            print(f"warning: trial not recorded in Optuna study {self.study_name}: {err}", file=sys.stderr)


# SQLite's words for a database file that is no longer one (cut, overwritten, its tables gone)
_BROKEN = ("database disk image is malformed", "file is not a database", "no such table", "unable to open database")


def _attr(value: Any):
    return value if isinstance(value, (str, int, float, bool)) or value is None else str(value)


def load_study(url: str, study_name: str):
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    return optuna.load_study(study_name=study_name, storage=url)


# ---- Optuna's plots of a study, for the sweep's parent run ----

PLOTS = ("optimization_history", "param_importances", "slice", "contour")


def write_study_plots(study, directory: str, title: str, target_names: list[str]) -> list[str]:
    """Optuna's history, parameter-importance, slice and contour plots of ``study`` in ``directory``: one HTML page
    holding every interactive (plotly) plot, with plotly.js embedded once so it opens offline, and a PNG of each
    (Optuna's matplotlib backend). A plot the study cannot support (too few trials, one parameter for a contour) is
    left out with its reason in the HTML. Returns the files written."""
    with warnings.catch_warnings():  # importance-accuracy and layout notes: the plots are drawn regardless
        warnings.simplefilter("ignore")
        return _write_study_plots(study, directory, title, target_names)


def _write_study_plots(study, directory: str, title: str, target_names: list[str]) -> list[str]:
    import optuna.visualization as vis
    from optuna.trial import TrialState

    os.makedirs(directory, exist_ok=True)
    complete = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
    params = sorted({k for t in complete for k in t.params})
    varied = [k for k in params if len({repr(t.params.get(k)) for t in complete}) > 1]
    sections, written, plotly_embedded = [], [], False
    for objective, name in enumerate(target_names):
        target = (lambda t, i=objective: t.values[i]) if len(target_names) > 1 else None
        suffix = f"_{name}" if len(target_names) > 1 else ""
        for plot in PLOTS:
            reason = _unsupported(plot, complete, varied)
            heading = f"{plot.replace('_', ' ')} ({name})"
            if reason:
                sections.append(f"<h2>{heading}</h2><p>not drawn: {reason}</p>")
                continue
            kwargs = {"target": target, "target_name": name}
            if plot in ("slice", "contour"):
                kwargs["params"] = varied
            try:
                figure = getattr(vis, f"plot_{plot}")(study, **kwargs)
                sections.append(f"<h2>{heading}</h2>" + figure.to_html(full_html=False,
                                                                        include_plotlyjs=not plotly_embedded))
                plotly_embedded = True
                png = os.path.join(directory, f"{plot}{suffix}.png")
                _matplotlib_plot(plot, study, kwargs, png)
                written.append(png)
            except Exception as err:  # noqa: BLE001 - a plot must not fail the sweep; say why it is missing
                sections.append(f"<h2>{heading}</h2><p>not drawn: {type(err).__name__}: {err}</p>")
    html = os.path.join(directory, "optuna_plots.html")
    with open(html, "w") as fh:
        fh.write(f"<!doctype html><html><head><meta charset='utf-8'><title>{title}</title></head><body>"
                 f"<h1>{title}</h1>{''.join(sections)}</body></html>")
    return [html, *written]


def _unsupported(plot: str, complete: list, varied: list[str]) -> Optional[str]:
    if len(complete) < 2:
        return f"{len(complete)} complete trial(s); needs 2"
    if plot in ("param_importances", "slice") and not varied:
        return "no swept parameter varies across the complete trials"
    if plot == "contour" and len(varied) < 2:
        return f"needs 2 varied parameters, the study has {len(varied)}"
    return None


def _matplotlib_plot(plot: str, study, kwargs: dict, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import optuna.visualization.matplotlib as mvis

    axes = getattr(mvis, f"plot_{plot}")(study, **kwargs)
    figure = (axes.flat[0] if hasattr(axes, "flat") else axes).get_figure()
    figure.set_size_inches(max(figure.get_size_inches()[0], 8), max(figure.get_size_inches()[1], 5))
    figure.tight_layout()
    figure.savefig(path, format="png", dpi=100)
    plt.close(figure)
