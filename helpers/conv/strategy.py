"""One way of computing a convolution, as :data:`helpers.conv.STRATEGIES` lists it: its
family, the devices and layers it takes (and why not), its FLOPs and workspace, and how it runs
groups (once per group unless its code takes them) and dilation (natively, or on a filter
dilated with zeros). Shapes (cuDNN symbols): x (N, C, H, W), w (K, C/groups, R, S), y and dy
(N, K, P, Q); float32 tensors.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import torch

from helpers.conv import depthwise
from helpers.conv.config import ConvConfig
from helpers.device import backend

__all__ = ["Strategy"]


@dataclasses.dataclass(frozen=True)
class Strategy:
    """One way of computing a convolution.

    Attributes:
        name: registry key. family: ``direct``, ``unrolling``, ``fft``, ``winograd`` or
            ``library``.
        description: one paragraph for learners.
        devices: where it runs (``"cpu"``, ``"cuda"``).
        uses_numba_kernels: its CUDA path launches our Numba kernels (so the simulator budget
            applies without a GPU).
        finite_only: why it refuses inputs with NaN or infinity (where one would spread, beyond
            the outputs whose windows hold it); empty when it takes them.
        native_groups: its code takes groups itself; otherwise :meth:`forward` and
            :meth:`backward` run it once per group, on that group's channels and filters.
        dilation: ``"native"`` (its code takes dilation), ``"zeros"`` (it convolves with the
            filter dilated by inserted zeros: free where the cost does not depend on the
            kernel size) or the reason it refuses dilation.
        depthwise_kernels: on the CUDA path a depthwise layer (groups = C) runs whole, on the
            kernels of :mod:`helpers.conv.depthwise`, instead of once per channel.
        precision: the arithmetic of its products: ``"float32"`` (every strategy of ours, and
            ``reference``), or ``"tf32"`` (``reference-tf32``: operands rounded to TF32 on
            tensor cores). Comparisons of speed are made between float32 strategies; a
            strategy that needs hardware says where it cannot run through ``_device_refusal``
            (``reference-tf32``: :func:`helpers.device.precision.tf32_refusal`).
        _cpu_workspace: the workspace of its CPU path where that differs from the CUDA
            path's ``_workspace`` (direct convolution: none on the CPU).
    """

    name: str
    family: str
    description: str
    devices: tuple[str, ...]
    _forward: Callable
    _backward: Callable
    _flops: Callable[[ConvConfig], int]
    _workspace: Callable[[ConvConfig, bool], int | None]
    _supports: Callable[[ConvConfig, str], str | None] = lambda cfg, device: None
    uses_numba_kernels: bool = False
    finite_only: str = ""
    stride_note: str = "any stride, natively"
    native_groups: bool = False
    dilation: str = "native"
    depthwise_kernels: bool = False
    precision: str = "float32"
    _device_refusal: Callable[[str], str | None] = lambda device: None
    _cpu_workspace: Callable[[ConvConfig, bool], int | None] | None = None

    def unavailable(self, device: str = "cpu") -> str | None:
        """None if this strategy can run on ``device`` here (``"cpu"`` or ``"cuda"``, the GPU
        or the Numba CUDA simulator), whatever the layer; else the reason it cannot."""
        if device not in ("cpu", "cuda"):
            return f"device must be 'cpu' or 'cuda', got {device!r}"
        why = self._device_refusal(device)
        if device not in self.devices:
            return (f"{self.name} has no {device} implementation: {why}" if why else
                    f"{self.name} has no {device} implementation (it runs on "
                    f"{', '.join(self.devices)})")
        if device == "cuda" and backend.MODE == "unavailable":
            return "no CUDA device: NUMBA_ENABLE_CUDASIM=0 was set on a machine without a GPU"
        return why

    def supports(self, cfg: ConvConfig, device: str = "cpu") -> str | None:
        """None if this strategy computes ``cfg`` on ``device``, else the reason it cannot
        (:meth:`unavailable` first, then the layer's own)."""
        reason = self.unavailable(device)
        if reason:
            return reason
        if (cfg.dil_h, cfg.dil_w) != (1, 1) and self.dilation not in ("native", "zeros"):
            return f"dilation {cfg.dil_h, cfg.dil_w}: {self.dilation}"
        return self._supports(self._core(cfg, device), device)

    def _core(self, cfg: ConvConfig, device: str = "cpu") -> ConvConfig:
        """The config its own code sees: one group (unless native, or depthwise kernels on
        the CUDA path), the dilated extent for ``dilation="zeros"``."""
        whole = self.native_groups or (self.depthwise_kernels and device == "cuda"
                                       and depthwise.is_depthwise(cfg))
        if cfg.groups > 1 and not whole:
            cfg = cfg.group()
        if self.dilation == "zeros" and (cfg.dil_h, cfg.dil_w) != (1, 1):
            cfg = dataclasses.replace(cfg, r=cfg.r_extent, s=cfg.s_extent, dil_h=1, dil_w=1)
        return cfg

    def flops(self, cfg: ConvConfig, backward: bool = False) -> int:
        """FLOPs of the forward pass (multiply-adds x 2), or of forward + backward; for a
        strategy run once per group, the groups' sum."""
        core = self._core(cfg)
        f = self._flops(core) * (cfg.groups if core.groups != cfg.groups else 1)
        return 3 * f if backward else f

    def workspace_bytes(self, cfg: ConvConfig, backward: bool = False,
                        device: str = "cuda") -> int | None:
        """Analytic extra memory in bytes beyond x, w, y (and dx, dw, dy) on ``device``
        (``"cpu"`` or ``"cuda"``, the CUDA path by default); None if not known in advance
        (torch's choice of cuDNN algorithm). Groups run one after another, so the workspace is
        one group's."""
        if device == "cpu" and "cpu" in self.devices and self._cpu_workspace is not None:
            return self._cpu_workspace(self._core(cfg, "cpu"), backward)
        return self._workspace(self._core(cfg, device), backward)

    def forward(self, x: torch.Tensor, w: torch.Tensor, cfg: ConvConfig, device: str):
        """y (N, K, P, Q) for x (N, C, H, W) and w (K, C/groups, R, S); float32 tensors."""
        core = self._core(cfg, device)
        if core.r != cfg.r or core.s != cfg.s:
            w = _dilate(w, cfg)
        if core.groups == cfg.groups:
            return self._forward(x, w, core, device)
        cg, kg = core.c, core.k
        return torch.cat([self._forward(x[:, g * cg:(g + 1) * cg].contiguous(),
                                        w[g * kg:(g + 1) * kg].contiguous(), core, device)
                          for g in range(cfg.groups)], dim=1)

    def backward(self, x, w, dy, cfg: ConvConfig, device: str):
        """(dx, dw) for dy (N, K, P, Q), as :meth:`forward`."""
        core = self._core(cfg, device)
        dilated = core.r != cfg.r or core.s != cfg.s
        if dilated:
            w = _dilate(w, cfg)
        if core.groups == cfg.groups:
            dx, dw = self._backward(x, w, dy, core, device)
        else:
            cg, kg = core.c, core.k
            parts = [self._backward(x[:, g * cg:(g + 1) * cg].contiguous(),
                                    w[g * kg:(g + 1) * kg].contiguous(),
                                    dy[:, g * kg:(g + 1) * kg].contiguous(), core, device)
                     for g in range(cfg.groups)]
            dx = torch.cat([p[0] for p in parts], dim=1)
            dw = torch.cat([p[1] for p in parts], dim=0)
        if dilated:  # the gradient of the inserted zeros is dropped
            dw = dw[:, :, ::cfg.dil_h, ::cfg.dil_w].contiguous()
        return dx, dw


def _dilate(w: torch.Tensor, cfg: ConvConfig) -> torch.Tensor:
    """w (K, C, R, S) spread over its dilated extent, zeros between the taps."""
    out = torch.zeros((w.shape[0], w.shape[1], cfg.r_extent, cfg.s_extent), dtype=w.dtype,
                      device=w.device)
    out[:, :, ::cfg.dil_h, ::cfg.dil_w] = w
    return out
