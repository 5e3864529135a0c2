"""Precision and tensor cores: error against float64 and speed of GEMM and convolution in
float32 (TF32 off), TF32, bfloat16 and float16.

:func:`tf32_mode` (:mod:`helpers.device.precision`'s) sets torch's two TF32 flags and
restores them; :func:`supports` says why a precision cannot run; :func:`native` whether the
device has arithmetic for it; :func:`error_vs_float64` the max and RMS relative error on
seeded inputs; :func:`measure` speed and error per (op, precision), one row each;
:func:`ceilings` the datasheet roofs; :func:`recorded` reads ``results/precision_*``.
Shapes: GEMM n x n x n; convolutions NCHW as :class:`helpers.conv.ConvConfig` (cuDNN
symbols). Times in ms, rates in TFLOP/s (10^12).

Source: NVIDIA A100 and H100 datasheets (TF32, BF16, FP16 tensor cores); Micikevicius et
al., "Mixed Precision Training", ICLR 2018; the study's Table I layers (Li et al., ICPP 2016).
"""

from __future__ import annotations

import argparse
import functools
import pathlib
import time
from collections.abc import Callable, Iterable, Sequence

import torch
import torch.nn.functional as F

from helpers import results
from helpers.conv import STRATEGIES, ConvConfig
from helpers.conv.check import reference
from helpers.device import backend
from helpers.device.arrays import unpoisoned
from helpers.device.precision import TF32_CAPABILITY, tf32_mode, tf32_refusal
from helpers.device.progress import progress as progress_bar
from helpers.device.progress import time_limit_status, time_up
from helpers.device.timing import benchmark, device_label
from helpers.paper import TABLE_I

__all__ = ["PRECISIONS", "DTYPES", "OPS", "STRATEGY_PRECISIONS", "FIELDS", "PREFIX", "COMMAND",
           "CPU_GEMM_SIZES", "GPU_GEMM_SIZES", "CPU_LAYERS", "GPU_LAYERS", "DEFAULT_STRATEGIES",
           "ERROR_BATCH", "tf32_mode", "precision_mode", "cpu_flags", "native", "arithmetic",
           "supports", "strategy_reason", "relative_errors", "error_vs_float64", "measure",
           "ceilings", "recorded", "format_table", "main"]

#: ``"float32"``: IEEE float32, TF32 off; ``"tf32"``: float32 tensors, TF32 allowed (sm_80+).
PRECISIONS = ("float32", "tf32", "bfloat16", "float16")
#: The torch dtype the inputs are cast to for each precision (TF32 is a mode, not a dtype).
DTYPES = {"float32": torch.float32, "tf32": torch.float32, "bfloat16": torch.bfloat16,
          "float16": torch.float16}
OPS = ("gemm", "conv")

#: Precisions at which each strategy is reported. ``reference`` (cuDNN, oneDNN) runs in every
#: dtype; ours compute in float32 (``conv2d`` converts inputs). TF32 flags reach only cuBLAS
#: and cuDNN: ``im2col-gemm``, ``winograd`` (their GEMMs) and ``fft`` (cuFFT stays float32,
#: its filter transform and Cgemm are GEMMs) have TF32 rows; our Numba kernels stay float32.
#: ``reference-tf32`` is the library with TF32 allowed whatever the flags: a TF32 row only.
STRATEGY_PRECISIONS: dict[str, tuple[str, ...]] = {
    "reference": PRECISIONS, "reference-tf32": ("tf32",), "im2col-gemm": ("float32", "tf32"),
    "fft": ("float32", "tf32"), "winograd": ("float32", "tf32"), "direct-naive": ("float32",),
    "direct-tiled": ("float32",), "im2col-tiled": ("float32",)}

#: Keys of every row of :func:`measure` (and of ``results/precision_*.csv``).
FIELDS = ("op", "layer", "shape", "strategy", "precision", "dtype", "allow_tf32", "flops",
          "median_ms", "iqr_ms", "tflop_s", "max_rel_error", "rms_rel_error", "error_batch",
          "native", "arithmetic", "device", "device_kind", "source", "status")

PREFIX = "precision_"
COMMAND = "python -m helpers.experiments.precision --save"

