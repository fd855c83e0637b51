"""Per-round subset selection of the single-image pool (docs/methods/single_image.md §3), as pure functions over
tensors.

The server runs the current global model ``M_G`` once (eval mode) over the whole pool and hands the outputs here
(no model inside this module; §3.1):

* ``features`` [N, D]: penultimate embeddings ``z_i`` (after global average pooling);
* ``probs`` [N, C]: ``softmax(g(x_i))`` at temperature 1, no logit clipping. The pseudo-label is
  ``ŷ_i = argmax_n probs[i, n]`` (first maximum on ties) and the confidence ``conf_i = max_n probs[i, n]``.

Stages, in the method page's order (§3.4): :func:`kmeans_balance` first, then :func:`entropy_prune` on what it kept;
:func:`select_pool` combines them and reports the size after each stage. All outputs are sorted ``LongTensor``
indices into the pool; all tie-breaking is by pool index (stable sorts), so a selection is a pure function of
the inputs and the seed.

Sizes (N = pool size, s = final target, e = entropy rate):

* entropy pruning keeps ``Σ_c (n_c − floor(e · n_c))`` over predicted classes ``c`` (``n_c`` = class size);
* K-means balancing keeps exactly ``min(s_K, N)``;
* both on: ``s_K = floor(s / (1 − e))`` (paper/code sizing), so the final size is ≈ s;
  K-means only: ``s_K = s``; entropy only: final ≈ ``(1 − e)·N`` (set ``N = s/(1 − e)``).
  With the main configuration (N = 50,000, s = 5,000, e = 0.9) ``s_K = N`` and K-means is a provable no-op
  (§3.4, §8 A3): :func:`select_pool` then skips the fit, says so in its stats (``kmeans_noop``) and warns.
  ``kmeans_keep_ratio`` (``s_K = floor(ratio · N)``) makes K-means bite regardless of s and e.

Invalid hyper-parameters raise :class:`algorithms.errors.ConfigError` naming the config key
(``algorithm.entropy_rate``, ``algorithm.entropy_mode``, ``algorithm.kmeans_k``, ``algorithm.kmeans_factor``,
``algorithm.kmeans_variant``, ``algorithm.kmeans_mix``, ``algorithm.kmeans_keep_ratio``,
``algorithm.num_distill``); malformed tensors raise a plain ``ValueError``.

Pure PyTorch + numpy + scikit-learn (``KMeans``).
"""
from __future__ import annotations

import math
import warnings
from typing import Optional

import numpy as np
import torch

from algorithms.errors import ConfigError

__all__ = ["confidence_scores", "entropy_prune", "kmeans_balance", "kmeans_target_size", "select_pool",
           "ENTROPY_MODES", "KMEANS_VARIANTS", "KMEANS_N_INIT"]

ENTROPY_MODES = ("top", "bottom", "random")
KMEANS_VARIANTS = ("easy", "hard", "mixed")
#: K-means restarts: fixed to 1 as in the official code (docs/methods/single_image.md §3.2 [C], §5);
#: ``random_state`` = the seed.
KMEANS_N_INIT = 1
_EPS = 1e-9  # guards floor() against binary rounding (0.29·100 = 28.999…); exact for N up to ~1e6


def _floor(x: float) -> int:
    return int(math.floor(x + _EPS))


def _check_probs(probs: torch.Tensor, name: str = "probs") -> torch.Tensor:
    if not isinstance(probs, torch.Tensor) or probs.ndim != 2 or probs.shape[1] < 1:
        raise ValueError(f"{name} must be a [N, C] tensor, got "
                         f"{tuple(probs.shape) if isinstance(probs, torch.Tensor) else type(probs).__name__}")
    return probs.detach()


def _check_rate(rate) -> float:
    try:
        e = float(rate)
    except (TypeError, ValueError):
        raise ConfigError("algorithm.entropy_rate", f"must be a number in [0, 1), got {rate!r}") from None
    if not 0.0 <= e < 1.0:
        raise ConfigError("algorithm.entropy_rate", f"the fraction removed must be in [0, 1), got {rate!r}")
    return e


