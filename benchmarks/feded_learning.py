"""FedED's students against their teachers on the embedded default (docs/methods/feded.md §2.4–§2.7, §7.1).

    python -m benchmarks.feded_learning [--seeds 1,2,3,4,5] [--alphas 10,1,0.1,0.01] [--schemes w0,w1,w2]
                                        [--schedules LR:STEPS[,LR:STEPS...]] [--space feded_beta] [--cache-dir DIR]
                                        [--close 2.0] [--json] [--save FILE] [--load FILE]

Every arm runs the base config of a FedED search space (default ``feded_beta``: digits, the first half of the
training set as the unlabelled public pool, 10 clients all participating, 20 local epochs of SGD at lr 0.05 with
momentum 0.9 and batch 16, AEs for w2, β = 6, student loss ``mse_logits`` with Adam lr 1e-3 for 2000 steps,
``mode: one_round``, ``seeds.partition_from_seed``) at each Dirichlet α, with ``algorithm.scheme`` w0, w1 and w2. The student schedule
(Adam lr, steps of batch 50) is the base's unless ``--schedules`` lists others (``null`` = the thesis's lr of the
scheme); every scheme gets the same schedule. The client stage of one (α, seed) is computed once and shared by
every scheme and schedule through the stage cache (``--cache-dir``, default a temporary directory); β, the
scheme and the student never enter its key.

Per α and schedule it prints, as mean ± population std over seeds:

- the teachers: ENSEMBLE-w0/w1/w2 test accuracy (the weighted client ensembles themselves, §2.7);
- each student (FedED-w0/w1/w2): test accuracy, the student − teacher gap (student test accuracy minus its own
  scheme's ensemble test accuracy), validation accuracy (the server's validation split, true labels) and
  ``student_val_agreement`` (agreement with the teacher's argmax on the held-out 20 % of the public pool: no
  labels, so it may be used to choose a schedule);

and whether the thesis's claims hold on the students' validation accuracy (Table 4.1, §7.1): at α = 0.01 "w2 above
w0", "w2 above w1" and "w0 above w1" (Table 4.1's own order), each judged by ``benchmarks._common.verdict`` (the lead
beyond 2 standard errors over seeds), and "all close at α = 10", close meaning every pair of the three students
within ``--close`` points (default 2). A schedule is never chosen on test accuracy: compare schedules on
``student_val_agreement`` and validation accuracy.
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
from typing import Optional, Sequence

from benchmarks._common import machine_line, table

SCHEMES = ("w0", "w1", "w2")
PER_SEED = ("test_accuracy", "val_accuracy", "student_val_agreement", "ensemble_w0_accuracy", "ensemble_w1_accuracy",
            "ensemble_w2_accuracy", "student_steps", "student_lr", "client_stage_cached")


def parse_schedule(text: str) -> tuple[Optional[float], Optional[int]]:
    """``"1e-3:2000"`` -> (0.001, 2000); ``"null:2000"`` keeps the thesis's lr of the scheme, ``"base"`` the base."""
    lr, _, steps = text.partition(":")
    if not steps:
        raise ValueError(f"a schedule is LR:STEPS, got {text!r}")
    return (None if lr.strip().lower() in ("null", "none") else float(lr)), int(steps)


def configs(space: str, alpha: float, schedule: Optional[tuple], schemes: Sequence[str]) -> dict:
    from platform.config.experiment import apply_overrides, build_experiment
    from platform.config.search_space import load_search_space

    base = load_search_space(space).base
    out = {}
    for scheme in schemes:
        overrides = {"partition.alpha": alpha, "algorithm.scheme": scheme}
        if schedule is not None:
            overrides.update({"algorithm.student_lr": schedule[0], "algorithm.student_steps": schedule[1]})
        out[scheme] = build_experiment(apply_overrides(base, overrides))
    return out


def run_one_round(config, seeds: Sequence[int], cache, shared=None) -> list[dict]:
    """One ``mode: one_round`` run of ``config`` per seed on the connected Ray, client stages through ``cache``."""
    from platform.runtime.federation import one_round_stage
    from platform.runtime.trial import start_federations, stop_federations

    federations = start_federations(config, list(seeds), shared, lazy_clients=True, cache=cache)
    try:
        per_seed = [f.run_one_round_cached(cache, one_round_stage(f.config)) for f in federations]
    finally:
        stop_federations(federations)
    return [{k: float(m[k]) for k in PER_SEED if k in m} for m in per_seed]