#: Defaults small enough for a live notebook cell on a 2-core CPU (seconds), and GPU sizes.
CPU_GEMM_SIZES: tuple[int, ...] = (256,)
GPU_GEMM_SIZES: tuple[int, ...] = (4096, 8192)
CPU_LAYERS: tuple[ConvConfig, ...] = (
    ConvConfig.from_study(b=8, i=32, f=32, k=3, s=1, c=16, name="small (b=8, c=16, i=32)"),)
GPU_LAYERS: tuple[ConvConfig, ...] = TABLE_I
DEFAULT_STRATEGIES = ("reference", "im2col-gemm", "fft")
#: On a GPU the error of a convolution is taken on its first ERROR_BATCH images (the float64
#: reference runs on the CPU); the time is that of the whole batch.
ERROR_BATCH = 16

#: CPU flags (``/proc/cpuinfo``: x86 ``flags``, Arm ``Features``) meaning native arithmetic.
NATIVE_CPU_FLAGS = {"bfloat16": ("avx512_bf16", "amx_bf16", "bf16"),
                    "float16": ("avx512_fp16", "amx_fp16", "asimdhp")}
#: Compute capability from which a GPU has tensor cores for the precision.
TENSOR_CORE_CC = {"tf32": TF32_CAPABILITY, "bfloat16": (8, 0), "float16": (7, 0)}
_WHERE = {"cpu": torch.device("cpu"), "cuda": torch.device("cuda")}


def _check(name: str, value, allowed: Sequence[str]) -> None:
    if not isinstance(value, str) or value not in allowed:
        raise ValueError(f"{name} must be one of {tuple(allowed)}, got {value!r}")


def precision_mode(precision: str):
    """:func:`tf32_mode` for a precision: TF32 allowed for ``"tf32"``, off for all others (so a
    ``"float32"`` row is IEEE float32). Raises ValueError: an unknown precision."""
    _check("precision", precision, PRECISIONS)
    return tf32_mode(precision == "tf32")


@functools.lru_cache(maxsize=1)
def cpu_flags() -> frozenset[str]:
    """This CPU's feature flags from ``/proc/cpuinfo`` (x86 ``flags``, Arm ``Features``), lower
    case; empty where the file is absent (macOS, Windows)."""
    try:
        lines = pathlib.Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        return frozenset()
    return frozenset(word for line in lines for word in line.partition(":")[2].lower().split()
                     if line.partition(":")[0].strip().lower() in ("flags", "features"))


def _capability() -> tuple[int, int] | None:
    if backend.MODE != "gpu" or not torch.cuda.is_available():
        return None
    return tuple(torch.cuda.get_device_capability(0))


def native(precision: str, device: str = "cpu", flags: Iterable[str] | None = None) -> bool | None:
    """Whether ``device`` (``"cpu"``, ``"cuda"``) has hardware arithmetic for ``precision``:
    True, False, or None for ``"cuda"`` without a usable GPU.

    CPU: float32 yes, TF32 no; bfloat16 with ``avx512_bf16``, ``amx_bf16`` (x86) or ``bf16``
    (Arm); float16 with ``avx512_fp16``, ``amx_fp16`` or ``asimdhp`` (``flags``: judge these
    instead of :func:`cpu_flags`). Otherwise torch emulates it: float32 arithmetic, rounded to
    the dtype. GPU: tensor cores for it (float16 from compute capability 7.0, TF32 and
    bfloat16 from 8.0). Raises ValueError: an unknown precision or device.
    """
    _check("precision", precision, PRECISIONS)
    _check("device", device, ("cpu", "cuda"))
    if precision == "float32":
        return True if device == "cpu" or _capability() else None
    if device == "cpu":
        have = cpu_flags() if flags is None else {f.lower() for f in flags}
        return precision != "tf32" and any(f in have for f in NATIVE_CPU_FLAGS[precision])
    cc = _capability()
    return None if cc is None else cc >= TENSOR_CORE_CC[precision]


def arithmetic(precision: str, device: str = "cpu") -> str:
    """One line for a row: what does the arithmetic for ``precision`` on ``device``, native or
    emulated (every CPU row says which). Raises ValueError: an unknown precision or device."""
    is_native, cc = native(precision, device), _capability()
    if device == "cpu" and precision in ("float32", "tf32"):
        return "native float32" if is_native else "none: TF32 is a mode of NVIDIA tensor cores"
    if device == "cpu":
        found = sorted(set(NATIVE_CPU_FLAGS[precision]) & cpu_flags())
        return (f"native {precision} ({', '.join(found)})" if is_native else
                f"emulated: no {' or '.join(NATIVE_CPU_FLAGS[precision][:2])} on this CPU "
                f"({torch.backends.cpu.get_cpu_capability()}), so torch computes in float32 "
                f"and rounds to {precision}")
    if cc is None:
        return "no CUDA GPU"
    sm, name = f"sm_{cc[0]}{cc[1]}", "TF32" if precision == "tf32" else precision
    if precision == "float32":
        return f"float32 on CUDA cores, TF32 off ({sm})"
    return f"{name} tensor cores ({sm})" if is_native else f"no {name} tensor cores on {sm}"


