"""FedKP, FedKP_cm and FedKPPA: kernel-posterior mode aggregation (docs/methods/fedkp_fedpa.md §3, §12).

The server stacks the S client weight vectors into W ∈ R^{S×d} and treats every coordinate j on its own
(§3.2): a 1-D kernel density estimate over {W_ij}_i with its own bandwidth h_j (§3.4), climbed by 1-D
mean-shift (§3.5, Alg. 8)

    x_j ← Σ_i g((x_j − W_ij)/h_j)·W_ij / Σ_i g((x_j − W_ij)/h_j)

until |Δx_j| ≤ τ or t_max iterations. Variants (§3.6):

- ``fedkp`` (Alg. 9): one mean-shift started at the unweighted client mean;
- ``fedkp_cm`` (Alg. 10, "cluster mean"): a mean-shift started at every client's weight, then the
  unweighted mean of the S modes reached;
- ``fedkppa``: FedKP_cm on the server; clients are plain SGD clients for rounds t < B and FedPA clients
  (:mod:`algorithms.fedpa`) from round B on, whose vector x0 − Δ_i is sent as the delta −Δ_i.

The three names share one option set; ``cluster`` switches between Alg. 9 and Alg. 10 (its default is the
variant's). FedKP and FedKP_cm clients are FedAvg's clients exactly (Δ_k = θ_k − θ_t, weight N_k; so the
one-round stage cache shares them with FedAvg); the server mean-shifts the client models θ_t + Δ_k. The KDE
is unweighted by design (§12 A22); N_k only weights the reported train_loss. Bandwidths are computed once
per round from the un-shifted W.

The core is :func:`bandwidths`, :func:`mean_shift` and :func:`fedkp_aggregate`: pure torch, vectorised over
coordinates and chunked over d, so the largest temporary (S×chunk for FedKP, S×S×chunk for FedKP_cm)
stays bounded; the result is bit-for-bit the same for every ``chunk_size``. It runs in the client vectors'
dtype (float32) on ``ServerContext.device``: FedKP_cm's O(S²·d) per iteration is slow on a CPU for large
models (see benchmarks/fedkp_aggregation.py). Per (start, coordinate) pair, a mean-shift that moved by ≤ τ is frozen (§12 A5: per-coordinate
absolute test, converged coordinates frozen, the latest iterate returned).

Degenerate coordinates (§3.4): zero spread (all clients agree, σ̂_j = 0), h_j = 0 (IQR = 0 under a
Silverman rule) and an empty window (denominator 0) all leave the coordinate at its current iterate, as the
code's NaN → previous-value replacement does: for FedKP that is the client mean, for FedKP_cm the client's
own value (so the average of the modes is again the mean). A coordinate on which all clients agree returns
exactly their common value. With fewer than two clients every coordinate is degenerate.

Deviations from the digest and choices (each documented alternative is a config switch):

- ``t_max`` defaults to 100 for all three variants: the code's default, used for FedKP, FedKPPA and every
  CIFAR-100 run (§12 A5). Table 4.1 says 20, and FedKP_cm on MNIST/EMNIST ran with 20: set ``t_max: 20``.
- ``bandwidth_rule`` defaults to ``silverman_code`` (§12 A3), the formula that ran; ``silverman_thesis`` is
  Eq. 2.21/C.1 and ``scott`` the Appendix C rule. σ̂ is the unbiased (n − 1) standard deviation for all three
  (the digest fixes it only for the code rule); the IQR uses linear interpolation (torch.quantile / NumPy
  default). The ISJ plug-in, cross-validation and adaptive 5-NN rules of Appendix C are not implemented
  (per-coordinate Python, §13; the adaptive rule is buggy in the code, A19).
- ``cluster_mode`` defaults to ``independent``: Alg. 10 as written, the digest's resolution of §12 A4. The
  authors' code shifts each client's row of W in place, so later clients see a partly collapsed sample.
  ``sequential_inplace`` reproduces that, with the bandwidths of the original W. The in-place behaviour is
  verified: on identical inputs ``sequential_inplace`` matches the thesis code to 2e-16, while
  ``independent`` differs from it on 58–87 % of coordinates, by up to 2 bandwidths. The thesis's FedKP_cm
  results therefore come from the in-place variant. Reproduction runs, and the thesis arm of
  ``search_spaces/fedkp_bandwidth.yaml``, use ``cluster_mode: sequential_inplace``. The default stays
  Alg. 10 as written.
- ``weight_profile`` (§3.5 theory note, §12 A6): ``kernel`` weights points by K itself (Alg. 8 and the code;
  with Epanechnikov this climbs the biweight KDE), ``flat`` weights every point with |u| ≤ 1 equally (the
  exact mean-shift of the Epanechnikov KDE). With the Gaussian kernel ``kernel`` already climbs the Gaussian
  KDE and ``flat`` is rejected. The kernels' constant factors (0.75, 1/√(2π)) cancel and are dropped.
- ``zero_iqr = sigma`` (an addition, not in the thesis or code) uses the σ̂ branch of a Silverman rule where
  IQR_j = 0 < σ̂_j instead of leaving the coordinate at its start (``keep``, the code's behaviour).
- ``tol_mode = relative`` (§12 A5 option) stops at |Δx_j| ≤ τ·h_j instead of τ. ``tol`` is then a fraction of
  the bandwidth, so it needs a relative value such as ``tol: 1e-3`` (§12 A5). The default ``tol`` of 1e-6 is the
  code's absolute tolerance; read as 1e-6·h_j it is a much stricter test wherever h_j < 1.
- ``kde_tensors`` (§12 A7): ``state`` (default, the code) mean-shifts every float state entry including
  BatchNorm running statistics; ``parameters`` mean-shifts trainable parameters only and gives the other float
  entries the unweighted client mean. ``num_batches_tracked`` is an integer buffer: it is never exchanged
  and stays per model (the code mean-shifted it too). The GroupNorm alternative of A7 is a model choice.
- ``use_server_optimizer`` (§0 item 4, §12 A1): off by default, as the thesis code (θ_{t+1} = θ_agg, η_s = 1);
  on, θ_{t+1} = θ_t + η_s·v, v = m_s·v + (θ_agg − θ_t), with the experiment's server lr and momentum.
- The KDE weighting variants of §3.10 (future work in the thesis) are not implemented.
- Clients with no data return weight 0 and are left out of the KDE; with no client left θ is unchanged.
  FedKPPA's FedPA-phase clients report weight N_k (it only weights train_loss).
- Each round reports diagnostics as metrics: ``fedkp_iterations`` used, ``fedkp_unconverged_fraction`` of
  (start, coordinate) pairs still moving at t_max, ``fedkp_degenerate_fraction`` of coordinates, and
  ``fedkp_clients`` in the KDE.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional, Sequence

import torch

from algorithms.base import ClientContext, ClientUpdate, Metric, ServerContext, ServerState, register
from algorithms.common import parameter_mask, server_step
from algorithms.fedavg import FedAvg
from algorithms.fedpa import FedPAClientOptions, fedpa_local, fedpa_stage_fields, in_burnin
from algorithms.errors import ConfigError
from algorithms.common.params import spec

KERNELS = ("epanechnikov", "gaussian")
WEIGHT_PROFILES = ("kernel", "flat")
BANDWIDTH_RULES = ("silverman_code", "silverman_thesis", "scott")
#: Elements of the largest temporary per chunk when ``chunk_size`` is 0 (2^24 float32 values = 64 MiB).
AUTO_CHUNK_ELEMENTS = 1 << 24


# ---------------------------------------------------------------------------------------------------------------
# The core: bandwidths, weight profiles, mean-shift
# ---------------------------------------------------------------------------------------------------------------

def _quantile_sorted(sorted_w: torch.Tensor, q: float) -> torch.Tensor:
    """The q-quantile of every column of a column-sorted [n, k] matrix, linear interpolation."""
    n = sorted_w.shape[0]
    pos = q * (n - 1)
    lo = int(math.floor(pos))
    hi = min(lo + 1, n - 1)
    frac = pos - lo
    return sorted_w[lo] + frac * (sorted_w[hi] - sorted_w[lo])


def bandwidths(W: torch.Tensor, rule: str = "silverman_code", scale: float = 1.0, zero_iqr: str = "keep") -> torch.Tensor:
    """Per-coordinate bandwidths h_j of the columns of W ([n, d]), times the scaling s (§3.4).

    - ``silverman_code``:   h = (3n/4)^(−1/5) · min(σ̂, IQR)          (the authors' ``_silverman``)
    - ``silverman_thesis``: h = 0.9 · min(σ̂, IQR/1.34) · n^(−1/5)    (Eq. 2.21 / C.1)
    - ``scott``:            h = σ̂ · n^(−1/5)

    σ̂ is the unbiased standard deviation and the IQR uses linearly interpolated quantiles. ``zero_iqr='sigma'``
    takes the σ̂ branch where IQR = 0 < σ̂. With n < 2 every bandwidth is 0 (degenerate).
    """
    if rule not in BANDWIDTH_RULES:
        raise ValueError(f"unknown bandwidth rule {rule!r}; allowed: {', '.join(BANDWIDTH_RULES)}")
    n = W.shape[0]
    if n < 2:
        return torch.zeros(W.shape[1:], dtype=W.dtype, device=W.device)
    sd = W.std(0)
    if rule == "scott":
        h = sd * n ** -0.2
    else:
        sorted_w = W.sort(0).values
        iqr = _quantile_sorted(sorted_w, 0.75) - _quantile_sorted(sorted_w, 0.25)
        if rule == "silverman_code":
            factor, spread = (0.75 * n) ** -0.2, torch.minimum(sd, iqr)
        else:
            factor, spread = 0.9 * n ** -0.2, torch.minimum(sd, iqr / 1.34)
        if zero_iqr == "sigma":
            spread = torch.where(iqr > 0, spread, sd)
        elif zero_iqr != "keep":
            raise ValueError(f"unknown zero_iqr {zero_iqr!r}; allowed: keep, sigma")
        h = factor * spread
    return h * scale


def weight_profile(u: torch.Tensor, kernel: str = "epanechnikov", profile: str = "kernel") -> torch.Tensor:
    """Mean-shift weights g(u) at scaled distances u = (x − W_ij)/h_j (§3.3, §3.5).

    ``kernel``: g = K up to its constant (Epanechnikov 1 − u² on |u| ≤ 1; Gaussian exp(−u²/2)).
    ``flat``: g = 1 on |u| ≤ 1 (Epanechnikov only), the exact mean-shift of the Epanechnikov KDE.
    """
    return _weights_(u.clone(), kernel, profile)


def _weights_(u: torch.Tensor, kernel: str, profile: str) -> torch.Tensor:
    """:func:`weight_profile` computed in place in ``u``'s storage."""
    if kernel == "gaussian":
        if profile != "kernel":
            raise ValueError("the Gaussian kernel has only the 'kernel' weight profile")
        return u.square_().mul_(-0.5).exp_()
    if kernel != "epanechnikov":
        raise ValueError(f"unknown kernel {kernel!r}; allowed: {', '.join(KERNELS)}")
    if profile == "flat":
        return u.abs_().le_(1.0)
    if profile != "kernel":
        raise ValueError(f"unknown weight profile {profile!r}; allowed: {', '.join(WEIGHT_PROFILES)}")
    return u.square_().neg_().add_(1.0).clamp_min_(0.0)


@dataclass
class MeanShiftStats:
    iterations: int = 0  # the most iterations any chunk needed
    pairs: int = 0  # (start, coordinate) pairs shifted
    unconverged: int = 0  # pairs still moving by more than τ after t_max iterations
    degenerate: int = 0  # coordinates left at their start (zero spread or zero/non-finite bandwidth)
    coordinates: int = 0

    def add(self, other: "MeanShiftStats") -> None:
        self.iterations = max(self.iterations, other.iterations)
        self.pairs += other.pairs
        self.unconverged += other.unconverged
        self.degenerate += other.degenerate
        self.coordinates += other.coordinates

    def as_dict(self) -> dict:
        return {"iterations": self.iterations,
                "unconverged_fraction": self.unconverged / self.pairs if self.pairs else 0.0,
                "degenerate_fraction": self.degenerate / self.coordinates if self.coordinates else 0.0}


def _shift_block(W: torch.Tensor, X: torch.Tensor, h: torch.Tensor, thr: torch.Tensor, movable: torch.Tensor,
                 kernel: str, profile: str, t_max: int, self_row: Optional[int] = None) -> tuple[torch.Tensor, int, int]:
    """Mean-shift the starts X ([M, k]) on the sample W ([S, k]); returns (modes, unconverged pairs, iterations).

    ``movable`` ([k]) marks non-degenerate coordinates; ``thr`` ([k]) is the stopping threshold. Every
    (start, coordinate) pair is one job with its own copy of its column of W, so a pair that has converged can
    be dropped: the working set is compacted whenever at most half of it is still moving, and later iterations
    only touch the moving pairs. With ``self_row`` (M = 1) row ``self_row`` of W is the iterate itself and is
    updated in W after every iteration (the authors' in-place quirk, §12 A4).
    """
    M, k = X.shape
    x = X.clone(memory_format=torch.contiguous_format)
    flat = x.view(-1)
    cols = movable.nonzero().squeeze(1)
    job = (torch.arange(M, device=X.device).unsqueeze(1) * k + cols.unsqueeze(0)).reshape(-1)
    col = cols.repeat(M)
    # jobs × S layout: each job's reduction runs over one contiguous row, so a job's result does not depend on
    # which other jobs share the tensor (chunking and compaction leave the numbers bit-for-bit unchanged)
    xa, wa, ha, ta = flat[job], W.t()[col], h[col], thr[col]
    active = torch.ones_like(xa, dtype=torch.bool)
    iterations = 0
    for _ in range(t_max):
        if job.numel() == 0:
            break
        iterations += 1
        g = _weights_((xa.unsqueeze(1) - wa).div_(ha.unsqueeze(1)), kernel, profile)  # [jobs, S]
        den = g.sum(1)
        num = g.mul_(wa).sum(1)
        new = torch.where(active & (den > 0), num / den, xa)
        active &= (new - xa).abs() > ta
        xa = new
        if self_row is not None:
            wa[:, self_row] = xa
        n_active = int(active.sum())
        if n_active <= job.numel() // 2:
            flat[job] = xa
            if self_row is not None:
                W[self_row, col] = xa
            keep = active.nonzero().squeeze(1)
            job, col, xa, wa, ha, ta, active = job[keep], col[keep], xa[keep], wa[keep], ha[keep], ta[keep], \
                active[keep]
    flat[job] = xa
    if self_row is not None:
        W[self_row, col] = xa
    return x, int(active.sum()), iterations


def _auto_chunk(S: int, M: int) -> int:
    return max(1, AUTO_CHUNK_ELEMENTS // max(1, S * M))


def mean_shift(W: torch.Tensor, start: torch.Tensor, h: torch.Tensor, kernel: str = "epanechnikov",
               tol: float = 1e-6, t_max: int = 100, chunk: int = 0, profile: str = "kernel",
               relative_tol: bool = False, stats: Optional[MeanShiftStats] = None) -> torch.Tensor:
    """Coordinate-wise mean-shift (Alg. 8) of ``start`` on the sample W ([S, d]) with bandwidths h ([d]).

    ``start`` is [d] (one start per coordinate, FedKP) or [M, d] (M starts per coordinate, FedKP_cm);
    the result has its shape. Coordinates with zero spread or a zero/non-finite bandwidth keep their
    start. ``chunk`` coordinates are processed at a time (0: automatic, ≤ 2^24 elements in the largest
    temporary); the result does not depend on it.
    """
    single = start.dim() == 1
    X = start.unsqueeze(0) if single else start
    S, d = W.shape
    M = X.shape[0]
    step = chunk if chunk > 0 else _auto_chunk(S, M)
    out = torch.empty_like(X)
    for lo in range(0, d, step):
        hi = min(lo + step, d)
        Wc, hc = W[:, lo:hi], h[lo:hi]
        movable = torch.isfinite(hc) & (hc > 0) & (Wc.amax(0) > Wc.amin(0))
        thr = tol * hc if relative_tol else torch.full_like(hc, tol)
        out[:, lo:hi], unconverged, iters = _shift_block(Wc, X[:, lo:hi], torch.where(movable, hc, 1.0), thr,
                                                         movable, kernel, profile, t_max)
        if stats is not None:
            stats.add(MeanShiftStats(iters, M * (hi - lo), unconverged, int((~movable).sum()), hi - lo))
    return out.squeeze(0) if single else out


def cluster_mean_shift_inplace(W: torch.Tensor, h: torch.Tensor, kernel: str = "epanechnikov", tol: float = 1e-6,
                               t_max: int = 100, profile: str = "kernel", relative_tol: bool = False,
                               stats: Optional[MeanShiftStats] = None) -> torch.Tensor:
    """The authors' FedKP_cm (§12 A4): client i's mean-shift runs on W with row i being its own iterate, rows
    1..i−1 already replaced by their modes; returns the mean of the S modes. Works on a copy of W."""
    W = W.t().contiguous().t()  # a copy, columns contiguous
    movable = torch.isfinite(h) & (h > 0) & (W.amax(0) > W.amin(0))
    hs = torch.where(movable, h, 1.0)
    thr = tol * hs if relative_tol else torch.full_like(hs, tol)
    total = MeanShiftStats(coordinates=W.shape[1], degenerate=int((~movable).sum()))
    for i in range(W.shape[0]):
        _, unconverged, iters = _shift_block(W, W[i:i + 1].clone(), hs, thr, movable, kernel, profile, t_max,
                                             self_row=i)
        total.add(MeanShiftStats(iters, W.shape[1], unconverged))
    if stats is not None:
        stats.add(total)
    return W.mean(0)


def fedkp_aggregate(rows: Sequence[torch.Tensor], *, cluster: bool = False, cluster_mode: str = "independent",
                    kernel: str = "epanechnikov", profile: str = "kernel", rule: str = "silverman_code",
                    scale: float = 1.0, zero_iqr: str = "keep", tol: float = 1e-6, relative_tol: bool = False,
                    t_max: int = 100, chunk_size: int = 0, mask: Optional[torch.Tensor] = None,
                    base: Optional[torch.Tensor] = None,
                    device: Optional[torch.device] = None) -> tuple[torch.Tensor, dict]:
    """FedKP (``cluster=False``, Alg. 9) or FedKP_cm (``cluster=True``, Alg. 10) of the client vectors ``rows``.

    With ``base`` the rows are deltas and the client vectors are ``base + row`` (formed chunk by chunk).
    W is never built whole: each chunk of coordinates is stacked from the rows, shifted and written out,
    so peak memory is the rows plus O(chunk·S·(S if clustered else 1)). Coordinates outside ``mask`` get the
    unweighted client mean. Returns (aggregate, diagnostics).
    """
    S = len(rows)
    d = rows[0].numel()
    out_device, dtype = rows[0].device, rows[0].dtype
    device = device or out_device
    out = torch.empty(d, dtype=dtype, device=out_device)
    stats = MeanShiftStats()
    positions = None if mask is None or bool(mask.all()) else mask.nonzero().squeeze(1)
    if positions is not None:
        rest = (~mask).nonzero().squeeze(1)
        W_rest = torch.stack([r[rest] for r in rows])
        if base is not None:
            W_rest += base[rest]
        out[rest] = W_rest.mean(0)
    n = d if positions is None else positions.numel()
    M = S if cluster and cluster_mode == "independent" else 1
    step = chunk_size if chunk_size > 0 else _auto_chunk(S, M)
    opts = dict(kernel=kernel, tol=tol, t_max=t_max, profile=profile, relative_tol=relative_tol, stats=stats)
    for lo in range(0, n, step):
        hi = min(lo + step, n)
        idx = slice(lo, hi) if positions is None else positions[lo:hi]
        # [chunk, S] in memory, used as its [S, chunk] view: every per-coordinate reduction (mean, σ̂, the
        # mean-shift sums, the mean of modes) runs over contiguous memory, so the result is bit-for-bit the
        # same whatever the chunk size
        Wt = torch.stack([r[idx] for r in rows], dim=1)
        if base is not None:
            Wt += base[idx].unsqueeze(1)
        Wc = Wt.to(device).t()
        h = bandwidths(Wc, rule, scale, zero_iqr)
        if not cluster:
            agg = mean_shift(Wc, Wc.mean(0), h, chunk=hi - lo, **opts)
        elif cluster_mode == "independent":
            agg = mean_shift(Wc, Wc, h, chunk=hi - lo, **opts).t().contiguous().mean(1)
        elif cluster_mode == "sequential_inplace":
            agg = cluster_mean_shift_inplace(Wc, h, **opts)
        else:
            raise ValueError(f"unknown cluster_mode {cluster_mode!r}")
        agg = torch.where(Wc.amax(0) == Wc.amin(0), Wc[0], agg)  # all clients agree: exactly their value
        out[idx] = agg.to(out_device)
    return out, stats.as_dict()


# ---------------------------------------------------------------------------------------------------------------
# Configuration
# ---------------------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class FedKPHyperparams:
    cluster: bool = spec(False, doc="Start a mean-shift at every client and average the S modes (FedKP_cm, "
                                    "Alg. 10) instead of one start at the client mean (FedKP, Alg. 9); §3.6.")
    cluster_mode: str = spec("independent", doc="FedKP_cm: independent shifts on the fixed sample (Alg. 10 as "
                                                "written) or sequential_inplace, the authors' code that "
                                                "overwrites each client's row of W with its iterate (§12 A4; "
                                                "matches the thesis code to 2e-16, so reproduction runs use it).",
                             choices=("independent", "sequential_inplace"))
    kernel: str = spec("epanechnikov", doc="K, the KDE kernel (§3.3): epanechnikov (thesis) or gaussian.",
                       choices=KERNELS)
    weight_profile: str = spec("kernel", doc="g, mean-shift weights (§3.5, §12 A6): kernel = K itself (Alg. 8, "
                                             "code; climbs the biweight KDE for Epanechnikov) or flat = 1 on "
                                             "|u| ≤ 1 (the Epanechnikov KDE's own mode; epanechnikov only).",
                               choices=WEIGHT_PROFILES)
    bandwidth_rule: str = spec("silverman_code", doc="Base bandwidth h_j per coordinate (§3.4, §12 A3): "
                                                     "silverman_code = (3n/4)^(−1/5)·min(σ̂, IQR) (what ran); "
                                                     "silverman_thesis = 0.9·min(σ̂, IQR/1.34)·n^(−1/5) (Eq. "
                                                     "2.21); scott = σ̂·n^(−1/5).", choices=BANDWIDTH_RULES)
    bandwidth_scaling: float = spec(1.0, doc="s, h_j ← s·h_j (§3.4, code `bandwidth_scaling`); thesis 1, "
                                             "Appendix C swept 0.01–10; s → ∞ recovers the client mean.", gt=0)
    zero_iqr: str = spec("keep", doc="Coordinates with IQR_j = 0 < σ̂_j under a Silverman rule (§3.4): keep = "
                                     "h_j = 0, the coordinate stays at its start (code); sigma = use the σ̂ "
                                     "branch (an addition).", choices=("keep", "sigma"))
    tol: float = spec(1e-6, doc="τ, mean-shift tolerance per coordinate (§3.5, §12 A5; code 1e-6, absolute).",
                      ge=0)
    tol_mode: str = spec("absolute", doc="absolute: stop at |Δx_j| ≤ τ (code); relative: |Δx_j| ≤ τ·h_j "
                                         "(§12 A5 option), which needs a relative tol such as 1e-3 (the "
                                         "default 1e-6 is the code's absolute value).",
                         choices=("absolute", "relative"))
    t_max: int = spec(100, doc="t_max, mean-shift iteration cap (§3.5, §12 A5): code default 100; Table 4.1 "
                               "says 20 (FedKP_cm on MNIST/EMNIST ran with 20).", ge=1)
    kde_tensors: str = spec("state", doc="Which flat-state entries are mean-shifted (§12 A7): state = every "
                                         "float entry incl. BatchNorm statistics (code); parameters = trainable "
                                         "parameters only, buffers get the client mean.",
                            choices=("state", "parameters"))
    use_server_optimizer: bool = spec(False, doc="Step θ_t + η_s·v, v = m_s·v + (θ_agg − θ_t), with server.lr "
                                                 "and server.momentum instead of θ_{t+1} = θ_agg (the thesis "
                                                 "code has no server optimiser for FedKP: §0 item 4, §12 A1).")
    chunk_size: int = spec(0, doc="Coordinates per chunk of the server computation (0 = automatic: at most "
                                  "2^24 elements in the S×chunk, or S×S×chunk for FedKP_cm, temporary).", ge=0)

    def validate(self, path: str) -> None:
        if self.kernel == "gaussian" and self.weight_profile == "flat":
            raise ConfigError(f"{path}.weight_profile" if path else "weight_profile",
                              "flat weights exist only for the epanechnikov kernel; use kernel")


@dataclass(frozen=True)
class FedKPCMHyperparams(FedKPHyperparams):
    cluster: bool = spec(True, doc="Start a mean-shift at every client and average the S modes (FedKP_cm, "
                                   "Alg. 10) instead of one start at the client mean (FedKP, Alg. 9); §3.6.")


@dataclass(frozen=True)
class FedKPPAHyperparams(FedPAClientOptions, FedKPCMHyperparams):
    """FedKP_cm's server options plus the FedPA client's (rho, burnin_rounds, sampler switches)."""


# ---------------------------------------------------------------------------------------------------------------
# The algorithms
# ---------------------------------------------------------------------------------------------------------------

@register
class FedKP(FedAvg):
    """FedAvg's clients; the server takes the mode (Alg. 9) or the mean of modes (Alg. 10) of θ_t + Δ_k."""

    heterogeneous_models = False  # one weight vector: every client must run the server's architecture
    metrics = (Metric("fedkp_iterations", "min", "mean-shift iterations used"),
               Metric("fedkp_unconverged_fraction", "min", "(start, coordinate) pairs still moving at t_max"),
               Metric("fedkp_degenerate_fraction", "min", "coordinates where every client agrees (zero IQR)"),
               Metric("fedkp_clients", "max", "clients in the kernel density estimate"))

    name = "fedkp"
    Hyperparams = FedKPHyperparams
    summable = False

    def __init__(self, hparams=None):
        super().__init__(hparams)
        self._mask: Optional[torch.Tensor] = None

    def kde_mask(self, ctx: ServerContext) -> Optional[torch.Tensor]:
        if self.hp.kde_tensors == "state":
            return None
        if self._mask is None:
            self._mask = parameter_mask(ctx.model)
        return self._mask

    def server_aggregate(self, start: torch.Tensor, deltas: Sequence[torch.Tensor],
                         ctx: ServerContext) -> tuple[torch.Tensor, dict]:
        """θ_agg from the client models ``start + delta_k``."""
        hp = self.hp
        return fedkp_aggregate(deltas, base=start, cluster=hp.cluster, cluster_mode=hp.cluster_mode,
                               kernel=hp.kernel, profile=hp.weight_profile, rule=hp.bandwidth_rule,
                               scale=hp.bandwidth_scaling, zero_iqr=hp.zero_iqr, tol=hp.tol,
                               relative_tol=hp.tol_mode == "relative", t_max=hp.t_max, chunk_size=hp.chunk_size,
                               mask=self.kde_mask(ctx), device=ctx.device)

    def aggregate(self, state: ServerState, updates: Sequence[ClientUpdate],
                  ctx: ServerContext) -> tuple[ServerState, dict]:
        if any(u.num_clients != 1 for u in updates):
            raise ValueError(f"{self.name} needs one update per client (summable = False), got a pre-reduced one")
        deltas = [u.tensors["delta"] for u in updates if u.weight > 0]
        if not deltas:
            return ServerState(weights=state.weights.clone(), optimizer=state.optimizer, extra=state.extra), \
                {"fedkp_clients": 0.0}
        agg, diagnostics = self.server_aggregate(state.weights, deltas, ctx)
        if self.hp.use_server_optimizer:
            weights, opt_state = server_step(state.weights, agg - state.weights, state.optimizer, ctx.server_lr,
                                             ctx.server_momentum)
        else:
            weights, opt_state = agg, state.optimizer
        metrics = {f"fedkp_{k}": float(v) for k, v in diagnostics.items()}
        metrics["fedkp_clients"] = float(len(deltas))
        return ServerState(weights=weights, optimizer=opt_state, extra=state.extra), metrics


@register
class FedKPCM(FedKP):
    name = "fedkp_cm"
    Hyperparams = FedKPCMHyperparams


@register
class FedKPPA(FedKP):
    """FedKP_cm on the server; SGD clients before round B, FedPA clients (Δ = −Δ_i, i.e. x0 − Δ_i) from B on."""

    name = "fedkppa"
    Hyperparams = FedKPPAHyperparams

    def client_stage_fields(self) -> dict:
        return fedpa_stage_fields(self.hp, weighting="data_size")

    def broadcast(self, state: ServerState, sampled_clients: Sequence[int]) -> dict:
        return {"weights": state.weights, "round": state.round}

    def client_update(self, payload: dict, client: ClientContext) -> ClientUpdate:
        if client.num_samples == 0 or in_burnin(self.hp, payload):
            return super().client_update(payload, client)
        delta, loss, metrics = fedpa_local(self.hp, payload, client)
        return ClientUpdate(weight=float(client.num_samples), tensors={"delta": -delta},
                            metrics={"train_loss": loss, **metrics})
