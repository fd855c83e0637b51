"""Residual networks.

- ``resnet8`` (FedAUX, docs/methods/fedaux.md §6.2) and ``resnet18`` (MNFL's "CIFAR-style" ResNet-18,
  docs/methods/mnfl.md §4, §11): torchvision's ``ResNet`` with BasicBlocks, a 3×3 stride-1 stem and no max-pool;
  widths 64/128/256/512, so both have **512-d features**.
- ``resnet18_imagenet_stem``: the FedED thesis's CIFAR-10 ResNet-18 (docs/methods/feded.md §5.3): torchvision
  ``resnet18`` with the ImageNet stem kept, and Dropout(0.5) before the final linear layer.
- ``resnet8_narrow`` and ``resnet20``: the He et al. CIFAR ResNets (16/32/64 widths, 64-d features) of the
  single-image paper (docs/methods/single_image.md §6.3). Its "ResNet-8" is this narrow net, not FedAUX's.
- ``wrn16_4``: pre-activation Wide ResNet-16-4 (docs/methods/single_image.md §6.3), 256-d features.

All are trained from scratch (``weights=None``, never a download). The first conv takes the input's channels.
Global average pooling is adaptive, so any spatial size that survives the downsamplings works.
"""
from __future__ import annotations

from torch import nn

from algorithms.models.base import Classifier, register
from algorithms.models.pooling import MaxPool2d


def _kaiming_conv(conv: nn.Conv2d) -> nn.Conv2d:
    """The init torchvision's ResNet gives its convs; used for the stem we swap in after construction."""
    nn.init.kaiming_normal_(conv.weight, mode="fan_out", nonlinearity="relu")
    return conv


def _torchvision_resnet_classifier(tv_model, in_channels: int, num_classes: int, cifar_stem: bool,
                                   head_dropout: float = 0.0) -> Classifier:
    """Split a torchvision ``ResNet`` into features (up to the flattened global pool) and a linear head."""
    if cifar_stem:
        tv_model.conv1 = _kaiming_conv(nn.Conv2d(in_channels, 64, 3, stride=1, padding=1, bias=False))
        tv_model.maxpool = nn.Identity()
    else:
        tv_model.maxpool = MaxPool2d(3, stride=2, padding=1)  # torchvision's stem pool: same results, faster on a CPU
        if in_channels != 3:
            tv_model.conv1 = _kaiming_conv(nn.Conv2d(in_channels, 64, 7, stride=2, padding=3, bias=False))
    features = nn.Sequential(
        tv_model.conv1, tv_model.bn1, tv_model.relu, tv_model.maxpool,
        tv_model.layer1, tv_model.layer2, tv_model.layer3, tv_model.layer4,
        nn.AdaptiveAvgPool2d(1), nn.Flatten(),
    )
    dim = tv_model.fc.in_features
    head = nn.Linear(dim, num_classes)
    if head_dropout > 0:
        head = nn.Sequential(nn.Dropout(head_dropout), head)
    return Classifier(features, head, feature_dim=dim)


@register("resnet8")
def _resnet8(input_shape, num_classes):
    """FedAUX's ResNet-8 (docs/methods/fedaux.md §6.2): torchvision ``ResNet(BasicBlock, [1, 1, 1, 1])`` with conv1
    replaced by a 3×3 stride-1 conv (64 ch) and no max-pool. Stages 64/128/256/512 and global average pooling
    give **512-d features** (the paper's h_0(x) ∈ R^512). 4,903,242 params with 10 classes, 4,949,412 with 100
    (§6.2: ≈4.90M / ≈4.95M). Much wider than FedDF's or the single-image paper's ResNet-8 (``resnet8_narrow``).
    """
    from torchvision.models.resnet import BasicBlock, ResNet

    return _torchvision_resnet_classifier(ResNet(BasicBlock, [1, 1, 1, 1], num_classes=num_classes),
                                          input_shape[0], num_classes, cifar_stem=True)


