"""The convolution strategies the study compares, behind one interface.

``conv2d(x, w, stride=1, padding=0, strategy="reference", device=None) -> y`` and
``conv2d_backward(x, w, dy, stride=1, padding=0, strategy=..., device=None) -> (dx, dw)``.

Shapes (cuDNN paper symbols): ``x: (N, C, H, W)``, ``w: (K, C, R, S)``, ``y, dy: (N, K, P, Q)``
with ``P = (H + 2*pad_h - R) // stride_h + 1`` (likewise Q); float32 (other float dtypes are
converted); cross-correlation, as ``torch.nn.functional.conv2d``. ``stride`` and ``padding``
are ints or (h, w) pairs. Inputs are NumPy arrays or torch tensors; results are of the same
kind as ``x``; ``device`` picks ``"cpu"`` or ``"cuda"`` (see :func:`conv2d`).

:data:`STRATEGIES` maps each name to a :class:`Strategy`: its family (``direct``,
``unrolling``, ``fft``, ``winograd``, ``library``), what it supports, FLOPs, workspace.

Source: Li et al., ICPP 2016, Section II-B and Figures 3-5; Winograd: Lavin and Gray, 2016.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable

import numpy as np
import torch

from helpers.conv import direct, fft, reference, unroll, winograd
from helpers.conv.config import ConvConfig
from helpers.device import backend, memory
from helpers.device.arrays import cuda_device, to_torch

__all__ = ["ConvConfig", "Strategy", "STRATEGIES", "conv2d", "conv2d_backward", "config_for",
           "simulator_refusal", "memory_refusal", "SIMULATOR_MAX_MACS",
           "memory_report"]

#: Simulator budget: interpreted multiply-adds per call (the simulator manages ~1e5-1e6 a second).
SIMULATOR_MAX_MACS = 400_000


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

    def supports(self, cfg: ConvConfig, device: str = "cpu") -> str | None:
        """None if this strategy computes ``cfg`` on ``device``, else the reason it cannot."""
        if device not in ("cpu", "cuda"):
            return f"device must be 'cpu' or 'cuda', got {device!r}"
        if device not in self.devices:
            return f"{self.name} has no {device} implementation (it runs on {', '.join(self.devices)})"
        if device == "cuda" and backend.MODE == "unavailable":
            return "no CUDA device: NUMBA_ENABLE_CUDASIM=0 was set on a machine without a GPU"
        return self._supports(cfg, device)

    def flops(self, cfg: ConvConfig, backward: bool = False) -> int:
        """FLOPs of the forward pass (multiply-adds x 2), or of forward + backward."""
        f = self._flops(cfg)
        return 3 * f if backward else f

    def workspace_bytes(self, cfg: ConvConfig, backward: bool = False) -> int | None:
        """Analytic extra memory in bytes beyond x, w, y (and dx, dw, dy); None if not known
        in advance (torch's choice of cuDNN algorithm)."""
        return self._workspace(cfg, backward)

    def forward(self, x: torch.Tensor, w: torch.Tensor, cfg: ConvConfig, device: str):
        return self._forward(x, w, cfg, device)

    def backward(self, x, w, dy, cfg: ConvConfig, device: str):
        return self._backward(x, w, dy, cfg, device)


def _direct_forward(tiled: bool):
    def run(x, w, cfg, device):
        if device == "cpu":
            return direct.forward_cpu(x, w, cfg)
        return direct.forward_tiled(x, w, cfg) if tiled else direct.forward_naive(x, w, cfg)
    return run


def _direct_backward(x, w, dy, cfg, device):
    return direct.backward_cpu(x, w, dy, cfg) if device == "cpu" else direct.backward_cuda(x, w, dy, cfg)


def _fft_module():

    return fft


def _fft_supports(cfg: ConvConfig, device: str) -> str | None:
    return _fft_module().supports(cfg)


STRATEGIES: dict[str, Strategy] = {
    s.name: s
    for s in [
        Strategy(
            "direct-naive", "direct",
            "Direct convolution, one CUDA thread per output element reading its whole window "
            "from global memory; on the CPU, Numba loops parallel over images x filters.",
            ("cpu", "cuda"), _direct_forward(False), _direct_backward,
            lambda cfg: cfg.flops, lambda cfg, b: 0,
            _supports=lambda cfg, device: direct.naive_supports(cfg) if device == "cuda" else None,
            uses_numba_kernels=True),
        Strategy(
            "direct-tiled", "direct",
            "Direct convolution with a shared-memory input tile (plus halo) and filter per "
            "block, a barrier between loading and computing; backward shares direct-naive's "
            "gather kernels.",
            ("cuda",), _direct_forward(True), _direct_backward,
            lambda cfg: cfg.flops, lambda cfg, b: 0,
            _supports=lambda cfg, device: direct.tiled_supports(cfg), uses_numba_kernels=True),
        Strategy(
            "im2col-gemm", "unrolling",
            "im2col (our CUDA kernel; a strided view on the CPU) then one GEMM by cuBLAS/BLAS "
            "through torch; backward: two GEMMs and col2im.",
            ("cpu", "cuda"),
            lambda x, w, cfg, d: unroll.forward(x, w, cfg, d, gemm="torch"),
            lambda x, w, dy, cfg, d: unroll.backward(x, w, dy, cfg, d, gemm="torch"),
            lambda cfg: cfg.flops, unroll.workspace_bytes,
            _supports=lambda cfg, device: unroll.supports(cfg) if device == "cuda" else None,
            uses_numba_kernels=True),
        Strategy(
            "im2col-tiled", "unrolling",
            "im2col and col2im as in im2col-gemm, with the GEMMs done by our own shared-memory "
            "tiled kernel from helpers.conv.gemm instead of cuBLAS.",
            ("cuda",),
            lambda x, w, cfg, d: unroll.forward(x, w, cfg, d, gemm="tiled"),
            lambda x, w, dy, cfg, d: unroll.backward(x, w, dy, cfg, d, gemm="tiled"),
            lambda cfg: cfg.flops, unroll.workspace_bytes,
            _supports=lambda cfg, device: unroll.supports(cfg, "tiled"),
            uses_numba_kernels=True),
        Strategy(
            "fft", "fft",
            "FFT convolution with torch.fft (cuFFT on a GPU, MKL or pocketfft on the CPU): "
            "transform input and zero-padded filters, multiply-accumulate over channels in the "
            "frequency domain, transform back, crop.",
            ("cpu", "cuda"),
            lambda x, w, cfg, d: _fft_module().forward(x, w, cfg),
            lambda x, w, dy, cfg, d: _fft_module().backward(x, w, dy, cfg),
            lambda cfg: _fft_module().flops(cfg),
            lambda cfg, b: _fft_module().workspace_bytes(cfg),
            _supports=_fft_supports,
            finite_only="the Fourier transform would spread it to every output element",
            stride_note="stride 1 natively; a larger stride computes the stride-1 output and "
                        "keeps every s-th row and column, so it costs the full stride-1 work"),
        Strategy(
            "winograd", "winograd",
            "Winograd's minimal filtering F(2x2, 3x3) (Lavin and Gray, 2016): each 4 x 4 input "
            "tile and 3 x 3 filter are transformed (our CUDA kernels; torch on the CPU), 16 "
            "batched GEMMs by cuBLAS/BLAS multiply-accumulate over channels, and each product "
            "is transformed back to a 2 x 2 output tile: 16 multiplies instead of 36. 3 x 3 "
            "kernels, stride 1.",
            ("cpu", "cuda"),
            lambda x, w, cfg, d: winograd.forward(x, w, cfg, d),
            lambda x, w, dy, cfg, d: winograd.backward(x, w, dy, cfg, d),
            winograd.flops, winograd.workspace_bytes, _supports=winograd.supports,
            uses_numba_kernels=True, stride_note="stride 1 only",
            finite_only="the transforms multiply it by their zero coefficients too, which "
                        "spreads it to a 4 x 4 block of outputs where direct convolution "
                        "poisons only the 3 x 3 whose windows hold it"),
        Strategy(
            "reference", "library",
            "torch.nn.functional.conv2d and its autograd backward: cuDNN on an NVIDIA GPU, "
            "oneDNN on the CPU. The library to beat.",
            ("cpu", "cuda"),
            lambda x, w, cfg, d: reference.forward(x, w, cfg),
            lambda x, w, dy, cfg, d: reference.backward(x, w, dy, cfg),
            lambda cfg: cfg.flops, lambda cfg, b: None),
    ]
}


def simulator_refusal(strategy: Strategy, cfg: ConvConfig, backward: bool = False) -> str | None:
    """Without a GPU, the reason a CUDA-path call would be too slow for the simulator, or None."""
    if backend.MODE != "simulator" or not strategy.uses_numba_kernels:
        return None
    macs = strategy.flops(cfg, backward) // 2
    if macs > SIMULATOR_MAX_MACS:
        return (f"about {macs:,} multiply-adds would take the CUDA simulator roughly "
                f"{macs / 2e5:.0f} s or more; without a GPU keep CUDA-path layers under "
                f"{SIMULATOR_MAX_MACS:,} multiply-adds, or use device='cpu'")
    if strategy.name == "im2col-tiled":
        return unroll.tiled_simulator_refusal(cfg, backward)
    return None


def config_for(x_shape, w_shape, stride=1, padding=0) -> ConvConfig:
    """Validate shapes and hyper-parameters (see :meth:`ConvConfig.from_shapes`)."""
    return ConvConfig.from_shapes(x_shape, w_shape, stride, padding)


def _check_array(name: str, a) -> None:
    if isinstance(a, torch.Tensor):
        if not a.dtype.is_floating_point:
            raise ValueError(f"{name} must be a floating-point tensor, got {a.dtype}")
    elif isinstance(a, np.ndarray):
        if a.dtype.kind != "f":
            raise ValueError(f"{name} must be a floating-point array, got {a.dtype}")
    else:
        raise ValueError(f"{name} must be a NumPy array or a torch tensor, got {type(a).__name__}")


def _check_strategy(strategy) -> Strategy:
    if not isinstance(strategy, str) or strategy not in STRATEGIES:
        raise ValueError(f"strategy must be one of {sorted(STRATEGIES)}, got {strategy!r}")
    return STRATEGIES[strategy]


def _check_device(device) -> None:
    if not isinstance(device, str) or device not in ("cpu", "cuda"):
        raise ValueError(f"device must be 'cpu' or 'cuda', got {device!r} (or None: x's device)")


#: Calls estimated below this many bytes are not checked against the free memory.
_ALWAYS_FITS = 64 * 2**20


def memory_refusal(strategy: str, cfg: ConvConfig, device: str = "cpu",
                   backward: bool = False) -> str | None:
    """The reason one call would not fit in the memory free on ``device``, or None.

    The estimate, in float32 bytes: the zero-padded input and the output (for ``backward``,
    also dy, dx and dw), plus the strategy's analytic workspace where it is known
    (:meth:`Strategy.workspace_bytes`). The padded input and output are checked first, so an
    absurd padding is refused without computing anything that grows with it. The memory free
    is :func:`helpers.device.memory.available_bytes` (the available RAM on the CPU and
    under the CUDA simulator; on a GPU, the free memory plus torch's unused cache).

    Raises:
        ValueError: an unknown strategy or device; ``cfg`` not a :class:`ConvConfig`.
    """
    strat = _check_strategy(strategy)
    _check_device(device)
    if not isinstance(cfg, ConvConfig):
        raise ValueError(f"cfg must be a ConvConfig, got {type(cfg).__name__}")
    padded = cfg.n * cfg.c * (cfg.h + 2 * cfg.pad_h) * (cfg.w + 2 * cfg.pad_w)
    tensors = padded + math.prod(cfg.y_shape)
    if backward:
        tensors += math.prod(cfg.y_shape) + math.prod(cfg.x_shape) + math.prod(cfg.w_shape)
    need = 4 * tensors
    what = "padded input and output" + (", dy, dx and dw" if backward else "")
    if need <= _ALWAYS_FITS:
        workspace = strat.workspace_bytes(cfg, backward) or 0
        if need + workspace <= _ALWAYS_FITS:
            return None  # small: not worth reading the free memory on every call
    limit = memory.available_bytes(device)
    if need <= limit:
        workspace = strat.workspace_bytes(cfg, backward) or 0
        need += workspace
        what += " plus the workspace" if workspace else ""
    if need > limit:
        return (f"{strategy} would need about {need / 2**30:,.1f} GiB ({what}), more than the "
                f"{limit / 2**30:,.1f} GiB free on {device}; choose a smaller batch, input, padding "
                f"or number of filters")
    return None


def _prepare(strategy: str, device: str | None, arrays: dict, stride, padding, backward: bool):
    strat = _check_strategy(strategy)
    if device is not None:
        _check_device(device)
    for name, a in arrays.items():
        _check_array(name, a)
    x, w = arrays["x"], arrays["w"]
    cfg = ConvConfig.from_shapes(x.shape, w.shape, stride, padding)
    if "dy" in arrays and tuple(arrays["dy"].shape) != cfg.y_shape:
        raise ValueError(f"dy must have the output's shape {cfg.y_shape} (from x, w, stride "
                             f"{cfg.stride_h, cfg.stride_w} and padding {cfg.pad_h, cfg.pad_w}), "
                             f"got "
                         f"{tuple(arrays['dy'].shape)}")
    if device is None:
        device = "cuda" if isinstance(x, torch.Tensor) and x.is_cuda else "cpu"
    reason = memory_refusal(strategy, cfg, device, backward)
    if reason:
        raise ValueError(f"x, w and padding {cfg.pad_h, cfg.pad_w} give a layer too large: "
                         f"{reason}")
    reason = strat.supports(cfg, device)
    if reason:
        raise ValueError(f"{strategy} cannot compute this convolution on {device}: {reason}")
    if device == "cuda":
        reason = simulator_refusal(strat, cfg, backward)
        if reason:
            raise ValueError(f"{strategy} on the CUDA simulator: {reason}")
    where = cuda_device() if device == "cuda" else torch.device("cpu")
    tensors = {name: to_torch(a, where) for name, a in arrays.items()}
    if strat.finite_only:
        for name, t in tensors.items():
            # A finite sum means no NaN or infinity (they propagate) and costs one fast
            # reduction; only a sum that is not finite (or that overflowed) needs the full test.
            if not (bool(torch.isfinite(t.sum())) or bool(torch.isfinite(t).all())):
                raise ValueError(f"{strategy} needs finite values: {name} contains NaN or "
                                 f"infinity, and {strat.finite_only}")
    return strat, cfg, device, tensors


def _like(result: torch.Tensor, template):
    """Return ``result`` as the same kind as ``template`` (NumPy, or a tensor on its device)."""
    if isinstance(template, np.ndarray):
        return result.detach().cpu().numpy()
    return result.detach().to(template.device)


def conv2d(x, w, stride=1, padding=0, strategy: str = "reference", device: str | None = None):
    """Forward convolution ``y = x (*) w`` by one of :data:`STRATEGIES`.

    Args:
        x: input (N, C, H, W), NumPy array or torch tensor, floating point (a tensor that
            requires grad is read through ``detach()``; no gradient is recorded).
        w: filters (K, C, R, S), same kinds accepted.
        stride: int or (h, w) pair (tuple, list, NumPy array or tensor of integers), each >= 1.
        padding: int or (h, w) pair of zero padding, each >= 0. Both at most 2**31 - 1.
        strategy: a key of :data:`STRATEGIES`.
        device: ``"cpu"`` or ``"cuda"``; default ``"cuda"`` for a CUDA tensor, else
            ``"cpu"``. ``"cuda"`` runs the CUDA kernels on the GPU or, without one, in the
            Numba CUDA simulator (torch-based steps then run on the CPU).

    Returns:
        y (N, K, P, Q) float32 (other float dtypes are converted), of the same kind as x:
        NumPy if x is NumPy, else a tensor on x's device.

    Raises:
        ValueError: non-4-D arrays, channel mismatch, an empty dimension, kernel larger than the
            padded input, stride < 1, padding < 0, non-float data, unknown strategy or device,
            a configuration the strategy does not support (with the reason), non-finite input to
            a strategy that cannot handle it, a layer too large for the CUDA simulator, or one
            whose estimated memory exceeds what the device has free (:func:`memory_refusal`).
            Every check runs before anything is converted or allocated but the finite check.
    """
    strat, cfg, device, t = _prepare(strategy, device, {"x": x, "w": w}, stride, padding, False)
    return _like(strat.forward(t["x"], t["w"], cfg, device), x)


def conv2d_backward(x, w, dy, stride=1, padding=0, strategy: str = "reference",
                    device: str | None = None):
    """Gradients of ``sum(y * dy)`` with respect to x and w, for ``y = conv2d(x, w)``.

    Args:
        x, w, stride, padding, strategy, device: as :func:`conv2d`.
        dy: gradient of the output, (N, K, P, Q).

    Returns:
        (dx, dw): shapes of x and w, float32, of the same kind as x.

    Raises:
        ValueError: as :func:`conv2d`, and dy's shape differing from (N, K, P, Q).
    """
    strat, cfg, device, t = _prepare(strategy, device, {"x": x, "w": w, "dy": dy}, stride,
                                     padding, True)
    dx, dw = strat.backward(t["x"], t["w"], t["dy"], cfg, device)
    return _like(dx, x), _like(dw, x)


def memory_report(strategy: str, x_shape, w_shape, stride=1, padding=0, device: str = "cpu",
                  backward: bool = False, seed: int = 0) -> dict:
    """FLOPs, analytic workspace and measured peak memory of one call, side by side.

    Runs the strategy once to warm up, then once measured, on random float32 data of the given shapes (created before the
    measurement starts, so the peak counts only what the call itself allocates: its output(s)
    and workspace).

    Returns:
        dict with ``strategy, device, flops`` (forward, or forward + backward),
        ``workspace_bytes`` (analytic; None if unknown), ``output_bytes`` (y, or dx + dw),
        ``peak_bytes`` (measured above the baseline) and ``method`` (how it was measured).
        On the CPU the peak is the growth of the process's resident memory (unused allocator
        memory is handed back to the system first, :mod:`helpers.device.memory`); it includes the
        outputs and short-lived copies, so read it beside the analytic workspace.

    Raises:
        ValueError: as :func:`conv2d` (before any allocation), an unknown device, ``backward``
            not a bool, ``seed`` not an integer >= 0.
    """
    strat = _check_strategy(strategy)
    _check_device(device)
    if not isinstance(backward, bool):
        raise ValueError(f"backward must be True or False, got {backward!r}")
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ValueError(f"seed must be an integer >= 0, got {seed!r}")
    cfg = config_for(x_shape, w_shape, stride, padding)
    reason = memory_refusal(strategy, cfg, device, backward)
    if reason:
        raise ValueError(f"x_shape, w_shape and padding give a layer too large: {reason}")
    reason = strat.supports(cfg, device) or (
        simulator_refusal(strat, cfg, backward) if device == "cuda" else None)
    if reason:
        raise ValueError(f"{strategy} cannot compute this convolution on {device}: {reason}")
    rng = np.random.default_rng(seed)
    where = torch.device("cuda") if device == "cuda" and backend.MODE == "gpu" else torch.device("cpu")
    x = torch.from_numpy(rng.standard_normal(cfg.x_shape, dtype=np.float32)).to(where)
    w = torch.from_numpy(rng.standard_normal(cfg.w_shape, dtype=np.float32)).to(where)
    if backward:
        dy = torch.from_numpy(rng.standard_normal(cfg.y_shape, dtype=np.float32)).to(where)
        call = lambda: conv2d_backward(x, w, dy, stride, padding, strategy, device)  # noqa: E731
        out_bytes = (np.prod(cfg.x_shape) + np.prod(cfg.w_shape)) * 4
    else:
        call = lambda: conv2d(x, w, stride, padding, strategy, device)  # noqa: E731
        out_bytes = np.prod(cfg.y_shape) * 4
    call()  # warm-up: JIT compilation and library initialisation are not the strategy's memory
    result = memory.peak_memory(call, device=device)
    return {
        "strategy": strategy, "device": result.device, "flops": strat.flops(cfg, backward),
        "workspace_bytes": strat.workspace_bytes(cfg, backward), "output_bytes": int(out_bytes),
        "peak_bytes": result.peak_bytes, "method": result.method,
    }
