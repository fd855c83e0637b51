"""Which trials a loaded search space runs, and when ASHA may stop them.

- The grid searcher's points: every combination of the space's choice/grid values (conditional parameters expanded
  only where they apply), or the evenly spread subset that ``--num-samples N`` takes of them.
- ``--num-samples N`` means at most N trials per cell, whatever the searcher; ``--repeats K`` runs a grid K times (as
  ``search.num_samples`` does for a grid in the file).
- ASHA: ``--set rounds=R`` below the grace period shrinks it to fit; the burn-in rule and the rungs every
  configuration must be comparable at.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Optional

from platform.errors import ConfigError, UserError


def full_grid(parameters: dict) -> list[dict]:
    """Every combination of ``parameters``' choice/grid values (in dependency order), a conditional parameter expanded
    only in the points where its ``when`` holds."""
    points: list[dict] = [{}]
    for key, dist in parameters.items():
        expanded = []
        for point in points:
            if dist.applies(point):
                expanded.extend({**point, key: v} for v in dist.args)
            else:
                expanded.append(point)
        points = expanded
    return points


def spread_indices(size: int, count: int) -> list[int]:
    """``count`` indices spread evenly over ``range(size)``, both ends included: round(i·(size-1)/(count-1)) for i = 0
    … count-1 (half up); the middle one for a single index; every index when ``count >= size``."""
    if count >= size:
        return list(range(size))
    if count == 1:
        return [(size - 1) // 2]
    return [math.floor(i * (size - 1) / (count - 1) + 0.5) for i in range(count)]


def grid_points(space) -> list[dict]:
    """The points the grid searcher runs (each ``search.num_samples`` times): the full grid, or where ``--num-samples N``
    limits it (``space.grid_limit``), N of its points spread evenly over it in grid order (:func:`spread_indices`)."""
    points = full_grid(space.parameters)
    limit = getattr(space, "grid_limit", None)
    if limit is None or limit >= len(points):
        return points
    return [points[i] for i in spread_indices(len(points), limit)]


def grid_subset_note(space) -> str:
    """One line naming the points a limited grid runs ("" when it runs its whole grid): "2 of 8 grid points
    (--num-samples 2, spread evenly): algorithm.rho=0.0; algorithm.rho=3.0"."""
    if space.search.searcher != "grid" or getattr(space, "grid_limit", None) is None:
        return ""
    total = len(full_grid(space.parameters))
    chosen = grid_points(space)
    if len(chosen) >= total:
        return ""
    points = "; ".join(", ".join(f"{k}={v}" for k, v in p.items()) or "(base config)" for p in chosen)
    return (f"{len(chosen)} of {total} grid points (--num-samples {space.grid_limit}, spread evenly over the grid): "
            f"{points}")


def sample_flags(search, num_samples: Optional[int], repeats: Optional[int]):
    """(search with its ``num_samples``, the grid's point limit or None) for ``--num-samples`` and ``--repeats``: TPE
    and random sampling draw ``num_samples`` trials; the grid runs its points (N of them spread over it with
    ``--num-samples N``, once each) ``--repeats`` times, else ``search.num_samples`` times."""
    if search.searcher != "grid":
        if repeats is not None:
            raise UserError(f"--repeats: repeats a grid; searcher {search.searcher} draws a new point every trial "
                            f"(use --num-samples for more trials)")
        return (search if num_samples is None else dataclasses.replace(search, num_samples=num_samples)), None
    times = repeats if repeats is not None else (1 if num_samples is not None else search.num_samples)
    return dataclasses.replace(search, num_samples=times), num_samples