@register("resnet18")
def _resnet18(input_shape, num_classes):
    """CIFAR-style ResNet-18 (MNFL's client model, docs/methods/mnfl.md §4, §11): torchvision ``resnet18`` with a 3×3
    stride-1 stem and no max-pool; 11,173,962 params on 3×32×32 with 10 classes (§7: 11.17M). 512-d
    features."""
    from torchvision.models import resnet18

    return _torchvision_resnet_classifier(resnet18(weights=None, num_classes=num_classes), input_shape[0],
                                          num_classes, cifar_stem=True)


@register("resnet18_imagenet_stem")
def _resnet18_imagenet_stem(input_shape, num_classes):
    """The FedED thesis's CIFAR-10 ResNet-18 (docs/methods/feded.md §5.3): torchvision ``resnet18(weights=None)`` with
    the **ImageNet stem kept** (7×7 stride-2 conv, 3×3 stride-2 max-pool) on small images, and AdaptiveAvgPool
    → 512 → Dropout(0.5) → Linear(512, C). 11,181,642 params on 3×32×32 with 10 classes. Also the FedKP
    CIFAR-100 net (docs/methods/fedkp_fedpa.md §8.2) up to that dropout; it runs on 24×24 crops. Total stride 32:
    inputs must be at least 17×17, so 8×8 is refused. The dropout sits in the head; features are 512-d.
    """
    from torchvision.models import resnet18

    return _torchvision_resnet_classifier(resnet18(weights=None, num_classes=num_classes), input_shape[0],
                                          num_classes, cifar_stem=False, head_dropout=0.5)


# --------------------------------------------------------------------------------------------------------------
# He et al. CIFAR ResNets and the Wide ResNet of the single-image paper (docs/methods/single_image.md §6.3)

