"""The checks of the notebooks' editable kernels: notebook 01's ``relu_kernel``, 03's
``direct_naive_kernel`` and 04's ``im2col_kernel``, each on the small layer its cell used.

Each returns a :class:`helpers.checks.Report`, PASSED or one sentence naming the mistake, then
compiles a kernel that passed for a T4 (:func:`helpers.checks.compiler_check`).
"""

from __future__ import annotations

import itertools

import numpy as np
import torch

from helpers import kernels
from helpers.checks import Report, compiler_check
from helpers.conv import config_for
from helpers.conv.check import reference
from helpers.editable.verdict import (
    Candidate,
    KernelFailed,
    Output,
    Region,
    diagnose_values,
    explain_exception,
    launch,
)

__all__ = ["check_relu", "check_direct_naive", "check_im2col", "windows", "THREADS"]

#: Threads per block of every launch here (the cells' own choice).
THREADS = 128

#: The layer of notebooks 03 and 04: odd sizes, stride 2, padding 1 (cuDNN symbols).
X_SHAPE, W_SHAPE, STRIDE, PADDING = (2, 3, 9, 7), (4, 3, 3, 3), 2, 1

#: The relative error (of max |y64|) a float32 direct convolution of 27 terms stays within.
RTOL_DIRECT = 1e-5

_Y_AXES = [("n", "image", "batch"), ("k", "output map", "image"), ("p", "row", "output map"),
           ("q", "column", "output map")]
_COLS_AXES = [("row", "row", "column of cols"), ("col", "column", "row of cols")]


def windows(x: np.ndarray, r_: int, s_: int, p_: int, q_: int, stride=(1, 1), offset=(0, 0),
            wrap: tuple[bool, bool] = (False, False)) -> np.ndarray:
    """Every window of x in float64, (C, R, S, N, P, Q): element (c, r, s, n, p, q) is
    ``x[n, c, p*sh + r - oh, q*sw + s - ow]``, 0 outside x (or, where ``wrap``, a negative
    index counting from the end, as Python and Numba read it). With ``offset`` the padding,
    ``reshape(C*R*S, N*P*Q)`` is im2col's cols; wrong strides and offsets give the results of
    kernels with those mistakes.

    Args:
        x: (N, C, H, W). r_, s_: the window. p_, q_: output rows and columns.
        stride: (sh, sw). offset: (oh, ow), the padding subtracted. wrap: per axis.
    """
    x = np.asarray(x, dtype=np.float64)
    h_, w_ = x.shape[2:]
    hi = np.arange(p_)[:, None] * stride[0] + np.arange(r_)[None, :] - offset[0]   # (P, R)
    wi = np.arange(q_)[:, None] * stride[1] + np.arange(s_)[None, :] - offset[1]   # (Q, S)
    ok_h = (hi >= (-h_ if wrap[0] else 0)) & (hi < h_)
    ok_w = (wi >= (-w_ if wrap[1] else 0)) & (wi < w_)
    g = x[:, :, (np.where(ok_h, hi, 0) % h_)[:, :, None, None],
          (np.where(ok_w, wi, 0) % w_)[None, None, :, :]]                         # N,C,P,R,Q,S
    g = g * (ok_h[:, :, None, None] & ok_w[None, None, :, :])
    return g.transpose(1, 3, 5, 0, 2, 4)


def _verdict(name: str, kernel, run, spec: str) -> Report:
    """Run ``run()``, which returns (the failure sentence or None, the sentence of a pass),
    and compile a kernel that passed (:func:`helpers.checks.compiler_check`)."""
    if not (hasattr(kernel, "py_func") and hasattr(type(kernel), "__getitem__")):
        return Report(name, False, f"{spec} is not a CUDA kernel (got {type(kernel).__name__}):"
                      f" put @cuda.jit on the line above `def {spec}(...)` and run the cell "
                      f"again.", 1, "error")
    try:
        problem, passed = run()
    except KernelFailed as exc:
        return Report(name, False, f"{exc}.", 1, "error")
    if problem:
        return Report(name, False, f"{problem}.", 1, "failed")
    report = Report(name, True, passed, 1, "passed")
    checked = compiler_check(report, kernel, kernels.spec(spec).argtypes)
    if checked.passed and checked.message == passed:
        checked.message += (" The CUDA compiler finds no FP64 instruction in it for a T4 "
                            "(sm_75).")
    return checked


def _shift(what: str, rows: int, cols: int) -> str:
    parts = [(f"{n} {u}{'s' * (n != 1)}", way) for n, u, way in
             ((rows, "row", "down"), (cols, "column", "right")) if n]
    return (f"every window starts {' and '.join(p for p, _ in parts)} too far "
            f"{' and '.join(w for _, w in parts)}: {what}")


