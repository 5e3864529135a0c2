"""Winograd convolution: minimal filtering F(m x m, 3 x 3) on tiles, around a batched GEMM.

Beyond the study: Lavin and Gray, "Fast Algorithms for Convolutional Neural Networks", CVPR
2016. Each m x m output tile of a 3 x 3, stride-1 layer is ``A^T [(G g G^T) * (B^T d B)] A``
for its (m + 2) x (m + 2) input tile d and filter g: (m + 2)^2 multiplies instead of 9 m^2
(16 instead of 36 for F(2x2, 3x3)). Summed over channels, the multiplies are (m + 2)^2 GEMMs
(K, C) x (C, N*tiles). :func:`transforms` builds A^T, G, B^T exactly (Toom-Cook, points 0, 1,
-1, 2, -2, ...). Backward: dx is the forward on dy with flipped filters; dw is F(3x3, 2x2) on
2 x 2 tiles of dy, summed over images and tiles by the GEMM. CUDA path: our transform kernels
and torch.bmm (cuBLAS); CPU: the same steps in torch. Shapes: cuDNN symbols (N, C, H, W, K, R,
S, P, Q); float32.
"""

from __future__ import annotations

import functools
import math
from fractions import Fraction

import numpy as np
import torch
from numba import cuda, float32

from helpers.conv.config import ConvConfig
from helpers.conv.phases import phase
from helpers.device.arrays import cuda_device, grid_refusal, kernel_array, launch, poisoned

__all__ = ["POINTS", "transforms", "make_transform_kernel", "make_inverse_kernel", "kernel_for",
           "KERNEL_NAMES", "input_transform_kernel", "filter_transform_kernel",
           "output_transform_kernel", "dy_transform_kernel", "dw_input_kernel",
           "dw_output_kernel", "forward", "backward", "supports", "flops", "workspace_bytes",
           "TILE", "THREADS"]

#: Output tile of the registered strategy: F(2x2, 3x3). F(4x4, 3x3) is ``forward(..., m=4)``.
TILE = 2
#: Interpolation points of the Toom-Cook construction, in order (infinity is always added).
POINTS = (0, 1, -1, 2, -2, Fraction(1, 2), Fraction(-1, 2))
THREADS = 128  #: threads per block of both kernels


# --------------------------------------------------------------------- the transforms


def _evaluation(points, n: int) -> list[list[Fraction]]:
    """Rows evaluating a polynomial of n coefficients at each point, then its leading
    coefficient (the point at infinity)."""
    rows = [[Fraction(a) ** j for j in range(n)] for a in points]
    return rows + [[Fraction(int(j == n - 1)) for j in range(n)]]


def _inverse(a: list[list[Fraction]]) -> list[list[Fraction]]:
    """Exact Gauss-Jordan inverse of a square matrix of Fractions."""
    n = len(a)
    aug = [row[:] + [Fraction(int(i == j)) for j in range(n)] for i, row in enumerate(a)]
    for col in range(n):
        pivot = next(r for r in range(col, n) if aug[r][col] != 0)
        aug[col], aug[pivot] = aug[pivot], aug[col]
        lead = aug[col][col]
        aug[col] = [v / lead for v in aug[col]]
        for r in range(n):
            if r != col and aug[r][col] != 0:
                f = aug[r][col]
                aug[r] = [v - f * p for v, p in zip(aug[r], aug[col])]
    return [row[n:] for row in aug]