def confidence_scores(logits: torch.Tensor, score: str = "maxprob") -> torch.Tensor:
    """Per-crop confidence [N] from raw logits (docs/methods/single_image.md §3.3, §8 A2); higher = more
    confident.

    ``maxprob`` (default, the code's and Alg. 3's): ``max softmax``; ``maxlogit`` (Eq. 4 as written): the max
    logit; ``entropy``: the negated Shannon entropy of the softmax (true entropy; low entropy = confident).
    Pass the result as ``confidence=`` to :func:`entropy_prune` / :func:`select_pool`.
    """
    logits = _check_probs(logits, "logits").double()
    if score == "maxprob":
        return torch.softmax(logits, dim=1).max(dim=1).values
    if score == "maxlogit":
        return logits.max(dim=1).values
    if score == "entropy":
        logp = torch.log_softmax(logits, dim=1)
        return (logp.exp() * logp).sum(dim=1)
    raise ConfigError("algorithm.entropy_score", f"unknown score {score!r}; allowed: maxprob, maxlogit, entropy")


def entropy_prune(probs: torch.Tensor, rate: float, mode: str = "top",
                  generator: Optional[torch.Generator] = None, *, confidence: Optional[torch.Tensor] = None,
                  random_with_replacement: bool = False) -> torch.Tensor:
    """Entropy ("confidence") pruning, per predicted class (docs/methods/single_image.md §3.3, Eq. 4 / Alg. 3).
    Returns kept indices.

    For every predicted class ``c`` with ``n_c`` members, remove ``r_c = floor(e · n_c)`` of them and keep
    ``n_c − r_c``; in total exactly ``Σ_c (n_c − floor(e · n_c))`` indices are kept (slightly above
    ``(1 − e)·N`` because of the per-class floors; a class with ``e·n_c < 1`` loses nothing).

    * ``top`` (the paper's choice): remove the ``r_c`` **most** confident (lowest-entropy) crops, keep the most
      uncertain ones;
    * ``bottom``: remove the ``r_c`` least confident;
    * ``random``: remove ``r_c`` uniformly random crops, without replacement, drawn from ``generator``
      (``torch.randperm`` per class, classes in ascending order). ``random_with_replacement=True`` reproduces
      the official code, which draws ``r_c`` indices *with* replacement and so may remove fewer.

    The confidence is ``max_n probs`` unless ``confidence`` [N] is given (e.g. from :func:`confidence_scores`);
    pseudo-labels always come from ``argmax probs``. Ties are broken by pool index. ``e`` must be in [0, 1)
    (``ConfigError`` on ``algorithm.entropy_rate``).
    """
    probs = _check_probs(probs)
    e = _check_rate(rate)
    if mode not in ENTROPY_MODES:
        raise ConfigError("algorithm.entropy_mode", f"unknown mode {mode!r}; allowed: {', '.join(ENTROPY_MODES)}")
    n = probs.shape[0]
    conf = probs.max(dim=1).values if confidence is None else confidence.detach().reshape(-1)
    if conf.shape[0] != n:
        raise ValueError(f"confidence must have {n} entries, got {conf.shape[0]}")
    conf = conf.cpu().double()
    labels = probs.argmax(dim=1).cpu()
    if mode == "random" and generator is None:
        raise ValueError("entropy_prune(mode='random') needs a torch.Generator")
    keep = torch.ones(n, dtype=torch.bool)
    for c in torch.unique(labels).tolist():  # ascending
        members = torch.nonzero(labels == c, as_tuple=False).reshape(-1)
        n_c = members.numel()
        r_c = _floor(e * n_c)
        if r_c == 0:
            continue
        if mode == "random":
            if random_with_replacement:
                drop = members[torch.randint(n_c, (r_c,), generator=generator)]
            else:
                drop = members[torch.randperm(n_c, generator=generator)[:r_c]]
        else:
            order = torch.sort(conf[members], descending=(mode == "top"), stable=True).indices
            drop = members[order[:r_c]]
        keep[drop] = False
    return torch.nonzero(keep, as_tuple=False).reshape(-1)


