"""Small convolutional and fully connected classifiers.

- ``mlp`` and ``cnn``: the platform's original smoke-test models, unchanged (same layers, same init order).
- ``cnn1``/``cnn2``/``cnn3`` and ``emnist_cnn1``/``emnist_cnn2``/``emnist_cnn3``: the FedED thesis CNNs
  (docs/methods/feded.md §5.1, §5.2).
- ``leaf_cnn``, ``fedkp_mnist_cnn``, ``fedkp_mnist_lite``: the FedKP thesis CNNs (docs/methods/fedkp_fedpa.md §8.2).
- ``fedavg_cnn``: "the CNN of McMahan et al." that MNFL's homogeneous runs use (docs/methods/mnfl.md §4, [REC] layout).
- ``lenet`` and ``alexnet``: two of MNFL's heterogeneous client models (docs/methods/mnfl.md §4, §7, §11).

Every builder adapts the first layer to the input channels and sizes the first linear layer from the input's
spatial size, so the same layout runs on 1×28×28, 3×32×32 and, where the downsampling allows, 1×8×8.
"""
from __future__ import annotations

from torch import nn

from algorithms.models.base import Classifier, flat_dim, register
from algorithms.models.pooling import MaxPool2d


# --------------------------------------------------------------------------------------------------------------
# The platform's original models. Do not change: other tests pin their layers and init order.

@register("cnn")
def _small_cnn(input_shape: tuple[int, ...], num_classes: int) -> Classifier:
    """Two 3×3 conv blocks (16, 32 channels) with 2×2 max-pooling, then a linear head. Sized for 8×8 digits."""
    channels, height, width = input_shape
    features = nn.Sequential(
        nn.Conv2d(channels, 16, 3, padding=1), nn.ReLU(), MaxPool2d(2),
        nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), MaxPool2d(2),
        nn.Flatten(),
    )
    dim = flat_dim(features, input_shape)
    return Classifier(features, nn.Linear(dim, num_classes))


@register("mlp", image=False)
def _mlp(input_shape: tuple[int, ...], num_classes: int, hidden: int = 64) -> Classifier:
    """Flatten → Linear(dim, 64) → ReLU → Linear(64, C). Takes any input shape."""
    dim = 1
    for s in input_shape:
        dim *= s
    return Classifier(nn.Sequential(nn.Flatten(), nn.Linear(dim, hidden), nn.ReLU()), nn.Linear(hidden, num_classes))


# --------------------------------------------------------------------------------------------------------------
# FedED thesis CNNs (docs/methods/feded.md §5.1, §5.2)

def one_conv_cnn(input_shape: tuple[int, ...], num_classes: int, channels: int) -> Classifier:
    """Tables A.1/A.2: Conv(N_Ch, 5×5, s1, p2) → ReLU → MaxPool(4, **stride 4**) → Flatten → Linear.

    The thesis tables print stride 2 for the pool, but only stride 4 gives the 7×7 map and the stated parameter
    counts (docs/methods/feded.md §5.1 and §9 item 8), so stride 4 it is. On 1×28×28 with 10 classes:
    N_Ch = 2 → 1,042, 8 → 4,138, 16 → 8,266 parameters.
    """
    in_ch = input_shape[0]
    features = nn.Sequential(
        nn.Conv2d(in_ch, channels, 5, stride=1, padding=2), nn.ReLU(),
        MaxPool2d(4, stride=4),
        nn.Flatten(),
    )
    return Classifier(features, nn.Linear(flat_dim(features, input_shape), num_classes))


@register("cnn1")
def _cnn1(input_shape, num_classes):
    """FedED MNIST CNN1 (docs/methods/feded.md §5.1): N_Ch = 2; 1,042 params on 1×28×28, 10 classes."""
    return one_conv_cnn(input_shape, num_classes, 2)


@register("cnn2")
def _cnn2(input_shape, num_classes):
    """FedED MNIST CNN2 (docs/methods/feded.md §5.1): N_Ch = 8; 4,138 params on 1×28×28, 10 classes."""
    return one_conv_cnn(input_shape, num_classes, 8)


@register("cnn3")
def _cnn3(input_shape, num_classes):
    """FedED MNIST CNN3 (docs/methods/feded.md §5.1): N_Ch = 16; 8,266 params on 1×28×28, 10 classes.

    This is the true 16-channel CNN3. The reference code's factory returned CNN2 for "mnist_cnn3", so the
    thesis's MNIST "CNN3" numbers are really CNN2's (docs/methods/feded.md §5.1 caveat); use ``cnn2`` to reproduce
    them.
    """
    return one_conv_cnn(input_shape, num_classes, 16)


@register("emnist_cnn1")
def _emnist_cnn1(input_shape, num_classes):
    """FedED EMNIST CNN1 (docs/methods/feded.md §5.2, Table A.2): the §5.1 layout with N_Ch = 2; 2,626 params on
    1×28×28, 26 classes. Same layout as ``cnn1``; a separate name so configs read like the thesis."""
    return one_conv_cnn(input_shape, num_classes, 2)