def _candidates(r_: int, s_: int, p_: int, q_: int, x: np.ndarray, finish) -> list[Candidate]:
    """The plausible wrong results of a kernel that reads windows of x (padding forgotten or
    subtracted twice, a stride off by one, a forgotten test of hi >= 0), each passed through
    ``finish`` (windows -> the kernel's output)."""
    sh = sw = STRIDE
    ph = pw = PADDING
    hw = "`hi = p * sh + r * dil_h - ph`, `wi = q * sw + s * dil_w - pw`"
    out = [(dict(offset=(0, 0)), "they are what the layer gives without its padding: "
            + _shift(f"subtract the padding ({hw})", ph, pw)),
           (dict(offset=(0, pw)), "the padding is left out of the row index: "
            + _shift("subtract it (`hi = p * sh + r * dil_h - ph`)", ph, 0)),
           (dict(offset=(ph, 0)), "the padding is left out of the column index: "
            + _shift("subtract it (`wi = q * sw + s * dil_w - pw`)", 0, pw)),
           (dict(offset=(2 * ph, 2 * pw)), "they are what a padding subtracted twice gives: "
            + _shift(f"subtract it once ({hw})", ph, pw).replace("down and right",
                                                                 "up and left")),
           (dict(wrap=(True, True)), "where a window hangs over the top or left padding your "
            "kernel reads the last rows or columns of x (a negative index counts from the end):"
            " test `hi >= 0` and `wi >= 0`"),
           (dict(wrap=(True, False)), "where a window hangs over the top padding your kernel "
            "reads the last rows of x (a negative index counts from the end): test `hi >= 0`"),
           (dict(wrap=(False, True)), "where a window hangs over the left padding your kernel "
            "reads the last columns of x (a negative index counts from the end): test "
            "`wi >= 0`")]
    for a, b in itertools.product(sorted({1, sh - 1, sh, sh + 1} - {0}), repeat=2):
        if (a, b) != (sh, sw):
            which = "rows and columns" if a != sh and b != sw else "rows" if a != sh else \
                "columns"
            out.append((dict(stride=(a, b)), f"they are what a stride of {a} x {b} gives, not "
                        f"{sh} x {sw}: the window of output (p, q) starts at row p * sh, column "
                        f"q * sw (check the stride of the {which})"))
    result = []
    for kw, sentence in out:
        kw = {"stride": (sh, sw), "offset": (ph, pw), **kw}
        result.append(Candidate(finish(windows(x, r_, s_, p_, q_, **kw)), sentence))
    return result


def check_relu(kernel, slope: float = 0.0) -> Report:
    """Check notebook 01's ``relu_kernel(x, out)``: out = x where x > 0, else slope * x.

    Args:
        kernel: a ``@cuda.jit`` kernel; x, out: 1-D float32 arrays of 1,001 elements (a size no
            block divides), launched as 8 blocks of 128 threads.
        slope: the leaky ReLU's slope (0 for a plain ReLU), a finite number.

    Returns:
        A :class:`~helpers.checks.Report`; never raises for anything the kernel does.

    Raises:
        ValueError: ``slope`` is not a finite number.
    """
    if not (isinstance(slope, (int, float, np.integer, np.floating))
            and np.isfinite(float(slope))):
        raise ValueError(f"slope must be a finite number such as np.float32(0.01), got "
                         f"{slope!r}")
    x = np.random.default_rng(1).standard_normal(1001).astype(np.float32)
    blocks = (x.size + THREADS - 1) // THREADS
    want = np.where(x > 0, x, np.float32(slope) * x).astype(np.float64)
    name = f"relu_kernel, {x.size:,} elements, slope {float(slope):g}"
    negative, positive = x <= 0, x > 0
    candidates = [Candidate(x.astype(np.float64), "out = x everywhere: where x[i] <= 0 the "
                            "output must be slope * x[i]")]
    if slope:
        candidates.insert(0, Candidate(np.maximum(x, 0).astype(np.float64), f"they are a "
                          f"plain ReLU's, 0 where x <= 0, while slope is {float(slope):g}: the "
                          f"`else` branch must be `slope * x[i]`"))

    def run():
        explain = lambda exc: explain_exception(  # noqa: E731
            exc, kernel, work=x.size, noun="outputs", threads_total=blocks * THREADS, layouts={},
            fallback=lambda bad: "check the bounds test (`if i < x.size:`)")
        out, = launch(kernel, blocks, THREADS, (x, Output(x.shape)), explain=explain)
        got = out.astype(np.float64)
        return diagnose_values(
            got, want, noun="outputs", rtol=1e-6, axes=[],
            unwritten_regions=[Region(f"all but the first {THREADS}", np.arange(x.size) >=
                                      THREADS, "i must count the blocks too: `i = "
                                      "cuda.grid(1)` is blockIdx.x * blockDim.x + threadIdx.x")],
            wrong_regions=[Region("the negative inputs, x <= 0", negative, "the `else` branch "
                                  "must give slope * x[i]"),
                           Region("the positive inputs, x > 0", positive,
                                  "where x[i] > 0 the output is x[i] itself")],
            candidates=candidates,
            unwritten_advice="every thread with i < x.size must write out[i]: check the bounds "
                             "test (`if i < x.size:`)",
            places_advice="thread i must write out[i], from x[i]",
            wrong_advice="out[i] = x[i] if x[i] > 0 else slope * x[i]"), (
            f"all {x.size:,} outputs equal NumPy's np.where(x > 0, x, slope * x)" + (
                "." if np.array_equal(got, want) else
                f" within float32 round-off (max |out - expected| = "
                f"{np.abs(got - want).max():.1e})."))

    return _verdict(name, kernel, run, "relu_kernel")


