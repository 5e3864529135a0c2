"""Rung 4 of the GEMM ladder: 1-D blocktiling, TM results of C per thread.

Rung 3 does two shared-memory loads per FMA, so shared memory, not arithmetic, sets its pace.
Here a block computes a BM x BN tile of C with BM * BN / TM threads, and each thread TM
vertically adjacent results: per step along K it loads one element of B's tile into a register
and reuses it for TM FMAs, each with one element of A's tile: TM FMAs per TM + 1 shared loads.
The arrays are flat (row-major offsets written out, as in CUDA C). Shapes: a (M*K,), b (K*N,),
c (M*N,) views of row-major (M, K), (K, N), (M, N) float32 arrays; m, n, k as int64.

Source: Boehm (2022), kernel 4 ("1D blocktiling for calculating multiple results per thread").
"""

from __future__ import annotations

from numba import cuda, float32

__all__ = ["BM", "BN", "BK", "TM", "THREADS", "gemm_blocktile_1d_kernel"]

BM, BN, BK, TM = 64, 64, 8, 8  #: block tile BM x BN, K step BK, results per thread TM
THREADS = BM * BN // TM         #: 512 threads a block, each a TM x 1 column of results
A_TILE, B_TILE = BM * BK, BK * BN


@cuda.jit
def gemm_blocktile_1d_kernel(a, b, c, m, n, k):
    """c = a @ b; grid (ceil(N / BN), ceil(M / BM)), THREADS threads a block (1-D).

    Thread t computes rows ``(t // BN) * TM + 0..TM-1`` of column ``t % BN`` of its block's
    tile. Loading: THREADS threads copy BM x BK of A and BK x BN of B (one element each, 0
    outside the matrices) into shared memory; every thread reaches both barriers.
    """
    a_s = cuda.shared.array(A_TILE, float32)   # A's tile, row-major (BM, BK)
    b_s = cuda.shared.array(B_TILE, float32)   # B's tile, row-major (BK, BN)
    t = cuda.threadIdx.x
    row0 = cuda.blockIdx.y * BM                # the block's first row and column of C
    col0 = cuda.blockIdx.x * BN
    trow = (t // BN) * TM                      # this thread's first row in the tile
    tcol = t % BN                              # and its column
    ar, ac = t // BK, t % BK                   # the element of A's tile this thread loads
    br, bc = t // BN, t % BN                   # and of B's
    acc = cuda.local.array(TM, float32)        # TM registers (indices are constants below)
    for i in range(TM):
        acc[i] = float32(0.0)
    for k0 in range(0, k, BK):
        v = float32(0.0)
        if row0 + ar < m and k0 + ac < k:
            v = a[(row0 + ar) * k + k0 + ac]
        a_s[t] = v                             # t == ar * BK + ac
        v = float32(0.0)
        if k0 + br < k and col0 + bc < n:
            v = b[(k0 + br) * n + col0 + bc]
        b_s[t] = v                             # t == br * BN + bc
        cuda.syncthreads()                     # 1: both tiles complete
        for d in range(BK):
            bv = b_s[d * BN + tcol]            # one load of B ...
            for i in range(TM):                # ... reused TM times
                acc[i] += a_s[(trow + i) * BK + d] * bv
        cuda.syncthreads()                     # 2: all read before the next tiles
    col = col0 + tcol
    for i in range(TM):
        row = row0 + trow + i
        if row < m and col < n:
            c[row * n + col] = acc[i]
