"""CPU vs GPU throughput: memory-bound elementwise work (GB/s) and compute-bound GEMM (GFLOP/s).

Two experiments, each a list of rows (dicts) ready for a chart or a CSV, taught in notebook 01:
:func:`elementwise_sweep` (ReLU reads n and writes n elements, SAXPY reads 2n and writes n; in
GB/s of memory traffic) and :func:`gemm_sweep` (square C = A @ B, n x n, 2 n^3 FLOPs; in
GFLOP/s). Backends (:func:`backends_for`): on the CPU NumPy and torch; on a GPU torch (cuBLAS
and torch's elementwise kernels) and our Numba CUDA kernels (:mod:`helpers.elementwise`, and
:mod:`helpers.conv.gemm`'s tiled and naive GEMM). Data is placed on the device first, so
transfers are not timed. Points not measured are rows whose ``status`` says why, not gaps.

Command line (:func:`main`): ``python -m helpers.experiments.throughput [--out DIR]
[--devices cpu,cuda] [--time-limit S] [--quick] [--name STEM]``.

Source: the workbook's CPU-vs-GPU sources ("How GPUs accelerate deep learning"; "Why GPUs are
important in deep learning?"), and the roofline model (Williams, Waterman, Patterson, 2009).
"""

from __future__ import annotations

import argparse
import math
import reprlib
import time
from collections.abc import Iterable

import numpy as np

from helpers import results
from helpers.device import backend, host
from helpers.device.progress import progress as progress_bar
from helpers.device.progress import time_limit_status, time_up
from helpers.device.timing import benchmark, device_label
from helpers.experiments.throughput.budget import BackendBudget
from helpers.experiments.throughput.calls import (
    DTYPES,
    ELEMENTWISE_OPS,
    NUMBA_GEMMS,
    SUPPORTED,
    bytes_per_size,
    elementwise_call,
    gemm_call,
    torch_dtype,
)
from helpers.experiments.throughput.calls import row as _row
from helpers.paper import TABLE_I, im2col_gemm

__all__ = [
    "COMMAND",
    "DTYPES",
    "ELEMENTWISE_OPS",
    "GEMM_SIZES",
    "PREFIX",
    "backends_for",
    "bandwidth_peaks",
    "check_sizes",
    "elementwise_sweep",
    "gemm_sweep",
    "log_sizes",
    "main",
    "measured_bandwidth",
    "recorded",
    "ridge_point",
    "roofline_sides",
    "rooflines",
]

#: results/ file-name prefix of recorded runs, and the command that records one (on a GPU).
PREFIX = "01_throughput_"
COMMAND = "python -m helpers.experiments.throughput --out results"

#: GEMM sizes n of a full run (:func:`main` without ``--quick``): 64 .. 8192, 4096 included.
GEMM_SIZES = tuple(2**j for j in range(6, 14))

# the point layer lives in .calls; these names stay importable from here
_SUPPORTED, _torch_dtype = SUPPORTED, torch_dtype
_elementwise_call, _gemm_call, _bytes_per_size = elementwise_call, gemm_call, bytes_per_size


def backends_for(device: str, experiment: str) -> list[str]:
    """Backends measured on ``device`` (``"cpu"``, ``"cuda"``) for ``"elementwise"`` or ``"gemm"``.

    On ``"cuda"`` the list is empty unless a real GPU is present: under the Numba CUDA
    simulator no GPU rows are measured (they would time a Python interpreter). On a GPU,
    GEMM is torch's (cuBLAS) and our Numba kernels ``numba-tiled`` and ``numba-naive``
    (:mod:`helpers.conv.gemm`, float32 only).
    """
    if experiment not in ("elementwise", "gemm"):
        raise ValueError(f"experiment must be 'elementwise' or 'gemm', got {experiment!r}")
    if device == "cpu":
        return ["numpy", "torch"]
    if device == "cuda":
        if backend.MODE != "gpu":
            return []
        return ["torch", "numba"] if experiment == "elementwise" else ["torch", *NUMBA_GEMMS]
    raise ValueError(f"device must be 'cpu' or 'cuda', got {device!r}")


