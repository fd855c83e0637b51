"""FedKP, FedKP_cm and FedKPPA (docs/methods/fedkp_fedpa.md §3): bandwidths, mean-shift, aggregation, the interface."""
import dataclasses

import numpy as np
import pytest
import torch

import algorithms.fedkp as fedkp_module
from algorithms.base import aggregate_round

from algorithms import ALGORITHMS, ClientContext, ClientUpdate, ServerContext, reduce_updates
from algorithms.common import LocalTraining, get_flat_weights, parameter_mask
from algorithms.fedkp import (FedKPCMHyperparams, FedKPHyperparams, FedKPPAHyperparams, bandwidths,
                              cluster_mean_shift_inplace, fedkp_aggregate, mean_shift, weight_profile)
from platform.errors import ConfigError
from platform.config.schema import build


# --------------------------------------------------------------------------------------------- helpers

def _model(seed=0, bn=False):
    torch.manual_seed(seed)
    layers = [torch.nn.Flatten(), torch.nn.Linear(6, 5)]
    if bn:
        layers.append(torch.nn.BatchNorm1d(5))
    layers += [torch.nn.ReLU(), torch.nn.Linear(5, 3)]
    return torch.nn.Sequential(*layers)


def _client(n, seed, cid=0, epochs=2, lr=0.1, batch=8):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 6, generator=g)
    y = torch.randint(0, 3, (n,), generator=g)
    return ClientContext(client_id=cid, x=x, y=y, model=_model(99), training=LocalTraining(epochs, batch, "sgd", lr),
                         generator=torch.Generator().manual_seed(seed + 100),
                         noise_generator=torch.Generator().manual_seed(seed + 200), state={},
                         device=torch.device("cpu"))


def _ctx(model, lr=1.0, momentum=0.0):
    return ServerContext.for_model(model, server_lr=lr, server_momentum=momentum, num_classes=3,
                         device=torch.device("cpu"))


def _reference_mean_shift(column, start, h, tol=1e-6, t_max=100, self_row=None, sample=None):
    """Plain-Python Alg. 8 on one coordinate (Epanechnikov weights); the sample may track the iterate."""
    sample = list(column) if sample is None else sample
    x = start
    for _ in range(t_max):
        w = [max(0.0, 1.0 - ((x - v) / h) ** 2) for v in sample]
        den = sum(w)
        new = sum(wi * v for wi, v in zip(w, sample)) / den if den > 0 else x
        moved = abs(new - x)
        x = new
        if self_row is not None:
            sample[self_row] = x
        if moved <= tol:
            break
    return x


# --------------------------------------------------------------------------------------------- bandwidths

def test_bandwidth_rules_match_hand_computed_values_for_n20():
    rng = np.random.default_rng(7)
    W = np.concatenate([rng.normal(size=(20, 4)), rng.exponential(size=(20, 3))], axis=1)
    n = 20
    sd = W.std(axis=0, ddof=1)
    q25, q75 = np.percentile(W, [25, 75], axis=0)  # linear interpolation
    iqr = q75 - q25
    expected = {
        "silverman_code": (3 * n / 4) ** -0.2 * np.minimum(sd, iqr),
        "silverman_thesis": 0.9 * np.minimum(sd, iqr / 1.34) * n ** -0.2,
        "scott": sd * n ** -0.2,
    }
    # the digest's table of factors (§3.4) for n = 20
    assert (3 * n / 4) ** -0.2 == pytest.approx(0.5818, abs=1e-4)
    assert 0.9 * n ** -0.2 == pytest.approx(0.4944, abs=1e-4)
    assert 0.9 * n ** -0.2 / 1.34 == pytest.approx(0.3689, abs=1e-4)
    Wt = torch.tensor(W)
    for rule, value in expected.items():
        np.testing.assert_allclose(bandwidths(Wt, rule).numpy(), value, rtol=1e-12)
        np.testing.assert_allclose(bandwidths(Wt, rule, scale=2.5).numpy(), 2.5 * value, rtol=1e-12)
    np.testing.assert_allclose(bandwidths(Wt.float(), "silverman_code").numpy(), expected["silverman_code"],
                               rtol=1e-5)