class _BasicBlock(nn.Module):
    """Post-activation basic block: relu(bn(conv(relu(bn(conv(x))))) + shortcut(x)), with a 1×1 conv + BN
    shortcut when the shape changes (docs/methods/single_image.md §6.3)."""

    def __init__(self, in_ch: int, out_ch: int, stride: int):
        super().__init__()
        self.conv1 = nn.Conv2d(in_ch, out_ch, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(out_ch)
        self.conv2 = nn.Conv2d(out_ch, out_ch, 3, stride=1, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(out_ch)
        self.relu = nn.ReLU(inplace=True)
        self.shortcut = nn.Identity()
        if stride != 1 or in_ch != out_ch:
            self.shortcut = nn.Sequential(nn.Conv2d(in_ch, out_ch, 1, stride=stride, bias=False),
                                          nn.BatchNorm2d(out_ch))

    def forward(self, x):
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return self.relu(out + self.shortcut(x))


def cifar_resnet(input_shape, num_classes: int, depth: int, widths=(16, 32, 64)) -> Classifier:
    """He et al.'s CIFAR ResNet-(6n+2): 3×3 stem (16 ch) + BN + ReLU, three stages of n = (depth − 2)/6 blocks
    with strides 1/2/2, adaptive average pool, linear head. Kaiming-normal (fan_out) convs, BN weight 1 and
    bias 0 (docs/methods/single_image.md §6.3)."""
    if (depth - 2) % 6:
        raise ValueError(f"CIFAR ResNet depth must be 6n+2, got {depth}")
    n = (depth - 2) // 6
    layers: list[nn.Module] = [nn.Conv2d(input_shape[0], widths[0], 3, padding=1, bias=False),
                               nn.BatchNorm2d(widths[0]), nn.ReLU(inplace=True)]
    in_ch = widths[0]
    for stage, out_ch in enumerate(widths):
        for block in range(n):
            layers.append(_BasicBlock(in_ch, out_ch, stride=2 if stage > 0 and block == 0 else 1))
            in_ch = out_ch
    features = nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten())
    for m in features.modules():
        if isinstance(m, nn.Conv2d):
            nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
        elif isinstance(m, nn.BatchNorm2d):
            nn.init.ones_(m.weight)
            nn.init.zeros_(m.bias)
    return Classifier(features, nn.Linear(in_ch, num_classes), feature_dim=in_ch)


@register("resnet8_narrow")
def _resnet8_narrow(input_shape, num_classes):
    """The single-image paper's ResNet-8 (docs/methods/single_image.md §6.3): CIFAR ResNet, widths 16/32/64, one block
    per stage; 78,042 params on 3×32×32 with 10 classes (§6.3: "about 78k"). 64-d features. Named ``_narrow``
    because ``resnet8`` is FedAUX's 512-d ResNet-8."""
    return cifar_resnet(input_shape, num_classes, depth=8)


@register("resnet20")
def _resnet20(input_shape, num_classes):
    """CIFAR ResNet-20 (docs/methods/single_image.md §6.3): widths 16/32/64, three blocks per stage, 1×1 conv + BN
    shortcuts; 272,474 params on 3×32×32 with 10 classes (§6.3: "about 0.27M"). 64-d features."""
    return cifar_resnet(input_shape, num_classes, depth=20)


class _PreActUnit(nn.Module):
    """Pre-activation unit: x' = relu(bn(x)); out = conv(relu(bn(conv(x')))) + shortcut, where the shortcut is
    x or, when the shape changes, a 1×1 conv of x' (pytorchcv/Zagoruyko convention)."""

    def __init__(self, in_ch: int, out_ch: int, stride: int):
        super().__init__()
        self.bn1 = nn.BatchNorm2d(in_ch)
        self.conv1 = nn.Conv2d(in_ch, out_ch, 3, stride=stride, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(out_ch)
        self.conv2 = nn.Conv2d(out_ch, out_ch, 3, stride=1, padding=1, bias=False)
        self.relu = nn.ReLU(inplace=False)
        self.resize = stride != 1 or in_ch != out_ch
        self.shortcut = nn.Conv2d(in_ch, out_ch, 1, stride=stride, bias=False) if self.resize else nn.Identity()

    def forward(self, x):
        pre = self.relu(self.bn1(x))
        identity = self.shortcut(pre) if self.resize else x
        out = self.conv1(pre)
        out = self.conv2(self.relu(self.bn2(out)))
        return out + identity


@register("wrn16_4")
def _wrn16_4(input_shape, num_classes):
    """Pre-activation Wide ResNet-16-4 (docs/methods/single_image.md §6.3, pytorchcv style): 3×3 stem (16 ch), three
    stages of two units with widths 64/128/256 and strides 1/2/2, final BN + ReLU, average pool, linear head.
    Kaiming-uniform conv init. 2,748,890 params on 3×32×32 with 10 classes (§6.3: "about 2.7M"); 256-d features.

    Deviation: the reference pools with a fixed 8×8 window, which assumes 32×32 inputs. We pool adaptively to
    1×1; on 32×32 (an 8×8 final map) the result is identical, and other sizes also work.
    """
    in_ch = input_shape[0]
    layers: list[nn.Module] = [nn.Conv2d(in_ch, 16, 3, padding=1, bias=False)]
    prev = 16
    for stage, width in enumerate((64, 128, 256)):
        for unit in range(2):
            layers.append(_PreActUnit(prev, width, stride=2 if stage > 0 and unit == 0 else 1))
            prev = width
    layers += [nn.BatchNorm2d(prev), nn.ReLU(inplace=True), nn.AdaptiveAvgPool2d(1), nn.Flatten()]
    features = nn.Sequential(*layers)
    for m in features.modules():
        if isinstance(m, nn.Conv2d):
            nn.init.kaiming_uniform_(m.weight)
        elif isinstance(m, nn.BatchNorm2d):
            nn.init.ones_(m.weight)
            nn.init.zeros_(m.bias)
    return Classifier(features, nn.Linear(prev, num_classes), feature_dim=prev)
