"""Single-image pool (docs/methods/single_image.md §2.2) and per-round pruning (§3.2–3.4): determinism, sizes,
quotas."""
from __future__ import annotations

import hashlib
import subprocess
import sys
import warnings
from collections import Counter
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
import torch

from algorithms.common.patch_pool import make_patch_pool, pool_to_float
from algorithms.common.pruning import (confidence_scores, entropy_prune, kmeans_balance, kmeans_target_size,
                                       select_pool)
from algorithms.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]

# Built identically in this process and in the subprocess (seeded noise plus gradients, 256×256×3 uint8).
_IMAGE_CODE = (
    "import numpy as np\n"
    "def synthetic_image():\n"
    "    rng = np.random.default_rng(1234)\n"
    "    y, x = np.mgrid[0:256, 0:256]\n"
    "    grad = np.stack([x, y, (x + y) // 2], axis=-1).astype(np.int64)\n"
    "    noise = rng.integers(0, 64, size=(256, 256, 3))\n"
    "    return ((grad + noise) % 256).astype(np.uint8)\n"
)
_ns: dict = {}
exec(_IMAGE_CODE, _ns)
synthetic_image = _ns["synthetic_image"]


def _hash(pool: torch.Tensor) -> str:
    return hashlib.sha256(pool.contiguous().numpy().tobytes()).hexdigest()


# --- patch pool --------------------------------------------------------------------------------------------

def test_pool_shape_dtype_and_same_seed_identical():
    img = synthetic_image()
    a = make_patch_pool(img, 48, 32, seed=7)
    b = make_patch_pool(img, 48, 32, seed=7)
    assert a.dtype == torch.uint8 and a.shape == (48, 3, 32, 32)
    assert torch.equal(a, b)
    assert not torch.equal(a, make_patch_pool(img, 48, 32, seed=8))
    # channels-first tensor input gives the same pool as channels-last numpy
    assert torch.equal(a, make_patch_pool(torch.from_numpy(img).permute(2, 0, 1), 48, 32, seed=7))
    # prefix-stable: a smaller pool is the head of a larger one
    assert torch.equal(a[:20], make_patch_pool(img, 20, 32, seed=7))
    # crops are not all the same and not blank
    assert len({_hash(p) for p in a}) == 48 and a.float().std() > 10


