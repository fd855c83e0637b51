"""Why FedKP_cm's val_accuracy does not respond to the bandwidth scaling s at the bottom of fedkp_bandwidth's range.

    python -m benchmarks.fedkp_cm_response [--seeds 0,1,2] [--points 20] [--scales 0.64] [--clients 20 --per-round 20]

The space's default setting (search_spaces/fedkp_bandwidth.yaml: digits, 10 clients, Dirichlet 1.0, the cnn,
10 local epochs at lr 0.05, FedKP_cm as the thesis ran it: cluster_mode sequential_inplace, Epanechnikov,
silverman_code, tol 1e-6, t_max 100), per replicate seed, in this process (no Ray instance, no stage cache): the round-0
client models are trained once as the one-round path trains them (the same sampler, data splits, generators
and client order, 1 torch thread by default), then aggregated for every s on a log grid over [0.01, 10], the
space's range. About 10 s a seed on 2 CPUs.

Per seed and s the table shows the validation (the sweep's metric) and test accuracy; ``moved``, the fraction of
coordinates where at least one client's mode left its own value (everywhere else the aggregate is the unweighted
client mean, bit for bit); ``own``, the fraction of (client, coordinate) pairs whose mode is exactly the
client's own value, and ``some_client``, exactly some client's value; ``clusters``, the mean number of distinct
modes per coordinate (sorted modes with a gap above h_j/10 start a new one; 10 = every client its own
cluster); ``|agg-mean|/sd``, the mean over coordinates of the aggregate's distance from the client mean in
units of the coordinate's client spread σ̂_j; ``val_flips``/``test_flips``, predictions that differ from the
client mean's; ``same``, whether the aggregate is bit-identical to the previous s's; and plain FedKP's
(Alg. 9) distance from the mean, for contrast. Then the quantiles of g_j per seed, and val_accuracy per seed
with their mean (the sweep's metric) against the client mean's.

Why: with the Epanechnikov kernel a client with no other client within h_j = s·h1_j (h1_j the coordinate's
silverman_code bandwidth at s = 1) sees only itself, so its mean-shift stops at its own value at the first
step; a client with neighbours moves only among the clients linked to it by gaps below h_j. The coordinate's
aggregate leaves the client mean only where s exceeds g_j = (smallest gap between the coordinate's client
values) / h1_j, and then by less than about h_j, so as s -> 0 FedKP_cm is the unweighted client mean, and its
distance from it grows about as s^1.7: too little, at the bottom of the range, to change one validation
prediction's correctness.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")

SPACE = "fedkp_bandwidth"


def space_config(seed: int, clients: int = 0, per_round: int = 0):
    """The space's base with the FedKP_cm cell's algorithm name (and ``clients`` / ``per_round`` where given)."""
    from platform.config.experiment import apply_overrides, build_experiment
    from platform.config.search_space import load_search_space

    space = load_search_space(SPACE)
    sets = {"algorithm.name": "fedkp_cm", "seed": seed}
    sets.update({"clients.num_clients": clients} if clients else {})
    sets.update({"clients.clients_per_round": per_round} if per_round else {})
    return build_experiment(apply_overrides(space.base, sets))


def round_zero_clients(config):
    """(server, θ_0, client deltas in sampled order): the one-round client stage of ``config``, in this process."""
    import torch

    from platform.runtime.actors import ClientPool, ParameterServer
    from platform.runtime.local_data import client_splits_of, load_shared_data
    from platform.runtime.seeding import sample_clients

    data = load_shared_data(config)
    train = data.train
    splits = client_splits_of(config, train.y, train.groups, train.coarse_y)
    threads = torch.get_num_threads()
    server = ParameterServer(config, (data.test.x, data.test.y), train.input_shape, train.num_classes,
                             num_threads=threads, val_data=data.val)
    pool = ClientPool(config, (train.x, train.y), splits, train.input_shape, train.num_classes, num_threads=threads)
    c = config.clients
    sampled = [int(k) for k in sample_clients(c.num_clients, c.clients_per_round, config.stream_seed("sampling"), 0)]
    payload = server.broadcast(sampled)
    result = pool.train(payload, sampled, 0, reduce=False)
    by_client = {u.client_id: u for u in result.updates}
    deltas = [by_client[k].tensors["delta"] for k in sampled if by_client[k].weight > 0]
    return server, server.state.weights.clone(), deltas


def inplace_modes(W, h, tol: float, t_max: int, kernel: str = "epanechnikov"):
    """The S modes (a [S, d] matrix) of :func:`algorithms.fedkp.cluster_mean_shift_inplace` (its mean is the
    aggregate), with the same calls, on a copy of W."""
    import torch

    from algorithms.fedkp import _shift_block

    W = W.t().clone().t()
    movable = torch.isfinite(h) & (h > 0) & (W.amax(0) > W.amin(0))
    hs = torch.where(movable, h, 1.0)
    thr = torch.full_like(hs, tol)
    for i in range(W.shape[0]):
        _shift_block(W, W[i:i + 1].clone(), hs, thr, movable, kernel, "kernel", t_max, self_row=i)
    return W


def clusters_per_coordinate(modes, h):
    """Distinct modes per coordinate: sorted modes with a gap above h_j/10 start a new cluster."""
    s = modes.sort(0).values
    gaps = s[1:] - s[:-1]
    return 1 + (gaps > 0.1 * h.unsqueeze(0)).sum(0)


def sweep(server, w0, deltas, scales, hp):
    """One row per s (see the module docstring) and the coordinates' g_j."""
    import torch

    from algorithms.common import set_flat_weights
    from algorithms.fedkp import bandwidths, fedkp_aggregate

    # [S, d] client models, laid out as fedkp_aggregate lays them ([d, S] in memory), so every per-coordinate
    # reduction here runs in the same order as there
    W = torch.stack(list(deltas), dim=1).add_(w0.unsqueeze(1)).t()
    S = W.shape[0]
    mean = W.mean(0)
    sd = W.std(0)
    h1 = bandwidths(W, hp.bandwidth_rule, 1.0)
    live = (W.amax(0) > W.amin(0)) & (h1 > 0)  # coordinates the mean-shift can move at all
    model = server.ctx.model

    def predictions(weights, x):
        set_flat_weights(model, weights)
        model.eval()
        with torch.no_grad():
            return model(x).argmax(1)

    reference = {k: predictions(mean, x) for k, x in (("val", server.ctx.val_x), ("test", server.test_x))}
    rows, previous = [], None
    for s in scales:
        opts = dict(kernel=hp.kernel, rule=hp.bandwidth_rule, scale=s, tol=hp.tol, t_max=hp.t_max)
        agg, _ = fedkp_aggregate(deltas, base=w0, cluster=True, cluster_mode=hp.cluster_mode, **opts)
        plain, _ = fedkp_aggregate(deltas, base=w0, cluster=False, **opts)  # FedKP (Alg. 9), for contrast
        h = h1 * s
        modes = torch.where(live.unsqueeze(0), inplace_modes(W, h, hp.tol, hp.t_max, hp.kernel), W)
        # fedkp_aggregate's last step: where every value is equal, exactly that value (its W is shifted in place
        # by then, so "every value" means every mode)
        assert torch.equal(torch.where(modes.amax(0) == modes.amin(0), modes[0], modes.mean(0)), agg), \
            "inplace_modes disagrees with fedkp_aggregate"
        scores = server._score(model, agg)
        m, w = modes[:, live], W[:, live]
        rows.append({
            "s": s, "val_accuracy": scores["val_accuracy"], "test_accuracy": scores["test_accuracy"],
            "fedkp_val_accuracy": server._score(model, plain)["val_accuracy"],
            "moved": float((m != w).any(0).float().mean()),
            "own": float((m == w).float().mean()),
            "some_client": float((m.unsqueeze(1) == w.unsqueeze(0)).any(1).float().mean()),
            "clusters": float(clusters_per_coordinate(m, h[live]).float().mean()),
            "dist_sd": float(((agg - mean).abs()[live] / sd[live]).mean()),
            "fedkp_dist_sd": float(((plain - mean).abs()[live] / sd[live]).mean()),
            "val_flips": int((predictions(agg, server.ctx.val_x) != reference["val"]).sum()),
            "test_flips": int((predictions(agg, server.test_x) != reference["test"]).sum()),
            "same": previous is not None and torch.equal(agg, previous)})
        previous = agg
    # g_j: the smallest gap between a coordinate's client values, in units of its s = 1 bandwidth
    sorted_w = W[:, live].sort(0).values
    g = (sorted_w[1:] - sorted_w[:-1]).amin(0) / h1[live]
    return rows, {"clients": S, "coordinates": int(W.shape[1]), "live": int(live.sum()),
                  "mean_val_accuracy": server._score(model, mean)["val_accuracy"],
                  "val_size": int(len(server.ctx.val_y)), "test_size": int(len(server.test_y)), "g": g}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.fedkp_cm_response",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", default="0,1,2",
                        help="comma-separated replicate seeds (default: the space's, 0,1,2)")
    parser.add_argument("--points", type=int, default=20, help="s values, log-spaced over [0.01, 10] (default 20)")
    parser.add_argument("--scales", default="", help="comma-separated extra s values (e.g. 0.64)")
    parser.add_argument("--clients", type=int, default=0, help="clients.num_clients (default: the space's, 10)")
    parser.add_argument("--per-round", type=int, default=0,
                        help="clients.clients_per_round (default: the space's, 10)")
    parser.add_argument("--threads", type=int, default=1,
                        help="torch threads (default 1, as the sweep's client actors and server at resources.cpu 1; "
                             "the client models, and so the accuracies at s > 0.15, move with it)")
    parser.add_argument("--json", action="store_true", help="print the rows as JSON lines too")
    args = parser.parse_args(argv)
    if args.points < 2:
        parser.error("--points: at least 2")
    try:
        seeds = [int(v) for v in args.seeds.split(",") if v.strip()]
        extra = [float(v) for v in args.scales.split(",") if v.strip()]
    except ValueError as err:
        parser.error(str(err))
    import numpy as np
    import torch

    from benchmarks._common import table

    torch.set_num_threads(args.threads)
    scales = sorted({float(v) for v in np.logspace(-2, 1, args.points)} | set(extra))
    by_seed = {}
    for seed in seeds:
        config = space_config(seed, args.clients, args.per_round)
        hp = config.algorithm.params
        started = time.perf_counter()
        server, w0, deltas = round_zero_clients(config)
        trained = time.perf_counter() - started
        started = time.perf_counter()
        rows, info = sweep(server, w0, deltas, scales, hp)
        aggregated = time.perf_counter() - started
        by_seed[seed] = (rows, info)
        if args.json:
            for row in rows:
                print(json.dumps({"seed": seed, **row}))
        c = config.clients
        print(f"FedKP_cm ({hp.cluster_mode}, {hp.kernel}, {hp.bandwidth_rule}, tol {hp.tol:g}, t_max {hp.t_max}) on "
              f"{SPACE}'s default: {config.dataset.name}, {c.num_clients} clients, {info['clients']} in the round, "
              f"Dirichlet({config.partition.alpha:g}), {c.local_epochs} local epochs at lr {c.lr:g}, seed {seed}; "
              f"{info['coordinates']} coordinates ({info['live']} not degenerate); {info['val_size']} validation, "
              f"{info['test_size']} test images. Client training {trained:.1f} s, {len(scales)} FedKP_cm "
              f"aggregations {aggregated:.1f} s ({args.threads} thread(s)).")
        print(f"unweighted client mean (every client its own cluster): val_accuracy {info['mean_val_accuracy']:.4f}")
        print(table(["s", "val_acc", "test_acc", "moved", "own", "some_client", "clusters", "|agg-mean|/sd",
                     "val_flips", "test_flips", "same", "FedKP |agg-mean|/sd"],
                    [[f"{r['s']:.3g}", f"{r['val_accuracy']:.4f}", f"{r['test_accuracy']:.4f}", f"{r['moved']:.3f}",
                      f"{r['own']:.3f}", f"{r['some_client']:.3f}", f"{r['clusters']:.2f}", f"{r['dist_sd']:.1e}",
                      r["val_flips"], r["test_flips"], "yes" if r["same"] else "no", f"{r['fedkp_dist_sd']:.1e}"]
                     for r in rows]))
        print()
    qs = [0.01, 0.1, 0.25, 0.5, 0.75, 0.9]
    print("g_j = smallest gap between a coordinate's client values / its s = 1 bandwidth: below s = g_j no client's "
          "window holds another client and the coordinate's FedKP_cm aggregate is the client mean")
    print(table(["seed", *(f"q{int(q * 100)}" for q in qs), "P(g<0.01)", "P(g<0.15)", "P(g<1)"],
                [[seed, *(f"{float(torch.quantile(info['g'].double(), q)):.3f}" for q in qs),
                  *(f"{float((info['g'] < v).double().mean()):.3f}" for v in (0.01, 0.15, 1.0))]
                 for seed, (_, info) in by_seed.items()]))
    print()
    means = {seed: info["mean_val_accuracy"] for seed, (_, info) in by_seed.items()}
    ref = float(np.mean(list(means.values())))
    print(f"val_accuracy over the seeds (the sweep's metric is their mean); the unweighted client mean scores "
          f"{ref:.4f}, '=' marks an s whose every seed scores what the client mean scores")
    print(table(["s", *(f"seed {seed}" for seed in by_seed), "mean", "= mean's", "FedKP mean"],
                [[f"{s:.3g}", *(f"{rows[i]['val_accuracy']:.4f}" for rows, _ in by_seed.values()),
                  f"{np.mean([rows[i]['val_accuracy'] for rows, _ in by_seed.values()]):.4f}",
                  "=" if all(rows[i]["val_accuracy"] == means[seed] for seed, (rows, _) in by_seed.items()) else "",
                  f"{np.mean([rows[i]['fedkp_val_accuracy'] for rows, _ in by_seed.values()]):.4f}"]
                 for i, s in enumerate(scales)]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
