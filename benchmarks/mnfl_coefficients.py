"""Why MNFL's coefficient matrix c stays near uniform on the ``mnfl_rho`` base, and how much rho changes it.

    python -m benchmarks.mnfl_coefficients [--rhos 0,0.7,3] [--rounds 30] [--seed 0] [--every 5] [--threads 1]
                                           [--set KEY=VALUE ...] [--json]

Runs MNFL on the ``mnfl_rho`` search space's base config (digits, 12 clients all sampled, four architectures, the
431-image public pool used whole every round, η3 = 0.01, λ = 1, T = 1; ``--set`` overrides it as ``platform.run``
does) in this process, without Ray: one :class:`platform.runtime.actors.ParameterServer` and one
:class:`platform.runtime.actors.ClientPool`, the classes a trial's actors run, so the rounds are the platform's
(the same clients, generators and c-steps; about 25 s a rho on 2 CPUs). Before each aggregate it recomputes, on
the predictions the server's c-step is about to use (``distilled_probs``, the default ``after_distill_refresh``
order), every c-step of Eq. 7 (:func:`algorithms.common.coefficients.coefficient_gradient`, one per public
mini-batch of 256; the recomputed steps are checked to give the server's c) and prints, per round (means over
the round's c-steps; norms are Frobenius over the N×N matrix):

- ``steps``: c-steps this round (round 1 has none: no predictions yet);
- ``|g_KL|``: the norm of the KL term's gradient λ Σ_n p_n ∇_c KL_n (p_n = D_n / D ≈ 1/N), mean over samples;
  mostly the gradient's "+1" (λ p_n in every entry), which moves nothing on the simplex;
- ``|g_KL|c``: the same with each column's mean removed, the part the simplex projection keeps, and
  ``max|g|c``, its largest entry;
- ``eta3 step``: η3 · ``|g_KL|c``, how far the KL term moves c in one c-step;
- ``rho pull``: η3 · 2ρ · ‖c − 1/N‖, the regulariser's step back towards uniform (equal to ``eta3 step`` once
  c has settled);
- then c after the round's aggregate: ``max|c-1/N|`` (the largest entry's distance from uniform; 1/N = 0.0833
  for 12 clients), ``entropy`` (mean column entropy, nats, the platform's ``c_entropy``; ln N = 2.4849 is
  uniform, and near uniform it falls short of ln N by only ‖c − 1/N‖²_F / 2), ``self`` (mean diagonal, the
  platform's ``c_self_weight``);
- ``TV(Q,mean)``: how far next round's targets Q_n = Σ_m c[m, n] s_m are from the plain mean of the clients'
  predictions (the targets of c = 1/N, FedMD's): total variation, mean over students and public samples;
- ``val``: the mean client validation accuracy.

Every ``--every``-th round (and rounds 1, 2 and the last) is printed; then each rho's final figures and seconds.
Other settings: e.g. ``--set algorithm.temperature=10`` or ``--set algorithm.lam=10``. ``--threads`` (default 1)
sets torch's threads: the figures of c do not depend on it, val_accuracy can differ by an image (the order of
floating-point sums).
"""
from __future__ import annotations

import argparse
import json
import math
import sys
import time


def build_config(rho: float, rounds: int, seed: int, overrides: dict):
    from platform.config.experiment import apply_overrides, build_experiment
    from platform.config.search_space import load_search_space

    base = load_search_space("mnfl_rho").base
    return build_experiment(apply_overrides(base, {**overrides, "algorithm.rho": rho, "rounds": rounds,
                                                   "seed": seed}))


def _centred(g):
    """g with each column's mean removed (what survives the simplex projection's shift)."""
    return g - g.mean(dim=0, keepdim=True)


