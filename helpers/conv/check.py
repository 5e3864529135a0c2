"""The one float64 reference every convolution in the workbook is checked against, and the
check of every strategy: ``python -m helpers.conv --check``.

Shapes NCHW (cuDNN symbols): x (N, C, H, W), w (K, C/groups, R, S), y and dy (N, K, P, Q).
The reference is ``torch.nn.functional.conv2d`` (cross-correlation, zero padding, bias,
dilation, groups) computed in float64, with its autograd for the backward pass.
"""

from __future__ import annotations

import argparse
import math
import warnings

import numpy as np
import torch

from helpers.conv import (
    STRATEGIES,
    ConvConfig,
    _check_array,
    _check_bias,
    config_for,
    conv2d,
    conv2d_backward,
    memory_refusal,
    resolve_padding,
)
from helpers.device import backend

__all__ = ["reference", "reference_backward", "rel_error", "TOLERANCE", "DEFAULT_TOLERANCE",
           "tolerance", "check", "main", "CHECK_MAX_BYTES"]

#: Relative error accepted, by strategy or family (the FFT's round-off is larger: transforms
#: of the whole plane). Winograd: F(2x2, 3x3) measured 1e-7 to 6e-7 on layers up to C = 256
#: (as im2col + GEMM), F(4x4, 3x3) 3e-7 to 1e-5 (its transforms hold 4, 5 and 1/24: round-off
#: grows with the tile); the default tolerance keeps ten times the larger. TF32 rounds each
#: operand to 11 significant bits (a relative rounding error up to 2^-11, about 4.9e-4); its
#: tolerance is ten times that.
TOLERANCE = {"fft": 1e-3, "winograd": 1e-4, "reference-tf32": 5e-3}
DEFAULT_TOLERANCE = 1e-4


def tolerance(strategy: str) -> float:
    """The relative error :func:`check` accepts from ``strategy`` (a key of
    :data:`helpers.conv.STRATEGIES`): its own entry in :data:`TOLERANCE`, else its family's,
    else :data:`DEFAULT_TOLERANCE`. Raises ValueError: an unknown strategy."""
    if strategy not in STRATEGIES:
        raise ValueError(f"strategy must be one of {sorted(STRATEGIES)}, got {strategy!r}")
    return TOLERANCE.get(strategy, TOLERANCE.get(STRATEGIES[strategy].family, DEFAULT_TOLERANCE))
#: The largest x + y (float32 bytes) :func:`check` accepts: it runs every strategy.
CHECK_MAX_BYTES = 64 * 2**20


_NO_DY = object()


def _validated(x, w, stride, padding, dilation=1, groups=1, dy=_NO_DY, bias=None) -> dict:
    """torch's keyword arguments, after checking x, w (and dy, bias) as :func:`conv2d` does;
    ``'same'`` and ``'valid'`` are passed on to torch as they are."""
    _check_array("x", x)
    _check_array("w", w)
    pads, extra = resolve_padding(padding, tuple(w.shape), stride, dilation)
    x_shape = tuple(x.shape)
    if len(x_shape) == 4:
        x_shape = x_shape[:2] + (x_shape[2] + extra[0], x_shape[3] + extra[1])
    cfg = ConvConfig.from_shapes(x_shape, w.shape, stride, pads, dilation, groups)
    reason = memory_refusal("reference", cfg, "cpu", backward=dy is not _NO_DY)
    if reason:
        raise ValueError(f"x, w and padding {cfg.pad_h, cfg.pad_w} give a layer too large: "
                         f"{reason}")
    _check_bias(bias, cfg.k)
    if dy is not _NO_DY:
        _check_array("dy", dy)
        if tuple(dy.shape) != cfg.y_shape:
            raise ValueError(f"dy must have the output's shape {cfg.y_shape} (from x, w, stride "
                             f"{cfg.stride_h, cfg.stride_w}, padding {padding!r} and dilation "
                             f"{cfg.dil_h, cfg.dil_w}), got {tuple(dy.shape)}")
    return {"stride": (cfg.stride_h, cfg.stride_w),
            "padding": padding if isinstance(padding, str) else (cfg.pad_h, cfg.pad_w),
            "dilation": (cfg.dil_h, cfg.dil_w), "groups": cfg.groups}


def _f64(a, grad: bool = False) -> torch.Tensor:
    t = a.detach().cpu().double() if isinstance(a, torch.Tensor) else torch.tensor(
        np.asarray(a, dtype=np.float64))
    return t.requires_grad_(grad)