def test_zero_iqr_gives_zero_bandwidth_unless_sigma_fallback():
    column = torch.tensor([1.0] * 17 + [0.0, 2.0, 5.0], dtype=torch.float64).unsqueeze(1)
    sd = float(column.std())
    assert float(bandwidths(column, "silverman_code")) == 0.0
    assert float(bandwidths(column, "silverman_thesis")) == 0.0
    assert float(bandwidths(column, "scott")) == pytest.approx(sd * 20 ** -0.2)
    assert float(bandwidths(column, "silverman_code", zero_iqr="sigma")) == pytest.approx(15 ** -0.2 * sd)
    assert float(bandwidths(column, "silverman_thesis", zero_iqr="sigma")) == pytest.approx(0.9 * sd * 20 ** -0.2)
    assert float(bandwidths(column[:1], "scott")) == 0.0  # one client: degenerate


def test_weight_profiles():
    u = torch.tensor([-1.5, -1.0, -0.5, 0.0, 0.5, 1.0, 1.5], dtype=torch.float64)
    assert torch.equal(weight_profile(u), torch.tensor([0, 0, 0.75, 1, 0.75, 0, 0], dtype=torch.float64))
    assert torch.equal(weight_profile(u, profile="flat"), torch.tensor([0, 1, 1, 1, 1, 1, 0], dtype=torch.float64))
    assert torch.allclose(weight_profile(u, "gaussian"), torch.exp(-0.5 * u ** 2))
    assert torch.equal(u, torch.tensor([-1.5, -1.0, -0.5, 0.0, 0.5, 1.0, 1.5], dtype=torch.float64))  # not mutated


# --------------------------------------------------------------------------------------------- mean-shift

def _bimodal():
    """Two symmetric clusters per coordinate: 12 points around 0 (spread ≤ 0.3), 8 points around 5."""
    a = [-0.3, -0.2, -0.1, -0.1, 0.0, 0.0, 0.0, 0.0, 0.1, 0.1, 0.2, 0.3]
    b = [4.8, 4.9, 5.0, 5.0, 5.0, 5.0, 5.1, 5.2]
    col = torch.tensor(a + b, dtype=torch.float64)
    return torch.stack([col, 2 * col + 1, -col], dim=1)  # modes (0, 5), (1, 11), (0, −5)


@pytest.mark.parametrize("kernel,profile", [("epanechnikov", "kernel"), ("epanechnikov", "flat"),
                                            ("gaussian", "kernel")])
def test_mean_shift_converges_to_the_known_modes_of_a_bimodal_sample(kernel, profile):
    W = _bimodal()
    h = torch.tensor([1.0, 2.0, 1.0], dtype=torch.float64)
    atol = 1e-5 if kernel == "epanechnikov" else 1e-4  # Gaussian tails of the other cluster move it by ~1e-5
    near_a = torch.tensor([0.45, 1.9, -0.6], dtype=torch.float64)
    near_b = torch.tensor([4.4, 10.2, -5.7], dtype=torch.float64)
    x = mean_shift(W, near_a, h, kernel=kernel, profile=profile, tol=1e-12, t_max=1000)
    torch.testing.assert_close(x, torch.tensor([0.0, 1.0, 0.0], dtype=torch.float64), atol=atol, rtol=0)
    x = mean_shift(W, near_b, h, kernel=kernel, profile=profile, tol=1e-12, t_max=1000)
    torch.testing.assert_close(x, torch.tensor([5.0, 11.0, -5.0], dtype=torch.float64), atol=atol, rtol=0)
    # FedKP_cm from every client: 12 modes at cluster a, 8 at cluster b → the frequency-weighted mean of modes
    modes = mean_shift(W, W, h, kernel=kernel, profile=profile, tol=1e-12, t_max=1000)
    torch.testing.assert_close(modes.mean(0), torch.tensor([2.0, 5.0, -2.0], dtype=torch.float64), atol=atol, rtol=0)


