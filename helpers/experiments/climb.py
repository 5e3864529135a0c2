"""The climb: our kernels against the library, one rung at a time, in one run (notebook 13).

``python -m helpers.experiments.climb [--save] [--out DIR] [--time-limit S] [--quick]`` measures,
most needed first: the GEMM ladder (:mod:`helpers.conv.gemm`) at n = 4096 beside cuBLAS in FP32
(TF32 off) and TF32, rung 7's tile search included; im2col and col2im, the first kernels and the
window kernels, at the study's Figure 4 layer and Table I's Conv1 and Conv3 (batch 128), kernel
time only, in bytes per second; the direct backward's dx and dW kernels, old and new, timed apart
at Table I (batch 128); and the dW GEMM of im2col + GEMM by split-K beside cuBLAS. Every
kernel's result is checked on the GPU first (relative error, NaN poison) and timed with
:func:`helpers.device.timing.benchmark` (warm-up, synchronised, median). Rows: :data:`FIELDS`.

Source: Li et al., ICPP 2016, Table I and Figure 4; Boehm (2022) for the ladder.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import math
import pathlib
import time

import torch

from helpers import results
from helpers.conv import direct, unroll
from helpers.conv import gemm as ladder
from helpers.conv.config import ConvConfig
from helpers.conv.gemm import rung7_autotuned
from helpers.device import arrays, backend
from helpers.device.precision import tf32_mode
from helpers.device.progress import time_limit_status, time_up
from helpers.device.timing import benchmark
from helpers.experiments import phases, throughput
from helpers.paper import TABLE_I

__all__ = ["COMMAND", "FIELDS", "PREFIX", "FIGURE4", "GEMM_N", "gemm_rows", "im2col_rows",
           "direct_rows", "dw_gemm_rows", "measure", "recorded", "starting_point", "format_table",
           "main"]

#: results/ file-name prefix, and the command that records the climb on a GPU.
PREFIX = "climb_"
COMMAND = "python -m helpers.experiments.climb --save"

#: The GEMM size of the ladder (n of n x n, float32), as in notebook 01's headline.
GEMM_N = 4096

#: The study's Figure 4 layer (b, i, f, k, s) = (64, 128, 64, 11, 1), C = 3.
FIGURE4 = ConvConfig.from_study(b=64, i=128, f=64, k=11, s=1, c=3, name="Figure 4")

#: Columns of every row (units in the names).
FIELDS = ("experiment", "item", "rung", "layer", "n", "device", "device_kind", "median_ms",
          "iqr_ms", "calls", "flops", "gflop_s", "bytes_read", "bytes_written", "gb_s",
          "gb_s_written", "vs_fp32", "vs_tf32", "rel_err", "status", "note")


def _row(**kw) -> dict:
    row = dict.fromkeys(FIELDS)
    row.update(kw)
    return row


def _device() -> str:
    return "cuda" if backend.MODE == "gpu" else "cpu"


def _label() -> str:
    return backend.info().device_label


def _rel_err(got: torch.Tensor, want: torch.Tensor) -> float:
    """||got - want|| / ||want||, in float64; inf where got holds NaN (unwritten poison)."""
    got, want = got.double(), want.double()
    if torch.isnan(got).any():
        return math.inf
    return float(torch.linalg.vector_norm(got - want) / torch.linalg.vector_norm(want))


def _once(call):
    """``call()``'s result and its time in ms: a check's call, which compiles on a GPU."""
    start = time.perf_counter()
    out = call()
    return out, (time.perf_counter() - start) * 1e3


def _timed(call, min_run_time: float, label: str,
           first_ms: float | None = None) -> tuple[float, float, int]:
    """(median ms, IQR ms, calls timed) of ``call`` on the CUDA path: every caller has run it
    once already (its check, which compiles; ``first_ms`` its time); one more warm-up call on a
    GPU. In the simulator that first call is the timing (else one call is timed): its time
    says nothing about a GPU, and each call costs seconds there."""
    if backend.MODE != "gpu":
        if first_ms is None:
            first_ms = _once(call)[1]
        return first_ms, 0.0, 1
    t = benchmark(call, device="cuda", label=label, warmup=1 if backend.MODE == "gpu" else 0,
                  min_run_time=min_run_time)
    return t.median_ms, t.iqr_s * 1e3, t.repeats * t.calls_per_repeat


def _status() -> str:
    return "ok" if backend.MODE == "gpu" else "ok: simulator, not a hardware timing"


# ----------------------------------------------------------------------------- the GEMM ladder


def gemm_rows(n: int = GEMM_N, min_run_time: float = 0.3, *, deadline=None,
              time_limit=None, tune: bool = True) -> list[dict]:
    """The ladder at n x n x n: cuBLAS FP32 and TF32 first, then every rung (its error against a
    float64 product, then its time), then rung 7's tile search (one row per candidate).

    Returns:
        Rows of :data:`FIELDS` with ``experiment = "gemm"``; ``vs_fp32`` / ``vs_tf32`` are
        GFLOP/s over cuBLAS's in FP32 / TF32 measured in the same run (1 for those rows).
    """
    dev = arrays.cuda_device()
    gen = torch.Generator(device=dev).manual_seed(0)
    a = torch.randn((n, n), device=dev, generator=gen)
    b = torch.randn((n, n), device=dev, generator=gen)
    c = arrays.poisoned((n, n), dev)
    ref = (a.double() @ b.double())
    flops = ladder.gemm_flops(n, n, n)
    rows, lib_ms = [], {}
    lib = "cuBLAS" if backend.MODE == "gpu" else "torch on the CPU"
    for item, tf32 in ((f"{lib} FP32", False), (f"{lib} TF32", True)):
        if time_up(deadline):
            rows.append(_row(experiment="gemm", item=item, n=n, status=time_limit_status(time_limit)))
            continue
        with tf32_mode(tf32):
            out = a @ b
            err = _rel_err(out, ref)
            ms, iqr, calls = _timed(lambda: torch.matmul(a, b, out=c), min_run_time, item)
        lib_ms[tf32] = ms
        rows.append(_row(experiment="gemm", item=item, n=n, median_ms=ms, iqr_ms=iqr,
                         calls=calls, flops=flops, gflop_s=flops / ms / 1e6, rel_err=err,
                         status=_status()))
    for r in ladder.RUNGS:
        if r.name == "autotuned" and tune and backend.MODE == "gpu" and not time_up(deadline):
            for cfg, ms in rung7_autotuned.autotune(n, n, n):
                pre = ", prefetch" if cfg.prefetch else ""
                rows.append(_row(experiment="gemm-tiles", item=f"{cfg.bm}x{cfg.bn}x{cfg.bk}, "
                                 f"{cfg.tm}x{cfg.tn} per thread{pre}", rung=r.number, n=n,
                                 median_ms=ms, calls=10, flops=flops,
                                 gflop_s=flops / ms / 1e6, status="ok",
                                 note=f"{cfg.threads} threads, {cfg.shared_bytes} B shared"))
        rows.append(_rung_row(r, a, b, c, ref, flops, n, min_run_time, deadline, time_limit))
    for row in rows:
        if isinstance(row["median_ms"], float) and row["experiment"] == "gemm":
            row["vs_fp32"] = lib_ms[False] / row["median_ms"] if False in lib_ms else None
            row["vs_tf32"] = lib_ms[True] / row["median_ms"] if True in lib_ms else None
    return [dict(row, device=_label(), device_kind=_device()) for row in rows]


def _rung_row(r, a, b, c, ref, flops, n, min_run_time, deadline, time_limit) -> dict:
    row = _row(experiment="gemm", item=r.title, rung=r.number, n=n, flops=flops,
               note=r.idea)
    if time_up(deadline):
        return dict(row, status=time_limit_status(time_limit))
    try:
        c.fill_(float("nan"))
        run = ladder.launcher(r.name, a, b, c)
        _, first_ms = _once(run)
        row["rel_err"] = _rel_err(c, ref)
        ms, iqr, calls = _timed(run, min_run_time, r.name, first_ms)
    except Exception as exc:  # noqa: BLE001 - one rung's failure is a row, not the end
        return dict(row, status=f"failed: {type(exc).__name__}: {exc}")
    return dict(row, median_ms=ms, iqr_ms=iqr, calls=calls, gflop_s=flops / ms / 1e6,
                status=_status())


# ------------------------------------------------------------------------------ im2col, col2im

_IM2COL = (("im2col", "im2col_kernel", "im2col_window_kernel"),
           ("col2im", "col2im_kernel", "col2im_window_kernel"))


def im2col_rows(layers: tuple[ConvConfig, ...], min_run_time: float = 0.2, *, deadline=None,
                time_limit=None) -> list[dict]:
    """im2col and col2im, first kernel then window kernel, at each layer: kernel time, bytes
    read and written (each array once), GB/s; the window kernel's result compared with the
    first kernel's (a copy: they must agree exactly)."""
    rows = []
    dev = arrays.cuda_device()
    for cfg in layers:
        gen = torch.Generator(device=dev).manual_seed(1)
        x = torch.randn(cfg.x_shape, device=dev, generator=gen)
        cols_shape = (cfg.c * cfg.r * cfg.s, cfg.n * cfg.p * cfg.q)
        cols_bytes, x_bytes = 4 * math.prod(cols_shape), 4 * math.prod(cfg.x_shape)
        for op, first, window in _IM2COL:
            src = x if op == "im2col" else torch.randn(cols_shape, device=dev, generator=gen)
            read, written = (x_bytes, cols_bytes) if op == "im2col" else (cols_bytes, x_bytes)
            outs = {}
            for kernel in (first, window):
                row = _row(experiment=op, item=kernel, layer=cfg.name or str(cfg),
                           n=cfg.n, bytes_read=read, bytes_written=written)
                if time_up(deadline):
                    rows.append(dict(row, status=time_limit_status(time_limit)))
                    continue
                dst = arrays.poisoned(cols_shape if op == "im2col" else cfg.x_shape, dev)
                try:
                    run = unroll.launcher(kernel, src, dst, cfg)
                    _, first_ms = _once(run)
                    outs[kernel] = dst.clone() if kernel == first else dst
                    ms, iqr, calls = _timed(run, min_run_time, kernel, first_ms)
                except Exception as exc:  # noqa: BLE001
                    rows.append(dict(row, status=f"failed: {type(exc).__name__}: {exc}"))
                    continue
                rows.append(dict(row, median_ms=ms, iqr_ms=iqr, calls=calls,
                                 gb_s=(read + written) / ms / 1e6,
                                 gb_s_written=written / ms / 1e6, status=_status()))
            if len(outs) == 2:
                rows[-1]["rel_err"] = _rel_err(outs[window], outs[first])
            del outs
    return [dict(row, device=_label(), device_kind=_device()) for row in rows]