def step_sizes(algorithm, c, preds: dict, sizes: dict) -> dict:
    """The round's c-steps recomputed as :meth:`algorithms.mnfl.MNFL._c_step` takes them (full participation:
    c itself, columns on the simplex), with each step's KL gradient and rho pull; returns their means."""
    import torch

    from algorithms.common.coefficients import coefficient_gradient, coefficient_step

    hp = algorithm.hp
    ids = sorted(preds)
    if not ids:
        return {"steps": 0}
    if len(ids) != c.shape[0]:
        raise SystemExit("this benchmark measures full participation only (clients.clients_per_round = N)")
    s = torch.stack([preds[k] for k in ids]).to(c.dtype)
    weights = [sizes.get(k, 0.0) for k in ids]
    n = c.shape[0]
    rows = []
    sub = c.clone()
    for start in range(0, s.shape[1], hp.distill_batch_size):
        batch = s[:, start:start + hp.distill_batch_size]
        g = coefficient_gradient(sub, batch, weights, lam=hp.lam, rho=hp.rho, include_penalty=False)
        gc = _centred(g)
        pull = 2.0 * hp.rho * (sub - 1.0 / n)
        rows.append({"g": float(g.norm()), "gc": float(gc.norm()), "gc_max": float(gc.abs().max()),
                     "step": hp.coefficient_lr * float(gc.norm()), "pull": hp.coefficient_lr * float(pull.norm())})
        sub = coefficient_step(sub, batch, weights, lr=hp.coefficient_lr, lam=hp.lam, rho=hp.rho,
                               project=hp.project_simplex)
    out = {key: sum(r[key] for r in rows) / len(rows) for key in rows[0]}
    out["steps"] = len(rows)
    out["c_check"] = sub
    return out


def c_distance(c) -> dict:
    import torch

    n = c.shape[0]
    p = c.clamp_min(0.0)
    entropy = -(torch.special.xlogy(p, p)).sum(dim=0)
    return {"max_dev": float((c - 1.0 / n).abs().max()), "fro_dev": float((c - 1.0 / n).norm()),
            "entropy": float(entropy.mean()), "self": float(torch.diagonal(c).mean())}


def target_shift(c, extra: dict) -> float:
    """How far next round's targets Q_n = Σ_m c[m, n] s_m sit from the plain mean of the predictions (what c = 1/N,
    FedMD's rule, would send): total variation 0.5 Σ_k |Q_n,k − mean_m s_m,k|, mean over students and samples."""
    import torch

    from algorithms.common.coefficients import personalised_targets

    senders = list(extra.get("senders", []))
    if len(senders) != c.shape[0]:
        return math.nan
    s = torch.stack([extra["probs"][k] for k in senders]).to(c.dtype)
    q = personalised_targets(c, s)
    return float(0.5 * (q - s.mean(dim=0, keepdim=True)).abs().sum(-1).mean())


def run(config, threads: int = 1) -> list[dict]:
    """One MNFL run of ``config`` in this process; per round the c-step sizes and c's distance from uniform."""
    import torch

    from platform.runtime.actors import ClientPool, ParameterServer
    from platform.runtime.local_data import client_splits_of, load_shared_data
    from platform.runtime.seeding import sample_clients

    if config.algorithm.name != "mnfl" or config.algorithm.params.c_update_order != "after_distill_refresh":
        raise SystemExit("this benchmark measures MNFL's default c_update_order, after_distill_refresh")
    data = load_shared_data(config)
    train = data.train
    splits = client_splits_of(config, train.y, train.groups, train.coarse_y)
    server = ParameterServer(config, (data.test.x, data.test.y), train.input_shape, train.num_classes, threads,
                             False, data.public_x, data.val)
    pool = ClientPool(config, (train.x, train.y), splits, train.input_shape, train.num_classes, num_threads=threads,
                      public_x=data.public_x)
    torch.set_num_threads(threads)
    c_conf = config.clients
    history = []
    for r in range(config.rounds):
        start = time.perf_counter()
        sampled = [int(k) for k in sample_clients(c_conf.num_clients, c_conf.clients_per_round,
                                                  config.stream_seed("sampling"), r)]
        payload = server.broadcast(sampled)
        result = pool.train(payload, sampled, r, states=server.states_of(sampled))
        c_before = server.state.extra["c"].clone()
        sizes = dict(server.state.extra.get("sizes", {}))
        sizes.update({int(u.client_id): float(u.weight) for u in result.updates})
        preds = {int(u.client_id): u.tensors["distilled_probs"] for u in result.updates
                 if "distilled_probs" in u.tensors}
        steps = step_sizes(server.algorithm, c_before, preds, sizes)
        metrics = server.aggregate(result)
        c = server.state.extra["c"]
        check = steps.pop("c_check", None)
        if check is not None and not torch.allclose(check, c, atol=1e-12):
            raise RuntimeError(f"round {r + 1}: the recomputed c-steps do not give the server's c")
        history.append({"round": r + 1, **steps, **c_distance(c), "tv": target_shift(c, server.state.extra),
                        "val": float(metrics.get("val_accuracy", math.nan)), "seconds": time.perf_counter() - start})
    return history


