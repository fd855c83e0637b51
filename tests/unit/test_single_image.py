"""The single-image method (docs/methods/single_image.md §3, §4): FedDF plus a per-round selection of the distillation
set from a public crop pool, through the algorithm interface, pure torch, no Ray.

The pruning functions themselves are tested in test_single_image_pool.py; here: how ``SingleImage`` wires them in
(state, broadcast, clients, metrics, sizes, teacher weights, determinism, heterogeneous selection model,
configuration checks, ASHA rungs, FedProx clients)."""
from __future__ import annotations

import math
import warnings

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from algorithms import ALGORITHMS, ClientContext, ServerContext
from algorithms.base import Setting, aggregate_round
from algorithms.common import LocalTraining, evaluate, get_flat_weights, set_flat_weights, train_local
from algorithms.common.distillation import logit_norm
from algorithms.common.pruning import kmeans_balance
from algorithms.feddf import FedDF, FedDFHyperparams, predict_logits
from algorithms.fedprox import proximal_term
from algorithms.models import build_model
from algorithms.single_image import SingleImage, SingleImageHyperparams, embed_and_predict
from platform.errors import ConfigError
from platform.config.schema import build

CPU = torch.device("cpu")
DIGITS = (1, 8, 8)
POOL = 300

pytestmark = pytest.mark.usefixtures("one_torch_thread")

# Small but non-trivial selection: s = 50, e = 0.5, K = 10 on a pool of 300 -> s_K = 100 < 300 (K-means acts).
SMALL = {"num_distill": 50, "entropy_rate": 0.5, "kmeans_k": 10, "distill_steps": 4, "distill_batch_size": 32,
         "val_checkpoint_every": None}


