"""The kernels of the memory-access experiments (:mod:`helpers.experiments.memory_access`):
a strided load (coalescing), two transposes (shared-memory bank conflicts) and a branch
(warp divergence). float32 arrays; each records what a thread touched where the experiment asks.

Source: NVIDIA CUDA C Best Practices Guide (coalescing, shared memory banks, branching and
divergence) and "Efficient matrix transpose in CUDA C" (the 32 x 33 tile); the study's
Section V-C relates its kernels' speed to these effects.
"""

from __future__ import annotations

import math

from numba import cuda, float32

from helpers.device import backend  # noqa: F401  (decides simulator or GPU before numba.cuda)

__all__ = ["SECTOR_BYTES", "BANKS", "WARP", "TILE_DIM", "BLOCK_ROWS", "TILE_WORDS",
           "strided_load_kernel", "transpose_naive_kernel", "transpose_shared_kernel",
           "branch_kernel"]

SECTOR_BYTES = 32   #: a global-memory transaction moves whole 32-byte sectors
BANKS = 32          #: shared-memory banks, each 4 bytes wide
WARP = 32           #: threads a warp
TILE_DIM = 32       #: edge of the transpose tile
BLOCK_ROWS = 8      #: the transpose's block is TILE_DIM x BLOCK_ROWS threads; each does 4 rows
TILE_WORDS = 1056   #: float32 words of the shared tile: TILE_DIM * (TILE_DIM + 1), padding included

assert TILE_WORDS == TILE_DIM * (TILE_DIM + 1)  # a literal: Numba needs a constant array size


@cuda.jit
def strided_load_kernel(src, dst, stride):
    """dst[i] = src[i * stride]: thread i loads the float32 ``stride`` elements after thread
    i - 1's. At stride 1 a warp's 32 loads are 128 consecutive bytes (coalesced)."""
    i = cuda.grid(1)
    if i < dst.size:
        dst[i] = src[i * stride]


@cuda.jit
def transpose_naive_kernel(src, dst):
    """dst[x, y] = src[y, x] straight from global memory: the reads of a warp are coalesced
    (consecutive x), its writes are a column of dst (a stride of one row apart)."""
    x = cuda.blockIdx.x * TILE_DIM + cuda.threadIdx.x
    y = cuda.blockIdx.y * TILE_DIM + cuda.threadIdx.y
    for j in range(0, TILE_DIM, BLOCK_ROWS):
        if y + j < src.shape[0] and x < src.shape[1]:
            dst[x, y + j] = src[y + j, x]


@cuda.jit
def transpose_shared_kernel(src, dst, pitch, record, rec):
    """dst = src.T through a 32 x 32 tile in shared memory, stored row by row with ``pitch``
    words a row: 32 (every lane of a column read in one bank) or 33 (one word of padding a
    row: each lane in its own bank). Reads and writes of global memory are both coalesced.

    Block (TILE_DIM, BLOCK_ROWS) threads, grid (ceil(W / 32), ceil(H / 32)). If ``rec`` is
    nonzero, the shared-memory word each thread writes (record[0]) and reads (record[1]) is
    recorded at ``record[kind, block, j // BLOCK_ROWS, threadIdx.y * 32 + threadIdx.x]``.
    """
    tile = cuda.shared.array(TILE_WORDS, float32)
    tx, ty = cuda.threadIdx.x, cuda.threadIdx.y
    bx, by = cuda.blockIdx.x, cuda.blockIdx.y
    block = by * cuda.gridDim.x + bx
    t = ty * TILE_DIM + tx  # linear thread index: warp t // 32 (= ty), lane t % 32 (= tx)
    x = bx * TILE_DIM + tx
    y = by * TILE_DIM + ty
    for j in range(0, TILE_DIM, BLOCK_ROWS):
        if y + j < src.shape[0] and x < src.shape[1]:
            k = (ty + j) * pitch + tx       # a row of the tile: lanes on consecutive words
            tile[k] = src[y + j, x]
            if rec:
                record[0, block, j // BLOCK_ROWS, t] = k
    cuda.syncthreads()
    x = by * TILE_DIM + tx                  # the transposed block
    y = bx * TILE_DIM + ty
    for j in range(0, TILE_DIM, BLOCK_ROWS):
        if y + j < dst.shape[0] and x < dst.shape[1]:
            k = tx * pitch + ty + j         # a column of the tile: lanes `pitch` words apart
            dst[y + j, x] = tile[k]
            if rec:
                record[1, block, j // BLOCK_ROWS, t] = k


@cuda.jit
def branch_kernel(x, out, path, iters, by_warp):
    """Two paths of equal length: ``iters`` multiply-adds (path 0) or ``iters`` square roots
    (path 1). The branch depends on the parity of threadIdx.x (``by_warp == 0``: every warp
    splits) or of the warp index threadIdx.x // 32 (``by_warp != 0``: warps stay whole).
    Each thread records its path in ``path[i]``."""
    i = cuda.grid(1)
    if i < x.size:
        t = cuda.threadIdx.x
        group = t // 32 if by_warp else t
        v = x[i]
        if group % 2 == 0:
            path[i] = 0
            for _ in range(iters):
                v = v * float32(0.99) + float32(0.01)
        else:
            path[i] = 1
            for _ in range(iters):
                v = math.sqrt(float32(0.5) * v * v + float32(1.0))
        out[i] = v
