"""The convolution strategies the study compares, behind one interface.

``conv2d(x, w, bias=None, stride=1, padding=0, dilation=1, groups=1, strategy="reference",
device=None) -> y`` and ``conv2d_backward(x, w, dy, ...) -> (dx, dw)``, or ``(dx, dw, db)``
with a bias: the arguments of ``torch.nn.functional.conv2d``. Shapes (cuDNN symbols):
``x: (N, C, H, W)``, ``w: (K, C/groups, R, S)``, ``y, dy: (N, K, P, Q)``; float32;
cross-correlation. Inputs are NumPy arrays or torch tensors; results are of x's kind.

:data:`STRATEGIES` maps each name to a :class:`Strategy`: its family (``direct``,
``unrolling``, ``fft``, ``winograd``, ``library``), what it supports, FLOPs, workspace. All
compute in float32 but ``reference-tf32`` (TF32, torch's default for cuDNN since Ampere):
``reference`` turns TF32 off; our cuBLAS GEMMs follow torch's matmul flag, off by default.

Source: Li et al., ICPP 2016, Section II-B and Figures 3-5; Winograd: Lavin and Gray, 2016.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from helpers.conv import depthwise, direct, fft, reference, unroll, winograd
from helpers.conv.config import ConvConfig, same_padding
from helpers.conv.strategy import Strategy
from helpers.device import backend, memory
from helpers.device.arrays import all_finite, cuda_device, to_torch
from helpers.device.precision import tf32_refusal

__all__ = ["ConvConfig", "Strategy", "STRATEGIES", "conv2d", "conv2d_backward", "config_for",
           "resolve_padding",
           "simulator_refusal", "memory_refusal", "SIMULATOR_MAX_MACS",
           "memory_report"]

#: Simulator budget: interpreted multiply-adds per call (the simulator manages ~1e5-1e6 a second).
SIMULATOR_MAX_MACS = 400_000


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


def _direct_workspace(cfg: ConvConfig, backward: bool) -> int:
    """The direct strategies' CUDA workspace: the backward's split dW partial sums
    (:func:`helpers.conv.direct.dw_workspace_bytes`); none forward, none for depthwise layers."""
    if not backward or depthwise.is_depthwise(cfg):
        return 0
    return direct.dw_workspace_bytes(cfg)


STRATEGIES: dict[str, Strategy] = {
    s.name: s
    for s in [
        Strategy(
            "direct-naive", "direct",
            "Direct convolution, one CUDA thread per output element reading its whole window "
            "from global memory (a depthwise layer: the depthwise kernel, one channel per "
            "filter); on the CPU, Numba loops parallel over images x filters.",
            ("cpu", "cuda"), _direct_forward(False), _direct_backward,
            lambda cfg: cfg.flops, _direct_workspace,
            _supports=lambda cfg, device: direct.naive_supports(cfg) if device == "cuda" else None,
            uses_numba_kernels=True, depthwise_kernels=True,
            _cpu_workspace=lambda cfg, b: 0),
        Strategy(
            "direct-tiled", "direct",
            "Direct convolution with the input patch and a slice of filters staged in shared "
            "memory per block, each thread computing several filters x output pixels in "
            "registers (a depthwise layer: one 16 x 16 output tile of one channel per block); "
            "backward (shared with direct-naive): dx by the same kernel on flipped filters, dW "
            "as a reduction split over blocks, then summed.",
            ("cuda",), _direct_forward(True), _direct_backward,
            lambda cfg: cfg.flops, _direct_workspace,
            _supports=lambda cfg, device: direct.tiled_supports(cfg), uses_numba_kernels=True,
            depthwise_kernels=True),
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
            _supports=_fft_supports, dilation="zeros",
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
            dilation="Winograd's transforms combine adjacent taps of a 4 x 4 input tile; a "
                     "dilated filter's taps are dil apart, so it would need the input split "
                     "into dil_h * dil_w interleaved sub-grids, each convolved separately "
                     "(use direct, im2col-gemm or fft)",
            finite_only="the transforms multiply it by their zero coefficients too, which "
                        "spreads it to a 4 x 4 block of outputs where direct convolution "
                        "poisons only the 3 x 3 whose windows hold it"),
        Strategy(
            "reference", "library",
            "torch.nn.functional.conv2d, and for (dx, dw) the backward operator autograd "
            "calls (convolution_backward, no second forward): cuDNN on an NVIDIA GPU, oneDNN "
            "on the CPU, in float32 with TF32 off, as our strategies compute. The library to "
            "beat.",
            ("cpu", "cuda"),
            lambda x, w, cfg, d: reference.forward(x, w, cfg),
            lambda x, w, dy, cfg, d: reference.backward(x, w, dy, cfg),
            lambda cfg: cfg.flops, lambda cfg, b: None, native_groups=True),
        Strategy(
            "reference-tf32", "library",
            "reference's calls with TF32 allowed, torch's default for convolutions: cuDNN "
            "rounds float32 operands to TF32 (a 10-bit mantissa) and multiplies on tensor "
            "cores, on GPUs of compute capability 8.0 and newer. Not float32: shown beside "
            "reference, never the baseline of a ratio.",
            ("cuda",),
            lambda x, w, cfg, d: reference.forward(x, w, cfg, tf32=True),
            lambda x, w, dy, cfg, d: reference.backward(x, w, dy, cfg, tf32=True),
            lambda cfg: cfg.flops, lambda cfg, b: None, native_groups=True, precision="tf32",
            _device_refusal=tf32_refusal),
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


def config_for(x_shape, w_shape, stride=1, padding=0, dilation=1, groups=1) -> ConvConfig:
    """Validate shapes and hyper-parameters (see :meth:`ConvConfig.from_shapes`); padding may
    also be ``'valid'`` (0) or ``'same'`` when its total is even (see :func:`resolve_padding`
    for the odd case)."""
    pads, extra = resolve_padding(padding, w_shape, stride, dilation)
    if extra != (0, 0):
        raise ValueError(f"padding='same' with this kernel and dilation needs one more row or "
                         f"column at the end than at the start {extra}; conv2d pads x for it, a "
                         f"ConvConfig holds symmetric padding only")
    return ConvConfig.from_shapes(x_shape, w_shape, stride, pads, dilation, groups)


def resolve_padding(padding, w_shape, stride=1, dilation=1):
    """``padding`` as ((pad_h, pad_w), (extra_h, extra_w)): an int or pair as it is with no
    extra; ``'valid'`` as 0; ``'same'`` as torch applies it (:func:`helpers.conv.config.
    same_padding`: half the total dil*(R - 1) on each side, the odd one at the bottom/right).

    Raises:
        ValueError: a string other than 'same' or 'valid', 'same' with a stride other than 1,
            or w_shape not 4-D (naming the parameter).
    """
    if isinstance(padding, str):
        if padding == "valid":
            return (0, 0), (0, 0)
        if padding != "same":
            raise ValueError(f"padding must be an int, an (h, w) pair, 'same' or 'valid', got "
                             f"{padding!r}")
        _, _, r, s = _w_dims(w_shape)
        return same_padding(r, s, dilation, stride)
    return padding, (0, 0)


def _w_dims(w_shape) -> tuple[int, int, int, int]:
    if not isinstance(w_shape, (tuple, list, torch.Size)) or len(w_shape) != 4:
        raise ValueError(f"w must be 4-D (K, C/groups, R, S), got shape {w_shape!r}")
    return tuple(int(v) for v in w_shape)


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
        workspace = strat.workspace_bytes(cfg, backward, device) or 0
        if need + workspace <= _ALWAYS_FITS:
            return None  # small: not worth reading the free memory on every call
    limit = memory.available_bytes(device)
    if need <= limit:
        workspace = strat.workspace_bytes(cfg, backward, device) or 0
        need += workspace
        what += " plus the workspace" if workspace else ""
    if need > limit:
        return (f"{strategy} would need about {need / 2**30:,.1f} GiB ({what}), more than the "
                f"{limit / 2**30:,.1f} GiB free on {device}; choose a smaller batch, input, padding "
                f"or number of filters")
    return None


def _check_bias(bias, k: int) -> None:
    """A bias must be None or a float array or tensor of shape (K,); an int, a pair or an
    integer array here is most likely a stride passed by position, and the message says so."""
    if bias is None:
        return
    hint = ("conv2d's third parameter is bias, as in torch.nn.functional.conv2d: pass stride= "
            "and padding= by name")
    is_array = isinstance(bias, (np.ndarray, torch.Tensor))
    floating = is_array and (bias.dtype.is_floating_point if isinstance(bias, torch.Tensor)
                             else bias.dtype.kind == "f")
    if not floating:
        raise ValueError(f"bias must be None or a float array of shape (K,) = ({k},), got "
                         f"{bias!r}; {hint}")
    if tuple(bias.shape) != (k,):
        raise ValueError(f"bias must have shape (K,) = ({k},), one value per filter, got "
                         f"{tuple(bias.shape)}")


def _prepare(strategy: str, device: str | None, arrays: dict, bias, stride, padding, dilation,
             groups, backward: bool):
    strat = _check_strategy(strategy)
    if device is not None:
        _check_device(device)
    for name, a in arrays.items():
        _check_array(name, a)
    x, w = arrays["x"], arrays["w"]
    pads, extra = resolve_padding(padding, tuple(w.shape), stride, dilation)
    x_shape = tuple(x.shape)
    if len(x_shape) == 4 and extra != (0, 0):  # 'same' with an odd total: one more at the end
        x_shape = x_shape[:2] + (x_shape[2] + extra[0], x_shape[3] + extra[1])
    cfg = ConvConfig.from_shapes(x_shape, w.shape, stride, pads, dilation, groups)
    _check_bias(bias, cfg.k)
    if "dy" in arrays and tuple(arrays["dy"].shape) != cfg.y_shape:
        raise ValueError(f"dy must have the output's shape {cfg.y_shape} (from x, w, stride "
                         f"{cfg.stride_h, cfg.stride_w}, padding {padding!r} and dilation "
                         f"{cfg.dil_h, cfg.dil_w}), got {tuple(arrays['dy'].shape)}")
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
    if bias is not None:
        tensors["bias"] = to_torch(bias, where)
    if extra != (0, 0):
        tensors["x"] = torch.nn.functional.pad(tensors["x"], (0, extra[1], 0, extra[0]))
    if strat.finite_only:
        for name, t in tensors.items():
            if not all_finite(t):
                raise ValueError(f"{strategy} needs finite values: {name} contains NaN or "
                                 f"infinity, and {strat.finite_only}")
    return strat, cfg, device, tensors, extra


def _like(result: torch.Tensor, template):
    """Return ``result`` as the same kind as ``template`` (NumPy, or a tensor on its device)."""
    if isinstance(template, np.ndarray):
        return result.detach().cpu().numpy()
    return result.detach().to(template.device)


def conv2d(x, w, bias=None, stride=1, padding=0, dilation=1, groups=1,
           strategy: str = "reference", device: str | None = None):
    """Forward convolution ``y = x (*) w + bias`` by one of :data:`STRATEGIES`.

    The arguments of ``torch.nn.functional.conv2d``, then the strategy and the device.

    Args:
        x: input (N, C, H, W), NumPy array or torch tensor, floating point (a tensor that
            requires grad is read through ``detach()``; no gradient is recorded).
        w: filters (K, C/groups, R, S), same kinds accepted.
        bias: None or (K,), added to every output of its filter.
        stride: int or (h, w) pair (tuple, list, NumPy array or tensor of integers), each >= 1.
        padding: int or (h, w) pair of zero padding, each >= 0 (at most 2**31 - 1), or
            ``'valid'`` (none) or ``'same'`` (stride 1; output H x W; an odd total puts the
            extra row and column at the bottom and right, as torch does).
        dilation: int or (h, w) pair >= 1: the taps of the filter are ``dilation`` apart.
        groups: >= 1, dividing C and K: filter k sees channels ``g*C/groups ...`` of its group
            ``g = k // (K/groups)`` (``groups = C``: a depthwise convolution).
        strategy: a key of :data:`STRATEGIES`.
        device: ``"cpu"`` or ``"cuda"``; default ``"cuda"`` for a CUDA tensor, else
            ``"cpu"``. ``"cuda"`` runs the CUDA kernels on the GPU or, without one, in the
            Numba CUDA simulator (torch-based steps then run on the CPU).

    Returns:
        y (N, K, P, Q) float32 (other float dtypes are converted), of the same kind as x:
        NumPy if x is NumPy, else a tensor on x's device.

    Raises:
        ValueError: non-4-D arrays, a channel mismatch (w's channels must be C/groups), groups
            not dividing C and K, an empty dimension, a (dilated) kernel larger than the padded
            input, stride < 1, padding < 0 or an unknown padding string, 'same' with stride > 1,
            dilation < 1, a bias that is not (K,), non-float data, unknown strategy or device,
            a configuration the strategy does not support (with the reason), non-finite input
            to a strategy that cannot handle it, a layer too large for the CUDA simulator, or
            one whose estimated memory exceeds what the device has free
            (:func:`memory_refusal`). Every check runs before anything is converted or
            allocated but the finite check.
    """
    strat, cfg, device, t, _ = _prepare(strategy, device, {"x": x, "w": w}, bias, stride,
                                        padding, dilation, groups, False)
    y = strat.forward(t["x"], t["w"], cfg, device)
    if bias is not None:
        y = y + t["bias"].to(y.dtype).reshape(1, -1, 1, 1)
    return _like(y, x)


def conv2d_backward(x, w, dy, bias=None, stride=1, padding=0, dilation=1, groups=1,
                    strategy: str = "reference", device: str | None = None):
    """Gradients of ``sum(y * dy)`` for ``y = conv2d(x, w, bias, ...)``.

    Args:
        x, w, bias, stride, padding, dilation, groups, strategy, device: as :func:`conv2d`
            (bias only says whether db is wanted: its values do not enter the gradients).
        dy: gradient of the output, (N, K, P, Q).

    Returns:
        (dx, dw), or (dx, dw, db) when ``bias`` is given: the shapes of x, w and bias,
        float32, of the same kind as x. ``db[k]`` is the sum of ``dy[:, k]``.

    Raises:
        ValueError: as :func:`conv2d`, and dy's shape differing from (N, K, P, Q).
    """
    strat, cfg, device, t, extra = _prepare(strategy, device, {"x": x, "w": w, "dy": dy}, bias,
                                            stride, padding, dilation, groups, True)
    dx, dw = strat.backward(t["x"], t["w"], t["dy"], cfg, device)
    if extra != (0, 0):
        dx = dx[:, :, :cfg.h - extra[0], :cfg.w - extra[1]]
    if bias is None:
        return _like(dx, x), _like(dw, x)
    return _like(dx, x), _like(dw, x), _like(t["dy"].sum(dim=(0, 2, 3)), x)


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
        call = lambda: conv2d_backward(x, w, dy, stride=stride, padding=padding,  # noqa: E731
                                       strategy=strategy, device=device)
        out_bytes = (np.prod(cfg.x_shape) + np.prod(cfg.w_shape)) * 4
    else:
        call = lambda: conv2d(x, w, stride=stride, padding=padding,  # noqa: E731
                              strategy=strategy, device=device)
        out_bytes = np.prod(cfg.y_shape) * 4
    call()  # warm-up: JIT compilation and library initialisation are not the strategy's memory
    result = memory.peak_memory(call, device=device)
    return {
        "strategy": strategy, "device": result.device, "flops": strat.flops(cfg, backward),
        "workspace_bytes": strat.workspace_bytes(cfg, backward, device),
        "output_bytes": int(out_bytes),
        "peak_bytes": result.peak_bytes, "method": result.method,
    }