# ----------------------------------------------------------------------------- direct backward


def direct_rows(layers: tuple[ConvConfig, ...], min_run_time: float = 0.2, *, deadline=None,
                time_limit=None) -> list[dict]:
    """The direct strategy's backward kernels timed apart: dx and dW by the first (naive)
    kernels and by the new ones, at each layer; each result's error against torch's backward
    in FP32 (TF32 off)."""
    rows = []
    dev = arrays.cuda_device()
    for cfg in layers:
        gen = torch.Generator(device=dev).manual_seed(2)
        x = torch.randn(cfg.x_shape, device=dev, generator=gen)
        w = torch.randn(cfg.w_shape, device=dev, generator=gen)
        dy = torch.randn(cfg.y_shape, device=dev, generator=gen)
        with tf32_mode(False):
            want_dx, want_dw = torch.ops.aten.convolution_backward(
                dy, x, w, None, [cfg.stride_h, cfg.stride_w], [cfg.pad_h, cfg.pad_w],
                [cfg.dil_h, cfg.dil_w], False, [0, 0], cfg.groups, [True, True, False])[:2]
        flops = 2 * math.prod(cfg.y_shape) * cfg.c * cfg.r * cfg.s
        for item, call, want in _direct_calls(x, w, dy, cfg, want_dx, want_dw):
            row = _row(experiment="direct-backward", item=item, layer=cfg.name, n=cfg.n,
                       flops=flops)
            if time_up(deadline):
                rows.append(dict(row, status=time_limit_status(time_limit)))
                continue
            try:
                got, first_ms = _once(call)
                err = _rel_err(got, want)
                ms, iqr, calls = _timed(call, min_run_time, item, first_ms)
            except Exception as exc:  # noqa: BLE001
                rows.append(dict(row, status=f"failed: {type(exc).__name__}: {exc}"))
                continue
            rows.append(dict(row, median_ms=ms, iqr_ms=iqr, calls=calls,
                             gflop_s=flops / ms / 1e6, rel_err=err, status=_status()))
    return [dict(row, device=_label(), device_kind=_device()) for row in rows]


