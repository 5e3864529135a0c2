"""How fast does a CNN train? Images per second on the CPU and a GPU, and where a step's time goes.

:func:`measure` (from :mod:`helpers.experiments.training.steps`) trains for a few timed steps,
each split into waiting for data and computing, and returns one row (:data:`ROW_KEYS`; images/s,
seconds, percent). The sweeps repeat it over batch size, data-loading workers, model depth and
precision; :func:`utilisation_trace` adds GPU/CPU utilisation over time. Without a GPU the GPU
rows say why. :func:`recorded`, :func:`speedup_table`, :func:`format_table` and :data:`REVIEW` come from
:mod:`helpers.experiments.training.records`. Command line (:func:`main`):
``python -m helpers.experiments.training.throughput [--experiment E] [--quick] [--save]
[--out DIR] [--time-limit S]``.

Sources: the V100 review ("GPU vs CPU Deep Learning: Training Performance of Convolutional
Networks"); PyTorch's ``torch.utils.data`` (worker processes), AMP and channels_last docs.
"""

from __future__ import annotations

import argparse
import inspect
import os
import sys
import time
from collections.abc import Iterable, Sequence

from helpers import results
from helpers.device import backend
from helpers.device.progress import progress as progress_bar
from helpers.device.progress import time_limit_status, time_up
from helpers.device.timing import device_label
from helpers.experiments.training import learning
from helpers.experiments.training.records import (
    COMMAND,
    EXPERIMENTS,
    PREFIX,
    REVIEW,
    format_table,
    recorded,
    speedup_table,
)
from helpers.experiments.training.steps import (
    _PRECISIONS,
    ROW_KEYS,
    StepTimes,
    _model_name,
    _row,
    measure,
    time_steps,
)
from helpers.experiments.training.utilisation import UtilisationSampler
from helpers.networks import datasets, training_cnns

__all__ = ["REVIEW", "ROW_KEYS", "PREFIX", "COMMAND", "EXPERIMENTS", "StepTimes", "time_steps",
           "measure", "batch_size_sweep", "workers_sweep", "depth_sweep", "precision_sweep",
           "utilisation_trace", "speedup_table", "recorded", "format_table",
           "main"]


def _devices(devices) -> list[str]:
    devices = list(devices) if devices is not None else ["cpu", "cuda"]
    for d in devices:
        learning.check_device(d)
    return devices


#: :func:`measure`'s defaults, for the rows of calls not made.
_MEASURE_DEFAULTS = {k: p.default for k, p in inspect.signature(measure).parameters.items()
                     if p.default is not inspect.Parameter.empty}


def _skipped_row(status: str, **kw) -> dict:
    """A row of :data:`ROW_KEYS` for a :func:`measure` call not made: its settings, no numbers."""
    a = {**_MEASURE_DEFAULTS, **kw}
    name, depth = _model_name(a["model"])
    ds, device = a["dataset"], a["device"]
    gpu_missing = device == "cuda" and learning.gpu_reason()
    return _row(experiment=a["experiment"],
                dataset=ds if isinstance(ds, str) else getattr(ds, "name", type(ds).__name__),
                model=name, depth=depth, device_kind=device,
                device="GPU (none here)" if gpu_missing else device_label(device),
                batch_size=a["batch_size"], workers=a["workers"], augment=bool(a["augment"]),
                image_size=a["image_size"] or "", channels=a["channels"],
                precision=a["precision"], channels_last=bool(a["channels_last"]), status=status)


def _points(jobs: list[dict], progress: bool, desc: str, *, deadline: float | None = None,
            time_limit: float | None = None, **common) -> list[dict]:
    """:func:`measure` each job (its settings over ``common``); once ``deadline`` (a
    :func:`time.monotonic` value) has passed, each job left gets a skipped row instead, and a
    job that raises (anything but a ValueError or DatasetUnavailable) a ``failed: ...`` row."""
    rows = []
    for job in progress_bar(jobs, desc=desc, unit=" points", disable=not progress, leave=False):
        if time_up(deadline):
            rows.append(_skipped_row(time_limit_status(time_limit), **{**common, **job}))
            continue
        try:
            rows.append(measure(**{**common, **job}))
        except (ValueError, datasets.DatasetUnavailable):
            raise
        except Exception as exc:  # noqa: BLE001  (an out-of-memory, a CUDA error, a worker
            # killed for want of shared memory: this point fails, the others are still saved)
            rows.append(_skipped_row(f"failed: {type(exc).__name__}: {exc}", **{**common, **job}))
    return rows


