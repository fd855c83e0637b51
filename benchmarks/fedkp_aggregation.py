"""Time FedKP and FedKP_cm server aggregation of S client vectors × d parameters on CPU.

    python -m benchmarks.fedkp_aggregation [--clients 100 --dim 11000000 --cm-dim 200000 --chunk 0 --methods fedkp,fedkp_cm]

Each method runs in a fresh subprocess, so its peak resident memory (``ru_maxrss``) is its own: the table
shows the wall-clock and CPU (user + system, all threads) seconds of :func:`algorithms.fedkp.fedkp_aggregate`
alone, the process's peak RSS, the RSS once the S client vectors were in memory ("data", torch included),
and the peak above it (what the aggregation itself adds: the per-chunk temporaries and the output).
Wall-clock times move with the machine's load; the CPU seconds much less.

The client vectors are synthetic but shaped like client models of one round: a common θ_t plus per-client
deltas (passed as ``base`` and rows, as FedKP's server does) whose scale varies over coordinates
(log-uniform, 1e-4 to 1e-2), with a second cluster (shifted by 4 scales) for 30 % of the clients on 20 % of
the coordinates and 5 % of the coordinates identical across clients (parameters no client moved). Mean-shift cost depends on how fast each coordinate converges, so
times on real client models differ; FedKP_cm costs O(S²·d) per iteration against FedKP's O(S·d).
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time

import torch

METHODS = {"fedkp": False, "fedkp_cm": True}


def _rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # Linux: KiB


def _cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def synthetic_clients(S: int, d: int, seed: int = 0) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """θ_t and the S client deltas Δ_k (the server sees θ_t + Δ_k, as FedKP's aggregate does)."""
    g = torch.Generator().manual_seed(seed)
    base = 0.05 * torch.randn(d, generator=g)
    scale = torch.exp(torch.empty(d).uniform_(torch.log(torch.tensor(1e-4)).item(),
                                              torch.log(torch.tensor(1e-2)).item(), generator=g))
    bimodal = torch.rand(d, generator=g) < 0.2
    frozen = torch.rand(d, generator=g) < 0.05
    deltas = []
    for i in range(S):
        delta = scale * torch.randn(d, generator=g)
        if i < int(0.3 * S):
            delta += 4 * scale * bimodal
        delta[frozen] = 0.0
        deltas.append(delta)
    return base, deltas


def _worker(args: argparse.Namespace) -> None:
    from algorithms.fedkp import fedkp_aggregate

    torch.set_num_threads(args.threads or torch.get_num_threads())
    base, deltas = synthetic_clients(args.clients, args.dim, args.seed)
    before = _rss_mib()
    cpu = _cpu_seconds()
    start = time.perf_counter()
    _, diagnostics = fedkp_aggregate(deltas, base=base, cluster=METHODS[args.worker], chunk_size=args.chunk,
                                     t_max=args.t_max, tol=args.tol)
    seconds = time.perf_counter() - start
    cpu = _cpu_seconds() - cpu
    after = _rss_mib()
    print(json.dumps({"method": args.worker, "clients": args.clients, "dim": args.dim, "seconds": seconds,
                      "cpu_seconds": cpu, "peak_rss_mib": after, "data_rss_mib": before, "above_data_mib": after - before,
                      "threads": torch.get_num_threads(), **diagnostics}))


def _run(method: str, dim: int, args: argparse.Namespace) -> dict:
    cmd = [sys.executable, "-m", "benchmarks.fedkp_aggregation", "--worker", method, "--clients", str(args.clients),
           "--dim", str(dim), "--chunk", str(args.chunk), "--t-max", str(args.t_max), "--tol", str(args.tol),
           "--seed", str(args.seed), "--threads", str(args.threads)]
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, cwd=root, timeout=args.timeout or None)
    except subprocess.TimeoutExpired:
        return {"method": method, "clients": args.clients, "dim": dim, "error": f"timeout after {args.timeout}s"}
    if done.returncode != 0:
        return {"method": method, "clients": args.clients, "dim": dim, "error": done.stderr.strip()[-300:]}
    return json.loads(done.stdout.strip().splitlines()[-1])


def _table(results: list[dict]) -> str:
    head = f"{'method':<9} {'S':>4} {'d':>11} {'seconds':>9} {'CPU s':>8} {'iters':>5} {'unconv':>8} {'peak RSS MiB':>12} " \
           f"{'data MiB':>9} {'agg MiB':>8}"
    lines = [head, "-" * len(head)]
    for r in results:
        if "error" in r:
            lines.append(f"{r['method']:<9} {r['clients']:>4} {r['dim']:>11}  {r['error']}")
            continue
        lines.append(f"{r['method']:<9} {r['clients']:>4} {r['dim']:>11} {r['seconds']:>9.2f} {r['cpu_seconds']:>8.1f} "
                     f"{r['iterations']:>5} "
                     f"{r['unconverged_fraction']:>8.2%} {r['peak_rss_mib']:>12.0f} {r['data_rss_mib']:>9.0f} "
                     f"{r['above_data_mib']:>8.0f}")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.fedkp_aggregation", description=__doc__.split("\n")[0])
    parser.add_argument("--clients", type=int, default=100, help="S, client vectors (default 100)")
    parser.add_argument("--dim", type=int, default=11_000_000, help="d, parameters (default 11M, ResNet-18)")
    parser.add_argument("--cm-dim", type=int, default=200_000,
                        help="d for FedKP_cm only (default 200k: it costs O(S^2 d), ~95 s here; 0: --dim)")
    parser.add_argument("--chunk", type=int, default=0, help="coordinates per chunk (0 = automatic)")
    parser.add_argument("--methods", default="fedkp,fedkp_cm", help="comma-separated: fedkp, fedkp_cm")
    parser.add_argument("--t-max", type=int, default=100, help="mean-shift iteration cap (default 100)")
    parser.add_argument("--tol", type=float, default=1e-6, help="mean-shift tolerance (default 1e-6)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0 = torch's default)")
    parser.add_argument("--timeout", type=float, default=0, help="seconds per method before giving up (0 = none)")
    parser.add_argument("--json", action="store_true", help="print one JSON line per method instead of a table")
    parser.add_argument("--worker", choices=sorted(METHODS), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        _worker(args)
        return 0
    methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    unknown = [m for m in methods if m not in METHODS]
    if unknown:
        parser.error(f"unknown method(s) {', '.join(unknown)}; allowed: {', '.join(METHODS)}")
    results = []
    for method in methods:
        dim = args.cm_dim if method == "fedkp_cm" and args.cm_dim else args.dim
        results.append(_run(method, dim, args))
        if args.json:
            print(json.dumps(results[-1]), flush=True)
    if not args.json:
        print(_table(results))
    return 1 if any("error" in r for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
