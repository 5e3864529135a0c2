"""Time every strategy at the study's Table I layers, forward and forward + backward.

``python -m helpers.experiments.conv_bench [--batch N] [--device cpu|cuda] [--save] [--out DIR]
[--time-limit S] [--quick]``: for each layer of :data:`helpers.paper.TABLE_I` (batch replaced
by ``batch``, 1 by default so that a laptop CPU finishes in about a minute), each strategy and
each device where timings mean something (the CPU; ``cuda`` only on a real GPU), it measures
both passes (:func:`helpers.experiments.sweep.measure`: warm-up, then the median) and the peak
memory of forward + backward, beside the analytic FLOPs and workspace, and compares each with
``reference`` (torch's own convolution, cuDNN or oneDNN, in float32 with TF32 off as ours) on
the same device and pass; ``reference-tf32`` (the same calls in TF32, torch's default, sm_80+)
is a row of its own. A strategy that cannot run a layer (unsupported, the simulator, the time
limit) still gets a row, with the reason in ``status``.

Source: Li et al., ICPP 2016, Table I (the layers) and Figures 3 and 5 (runtime and memory).
"""

from __future__ import annotations

import argparse
import pathlib
import time

from helpers import results
from helpers.conv import STRATEGIES, ConvConfig
from helpers.device import backend
from helpers.device.progress import progress as progress_bar
from helpers.device.progress import time_up
from helpers.experiments import sweep
from helpers.paper import TABLE_I

__all__ = [
    "COMMAND",
    "FIELDS",
    "PREFIX",
    "bench_layers",
    "format_table",
    "main",
    "measure",
    "recorded",
    "recorded_by_gpu",
]

#: results/ file-name prefix of recorded runs, and the command that records one on a GPU.
PREFIX = "conv_table1_"
COMMAND = "python -m helpers.experiments.conv_bench --save"

#: Columns of every row :func:`bench_layers` returns (units in the names).
FIELDS = ("layer", "b", "i", "f", "k", "s", "c", "strategy", "family", "device", "pass",
          "median_ms", "iqr_ms", "vs_reference", "gflop_per_s", "flops", "workspace_bytes",
          "peak_bytes", "status")


def _devices() -> list[str]:
    return ["cpu", "cuda"] if backend.MODE == "gpu" else ["cpu"]


