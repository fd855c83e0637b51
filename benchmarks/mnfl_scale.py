"""Memory of MNFL's persistent personalised client models (20 and 100 clients), and its s/round against a raw loop.

    python -m benchmarks.mnfl_scale [--clients 20,100] [--per-round 20] [--rounds 10] [--timing-clients 20]
                                    [--raw-threads 2] [--cpus 2] [--quiet-wait 60] [--json]

Setting: the ``mnfl_rho`` search space's base config (digits 8×8, its partition with each client's validation and
test splits, the first 30 % of the training set as the unlabelled public pool, all of
it used per round, four architectures cnn / mlp / fedavg_cnn / resnet8_narrow in contiguous blocks, E = 20,
batch 128, lr 0.01, MNFL with its defaults), one seed (0), ``resources.cpu`` = ``--cpus`` (default 2: two
client actors of one thread each and a parameter server), with ``clients.num_clients`` = N and
``clients.clients_per_round`` = min(``--per-round``, N). MNFL keeps every trained client's model in
``client.state``: the parameter server's client-state store holds it between rounds
(:mod:`platform.runtime.state_store`), hands it to the actor that trains the client and commits the new one
after the round; client actors keep nothing per client. What it measures: whether the memory grows with the states
actually held, and a round copies nothing that stays.

1. Memory, for each N of ``--clients``: ``--rounds`` R rounds on the platform
   (:func:`platform.runtime.trial.start_federations` and :func:`run_rounds`, as a trial runs them, inside a
   fresh ``ray.init(num_cpus=--cpus)``). Before round 1 and after every round (the actors are idle then: MNFL
   never launches a round before the previous one's states are committed) the benchmark reads the USS of the
   parameter server and of the client actors (private pages only, no object-store data, no shared libraries:
   ``benchmarks.scale``'s ``actors USS``), and asks the parameter server for its store (the number of states
   held, the store's own byte count, the clients held, the bytes of MNFL's server-side ``extra``) through
   Ray's ``__ray_call__`` (falling back to ``checkpoint()``, which copies every state, when that is missing).
   With ``per round`` < N new clients keep being added over the rounds; the per-round table shows USS
   against the states held.

   Columns of the memory table:

   - ``clients``, ``per round``: N and ``clients_per_round``;
   - ``held 1st/last``: personalised states in the parameter server's store after round 1 / after round R
     (checked against the clients sampled so far: the line under the table says whether they match);
   - ``actors USS start/1st/last``: parameter server + client actors, MiB, before round 1 (actors built,
     nothing trained) / after round 1 / after round R;
   - ``server Δ``, ``clients Δ``: each side's USS change from before round 1 to after round R (MiB); the
     states live on the server, so ``clients Δ`` should not depend on N;
   - ``B/state fit``: least-squares slope of actors USS against states held over rounds 2..R, bytes per
     additional held state; ``-`` when the number held does not change over those rounds (every client sampled
     in round 1). Round 1 is left out because MNFL's round 1 has no targets: the clients' first distillation
     and the server's first c-step run in round 2, and their one-off allocations (tens of MiB in the client
     actors) would be counted as the cost of the states round 2 adds;
   - ``server B/state r1``: (parameter server USS after round 1 − before round 1) / states held after round 1:
     what the first states cost where they live, the server's first aggregate's one-off allocations and the
     clients' stored predictions (``extra``) included;
   - ``state B``: the bytes of one state dict's tensors (``{"weights": flat float32 weights}``,
     :func:`platform.runtime.state_store.state_bytes`), mean over the architectures (each one's on the line
     below the table, with its pickled size);
   - ``store B/state``: the store's own byte count / states held (the mix of architectures actually held);
   - ``KiB/round, no new``: mean change of actors USS per round over the rounds 3..R that added no state (how
     many in brackets; round 2 is left out: its first distillation, see above); ~0 means nothing is copied per
     round; ``-`` when there is no such round (R < 3, or every round added a state);
   - ``other load``: average cores other processes used during the run (see ``benchmarks.round_throughput``).

   Columns of the per-round table (USS against states held): ``round`` (0 = before round 1), ``new`` (states
   this round added), ``held``, ``server``/``clients``/``actors USS`` (MiB), ``store MiB`` (the store's byte
   count), ``extra MiB`` (MNFL's server state: c, N×N float64, and every sender's last public predictions,
   431×10 float32 each), ``s`` (the round's wall seconds).

2. Seconds per round, for N = ``--timing-clients`` (default 20, all sampled; 0 skips this part): the median
   wall seconds of rounds 2..R (round 1 is the warm-up) of (a) ``raw``: one process, no Ray, torch with
   ``--raw-threads`` threads (default: every core), the same work as the platform: the same algorithm object
   (``resolve_algorithm("mnfl")(config.algorithm.params)``), the same data (the dataset, the public split and
   the client splits computed by the product's own functions: ``load_dataset``, ``take_public``,
   :func:`platform.runtime.federation.client_splits`; checked equal to the platform federation's), models
   built and seeded as the actors build them, the clients' states in a plain dict, and per round
   ``broadcast`` → for each sampled client (the platform's per-(round, client) generators and global-RNG
   seed, :mod:`platform.runtime.seeding`) ``client_update`` and ``client_evaluate`` → ``aggregate_round`` on a
   ``ServerContext`` built as the parameter server builds it (its generators included); and (b)
   ``platform``: the memory run of that N above (the same rounds; the memory readings happen between rounds,
   outside the timed interval), or a run of its own when ``--per-round`` < N. Columns: ``raw nT s/round``,
   ``platform s/round``, ``ratio`` (platform / raw; ≤ 1: as fast as the plain loop), ``val acc round 1
   raw / platform`` (the mean client validation accuracy, weighted by the clients' validation sizes, as the
   platform reports ``val_accuracy`` for methods without a global model), ``|Δ val acc| 1 / max`` (after round
   1, where the same work gives the same models up to float rounding from thread counts, and the largest
   value over the rounds), ``|Δ train_loss| 1`` (continuous, so it shows rounding a discrete accuracy hides),
   ``other load raw/plat``. The line under the table says whether round 1's accuracies agree to 1e-6; if they
   do not, the raw loop does not do the platform's work and the ratio means little. Another line flags the
   comparison when other processes used more than 0.25 cores during either measurement: a multi-threaded
   torch loop then stalls at every parallel region (measured here: 1.5 cores of other load turned the raw
   loop's ~1.5 s rounds into ~48 s ones), so such a ratio says nothing about the platform.

The machine may be shared: figures taken with ``other load`` well above 0 are not comparable. Start-up (actor
creation) is in neither figure (``benchmarks.trial_startup`` measures it).
"""
from __future__ import annotations

