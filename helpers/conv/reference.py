"""torch's own convolution, the library to beat: cuDNN on an NVIDIA GPU, oneDNN (or torch's
native kernels) on the CPU. Forward is ``torch.nn.functional.conv2d``; backward is its autograd.
"""

from __future__ import annotations

import torch

from helpers.conv.config import ConvConfig
from helpers.conv.phases import phase

__all__ = ["forward", "backward"]


def _kw(cfg: ConvConfig) -> dict:
    return {"stride": (cfg.stride_h, cfg.stride_w), "padding": (cfg.pad_h, cfg.pad_w),
            "dilation": (cfg.dil_h, cfg.dil_w), "groups": cfg.groups}


def forward(x: torch.Tensor, w: torch.Tensor, cfg: ConvConfig) -> torch.Tensor:
    """``torch.nn.functional.conv2d(x, w)`` with cfg's stride, padding, dilation and groups;
    float32 tensors."""
    with torch.no_grad(), phase("torch conv2d"):
        return torch.nn.functional.conv2d(x, w, **_kw(cfg))


def backward(x: torch.Tensor, w: torch.Tensor, dy: torch.Tensor, cfg: ConvConfig):
    """(dx, dw) from torch's autograd of conv2d (cuDNN's backward-data and backward-filter)."""
    x = x.detach().requires_grad_(True)
    w = w.detach().requires_grad_(True)
    with torch.enable_grad():
        y = torch.nn.functional.conv2d(x, w, **_kw(cfg))
        with phase("torch conv2d backward"):
            dx, dw = torch.autograd.grad(y, (x, w), dy)
    return dx.detach(), dw.detach()
