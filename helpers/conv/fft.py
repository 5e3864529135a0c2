"""FFT convolution: transform, multiply-accumulate over channels per frequency, transform back.

The study's third strategy (fbfft and Theano-fft, its Section II-B); notebook 05 teaches it.
:func:`forward` pads the input to the FFT size ``Hf x Wf`` (:func:`fft_size`), takes ``rfft2``
of the N*C input and K*C filter planes, multiplies ``X: (F, N, C)`` by ``conj(W)`` at each of
the ``F = Hf*(Wf//2 + 1)`` frequencies (one batched complex GEMM, the Cgemm), inverts the N*K
output planes and crops to ``(N, K, P, Q)`` (cross-correlation, as torch's ``conv2d``): the
phases the study times for fbfft (Section V-A, Figure 4). :func:`backward` gives dx and dw with
two more Cgemms; a stride > 1 costs the full stride-1 work (:data:`STRIDE_NOTE`).

Cost (:func:`flops`, :func:`workspace_bytes`): independent of R*S, but each filter's spectrum
has ``Hf*(Wf//2+1)`` complex numbers however small the kernel: fbfft used the most memory in
the study's Figure 5. float32 / complex64 on any device (torch.fft and BLAS on the CPU, cuFFT
and cuBLAS on a GPU); the transforms' round-off spreads over whole planes, so errors are
relative to a plane's largest values (the tests accept 1e-3 of the largest output).
"""

from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F

from helpers.conv.config import ConvConfig
from helpers.conv.phases import phase

__all__ = ["STRIDE_NOTE", "fft_size", "next_fast_len", "forward", "backward", "stages",
           "workspace_bytes", "flops", "supports"]

#: How this strategy handles stride > 1 (shown beside the results).
STRIDE_NOTE = (
    "FFT convolution computes the stride-1 output: the frequency-domain product gives every "
    "output position at once. A stride (s_h, s_w) > 1 is handled by computing the full "
    "stride-1 output and keeping every s_h-th row and s_w-th column, so it costs the full "
    "stride-1 work, about s_h*s_w times more than the outputs kept need (the study's FFT "
    "libraries, fbfft and Theano-fft, support stride 1 only: Section IV-B). Backward scatters "
    "dy into a zero stride-1 grid first (dilation).")


# -------------------------------------------------------------------------------- sizes


def next_fast_len(n: int) -> int:
    """The smallest integer >= ``n`` whose only prime factors are 2, 3 and 5.

    Args:
        n: a length in elements, >= 1.

    Returns:
        int >= n (``n`` itself when it is already 2-3-5-smooth).

    Raises:
        ValueError: n < 1.
    """
    if isinstance(n, bool) or not hasattr(n, "__index__") or n < 1:
        raise ValueError(f"n must be an integer >= 1, got {n!r}")
    n = int(n)
    # Every candidate is 2**a * 3**b * 5**c: for each 3**b * 5**c, double up to n; keep the
    # least. O(log(n)**3) steps, however far apart the smooth numbers are.
    best = None
    p5 = 1
    while True:
        p35 = p5
        while True:
            m = p35
            while m < n:
                m *= 2
            best = m if best is None else min(best, m)
            if p35 >= n:
                break
            p35 *= 3
        if p5 >= n:
            break
        p5 *= 5
    return best


def fft_size(cfg: ConvConfig, fast: bool = True) -> tuple[int, int]:
    """The 2-D FFT size ``(Hf, Wf)`` used for ``cfg``, in elements.

    At least the padded input size ``(H + 2*pad_h, W + 2*pad_w)``, which is enough for
    forward and both gradients without wrap-around (the proofs are in notebook 05, "Why the
    padded input size is a large enough FFT"). With ``fast=True`` (what :func:`forward` and
    :func:`backward` use) each side is rounded up to the next 2-3-5-smooth length
    (:func:`next_fast_len`), which torch.fft's CPU library and cuFFT (GPU) transform with fast radix
    kernels (a prime size such as 227 falls back to a slower algorithm); with ``fast=False`` it
    is the padded input size exactly. fbfft rounds up to powers of two instead.

    Source: the convolution theorem; fbfft (Vasilache et al., 2015; the study's reference [25]).
    """
    hp, wp = cfg.h + 2 * cfg.pad_h, cfg.w + 2 * cfg.pad_w
    if fast:
        return next_fast_len(hp), next_fast_len(wp)
    return hp, wp


