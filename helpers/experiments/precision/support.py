"""Which precision runs where, and how: native arithmetic, emulation, tensor cores, roofs.

:data:`PRECISIONS` (float32 with TF32 off, TF32, bfloat16, float16) and their torch
:data:`DTYPES`; :func:`precision_mode` sets torch's two TF32 flags for one and restores them
(:func:`helpers.device.precision.tf32_mode`); :func:`native` says whether a device has
arithmetic for it (CPU flags from ``/proc/cpuinfo``, a GPU's compute capability) and
:func:`arithmetic` what does it, in one line; :func:`supports` why a precision cannot run an op
here (a tiny call, tried once), :func:`strategy_reason` why a strategy is not reported at it;
:func:`ceilings` a GPU's datasheet roofs (FLOP/s, bytes/s).

Source: NVIDIA A100 and H100 datasheets (TF32, BF16, FP16 tensor cores); Micikevicius et
al., "Mixed Precision Training", ICLR 2018.
"""

from __future__ import annotations

import functools
import pathlib
from collections.abc import Callable, Iterable, Sequence

import torch
import torch.nn.functional as F

from helpers.conv import STRATEGIES
from helpers.device import backend
from helpers.device.precision import TF32_CAPABILITY, tf32_mode, tf32_refusal

__all__ = ["PRECISIONS", "DTYPES", "OPS", "STRATEGY_PRECISIONS", "NATIVE_CPU_FLAGS",
           "TENSOR_CORE_CC", "tf32_mode", "precision_mode", "cpu_flags", "native", "arithmetic",
           "supports", "strategy_reason", "ceilings"]

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