def batch_size_sweep(model="small", batch_sizes: Sequence[int] = (8, 32, 128),
                     devices: Iterable[str] | None = None, *, progress: bool = False,
                     **kwargs) -> list[dict]:
    """Images/s against batch size on each device: :func:`measure` per (device, batch size).

    Args:
        model: as :func:`measure`. batch_sizes: each in [1, 4096], at least one.
        devices: ``"cpu"`` and/or ``"cuda"`` (default both; without a GPU the ``"cuda"`` rows
            carry the reason instead of numbers).
        progress: a progress bar over the points. kwargs: passed to :func:`measure`, except
            ``deadline`` (a :func:`time.monotonic` value; points not started before it get rows
            whose ``status`` is :func:`helpers.device.progress.time_limit_status`) and ``time_limit`` (its seconds, for
            that text), in every sweep.

    Returns:
        Rows with ``experiment="batch"``, ordered by device then batch size.

    Raises:
        ValueError: no batch sizes, or a bad argument (see :func:`measure`).

    Source: the V100 review (batch size and workers: about 3x on the GPU).
    """
    if not batch_sizes:
        raise ValueError("batch_sizes must hold at least one batch size")
    jobs = [dict(device=d, batch_size=b) for d in _devices(devices) for b in batch_sizes]
    return _points(jobs, progress, f"batch sizes ({model})", model=model, experiment="batch",
                   **kwargs)


def workers_sweep(model="small", workers: Sequence[int] = (0, 1, 2),
                  augment: Sequence[bool] = (False, True), device: str = "cpu", *,
                  progress: bool = False, **kwargs) -> list[dict]:
    """Data-loading workers 0..N, with and without augmentation, with the wait/compute split.

    Args:
        model: as :func:`measure`. workers: worker counts, each in [0, 64], at least one.
        augment: which of False/True to measure. device: ``"cpu"`` or ``"cuda"``.
        progress: a progress bar. kwargs: passed to :func:`measure` (e.g. ``batch_size``).

    Returns:
        Rows with ``experiment="workers"``: each gives ``wait_s`` (time blocked in
        ``next(iterator)``) and ``compute_s``.

    Raises:
        ValueError: empty lists or a bad argument.

    Source: the V100 review (workers; removing augmentation: 425 -> 533 images/s on the GPU).
    """
    if not workers or not augment:
        raise ValueError("workers and augment must each hold at least one value")
    jobs = [dict(workers=w, augment=bool(a)) for a in augment for w in workers]
    return _points(jobs, progress, f"workers ({model}, {device})", model=model, device=device,
                   experiment="workers", **kwargs)


def depth_sweep(models: Sequence[str] = ("small", "vgg", "resnet20"), batch_size: int = 64,
                devices: Iterable[str] | None = None, *, progress: bool = False,
                **kwargs) -> list[dict]:
    """Images/s per model (shallow to deep) on each device, for :func:`speedup_table`.

    Args:
        models: keys of :data:`helpers.networks.training_cnns.MODELS`, at least one.
        batch_size: in [1, 4096]. devices: as :func:`batch_size_sweep`.
        progress: a progress bar. kwargs: passed to :func:`measure`.

    Returns:
        Rows with ``experiment="depth"``.

    Raises:
        ValueError: no models or a bad argument.

    Source: the V100 review (deeper networks: about 23x, then about 100x GPU vs CPU).
    """
    if not models:
        raise ValueError("models must hold at least one model")
    jobs = [dict(device=d, model=m) for m in models for d in _devices(devices)]
    return _points(jobs, progress, "depth", batch_size=batch_size, experiment="depth", **kwargs)


def precision_sweep(model="resnet20", batch_size: int = 256, device: str = "cuda", *,
                    progress: bool = False, **kwargs) -> list[dict]:
    """fp32 against mixed precision (``torch.autocast`` bf16 / fp16), each in NCHW and in
    channels_last (NHWC): the GPU's tensor cores work best with both.

    Args:
        model: as :func:`measure`. batch_size: in [1, 4096].
        device: ``"cuda"`` (the experiment is meant for a GPU; without one every row carries the
            reason) or ``"cpu"``.
        progress: a progress bar. kwargs: passed to :func:`measure`.

    Returns:
        Six rows with ``experiment="precision"``.

    Raises:
        ValueError: a bad argument.

    Source: PyTorch's automatic mixed precision and channels_last documentation; not in the
    review.
    """
    jobs = [dict(precision=p, channels_last=cl) for p in _PRECISIONS for cl in (False, True)]
    return _points(jobs, progress, f"precision ({device})", model=model, device=device,
                   batch_size=batch_size, experiment="precision", **kwargs)


