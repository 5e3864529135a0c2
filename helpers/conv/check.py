"""The one float64 reference every convolution in the workbook is checked against, and the
check of every strategy: ``python -m helpers.conv --check``.

Shapes NCHW (cuDNN symbols): x (N, C, H, W), w (K, C, R, S), y and dy (N, K, P, Q). The
reference is ``torch.nn.functional.conv2d`` (cross-correlation, zero padding) computed in
float64, with its autograd for the backward pass.
"""

from __future__ import annotations

import argparse

import numpy as np
import torch

from helpers.conv import STRATEGIES, config_for, conv2d, conv2d_backward
from helpers.device import backend

__all__ = ["reference", "reference_backward", "rel_error", "TOLERANCE", "DEFAULT_TOLERANCE",
           "check", "main"]

#: Relative error accepted (the FFT's round-off is larger: transforms of the whole plane).
TOLERANCE = {"fft": 1e-3}
DEFAULT_TOLERANCE = 1e-4


def _pair(v) -> tuple[int, int]:
    return (v, v) if isinstance(v, int) else tuple(v)


def _f64(a, grad: bool = False) -> torch.Tensor:
    t = a.detach().cpu().double() if isinstance(a, torch.Tensor) else torch.tensor(
        np.asarray(a, dtype=np.float64))
    return t.requires_grad_(grad)


def reference(x, w, stride=1, padding=0) -> np.ndarray:
    """y = conv2d(x, w) in float64 as a NumPy array (N, K, P, Q).

    Args:
        x: (N, C, H, W) and w: (K, C, R, S), NumPy arrays or torch tensors of any float dtype.
        stride, padding: an int or an (h, w) pair.

    Raises:
        RuntimeError: from torch, for shapes that do not fit (channel mismatch, kernel too large).
    """
    with torch.no_grad():
        y = torch.nn.functional.conv2d(_f64(x), _f64(w), stride=_pair(stride),
                                       padding=_pair(padding))
    return y.numpy()


def reference_backward(x, w, dy, stride=1, padding=0) -> tuple[np.ndarray, np.ndarray]:
    """(dx, dw) of sum(conv2d(x, w) * dy) in float64: shapes of x (N, C, H, W) and w (K, C, R, S).

    Raises:
        RuntimeError: from torch, for shapes that do not fit.
    """
    xt, wt = _f64(x, grad=True), _f64(w, grad=True)
    y = torch.nn.functional.conv2d(xt, wt, stride=_pair(stride), padding=_pair(padding))
    y.backward(_f64(dy))
    return xt.grad.numpy(), wt.grad.numpy()


def rel_error(got, ref) -> float:
    """max |got - ref| / max |ref| (float64; ref all zeros counts as 1e-12)."""
    got = got.detach().cpu().numpy() if isinstance(got, torch.Tensor) else got
    ref = np.asarray(ref, np.float64)
    return float(np.abs(np.asarray(got, np.float64) - ref).max() / max(np.abs(ref).max(), 1e-12))


def check(x_shape=(2, 3, 9, 8), w_shape=(4, 3, 3, 3), stride=(1, 2), padding=1,
          seed: int = 0) -> list[dict]:
    """Run every strategy on each device, forward and backward, against :func:`reference`.

    Returns:
        One dict per (strategy, device): ``forward`` and ``backward`` relative errors, ``ok``
        (None where the strategy does not support the layer or device) and ``note``.
    """
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(x_shape).astype(np.float32)
    w = rng.standard_normal(w_shape).astype(np.float32)
    cfg = config_for(x_shape, w_shape, stride, padding)
    dy = rng.standard_normal(cfg.y_shape).astype(np.float32)
    y_ref = reference(x, w, stride, padding)
    dx_ref, dw_ref = reference_backward(x, w, dy, stride, padding)
    rows = []
    for name, strat in STRATEGIES.items():
        for device in ("cpu", "cuda"):
            label = device if device == "cpu" or backend.MODE == "gpu" else "cuda (simulator)"
            row = {"strategy": name, "device": label}
            reason = strat.supports(cfg, device)
            if reason:
                rows.append(dict(row, forward=None, backward=None, ok=None, note=reason))
                continue
            try:
                y = conv2d(x, w, stride, padding, strategy=name, device=device)
                dx, dw = conv2d_backward(x, w, dy, stride, padding, strategy=name, device=device)
            except Exception as exc:  # noqa: BLE001 - reported in the table
                rows.append(dict(row, forward=None, backward=None, ok=False,
                                 note=f"{type(exc).__name__}: {exc}"))
                continue
            fwd = rel_error(y, y_ref)
            bwd = max(rel_error(dx, dx_ref), rel_error(dw, dw_ref))
            tol = TOLERANCE.get(strat.family, DEFAULT_TOLERANCE)
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
    print(f"{'strategy':<14}{'device':<18}{'forward err':>12}{'backward err':>14}  result")
    for r in rows:
        fmt = (lambda v: f"{v:.1e}" if v is not None else "-")
        result = {True: "ok", False: "FAILED", None: "not supported"}[r["ok"]]
        print(f"{r['strategy']:<14}{r['device']:<18}{fmt(r['forward']):>12}"
              f"{fmt(r['backward']):>14}  {result}"
              + ("" if r["ok"] else f" ({r['note']})"))
    return 1 if any(r["ok"] is False for r in rows) else 0