def measure(space: str, alphas: Sequence[float], schedules: Sequence[Optional[tuple]], schemes: Sequence[str],
            seeds: Sequence[int], cache_dir: str) -> list[dict]:
    """One record per (α, schedule, scheme): the per-seed metrics of :func:`run_one_round`."""
    import ray

    from platform.stages.cache import open_cache
    from platform.runtime.federation import share_dataset

    cache = open_cache(cache_dir)
    records = []
    ray.init(address="local", num_cpus=2, log_to_driver=False, include_dashboard=False)  # its own, never a cluster
    try:
        shared = None
        for alpha in alphas:
            for schedule in schedules:
                for scheme, config in configs(space, alpha, schedule, schemes).items():
                    if shared is None or not shared.serves(config):
                        shared = share_dataset(config, cache=cache)
                    per_seed = run_one_round(config, seeds, cache, shared)
                    hp = config.algorithm.params
                    records.append({"alpha": alpha, "scheme": scheme, "student_lr": per_seed[0]["student_lr"],
                                    "student_steps": int(per_seed[0]["student_steps"]), "seeds": list(seeds),
                                    "beta": hp.beta, "loss": hp.loss, "per_seed": per_seed})
                    print(f"... alpha {alpha} {scheme} lr {per_seed[0]['student_lr']:g} steps "
                          f"{int(per_seed[0]['student_steps'])}: student test "
                          f"{_mean([m['test_accuracy'] for m in per_seed]):.4f}, teacher "
                          f"{_mean([m[f'ensemble_{scheme}_accuracy'] for m in per_seed]):.4f}, stages cached "
                          f"{sum(m['client_stage_cached'] for m in per_seed):.0f}/{len(per_seed)}",
                          file=sys.stderr, flush=True)
    finally:
        ray.shutdown()
    return records


def _mean(values) -> float:
    return float(sum(values) / len(values)) if values else float("nan")


def _std(values) -> float:
    import numpy as np

    return float(np.std(values)) if values else float("nan")


def _ms(values) -> str:
    return f"{_mean(values):.4f} ± {_std(values):.4f}"


def summarise(records: list[dict]) -> list[dict]:
    """Per record: means and stds of the student, its teacher, the gap, val accuracy and agreement."""
    out = []
    for r in records:
        ps = r["per_seed"]
        teacher = [m[f"ensemble_{r['scheme']}_accuracy"] for m in ps]
        student = [m["test_accuracy"] for m in ps]
        out.append({**{k: r[k] for k in ("alpha", "scheme", "student_lr", "student_steps")},
                    "student_test": student, "teacher_test": teacher,
                    "gap": [s - t for s, t in zip(student, teacher)],
                    "val": [m["val_accuracy"] for m in ps], "agreement": [m.get("student_val_agreement") for m in ps],
                    **{f"ensemble_{s}": [m[f"ensemble_{s}_accuracy"] for m in ps] for s in SCHEMES
                       if f"ensemble_{s}_accuracy" in ps[0]}})
    return out


def claims(rows: list[dict], close: float) -> list[str]:
    """The thesis's claims (Table 4.1, §7.1), per schedule, judged on the students' validation accuracy (never on
    test): at α = 0.01 w2 above w0 and above w1, and w0 above w1 (the thesis's own order), each by
    :func:`benchmarks._common.verdict` on the lead ± its standard error over seeds; at α = 10 all three close
    (every pair's mean within ``close`` points)."""
    from benchmarks._common import verdict
    from platform.results.noise import lead_over

    lines = []
    schedules = sorted({(r["student_lr"], r["student_steps"]) for r in rows})
    for lr, steps in schedules:
        mine = [r for r in rows if (r["student_lr"], r["student_steps"]) == (lr, steps)]
        label = f"schedule lr {lr:g}, {steps} steps"
        val = {(r["alpha"], r["scheme"]): r["val"] for r in mine}
        if all((0.01, s) in val for s in SCHEMES):
            for ours, other in (("w2", "w0"), ("w2", "w1"), ("w0", "w1")):
                lead = lead_over(val[(0.01, ours)], val[(0.01, other)], "max")
                word = verdict(lead.lead, lead.se) if lead.se is not None else "within noise (one seed)"
                se = f" ± {lead.se:.4f} SE" if lead.se is not None else ""
                lines.append(f"{label}: FedED-{ours} above {other} at alpha = 0.01 (val): {lead.lead:+.4f}{se} -> "
                             f"{word}")
        if all((10.0, s) in val for s in SCHEMES):
            values = [_mean(val[(10.0, s)]) for s in SCHEMES]
            spread = 100 * (max(values) - min(values))
            lines.append(f"{label}: all close at alpha = 10 (val: max - min of the three student means {spread:.2f} "
                         f"points, close = within {close:g} points): {'holds' if spread <= close else 'does not hold'}")
    return lines


