"""torchvision's MobileNetV2 and ShuffleNetV2 (1.0×), adapted to small (32×32) images, trained from scratch.

ImageNet versions downsample 32× (stem and early stages), which leaves a 1×1 map from a 32×32 image. We apply
the usual CIFAR adaptation, so a 32×32 image ends in a 4×4 map (total stride 8):
- MobileNetV2: stem conv stride 1 instead of 2, and the first 24-channel stage stride 1 instead of 2.
- ShuffleNetV2: stem conv stride 1 instead of 2, and no stem max-pool.
Everything else (widths, blocks, torchvision's init) is torchvision's. The stem conv takes the input's channels.

Used by MNFL (ShuffleNetV2 clients, docs/methods/mnfl.md §4) and FedAUX (docs/methods/fedaux.md §6.2). FedAUX's own
nets differ: a half-width MobileNetV2 with 640-d features and ShuffleNet **v1** (groups 2, 800-d); these are the
torchvision v2 nets with 1280-d and 1024-d features.
"""
from __future__ import annotations

from torch import nn

from algorithms.models.base import Classifier, register

# torchvision's MobileNetV2 inverted-residual setting [t, c, n, s] with the 24-channel stage's stride 2 → 1.
_MOBILENET_V2_SMALL_INPUT = [
    [1, 16, 1, 1],
    [6, 24, 2, 1],
    [6, 32, 3, 2],
    [6, 64, 4, 2],
    [6, 96, 3, 1],
    [6, 160, 3, 2],
    [6, 320, 1, 1],
]


def _stem_conv(in_ch: int, out_ch: int, kaiming_fan_out: bool) -> nn.Conv2d:
    """A stride-1 3×3 stem conv initialised as the torchvision net would have initialised its own stem:
    MobileNetV2 re-inits convs with Kaiming-normal (fan_out); ShuffleNetV2 keeps PyTorch's default init."""
    conv = nn.Conv2d(in_ch, out_ch, 3, stride=1, padding=1, bias=False)
    if kaiming_fan_out:
        nn.init.kaiming_normal_(conv.weight, mode="fan_out")
    return conv


@register("mobilenet_v2")
def _mobilenet_v2(input_shape, num_classes):
    """torchvision ``mobilenet_v2(weights=None)``, width 1.0, small-input strides (module docstring).
    2,236,682 params on 3×32×32 with 10 classes. Features: the 1280-d pooled map; head: Dropout(0.2) + Linear,
    torchvision's classifier."""
    from torchvision.models import mobilenet_v2

    tv = mobilenet_v2(weights=None, num_classes=num_classes, inverted_residual_setting=_MOBILENET_V2_SMALL_INPUT)
    stem = tv.features[0][0]
    tv.features[0][0] = _stem_conv(input_shape[0], stem.out_channels, kaiming_fan_out=True)
    features = nn.Sequential(tv.features, nn.AdaptiveAvgPool2d(1), nn.Flatten())
    return Classifier(features, tv.classifier, feature_dim=tv.last_channel)


@register("shufflenet_v2")
def _shufflenet_v2(input_shape, num_classes):
    """torchvision ``shufflenet_v2_x1_0(weights=None)``, small-input stem (module docstring). 1,263,854 params
    on 3×32×32 with 10 classes (docs/methods/mnfl.md §7: ≈1.26M). Features: the 1024-d pooled conv5 map."""
    from torchvision.models import shufflenet_v2_x1_0

    tv = shufflenet_v2_x1_0(weights=None, num_classes=num_classes)
    tv.conv1[0] = _stem_conv(input_shape[0], tv.conv1[0].out_channels, kaiming_fan_out=False)
    features = nn.Sequential(tv.conv1, tv.stage2, tv.stage3, tv.stage4, tv.conv5,
                             nn.AdaptiveAvgPool2d(1), nn.Flatten())
    return Classifier(features, tv.fc, feature_dim=tv.fc.in_features)
