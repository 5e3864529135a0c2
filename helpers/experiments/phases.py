"""Where the time goes inside a strategy: each step's share (im2col vs GEMM vs col2im, FFT vs
Cgemm vs inverse FFT), and the kernels torch's own convolution launched.

:func:`phase_times` runs a strategy with :func:`helpers.conv.phases.recording` on; for torch's
convolution, which has no steps of ours, :func:`library_kernels` lists what ``torch.profiler``
saw (on a GPU cuDNN's kernels, whose names say the algorithm; on a CPU the aten operators).
:func:`measure` records both (Table I's layers; Figure 4's configuration) for ``results/``:
``python -m helpers.experiments.phases [--save] [--out DIR] [--quick] [--batch N]
[--time-limit S]``.

Source: Li et al., ICPP 2016, Figure 4 (hotspot kernels at (64, 128, 64, 11, 1)).
"""

from __future__ import annotations

import argparse
import pathlib
import sys
import time

import numpy as np
import torch
from torch.profiler import ProfilerActivity, profile

from helpers import results
from helpers.conv import ConvConfig, config_for, conv2d, conv2d_backward
from helpers.conv.phases import recording, sync
from helpers.device import backend
from helpers.device.arrays import unpoisoned
from helpers.device.precision import tf32_mode
from helpers.device.progress import progress as progress_bar
from helpers.device.progress import time_limit_status, time_up
from helpers.device.timing import device_label
from helpers.paper import TABLE_I

__all__ = [
    "COMMAND",
    "EXPERIMENTS",
    "FIELDS",
    "FIGURE4",
    "PHASE_STRATEGIES",
    "PREFIX",
    "library_kernels",
    "main",
    "measure",
    "phase_times",
    "recorded",
]

#: results/ file-name prefix of recorded runs, and the command that records one on a GPU.
PREFIX = "conv_phases_"
COMMAND = "python -m helpers.experiments.phases --save"

#: The experiments of one dataset (its ``experiment`` column).
EXPERIMENTS = ("library_kernels", "phases")

#: Columns of every row of :func:`measure`, in this order; a field an experiment does not use
#: is None (``library_kernels`` has no strategy, phase or share; ``phases`` no rank, name,
#: calls or kind).
FIELDS = ("experiment", "layer", "b", "i", "f", "k", "s", "c", "strategy", "pass", "phase",
          "rank", "name", "ms", "calls", "share", "kind", "device", "device_kind", "status")

#: The study's Figure 4 configuration (b, i, f, k, s) = (64, 128, 64, 11, 1), C = 3 as the
#: sweeps assume (the study does not state its input channels).
FIGURE4 = ConvConfig.from_study(b=64, i=128, f=64, k=11, s=1, c=3, name="Figure 4")

#: A small shape like Figure 4's for a CPU smoke test (``--quick`` without a GPU).
_FIGURE4_SMALL = ConvConfig.from_study(b=1, i=32, f=8, k=11, s=1, c=3, name="Figure 4 (small)")

#: The strategies whose steps :func:`measure` times (the study's Figure 4 (a-c) and (d)).
PHASE_STRATEGIES = ("im2col-gemm", "fft")