def _split_counts(q: int, variant: str, mix_easy_pct: float, easy_bug: bool) -> tuple[int, int]:
    """(n_easy, n_hard) for a quota ``q``: smallest-distance and largest-distance picks."""
    if variant == "hard":
        return 0, q
    if variant == "easy" and not easy_bug:
        return q, 0
    pct_hard = 50.0 if variant == "easy" else 100.0 - mix_easy_pct  # the code's easy bug = mixed 50-50
    n_hard = _floor(q * pct_hard / 100.0)
    return q - n_hard, n_hard


def _pick(order: torch.Tensor, n_easy: int, n_hard: int) -> torch.Tensor:
    """Positions from ``order`` (ascending distance): the first ``n_easy`` ∪ the last ``n_hard`` (may overlap)."""
    m = order.numel()
    first = order[:min(n_easy, m)]
    last = order[m - min(n_hard, m):] if n_hard > 0 else order[:0]
    return torch.unique(torch.cat([first, last]))


def kmeans_target_size(pool_size: int, num_distill: Optional[int], entropy_rate: Optional[float],
                       keep_ratio: Optional[float] = None) -> int:
    """``s_K``, the K-means stage's output size (docs/methods/single_image.md §3.4), capped at ``pool_size``.

    ``keep_ratio`` given: ``floor(keep_ratio · N)`` (the explicit knob for studies of K-means itself).
    Otherwise the paper/code sizing: ``floor(s / (1 − e))`` with entropy pruning on (``e > 0``), else ``s``.
    ``s_K ≥ N`` means K-means keeps everything (a no-op).
    """
    if keep_ratio is not None:
        r = float(keep_ratio)
        if not 0.0 < r <= 1.0:
            raise ConfigError("algorithm.kmeans_keep_ratio", f"must be in (0, 1], got {keep_ratio!r}")
        return min(pool_size, max(1, _floor(r * pool_size)))
    if num_distill is None or isinstance(num_distill, bool) or int(num_distill) < 1:
        raise ConfigError("algorithm.num_distill", f"the selected size s must be an integer ≥ 1, got {num_distill!r}")
    e = _check_rate(entropy_rate or 0.0)
    s_k = _floor(int(num_distill) / (1.0 - e)) if e > 0 else int(num_distill)
    return min(pool_size, s_k)