def utilisation_trace(model="small", device: str | None = None, *, batch_size: int = 64,
                      workers: int = 0, seconds: float = 3.0, interval_s: float = 0.1,
                      deadline: float | None = None, time_limit: float | None = None,
                      **kwargs) -> dict:
    """GPU and CPU utilisation over time while training: a sampler runs during :func:`measure`.

    Args:
        model: as :func:`measure`. device: ``"cpu"`` or ``"cuda"`` (default: the GPU if there is
            one, else the CPU).
        batch_size, workers: as :func:`measure`. seconds: timed training, in (0, 600].
        interval_s: sampling period, in [0.01, 10]. kwargs: passed to :func:`measure`.
        deadline, time_limit: as the sweeps (past the deadline nothing is run).

    Returns:
        ``{"row": the measurement row, "samples": [{"t_s", "gpu_util", "gpu_mem_bytes",
        "cpu_util"}, ...], "gpu_reason": None or why the GPU was not sampled, "device": label}``.
        The samples cover warm-up too (``row`` holds the means over the timed steps only).
        Past the deadline: a skipped row, no samples.

    Raises:
        ValueError: a bad argument.

    Source: the V100 review (small CNN: GPU 0-10 % utilised; CIFAR-10 at batch 512: about 45 %).
    """
    if not 0 < seconds <= 600:
        raise ValueError(f"seconds must be in (0, 600], got {seconds!r}")
    if device is None:
        device = "cpu" if learning.gpu_reason() else "cuda"
    learning.check_device(device)
    if deadline is not None and time.monotonic() >= deadline:
        row = _skipped_row(time_limit_status(time_limit), model=model, device=device,
                           batch_size=batch_size, workers=workers, experiment="utilisation",
                           **kwargs)
        return {"row": row, "samples": [], "gpu_reason": row["status"], "device": row["device"]}
    with UtilisationSampler(interval_s=interval_s, gpu=device == "cuda") as sampler:
        row = measure(model, device=device, batch_size=batch_size, workers=workers, steps=1,
                      min_seconds=seconds, experiment="utilisation", sampler=sampler, **kwargs)
    return {"row": row, "samples": sampler.samples, "gpu_reason": sampler.gpu_reason,
            "device": row["device"]}


def _plan(quick: bool, gpu: bool, cores: int, batch_sizes=None, workers=None,
          steps: int = 20) -> dict:
    """What :func:`main` measures: per experiment, (device, batch size(s), ...) and ``common``
    settings of :func:`measure`. On a GPU machine the CPU gets few points: notebook 09 reads
    the GPU's batch, workers and precision rows, and the depth rows of both devices."""
    ws = workers or ([0] if quick else sorted({0, 1, 2, min(4, cores), min(8, cores)}))
    if quick:
        sizes = batch_sizes or [8, 32]
        return {"batch": [("cpu", sizes), ("cuda", sizes)],
                "workers": [("cuda" if gpu else "cpu", 32, ws)],
                "depth": (["small"], 32), "utilisation": (32, 1.0),
                "common": {"steps": min(steps, 3), "warmup": 1, "min_seconds": 0.0}}
    if gpu:
        batch = [("cpu", batch_sizes or [16, 64]), ("cuda", batch_sizes or [16, 64, 256, 1024])]
    else:
        batch = [("cpu", batch_sizes or [8, 32, 128]), ("cuda", batch_sizes or [8, 32, 128])]
    return {"batch": batch, "workers": [("cuda", 256, ws)] if gpu else [("cpu", 64, ws)],
            "depth": (list(training_cnns.MODELS), 64), "utilisation": (256 if gpu else 64, 5.0),
            "common": {"steps": steps}}