def test_mean_shift_matches_a_plain_python_reference():
    torch.manual_seed(3)
    W = torch.randn(9, 6, dtype=torch.float64) + torch.tensor([0, 0, 0, 3, 3, 3.0], dtype=torch.float64) * \
        (torch.rand(9, 1, dtype=torch.float64) > 0.6)
    h = bandwidths(W)
    start = W.mean(0)
    x = mean_shift(W, start, h, tol=1e-6, t_max=100)
    for j in range(6):
        assert float(x[j]) == pytest.approx(_reference_mean_shift(W[:, j].tolist(), float(start[j]), float(h[j])),
                                            abs=1e-12)
    modes = mean_shift(W, W, h)
    for i in range(9):
        for j in range(6):
            assert float(modes[i, j]) == pytest.approx(
                _reference_mean_shift(W[:, j].tolist(), float(W[i, j]), float(h[j])), abs=1e-12)


def test_sequential_inplace_cluster_mean_matches_the_authors_loop():
    torch.manual_seed(4)
    W = torch.cat([torch.randn(5, 4, dtype=torch.float64), 4 + torch.randn(3, 4, dtype=torch.float64)])
    h = bandwidths(W)
    result = cluster_mean_shift_inplace(W, h)
    for j in range(4):
        sample = W[:, j].tolist()
        for i in range(8):
            sample[i] = _reference_mean_shift(None, sample[i], float(h[j]), self_row=i, sample=sample)
        assert float(result[j]) == pytest.approx(sum(sample) / 8, abs=1e-12)
    assert not torch.allclose(result, mean_shift(W, W, h).mean(0))  # it differs from Alg. 10 here
    W_before = W.clone()
    cluster_mean_shift_inplace(W, h)
    assert torch.equal(W, W_before)  # the caller's sample is left alone


def test_degenerate_coordinates_keep_their_value():
    W = torch.tensor([[0.7, 1.0, 0.0],
                      [0.7, 1.0, 0.0],
                      [0.7, 1.0, 10.0],
                      [0.7, 1.0, 10.0],
                      [0.7, 1.0, 0.0],
                      [0.7, 3.0, 10.0]], dtype=torch.float64)
    h = bandwidths(W)
    assert h[0] == 0 and h[1] == 0  # zero spread; IQR = 0 under Silverman
    x = mean_shift(W, W.mean(0), h)
    assert x[0] == W[:, 0].mean()  # zero spread: kept
    assert x[1] == W[:, 1].mean()  # h = 0: stays at its start (the client mean)
    # an empty window leaves the start where it is: window [4, 6] holds no client
    x = mean_shift(W, torch.tensor([0.7, 1.0, 5.0], dtype=torch.float64), torch.tensor([0.0, 0.0, 1.0],
                                                                                       dtype=torch.float64))
    assert x[2] == 5.0
    # the only client in the window sits on its edge (weight 0): stays too
    x = mean_shift(W, torch.tensor([0.7, 1.0, 9.0], dtype=torch.float64), torch.tensor([0.0, 0.0, 1.0],
                                                                                       dtype=torch.float64))
    assert x[2] == 9.0
    # FedKP and FedKP_cm alike: degenerate coordinates come out as the client mean
    rows = list(W)
    for cluster in (False, True):
        out, diag = fedkp_aggregate(rows, cluster=cluster)
        assert out[0] == 0.7  # exactly the clients' common value
        torch.testing.assert_close(out[1], W[:, 1].mean(), rtol=0, atol=1e-15)
        assert diag["degenerate_fraction"] == pytest.approx(2 / 3)
    # with the σ fallback the IQR = 0 coordinate moves to the majority's value
    out, _ = fedkp_aggregate(rows, zero_iqr="sigma", tol=1e-12)
    assert float(out[1]) == pytest.approx(1.0, abs=1e-9)


def test_chunked_result_equals_unchunked():
    torch.manual_seed(5)
    W = torch.randn(11, 257) + 3 * (torch.rand(11, 257) > 0.7)
    h = bandwidths(W)
    for start in (W.mean(0), W):
        full = mean_shift(W, start, h, chunk=10 ** 6)
        for chunk in (1, 7, 64):
            assert torch.equal(mean_shift(W, start, h, chunk=chunk), full)
    rows = [r.clone() for r in W]
    for cluster in (False, True):
        full, _ = fedkp_aggregate(rows, cluster=cluster, chunk_size=10 ** 6)
        for chunk in (1, 5, 100):
            assert torch.equal(fedkp_aggregate(rows, cluster=cluster, chunk_size=chunk)[0], full)


