"""Unrolling: im2col turns the convolution into one GEMM; col2im maps gradients back.

The study's second strategy (Section II-B; Section V-A and Figure 4: GEMM 80-87 % of the time,
im2col/col2im most of the rest); notebook 04 teaches it. ``im2col`` copies every input window
into one column of ``cols: (C*R*S, N*P*Q)`` (zeros in the padding); the filters as
``(K, C*R*S)`` times ``cols`` are the output as ``(K, N*P*Q)``. Backward: ``dW = dY @ cols^T``,
``dcols = W^T @ dY``, then ``col2im`` gathers each input element's copies (no atomics). The
buffer, ``C*R*S*N*P*Q*4`` bytes (:func:`workspace_bytes`), is up to R*S times the input.
GEMM: ``gemm="torch"`` (``im2col-gemm``) is cuBLAS (BLAS on the CPU) through ``torch.matmul``;
``gemm="tiled"`` (``im2col-tiled``) the top of our ladder (:mod:`helpers.conv.gemm`), split-K
for dW. CUDA kernels: :func:`im2col_window_kernel`, :func:`col2im_window_kernel`; the
one-thread-per-entry :func:`im2col_kernel`, :func:`col2im_kernel` are kept for teaching. CPU:
a strided view (:func:`im2col_cpu`) and R*S slice additions (:func:`col2im_cpu`).
"""

from __future__ import annotations

import math

import numpy as np
import torch
from numba import cuda, float32, int64, uint32

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

__all__ = ["im2col_kernel", "col2im_kernel", "im2col_window_kernel", "col2im_window_kernel",
           "im2col", "col2im", "im2col_first", "col2im_first", "im2col_cpu", "col2im_cpu",
           "im2col_sources", "forward", "backward", "workspace_bytes", "supports", "THREADS",
           "TILED_RUNG", "launcher"]


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


