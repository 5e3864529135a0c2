"""Three CNNs of increasing depth for notebook 09, as torch modules (NCHW float32 inputs).

:data:`MODELS` holds ``"small"`` (:class:`SmallCNN`, a cat-and-dog CNN in the Keras tutorial's
layout, 5 weight layers), ``"vgg"`` (:class:`VGGStyle`, VGG-11's layout at scaled widths with
batch normalisation, 11) and ``"resnet20"`` (:func:`resnet20`, He et al.'s CIFAR-10 ResNet, 20,
about 0.27 million parameters for CIFAR-10). Every model takes ``(N, in_channels, S, S)``
float32 and returns logits ``(N, num_classes)``; :func:`build` makes one with seeded weights, and
:func:`parameter_count`, :func:`weight_layers` and :func:`forward_flops` describe it.

Sources: F. Chollet, "Building powerful image classification models using very little data"
(Keras blog, 2016), close to the network the V100 review trained; K. Simonyan, A. Zisserman,
ICLR 2015 (Table 1, configuration A); S. Ioffe, C. Szegedy, "Batch Normalization", ICML 2015;
K. He, X. Zhang, S. Ren, J. Sun, "Deep Residual Learning for Image Recognition", CVPR 2016
(Section 4.2).
"""

from __future__ import annotations

import dataclasses

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

__all__ = ["MODELS", "ModelSpec", "SmallCNN", "VGGStyle", "ResNetCifar", "resnet20", "build",
           "parameter_count", "weight_layers", "forward_flops"]


