"""Rung 3 of the GEMM ladder: TILE x TILE tiles of A and B staged in shared memory.

A block computes one TILE x TILE tile of C, walking along K a tile at a time: each thread copies
one element of A's tile and one of B's into shared memory, the block waits at a barrier, and
every thread accumulates TILE products from shared memory. Each element of A and B is read from
global memory TILE times less often than in rung 2. Per FMA the inner loop still does two
shared-memory loads: the limit rung 4 lifts. Shapes: a (M, K), b (K, N), c (M, N), float32.

Source: CUDA C Programming Guide, "Shared Memory" (the tiled matrix multiply); Numba's
documentation, "CUDA Kernels: matrix multiplication", whose example skips the loads of
out-of-range threads (numba issue #7324); Boehm (2022), kernel 3.
"""

from __future__ import annotations

from numba import cuda, float32

__all__ = ["TILE", "gemm_tiled_kernel"]

#: Edge of a tile of the tiled kernel and of a thread block: TILE * TILE = 256 threads a block.
TILE = 16


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