def test_fedkp_tends_to_the_client_mean_as_the_bandwidth_scaling_grows():
    rng = np.random.default_rng(11)
    skewed = rng.exponential(size=(20, 40))
    bimodal = np.where(rng.random((20, 40)) < 0.3, 3.0, 0.0) + 0.5 * rng.normal(size=(20, 40))
    W = torch.tensor(np.concatenate([skewed, bimodal], axis=1))
    rows, mean = list(W), W.mean(0)
    for cluster in (False, True):
        distances = [float((fedkp_aggregate(rows, cluster=cluster, scale=s)[0] - mean).norm())
                     for s in (1.0, 10.0, 100.0)]
        assert distances[0] > distances[1] > distances[2], distances
        assert distances[2] < 0.01 * distances[0]  # the mode moves O(1/s²) from the mean (Appendix B)


def test_cluster_mean_equals_fedkp_on_a_unimodal_sample():
    # a symmetric, peaked sample per coordinate has one mode: every start reaches it (§3.7)
    col = torch.tensor([-1.0, -0.5, -0.2, -0.1, 0.0, 0.0, 0.1, 0.2, 0.5, 1.0], dtype=torch.float64)
    W = torch.stack([col, 3 * col - 2], dim=1)
    rows = list(W)
    plain, _ = fedkp_aggregate(rows, scale=3.0, tol=1e-12, t_max=2000)
    clustered, _ = fedkp_aggregate(rows, cluster=True, scale=3.0, tol=1e-12, t_max=2000)
    torch.testing.assert_close(plain, torch.tensor([0.0, -2.0], dtype=torch.float64), atol=1e-9, rtol=0)
    torch.testing.assert_close(clustered, plain, atol=1e-9, rtol=0)


def test_relative_tolerance_and_t_max_diagnostics():
    torch.manual_seed(6)
    W = torch.randn(30, 50, dtype=torch.float64)
    rows = list(W)
    _, diag = fedkp_aggregate(rows, t_max=1, tol=0.0)
    assert diag["iterations"] == 1 and diag["unconverged_fraction"] > 0.9
    _, diag = fedkp_aggregate(rows, t_max=1000, tol=1e-3, relative_tol=True)
    assert diag["unconverged_fraction"] == 0.0


def test_mask_leaves_buffers_to_the_client_mean():
    model = _model(bn=True)
    mask = parameter_mask(model)
    assert (~mask).sum() == 10  # BatchNorm running mean and var
    torch.manual_seed(8)
    rows = [torch.randn(mask.numel(), dtype=torch.float64) for _ in range(6)]
    W = torch.stack(rows)
    out, _ = fedkp_aggregate(rows, mask=mask)
    full, _ = fedkp_aggregate(rows)
    assert torch.equal(out[~mask], W[:, ~mask].mean(0))
    assert torch.equal(out[mask], fedkp_aggregate([r[mask] for r in rows])[0])
    assert not torch.equal(full[~mask], W[:, ~mask].mean(0))


# --------------------------------------------------------------------------------------------- config