def bench_layers(batch: int | None = 1, layers: tuple[ConvConfig, ...] = TABLE_I,
                 strategies: list[str] | None = None, devices: list[str] | None = None,
                 min_run_time: float = 0.3, measure_memory: bool = True,
                 progress=None, budget_s: float = 10.0, seed: int = 0, *,
                 deadline: float | None = None, time_limit: float | None = None) -> list[dict]:
    """Measure forward and forward + backward of each strategy at each layer.

    Args:
        batch: the batch size N to use instead of each layer's own (None: the layer's, 128 for
            Table I). >= 1.
        layers: the layers (default: Table I, input channels as :mod:`helpers.paper` states).
        strategies: names from :data:`STRATEGIES` (default: all).
        devices: ``"cpu"`` and/or ``"cuda"`` (default: the CPU, and the GPU when there is one).
            ``"cuda"`` without a GPU gives rows that say why nothing was timed.
        min_run_time: seconds of timed calls per measurement (>= 2 calls each).
        measure_memory: also measure the peak memory of forward + backward.
        progress: optional callable taking a one-line description before each measurement.
        budget_s: a call estimated to take longer (seconds) is refused, with the estimate, not
            run (:func:`helpers.experiments.sweep.refusal`: at the study's batch of 128 on a CPU, say).
        seed: seed of the random float32 inputs (never zeros).
        deadline: a :func:`time.monotonic` value after which nothing more is run: the remaining
            rows have status :func:`helpers.device.progress.time_limit_status` of
            ``time_limit`` (seconds; only for that text). None: no deadline.

    Returns:
        One dict per (layer, strategy, device, pass) with the keys of :data:`FIELDS`: times in
        ms (median and interquartile range), ``vs_reference`` = median / the median of
        ``reference`` (the library in float32, TF32 off; for the ``reference-tf32`` row, what
        TF32 saves the library), GFLOP/s from the strategy's own FLOP count, bytes for
        memory; None where not measured.

    Raises:
        ValueError: batch < 1, an unknown strategy or device.
    """
    if batch is not None and batch < 1:
        raise ValueError(f"batch must be >= 1, got {batch}")
    names = list(strategies or STRATEGIES)
    for name in names:
        if name not in STRATEGIES:
            raise ValueError(f"strategy must be one of {sorted(STRATEGIES)}, got {name!r}")
    devs = devices or _devices()
    for d in devs:
        if d not in ("cpu", "cuda"):
            raise ValueError(f"device must be 'cpu' or 'cuda', got {d!r}")
    # reference first, so every other row can be compared with it
    names = ["reference"] + [n for n in names if n != "reference"]

    rows = []
    for layer in layers:
        if batch is not None:
            layer = layer.with_batch(batch)
        cfg = layer
        b, i, f, k, s = layer.study
        for device in devs:
            ref_ms = {}
            for name in names:
                if device not in STRATEGIES[name].devices:
                    continue  # no code for this device: nothing to measure or refuse
                for backward in (False, True):
                    if progress and not time_up(deadline):
                        progress(f"{layer.name} {name} {device} "
                                 f"{'forward+backward' if backward else 'forward'}")
                    m = sweep.measure(cfg, name, device, backward, min_run_time,
                                      measure_memory and backward, budget_s, seed,
                                      deadline=deadline, time_limit=time_limit)
                    row = {"layer": layer.name, "b": b, "i": i, "f": f, "k": k, "s": s,
                           "c": layer.c, **m, "vs_reference": None}
                    if m["median_ms"] is not None:
                        if name == "reference":
                            ref_ms[m["pass"]] = m["median_ms"]
                        if ref_ms.get(m["pass"]):
                            row["vs_reference"] = m["median_ms"] / ref_ms[m["pass"]]
                    rows.append({k: row[k] for k in FIELDS})
    return rows


#: The face every experiment module shares: measure() is bench_layers().
measure = bench_layers


def recorded(**match) -> results.Recorded:
    """Rows of every ``results/conv_table1_*`` run measured on a GPU, each labelled with its GPU
    and date (``device``), filtered by ``match`` (e.g. ``strategy="fft"``): the fields of
    :data:`FIELDS`. ``.note`` says where they come from, or how to record them."""
    return results.recorded(PREFIX, COMMAND, **match)


def recorded_by_gpu(strategies=None) -> tuple[results.Recorded, dict[tuple[str, int], list[dict]]]:
    """:func:`recorded`, and its rows grouped by (device, batch): one group per recorded run,
    keeping only ``strategies`` (names; default all) in the order they were recorded."""
    rec = recorded()
    groups: dict[tuple[str, int], list[dict]] = {}
    for r in rec.rows:
        if strategies is None or r["strategy"] in strategies:
            groups.setdefault((r["device"], r["b"]), []).append(r)
    return rec, groups


def format_table(rows: list[dict]) -> str:
    """The rows as a fixed-width text table (one line per row)."""
    head = (f"{'layer':<6}{'strategy':<16}{'device':<10}{'pass':<18}{'median ms':>11}"
            f"{'x ref':>8}{'GFLOP/s':>9}{'workspace MiB':>15}{'peak MiB':>10}  status")
    lines = [head]
    for r in rows:
        def num(v, fmt):
            return format(v, fmt) if v is not None else "-"
        ws = r["workspace_bytes"] / 2**20 if r["workspace_bytes"] is not None else None
        peak = r["peak_bytes"] / 2**20 if r["peak_bytes"] is not None else None
        dev = "cpu" if r["device"].startswith("CPU") else "cuda"
        lines.append(f"{r['layer']:<6}{r['strategy']:<16}{dev:<10}{r['pass']:<18}"
                     f"{num(r['median_ms'], '.2f'):>11}{num(r['vs_reference'], '.1f'):>8}"
                     f"{num(r['gflop_per_s'], '.1f'):>9}{num(ws, '.1f'):>15}"
                     f"{num(peak, '.1f'):>10}  {r['status']}")
    return "\n".join(lines)