def log_sizes(lo: float, hi: float, per_decade: int = 1) -> list[int]:
    """Integer sizes from lo to hi, evenly spaced on a log scale, ``per_decade`` per factor 10."""
    lo, hi = int(lo), int(hi)
    if lo < 1 or hi < lo:
        raise ValueError(f"need 1 <= lo <= hi, got lo={lo}, hi={hi}")
    steps = max(1, round(math.log10(hi / lo) * per_decade)) if hi > lo else 0
    points = {round(lo * (hi / lo) ** (j / steps)) for j in range(steps + 1)} if steps else {lo}
    return sorted(points)


def memory_limit_bytes(device: str) -> int:
    """How much memory a sweep may use on ``device``: half the available RAM on the CPU, 80% of
    the free GPU memory on a GPU."""
    if device == "cuda" and backend.MODE == "gpu":
        import torch

        free, _ = torch.cuda.mem_get_info()
        return int(free * 0.8)
    return int(host.ram_available_bytes() * 0.5)


def check_sizes(experiment: str, op: str, lo: int, hi: int, dtype: str, device: str) -> None:
    """Refuse a size range up front with the reason: what a widget shows instead of a chart.

    Args:
        experiment: ``"elementwise"`` (sizes are elements) or ``"gemm"`` (sizes are n of n x n).
        op: ``"relu"`` or ``"saxpy"`` for elementwise; ignored for GEMM.
        lo, hi: smallest and largest size.
        dtype: a key of :data:`DTYPES`.
        device: ``"cpu"`` or ``"cuda"``.

    Raises:
        ValueError: sizes below 1, lo > hi, unknown op or dtype, or operands for ``hi`` larger
            than :func:`memory_limit_bytes` (the message gives both numbers).
    """
    if experiment not in ("elementwise", "gemm"):
        raise ValueError(f"experiment must be 'elementwise' or 'gemm', got {experiment!r}")
    if experiment == "elementwise" and op not in ELEMENTWISE_OPS:
        raise ValueError(f"op must be one of {sorted(ELEMENTWISE_OPS)}, got {op!r}")
    if dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {sorted(DTYPES)}, got {dtype!r}")
    what = "elements" if experiment == "elementwise" else "matrix size n"
    for name, v in (("smallest size", lo), ("largest size", hi)):
        if not isinstance(v, (int, np.integer)) or isinstance(v, bool):
            raise ValueError(f"{name} must be a whole number of {what}, got {v!r}")
        if v < 1:
            raise ValueError(f"{name} must be at least 1 ({what}), got {v}")
    if lo > hi:
        raise ValueError(f"smallest size ({lo:,}) must not exceed largest size ({hi:,})")
    need = _bytes_per_size(experiment, op, hi, DTYPES[dtype])
    limit = memory_limit_bytes(device)
    if need > limit:
        where = device_label(device)
        raise ValueError(
            f"size {hi:,} needs {need / 2**30:.1f} GiB for its arrays in {dtype}, more than "
            f"the {limit / 2**30:.1f} GiB this sweep may use on {where}. Choose a smaller largest "
            "size.")


def _check_seconds(**values: float) -> None:
    for name, v in values.items():
        if isinstance(v, bool) or not isinstance(v, (int, float, np.integer, np.floating)) \
                or not (v > 0 and (isinstance(v, (int, np.integer)) or math.isfinite(v))):
            raise ValueError(f"{name} must be a number of seconds > 0, got {reprlib.repr(v)}")


