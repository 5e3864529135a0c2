"""Split-K GEMM for long, thin products: C = A @ B^T with the reduction split over blocks.

The weight gradient of im2col + GEMM, dW = dY (K, N*P*Q) @ cols^T, is a small matrix (K x
C*R*S: 96 x 27 for Table I's Conv2) with a very long reduction (N*P*Q: 2 M at batch 128). Tiling
C alone gives a handful of blocks for 132 SMs, each summing millions of terms. Split-K gives
each block a tile of C *and* a chunk of the reduction: the grid's z axis runs over the chunks,
every block writes its partial tile to a workspace (splits, M, N), and
:func:`gemm_splitk_reduce_kernel` adds the partials in a fixed order (no atomics: the same
inputs give the same bits). Both operands are read along K ("NT" layout: A (M, Kd) and B (N, Kd)
row-major), so cols^T needs no transposed copy. Shapes: flat float32; m, n, kd, chunk int64.

Source: CUTLASS, "Efficient GEMM in CUDA" (parallel and serial split-K); Boehm (2022), kernel 5
(the 2-D register tile used here at 64 x 64, 4 x 4 per thread).
"""

from __future__ import annotations

from numba import cuda, float32

from helpers.conv.gemm.vector import ALIGN, lds4

__all__ = ["BM", "BN", "BK", "THREADS", "gemm_nt_splitk_kernel", "gemm_splitk_reduce_kernel"]

BM, BN, BK, TM, TN = 64, 64, 16, 4, 4   #: block tile, K step, thread tile
THREADS = (BM // TM) * (BN // TN)       #: 256
COLS = BN // TN
A_TILE, B_TILE = BK * BM, BK * BN  #: shared floats of A's and B's tiles
A_LOADS, B_LOADS = A_TILE // THREADS, B_TILE // THREADS  #: 4 and 4 elements a thread


@cuda.jit
def gemm_nt_splitk_kernel(a, b, part, m, n, kd, chunk):
    """part[z, i, j] = sum over kk in chunk z of a[i, kk] * b[j, kk].

    a: (M*Kd,), b: (N*Kd,) flat row-major; part: (splits*M*N,). Grid (ceil(N / BN),
    ceil(M / BM), splits) of THREADS threads; chunk z covers kk in [z*chunk, (z+1)*chunk),
    chunk a multiple of BK. Loads run along K (consecutive threads, consecutive kk: coalesced)
    and are stored transposed, (BK, BM) and (BK, BN), for 16-byte shared loads.
    """
    a_s = cuda.shared.array(A_TILE, float32, alignment=ALIGN)
    b_s = cuda.shared.array(B_TILE, float32, alignment=ALIGN)
    t = cuda.threadIdx.x
    row0 = cuda.blockIdx.y * BM
    col0 = cuda.blockIdx.x * BN
    z = cuda.blockIdx.z
    ty = (t // COLS) * TM
    tx = (t % COLS) * TN
    k_begin = z * chunk
    k_end = min(k_begin + chunk, kd)
    acc = cuda.local.array((TM, TN), float32)
    a_r = cuda.local.array(TM, float32)
    b_r = cuda.local.array(TN, float32)
    for i in range(TM):
        for j in range(TN):
            acc[i, j] = float32(0.0)
    for k0 in range(k_begin, k_end, BK):
        for l in range(A_LOADS):
            e = t + l * THREADS
            r, q = e // BK, e % BK
            v = float32(0.0)
            if row0 + r < m and k0 + q < k_end:
                v = a[(row0 + r) * kd + k0 + q]
            a_s[q * BM + r] = v
        for l in range(B_LOADS):
            e = t + l * THREADS
            r, q = e // BK, e % BK
            v = float32(0.0)
            if col0 + r < n and k0 + q < k_end:
                v = b[(col0 + r) * kd + k0 + q]
            b_s[q * BN + r] = v
        cuda.syncthreads()
        for d in range(BK):
            a_r[0], a_r[1], a_r[2], a_r[3] = lds4(a_s, d * BM + ty)
            b_r[0], b_r[1], b_r[2], b_r[3] = lds4(b_s, d * BN + tx)
            for i in range(TM):
                for j in range(TN):
                    acc[i, j] += a_r[i] * b_r[j]
        cuda.syncthreads()
    base = z * m * n
    for i in range(TM):
        row = row0 + ty + i
        for j in range(TN):
            col = col0 + tx + j
            if row < m and col < n:
                part[base + row * n + col] = acc[i, j]


@cuda.jit
def gemm_splitk_reduce_kernel(part, c, elements, splits):
    """c[i] = part[0, i] + part[1, i] + ... (in that order), one thread per element of C.

    part: (splits*elements,), c: (elements,) float32; a 1-D grid over ``elements``.
    """
    i = cuda.grid(1)
    if i < elements:
        acc = float32(0.0)
        for z in range(splits):
            acc += part[z * elements + i]
        c[i] = acc
