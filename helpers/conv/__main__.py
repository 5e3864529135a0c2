"""``python -m helpers.conv --check``: run every strategy once on a small random layer on each
available device, forward and backward, and print the error against a float64 computation."""

from __future__ import annotations

import argparse

import numpy as np
import torch

from .. import backend
from . import STRATEGIES, config_for, conv2d, conv2d_backward

#: Relative error accepted (the FFT's round-off is larger: transforms of the whole plane).
TOLERANCE = {"fft": 1e-3}
DEFAULT_TOLERANCE = 1e-4


def _float64_reference(x, w, dy, stride, padding):
    xt = torch.tensor(x, dtype=torch.float64, requires_grad=True)
    wt = torch.tensor(w, dtype=torch.float64, requires_grad=True)
    y = torch.nn.functional.conv2d(xt, wt, stride=stride, padding=padding)
    y.backward(torch.tensor(dy, dtype=torch.float64))
    return y.detach().numpy(), xt.grad.numpy(), wt.grad.numpy()


def _rel(got, ref) -> float:
    return float(np.abs(np.asarray(got, np.float64) - ref).max() / max(np.abs(ref).max(), 1e-12))


def check(x_shape=(2, 3, 9, 8), w_shape=(4, 3, 3, 3), stride=(1, 2), padding=1,
          seed: int = 0) -> list[dict]:
    """Run the check; one dict per (strategy, device): errors, ok, or the reason it was skipped."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(x_shape).astype(np.float32)
    w = rng.standard_normal(w_shape).astype(np.float32)
    cfg = config_for(x_shape, w_shape, stride, padding)
    dy = rng.standard_normal(cfg.y_shape).astype(np.float32)
    y_ref, dx_ref, dw_ref = _float64_reference(x, w, dy, (cfg.stride_h, cfg.stride_w),
                                               (cfg.pad_h, cfg.pad_w))
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
            fwd = _rel(y, y_ref)
            bwd = max(_rel(dx, dx_ref), _rel(dw, dw_ref))
            tol = TOLERANCE.get(strat.family, DEFAULT_TOLERANCE)
            rows.append(dict(row, forward=fwd, backward=bwd, ok=fwd < tol and bwd < tol,
                             note=f"tolerance {tol:g}"))
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m helpers.conv", description=__doc__)
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


if __name__ == "__main__":
    raise SystemExit(main())