import argparse
import json
import os
import pickle
import sys
import time
from collections import Counter
from types import SimpleNamespace

import numpy as np

from benchmarks._common import (ACTOR_TITLES, ForeignLoad, local_ray, machine_line, median, ray_processes, table,
                                wait_for_quiet)

ACCURACY_TOLERANCE = 1e-6
BUSY_CORES = 0.25  # other load above which the s/round comparison is flagged as not comparable
SERVER_TITLE, CLIENT_TITLE = "ray::ParameterServer", "ray::ClientPool"
assert {SERVER_TITLE, CLIENT_TITLE} == set(ACTOR_TITLES)


def make_config(num_clients: int, per_round: int, rounds: int, cpus: int):
    """The mnfl_rho base config with N clients, ``per_round`` of them a round, ``rounds`` rounds, seed 0."""
    from platform.config.experiment import apply_overrides, build_experiment
    from platform.config.search_space import load_search_space

    base = apply_overrides(load_search_space("mnfl_rho").base, {
        "clients.num_clients": num_clients, "clients.clients_per_round": min(per_round, num_clients),
        "rounds": rounds, "seed": 0, "resources.cpu": cpus, "resources.gpu": 0})
    return build_experiment(base)


# --- measurements of the platform's actors ------------------------------------------------------------------

def actors_uss_mib() -> dict:
    """USS (MiB) of the parameter server and of the client actors (summed), as scale.py's ``actors USS``."""
    import psutil

    out = {"server": 0.0, "clients": 0.0}
    for p in ray_processes():
        try:
            title = p.cmdline()[0]
            kind = "server" if title.startswith(SERVER_TITLE) else "clients" if title.startswith(CLIENT_TITLE) else None
            if kind is not None:
                out[kind] += getattr(p.memory_full_info(), "uss", 0) / 2 ** 20
        except (psutil.Error, IndexError):
            continue
    out["actors"] = out["server"] + out["clients"]
    return out


