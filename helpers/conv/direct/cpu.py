"""Direct convolution on the CPU: Numba ``njit(parallel=True)`` loops, forward and backward.

The forward loop runs ``prange`` over the N*K output planes, each computed serially window by
window; ``dx`` gathers over (r, s, k) per input element (parallel over N*C), ``dw`` reduces over
(n, p, q) per filter element (parallel over K*C). Padding taps are skipped, not read as zeros.
Shapes (cuDNN paper): x (N, C, H, W), w (K, C, R, S), y and dy (N, K, P, Q); CPU float32
tensors in and out. Source: the study's Section II-B (direct convolution). Numba keeps the
compiled loops on disk; a process compiles them under a lock shared with other processes
(:func:`helpers.compile_cache.lock`), so processes that start together compile them once.
"""

from __future__ import annotations

import numpy as np
import torch
from numba import njit, prange, typeof

from helpers import compile_cache
from helpers.conv.config import ConvConfig
from helpers.conv.phases import phase
from helpers.device.arrays import poisoned

__all__ = ["forward_cpu", "backward_cpu"]


@njit(parallel=True, cache=True)
def _forward_cpu(x, w, y, sh, sw, ph, pw, dil_h, dil_w):
    n_, c_, h_, w_ = x.shape
    k_, _, r_, s_ = w.shape
    p_, q_ = y.shape[2], y.shape[3]
    for nk in prange(n_ * k_):
        n, k = nk // k_, nk % k_
        for p in range(p_):
            for q in range(q_):
                acc = np.float32(0.0)
                for c in range(c_):
                    for r in range(r_):
                        hi = p * sh + r * dil_h - ph
                        if hi < 0 or hi >= h_:
                            continue
                        for s in range(s_):
                            wi = q * sw + s * dil_w - pw
                            if 0 <= wi < w_:
                                acc += x[n, c, hi, wi] * w[k, c, r, s]
                y[n, k, p, q] = acc


@njit(parallel=True, cache=True)
def _backward_dx_cpu(w, dy, dx, sh, sw, ph, pw, dil_h, dil_w):
    n_, c_, h_, w_ = dx.shape
    k_, _, r_, s_ = w.shape
    p_, q_ = dy.shape[2], dy.shape[3]
    for nc in prange(n_ * c_):
        n, c = nc // c_, nc % c_
        for hi in range(h_):
            for wi in range(w_):
                acc = np.float32(0.0)
                for r in range(r_):
                    t = hi + ph - r * dil_h  # = p * sh for the output row p that reads (hi, r)
                    if t < 0 or t % sh != 0 or t // sh >= p_:
                        continue
                    p = t // sh
                    for s in range(s_):
                        u = wi + pw - s * dil_w
                        if u < 0 or u % sw != 0 or u // sw >= q_:
                            continue
                        q = u // sw
                        for k in range(k_):
                            acc += dy[n, k, p, q] * w[k, c, r, s]
                dx[n, c, hi, wi] = acc


@njit(parallel=True, cache=True)
def _backward_dw_cpu(x, dy, dw, sh, sw, ph, pw, dil_h, dil_w):
    n_, c_, h_, w_ = x.shape
    k_, _, r_, s_ = dw.shape
    p_, q_ = dy.shape[2], dy.shape[3]
    for kc in prange(k_ * c_):
        k, c = kc // c_, kc % c_
        for r in range(r_):
            for s in range(s_):
                acc = np.float32(0.0)
                for n in range(n_):
                    for p in range(p_):
                        hi = p * sh + r * dil_h - ph
                        if hi < 0 or hi >= h_:
                            continue
                        for q in range(q_):
                            wi = q * sw + s * dil_w - pw
                            if 0 <= wi < w_:
                                acc += x[n, c, hi, wi] * dy[n, k, p, q]
                dw[k, c, r, s] = acc


def forward_cpu(x: torch.Tensor, w: torch.Tensor, cfg: ConvConfig) -> torch.Tensor:
    """Direct convolution on the CPU (Numba, parallel over N*K). CPU float32 tensors in and out."""
    y = poisoned(cfg.y_shape, torch.device("cpu"))
    args = (x.numpy(), w.numpy(), y.numpy(), cfg.stride_h, cfg.stride_w, cfg.pad_h, cfg.pad_w,
            cfg.dil_h, cfg.dil_w)
    _compiled(_forward_cpu, args)
    with phase("direct (y)"):
        _forward_cpu(*args)
    return y


def backward_cpu(x, w, dy, cfg: ConvConfig):
    """(dx, dw) on the CPU with the gather loops described in the module docstring."""
    dx = poisoned(cfg.x_shape, torch.device("cpu"))
    dw = poisoned(cfg.w_shape, torch.device("cpu"))
    steps = (cfg.stride_h, cfg.stride_w, cfg.pad_h, cfg.pad_w, cfg.dil_h, cfg.dil_w)
    dx_args = (w.numpy(), dy.numpy(), dx.numpy(), *steps)
    dw_args = (x.numpy(), dy.numpy(), dw.numpy(), *steps)
    _compiled(_backward_dx_cpu, dx_args)
    _compiled(_backward_dw_cpu, dw_args)
    with phase("direct (dx)"):
        _backward_dx_cpu(*dx_args)
    with phase("direct (dw)"):
        _backward_dw_cpu(*dw_args)
    return dx, dw


def _compiled(fn, args: tuple) -> None:
    """Compile ``fn`` (a Numba dispatcher) for the types of ``args`` unless this process has:
    Numba loads it from its cache on disk, or compiles it (about 3 CPU-seconds each) and saves
    it there. Under :func:`helpers.compile_cache.lock`, so that a process waits while another
    compiles it and then loads it instead of compiling it too (for at most two minutes)."""
    sig = tuple(typeof(a) for a in args)
    if sig in fn.signatures:
        return
    name = f"numba-{compile_cache.fingerprint()[:16]}-{fn.__name__}"
    with compile_cache.lock(name, timeout_s=120.0):
        fn.compile(sig)