@functools.lru_cache(maxsize=None)
def transforms(m: int, r: int = 3) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The matrices of Winograd's F(m, r): ``y = A^T [(G g) * (B^T d)]`` computes the m
    outputs ``y[i] = sum_k g[k] d[i + k]`` of an r-tap filter g over alpha = m + r - 1 inputs d
    with alpha multiplies instead of m * r. In 2-D: ``Y = A^T [(G g G^T) * (B^T d B)] A``.

    Built exactly (Toom-Cook): the linear convolution of an m- and an r-coefficient polynomial
    is evaluated at alpha points (:data:`POINTS`, then infinity) and interpolated back;
    correlation is its transpose. Each row of B^T is scaled to integers (the scale moves into
    G), which for F(2, 3) gives Lavin and Gray's matrices up to row signs.

    Args:
        m: outputs per tile (1 to 6); r: filter taps (1 to 5); m + r - 1 <= 8.

    Returns:
        ``(AT, G, BT)`` float64 arrays of shapes (m, alpha), (alpha, r), (alpha, alpha).

    Raises:
        ValueError: m outside 1 to 6, r outside 1 to 5, or m + r - 1 > 8 (more points than
            :data:`POINTS`).
    """
    for name, v, top in (("m", m, 6), ("r", r, 5)):
        if isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= top:
            raise ValueError(f"{name} must be an integer from 1 to {top}, got {v!r}")
    alpha = m + r - 1
    if alpha - 1 > len(POINTS):
        raise ValueError(f"F({m}, {r}) needs {alpha - 1} finite points; at most "
                         f"{len(POINTS)} are defined (m + r - 1 <= {len(POINTS) + 1})")
    points = POINTS[:alpha - 1]
    bt = [list(col) for col in zip(*_inverse(_evaluation(points, alpha)))]  # V^-T
    g = _evaluation(points, r)
    at = [list(col) for col in zip(*_evaluation(points, m))]
    for i, row in enumerate(bt):  # integer rows of B^T; the scale moves into G's row i
        scale = math.lcm(*(v.denominator for v in row))
        bt[i] = [v * scale for v in row]
        g[i] = [v / scale for v in g[i]]
    return tuple(np.array([[float(v) for v in row] for row in a]) for a in (at, g, bt))


def _matrix(role: str, m: int, r: int, device) -> torch.Tensor:
    """The float32 matrix of ``role`` ("output" A^T, "filter" G, "input" B^T) of F(m, r)."""
    at, g, bt = transforms(m, r)
    return torch.from_numpy({"output": at, "filter": g, "input": bt}[role]).to(
        device=device, dtype=torch.float32)


# ---------------------------------------------------------------------------- CUDA kernels
# Each kernel is compiled for one matrix: its sizes and entries are constants, so the compiler
# unrolls every loop, keeps the tile in registers and turns a multiply by +-1 into a copy. A
# multiply by 0 it must keep (IEEE: 0 * NaN is NaN, 0 * -x is -0), so the kernels leave out the
# terms whose coefficient is 0 themselves: the test on a constant is decided at compile time.


def make_transform_kernel(t_matrix: np.ndarray, name: str):
    """A kernel computing ``T d T^T`` for the (a, t) matrix T = ``t_matrix``: one thread per
    tile (n, ch, i, j) of src (N, Ch, H, W); the t x t tile at rows i*step - ph ..., columns
    j*step - pw ... (zero outside src) is written, a x a values, to out[a*a, Ch, N*th*tw]
    column (n*th + i)*tw + j. With B^T on input tiles; with G on filters and on dy tiles."""
    tm = np.ascontiguousarray(t_matrix, dtype=np.float32)
    a_, k_ = tm.shape

    def kernel(src, step, ph, pw, th, tw, out):
        idx = cuda.grid(1)
        n_, ch_, h_, w_ = src.shape
        if idx >= n_ * ch_ * th * tw:
            return
        t = cuda.const.array_like(tm)
        j = idx % tw
        i = (idx // tw) % th
        ch = (idx // (tw * th)) % ch_
        n = idx // (tw * th * ch_)
        d = cuda.local.array((k_, k_), float32)
        for u in range(k_):
            for v in range(k_):
                hi, wi = i * step - ph + u, j * step - pw + v
                inside = hi >= 0 and hi < h_ and wi >= 0 and wi < w_
                d[u, v] = src[n, ch, hi, wi] if inside else float32(0.0)
        td = cuda.local.array((a_, k_), float32)  # T d
        for u in range(a_):
            for v in range(k_):
                acc = float32(0.0)
                for e in range(k_):
                    if t[u, e] != 0.0:   # a compile-time constant: the term is left out
                        acc += t[u, e] * d[e, v]
                td[u, v] = acc
        col = (n * th + i) * tw + j
        for u in range(a_):
            for v in range(a_):
                acc = float32(0.0)
                for e in range(k_):
                    if t[v, e] != 0.0:
                        acc += td[u, e] * t[v, e]
                out[u * a_ + v, ch, col] = acc

    return _named(kernel, name)


def make_inverse_kernel(at_matrix: np.ndarray, name: str):
    """A kernel computing the output tiles ``A^T M A`` for the (m, a) matrix A^T =
    ``at_matrix``: one thread per tile (n, ch, i, j); the a x a values mm[:, ch,
    (n*th + i)*tw + j] give m x m outputs, written to y[n, ch, i*m + u - oh, j*m + v - ow]
    where that lies inside y (N, Ch, P, Q): the crop (and the offset oh, ow) happens here."""
    am_ = np.ascontiguousarray(at_matrix, dtype=np.float32)
    m_, a_ = am_.shape

    def kernel(mm, th, tw, oh, ow, y):
        idx = cuda.grid(1)
        n_, ch_, p_, q_ = y.shape
        if idx >= n_ * ch_ * th * tw:
            return
        at = cuda.const.array_like(am_)
        j = idx % tw
        i = (idx // tw) % th
        ch = (idx // (tw * th)) % ch_
        n = idx // (tw * th * ch_)
        col = (n * th + i) * tw + j
        t = cuda.local.array((a_, a_), float32)
        for u in range(a_):
            for v in range(a_):
                t[u, v] = mm[u * a_ + v, ch, col]
        am = cuda.local.array((m_, a_), float32)  # A^T M
        for u in range(m_):
            for v in range(a_):
                acc = float32(0.0)
                for e in range(a_):
                    if at[u, e] != 0.0:
                        acc += at[u, e] * t[e, v]
                am[u, v] = acc
        for u in range(m_):
            for v in range(m_):
                pi, qi = i * m_ + u - oh, j * m_ + v - ow
                if pi >= 0 and pi < p_ and qi >= 0 and qi < q_:
                    acc = float32(0.0)
                    for e in range(a_):
                        if at[v, e] != 0.0:
                            acc += am[u, e] * at[v, e]
                    y[n, ch, pi, qi] = acc

    return _named(kernel, name)


def _named(fn, name: str):
    """``fn`` compiled as a kernel called ``name`` (what profilers and the compiler report)."""
    fn.__name__ = fn.__qualname__ = name
    return cuda.jit(fn)


#: Module names of the kernels of F(2x2, 3x3) and of dw's F(3x3, 2x2), by (role, m, r).
KERNEL_NAMES = {("input", TILE, 3): "input_transform_kernel",
                ("filter", TILE, 3): "filter_transform_kernel",
                ("output", TILE, 3): "output_transform_kernel",
                ("filter", 3, 2): "dy_transform_kernel", ("input", 3, 2): "dw_input_kernel",
                ("output", 3, 2): "dw_output_kernel"}


@functools.lru_cache(maxsize=None)
def kernel_for(role: str, m: int, r: int):
    """The kernel of F(m, r) compiled for its matrix: ``role`` "input" (B^T), "filter" (G) or
    "output" (A^T). Made once per process."""
    at, g, bt = transforms(m, r)
    name = KERNEL_NAMES.get((role, m, r), f"{role}_transform_kernel_f{m}x{r}")
    if role == "output":
        return make_inverse_kernel(at, name)
    return make_transform_kernel({"input": bt, "filter": g}[role], name)


input_transform_kernel = kernel_for("input", TILE, 3)
filter_transform_kernel = kernel_for("filter", TILE, 3)
output_transform_kernel = kernel_for("output", TILE, 3)
dy_transform_kernel = kernel_for("filter", 3, 2)
dw_input_kernel = kernel_for("input", 3, 2)
dw_output_kernel = kernel_for("output", 3, 2)


# ------------------------------------------------------------------ tiles, both devices


def _tiles(src: torch.Tensor, role: tuple, step: int, pad: tuple[int, int], th: int,
           tw: int, device: str) -> torch.Tensor:
    """``T d T^T`` of every tile of src (N, Ch, H, W), as (a*a, Ch, N*th*tw), T the matrix of
    ``role`` = (role, m, r) (see :func:`make_transform_kernel`: the CUDA path's kernel)."""
    n, ch = src.shape[:2]
    t = _matrix(*role, src.device)
    a, k = t.shape
    if device == "cuda":
        out = poisoned((a * a, ch, n * th * tw), cuda_device())
        kernel_for(*role)[launch(n * ch * th * tw, THREADS, f"{role[0]} transform kernel")](
            kernel_array(src.contiguous()), step, pad[0], pad[1], th, tw, kernel_array(out))
        return out
    rows, cols = (th - 1) * step + k, (tw - 1) * step + k  # what the tiles cover
    ph, pw = pad
    xp = torch.nn.functional.pad(src, (pw, max(cols - src.shape[3] - pw, 0),
                                       ph, max(rows - src.shape[2] - ph, 0)))
    d = xp.unfold(2, k, step).unfold(3, k, step)[:, :, :th, :tw]  # (N, Ch, th, tw, k, k)
    # T d T^T for every tile at once: the flattened tile times kron(T, T)^T, one GEMM
    v = d.reshape(-1, k * k) @ torch.kron(t, t).t()               # (N*Ch*th*tw, a*a)
    return v.reshape(n, ch, th * tw, a * a).permute(3, 1, 0, 2).reshape(a * a, ch, -1) \
        .contiguous()


def _filters(g: torch.Tensor, m: int, device: str) -> torch.Tensor:
    """``G g G^T`` of every filter of g (K, C, r, r), as (a*a, K, C)."""
    k, c, r, _ = g.shape
    if device == "cuda":  # the filters as C images of K channels, one tile each
        return _tiles(g.transpose(0, 1), ("filter", m, r), 1, (0, 0), 1, 1, device)
    kg = torch.kron(*[_matrix("filter", m, r, g.device)] * 2)      # (a*a, r*r)
    return (kg @ g.reshape(k * c, r * r).t()).reshape(-1, k, c)  # one GEMM, no copy after


def _untile(mm: torch.Tensor, fm: tuple[int, int], n: int, th: int, tw: int,
            out_shape: tuple[int, int], offset: tuple[int, int], device: str) -> torch.Tensor:
    """Output tiles ``A^T M A`` of F``fm`` = (m, r) of mm (a*a, Ch, n*th*tw) as y (n, Ch, P,
    Q), P x Q = ``out_shape``, tile pixel (i*m + u, j*m + v) landing at (i*m + u - oh,
    j*m + v - ow)."""
    ch = mm.shape[1]
    at = _matrix("output", *fm, mm.device)
    m, a = at.shape
    if device == "cuda":
        y = poisoned((n, ch) + tuple(out_shape), cuda_device())
        kernel_for("output", *fm)[launch(n * ch * th * tw, THREADS, "output transform kernel")](
            kernel_array(mm.contiguous()), th, tw, offset[0], offset[1], kernel_array(y))
        return y
    y = torch.kron(at, at) @ mm.reshape(a * a, -1)                # (m*m, Ch*n*th*tw)
    y = y.reshape(m, m, ch, n, th, tw).permute(3, 2, 4, 0, 5, 1)  # (n, Ch, th, m, tw, m)
    y = y.reshape(n, ch, th * m, tw * m)
    (oh, ow), (p, q) = offset, out_shape
    return y[:, :, oh:oh + p, ow:ow + q].contiguous()


def _correlate(src: torch.Tensor, g: torch.Tensor, pad: tuple[int, int],
               out_shape: tuple[int, int], offset: tuple[int, int], m: int,
               device: str, label: str = "") -> torch.Tensor:
    """Stride-1 cross-correlation of src (N, C, H, W) with g (K, C, 3, 3), zero padding
    ``pad``: out (N, K, P, Q), ``out_shape`` = (P, Q) of the valid output, from ``offset``.
    ``label`` is appended to the names of its phases."""
    n, r = src.shape[0], g.shape[2]
    p_full, q_full = out_shape[0] + offset[0], out_shape[1] + offset[1]
    th, tw = -(-p_full // m), -(-q_full // m)
    with phase("filter transform" + label):
        u = _filters(g, m, device)                                  # (a*a, K, C)
    with phase("input transform" + label):
        v = _tiles(src, ("input", m, r), m, pad, th, tw, device)   # (a*a, C, N*tiles)
    with phase("GEMM" + label):
        mm = torch.bmm(u, v)                                        # (a*a, K, N*tiles)
    del u, v
    with phase("output transform" + label):
        return _untile(mm, (m, r), n, th, tw, out_shape, offset, device)


# ------------------------------------------------------------------------ forward / backward


def forward(x: torch.Tensor, w: torch.Tensor, cfg: ConvConfig, device: str,
            m: int = TILE) -> torch.Tensor:
    """y (N, K, P, Q) of a 3 x 3, stride-1 layer by F(m x m, 3 x 3) on ``device`` ("cpu" or
    "cuda"); x (N, C, H, W), w (K, C, 3, 3) float32. m = 2 (the registered strategy) or 4."""
    return _correlate(x, w, (cfg.pad_h, cfg.pad_w), (cfg.p, cfg.q), (0, 0), m, device)


def backward(x: torch.Tensor, w: torch.Tensor, dy: torch.Tensor, cfg: ConvConfig, device: str,
             m: int = TILE) -> tuple[torch.Tensor, torch.Tensor]:
    """(dx, dw) for dy (N, K, P, Q). dx: F(m x m, 3 x 3) on dy padded by 2 with the filters
    flipped and transposed to (C, K, 3, 3), the padding's rows cropped off. dw: F(3x3, 2x2)
    with each 2 x 2 tile of dy as the filter of a 4 x 4 tile of x; the GEMM sums the tiles and
    images: dw[k, c] = A^T [sum_tiles (G e G^T) * (B^T d B)] A."""
    flipped = w.flip(2, 3).transpose(0, 1).contiguous()
    dx = _correlate(dy, flipped, (cfg.r - 1, cfg.s - 1), (cfg.h, cfg.w),
                    (cfg.pad_h, cfg.pad_w), m, device, " (dx)")
    return dx, _weight_gradient(x, dy, cfg, device)


def _weight_gradient(x, dy, cfg: ConvConfig, device: str) -> torch.Tensor:
    """dw (K, C, 3, 3) by F(3x3, 2x2) (see :func:`backward`)."""
    th, tw = -(-cfg.p // 2), -(-cfg.q // 2)
    with phase("dy transform (dw)"):
        e = _tiles(dy, ("filter", 3, 2), 2, (0, 0), th, tw, device)          # (16, K, N*T)
    with phase("input transform (dw)"):
        v = _tiles(x, ("input", 3, 2), 2, (cfg.pad_h, cfg.pad_w), th, tw, device)  # (16, C, N*T)
    with phase("GEMM (dw)"):
        mm = torch.bmm(e, v.transpose(1, 2))                                 # (16, K, C)
    del e, v
    with phase("output transform (dw)"):  # as K images of C channels with one tile each
        dwt = _untile(mm.transpose(1, 2).contiguous(), (3, 2), cfg.k, 1, 1, (cfg.r, cfg.s),
                      (0, 0), device)                                        # (K, C, 3, 3)
    return dwt


# ------------------------------------------------------------------------------ costs


def supports(cfg: ConvConfig, device: str = "cpu") -> str | None:
    """None if Winograd F(2x2, 3x3) computes ``cfg``, else the reason: a 3 x 3 kernel and
    stride 1 only (the tiles of a strided layer would overlap differently), and on the CUDA
    path launches within the grid limits."""
    if (cfg.r, cfg.s) != (3, 3):
        return f"Winograd F(2x2, 3x3) needs a 3 x 3 kernel, got {cfg.r} x {cfg.s}"
    if (cfg.stride_h, cfg.stride_w) != (1, 1):
        return (f"Winograd F(2x2, 3x3) needs stride 1, got stride "
                f"{(cfg.stride_h, cfg.stride_w)}")
    if device == "cuda":
        for tiles, name in ((_tile_count(cfg.n, cfg.c + cfg.k, cfg.p, cfg.q, TILE),
                             "input_transform_kernel"),
                            (_tile_count(cfg.n, max(cfg.c, cfg.k), cfg.h + 2, cfg.w + 2, TILE),
                             "output_transform_kernel")):
            reason = grid_refusal(-(-tiles // THREADS), name)
            if reason:
                return reason
    return None


def _tile_count(n: int, ch: int, p: int, q: int, m: int) -> int:
    return n * ch * -(-p // m) * -(-q // m)


def flops(cfg: ConvConfig, m: int = TILE) -> int:
    """Forward FLOPs as computed (multiplies and adds): the (m+2)^2 GEMMs
    2 K C N tiles each, the input transforms (two (m+2)^3 matrix products per tile and
    channel), the filter transforms and the output transforms. Compare :attr:`ConvConfig.flops`
    (direct): about 2.25 times more multiplies for m = 2 on large layers."""
    a, r = m + cfg.r - 1, cfg.r
    tiles = cfg.n * -(-cfg.p // m) * -(-cfg.q // m)
    gemm = 2 * a * a * cfg.k * cfg.c * tiles
    inputs = 2 * 2 * a ** 3 * cfg.c * tiles
    filters = 2 * (a * r * r + a * a * r) * cfg.k * cfg.c
    outputs = 2 * (m * a * a + m * m * a) * cfg.k * tiles
    return gemm + inputs + filters + outputs


def workspace_bytes(cfg: ConvConfig, backward: bool = False, m: int = TILE) -> int:
    """Analytic extra float32 bytes: forward, the transformed filters (a^2 K C), inputs
    (a^2 C N tiles) and products (a^2 K N tiles), a = m + 2. Backward: the larger of its two
    passes (dx: the forward's buffers over dy's tiles; dw: 16 (K + C) N tiles' + 16 K C)."""
    a = m + cfg.r - 1
    tiles = cfg.n * -(-cfg.p // m) * -(-cfg.q // m)
    fwd = a * a * (cfg.k * cfg.c + cfg.c * tiles + cfg.k * tiles)
    if not backward:
        return 4 * fwd
    dx_tiles = cfg.n * -(-(cfg.h + 2 * cfg.pad_h) // m) * -(-(cfg.w + 2 * cfg.pad_w) // m)
    dx = a * a * (cfg.k * cfg.c + cfg.k * dx_tiles + cfg.c * dx_tiles)
    dw_tiles = cfg.n * -(-cfg.p // 2) * -(-cfg.q // 2)
    dw = 16 * ((cfg.k + cfg.c) * dw_tiles + cfg.k * cfg.c)
    return 4 * max(dx, dw)