def server_store(server) -> dict:
    """What the parameter server's client-state store holds: a cheap call on the actor (``__ray_call__``);
    without it, from a full checkpoint (which copies every state to this process)."""
    import ray

    def probe(ps):
        from platform.runtime.state_store import state_bytes

        store = ps.client_states
        return {"held": len(store), "clients": store.clients(), "store_bytes": int(store.memory_bytes),
                "on_disk": len(store) - len(getattr(store, "_mem", {})),
                "extra_bytes": int(state_bytes(ps.state.extra))}

    try:
        return ray.get(server.__ray_call__.remote(probe))
    except AttributeError:  # a Ray without __ray_call__
        from platform.runtime.state_store import state_bytes

        states = ray.get(server.checkpoint.remote())["client_states"]
        return {"held": len(states), "clients": sorted(states),
                "store_bytes": int(sum(state_bytes(s) for s in states.values())), "on_disk": -1, "extra_bytes": -1}


def platform_run(config, cpus: int, quiet_wait: float) -> dict:
    """``config.rounds`` rounds on the platform; memory readings before round 1 and after every round."""
    from platform.runtime.federation import share_dataset
    from platform.runtime.trial import run_rounds, start_federations, stop_federations

    wait_for_quiet(timeout=quiet_wait)
    readings, rounds = [], config.rounds
    with ForeignLoad() as load, local_ray(cpus):
        shared = share_dataset(config)
        started = time.perf_counter()
        federations = start_federations(config, [config.seed], shared)
        startup = time.perf_counter() - started
        fed = federations[0]
        try:
            time.sleep(1.0)  # let the actors' start-up settle before the first reading
            store = server_store(fed.server)
            readings.append({"round": 0, "new": 0, "sampled_so_far": 0, **_reading(store)})
            sampled_so_far: set = set()
            gen = run_rounds(federations, rounds)
            for r in range(rounds):
                sampled = {int(k) for k in fed.sampled_clients(r)}
                t0 = time.perf_counter()
                metrics = next(gen)
                wall = time.perf_counter() - t0
                store = server_store(fed.server)
                new = len(sampled - sampled_so_far)
                sampled_so_far |= sampled
                held_match = store["clients"] == sorted(sampled_so_far)
                readings.append({"round": r + 1, "new": new, "sampled_so_far": len(sampled_so_far),
                                 "held_matches_sampled": held_match, "wall_s": wall,
                                 "val_accuracy": metrics.get("val_accuracy"), "train_loss": metrics.get("train_loss"),
                                 **_reading(store)})
            splits = fed.splits
        finally:
            stop_federations(federations)
    return {"readings": readings, "startup_s": startup, "other_load": load.cores, "splits": splits}


def _reading(store: dict) -> dict:
    uss = actors_uss_mib()
    return {"held": store["held"], "store_bytes": store["store_bytes"], "on_disk": store["on_disk"],
            "extra_bytes": store["extra_bytes"], "server_uss_mib": uss["server"], "clients_uss_mib": uss["clients"],
            "actors_uss_mib": uss["actors"]}


def state_sizes(config) -> dict:
    """Per architecture: the tensor bytes (``state_bytes``) and pickled bytes of one MNFL client state."""
    from algorithms.common import get_flat_weights
    from platform.data import load_dataset
    from platform.config.models import build_model
    from platform.runtime.state_store import state_bytes

    train, _ = load_dataset(config.dataset)
    out = {}
    for name in config.model.architectures or [config.model.name]:
        state = {"weights": get_flat_weights(build_model(name, train.input_shape, train.num_classes))}
        out[name] = {"tensor_bytes": state_bytes(state), "pickled_bytes": len(pickle.dumps(state))}
    return out