def test_pool_bit_identical_across_processes():
    code = _IMAGE_CODE + (
        "import hashlib\n"
        "from algorithms.common.patch_pool import make_patch_pool\n"
        "p = make_patch_pool(synthetic_image(), 48, 32, seed=7)\n"
        "print(hashlib.sha256(p.contiguous().numpy().tobytes()).hexdigest())\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == _hash(make_patch_pool(synthetic_image(), 48, 32, seed=7))


def test_pool_options_and_normalisation():
    img = synthetic_image()
    p = make_patch_pool(img, 8, 28, seed=3, hflip=True, jitter_p=1.0, jpeg_quality=90)
    assert p.shape == (8, 3, 28, 28) and p.dtype == torch.uint8
    # a float [0, 1] 3×H×W image (the platform's load_source_image format) works too
    fimg = torch.from_numpy(img).permute(2, 0, 1).float() / 255.0
    assert torch.equal(make_patch_pool(fimg, 4, 32, seed=1), make_patch_pool(img, 4, 32, seed=1))
    x = pool_to_float(p, (0.5, 0.5, 0.5), (0.25, 0.25, 0.25))
    assert x.dtype == torch.float32 and x.shape == p.shape
    assert torch.allclose(x, (p.float() / 255 - 0.5) / 0.25)
    g = pool_to_float(p, 0.5, 0.5, grayscale=True)
    assert g.shape == (8, 1, 28, 28)


@pytest.mark.parametrize("kwargs, field", [
    ({"size": 0}, "public.size"),
    ({"size": -3}, "public.size"),
    ({"size": 2.5}, "public.size"),
    ({"size": 4, "out_size": 300}, "public.patch_size"),
    ({"size": 4, "out_size": 0}, "public.patch_size"),
    ({"size": 4, "scale": (0.0, 1.0)}, "public.patches.scale"),
    ({"size": 4, "jitter_p": 1.5}, "public.patches.jitter_p"),
    ({"size": 4, "rot_deg": -1}, "public.patches.rot_deg"),
    ({"size": 4, "init_crop": 0.0}, "public.patches.init_crop"),
    ({"size": 4, "jpeg_quality": 0}, "public.patches.jpeg_quality"),
    ({"size": 4, "blur": True}, "public.patches"),
])
def test_pool_bad_inputs(kwargs, field):
    with pytest.raises(ConfigError) as err:
        make_patch_pool(synthetic_image(), **kwargs)
    assert err.value.field == field and str(err.value).startswith(field + ":")


def test_pool_bad_image():
    with pytest.raises(ConfigError) as err:
        make_patch_pool(np.zeros((5, 64, 64), dtype=np.uint8), 4, 32, seed=0)
    assert err.value.field == "public.image"


# --- entropy pruning ---------------------------------------------------------------------------------------

def _random_probs(n: int, c: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(n, c, generator=g) * 3
    return torch.softmax(logits, dim=1)


def _expected_kept(labels: torch.Tensor, rate: float) -> int:
    e = Fraction(str(rate))
    return sum(n_c - int(e * n_c) for n_c in Counter(labels.tolist()).values())  # Σ_c n_c − floor(e n_c)


@pytest.mark.parametrize("n", [1, 7, 100, 1013, 5555])
@pytest.mark.parametrize("rate", [0.0, 0.1, 0.29, 0.5, 0.9, 0.99])
@pytest.mark.parametrize("mode", ["top", "bottom", "random"])
def test_entropy_prune_sizes(n, rate, mode):
    probs = _random_probs(n, 10, seed=n)
    kept = entropy_prune(probs, rate, mode, torch.Generator().manual_seed(0))
    assert kept.dtype == torch.long and kept.numel() == _expected_kept(probs.argmax(1), rate)
    assert torch.equal(kept, torch.unique(kept))  # sorted, no duplicates


@pytest.mark.parametrize("mode", ["top", "bottom"])
def test_entropy_prune_removes_the_right_end_per_class(mode):
    probs = _random_probs(2000, 5, seed=3)
    kept = entropy_prune(probs, 0.7, mode)
    labels, conf = probs.argmax(1), probs.max(1).values
    mask = torch.zeros(2000, dtype=torch.bool)
    mask[kept] = True
    for c in range(5):
        k, r = conf[mask & (labels == c)], conf[~mask & (labels == c)]
        if mode == "top":  # most confident removed: every kept crop is less confident than every removed one
            assert k.max() <= r.min()
        else:
            assert k.min() >= r.max()


def test_entropy_prune_random_is_seeded_and_scores_override():
    probs = _random_probs(500, 4, seed=1)
    a = entropy_prune(probs, 0.5, "random", torch.Generator().manual_seed(5))
    b = entropy_prune(probs, 0.5, "random", torch.Generator().manual_seed(5))
    c = entropy_prune(probs, 0.5, "random", torch.Generator().manual_seed(6))
    assert torch.equal(a, b) and not torch.equal(a, c)
    # with replacement (the official code) removes at most floor(e n_c)
    d = entropy_prune(probs, 0.5, "random", torch.Generator().manual_seed(5), random_with_replacement=True)
    assert d.numel() >= a.numel()
    logits = torch.log(probs)
    for score in ("maxprob", "maxlogit", "entropy"):
        kept = entropy_prune(probs, 0.5, "top", confidence=confidence_scores(logits, score))
        assert kept.numel() == _expected_kept(probs.argmax(1), 0.5)
    assert torch.equal(entropy_prune(probs, 0.5, "top", confidence=confidence_scores(logits, "maxprob")),
                       entropy_prune(probs, 0.5, "top"))


@pytest.mark.parametrize("rate", [1.0, -0.1, 1.5, "x"])
def test_entropy_rate_validated(rate):
    with pytest.raises(ConfigError) as err:
        entropy_prune(_random_probs(10, 3, 0), rate, "top")
    assert err.value.field == "algorithm.entropy_rate"


def test_entropy_mode_validated():
    with pytest.raises(ConfigError) as err:
        entropy_prune(_random_probs(10, 3, 0), 0.5, "middle")
    assert err.value.field == "algorithm.entropy_mode"


# --- K-means class balancing -------------------------------------------------------------------------------

def _clusters():
    """Three well-separated 2-D blobs = three predicted classes (A: 40 far-spread, B: 30 tight, C: 4 tight).

    Distances to the own centroid: A's are ≥ ~2, B's and C's ≤ ~1, so the global fill's source is known.
    Probabilities have 10 columns but only 3 classes are predicted (C = 3 in LB, spec §8 A5).
    """
    rng = np.random.default_rng(0)

    def blob(center, n, r_lo, r_hi):
        r = rng.uniform(r_lo, r_hi, n)
        t = rng.uniform(0, 2 * np.pi, n)
        pts = np.stack([r * np.cos(t), r * np.sin(t)], 1)
        return pts - pts.mean(0) + center  # centroid exactly at the centre

    feats = np.concatenate([blob((0, 0), 40, 3.0, 10.0), blob((1000, 0), 30, 0.1, 1.0),
                            blob((0, 1000), 4, 0.1, 1.0)])
    labels = torch.tensor([0] * 40 + [4] * 30 + [7] * 4)
    probs = torch.softmax(8.0 * torch.nn.functional.one_hot(labels, 10).double(), dim=1)
    centres = np.array([feats[:40].mean(0), feats[40:70].mean(0), feats[70:].mean(0)])
    owner = np.array([0] * 40 + [1] * 30 + [2] * 4)
    dist = np.linalg.norm(feats - centres[owner], axis=1)
    return torch.from_numpy(feats), probs, labels, dist


def _counts(idx, labels):
    c = Counter(labels[idx].tolist())
    return c[0], c[4], c[7]


def test_kmeans_hard_quotas_eq_1_3():
    feats, probs, labels, dist = _clusters()
    # s_K = 30, F = 1, C = 3 -> LB = 10: A 10, B 10, C 4 (all it has) = 24; fill 6 largest-d leftovers (all A)
    idx = kmeans_balance(feats, probs, k=3, f_k=1.0, variant="hard", seed=0, size=30)
    assert idx.numel() == 30 and _counts(idx, labels) == (16, 10, 4)
    # the 10 B picks are B's 10 largest distances (Eq. 3 with >= at the boundary)
    b_sel = sorted(i for i in idx.tolist() if labels[i] == 4)
    assert b_sel == sorted((40 + np.argsort(dist[40:70])[-10:]).tolist())
    # A ends with its 16 largest (10 by quota + 6 by fill)
    a_sel = sorted(i for i in idx.tolist() if labels[i] == 0)
    assert a_sel == sorted(np.argsort(dist[:40])[-16:].tolist())
    # F = 0.5 -> LB = floor(30/3 * 0.5) = 5: A 5, B 5, C 4 = 14; fill 16 from A
    idx = kmeans_balance(feats, probs, 3, 0.5, "hard", seed=0, size=30)
    assert _counts(idx, labels) == (21, 5, 4)
    # F = 0: no class quota, pure global hard selection -> the 30 largest distances, all in A
    idx = kmeans_balance(feats, probs, 3, 0.0, "hard", seed=0, size=30)
    assert _counts(idx, labels) == (30, 0, 0)
    # keep_ratio sizing: s_K = floor(0.5 * 74) = 37 -> LB = 12: A 12, B 12, C 4 = 28, fill 9 from A
    idx = kmeans_balance(feats, probs, 3, 1.0, "hard", keep_ratio=0.5, seed=0)
    assert idx.numel() == 37 and _counts(idx, labels) == (21, 12, 4)


def test_kmeans_easy_and_mixed():
    feats, probs, labels, dist = _clusters()
    # easy (correct, (100, 0)): 10 smallest per class (C: 4), fill 6 smallest leftovers -> from B (d <= 1 < A's)
    easy = kmeans_balance(feats, probs, 3, 1.0, "easy", seed=0, size=30)
    assert _counts(easy, labels) == (10, 16, 4)
    a_sel = sorted(i for i in easy.tolist() if labels[i] == 0)
    assert a_sel == sorted(np.argsort(dist[:40])[:10].tolist())
    # mixed 50-50: per class 5 smallest + 5 largest (C's 4 overlap: counted once); fill 3 smallest (B) + 3
    # largest (A) leftovers
    mixed = kmeans_balance(feats, probs, 3, 1.0, "mixed", seed=0, size=30)
    assert _counts(mixed, labels) == (13, 13, 4)
    a_sel = set(i for i in mixed.tolist() if labels[i] == 0)
    order = np.argsort(dist[:40])
    assert set(order[:5].tolist()) <= a_sel and set(order[-8:].tolist()) <= a_sel


def test_kmeans_easy_bug_switch():
    """The code's easy = ceil(q/2) smallest + floor(q/2) largest, i.e. exactly mixed 50-50 (spec §3.2 [C])."""
    feats, probs, labels, _ = _clusters()
    correct = kmeans_balance(feats, probs, 3, 1.0, "easy", seed=0, size=30)
    bugged = kmeans_balance(feats, probs, 3, 1.0, "easy", seed=0, size=30, easy_bug=True)
    mixed = kmeans_balance(feats, probs, 3, 1.0, "mixed", seed=0, size=30)
    assert not torch.equal(correct, bugged) and torch.equal(bugged, mixed)
    assert bugged.numel() == correct.numel() == 30
    # hard is unaffected by the switch
    assert torch.equal(kmeans_balance(feats, probs, 3, 1.0, "hard", seed=0, size=30, easy_bug=True),
                       kmeans_balance(feats, probs, 3, 1.0, "hard", seed=0, size=30))
    # odd quota: s_K = 33 -> LB = 11 -> 6 smallest + 5 largest per class
    odd = kmeans_balance(feats, probs, 3, 1.0, "easy", seed=0, size=33, easy_bug=True)
    assert odd.numel() == 33


def test_kmeans_noop_and_validation():
    feats, probs, _, _ = _clusters()
    assert torch.equal(kmeans_balance(feats, probs, 3, 1.0, "hard", seed=0, size=74), torch.arange(74))
    assert torch.equal(kmeans_balance(feats, probs, 3, 1.0, "hard", keep_ratio=1.0, seed=0), torch.arange(74))
    cases = [({"k": 75}, "algorithm.kmeans_k"), ({"k": 0}, "algorithm.kmeans_k"),
             ({"f_k": 1.5}, "algorithm.kmeans_factor"), ({"variant": "medium"}, "algorithm.kmeans_variant"),
             ({"keep_ratio": 0.0, "size": None}, "algorithm.kmeans_keep_ratio"),
             ({"mix_easy_pct": 120}, "algorithm.kmeans_mix")]
    for kw, field in cases:
        args = dict(k=3, f_k=1.0, variant="hard", seed=0, size=30)
        args.update(kw)
        with pytest.raises(ConfigError) as err:
            kmeans_balance(feats, probs, **args)
        assert err.value.field == field
    # K > pool is rejected even when the fit would be skipped
    with pytest.raises(ConfigError, match="algorithm.kmeans_k"):
        kmeans_balance(feats, probs, 100, 1.0, "hard", seed=0, size=74)


# --- both stages -------------------------------------------------------------------------------------------

def test_kmeans_target_size_paper_sizing():
    assert kmeans_target_size(50_000, 5_000, 0.9) == 50_000   # main config: the whole pool (no-op)
    assert kmeans_target_size(100_000, 10_000, 0.5) == 20_000  # Table 7
    assert kmeans_target_size(25_000, 5_000, 0.0) == 5_000     # Table 8: K-means only
    assert kmeans_target_size(50_000, 5_000, 0.9, keep_ratio=0.2) == 10_000
    with pytest.raises(ConfigError, match="algorithm.kmeans_keep_ratio"):
        kmeans_target_size(100, 10, 0.5, keep_ratio=1.5)


def test_select_pool_stage_sizes():
    n = 1000
    probs = _random_probs(n, 10, seed=11)
    feats = torch.randn(n, 8, generator=torch.Generator().manual_seed(2))
    # main-config analogue (N = s/(1 − e)): K-means is a no-op and says so; result = entropy-only pruning
    with pytest.warns(UserWarning, match="no-op"):
        idx, st = select_pool(probs, feats, num_distill=100, entropy_rate=0.9, kmeans=True, kmeans_k=20)
    assert st["kmeans_noop"] and st["after_kmeans"] == n
    assert torch.equal(idx, entropy_prune(probs, 0.9, "top"))
    assert st["after_entropy"] == st["selected"] == _expected_kept(probs.argmax(1), 0.9)
    # Table 7 analogue: K-means to floor(s/(1 − e)) = 400, then entropy 50 % of those
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        idx, st = select_pool(probs, feats, num_distill=200, entropy_rate=0.5, kmeans=True, kmeans_k=20, seed=3)
    assert st["kmeans_target"] == st["after_kmeans"] == 400 and not st["kmeans_noop"]
    assert idx.numel() == st["selected"] >= 200 and idx.numel() <= 200 + 10
    # K-means only (Table 8 analogue) and keep_ratio
    idx, st = select_pool(probs, feats, num_distill=150, kmeans=True, kmeans_k=20)
    assert idx.numel() == st["after_kmeans"] == st["selected"] == 150
    idx, st = select_pool(probs, feats, num_distill=100, entropy_rate=0.9, kmeans=True, kmeans_k=20,
                          kmeans_keep_ratio=0.5)
    assert st["after_kmeans"] == 500 and not st["kmeans_noop"]
    # neither stage: the whole pool
    idx, st = select_pool(probs)
    assert torch.equal(idx, torch.arange(n)) and st["selected"] == n
    # deterministic across calls (K-means random_state = seed)
    a, _ = select_pool(probs, feats, num_distill=200, entropy_rate=0.5, kmeans=True, kmeans_k=20, seed=3)
    b, _ = select_pool(probs, feats, num_distill=200, entropy_rate=0.5, kmeans=True, kmeans_k=20, seed=3)
    assert torch.equal(a, b)
