"""GEMM, C = A @ B, as Numba CUDA kernels: the teaching path to im2col.

Unrolling (im2col) turns a whole convolution into one matrix product, and in the study GEMM is
80-87 % of the time of Caffe, Torch-cunn and Theano-CorrMM (Section V-A, Figure 4), so this module builds the GEMM itself, twice:
:func:`gemm_naive_kernel` (one thread per element of C, everything from global memory) and
:func:`gemm_tiled_kernel` (``TILE x TILE`` tiles of A and B staged in shared memory between
barriers: TILE times less global traffic). :func:`gemm` launches both the same way
(:func:`launch_config`: x along the columns of C, y along the rows); both are correct for any
M, N, K >= 1. Shapes: ``a: (M, K)``, ``b: (K, N)``, ``c: (M, N)``, float32, C-contiguous.
Without a GPU they run, slowly, in the Numba CUDA simulator; :func:`gemm` then refuses large sizes.

Source: Li et al., ICPP 2016, Section II-B (unrolling), Section V-A and Figure 4 (GEMM's share
of the time); the tiled kernel is the textbook shared-memory matrix multiply (CUDA C Programming
Guide, "Shared Memory"; Numba's documentation, "CUDA Kernels: matrix multiplication", whose
example skips the loads of out-of-range threads: numba issue #7324).
"""

from __future__ import annotations

import math

import numpy as np
import torch
from numba import cuda, float32  # noqa: E402

from helpers.device import backend
from helpers.device.arrays import cuda_device, kernel_array, launch, poisoned, to_torch  # noqa: E402

__all__ = [
    "TILE",
    "KERNELS",
    "SIMULATOR_MAX_THREADS",
    "gemm_naive_kernel",
    "gemm_tiled_kernel",
    "launch_config",
    "gemm",
    "gemm_flops",
]

#: Edge of a tile of the tiled kernel and of a thread block: TILE * TILE = 256 threads a block.
TILE = 16

#: The kernels :func:`gemm` can run.
KERNELS = ("naive", "tiled")

#: Without a GPU, the most threads (C's elements rounded up to whole blocks) :func:`gemm` launches.
SIMULATOR_MAX_THREADS = 20_000

#: Rough simulator speeds, threads a second per tile of K (measured on a 2-core CPU): only for
#: the estimate in the error message. The tiled kernel's barriers make it slower still.
_SIMULATOR_THREADS_PER_S = {"naive": 3_000, "tiled": 1_000}


# ------------------------------------------------------------------------------------ kernels


@cuda.jit
def gemm_naive_kernel(a, b, c):
    """c[i, j] = sum_k a[i, k] * b[k, j]: one thread per element of c, 2-D grid.

    a: (M, K), b: (K, N), c: (M, N), float32. x runs along the columns of c, y along the rows;
    threads outside c (the rounded-up last blocks) do nothing. Thread (i, j) reads row i of A
    and column j of B straight from global memory: every element of A is read N times (once
    per column of C) and every element of B M times, ``2*M*N*K`` global loads in all for
    ``2*M*N*K`` flops: 2 flops per 8 bytes loaded, 0.25 FLOP/byte.
    """
    j, i = cuda.grid(2)  # (x, y) = (column, row) of C
    if i < c.shape[0] and j < c.shape[1]:
        acc = float32(0.0)  # a local variable: a register, not a global read-modify-write
        for k in range(a.shape[1]):
            acc += a[i, k] * b[k, j]
        c[i, j] = acc


