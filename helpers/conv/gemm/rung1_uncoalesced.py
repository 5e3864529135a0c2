"""Rung 1 of the GEMM ladder: the naive kernel with its threads along the rows of C.

One thread per element of C reads a row of A and a column of B straight from global memory and
keeps the sum in a register. x (``threadIdx.x``, the index that changes fastest inside a warp)
runs along the ROWS of C: the 32 threads of a warp read 32 different rows of A (32 separate
128-byte lines for one 4-byte value each) and write 32 elements of C a row apart. Nothing is
coalesced: the lesson of rung 2. Shapes: a (M, K), b (K, N), c (M, N), float32, C-contiguous.

Source: S. Boehm, "How to Optimize a CUDA Matmul Kernel for cuBLAS-like Performance" (2022),
kernel 1; CUDA C++ Best Practices Guide, "Coalesced Access to Global Memory".
"""

from __future__ import annotations

from numba import cuda, float32

__all__ = ["BLOCK", "gemm_uncoalesced_kernel"]

#: Threads per block, (x, y): 32 x 8 = 256, x along the rows of C.
BLOCK = (32, 8)


@cuda.jit
def gemm_uncoalesced_kernel(a, b, c):
    """c[i, j] = sum_k a[i, k] * b[k, j]; grid (ceil(M / 32), ceil(N / 8)) of (32, 8) blocks.

    x runs along the rows i, y along the columns j. Per FMA: 2 global loads (8 bytes), none
    shared between the threads of a warp except b[k, j] (one column per warp): 0.25 FLOP/byte.
    """
    i, j = cuda.grid(2)  # (x, y) = (row, column): the slow way round
    if i < c.shape[0] and j < c.shape[1]:
        acc = float32(0.0)
        for k in range(a.shape[1]):
            acc += a[i, k] * b[k, j]
        c[i, j] = acc
