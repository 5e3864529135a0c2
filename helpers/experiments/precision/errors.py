"""A precision's error against float64, on seeded inputs: the workloads and their references.

The workloads: GEMM n x n x n and convolution layers (NCHW, :class:`helpers.conv.ConvConfig`,
cuDNN symbols), small defaults for a CPU and the study's Table I for a GPU. Their inputs are
drawn in float32 (seeded) and cast once to the precision's dtype; float64 computes from the
same values (an IEEE DGEMM; :func:`helpers.conv.check.reference`). :func:`relative_errors` gives
the max and RMS relative error, :func:`error_vs_float64` the error of one op in one precision.

Source: Micikevicius et al., "Mixed Precision Training", ICLR 2018; the study's Table I layers
(Li et al., ICPP 2016).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F

from helpers.conv import STRATEGIES, ConvConfig
from helpers.conv.check import reference
from helpers.experiments.precision.support import (
    _WHERE,
    DTYPES,
    OPS,
    PRECISIONS,
    _check,
    precision_mode,
    strategy_reason,
    supports,
)
from helpers.paper import TABLE_I

__all__ = ["CPU_GEMM_SIZES", "GPU_GEMM_SIZES", "CPU_LAYERS", "GPU_LAYERS", "relative_errors",
           "error_vs_float64"]

#: Defaults small enough for a live notebook cell on a 2-core CPU (seconds), and GPU sizes.
CPU_GEMM_SIZES: tuple[int, ...] = (256,)
GPU_GEMM_SIZES: tuple[int, ...] = (4096, 8192)
CPU_LAYERS: tuple[ConvConfig, ...] = (
    ConvConfig.from_study(b=8, i=32, f=32, k=3, s=1, c=16, name="small (b=8, c=16, i=32)"),)
GPU_LAYERS: tuple[ConvConfig, ...] = TABLE_I


def relative_errors(got: torch.Tensor, ref: torch.Tensor) -> tuple[float, float]:
    """(max |got - ref| / max |ref|, RMS(got - ref) / RMS(ref)), computed in float64.
    Raises ValueError: shapes that differ or are empty."""
    if tuple(got.shape) != tuple(ref.shape) or got.numel() == 0:
        raise ValueError(f"got and ref must have the same non-empty shape, got "
                         f"{tuple(got.shape)} and {tuple(ref.shape)}")
    ref = ref.to(torch.float64)
    diff = got.to(device=ref.device, dtype=torch.float64) - ref
    tiny = 1e-300
    max_rel = float(diff.abs().max()) / max(float(ref.abs().max()), tiny)
    rms_rel = float(diff.pow(2).mean().sqrt()) / max(float(ref.pow(2).mean().sqrt()), tiny)
    return max_rel, rms_rel


def _layer(layer) -> ConvConfig:
    names = {lay.name: lay for lay in TABLE_I}
    if isinstance(layer, ConvConfig) or (isinstance(layer, str) and layer in names):
        return names.get(layer, layer) if isinstance(layer, str) else layer
    raise ValueError(f"layer must be a ConvConfig or a Table I name {tuple(names)}, "
                     f"got {layer!r}")


def _check_n(n, name: str = "n (GEMM size)") -> int:
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"{name} must be an int >= 1, got {n!r}")
    return n


def _inputs(op: str, shape, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Seeded float32 inputs on the CPU: (A, B) n x n, or (x, w) of the layer."""
    g = torch.Generator().manual_seed(seed)
    if op == "gemm":
        return torch.randn(shape, shape, generator=g), torch.randn(shape, shape, generator=g)
    return torch.randn(shape.x_shape, generator=g), torch.randn(shape.w_shape, generator=g)