def _slug(devices: list[str]) -> str:
    """The file name's device part: the GPU's name when the GPU was measured, else ``cpu``."""
    if "cuda" in devices and backend.MODE == "gpu":
        return results.slug(backend.info().gpu_name or "gpu")
    return "cpu"


def main(argv: list[str] | None = None) -> int:
    """``python -m helpers.experiments.conv_bench [--batch N] [--device cpu|cuda] [--save]
    [--out DIR] [--time-limit S] [--quick]``: print the table; ``--save`` writes
    ``DIR/conv_table1_b<N>_<device>.csv`` + ``.json`` (``<device>``: the GPU's name, or
    ``cpu`` when only the CPU was measured), rewritten after each layer. Returns 0; 1 for
    ``--device cuda --save`` without a GPU (nothing saved); 2 for a bad argument."""
    start = time.monotonic()
    parser = argparse.ArgumentParser(prog="python -m helpers.experiments.conv_bench",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=1,
                        help="batch size (default 1; the study used 128)")
    parser.add_argument("--device", choices=sweep.DEVICES, default=None,
                        help="measure on this device only (default: the CPU, and the GPU when "
                             "there is one)")
    parser.add_argument("--save", action="store_true",
                        help="write DIR/conv_table1_b<N>_<device>.csv + .json")
    parser.add_argument("--out", type=results.writable_folder, default=str(results.RESULTS_DIR),
                        help="folder --save writes to (default: results/)")
    parser.add_argument("--time-limit", type=float, default=None,
                        help="seconds after which no new measurement starts; the rest are rows "
                             "with status 'skipped: time limit ...'")
    parser.add_argument("--quick", action="store_true",
                        help="Conv5 only, short timings, and calls estimated over 0.05 s "
                             "refused (a smoke test: ~15 s on a CPU)")
    args = parser.parse_args(argv)
    if args.batch < 1:
        print(f"--batch must be >= 1, got {args.batch}")
        return 2
    if args.time_limit is not None and not args.time_limit > 0:
        print(f"--time-limit must be a positive number of seconds, got {args.time_limit:g}")
        return 2
    devices = [args.device] if args.device else _devices()
    info = backend.info()
    print(f"kernels: {info.device_label}")
    if devices == ["cuda"] and backend.MODE != "gpu":
        print(f"--device cuda: no GPU to time on ({backend.MODE_REASON}); the rows say why")
        if args.save:
            print("--save: nothing was measured, so nothing was saved")
            return 1
    deadline = None if args.time_limit is None else start + args.time_limit
    bar = progress_bar(desc="measuring", unit=" runs", leave=False)

    def step(text: str) -> None:
        bar.set_postfix_str(text)
        bar.update()

    rows, paths = [], ()
    for layer in TABLE_I[-1:] if args.quick else TABLE_I:
        rows += bench_layers(batch=args.batch, layers=(layer,), devices=devices,
                             min_run_time=0.02 if args.quick else 0.3,
                             budget_s=0.05 if args.quick else 10.0, progress=step,
                             deadline=deadline, time_limit=args.time_limit)
        if args.save:   # after each layer: a run stopped later keeps the layers measured
            paths = results.save(f"{PREFIX}b{args.batch}_{_slug(devices)}", rows,
                                 directory=pathlib.Path(args.out))
    bar.close()
    print(f"Table I layers at batch {args.batch} (input channels: helpers.paper); medians, "
          f"'x ref' = time / torch's own convolution in float32 (TF32 off) on the same device; "
          f"reference-tf32 is that convolution with TF32 allowed")
    print(format_table(rows))
    if paths:
        print("saved " + ", ".join(str(p) for p in paths))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
