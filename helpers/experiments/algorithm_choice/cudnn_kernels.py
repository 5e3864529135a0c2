"""cuDNN's kernels, named: which algorithm family a CUDA kernel belongs to, and a call's main one.

:func:`family_of_kernel` maps a kernel name as ``torch.profiler``, nsys or nvprof show it to one
of :data:`FAMILIES`; :func:`short_kernel_name` shortens it for a table; :func:`kernel_times`
sums profiler events per kernel (ms per call); :func:`main_algorithm` names a call's algorithm
from its kernels.

Source: cuDNN's algorithm enums (cudnnConvolutionFwdAlgo_t and the backward ones); the kernel
names seen are cited in tests/test_algorithm_choice.py.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

import torch

__all__ = ["FAMILIES", "family_of_kernel", "short_kernel_name", "kernel_times",
           "main_algorithm"]

#: Algorithm families; "other" is a helper (layout change, offsets, scaling, copy): no algorithm.
FAMILIES = ("implicit-gemm", "winograd", "fft", "fft-tiling", "direct", "gemm", "other")

# cuDNN kernel names as shown by nsys/nvprof/torch.profiler, matched lower-case; first match wins.
# Where each pattern's names were seen is cited beside them in tests/test_algorithm_choice.py.
# cuDNN documents backward ALGO_0/1 as matrix products "without forming the matrix": implicit GEMM.
_KERNEL_PATTERNS: tuple[tuple[str, str], ...] = (
    (r"nchwtonhwc|nhwctonchw|transpose|offsetskernel|redzone|scale\w*tensor|op_tensor|memcpy"
     r"|memset|compute_gemm_pointers", "other"),
    (r"winograd", "winograd"),
    (r"fft_?til", "fft-tiling"),
    (r"(?<![a-z])fft|flip_filter|cgemm", "fft"),
    (r"explicit_convolve|im2col", "gemm"),
    (r"implicit_convolve|precomputed_convolve|implicit_?gemm|convolve_common_engine|dgrad_engine"
     r"|dgrad2d_alg|wgrad_alg\d|scudnn|s\d+cudnn|(fprop|dgrad|wgrad)_(optimized|analytic)"
     r"|xmma_(fprop|dgrad|wgrad)", "implicit-gemm"),
    (r"direct_kernel|grouped_direct|wgrad2d_shmem_tiling|depthwiseconvolution", "direct"),
    (r"[shdc]gemm|gemmsn|(?<![a-z])gemm", "gemm"),  # a plain (cuBLAS-like) GEMM: the last rule
)
_COMPILED = tuple((re.compile(p), fam) for p, fam in _KERNEL_PATTERNS)
_PLAIN_GEMM = len(_COMPILED) - 1


def _check_count(value, name: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be an int >= 1, got {value!r}")


def _classify(name: str) -> tuple[str, int | None]:
    low = name.lower()
    for j, (pattern, family) in enumerate(_COMPILED):
        if pattern.search(low):
            return family, j
    return "other", None  # not recognised


def family_of_kernel(name: str) -> str:
    """The algorithm family (one of :data:`FAMILIES`) of a CUDA kernel, from its name as
    torch.profiler, nsys or nvprof show it: ``implicit-gemm`` (implicit/precomputed sgemm, xmma
    and CUTLASS fprop/dgrad/wgrad, scudnn), ``winograd`` (fused, non-fused, its transforms),
    ``fft`` (fft*_r2c/c2r, flip_filter, complex GEMMs), ``fft-tiling`` (only a kernel naming its
    tiling: FFT kernel names seldom say whether cuDNN tiled the input, so FFT_TILING mostly reads
    ``fft``), ``direct``, ``gemm`` (im2col, explicit_convolve_sgemm, a plain library GEMM),
    ``other`` (layout changes such as nchwToNhwcKernel, offsets, scaling, copies, unknown names).
    Raises ValueError if ``name`` is not a non-empty str."""
    if not isinstance(name, str) or not name.strip():
        raise ValueError(f"name must be a non-empty kernel name, got {name!r}")
    return _classify(name)[0]


def short_kernel_name(name: str, width: int = 64) -> str:
    """A kernel name without ``void``, argument list and template arguments (but the first of a
    generic ``Kernel<...>`` wrapper, which names the real kernel), cut to ``width`` (>= 8)
    characters with ``...``. Raises ValueError if ``width < 8``."""
    if width < 8:
        raise ValueError(f"width must be >= 8 characters, got {width}")
    depth, out = 0, []
    for ch in name.strip().removeprefix("void "):  # up to the "(" outside template brackets
        if ch == "(" and depth == 0 and out:
            break
        depth += (ch == "<") - (ch == ">")
        out.append(ch)
    head, lt, rest = "".join(out).strip().partition("<")
    s = f"{head}<{rest.split(',')[0].rstrip('>')}>" if lt and re.search(
        r"kernel\d*$", head, re.IGNORECASE) else head
    return s if len(s) <= width else s[:width - 3] + "..."


def kernel_times(events: Iterable, repeats: int = 1) -> list[tuple[str, float]]:
    """``(name, ms per call)`` of each CUDA kernel (and copy, memset) in profiler events, summed
    over launches of a name and divided by ``repeats`` (>= 1, the calls profiled), largest first.
    ``events``: ``torch.profiler.profile(...).events()`` (items with ``name``, ``device_type``,
    ``time_range.elapsed_us()``); only those of ``DeviceType.CUDA`` count. Raises ValueError
    if ``repeats < 1``."""
    _check_count(repeats, "repeats")
    totals: dict[str, float] = {}
    for evt in events:
        if evt.device_type == torch.autograd.DeviceType.CUDA:
            totals[evt.name] = totals.get(evt.name, 0.0) + evt.time_range.elapsed_us() / 1e3
    return sorted(((n, t / repeats) for n, t in totals.items()), key=lambda p: -p[1])


def main_algorithm(kernels: Sequence[tuple[str, float]]) -> tuple[str | None, str | None,
                                                                   float | None]:
    """The algorithm of one call, from its ``(name, ms)`` kernels (:func:`kernel_times`): the
    family of the kernel with the largest CUDA time that is not ``other``, returned as
    ``(family, name, ms)``. A plain library GEMM (sgemm, gemmSN...) largest in a call that also
    ran Winograd or FFT kernels is that algorithm's batched product (non-fused Winograd, FFT's
    pointwise products): the call is named after them. ``(None, name, ms)`` of the largest
    kernel when all are ``other``; ``(None, None, None)`` for no kernels."""
    if not kernels:
        return None, None, None
    algos = [(*_classify(n), n, ms) for n, ms in kernels if _classify(n)[0] != "other"]
    if not algos:
        return (None, *max(kernels, key=lambda p: p[1]))
    family, rule, name, ms = max(algos, key=lambda k: k[3])
    if rule == _PLAIN_GEMM:
        found = {k[0] for k in algos}
        family = next((f for f in ("winograd", "fft", "fft-tiling") if f in found), family)
    return family, name, ms