def _sweep(experiment: str, op: str, sizes: Iterable[int], devices: Iterable[str], dtype: str,
           min_run_time: float, point_budget_s: float, progress: bool,
           backends: Iterable[str] | None, deadline: float | None,
           time_limit: float | None) -> list[dict]:
    sizes = sorted(int(n) for n in sizes)
    backends = None if backends is None else set(backends)
    jobs = []
    for device in devices:
        for name in backends_for(device, experiment):
            if backends is None or name in backends:
                jobs.append((device, name))
    budgets = [BackendBudget(experiment, op, name, device, dtype, min_run_time, sizes[0])
               for device, name in jobs]
    rows: dict[tuple[int, int], dict] = {}
    bar = progress_bar(total=len(jobs) * len(sizes), desc=f"{experiment} {op}",
                       disable=not progress, leave=False)
    # NumPy's BLAS threads keep spinning for about half a second after a GEMM and slow the
    # torch calls that follow (a 32 x 32 GEMM from 0.02 to 20 ms on 2 cores); torch's threads
    # do not slow NumPy's.
    # So torch is measured before NumPy on each device; the rows keep the order of ``jobs``.
    order = sorted(range(len(jobs)), key=lambda j: (jobs[j][0], jobs[j][1] == "numpy"))
    try:
        for j in order:
            device, name = jobs[j]
            for k, n in enumerate(sizes):
                timing = None
                if time_up(deadline):
                    status = time_limit_status(time_limit)
                elif dtype not in SUPPORTED[(name, experiment)]:
                    status = f"unsupported: {name} has no {dtype} {experiment}"
                else:
                    check_sizes(experiment, op, n, n, dtype, device)
                    try:
                        status, timing = budgets[j].run(n, point_budget_s, deadline, time_limit)
                    except Exception as exc:  # noqa: BLE001  (a Numba compile or CUDA driver
                        # error, an out-of-memory: this point fails, the others are measured)
                        status = f"failed: {type(exc).__name__}: {exc}"
                rows[j, k] = _row(experiment, op, name, device, dtype, n, timing, status)
                bar.update()
    finally:
        bar.close()
    return [rows[j, k] for j in range(len(jobs)) for k in range(len(sizes))]


def elementwise_sweep(op: str, sizes: Iterable[int], devices: Iterable[str] = ("cpu",),
                      dtype: str = "float32", min_run_time: float = 0.05,
                      point_budget_s: float = 3.0, progress: bool = True,
                      backends: Iterable[str] | None = None, *, deadline: float | None = None,
                      time_limit: float | None = None) -> list[dict]:
    """Measure ReLU or SAXPY over sizes on each device and backend.

    Args:
        op: ``"relu"`` or ``"saxpy"``.
        sizes: element counts, >= 1.
        devices: any of ``"cpu"``, ``"cuda"`` (``"cuda"`` measures only on a real GPU).
        dtype: ``"float32"``, ``"float16"`` or ``"bfloat16"``; unsupported backend/dtype pairs
            give rows with that status.
        min_run_time: seconds of timed calls per point (:func:`helpers.device.timing.benchmark`).
        point_budget_s: seconds one point may take. Sizes are measured in increasing order,
            size by size across the backends; a point whose cost is estimated over this budget
            is skipped, the first size included, and its row's ``status`` gives the estimate
            (:mod:`helpers.experiments.throughput.budget`: the first size's from a small
            calibration call in the same dtype on the same device, the others' from the last
            size measured; if the warm-up call shows the point over budget, it stops there).
        progress: show a progress bar.
        backends: restrict to these backends (default: all for the device).
        deadline: a :func:`time.monotonic` value; no point starts after it, nor one
            estimated to end after it, and the points not measured are rows whose status
            starts with :func:`helpers.device.progress.time_limit_status` of ``time_limit``
            (seconds, only for that text; "skipped: time limit"). None: no deadline.

    Returns:
        One row per (device, backend, size): ``experiment, op, backend, device_kind, device,
        dtype, size, bytes`` (memory traffic), ``flops``, ``median_s, iqr_s, min_s, max_s,
        repeats, gb_s`` (traffic / median, 1e9 bytes/s), ``gflop_s, status`` (``"ok"`` or why
        the point was not measured).

    Raises:
        ValueError: unknown op, dtype or device, sizes that do not fit in memory, or
            ``min_run_time`` or ``point_budget_s`` not a number > 0.
    """
    sizes, devices = list(sizes), list(devices)
    _check_seconds(min_run_time=min_run_time, point_budget_s=point_budget_s)
    if not sizes:
        raise ValueError("sizes must not be empty")
    for device in devices:
        check_sizes("elementwise", op, min(sizes), max(sizes), dtype, device)
    return _sweep("elementwise", op, sizes, devices, dtype, min_run_time, point_budget_s,
                  progress, backends, deadline, time_limit)