@register("emnist_cnn2")
def _emnist_cnn2(input_shape, num_classes):
    """FedED EMNIST CNN2 (docs/methods/feded.md §5.2, Table A.2): the §5.1 layout with N_Ch = 16; 20,826 params on
    1×28×28, 26 classes. Same layout as ``cnn3``."""
    return one_conv_cnn(input_shape, num_classes, 16)


@register("emnist_cnn3")
def _emnist_cnn3(input_shape, num_classes):
    """FedED EMNIST CNN3 (docs/methods/feded.md §5.2, Table A.3): Conv8(5×5,p2) → ReLU → MaxPool2 →
    Conv16(5×5,p2) → ReLU → MaxPool2 → Flatten(784) → Linear; 23,834 params on 1×28×28, 26 classes.

    This is the post-2022-05-02 definition the table describes, not the older, bigger net (§5.2).
    """
    in_ch = input_shape[0]
    features = nn.Sequential(
        nn.Conv2d(in_ch, 8, 5, padding=2), nn.ReLU(), MaxPool2d(2, 2),
        nn.Conv2d(8, 16, 5, padding=2), nn.ReLU(), MaxPool2d(2, 2),
        nn.Flatten(),
    )
    return Classifier(features, nn.Linear(flat_dim(features, input_shape), num_classes))


# --------------------------------------------------------------------------------------------------------------
# FedKP thesis CNNs (docs/methods/fedkp_fedpa.md §8.2)

@register("leaf_cnn")
def _leaf_cnn(input_shape, num_classes):
    """The EMNIST-62/FEMNIST CNN of the FedKP thesis, Table D.2 (docs/methods/fedkp_fedpa.md §8.2): the Reddi et al. /
    FedPA CNN with ReLUs. 1,206,590 params on 1×28×28, 62 classes.

    Conv32(3×3, no pad) → ReLU → Conv64(3×3) → ReLU → MaxPool2 → Dropout(0.25) → Flatten(9216) → Linear(128) →
    ReLU | Dropout(0.5) → Linear(C). Features are the 128-d activations; the second dropout sits in the head
    (it is the identity in eval mode, so scoring on features is unaffected).

    Init as in the thesis code: Xavier-normal weights on conv1, conv2 and dense1, all biases 0; dense2 keeps
    PyTorch's default weight init. The code applies Xavier to dense1 twice; once is the same distribution.
    Note: LEAF's own FEMNIST CNN (5×5 convs, a 2048-unit dense layer) is a different, bigger net; this is the
    one the method page describes.
    """
    in_ch = input_shape[0]
    conv1, conv2 = nn.Conv2d(in_ch, 32, 3), nn.Conv2d(32, 64, 3)
    trunk = nn.Sequential(conv1, nn.ReLU(), conv2, nn.ReLU(), MaxPool2d(2), nn.Dropout(0.25), nn.Flatten())
    dense1 = nn.Linear(flat_dim(trunk, input_shape), 128)
    dense2 = nn.Linear(128, num_classes)
    for layer in (conv1, conv2, dense1):
        nn.init.xavier_normal_(layer.weight)
    for layer in (conv1, conv2, dense1, dense2):
        nn.init.zeros_(layer.bias)
    features = nn.Sequential(*trunk, dense1, nn.ReLU())
    return Classifier(features, nn.Sequential(nn.Dropout(0.5), dense2))


@register("fedkp_mnist_cnn")
def _fedkp_mnist_cnn(input_shape, num_classes):
    """FedKP thesis MNIST CNN, Table D.1 (docs/methods/fedkp_fedpa.md §8.2): Conv16(5×5,p2) → ReLU → MaxPool2 →
    Conv32(5×5,p2) → ReLU → MaxPool2 → Flatten(1568) → Linear(C); 28,938 params on 1×28×28, 10 classes."""
    in_ch = input_shape[0]
    features = nn.Sequential(
        nn.Conv2d(in_ch, 16, 5, padding=2), nn.ReLU(), MaxPool2d(2),
        nn.Conv2d(16, 32, 5, padding=2), nn.ReLU(), MaxPool2d(2),
        nn.Flatten(),
    )
    return Classifier(features, nn.Linear(flat_dim(features, input_shape), num_classes))


@register("fedkp_mnist_lite")
def _fedkp_mnist_lite(input_shape, num_classes):
    """FedKP "MNIST_Model_lite", the net the main MNIST runs actually used (docs/methods/fedkp_fedpa.md §8.2 [code]):
    Conv10(5×5, no pad) → ReLU → MaxPool(4) → Flatten(360) → Linear(C); 3,870 params on 1×28×28, 10 classes."""
    in_ch = input_shape[0]
    features = nn.Sequential(nn.Conv2d(in_ch, 10, 5), nn.ReLU(), MaxPool2d(4), nn.Flatten())
    return Classifier(features, nn.Linear(flat_dim(features, input_shape), num_classes))