def test_hyperparameter_defaults_and_validation():
    assert FedKPHyperparams().cluster is False and FedKPCMHyperparams().cluster is True
    hp = FedKPPAHyperparams()
    assert hp.cluster and hp.rho == 0.1 and hp.burnin_rounds == 25
    assert (hp.kernel, hp.weight_profile, hp.bandwidth_rule, hp.bandwidth_scaling, hp.tol, hp.t_max) == \
        ("epanechnikov", "kernel", "silverman_code", 1.0, 1e-6, 100)
    assert hp.use_server_optimizer is False and hp.kde_tensors == "state" and hp.cluster_mode == "independent"
    for name in ("fedkp", "fedkp_cm", "fedkppa"):
        assert ALGORITHMS[name].summable is False
        docs = ALGORITHMS[name].hyperparameter_docs()
        assert all(docs.values()), docs
    built = build(FedKPCMHyperparams, {"kernel": "gaussian", "bandwidth_rule": "scott", "t_max": 20}, "algorithm")
    assert built.kernel == "gaussian" and built.cluster
    bad = [({"kernel": "gaussian", "weight_profile": "flat"}, "algorithm.weight_profile"),
           ({"kernel": "cosine"}, "algorithm.kernel"), ({"bandwidth_rule": "isj"}, "algorithm.bandwidth_rule"),
           ({"bandwidth_scaling": 0}, "algorithm.bandwidth_scaling"), ({"t_max": 0}, "algorithm.t_max"),
           ({"tol": -1}, "algorithm.tol"), ({"chunk_size": -1}, "algorithm.chunk_size")]
    for params, field in bad:
        with pytest.raises(ConfigError) as err:
            build(FedKPHyperparams, params, "algorithm")
        assert err.value.field == field
    with pytest.raises(ConfigError):
        build(FedKPPAHyperparams, {"rho": -0.1}, "algorithm")


# --------------------------------------------------------------------------------------------- the interface

def _round(algo, sizes, server_lr=1.0, state=None, model=None):
    model = model or _model(0)
    ctx = _ctx(model, lr=server_lr)
    state = state or algo.init_server_state(ctx)
    payload = algo.broadcast(state, list(range(len(sizes))))
    updates = [algo.client_update(payload, _client(n, seed=i, cid=i)) for i, n in enumerate(sizes)]
    return state, ctx, payload, updates


def test_fedkp_bandwidth_thesis_arm_runs_the_authors_in_place_mean_shift():
    """The sweep's FedKP_cm arm is the thesis's: cluster_mode sequential_inplace (§12 A4), and --set
    switches it to Alg. 10 as written. The docs say the in-place behaviour is verified and what a relative tol
    needs."""
    from platform.config.search_space import load_search_space

    space = load_search_space("fedkp_bandwidth")
    assert list(space.parameters) == ["algorithm.bandwidth_scaling"]  # one question: s, per variant
    assert space.cells() == [{"algorithm.name": "fedkp"}, {"algorithm.name": "fedkp_cm"}]
    thesis = space.cell_space(1).trial_config({}).algorithm.params
    assert thesis.cluster and thesis.cluster_mode == "sequential_inplace"
    assert (thesis.kernel, thesis.bandwidth_rule) == ("epanechnikov", "silverman_code")  # held at the thesis's
    assert not space.cell_space(0).trial_config({}).algorithm.params.cluster  # one start: no mode
    written = load_search_space("fedkp_bandwidth", {"algorithm.cluster_mode": "independent"})
    assert written.cell_space(1).trial_config({}).algorithm.params.cluster_mode == "independent"
    assert "sequential_inplace" in space.description and "--set algorithm.cluster_mode=independent" in \
        space.description
    docs = ALGORITHMS["fedkp_cm"].hyperparameter_docs()
    assert "2e-16" in docs["cluster_mode"] and "1e-3" in docs["tol_mode"]
    assert "unverified" not in fedkp_module.__doc__ and "sequential_inplace" in fedkp_module.__doc__


@pytest.mark.parametrize("name", ["fedkp", "fedkp_cm"])
def test_end_to_end_through_the_interface(name):
    algo = ALGORITHMS[name]()
    state, ctx, payload, updates = _round(algo, [12, 20, 0, 31, 17])
    assert updates[2].weight == 0 and updates[0].weight == 12
    # the clients are FedAvg's, so the one-round stage cache may share them
    fedavg = ALGORITHMS["fedavg"]()
    assert algo.client_stage_fields() == fedavg.client_stage_fields()
    for i, (n, u) in enumerate(zip([12, 20, 0, 31, 17], updates)):
        reference = fedavg.client_update(payload, _client(n, seed=i, cid=i))
        assert torch.equal(u.tensors["delta"], reference.tensors["delta"]) and u.weight == reference.weight
    rows = [state.weights + u.tensors["delta"] for u in updates if u.weight > 0]  # the client models
    new, metrics = aggregate_round(algo, state, updates, ctx)
    expected, _ = fedkp_aggregate(rows, cluster=name == "fedkp_cm")
    assert torch.equal(new.weights, expected)
    assert new.round == 1 and metrics["fedkp_clients"] == 4 and set(metrics) <= set(algo.declared_metrics())
    assert not torch.allclose(new.weights, torch.stack(rows).mean(0))  # a mode, not the mean
    assert torch.equal(algo.evaluation_weights(new), new.weights)
    with pytest.raises(ValueError):
        aggregate_round(algo, state, [reduce_updates(updates[:2]), *updates[2:]], ctx)[0]


