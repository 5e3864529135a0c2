"""``python -m helpers.conv --check``: run every strategy once on a small random layer on each
available device, forward and backward, and print the error against a float64 computation.

``python -m helpers.conv --bench [--batch N] [--save]``: time every strategy, forward and
forward + backward, with peak memory, at the study's Table I layers (batch 1 by default) on
the CPU and, where there is one, the GPU (:mod:`helpers.conv.bench`); ``--save`` writes the
rows and the machine's description to ``results/``."""

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
    parser.add_argument("--bench", action="store_true",
                        help="time every strategy at the study's Table I layers")
    parser.add_argument("--batch", type=int, default=1,
                        help="batch size for --bench (default 1; the study used 128)")
    parser.add_argument("--save", action="store_true",
                        help="with --bench: write results/conv_table1_b<N>_<device>.csv + .json")
    args = parser.parse_args(argv)
    if args.bench:
        return _bench(args.batch, args.save)
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


def _bench(batch: int, save: bool) -> int:
    from tqdm.auto import tqdm

    from .. import results
    from .bench import bench_layers, format_table

    if batch < 1:
        print(f"--batch must be >= 1, got {batch}")
        return 2
    info = backend.info()
    print(f"kernels: {info.device_label}")
    bar = tqdm(desc="measuring", unit=" runs", leave=False)

    def step(text: str) -> None:
        bar.set_postfix_str(text)
        bar.update()

    rows = bench_layers(batch=batch, progress=step)
    bar.close()
    print(f"Table I layers at batch {batch} (input channels: helpers.paper); medians, "
          f"'x ref' = time / torch's own convolution on the same device")
    print(format_table(rows))
    if save:
        device = info.gpu_name if backend.MODE == "gpu" else "cpu"
        paths = results.save(f"conv_table1_b{batch}_{results.slug(device)}", rows)
        print("saved " + ", ".join(str(p) for p in paths))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