def memory_summary(num_clients: int, config, run: dict, sizes: dict) -> dict:
    readings = run["readings"]
    start, first, last = readings[0], readings[1], readings[-1]
    rounds = readings[1:]
    mib = 2 ** 20
    full = readings[2:]  # rounds 2..R: after MNFL's first distillation and c-step (round 1 has no targets)
    held = np.array([r["held"] for r in full], dtype=float)
    uss = np.array([r["actors_uss_mib"] for r in full], dtype=float) * mib
    fit = float(np.polyfit(held, uss, 1)[0]) if len(set(held.tolist())) > 1 else None
    steady = [(b["actors_uss_mib"] - a["actors_uss_mib"]) * 1024 for a, b in zip(full, full[1:])
              if b["held"] == a["held"]]
    return {
        "clients": num_clients, "per_round": config.clients.clients_per_round, "rounds": config.rounds,
        "held_first": first["held"], "held_last": last["held"],
        "held_matches_sampled": all(r.get("held_matches_sampled", True) for r in rounds),
        "on_disk_last": last["on_disk"],
        "actors_uss_start_mib": start["actors_uss_mib"], "actors_uss_first_mib": first["actors_uss_mib"],
        "actors_uss_last_mib": last["actors_uss_mib"],
        "server_delta_mib": last["server_uss_mib"] - start["server_uss_mib"],
        "clients_delta_mib": last["clients_uss_mib"] - start["clients_uss_mib"],
        "bytes_per_state_fit": fit,
        "server_bytes_per_state_round1": ((first["server_uss_mib"] - start["server_uss_mib"]) * mib / first["held"]
                                          if first["held"] else None),
        "state_bytes_mean": float(np.mean([s["tensor_bytes"] for s in sizes.values()])),
        "state_pickled_bytes_mean": float(np.mean([s["pickled_bytes"] for s in sizes.values()])),
        "store_bytes_per_state": last["store_bytes"] / last["held"] if last["held"] else None,
        "steady_kib_per_round": float(np.mean(steady)) if steady else None, "steady_rounds": len(steady),
        "other_load": run["other_load"], "startup_s": run["startup_s"],
        "readings": readings,
    }


# --- (a) the raw loop -------------------------------------------------------------------------------------------

