"""A synthetic ``results/`` folder: what a GPU machine's recording commands would write.

:func:`make_synthetic_results` writes one dataset (CSV + JSON, as :func:`helpers.results.save`
writes them) for every experiment the notebooks read from ``results/``: its rows have the keys
and value types of the module that records it (its field tuples and, where it has one, its own
row-building code), with plausible positive numbers from a simple model of a fast GPU. Every
JSON says ``"synthetic": true`` and names the GPU :data:`GPU_NAME`: these are test data, never
measurements, made in a temporary folder by the tests and never committed.
"""

from __future__ import annotations

import json
import math
import pathlib
from types import SimpleNamespace

from helpers import occupancy, results
from helpers.conv import STRATEGIES
from helpers.device import backend
from helpers.experiments import (
    conv_bench,
    hotspots,
    kernel_resources,
    memory_access,
    sweep,
)
from helpers.experiments.layer_costs import GROUPS
from helpers.experiments.layer_times import HotspotProfile
from helpers.experiments.throughput import sweeps as throughput
from helpers.experiments.training import throughput as training_throughput
from helpers.experiments.transfers import measured as transfers
from helpers.experiments.transfers import model as transfer_model
from helpers.kernels import KERNELS
from helpers.networks import training_cnns
from helpers.networks.figure2 import NAMES, NATIVE_INPUT
from helpers.paper import TABLE_I, im2col_gemm

__all__ = ["GPU_NAME", "DRIVER", "CUDA", "DATE", "SLUG", "environment", "make_synthetic_results"]

#: The synthetic GPU's name: it says what the numbers are wherever a label shows it.
GPU_NAME = "Synthetic GPU (test data, not a measurement)"
DRIVER = "550.54.15"
CUDA = "12.4"
DATE = "2025-06-01T12:00:00+00:00"
SLUG = results.slug(GPU_NAME)
GPU = f"GPU: {GPU_NAME}"                     # what device_label("cuda") says on that machine
CPU_MODEL = "Synthetic CPU (test data)"
CPU = f"CPU: {CPU_MODEL} (32 cores)"          # what device_label("cpu") says there

# The synthetic machine's datasheet-like peaks (FLOP/s, bytes/s).
PEAK_FP32, PEAK_TENSOR, PEAK_BW = 60e12, 500e12, 3.0e12
CPU_FLOPS, CPU_BW = 1.5e12, 150e9


def environment() -> dict:
    """The JSON ``environment`` of the synthetic GPU machine: the keys of
    :meth:`helpers.device.backend.BackendInfo.as_dict` (taken from this machine's, so that none
    is missing), with the GPU, driver, CUDA, peaks and CPU of the synthetic machine."""
    env = backend.info().as_dict()
    env.update(
        mode="gpu", mode_reason="synthetic test data, not a measurement", timings_meaningful=True,
        gpu_name=GPU_NAME, gpu_sm_count=100, gpu_memory_bytes=80 * 2**30,
        gpu_compute_capability="9.0", driver_version=DRIVER, driver_cuda_version=CUDA,
        torch_cuda_version=CUDA, gpu_peak_fp32_flops=PEAK_FP32,
        gpu_peak_fp16_tensor_flops=PEAK_TENSOR, gpu_peak_bandwidth_bytes_s=PEAK_BW,
        gpu_peak_source="synthetic test data", cpu_model=CPU_MODEL, cpu_physical_cores=16,
        cpu_logical_cores=32, cpu_peak_fp32_flops_estimate=CPU_FLOPS,
        cpu_peak_source="synthetic test data", ram_bytes=256 * 2**30, in_colab=False)
    return env


def _save(directory: pathlib.Path, name: str, rows: list[dict], command: str,
          extra: dict | None = None) -> str:
    """:func:`helpers.results.save`, then the JSON's date and environment replaced by the
    synthetic machine's and ``"synthetic": true`` added. Returns ``name``."""
    _, json_path = results.save(name, rows, command=command, directory=directory, extra=extra)
    meta = json.loads(json_path.read_text())
    meta = {**{k: v for k, v in meta.items() if k != "environment"}, "date": DATE,
            "synthetic": True, "environment": environment()}
    json_path.write_text(json.dumps(meta, indent=2) + "\n")
    return name


