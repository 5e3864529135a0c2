"""GEMM, C = A @ B, as Numba CUDA kernels: the naive kernel and the shared-memory tiled one.

Unrolling turns a convolution into one GEMM, and in the study GEMM is 80-87 % of the
unrolling libraries' time (Li et al., ICPP 2016, Section II-C and Figure 4), so how a GEMM uses
the memory hierarchy decides their speed.

* :func:`gemm_naive_kernel`: one thread per element of C reads a row of A and a column of B
  from global memory. Every element of A is read N times and every element of B M times.
* :func:`gemm_tiled_kernel`: a block of ``TILE x TILE`` threads computes a ``TILE x TILE``
  tile of C. It walks along K one tile at a time: each thread copies one element of A's tile
  and one of B's into shared memory, the block waits at a barrier, every thread accumulates
  ``TILE`` products from shared memory, and the block waits again before the next tiles
  overwrite the shared arrays. Global reads drop by a factor of ``TILE``.

Shapes: ``a: (M, K)``, ``b: (K, N)``, ``c: (M, N)``, float32. Threads: ``threadIdx.x`` and
``blockIdx.x`` run along the columns of C (N), ``.y`` along the rows (M), so neighbouring
threads of a warp read neighbouring elements of B and write neighbouring elements of C
(coalesced).
"""

from __future__ import annotations

import math

import numpy as np
import torch
from numba import cuda, float32

from . import backend
from .conv._arrays import cuda_device, kernel_array, poisoned, to_torch

__all__ = ["TILE", "gemm_naive_kernel", "gemm_tiled_kernel", "gemm", "gemm_flops",
           "SIMULATOR_MAX_THREADS"]

TILE = 16  #: tile edge of the tiled kernel; a block has TILE * TILE threads

#: Without a GPU, the most threads (C's elements, rounded up to whole blocks) a call may launch.
SIMULATOR_MAX_THREADS = 20_000


@cuda.jit
def gemm_naive_kernel(a, b, c):
    """c[i, j] = sum_k a[i, k] * b[k, j]; one thread per element of c (2-D grid)."""
    j, i = cuda.grid(2)  # x: column of C, y: row of C
    if i < c.shape[0] and j < c.shape[1]:
        acc = float32(0.0)
        for k in range(a.shape[1]):
            acc += a[i, k] * b[k, j]
        c[i, j] = acc


@cuda.jit
def gemm_tiled_kernel(a, b, c):
    """The shared-memory tiled GEMM; correct for any M, N, K (not only multiples of TILE)."""
    a_tile = cuda.shared.array((TILE, TILE), float32)
    b_tile = cuda.shared.array((TILE, TILE), float32)
    tx, ty = cuda.threadIdx.x, cuda.threadIdx.y
    j = cuda.blockIdx.x * TILE + tx  # column of C
    i = cuda.blockIdx.y * TILE + ty  # row of C
    m, kk = a.shape
    n = b.shape[1]
    acc = float32(0.0)
    for t in range((kk + TILE - 1) // TILE):  # the last tile may be partial
        # Every thread of the block must reach both barriers, so a thread outside C or
        # beyond K does not return early (the bug of numba#7324): it loads a zero instead,
        # which adds nothing to anyone's sum, and only skips the final store.
        ka, kb = t * TILE + tx, t * TILE + ty
        a_tile[ty, tx] = a[i, ka] if i < m and ka < kk else 0.0
        b_tile[ty, tx] = b[kb, j] if kb < kk and j < n else 0.0
        cuda.syncthreads()  # the tiles are complete
        for k in range(TILE):
            acc += a_tile[ty, k] * b_tile[k, tx]
        cuda.syncthreads()  # everyone is done with them before they are overwritten
    if i < m and j < n:
        c[i, j] = acc


def gemm_flops(m: int, n: int, k: int) -> int:
    """FLOPs of an (M, K) @ (K, N) product: 2 * M * N * K."""
    return 2 * m * n * k


def gemm(a, b, kernel: str = "tiled"):
    """C = A @ B with one of our kernels.

    Args:
        a: (M, K) and b: (K, N), floating point; NumPy arrays or torch tensors (converted to
            contiguous float32 on :func:`helpers.conv._arrays.cuda_device`).
        kernel: ``"tiled"`` or ``"naive"``.

    Returns:
        C (M, N) float32: NumPy if ``a`` is NumPy, else a tensor on ``a``'s device.

    Raises:
        ValueError: not 2-D, an empty dimension, inner dimensions that differ, non-float data,
            an unknown kernel, or (without a GPU) more threads than the simulator can run in a
            few seconds.
    """
    if kernel not in ("naive", "tiled"):
        raise ValueError(f"kernel must be 'naive' or 'tiled', got {kernel!r}")
    for name, x in (("a", a), ("b", b)):
        if not isinstance(x, (np.ndarray, torch.Tensor)):
            raise ValueError(f"{name} must be a NumPy array or a torch tensor")
        if x.ndim != 2:
            raise ValueError(f"{name} must be 2-D, got shape {tuple(x.shape)}")
        if 0 in tuple(x.shape):
            raise ValueError(f"{name} must not be empty, got shape {tuple(x.shape)}")
        floating = x.dtype.is_floating_point if isinstance(x, torch.Tensor) else x.dtype.kind == "f"
        if not floating:
            raise ValueError(f"{name} must be floating point, got {x.dtype}")
    if a.shape[1] != b.shape[0]:
        raise ValueError(f"inner dimensions differ: a is {tuple(a.shape)}, b is {tuple(b.shape)}")
    m, n = a.shape[0], b.shape[1]
    grid = (math.ceil(n / TILE), math.ceil(m / TILE))
    if backend.MODE == "simulator" and grid[0] * grid[1] * TILE * TILE > SIMULATOR_MAX_THREADS:
        threads = grid[0] * grid[1] * TILE * TILE
        raise ValueError(
            f"C is {m} x {n}: {threads:,} threads would take the CUDA simulator about "
            f"{threads / 5000:.0f} s; without a GPU keep it under {SIMULATOR_MAX_THREADS:,}")
    dev = cuda_device()
    ta, tb = to_torch(a, dev), to_torch(b, dev)
    c = poisoned((m, n), dev)
    k = gemm_tiled_kernel if kernel == "tiled" else gemm_naive_kernel
    k[grid, (TILE, TILE)](kernel_array(ta), kernel_array(tb), kernel_array(c))
    if isinstance(a, np.ndarray):
        return c.cpu().numpy()
    return c.to(a.device)
