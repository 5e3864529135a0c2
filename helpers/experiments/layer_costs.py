"""Layer costs: the arithmetic (FLOPs), weights and outputs of each layer type of a network.

Counted analytically, not measured: one forward pass on PyTorch's ``meta`` device (shapes only,
nothing computed or allocated) records every layer's output shape, and the FLOPs follow from the
shapes (a multiply-add is 2 FLOPs). Layers are grouped into :data:`GROUPS`, the layer types of
the study's Figure 2. The numbers are exact and the same on every machine.

Shapes: NCHW float32 inputs ``(batch, 3, input_size, input_size)``; counts are Python ints.

Source: Li et al., "Performance Analysis of GPU-based Convolutional Neural Networks",
ICPP 2016, Section IV-A, Figure 2 (why convolution layers dominate training time).
"""

from __future__ import annotations

import dataclasses

import torch

from helpers.networks import figure2

__all__ = ["GROUPS", "ModelCost", "layer_flops"]

#: Layer-type groups, in the order tables and charts show them. ``other``: normalisation,
#: dropout, concatenation, the loss, reshapes (and, when profiled, the framework's own time);
#: ``weight update``: the SGD step and ``zero_grad``, which are not layers.
GROUPS: tuple[str, ...] = ("convolution", "pooling", "activation", "fully connected", "other",
                           "weight update")


@dataclasses.dataclass
class ModelCost:
    """Analytic cost of one network's forward pass at one input size (from :func:`layer_flops`).

    Attributes:
        model: key of :data:`helpers.networks.figure2.MODELS`. input_size: pixels (H = W).
            batch: N.
        flops: forward FLOPs per group of :data:`GROUPS` (int; multiply-add = 2 FLOPs).
        layers: one dict per layer with ``layer`` (module path), ``type`` (class name),
            ``group``, ``output`` (shape without the batch, tuple), ``flops`` (int, whole
            batch) and ``params`` (the layer's weights and biases, int).
        params: number of weights (int). activations: elements of all layer outputs (int,
            whole batch).
    """

    model: str
    input_size: int
    batch: int
    flops: dict[str, int]
    layers: list[dict]
    params: int
    activations: int

    @property
    def total_flops(self) -> int:
        """Forward FLOPs of the whole network (int)."""
        return sum(self.flops.values())

    @property
    def training_flops(self) -> int:
        """About 3 x the forward FLOPs: the backward pass computes gradients with respect to both
        the inputs and the weights of every convolution and linear layer, each about as costly
        as the forward product."""
        return 3 * self.total_flops

    @property
    def shares(self) -> dict[str, float]:
        """Each group's fraction of :attr:`total_flops` (sums to 1)."""
        total = self.total_flops or 1
        return {g: f / total for g, f in self.flops.items()}

    @property
    def params_by_group(self) -> dict[str, int]:
        """Weights (and biases) of each group's layers (int)."""
        out = dict.fromkeys(GROUPS, 0)
        for r in self.layers:
            out[r["group"]] += r["params"]
        return out

    def flops_per_weight(self, group: str) -> float | None:
        """Forward FLOPs per weight of a group's layers (its arithmetic reuse of each weight), or
        None for a group without weights. A convolution uses each weight at every output
        position of every image (``2 N P Q`` FLOPs per weight); a fully connected layer only
        once per image (``2 N``)."""
        w = self.params_by_group[group]
        return self.flops[group] / w if w else None

    def conv_layers(self) -> list[dict]:
        """The convolution layers' rows of :attr:`layers`, in order."""
        return [r for r in self.layers if r["group"] == "convolution"]