#: Tiny calls that show whether torch has a kernel for a dtype: (call, its exact result).
_PROBES: dict[str, tuple[Callable, float]] = {
    "gemm": (lambda dt, dev: torch.ones(4, 4, dtype=dt, device=dev)
             @ torch.ones(4, 4, dtype=dt, device=dev), 4.0),
    "conv": (lambda dt, dev: F.conv2d(torch.ones(1, 2, 4, 4, dtype=dt, device=dev),
                                      torch.ones(3, 2, 3, 3, dtype=dt, device=dev)), 18.0),
}


@functools.lru_cache(maxsize=None)
def _kernel_reason(precision: str, op: str, device: str) -> str | None:
    """Try a tiny ``op`` in ``precision`` once (cached): None if torch computes it right."""
    call, expected = _PROBES[op]
    where = "the CPU" if device == "cpu" else "this GPU"
    try:
        out = call(DTYPES[precision], _WHERE[device])
        ok = bool((out.float() == expected).all())
    except Exception as exc:  # noqa: BLE001 - any failure means: no kernel here
        return f"torch has no {precision} {op} kernel on {where} ({type(exc).__name__}: {exc})"
    return None if ok else f"torch's {precision} {op} on {where} gave a wrong result"


def supports(precision: str, op: str = "gemm", device: str = "cpu") -> str | None:
    """The reason ``precision`` (:data:`PRECISIONS`) cannot run ``op`` (``"gemm"``,
    ``"conv"``) on ``device`` (``"cpu"``, ``"cuda"``), or None if it can.

    TF32 never runs on the CPU, nor on a GPU below compute capability 8.0; ``"cuda"`` needs a
    usable GPU. For bfloat16 and float16 a tiny call is tried once and the answer cached: no
    kernel (or a wrong result) is the reason. An emulated dtype runs (see :func:`native`).
    Raises ValueError: an unknown precision, op or device.
    """
    _check("precision", precision, PRECISIONS)
    _check("op", op, OPS)
    _check("device", device, ("cpu", "cuda"))
    if device == "cuda":
        if backend.MODE != "gpu":
            return f"no CUDA GPU here ({backend.MODE_REASON})"
        if not torch.cuda.is_available():
            return "a GPU is present but torch cannot use it (a CPU-only build of torch?)"
    if precision == "tf32":
        return tf32_refusal(device)
    if precision == "float32":
        return None
    return _kernel_reason(precision, op, device)


def strategy_reason(strategy: str, precision: str) -> str | None:
    """Why a convolution strategy is not reported at ``precision`` (see
    :data:`STRATEGY_PRECISIONS`), or None. Raises ValueError: unknown strategy or precision."""
    _check("strategy", strategy, tuple(STRATEGIES))
    _check("precision", precision, PRECISIONS)
    if precision in STRATEGY_PRECISIONS.get(strategy, ("float32",)):
        return None
    if STRATEGIES[strategy].precision == "tf32":
        return (f"not applicable: {strategy} is the library with TF32 allowed; its {precision} "
                f"row is reference's")
    if precision == "tf32":
        return (f"not applicable: {strategy} runs our Numba kernels in float32 on CUDA cores; "
                f"the TF32 flags reach only cuBLAS and cuDNN")
    return (f"not applicable: {strategy} computes in float32 (helpers.conv converts its "
            f"inputs to float32), so it has no {precision} version")


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


def _device_text(device: str) -> str:
    return "no CUDA GPU" if device == "cuda" and backend.MODE != "gpu" else device_label(device)