def _model(name: str = "cnn", seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    return build_model(name, DIGITS, 10)


def _pool(n: int = POOL, seed: int = 7) -> torch.Tensor:
    return torch.randn(n, *DIGITS, generator=torch.Generator().manual_seed(seed))


def _client(k: int, model: nn.Module, public_x: torch.Tensor, architecture: str = "model", n: int = 40,
            round_: int = 0) -> ClientContext:
    g = torch.Generator().manual_seed(100 + k)
    y = torch.randint(0, 10, (n,), generator=g) % (3 + k)  # label-skewed clients: their logits disagree
    return ClientContext(client_id=k, x=torch.randn(n, *DIGITS, generator=g), y=y, model=model,
                         training=LocalTraining(epochs=1, batch_size=8, lr=0.1),
                         generator=torch.Generator().manual_seed(200 + k + 1000 * round_),
                         noise_generator=torch.Generator().manual_seed(300 + k), state={}, device=CPU,
                         architecture=architecture, public_x=public_x)


def _hp(**kw) -> SingleImageHyperparams:
    return build(SingleImageHyperparams, {**SMALL, **kw}, "algorithm")


def _updates(algo, state, public_x, sizes=(30, 40, 50), round_: int = 0):
    payload = algo.broadcast(state, list(range(len(sizes))))
    updates = []
    for k, n in enumerate(sizes):
        update = algo.client_update(payload, _client(k, _model(seed=k + 1), public_x, n=n, round_=round_))
        update.architecture, update.client_id = "model", k
        updates.append(update)
    return payload, updates


def _homogeneous(algo, public_x, sizes=(30, 40, 50), **ctx_fields):
    ctx = ServerContext.for_model(_model(), public_x=public_x, **ctx_fields)
    state = algo.init_server_state(ctx)
    payload, updates = _updates(algo, state, public_x, sizes)
    return ctx, state, payload, updates


def _pseudo_labels(model: nn.Module, weights: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    set_flat_weights(model, weights)
    return predict_logits(model, x).argmax(dim=1)


# ---------------------------------------------------------------------------------------------------------------
# 1. State, broadcast, clients

def test_selection_is_stored_broadcast_and_predicted_on():
    public_x = _pool()
    algo = SingleImage(_hp())
    ctx = ServerContext.for_model(_model(), public_x=public_x)
    state = algo.init_server_state(ctx)
    selection = state.extra["selection"]
    indices = selection["indices"]
    assert indices.dtype == torch.int64 and indices.dim() == 1
    assert 0 < len(indices) < POOL
    assert torch.equal(indices, indices.sort().values)
    assert len(torch.unique(indices)) == len(indices)
    assert int(indices.min()) >= 0 and int(indices.max()) < POOL
    assert selection["architecture"] == "model"

    payload = algo.broadcast(state, [0, 1])
    assert torch.equal(payload["public_indices"], indices)
    assert torch.equal(payload["weights"], state.weights)

    client = _client(0, _model(seed=1), public_x, n=30)
    update = algo.client_update(payload, client)
    logits = update.tensors["public_logits"]
    assert logits.shape == (len(indices), 10) and logits.dtype == torch.float32
    # client.model now holds the trained client model: its logits on exactly the selected crops
    assert torch.equal(logits, predict_logits(client.model, public_x[indices]))
    trained = get_flat_weights(client.model)
    assert torch.equal(update.tensors["delta"], trained - state.weights)


# ---------------------------------------------------------------------------------------------------------------
# 2. Sizes (§3.4)

def _selection(public_x, **kw):
    algo = SingleImage(_hp(**kw))
    ctx = ServerContext.for_model(_model(), public_x=public_x)
    state = algo.init_server_state(ctx)
    return algo, ctx, state, state.extra["selection"]


def _per_class_kept(labels: torch.Tensor, e: float) -> int:
    counts = torch.bincount(labels, minlength=10).tolist()
    return sum(n - math.floor(e * n) for n in counts)


def test_both_stages_size_formulas():
    public_x = _pool()
    algo, ctx, state, sel = _selection(public_x, num_distill=50, entropy_rate=0.5, kmeans=True, kmeans_k=10)
    m = sel["metrics"]
    assert m["selection_pool"] == POOL
    assert m["selection_kmeans_target"] == 100 == math.floor(50 / 0.5)
    assert m["selection_kmeans_noop"] == 0
    assert m["selection_after_kmeans"] == 100
    # the K-means subset (oracle: kmeans_balance with the selection's seed on the untrained model's outputs)
    z, logits = embed_and_predict(ctx.model, public_x)
    probs = torch.softmax(logits.double(), dim=1)
    kmeans_idx = kmeans_balance(z, probs, 10, 1.0, "hard", seed=ctx.training_generator.initial_seed(), size=100)
    assert len(kmeans_idx) == 100
    labels = probs.argmax(dim=1)
    expected = _per_class_kept(labels[kmeans_idx], 0.5)
    assert m["selection_after_entropy"] == expected == len(sel["indices"])
    assert set(sel["indices"].tolist()) <= set(kmeans_idx.tolist())
    # selected_class_count is the histogram of the selection model's pseudo-labels on the selected crops
    hist = torch.bincount(labels[sel["indices"]], minlength=10)
    assert [m[f"selected_class_count.{c}"] for c in range(10)] == hist.double().tolist()
    assert m["selection_classes"] == int((hist > 0).sum())
    assert m["selection_class_share_max"] == pytest.approx(float(hist.max()) / len(sel["indices"]))


def test_keep_ratio_sets_the_kmeans_target():
    _, _, _, sel = _selection(_pool(), num_distill=50, entropy_rate=0.5, kmeans_k=10, kmeans_keep_ratio=0.5)
    m = sel["metrics"]
    assert m["selection_kmeans_target"] == 150 and m["selection_after_kmeans"] == 150
    assert m["selection_kmeans_noop"] == 0
    assert 75 <= m["selection_after_entropy"] == len(sel["indices"]) <= 75 + 10


def test_entropy_only_prunes_the_whole_pool():
    public_x = _pool()
    algo, ctx, state, sel = _selection(public_x, kmeans=False, entropy_rate=0.5, pool_sizing="whole")
    m = sel["metrics"]
    assert m["selection_pool"] == POOL
    assert m["selection_kmeans_target"] == 0 and m["selection_after_kmeans"] == POOL
    labels = _pseudo_labels(ctx.model, state.weights, public_x)
    assert m["selection_after_entropy"] == _per_class_kept(labels, 0.5) == len(sel["indices"])
    # top: per class the least confident crops are kept
    conf = torch.softmax(predict_logits(ctx.model, public_x).double(), dim=1).max(dim=1).values
    kept = torch.zeros(POOL, dtype=torch.bool)
    kept[sel["indices"]] = True
    for c in torch.unique(labels).tolist():
        members = labels == c
        if kept[members].all() or not kept[members].any():
            continue
        assert conf[members & kept].max() <= conf[members & ~kept].min()


@pytest.mark.parametrize("params", [{"entropy_rate": 0.0}, {"entropy": False}])
def test_neither_stage_selects_the_whole_pool(params):
    _, _, _, sel = _selection(_pool(), kmeans=False, pool_sizing="whole", **params)
    assert torch.equal(sel["indices"], torch.arange(POOL))
    assert sel["metrics"]["selection_after_entropy"] == POOL


def test_paper_pool_sizing_starts_the_ablation_arms_from_a_prefix():
    public_x = _pool()
    # entropy only: the first floor(s/(1 − e)) = 100 crops are pruned
    algo, ctx, state, sel = _selection(public_x, kmeans=False, num_distill=50, entropy_rate=0.5)
    m = sel["metrics"]
    assert algo.hp.pool_sizing == "paper"
    assert m["selection_pool"] == 100 and m["selection_after_kmeans"] == 100
    labels = _pseudo_labels(ctx.model, state.weights, public_x)
    assert m["selection_after_entropy"] == _per_class_kept(labels[:100], 0.5) == len(sel["indices"])
    assert int(sel["indices"].max()) < 100
    # neither stage: the first s crops (the paper's "no selection" pool)
    for params in ({"entropy_rate": 0.0}, {"entropy": False}):
        _, _, _, sel = _selection(public_x, kmeans=False, num_distill=50, **params)
        assert torch.equal(sel["indices"], torch.arange(50)), params
    # K-means only (entropy off, whatever entropy_rate says): s_K = s from the whole pool
    _, _, _, sel = _selection(public_x, entropy=False, entropy_rate=0.9, num_distill=50, kmeans_k=10)
    m = sel["metrics"]
    assert m["selection_pool"] == POOL and m["selection_kmeans_target"] == 50
    assert m["selection_after_kmeans"] == m["selection_after_entropy"] == len(sel["indices"]) == 50


@pytest.mark.parametrize("s, e", [(150, 0.5), (30, 0.9)])
def test_paper_noop_case_is_reported_not_warned(recwarn, s, e):
    warnings.simplefilter("always")
    # s/(1 − e) = N = 300 (30/0.1 is 299.99… in floating point): K-means keeps everything
    public_x = _pool()
    algo, ctx, state, sel = _selection(public_x, num_distill=s, entropy_rate=e, kmeans_k=10)
    m = sel["metrics"]
    assert m["selection_kmeans_noop"] == 1
    assert m["selection_kmeans_target"] == POOL and m["selection_after_kmeans"] == POOL
    labels = _pseudo_labels(ctx.model, state.weights, public_x)
    assert m["selection_after_entropy"] == _per_class_kept(labels, e) == len(sel["indices"])
    assert not [w for w in recwarn.list if issubclass(w.category, UserWarning)], [str(w.message) for w in recwarn]


# ---------------------------------------------------------------------------------------------------------------
# 3. Round metrics and the next selection

def test_round_metrics_describe_the_broadcast_selection_and_a_new_one_follows():
    public_x = _pool()
    algo = SingleImage(_hp(distill_steps=10, distill_lr=5e-2))
    ctx, state, payload, updates = _homogeneous(algo, public_x)
    used = state.extra["selection"]
    new_state, metrics = aggregate_round(algo, state, updates, ctx)
    assert new_state.round == 1
    n = len(payload["public_indices"])
    assert metrics["distill_size"] == n
    assert metrics["selection_after_entropy"] == n
    for key, value in used["metrics"].items():
        assert metrics[key] == value, key
    counts = {k: v for k, v in metrics.items() if k.startswith("selected_class_count.")}
    assert len(counts) == 10 and sum(counts.values()) == n
    declared = set(SingleImage.declared_metrics())
    assert {k for k in metrics if not k.startswith("selected_class_count.")} <= declared
    # the state the round started from still holds the selection it distilled on
    assert state.extra["selection"] is used
    # the next selection is computed with the new global model
    assert not torch.equal(new_state.weights, state.weights)
    nxt = new_state.extra["selection"]
    fresh = algo.select(new_state.weights, ServerContext.for_model(_model(), public_x=public_x))
    assert torch.equal(nxt["indices"], fresh["indices"])
    assert nxt["metrics"] == fresh["metrics"]
    labels = _pseudo_labels(ctx.model, new_state.weights, public_x)
    hist = torch.bincount(labels[nxt["indices"]], minlength=10).double().tolist()
    assert [nxt["metrics"][f"selected_class_count.{c}"] for c in range(10)] == hist
    old = algo.select(state.weights, ServerContext.for_model(_model(), public_x=public_x))
    assert torch.equal(old["indices"], used["indices"])
    assert not torch.equal(old["indices"], nxt["indices"])  # the distilled model selects differently
    assert torch.equal(algo.broadcast(new_state, [0])["public_indices"], nxt["indices"])


# ---------------------------------------------------------------------------------------------------------------
# 4. Teacher weights

def test_teacher_is_weighted_by_client_sample_counts():
    public_x = _pool()
    algo = SingleImage(_hp())
    ctx, state, payload, updates = _homogeneous(algo, public_x, sizes=(20, 60))
    size = len(payload["public_indices"])
    f0, f1 = (u.tensors["public_logits"] for u in updates)
    assert [u.weight for u in updates] == [20.0, 60.0]
    expected = (20.0 * f0 + 60.0 * f1) / 80.0
    teacher = algo.teacher_logits(updates, state, ctx, size)
    assert teacher.shape == (size, 10)
    assert torch.allclose(teacher, expected, atol=1e-6)
    assert not torch.allclose(teacher, (f0 + f1) / 2, atol=1e-4)  # not the plain mean


# ---------------------------------------------------------------------------------------------------------------
# 5. Determinism

def _run(hp: SingleImageHyperparams, rounds: int = 3):
    public_x = _pool()
    algo = SingleImage(hp)
    ctx = ServerContext.for_model(_model(), public_x=public_x, seed=3)
    state = algo.init_server_state(ctx)
    selections = [state.extra["selection"]["indices"]]
    for r in range(rounds):
        _, updates = _updates(algo, state, public_x, sizes=(30, 50), round_=r)
        state, _ = aggregate_round(algo, state, updates, ctx)
        selections.append(state.extra["selection"]["indices"])
    return state.weights, selections


@pytest.mark.parametrize("mode", ["top", "random"])
def test_identical_seeds_give_identical_runs(mode):
    hp = _hp(entropy_mode=mode, distill_steps=3)
    w1, s1 = _run(hp)
    w2, s2 = _run(hp)
    assert torch.equal(w1, w2)
    assert len(s1) == len(s2) == 4
    for a, b in zip(s1, s2):
        assert torch.equal(a, b)


def test_random_entropy_mode_changes_the_selection():
    public_x = _pool()
    _, _, _, top = _selection(public_x, entropy_mode="top")
    _, _, _, rnd = _selection(public_x, entropy_mode="random")
    assert top["metrics"]["selection_after_entropy"] == rnd["metrics"]["selection_after_entropy"]
    assert not torch.equal(top["indices"], rnd["indices"])


# ---------------------------------------------------------------------------------------------------------------
# 6. Heterogeneous selection model

def _val(n: int = 60):
    g = torch.Generator().manual_seed(11)
    return torch.randn(n, *DIGITS, generator=g), torch.randint(0, 10, (n,), generator=g)


def _fitted_mlp(val_x, val_y) -> nn.Module:
    """An mlp trained on the validation split itself: clearly better there than an untrained cnn."""
    model = _model("mlp", seed=4)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    model.train()
    for _ in range(150):
        optimizer.zero_grad()
        F.cross_entropy(model(val_x), val_y).backward()
        optimizer.step()
    return model


@pytest.mark.parametrize("order", [("cnn", "mlp"), ("mlp", "cnn")])
def test_heterogeneous_selection_model_is_the_best_on_validation(order):
    public_x = _pool()
    val_x, val_y = _val()
    built = {"cnn": _model("cnn", seed=0), "mlp": _fitted_mlp(val_x, val_y)}
    acc = {k: evaluate(m, val_x, val_y, prefix="val_")["val_accuracy"] for k, m in built.items()}
    assert acc["mlp"] >= 0.9 > acc["cnn"] + 0.3
    models = {name: built[name] for name in order}
    algo = SingleImage(_hp())
    ctx = ServerContext.for_models(models, {name: 1 for name in order}, val_x=val_x, val_y=val_y,
                                   public_x=public_x)
    state = algo.init_server_state(ctx)
    assert set(state.weights) == {"cnn", "mlp"}
    sel = state.extra["selection"]
    assert sel["architecture"] == "mlp"
    # and the selection is the mlp's: its pseudo-label histogram on the selected crops
    labels = _pseudo_labels(ctx.models["mlp"], state.weights["mlp"], public_x)
    hist = torch.bincount(labels[sel["indices"]], minlength=10).double().tolist()
    assert [sel["metrics"][f"selected_class_count.{c}"] for c in range(10)] == hist


@pytest.mark.parametrize("order", [("cnn", "mlp"), ("mlp", "cnn")])
def test_heterogeneous_selection_without_validation_is_the_first_architecture(order):
    val_x, val_y = _val()
    built = {"cnn": _model("cnn", seed=0), "mlp": _fitted_mlp(val_x, val_y)}
    models = {name: built[name] for name in order}
    algo = SingleImage(_hp())
    ctx = ServerContext.for_models(models, {name: 1 for name in order}, public_x=_pool())
    state = algo.init_server_state(ctx)
    assert state.extra["selection"]["architecture"] == order[0]


def test_heterogeneous_tie_goes_to_the_first_architecture():
    val_x, val_y = _val()
    models = {"b": _model("cnn", seed=0), "a": _model("cnn", seed=0)}  # identical weights: equal accuracy
    algo = SingleImage(_hp())
    ctx = ServerContext.for_models(models, {"b": 1, "a": 1}, val_x=val_x, val_y=val_y, public_x=_pool())
    assert algo.init_server_state(ctx).extra["selection"]["architecture"] == "b"


# ---------------------------------------------------------------------------------------------------------------
# 7. Configuration checks

def _setting(**kw) -> Setting:
    fields = dict(num_clients=10, rounds=20, public_size=100, public_source="image", server_validation=True)
    fields.update(kw)
    return Setting(**fields)


def _refused(hp_params: dict, setting: Setting) -> str:
    with pytest.raises(ConfigError) as info:
        SingleImage(build(SingleImageHyperparams, hp_params, "algorithm")).check_setting(setting)
    return info.value.field


def test_registered():
    assert ALGORITHMS["single_image"] is SingleImage
    assert issubclass(SingleImage, FedDF) and SingleImage.summable is False
    assert all(doc for doc in SingleImage.hyperparameter_docs().values())


def test_check_setting_accepts_a_fitting_setting():
    ok = {"num_distill": 50, "kmeans_k": 10}
    SingleImage(build(SingleImageHyperparams, ok, "algorithm")).check_setting(_setting())
    # s > pool is fine with an explicit keep ratio; K = pool is fine
    SingleImage(build(SingleImageHyperparams, {"num_distill": 500, "kmeans_k": 100, "kmeans_keep_ratio": 0.5},
                      "algorithm")).check_setting(_setting())
    # K-means off: K is not checked; the whole pool is fine with any s
    SingleImage(build(SingleImageHyperparams, {"num_distill": 500, "kmeans_k": 1000, "kmeans": False,
                                               "pool_sizing": "whole"}, "algorithm")).check_setting(_setting())
    SingleImage(build(SingleImageHyperparams, {"num_distill": 50, "entropy_rate": 0.5, "kmeans": False},
                      "algorithm")).check_setting(_setting())  # floor(50/0.5) = 100 = the pool
    # without a validation split the last iterate is kept
    SingleImage(build(SingleImageHyperparams, {**ok, "val_checkpoint_every": None}, "algorithm")).check_setting(
        _setting(server_validation=False))


@pytest.mark.parametrize("params, setting, field", [
    ({"num_distill": 50, "kmeans_k": 101}, {}, "algorithm.kmeans_k"),
    ({"num_distill": 101, "kmeans_k": 10}, {}, "algorithm.num_distill"),
    ({"num_distill": 50, "kmeans_k": 10}, {"public_source": "none", "public_size": None}, "public.source"),
    ({"num_distill": 50, "kmeans_k": 10, "val_checkpoint_every": 50}, {"server_validation": False},
     "algorithm.val_checkpoint_every"),
    # pool_sizing paper, entropy only: the first floor(60/0.5) = 120 crops of a pool of 100
    ({"num_distill": 60, "entropy_rate": 0.5, "kmeans": False}, {}, "algorithm.num_distill"),
    # pool_sizing paper, neither stage: the first s = 101 crops
    ({"num_distill": 101, "entropy": False, "kmeans": False}, {}, "algorithm.num_distill"),
])
def test_check_setting_refusals_name_the_field(params, setting, field):
    assert _refused(params, _setting(**setting)) == field


def test_default_image_pool_size_reaches_check_setting():
    from platform.config.experiment import build_experiment
    from platform.config.public_data import DEFAULT_POOL_SIZE as default
    base = {"dataset": {"name": "digits"}, "model": {"name": "cnn"}, "public": {"source": "image"}, "rounds": 20,
            "algorithm": {"name": "single_image", "num_distill": 50, "kmeans_k": default + 1}}
    with pytest.raises(ConfigError) as info:
        build_experiment(base)
    assert info.value.field == "algorithm.kmeans_k"


def test_distill_fraction_is_refused_at_build_time():
    with pytest.raises(ConfigError) as info:
        build(SingleImageHyperparams, {"distill_fraction": 0.5}, "algorithm")
    assert info.value.field == "algorithm.distill_fraction"
    assert build(SingleImageHyperparams, {"distill_fraction": 1.0}, "algorithm").distill_fraction == 1.0


# ---------------------------------------------------------------------------------------------------------------
# 8. Comparable rounds and ASHA rungs

def test_comparable_rounds_are_the_fedavg_init_rounds():
    algo = SingleImage(_hp(fedavg_init_every=5))
    for r in (1, 5, 10):
        assert algo.comparable_round(r), r
    for r in (2, 3, 4, 6):
        assert not algo.comparable_round(r), r
    every = SingleImage(_hp(fedavg_init_every=1))
    assert all(every.comparable_round(r) for r in range(1, 21))


def test_asha_rungs():
    from platform.config.search_space import asha_rungs
    assert asha_rungs(5, 2, 20) == [5, 10, 20]
    assert asha_rungs(3, 2, 20) == [3, 6, 12]


_SPACE = """\
base:
  dataset: {{name: digits}}
  model: {{name: cnn}}
  algorithm: {{name: single_image, num_distill: 50, kmeans_k: 10}}
  public: {{source: image{size}}}
  clients: {{num_clients: 4, clients_per_round: 4, local_epochs: 1, batch_size: 16, lr: 0.05}}
  rounds: 20
  seed: 0
parameters:
  algorithm.entropy_rate: {{choice: [0.5, 0.9]}}
search:
  searcher: tpe
  num_samples: 2
  metric: val_accuracy
  scheduler: {{kind: asha, grace_period: {grace}, reduction_factor: {rf}}}
resources: {{cpu: 1, gpu: 0}}
"""


def _load(tmp_path, grace: int, rf: int = 2, size: str = ", size: 400"):
    from platform.config.search_space import load_search_space
    path = tmp_path / f"single_image_g{grace}_rf{rf}.yaml"
    path.write_text(_SPACE.format(size=size, grace=grace, rf=rf))
    return load_search_space(str(path))


def _needs_public_size(err: ConfigError) -> None:
    if err.field == "public.size":
        pytest.xfail("needs public.size for image pools")


def test_asha_grace_period_must_hit_fedavg_init_rounds(tmp_path):
    try:
        space = _load(tmp_path, grace=5, rf=2)
    except ConfigError as err:
        _needs_public_size(err)
        raise
    assert space.search.scheduler.grace_period == 5
    with pytest.raises(ConfigError) as info:
        _load(tmp_path, grace=3, rf=2)
    _needs_public_size(info.value)
    assert info.value.field == "search.scheduler.grace_period"


def test_asha_grace_period_rule_without_public_size(tmp_path):
    """The same rung rule with a pool of unknown size (the selection sizes are then checked at run time)."""
    assert _load(tmp_path, grace=5, rf=2, size="").search.scheduler.grace_period == 5
    with pytest.raises(ConfigError) as info:
        _load(tmp_path, grace=3, rf=2, size="")
    assert info.value.field == "search.scheduler.grace_period"


# ---------------------------------------------------------------------------------------------------------------
# 9. FedProx clients

def test_proximal_term_is_half_mu_squared_distance():
    model = _model(seed=2)
    anchors = [p.detach().clone() for p in model.parameters()]
    assert proximal_term(model, 0.0) is None
    mu = 0.7
    correct = proximal_term(model, mu)
    in_code = proximal_term(model, mu, square_of_sum=True)
    assert correct(model).item() == 0.0 and in_code(model).item() == 0.0
    g = torch.Generator().manual_seed(5)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.1 * torch.randn(p.shape, generator=g))
    diffs = [(p.detach() - a).double() for p, a in zip(model.parameters(), anchors)]
    sq = sum(float((d ** 2).sum()) for d in diffs)
    total = sum(float(d.sum()) for d in diffs)
    assert correct(model).item() == pytest.approx(mu / 2 * sq, rel=1e-5)
    assert in_code(model).item() == pytest.approx(mu / 2 * total ** 2, rel=1e-4)
    assert correct(model).item() != pytest.approx(in_code(model).item(), rel=1e-2)
    # the gradient flows through the term: μ(θ − θ_t)
    model.zero_grad()
    correct(model).backward()
    for p, d in zip(model.parameters(), diffs):
        assert torch.allclose(p.grad.double(), mu * d, atol=1e-6)


def _client_delta(algo, payload, public_x, k: int = 0):
    client = _client(k, _model(seed=9), public_x, n=48)
    update = algo.client_update(payload, client)
    return update.tensors["delta"], update.tensors["public_logits"]


def test_fedprox_clients():
    public_x = _pool()
    plain = SingleImage(_hp(client_mu=0.0))
    ctx = ServerContext.for_model(_model(), public_x=public_x)
    state = plain.init_server_state(ctx)
    payload = plain.broadcast(state, [0])
    # mu = 0: exactly FedDF's client (same LN_c clipping as single_image's default c = 2.5)
    feddf = FedDF(build(FedDFHyperparams, {"logit_clip": 2.5}, "algorithm"))
    d0, l0 = _client_delta(plain, payload, public_x)
    df, lf = _client_delta(feddf, payload, public_x)
    assert torch.equal(d0, df) and torch.equal(l0, lf)
    assert plain.proximal_term(_client(0, _model(), public_x), payload) is None
    # mu > 0: the delta is the one of local training with the (correct) proximal term
    mu = 2.0
    prox = SingleImage(_hp(client_mu=mu))
    d2, _ = _client_delta(prox, payload, public_x)
    assert not torch.equal(d2, d0)
    client = _client(0, _model(seed=9), public_x, n=48)
    set_flat_weights(client.model, payload["weights"])
    train_local(client.model, client.x, client.y, client.training, client.generator,
                extra_loss=proximal_term(client.model, mu),
                loss_fn=lambda z, y: F.cross_entropy(logit_norm(z, 2.5), y))
    assert torch.equal(d2, get_flat_weights(client.model) - payload["weights"])
    # fedprox_as_in_code: the square-of-sum penalty, another delta
    d_code, _ = _client_delta(SingleImage(_hp(client_mu=mu, fedprox_as_in_code=True)), payload, public_x)
    assert not torch.equal(d_code, d2) and not torch.equal(d_code, d0)
