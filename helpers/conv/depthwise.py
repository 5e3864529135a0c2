"""Depthwise convolution kernels: what direct convolution runs on a layer with groups = C.

Each filter ``k`` sees one input channel, ``c = k // M`` (``M = K / C``, the channel
multiplier; w is ``(K, 1, R, S)``), so an output sums R*S products and no channels: a few
percent of a dense layer's FLOPs, and nothing to reuse across channels. The only reuse is
between neighbouring outputs, whose windows overlap. :func:`depthwise_naive_kernel` reads
each window from global memory; :func:`depthwise_tiled_kernel` stages a block's input patch,
halo included, in shared memory once. Backward: :func:`depthwise_dx_kernel` and
:func:`depthwise_dw_kernel` gather, as direct convolution's do. Notebook 12 teaches them.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from numba import cuda, float32

from helpers.conv.config import ConvConfig
from helpers.conv.phases import phase
from helpers.device.arrays import cuda_device, grid_for, grid_refusal, kernel_array, poisoned

__all__ = ["TILE", "MAX_EXTENT", "MAX_STRIDE", "IN_TILE", "THREADS", "is_depthwise",
           "depthwise_naive_kernel", "depthwise_tiled_kernel", "depthwise_dx_kernel",
           "depthwise_dw_kernel", "forward_naive", "forward_tiled", "backward_cuda",
           "naive_supports", "tiled_supports"]

TILE = 16         #: output tile edge of the tiled kernel (a block is TILE x TILE threads)
MAX_EXTENT = 9    #: the largest (dilated) window, dil*(R - 1) + 1, its shared tile holds
MAX_STRIDE = 2    #: the largest stride it holds
IN_TILE = (TILE - 1) * MAX_STRIDE + MAX_EXTENT  #: shared input tile edge (with halo)
THREADS = 128     #: threads per block of the one-thread-per-element kernels


def is_depthwise(cfg: ConvConfig) -> bool:
    """True when every filter sees exactly one input channel (groups = C > 1)."""
    return cfg.groups > 1 and cfg.groups == cfg.c


@cuda.jit
def depthwise_naive_kernel(x, w, y, sh, sw, ph, pw, dil_h, dil_w):
    """One thread per output y[n, k, p, q] (a 1-D grid over N*K*P*Q): R*S multiply-adds over
    its window in channel k // (K / C) of x, each read from global memory."""
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
    c = k // (k_ // c_)              # the filter's one input channel
    acc = float32(0.0)
    for r in range(r_):
        hi = p * sh + r * dil_h - ph
        if hi >= 0 and hi < h_:
            for s in range(s_):
                wi = q * sw + s * dil_w - pw
                if wi >= 0 and wi < w_:
                    acc += x[n, c, hi, wi] * w[k, 0, r, s]
    y[n, k, p, q] = acc


