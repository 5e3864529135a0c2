"""The four networks of the study's Figure 2: AlexNet, GoogLeNet, VGG-16 and OverFeat (fast).

:func:`build` makes each with random weights (no download; the time a layer takes does not
depend on its weights' values): AlexNet, VGG-16 and GoogLeNet from torchvision, OverFeat's fast
model from its paper (:class:`OverFeatFast`; torchvision has none). How each differs from its
original paper is in the docstrings of :func:`build` and :class:`OverFeatFast`.

Shapes: NCHW float32 images ``(N, 3, input_size, input_size)`` -> ``(N, num_classes)`` class
scores; ``input_size`` is the height = width of the square image in pixels.

Source: Li et al., ICPP 2016, Section IV-A (Figure 2, hotspot layers of the four networks).
"""

from __future__ import annotations

import torch
from torch import nn

__all__ = ["MODELS", "NAMES", "NATIVE_INPUT", "MIN_INPUT", "TORCHVISION_MODELS", "OverFeatFast",
           "build", "check_model_name", "check_input_size", "missing_requirement"]

#: Model keys (as the command line takes them) and their display names, in the study's order.
MODELS: dict[str, str] = {
    "alexnet": "AlexNet",
    "googlenet": "GoogLeNet",
    "vgg16": "VGG-16",
    "overfeat": "OverFeat (fast)",
}

#: The keys of :data:`MODELS`, in order.
NAMES: tuple[str, ...] = tuple(MODELS)

#: The networks that torchvision builds (:func:`build` imports it for these only).
TORCHVISION_MODELS: tuple[str, ...] = ("alexnet", "googlenet", "vgg16")

#: The input size (pixels, height = width) each network was designed for.
NATIVE_INPUT: dict[str, int] = {"alexnet": 224, "googlenet": 224, "vgg16": 224, "overfeat": 231}

#: The smallest input (pixels) each network can be trained on, even with a batch of one: below
#: it a pooling or convolution window no longer fits; GoogLeNet's windows fit from 15 px, but in
#: training its batch normalisation needs more than one value per channel, which a batch of one
#: has from 47 px (checked in tests/test_hotspots.py by a shape-only pass on the meta device).
MIN_INPUT: dict[str, int] = {"alexnet": 63, "googlenet": 47, "vgg16": 32, "overfeat": 71}


