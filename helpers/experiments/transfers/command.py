"""The transfers command: every experiment on this GPU, saved, read back and printed.

:func:`measure` runs the experiments of :mod:`helpers.experiments.transfers.measured` (copy
bandwidth both ways, pageable and pinned; overlapped chunks; the copies' share per Table I layer
and remedy) within a deadline; :func:`recorded` reads ``results/transfers_*``;
:func:`format_table` prints rows. ``python -m helpers.experiments.transfers [--save] [--out DIR]
[--time-limit S]`` (:func:`main`); without a GPU it prints the analytic estimate.

Source: Li et al., "Performance Analysis of GPU-based Convolutional Neural Networks", ICPP 2016,
Figure 7 and its discussion of transfer overheads.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Iterable, Sequence

from helpers import results
from helpers.conv.config import ConvConfig
from helpers.device import backend
from helpers.experiments.transfers.measured import (
    DEFAULT_SIZES,
    DIRECTIONS,
    EXPERIMENTS,
    OVERLAP_FIELDS,
    PREFIX,
    TIMELINE_FIELDS,
    TRANSFER_STRATEGIES,
    _device_label,
    copy_bandwidth,
    gpu_reason,
    overlap_experiment,
    recorded,
    transfer_share,
)
from helpers.experiments.transfers.model import chunk_bounds, estimate, layer_for
from helpers.paper import TABLE_I

__all__ = ["measure", "format_table", "main"]


def measure(layers: Iterable[ConvConfig | str] = TABLE_I, *, batch: int | None = None,
            chunks: int = 4, sizes: Iterable[int] = DEFAULT_SIZES, repeats: int = 20,
            deadline: float | None = None, time_limit: float | None = None,
            on_experiment=None) -> dict[str, list[dict]]:
    """Every experiment of this module on this GPU, as :func:`main` records it.

    Args:
        layers: layers or Table I names (default: all of Table I).
        batch: replaces the layers' batch size (None: Table I's 128). >= 1.
        chunks: chunks of the overlapped runs, 1..batch.
        sizes: copy sizes in bytes for :func:`copy_bandwidth`.
        repeats: timed copies per size; the layer runs are timed ``max(3, repeats // 2)`` times.
        deadline: a :func:`time.monotonic` value; no copy size, overlap or share experiment
            starts after it (None: no deadline). time_limit: the seconds it came from (text).
        on_experiment: called with (experiment, its rows) as soon as each is measured (to save
            it: a run stopped later keeps those).

    Returns:
        ``{"bandwidth": rows, "overlap": rows, "share": rows, "timeline": rows}`` (the keys of
        :data:`EXPERIMENTS`): :func:`copy_bandwidth` for both directions, pageable and pinned;
        :func:`overlap_experiment` per layer (:data:`OVERLAP_FIELDS`, its timeline apart, as
        :data:`TIMELINE_FIELDS` rows); :func:`transfer_share` per layer and strategy. Without a
        GPU the rows say why in ``status`` and the timeline is empty; the rows of experiments
        not started before the deadline have ``status`` ``"skipped: time limit of T s
        reached"`` (the timeline holds the overlaps measured).

    Raises:
        ValueError: as the experiments (an unknown layer, ``batch < 1``, ``chunks`` outside
            1..batch, a size < 1, ``repeats < 1``).

    Source: the study's Figure 7 and its three remedies.
    """
    layers = [layer_for(lay, batch) for lay in layers]
    for lay in layers:  # refuse a bad chunk count before anything is timed
        chunk_bounds(lay.n, chunks)
    runs = max(3, repeats // 2)
    limit = dict(deadline=deadline, time_limit=time_limit)
    done = on_experiment or (lambda experiment, rows: None)
    bw = [r for d in DIRECTIONS for pinned in (False, True)
          for r in copy_bandwidth(sizes, d, pinned, repeats=repeats, references=False, **limit)]
    done("bandwidth", bw)
    overlaps = [overlap_experiment(lay, chunks, repeats=runs, **limit) for lay in layers]
    timeline = []
    for o in overlaps:
        for t in o["timeline"]:
            full = dict(t, experiment="timeline", layer=o["layer"], b=o["b"], chunks=o["chunks"],
                        device=o["device"], device_kind="cuda", status="ok")
            timeline.append({k: full[k] for k in TIMELINE_FIELDS})
    overlap_rows = [{k: o[k] for k in OVERLAP_FIELDS} for o in overlaps]
    done("overlap", overlap_rows), done("timeline", timeline)
    shares = [transfer_share(lay, strategy, chunks=chunks, repeats=runs, **limit)
              for lay in layers for strategy in TRANSFER_STRATEGIES]
    done("share", shares)
    return {"bandwidth": bw, "overlap": overlap_rows, "share": shares, "timeline": timeline}


def format_table(rows: Sequence[dict], columns: Sequence[str]) -> str:
    """Rows as a fixed-width text table of the given columns (floats to 4 significant digits,
    None as ``-``, ``copy_share`` and ``overlap`` in %)."""
    def cell(key, v):
        if v is None or v == "":
            return "-"
        if key in ("copy_share", "overlap") and isinstance(v, (int, float)):
            return f"{100 * v:.1f} %"
        if isinstance(v, bool):
            return str(v)
        if isinstance(v, float):
            return f"{v:.4g}"
        if isinstance(v, int):
            return f"{v:,}"
        return str(v)

    table = [list(columns)] + [[cell(c, r.get(c)) for c in columns] for r in rows]
    widths = [max(len(line[j]) for line in table) for j in range(len(columns))]
    return "\n".join("  ".join(v.rjust(w) if j else v.ljust(w)
                               for j, (v, w) in enumerate(zip(line, widths)))
                     for line in table)


_ESTIMATE_COLUMNS = ("scenario", "layer", "b", "copies", "gflop", "flop_per_byte", "copy_ms",
                     "compute_ms", "copy_share")


def main(argv: list[str] | None = None) -> int:
    """``python -m helpers.experiments.transfers [--save] [--out DIR] [--batch N] [--chunks J]
    [--quick] [--time-limit S]``.

    On a GPU: :func:`measure` (copy bandwidth h2d and d2h, pageable and pinned; the overlap
    experiment; the copy share of every Table I layer for every transfer strategy), printed as
    tables; ``--save`` writes ``<out>/transfers_{bandwidth,overlap,share,timeline}_*`` (default
    ``results/``); experiments not started within ``--time-limit`` seconds get rows with a
    ``skipped: time limit`` status. Without a GPU it says why; with ``--save`` it then returns
    :data:`helpers.results.REFUSED` (3) at once (nothing measured, nothing saved), else prints the analytic estimate (labelled so)
    and what ``--out`` holds. Otherwise returns 0.
    """
    start = time.monotonic()
    parser = argparse.ArgumentParser(
        prog="python -m helpers.experiments.transfers",
        description="Measure CPU-GPU copies: bandwidth, overlap with compute, and their share "
                    "of the study's Table I layers (its Figure 7).")
    parser.add_argument("--save", action="store_true",
                        help=f"write results/{PREFIX}*.csv + .json (needs a GPU)")
    parser.add_argument("--batch", type=int, default=None,
                        help="batch size instead of Table I's 128")
    parser.add_argument("--chunks", type=int, default=4, help="chunks of the overlapped runs")
    parser.add_argument("--quick", action="store_true",
                        help="few sizes and repeats (a smoke test)")
    parser.add_argument("--out", type=results.writable_folder, default=None, help="output folder (default results/)")
    parser.add_argument("--time-limit", type=float, default=None, dest="time_limit",
                        help="seconds after which no further experiment starts")
    args = parser.parse_args(argv)
    if args.time_limit is not None and not args.time_limit > 0:
        parser.error(f"--time-limit must be > 0 seconds, got {args.time_limit:g}")
    if args.batch is not None and args.batch < 1:
        parser.error(f"--batch must be >= 1, got {args.batch}")
    batch = args.batch or TABLE_I[0].n
    if not 1 <= args.chunks <= batch:
        parser.error(f"--chunks must be in 1..{batch} (the batch size), got {args.chunks}")

    reason = gpu_reason()
    if reason and args.save:
        print(reason)
        print("--save: nothing was measured, so nothing was saved")
        return results.REFUSED
    if reason:
        print(reason)
        print("\nAnalytic ESTIMATE (not measured): copies of x in and y out at the stated link "
              "bandwidth vs FLOPs at the datasheet FP32 peak, forward + backward, batch "
              f"{batch}:")
        print(format_table(estimate(batch=batch), _ESTIMATE_COLUMNS))
        print()
        for experiment in EXPERIMENTS:
            print(f"{experiment}: {recorded(experiment, args.out).note}")
        return 0

    print(f"measuring on {_device_label()}")
    quick = args.quick
    deadline = None if args.time_limit is None else start + args.time_limit
    slug = results.slug(backend.info().gpu_name or "gpu")

    def save(experiment: str, experiment_rows: list[dict]) -> None:  # as soon as measured
        name = (f"{PREFIX}{experiment}_{slug}" if experiment == "bandwidth"
                else f"{PREFIX}{experiment}_b{batch}_{slug}")
        if experiment_rows:
            paths = results.save(name, experiment_rows, directory=args.out)
            print("saved " + ", ".join(str(p) for p in paths), flush=True)

    rows = measure(TABLE_I[-1:] if quick else TABLE_I, batch=batch, chunks=args.chunks,
                   sizes=DEFAULT_SIZES[::2] if quick else DEFAULT_SIZES,
                   repeats=5 if quick else 20, deadline=deadline, time_limit=args.time_limit,
                   on_experiment=save if args.save else None)
    print(format_table(rows["bandwidth"], ("direction", "memory", "size_bytes", "median_ms",
                                           "iqr_ms", "gb_s", "status")))
    print()
    print(format_table(rows["overlap"], ("layer", "b", "chunks", "sequential_pageable_ms",
                                         "sequential_pinned_ms", "overlapped_ms", "speedup",
                                         "overlap", "matches", "status")))
    print()
    print(format_table(rows["share"], ("layer", "b", "strategy", "pass", "h2d_ms",
                                       "compute_ms", "d2h_ms", "total_ms", "copy_share",
                                       "status")))
    return 0