@cuda.jit
def gemm_tiled_kernel(a, b, c):
    """c = a @ b with TILE x TILE tiles of a and b staged in shared memory.

    a: (M, K), b: (K, N), c: (M, N), float32; launch with blocks of (TILE, TILE) threads and a
    grid of (ceil(N / TILE), ceil(M / TILE)) blocks (x along columns, y along rows). Correct for
    any M, N, K, not only multiples of TILE (see the comment on numba issue #7324 below).

    A block computes one TILE x TILE tile of C, walking along K one tile at a time: each thread
    copies one element of A's tile and one of B's into shared memory, the block waits at a
    barrier (``cuda.syncthreads()``), every thread accumulates TILE products from shared
    memory, and the block waits again before the next tiles overwrite the shared arrays. Each
    element of A is read from global memory ``ceil(N / TILE)`` times instead of N (once per
    block column of C), each element of B ``ceil(M / TILE)`` times instead of M: TILE times
    less traffic, ``TILE / 4`` = 4 FLOP/byte for TILE = 16. (On a real GPU the L1/L2 caches
    absorb part of the naive kernel's repeated reads, so the measured gap is smaller than 16x;
    cuBLAS goes further with register tiles, vector loads and double buffering.)
    """
    a_tile = cuda.shared.array((TILE, TILE), float32)  # one per block, shared by its threads
    b_tile = cuda.shared.array((TILE, TILE), float32)
    tx = cuda.threadIdx.x
    ty = cuda.threadIdx.y
    j = cuda.blockIdx.x * TILE + tx  # column of C
    i = cuda.blockIdx.y * TILE + ty  # row of C
    m = a.shape[0]
    k_dim = a.shape[1]
    n = b.shape[1]

    # numba issue #7324: the Numba documentation's version of this kernel lets threads outside
    # C return early (or skip their loads). cuda.syncthreads() is a barrier for *every* thread
    # of the block: a thread that has returned never arrives, so the others deadlock (or, on
    # some hardware, run on with undefined results), and a skipped load leaves stale values in
    # shared memory that the other threads then multiply. So here no thread leaves the loop:
    # a thread whose element lies outside A or B (past row M, column N, or the end of K in a
    # partial last tile) loads 0.0, which adds nothing to anyone's sum, and only the final
    # store is skipped for threads outside C.
    acc = float32(0.0)
    for t in range((k_dim + TILE - 1) // TILE):  # ceil(K / TILE): the last tile may be partial
        ka = t * TILE + tx  # column of A this thread loads
        kb = t * TILE + ty  # row of B this thread loads
        if i < m and ka < k_dim:
            a_tile[ty, tx] = a[i, ka]
        else:
            a_tile[ty, tx] = float32(0.0)
        if kb < k_dim and j < n:
            b_tile[ty, tx] = b[kb, j]
        else:
            b_tile[ty, tx] = float32(0.0)
        cuda.syncthreads()  # 1: both tiles are complete before anyone reads them
        for k in range(TILE):
            acc += a_tile[ty, k] * b_tile[k, tx]
        cuda.syncthreads()  # 2: everyone is done reading before the next tiles overwrite them
    if i < m and j < n:
        c[i, j] = acc


# ------------------------------------------------------------------------------ host wrappers


def simulator_refusal(m: int, k: int, n: int, kernel: str = "tiled") -> str | None:
    """Without a GPU, why an (M, K) x (K, N) GEMM by ``kernel`` is too slow for the CUDA
    simulator (more than :data:`SIMULATOR_MAX_THREADS` threads, M*N rounded up to whole
    blocks; the reason gives the estimated seconds), else None. Always None on a GPU.

    Raises:
        ValueError: as :func:`launch_config`; an unknown kernel.
    """
    if kernel not in KERNELS:
        raise ValueError(f"kernel must be one of {KERNELS}, got {kernel!r}")
    grid, block = launch_config(m, n)
    threads = grid[0] * grid[1] * block[0] * block[1]
    if backend.MODE != "simulator" or threads <= SIMULATOR_MAX_THREADS:
        return None
    tiles = math.ceil(k / TILE) if kernel == "tiled" else 1
    seconds = threads * tiles / _SIMULATOR_THREADS_PER_S[kernel]
    return (f"C is {m} x {n}: {threads:,} threads ({grid[0] * grid[1]} blocks of {TILE}x{TILE}) "
            f"would take the CUDA simulator about {seconds:,.0f} s with the {kernel} kernel. "
            f"Without a GPU keep M*N, rounded up to whole blocks, at most "
            f"{SIMULATOR_MAX_THREADS:,}.")


def launch_config(m: int, n: int) -> tuple[tuple[int, int], tuple[int, int]]:
    """Grid and block that cover an (M, N) output C with one thread per element.

    Args:
        m, n: rows and columns of C, >= 1.

    Returns:
        ``((ceil(n / TILE), ceil(m / TILE)), (TILE, TILE))``: ``(grid, block)`` in CUDA's
        (x, y) order, x (``threadIdx.x``, ``blockIdx.x``, the first value of ``cuda.grid(2)``)
        along the columns of C and y along the rows. The 32 threads of a warp have consecutive
        ``threadIdx.x``, so they read consecutive elements of a row of B and write consecutive
        elements of a row of C: coalesced memory accesses. The grid is rounded up to whole
        blocks, so when M or N is not a multiple of TILE the last blocks have threads outside C.

    Raises:
        ValueError: m or n not an integer >= 1, or a grid beyond the CUDA limits (y, along
            the rows, at most 65,535 blocks: M at most 65,535 * TILE).
    """
    for name, v in (("m", m), ("n", n)):
        if not isinstance(v, (int, np.integer)) or isinstance(v, bool) or v < 1:
            raise ValueError(f"{name} must be an integer >= 1, got {v!r}")
    return launch((int(n), int(m)), (TILE, TILE), f"a GEMM with C of {m:,} x {n:,}")


def gemm_flops(m: int, n: int, k: int) -> int:
    """Floating-point operations of an (M, K) @ (K, N) product: ``2 * M * N * K``.

    Each of the M*N elements of C takes K multiplies and K adds (a fused multiply-add counts
    as 2).
    """
    return 2 * int(m) * int(n) * int(k)


def _check_operand(name: str, x) -> None:
    if not isinstance(x, (np.ndarray, torch.Tensor)):
        raise TypeError(f"{name} must be a NumPy array or a torch tensor, got {type(x).__name__}"
                        "; for Numba device arrays launch the kernel directly")
    if x.ndim != 2:
        raise ValueError(f"{name} must be 2-D, got shape {tuple(x.shape)}")
    if 0 in tuple(x.shape):
        raise ValueError(f"{name} must not be empty, got shape {tuple(x.shape)}")
    floating = x.dtype.is_floating_point if isinstance(x, torch.Tensor) else x.dtype.kind == "f"
    if not floating:
        raise ValueError(f"{name} must be floating point, got {x.dtype}")


def gemm(a, b, kernel: str = "tiled"):
    """C = A @ B with one of this module's kernels.

    Args:
        a: (M, K), b: (K, N); both NumPy arrays or both torch tensors, of any floating dtype
            and any strides. They are handed to the kernel as contiguous float32 tensors on
            :func:`helpers.device.arrays.cuda_device` (no copy when they already are).
        kernel: ``"tiled"`` (:func:`gemm_tiled_kernel`) or ``"naive"``
            (:func:`gemm_naive_kernel`).

    Returns:
        C, (M, N) float32: a NumPy array if the inputs are NumPy, else a tensor on ``a``'s
        device. C starts filled with NaN, so an element no thread wrote would show as NaN.

    Raises:
        TypeError: an input that is neither a NumPy array nor a torch tensor, or one of each.
        ValueError: an unknown kernel, an input that is not 2-D, is empty or is not floating
            point, inner dimensions that differ (the message names both shapes), or, without a
            GPU, more than :data:`SIMULATOR_MAX_THREADS` threads (M*N rounded up to whole
            blocks; the message gives the simulator's estimated time).
    """
    if kernel not in KERNELS:
        raise ValueError(f"kernel must be one of {KERNELS}, got {kernel!r}")
    _check_operand("a", a)
    _check_operand("b", b)
    if isinstance(a, np.ndarray) != isinstance(b, np.ndarray):
        raise TypeError(f"a and b must both be NumPy arrays or both torch tensors, got "
                        f"{type(a).__name__} and {type(b).__name__}")
    if a.shape[1] != b.shape[0]:
        raise ValueError(f"inner dimensions differ: a is {tuple(a.shape)} and b is "
                         f"{tuple(b.shape)}; a's columns must equal b's rows")
    m, k, n = int(a.shape[0]), int(a.shape[1]), int(b.shape[1])
    grid, block = launch_config(m, n)
    reason = simulator_refusal(m, k, n, kernel)
    if reason:
        raise ValueError(reason)

    dev = cuda_device()
    ta, tb = to_torch(a, dev), to_torch(b, dev)  # contiguous float32: no copy if already so
    c = poisoned((m, n), dev)
    fn = gemm_tiled_kernel if kernel == "tiled" else gemm_naive_kernel
    fn[grid, block](kernel_array(ta), kernel_array(tb), kernel_array(c))  # writes into c
    if isinstance(a, np.ndarray):
        return c.cpu().numpy()
    return c.to(a.device)
