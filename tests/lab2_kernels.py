"""Lab 2's kernels shared by its checker tests: the solutions, written exactly as in
labs/solutions/lab2_tiled_gemm.ipynb, the stubs, and two kernels wrong for both TODOs (all zeros,
A copied into C). TILE is the solutions' tile edge."""

from __future__ import annotations

import helpers  # noqa: F401  (decides simulator vs GPU before numba.cuda is imported)
from numba import cuda, float32

TILE = 8

# ------------------------------------------------------------------------- the lab's solutions


@cuda.jit
def gemm_naive_kernel(a, b, c):
    j, i = cuda.grid(2)
    if i < c.shape[0] and j < c.shape[1]:
        acc = float32(0.0)
        for k in range(a.shape[1]):
            acc += a[i, k] * b[k, j]
        c[i, j] = acc


@cuda.jit
def gemm_tiled_kernel(a, b, c):
    a_tile = cuda.shared.array((TILE, TILE), float32)
    b_tile = cuda.shared.array((TILE, TILE), float32)
    tx = cuda.threadIdx.x
    ty = cuda.threadIdx.y
    i = cuda.blockIdx.y * TILE + ty
    j = cuda.blockIdx.x * TILE + tx
    m, k_dim, n = a.shape[0], a.shape[1], b.shape[1]

    acc = float32(0.0)
    for t in range((k_dim + TILE - 1) // TILE):
        ka = t * TILE + tx
        kb = t * TILE + ty
        if i < m and ka < k_dim:
            a_tile[ty, tx] = a[i, ka]
        else:
            a_tile[ty, tx] = float32(0.0)
        if kb < k_dim and j < n:
            b_tile[ty, tx] = b[kb, j]
        else:
            b_tile[ty, tx] = float32(0.0)
        cuda.syncthreads()
        for k in range(TILE):
            acc += a_tile[ty, k] * b_tile[k, tx]
        cuda.syncthreads()
    if i < m and j < n:
        c[i, j] = acc


# ------------------------------------------------------------------------------------ stubs


@cuda.jit
def naive_stub(a, b, c):
    raise NotImplementedError("TODO 1: write the naive GEMM kernel")


@cuda.jit
def tiled_stub(a, b, c):
    raise NotImplementedError("TODO 2: write the tiled GEMM kernel")


# ------------------------------------------------------------------ planted: both kernels


@cuda.jit
def gemm_zeros(a, b, c):
    j, i = cuda.grid(2)
    if i < c.shape[0] and j < c.shape[1]:
        c[i, j] = 0.0


@cuda.jit
def gemm_returns_a(a, b, c):  # C = A where the shapes overlap
    j, i = cuda.grid(2)
    if i < c.shape[0] and j < c.shape[1] and j < a.shape[1]:
        c[i, j] = a[i, j]