def _row(op, shape, strategy, precision, device, **values) -> dict:
    if op == "gemm":
        layer, text = f"n={shape}", f"{shape} x {shape} x {shape}"
    else:
        (b, i, f, k, s), layer = shape.study, shape.name or "layer"
        text = f"b={b} c={shape.c} i={i} f={f} k={k} s={s}"
    row = dict.fromkeys(FIELDS)
    row.update(op=op, layer=layer, shape=text, strategy=strategy, precision=precision,
               dtype=str(DTYPES[precision]).replace("torch.", ""),
               allow_tf32=precision == "tf32",
               flops=2 * shape**3 if op == "gemm" else shape.flops,
               native=native(precision, device), arithmetic=arithmetic(precision, device),
               device=_device_text(device), device_kind=device, source="none")
    row.update(values)
    return row


def _defaults(device: str, sizes, layers, strategies, min_run_time, error_batch):
    gpu = device == "cuda"
    sizes = list(GPU_GEMM_SIZES if gpu else CPU_GEMM_SIZES) if sizes is None else list(sizes)
    layers = list(GPU_LAYERS if gpu else CPU_LAYERS) if layers is None else list(layers)
    strategies = list(DEFAULT_STRATEGIES if strategies is None else strategies)
    for n in sizes:
        _check_n(n)
    for name in strategies:
        _check("strategy", name, tuple(STRATEGIES))
    min_run_time = (0.2 if gpu else 0.05) if min_run_time is None else min_run_time
    if isinstance(min_run_time, bool) or not isinstance(min_run_time, (int, float)) \
            or not min_run_time > 0:
        raise ValueError(f"min_run_time must be a number of seconds > 0, got {min_run_time!r}")
    error_batch = (ERROR_BATCH if gpu else None) if error_batch is None else error_batch
    if error_batch is not None:
        _check_n(error_batch, "error_batch")
    return sizes, [_layer(lay) for lay in layers], strategies, min_run_time, error_batch


def measure(ops: Iterable[str] = OPS, precisions: Iterable[str] = PRECISIONS, *,
            device: str | None = None, sizes: Iterable[int] | None = None,
            layers: Iterable | None = None, strategies: Iterable[str] | None = None,
            min_run_time: float | None = None, error_batch: int | None = None, seed: int = 0,
            deadline: float | None = None, time_limit: float | None = None,
            show_progress: bool = False) -> list[dict]:
    """Speed and error of each (op, shape, strategy, precision) on one device: one row each.

    Each GEMM size and layer gets one set of seeded float32 inputs, shared by its precisions
    and strategies. A point is timed by :func:`helpers.device.timing.benchmark` (median after
    a warm-up, the GPU synchronised; our outputs are NaN-filled in the warm-up and the checked
    call, not in the timed ones) inside :func:`precision_mode`, and its output compared with
    float64 as :func:`error_vs_float64` does.

    Args:
        ops, precisions: of :data:`OPS`, :data:`PRECISIONS`. device: ``"cpu"`` or ``"cuda"``
            (default ``"cuda"`` on a GPU). sizes: GEMM n; layers: ConvConfigs or Table I
            names; strategies: of ``helpers.conv.STRATEGIES`` (defaults: ``CPU_*`` or
            ``GPU_*`` constants, :data:`DEFAULT_STRATEGIES`).
        min_run_time: timed seconds per point (default 0.05 on the CPU, 0.2 on a GPU), > 0.
        error_batch: a convolution's error is taken on the first ``error_batch`` images of
            the timed output (default: all on the CPU, :data:`ERROR_BATCH` on a GPU).
        seed: of the inputs. deadline: a :func:`time.monotonic` value after which no point
            starts; time_limit: the seconds it came from (status text).

    Returns:
        Rows with the keys of :data:`FIELDS`: ``median_ms``, ``iqr_ms``, ``tflop_s`` (FLOPs /
        median; a convolution's FLOPs are direct convolution's 2NKPQCRS whatever the
        strategy), ``max_rel_error``, ``rms_rel_error``; ``native`` and ``arithmetic``
        (:func:`native`, :func:`arithmetic`); ``allow_tf32`` (the flags during the run);
        ``status`` ``"ok"``, or why the point was not measured (:func:`supports`,
        :func:`strategy_reason`, the strategy's own limits, a time limit, a failure) with
        the numbers None.

    Raises:
        ValueError: an unknown op, precision, strategy, device or layer; a size < 1;
            ``min_run_time`` not > 0; ``error_batch`` < 1 (all before anything runs).
    """
    device = device or ("cuda" if backend.MODE == "gpu" else "cpu")
    _check("device", device, ("cpu", "cuda"))
    ops, precisions = list(ops), list(precisions)
    for name, values, allowed in (("op", ops, OPS), ("precision", precisions, PRECISIONS)):
        for v in values:
            _check(name, v, allowed)
    sizes, layers, strategies, min_run_time, error_batch = _defaults(
        device, sizes, layers, strategies, min_run_time, error_batch)
    jobs = [("gemm", n, ["torch.matmul"]) for n in sizes if "gemm" in ops]
    jobs += [("conv", lay, strategies) for lay in layers if "conv" in ops]
    total = sum(len(s) for *_, s in jobs) * len(precisions)
    bar = progress_bar(total=total, desc="precision", disable=not show_progress, leave=False)
    rows = []
    try:
        for op, shape, names in jobs:
            cache: dict = {}
            for strategy in names:
                for precision in precisions:
                    rows.append(_point(op, shape, strategy, precision, device, cache,
                                       min_run_time, error_batch, seed, deadline, time_limit))
                    bar.update()
    finally:
        bar.close()
    return rows