def _direct_calls(x, w, dy, cfg, want_dx, want_dw):
    """(item, call returning the gradient, expected) for each backward kernel there is."""
    calls = []
    first = getattr(direct, "backward_first_cuda", None)
    if first is not None:
        calls += [("dx, first kernel", lambda: first(x, w, dy, cfg, "dx"), want_dx),
                  ("dW, first kernel", lambda: first(x, w, dy, cfg, "dw"), want_dw)]
    calls += [("dx", lambda: direct.backward_dx_cuda(w, dy, cfg), want_dx),
              ("dW", lambda: direct.backward_dw_cuda(x, dy, cfg), want_dw)]
    return calls


def dw_gemm_rows(layers: tuple[ConvConfig, ...], min_run_time: float = 0.2, *, deadline=None,
                 time_limit=None) -> list[dict]:
    """The weight-gradient GEMM of im2col + GEMM, dW = dY (K, NPQ) @ cols^T, by our split-K
    kernel and by cuBLAS (FP32, and TF32), at each layer; errors against float64."""
    rows = []
    dev = arrays.cuda_device()
    for cfg in layers:
        gen = torch.Generator(device=dev).manual_seed(3)
        crs, npq = cfg.c * cfg.r * cfg.s, cfg.n * cfg.p * cfg.q
        dy2 = torch.randn((cfg.k, npq), device=dev, generator=gen)
        cols = torch.randn((crs, npq), device=dev, generator=gen)
        ref = dy2.double() @ cols.double().t()
        flops = 2 * cfg.k * crs * npq
        splits, chunk = ladder.splitk_plan(cfg.k, crs, npq)
        lib = "cuBLAS" if backend.MODE == "gpu" else "torch on the CPU"
        calls = (("split-K (ours)", lambda: ladder.gemm_nt(dy2, cols), False),
                 (f"{lib} FP32", lambda: dy2 @ cols.t(), False),
                 (f"{lib} TF32", lambda: dy2 @ cols.t(), True))
        for item, call, tf32 in calls:
            row = _row(experiment="dw-gemm", item=item, layer=cfg.name, n=cfg.n, flops=flops,
                       note=f"M={cfg.k}, N={crs}, K={npq}" + (
                           f"; {splits} splits of {chunk}" if item.startswith("split") else ""))
            if time_up(deadline):
                rows.append(dict(row, status=time_limit_status(time_limit)))
                continue
            with tf32_mode(tf32):
                got, first_ms = _once(call)
                err = _rel_err(got, ref)
                ms, iqr, calls_ = _timed(call, min_run_time, item, first_ms)
            rows.append(dict(row, median_ms=ms, iqr_ms=iqr, calls=calls_,
                             gflop_s=flops / ms / 1e6, rel_err=err, status=_status()))
        fp32 = [r["median_ms"] for r in rows[-3:] if r["item"].endswith("FP32") and r["median_ms"]]
        tf32 = [r["median_ms"] for r in rows[-3:] if r["item"].endswith("TF32") and r["median_ms"]]
        for r in rows[-3:]:
            if r["median_ms"]:
                r["vs_fp32"] = fp32[0] / r["median_ms"] if fp32 else None
                r["vs_tf32"] = tf32[0] / r["median_ms"] if tf32 else None
    return [dict(row, device=_label(), device_kind=_device()) for row in rows]