def _freqs(hf: int, wf: int) -> int:
    """Number of complex coefficients of one real ``hf x wf`` plane's rfft2."""
    return hf * (wf // 2 + 1)


def workspace_bytes(cfg: ConvConfig) -> int:
    """Analytic extra memory of :func:`forward` in bytes, beyond x, w and y.

    ``8 * Hf*(Wf//2+1) * (N*C + K*C + N*K)``: the complex64 spectra (8 bytes per element) of the
    input, the filters and the output, all alive at once around the Cgemm; plus the real
    float32 padded input ``4 * N*C*Hf*Wf`` when the input has to be padded (padding > 0, or an
    FFT size rounded up beyond H x W). It does not depend on R*S: the filters are padded to
    the full FFT size. Not counted (smaller or not alive at the same time): the transposed
    copies of a spectrum made before and after the Cgemm, the real zero-padded filters, and
    the real ``N*K*Hf*Wf`` inverse transform before the crop. The backward pass holds the same
    amount with dy's spectrum in the output's place and dx's and dw's spectra in place of the
    input's and filters' (plus the dilated dy grid).

    Returns:
        int, bytes. Source: study Section V-B and Figure 5 (fbfft uses the most memory).
    """
    hf, wf = fft_size(cfg)
    spectra = 8 * _freqs(hf, wf) * (cfg.n * cfg.c + cfg.k * cfg.c + cfg.n * cfg.k)
    padded = 4 * cfg.n * cfg.c * hf * wf if (hf, wf) != (cfg.h, cfg.w) else 0
    return spectra + padded


def flops(cfg: ConvConfig) -> int:
    """Estimated floating-point operations of :func:`forward` (an estimate, not a count).

    * Transforms: a complex 2-D FFT of ``M = Hf*Wf`` points costs about ``5 * M * log2(M)``
      flops (the Cooley-Tukey estimate); a real-to-complex (or complex-to-real) one about half
      that, ``2.5 * M * log2(M)``. There are ``N*C`` (input) + ``K*C`` (filters) + ``N*K``
      (inverse, output) of them.
    * Cgemm: ``N*K*C`` complex multiply-adds at each of ``F = Hf*(Wf//2+1)`` frequencies,
      8 flops each (4 multiplies and 2 adds for the product, 2 adds to accumulate).

    Independent of R*S, unlike ``cfg.flops`` (``2*N*K*P*Q*C*R*S``), so FFT convolution gains on the
    others as kernels grow; for small ones (3 x 3) the transforms dominate its count. Stride > 1
    does not reduce it (:data:`STRIDE_NOTE`). The filter transforms could be reused across
    calls (inference); they are counted here, as this module recomputes them.

    Returns:
        int, flops. Source: study Section II-B (FFT's lower computational complexity),
        Section V-A and Figure 4 (fbfft's phases).
    """
    hf, wf = fft_size(cfg)
    m = hf * wf
    per_transform = 2.5 * m * math.log2(m) if m > 1 else 0.0
    transforms = (cfg.n * cfg.c + cfg.k * cfg.c + cfg.n * cfg.k) * per_transform
    cgemm = 8 * cfg.n * cfg.k * cfg.c * _freqs(hf, wf)
    return int(round(transforms + cgemm))


def supports(cfg: ConvConfig) -> str | None:
    """None: every valid ``cfg`` is supported (stride > 1 by subsampling, see
    :data:`STRIDE_NOTE`). A reason string would say why a configuration cannot be computed."""
    return None


# ---------------------------------------------------------------------------- internals


def _check(name: str, t: torch.Tensor, shape, device=None) -> None:
    if not isinstance(t, torch.Tensor):
        raise ValueError(f"{name} must be a torch tensor, got {type(t).__name__}")
    if t.dtype != torch.float32:
        raise ValueError(f"{name} must be float32, got {t.dtype}")
    if tuple(t.shape) != tuple(shape):
        raise ValueError(f"{name} must have shape {tuple(shape)} for this config, got "
                         f"{tuple(t.shape)}")
    if device is not None and t.device != device:
        raise ValueError(f"{name} is on {t.device} but x is on {device}; put them on one device")


def _resolve_size(cfg: ConvConfig, fft_shape) -> tuple[int, int]:
    if fft_shape is None:
        return fft_size(cfg)
    hf, wf = (int(v) for v in fft_shape)
    hp, wp = fft_size(cfg, fast=False)
    if hf < hp or wf < wp:
        raise ValueError(f"fft_shape {(hf, wf)} is smaller than the padded input {(hp, wp)}: "
                         f"circular wrap-around would corrupt the valid outputs")
    return hf, wf


def _reach(out: int, stride: int, kernel: int, pad: int, size: int):
    """Which rows (or columns) of each result are not structurally zero, along one axis.

    Some results are exactly zero whatever the data: an output whose window lies entirely in
    the zero padding, a filter tap that only ever meets padding, an input element no window
    reaches (stride > kernel). Direct convolution and im2col leave them exactly 0; the inverse
    FFT leaves round-off there (about 1e-7 of the plane's magnitude), because every coefficient
    touches every position. They are known from the shapes alone, so :func:`forward` and
    :func:`backward` set them to exact zeros after the crop (:func:`_zero_unreached`).

    Window ``p`` (of ``out``) with tap ``r`` (of ``kernel``) reads padded position
    ``p*stride + r``, a real input element iff ``pad <= p*stride + r < pad + size``.

    Returns:
        (y, dw, dx) NumPy bool arrays of lengths out, kernel, size: the output windows that
        meet the input, the taps that meet it in some window, the input elements some window
        reads. The whole 2-D mask is the outer product of the row and column masks.
    """
    pos = np.arange(out)[:, None] * stride + np.arange(kernel)[None, :]
    inside = (pos >= pad) & (pos < pad + size)
    dx = np.zeros(size, dtype=bool)
    dx[pos[inside] - pad] = True
    return inside.any(axis=1), inside.any(axis=0), dx


def _zero_unreached(t: torch.Tensor, rows, cols) -> torch.Tensor:
    """Set to exactly 0 the rows/columns of ``t`` (.., a, b) where ``rows``/``cols`` are False."""
    if rows.all() and cols.all():
        return t
    mask = torch.from_numpy(np.outer(rows, cols)).to(t.device)
    return t.masked_fill_(~mask, 0.0)


def _input_spectrum(x: torch.Tensor, cfg: ConvConfig, hf: int, wf: int) -> torch.Tensor:
    """Steps 1-3 for the input: pad (by the padding, then to hf x wf), rfft2, transpose.

    Returns (F, N, C) complex64, contiguous."""
    top, left = cfg.pad_h, cfg.pad_w
    bottom, right = hf - cfg.h - top, wf - cfg.w - left
    xp = F.pad(x, (left, right, top, bottom)) if (bottom, right, top, left) != (0, 0, 0, 0) else x
    spec = torch.fft.rfft2(xp)                         # (N, C, Hf, Wf//2+1)
    del xp
    return spec.reshape(cfg.n, cfg.c, -1).permute(2, 0, 1).contiguous()   # transpose


def _dft_matrix(n_freq: int, size: int, taps: int, device, sign: float = -1.0) -> torch.Tensor:
    """``E[f, t] = exp(sign * 2*pi*i * f * t / size)`` for ``f < n_freq``, ``t < taps``;
    complex64, built in float64 so the angles carry no float32 round-off."""
    f = torch.arange(n_freq, dtype=torch.float64)[:, None]
    t = torch.arange(taps, dtype=torch.float64)[None, :]
    return torch.exp(sign * 2j * math.pi * f * t / size).to(device=device, dtype=torch.complex64)


def _filter_spectrum(w: torch.Tensor, cfg: ConvConfig, hf: int, wf: int,
                     conjugate: bool = False) -> torch.Tensor:
    """Steps 1-3 for the filters, pruned: the rfft2 of each filter zero-padded to hf x wf,
    computed from its R x S taps only, already in frequency-major layout.

    A padded filter is zero outside its R x S corner, so its 2-D DFT is
    ``W[fh, fw] = sum_{r<R, s<S} w[r, s] * exp(-2*pi*i*(fh*r/hf + fw*s/wf))``: a (Wf//2+1) x S
    DFT matrix applied along the width, then an hf x R one along the height. Two matrix
    products over all K*C filters at once give exactly what ``torch.fft.rfft2(w, s=(hf, wf))``
    gives (a test checks it), without padding K*C planes, transforming their zeros, or
    transposing the result (notebook 05 times both). The output
    is still ``K*C*Hf*(Wf//2+1)`` complex numbers: the memory cost of FFT convolution
    (:func:`workspace_bytes`) does not go away.

    With ``conjugate=True`` it returns the complex conjugate (what the forward Cgemm needs) at
    no extra cost, by flipping the sign of the DFT matrices' angles, instead of conjugating
    a K*C*F array afterwards (torch's CPU batched GEMM would copy it).

    Returns (F, K, C) complex64, contiguous."""
    sign = 1.0 if conjugate else -1.0
    ew = _dft_matrix(wf // 2 + 1, wf, cfg.s, w.device, sign)      # (Wf//2+1, S)
    eh = _dft_matrix(hf, hf, cfg.r, w.device, sign)                # (Hf, R)
    # along the width (real taps times a complex matrix, as one real GEMM on [Re; Im]):
    # B[fw, (k, c, r)] = sum_s ew[fw, s] * w[k, c, r, s]
    taps = w.reshape(-1, cfg.s)                                    # (K*C*R, S), real
    b = torch.cat([ew.real, ew.imag]) @ taps.T                     # (2*(Wf//2+1), K*C*R)
    b = torch.complex(*b.chunk(2))                                 # (Wf//2+1, K*C*R)
    # along the height: spec[fh, (fw, k, c)] = sum_r eh[fh, r] * B[(fw, k, c), r]
    # (B^T made contiguous first: a copy R/Hf the size of the result, repaid by a faster GEMM)
    spec = eh @ b.reshape(-1, cfg.r).T.contiguous()                # (Hf, (Wf//2+1)*K*C)
    return spec.reshape(-1, cfg.k, cfg.c)


def _filter_gradient(dws: torch.Tensor, cfg: ConvConfig, hf: int, wf: int) -> torch.Tensor:
    """Step 5 for dw, pruned: the first R x S points of ``irfft2`` of the (F, K, C) spectrum.

    ``irfft2`` would return all hf x wf points of K*C planes and keep only R x S of them; here
    the inverse DFT is evaluated at those points only, as two matrix products: along the
    height with the R x hf matrix ``exp(+2*pi*i*r*fh/hf)``, then along the width with the
    S x (wf//2+1) one, weighting each column by how often it stands for itself and its
    Hermitian mirror (1 for fw = 0 and, for even wf, fw = wf/2; else 2), keeping the real
    part and dividing by hf*wf, as a complex-to-real inverse does.

    Returns (K, C, R, S) float32, contiguous."""
    wfh = wf // 2 + 1
    ih = _dft_matrix(hf, hf, cfg.r, dws.device, sign=1.0).T.contiguous()   # (R, Hf)
    iw = _dft_matrix(wfh, wf, cfg.s, dws.device, sign=1.0).T                # (S, Wf//2+1)
    weight = torch.full((wfh,), 2.0, dtype=torch.float32, device=dws.device)
    weight[0] = 1.0
    if wf % 2 == 0:
        weight[-1] = 1.0
    along_h = ih @ dws.reshape(hf, -1)                               # (R, Wfh*K*C)
    along_h = along_h.reshape(cfg.r, wfh, cfg.k * cfg.c)
    iw = iw * (weight / (hf * wf))
    # real part of iw @ along_h, without forming the complex product
    dw = iw.real @ along_h.real - iw.imag @ along_h.imag             # (R, S, K*C)
    return dw.reshape(cfg.r, cfg.s, cfg.k, cfg.c).permute(2, 3, 0, 1).contiguous()


def _inverse(spec: torch.Tensor, a: int, b: int, hf: int, wf: int) -> torch.Tensor:
    """Step 5: (F, a, b) complex -> transpose -> irfft2 -> (a, b, hf, wf) float32."""
    planes = spec.permute(1, 2, 0).reshape(a, b, hf, wf // 2 + 1)
    return torch.fft.irfft2(planes, s=(hf, wf))


# ------------------------------------------------------------------------ forward / backward


def forward(x: torch.Tensor, w: torch.Tensor, cfg: ConvConfig,
            fft_shape: tuple[int, int] | None = None) -> torch.Tensor:
    """Forward convolution by FFT: ``y = x (*) w``, cross-correlation as ``F.conv2d``.

    Args:
        x: input (N, C, H, W), float32 tensor on any device.
        w: filters (K, C, R, S), float32, on x's device.
        cfg: the validated :class:`ConvConfig` (strides, paddings).
        fft_shape: FFT size (Hf, Wf) to use instead of :func:`fft_size`'s, for experiments;
            must be at least the padded input size.

    Returns:
        y (N, K, P, Q) float32 on x's device, contiguous; outputs whose window lies wholly in
        the padding are exact zeros (:func:`_reach`).

    Raises:
        ValueError: x or w not float32 tensors of cfg's shapes, on different devices, or
            ``fft_shape`` smaller than the padded input.

    Source: study Section II-B, Section V-A and Figure 4 (FFT, transpose, Cgemm, inverse FFT).
    """
    _check("x", x, cfg.x_shape)
    _check("w", w, cfg.w_shape, x.device)
    hf, wf = _resolve_size(cfg, fft_shape)
    with torch.no_grad():
        with phase("FFT (x)"):
            xs = _input_spectrum(x, cfg, hf, wf)                # (F, N, C)
        with phase("FFT (w)"):
            ws_conj = _filter_spectrum(w, cfg, hf, wf, conjugate=True)   # (F, K, C)
        with phase("Cgemm"):
            # Cgemm per frequency: Y[f] = X[f] @ conj(W[f])^T, summing over channels.
            ys = torch.bmm(xs, ws_conj.transpose(1, 2))        # (F, N, K)
        del xs, ws_conj
        with phase("inverse FFT (y)"):
            full = _inverse(ys, cfg.n, cfg.k, hf, wf)          # (N, K, Hf, Wf) circular
        del ys
        rows = slice(0, (cfg.p - 1) * cfg.stride_h + 1, cfg.stride_h)
        cols = slice(0, (cfg.q - 1) * cfg.stride_w + 1, cfg.stride_w)
        with phase("crop"):
            y = full[:, :, rows, cols].contiguous()
        y_rows = _reach(cfg.p, cfg.stride_h, cfg.r, cfg.pad_h, cfg.h)[0]
        y_cols = _reach(cfg.q, cfg.stride_w, cfg.s, cfg.pad_w, cfg.w)[0]
        return _zero_unreached(y, y_rows, y_cols)


def backward(x: torch.Tensor, w: torch.Tensor, dy: torch.Tensor, cfg: ConvConfig,
             fft_shape: tuple[int, int] | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Gradients of ``sum(y * dy)`` for ``y = forward(x, w, cfg)``, by FFT.

    ``dw`` is the cross-correlation of the padded input with the (dilated) output gradient,
    summed over the batch; ``dx`` the full convolution of the output gradient with the
    filters, summed over filters, cropped to remove the padding. Both sums are Cgemms per
    frequency. For stride > 1, dy is scattered into a zero stride-1 grid first.

    Args:
        x: input (N, C, H, W), float32 tensor on any device.
        w: filters (K, C, R, S), float32, on x's device.
        dy: output gradient (N, K, P, Q), float32, on x's device.
        cfg: the validated :class:`ConvConfig`.
        fft_shape: as :func:`forward`.

    Returns:
        (dx, dw): (N, C, H, W) and (K, C, R, S), float32 on x's device, contiguous; input
        elements no window reads and taps that only meet padding are exact zeros.

    Raises:
        ValueError: as :func:`forward`, and dy not a float32 tensor of shape (N, K, P, Q).

    Source: study Section II-B (FFT-based convolution) and Figure 4.
    """
    _check("x", x, cfg.x_shape)
    _check("w", w, cfg.w_shape, x.device)
    _check("dy", dy, cfg.y_shape, x.device)
    hf, wf = _resolve_size(cfg, fft_shape)
    with torch.no_grad():
        with phase("FFT (dy)"):
            # Dilate and zero-pad in one buffer: dy[p, q] goes to (p*sh, q*sw) of a zero grid.
            grid = torch.zeros((cfg.n, cfg.k, hf, wf), dtype=dy.dtype, device=dy.device)
            grid[:, :, 0:(cfg.p - 1) * cfg.stride_h + 1:cfg.stride_h,
                 0:(cfg.q - 1) * cfg.stride_w + 1:cfg.stride_w] = dy
            dys = torch.fft.rfft2(grid)
            del grid
            dys = dys.reshape(cfg.n, cfg.k, -1).permute(2, 0, 1).contiguous()   # (F, N, K)

        # dw: DW[f] = dY[f]^H @ X[f]  (K x N @ N x C), summing over the batch.
        with phase("FFT (x)"):
            xs = _input_spectrum(x, cfg, hf, wf)                # (F, N, C)
        with phase("Cgemm (dw)"):
            dws = torch.bmm(dys.conj().resolve_conj().transpose(1, 2), xs)   # (F, K, C)
        del xs
        with phase("inverse FFT (dw)"):
            dw = _filter_gradient(dws, cfg, hf, wf)             # first R x S of the inverse
        del dws

        # dx: DX[f] = dY[f] @ W[f]  (N x K @ K x C), summing over filters: full convolution.
        with phase("FFT (w)"):
            ws = _filter_spectrum(w, cfg, hf, wf)               # (F, K, C)
        with phase("Cgemm (dx)"):
            dxs = torch.bmm(dys, ws)                            # (F, N, C)
        del ws, dys
        with phase("inverse FFT (dx)"):
            dxp = _inverse(dxs, cfg.n, cfg.c, hf, wf)
        with phase("crop"):
            dx = dxp[:, :, cfg.pad_h:cfg.pad_h + cfg.h, cfg.pad_w:cfg.pad_w + cfg.w].contiguous()
        _, dw_rows, dx_rows = _reach(cfg.p, cfg.stride_h, cfg.r, cfg.pad_h, cfg.h)
        _, dw_cols, dx_cols = _reach(cfg.q, cfg.stride_w, cfg.s, cfg.pad_w, cfg.w)
    return _zero_unreached(dx, dx_rows, dx_cols), _zero_unreached(dw, dw_rows, dw_cols)


def stages(x: torch.Tensor, w: torch.Tensor, cfg: ConvConfig,
           fft_shape: tuple[int, int] | None = None) -> dict[str, torch.Tensor]:
    """The forward pass's intermediate results, one per step, for pictures and teaching.

    Runs the steps of :func:`forward` with the same helpers (:func:`_input_spectrum`,
    :func:`_filter_spectrum`, the per-frequency Cgemm, :func:`_inverse`) but keeps what each
    step produced, in plane layout (the two frequency axes last) rather than frequency-major.
    It holds every intermediate at once: for pictures of small layers, not for timing.

    Args:
        x: input (N, C, H, W), float32 tensor on any device.
        w: filters (K, C, R, S), float32, on x's device.
        cfg: the validated :class:`ConvConfig`.
        fft_shape: as :func:`forward`.

    Returns:
        dict of tensors on x's device, with ``F = Hf x (Wf//2 + 1)`` the half spectrum that
        ``rfft2`` keeps (rows: frequencies 0..Hf-1 along the height, in FFT order; columns:
        0..Wf//2 along the width):

        * ``"x_spectrum"``: (N, C, Hf, Wf//2+1) complex64, rfft2 of the zero-padded input;
        * ``"w_spectrum"``: (K, C, Hf, Wf//2+1) complex64, rfft2 of each filter zero-padded to
          Hf x Wf (the pruned transform), not conjugated;
        * ``"product"``: (N, K, Hf, Wf//2+1) complex64, ``sum_c X[n, c] * conj(W[k, c])``, the
          Cgemm's result;
        * ``"circular"``: (N, K, Hf, Wf) float32, its inverse transform: the circular
          cross-correlation before the crop (rows and columns past the valid ones hold
          wrap-around);
        * ``"y"``: (N, K, P, Q) float32, ``forward(x, w, cfg, fft_shape)``.

    Raises:
        ValueError: as :func:`forward`.

    Source: study Section II-B (the steps of FFT convolution) and Figure 4.
    """
    _check("x", x, cfg.x_shape)
    _check("w", w, cfg.w_shape, x.device)
    hf, wf = _resolve_size(cfg, fft_shape)
    wfh = wf // 2 + 1
    with torch.no_grad():
        xs = _input_spectrum(x, cfg, hf, wf)                         # (F, N, C)
        ws = _filter_spectrum(w, cfg, hf, wf)                        # (F, K, C)
        ys = torch.bmm(xs, ws.conj().resolve_conj().transpose(1, 2))   # (F, N, K)
        circular = _inverse(ys, cfg.n, cfg.k, hf, wf)                # (N, K, Hf, Wf)
        return {
            "x_spectrum": xs.permute(1, 2, 0).reshape(cfg.n, cfg.c, hf, wfh).contiguous(),
            "w_spectrum": ws.permute(1, 2, 0).reshape(cfg.k, cfg.c, hf, wfh).contiguous(),
            "product": ys.permute(1, 2, 0).reshape(cfg.n, cfg.k, hf, wfh).contiguous(),
            "circular": circular.contiguous(),
            "y": forward(x, w, cfg, fft_shape),
        }
