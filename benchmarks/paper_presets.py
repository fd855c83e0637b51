"""``--estimate`` for every paper preset of the named sweeps, on stand-in data: one table of seconds per round, peak
memory and the whole sweep's predicted wall time and GPU-hours, written into ``docs/benchmarks/paper_presets.md``.

    python -m benchmarks.paper_presets [--gpus 8] [--presets paper] [--set stand_in_fraction=0.05] [--no-write]

Run it where the sweeps will run (``benchmarks/gpu_paper_presets.sh`` on a GPU node); on a CPU the figures are the
CPU's. Each preset runs in a fresh ``python -m platform.run <space> --preset P --stand-in --estimate --address local``
(a new local Ray each, so it never joins another cluster), so one failure costs only its row.
"""
from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import time

SPACES = ("feded_beta", "mnfl_rho", "single_image_pruning", "fedaux_dp", "fedkp_bandwidth", "fedpa_shrinkage_burnin")
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESULTS = os.path.join(REPO, "docs", "benchmarks", "paper_presets.md")
START, END = "<!-- paper-presets:start -->", "<!-- paper-presets:end -->"


def paper_presets(names: list[str] | None) -> list[tuple[str, str]]:
    """(space, preset) for every preset whose name starts with ``paper`` (or is in ``names``)."""
    sys.path.insert(0, REPO)
    from platform.config.space_files import read_search_space

    pairs = []
    for space in SPACES:
        _, _, presets = read_search_space(space)
        pairs += [(space, p) for p in presets if (p in names if names else p.startswith("paper"))]
    return pairs


def _field(pattern: str, text: str, default: str = "?") -> str:
    match = re.search(pattern, text)
    return match.group(1) if match else default


def estimate_row(space: str, preset: str, gpus: int, sets: list[str], timeout: int) -> dict:
    command = [sys.executable, "-m", "platform.run", space, "--preset", preset, "--stand-in", "--estimate",
               "--address", "local", "--gpus", str(gpus), "--no-mlflow"]
    for s in sets:
        command += ["--set", s]
    started = time.perf_counter()
    try:
        result = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=timeout)
        out, ok = result.stdout + result.stderr, result.returncode == 0
    except subprocess.TimeoutExpired as err:
        partial = err.stdout.decode(errors="replace") if isinstance(err.stdout, bytes) else (err.stdout or "")
        last = (partial.strip().splitlines() or [""])[-1]
        out, ok = f"timed out after {timeout} s ({last})", False
    row = {"space": space, "preset": preset, "ok": ok, "seconds": time.perf_counter() - started}
    if not ok:
        row["error"] = (out.strip().splitlines() or ["?"])[-1][:160]
        return row
    row.update(device=_field(r"measured on [^,]+, ([^:]+):", out),
               steady=_field(r"a later round[^:]*: ([0-9.]+) s", out, _field(r"aggregation[^:]*: ([0-9.]+) s", out)),
               memory=_field(r"peak memory: ([^\n]+)", out, "n/a"), trials=_field(r"sweep \S+: ([^;]+);", out),
               wall=_field(r"wall time ≈ ([^,(]+)", out).strip(),
               gpu_hours=_field(r"([0-9.]+) GPU-hours", out, "not predicted (measured on CPUs)"))
    return row


def table(rows: list[dict], gpus: int, sets: list[str]) -> str:
    lines = [f"`python -m benchmarks.paper_presets --gpus {gpus}" + "".join(f" --set {s}" for s in sets) + "`, "
             + time.strftime("%Y-%m-%d") + ". Stand-in data of the real datasets' shapes and sizes.", "",
             "| space | preset | measured on | s/round (steady) | peak memory | sweep | wall time on "
             f"{gpus} GPU(s) | GPU-hours |", "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if r["ok"]:
            lines.append(f"| {r['space']} | {r['preset']} | {r['device']} | {r['steady']} | {r['memory']} | "
                         f"{r['trials']} | {r['wall']} | {r['gpu_hours']} |")
        else:
            lines.append(f"| {r['space']} | {r['preset']} | failed: {r['error']} | | | | | |")
    return "\n".join(lines)


def write_results(text: str) -> None:
    with open(RESULTS) as fh:
        content = fh.read()
    block = f"{START}\n{text}\n{END}"
    if START in content and END in content:
        content = content[:content.index(START)] + block + content[content.index(END) + len(END):]
    else:
        content = content.rstrip() + "\n\n## Figures\n\n" + block + "\n"
    with open(RESULTS, "w") as fh:
        fh.write(content)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.paper_presets", description=__doc__.split("\n\n")[0])
    parser.add_argument("--gpus", type=int, default=1, help="GPUs to predict the sweeps for (default 1)")
    parser.add_argument("--presets", nargs="*", help="preset names (default: every paper* preset)")
    parser.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE",
                        help="passed to every run, e.g. stand_in_fraction=0.05 to try the script on a CPU")
    parser.add_argument("--timeout", type=int, default=600, help="seconds per preset (default 600)")
    parser.add_argument("--no-write", action="store_true", help="print the table only")
    args = parser.parse_args(argv)
    rows = []
    for space, preset in paper_presets(args.presets):
        print(f"{space} --preset {preset} ...", flush=True)
        rows.append(estimate_row(space, preset, args.gpus, args.sets, args.timeout))
        r = rows[-1]
        print(f"  {'ok' if r['ok'] else 'FAILED: ' + r['error']} ({r['seconds']:.0f} s)", flush=True)
    text = table(rows, args.gpus, args.sets)
    print(text)
    if not args.no_write:
        write_results(text)
        print(f"written to {RESULTS}")
    return 0 if all(r["ok"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