def report(rows: list[dict], close: float) -> str:
    parts = []
    teachers = {}
    for r in rows:
        teachers.setdefault(r["alpha"], {k: r[k] for k in r if k.startswith("ensemble_")})
    parts.append("Teachers (ENSEMBLE-w*, test accuracy, mean ± std over seeds):")
    parts.append(table(["alpha", *(f"ENSEMBLE-{s}" for s in SCHEMES if f"ensemble_{s}" in next(iter(teachers.values())))],
                       [[f"{a:g}", *(_ms(v) for v in t.values())] for a, t in teachers.items()]))
    parts.append("")
    parts.append("Students (FedED-w*; gap = student test - its own ensemble's test, in points; mean ± std over seeds):")
    parts.append(table(["alpha", "scheme", "student lr", "steps", "student test", "teacher test", "gap (points)",
                        "val accuracy", "val agreement", "student test per seed"],
                       [[f"{r['alpha']:g}", r["scheme"], f"{r['student_lr']:g}", str(r["student_steps"]),
                         _ms(r["student_test"]), _ms(r["teacher_test"]),
                         f"{100 * _mean(r['gap']):+.2f} ± {100 * _std(r['gap']):.2f}", _ms(r["val"]),
                         _ms([a for a in r["agreement"] if a is not None]),
                         " ".join(f"{v:.3f}" for v in r["student_test"])] for r in rows]))
    parts.append("")
    parts.append(f"Claims (Table 4.1) on the students' validation accuracy; 'close' = the three students' means within "
                 f"{close:g} points of each other:")
    parts += ["  " + line for line in claims(rows, close)]
    return "\n".join(parts)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.feded_learning", description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", default="1,2,3,4,5", help="comma-separated replicate seeds (each also the "
                                                             "partition seed)")
    parser.add_argument("--alphas", default="10,1,0.1,0.01", help="comma-separated Dirichlet alphas")
    parser.add_argument("--schemes", default=",".join(SCHEMES), help="comma-separated subset of w0,w1,w2")
    parser.add_argument("--schedules", default="base", help="comma-separated student schedules LR:STEPS (LR null = "
                                                            "the thesis's lr of the scheme), or 'base' for the "
                                                            "space's own")
    parser.add_argument("--space", default="feded_beta", help="the search space whose base config to run")
    parser.add_argument("--cache-dir", help="stage cache for the client stages (default: a temporary directory)")
    parser.add_argument("--close", type=float, default=2.0, help="'all close at alpha = 10' means within this many "
                                                                 "points of test accuracy")
    parser.add_argument("--json", action="store_true", help="print the per-seed results as JSON")
    parser.add_argument("--save", help="also write the per-seed results as JSON to this file")
    parser.add_argument("--load", help="print the tables of a --save (or --json) file instead of running")
    args = parser.parse_args(argv)
    seeds = [int(s) for s in args.seeds.split(",")]
    alphas = [float(a) for a in args.alphas.split(",")]
    schemes = [s.strip() for s in args.schemes.split(",")]
    if any(s not in SCHEMES for s in schemes):
        parser.error(f"--schemes: allowed {', '.join(SCHEMES)}")
    try:
        schedules = [None if s.strip() == "base" else parse_schedule(s.strip()) for s in args.schedules.split(",")]
    except ValueError as err:
        parser.error(f"--schedules: {err}")

    if args.load:
        with open(args.load) as fh:
            records = json.load(fh)
    else:
        with tempfile.TemporaryDirectory(prefix="feded-learning-") as tmp:
            records = measure(args.space, alphas, schedules, schemes, seeds, args.cache_dir or tmp)
    if args.save:
        with open(args.save, "w") as fh:
            json.dump(records, fh, indent=1)
    if args.json:
        print(json.dumps(records, indent=1))
        return 0
    print(machine_line())
    alphas_run = ",".join(f"{a:g}" for a in dict.fromkeys(r["alpha"] for r in records))
    seeds_run = ",".join(str(s) for s in records[0]["seeds"])
    print(f"{args.space} base: digits, 10 clients, one round; alphas {alphas_run}; seeds {seeds_run} (each also the "
          f"partition seed); student loss {records[0]['loss']}, beta {records[0]['beta']:g}")
    print(report(summarise(records), args.close))
    return 0


if __name__ == "__main__":
    sys.exit(main())