def fit_grace_period(search, own_rounds: list, rounds: int, overrides: dict) -> tuple:
    """(search, notes): ``--set rounds=R`` below ASHA's grace period shrinks the grace period to R (ASHA then stops no
    trial early), with a note that says so. Only when ``--set`` lowered the rounds: a file whose own rounds (its base
    and scenario values, ``own_rounds``) are below its grace period stays an error."""
    scheduler = search.scheduler
    if scheduler.kind != "asha" or "rounds" not in overrides or scheduler.grace_period <= rounds:
        return search, ()
    if not all(isinstance(r, int) and not isinstance(r, bool) and scheduler.grace_period <= r for r in own_rounds):
        return search, ()
    note = (f"search.scheduler.grace_period lowered from {scheduler.grace_period} to {rounds} to fit --set "
            f"rounds={rounds}: ASHA stops no trial early at this length")
    return dataclasses.replace(search, scheduler=dataclasses.replace(scheduler, grace_period=rounds)), (note,)


def check_asha(configs: list, scheduler) -> None:
    """The ASHA rules on every configuration tried: a trial may only be stopped after its method's burn-in plus
    ``burnin_margin`` rounds, and every rung must fall on a round where the configurations are comparable. A rung at a
    configuration's last round is no rung (Ray's ASHA stops every trial there): a grace period equal to the rounds
    stops nothing early, so neither rule applies to it."""
    from algorithms import resolve_algorithm

    def burn_in_of(c) -> int:
        return resolve_algorithm(c.algorithm.name)(c.algorithm.params).burn_in_rounds()

    stoppable = [c for c in configs if scheduler.grace_period < c.rounds]
    worst = max(stoppable, key=burn_in_of, default=None)
    burn_in = burn_in_of(worst) if worst is not None else 0
    if burn_in and scheduler.grace_period < burn_in + scheduler.burnin_margin:
        raise ConfigError("search.scheduler.grace_period",
                          f"must be >= burn-in + burnin_margin = {burn_in} + {scheduler.burnin_margin} "
                          f"= {burn_in + scheduler.burnin_margin} ({worst.algorithm.name} burns in for up to "
                          f"{burn_in} rounds); ASHA must not stop a trial before the method's gain can appear "
                          f"(docs/methods/fedkp_fedpa.md §13), got {scheduler.grace_period}")
    _check_rungs_comparable(configs, scheduler)


def asha_rungs(grace_period: int, reduction_factor: float, max_t: int) -> list[float]:
    """The rounds at which Ray's ASHA (one bracket) compares trials: grace·rf^k for k = 0 … ⌊log_rf(max_t /
    grace)⌋, as ``ray.tune.schedulers.AsyncHyperBandScheduler`` lays out its rungs."""
    count = int(math.log(max_t / grace_period) / math.log(reduction_factor) + 1) if max_t >= grace_period else 0
    return [grace_period * reduction_factor ** k for k in range(count)]


def _check_rungs_comparable(configs: list, scheduler) -> None:
    """Every ASHA rung must fall on a round where every configuration tried may be compared
    (``Algorithm.comparable_round``: the single-image method's FedAvg-init rounds, docs/methods/single_image.md §9)."""
    from algorithms import resolve_algorithm

    for config in configs:
        algorithm = resolve_algorithm(config.algorithm.name)(config.algorithm.params)
        for rung in asha_rungs(scheduler.grace_period, scheduler.reduction_factor, config.rounds):
            if rung >= config.rounds:  # Ray's ASHA stops every trial at max_t: no comparison at the last round
                continue
            if rung != int(rung) or not algorithm.comparable_round(int(rung)):
                raise ConfigError("search.scheduler.grace_period",
                                  f"ASHA would compare trials at round {rung:g}, where {config.algorithm.name} "
                                  f"trials are not comparable (with fedavg_init_every = "
                                  f"{getattr(config.algorithm.params, 'fedavg_init_every', '?')} accuracy jumps "
                                  "on FedAvg-init rounds r ≡ 0 mod P, docs/methods/single_image.md §9); use a "
                                  "grace_period "
                                  f"that is a multiple of P and an integer reduction_factor, got grace_period "
                                  f"{scheduler.grace_period}, reduction_factor {scheduler.reduction_factor:g}")
