"""FedPA, federated posterior averaging (Al-Shedivat et al. 2021), as the FedKP thesis runs it
(docs/methods/fedkp_fedpa.md §4, §12 A16/A17/A22).

Rounds ``t < burnin_rounds`` (B, counted in server rounds, 0-based) are plain FedAvg: every client runs E local
epochs of SGD and returns Δ_k = θ_k − θ_t. From round B on, each client draws l approximate posterior samples
with IASG (§4.1, Alg. 6): the running average of the optimiser iterates over one local epoch is one sample
(K_s = one epoch of steps, every post-step iterate counted, so l = E). From the samples s_1..s_l and the start
x0 = θ_t it forms

    μ̂ = mean(s),  Ŝ = unbiased sample covariance (l − 1),  ρ_l = 1/(1 + (l − 1)ρ),
    Σ̂ = ρ_l·I + (1 − ρ_l)·Ŝ,  Δ_i = Σ̂⁻¹(x0 − μ̂),

computed with the O(l²·d) dynamic programme of §4.2 (:func:`fedpa_delta`; :func:`fedpa_delta_direct` is the
dense solve it must equal). The client returns ``delta = −Δ_i`` (the vector x0 − Δ_i minus x0, so every delta
in this repository points from θ_t towards the client's estimate), and the server, exactly as FedAvg, steps
θ_{t+1} = θ_t + η_s·v, v = m_s·v + Σ_i w_i(−Δ_i), with the experiment's server lr and momentum.

ρ = 0 gives Σ̂ = I and Δ_i = x0 − μ̂: FedAvg with iterate averaging (the covariance-free control, thesis §6.5).

Deviations and choices (each a config switch where the digest documents an alternative):

- Client weights w_i: ``weighting = uniform`` (default) is the thesis-era code's unweighted mean (§2.2, A17,
  A22); ``data_size`` gives the FedPA paper's |𝒟_i| weights. The burn-in (FedAvg) rounds use the same weights.
  With ``uniform`` the reported ``train_loss`` is an unweighted client mean as well (A20 asks for data-size
  weights; the platform weights client metrics by the aggregation weight).
- The sampler options ``client_burnin_steps``, ``steps_per_sample`` and ``discard_steps`` are the original
  FedPA sampler's knobs (A16, [F]); their defaults (0, one epoch, 0) are the thesis code. Their exact
  semantics are ours: skip the first ``client_burnin_steps`` optimiser steps of the round, then repeatedly
  average ``steps_per_sample`` consecutive iterates (0: the iterates of one epoch, closed at the epoch's
  end) into one sample and skip the next ``discard_steps`` iterates. A step-based window still open at the end
  of local training is dropped. If no sample was collected (e.g. the client burn-in covers all steps), the
  final iterate is the single sample.
- ``nonfinite_fallback`` (A16, an addition, off by default as in the thesis): a non-finite Δ_i is replaced by
  x0 − μ̂ (ρ = 0); the client reports ``fedpa_nonfinite`` = 1 for that round either way.
- The state vector is the whole float ``state_dict`` (BatchNorm running statistics included, as the thesis
  code); ``num_batches_tracked`` is an integer buffer and stays per model (algorithms/common/weights.py).
- Defaults ρ = 0.1 and B = 25 are Table 4.1's MNIST values (ρ = 0.1 on EMNIST, 0.01 on CIFAR-100; B was
  T/2 everywhere: 25/50, 500/1000, 400/800); B depends on the run length, so set it per experiment.
- The DP's inner products accumulate in float64 (the vectors stay in the model's dtype).
- A client with no data returns a zero update with weight 0.
- FedPA clients never share the one-round stage cache with FedAvg (``client_stage_fields``: their weights
  and, after the burn-in, their procedure differ).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Optional, Sequence, Union

import torch

from algorithms.base import ClientContext, ClientUpdate, ServerState, register
from algorithms.common import get_flat_weights, set_flat_weights, train_local
from algorithms.fedavg import FedAvg
from algorithms.common.params import spec

Samples = Union[torch.Tensor, Sequence[torch.Tensor]]


def _dot(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a * b).sum(dtype=torch.float64))


def fedpa_delta(samples: Samples, x0: torch.Tensor, rho: float) -> torch.Tensor:
    """Δ = Σ̂⁻¹(x0 − μ̂) by repeated Sherman–Morrison updates (§4.2): O(l²·d) time, O(l·d) memory.

    ``samples`` is an [l, d] tensor or a sequence of l vectors of length d.
    """
    samples = list(samples)
    if not samples:
        raise ValueError("fedpa_delta needs at least one sample")
    l = len(samples)
    mu = samples[0].clone()
    delta = x0 - samples[0]
    vs: list[torch.Tensor] = []
    ds: list[float] = []
    for t in range(2, l + 1):
        s = samples[t - 1]
        u = s - mu
        v = u.clone()
        for j, k in enumerate(range(2, t)):  # vs[j] was made at step k = j + 2
            g_k = rho * (k - 1) / k
            v.sub_(vs[j], alpha=g_k * _dot(vs[j], u) / (1.0 + g_k * ds[j]))
        d_t = _dot(u, v)
        e = _dot(u, delta)
        g = rho * (t - 1) / t
        c = g * (t * e - d_t) / (1.0 + g * d_t)
        delta.sub_(v, alpha=(1.0 + c) / t)
        vs.append(v)
        ds.append(d_t)
        mu.mul_((t - 1) / t).add_(s, alpha=1.0 / t)
    return delta * (1.0 + (l - 1) * rho)


def fedpa_delta_direct(samples: Samples, x0: torch.Tensor, rho: float) -> torch.Tensor:
    """The same Δ by forming Σ̂ (d × d) and solving densely; for checking :func:`fedpa_delta` on small d."""
    s = torch.stack(list(samples)) if not isinstance(samples, torch.Tensor) else samples
    l, d = s.shape
    mu = s.mean(0)
    rho_l = 1.0 / (1.0 + (l - 1) * rho)
    cov = torch.cov(s.T, correction=1).reshape(d, d) if l > 1 else torch.zeros(d, d, dtype=s.dtype)
    sigma = rho_l * torch.eye(d, dtype=s.dtype) + (1.0 - rho_l) * cov
    return torch.linalg.solve(sigma, x0 - mu)


class IASGSampler:
    """Iterate-averaged SGD samples (Alg. 6), collected through ``train_local``'s ``on_step``/``on_epoch_end``."""

    def __init__(self, steps_per_sample: int = 0, burnin_steps: int = 0, discard_steps: int = 0):
        self.steps_per_sample = steps_per_sample
        self.discard_steps = discard_steps
        self.samples: list[torch.Tensor] = []
        self._sum: Optional[torch.Tensor] = None
        self._count = 0
        self._skip = burnin_steps

    def on_step(self, model: torch.nn.Module) -> None:
        if self._skip > 0:
            self._skip -= 1
            return
        flat = get_flat_weights(model)
        if self._sum is None:
            self._sum = flat.clone()
        else:
            self._sum.add_(flat)
        self._count += 1
        if self.steps_per_sample and self._count == self.steps_per_sample:
            self._close()

    def on_epoch_end(self, model: torch.nn.Module) -> None:
        if not self.steps_per_sample and self._count:
            self._close()

    def _close(self) -> None:
        self.samples.append(self._sum / self._count)
        self._sum, self._count = None, 0
        self._skip = self.discard_steps


