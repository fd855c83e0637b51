"""Helpers the benchmarks share: a local Ray instance, memory sampling of Ray's processes, tables, medians."""
from __future__ import annotations

import contextlib
import os
import statistics
import sys
import threading
import time
from typing import Iterable, Optional, Sequence


def _psutil():
    """psutil: installed, or the copy Ray ships in ray/thirdparty_files (on sys.path once ray is imported)."""
    try:
        import psutil
    except ImportError:
        import ray  # noqa: F401

        import psutil
    return psutil


def machine_line() -> str:
    import torch

    try:
        import ray

        ray_version = ray.__version__
    except ImportError:  # a GPU machine without Ray (benchmarks.round_throughput --in-process)
        ray_version = "not installed"
    return (f"{os.cpu_count()} CPU cores, torch {torch.__version__} ({torch.get_num_threads()} threads by "
            f"default), Ray {ray_version}, Python {sys.version.split()[0]}, "
            f"GPU: {'cuda ' + torch.cuda.get_device_name(0) if torch.cuda.is_available() else 'none'}")


@contextlib.contextmanager
def local_ray(num_cpus: int = 2, object_store_mib: Optional[int] = None, as_platform: bool = False):
    """A fresh local Ray instance (as the tests start one; with ``as_platform``, as ``platform.run`` and
    ``platform.sweep.command`` start theirs: workers preloading the actors' module, no API server, monitor or log monitor, see
    ``platform.cli.lean_head``), shut down afterwards."""
    import ray

    kwargs = {"object_store_memory": object_store_mib * 1024 ** 2} if object_store_mib else {}
    if as_platform:
        from platform.cli import lean_head, ray_init_options

        with lean_head():
            ray.init(**{**ray_init_options(False), "num_cpus": num_cpus, "configure_logging": False, **kwargs})
    else:
        ray.init(address="local", num_cpus=num_cpus, log_to_driver=False, include_dashboard=False,
                 configure_logging=False, **kwargs)
    try:
        yield ray
    finally:
        ray.shutdown()


def median(values: Sequence[float]) -> float:
    return statistics.median(values) if values else float("nan")


def table(headers: Sequence[str], rows: Iterable[Sequence], formats: Optional[Sequence[str]] = None) -> str:
    rows = [[(f"{v:{f}}" if f and isinstance(v, (int, float)) else str(v))
             for v, f in zip(r, formats or [""] * len(r))] for r in rows]
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)]
    line = lambda cells: "  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(cells, widths)))
    return "\n".join([line(headers), "  ".join("-" * w for w in widths), *(line(r) for r in rows)])


def ray_processes():
    """This driver's Ray processes: its descendants (gcs_server, raylet, workers, dashboard agents...)."""
    import psutil  # ray ships it in ray/thirdparty_files, on sys.path once ray is imported

    try:
        return psutil.Process(os.getpid()).children(recursive=True)
    except psutil.Error:
        return []


ACTOR_TITLES = ("ray::ClientPool", "ray::ParameterServer")  # the process titles Ray gives our actors


def ray_memory_mib(with_pss: bool = True) -> dict:
    """Summed RSS and PSS (shared pages, e.g. the object store, counted once) of this driver's Ray processes,
    and the USS (private pages only: no object-store data, no shared libraries) of the platform's actors."""
    import psutil

    rss = pss = actors_uss = 0
    count = 0
    for p in ray_processes():
        try:
            if with_pss:
                info = p.memory_full_info()
                pss += getattr(info, "pss", 0)
                rss += info.rss
                if any(p.cmdline()[0].startswith(t) for t in ACTOR_TITLES):
                    actors_uss += getattr(info, "uss", 0)
            else:
                rss += p.memory_info().rss
            count += 1
        except (psutil.Error, IndexError):
            continue
    return {"rss_mib": rss / 2 ** 20, "pss_mib": pss / 2 ** 20, "actors_uss_mib": actors_uss / 2 ** 20,
            "processes": count}


class MemorySampler:
    """Samples :func:`ray_memory_mib` in a background thread; keeps the peaks."""

    def __init__(self, interval: float = 0.5):
        self.interval = interval
        self.peak_rss = self.peak_pss = self.peak_actors_uss = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.sample()
            self._stop.wait(self.interval)

    def sample(self) -> dict:
        m = ray_memory_mib()
        self.peak_rss = max(self.peak_rss, m["rss_mib"])
        self.peak_pss = max(self.peak_pss, m["pss_mib"])
        self.peak_actors_uss = max(self.peak_actors_uss, m["actors_uss_mib"])
        return m

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        self.sample()