# ------------------------------------------------------------------------------------ the run


def _tiny() -> tuple[ConvConfig, ...]:
    """Two layers small enough for the simulator: odd sizes, and stride 2 with padding."""
    return (ConvConfig.from_study(b=1, i=7, f=3, k=3, s=1, c=2, name="tiny 3x3"),
            ConvConfig.from_study(b=2, i=6, f=2, k=3, s=2, c=1, padding=1, name="tiny s2"))


def measure(quick: bool = False, *, deadline=None, time_limit=None, save=None) -> list[dict]:
    """Every part of the climb, in order; ``save(rows)`` is called after each part (a run
    stopped later keeps what it measured). ``quick``: tiny sizes (the same path on a CPU)."""
    b128 = tuple(dataclasses.replace(layer, n=128) for layer in TABLE_I)
    if quick:
        n, im_layers, layers, t = 16, _tiny(), _tiny(), 0.001
    else:
        n, im_layers, layers, t = GEMM_N, (FIGURE4, b128[0], b128[2]), b128, 0.3
    rows: list[dict] = []
    limits = {"deadline": deadline, "time_limit": time_limit}
    parts = (lambda: gemm_rows(n, t, tune=not quick, **limits),
             lambda: im2col_rows(im_layers, t, **limits),
             lambda: direct_rows(layers, t, **limits),
             lambda: dw_gemm_rows(layers, t, **limits))
    with arrays.unpoisoned() if hasattr(arrays, "unpoisoned") else contextlib.nullcontext():
        for part in parts:
            rows += part()
            if save:
                save(rows)
    return rows


def recorded(**match) -> results.Recorded:
    """The climb as recorded in ``results/`` (GPU rows), labelled with the GPU and date."""
    return results.recorded(PREFIX, COMMAND, **match)