def _point(op, shape, strategy, precision, device, cache, min_run_time, error_batch, seed,
           deadline, time_limit) -> dict:
    """One row of :func:`measure`; ``cache`` holds the shape's inputs and float64 result."""
    cfg = shape if op == "conv" else None
    if time_up(deadline):
        return _row(op, shape, strategy, precision, device, status=time_limit_status(time_limit))
    reason = _reason(op, precision, device, strategy, cfg)
    if reason:
        return _row(op, shape, strategy, precision, device, status=reason)
    try:
        if "inputs" not in cache:
            cache["inputs"] = _inputs(op, shape, seed)
        inputs = cache["inputs"]
        with precision_mode(precision):
            call = _call(op, precision, inputs, cfg, strategy, device)
            call()  # the warm-up; our outputs start as NaN, except in the timed calls
            with unpoisoned():
                timing = benchmark(call, device=device, label=f"{op} {precision}",
                                   warmup=0, min_run_time=min_run_time)
            y = call()  # the output checked against float64: poisoned again
        batch = min(error_batch or cfg.n, cfg.n) if op == "conv" else None
        y = y[:batch] if batch else y
        if "ref" not in cache:
            cache["ref"] = (_gemm_reference(inputs, device) if op == "gemm" else
                            _conv_reference(inputs[0][:batch], inputs[1], cfg))
        max_rel, rms_rel = relative_errors(y, cache["ref"])
        del call, y
    except Exception as exc:  # noqa: BLE001 - this point fails (out of memory, a refusal)
        return _row(op, shape, strategy, precision, device,
                    status=f"failed: {type(exc).__name__}: {exc}")
    row = _row(op, shape, strategy, precision, device, median_ms=timing.median_ms,
               iqr_ms=timing.iqr_s * 1e3, max_rel_error=max_rel, rms_rel_error=rms_rel,
               error_batch=batch, source="measured", status="ok")
    return dict(row, tflop_s=row["flops"] / timing.median_s / 1e12)


def ceilings(gpu) -> dict:
    """Datasheet roofs of a GPU of :data:`helpers.device.backend.KNOWN_GPUS`, named as CUDA
    reports it or as the table writes it (``"H100 SXM"``), or a ``GpuSpec``.

    Returns ``{"name", "fp32", "tf32", "bf16", "fp16"}`` (FLOP/s: FP32 on CUDA cores, the
    others dense tensor-core peaks, None where the GPU has none), ``"bandwidth"`` (bytes/s)
    and ``"sources"``: for each of those keys, the datasheet it comes from.
    Raises ValueError: a GPU not in the table.
    """
    spec = gpu if isinstance(gpu, backend.GpuSpec) else backend.lookup_gpu(str(gpu))
    if spec is None:
        raise ValueError(f"gpu must name a GPU of helpers.device.backend.KNOWN_GPUS "
                         f"{[s.name for _, s in backend.KNOWN_GPUS]}, got {gpu!r}")
    dense = "dense tensor-core peak (without sparsity)"
    values = {"fp32": (spec.fp32_flops, "FP32 on CUDA cores"),
              "tf32": (spec.tf32_tensor_flops, f"TF32 {dense}"),
              "bf16": (spec.bf16_tensor_flops, f"BF16 {dense}"),
              "fp16": (spec.fp16_tensor_flops, f"FP16 {dense}"),
              "bandwidth": (spec.bandwidth_bytes_s, "memory bandwidth")}
    out = {"name": spec.name, **{k: v for k, (v, _) in values.items()}}
    out["sources"] = {k: (f"{what}: {spec.source}" if v is not None
                          else f"{what}: none on {spec.name} ({spec.source})")
                      for k, (v, what) in values.items()}
    return out


