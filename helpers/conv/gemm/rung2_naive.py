"""Rung 2 of the GEMM ladder: the naive kernel with its threads along the columns of C.

The same one-thread-per-element kernel as rung 1 with x along the COLUMNS of C: the 32 threads
of a warp read 32 consecutive elements of a row of B (one 128-byte line) and the same element of
A (one broadcast), and write 32 consecutive elements of C. Every access is coalesced; each
element of A is still read N times and each of B M times from global memory (the caches absorb
part of it). Shapes: a (M, K), b (K, N), c (M, N), float32, C-contiguous.

Source: Boehm (2022), kernel 2 ("global memory coalescing"); CUDA C++ Best Practices Guide,
"Coalesced Access to Global Memory".
"""

from __future__ import annotations

from numba import cuda, float32

__all__ = ["gemm_naive_kernel"]


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