class Stopwatch:
    def __init__(self):
        self.start = time.perf_counter()

    def lap(self) -> float:
        now = time.perf_counter()
        seconds, self.start = now - self.start, now
        return seconds


class ForeignLoad:
    """How busy the machine was with processes other than this benchmark (and its Ray processes).

    Benchmarks on a shared machine are only comparable when nothing else runs: this measures, over the
    ``with`` block, the machine's busy CPU-seconds minus this process tree's, as average cores in use. The
    tree's CPU times are sampled in the background (every ``interval`` s), so processes that end inside the
    block (Ray's, at shutdown) still count as ours, up to their last sample.
    """

    def __init__(self, interval: float = 0.25):
        self.interval = interval
        self.cores = 0.0

    def __enter__(self):
        self._psutil = _psutil()
        self._first: dict = {}  # pid -> CPU seconds when first seen (0 for processes born inside the block)
        self._last: dict = {}
        self._sample(initial=True)
        self._t0, self._busy0 = time.perf_counter(), self._busy()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def _busy(self) -> float:
        t = self._psutil.cpu_times()
        return t.user + t.nice + t.system + getattr(t, "irq", 0) + getattr(t, "softirq", 0) + getattr(t, "steal", 0)

    def _sample(self, initial: bool = False) -> None:
        me = self._psutil.Process(os.getpid())
        try:
            procs = [me] + me.children(recursive=True)
        except self._psutil.Error:
            procs = [me]
        for p in procs:
            try:
                c = p.cpu_times()
                key = (p.pid, p.create_time())
            except self._psutil.Error:
                continue
            used = c.user + c.system
            self._first.setdefault(key, used if initial else 0.0)
            self._last[key] = used

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self._sample()

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        self._sample()
        elapsed = max(time.perf_counter() - self._t0, 1e-9)
        ours = sum(self._last[k] - self._first[k] for k in self._last)
        self.cores = max(0.0, (self._busy() - self._busy0) - ours) / elapsed

    def __str__(self) -> str:
        return f"{self.cores:.2f}"


def wait_for_quiet(max_foreign_cores: float = 0.25, timeout: float = 0.0, probe: float = 2.0) -> float:
    """Wait (up to ``timeout`` s) until other processes use less than ``max_foreign_cores``; returns the last probe."""
    deadline = time.perf_counter() + timeout
    said = 0.0
    while True:
        with ForeignLoad() as load:
            time.sleep(probe)
        if load.cores < max_foreign_cores or time.perf_counter() >= deadline:
            return load.cores
        if time.perf_counter() - said > 60:
            said = time.perf_counter()
            print(f"  (machine busy: {load.cores:.2f} cores used by other processes; waiting up to "
                  f"{deadline - said:.0f} s more)", file=sys.stderr, flush=True)


def run_federated(config, seeds: Sequence[int], rounds: int, shared=None, cache=None) -> list[list[dict]]:
    """Run ``config`` on every seed (one federation each, rounds in lockstep) on the connected Ray; returns each
    seed's list of per-round metrics. ``shared``: the SharedData to use (default: built here, through ``cache``)."""
    from platform.runtime.federation import share_dataset
    from platform.runtime.trial import start_federations, stop_federations

    if shared is None:
        shared = share_dataset(config, cache=cache)
    federations = start_federations(config, list(seeds), shared, cache=cache)
    histories: list[list[dict]] = [[] for _ in seeds]
    try:
        for _ in range(rounds):
            refs = [f.start_round() for f in federations]
            for i, (f, ref) in enumerate(zip(federations, refs)):
                histories[i].append(f.finish_round(ref))
    finally:
        stop_federations(federations)
    return histories


def learning_summary(histories: list[list[dict]], val: str = "val_accuracy", test: str = "test_accuracy") -> dict:
    """Per seed: the final and best-over-rounds validation metric, and the test metric at the final round and at
    the best-validation round (selection never on test)."""
    import numpy as np

    best = [int(np.argmax([m[val] for m in h])) for h in histories]
    return {"final_val": [h[-1][val] for h in histories],
            "best_val": [h[b][val] for h, b in zip(histories, best)],
            "final_test": [h[-1][test] for h in histories],
            "test_at_best_val": [h[b][test] for h, b in zip(histories, best)]}


