"""``python -m platform.report <search-space name | parent run id>``: one sweep's results as ``report.md`` and
``report.html``, written to ``--out`` and logged to the sweep's parent run under ``report/``.

The command line only; what the report holds and how it is written: :mod:`platform.results.report`.
"""
from __future__ import annotations

import argparse
import os
import sys

from platform.cli import main_wrapper
from platform.results.report import (ARTIFACT_REPORT, default_out_dir, find_reference, log_report, resolve_objective,
                                     write_report)
from platform.results.sweep_results import load_sweep
from platform.results.tracking import check_tracking_uri, given_tracking_uri, resolve_tracking_uri


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m platform.report",
        description="Write a sweep's results (ablation table, learning curves, sensitivity plots, the paper's "
                    "reference values, comparisons) as report.md and report.html, and log them to the sweep's "
                    "parent MLflow run under report/. Works on a sweep that is still running.",
        epilog="Examples:\n  python -m platform.report smoke\n"
               "  python -m platform.report feded_beta --compare 0123456789abcdef0123456789abcdef\n"
               "  python -m platform.report smoke --metric val_loss --out /tmp/smoke-report",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("sweep", help="a search-space name (its newest sweep) or a sweep's parent run id")
    parser.add_argument("--tracking-uri", help="MLflow tracking URI (default: $MLFLOW_TRACKING_URI, else "
                                               "sqlite:///<results home>/mlflow.db)")
    parser.add_argument("--out", help="output directory (default: <results home>/reports/<space>-<run id[:8]>)")
    parser.add_argument("--compare", nargs="+", default=[], metavar="SWEEP",
                        help="other sweeps (search-space names or parent run ids) to compare with, arm by arm")
    parser.add_argument("--preset", metavar="NAME",
                        help="with a search-space name: its newest sweep run with --preset NAME (e.g. paper); the "
                             "reference values are the preset's")
    parser.add_argument("--metric", help="select and report on this metric (default: the sweep's search metric; "
                                         "the first objective of a multi-objective sweep)")
    return parser


@main_wrapper
def main(argv=None) -> int:
    args = build_parser().parse_args(argv)

    check_tracking_uri(*given_tracking_uri(args.tracking_uri))  # not a SQLite database, empty...: one line
    uri = resolve_tracking_uri(args.tracking_uri)
    results = load_sweep(uri, args.sweep, "sweep", preset=args.preset)
    others = [load_sweep(uri, ref, "--compare") for ref in args.compare]
    objective = resolve_objective(results, args.metric)
    reference = find_reference(results.space, results.preset)
    out = os.path.abspath(args.out or default_out_dir(results, others))
    written = write_report(results, objective, out, others, reference)
    where = f"report: {os.path.join(out, 'report.md')} and report.html ({len(written)} files)"
    if others:  # a comparison belongs to no one sweep: it stays where it was written
        print(f"{where}; a comparison of {1 + len(others)} sweeps, not logged to any sweep's run")
        return 0
    logged = log_report(results, out, written)
    print(f"{where}, logged to the parent run {results.parent_run_id} under {ARTIFACT_REPORT}/ ({len(logged)} "
          f"artifacts)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