def _layer():
    cfg = config_for(X_SHAPE, W_SHAPE, stride=STRIDE, padding=PADDING)
    return cfg, f"x {cfg.x_shape}, {cfg.r} x {cfg.s} windows, stride {STRIDE}, padding {PADDING}"


def check_direct_naive(kernel) -> Report:
    """Check notebook 03's ``direct_naive_kernel(x, w, y, sh, sw, ph, pw, dil_h, dil_w)``.

    Args:
        kernel: a ``@cuda.jit`` kernel, one thread per output element, launched on x (2, 3, 9,
            7) and w (4, 3, 3, 3) float32 with stride 2, padding 1, dilation 1 (y (2, 4, 5, 4),
            poisoned with NaN); compared with :func:`helpers.conv.check.reference` (float64).

    Returns:
        A :class:`~helpers.checks.Report`; never raises for anything the kernel does.
    """
    cfg, layer = _layer()
    gen = np.random.default_rng(3)
    x = gen.standard_normal(cfg.x_shape, dtype=np.float32)
    w = gen.standard_normal(cfg.w_shape, dtype=np.float32)
    want = reference(x, w, STRIDE, PADDING)
    work = int(np.prod(cfg.y_shape))
    blocks = (work + THREADS - 1) // THREADS
    w64 = w.astype(np.float64)

    def conv(win, filters=w64):
        return np.einsum("kcrs,crsnpq->nkpq", filters, win)

    right = windows(x, cfg.r, cfg.s, cfg.p, cfg.q, (STRIDE,) * 2, (PADDING,) * 2)
    candidates = _candidates(cfg.r, cfg.s, cfg.p, cfg.q, x, conv) + [
        Candidate(conv(right, w64.transpose(0, 1, 3, 2)), "they are what each filter "
                  "transposed gives: read w[k, c, r, s], r its row and s its column"),
        Candidate(conv(right[:1], w64[:, :1]), "only channel 0 is summed: loop over every "
                  "input channel, `for c in range(c_)`")]
    ones = windows(np.ones_like(x), cfg.r, cfg.s, cfg.p, cfg.q, (STRIDE,) * 2, (PADDING,) * 2)
    border = np.broadcast_to((ones == 0).any(axis=(0, 1, 2))[:, None], cfg.y_shape)
    axis_advice = ("a window position outside x: check the bounds tests (`hi >= 0 and hi < "
                   "h_`, `wi >= 0 and wi < w_`)")

    def run():
        explain = lambda exc: explain_exception(  # noqa: E731
            exc, kernel, work=work, noun="outputs", threads_total=blocks * THREADS,
            layouts={"x": "n, c, h, w", "w": "k, c, r, s", "y": "n, k, p, q"},
            fallback=lambda bad: axis_advice if bad.array == "x" and bad.axis >= 2 else
            "check how i is split into n, k, p, q (`q = i % q_`, ..., `n = i // (q_ * p_ * "
            "k_)`)")
        y, = launch(kernel, blocks, THREADS, (x, w, Output(cfg.y_shape), STRIDE, STRIDE,
                                               PADDING, PADDING, 1, 1), explain=explain)
        got = y.astype(np.float64)
        return diagnose_values(
            got, want, noun="outputs", rtol=RTOL_DIRECT, axes=_Y_AXES,
            wrong_regions=[Region("the outputs whose window overlaps the padding", border,
                                  "check the padding offset and the bounds tests of hi and "
                                  "wi")],
            candidates=candidates,
            unwritten_advice="every thread with i < N*K*P*Q must write its y[n, k, p, q]: "
                             "check the bounds test and how i is split into n, k, p, q",
            places_advice="check how i is split into n, k, p, q and the order of y's indices",
            wrong_advice="check the window's position (`hi = p * sh + r * dil_h - ph`) and "
                         "the indices of x and w"), (
            f"all {work} outputs of y {cfg.y_shape} match the float64 reference within "
            f"float32 round-off (max |y - y64| / max |y64| below {RTOL_DIRECT:g}).")

    return _verdict(f"direct_naive_kernel, x {cfg.x_shape}, w {cfg.w_shape}, stride {STRIDE}, "
                    f"padding {PADDING}", kernel, run,
                    "direct_naive_kernel")


