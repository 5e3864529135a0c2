"""The memory-access experiments timed on a GPU, their recordings in ``results/``, and the
command line.

:func:`measure_coalescing` (:func:`strided_load_kernel` at each stride), :func:`measure_transpose`
(naive, shared 32 x 32, shared 32 x 33) and :func:`measure_divergence` (:func:`branch_kernel`
split by thread parity or by warp), all three by :func:`measure`; :func:`recorded` reads
``results/gpu_experiments_*``, :func:`save_gpu_experiments` writes them; :func:`main` prints the
explanations of :mod:`.explain`, then the timings. Times in ms, bandwidths in GB/s (1e9
bytes/s). Without a GPU a measurement raises :class:`GpuRequired`.

Source: Li et al., ICPP 2016, Section V-C and Figure 6.
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np
import torch
from numba import cuda

from helpers import results
from helpers.access_kernels import (
    BLOCK_ROWS,
    TILE_DIM,
    branch_kernel,
    strided_load_kernel,
    transpose_naive_kernel,
    transpose_shared_kernel,
)
from helpers.device import backend, timing
from helpers.device.arrays import grid_for
from helpers.device.progress import time_limit_status, time_up
from helpers.experiments.memory_access.explain import (
    _VARIANTS,
    _check_positive_int,
    explain_banks,
    explain_coalescing,
    explain_divergence,
)

__all__ = ["COMMAND", "PREFIX", "GpuRequired", "gpu_refusal", "main", "measure",
           "measure_coalescing", "measure_divergence", "measure_transpose", "recorded",
           "save_gpu_experiments"]

#: One line for ``--help``: what the command shows.
DESCRIPTION = ("How warps touch memory and branch: coalescing, shared-memory bank conflicts, "
               "warp divergence.")
#: File-name prefix of the GPU timings recorded in ``results/``.
PREFIX = "gpu_experiments_"
#: The command that records them, on a GPU.
COMMAND = "python -m helpers.experiments.memory_access --save"


class GpuRequired(RuntimeError):
    """Raised by a measurement that needs a real CUDA GPU when there is none."""


def gpu_refusal() -> str | None:
    """None on a GPU, else why GPU measurements cannot be made here (for messages)."""
    if backend.MODE == "gpu":
        return None
    return (f"no CUDA GPU here (mode {backend.MODE!r}: {backend.MODE_REASON}); the simulator "
            "compiles nothing and times nothing")


def _row(experiment: str, variant: str, x, size: int, t, bytes_moved: int | None) -> dict:
    return {"experiment": experiment, "variant": variant, "x": x, "size": size,
            "median_ms": t.median_ms, "iqr_ms": t.iqr_s * 1e3,
            "gb_s": (bytes_moved / t.median_s / 1e9) if bytes_moved else None,
            "device": t.device, "device_kind": "cuda", "status": "ok"}


def _require_gpu() -> None:
    reason = gpu_refusal()
    if reason:
        raise GpuRequired(f"{reason}. recorded() gives the timings recorded in results/; to "
                          f"record them on a GPU: {COMMAND}")


def _cuda_tensor(shape, fill: str = "rand"):
    t = (torch.rand(shape, device="cuda") if fill == "rand"
         else torch.full(shape, float("nan"), device="cuda"))
    return t, cuda.as_cuda_array(t)  # keep the tensor alive while the view is used


def measure_coalescing(strides=(1, 2, 4, 8, 16, 32), n: int = 1 << 23,
                       min_run_time: float = 0.1) -> list[dict]:
    """Time :func:`strided_load_kernel` on the GPU at each stride (1..64): ``n`` threads
    (1..2**26, 256 a block) each write one float32 of ``(n - 1) * stride + 1``; ``min_run_time``
    seconds of timed calls by :func:`helpers.device.timing.benchmark` (median, synchronised).

    Returns:
        One row per stride: ``experiment`` "coalescing", ``variant`` "stride S", ``x`` S,
        ``size`` n, ``median_ms``, ``iqr_ms``, ``gb_s`` (useful bytes, 4 read + 4 written per
        element, over the median time), ``device``, ``device_kind`` "cuda", ``status`` "ok".

    Raises:
        GpuRequired: no GPU. ValueError: an argument out of range.

    Source: study Figure 6 (global load efficiency).
    """
    strides = tuple(_check_positive_int("stride", s, 1, 64) for s in strides)
    n = _check_positive_int("n", n, 1, 1 << 26)
    _require_gpu()
    rows = []
    dst_t, dst = _cuda_tensor((n,), "nan")
    grid = grid_for(n, 256)
    for s in strides:
        src_t, src = _cuda_tensor(((n - 1) * s + 1,))

        def call(src=src, s=s):
            strided_load_kernel[grid, 256](src, dst, s)

        t = timing.benchmark(call, device="cuda", label=f"stride {s}", min_run_time=min_run_time)
        rows.append(_row("coalescing", f"stride {s}", s, n, t, 8 * n))
        del src_t, src
    del dst_t
    return rows


def measure_transpose(size: int = 8192, min_run_time: float = 0.1) -> list[dict]:
    """Time the three transposes of a (size, size) float32 matrix on the GPU: naive (column
    writes to global memory), shared tile of 32 columns (bank conflicts) and of 33 columns.
    Three rows (``experiment`` "transpose"; ``variant`` "naive", "shared 32 x 32", "shared 32 x
    33"; ``x`` the pitch or 0; ``gb_s``: 8 bytes an element over the median time); other keys
    as :func:`measure_coalescing`. Raises GpuRequired without a GPU, ValueError for a size
    outside 32..32768."""
    size = _check_positive_int("size", size, 32, 32768)
    _require_gpu()
    src_t, src = _cuda_tensor((size, size))
    dst_t, dst = _cuda_tensor((size, size), "nan")
    rec_i = cuda.device_array((2, 1, 1, 1), np.int32)  # not written: rec = 0
    grid = grid_for((size, size), (TILE_DIM, TILE_DIM))
    block = (TILE_DIM, BLOCK_ROWS)
    shared = transpose_shared_kernel[grid, block]
    calls = {
        ("naive", 0): lambda: transpose_naive_kernel[grid, block](src, dst),
        ("shared 32 x 32", 32): lambda: shared(src, dst, 32, rec_i, 0),
        ("shared 32 x 33", 33): lambda: shared(src, dst, 33, rec_i, 0),
    }
    rows = []
    for (variant, pitch), call in calls.items():
        t = timing.benchmark(call, device="cuda", label=variant, min_run_time=min_run_time)
        rows.append(_row("transpose", variant, pitch, size * size, t, 8 * size * size))
    del src_t, dst_t
    return rows


def measure_divergence(n: int = 1 << 22, iters: int = 256, threads_per_block: int = 128,
                       min_run_time: float = 0.1) -> list[dict]:
    """Time :func:`branch_kernel` on the GPU with the branch on thread parity and on the warp
    index (same work per thread, same memory traffic). Two rows (``experiment`` "divergence";
    ``variant`` "parity", "warp"; ``x`` iters; ``gb_s`` None: compute-bound); other keys as
    :func:`measure_coalescing`. Raises GpuRequired without a GPU, ValueError out of range."""
    n = _check_positive_int("n", n, 1, 1 << 28)
    iters = _check_positive_int("iters", iters, 1, 1 << 16)
    threads_per_block = _check_positive_int("threads_per_block", threads_per_block, 32, 1024)
    _require_gpu()
    x_t, x = _cuda_tensor((n,))
    out_t, out = _cuda_tensor((n,), "nan")
    path = cuda.device_array(n, np.int8)
    grid = grid_for(n, threads_per_block)
    rows = []
    for variant, (_label, by_warp) in _VARIANTS.items():
        def call(by_warp=by_warp):
            branch_kernel[grid, threads_per_block](x, out, path, iters, by_warp)

        t = timing.benchmark(call, device="cuda", label=variant, min_run_time=min_run_time)
        rows.append(_row("divergence", variant, iters, n, t, None))
    del x_t, out_t
    return rows


def measure(min_run_time: float = 0.1, *, deadline: float | None = None,
            time_limit: float | None = None) -> list[dict]:
    """The rows of :func:`measure_coalescing`, :func:`measure_transpose` and
    :func:`measure_divergence` on this GPU at their default sizes, in that order.

    An experiment not begun by ``deadline`` (a :func:`time.monotonic` value; None for none)
    gives one row with every figure None and the status
    :func:`helpers.device.progress.time_limit_status` of ``time_limit`` (seconds).

    Raises:
        GpuRequired: no GPU (:func:`recorded` gives those recorded in ``results/``).

    Source: study Figure 6.
    """
    _require_gpu()
    rows = []
    for experiment, run in (("coalescing", measure_coalescing), ("transpose", measure_transpose),
                            ("divergence", measure_divergence)):
        if time_up(deadline):
            rows.append({"experiment": experiment, "variant": "", "x": None, "size": None,
                         "median_ms": None, "iqr_ms": None, "gb_s": None,
                         "device": timing.device_label("cuda"), "device_kind": "cuda",
                         "status": time_limit_status(time_limit)})
        else:
            rows += run(min_run_time=min_run_time)
    return rows


def recorded(directory=None, *, every_gpu: bool = False) -> results.Recorded:
    """The timings of :func:`measure` recorded in ``results/gpu_experiments_*`` (or
    ``directory``): the newest recording's, or with ``every_gpu`` those of every GPU recorded.

    Returns:
        A :class:`helpers.results.Recorded`: rows as :func:`measure_coalescing` (``gb_s`` None
        where it does not apply; ``device`` the GPU and date); its ``note`` names them or, with
        no rows, says to run :data:`COMMAND` on a GPU. Never invents a time.
    """
    rec = results.recorded(PREFIX, COMMAND, directory=directory)
    rows = [dict(r, gb_s=None if r.get("gb_s") in ("", None) else r["gb_s"]) for r in rec.rows
            if str(r.get("status", "ok")) == "ok"]   # not the experiments a time limit skipped
    sets = rec.datasets
    if rows and not every_gpu:
        sets = [max(sets, key=lambda ds: ds.date)]
        rows = [r for r in rows if r["device"] == f"{sets[0].device}, {sets[0].date[:10]}"]
    return results.Recorded(rows, sets, rec.command)


def save_gpu_experiments(min_run_time: float = 0.1, directory=None, *,
                         deadline: float | None = None, time_limit: float | None = None,
                         command: str | None = None) -> tuple:
    """Write :func:`measure`'s rows on this GPU (``deadline`` and ``time_limit`` as there) with
    :func:`helpers.results.save` as ``gpu_experiments_<gpu>``, ``command`` (default
    :data:`COMMAND`) named as what made them. Returns the (csv, json) paths. Raises
    GpuRequired without a GPU."""
    rows = measure(min_run_time, deadline=deadline, time_limit=time_limit)
    name = PREFIX + results.slug(backend.info().gpu_name or "gpu")
    return results.save(name, rows, command=command or COMMAND, directory=directory)


def _print_timings(rows: list[dict]) -> None:
    print(f"{'experiment':<12}{'variant':<18}{'median (ms)':>12}{'IQR (ms)':>10}{'GB/s':>10}")
    for r in rows:
        if r["median_ms"] in (None, ""):
            print(f"{r['experiment']:<12}{r['status']}")
            continue
        gb = "" if r["gb_s"] in (None, "") else f"{r['gb_s']:.1f}"
        print(f"{r['experiment']:<12}{r['variant']:<18}{r['median_ms']:>12.4f}"
              f"{r['iqr_ms']:>10.4f}{gb:>10}")


def main(argv: list[str] | None = None) -> int:
    """``python -m helpers.experiments.memory_access [--save] [--out DIR] [--time-limit S]``:
    print the three explanations (simulator or GPU), then the GPU timings: measured now on a GPU
    (``--save`` also writes them to ``--out``, default ``results/``; an experiment not begun
    within ``--time-limit`` seconds is a row saying so), else those recorded in ``results/``.
    Returns :data:`helpers.results.REFUSED` (3) for ``--save`` without a GPU (said at once;
    nothing run, nothing saved), 2 for a bad argument, else 0."""
    start = time.monotonic()
    parser = argparse.ArgumentParser(prog="python -m helpers.experiments.memory_access",
                                     description=DESCRIPTION)
    parser.add_argument("--save", action="store_true",
                        help=f"on a GPU, write the timings to <out>/{PREFIX}<gpu>")
    parser.add_argument("--out", type=results.writable_folder, default=None, help="folder --save writes to (default results/)")
    parser.add_argument("--time-limit", type=float, default=None,
                        help="seconds after which no new experiment starts; the rest are rows "
                             "with status 'skipped: time limit ...'")
    args = parser.parse_args(argv)
    if args.time_limit is not None and not args.time_limit > 0:
        parser.error(f"--time-limit must be > 0 seconds, got {args.time_limit:g}")
    reason = gpu_refusal()
    if reason and args.save:
        print(f"nothing saved: {reason}")
        return results.REFUSED
    for explanation in (explain_coalescing(), explain_banks(), explain_divergence()):
        print(explanation, "\n")
    if reason:
        rec = recorded()
        print(f"GPU timings: {rec.note}")
        if rec:
            _print_timings(rec.rows)
        return 0
    limits = {"deadline": None if args.time_limit is None else start + args.time_limit,
              "time_limit": args.time_limit}
    command = " ".join(["python -m helpers.experiments.memory_access",
                        *(sys.argv[1:] if argv is None else argv)])
    paths = (save_gpu_experiments(directory=args.out, command=command, **limits) if args.save
             else ())
    _print_timings(results.load(paths[0].stem, paths[0].parent).rows if paths
                   else measure(**limits))
    if paths:
        print("saved", *paths)
    return 0