def phase_times(strategy: str, x_shape, w_shape, stride=1, padding=0, device: str = "cpu",
                backward: bool = False, repeats: int = 3, seed: int = 0) -> list[dict]:
    """Time each step of one strategy's forward (or backward) pass.

    Args:
        strategy: a key of :data:`helpers.conv.STRATEGIES`.
        x_shape, w_shape, stride, padding: as :func:`helpers.conv.conv2d` (N, C, H, W) and
            (K, C, R, S).
        device: ``"cpu"`` or ``"cuda"``.
        backward: time :func:`helpers.conv.conv2d_backward` instead of the forward pass.
        repeats: measured calls after one warm-up; the median of each step is reported.
        seed: seed of the random float32 inputs.

    Returns:
        One dict per step, in the order the steps ran: ``phase``, ``ms`` (median over the
        repeats), ``share`` (of the sum of the rows' ``ms``); plus a last row ``other`` for the
        time outside any step (validation, allocation, layout changes: each call's total minus
        its steps, median over the repeats), so the shares add up to 1. Steps that occur
        several times in a call are summed. The warm-up call fills our outputs with NaN as
        every check does; the measured ones do not (:func:`helpers.device.arrays.unpoisoned`),
        and all run with TF32 off unless the strategy is ``reference-tf32``.

    Raises:
        ValueError: as :func:`helpers.conv.conv2d`; ``repeats < 1``.
    """
    if repeats < 1:
        raise ValueError(f"repeats must be >= 1, got {repeats}")
    cfg = config_for(x_shape, w_shape, stride, padding)
    rng = np.random.default_rng(seed)
    where = torch.device("cuda") if device == "cuda" and backend.MODE == "gpu" else "cpu"
    x, w, dy = (torch.from_numpy(rng.standard_normal(s, dtype=np.float32)).to(where)
                for s in (cfg.x_shape, cfg.w_shape, cfg.y_shape))

    def call():
        if backward:
            conv2d_backward(x, w, dy, stride=stride, padding=padding, strategy=strategy,
                            device=device)
        else:
            conv2d(x, w, stride=stride, padding=padding, strategy=strategy, device=device)

    totals, steps, order = [], [], []
    with tf32_mode(False):
        call()  # warm-up: compilation, library initialisation
        for _ in range(repeats):
            with unpoisoned(), recording() as recorded:
                sync()
                start = time.perf_counter()
                call()
                sync()
                totals.append(time.perf_counter() - start)
            per = {}
            for name, seconds in recorded:
                if name not in order:
                    order.append(name)
                per[name] = per.get(name, 0.0) + seconds
            steps.append(per)
    # "other" is taken per call (that call's total minus its steps) before the median, so a
    # slow call does not count as "other" time in a fast one.
    others = [t - sum(per.values()) for t, per in zip(totals, steps)]
    rows = [{"phase": name, "ms": float(np.median([s.get(name, 0.0) for s in steps])) * 1e3}
            for name in order]
    rows.append({"phase": "other", "ms": max(float(np.median(others)), 0.0) * 1e3})
    total_ms = sum(r["ms"] for r in rows) or 1.0
    for r in rows:
        r["share"] = r["ms"] / total_ms
    return rows


def library_kernels(x_shape, w_shape, stride=1, padding=0, device: str = "cpu",
                    backward: bool = True, top: int = 8, seed: int = 0,
                    tf32: bool = False) -> list[dict]:
    """What torch's own convolution ran, as ``torch.profiler`` reports it.

    Args:
        x_shape, w_shape, stride, padding: as :func:`helpers.conv.conv2d`.
        device: ``"cpu"`` (aten operators, by self CPU time) or ``"cuda"`` (CUDA kernels, by
            GPU time; on a machine without a GPU it falls back to the CPU).
        backward: profile forward + backward instead of forward only.
        top: how many rows to return, the most expensive first.
        tf32: allow TF32 (torch's default for cuDNN); by default float32 with TF32 off, the
            ``reference`` strategy's kernels (:func:`helpers.device.precision.tf32_mode`).

    Returns:
        Dicts with ``name``, ``ms`` (total over one call), ``calls``, ``kind`` (``"cuda
        kernel"`` or ``"cpu op"``).

    Raises:
        ValueError: as :func:`helpers.conv.conv2d`; ``tf32`` not a bool.
    """
    cfg = config_for(x_shape, w_shape, stride, padding)
    on_gpu = device == "cuda" and backend.MODE == "gpu"
    where = torch.device("cuda") if on_gpu else torch.device("cpu")
    rng = np.random.default_rng(seed)
    x = torch.from_numpy(rng.standard_normal(cfg.x_shape, dtype=np.float32)).to(where)
    w = torch.from_numpy(rng.standard_normal(cfg.w_shape, dtype=np.float32)).to(where)
    x.requires_grad_(backward)
    w.requires_grad_(backward)
    kw = {"stride": (cfg.stride_h, cfg.stride_w), "padding": (cfg.pad_h, cfg.pad_w)}

    def call():
        y = torch.nn.functional.conv2d(x, w, **kw)
        if backward:
            y.backward(torch.ones_like(y))

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if on_gpu else [])
    with tf32_mode(tf32):
        call()  # warm-up (cuDNN picks its algorithm on the first call)
        sync()
        with profile(activities=activities) as prof:
            call()
            sync()
    rows = []
    for e in prof.key_averages():
        if on_gpu:
            us = getattr(e, "self_device_time_total", None) or getattr(e, "self_cuda_time_total", 0)
            if e.device_type == torch.autograd.DeviceType.CUDA and us > 0:
                rows.append({"name": e.key, "ms": us / 1e3, "calls": e.count, "kind": "cuda kernel"})
        elif e.self_cpu_time_total > 0 and e.key.startswith("aten::"):
            rows.append({"name": e.key, "ms": e.self_cpu_time_total / 1e3, "calls": e.count,
                         "kind": "cpu op"})
    rows.sort(key=lambda r: -r["ms"])
    return rows[:top]