def gemm_sweep(sizes: Iterable[int], devices: Iterable[str] = ("cpu",), dtype: str = "float32",
               min_run_time: float = 0.05, point_budget_s: float = 3.0, progress: bool = True,
               backends: Iterable[str] | None = None, *, deadline: float | None = None,
               time_limit: float | None = None) -> list[dict]:
    """Measure square GEMM (n x n times n x n) over sizes n, in GFLOP/s (2 n^3 FLOPs per call).

    Arguments and rows as :func:`elementwise_sweep` (``op`` is ``"gemm"``, ``bytes`` is
    ``3 n^2`` elements: A and B read once, C written once). On a GPU the backends include our
    Numba kernels ``numba-tiled`` and ``numba-naive`` (float32; other dtypes give
    ``unsupported`` rows) beside torch's cuBLAS.
    """
    sizes, devices = list(sizes), list(devices)
    _check_seconds(min_run_time=min_run_time, point_budget_s=point_budget_s)
    if not sizes:
        raise ValueError("sizes must not be empty")
    for device in devices:
        check_sizes("gemm", "gemm", min(sizes), max(sizes), dtype, device)
    return _sweep("gemm", "gemm", sizes, devices, dtype, min_run_time, point_budget_s,
                  progress, backends, deadline, time_limit)


def measured_bandwidth(rows: list[dict], device_kind: str = "cpu") -> float | None:
    """Best measured GB/s (as bytes/s) at the largest elementwise size, far beyond the caches:
    the device's achievable memory bandwidth. None if no such row was measured."""
    ok = [r for r in rows if r["experiment"] == "elementwise" and r["status"] == "ok"
          and r["device_kind"] == device_kind]
    if not ok:
        return None
    largest = max(r["size"] for r in ok)
    return max(r["gb_s"] for r in ok if r["size"] == largest) * 1e9


def recorded(prefix: str = PREFIX, **match) -> results.Recorded:
    """The GPU rows of every recorded run (``results/01_throughput_*``), each labelled with its
    GPU and date, filtered by ``match`` (e.g. ``op="relu", dtype="float32"``); its
    ``datasets`` carry each GPU's datasheet peaks for :func:`bandwidth_peaks` and
    :func:`rooflines`."""
    return results.recorded(prefix, COMMAND, **match)


def _gpu_environments(references) -> list[dict]:
    """The environment of the GPU here, or of the GPUs that made the reference datasets
    (a :class:`helpers.results.Recorded` or a list of datasets)."""
    if backend.MODE == "gpu":
        return [backend.info().as_dict()]
    datasets = references.datasets if isinstance(references, results.Recorded) else references
    return [ds.meta.get("environment", {}) for ds in datasets]


def bandwidth_peaks(references=(), cpu_rows: list[dict] = ()) -> list[tuple[str, float]]:
    """(label, bytes/s) lines for a throughput chart: the CPU's measured bandwidth (from
    ``cpu_rows``) and the datasheet bandwidth of the GPU here or of the reference GPUs."""
    peaks = []
    cpu_bw = measured_bandwidth(list(cpu_rows)) if cpu_rows else None
    if cpu_bw:
        peaks.append((f"{backend.info().cpu_label}, measured", cpu_bw))
    for env in _gpu_environments(references):
        if env.get("gpu_peak_bandwidth_bytes_s"):
            peaks.append((f"{env['gpu_name']} datasheet", env["gpu_peak_bandwidth_bytes_s"]))
    return peaks


def rooflines(references=(), cpu_bandwidth: float | None = None,
              compare: tuple[str, ...] = ()) -> list[tuple[str, float, float, str]]:
    """Roofs for :func:`helpers.figures.nb01_throughput.roofline_figure`: (label, peak FLOP/s,
    bytes/s, colour): the GPU here or the reference GPUs, the study's K40c and the GPUs named in
    ``compare`` (e.g. ``("H100 SXM",)``; skipped if unknown to :func:`backend.lookup_gpu` or
    already drawn), from datasheets; this CPU (peak estimated from cores x clock x vector
    width, bandwidth measured). Each label says where its numbers come from.
    """
    roofs = []
    for env in _gpu_environments(references):
        if env.get("gpu_peak_fp32_flops") and env.get("gpu_peak_bandwidth_bytes_s"):
            roofs.append((f"{env['gpu_name']} (datasheet)", env["gpu_peak_fp32_flops"],
                          env["gpu_peak_bandwidth_bytes_s"], "#0072B2"))
    k40 = backend.lookup_gpu("Tesla K40c")
    roofs.append(("Tesla K40c, the study's GPU (datasheet)", k40.fp32_flops,
                  k40.bandwidth_bytes_s, "#999999"))
    drawn = {(peak, bw) for _, peak, bw, _ in roofs}
    for name in compare:
        spec = backend.lookup_gpu(name)
        if spec and (spec.fp32_flops, spec.bandwidth_bytes_s) not in drawn:
            roofs.append((f"{spec.name} (datasheet, for comparison)", spec.fp32_flops,
                          spec.bandwidth_bytes_s, "#56B4E9"))
    info = backend.info()
    if info.cpu_peak_fp32_flops_estimate and cpu_bandwidth:
        roofs.append((f"{info.cpu_label} (estimated peak, measured bandwidth)",
                      info.cpu_peak_fp32_flops_estimate, cpu_bandwidth, "#E69F00"))
    return roofs