@dataclass(frozen=True)
class FedPAClientOptions:
    """The FedPA client (shared by FedPA and FedKPPA)."""

    rho: float = spec(0.1, doc="ρ, shrinkage of the sample covariance, Σ̂ = ρ_l·I + (1−ρ_l)·Ŝ with "
                               "ρ_l = 1/(1+(l−1)ρ) (§4.2); thesis 0.1 (MNIST, EMNIST), 0.01 (CIFAR-100). "
                               "0 = covariance-free (iterate-averaged FedAvg).", ge=0)
    burnin_rounds: int = spec(25, doc="B, server rounds of plain SGD clients before FedPA clients start "
                                      "(§4.3); thesis 25 (MNIST) / 500 (EMNIST) / 400 (CIFAR-100), i.e. T/2.",
                              ge=0)
    steps_per_sample: int = spec(0, doc="K_s, optimiser steps averaged into one IASG sample (§4.1, A16); 0 = "
                                        "one local epoch (thesis code, so l = E samples).", ge=0)
    client_burnin_steps: int = spec(0, doc="Optimiser steps skipped before sampling starts in each round "
                                           "(original FedPA sampler, A16); the thesis code has none.", ge=0)
    discard_steps: int = spec(0, doc="Iterates skipped after each sample (original FedPA sampler, A16); "
                                     "the thesis code has none.", ge=0)
    nonfinite_fallback: bool = spec(False, doc="Replace a non-finite Δ_i by x0 − μ̂ (ρ = 0) (A16, an "
                                               "addition; the thesis code has no guard).")