def raw_rounds(config, threads: int) -> tuple[list[dict], object]:
    """MNFL in one process, no Ray: the platform's per-round work with the same objects, data and generators.
    Returns per-round metrics and the client splits it used."""
    import torch

    from algorithms import ClientContext, ServerContext, resolve_algorithm
    from algorithms.base import aggregate_round, mean_metrics
    from algorithms.common import LocalTraining, get_flat_weights
    from platform.data import load_dataset
    from platform.data.public import take_public
    from platform.data.sampling import client_sampling_probabilities, sample_clients_weighted
    from platform.config.models import build_model, client_architectures
    from platform.runtime.actors import GLOBAL_RNG_KEY, SERVER_STREAM_KEY, summarise_client_evaluations
    from platform.runtime.federation import client_splits
    from platform.runtime.seeding import derived_seed, generator, sample_clients

    if config.server.val_fraction > 0 or config.pretrain.method != "none":
        raise SystemExit("raw loop: only server.val_fraction 0 and no pre-training (the mnfl_rho base) are supported")
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        # Data as share_dataset and client_splits make them.
        train, test = load_dataset(config.dataset)
        split = take_public(train, config.public, config.stream_seed("partition"), config.dataset)
        train, public = split.local, split.x
        splits = client_splits(config, SimpleNamespace(train_labels=train.y, train_groups=train.groups,
                                                       train_coarse_labels=train.coarse_y))
        x_all, y_all = torch.from_numpy(train.x), torch.from_numpy(train.y)
        public_x = torch.from_numpy(public)
        cpu = torch.device("cpu")

        def build(name):  # as actors._model_for: seeded by the init stream
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(config.stream_seed("init"))
                return build_model(name, train.input_shape, train.num_classes).to(cpu)

        c = config.clients
        names = client_architectures(config)
        arch = (lambda k: names[k]) if names is not None else (lambda k: config.model.name)
        per_arch = dict(Counter(names)) if names is not None else {config.model.name: c.num_clients}
        models = {name: build(name) for name in sorted(set(per_arch))}  # one per architecture, shared by clients
        initial = {name: get_flat_weights(m) for name, m in models.items()}
        training = LocalTraining(c.local_epochs, c.batch_size, c.optimizer, c.lr, c.momentum, c.weight_decay)
        training_seed, noise_seed = config.stream_seed("training"), config.stream_seed("noise")
        sampling_seed = config.stream_seed("sampling")
        probabilities = (None if config.partition.sampling_alpha is None else
                         client_sampling_probabilities(c.num_clients, config.partition.sampling_alpha, sampling_seed))

        # The server as ParameterServer builds it.
        algorithm = resolve_algorithm(config.algorithm.name)(config.algorithm.params)
        torch.default_generator.manual_seed(derived_seed(noise_seed, SERVER_STREAM_KEY))
        server_models = {name: build(name) for name in dict.fromkeys([config.model.name, *per_arch])}
        ctx = ServerContext.for_models(
            server_models, per_arch, architecture=config.model.name, server_lr=config.server.lr,
            server_momentum=config.server.momentum, num_classes=train.num_classes, device=cpu,
            training_generator=generator(training_seed, SERVER_STREAM_KEY),
            noise_generator=generator(noise_seed, SERVER_STREAM_KEY), public_x=public_x,
            test_y=torch.from_numpy(test.y))
        state = algorithm.init_server_state(ctx)
        states: dict[int, dict] = {}

        def data(shards, k):
            if shards is None:
                return None, None
            idx = torch.from_numpy(np.asarray(shards[k], dtype=np.int64))
            return x_all[idx], y_all[idx]

        out = []
        for r in range(config.rounds):
            start = time.perf_counter()
            sampled = (sample_clients(c.num_clients, c.clients_per_round, sampling_seed, r) if probabilities is None
                       else sample_clients_weighted(probabilities, c.clients_per_round, sampling_seed, r))
            payload = algorithm.broadcast(state, sampled.tolist())
            updates, evaluations, new_states = [], [], {}
            for k in (int(k) for k in sampled):
                x, y = data(splits.train, k)
                val_x, val_y = data(splits.val, k)
                test_x, test_y = data(splits.test, k)
                client = ClientContext(
                    client_id=k, x=x, y=y, model=models[arch(k)], architecture=arch(k), training=training,
                    generator=generator(training_seed, r, k), noise_generator=generator(noise_seed, r, k),
                    state=dict(states.get(k, {})), device=cpu, val_x=val_x, val_y=val_y, test_x=test_x,
                    test_y=test_y, public_x=public_x, initial_weights=initial[arch(k)])
                torch.default_generator.manual_seed(derived_seed(training_seed, r, k, GLOBAL_RNG_KEY))  # as actors
                update = algorithm.client_update(payload, client)
                update.architecture, update.client_id = client.architecture, k
                updates.append(update)
                if algorithm.evaluates_clients:
                    sizes = {"train": client.num_samples, "val": 0 if val_y is None else len(val_y),
                             "test": 0 if test_y is None else len(test_y)}
                    evaluations.append((sizes, algorithm.client_evaluate(payload, client)))
                if client.state:
                    new_states[k] = client.state
            states.update(new_states)  # committed before the aggregate, as the parameter server does
            state, algorithm_metrics = aggregate_round(algorithm, state, updates, ctx)
            metrics = mean_metrics(updates)
            client_metrics = summarise_client_evaluations(evaluations)
            metrics.update(client_metrics)
            metrics.update({k[len("client_"):]: v for k, v in client_metrics.items() if not k.endswith("_p10")})
            metrics.update({k: float(v) for k, v in algorithm_metrics.items()})
            metrics.update({"round": r + 1, "wall_s": time.perf_counter() - start, "held": len(states)})
            out.append(metrics)
        return out, splits
    finally:
        torch.set_num_threads(before)


def same_splits(a, b) -> bool:
    def same(x, y):
        if x is None or y is None:
            return x is None and y is None
        return np.array_equal(x.indices, y.indices) and np.array_equal(x.offsets, y.offsets)

    return same(a.train, b.train) and same(a.val, b.val) and same(a.test, b.test)


def timing_summary(num_clients: int, raw: list[dict], raw_load: float, threads: int, run: dict,
                   splits_equal: bool) -> dict:
    plat = run["readings"][1:]
    dacc = [abs(a["val_accuracy"] - b["val_accuracy"]) for a, b in zip(raw, plat)]
    raw_s = median([m["wall_s"] for m in raw[1:]])
    plat_s = median([m["wall_s"] for m in plat[1:]])
    return {"clients": num_clients, "raw_threads": threads, "rounds_timed": len(raw) - 1,
            "raw_s": raw_s, "platform_s": plat_s, "ratio": plat_s / raw_s,
            "raw_val_accuracy_1": raw[0]["val_accuracy"], "platform_val_accuracy_1": plat[0]["val_accuracy"],
            "dacc_1": dacc[0], "dacc_max": max(dacc),
            "dloss_1": abs(raw[0]["train_loss"] - plat[0]["train_loss"]),
            "accuracy_match": dacc[0] <= ACCURACY_TOLERANCE, "splits_equal": splits_equal,
            "raw_other_load": raw_load, "platform_other_load": run["other_load"],
            "raw_val_accuracy": [m["val_accuracy"] for m in raw],
            "platform_val_accuracy": [m["val_accuracy"] for m in plat]}


