"""The model zoo: every registered model builds, runs forward and backward on the shapes it supports, refuses
the shapes it cannot take with a ConfigError, and matches the parameter counts the spec digests give.

Batch size 2 and small inputs keep the whole file to a few seconds of CPU per model.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from platform.errors import ConfigError
from platform.config.models import (AUTOENCODERS, MODELS, Classifier, assign_architectures, build_autoencoder,
                             build_model)

MNIST, DIGITS, CIFAR = (1, 28, 28), (1, 8, 8), (3, 32, 32)
NUM_CLASSES = 7  # not 10, so a head that ignores num_classes shows up

# Shapes each model must take; every registered model must be listed (a new model needs an entry here).
ALL_SHAPES = (MNIST, DIGITS, CIFAR)
SUPPORTED = {name: ALL_SHAPES for name in (
    "cnn", "mlp", "cnn1", "cnn2", "cnn3", "emnist_cnn1", "emnist_cnn2", "emnist_cnn3", "leaf_cnn",
    "fedkp_mnist_cnn", "fedkp_mnist_lite", "fedavg_cnn", "resnet8", "resnet18", "resnet8_narrow", "resnet20",
    "wrn16_4", "mobilenet_v2", "shufflenet_v2",
)}
SUPPORTED.update({
    "lenet": (MNIST, CIFAR),                    # two unpadded 5×5 convs + two pools need >= 16×16
    "alexnet": (MNIST, CIFAR),                  # total stride 16: needs >= 15×15
    # total stride 32: needs >= 17×17; FedKP runs it on 24×24 crops (fedkp_fedpa.md §8.2)
    "resnet18_imagenet_stem": (MNIST, CIFAR, (3, 24, 24)),
})
REFUSED = [("lenet", DIGITS), ("alexnet", DIGITS), ("resnet18_imagenet_stem", DIGITS),
           ("cnn1", (1, 3, 3)), ("resnet8", (1, 1, 1)), ("cnn", (64,)), ("resnet18", (3, 32))]

FORWARD_CASES = [(name, shape) for name, shapes in SUPPORTED.items() for shape in shapes]


def _n_params(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def test_every_registered_model_has_shape_expectations():
    assert set(MODELS) == set(SUPPORTED)


@pytest.mark.parametrize("name,shape", FORWARD_CASES, ids=[f"{n}-{'x'.join(map(str, s))}" for n, s in FORWARD_CASES])
def test_forward_backward_features(name, shape):
    torch.manual_seed(0)
    model = build_model(name, shape, NUM_CLASSES)
    assert isinstance(model, Classifier) and model.training
    x = torch.randn(2, *shape)
    logits = model(x)
    assert logits.shape == (2, NUM_CLASSES)
    logits.logsumexp(dim=1).sum().backward()
    grads = [p.grad for p in model.parameters()]
    assert all(g is not None for g in grads), "every parameter takes part in the forward pass"
    assert all(torch.isfinite(g).all() for g in grads)

    model.eval()
    with torch.no_grad():
        feats = model.features(x)
        assert feats.shape == (2, model.feature_dim) and isinstance(model.feature_dim, int)
        assert torch.allclose(model.head(feats), model(x), atol=1e-5)


@pytest.mark.parametrize("name,shape", REFUSED)
def test_shapes_a_model_cannot_take_give_a_config_error(name, shape):
    with pytest.raises(ConfigError) as info:
        build_model(name, shape, 10)
    assert info.value.field == "model.name"
    assert repr(name) in str(info.value) and str(tuple(shape)) in str(info.value)


# Exact counts are ours (trainable parameters); ``spec`` is the digest's figure with its stated precision.
PARAM_COUNTS = [
    # name, input shape, classes, exact, (spec value, tolerance) — tolerance 0 means the spec gives it exactly
    ("cnn1", MNIST, 10, 1_042, (1_042, 0)),                     # feded.md §5.1
    ("cnn2", MNIST, 10, 4_138, (4_138, 0)),
    ("cnn3", MNIST, 10, 8_266, (8_266, 0)),
    ("emnist_cnn1", MNIST, 26, 2_626, (2_626, 0)),              # feded.md §5.2
    ("emnist_cnn2", MNIST, 26, 20_826, (20_826, 0)),
    ("emnist_cnn3", MNIST, 26, 23_834, (23_834, 0)),
    ("resnet18_imagenet_stem", CIFAR, 10, 11_181_642, (11_181_642, 0)),  # feded.md §5.3
    ("leaf_cnn", MNIST, 62, 1_206_590, (1_206_590, 0)),         # fedkp_fedpa.md §8.2, Table D.2
    ("fedkp_mnist_cnn", MNIST, 10, 28_938, (28_938, 0)),        # Table D.1
    ("fedkp_mnist_lite", MNIST, 10, 3_870, (3_870, 0)),         # "lite" [code]
    ("resnet8", CIFAR, 10, 4_903_242, (4.90e6, 0.005e6)),       # fedaux.md §6.2: ≈4.90M / ≈4.95M
    ("resnet8", CIFAR, 100, 4_949_412, (4.95e6, 0.005e6)),
    ("fedavg_cnn", MNIST, 10, 1_663_370, (1.66e6, 0.005e6)),    # mnfl.md §7: ≈1.66M / ≈2.16M
    ("fedavg_cnn", CIFAR, 10, 2_156_490, (2.16e6, 0.005e6)),
    ("lenet", (3, 28, 28), 10, 44_726, (45e3, 500)),            # mnfl.md §7: ≈45K (small input, 3 channels)
    ("alexnet", (3, 28, 28), 10, 20_126_538, (20.1e6, 0.05e6)),  # ≈20.1M
    ("resnet18", CIFAR, 10, 11_173_962, (11.17e6, 0.005e6)),    # 11.17M
    ("shufflenet_v2", CIFAR, 10, 1_263_854, (1.26e6, 0.005e6)),  # ≈1.26M
    ("resnet8_narrow", CIFAR, 10, 78_042, (78e3, 500)),         # single_image.md §6.3: about 78k
    ("resnet20", CIFAR, 10, 272_474, (0.27e6, 0.005e6)),        # about 0.27M
    ("wrn16_4", CIFAR, 10, 2_748_890, (2.7e6, 0.05e6)),         # about 2.7M
    ("mobilenet_v2", CIFAR, 10, 2_236_682, None),               # no figure in the digests
    ("lenet", CIFAR, 10, 62_006, None),
    ("alexnet", CIFAR, 10, 23_272_266, None),
]


@pytest.mark.parametrize("name,shape,classes,exact,spec", PARAM_COUNTS,
                         ids=[f"{c[0]}-{'x'.join(map(str, c[1]))}-{c[2]}" for c in PARAM_COUNTS])
def test_parameter_counts(name, shape, classes, exact, spec):
    n = _n_params(build_model(name, shape, classes))
    assert n == exact
    if spec is not None:
        value, tol = spec
        assert abs(n - value) <= tol


@pytest.mark.parametrize("name", ["resnet8", "resnet18", "resnet18_imagenet_stem"])
def test_wide_resnets_have_512_d_features(name):
    model = build_model(name, CIFAR, 10)
    assert model.feature_dim == 512
    assert model.features(torch.randn(2, *CIFAR)).shape == (2, 512)


@pytest.mark.parametrize("name,dim", [("resnet8_narrow", 64), ("resnet20", 64), ("wrn16_4", 256),
                                      ("mobilenet_v2", 1280), ("shufflenet_v2", 1024), ("leaf_cnn", 128)])
def test_feature_dims(name, dim):
    assert build_model(name, CIFAR, 10).feature_dim == dim


def test_thesis_resnet18_has_dropout_before_the_linear_head():
    head = build_model("resnet18_imagenet_stem", CIFAR, 10).head
    assert isinstance(head[0], nn.Dropout) and head[0].p == 0.5 and isinstance(head[1], nn.Linear)


def test_building_leaves_rng_and_batchnorm_statistics_untouched():
    torch.manual_seed(3)
    model = build_model("resnet8", DIGITS, 10)
    after_build = torch.rand(4)
    torch.manual_seed(3)
    again = build_model("resnet8", DIGITS, 10)
    assert torch.equal(torch.rand(4), after_build)
    for a, b in zip(model.state_dict().values(), again.state_dict().values()):
        assert torch.equal(a, b)
    bn = next(m for m in model.modules() if isinstance(m, nn.BatchNorm2d))
    assert int(bn.num_batches_tracked) == 0 and torch.all(bn.running_mean == 0)
    assert model.training


def test_registry_entries_validate_too_and_accept_numpy_ints():
    model = MODELS["cnn1"](list(MNIST), np.int64(10))
    assert model(torch.zeros(2, *MNIST)).shape == (2, 10)
    with pytest.raises(ConfigError):
        MODELS["lenet"](DIGITS, 10)
    with pytest.raises(ConfigError, match="num_classes"):
        build_model("cnn", DIGITS, 0)


def test_classifier_infers_feature_dim_from_its_head():
    model = Classifier(nn.Flatten(), nn.Sequential(nn.Dropout(0.1), nn.Linear(12, 3)))
    assert model.feature_dim == 12


def test_unknown_model_name_lists_the_allowed_names():
    with pytest.raises(ConfigError) as info:
        build_model("vgg99", CIFAR, 10)
    assert info.value.field == "model.name"
    message = str(info.value)
    assert "unknown model 'vgg99'; allowed: " in message
    assert all(name in message for name in MODELS)


# --------------------------------------------------------------------------------------------------------------
# Autoencoders (feded.md §5.4)

AE_CASES = [("feded_mnist", MNIST, 4, 87_125, 87.1e3), ("feded_cifar", CIFAR, 64, 499_459, 499.5e3)]


@pytest.mark.parametrize("name,shape,latent,exact,spec", AE_CASES)
def test_autoencoder_reconstructs_with_per_sample_losses(name, shape, latent, exact, spec):
    torch.manual_seed(0)
    ae = build_autoencoder(name, shape)
    assert not isinstance(ae, Classifier)
    assert _n_params(ae) == exact and abs(exact - spec) <= 50
    x = torch.rand(2, *shape)
    recon = ae(x)
    assert recon.shape == x.shape and recon.min() >= 0 and recon.max() <= 1  # sigmoid output
    assert ae.encode(x).shape == (2, latent)
    losses = ae.per_sample_loss(x)
    assert losses.shape == (2,) and torch.all(losses >= 0)
    assert torch.allclose(losses, ((recon - x) ** 2).mean(dim=(1, 2, 3)))
    losses.mean().backward()
    assert all(p.grad is not None for p in ae.parameters())


def test_autoencoder_decoders_follow_the_thesis_code():
    convts = [m for m in build_autoencoder("feded_mnist", MNIST).decoder if isinstance(m, nn.ConvTranspose2d)]
    assert [(c.padding[0], c.output_padding[0]) for c in convts] == [(0, 0), (1, 1), (1, 1)]   # 3 → 7 → 14 → 28
    convts = [m for m in build_autoencoder("feded_cifar", CIFAR).decoder if isinstance(m, nn.ConvTranspose2d)]
    assert [(c.padding[0], c.output_padding[0]) for c in convts] == [(0, 0), (0, 0), (0, 1)]   # 3 → 7 → 15 → 32


@pytest.mark.parametrize("name,shape", [("feded_mnist", CIFAR), ("feded_cifar", MNIST), ("feded_mnist", (1, 9, 9))])
def test_autoencoders_adapt_to_other_shapes(name, shape):
    ae = build_autoencoder(name, shape)
    assert ae(torch.rand(2, *shape)).shape == (2, *shape)


def test_autoencoder_errors():
    with pytest.raises(ConfigError) as info:
        build_autoencoder("vae", MNIST)
    assert "unknown autoencoder 'vae'; allowed: " in str(info.value)
    assert all(name in str(info.value) for name in AUTOENCODERS)
    with pytest.raises(ConfigError) as info:
        build_autoencoder("feded_mnist", DIGITS)
    assert "(1, 8, 8)" in str(info.value)


# --------------------------------------------------------------------------------------------------------------
# Heterogeneous client architectures

def test_assign_architectures_contiguous_blocks_as_mnfl():
    archs = assign_architectures(["lenet", "alexnet", "resnet18", "shufflenet_v2"], 20)
    assert archs == ["lenet"] * 5 + ["alexnet"] * 5 + ["resnet18"] * 5 + ["shufflenet_v2"] * 5


def test_assign_architectures_uneven_split_gives_the_extra_clients_to_the_last_blocks():
    archs = assign_architectures(["resnet8_narrow", "wrn16_4", "resnet20"], 20)  # single_image.md §4.6: 6/7/7
    assert archs == ["resnet8_narrow"] * 6 + ["wrn16_4"] * 7 + ["resnet20"] * 7
    assert assign_architectures("cnn", 3) == ["cnn"] * 3


@pytest.mark.parametrize("spec,n,fragment", [
    (["lenet", "vgg99"], 20, "unknown model 'vgg99'; allowed: "),
    ([], 20, "at least one architecture"),
    (["lenet", "alexnet"], 1, "at least 2 clients"),
])
def test_assign_architectures_errors(spec, n, fragment):
    with pytest.raises(ConfigError) as info:
        assign_architectures(spec, n)
    assert info.value.field == "model.architectures" and fragment in str(info.value)