def test_server_optimizer_switch():
    plain = ALGORITHMS["fedkp"]()
    stepped = ALGORITHMS["fedkp"](dataclasses.replace(FedKPHyperparams(), use_server_optimizer=True))
    state, ctx, _, updates = _round(plain, [15, 25, 20], server_lr=0.5)
    agg = aggregate_round(plain, state, updates, ctx)[0].weights  # no server optimiser: θ_{t+1} = θ_agg
    new = aggregate_round(stepped, state, updates, ctx)[0]
    torch.testing.assert_close(new.weights, state.weights + 0.5 * (agg - state.weights), rtol=0, atol=1e-7)


def test_kde_tensors_parameters_through_the_interface():
    algo = ALGORITHMS["fedkp"](dataclasses.replace(FedKPHyperparams(), kde_tensors="parameters"))
    model = _model(bn=True)
    ctx = _ctx(model)
    state = algo.init_server_state(ctx)
    torch.manual_seed(9)
    updates = [ClientUpdate(weight=10.0, tensors={"delta": 0.1 * torch.randn_like(state.weights)}) for _ in range(5)]
    new = aggregate_round(algo, state, updates, ctx)[0]
    mask = parameter_mask(model)
    W = torch.stack([state.weights + u.tensors["delta"] for u in updates])
    torch.testing.assert_close(new.weights[~mask], W[:, ~mask].mean(0), rtol=0, atol=0)
    assert not torch.allclose(new.weights[mask], W[:, mask].mean(0))


def test_fedkppa_burnin_then_fedpa_clients():
    from algorithms.fedpa import fedpa_local

    sizes = [12, 20, 16]
    hp = dataclasses.replace(FedKPPAHyperparams(), burnin_rounds=1)
    kppa, cm = ALGORITHMS["fedkppa"](hp), ALGORITHMS["fedkp_cm"]()
    # before the burn-in: plain SGD clients, exactly FedKP_cm's
    state, ctx, payload, updates = _round(kppa, sizes)
    assert payload["round"] == 0
    _, _, _, reference = _round(cm, sizes)
    for a, b in zip(updates, reference):
        assert torch.equal(a.tensors["delta"], b.tensors["delta"])
    state = aggregate_round(kppa, state, updates, ctx)[0]
    # from round B on: FedPA clients returning x0 − Δ_i, aggregated by FedKP_cm
    payload = kppa.broadcast(state, [0, 1, 2])
    assert payload["round"] == 1
    updates = [kppa.client_update(payload, _client(n, seed=i, cid=i)) for i, n in enumerate(sizes)]
    sgd = [cm.client_update(payload, _client(n, seed=i, cid=i)) for i, n in enumerate(sizes)]
    for i, (a, b) in enumerate(zip(updates, sgd)):
        assert not torch.allclose(a.tensors["delta"], b.tensors["delta"])
        assert a.metrics["fedpa_samples"] == 2.0  # one IASG sample per local epoch
        delta, _, _ = fedpa_local(hp, payload, _client(sizes[i], seed=i, cid=i))
        assert torch.equal(a.tensors["delta"], -delta)  # the client vector is x0 − Δ_i
    new = aggregate_round(kppa, state, updates, ctx)[0]
    expected, _ = fedkp_aggregate([payload["weights"] - (-u.tensors["delta"]) for u in updates], cluster=True)
    assert torch.equal(new.weights, expected) and new.round == 2
    assert kppa.client_stage_fields()["procedure"] == "fedpa"