# --- rendering ------------------------------------------------------------------------------------------------------

def _f(value, fmt: str) -> str:
    return "-" if value is None else f"{value:{fmt}}"


def render_memory(results: list[dict], sizes: dict) -> str:
    rows = [[r["clients"], r["per_round"], f"{r['held_first']} / {r['held_last']}",
             f"{r['actors_uss_start_mib']:.1f} / {r['actors_uss_first_mib']:.1f} / {r['actors_uss_last_mib']:.1f}",
             f"{r['server_delta_mib']:+.1f}", f"{r['clients_delta_mib']:+.1f}", _f(r["bytes_per_state_fit"], ",.0f"),
             _f(r["server_bytes_per_state_round1"], ",.0f"), f"{r['state_bytes_mean']:,.0f}",
             _f(r["store_bytes_per_state"], ",.0f"),
             "-" if r["steady_kib_per_round"] is None else f"{r['steady_kib_per_round']:+.0f} ({r['steady_rounds']})",
             f"{r['other_load']:.2f}"] for r in results]
    out = [table(["clients", "per round", "held 1st/last", "actors USS start/1st/last MiB", "server Δ MiB",
                  "clients Δ MiB", "B/state fit", "server B/state r1", "state B", "store B/state",
                  "KiB/round, no new", "other load"], rows)]
    out.append("state per architecture (tensor bytes / pickled bytes): " + ", ".join(
        f"{name} {s['tensor_bytes']:,} / {s['pickled_bytes']:,}" for name, s in sizes.items()))
    for r in results:
        disk = f"; {r['on_disk_last']} on disk" if r["on_disk_last"] > 0 else ""
        out.append(f"{r['clients']} clients: states held = clients sampled so far after every round: "
                   f"{'yes' if r['held_matches_sampled'] else 'NO'}{disk}")
    out.append("\nUSS against states held, per round (round 0: before round 1):")
    rows = []
    for r in results:
        for g in r["readings"]:
            rows.append([r["clients"], g["round"], g["new"], g["held"], f"{g['server_uss_mib']:.1f}",
                         f"{g['clients_uss_mib']:.1f}", f"{g['actors_uss_mib']:.1f}", f"{g['store_bytes'] / 2**20:.2f}",
                         "-" if g["extra_bytes"] < 0 else f"{g['extra_bytes'] / 2**20:.2f}",
                         _f(g.get("wall_s"), ".2f")])
    out.append(table(["clients", "round", "new", "held", "server USS", "clients USS", "actors USS", "store MiB",
                      "extra MiB", "s"], rows))
    return "\n".join(out)