def kmeans_balance(features: torch.Tensor, probs: torch.Tensor, k: int, f_k: float = 1.0, variant: str = "hard",
                   keep_ratio: Optional[float] = None, seed: int = 0, easy_bug: bool = False, *,
                   size: Optional[int] = None, mix_easy_pct: float = 50.0, max_iter: int = 300) -> torch.Tensor:
    """K-means based class balancing (docs/methods/single_image.md §3.2, Eq. 1–3, Alg. 2). Returns
    ``min(s_K, N)`` kept indices.

    Output size ``s_K``: ``size`` if given, else ``floor(keep_ratio · N)``. Paper sizing (§3.4): the caller
    passes ``size = floor(s / (1 − e))`` when entropy pruning follows (``s`` alone without it) — with the main
    configuration that equals N and this stage is a no-op; use ``keep_ratio`` < 1 (``kmeans_keep_ratio``) or a
    pool larger than ``s/(1 − e)`` for K-means to matter (:func:`select_pool` does this bookkeeping).

    1. Fit sklearn ``KMeans(k, n_init=1, random_state=seed)`` on all ``features`` (float64); ``d_i`` = Euclidean
       distance of ``z_i`` to its own centroid (Eq. 1, in embedding space). Skipped when ``s_K ≥ N``
       (provably nothing to choose; K is still validated).
    2. ``C`` = number of distinct **predicted** classes (argmax probs), not the dataset's class count.
    3. Per-class lower bound ``LB = floor(s_K / C · F^K)``.
    4. Per predicted class (members sorted by ``d`` ascending, ties by index): ``hard`` takes the ``LB``
       largest-``d`` crops (Eq. 3 with ``≥`` at the boundary, §8 A26), ``easy`` the ``LB`` smallest (Eq. 2),
       ``mixed`` ``LB − floor(LB·(100−a)/100)`` smallest ∪ ``floor(LB·(100−a)/100)`` largest with ``a =
       mix_easy_pct`` (default 50-50). A class with fewer than LB members gives what it has (for ``mixed``,
       overlapping easy/hard picks count once, so it may give fewer, as in the code).
    5. Global fill: the remaining ``s_K − |selected|`` slots come from all leftover crops with the same
       heuristic on ``d``, ignoring classes.

    ``easy_bug=True`` replicates the official code's "easy" (§3.2 [C], §8 A4): per quota ``q`` it takes
    ``ceil(q/2)`` smallest + ``floor(q/2)`` largest, i.e. ``easy`` behaves exactly like ``mixed`` 50-50. The
    default implements easy correctly as (100, 0). ``K > N`` raises ``ConfigError`` (``algorithm.kmeans_k``).
    """
    features = features.detach() if isinstance(features, torch.Tensor) else torch.as_tensor(features)
    probs = _check_probs(probs)
    n = probs.shape[0]
    if features.ndim != 2 or features.shape[0] != n:
        raise ValueError(f"features must be [N={n}, D], got {tuple(features.shape)}")
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1:
        raise ConfigError("algorithm.kmeans_k", f"the number of clusters must be an integer ≥ 1, got {k!r}")
    if k > n:
        raise ConfigError("algorithm.kmeans_k", f"K = {k} clusters is more than the {n} crops it clusters")
    f = float(f_k)
    if not 0.0 <= f <= 1.0:
        raise ConfigError("algorithm.kmeans_factor", f"the balancing factor F^K must be in [0, 1], got {f_k!r}")
    if variant not in KMEANS_VARIANTS:
        raise ConfigError("algorithm.kmeans_variant",
                          f"unknown heuristic {variant!r}; allowed: {', '.join(KMEANS_VARIANTS)}")
    if not 0.0 <= float(mix_easy_pct) <= 100.0:
        raise ConfigError("algorithm.kmeans_mix", f"the easy share must be in [0, 100] %, got {mix_easy_pct!r}")
    if size is not None:
        if isinstance(size, bool) or int(size) < 1:
            raise ConfigError("algorithm.num_distill", f"the K-means output size must be ≥ 1, got {size!r}")
        s_k = min(int(size), n)
    elif keep_ratio is not None:
        s_k = kmeans_target_size(n, None, None, keep_ratio)
    else:
        raise ValueError("kmeans_balance needs keep_ratio or size (s_K)")
    if s_k >= n:
        return torch.arange(n)

    from sklearn.cluster import KMeans

    z = features.cpu().double().numpy()
    km = KMeans(n_clusters=int(k), n_init=KMEANS_N_INIT, random_state=int(seed), max_iter=int(max_iter))
    assign = km.fit_predict(z)
    dist = torch.from_numpy(np.linalg.norm(z - km.cluster_centers_[assign], axis=1))
    return _balance_from_distances(dist, probs.argmax(dim=1).cpu(), s_k, f, variant, easy_bug,
                                   float(mix_easy_pct))


def _balance_from_distances(dist: torch.Tensor, labels: torch.Tensor, s_k: int, f: float, variant: str,
                            easy_bug: bool, mix_easy_pct: float) -> torch.Tensor:
    """Steps 2–5 of :func:`kmeans_balance` given the distances ``d_i`` and pseudo-labels."""
    n = dist.numel()
    classes = torch.unique(labels).tolist()
    lb = _floor(s_k / len(classes) * f)
    selected = torch.zeros(n, dtype=torch.bool)
    if lb > 0:
        n_easy, n_hard = _split_counts(lb, variant, mix_easy_pct, easy_bug)
        for c in classes:
            members = torch.nonzero(labels == c, as_tuple=False).reshape(-1)
            order = members[torch.sort(dist[members], stable=True).indices]
            selected[_pick(order, n_easy, n_hard)] = True
    rest = s_k - int(selected.sum())
    if rest > 0:
        left = torch.nonzero(~selected, as_tuple=False).reshape(-1)
        order = left[torch.sort(dist[left], stable=True).indices]
        n_easy, n_hard = _split_counts(rest, variant, mix_easy_pct, easy_bug)
        selected[_pick(order, n_easy, n_hard)] = True
    return torch.nonzero(selected, as_tuple=False).reshape(-1)