def _row(experiment: str, cfg: ConvConfig, device: str, pass_: str, status: str = "ok",
         **fields) -> dict:
    b, i, f, k, s = cfg.study
    row = dict.fromkeys(FIELDS)
    row.update(experiment=experiment, layer=cfg.name, b=b, i=i, f=f, k=k, s=s, c=cfg.c,
               device=device_label(device), device_kind=device, status=status, **fields)
    row["pass"] = pass_
    return row


def _geometry(cfg: ConvConfig) -> dict:
    return {"x_shape": cfg.x_shape, "w_shape": cfg.w_shape,
            "stride": (cfg.stride_h, cfg.stride_w), "padding": (cfg.pad_h, cfg.pad_w)}


def measure(layers: tuple[ConvConfig, ...] = TABLE_I, batch: int | None = 128,
            figure4: ConvConfig = FIGURE4, device: str | None = None, top: int = 8,
            repeats: int = 3, progress: bool = True, *, deadline: float | None = None,
            time_limit: float | None = None) -> list[dict]:
    """Both experiments, as rows with the keys of :data:`FIELDS` (``experiment`` says which).

    Args:
        layers: the layers whose library kernels are listed (default Table I); ``batch``
            replaces their batch (None: keep it). >= 1.
        figure4: the configuration whose steps :func:`phase_times` times, for each of
            :data:`PHASE_STRATEGIES`, forward and backward (default :data:`FIGURE4`).
        device: ``"cpu"`` or ``"cuda"`` (default: cuda on a GPU, else the CPU).
        top: kernels kept per (layer, pass), the most expensive first. repeats: as
            :func:`phase_times`.
        progress: show a progress bar.
        deadline: a :func:`time.monotonic` value after which nothing more is run; each
            (layer or strategy, pass) not measured is one row whose status is
            :func:`helpers.device.progress.time_limit_status` of ``time_limit`` (seconds,
            only for that text). None: no deadline.

    Returns:
        ``library_kernels`` rows: one per kernel (``rank`` 1..top, ``name``, ``ms`` in one call,
        ``calls``, ``kind``), ``pass`` ``forward`` or ``forward+backward``; then ``phases``
        rows: one per step (``strategy``, ``phase``, ``ms``, ``share``), ``pass`` ``forward``
        or ``backward``. A (layer, pass) that failed is one row whose status is the error.

    Raises:
        ValueError: ``device="cuda"`` without a GPU (the simulator cannot time cuDNN), an
            unknown device, ``batch`` < 1, or ``top`` / ``repeats`` < 1.
    """
    device = device or ("cuda" if backend.MODE == "gpu" else "cpu")
    if device not in ("cpu", "cuda"):
        raise ValueError(f"device must be 'cpu' or 'cuda', got {device!r}")
    if device == "cuda" and backend.MODE != "gpu":
        raise ValueError(f"device='cuda' needs a GPU ({backend.MODE_REASON}); use device='cpu'")
    if batch is not None and (isinstance(batch, bool) or batch < 1):
        raise ValueError(f"batch must be >= 1, got {batch!r}")
    if top < 1 or repeats < 1:
        raise ValueError(f"top and repeats must be >= 1, got top={top}, repeats={repeats}")
    jobs = [("library_kernels", layer.with_batch(batch) if batch else layer, None, backward)
            for layer in layers for backward in (False, True)]
    jobs += [("phases", figure4, name, backward) for name in PHASE_STRATEGIES
             for backward in (False, True)]
    rows = []
    for experiment, cfg, strategy, backward in progress_bar(jobs, desc="phases", unit=" runs",
                                                            disable=not progress):
        pass_ = ("forward+backward" if experiment == "library_kernels" else "backward"
                 ) if backward else "forward"
        if time_up(deadline):
            rows.append(_row(experiment, cfg, device, pass_, time_limit_status(time_limit),
                             strategy=strategy))
            continue
        try:
            if experiment == "library_kernels":
                found = library_kernels(**_geometry(cfg), device=device, backward=backward,
                                        top=top)
                rows += [_row(experiment, cfg, device, pass_, rank=rank, **k)
                         for rank, k in enumerate(found, start=1)]
                if not found:
                    rows.append(_row(experiment, cfg, device, pass_, "no kernels seen"))
            else:
                steps = phase_times(strategy, **_geometry(cfg), device=device,
                                    backward=backward, repeats=repeats)
                rows += [_row(experiment, cfg, device, pass_, strategy=strategy, **step)
                         for step in steps]
        except Exception as exc:  # noqa: BLE001  (Numba's CUDA driver errors are no RuntimeError)
            rows.append(_row(experiment, cfg, device, pass_,
                             f"failed: {type(exc).__name__}: {exc}", strategy=strategy))
        if device == "cuda":
            try:
                torch.cuda.empty_cache()
            except Exception:  # noqa: BLE001  (a sticky CUDA error: the failed rows say so)
                pass
    return rows