def reference(x, w, stride=1, padding=0, *, bias=None, dilation=1, groups=1) -> np.ndarray:
    """y = conv2d(x, w, bias, ...) in float64 as a NumPy array (N, K, P, Q).

    Args:
        x: (N, C, H, W) and w: (K, C/groups, R, S), NumPy arrays or torch tensors of any
            float dtype; bias: None or (K,).
        stride, padding, dilation, groups: as :func:`helpers.conv.conv2d` (padding also
            ``'same'`` or ``'valid'``).

    Raises:
        ValueError: as :func:`helpers.conv.conv2d` (shapes that do not fit, non-float data, a
            bad stride, padding, dilation, groups or bias), naming the parameter.
    """
    kw = _validated(x, w, stride, padding, dilation, groups, bias=bias)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*padding='same'")  # the zero-padded copy
        y = torch.nn.functional.conv2d(_f64(x), _f64(w), None if bias is None else _f64(bias),
                                       **kw)
    return y.numpy()


def reference_backward(x, w, dy, stride=1, padding=0, *, bias=None, dilation=1, groups=1):
    """(dx, dw) of sum(conv2d(x, w, bias, ...) * dy) in float64, shapes of x (N, C, H, W) and
    w (K, C/groups, R, S); (dx, dw, db) when ``bias`` is given (db: (K,)).

    Raises:
        ValueError: as :func:`reference`, and dy's shape differing from (N, K, P, Q).
    """
    kw = _validated(x, w, stride, padding, dilation, groups, dy, bias)
    xt, wt = _f64(x, grad=True), _f64(w, grad=True)
    bt = None if bias is None else _f64(bias, grad=True)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*padding='same'")
        y = torch.nn.functional.conv2d(xt, wt, bt, **kw)
    y.backward(_f64(dy))
    if bt is None:
        return xt.grad.numpy(), wt.grad.numpy()
    return xt.grad.numpy(), wt.grad.numpy(), bt.grad.numpy()


def rel_error(got, ref) -> float:
    """max |got - ref| / max |ref| (float64; ref all zeros counts as 1e-12).

    Raises:
        ValueError: got or ref not a non-empty NumPy array or tensor of numbers, or shapes
            that differ (naming both).
    """
    for name, a in (("got", got), ("ref", ref)):
        if not isinstance(a, (np.ndarray, torch.Tensor)) or a.dtype in (torch.bool, np.bool_):
            raise ValueError(f"{name} must be a NumPy array or a torch tensor of numbers, got "
                             f"{type(a).__name__}")
        if isinstance(a, np.ndarray) and a.dtype.kind not in "fiuc":
            raise ValueError(f"{name} must hold numbers, got dtype {a.dtype}")
    if tuple(got.shape) != tuple(ref.shape) or not np.prod(got.shape):
        raise ValueError(f"got and ref must have the same non-empty shape, got "
                         f"{tuple(got.shape)} and {tuple(ref.shape)}")
    got = got.detach().cpu().numpy() if isinstance(got, torch.Tensor) else got
    ref = ref.detach().cpu().numpy() if isinstance(ref, torch.Tensor) else ref
    ref = np.asarray(ref, np.float64)
    return float(np.abs(np.asarray(got, np.float64) - ref).max() / max(np.abs(ref).max(), 1e-12))


#: The second layer of ``--check``: stride 1, for the strategies the first does not fit.
STRIDE_ONE = dict(x_shape=(2, 3, 9, 8), w_shape=(4, 3, 3, 3), stride=1, padding=1)
#: The third: today's layers, a dilated depthwise convolution (groups = C).
DEPTHWISE = dict(x_shape=(2, 4, 9, 8), w_shape=(4, 1, 3, 3), stride=1, padding=2, dilation=2,
                 groups=4)