def ridge_point(peak_flops: float, bandwidth_bytes_s: float) -> float:
    """The roofline's ridge point, ``peak / bandwidth`` in FLOP/byte: below it a kernel is
    memory-bound, above it compute-bound. Raises ValueError unless both are > 0."""
    if not (peak_flops > 0 and bandwidth_bytes_s > 0):
        raise ValueError(f"peak FLOP/s and bandwidth must be > 0, got {peak_flops!r} and "
                         f"{bandwidth_bytes_s!r}")
    return peak_flops / bandwidth_bytes_s


def roofline_sides(roofs, gemms) -> list[dict]:
    """Which side of each roof's ridge each GEMM lies on (ValueError: a roof's peak or bandwidth
    is not > 0).

    Args:
        roofs: (label, peak FLOP/s, bytes/s, colour) tuples from :func:`rooflines`.
        gemms: (name, intensity in FLOP/byte) pairs, e.g. the Table I layers' im2col GEMMs
            (:func:`helpers.paper.im2col_gemm`).

    Returns:
        One dict per (roof, GEMM): ``roof, gemm, intensity, ridge`` (FLOP/byte), ``side``
        (``"left"``: memory-bound there; ``"right"``: compute-bound), ``bound_gflop_s`` (GFLOP/s).
    """
    sides = []
    for label, peak, bw, _ in roofs:
        ridge = ridge_point(peak, bw)
        for name, intensity in gemms:
            sides.append({"roof": label, "gemm": name, "intensity": intensity, "ridge": ridge,
                          "side": "left" if intensity < ridge else "right",
                          "bound_gflop_s": min(peak, intensity * bw) / 1e9})
    return sides


def table1_gemm_rows(dtype: str = "float32", min_run_time: float = 0.2, *,
                     deadline: float | None = None,
                     time_limit: float | None = None) -> list[dict]:
    """Time the GEMMs that the study's Table I layers become under im2col, on the GPU only.

    Returns an empty list without a real GPU (the largest, Conv1's, is 124 GFLOP: minutes on a
    laptop CPU). ``deadline`` and ``time_limit`` as :func:`elementwise_sweep`.
    """

    if backend.MODE != "gpu":
        return []
    import torch

    rows = []
    for layer in TABLE_I:
        g = im2col_gemm(layer, DTYPES[dtype])
        row = {
            "experiment": "table1-gemm", "op": layer.name, "backend": "torch",
            "device_kind": "cuda",
            "device": device_label("cuda"), "dtype": dtype, "size": g.n, "bytes": g.min_bytes,
            "flops": g.flops, "median_s": math.nan, "iqr_s": math.nan, "min_s": math.nan,
            "max_s": math.nan, "repeats": 0, "gb_s": math.nan, "gflop_s": math.nan,
            "status": time_limit_status(time_limit)}
        if time_up(deadline):
            rows.append(row)
            continue
        try:
            a = torch.randn(g.m, g.k, device="cuda", dtype=_torch_dtype(dtype))
            b = torch.randn(g.k, g.n, device="cuda", dtype=_torch_dtype(dtype))
            t = benchmark(torch.matmul, a, b, device="cuda", label=g.name,
                          min_run_time=min_run_time)
        except Exception as exc:  # noqa: BLE001  (this GEMM fails, not the recording)
            rows.append(dict(row, status=f"failed: {type(exc).__name__}: {exc}"))
            continue
        rows.append(dict(
            row, median_s=t.median_s, iqr_s=t.iqr_s, min_s=t.min_s, max_s=t.max_s,
            repeats=t.repeats, gb_s=g.min_bytes / t.median_s / 1e9,
            gflop_s=g.flops / t.median_s / 1e9, status=f"ok: M={g.m} N={g.n} K={g.k}"))
        del a, b
    return rows


