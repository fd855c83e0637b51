"""FedDF (Lin et al. 2020; docs/methods/fedaux.md §2, §3.2 T, §3.3) through the algorithm interface, pure torch, no
Ray."""
import math

import pytest
import torch
from torch import nn

from algorithms import ALGORITHMS, ClientContext, ClientUpdate, ServerContext, ServerState
from algorithms.base import aggregate_round
from algorithms.common import LocalTraining, get_flat_weights, set_flat_weights
from algorithms.common.distillation import distill, kl_soft, logit_norm, weighted_logit_ensemble
from algorithms.fedavg import FedAvg
from algorithms.feddf import FedDF, FedDFHyperparams, cosine_restart_steps, predict_logits
from algorithms.models import build_model
from platform.errors import ConfigError
from platform.config.schema import build

CPU = torch.device("cpu")
DIGITS = (1, 8, 8)
PUBLIC = 96


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _model(name: str = "cnn", seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    return build_model(name, DIGITS, 10)


def _public(seed: int = 7) -> torch.Tensor:
    return torch.randn(PUBLIC, *DIGITS, generator=torch.Generator().manual_seed(seed))


def _client(k: int, model: nn.Module, public_x: torch.Tensor, architecture: str = "model",
            n: int = 40) -> ClientContext:
    g = torch.Generator().manual_seed(100 + k)
    # label-skewed clients, so their models (and logits) disagree
    y = torch.randint(0, 10, (n,), generator=g) % (3 + k)
    return ClientContext(client_id=k, x=torch.randn(n, *DIGITS, generator=g), y=y, model=model,
                         training=LocalTraining(epochs=1, batch_size=8, lr=0.1),
                         generator=torch.Generator().manual_seed(200 + k),
                         noise_generator=torch.Generator().manual_seed(300 + k), state={}, device=CPU,
                         architecture=architecture, public_x=public_x)


def _homogeneous(algo, public_x, clients=3, **ctx_fields):
    ctx = ServerContext.for_model(_model(), public_x=public_x, **ctx_fields)
    state = algo.init_server_state(ctx)
    payload = algo.broadcast(state, list(range(clients)))
    updates = []
    for k in range(clients):
        update = algo.client_update(payload, _client(k, _model(seed=k + 1), public_x, n=30 + 10 * k))
        update.architecture, update.client_id = "model", k
        updates.append(update)
    return ctx, state, updates


def _hp(**kw) -> FedDFHyperparams:
    return build(FedDFHyperparams, kw, "algorithm")


# ---------------------------------------------------------------------------------------------------------------
# The teacher (Eq. 4, Eq. 7)

def test_weighted_logit_ensemble_is_the_mean_with_none_or_uniform_weights():
    logits = torch.randn(4, 6, 10, generator=torch.Generator().manual_seed(0))
    mean = logits.mean(dim=0)
    assert torch.equal(weighted_logit_ensemble(logits, None), mean)
    for scale in (1.0, 0.25, 7.0):
        assert torch.allclose(weighted_logit_ensemble(logits, torch.full((4, 6), scale)), mean, atol=1e-6)


def test_weighted_logit_ensemble_normalises_per_sample():
    logits = torch.randn(3, 5, 4, generator=torch.Generator().manual_seed(1))
    weights = torch.rand(3, 5, generator=torch.Generator().manual_seed(2)) + 0.1
    out = weighted_logit_ensemble(logits, weights)
    for j in range(5):
        expected = sum(weights[k, j] * logits[k, j] for k in range(3)) / weights[:, j].sum()
        assert torch.allclose(out[j], expected, atol=1e-6)
    # scaling one sample's weights changes nothing; a one-hot column picks that client's logits
    scaled = weights.clone()
    scaled[:, 2] *= 1000.0
    assert torch.allclose(weighted_logit_ensemble(logits, scaled), out, atol=1e-6)
    one_hot = torch.zeros(3, 5)
    one_hot[1] = 1.0
    assert torch.allclose(weighted_logit_ensemble(logits, one_hot), logits[1])
    with pytest.raises(ValueError):
        weighted_logit_ensemble(logits, -weights)
    with pytest.raises(ValueError):
        weighted_logit_ensemble(logits, weights[:, :4])


def test_logit_norm_rescales_only_long_logit_vectors():
    z = torch.tensor([[3.0, 4.0], [0.1, 0.0]])
    out = logit_norm(z, 2.5)
    assert torch.allclose(out[0], torch.tensor([1.5, 2.0]))  # norm 5 > 0.4 -> norm 2.5
    assert torch.equal(out[1], z[1])  # norm 0.1 <= 0.4: unchanged
    assert logit_norm(z, None) is z


def test_teacher_logits_are_computed_once_per_client_in_eval_mode():
    public_x = _public()
    ctx, state, updates = _homogeneous(FedDF(_hp()), public_x)
    for u in updates:
        assert u.tensors["public_logits"].shape == (PUBLIC, 10)
        assert u.tensors["public_logits"].dtype == torch.float32
    model = _model(seed=5)
    assert torch.equal(predict_logits(model, public_x, batch_size=7), predict_logits(model, public_x))
    assert not model.training


def test_teacher_weights_hook_feeds_the_ensemble():
    class OneClient(FedDF):
        def teacher_weights(self, updates, state, ctx):
            w = torch.zeros(len(updates), len(ctx.public_x))
            w[0] = 1.0
            return w

    public_x = _public()
    algo = OneClient(_hp())
    ctx, state, updates = _homogeneous(algo, public_x)
    size = algo.distillation_size(PUBLIC)
    teacher = algo.teacher_logits(updates, state, ctx, size)
    assert torch.allclose(teacher, updates[0].tensors["public_logits"][:size])
    plain = FedDF(_hp()).teacher_logits(updates, state, ctx, size)
    assert torch.allclose(plain, torch.stack([u.tensors["public_logits"][:size] for u in updates]).mean(0))


# ---------------------------------------------------------------------------------------------------------------
# The server step

def test_without_distillation_aggregate_equals_fedavg_exactly():
    public_x = _public()
    for hp in (_hp(distill_steps=0), _hp(distill_epochs=0)):
        algo = FedDF(hp)
        ctx, state, updates = _homogeneous(algo, public_x)
        ours, metrics = aggregate_round(algo, state, updates, ctx)
        fedavg = FedAvg()
        theirs, _ = aggregate_round(fedavg, fedavg.init_server_state(ctx), updates, ctx)
        assert torch.equal(ours.weights, theirs.weights)
        assert metrics["distill_steps"] == 0 and metrics["fedavg_init"] == 1.0


def test_distillation_moves_the_student_towards_the_teacher():
    public_x = _public()
    algo = FedDF(_hp(distill_lr=1e-2, distill_steps=30, distill_batch_size=32, distill_fraction=1.0))
    ctx, state, updates = _homogeneous(algo, public_x)
    teacher = algo.teacher_logits(updates, state, ctx, PUBLIC)

    def kl(weights):
        set_flat_weights(ctx.model, weights)
        ctx.model.eval()
        with torch.no_grad():
            return float(kl_soft(ctx.model(public_x), teacher, 1.0, "logits"))

    fedavg = FedAvg()
    warm, _ = aggregate_round(fedavg, fedavg.init_server_state(ctx), updates, ctx)
    new_state, metrics = aggregate_round(algo, state, updates, ctx)
    assert kl(new_state.weights) < 0.5 * kl(warm.weights)
    assert metrics["distill_steps"] == 30 and metrics["distill_size"] == PUBLIC
    assert math.isfinite(metrics["distill_loss"]) and 0 <= metrics["student_agreement"] <= 1
    assert new_state.round == 1
    assert set(metrics) <= set(FedDF.declared_metrics())


def test_default_budget_is_one_pass_over_the_first_80_percent():
    algo = FedDF()
    assert algo.hp.distill_lr == 5e-5 and algo.hp.distill_batch_size == 128 and algo.hp.temperature == 1.0
    size = algo.distillation_size(1000)
    assert size == 800
    assert algo.distill_steps_for(0, size) == math.ceil(800 / 128)


def test_every_returned_metric_is_declared_with_all_switches():
    public_x = _public()
    algo = FedDF(_hp(distill_steps=4, distill_batch_size=16, val_checkpoint_every=2, logit_clip=2.5,
                     reset_optimizer=False, bn_mode="eval"))
    g = torch.Generator().manual_seed(9)
    ctx, state, updates = _homogeneous(algo, public_x, val_x=torch.randn(20, *DIGITS, generator=g),
                                       val_y=torch.randint(0, 10, (20,), generator=g))
    declared = FedDF.declared_metrics()
    for _ in range(2):
        state, metrics = aggregate_round(algo, state, updates, ctx)
        assert set(metrics) <= set(declared)
        assert {"distill_loss", "distill_steps", "student_agreement", "distill_val_accuracy"} <= set(metrics)
    assert set(state.extra["distill_optimizer"]) == {"model"}


def test_fedavg_init_every_p_rounds():
    algo = FedDF(_hp(fedavg_init_every=5))
    assert [r + 1 for r in range(12) if algo.fedavg_init_round(r)] == [1, 5, 10]
    public_x = _public()
    algo = FedDF(_hp(fedavg_init_every=2, distill_steps=0))
    ctx, state, updates = _homogeneous(algo, public_x)
    state.round = 2  # round 3: no FedAvg, no distillation -> the model is unchanged
    new_state, metrics = algo.aggregate(state, updates, ctx)
    assert metrics["fedavg_init"] == 0.0 and torch.equal(new_state.weights, state.weights)


def test_cosine_restart_schedule_matches_the_single_image_paper():
    steps = [cosine_restart_steps(r, 500, 250, 5) for r in range(1, 31)]
    assert steps[:10] == [500, 375, 286, 250, 500, 463, 375, 286, 250, 500]
    assert sum(steps) == 11281
    algo = FedDF(_hp(distill_steps=500, step_schedule="cosine_restart", schedule_min_steps=250))
    assert [algo.distill_steps_for(r, 100) for r in range(5)] == [500, 375, 286, 250, 500]


def test_bn_eval_keeps_running_statistics_during_distillation():
    def bn_model():
        torch.manual_seed(0)
        return nn.Sequential(nn.Flatten(), nn.Linear(64, 16), nn.BatchNorm1d(16), nn.ReLU(), nn.Linear(16, 10))

    x = _public()
    teacher = torch.randn(PUBLIC, 10, generator=torch.Generator().manual_seed(3))
    loss = lambda s, t: kl_soft(s, t, 1.0, "logits")  # noqa: E731
    for bn_eval, changes in ((True, False), (False, True)):
        model = bn_model()
        before = model[2].running_mean.clone()
        distill(model, x, teacher, loss, torch.optim.Adam(model.parameters(), 1e-2), 5, 32,
                torch.Generator().manual_seed(0), bn_eval=bn_eval)
        assert (not torch.equal(model[2].running_mean, before)) == changes
        assert model[2].weight.grad is not None


# ---------------------------------------------------------------------------------------------------------------
# Heterogeneous architectures (docs/methods/fedaux.md §3.3)

def test_heterogeneous_groups_average_within_and_distil_from_all():
    public_x = _public()
    models = {"cnn": _model("cnn"), "mlp": _model("mlp")}
    ctx = ServerContext.for_models(models, {"cnn": 2, "mlp": 2}, public_x=public_x)
    assert ctx.heterogeneous
    steps = 15
    algo = FedDF(_hp(distill_lr=1e-2, distill_steps=steps, distill_batch_size=32, distill_fraction=1.0))
    state = algo.init_server_state(ctx)
    assert set(state.weights) == {"cnn", "mlp"}
    payload = algo.broadcast(state, [0, 1, 2, 3])
    updates = []
    for k, arch in enumerate(["cnn", "mlp", "cnn", "mlp"]):
        u = algo.client_update(payload, _client(k, _model(arch, seed=10 + k), public_x, architecture=arch))
        u.architecture, u.client_id = arch, k
        updates.append(u)

    # before distillation: each server model is the FedAvg of its own group
    no_distill = FedDF(_hp(distill_steps=0))
    warm, _ = no_distill.aggregate(state, updates, ctx)
    for arch in ("cnn", "mlp"):
        group = [u for u in updates if u.architecture == arch]
        total = sum(u.weight for u in group)
        expected = state.weights[arch] + sum(u.weight / total * u.tensors["delta"] for u in group)
        assert torch.allclose(warm.weights[arch], expected, atol=1e-6)

    # both distil from the ensemble of all four clients, starting at their group's FedAvg
    teacher = weighted_logit_ensemble(torch.stack([u.tensors["public_logits"] for u in updates]))
    assert torch.allclose(algo.teacher_logits(updates, state, ctx, PUBLIC), teacher)
    new_state, metrics = algo.aggregate(state, updates, ctx)
    assert set(metrics) <= set(FedDF.declared_metrics())
    for arch in ("cnn", "mlp"):
        model = ctx.models[arch]
        set_flat_weights(model, warm.weights[arch])
        kl = lambda s, t: kl_soft(s, t, 1.0, "logits")  # noqa: E731
        with torch.no_grad():
            model.eval()
            start_kl = float(kl(model(public_x), teacher))
            set_flat_weights(model, new_state.weights[arch])
            end_kl = float(kl(model(public_x), teacher))
        assert end_kl < start_kl
    # the same result when the teacher is handed to distill directly (no hidden per-architecture teacher)
    gen = torch.Generator().manual_seed(0)  # the server's training generator, as the context was built
    for arch in ("cnn", "mlp"):
        model = ctx.models[arch]
        set_flat_weights(model, warm.weights[arch])
        distill(model, public_x, teacher, lambda s, t: kl_soft(s, t, 1.0, "logits"),
                torch.optim.Adam(model.parameters(), lr=1e-2), steps, 32, gen)
        assert torch.allclose(new_state.weights[arch], get_flat_weights(model), atol=1e-6)


def test_heterogeneous_architecture_without_clients_keeps_its_model_and_still_distils():
    public_x = _public()
    models = {"cnn": _model("cnn"), "mlp": _model("mlp")}
    ctx = ServerContext.for_models(models, {"cnn": 1, "mlp": 1}, public_x=public_x)
    algo = FedDF(_hp(distill_steps=3, distill_batch_size=32, distill_lr=1e-2))
    state = algo.init_server_state(ctx)
    u = algo.client_update(algo.broadcast(state, [0]), _client(0, _model("cnn", 3), public_x, "cnn"))
    u.architecture = "cnn"
    new_state, _ = algo.aggregate(state, [u], ctx)
    assert not torch.equal(new_state.weights["mlp"], state.weights["mlp"])  # distilled from the cnn client


# ---------------------------------------------------------------------------------------------------------------
# Configuration

def test_registered_and_flags():
    assert ALGORITHMS["feddf"] is FedDF
    assert FedDF.summable is False and FedDF.heterogeneous_models is True
    assert all(doc for doc in FedDF.hyperparameter_docs().values())


@pytest.mark.parametrize("params, field", [
    ({"distill_lr": -1e-3}, "algorithm.distill_lr"),
    ({"fedavg_init_every": 0}, "algorithm.fedavg_init_every"),
    ({"distill_fraction": 1.5}, "algorithm.distill_fraction"),
    ({"bn_mode": "frozen"}, "algorithm.bn_mode"),
    ({"temperature": 0}, "algorithm.temperature"),
    ({"step_schedule": "cosine_restart"}, "algorithm.schedule_min_steps"),
    ({"schedule_min_steps": 10}, "algorithm.schedule_min_steps"),
])
def test_bad_hyperparameters_name_the_field(params, field):
    with pytest.raises(ConfigError) as info:
        build(FedDFHyperparams, params, "algorithm")
    assert info.value.field == field


def test_pre_reduced_updates_are_refused():
    ctx = ServerContext.for_model(_model(), public_x=_public())
    algo = FedDF()
    update = ClientUpdate(weight=10.0, tensors={"delta": torch.zeros_like(get_flat_weights(ctx.model))},
                          num_clients=2)
    with pytest.raises(ValueError, match="one update per client"):
        algo.aggregate(ServerState(weights=get_flat_weights(ctx.model)), [update], ctx)