def check_im2col(kernel) -> Report:
    """Check notebook 04's ``im2col_kernel(x, cols, p_, q_, sh, sw, ph, pw, r_, s_, dil_h,
    dil_w)``.

    Args:
        kernel: a ``@cuda.jit`` kernel, one thread per element of cols, launched on x (2, 3, 9,
            7) float32 with 3 x 3 windows, stride 2, padding 1, dilation 1 (cols (27, 40):
            C*R*S rows (c, r, s), N*P*Q columns (n, p, q), poisoned with NaN); compared element
            for element with torch's ``unfold``.

    Returns:
        A :class:`~helpers.checks.Report`; never raises for anything the kernel does.
    """
    cfg, layer = _layer()
    x = np.random.default_rng(4).standard_normal(cfg.x_shape, dtype=np.float32)
    shape = (cfg.c * cfg.r * cfg.s, cfg.n * cfg.p * cfg.q)
    # torch's unfold gives (N, C*R*S, P*Q): the same windows, batch first
    want = torch.nn.functional.unfold(torch.from_numpy(x).double(), (cfg.r, cfg.s),
                                      padding=PADDING, stride=STRIDE)
    want = want.permute(1, 0, 2).reshape(shape).numpy()
    work = want.size
    blocks = (work + THREADS - 1) // THREADS

    def flat(win):
        return win.reshape(shape)

    right = windows(x, cfg.r, cfg.s, cfg.p, cfg.q, (STRIDE,) * 2, (PADDING,) * 2)
    candidates = _candidates(cfg.r, cfg.s, cfg.p, cfg.q, x, flat)
    for order in itertools.permutations(range(3)):
        if order != (0, 1, 2):
            rows = ", ".join("crs"[a] for a in order)
            candidates.append(Candidate(flat(right.transpose(*order, 3, 4, 5)), f"the rows are "
                              f"in ({rows}) order (or r and s swapped in the window): row "
                              f"(c, r, s) must hold x[n, c, p*sh + r*dil_h - ph, q*sw + "
                              f"s*dil_w - pw], s varying fastest (`s = row % s_`)"))
            cols_order = ", ".join("npq"[a] for a in order)
            candidates.append(Candidate(flat(right.transpose(0, 1, 2, *(3 + a for a in order))),
                              f"the columns are in ({cols_order}) order: column (n, p, q) "
                              f"needs q varying fastest (`q = col % q_`, `n = col // (q_ * "
                              f"p_)`)"))
    ones = windows(np.ones_like(x), cfg.r, cfg.s, cfg.p, cfg.q, (STRIDE,) * 2, (PADDING,) * 2)
    padding = flat(ones) == 0

    def run():
        explain = lambda exc: explain_exception(  # noqa: E731
            exc, kernel, work=work, noun="elements of cols", threads_total=blocks * THREADS,
            layouts={"x": "n, c, h, w", "cols": "row, col"},
            fallback=lambda bad: ("a window position outside x: check the bounds test of hi "
                                  "and wi") if bad.array == "x" and bad.axis >= 2 else
            "check how i is split into row and col (`row, col = i // ncols, i % ncols`) and "
            "row into c, r, s, col into n, p, q")
        cols, = launch(kernel, blocks, THREADS, (x, Output(shape), cfg.p, cfg.q, STRIDE,
                                                  STRIDE, PADDING, PADDING, cfg.r, cfg.s, 1, 1),
                       explain=explain)
        got = cols.astype(np.float64)
        return diagnose_values(
            got, want, noun="elements", rtol=1e-6, axes=_COLS_AXES,
            unwritten_regions=[Region("exactly the padding: the taps whose window hangs over "
                                      "the border", padding, "the `else` branch must write 0 "
                                      "there (cols is not zeroed before the launch)")],
            wrong_regions=[Region("the taps whose window hangs over the border", padding,
                                  "they must be 0: check the bounds test of hi and wi")],
            candidates=candidates,
            unwritten_advice="every thread with i < C*R*S*N*P*Q must write its cols[row, col]:"
                             " check the bounds test and how i is split into row and col",
            places_advice="check how row splits into c, r, s and col into n, p, q",
            wrong_advice="check the window's position (`hi = p * sh + r * dil_h - ph`) and "
                         "the indices of x"), (
            f"cols {shape} equals torch's unfold, element for element (a copy has no "
            f"round-off).")

    return _verdict(f"im2col_kernel, {layer}", kernel, run, "im2col_kernel")

