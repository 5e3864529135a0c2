"""The first direct-convolution kernels, kept for the notebooks that teach from them.

``direct_naive_kernel`` (one thread per output element, the ``direct-naive`` strategy's
forward); ``direct_tiled_kernel`` (a TILE x TILE output tile of one filter per block, the input
patch in shared memory: notebooks 03 and 07 read it line by line); the first backward kernels
``direct_dx_kernel`` (one thread per input element, gathering) and ``direct_dw_kernel`` (one
thread per filter element, reducing N*P*Q terms serially), which the backward still runs where
the register-blocked kernels refuse; the "before" versions of notebooks 03 and 07; and the
counts a picture draws (:func:`window_reads`, :func:`tile_traffic`). Shapes (cuDNN paper):
x (N, C, H, W), w (K, C, R, S), y (N, K, P, Q), float32. Source: the study's Section II-B.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
from numba import cuda, float32

from helpers.conv.config import ConvConfig
from helpers.device.arrays import grid_for

__all__ = ["TILE", "MAX_KERNEL", "MAX_STRIDE", "IN_TILE", "THREADS", "TILED_SHARED_BYTES",
           "direct_naive_kernel", "direct_tiled_kernel", "direct_dx_kernel", "direct_dw_kernel",
           "direct_tiled_kernel_first", "direct_naive_kernel_float64", "window_reads",
           "TileTraffic", "tile_traffic"]

TILE = 8          #: output tile edge of the tiled kernel (threads per block = TILE * TILE)
MAX_KERNEL = 11   #: largest R and S the tiled kernel's shared input tile is sized for
MAX_STRIDE = 3    #: largest stride its shared input tile is sized for
IN_TILE = (TILE - 1) * MAX_STRIDE + MAX_KERNEL  #: shared input tile edge (with halo)
THREADS = 128     #: threads per block of the one-thread-per-element kernels


@cuda.jit
def direct_naive_kernel(x, w, y, sh, sw, ph, pw, dil_h, dil_w):
    """One thread per output element y[n, k, p, q] (a 1-D grid over N*K*P*Q)."""
    i = cuda.grid(1)
    n_, c_, h_, w_ = x.shape
    k_, _, r_, s_ = w.shape
    p_, q_ = y.shape[2], y.shape[3]
    if i >= n_ * k_ * p_ * q_:
        return
    q = i % q_
    p = (i // q_) % p_
    k = (i // (q_ * p_)) % k_
    n = i // (q_ * p_ * k_)
    acc = float32(0.0)  # a float32 register: `acc = 0.0` would make every += a float64 add
    for c in range(c_):
        for r in range(r_):
            hi = p * sh + r * dil_h - ph
            if hi >= 0 and hi < h_:
                for s in range(s_):
                    wi = q * sw + s * dil_w - pw
                    if wi >= 0 and wi < w_:
                        acc += x[n, c, hi, wi] * w[k, c, r, s]
    y[n, k, p, q] = acc


@cuda.jit
def direct_tiled_kernel(x, w, y, c_, h_, w_, k_, r_, s_, p_, q_, sh, sw, ph, pw, dil_h, dil_w):
    """A TILE x TILE tile of the output plane y[n, k] per block; grid (tiles_p * tiles_q, K, N).

    x, w, y are the flat (1-D) views of x (N, C, H, W), w (K, C, R, S) and y (N, K, P, Q):
    the kernel computes NCHW offsets itself, which costs fewer registers than Numba's 4-D
    indexing (four 64-bit shapes and strides per array). For each channel: the block copies
    the input patch of its tile (halo included) into shared memory, barrier, each thread
    multiplies its R x S window by the filter, barrier. All threads of the block read the
    same filter element at the same step: one broadcast load, served by the L1 cache. Every
    thread reaches both barriers; threads outside the output only skip the final store.
    """
    x_tile = cuda.shared.array((IN_TILE, IN_TILE), float32)
    tq, tp = cuda.threadIdx.x, cuda.threadIdx.y
    k, n = cuda.blockIdx.y, cuda.blockIdx.z
    tiles_q = (q_ + TILE - 1) // TILE
    p0 = (cuda.blockIdx.x // tiles_q) * TILE         # the tile's first output row and column
    q0 = (cuda.blockIdx.x % tiles_q) * TILE
    h0, w0 = p0 * sh - ph, q0 * sw - pw              # its patch's first input row and column
    rows = (TILE - 1) * sh + (r_ - 1) * dil_h + 1    # the patch, halo included
    cols = (TILE - 1) * sw + (s_ - 1) * dil_w + 1
    acc = float32(0.0)
    for c in range(c_):
        plane = (n * c_ + c) * h_                    # row 0 of x[n, c], in rows of W elements
        a = tp                                       # while loops: range(tp, rows, TILE) would
        while a < rows:                              # divide to count its steps (registers)
            hi = h0 + a
            b = tq
            while b < cols:
                wi = w0 + b
                v = float32(0.0)                     # zero padding, and beyond the input
                if 0 <= hi < h_ and 0 <= wi < w_:
                    v = x[(plane + hi) * w_ + wi]
                x_tile[a, b] = v
                b += TILE
            a += TILE
        cuda.syncthreads()                           # 1: the patch is complete
        f = (k * c_ + c) * r_ * s_                   # offset of w[k, c, 0, 0]
        r = 0
        while r < r_:
            s = 0
            while s < s_:
                acc += x_tile[tp * sh + r * dil_h, tq * sw + s * dil_w] * w[f]
                f += 1
                s += 1
            r += 1
        cuda.syncthreads()                           # 2: all done before the next overwrite
    p, q = p0 + tp, q0 + tq
    if p < p_ and q < q_:
        y[((n * k_ + k) * p_ + p) * q_ + q] = acc


@cuda.jit
def direct_dx_kernel(w, dy, dx, sh, sw, ph, pw, dil_h, dil_w):
    """One thread per input element dx[n, c, h, w]: gathers dy[n, k, p, q] * w[k, c, r, s] over
    every (k, r, s) with p*sh + r*dil_h - ph == h and q*sw + s*dil_w - pw == w."""
    i = cuda.grid(1)
    n_, c_, h_, w_ = dx.shape
    k_, _, r_, s_ = w.shape
    p_, q_ = dy.shape[2], dy.shape[3]
    if i >= n_ * c_ * h_ * w_:
        return
    wi = i % w_
    hi = (i // w_) % h_
    c = (i // (w_ * h_)) % c_
    n = i // (w_ * h_ * c_)
    acc = float32(0.0)
    for r in range(r_):
        t = hi + ph - r * dil_h
        if t >= 0 and t % sh == 0 and t // sh < p_:
            p = t // sh
            for s in range(s_):
                u = wi + pw - s * dil_w
                if u >= 0 and u % sw == 0 and u // sw < q_:
                    q = u // sw
                    for k in range(k_):
                        acc += dy[n, k, p, q] * w[k, c, r, s]
    dx[n, c, hi, wi] = acc


@cuda.jit
def direct_dw_kernel(x, dy, dw, sh, sw, ph, pw, dil_h, dil_w):
    """One thread per filter element dw[k, c, r, s]: reduces x * dy over (n, p, q)."""
    i = cuda.grid(1)
    n_, c_, h_, w_ = x.shape
    k_, _, r_, s_ = dw.shape
    p_, q_ = dy.shape[2], dy.shape[3]
    if i >= k_ * c_ * r_ * s_:
        return
    s = i % s_
    r = (i // s_) % r_
    c = (i // (s_ * r_)) % c_
    k = i // (s_ * r_ * c_)
    acc = float32(0.0)
    for n in range(n_):
        for p in range(p_):
            hi = p * sh + r * dil_h - ph
            if hi >= 0 and hi < h_:
                for q in range(q_):
                    wi = q * sw + s * dil_w - pw
                    if wi >= 0 and wi < w_:
                        acc += x[n, c, hi, wi] * dy[n, k, p, q]
    dw[k, c, r, s] = acc


def _tiled_grid(cfg: ConvConfig) -> tuple[int, int, int]:
    """(tiles of the P x Q output, K, N): one block a TILE x TILE output tile of one filter."""
    return (math.prod(grid_for((cfg.p, cfg.q), (TILE, TILE))), cfg.k, cfg.n)


def _naive_grids(cfg: ConvConfig) -> dict[str, int]:
    """Blocks of each 1-D launch (128 threads a block): y, dx and dw."""
    return {"direct_naive_kernel": grid_for(math.prod(cfg.y_shape), THREADS),
            "direct_dx_kernel": grid_for(math.prod(cfg.x_shape), THREADS),
            "direct_dw_kernel": grid_for(math.prod(cfg.w_shape), THREADS)}


# ------------------------------------------ for teaching: one thread's window, a tile's traffic


def window_reads(cfg: ConvConfig, n: int, k: int, p: int, q: int) -> list[tuple[int, ...]]:
    """What the ``direct-naive`` thread computing ``y[n, k, p, q]`` reads, in its loop order.

    The kernel's own loops (:func:`direct_naive_kernel`) written out in plain Python, so a
    picture can show one thread's window: for each channel c and filter tap (r, s) whose input
    position ``(p*stride_h + r - pad_h, q*stride_w + s - pad_w)`` lies inside the input, one
    multiply-add of ``x[n, c, hi, wi]`` by ``w[k, c, r, s]``. Taps that fall on the zero
    padding are skipped, as the kernel skips them.

    Args:
        cfg: the convolution (:func:`helpers.conv.config_for`); cuDNN symbols N, C, H, W, K, R,
            S, P, Q.
        n, k, p, q: the output element's batch index, filter, row and column (ints).

    Returns:
        A list of ``(c, hi, wi, r, s)`` int tuples: the input element ``x[n, c, hi, wi]`` and
        the weight ``w[k, c, r, s]`` of each multiply-add, at most C*R*S of them.

    Raises:
        ValueError: an index outside ``y``'s shape (N, K, P, Q), naming it and its range.

    Source: Li et al., ICPP 2016, Section II-B (direct convolution: a dot product of the filter
    with each local patch).
    """
    for name, v, hi_ in (("n", n, cfg.n), ("k", k, cfg.k), ("p", p, cfg.p), ("q", q, cfg.q)):
        if not 0 <= int(v) < hi_:
            raise ValueError(f"{name} must be in 0..{hi_ - 1} for output shape {cfg.y_shape}, "
                             f"got {v}")
    reads = []
    for c in range(cfg.c):
        for r in range(cfg.r):
            hi = p * cfg.stride_h + r - cfg.pad_h
            if 0 <= hi < cfg.h:
                for s in range(cfg.s):
                    wi = q * cfg.stride_w + s - cfg.pad_w
                    if 0 <= wi < cfg.w:
                        reads.append((c, hi, wi, r, s))
    return reads


@dataclasses.dataclass(frozen=True)
class TileTraffic:
    """Global-memory traffic of one output tile, per input channel, naive vs tiled.

    Counts for one interior block (a full ``tile x tile`` output tile, away from the edges)
    and one input channel c; the whole layer repeats this N*K*C*(P/tile)*(Q/tile) times.
    Elements are float32 (4 bytes). "Loads" are requests to global memory: on a real GPU the
    L1/L2 caches serve part of the naive kernel's re-reads, so its DRAM traffic is lower than
    its requests, but every request still costs a load instruction and cache bandwidth.

    Attributes:
        tile, r, s, stride: the tile edge (outputs per side), the filter's R and S, the stride.
        macs: multiply-adds of the tile: tile**2 * R * S (FLOPs = 2 * macs).
        naive_loads: elements the naive kernel loads: one x and one w per multiply-add,
            2 * macs.
        tiled_x_loads: input elements the tiled kernel copies into shared memory: the tile's
            footprint with its halo, ((tile-1)*stride + R) * ((tile-1)*stride + S).
        tiled_w_loads: filter elements it reads: R * S (each a broadcast to the whole warp,
            served by the L1 cache after the first warp).
        input_reuse: multiply-adds served by each input element copied into shared memory:
            macs / tiled_x_loads (tends to R*S / stride**2 as the tile grows).
        reads_per_input: the most threads of the naive kernel (one output plane y[n, k])
            that read one interior input element: ceil(R/stride) * ceil(S/stride), exactly
            R*S at stride 1 (each of the K output planes reads it again).
        naive_intensity: FLOP per byte loaded from global memory, naive: 2 / 8 = 0.25.
        tiled_intensity: FLOP per byte loaded from global memory, tiled:
            2 * macs / (4 * (tiled_x_loads + tiled_w_loads)).
    """

    tile: int
    r: int
    s: int
    stride: int
    macs: int
    naive_loads: int
    tiled_x_loads: int
    tiled_w_loads: int
    input_reuse: float
    reads_per_input: int
    naive_intensity: float
    tiled_intensity: float


def tile_traffic(r: int, s: int, stride: int = 1, tile: int = TILE) -> TileTraffic:
    """Global loads and arithmetic intensity of ``direct-naive`` vs ``direct-tiled``.

    A deterministic count (no measurement): what one interior ``tile x tile`` block of
    :func:`direct_tiled_kernel` loads from global memory per input channel, against what the
    same outputs cost in :func:`direct_naive_kernel`. See :class:`TileTraffic` for each field.

    Args:
        r, s: filter height R and width S (>= 1).
        stride: the same stride along both axes (>= 1).
        tile: output tile edge (>= 1; our kernel uses :data:`TILE`).

    Returns:
        A :class:`TileTraffic` (counts in float32 elements, intensities in FLOP/byte).

    Raises:
        ValueError: any argument < 1, naming it.

    Source: the study's Section II-B (direct convolution, cuda-convnet2) and its Table II /
    Figure 6 (low global load efficiency); the tiling is the standard shared-memory idiom.
    """
    for name, v in (("r", r), ("s", s), ("stride", stride), ("tile", tile)):
        if int(v) < 1:
            raise ValueError(f"{name} must be >= 1, got {v}")
    macs = tile * tile * r * s
    x_loads = ((tile - 1) * stride + r) * ((tile - 1) * stride + s)
    return TileTraffic(
        tile=tile, r=r, s=s, stride=stride, macs=macs, naive_loads=2 * macs,
        tiled_x_loads=x_loads, tiled_w_loads=r * s, input_reuse=macs / x_loads,
        reads_per_input=math.ceil(r / stride) * math.ceil(s / stride),
        naive_intensity=2 * macs / (4 * 2 * macs),
        tiled_intensity=2 * macs / (4 * (x_loads + r * s)))


#: Shared memory one block of :func:`direct_tiled_kernel` declares, in bytes (a float32
#: array of IN_TILE x IN_TILE).
TILED_SHARED_BYTES = 4 * IN_TILE * IN_TILE


@cuda.jit
def direct_tiled_kernel_first(x, w, y, sh, sw, ph, pw):
    """The workbook's first ``direct_tiled_kernel``, kept as a "before" for notebook 07.

    Same tiling, written the obvious way: ``acc = 0.0`` (a float64 accumulator in Numba),
    4-D indexing of x, w and y, the filter staged in shared memory too, and
    ``range(tid, n, TILE * TILE)`` load loops (a 64-bit division per loop to count its
    steps). The compiler gives it FP64 arithmetic and, on sm_90, 94 registers per thread (128 when
    compiled from PTX without link-time optimisation); see :mod:`helpers.compiled`. Grid (tiles_q, tiles_p, N*K), block (TILE, TILE). Correct, but
    not launched by any strategy.
    """
    x_tile = cuda.shared.array((IN_TILE, IN_TILE), np.float32)
    w_tile = cuda.shared.array((MAX_KERNEL, MAX_KERNEL), np.float32)
    n_, c_, h_, w_ = x.shape
    k_, _, r_, s_ = w.shape
    p_, q_ = y.shape[2], y.shape[3]
    tq, tp = cuda.threadIdx.x, cuda.threadIdx.y
    nk = cuda.blockIdx.z
    n, k = nk // k_, nk % k_
    p0, q0 = cuda.blockIdx.y * TILE, cuda.blockIdx.x * TILE
    p, q = p0 + tp, q0 + tq
    rows = (TILE - 1) * sh + r_
    cols = (TILE - 1) * sw + s_
    tid = tp * TILE + tq
    acc = 0.0
    for c in range(c_):
        for j in range(tid, rows * cols, TILE * TILE):
            a, b = j // cols, j % cols
            hi, wi = p0 * sh + a - ph, q0 * sw + b - pw
            if hi >= 0 and hi < h_ and wi >= 0 and wi < w_:
                x_tile[a, b] = x[n, c, hi, wi]
            else:
                x_tile[a, b] = 0.0
        for j in range(tid, r_ * s_, TILE * TILE):
            w_tile[j // s_, j % s_] = w[k, c, j // s_, j % s_]
        cuda.syncthreads()
        for r in range(r_):
            for s in range(s_):
                acc += x_tile[tp * sh + r, tq * sw + s] * w_tile[r, s]
        cuda.syncthreads()
    if p < p_ and q < q_:
        y[n, k, p, q] = acc


@cuda.jit
def direct_naive_kernel_float64(x, w, y, sh, sw, ph, pw):
    """:func:`direct_naive_kernel` as first written, with ``acc = 0.0``: kept for notebook 03 to
    show what a float literal does on a GPU (a float64 accumulator: every multiply-add becomes
    a conversion and a float64 add). Same launch and results; not used by any strategy."""
    i = cuda.grid(1)
    n_, c_, h_, w_ = x.shape
    k_, _, r_, s_ = w.shape
    p_, q_ = y.shape[2], y.shape[3]
    if i >= n_ * k_ * p_ * q_:
        return
    q = i % q_
    p = (i // q_) % p_
    k = (i // (q_ * p_)) % k_
    n = i // (q_ * p_ * k_)
    acc = 0.0
    for c in range(c_):
        for r in range(r_):
            hi = p * sh + r - ph
            if hi >= 0 and hi < h_:
                for s in range(s_):
                    wi = q * sw + s - pw
                    if wi >= 0 and wi < w_:
                        acc += x[n, c, hi, wi] * w[k, c, r, s]
    y[n, k, p, q] = acc
