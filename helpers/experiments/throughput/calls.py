"""The calls that :mod:`helpers.experiments.throughput` times, and its rows.

:func:`make_call` places one point's operands on the device (ReLU, SAXPY: n elements; GEMM:
n x n matrices, from float32 standard-normal host arrays) and returns the call to time;
:func:`row` is the row of one (backend, size). Backends: NumPy and torch on the CPU; torch and
our Numba CUDA kernels on a GPU. Units: bytes, FLOPs, seconds.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from helpers import elementwise as ew
from helpers.conv import gemm as our_gemm
from helpers.device.timing import device_label

__all__ = ["DTYPES", "ELEMENTWISE_OPS", "NUMBA_GEMMS", "SUPPORTED", "bytes_per_size",
           "elementwise_call", "gemm_call", "generated_elements", "make_call", "row",
           "torch_dtype"]

#: Elementwise operations: name -> (arrays read, arrays written, FLOPs per element).
ELEMENTWISE_OPS = {"relu": (1, 1, 1), "saxpy": (2, 1, 2)}

#: dtypes offered: name -> bytes per element.
DTYPES = {"float32": 4, "float16": 2, "bfloat16": 2}

#: Our Numba GEMM kernels measured beside cuBLAS on a GPU: backend name -> kernel.
NUMBA_GEMMS = {"numba-tiled": our_gemm.gemm_tiled_kernel, "numba-naive": our_gemm.gemm_naive_kernel}

#: (backend, experiment) -> dtypes it supports. NumPy has no bfloat16 and no float16 BLAS;
#: our Numba kernels are written for float32.
SUPPORTED = {
    ("numpy", "elementwise"): {"float32", "float16"},
    ("numpy", "gemm"): {"float32"},
    ("torch", "elementwise"): {"float32", "float16", "bfloat16"},
    ("torch", "gemm"): {"float32", "float16", "bfloat16"},
    ("numba", "elementwise"): {"float32"},
    **{(name, "gemm"): {"float32"} for name in NUMBA_GEMMS},
}


def bytes_per_size(experiment: str, op: str, n: int, itemsize: int) -> int:
    """Memory one point needs: the operands (elementwise n elements per array; GEMM three
    n x n matrices) plus the float32 host arrays they are generated from."""
    if experiment == "elementwise":
        reads, writes, _ = ELEMENTWISE_OPS[op]
        return (reads + writes) * n * itemsize + 2 * n * 4
    return 3 * n * n * itemsize + 2 * n * n * 4


def generated_elements(experiment: str, n: int) -> int:
    """Random host values one point draws before it is timed (two arrays of n, or of n x n)."""
    return 2 * n if experiment == "elementwise" else 2 * n * n


def torch_dtype(dtype: str):
    import torch

    return {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}[dtype]


def elementwise_call(op: str, name: str, n: int, dtype: str, device: str) -> Callable[[], object]:
    """Allocate operands for one point and return the call to time."""
    rng = np.random.default_rng(n)
    x_host = rng.standard_normal(n, dtype=np.float32)
    y_host = rng.standard_normal(n, dtype=np.float32)
    a = 2.0
    if name == "numpy":
        x, y = x_host.astype(dtype), y_host.astype(dtype)
        out = np.empty_like(x)
        if op == "relu":
            return lambda: np.maximum(x, 0, out=out)

        def saxpy():
            np.multiply(x, a, out=out)
            np.add(out, y, out=out)
        return saxpy
    if name == "torch":
        import torch

        dev = "cuda" if device == "cuda" else "cpu"
        x = torch.from_numpy(x_host).to(dev, torch_dtype(dtype))
        y = torch.from_numpy(y_host).to(dev, torch_dtype(dtype))
        out = torch.empty_like(x)
        if op == "relu":
            return lambda: torch.clamp_min(x, 0, out=out)
        return lambda: torch.add(y, x, alpha=a, out=out)
    if name == "numba":
        from numba import cuda

        d_x, d_y = cuda.to_device(x_host), cuda.to_device(y_host)
        d_out = cuda.device_array_like(d_x)
        blocks, tpb = ew.launch_config(n, 256)
        if op == "relu":
            return lambda: ew.relu_kernel[blocks, tpb](d_x, d_out)
        return lambda: ew.saxpy_kernel[blocks, tpb](np.float32(a), d_x, d_y, d_out)
    raise ValueError(f"unknown backend {name!r}")


def gemm_call(name: str, n: int, dtype: str, device: str) -> Callable[[], object]:
    """Allocate A, B and C (n x n) for one point and return the call C = A @ B to time."""
    rng = np.random.default_rng(n)
    a_host = rng.standard_normal((n, n), dtype=np.float32)
    b_host = rng.standard_normal((n, n), dtype=np.float32)
    if name == "numpy":
        a, b = a_host.astype(dtype), b_host.astype(dtype)
        out = np.empty_like(a)
        return lambda: np.matmul(a, b, out=out)
    if name == "torch":
        import torch

        dev = "cuda" if device == "cuda" else "cpu"
        a = torch.from_numpy(a_host).to(dev, torch_dtype(dtype))
        b = torch.from_numpy(b_host).to(dev, torch_dtype(dtype))
        out = torch.empty_like(a)
        return lambda: torch.matmul(a, b, out=out)
    if name in NUMBA_GEMMS:  # float32 only (see SUPPORTED); operands already on the GPU
        from numba import cuda

        d_a, d_b = cuda.to_device(a_host), cuda.to_device(b_host)
        d_c = cuda.device_array((n, n), dtype=np.float32)
        grid, block = our_gemm.launch_config(n, n)
        kernel = NUMBA_GEMMS[name]
        return lambda: kernel[grid, block](d_a, d_b, d_c)
    raise ValueError(f"unknown backend {name!r} for GEMM")


def make_call(experiment: str, op: str, name: str, n: int, dtype: str,
              device: str) -> Callable[[], object]:
    """:func:`elementwise_call` or :func:`gemm_call` for ``experiment``."""
    if experiment == "elementwise":
        return elementwise_call(op, name, n, dtype, device)
    return gemm_call(name, n, dtype, device)


def row(experiment, op, name, device, dtype, n, timing=None, status="ok") -> dict:
    """One row of a sweep: sizes, traffic, FLOPs, the timing (NaN if none) and ``status``."""
    itemsize = DTYPES[dtype]
    if experiment == "elementwise":
        reads, writes, flops_per = ELEMENTWISE_OPS[op]
        moved, flops = (reads + writes) * n * itemsize, flops_per * n
    else:
        moved, flops = 3 * n * n * itemsize, 2 * n**3
    out = {
        "experiment": experiment, "op": op, "backend": name, "device_kind": device,
        "device": device_label(device), "dtype": dtype, "size": n,
        "bytes": moved, "flops": flops,
        "median_s": math.nan, "iqr_s": math.nan, "min_s": math.nan, "max_s": math.nan,
        "repeats": 0, "gb_s": math.nan, "gflop_s": math.nan, "status": status,
    }
    if timing is not None:
        out.update(median_s=timing.median_s, iqr_s=timing.iqr_s, min_s=timing.min_s,
                   max_s=timing.max_s, repeats=timing.repeats,
                   gb_s=moved / timing.median_s / 1e9, gflop_s=flops / timing.median_s / 1e9)
    return out
