"""Unrolling: im2col turns the convolution into one GEMM; col2im maps gradients back.

The study's second strategy (Caffe, Torch-cunn, Theano-CorrMM, cuDNN; its Section II-B, and
Section V-A with Figure 4, where GEMM takes 80-87 % of the time and im2col/col2im most of the
rest); notebook 04 teaches it. ``im2col`` copies every input window into one column of
``cols: (C*R*S, N*P*Q)`` (zeros in the padding); the filters as ``(K, C*R*S)`` times ``cols`` are
the output as ``(K, N*P*Q)``. Backward: ``dW = dY @ cols^T``, ``dcols = W^T @ dY``, then
``col2im`` sums each column's entries back onto their input elements (by gathering, so no
atomics). The buffer, ``C*R*S*N*P*Q*4`` bytes (:func:`workspace_bytes`), is up to R*S times
the input.

GEMM: ``gemm="torch"`` (strategy ``im2col-gemm``) calls cuBLAS, or BLAS on the CPU, through
``torch.matmul`` on zero-copy views of the arrays our Numba kernels wrote; ``gemm="tiled"``
(``im2col-tiled``) calls our shared-memory kernel from :mod:`helpers.conv.gemm`. On the CPU,
im2col is a strided view (:func:`im2col_cpu`) and col2im R*S slice additions (:func:`col2im_cpu`).
"""

from __future__ import annotations

import math

import numpy as np
import torch
from numba import cuda, float32

from helpers.conv import gemm as our_gemm
from helpers.conv.config import ConvConfig
from helpers.conv.phases import phase
from helpers.device.arrays import (
    cuda_device,
    grid_for,
    grid_refusal,
    kernel_array,
    launch,
    poisoned,
)

__all__ = ["im2col_kernel", "col2im_kernel", "im2col", "col2im", "im2col_cpu", "col2im_cpu",
           "im2col_sources", "forward", "backward", "workspace_bytes", "supports", "THREADS"]


# ------------------------------------------------------------------------------ CUDA kernels