def check(x_shape=(2, 3, 9, 8), w_shape=(4, 3, 3, 3), stride=(1, 2), padding=1,
          seed: int = 0, strategies=None, dilation=1, groups=1) -> list[dict]:
    """Run every strategy (or those named in ``strategies``) on each device, forward and
    backward, against :func:`reference`.

    Raises:
        ValueError: as :func:`helpers.conv.config_for` (``dilation`` and ``groups`` as
            :func:`helpers.conv.conv2d`); seed not an integer >= 0; x and y
            over :data:`CHECK_MAX_BYTES`; an unknown name in ``strategies``.

    Returns:
        One dict per (strategy, device): ``forward`` and ``backward`` relative errors, ``ok``
        (None where the strategy does not support the layer or device) and ``note``.
    """
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ValueError(f"seed must be an integer >= 0, got {seed!r}")
    if strategies is not None:
        unknown = [n for n in strategies if n not in STRATEGIES]
        if isinstance(strategies, str) or unknown:
            raise ValueError(f"strategies must be a list of names from {sorted(STRATEGIES)}, "
                             f"got {strategies!r}")
    cfg = config_for(x_shape, w_shape, stride, padding, dilation, groups)
    kw = cfg.kwargs
    if 4 * (math.prod(cfg.x_shape) + math.prod(cfg.y_shape)) > CHECK_MAX_BYTES:
        raise ValueError(f"x_shape {cfg.x_shape}, w_shape {cfg.w_shape} and padding "
                         f"{cfg.pad_h, cfg.pad_w} are too large for the check (over "
                         f"{CHECK_MAX_BYTES // 2**20} MiB); it is meant for small layers")
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(cfg.x_shape).astype(np.float32)
    w = rng.standard_normal(cfg.w_shape).astype(np.float32)
    dy = rng.standard_normal(cfg.y_shape).astype(np.float32)
    y_ref = reference(x, w, **kw)
    dx_ref, dw_ref = reference_backward(x, w, dy, **kw)
    rows = []
    for name, strat in STRATEGIES.items():
        if strategies is not None and name not in strategies:
            continue
        for device in ("cpu", "cuda"):
            label = device if device == "cpu" or backend.MODE == "gpu" else "cuda (simulator)"
            row = {"strategy": name, "device": label}
            reason = strat.supports(cfg, device)
            if reason:
                rows.append(dict(row, forward=None, backward=None, ok=None, note=reason))
                continue
            try:
                y = conv2d(x, w, **kw, strategy=name, device=device)
                dx, dw = conv2d_backward(x, w, dy, **kw, strategy=name, device=device)
            except Exception as exc:  # noqa: BLE001 - reported in the table
                rows.append(dict(row, forward=None, backward=None, ok=False,
                                 note=f"{type(exc).__name__}: {exc}"))
                continue
            fwd = rel_error(y, y_ref)
            bwd = max(rel_error(dx, dx_ref), rel_error(dw, dw_ref))
            tol = tolerance(name)
            rows.append(dict(row, forward=fwd, backward=bwd, ok=fwd < tol and bwd < tol,
                             note=f"tolerance {tol:g}"))
    return rows


def main(argv: list[str] | None = None) -> int:
    """``python -m helpers.conv --check``: print :func:`check`'s table; exit 1 on a failure."""
    parser = argparse.ArgumentParser(prog="python -m helpers.conv", description=(
        "Run every strategy once on a small random layer on each available device, forward "
        "and backward, and print the error against a float64 computation. (Timings: "
        "python -m helpers.experiments.conv_bench.)"))
    parser.add_argument("--check", action="store_true", help="run the correctness check")
    args = parser.parse_args(argv)
    if not args.check:
        parser.print_help()
        return 0
    print(f"kernels: {backend.info().device_label}")
    rows = check()
    cfg = config_for((2, 3, 9, 8), (4, 3, 3, 3), (1, 2), 1)
    second = config_for(STRIDE_ONE["x_shape"], STRIDE_ONE["w_shape"], STRIDE_ONE["stride"],
                        STRIDE_ONE["padding"])
    again = sorted({r["strategy"] for r in rows if r["ok"] is None
                    and STRATEGIES[r["strategy"]].supports(cfg) is not None
                    and STRATEGIES[r["strategy"]].supports(second) is None})
    print(f"layer: x {cfg.x_shape}, w {cfg.w_shape}, stride (1, 2), padding 1")
    _print(rows)
    if again:
        print(f"layer: x {second.x_shape}, w {second.w_shape}, stride 1, padding 1 (for "
              f"{', '.join(again)})")
        more = check(**STRIDE_ONE, strategies=again)
        _print(more)
        rows += more
    third = config_for(*(DEPTHWISE[k] for k in ("x_shape", "w_shape", "stride", "padding",
                                                 "dilation", "groups")))
    print(f"layer: x {third.x_shape}, w {third.w_shape}, padding 2, dilation 2, groups 4 "
          f"(depthwise, dilated)")
    more = check(**DEPTHWISE)
    _print(more)
    rows += more
    return 1 if any(r["ok"] is False for r in rows) else 0


def _print(rows: list[dict]) -> None:
    print(f"{'strategy':<16}{'device':<18}{'forward err':>12}{'backward err':>14}  result")
    for r in rows:
        fmt = (lambda v: f"{v:.1e}" if v is not None else "-")
        result = {True: "ok", False: "FAILED", None: "not supported"}[r["ok"]]
        print(f"{r['strategy']:<16}{r['device']:<18}{fmt(r['forward']):>12}"
              f"{fmt(r['backward']):>14}  {result}"
              + ("" if r["ok"] else f" ({r['note']})"))