def learning_table(results: dict) -> str:
    """One row per arm of :func:`learning_summary` results: means (± std of the final val) and per-seed finals."""
    import numpy as np

    rows = [[label, f"{np.mean(r['final_val']):.4f} ± {np.std(r['final_val']):.4f}", f"{np.mean(r['best_val']):.4f}",
             f"{np.mean(r['final_test']):.4f}", f"{np.mean(r['test_at_best_val']):.4f}",
             " ".join(f"{v:.3f}" for v in r["final_val"])] for label, r in results.items()]
    return table(["arm", "final val (mean ± std)", "best val", "final test", "test at best val",
                  "final val per seed"], rows)


def run_arms(configs: dict, seeds: Sequence[int], rounds: int, cache=None, shared_for=None,
             summarise=learning_summary) -> dict:
    """label -> ``summarise(histories)`` (default :func:`learning_summary`) of each config run on every seed, on a
    fresh local Ray (2 CPUs), with a progress line per arm on stderr. ``shared_for(config)``: the SharedData of a
    config (default: built here)."""
    import json

    import numpy as np

    results = {}
    with local_ray(2):
        prepared = {}
        if shared_for is None:  # every arm's data first: a config its data refuses fails before any arm has run
            from platform.runtime.federation import share_dataset

            prepared = {label: share_dataset(config, cache=cache) for label, config in configs.items()}
        for label, config in configs.items():
            shared = prepared[label] if shared_for is None else shared_for(config)
            results[label] = summarise(run_federated(config, seeds, rounds, shared=shared, cache=cache))
            print(f"... {label}: final val {np.mean(results[label]['final_val']):.4f}; per seed "
                  f"{json.dumps(results[label])}", file=sys.stderr, flush=True)  # kept if a later arm fails
    return results


def chosen_arms(parser, value: str, known) -> list[str]:
    """The comma-separated ``--arms`` value as a list, or a parser error naming the unknown ones and the allowed."""
    arms = [a.strip() for a in value.split(",")]
    unknown = [a for a in arms if a not in known]
    if unknown:
        parser.error(f"--arms: unknown {', '.join(unknown)}; allowed: {', '.join(known)}")
    return arms


def print_learning(results: dict, as_json: bool, setting: str, verdicts: Sequence[str] = ()) -> None:
    """A learning benchmark's output: the per-seed results as JSON, or the machine, the setting, the learning
    table and the claims' verdict lines."""
    import json

    if as_json:
        print(json.dumps(results, indent=1))
        return
    print(machine_line())
    print(setting)
    print(learning_table(results))
    for line in verdicts:
        print(line)


VERDICT_SE = 2.0  # a lead counts when it is more than this many standard errors from zero


def verdict(lead: float, se: float) -> str:
    """The verdict on a claim from its lead (positive: the paper's direction) and that lead's standard error over
    seeds: ``holds`` beyond VERDICT_SE standard errors in the paper's direction, ``does not hold`` beyond them the
    other way, ``within noise`` otherwise (docs/benchmarks/reproduction.md states this rule in its header; a claim the
    setting cannot test is written "cannot be tested here", with the number that shows why, by hand)."""
    if se is None or not se >= 0:
        raise ValueError(f"a verdict needs the lead's standard error, got {se!r}")
    if abs(lead) > VERDICT_SE * se:
        return "holds" if lead > 0 else "does not hold"
    return "within noise"


def claim_verdict(results: dict, ours: str, other: str, claim: str, key: str = "final_val") -> str:
    """One claim's line: ``ours`` against ``other`` on the per-seed ``key`` (default: final validation accuracy),
    their difference ± its standard error over seeds and the Welch p (platform.results.noise), and the
    :func:`verdict`."""
    from platform.results.noise import lead_over

    lead = lead_over(results[ours][key], results[other][key], "max")
    word = verdict(lead.lead, lead.se) if lead.se is not None else "within noise (one seed: no spread)"
    se = f" ± {lead.se:.4f} SE" if lead.se is not None else ""
    p = f", Welch p = {lead.p:.2g}" if lead.p is not None else ""
    return f"{claim}: {ours} − {other} = {lead.lead:+.4f}{se}{p} ({key}) -> {word}"