def _timing(seconds: float) -> SimpleNamespace:
    """A stand-in for :class:`helpers.device.timing.Timing` with the given median (s)."""
    return SimpleNamespace(median_s=seconds, median_ms=seconds * 1e3, iqr_s=0.03 * seconds,
                           min_s=0.97 * seconds, max_s=1.08 * seconds, repeats=20, device=GPU)


def _pick(row: dict, fields) -> dict:
    """``row`` with exactly ``fields``, in their order (a field the model does not fill: None)."""
    return {k: row.get(k) for k in fields}


# ---------------------------------------------------------------------------------- notebook 01


def _throughput(directory) -> str:
    rows = []
    ew_sizes = throughput.log_sizes(1e3, 1e8, 2)
    for op, (reads, writes, _) in throughput.ELEMENTWISE_OPS.items():
        for device, names in (("cpu", ("numpy", "torch")), ("cuda", ("torch", "numba"))):
            for j, name in enumerate(names):
                for n in ew_sizes:
                    moved = (reads + writes) * n * 4
                    if device == "cuda":
                        t = 4e-6 + j * 1e-6 + moved / (0.9 * PEAK_BW)
                    else:
                        t = 2e-6 + moved / (CPU_BW * (3.0 if moved < 2**25 else 0.6))
                    row = throughput._row("elementwise", op, name, device, "float32", n,
                                          _timing(t))
                    rows.append(dict(row, device=GPU if device == "cuda" else CPU))
    gemm_sizes = [2**j for j in range(6, 14)]
    gpu_gemm = {("torch", "float32"): 0.7 * PEAK_FP32, ("numba-tiled", "float32"): 0.12 * PEAK_FP32,
                ("numba-naive", "float32"): 0.03 * PEAK_FP32,
                ("torch", "float16"): 0.6 * PEAK_TENSOR, ("torch", "bfloat16"): 0.6 * PEAK_TENSOR}
    for name in ("numpy", "torch"):
        for n in gemm_sizes:
            t = 20e-6 + 2 * n**3 / (0.8 * CPU_FLOPS)
            rows.append(dict(throughput._row("gemm", "gemm", name, "cpu", "float32", n,
                                             _timing(t)), device=CPU))
    for (name, dtype), rate in gpu_gemm.items():
        for n in gemm_sizes:
            t = 8e-6 + 2 * n**3 / rate
            rows.append(dict(throughput._row("gemm", "gemm", name, "cuda", dtype, n, _timing(t)),
                             device=GPU))
    first = rows[0]
    for layer in TABLE_I:  # as throughput.table1_gemm_rows records them
        g = im2col_gemm(layer, 4)
        t = _timing(10e-6 + g.flops / (0.65 * PEAK_FP32))
        row = {"experiment": "table1-gemm", "op": layer.name, "backend": "torch",
               "device_kind": "cuda", "device": GPU, "dtype": "float32", "size": g.n,
               "bytes": g.min_bytes, "flops": g.flops, "median_s": t.median_s, "iqr_s": t.iqr_s,
               "min_s": t.min_s, "max_s": t.max_s, "repeats": t.repeats,
               "gb_s": g.min_bytes / t.median_s / 1e9, "gflop_s": g.flops / t.median_s / 1e9,
               "status": f"ok: M={g.m} N={g.n} K={g.k}"}
        rows.append(_pick(row, first))
    return _save(directory, f"{throughput.PREFIX}{SLUG}", rows, throughput.COMMAND)


# ---------------------------------------------------------------------------- notebooks 03-06

#: Sustained rates of the synthetic GPU and CPU per strategy (FLOP/s of the layer's direct
#: FLOP count), and a fixed cost per call (ms).
_GPU_RATE = {"reference": 25e12, "im2col-gemm": 9e12, "im2col-tiled": 3e12, "direct-naive": 0.6e12,
             "direct-tiled": 1.5e12}
_CPU_RATE = {"reference": 0.8e12, "im2col-gemm": 0.3e12, "direct-naive": 0.02e12}


