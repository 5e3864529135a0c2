"""Rung 5 of the GEMM ladder: 2-D blocktiling, a TM x TN register tile of C per thread.

Each thread now computes a TM x TN square of results: per step along K it loads TM elements of
A's tile and TN of B's into registers and does all TM * TN products between them: 64 FMAs per
16 shared loads for 8 x 8, four times rung 4's ratio, and each block's 128 x 128 tile reads
each element of A and B from global memory N / 128 and M / 128 times. Shapes: a (M*K,),
b (K*N,), c (M*N,) flat views of row-major float32 matrices; m, n, k as int64.

Source: Boehm (2022), kernel 5 ("2D blocktiling"); Volkov and Demmel, "Benchmarking GPUs to tune
dense linear algebra" (SC 2008): registers, not shared memory, hold the working set.
"""

from __future__ import annotations

from numba import config, cuda, float32

__all__ = ["BM", "BN", "BK", "TM", "TN", "THREADS", "gemm_blocktile_2d_kernel"]

BM, BN, BK, TM, TN = 128, 128, 8, 8, 8  #: block tile, K step, per-thread tile
THREADS = BM * BN // (TM * TN)          #: 256 threads a block
A_TILE, B_TILE = BM * BK, BK * BN
A_LOADS, B_LOADS = A_TILE // THREADS, B_TILE // THREADS  #: elements each thread copies (4, 4)
COLS = BN // TN                          #: threads along a row of the block tile (16)

#: At most THREADS threads a block and at least 2 blocks an SM: the compiler keeps to 128
#: registers a thread (else about 150, and one block an SM). The simulator has no such option.
BOUNDS = {} if config.ENABLE_CUDASIM else {"launch_bounds": (THREADS, 2)}


@cuda.jit(**BOUNDS)
def gemm_blocktile_2d_kernel(a, b, c, m, n, k):
    """c = a @ b; grid (ceil(N / BN), ceil(M / BM)), THREADS threads a block (1-D).

    Thread t computes rows ``(t // COLS) * TM + 0..TM-1`` and columns ``(t % COLS) * TN +
    0..TN-1`` of its block's tile, from TM + TN registers loaded per step along K.
    """
    a_s = cuda.shared.array(A_TILE, float32)   # (BM, BK), row-major
    b_s = cuda.shared.array(B_TILE, float32)   # (BK, BN), row-major
    t = cuda.threadIdx.x
    row0 = cuda.blockIdx.y * BM
    col0 = cuda.blockIdx.x * BN
    trow = (t // COLS) * TM
    tcol = (t % COLS) * TN
    acc = cuda.local.array((TM, TN), float32)
    a_r = cuda.local.array(TM, float32)
    b_r = cuda.local.array(TN, float32)
    for i in range(TM):
        for j in range(TN):
            acc[i, j] = float32(0.0)
    for k0 in range(0, k, BK):
        for l in range(A_LOADS):               # consecutive threads: consecutive columns of A
            e = t + l * THREADS
            r, q = e // BK, e % BK
            v = float32(0.0)
            if row0 + r < m and k0 + q < k:
                v = a[(row0 + r) * k + k0 + q]
            a_s[e] = v
        for l in range(B_LOADS):               # and of B
            e = t + l * THREADS
            r, q = e // BN, e % BN
            v = float32(0.0)
            if k0 + r < k and col0 + q < n:
                v = b[(k0 + r) * n + col0 + q]
            b_s[e] = v
        cuda.syncthreads()
        for d in range(BK):
            for i in range(TM):
                a_r[i] = a_s[(trow + i) * BK + d]
            for j in range(TN):
                b_r[j] = b_s[d * BN + tcol + j]
            for i in range(TM):                # TM * TN FMAs from TM + TN loads
                for j in range(TN):
                    acc[i, j] += a_r[i] * b_r[j]
        cuda.syncthreads()
    for i in range(TM):
        row = row0 + trow + i
        for j in range(TN):
            col = col0 + tcol + j
            if row < m and col < n:
                c[row * n + col] = acc[i, j]
