"""The Tune trainable: one trial = one configuration run on every seed of the sweep, round by round.

The seeds' federations run side by side inside the trial's placement group; after each round the
trial reports the mean (and, with several seeds, the std) of each metric, keyed by ``round`` so ASHA
can stop it between rounds.
"""
from __future__ import annotations

import os
import tempfile

import numpy as np
import ray

from algorithms.base import CLIENT_EVALUATION_METRICS, STANDARD_METRICS

from platform.config.experiment import apply_overrides, build_experiment
from platform.stages.cache import open_cache, take_corrupt_reports
from platform.runtime.federation import Federation, SharedData, WarmActors, one_round_stage, share_dataset
from platform.runtime.placement import current_placement, own_placement
from platform.runtime.seeding import replicate_over_seeds
from platform.config.run_schema import (REPORTED_TEST_METRICS, RESULT_ARRAYS, RESULT_CACHE_CORRUPT, RESULT_CLIENT_PATHS,
                                        per_seed_key, seed_std, tune_result)

NOT_SUMMARISED = ("round", "clients")
# Metrics also reported per seed, as ``<metric>/seed_<seed>`` (e.g. ``test_accuracy/seed_3``): the headline figures
# (a sweep adds its search metrics), so per-seed curves and tables need no re-run.
PER_SEED_METRICS = tuple(m.name for m in (*STANDARD_METRICS, *CLIENT_EVALUATION_METRICS) if m.name != "train_loss")

# This trial process's idle actors, for the next trial Tune runs in it (``reuse_actors``): see WarmActors.
WARM_ACTORS = WarmActors()


def summarise_seeds(per_seed: list[dict], seeds: list[int] | None = None,
                    per_seed_metrics: tuple[str, ...] = PER_SEED_METRICS) -> dict:
    """Mean over seeds of every metric, plus ``<metric>_std`` (population std, ddof 0 as the thesis reports; equal
    infinities have std 0: :func:`platform.config.run_schema.seed_std`)
    for the non-timing metrics when there are several seeds, and, given the ``seeds`` (in ``per_seed`` order),
    each of ``per_seed_metrics`` per seed as ``<metric>/seed_<seed>``. The method's arrays (``RESULT_ARRAYS``, on
    the rounds due) are the first seed's, as the logged partition is."""
    out = {"round": int(per_seed[0]["round"])}
    keys = [k for k in per_seed[0] if k not in NOT_SUMMARISED and isinstance(per_seed[0][k], (int, float))]
    for key in keys:
        values = np.array([m[key] for m in per_seed if key in m], dtype=float)
        with np.errstate(invalid="ignore", over="ignore"):  # ε = ∞ on every seed: the mean is ∞, no warning
            out[key] = float(values.mean())
        if len(per_seed) > 1 and not key.endswith("seconds"):
            out[f"{key}_std"] = seed_std(values)  # equal infinities: 0, not NaN
        if seeds is not None and key in per_seed_metrics:
            out.update({per_seed_key(key, seed): float(m[key]) for seed, m in zip(seeds, per_seed) if key in m})
    if per_seed[0].get(RESULT_ARRAYS):
        out[RESULT_ARRAYS] = per_seed[0][RESULT_ARRAYS]
    if per_seed[0].get(RESULT_CLIENT_PATHS):  # how the clients trained (clients.batched), the first seed's
        out[RESULT_CLIENT_PATHS] = per_seed[0][RESULT_CLIENT_PATHS]
    corrupt = [m[RESULT_CACHE_CORRUPT] for m in per_seed if m.get(RESULT_CACHE_CORRUPT)]  # every seed's actors'
    if corrupt:
        out[RESULT_CACHE_CORRUPT] = "\n".join(corrupt)
    return out


def with_own_cache_reports(metrics: dict) -> dict:
    """``metrics`` with the corrupt stage-cache entries this (trial) process found added to the actors' (see
    ``run_schema.RESULT_CACHE_CORRUPT``): a Ray worker's stderr reaches no console."""
    own = take_corrupt_reports()
    if own:
        metrics[RESULT_CACHE_CORRUPT] = "\n".join([*own, *filter(None, [metrics.get(RESULT_CACHE_CORRUPT)])])
    return metrics


def start_federations(config, seeds: list[int], shared: SharedData | None = None,
                      lazy_clients: bool = False, warm: WarmActors | None = None, cache=None) -> list[Federation]:
    """Create one federation per seed, all actors at once, in the current trial's placement group; with
    ``warm``, idle actors of an earlier trial in this process are reset and reused first. ``cache``: the stage
    cache behind the algorithm's ``memo`` and the source-image crop pool (None: no cross-trial caching of one-shot
    work)."""
    placement = current_placement(len(seeds))
    if placement is None:  # outside Tune (platform.run): a placement group of our own
        placement = own_placement(config.resources, len(seeds))
    federations: list[Federation] = []
    try:  # whatever fails (the data refused, an actor that cannot start), nothing is left holding resources
        if placement.owned:
            ray.get(placement.placement_group.ready())
        if shared is None or not shared.serves(config):
            shared = share_dataset(config, cache=cache)  # once for all seeds
        for c in replicate_over_seeds(config, seeds):
            federations.append(Federation(c, placement, shared, wait=False, lazy_clients=lazy_clients, warm=warm,
                                          cache=cache))
        ray.get([ref for f in federations for ref in f.ready_refs])
    except BaseException:
        stop_federations(federations)
        placement.release()  # ours (outside Tune) even when no federation was built; Tune's is Tune's
        raise
    return federations