@cuda.jit
def depthwise_tiled_kernel(x, w, y, c_, h_, w_, k_, r_, s_, p_, q_, sh, sw, ph, pw, dil_h,
                           dil_w):
    """A TILE x TILE tile of the output plane y[n, k] per block; grid (tiles, K, N).

    x, w, y are flat views of x (N, C, H, W), w (K, 1, R, S) and y (N, K, P, Q). The block
    copies its input patch (halo included) of channel k // (K / C) into shared memory, one
    barrier, then each thread multiplies its R x S window there by the filter (read by all
    threads at once: a broadcast). At stride 1 a patch element is read by up to R*S threads
    from shared memory instead of R*S times from global memory.
    """
    x_tile = cuda.shared.array((IN_TILE, IN_TILE), float32)
    tq, tp = cuda.threadIdx.x, cuda.threadIdx.y
    k, n = cuda.blockIdx.y, cuda.blockIdx.z
    c = k // (k_ // c_)
    tiles_q = (q_ + TILE - 1) // TILE
    p0 = (cuda.blockIdx.x // tiles_q) * TILE         # the tile's first output row and column
    q0 = (cuda.blockIdx.x % tiles_q) * TILE
    h0, w0 = p0 * sh - ph, q0 * sw - pw              # its patch's first input row and column
    rows = (TILE - 1) * sh + (r_ - 1) * dil_h + 1    # the patch, halo included
    cols = (TILE - 1) * sw + (s_ - 1) * dil_w + 1
    plane = (n * c_ + c) * h_                        # row 0 of x[n, c], in rows of W elements
    a = tp
    while a < rows:
        hi = h0 + a
        b = tq
        while b < cols:
            wi = w0 + b
            v = float32(0.0)                         # zero padding, and beyond the input
            if 0 <= hi < h_ and 0 <= wi < w_:
                v = x[(plane + hi) * w_ + wi]
            x_tile[a, b] = v
            b += TILE
        a += TILE
    cuda.syncthreads()                               # the patch is complete
    p, q = p0 + tp, q0 + tq
    if p < p_ and q < q_:
        acc = float32(0.0)
        f = k * r_ * s_                              # offset of w[k, 0, 0, 0]
        r = 0
        while r < r_:
            s = 0
            while s < s_:
                acc += x_tile[tp * sh + r * dil_h, tq * sw + s * dil_w] * w[f]
                f += 1
                s += 1
            r += 1
        y[((n * k_ + k) * p_ + p) * q_ + q] = acc


@cuda.jit
def depthwise_dx_kernel(w, dy, dx, sh, sw, ph, pw, dil_h, dil_w):
    """One thread per input element dx[n, c, h, w]: gathers dy[n, k, p, q] * w[k, 0, r, s]
    over the M filters k of channel c and every (r, s) whose window reads (h, w)."""
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
    m_ = k_ // c_
    acc = float32(0.0)
    for r in range(r_):
        t = hi + ph - r * dil_h
        if t >= 0 and t % sh == 0 and t // sh < p_:
            p = t // sh
            for s in range(s_):
                u = wi + pw - s * dil_w
                if u >= 0 and u % sw == 0 and u // sw < q_:
                    q = u // sw
                    for m in range(m_):
                        k = c * m_ + m
                        acc += dy[n, k, p, q] * w[k, 0, r, s]
    dx[n, c, hi, wi] = acc


@cuda.jit
def depthwise_dw_kernel(x, dy, dw, sh, sw, ph, pw, dil_h, dil_w):
    """One thread per filter element dw[k, 0, r, s]: reduces x * dy over (n, p, q) in the
    filter's one channel."""
    i = cuda.grid(1)
    n_, c_, h_, w_ = x.shape
    k_, _, r_, s_ = dw.shape
    p_, q_ = dy.shape[2], dy.shape[3]
    if i >= k_ * r_ * s_:
        return
    s = i % s_
    r = (i // s_) % r_
    k = i // (s_ * r_)
    c = k // (k_ // c_)
    acc = float32(0.0)
    for n in range(n_):
        for p in range(p_):
            hi = p * sh + r * dil_h - ph
            if hi >= 0 and hi < h_:
                for q in range(q_):
                    wi = q * sw + s * dil_w - pw
                    if wi >= 0 and wi < w_:
                        acc += x[n, c, hi, wi] * dy[n, k, p, q]
    dw[k, 0, r, s] = acc


def _tiled_grid(cfg: ConvConfig) -> tuple[int, int, int]:
    return (math.prod(grid_for((cfg.p, cfg.q), (TILE, TILE))), cfg.k, cfg.n)


def _grids(cfg: ConvConfig) -> dict[str, int]:
    return {"depthwise_naive_kernel": grid_for(math.prod(cfg.y_shape), THREADS),
            "depthwise_dx_kernel": grid_for(math.prod(cfg.x_shape), THREADS),
            "depthwise_dw_kernel": grid_for(math.prod(cfg.w_shape), THREADS)}


def naive_supports(cfg: ConvConfig) -> str | None:
    """None if the 1-D launches (y, dx, dw) fit the CUDA grid limits, else the reason."""
    for name, blocks in _grids(cfg).items():
        reason = grid_refusal(blocks, name)
        if reason:
            return reason
    return None


def tiled_supports(cfg: ConvConfig) -> str | None:
    """None if the tiled kernel's fixed shared tile holds ``cfg``'s patch and its grid fits,
    else the reason."""
    if cfg.r_extent > MAX_EXTENT or cfg.s_extent > MAX_EXTENT:
        return (f"the depthwise tiled kernel sizes its shared input tile for windows spanning "
                f"up to {MAX_EXTENT}x{MAX_EXTENT}; this one spans "
                f"{cfg.r_extent}x{cfg.s_extent}")
    if cfg.stride_h > MAX_STRIDE or cfg.stride_w > MAX_STRIDE:
        return (f"the depthwise tiled kernel sizes its shared input tile for strides up to "
                f"{MAX_STRIDE}; this stride is {cfg.stride_h, cfg.stride_w}")
    return grid_refusal(_tiled_grid(cfg), "depthwise_tiled_kernel (grid: tiles, K, N)") \
        or naive_supports(cfg)


def _args(cfg: ConvConfig) -> tuple:
    return tuple(np.int64(v) for v in (cfg.stride_h, cfg.stride_w, cfg.pad_h, cfg.pad_w,
                                       cfg.dil_h, cfg.dil_w))


def forward_naive(x: torch.Tensor, w: torch.Tensor, cfg: ConvConfig) -> torch.Tensor:
    """y (N, K, P, Q) by :func:`depthwise_naive_kernel`; float32 tensors on cuda_device().

    Raises:
        ValueError: ``cfg`` is not depthwise, or a launch beyond the grid limits.
    """
    _require(cfg, naive_supports(cfg))
    y = poisoned(cfg.y_shape, cuda_device())
    with phase("depthwise (y)"):
        depthwise_naive_kernel[_grids(cfg)["depthwise_naive_kernel"], THREADS](
            kernel_array(x), kernel_array(w), kernel_array(y), *_args(cfg))
    return y


def forward_tiled(x: torch.Tensor, w: torch.Tensor, cfg: ConvConfig) -> torch.Tensor:
    """y (N, K, P, Q) by :func:`depthwise_tiled_kernel`.

    Raises:
        ValueError: ``cfg`` is not depthwise, or :func:`tiled_supports` refuses it.
    """
    _require(cfg, tiled_supports(cfg))
    y = poisoned(cfg.y_shape, cuda_device())
    dims = (cfg.c, cfg.h, cfg.w, cfg.k, cfg.r, cfg.s, cfg.p, cfg.q)
    with phase("depthwise tiled (y)"):
        depthwise_tiled_kernel[_tiled_grid(cfg), (TILE, TILE)](
            kernel_array(x.reshape(-1)), kernel_array(w.reshape(-1)), kernel_array(y.reshape(-1)),
            *(np.int64(d) for d in dims), *_args(cfg))
    return y


def backward_cuda(x: torch.Tensor, w: torch.Tensor, dy: torch.Tensor, cfg: ConvConfig):
    """(dx, dw) by the gather kernels :func:`depthwise_dx_kernel` and
    :func:`depthwise_dw_kernel`.

    Raises:
        ValueError: ``cfg`` is not depthwise, or a launch beyond the grid limits.
    """
    _require(cfg, naive_supports(cfg))
    dx = poisoned(cfg.x_shape, cuda_device())
    dw = poisoned(cfg.w_shape, cuda_device())
    grids = _grids(cfg)
    with phase("depthwise (dx)"):
        depthwise_dx_kernel[grids["depthwise_dx_kernel"], THREADS](
            kernel_array(w), kernel_array(dy), kernel_array(dx), *_args(cfg))
    with phase("depthwise (dw)"):
        depthwise_dw_kernel[grids["depthwise_dw_kernel"], THREADS](
            kernel_array(x), kernel_array(dy), kernel_array(dw), *_args(cfg))
    return dx, dw


def _require(cfg: ConvConfig, reason: str | None) -> None:
    if not is_depthwise(cfg):
        raise ValueError(f"the depthwise kernels need groups = C (one channel per filter), got "
                         f"groups={cfg.groups} for C={cfg.c}")
    if reason:
        raise ValueError(reason)