def _check(in_channels, num_classes, image_size, min_size):
    for name, v, lo, hi in (("in_channels", in_channels, 1, 64),
                            ("num_classes", num_classes, 2, 1000),
                            ("image_size", image_size, min_size, 512)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or not lo <= v <= hi:
            raise ValueError(f"{name} must be a whole number in [{lo}, {hi}], got {v!r}")


class SmallCNN(nn.Module):
    """A small cat-and-dog CNN in the Keras tutorial's layout, for any input size.

    Layers: [conv 3x3 (padding 1) -> ReLU -> max-pool 2x2] with 32, 32, 64 filters; flatten;
    dense 64 -> ReLU -> dropout 0.5; dense ``num_classes``. The Keras original uses unpadded
    convolutions on 150 x 150 inputs and one sigmoid output for two classes; here the convolutions
    are padded so that inputs as small as 8 x 8 work, and the output is one logit per class.

    Args:
        in_channels: input channels C, in [1, 64].
        num_classes: classes, in [2, 1000].
        image_size: input side S in pixels, in [8, 512] (three halvings).

    Shapes: ``(N, C, S, S) float32 -> (N, num_classes) float32``.

    Raises:
        ValueError: an argument outside its range.

    Source: Chollet (Keras blog, 2016). The V100 review started from a Keras example of this
    kind and changed it (a third convolution block, more filters, dropout).
    """

    def __init__(self, in_channels: int = 3, num_classes: int = 10, image_size: int = 32):
        super().__init__()
        _check(in_channels, num_classes, image_size, 8)
        layers, c = [], in_channels
        for k in (32, 32, 64):
            layers += [nn.Conv2d(c, k, 3, padding=1), nn.ReLU(inplace=True), nn.MaxPool2d(2)]
            c = k
        self.features = nn.Sequential(*layers)
        side = image_size // 8
        self.classifier = nn.Sequential(
            nn.Flatten(), nn.Linear(64 * side * side, 64), nn.ReLU(inplace=True), nn.Dropout(0.5),
            nn.Linear(64, num_classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.features(x))


#: VGG-11 (configuration A): filters per convolution, "M" = 2x2 max-pooling.
_VGG11 = (64, "M", 128, "M", 256, 256, "M", 512, 512, "M", 512, 512, "M")


class VGGStyle(nn.Module):
    """VGG-11's layout with batch normalisation, widths scaled, for small inputs.

    Layers: VGG configuration A (8 convolutions 3x3, padding 1, each followed by batch
    normalisation and ReLU; 2x2 max-pooling after stages 1, 2, 3, 4, 5, skipped once the feature
    map is 1 x 1) with filters ``64, 128, 256, 256, 512, 512, 512, 512`` scaled by ``width / 64``;
    then dense 256 -> ReLU -> dropout 0.5 -> dense 256 -> ReLU -> dropout 0.5 -> dense
    ``num_classes`` (VGG's two hidden dense layers have 4096 units; 256 suit 32 x 32 inputs).

    Args:
        in_channels: in [1, 64]. num_classes: in [2, 1000].
        image_size: input side S, in [16, 512].
        width: filters of the first convolution, in [8, 64] (64 is VGG's own).

    Shapes: ``(N, C, S, S) float32 -> (N, num_classes) float32``.

    Raises:
        ValueError: an argument outside its range.

    Source: Simonyan and Zisserman, ICLR 2015, Table 1 (A); batch normalisation: Ioffe and
    Szegedy, ICML 2015.
    """

    def __init__(self, in_channels: int = 3, num_classes: int = 10, image_size: int = 32,
                 width: int = 32):
        super().__init__()
        _check(in_channels, num_classes, image_size, 16)
        if isinstance(width, bool) or not isinstance(width, (int, np.integer)) \
                or not 8 <= width <= 64:
            raise ValueError(f"width must be a whole number in [8, 64], got {width!r}")
        layers, c, side = [], in_channels, image_size
        for v in _VGG11:
            if v == "M":
                if side >= 2:
                    layers.append(nn.MaxPool2d(2))
                    side //= 2
                continue
            k = v * width // 64
            layers += [nn.Conv2d(c, k, 3, padding=1, bias=False), nn.BatchNorm2d(k),
                       nn.ReLU(inplace=True)]
            c = k
        self.features = nn.Sequential(*layers)
        self.classifier = nn.Sequential(
            nn.Flatten(), nn.Linear(c * side * side, 256), nn.ReLU(inplace=True), nn.Dropout(0.5),
            nn.Linear(256, 256), nn.ReLU(inplace=True), nn.Dropout(0.5),
            nn.Linear(256, num_classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.features(x))


class _BasicBlock(nn.Module):
    """Two 3x3 convolutions with batch norm; identity shortcut, zero-padded where the number of
    channels doubles and subsampled where the stride is 2 (He et al. 2016, option A)."""

    def __init__(self, c_in: int, c_out: int, stride: int):
        super().__init__()
        self.conv1 = nn.Conv2d(c_in, c_out, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(c_out)
        self.conv2 = nn.Conv2d(c_out, c_out, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(c_out)
        self.stride, self.pad = stride, c_out - c_in

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        short = x[:, :, ::self.stride, ::self.stride] if self.stride > 1 else x
        if self.pad:
            short = F.pad(short, (0, 0, 0, 0, self.pad // 2, self.pad - self.pad // 2))
        return F.relu(out + short)


class ResNetCifar(nn.Module):
    """He et al.'s CIFAR-10 ResNet of 6n + 2 weight layers (n = 3: ResNet-20).

    Layers: conv 3x3, 16 filters + BN + ReLU; three stages of ``n`` basic blocks with 16, 32, 64
    filters (stride 2 at the start of stages 2 and 3; option-A shortcuts); global average
    pooling; dense ``num_classes``.

    Args:
        in_channels: in [1, 64]. num_classes: in [2, 1000].
        image_size: input side S, in [8, 512] (global pooling makes any size work; the paper
            uses 32).
        n: blocks per stage, in [1, 18] (3: ResNet-20, 5: ResNet-32, 9: ResNet-56).

    Shapes: ``(N, C, S, S) float32 -> (N, num_classes) float32``.

    Raises:
        ValueError: an argument outside its range.

    Source: He, Zhang, Ren, Sun, CVPR 2016, Section 4.2 and Table 6.
    """

    def __init__(self, in_channels: int = 3, num_classes: int = 10, image_size: int = 32,
                 n: int = 3):
        super().__init__()
        _check(in_channels, num_classes, image_size, 8)
        if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or not 1 <= n <= 18:
            raise ValueError(f"n must be a whole number in [1, 18], got {n!r}")
        self.stem = nn.Sequential(nn.Conv2d(in_channels, 16, 3, padding=1, bias=False),
                                  nn.BatchNorm2d(16), nn.ReLU(inplace=True))
        blocks, c = [], 16
        for stage, k in enumerate((16, 32, 64)):
            for j in range(n):
                blocks.append(_BasicBlock(c, k, 2 if stage > 0 and j == 0 else 1))
                c = k
        self.blocks = nn.Sequential(*blocks)
        self.fc = nn.Linear(64, num_classes)
        for m in self.modules():  # He initialisation, as in the paper
            if isinstance(m, (nn.Conv2d, nn.Linear)):
                nn.init.kaiming_normal_(m.weight)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.blocks(self.stem(x))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


def resnet20(in_channels: int = 3, num_classes: int = 10, image_size: int = 32) -> ResNetCifar:
    """ResNet-20 (He et al. 2016, Section 4.2, n = 3). Same arguments and errors as
    :class:`ResNetCifar`."""
    return ResNetCifar(in_channels, num_classes, image_size, n=3)


@dataclasses.dataclass(frozen=True)
class ModelSpec:
    """One entry of :data:`MODELS`: how to build it and what it is.

    Attributes:
        name: key. title: display name. depth: weight layers (convolutions + dense).
        build: ``(in_channels, num_classes, image_size) -> nn.Module``.
        min_size: smallest input side it accepts (pixels). source: where the design comes from.
    """

    name: str
    title: str
    depth: int
    build: object
    min_size: int
    source: str


#: The models, shallowest first.
MODELS: dict[str, ModelSpec] = {
    "small": ModelSpec("small", "small CNN (cat-and-dog)", 5, SmallCNN, 8,
                       "Chollet 2016 (Keras blog)"),
    "vgg": ModelSpec("vgg", "VGG-11 style (BN, width 32)", 11, VGGStyle, 16,
                     "Simonyan & Zisserman 2015, configuration A"),
    "resnet20": ModelSpec("resnet20", "ResNet-20", 20, resnet20, 8,
                          "He et al. 2016, Section 4.2"),
}


def build(name: str, in_channels: int = 3, num_classes: int = 10, image_size: int = 32,
          seed: int | None = 0) -> nn.Module:
    """Build a model of :data:`MODELS` with seeded initial weights.

    Args:
        name: ``"small"``, ``"vgg"`` or ``"resnet20"``.
        in_channels, num_classes, image_size: as the dataset gives them (see each class).
        seed: ``torch.manual_seed`` before building (same seed, same weights); None leaves the
            global RNG alone.

    Returns:
        The model on the CPU, in training mode.

    Raises:
        ValueError: unknown name or an argument outside the model's range.
    """
    if name not in MODELS:
        raise ValueError(f"name must be one of {list(MODELS)}, got {name!r}")
    if seed is not None:
        torch.manual_seed(seed)
    return MODELS[name].build(in_channels, num_classes, image_size)


def parameter_count(model: nn.Module) -> int:
    """Number of trainable parameters (weights and biases; batch-norm scales and shifts)."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def weight_layers(model: nn.Module) -> int:
    """Number of convolution and dense layers: the depth as He et al. and Simonyan and
    Zisserman count it (shortcuts, pooling and batch norm not counted)."""
    return sum(isinstance(m, (nn.Conv2d, nn.Linear)) for m in model.modules())


def forward_flops(model: nn.Module, in_channels: int, image_size: int) -> int:
    """FLOPs of one forward pass for one ``(in_channels, image_size, image_size)`` image, counting
    each multiply-add of the convolutions and dense layers as 2 FLOPs (batch norm, activations,
    pooling and shortcut additions, a few percent at most, are left out). A training step costs
    about three times this per image (forward, then backward for inputs and for weights).

    Args:
        model: a model taking ``(N, in_channels, S, S)``; run once in evaluation mode on zeros
            (its training mode is restored).
        in_channels, image_size: the input's C and S.

    Returns:
        FLOPs per image (int).

    Source: the usual count, as in the study's FLOP counts for convolution layers
    (2 x N x K x C x R x S x P x Q for a batch of N).
    """
    total = 0

    def conv(m, _inp, out):
        nonlocal total
        k = m.kernel_size[0] * m.kernel_size[1] * (m.in_channels // m.groups)
        total += 2 * out[0].numel() * k

    def dense(m, _inp, _out):
        nonlocal total
        total += 2 * m.in_features * m.out_features

    hooks = [m.register_forward_hook(conv if isinstance(m, nn.Conv2d) else dense)
             for m in model.modules() if isinstance(m, (nn.Conv2d, nn.Linear))]
    was_training = model.training
    try:
        model.eval()
        with torch.no_grad():
            model(torch.zeros(1, in_channels, image_size, image_size,
                              device=next(model.parameters()).device))
    finally:
        for h in hooks:
            h.remove()
        model.train(was_training)
    return total