@dataclass(frozen=True)
class FedPAHyperparams(FedPAClientOptions):
    weighting: str = spec("uniform", doc="Client weights w_i of the server mean (§2.2, A17, A22): uniform = "
                                         "thesis-era code; data_size = |𝒟_i| (FedPA paper, Alg. 1).",
                          choices=("uniform", "data_size"))


def fedpa_local(opts: FedPAClientOptions, payload: dict, client: ClientContext) -> tuple[torch.Tensor, float, dict]:
    """One FedPA client round from ``payload['weights']``: returns (Δ_i, mean train loss, metrics)."""
    start = payload["weights"]
    set_flat_weights(client.model, start)
    sampler = IASGSampler(opts.steps_per_sample, opts.client_burnin_steps, opts.discard_steps)
    loss = train_local(client.model, client.x, client.y, client.training, client.generator,
                       on_step=sampler.on_step, on_epoch_end=sampler.on_epoch_end,
                       augment_generator=client.augment_generator)
    samples = sampler.samples or [get_flat_weights(client.model)]
    delta = fedpa_delta(samples, start, opts.rho)
    nonfinite = not bool(torch.isfinite(delta).all())
    if nonfinite and opts.nonfinite_fallback:
        delta = start - torch.stack(samples).mean(0)
    return delta, loss, {"fedpa_samples": float(len(sampler.samples)), "fedpa_nonfinite": float(nonfinite)}


def in_burnin(opts: FedPAClientOptions, payload: dict) -> bool:
    return int(payload.get("round", 0)) < opts.burnin_rounds


def fedpa_stage_fields(opts: FedPAClientOptions, weighting: str) -> dict:
    """What a FedPA client's result depends on (the stage-cache key): its options and its update weight."""
    fields = {f.name: getattr(opts, f.name) for f in dataclasses.fields(FedPAClientOptions)}
    return {"procedure": "fedpa", **fields, "weighting": weighting}


@register
class FedPA(FedAvg):
    name = "fedpa"
    Hyperparams = FedPAHyperparams
    summable = True
    heterogeneous_models = False

    def client_stage_fields(self) -> dict:
        return fedpa_stage_fields(self.hp, self.hp.weighting)

    def broadcast(self, state: ServerState, sampled_clients: Sequence[int]) -> dict:
        return {"weights": state.weights, "round": state.round}

    def _weight(self, client: ClientContext) -> float:
        if client.num_samples == 0:
            return 0.0
        return 1.0 if self.hp.weighting == "uniform" else float(client.num_samples)

    def client_update(self, payload: dict, client: ClientContext) -> ClientUpdate:
        if client.num_samples == 0 or in_burnin(self.hp, payload):
            update = super().client_update(payload, client)  # FedAvg's client
            update.weight = self._weight(client)
            return update
        delta, loss, metrics = fedpa_local(self.hp, payload, client)
        return ClientUpdate(weight=self._weight(client), tensors={"delta": -delta},
                            metrics={"train_loss": loss, **metrics})