# --------------------------------------------------------------------------------------------------------------
# MNFL models (docs/methods/mnfl.md §4, §7, §11)

@register("fedavg_cnn")
def _fedavg_cnn(input_shape, num_classes):
    """"The CNN of McMahan et al. 2017" for MNFL's homogeneous runs, in the layout docs/methods/mnfl.md §4 recommends:
    Conv32(5×5,p2) → ReLU → MaxPool2 → Conv64(5×5,p2) → ReLU → MaxPool2 → Linear(512) → ReLU | Linear(C).
    Padding 2 lets it take 28×28 and 32×32: 1,663,370 params on 1×28×28 and 2,156,490 on 3×32×32 (10 classes),
    matching the method page's ≈1.66M / ≈2.16M (§7). Features are the 512-d hidden layer."""
    in_ch = input_shape[0]
    trunk = nn.Sequential(
        nn.Conv2d(in_ch, 32, 5, padding=2), nn.ReLU(), MaxPool2d(2),
        nn.Conv2d(32, 64, 5, padding=2), nn.ReLU(), MaxPool2d(2),
        nn.Flatten(),
    )
    features = nn.Sequential(*trunk, nn.Linear(flat_dim(trunk, input_shape), 512), nn.ReLU())
    return Classifier(features, nn.Linear(512, num_classes))


@register("lenet")
def _lenet(input_shape, num_classes):
    """LeNet-5, one of MNFL's heterogeneous client models (docs/methods/mnfl.md §4; layout not given there).

    Conv6(5×5, no pad) → ReLU → MaxPool2 → Conv16(5×5) → ReLU → MaxPool2 → Flatten → Linear(120) → ReLU →
    Linear(84) → ReLU | Linear(C). ReLU instead of the original tanh, as the usual modern variant. On a 28×28
    input this gives 44,426 params (1 channel) / 44,726 (3 channels), the method page's "LeNet (small input) ≈45K"
    (§7); on 3×32×32, 62,006. Needs at least 16×16 inputs (two unpadded 5×5 convs, two pools), so 8×8 is refused.
    Features are the 84-d layer.
    """
    in_ch = input_shape[0]
    trunk = nn.Sequential(
        nn.Conv2d(in_ch, 6, 5), nn.ReLU(), MaxPool2d(2),
        nn.Conv2d(6, 16, 5), nn.ReLU(), MaxPool2d(2),
        nn.Flatten(),
    )
    features = nn.Sequential(*trunk, nn.Linear(flat_dim(trunk, input_shape), 120), nn.ReLU(),
                             nn.Linear(120, 84), nn.ReLU())
    return Classifier(features, nn.Linear(84, num_classes))


@register("alexnet")
def _alexnet(input_shape, num_classes):
    """The small-input AlexNet MNFL's heterogeneous runs use (docs/methods/mnfl.md §4, §7, §11: "AlexNet (small
    variant) ≈20.1M params"; layout not given).

    Our layout: Conv64(3×3, s2, p1) → ReLU → MaxPool2 → Conv192(3×3,p1) → ReLU → MaxPool2 → Conv384 → ReLU →
    Conv256 → ReLU → Conv256 → ReLU → MaxPool2 → Flatten → Dropout(0.5) → Linear(4096) → ReLU → Dropout(0.5) →
    Linear(4096) → ReLU | Linear(C). It is AlexNet's five-conv/three-FC shape with 3×3 kernels for small
    images. On 3×28×28 (grey repeated to 3 channels, as the MNFL reference does) it has 20,126,538 params, the
    method page's ≈20.1M; on 3×32×32, 23,272,266. Total stride 16: inputs must be at least 15×15, so 8×8 is refused.
    Features are the 4096-d layer.
    """
    in_ch = input_shape[0]
    trunk = nn.Sequential(
        nn.Conv2d(in_ch, 64, 3, stride=2, padding=1), nn.ReLU(inplace=True), MaxPool2d(2),
        nn.Conv2d(64, 192, 3, padding=1), nn.ReLU(inplace=True), MaxPool2d(2),
        nn.Conv2d(192, 384, 3, padding=1), nn.ReLU(inplace=True),
        nn.Conv2d(384, 256, 3, padding=1), nn.ReLU(inplace=True),
        nn.Conv2d(256, 256, 3, padding=1), nn.ReLU(inplace=True), MaxPool2d(2),
        nn.Flatten(),
    )
    features = nn.Sequential(
        *trunk,
        nn.Dropout(0.5), nn.Linear(flat_dim(trunk, input_shape), 4096), nn.ReLU(inplace=True),
        nn.Dropout(0.5), nn.Linear(4096, 4096), nn.ReLU(inplace=True),
    )
    return Classifier(features, nn.Linear(4096, num_classes))