def _conv_ms(cfg, strategy: str, device: str, backward: bool) -> float:
    """Synthetic milliseconds of one call. FFT's cost does not grow with the kernel's k x k
    (its own FLOP count), the others' does: FFT wins for large kernels, loses for small."""
    strat = STRATEGIES[strategy]
    if strategy == "fft":
        rate = 8e12 if device == "cuda" else 0.25e12
        seconds = strat.flops(cfg, backward) / rate
    else:
        rates = _GPU_RATE if device == "cuda" else _CPU_RATE
        seconds = STRATEGIES["reference"].flops(cfg, backward) / rates.get(strategy, 0.1e12)
    return 1e3 * seconds + (0.02 if device == "cuda" else 0.05)


def _conv_row(cfg, strategy: str, device: str, backward: bool, refuse: str | None = None) -> dict:
    """A row as :func:`helpers.experiments.sweep.measure` returns it, for the synthetic machine."""
    strat = STRATEGIES[strategy]
    row = {"strategy": strategy, "family": strat.family, "device": GPU if device == "cuda" else CPU,
           "pass": "forward+backward" if backward else "forward", "median_ms": None,
           "iqr_ms": None, "gflop_per_s": None, "flops": strat.flops(cfg, backward),
           "workspace_bytes": strat.workspace_bytes(cfg, backward), "peak_bytes": None,
           "status": "ok"}
    reason = strat.supports(cfg, device) or refuse
    if reason:
        return dict(row, status=reason)
    ms = _conv_ms(cfg, strategy, device, backward)
    tensors = 4 * (math.prod(cfg.x_shape) + math.prod(cfg.w_shape) + math.prod(cfg.y_shape))
    row.update(median_ms=ms, iqr_ms=0.03 * ms, gflop_per_s=row["flops"] / (ms * 1e-3) / 1e9)
    if backward:
        row["peak_bytes"] = int(2 * tensors + (row["workspace_bytes"] or tensors // 4))
    return row


def _conv_table1(directory, batch: int) -> str:
    rows = []
    for layer in TABLE_I:
        cfg = layer.with_batch(batch)
        b, i, f, k, s = cfg.study
        for device in ("cpu", "cuda"):
            ref_ms = {}
            for name in ["reference"] + [n for n in STRATEGIES if n != "reference"]:
                if device not in STRATEGIES[name].devices:
                    continue
                for backward in (False, True):
                    refuse = ("refused: over the 10 s budget on the CPU (synthetic)"
                              if device == "cpu" and batch > 1 else None)
                    m = _conv_row(cfg, name, device, backward, refuse)
                    row = {"layer": cfg.name, "b": b, "i": i, "f": f, "k": k, "s": s, "c": cfg.c,
                           **m, "vs_reference": None}
                    if m["median_ms"] is not None:
                        if name == "reference":
                            ref_ms[m["pass"]] = m["median_ms"]
                        if ref_ms.get(m["pass"]):
                            row["vs_reference"] = m["median_ms"] / ref_ms[m["pass"]]
                    rows.append(_pick(row, conv_bench.FIELDS))
    return _save(directory, f"{conv_bench.PREFIX}b{batch}_{SLUG}", rows, conv_bench.COMMAND)


def _sweep(directory) -> str:
    preset = sweep.PRESETS["paper"]
    rows = []
    for point in preset.points():
        for name in STRATEGIES:
            for device in ("cpu", "cuda"):
                refuse = "refused: over the 2 s budget on the CPU (synthetic)" if device == "cpu" \
                    else None
                rows.append(_pick({"preset": preset.name, **point.fields(),
                                   **_conv_row(point.cfg, name, device, True, refuse)},
                                  sweep.FIELDS))
    return _save(directory, f"{sweep.PREFIX}{SLUG}", rows,
                 f"python -m helpers.experiments.sweep --preset paper --out "
                 f"results/{sweep.PREFIX}{SLUG}.csv",
                 extra={"preset": preset.name, "scale": preset.note, "seconds": 1234.5})


# ---------------------------------------------------------------------------------- notebook 02

#: Synthetic share of GPU training time per layer type and network (sums to 1).
_SHARES = {"alexnet": (0.78, 0.03, 0.03, 0.09, 0.03, 0.04),
           "googlenet": (0.84, 0.04, 0.04, 0.01, 0.05, 0.02),
           "vgg16": (0.88, 0.03, 0.03, 0.03, 0.01, 0.02),
           "overfeat": (0.86, 0.02, 0.02, 0.06, 0.02, 0.02)}


def _hotspots(directory) -> str:
    rows = []
    for model in NAMES:
        total = {"alexnet": 0.35, "googlenet": 0.9, "vgg16": 4.1, "overfeat": 1.2}.get(model, 1.0)
        shares = dict(zip(GROUPS, _SHARES.get(model, (0.8, 0.04, 0.04, 0.04, 0.04, 0.04))))
        profile = HotspotProfile(
            model=model, device="cuda", device_label=GPU, time_kind="GPU time (CUDA kernels)",
            batch=hotspots.GPU_DEFAULTS["batch"], input_size=NATIVE_INPUT[model],
            iterations=hotspots.GPU_DEFAULTS["iterations"], warmup=1,
            seconds={g: total * shares[g] for g in GROUPS}, detail={}, total_s=total,
            wall_s=1.04 * total, threads=32)
        rows += profile.rows()
    return _save(directory, f"{hotspots.PREFIX}{SLUG}", rows, hotspots.COMMAND)


# ---------------------------------------------------------------------------------- notebook 07


def _kernel_resources(directory) -> str:
    rows = []
    cc = "9.0"
    for j, spec in enumerate(KERNELS):
        regs = 24 + 4 * (j % 9)
        smem = {"direct-tiled": 4608, "im2col-tiled": 8192}.get(spec.family, 0)
        if spec.name == "transpose_shared_kernel":
            smem = 32 * 33 * 4
        occ = occupancy.occupancy(cc, spec.threads_per_block, regs, smem)
        rows.append({"kernel": spec.name, "module": spec.module, "family": spec.family,
                     "signature": "array(float32, 4d, C), array(float32, 4d, C)",
                     "threads_per_block": spec.threads_per_block, "regs_per_thread": regs,
                     "smem_per_block": smem, "local_mem_per_thread": 0,
                     "active_blocks": occ.active_blocks, "active_warps": occ.active_warps,
                     "max_warps": occ.limits.max_warps,
                     "occupancy_pct": round(100 * occ.occupancy, 1), "limiter": occ.limiter,
                     "driver_active_blocks": occ.active_blocks, "gpu": GPU_NAME,
                     "compute_capability": cc, "device": GPU, "device_kind": "cuda"})
    return _save(directory, f"{kernel_resources.PREFIX}{SLUG}", rows, kernel_resources.COMMAND)


def _gpu_experiments(directory) -> str:
    rows, n = [], 1 << 23
    for s in (1, 2, 4, 8, 16, 32):
        sectors = min(32, 4 * s) / 4  # 32-byte sectors per 128 useful bytes, relative
        t = 8 * n / (0.85 * PEAK_BW) * (0.5 + 0.5 * sectors)
        rows.append(memory_access.timings._row("coalescing", f"stride {s}", s, n, _timing(t),
                                               8 * n))
    size = 8192
    for variant, pitch, slow in (("naive", 0, 3.0), ("shared 32 x 32", 32, 1.6),
                                 ("shared 32 x 33", 33, 1.0)):
        t = 8 * size * size / (0.8 * PEAK_BW) * slow
        rows.append(memory_access.timings._row("transpose", variant, pitch, size * size,
                                               _timing(t), 8 * size * size))
    for variant, slow in (("parity", 2.0), ("warp", 1.0)):
        rows.append(memory_access.timings._row("divergence", variant, 256, 1 << 22,
                                               _timing(1.5e-4 * slow), None))
    return _save(directory, f"{memory_access.PREFIX}{SLUG}", rows, memory_access.COMMAND)


# ---------------------------------------------------------------------------------- notebook 08

_LINK = 24e9  # synthetic pinned-copy bandwidth (bytes/s)


def _transfers(directory) -> list[str]:
    common = {"device": GPU, "device_kind": "cuda", "source": "measured", "status": "ok"}
    bandwidth = []
    for direction in transfers.DIRECTIONS:
        for memory in transfers.MEMORY_KINDS:
            link = _LINK * (0.45 if memory == "pageable" else 1.0) * (0.95 if direction == "d2h"
                                                                       else 1.0)
            for size in transfers.DEFAULT_SIZES:
                ms = 1e3 * (8e-6 + size / link)
                bandwidth.append(_pick(dict(common, experiment="bandwidth", direction=direction,
                                            memory=memory, size_bytes=size, repeats=20,
                                            median_ms=ms, iqr_ms=0.02 * ms,
                                            gb_s=size / (ms / 1e3) / 1e9),
                                       transfers.BANDWIDTH_FIELDS))
    overlap, share, timeline = [], [], []
    chunks = 4
    for lay in TABLE_I:
        base = transfers._layer_fields(lay)
        h2d = 1e3 * base["bytes_in"] / _LINK
        d2h = 1e3 * base["bytes_out"] / (0.95 * _LINK)
        comp = _conv_ms(lay, "reference", "cuda", False)
        page = 1e3 * (base["bytes_in"] / (0.45 * _LINK) + base["bytes_out"] / (0.43 * _LINK)) + comp
        pinned = h2d + comp + d2h
        piped = max(h2d, comp, d2h) + (h2d + comp + d2h - max(h2d, comp, d2h)) / chunks
        overlap.append(_pick(dict(common, experiment="overlap", chunks=chunks, repeats=10, **base,
                                  sequential_pageable_ms=page, sequential_pinned_ms=pinned,
                                  overlapped_ms=piped, h2d_ms=h2d, compute_ms=comp, d2h_ms=d2h,
                                  speedup=page / piped,
                                  overlap=transfer_model.overlap_achieved(h2d, comp, d2h, piped),
                                  max_rel_error=2e-4, matches=True),
                             transfers.OVERLAP_FIELDS))
        comp_fb = _conv_ms(lay, "reference", "cuda", True)
        for strategy in transfers.TRANSFER_STRATEGIES:
            pieces = lay.n if strategy == "small-copies" else chunks if strategy == "overlapped" \
                else 1
            if strategy == "overlapped":
                total = max(h2d, comp_fb, d2h) + (h2d + d2h) / chunks
                parts = dict(h2d_ms=None, d2h_ms=None, copy_ms=total - comp_fb)
            else:
                slow = {"pageable": 1 / 0.45, "pinned": 1.0, "small-copies": 1 / 0.3}[strategy]
                a, b = h2d * slow, d2h * slow
                total = a + comp_fb + b
                parts = dict(h2d_ms=a, d2h_ms=b, copy_ms=a + b)
            share.append(_pick(dict(common, experiment="share", strategy=strategy,
                                    pieces=pieces, repeats=10, **base, compute_ms=comp_fb,
                                    total_ms=total, copy_share=parts["copy_ms"] / total,
                                    **parts, **{"pass": "forward+backward"}),
                               transfers.SHARE_FIELDS))
        # the stages of the sequential and overlapped runs, laid out as the estimate lays them
        # out, rescaled to the synthetic run's times
        est = transfer_model.estimated_timeline(lay.name, chunks)
        est_total = max(t["end_ms"] for t in est if t["run"] == "overlapped")
        for t in est:
            scale = (page / max(x["end_ms"] for x in est if x["run"] == "sequential")
                     if t["run"] == "sequential" else piped / est_total)
            timeline.append(_pick(dict(t, experiment="timeline", layer=lay.name, b=lay.n,
                                       chunks=chunks, start_ms=t["start_ms"] * scale,
                                       end_ms=t["end_ms"] * scale, **common),
                                  transfers.TIMELINE_FIELDS))
    names = [_save(directory, f"{transfers.PREFIX}bandwidth_{SLUG}", bandwidth, transfers.COMMAND)]
    for experiment, rows in (("overlap", overlap), ("share", share), ("timeline", timeline)):
        names.append(_save(directory, f"{transfers.PREFIX}{experiment}_b128_{SLUG}", rows,
                           transfers.COMMAND))
    return names


# ---------------------------------------------------------------------------------- notebook 09


def _images_per_s(model: str, device: str, batch: int, workers: int = 0, augment: bool = True,
                  precision: str = "fp32", channels_last: bool = False) -> tuple[float, float]:
    """(images/s, share of the step spent waiting for data) of the synthetic machine."""
    depth = training_cnns.MODELS[model].depth if model in training_cnns.MODELS else 10
    if device == "cuda":
        compute = 2e-4 * depth / 5 + batch * 2e-6 * depth
        compute /= {"fp32": 1.0, "bf16": 1.7, "fp16": 1.8}[precision] * (1.1 if channels_last
                                                                         else 1.0)
    else:
        compute = 1e-3 + batch * 4e-4 * depth
    wait = batch * (6e-5 if augment else 3e-5) / (1 + 2 * workers)
    return batch / (compute + wait), wait / (compute + wait)


def _training(directory) -> list[str]:
    rows = []

    def add(experiment, model, device, batch, **kw):
        ips, wait_share = _images_per_s(model, device, batch, **kw)
        steps = 20
        total = steps * batch / ips
        rows.append(training_throughput._row(
            experiment=experiment, dataset="lfw_subset", model=model,
            depth=training_cnns.MODELS[model].depth, device_kind=device,
            device=GPU if device == "cuda" else CPU, batch_size=batch,
            workers=kw.get("workers", 0), augment=kw.get("augment", True), image_size=32,
            channels=3, precision=kw.get("precision", "fp32"),
            channels_last=kw.get("channels_last", False), steps=steps, images=steps * batch,
            total_s=total, wait_s=wait_share * total, compute_s=(1 - wait_share) * total,
            images_per_s=ips, wait_share=wait_share,
            gpu_util_mean=(35.0 + 10 * batch / 1024) if device == "cuda" else math.nan,
            cpu_util_mean=60.0, status="ok"))

    for device, batches in (("cpu", (8, 32, 128)), ("cuda", (16, 64, 256, 1024))):
        for b in batches:
            add("batch", "small", device, b)
    for device, b in (("cpu", 64), ("cuda", 256)):
        for augment in (False, True):
            for w in (0, 1, 2, 4, 8):
                add("workers", "small", device, b, workers=w, augment=augment)
    for model in training_cnns.MODELS:
        for device in ("cpu", "cuda"):
            add("depth", model, device, 64)
    for precision in ("fp32", "bf16", "fp16"):
        for cl in (False, True):
            add("precision", "resnet20", "cuda", 256, precision=precision, channels_last=cl)
    add("utilisation", "small", "cuda", 256)
    names = [_save(directory, f"{training_throughput.PREFIX}{SLUG}", rows,
                   training_throughput.COMMAND)]
    samples = []
    for j in range(60):
        t = 0.1 * (j + 1)
        busy = 30.0 + 25.0 * (j % 5 == 0) + 5.0 * math.sin(j / 3)
        samples.append({"experiment": "utilisation_trace", "model": "small",
                        "dataset": "lfw_subset", "device_kind": "cuda", "batch_size": 256,
                        "t_s": t, "gpu_util": busy, "gpu_mem_bytes": 2.1e9 + 1e6 * j,
                        "cpu_util": 85.0 + 5.0 * math.cos(j / 4)})
    names.append(_save(directory, f"{training_throughput.PREFIX}utilisation_{SLUG}", samples,
                       training_throughput.COMMAND))
    return names


def make_synthetic_results(directory: pathlib.Path | str) -> list[str]:
    """Write a synthetic results folder into ``directory`` (created if missing).

    One dataset per experiment the notebooks read, named as its recording command names it:
    ``01_throughput_<slug>``, ``conv_table1_b128_<slug>``, ``conv_table1_b1_<slug>``,
    ``sweep_paper_<slug>``, ``hotspots_<slug>``, ``kernel_resources_<slug>``,
    ``gpu_experiments_<slug>``, ``transfers_{bandwidth,overlap,share,timeline}_..._<slug>``,
    ``training_<slug>`` and ``training_utilisation_<slug>``, where ``<slug>`` is
    :data:`SLUG`. Each JSON names :data:`GPU_NAME`, :data:`DRIVER`, :data:`CUDA` and
    :data:`DATE`, and says ``"synthetic": true``.

    Returns:
        The dataset names written (file stems), in the order above.
    """
    directory = pathlib.Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    return [_throughput(directory), _conv_table1(directory, 128), _conv_table1(directory, 1),
            _sweep(directory), _hotspots(directory), _kernel_resources(directory),
            _gpu_experiments(directory), *_transfers(directory), *_training(directory)]