def parse_sets(parser, values) -> dict:
    import yaml

    out = {}
    for item in values or []:
        if "=" not in item:
            parser.error(f"--set {item!r}: expected KEY=VALUE")
        key, value = item.split("=", 1)
        out[key.strip()] = yaml.safe_load(value)
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.mnfl_coefficients",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("--rhos", default="0,0.7,3", help="comma-separated rho values (default 0,0.7,3)")
    parser.add_argument("--rounds", type=int, default=30, help="rounds (default: the mnfl_rho base's 30)")
    parser.add_argument("--seed", type=int, default=0, help="replicate seed (default 0)")
    parser.add_argument("--every", type=int, default=5, help="print every k-th round (and rounds 1, 2 and the last)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    parser.add_argument("--set", action="append", metavar="KEY=VALUE", help="override the base config (repeatable)")
    parser.add_argument("--json", action="store_true", help="print every round of every rho as JSON")
    args = parser.parse_args(argv)
    rhos = [float(v) for v in args.rhos.split(",")]
    overrides = parse_sets(parser, args.set)

    from benchmarks._common import machine_line, table

    results = {}
    for rho in rhos:
        config = build_config(rho, args.rounds, args.seed, overrides)
        started = time.perf_counter()
        results[rho] = {"history": run(config, args.threads), "seconds": time.perf_counter() - started}
        if not args.json:
            print(f"... rho {rho:g}: {results[rho]['seconds']:.0f} s", file=sys.stderr, flush=True)
    if args.json:
        print(json.dumps({str(k): v for k, v in results.items()}, indent=1))
        return 0
    n = config.clients.num_clients
    p = config.algorithm.params
    print(machine_line())
    print(f"mnfl_rho base, seed {args.seed}, {args.rounds} rounds, {n} clients, eta3 {p.coefficient_lr:g}, "
          f"lambda {p.lam:g}, T {p.temperature:g}, R {p.distill_passes}, public batch {p.distill_batch_size}"
          + (f"; --set {' '.join(f'{k}={v}' for k, v in overrides.items())}" if overrides else ""))
    print(f"uniform: 1/N = {1 / n:.4f}, ln N = {math.log(n):.4f}; norms are Frobenius over the {n}x{n} c, means "
          f"over the round's c-steps")
    headers = ["rho", "round", "steps", "|g_KL|", "|g_KL|c", "max|g|c", "eta3 step", "rho pull", "max|c-1/N|",
               "entropy", "self", "TV(Q,mean)", "val"]
    formats = ["g", "d", "d", ".2e", ".2e", ".2e", ".2e", ".2e", ".2e", ".5f", ".4f", ".1e", ".4f"]
    rows = []
    for rho, res in results.items():
        hist = res["history"]
        for h in hist:
            r = h["round"]
            if r <= 2 or r == len(hist) or r % max(args.every, 1) == 0:
                if h.get("steps", 0) == 0:
                    rows.append([rho, r, 0, "-", "-", "-", "-", "-", h["max_dev"], h["entropy"], h["self"], h["tv"], h["val"]])
                else:
                    rows.append([rho, r, h["steps"], h["g"], h["gc"], h["gc_max"], h["step"], h["pull"],
                                 h["max_dev"], h["entropy"], h["self"], h["tv"], h["val"]])
    print(table(headers, rows, formats))
    for rho, res in results.items():
        last = res["history"][-1]
        print(f"rho {rho:g}: after round {last['round']} max|c-1/N| = {last['max_dev']:.2e} "
              f"({last['max_dev'] * n:.1%} of 1/N), entropy {last['entropy']:.5f} (ln N - {math.log(n) - last['entropy']:.1e}), "
              f"||c-1/N||_F = {last['fro_dev']:.2e}, self {last['self']:.4f}, TV(Q,mean) {last['tv']:.1e}, "
              f"val {last['val']:.4f}; {res['seconds']:.0f} s")
    if len(results) > 1:
        first = next(iter(results))
        for rho in list(results)[1:]:
            a, b = results[first]["history"][-1], results[rho]["history"][-1]
            print(f"rho {rho:g} vs rho {first:g}: max|c-1/N| {b['max_dev']:.2e} vs {a['max_dev']:.2e}; val "
                  f"{b['val']:.4f} vs {a['val']:.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