class OverFeatFast(nn.Module):
    """OverFeat's fast model (Sermanet, Eigen, Zhang, Mathieu, Fergus, LeCun, "OverFeat:
    Integrated Recognition, Localization and Detection using Convolutional Networks",
    ICLR 2014, Table 1), for ImageNet classification.

    Layers (input 3 x 231 x 231; ReLU after every convolution and after fc6, fc7):

    ====== ===================================== ================ =====================
    layer  what                                  padding          output (C x H x W)
    ====== ===================================== ================ =====================
    conv1  96 filters 11 x 11, stride 4          0                96 x 56 x 56
    pool1  max 2 x 2, stride 2                                    96 x 28 x 28
    conv2  256 filters 5 x 5, stride 1           0                256 x 24 x 24
    pool2  max 2 x 2, stride 2                                    256 x 12 x 12
    conv3  512 filters 3 x 3, stride 1           1                512 x 12 x 12
    conv4  1024 filters 3 x 3, stride 1          1                1024 x 12 x 12
    conv5  1024 filters 3 x 3, stride 1          1                1024 x 12 x 12
    pool5  max 2 x 2, stride 2                                    1024 x 6 x 6
    fc6    fully connected 36,864 -> 3,072                        3,072
    fc7    fully connected 3,072 -> 4,096                         4,096
    fc8    fully connected 4,096 -> 1,000                         1,000
    ====== ===================================== ================ =====================

    About 145.9 million parameters (the paper: "about 145 million" for the fast model).
    The paper's Table 1 lists 24 x 24 as layer 2's spatial size: that is the size after its
    5 x 5 convolution (28 - 5 + 1); with the stated filter sizes and strides layer 1's pooled
    output is 28 x 28, as in the convnet-benchmarks definition (``overfeat.lua``) that the
    study's benchmarks build on.

    Two additions of ours, neither of which changes anything at 231 x 231:

    * an adaptive average pooling to 6 x 6 after pool5 (an identity at 231 px, where pool5's
      output already is 6 x 6), so that smaller inputs (from :data:`MIN_INPUT` = 71 px) still
      reach the 36,864-input classifier, as torchvision's AlexNet does;
    * dropout (p = 0.5) before fc7 and fc8, i.e. on the outputs of layers 6 and 7, where the
      paper applies it during training.

    Args:
        num_classes: outputs of fc8 (1000 for ImageNet).

    Shapes: input ``(N, 3, H, W)`` float32 with ``H, W >= 71``; output ``(N, num_classes)``.
    """

    def __init__(self, num_classes: int = 1000):
        super().__init__()
        if num_classes < 1:
            raise ValueError(f"num_classes must be >= 1, got {num_classes}")
        self.features = nn.Sequential(
            nn.Conv2d(3, 96, kernel_size=11, stride=4), nn.ReLU(inplace=True),
            nn.MaxPool2d(kernel_size=2, stride=2),
            nn.Conv2d(96, 256, kernel_size=5), nn.ReLU(inplace=True),
            nn.MaxPool2d(kernel_size=2, stride=2),
            nn.Conv2d(256, 512, kernel_size=3, padding=1), nn.ReLU(inplace=True),
            nn.Conv2d(512, 1024, kernel_size=3, padding=1), nn.ReLU(inplace=True),
            nn.Conv2d(1024, 1024, kernel_size=3, padding=1), nn.ReLU(inplace=True),
            nn.MaxPool2d(kernel_size=2, stride=2),
        )
        self.avgpool = nn.AdaptiveAvgPool2d((6, 6))
        self.classifier = nn.Sequential(
            nn.Linear(1024 * 6 * 6, 3072), nn.ReLU(inplace=True), nn.Dropout(0.5),
            nn.Linear(3072, 4096), nn.ReLU(inplace=True), nn.Dropout(0.5),
            nn.Linear(4096, num_classes),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``(N, 3, H, W)`` float32 images -> ``(N, num_classes)`` class scores (logits)."""
        x = self.avgpool(self.features(x))
        return self.classifier(torch.flatten(x, 1))


def check_model_name(name: str) -> str:
    """Return ``name`` if it is a key of :data:`MODELS`.

    Raises:
        ValueError: naming the parameter ``model_name`` and the valid names.
    """
    if name not in MODELS:
        raise ValueError(f"model_name must be one of {list(MODELS)}, got {name!r}")
    return name


def missing_requirement(name: str) -> str | None:
    """Why :func:`build` cannot make network ``name`` here, or None if it can.

    Returns:
        None for OverFeat (ours) and, where torchvision imports, for the others; otherwise
        ``"torchvision is not installed"`` (or why it failed to import).

    Raises:
        ValueError: unknown ``name``.
    """
    check_model_name(name)
    if name not in TORCHVISION_MODELS:
        return None
    try:
        import torchvision  # noqa: F401  (optional: a bare GPU server may lack it)
    except ImportError:
        return "torchvision is not installed"
    except RuntimeError as exc:  # e.g. a torchvision built for another torch
        return f"torchvision cannot be imported ({exc})"
    return None


def check_input_size(name: str, input_size: int) -> int:
    """Return ``input_size`` if the network ``name`` accepts it (pixels, height = width).

    Raises:
        ValueError: unknown model name, or ``input_size`` below :data:`MIN_INPUT` or above
            4096 pixels.
    """
    check_model_name(name)
    if not isinstance(input_size, int) or isinstance(input_size, bool):
        raise ValueError(f"input_size must be an integer number of pixels, got {input_size!r}")
    low = MIN_INPUT[name]
    if not low <= input_size <= 4096:
        raise ValueError(f"input_size must be between {low} and 4096 pixels for {MODELS[name]} "
                         f"(smaller inputs shrink to nothing before its classifier), "
                         f"got {input_size}")
    return input_size


def build(name: str, num_classes: int = 1000, seed: int = 0) -> nn.Module:
    """One of the study's four networks with random weights, in training mode, on the CPU.

    What differs from the original papers (so that the layer mix is known when reading a
    profile):

    * ``"alexnet"``: torchvision's AlexNet, the single-GPU variant of Krizhevsky's "One weird
      trick" paper (arXiv:1404.5997): 64-192-384-256-256 filters, no local response
      normalisation (LRN), and an adaptive average pooling to 6 x 6 before the classifier.
    * ``"googlenet"``: torchvision's GoogLeNet (Szegedy et al., "Going deeper with
      convolutions", CVPR 2015), with batch normalisation after every convolution instead of
      LRN; built without the two auxiliary classifiers (``aux_logits=False``) and with
      PyTorch's default initialisation (``init_weights=False``, which skips a slow
      truncated-normal initialisation).
    * ``"vgg16"``: the study says "VGG"; this is VGG-16, configuration D of Simonyan &
      Zisserman, "Very deep convolutional networks for large-scale image recognition",
      ICLR 2015 (torchvision's ``vgg16``, without batch normalisation).
    * ``"overfeat"``: :class:`OverFeatFast`.

    Args:
        name: a key of :data:`MODELS` (``"alexnet"``, ``"googlenet"``, ``"vgg16"``,
            ``"overfeat"``).
        num_classes: classifier outputs (1000 for ImageNet).
        seed: ``torch.manual_seed`` before the weights are drawn (deterministic models).

    Returns:
        The ``torch.nn.Module`` (float32). Build inside ``with torch.device("meta"):`` for a
        shape-only model that allocates nothing.

    Raises:
        ValueError: unknown ``name``; ``num_classes < 1``.
        ImportError: torchvision is not installed and ``name`` is not ``"overfeat"``
            (:func:`missing_requirement` says so without raising).
    """
    check_model_name(name)
    if num_classes < 1:
        raise ValueError(f"num_classes must be >= 1, got {num_classes}")
    if name == "overfeat":
        torch.manual_seed(seed)
        return OverFeatFast(num_classes).train()
    import torchvision  # only here: OverFeat builds without it

    torch.manual_seed(seed)
    if name == "alexnet":
        model = torchvision.models.alexnet(weights=None, num_classes=num_classes)
    elif name == "vgg16":
        model = torchvision.models.vgg16(weights=None, num_classes=num_classes)
    elif name == "googlenet":
        model = torchvision.models.googlenet(weights=None, num_classes=num_classes,
                                             aux_logits=False, init_weights=False)
    return model.train()