def _call(op: str, precision: str, inputs, cfg: ConvConfig | None, strategy: str,
          device: str) -> Callable[[], torch.Tensor]:
    """The timed call. Inputs are cast to the precision's dtype once, outside it (x.to(dtype)):
    its error is that of the dtype, its time that of the op alone. A strategy of ours runs its
    own code on them (:meth:`helpers.conv.Strategy.forward`; :func:`_reason` checked the layer
    first), as ``reference`` runs ``F.conv2d``: no argument checks in the timed call."""
    dtype = DTYPES[precision]
    a, b = (t.to(device=_WHERE[device], dtype=dtype) for t in inputs)
    if op == "gemm":
        return lambda: a @ b
    stride, padding = (cfg.stride_h, cfg.stride_w), (cfg.pad_h, cfg.pad_w)
    if strategy == "reference":
        return lambda: F.conv2d(a, b, stride=stride, padding=padding)
    return lambda: STRATEGIES[strategy].forward(a, b, cfg, device)


def _reason(op, precision, device, strategy, cfg) -> str | None:
    reason = supports(precision, op, device)
    if reason or op == "gemm":
        return reason
    return strategy_reason(strategy, precision) or STRATEGIES[strategy].supports(cfg, device)


def _gemm_reference(inputs, device: str) -> torch.Tensor:
    """A @ B in float64 on the device (an IEEE DGEMM: no flag changes it)."""
    a, b = (t.to(_WHERE[device], torch.float64) for t in inputs)
    return a @ b


def _conv_reference(x, w, cfg: ConvConfig) -> torch.Tensor:
    """The workbook's one float64 convolution, :func:`helpers.conv.check.reference` (CPU)."""
    return torch.from_numpy(reference(x, w, (cfg.stride_h, cfg.stride_w),
                                      (cfg.pad_h, cfg.pad_w)))


def error_vs_float64(op: str, precision: str, *, n: int = 256, layer=None,
                     strategy: str = "reference", device: str = "cpu",
                     seed: int = 0) -> dict:
    """The relative error of ``op`` computed in ``precision`` against float64, on seeded inputs.

    Inputs are drawn in float32 (standard normal, seeded); float64 computes from exactly those
    values, the precision from them cast to its dtype (``x.to(dtype)``, TF32 by
    :func:`precision_mode`): the error is that of the dtype (inputs, sums, output rounded).

    Args:
        op: ``"gemm"`` (A @ B, both n x n, n >= 1) or ``"conv"`` (``layer``, a ConvConfig or
            Table I name, default ``CPU_LAYERS[0]``, by ``strategy`` of ``STRATEGIES``).
        precision: one of :data:`PRECISIONS`. device: ``"cpu"`` or ``"cuda"``.

    Returns:
        ``{"max_rel_error": max |y - y64| / max |y64|, "rms_rel_error": RMS(y - y64) /
        RMS(y64), "status": "ok"}``, y64 by :func:`helpers.conv.check.reference` for a
        convolution; for a pair that cannot run or does not apply (:func:`supports`,
        :func:`strategy_reason`) both are None and ``status`` says why.

    Raises:
        ValueError: an unknown op, precision, strategy, device or layer; n < 1.
    """
    _check("op", op, OPS)
    _check("precision", precision, PRECISIONS)
    _check("strategy", strategy, tuple(STRATEGIES))
    _check("device", device, ("cpu", "cuda"))
    cfg = _layer(layer if layer is not None else CPU_LAYERS[0]) if op == "conv" else None
    shape = _check_n(n) if op == "gemm" else cfg
    reason = _reason(op, precision, device, strategy, cfg)
    if reason:
        return {"max_rel_error": None, "rms_rel_error": None, "status": reason}
    inputs = _inputs(op, shape, seed)
    with precision_mode(precision):
        y = _call(op, precision, inputs, cfg, strategy, device)()
    ref = _gemm_reference(inputs, device) if op == "gemm" else _conv_reference(*inputs, cfg)
    max_rel, rms_rel = relative_errors(y, ref)
    return {"max_rel_error": max_rel, "rms_rel_error": rms_rel, "status": "ok"}