@cuda.jit
def im2col_kernel(x, cols, p_, q_, sh, sw, ph, pw, r_, s_, dil_h, dil_w):
    """One thread per element of cols (C*R*S rows, N*P*Q columns): row (c, r, s), column
    (n, p, q) holds x[n, c, p*sh + r*dil_h - ph, q*sw + s*dil_w - pw], or 0 in the padding."""
    i = cuda.grid(1)
    n_, c_, h_, w_ = x.shape
    ncols = n_ * p_ * q_
    if i >= c_ * r_ * s_ * ncols:
        return
    row, col = i // ncols, i % ncols
    s = row % s_
    r = (row // s_) % r_
    c = row // (s_ * r_)
    q = col % q_
    p = (col // q_) % p_
    n = col // (q_ * p_)
    hi, wi = p * sh + r * dil_h - ph, q * sw + s * dil_w - pw
    if hi >= 0 and hi < h_ and wi >= 0 and wi < w_:
        cols[row, col] = x[n, c, hi, wi]
    else:
        cols[row, col] = float32(0.0)


@cuda.jit
def col2im_kernel(dcols, dx, p_, q_, sh, sw, ph, pw, r_, s_, dil_h, dil_w):
    """One thread per input element dx[n, c, h, w]: the sum of every dcols entry im2col copied
    from it (gather, so no two threads write the same element).

    The index arithmetic is that of direct convolution's dx kernel
    (:func:`helpers.conv.direct.direct_dx_kernel`); there each term is computed as
    dy * w inside the loop, here the GEMM W^T @ dY has already computed it into dcols.
    """
    i = cuda.grid(1)
    n_, c_, h_, w_ = dx.shape
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
                    acc += dcols[(c * r_ + r) * s_ + s, (n * p_ + p) * q_ + q]
    dx[n, c, hi, wi] = acc


THREADS = 128  #: threads per block of im2col_kernel and col2im_kernel


def _launch(total: int, kernel: str) -> tuple[int, int]:
    return launch(total, THREADS, kernel)


def supports(cfg: ConvConfig, gemm: str = "torch") -> str | None:
    """None if every CUDA launch of the unrolling strategy fits the CUDA grid limits, else the
    reason: im2col and col2im (1-D grids), and with ``gemm="tiled"`` our GEMM's grids (y
    along the rows of C: K forward and for dW, C*R*S for dcols)."""
    launches = [(grid_for(im2col_threads(cfg), THREADS), "im2col_kernel"),
                (grid_for(math.prod(cfg.x_shape), THREADS), "col2im_kernel")]
    for blocks, name in launches:
        reason = grid_refusal(blocks, name)
        if reason:
            return reason
    if gemm == "tiled":

        npq = cfg.n * cfg.p * cfg.q
        for m, n in ((cfg.k, npq), (cfg.c * cfg.r * cfg.s, npq), (cfg.k, cfg.c * cfg.r * cfg.s)):
            try:
                our_gemm.launch_config(m, n)
            except ValueError as exc:
                return str(exc)
    return None


def tiled_simulator_refusal(cfg: ConvConfig, backward: bool = False) -> str | None:
    """Without a GPU, why one of the tiled GEMMs of ``cfg`` is too slow for the CUDA simulator
    (:func:`helpers.conv.gemm.simulator_refusal`), else None. The GEMMs: forward
    (K, CRS) x (CRS, NPQ); backward also dW (K, NPQ) x (NPQ, CRS) and dcols (CRS, K) x (K, NPQ).
    """
    crs, npq = cfg.c * cfg.r * cfg.s, cfg.n * cfg.p * cfg.q
    shapes = [(cfg.k, crs, npq)] + ([(cfg.k, npq, crs), (crs, cfg.k, npq)] if backward else [])
    for m, k, n in shapes:
        reason = our_gemm.simulator_refusal(m, k, n, "tiled")
        if reason:
            return reason
    return None


def im2col(x: torch.Tensor, cfg: ConvConfig) -> torch.Tensor:
    """CUDA-path im2col: x (N, C, H, W) -> cols (C*R*S, N*P*Q), float32, on cuda_device()."""
    cols = poisoned((cfg.c * cfg.r * cfg.s, cfg.n * cfg.p * cfg.q), cuda_device())
    im2col_kernel[_launch(cols.numel(), "im2col_kernel")](
        kernel_array(x), kernel_array(cols), cfg.p, cfg.q, cfg.stride_h, cfg.stride_w,
        cfg.pad_h, cfg.pad_w, cfg.r, cfg.s, cfg.dil_h, cfg.dil_w)
    return cols


def col2im(dcols: torch.Tensor, cfg: ConvConfig) -> torch.Tensor:
    """CUDA-path col2im: dcols (C*R*S, N*P*Q) -> dx (N, C, H, W), summing overlapping windows."""
    dx = poisoned(cfg.x_shape, cuda_device())
    col2im_kernel[_launch(dx.numel(), "col2im_kernel")](
        kernel_array(dcols.contiguous()), kernel_array(dx), cfg.p, cfg.q, cfg.stride_h,
        cfg.stride_w, cfg.pad_h, cfg.pad_w, cfg.r, cfg.s, cfg.dil_h, cfg.dil_w)
    return dx


# ---------------------------------------------------------------------------------- CPU


def im2col_cpu(x: torch.Tensor, cfg: ConvConfig) -> torch.Tensor:
    """CPU im2col from a strided view: (N, C, H, W) -> (C*R*S, N*P*Q).

    ``Tensor.unfold`` makes the windows without copying; the final reshape copies. With BLAS
    doing the GEMM, this CPU path runs within a small factor of torch's own CPU convolution
    (``python -m helpers.experiments.conv_bench`` measures it)."""
    xp = torch.nn.functional.pad(x, (cfg.pad_w, cfg.pad_w, cfg.pad_h, cfg.pad_h))
    # windows: (N, C, P, Q, R, S), a view sharing xp's memory; a dilated window is cut at its
    # whole extent, then every dil-th tap is kept
    windows = xp.unfold(2, cfg.r_extent, cfg.stride_h).unfold(3, cfg.s_extent, cfg.stride_w)
    windows = windows[:, :, :cfg.p, :cfg.q, ::cfg.dil_h, ::cfg.dil_w]
    return windows.permute(1, 4, 5, 0, 2, 3).reshape(cfg.c * cfg.r * cfg.s, -1)  # copies


def col2im_cpu(dcols: torch.Tensor, cfg: ConvConfig) -> torch.Tensor:
    """CPU col2im: add each of the R*S slices of dcols back onto the padded input, then crop."""
    hp, wp = cfg.h + 2 * cfg.pad_h, cfg.w + 2 * cfg.pad_w
    dxp = torch.zeros((cfg.n, cfg.c, hp, wp), dtype=dcols.dtype)
    d = dcols.reshape(cfg.c, cfg.r, cfg.s, cfg.n, cfg.p, cfg.q).permute(3, 0, 1, 2, 4, 5)
    rows_end, cols_end = cfg.stride_h * (cfg.p - 1) + 1, cfg.stride_w * (cfg.q - 1) + 1
    for r in range(cfg.r):
        for s in range(cfg.s):
            h0, w0 = r * cfg.dil_h, s * cfg.dil_w     # the tap's first input row and column
            dxp[:, :, h0:h0 + rows_end:cfg.stride_h, w0:w0 + cols_end:cfg.stride_w] += \
                d[:, :, r, s]
    return dxp[:, :, cfg.pad_h:cfg.pad_h + cfg.h, cfg.pad_w:cfg.pad_w + cfg.w].contiguous()


#: The largest cols matrix :func:`im2col_sources` builds (entries): it is meant for pictures.
SOURCES_MAX_ENTRIES = 10_000_000


def im2col_sources(cfg: ConvConfig) -> np.ndarray:
    """Where each entry of the im2col matrix comes from: the picture behind unrolling.

    Runs :func:`im2col_cpu` on the input's own flat indices instead of its values, so the
    result has exactly the layout of ``cols`` and says, for every entry, which input element
    im2col copied into it.

    Args:
        cfg: the convolution (:func:`helpers.conv.config_for`); cuDNN symbols N, C, H, W, K, R,
            S, P, Q.

    Returns:
        int64 NumPy array of shape (C*R*S, N*P*Q): entry ``[row, col]`` is the flat index
        ``((n*C + c)*H + h)*W + w`` into x (row-major NCHW) of the element that
        ``cols[row, col]`` copies, or -1 where the window lies in the zero padding. Row
        ``(c*R + r)*S + s``, column ``(n*P + p)*Q + q``, as in :func:`im2col_kernel`. So
        ``cols == np.where(src >= 0, x.ravel()[src], 0)``, and
        ``np.bincount(src[src >= 0], minlength=x.size)`` counts how many entries copy each
        input element (at most R*S: the duplication that makes the buffer large).

    Raises:
        ValueError: the matrix would have more than :data:`SOURCES_MAX_ENTRIES` entries.

    Source: Li et al., ICPP 2016, Section II-B (unrolling); the buffer's size, Section V-B.
    """
    entries = cfg.c * cfg.r * cfg.s * cfg.n * cfg.p * cfg.q
    if entries > SOURCES_MAX_ENTRIES:
        raise ValueError(f"the im2col matrix of this layer has {entries:,} entries; "
                         f"im2col_sources is for pictures: at most {SOURCES_MAX_ENTRIES:,}")
    numel = cfg.n * cfg.c * cfg.h * cfg.w
    # float64 holds every index exactly; +1 so that the padding's zeros become -1 below
    idx = torch.arange(1, numel + 1, dtype=torch.float64).reshape(cfg.x_shape)
    return (im2col_cpu(idx, cfg).to(torch.int64) - 1).numpy()


# ------------------------------------------------------------------------ forward / backward


def _matmul(gemm: str):
    if gemm == "torch":
        return torch.matmul
    if gemm == "tiled":

        return lambda a, b: our_gemm.gemm(a.contiguous(), b.contiguous(), kernel="tiled")
    raise ValueError(f"gemm must be 'torch' or 'tiled', got {gemm!r}")


def forward(x: torch.Tensor, w: torch.Tensor, cfg: ConvConfig, device: str,
            gemm: str = "torch") -> torch.Tensor:
    """y = reshape(W (K, CRS) @ im2col(x) (CRS, NPQ)). ``device``: ``"cpu"`` or ``"cuda"``."""
    with phase("im2col"):
        cols = im2col_cpu(x, cfg) if device == "cpu" else im2col(x, cfg)
    with phase("GEMM"):
        y2 = _matmul(gemm)(w.reshape(cfg.k, -1), cols)  # (K, N*P*Q)
    return y2.reshape(cfg.k, cfg.n, cfg.p, cfg.q).permute(1, 0, 2, 3).contiguous()


def backward(x: torch.Tensor, w: torch.Tensor, dy: torch.Tensor, cfg: ConvConfig, device: str,
             gemm: str = "torch"):
    """dW = dY @ cols^T; dx = col2im(W^T @ dY), with dY = dy as (K, N*P*Q)."""
    mm = _matmul(gemm)
    with phase("im2col"):
        cols = im2col_cpu(x, cfg) if device == "cpu" else im2col(x, cfg)
    dy2 = dy.permute(1, 0, 2, 3).reshape(cfg.k, -1)
    with phase("GEMM (dw)"):
        dw = mm(dy2, cols.t()).reshape(cfg.w_shape)
    with phase("GEMM (dcols)"):
        dcols = mm(w.reshape(cfg.k, -1).t(), dy2)
    with phase("col2im"):
        dx = col2im_cpu(dcols, cfg) if device == "cpu" else col2im(dcols, cfg)
    return dx, dw.contiguous()


def workspace_bytes(cfg: ConvConfig, backward: bool = False) -> int:
    """Analytic extra memory in bytes: the float32 im2col buffer C*R*S*N*P*Q*4 (the backward
    pass holds cols and dcols, twice that)."""
    size = cfg.c * cfg.r * cfg.s * cfg.n * cfg.p * cfg.q * 4
    return size * (2 if backward else 1)


def im2col_threads(cfg: ConvConfig) -> int:
    """Threads of one im2col launch (one per element of cols)."""
    return math.prod((cfg.c, cfg.r, cfg.s, cfg.n, cfg.p, cfg.q))