def starting_point() -> dict:
    """Where the climb starts, from the GPU recordings in ``results/`` made before it:
    notebook 01's tiled GEMM (rung 3, 16 x 16 tiles) and cuBLAS at n = 4096, FP32; and the first
    im2col kernel's time at the Figure 4 layer (the phases recording), with the bytes it wrote.

    Returns:
        ``{"gemm": {device, n, tiled_gflop_s, cublas_gflop_s, tiled_vs_cublas} or None,
        "im2col": {device, ms, bytes_written, gb_s_written} or None}``; each None where
        nothing is recorded (the device strings name GPU, driver and date).
    """
    out: dict = {"gemm": None, "im2col": None}
    rows = throughput.recorded(experiment="gemm", dtype="float32", size=GEMM_N).rows
    by = {(r["backend"], r["device"]): r for r in rows if r["status"] == "ok"}
    for (backend_, device), r in by.items():
        if backend_ == "numba-tiled" and ("torch", device) in by:
            lib = by[("torch", device)]["gflop_s"]
            out["gemm"] = {"device": device, "n": GEMM_N, "tiled_gflop_s": r["gflop_s"],
                           "cublas_gflop_s": lib, "tiled_vs_cublas": r["gflop_s"] / lib}
            break
    cols = 4 * FIGURE4.c * FIGURE4.r * FIGURE4.s * FIGURE4.n * FIGURE4.p * FIGURE4.q
    for r in phases.recorded("phases", layer="Figure 4").rows:
        if r["pass"] == "forward" and r["phase"] == "im2col" and r["status"] == "ok":
            out["im2col"] = {"device": r["device"], "ms": r["ms"], "bytes_written": cols,
                             "gb_s_written": cols / r["ms"] / 1e6}
            break
    return out


def main(argv: list[str] | None = None) -> int:
    """Prints the rows as a table; ``--save`` writes ``DIR/climb_<gpu>.csv`` + ``.json`` after
    each part. Returns 0; 1 for ``--save`` without a GPU (nothing saved) unless ``--quick``;
    2 for a bad argument."""
    start = time.monotonic()
    parser = argparse.ArgumentParser(prog="python -m helpers.experiments.climb",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--save", action="store_true", help="write DIR/climb_<gpu>.csv + .json")
    parser.add_argument("--out", type=results.writable_folder, default=str(results.RESULTS_DIR),
                        help="folder --save writes to (default: results/)")
    parser.add_argument("--time-limit", type=float, default=None,
                        help="seconds after which no new measurement starts")
    parser.add_argument("--quick", action="store_true",
                        help="tiny sizes: the same path in seconds (on a CPU, the simulator)")
    args = parser.parse_args(argv)
    if args.time_limit is not None and not args.time_limit > 0:
        print(f"--time-limit must be a positive number of seconds, got {args.time_limit:g}")
        return 2
    if backend.MODE != "gpu" and not args.quick:
        print(f"the climb times kernels on a GPU ({backend.MODE_REASON}); --quick runs the "
              f"same path at tiny sizes here")
        return 1 if args.save else 0
    deadline = None if args.time_limit is None else start + args.time_limit
    slug = results.slug(backend.info().gpu_name or "gpu") if backend.MODE == "gpu" else "cpu"
    paths: list = []

    def save(rows):
        if args.save:
            paths[:] = results.save(f"{PREFIX}{slug}", rows, directory=pathlib.Path(args.out),
                                    extra={"gemm_n": GEMM_N if not args.quick else 16})

    rows = measure(args.quick, deadline=deadline, time_limit=args.time_limit, save=save)
    print(format_table(rows))
    if paths:
        print("saved " + ", ".join(str(p) for p in paths))
    return 0


def format_table(rows: list[dict]) -> str:
    """The rows as text: what, layer, ms, GFLOP/s or GB/s written, the ratios, error, status."""
    lines = [f"{'experiment':<16}{'item':<34}{'layer':<9}{'ms':>10}{'GFLOP/s':>10}"
             f"{'GB/s wr':>9}{'xFP32':>7}{'xTF32':>7}{'rel err':>9}  status"]

    def f(v, fmt):
        return format(v, fmt) if isinstance(v, (int, float)) and v is not None else "-"

    for r in rows:
        lines.append(f"{r['experiment']:<16}{str(r['item'])[:33]:<34}{str(r['layer'] or '')[:8]:<9}"
                     f"{f(r['median_ms'], '.3f'):>10}{f(r['gflop_s'], ',.0f'):>10}"
                     f"{f(r['gb_s_written'], ',.0f'):>9}{f(r['vs_fp32'], '.3f'):>7}"
                     f"{f(r['vs_tf32'], '.3f'):>7}{f(r['rel_err'], '.1e'):>9}  "
                     f"{str(r['status'])[:40]}")
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
