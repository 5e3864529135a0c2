"""torch's own convolution, the library to beat: cuDNN on an NVIDIA GPU, oneDNN (or torch's
native kernels) on the CPU. Forward is ``torch.nn.functional.conv2d``; backward is
``torch.ops.aten.convolution_backward``, the call autograd makes for (dx, dw), without running
the forward again. Both compute in float32 with TF32 off, as our strategies do, unless
``tf32=True`` (cuDNN and cuBLAS may then round operands to TF32 on tensor cores, sm_80+).
Shapes (cuDNN symbols): x (N, C, H, W), w (K, C/groups, R, S), y and dy (N, K, P, Q).
"""

from __future__ import annotations

import torch

from helpers.conv.config import ConvConfig
from helpers.conv.phases import phase
from helpers.device.precision import tf32_mode

__all__ = ["forward", "backward"]


def _kw(cfg: ConvConfig) -> dict:
    return {"stride": (cfg.stride_h, cfg.stride_w), "padding": (cfg.pad_h, cfg.pad_w),
            "dilation": (cfg.dil_h, cfg.dil_w), "groups": cfg.groups}


def forward(x: torch.Tensor, w: torch.Tensor, cfg: ConvConfig, tf32: bool = False
            ) -> torch.Tensor:
    """y (N, K, P, Q) = ``torch.nn.functional.conv2d(x, w)`` with cfg's stride, padding,
    dilation and groups; float32 tensors x (N, C, H, W), w (K, C/groups, R, S). TF32 is off
    during the call (:func:`helpers.device.precision.tf32_mode`), allowed with ``tf32``; the
    flags are restored afterwards."""
    with torch.no_grad(), tf32_mode(tf32), phase("torch conv2d"):
        return torch.nn.functional.conv2d(x, w, **_kw(cfg))


def backward(x: torch.Tensor, w: torch.Tensor, dy: torch.Tensor, cfg: ConvConfig,
             tf32: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """(dx, dw), shapes of x (N, C, H, W) and w (K, C/groups, R, S), from dy (N, K, P, Q):
    ``torch.ops.aten.convolution_backward``, the operator autograd calls for conv2d (cuDNN's
    backward-data and backward-filter on a GPU), from x, w and dy alone: no forward
    convolution runs. float32 tensors; TF32 as :func:`forward`."""
    kw = _kw(cfg)
    with torch.no_grad(), tf32_mode(tf32), phase("torch conv2d backward"):
        dx, dw, _ = torch.ops.aten.convolution_backward(
            dy, x, w, None, list(kw["stride"]), list(kw["padding"]), list(kw["dilation"]),
            False, [0, 0], kw["groups"], [True, True, False])
    return dx, dw