def select_pool(probs: torch.Tensor, features: Optional[torch.Tensor] = None, *, num_distill: Optional[int] = None,
                entropy_rate: float = 0.0, entropy_mode: str = "top", kmeans: bool = False, kmeans_k: int = 1000,
                kmeans_factor: float = 1.0, kmeans_variant: str = "hard", kmeans_keep_ratio: Optional[float] = None,
                easy_bug: bool = False, mix_easy_pct: float = 50.0, seed: int = 0,
                generator: Optional[torch.Generator] = None, confidence: Optional[torch.Tensor] = None,
                random_with_replacement: bool = False) -> tuple[torch.Tensor, dict]:
    """One round's selection (docs/methods/single_image.md §3.4): K-means balancing (if ``kmeans``), then entropy
    pruning (if e > 0).

    Returns sorted pool indices and ``{"pool": N, "kmeans_target": s_K or None, "kmeans_noop": bool,
    "after_kmeans": size, "after_entropy": size, "selected": final size}`` for metrics.

    * Both stages: ``s_K = floor(s / (1 − e))`` (``num_distill`` = s), or ``floor(kmeans_keep_ratio · N)``; then
      per-class ``floor(e·n_c)`` removal on the K-means subset (pseudo-labels/confidences of those crops).
    * K-means only: ``s_K = s`` (or the keep ratio); entropy only: pruning of the whole pool (``s`` unused;
      final ≈ (1 − e)·N); neither: the whole pool.
    * When ``s_K ≥ N`` K-means is skipped (provable no-op), ``kmeans_noop`` is True and a ``UserWarning`` says
      so — the main configuration (N = 50k, s = 5k, e = 0.9) is such a case (§3.4, §8 A3).

    ``generator`` drives ``entropy_mode='random'``; when None one is seeded from ``seed``. ``seed`` is also
    K-means' ``random_state`` (the same every round, as in the code).
    """
    probs = _check_probs(probs)
    n = probs.shape[0]
    e = _check_rate(entropy_rate)
    stats = {"pool": n, "kmeans_target": None, "kmeans_noop": False}
    idx = torch.arange(n)
    if kmeans:
        if features is None:
            raise ValueError("select_pool(kmeans=True) needs the embeddings (features)")
        s_k = kmeans_target_size(n, num_distill, e, kmeans_keep_ratio)
        stats["kmeans_target"] = s_k
        if s_k >= n:
            stats["kmeans_noop"] = True
            warnings.warn(f"K-means class balancing is a no-op: its target s_K = {s_k} covers the whole pool of {n} "
                          "crops (s_K = floor(s / (1 − e)), docs/methods/single_image.md §3.4); set "
                          "algorithm.kmeans_keep_ratio < 1 or a larger pool for it to select anything",
                          UserWarning, stacklevel=2)
        idx = kmeans_balance(features, probs, kmeans_k, kmeans_factor, kmeans_variant, seed=seed,
                             easy_bug=easy_bug, size=s_k, mix_easy_pct=mix_easy_pct)
    stats["after_kmeans"] = int(idx.numel())
    if e > 0:
        if generator is None:
            generator = torch.Generator().manual_seed(int(seed))
        sub_conf = None if confidence is None else confidence.detach().reshape(-1).cpu()[idx]
        kept = entropy_prune(probs[idx.to(probs.device)], e, entropy_mode, generator, confidence=sub_conf,
                             random_with_replacement=random_with_replacement)
        idx = idx[kept]
    elif entropy_mode not in ENTROPY_MODES:
        raise ConfigError("algorithm.entropy_mode",
                          f"unknown mode {entropy_mode!r}; allowed: {', '.join(ENTROPY_MODES)}")
    stats["after_entropy"] = int(idx.numel())
    stats["selected"] = int(idx.numel())
    return idx, stats