def recorded(experiment: str, **match) -> results.Recorded:
    """GPU rows of one experiment (``"library_kernels"`` or ``"phases"``) from every
    ``results/conv_phases_*`` run, labelled with GPU and date, filtered by ``match``.

    Raises:
        ValueError: an unknown experiment.
    """
    if experiment not in EXPERIMENTS:
        raise ValueError(f"experiment must be one of {EXPERIMENTS}, got {experiment!r}")
    return results.recorded(PREFIX, COMMAND, experiment=experiment, **match)


def _print(rows: list[dict]) -> None:
    for r in rows:
        what = (f"{r['layer']:<16} {r['pass']:<17} "
                + (f"#{r['rank']} {r['name']}" if r["experiment"] == "library_kernels"
                   else f"{r['strategy']}: {r['phase']}"))
        ms = "-" if r["ms"] is None else f"{r['ms']:.3f} ms"
        print(f"{r['experiment']:<16} {what[:110]:<110} {ms:>12}  {r['status']}")


def main(argv: list[str] | None = None) -> int:
    """``python -m helpers.experiments.phases [--save] [--out DIR] [--quick] [--batch N]
    [--time-limit S]``: on a GPU, :func:`measure` (Table I at batch 128, or N) printed, and
    with ``--save`` written to ``DIR/conv_phases_<gpu>.csv`` + ``.json``. Without a GPU it
    says why and returns 1 with ``--save`` (nothing saved), unless ``--quick``: tiny sizes on
    the CPU, saved only to an ``--out`` that is not results/ (which holds GPU runs only).
    Returns 0 otherwise; 2 for a bad argument."""
    start = time.monotonic()
    parser = argparse.ArgumentParser(
        prog="python -m helpers.experiments.phases",
        description="Record the kernels cuDNN ran for Table I's layers and the steps of "
                    "im2col-gemm and fft at the study's Figure 4 configuration.")
    parser.add_argument("--save", action="store_true",
                        help=f"write DIR/{PREFIX}<device>.csv + .json")
    parser.add_argument("--out", type=results.writable_folder, default=None,
                        help="folder --save writes to (default: results/, which takes GPU runs "
                             "only: without a GPU, --quick --save needs another --out)")
    parser.add_argument("--quick", action="store_true",
                        help="Conv5 at batch 1 and a small Figure-4-like shape (a smoke test; "
                             "runs on the CPU when there is no GPU)")
    parser.add_argument("--batch", type=int, default=None,
                        help="batch of Table I's layers (default 128; 1 with --quick)")
    parser.add_argument("--time-limit", type=float, default=None,
                        help="seconds after which no new measurement starts; the rest are rows "
                             "with status 'skipped: time limit ...'")
    args = parser.parse_args(argv)
    if args.batch is not None and args.batch < 1:
        parser.error(f"--batch must be >= 1, got {args.batch}")
    if args.time_limit is not None and not args.time_limit > 0:
        parser.error(f"--time-limit must be a positive number of seconds, got {args.time_limit:g}")
    gpu = backend.MODE == "gpu"
    out = pathlib.Path(args.out) if args.out else results.RESULTS_DIR
    if not gpu and not args.quick:
        print(f"no GPU ({backend.MODE_REASON}): cuDNN's kernels and GPU phase times need one; "
              "--quick runs a CPU smoke test")
        for experiment in EXPERIMENTS:
            print(f"{experiment}: {recorded(experiment).note}")
        if args.save:
            print("--save: nothing was measured, so nothing was saved")
            return 1
        return 0
    if not gpu and args.save and out.resolve() == results.RESULTS_DIR.resolve():
        print("--quick --save without a GPU: results/ holds GPU runs only; give --out DIR")
        return 1
    batch = args.batch or (1 if args.quick else TABLE_I[0].n)
    print(f"measuring on {device_label('cuda' if gpu else 'cpu')}, Table I at batch {batch}")
    rows = measure(TABLE_I[-1:] if args.quick else TABLE_I, batch,
                   _FIGURE4_SMALL if args.quick else FIGURE4, repeats=2 if args.quick else 3,
                   deadline=None if args.time_limit is None else start + args.time_limit,
                   time_limit=args.time_limit)
    _print(rows)
    if args.save:
        info = backend.info()
        paths = results.save(f"{PREFIX}{results.slug(info.gpu_name if gpu else info.cpu_model)}",
                             rows, directory=out, command=" ".join(
                                 ["python -m helpers.experiments.phases",
                                  *(sys.argv[1:] if argv is None else argv)]))
        print("saved " + ", ".join(str(p) for p in paths))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