def recorded(op: str | None = None, directory=None, **match) -> results.Recorded:
    """The GPU rows recorded in ``results/precision_*`` (status ``"ok"``), each labelled with
    its GPU and date; its ``note`` says to run :data:`COMMAND` where there are none. ``op``:
    only ``"gemm"`` or ``"conv"`` rows (None: both); ``match``: further field values to keep.
    Raises ValueError: an unknown op."""
    if op is not None:
        _check("op", op, OPS)
        match["op"] = op
    return results.recorded(PREFIX, COMMAND, directory=directory, **{"status": "ok", **match})


DEFAULT_COLUMNS = ("op", "layer", "strategy", "precision", "median_ms", "tflop_s",
                   "max_rel_error", "rms_rel_error", "native", "status")


def format_table(rows: Sequence[dict], columns: Sequence[str] = DEFAULT_COLUMNS) -> str:
    """Rows as a fixed-width text table (errors as ``1.2e-03``, other floats to 4 significant
    digits, None as ``-``)."""
    def cell(key, v):
        if v is None or v == "":
            return "-"
        if isinstance(v, float):
            return f"{v:.1e}" if key.endswith("_error") else f"{v:.4g}"
        return f"{v:,}" if isinstance(v, int) and not isinstance(v, bool) else str(v)

    table = [list(columns)] + [[cell(c, r.get(c)) for c in columns] for r in rows]
    widths = [max(len(line[j]) for line in table) for j in range(len(columns))]
    return "\n".join("  ".join(v.ljust(w) for v, w in zip(line, widths)).rstrip()
                     for line in table)


def main(argv: list[str] | None = None) -> int:
    """``python -m helpers.experiments.precision [--save] [--out DIR] [--quick]
    [--time-limit S] [--seed N]``: :func:`measure` with the device's defaults, printed.

    ``--save`` (GPU only; without one it returns 3, :data:`helpers.results.REFUSED`, at once)
    writes ``<out>/precision_<gpu>.csv`` + ``.json`` (default ``results/``) with the environment. Returns 0; 2 for bad
    arguments (an unwritable ``--out`` is refused before anything runs).
    """
    start = time.monotonic()
    parser = argparse.ArgumentParser(
        prog="python -m helpers.experiments.precision",
        description="Error against float64 and speed of GEMM and convolution in float32 (TF32 "
                    "off), TF32, bfloat16 and float16.")
    add = parser.add_argument
    add("--save", action="store_true", help=f"write results/{PREFIX}<gpu>.csv + .json (GPU)")
    add("--out", type=results.writable_folder, default=None, help="folder (default results/)")
    add("--quick", action="store_true", help="one size, one layer")
    add("--time-limit", type=float, default=None, dest="time_limit",
        help="seconds after which no further point starts")
    add("--seed", type=int, default=0, help="seed of the random inputs")
    args = parser.parse_args(argv)
    if args.time_limit is not None and not args.time_limit > 0:
        parser.error(f"--time-limit must be > 0 seconds, got {args.time_limit:g}")
    gpu = backend.MODE == "gpu" and torch.cuda.is_available()
    if args.save and not gpu:
        print(f"no CUDA GPU here ({backend.MODE_REASON}): nothing measured, nothing saved")
        return results.REFUSED
    device = "cuda" if gpu else "cpu"
    deadline = None if args.time_limit is None else start + args.time_limit
    quick = dict(sizes=(GPU_GEMM_SIZES if gpu else CPU_GEMM_SIZES)[:1],
                 layers=(GPU_LAYERS if gpu else CPU_LAYERS)[-1:]) if args.quick else {}
    print(f"measuring on {_device_text(device)}")
    rows = measure(device=device, seed=args.seed, deadline=deadline,
                   time_limit=args.time_limit, show_progress=True, **quick)
    print(format_table(rows))
    if not gpu:
        print(f"\n{recorded(directory=args.out).note}")
    if args.save:
        paths = results.save(f"{PREFIX}{results.slug(backend.info().gpu_name or 'gpu')}", rows,
                              directory=args.out)
        print("saved " + ", ".join(str(p) for p in paths))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
