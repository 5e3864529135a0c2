"""Speed and error of GEMM and convolution per precision: the measurement, its recordings in
``results/``, and the command line.

:func:`measure` times each (op, shape, strategy, precision) on one device and compares its
output with float64 (:mod:`.errors`), one row each with the keys of :data:`FIELDS`;
:func:`recorded` reads ``results/precision_*``; :func:`format_table` prints rows; :func:`main`
is ``python -m helpers.experiments.precision``. Times in ms, rates in TFLOP/s (10^12).

Source: NVIDIA A100 and H100 datasheets; the study's Table I layers (Li et al., ICPP 2016).
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Iterable, Sequence

import torch

from helpers import results
from helpers.conv import STRATEGIES
from helpers.device import backend
from helpers.device.arrays import unpoisoned
from helpers.device.progress import progress as progress_bar
from helpers.device.progress import time_limit_status, time_up
from helpers.device.timing import benchmark, device_label
from helpers.experiments.precision.errors import (
    CPU_GEMM_SIZES,
    CPU_LAYERS,
    GPU_GEMM_SIZES,
    GPU_LAYERS,
    _call,
    _check_n,
    _conv_reference,
    _gemm_reference,
    _inputs,
    _layer,
    _reason,
    relative_errors,
)
from helpers.experiments.precision.support import (
    DTYPES,
    OPS,
    PRECISIONS,
    _check,
    arithmetic,
    native,
    precision_mode,
)

__all__ = ["FIELDS", "PREFIX", "COMMAND", "DEFAULT_STRATEGIES", "DIRECT_EQUIV", "ERROR_BATCH",
           "measure", "recorded", "format_table", "main"]

#: Keys of every row of :func:`measure` (and of ``results/precision_*.csv``).
FIELDS = ("op", "layer", "shape", "strategy", "precision", "dtype", "allow_tf32", "flops",
          "median_ms", "iqr_ms", "tflop_s", "max_rel_error", "rms_rel_error", "error_batch",
          "native", "arithmetic", "device", "device_kind", "source", "status")

PREFIX = "precision_"
COMMAND = "python -m helpers.experiments.precision --save"

#: The convolution strategies :func:`measure` runs by default.
DEFAULT_STRATEGIES = ("reference", "im2col-gemm", "fft")
#: On a GPU the error of a convolution is taken on its first ERROR_BATCH images (the float64
#: reference runs on the CPU); the time is that of the whole batch.
ERROR_BATCH = 16


def _device_text(device: str) -> str:
    return "no CUDA GPU" if device == "cuda" and backend.MODE != "gpu" else device_label(device)


def _row(op, shape, strategy, precision, device, **values) -> dict:
    if op == "gemm":
        layer, text = f"n={shape}", f"{shape} x {shape} x {shape}"
    else:
        (b, i, f, k, s), layer = shape.study, shape.name or "layer"
        text = f"b={b} c={shape.c} i={i} f={f} k={k} s={s}"
    row = dict.fromkeys(FIELDS)
    row.update(op=op, layer=layer, shape=text, strategy=strategy, precision=precision,
               dtype=str(DTYPES[precision]).replace("torch.", ""),
               allow_tf32=precision == "tf32",
               flops=2 * shape**3 if op == "gemm" else shape.flops,
               native=native(precision, device), arithmetic=arithmetic(precision, device),
               device=_device_text(device), device_kind=device, source="none")
    row.update(values)
    return row


def _defaults(device: str, sizes, layers, strategies, min_run_time, error_batch):
    gpu = device == "cuda"
    sizes = list(GPU_GEMM_SIZES if gpu else CPU_GEMM_SIZES) if sizes is None else list(sizes)
    layers = list(GPU_LAYERS if gpu else CPU_LAYERS) if layers is None else list(layers)
    strategies = list(DEFAULT_STRATEGIES if strategies is None else strategies)
    for n in sizes:
        _check_n(n)
    for name in strategies:
        _check("strategy", name, tuple(STRATEGIES))
    min_run_time = (0.2 if gpu else 0.05) if min_run_time is None else min_run_time
    if isinstance(min_run_time, bool) or not isinstance(min_run_time, (int, float)) \
            or not min_run_time > 0:
        raise ValueError(f"min_run_time must be a number of seconds > 0, got {min_run_time!r}")
    error_batch = (ERROR_BATCH if gpu else None) if error_batch is None else error_batch
    if error_batch is not None:
        _check_n(error_batch, "error_batch")
    return sizes, [_layer(lay) for lay in layers], strategies, min_run_time, error_batch


def measure(ops: Iterable[str] = OPS, precisions: Iterable[str] = PRECISIONS, *,
            device: str | None = None, sizes: Iterable[int] | None = None,
            layers: Iterable | None = None, strategies: Iterable[str] | None = None,
            min_run_time: float | None = None, error_batch: int | None = None, seed: int = 0,
            deadline: float | None = None, time_limit: float | None = None,
            show_progress: bool = False) -> list[dict]:
    """Speed and error of each (op, shape, strategy, precision) on one device: one row each.

    Each GEMM size and layer gets one set of seeded float32 inputs, shared by its precisions
    and strategies. A point is timed by :func:`helpers.device.timing.benchmark` (median after
    a warm-up, the GPU synchronised; our outputs are NaN-filled in the warm-up and the checked
    call, not in the timed ones) inside :func:`precision_mode`, and its output compared with
    float64 as :func:`error_vs_float64` does.

    Args:
        ops, precisions: of :data:`OPS`, :data:`PRECISIONS`. device: ``"cpu"`` or ``"cuda"``
            (default ``"cuda"`` on a GPU). sizes: GEMM n; layers: ConvConfigs or Table I
            names; strategies: of ``helpers.conv.STRATEGIES`` (defaults: ``CPU_*`` or
            ``GPU_*`` constants, :data:`DEFAULT_STRATEGIES`).
        min_run_time: timed seconds per point (default 0.05 on the CPU, 0.2 on a GPU), > 0.
        error_batch: a convolution's error is taken on the first ``error_batch`` images of
            the timed output (default: all on the CPU, :data:`ERROR_BATCH` on a GPU).
        seed: of the inputs. deadline: a :func:`time.monotonic` value after which no point
            starts; time_limit: the seconds it came from (status text).

    Returns:
        Rows with the keys of :data:`FIELDS`: ``median_ms``, ``iqr_ms``, ``tflop_s`` (FLOPs /
        median; a convolution's FLOPs are direct convolution's 2NKPQCRS whatever the
        strategy), ``max_rel_error``, ``rms_rel_error``; ``native`` and ``arithmetic``
        (:func:`native`, :func:`arithmetic`); ``allow_tf32`` (the flags during the run);
        ``status`` ``"ok"``, or why the point was not measured (:func:`supports`,
        :func:`strategy_reason`, the strategy's own limits, a time limit, a failure) with
        the numbers None.

    Raises:
        ValueError: an unknown op, precision, strategy, device or layer; a size < 1;
            ``min_run_time`` not > 0; ``error_batch`` < 1 (all before anything runs).
    """
    device = device or ("cuda" if backend.MODE == "gpu" else "cpu")
    _check("device", device, ("cpu", "cuda"))
    ops, precisions = list(ops), list(precisions)
    for name, values, allowed in (("op", ops, OPS), ("precision", precisions, PRECISIONS)):
        for v in values:
            _check(name, v, allowed)
    sizes, layers, strategies, min_run_time, error_batch = _defaults(
        device, sizes, layers, strategies, min_run_time, error_batch)
    jobs = [("gemm", n, ["torch.matmul"]) for n in sizes if "gemm" in ops]
    jobs += [("conv", lay, strategies) for lay in layers if "conv" in ops]
    total = sum(len(s) for *_, s in jobs) * len(precisions)
    bar = progress_bar(total=total, desc="precision", disable=not show_progress, leave=False)
    rows = []
    try:
        for op, shape, names in jobs:
            cache: dict = {}
            for strategy in names:
                for precision in precisions:
                    rows.append(_point(op, shape, strategy, precision, device, cache,
                                       min_run_time, error_batch, seed, deadline, time_limit))
                    bar.update()
    finally:
        bar.close()
    return rows


def _point(op, shape, strategy, precision, device, cache, min_run_time, error_batch, seed,
           deadline, time_limit) -> dict:
    """One row of :func:`measure`; ``cache`` holds the shape's inputs and float64 result."""
    cfg = shape if op == "conv" else None
    if time_up(deadline):
        return _row(op, shape, strategy, precision, device, status=time_limit_status(time_limit))
    reason = _reason(op, precision, device, strategy, cfg)
    if reason:
        return _row(op, shape, strategy, precision, device, status=reason)
    try:
        if "inputs" not in cache:
            cache["inputs"] = _inputs(op, shape, seed)
        inputs = cache["inputs"]
        with precision_mode(precision):
            call = _call(op, precision, inputs, cfg, strategy, device)
            call()  # the warm-up; our outputs start as NaN, except in the timed calls
            with unpoisoned():
                timing = benchmark(call, device=device, label=f"{op} {precision}",
                                   warmup=0, min_run_time=min_run_time)
            y = call()  # the output checked against float64: poisoned again
        batch = min(error_batch or cfg.n, cfg.n) if op == "conv" else None
        y = y[:batch] if batch else y
        if "ref" not in cache:
            cache["ref"] = (_gemm_reference(inputs, device) if op == "gemm" else
                            _conv_reference(inputs[0][:batch], inputs[1], cfg))
        max_rel, rms_rel = relative_errors(y, cache["ref"])
        del call, y
    except Exception as exc:  # noqa: BLE001 - this point fails (out of memory, a refusal)
        return _row(op, shape, strategy, precision, device,
                    status=f"failed: {type(exc).__name__}: {exc}")
    row = _row(op, shape, strategy, precision, device, median_ms=timing.median_ms,
               iqr_ms=timing.iqr_s * 1e3, max_rel_error=max_rel, rms_rel_error=rms_rel,
               error_batch=batch, source="measured", status="ok")
    return dict(row, tflop_s=row["flops"] / timing.median_s / 1e12)


def recorded(op: str | None = None, directory=None, **match) -> results.Recorded:
    """The GPU rows recorded in ``results/precision_*`` (status ``"ok"``), each labelled with
    its GPU and date; its ``note`` says to run :data:`COMMAND` where there are none. ``op``:
    only ``"gemm"`` or ``"conv"`` rows (None: both); ``match``: further field values to keep.
    Raises ValueError: an unknown op."""
    if op is not None:
        _check("op", op, OPS)
        match["op"] = op
    return results.recorded(PREFIX, COMMAND, directory=directory, **{"status": "ok", **match})


#: The column that shows ``tflop_s`` under the name of its convention: the layer's direct FLOPs
#: (a GEMM's 2n^3, a convolution's 2NKPQCRS) over the time, whatever the strategy counts itself.
DIRECT_EQUIV = "direct_equiv_tflop_s"

DEFAULT_COLUMNS = ("op", "layer", "strategy", "precision", "median_ms", DIRECT_EQUIV,
                   "max_rel_error", "rms_rel_error", "native", "status")


def format_table(rows: Sequence[dict], columns: Sequence[str] = DEFAULT_COLUMNS) -> str:
    """Rows as a fixed-width text table (errors as ``1.2e-03``, other floats to 4 significant
    digits, None as ``-``); the column :data:`DIRECT_EQUIV` shows each row's ``tflop_s``."""
    def cell(key, v):
        if v is None or v == "":
            return "-"
        if isinstance(v, float):
            return f"{v:.1e}" if key.endswith("_error") else f"{v:.4g}"
        return f"{v:,}" if isinstance(v, int) and not isinstance(v, bool) else str(v)

    table = [list(columns)] + [[cell(c, r.get("tflop_s" if c == DIRECT_EQUIV else c))
                                for c in columns] for r in rows]
    widths = [max(len(line[j]) for line in table) for j in range(len(columns))]
    return "\n".join("  ".join(v.ljust(w) for v, w in zip(line, widths)).rstrip()
                     for line in table)


def main(argv: list[str] | None = None) -> int:
    """``python -m helpers.experiments.precision [--save] [--out DIR] [--quick]
    [--time-limit S] [--seed N]``: :func:`measure` with the device's defaults, printed.

    ``--save`` (GPU only; without one it returns 3, :data:`helpers.results.REFUSED`, at once)
    writes ``<out>/precision_<gpu>.csv`` + ``.json`` (default ``results/``) with the environment. Returns 0; 2 for bad
    arguments (an unwritable ``--out`` is refused before anything runs).
    """
    start = time.monotonic()
    parser = argparse.ArgumentParser(
        prog="python -m helpers.experiments.precision",
        description="Error against float64 and speed of GEMM and convolution in float32 (TF32 "
                    "off), TF32, bfloat16 and float16.")
    add = parser.add_argument
    add("--save", action="store_true", help=f"write results/{PREFIX}<gpu>.csv + .json (GPU)")
    add("--out", type=results.writable_folder, default=None, help="folder (default results/)")
    add("--quick", action="store_true", help="one size, one layer")
    add("--time-limit", type=float, default=None, dest="time_limit",
        help="seconds after which no further point starts")
    add("--seed", type=int, default=0, help="seed of the random inputs")
    args = parser.parse_args(argv)
    if args.time_limit is not None and not args.time_limit > 0:
        parser.error(f"--time-limit must be > 0 seconds, got {args.time_limit:g}")
    gpu = backend.MODE == "gpu" and torch.cuda.is_available()
    if args.save and not gpu:
        print(f"no CUDA GPU here ({backend.MODE_REASON}): nothing measured, nothing saved")
        return results.REFUSED
    device = "cuda" if gpu else "cpu"
    deadline = None if args.time_limit is None else start + args.time_limit
    quick = dict(sizes=(GPU_GEMM_SIZES if gpu else CPU_GEMM_SIZES)[:1],
                 layers=(GPU_LAYERS if gpu else CPU_LAYERS)[-1:]) if args.quick else {}
    print(f"measuring on {_device_text(device)}")
    rows = measure(device=device, seed=args.seed, deadline=deadline,
                   time_limit=args.time_limit, show_progress=True, **quick)
    print(format_table(rows))
    if not gpu:
        print(f"\n{recorded(directory=args.out).note}")
    if args.save:
        paths = results.save(f"{PREFIX}{results.slug(backend.info().gpu_name or 'gpu')}", rows,
                              directory=args.out)
        print("saved " + ", ".join(str(p) for p in paths))
    return 0