def _devices_arg(text: str | None) -> list[str]:
    """``--devices`` as a list (default: the CPU, plus cuda on a real GPU)."""
    if text is None:
        return ["cpu", "cuda"] if backend.MODE == "gpu" else ["cpu"]
    devices = []
    for part in (p.strip() for p in text.split(",")):
        if part not in ("cpu", "cuda"):
            raise ValueError(f"--devices must be a comma list of cpu and cuda, got {part!r}")
        if part not in devices:
            devices.append(part)
    return devices


def main(argv: list[str] | None = None) -> int:
    """Command line: measure, writing ``DIR/01_throughput_<device>.csv`` and ``.json`` after
    each sweep.

    ``python -m helpers.experiments.throughput [--out DIR] [--devices cpu,cuda]
    [--time-limit S] [--quick] [--name STEM]``: ``<device>`` is the GPU's name when cuda is
    measured, else the CPU's; ``--quick`` measures small sizes only. Returns 0; 1 for
    ``--devices cuda`` without a GPU (nothing measured, nothing saved); 2 for bad arguments.
    """
    start = time.monotonic()
    parser = argparse.ArgumentParser(
        prog="python -m helpers.experiments.throughput",
        description="Measure elementwise GB/s and GEMM GFLOP/s on the CPU and (if any) the GPU.")
    parser.add_argument("--out", type=results.writable_folder,
                        default=str(results.RESULTS_DIR),
                        help="output folder (default: results/)")
    parser.add_argument("--name", default=None,
                        help="file stem (default: 01_throughput_<device>)")
    parser.add_argument("--devices", default=None,
                        help="comma list of cpu and cuda (default: cpu, plus cuda on a GPU)")
    parser.add_argument("--time-limit", type=float, default=None,
                        help="seconds after which no new point starts; the rest are rows with "
                             "status 'skipped: time limit ...'")
    parser.add_argument("--quick", action="store_true", help="small sizes only (a smoke test)")
    args = parser.parse_args(argv)
    try:
        devices = _devices_arg(args.devices)
    except ValueError as exc:
        parser.error(str(exc))
    if args.time_limit is not None and not args.time_limit > 0:
        parser.error(f"--time-limit must be a positive number of seconds, got {args.time_limit:g}")
    gpu = backend.MODE == "gpu"
    if "cuda" in devices and not gpu:
        if devices == ["cuda"]:
            print(f"--devices cuda: no GPU to measure ({backend.MODE_REASON}); nothing saved")
            return 1
        print(f"no GPU ({backend.MODE_REASON}): measuring the CPU only")
        devices = ["cpu"]
    deadline = None if args.time_limit is None else start + args.time_limit
    limits = {"deadline": deadline, "time_limit": args.time_limit}
    if args.quick:
        ew_sizes, gemm_sizes = log_sizes(1e3, 1e5), [64, 128]
    else:
        ew_sizes, gemm_sizes = log_sizes(1e3, 1e8, 2), list(GEMM_SIZES)
    device = backend.info().gpu_name if "cuda" in devices else backend.info().cpu_model
    name = args.name or f"{PREFIX}{results.slug(device)}"
    dtypes = ["float32", "float16", "bfloat16"] if "cuda" in devices else ["float32"]
    sweeps = [lambda op=op: elementwise_sweep(op, ew_sizes, devices, min_run_time=0.1,
                                              point_budget_s=10, **limits)
              for op in ELEMENTWISE_OPS]
    sweeps += [lambda dtype=dtype: gemm_sweep(gemm_sizes, devices, dtype=dtype, min_run_time=0.1,
                                              point_budget_s=10, **limits)
               for dtype in dtypes]
    if not args.quick and "cuda" in devices:
        sweeps.append(lambda: table1_gemm_rows(**limits))
    rows: list[dict] = []
    for sweep in sweeps:   # saved after each: a run stopped later keeps the sweeps done
        rows += sweep()
        csv_path, json_path = results.save(name, rows, directory=args.out)
    skipped = sum(str(r["status"]).startswith("skipped: time limit") for r in rows)
    print(f"wrote {csv_path} and {json_path} ({len(rows)} rows, {skipped} skipped at the time "
          "limit)")
    return 0