def stop_federations(federations: list[Federation], keep_warm: bool = False) -> None:
    """Kill every actor (or, with ``keep_warm``, leave them idle in their WarmActors), then free the placement
    group if we created it (outside Tune)."""
    for f in federations:
        f.shutdown(keep_warm=keep_warm)
    for f in federations:
        f.placement.release()


def _seeds(federations: list[Federation]) -> list[int]:
    return [f.config.seed for f in federations]


def run_one_round(federations: list[Federation], cache, per_seed_metrics: tuple[str, ...] = PER_SEED_METRICS) -> dict:
    """The one-round analysis (``mode: one_round``) for every seed, client stages from the stage cache."""
    per_seed = [f.run_one_round_cached(cache, one_round_stage(f.config)) for f in federations]
    metrics = summarise_seeds(per_seed, _seeds(federations), per_seed_metrics)
    metrics["client_stage_cached"] = float(np.mean([m["client_stage_cached"] for m in per_seed]))
    return metrics


def run_rounds(federations: list[Federation], rounds: int, first_round: int = 0,
               per_seed_metrics: tuple[str, ...] = PER_SEED_METRICS):
    """Yield the seed-summarised metrics of each round (see :func:`summarise_seeds`); all seeds' rounds run
    concurrently, and each round's clients start training while the previous round is evaluated and reported (see
    Federation.start_round)."""
    for r in range(first_round, rounds):
        refs = [f.start_round(launch_next=r + 1 < rounds) for f in federations]
        yield summarise_seeds([f.finish_round(ref) for f, ref in zip(federations, refs)], _seeds(federations),
                              per_seed_metrics)


def sweep_trial(trial_config: dict, *, base: dict, seeds: list[int], shared: SharedData | None = None,
                checkpoint_every: int = 0, cache_root: str | None = None, use_cache: bool = True,
                search_metrics: tuple[str, ...] = ()) -> None:
    """Run one trial; with ``checkpoint_every`` > 0 it checkpoints every that many rounds and resumes from
    the latest checkpoint when Tune restores it (``platform.sweep.command --resume``). ``search_metrics`` are reported per
    seed besides the headline metrics."""
    params = trial_config.get("params", trial_config)
    config = build_experiment(apply_overrides(base, params))
    one_round = config.mode == "one_round"
    try:
        federations = start_federations(config, seeds, shared, lazy_clients=one_round, warm=WARM_ACTORS,
                                        cache=open_cache(cache_root, use_cache))
    except BaseException:
        WARM_ACTORS.clear()
        raise
    clean = False
    try:
        from algorithms import resolve_algorithm

        headline = resolve_algorithm(config.algorithm.name).headline_metrics()
        per_seed_metrics = tuple(dict.fromkeys((*PER_SEED_METRICS, *headline, *search_metrics)))
        _run_trial(federations, config, one_round, checkpoint_every, cache_root, use_cache, per_seed_metrics,
                   numeric=("round", *search_metrics, *REPORTED_TEST_METRICS))
        clean = True
    except SystemExit:  # Tune stopped the trial at a report (an early stop): the actors are sound
        clean = True
        raise
    finally:
        stop_federations(federations, keep_warm=clean)
        if not clean:
            WARM_ACTORS.clear()


def trial_trainable(base: dict, seeds: list[int], shared: SharedData | None, resources, cache_root: str | None,
                    use_cache: bool = True, checkpoint_every: int = 0, search_metrics: tuple[str, ...] = ()):
    """The Tune trainable of a sweep's trials (and of ``--estimate``'s measured ones): :func:`sweep_trial` with the
    sweep's fixed arguments, in one placement group per trial (bundles for the trial loop, the parameter server and
    the client actors, :func:`platform.runtime.placement.trial_bundles`)."""
    from ray import tune

    from platform.runtime.placement import trial_bundles

    return tune.with_resources(
        tune.with_parameters(sweep_trial, base=base, seeds=seeds, shared=shared, checkpoint_every=checkpoint_every,
                             cache_root=cache_root, use_cache=use_cache, search_metrics=search_metrics),
        tune.PlacementGroupFactory(trial_bundles(resources)))


def _run_trial(federations: list[Federation], config, one_round: bool, checkpoint_every: int,
               cache_root: str | None, use_cache: bool, per_seed_metrics: tuple[str, ...],
               numeric: tuple[str, ...]) -> None:
    """Run the trial's rounds, reporting each to Tune with only the ``numeric`` keys as numbers (see
    ``run_schema.tune_result``)."""
    from ray import tune  # here, not at the top: platform.run drives federations without Tune

    if one_round:
        tune.report(tune_result(with_own_cache_reports(
            run_one_round(federations, open_cache(cache_root, use_cache), per_seed_metrics)), numeric))
        return
    checkpoint = tune.get_checkpoint()
    if checkpoint is not None:
        with checkpoint.as_directory() as directory:
            for i, f in enumerate(federations):
                f.load(os.path.join(directory, f"seed_{i}.pt"))
    for metrics in run_rounds(federations, config.rounds, federations[0].round, per_seed_metrics):
        metrics.pop(RESULT_CLIENT_PATHS, None)  # a line of text per round: platform.run --profile's, not Tune's
        round_index = metrics["round"]
        metrics = tune_result(with_own_cache_reports(metrics), numeric)
        if checkpoint_every and (round_index % checkpoint_every == 0 or round_index == config.rounds):
            with tempfile.TemporaryDirectory() as directory:
                for i, f in enumerate(federations):
                    f.save(os.path.join(directory, f"seed_{i}.pt"))
                tune.report(metrics, checkpoint=tune.Checkpoint.from_directory(directory))
        else:
            tune.report(metrics)