def _module_cost(mod: torch.nn.Module, inp: torch.Tensor,
                 out: torch.Tensor) -> tuple[str, int] | None:
    """(group, forward FLOPs) of one leaf module, or None for modules that compute nothing."""
    nn = torch.nn
    n_out = out.numel()
    if isinstance(mod, nn.Conv2d):
        kh, kw = mod.kernel_size
        return "convolution", 2 * n_out * (mod.in_channels // mod.groups) * kh * kw
    if isinstance(mod, nn.Linear):
        return "fully connected", 2 * n_out * mod.in_features
    if isinstance(mod, (nn.MaxPool2d, nn.AvgPool2d)):
        k = mod.kernel_size
        kh, kw = (k, k) if isinstance(k, int) else k
        return "pooling", n_out * kh * kw  # one comparison (or addition) per window element
    if isinstance(mod, (nn.AdaptiveAvgPool2d, nn.AdaptiveMaxPool2d)):
        return "pooling", max(inp.numel(), n_out)
    if isinstance(mod, nn.ReLU):
        return "activation", n_out
    if isinstance(mod, (nn.BatchNorm2d, nn.LocalResponseNorm)):
        return "other", 2 * n_out  # scale and shift per element
    if isinstance(mod, nn.Dropout):
        return "other", n_out  # one multiplication per element
    return None


def layer_flops(model_name: str, input_size: int, batch: int = 1) -> ModelCost:
    """Forward FLOPs of each layer type of a network, counted analytically from its layers.

    A forward hook on every layer records its output shape during one pass on PyTorch's
    ``meta`` device (shapes only: nothing is computed or allocated), and FLOPs follow from the
    shapes (multiply-add = 2 FLOPs; bias additions ignored):

    * convolution: ``2 N K P Q (C / groups) R S``; fully connected: ``2 N in out``;
    * max / average pooling: one operation per window element, ``N C P Q R S``; adaptive
      pooling: one per input (or output, if larger) element;
    * ReLU: one per element; batch normalisation: two per element; dropout: one per element.

    GoogLeNet applies its ReLU as a function inside each ``BasicConv2d`` (no ReLU module), so
    its ReLU is counted from those blocks' outputs. Inception's concatenation moves data and
    does no arithmetic.

    Args:
        model_name: a key of :data:`helpers.networks.figure2.MODELS`.
        input_size: height = width of the input in pixels (from the network's
            :data:`helpers.networks.figure2.MIN_INPUT` to 4096).
        batch: N, 1 to 65,536.

    Returns:
        A :class:`ModelCost` (deterministic: same numbers on every machine).

    Raises:
        ValueError: unknown model, input size out of range, batch out of range.

    Source: the study's Figure 2 (why convolution layers dominate training time).
    """
    figure2.check_input_size(model_name, input_size)
    if not isinstance(batch, int) or isinstance(batch, bool) or not 1 <= batch <= 65_536:
        raise ValueError(f"batch must be an integer from 1 to 65536, got {batch!r}")
    with torch.device("meta"):
        model = figure2.build(model_name)
    layers: list[dict] = []

    def hook(name):
        def record(mod, args, out):
            cost = _module_cost(mod, args[0], out)
            if cost is not None:
                layers.append({"layer": name, "type": type(mod).__name__, "group": cost[0],
                               "output": tuple(out.shape[1:]), "flops": int(cost[1]),
                               "params": sum(p.numel() for p in mod.parameters(recurse=False))})
        return record

    def relu_of(name):
        def record(mod, args, out):
            layers.append({"layer": f"{name} (F.relu)", "type": "relu", "group": "activation",
                           "output": tuple(out.shape[1:]), "flops": int(out.numel()),
                           "params": 0})
        return record

    handles = []
    for name, mod in model.named_modules():
        if type(mod).__name__ == "BasicConv2d":  # torchvision GoogLeNet: conv, BN, F.relu
            handles.append(mod.register_forward_hook(relu_of(name)))
        if not list(mod.children()):
            handles.append(mod.register_forward_hook(hook(name)))
    try:
        with torch.no_grad():
            model(torch.empty(batch, 3, input_size, input_size, device="meta"))
    except (RuntimeError, ValueError) as exc:  # a window that does not fit, a 1-value BN
        raise ValueError(f"input_size {input_size} with batch {batch} does not fit "
                         f"{figure2.MODELS[model_name]}: {exc}") from exc
    finally:
        for h in handles:
            h.remove()
    flops = dict.fromkeys(GROUPS, 0)
    for r in layers:
        flops[r["group"]] += r["flops"]
    params = sum(p.numel() for p in model.parameters())
    activations = batch * sum(_prod(r["output"]) for r in layers)
    return ModelCost(model_name, input_size, batch, flops, layers, params, activations)


def _prod(shape) -> int:
    n = 1
    for s in shape:
        n *= int(s)
    return n