def main(argv: list[str] | None = None) -> int:
    """``python -m helpers.experiments.training.throughput``: run the experiments, print a table,
    and with ``--save`` write ``<out>/training_<device>.csv``/``.json`` (and the utilisation
    trace as ``<out>/training_utilisation_<device>``; ``--out`` defaults to ``results/``).

    Points not started within ``--time-limit`` seconds get rows with a ``skipped: time limit``
    status. Returns 0, or 1 when the dataset cannot be loaded here (nothing measured)."""
    start = time.monotonic()
    parser = argparse.ArgumentParser(
        prog="python -m helpers.experiments.training.throughput",
        description="Training throughput (images/s) on the CPU and, if present, the GPU: batch "
                    "size, data-loading workers and augmentation, model depth, mixed precision.")
    parser.add_argument("--experiment", default="all",
                        choices=["all", "batch", "workers", "depth", "precision", "utilisation"])
    parser.add_argument("--dataset", default="lfw_subset", choices=list(datasets.DATASETS))
    parser.add_argument("--data-dir", default=None, help="CIFAR-10 cache folder")
    parser.add_argument("--download", action="store_true",
                        help="download CIFAR-10 if missing (needs internet)")
    parser.add_argument("--model", default="small", choices=list(training_cnns.MODELS))
    parser.add_argument("--image-size", type=int, default=32)
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=None)
    parser.add_argument("--workers", type=int, nargs="+", default=None)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--quick", action="store_true",
                        help="few, small points, 3 steps each (a smoke test)")
    parser.add_argument("--save", action="store_true",
                        help="write <out>/training_<device>.csv/.json (and the utilisation trace)")
    parser.add_argument("--out", type=results.writable_folder, default=None, help="folder --save writes to (default results/)")
    parser.add_argument("--time-limit", type=float, default=None, dest="time_limit",
                        help="seconds after which no further point is measured")
    args = parser.parse_args(argv)
    if args.time_limit is not None and not args.time_limit > 0:
        parser.error(f"--time-limit must be > 0 seconds, got {args.time_limit:g}")
    limit = {"deadline": None if args.time_limit is None else start + args.time_limit,
             "time_limit": args.time_limit}
    try:  # fail early, and clearly, where the dataset cannot be read (scikit-image missing...)
        learning.load_dataset(args.dataset, image_size=args.image_size, data_root=args.data_dir,
                              download=args.download)
    except (ImportError, datasets.DatasetUnavailable) as exc:
        print(f"nothing measured: the dataset {args.dataset!r} cannot be loaded here "
              f"({type(exc).__name__}: {exc})")
        return 1

    gpu = learning.gpu_reason() is None
    plan = _plan(args.quick, gpu, os.cpu_count() or 2, args.batch_sizes, args.workers,
                 args.steps)
    common = {"dataset": args.dataset, "image_size": args.image_size, "data_root": args.data_dir,
              "download": args.download, **plan["common"]}
    exp, rows, trace = args.experiment, [], None
    print(f"dataset: {args.dataset}; CPU: {device_label('cpu')}; "
          f"GPU: {device_label('cuda') if gpu else learning.gpu_reason()}")
    name = f"{PREFIX}{results.slug(backend.info().gpu_name if gpu else backend.info().cpu_model)}"
    command = " ".join(["python -m helpers.experiments.training.throughput",
                        *(sys.argv[1:] if argv is None else argv)])

    def checkpoint() -> None:   # after each experiment: a run stopped later keeps those
        if args.save and rows:
            results.save(name, rows, command=command, directory=args.out)

    if exp in ("all", "batch"):
        for device, sizes in plan["batch"]:
            rows += batch_size_sweep(args.model, sizes, [device], progress=True, **common,
                                     **limit)
        checkpoint()
    if exp in ("all", "workers"):
        for device, batch, ws in plan["workers"]:
            rows += workers_sweep(args.model, ws, device=device, progress=True,
                                  batch_size=batch, **common, **limit)
        checkpoint()
    if exp in ("all", "depth"):
        models, batch = plan["depth"]
        rows += depth_sweep(models, batch, ["cpu", "cuda"], progress=True, **common, **limit)
        checkpoint()
    if exp in ("all", "precision"):
        rows += precision_sweep("resnet20", 256, "cuda", progress=True, **common, **limit)
        checkpoint()
    if exp in ("all", "utilisation"):
        batch, seconds = plan["utilisation"]
        trace = utilisation_trace(args.model, "cuda" if gpu else "cpu", batch_size=batch,
                                  seconds=seconds, **{k: v for k, v in common.items()
                                                      if k not in ("steps", "min_seconds")},
                                  **limit)
        rows.append(trace["row"])
        if trace["gpu_reason"]:
            print(f"utilisation trace: {trace['gpu_reason']}")
    print(format_table(rows))
    late = sum(str(r["status"]).startswith("skipped: time limit") for r in rows)
    if late:
        print(f"{late} of {len(rows)} points not measured: {time_limit_status(args.time_limit)}")
    if args.save:
        device = backend.info().gpu_name if gpu else backend.info().cpu_model
        print("wrote", *results.save(name, rows, command=command, directory=args.out))
        if trace and trace["samples"]:
            samples = [dict(experiment="utilisation_trace", model=trace["row"]["model"],
                            dataset=trace["row"]["dataset"],
                            device_kind=trace["row"]["device_kind"],
                            batch_size=trace["row"]["batch_size"], **s)
                       for s in trace["samples"]]
            print("wrote", *results.save(f"{PREFIX}utilisation_{results.slug(device)}", samples,
                                         command=command, directory=args.out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