@cuda.jit
def im2col_window_kernel(x, cols, c_, h_, w_, p_, q_, r_, s_, sh, sw, ph, pw, dil_h, dil_w):
    """One thread per window (n, c, p, q): it writes that window's R*S entries of cols.

    x: (N*C*H*W,) and cols: (C*R*S*N*P*Q,) flat float32 views of x (N, C, H, W) and cols
    (C*R*S, N*P*Q); sizes int64. Grid (ceil(P*Q / THREADS), C, N): block y is the channel,
    z the image, so the only division left is ``pq -> (p, q)``, in 32 bits (``div.u32``).
    The taps are walked by additions: the next input row is ``+ dil_h * W``, the next row of
    cols ``+ N*P*Q``. A warp's 32 threads hold 32 consecutive columns of cols, so each of its
    R*S stores writes 128 contiguous bytes: the kernel moves the bytes cols holds, plus x.
    """
    pq = cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x
    c, n = cuda.blockIdx.y, cuda.blockIdx.z
    if pq >= p_ * q_:
        return
    p = int64(uint32(pq) // uint32(q_))              # 32-bit: one division per thread
    q = pq - p * q_
    npq = cuda.gridDim.z * p_ * q_                   # columns of cols: N*P*Q
    out = c * r_ * s_ * npq + n * p_ * q_ + pq       # cols[(c*R + 0)*S + 0, (n*P + p)*Q + q]
    plane = (n * c_ + c) * h_ * w_                   # x[n, c, 0, 0]
    hi = p * sh - ph                                 # the window's first input row and column
    wi0 = q * sw - pw
    for r in range(r_):
        inside_h = hi >= 0 and hi < h_
        row = plane + hi * w_
        wi = wi0
        for s in range(s_):
            v = float32(0.0)                         # the zero padding
            if inside_h and wi >= 0 and wi < w_:
                v = x[row + wi]
            cols[out] = v
            out += npq                               # the next tap's row of cols
            wi += dil_w
        hi += dil_h


@cuda.jit
def col2im_window_kernel(dcols, dx, c_, h_, w_, p_, q_, r_, s_, sh, sw, ph, pw, dil_h, dil_w):
    """One thread per input element dx[n, c, h, w]: the sum of the dcols entries im2col copied
    from it, found without 64-bit division.

    dcols: (C*R*S*N*P*Q,), dx: (N*C*H*W,) flat float32; sizes int64. Grid (ceil(H*W /
    THREADS), C, N). Tap (r, s) read x[n, c, h, w] from window (p, q) when ``p*sh = h + ph -
    r*dil_h`` (likewise q): with stride 1 that is p itself; otherwise one 32-bit division and
    a check that it was exact. Consecutive threads hold consecutive w, so for stride 1 a warp
    reads consecutive columns of dcols (coalesced) and writes consecutive elements of dx.
    """
    hw = cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x
    c, n = cuda.blockIdx.y, cuda.blockIdx.z
    if hw >= h_ * w_:
        return
    h = int64(uint32(hw) // uint32(w_))              # 32-bit: one division per thread
    w = hw - h * w_
    npq = cuda.gridDim.z * p_ * q_
    col0 = n * p_ * q_                               # dcols column of (n, 0, 0)
    acc = float32(0.0)
    t = h + ph                                       # = p*sh + r*dil_h for every tap that reads
    row = c * r_ * s_ * npq                          # dcols row (c, r, 0), advanced below
    for r in range(r_):
        p = t
        if sh != 1 and t >= 0:
            p = int64(uint32(t) // uint32(sh))
        if t >= 0 and p * sh == t and p < p_:
            u = w + pw
            entry = row + col0 + p * q_              # dcols[(c, r, 0), (n, p, 0)]
            for s in range(s_):
                q = u
                if sw != 1 and u >= 0:
                    q = int64(uint32(u) // uint32(sw))
                if u >= 0 and q * sw == u and q < q_:
                    acc += dcols[entry + q]
                u -= dil_w
                entry += npq                         # the next tap's row
        t -= dil_h
        row += s_ * npq
    dx[((n * c_ + c) * h_ + h) * w_ + w] = acc


THREADS = 128  #: threads per block of every im2col and col2im kernel


def _launch(total: int, kernel: str) -> tuple[int, int]:
    return launch(total, THREADS, kernel)


#: The GEMM rung ``gemm="tiled"`` (strategy ``im2col-tiled``) runs for its two NN products.
TILED_RUNG = "autotuned"


def _window_grid(cfg: ConvConfig, per_plane: int) -> tuple[int, int, int]:
    """(ceil(per_plane / THREADS), C, N): the window kernels' grid."""
    return (grid_for(per_plane, THREADS), cfg.c, cfg.n)


def _window_args(cfg: ConvConfig) -> tuple:
    return tuple(np.int64(v) for v in (cfg.c, cfg.h, cfg.w, cfg.p, cfg.q, cfg.r, cfg.s,
                                       cfg.stride_h, cfg.stride_w, cfg.pad_h, cfg.pad_w,
                                       cfg.dil_h, cfg.dil_w))


def supports(cfg: ConvConfig, gemm: str = "torch") -> str | None:
    """None if every CUDA launch of the unrolling strategy fits the CUDA grid limits, else the
    reason: im2col and col2im (grids (ceil(P*Q or H*W / 128), C, N): C and N at most 65,535),
    and with ``gemm="tiled"`` our GEMMs' grids (the forward and dcols products; split-K's
    for dW)."""
    launches = [(_window_grid(cfg, cfg.p * cfg.q), "im2col_window_kernel (grid: P*Q, C, N)"),
                (_window_grid(cfg, cfg.h * cfg.w), "col2im_window_kernel (grid: H*W, C, N)")]
    for blocks, name in launches:
        reason = grid_refusal(blocks, name)
        if reason:
            return reason
    if gemm == "tiled":
        crs, npq = cfg.c * cfg.r * cfg.s, cfg.n * cfg.p * cfg.q
        for m, n, k in ((cfg.k, npq, crs), (crs, npq, cfg.k)):
            try:
                our_gemm.rung_launch(our_gemm.rung(TILED_RUNG), m, n, k)
            except ValueError as exc:
                return str(exc)
    return None


def tiled_simulator_refusal(cfg: ConvConfig, backward: bool = False) -> str | None:
    """Without a GPU, why one of the GEMMs of ``im2col-tiled`` is too slow for the CUDA
    simulator (:func:`helpers.conv.gemm.simulator_refusal`), else None. The GEMMs: forward
    (K, CRS) x (CRS, NPQ); backward also dW (K, NPQ) x (NPQ, CRS) by split-K and dcols
    (CRS, K) x (K, NPQ)."""
    crs, npq = cfg.c * cfg.r * cfg.s, cfg.n * cfg.p * cfg.q
    shapes = [(cfg.k, crs, npq)] + ([(cfg.k, npq, crs), (crs, cfg.k, npq)] if backward else [])
    for m, k, n in shapes:
        reason = our_gemm.simulator_refusal(m, k, n, TILED_RUNG)
        if reason:
            return reason
    return None


def im2col(x: torch.Tensor, cfg: ConvConfig) -> torch.Tensor:
    """CUDA-path im2col (:func:`im2col_window_kernel`): x (N, C, H, W) -> cols (C*R*S,
    N*P*Q), float32, on cuda_device(); cols is poisoned first unless timing switched it off."""
    cols = poisoned((cfg.c * cfg.r * cfg.s, cfg.n * cfg.p * cfg.q), cuda_device())
    im2col_window_kernel[_window_grid(cfg, cfg.p * cfg.q), THREADS](
        kernel_array(x.reshape(-1)), kernel_array(cols.reshape(-1)), *_window_args(cfg))
    return cols


def col2im(dcols: torch.Tensor, cfg: ConvConfig) -> torch.Tensor:
    """CUDA-path col2im (:func:`col2im_window_kernel`): dcols (C*R*S, N*P*Q) -> dx (N, C, H,
    W), summing every copy's gradient."""
    dx = poisoned(cfg.x_shape, cuda_device())
    col2im_window_kernel[_window_grid(cfg, cfg.h * cfg.w), THREADS](
        kernel_array(dcols.contiguous().reshape(-1)), kernel_array(dx.reshape(-1)),
        *_window_args(cfg))
    return dx


def im2col_first(x: torch.Tensor, cfg: ConvConfig) -> torch.Tensor:
    """im2col by the one-thread-per-entry :func:`im2col_kernel` (notebook 04's, and the
    "before" of notebook 13): same result as :func:`im2col`."""
    cols = poisoned((cfg.c * cfg.r * cfg.s, cfg.n * cfg.p * cfg.q), cuda_device())
    im2col_kernel[_launch(cols.numel(), "im2col_kernel")](
        kernel_array(x), kernel_array(cols), cfg.p, cfg.q, cfg.stride_h, cfg.stride_w,
        cfg.pad_h, cfg.pad_w, cfg.r, cfg.s, cfg.dil_h, cfg.dil_w)
    return cols


def col2im_first(dcols: torch.Tensor, cfg: ConvConfig) -> torch.Tensor:
    """col2im by :func:`col2im_kernel` (64-bit divisions per tap): same result as
    :func:`col2im`."""
    dx = poisoned(cfg.x_shape, cuda_device())
    col2im_kernel[_launch(dx.numel(), "col2im_kernel")](
        kernel_array(dcols.contiguous()), kernel_array(dx), cfg.p, cfg.q, cfg.stride_h,
        cfg.stride_w, cfg.pad_h, cfg.pad_w, cfg.r, cfg.s, cfg.dil_h, cfg.dil_w)
    return dx


def launcher(kernel: str, src: torch.Tensor, dst: torch.Tensor, cfg: ConvConfig):
    """A call that launches one im2col or col2im kernel into ``dst`` and does nothing else
    (what a benchmark times: no allocation, poisoning or conversion).

    Args:
        kernel: ``"im2col_window_kernel"``, ``"im2col_kernel"`` (src x, dst cols) or
            ``"col2im_window_kernel"``, ``"col2im_kernel"`` (src dcols, dst dx).
        src, dst: contiguous float32 tensors on :func:`cuda_device` of the kernel's shapes.
        cfg: the layer.

    Raises:
        ValueError: an unknown kernel, or shapes that are not the layer's.
    """
    cols_shape = (cfg.c * cfg.r * cfg.s, cfg.n * cfg.p * cfg.q)
    im2col_side = kernel.startswith("im2col")
    want = (cfg.x_shape, cols_shape) if im2col_side else (cols_shape, cfg.x_shape)
    if (tuple(src.shape), tuple(dst.shape)) != tuple(tuple(w) for w in want):
        raise ValueError(f"{kernel} takes {want[0]} -> {want[1]} for this layer, got "
                         f"{tuple(src.shape)} -> {tuple(dst.shape)}")
    if kernel in ("im2col_window_kernel", "col2im_window_kernel"):
        fn = (im2col_window_kernel if im2col_side else col2im_window_kernel)[
            _window_grid(cfg, cfg.p * cfg.q if im2col_side else cfg.h * cfg.w), THREADS]
        args = (kernel_array(src.reshape(-1)), kernel_array(dst.reshape(-1)),
                *_window_args(cfg))
    elif kernel in ("im2col_kernel", "col2im_kernel"):
        fn = (im2col_kernel if im2col_side else col2im_kernel)[
            _launch(dst.numel(), kernel)]
        args = (kernel_array(src), kernel_array(dst), cfg.p, cfg.q, cfg.stride_h,
                cfg.stride_w, cfg.pad_h, cfg.pad_w, cfg.r, cfg.s, cfg.dil_h, cfg.dil_w)
    else:
        raise ValueError(f"kernel must be im2col_window_kernel, im2col_kernel, "
                         f"col2im_window_kernel or col2im_kernel, got {kernel!r}")
    return lambda: fn(*args)


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
        return lambda a, b: our_gemm.gemm(a.contiguous(), b.contiguous(), kernel=TILED_RUNG)
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
    """dW = dY @ cols^T; dx = col2im(W^T @ dY), with dY = dy as (K, N*P*Q). With
    ``gemm="tiled"`` dW is our split-K product (:func:`helpers.conv.gemm.gemm_nt`)."""
    mm = _matmul(gemm)
    with phase("im2col"):
        cols = im2col_cpu(x, cfg) if device == "cpu" else im2col(x, cfg)
    dy2 = dy.permute(1, 0, 2, 3).reshape(cfg.k, -1)
    with phase("GEMM (dw)"):  # ours: split-K, reading cols along its rows (no transposed copy)
        dw = (our_gemm.gemm_nt(dy2, cols) if gemm == "tiled" else mm(dy2, cols.t()))
        dw = dw.reshape(cfg.w_shape)
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