def render_timing(t: dict) -> str:
    rows = [[t["clients"], f"{t['raw_s']:.3f}", f"{t['platform_s']:.3f}", f"{t['ratio']:.2f}",
             f"{t['raw_val_accuracy_1']:.6f} / {t['platform_val_accuracy_1']:.6f}",
             f"{t['dacc_1']:.1e} / {t['dacc_max']:.1e}", f"{t['dloss_1']:.1e}",
             f"{t['raw_other_load']:.2f}/{t['platform_other_load']:.2f}"]]
    out = [table(["clients", f"raw {t['raw_threads']}T s/round", "platform s/round", "ratio",
                  "val acc round 1 raw / platform", "|Δ val acc| 1 / max", "|Δ train_loss| 1", "other load raw/plat"],
                 rows)]
    out.append(f"median over rounds 2..{t['rounds_timed'] + 1} (round 1 is the warm-up); client splits of the raw "
               f"loop and the platform: {'identical' if t['splits_equal'] else 'DIFFERENT'}")
    busy = max(t["raw_other_load"], t["platform_other_load"])
    if busy > BUSY_CORES:
        out.append(f"other processes used up to {busy:.2f} cores during a measurement: these s/round are not "
                   f"comparable (a multi-threaded torch loop stalls at every parallel region while a thread is "
                   f"preempted, so the raw loop suffers most); run again on a quiet machine")
    if t["accuracy_match"]:
        out.append(f"round 1: the raw loop's mean client validation accuracy equals the platform's "
                   f"(|Δ| = {t['dacc_1']:.1e} ≤ {ACCURACY_TOLERANCE:g}): the same work")
    else:
        out.append(f"round 1: the raw loop's mean client validation accuracy DIFFERS from the platform's "
                   f"(|Δ| = {t['dacc_1']:.1e} > {ACCURACY_TOLERANCE:g}): the raw loop does not do exactly the "
                   f"platform's work, so the ratio is not a like-for-like comparison")
    return "\n".join(out)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.mnfl_scale", description=__doc__.split("\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog="See the module docstring (python -c 'import benchmarks.mnfl_scale as m; "
                                            "print(m.__doc__)') for every column.")
    parser.add_argument("--clients", default="20,100", help="total clients N of the memory runs, comma-separated "
                                                            "(default 20,100)")
    parser.add_argument("--per-round", type=int, default=20,
                        help="clients per round of the memory runs, N if smaller (default 20; the paper's "
                             "100-client run samples 10 %%: --per-round 10)")
    parser.add_argument("--rounds", type=int, default=10,
                        help="rounds R of every run; s/round is the median of rounds 2..R (default 10)")
    parser.add_argument("--timing-clients", type=int, default=20,
                        help="N of the s/round comparison, all sampled (default 20; 0: skip the comparison)")
    parser.add_argument("--raw-threads", type=int, default=os.cpu_count(),
                        help="torch threads of the raw loop (default: every core)")
    parser.add_argument("--cpus", type=int, default=2, help="Ray CPUs and resources.cpu (default 2)")
    parser.add_argument("--quiet-wait", type=float, default=60.0,
                        help="seconds to wait for other processes to go quiet before each run (default 60)")
    parser.add_argument("--json", action="store_true", help="also print one JSON line per memory run and one for "
                                                            "the s/round comparison")
    args = parser.parse_args(argv)
    sizes_n = [int(s) for s in args.clients.split(",") if s.strip()]
    if args.rounds < 2:
        parser.error("--rounds must be at least 2 (round 1 is the warm-up)")
    if args.per_round < 1 or any(n < 1 for n in sizes_n) or args.timing_clients < 0:
        parser.error("--clients and --per-round must be positive, --timing-clients >= 0")

    print(machine_line(), flush=True)
    T = args.timing_clients
    sizes = state_sizes(make_config(sizes_n[0] if sizes_n else max(T, 1), args.per_round, args.rounds, args.cpus))
    memory, runs, timing = [], {}, None

    def run_platform(n: int, per_round: int) -> dict:
        key = (n, min(per_round, n))
        if key not in runs:
            print(f"... platform: {n} clients, {key[1]} per round, {args.rounds} rounds", file=sys.stderr, flush=True)
            runs[key] = platform_run(make_config(n, per_round, args.rounds, args.cpus), args.cpus, args.quiet_wait)
        return runs[key]

    # The comparison's raw loop runs right before its platform run, so both see similar machine load.
    order = sorted(sizes_n, key=lambda n: n != T)
    if T and T not in sizes_n:
        order = [0] + order  # 0: the comparison's own platform run
    for n in order:
        if n in (T, 0) and T and timing is None:
            config = make_config(T, T, args.rounds, args.cpus)
            print(f"... raw loop: {T} clients, all sampled, {args.raw_threads} threads", file=sys.stderr, flush=True)
            wait_for_quiet(timeout=args.quiet_wait)
            with ForeignLoad() as load:
                raw, raw_splits = raw_rounds(config, args.raw_threads)
            run = run_platform(T, T)
            timing = timing_summary(T, raw, load.cores, args.raw_threads, run, same_splits(raw_splits, run["splits"]))
            if args.json:
                print(json.dumps({"kind": "timing", **timing}), flush=True)
        if n:
            run = run_platform(n, args.per_round)
            memory.append(memory_summary(n, make_config(n, args.per_round, args.rounds, args.cpus), run, sizes))
            if args.json:
                print(json.dumps({"kind": "memory", **memory[-1]}), flush=True)

    if memory:
        print(f"\nMemory: mnfl_rho base, {args.rounds} rounds, resources.cpu {args.cpus}, seed 0")
        print(render_memory(memory, sizes))
    if timing is not None:
        print(f"\nSeconds per round, {T} clients all sampled: raw loop vs platform")
        print(render_timing(timing))
    return 0


if __name__ == "__main__":
    sys.exit(main())
