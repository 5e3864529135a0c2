"""Registers per thread and shared memory per block of the workbook's kernels, and the occupancy
they allow, beside the study's Table II and its Figure 6 findings.

:func:`measure` launches every kernel of :data:`helpers.kernels.KERNELS` once on tiny inputs so
that Numba compiles it for this GPU, reads Numba's figures (registers, static shared memory in
bytes, local memory in bytes per thread) and adds the theoretical occupancy at the kernel's block
size, calculated by :mod:`helpers.occupancy` and asked of the CUDA driver. Only a GPU has these
figures (the simulator compiles nothing); without one, :func:`recorded` reads those recorded in
``results/kernel_resources_*``. Command line: ``python -m helpers.experiments.kernel_resources``.

Source: Li et al., "Performance Analysis of GPU-based Convolutional Neural Networks", ICPP 2016,
Section V-C, Table II and Figure 6; CUDA Driver API, occupancy functions.
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np
import torch
from numba import cuda

from helpers import elementwise as ew
from helpers import occupancy, results
from helpers.conv import config_for, depthwise, direct, gemm, unroll, winograd
from helpers.conv.gemm import KERNELS as GEMM_KERNELS
from helpers.device import backend
from helpers.device.arrays import cuda_device, to_torch
from helpers.device.progress import time_limit_status, time_up
from helpers.experiments.memory_access import (
    GpuRequired,
    explain_banks,
    explain_coalescing,
    explain_divergence,
    gpu_refusal,
)
from helpers.kernels import KERNELS, KernelSpec
from helpers.paper import STUDY_FIGURE_6, STUDY_TABLE_II

__all__ = [
    "COMMAND", "PREFIX", "STUDY_FIGURE_6", "STUDY_TABLE_II", "compare_with_driver",
    "driver_active_blocks", "format_table", "main", "measure", "recorded", "save_kernel_resources"]

#: File-name prefix of the tables recorded in ``results/``.
PREFIX = "kernel_resources_"
#: The command that records the table, on a GPU.
COMMAND = "python -m helpers.experiments.kernel_resources --save"


def _launch_every_kernel(deadline: float | None = None) -> int:
    """Launch each kernel of :data:`KERNELS` once on tiny inputs (through the workbook's own
    host code where there is one), so that Numba compiles it for the current device with the
    argument types it really gets. Returns how many launches were left out because
    ``deadline`` (a :func:`time.monotonic` value; None for none) had passed."""
    rng = np.random.default_rng(0)
    dev = cuda_device()
    x_np = rng.standard_normal((1, 2, 8, 8), dtype=np.float32)
    w_np = rng.standard_normal((2, 2, 3, 3), dtype=np.float32)
    cfg = config_for(x_np.shape, w_np.shape, 1, 1)
    dw_cfg = config_for(x_np.shape, (2, 1, 3, 3), 1, 1, groups=2)  # depthwise: groups = C
    x, w = to_torch(x_np, dev), to_torch(w_np, dev)
    dy = to_torch(rng.standard_normal(cfg.y_shape, dtype=np.float32), dev)
    a = rng.standard_normal((20, 12), dtype=np.float32)
    # 132 x 136 x 8 (multiples of 4): whole 128 x 128 tiles and edges, so rungs 6 and 7 launch
    # both their fast and their guarded kernel
    big = rng.standard_normal((132, 8), dtype=np.float32)
    big_b = rng.standard_normal((8, 136), dtype=np.float32)
    v = rng.standard_normal(64, dtype=np.float32)  # notebook 01's kernels, through its wrappers
    launches = (
        lambda: direct.launch_every_kernel(),          # the first kernels and the new ones
        lambda: winograd.backward(x, w, dy, cfg, "cuda"),  # all six of its kernels
        lambda: depthwise.forward_tiled(x, w[:, :1].contiguous(), dw_cfg),
        lambda: depthwise.backward_cuda(x, w[:, :1].contiguous(), dy, dw_cfg),
        lambda: depthwise.forward_naive(x, w[:, :1].contiguous(), dw_cfg),
        lambda: unroll.col2im(unroll.im2col(x, cfg), cfg),               # window kernels
        lambda: unroll.col2im_first(unroll.im2col_first(x, cfg), cfg),   # the first ones
        *[lambda name=name: gemm.gemm(a, a.T.copy(), name) for name in GEMM_KERNELS[:5]],
        *[lambda name=name: gemm.gemm(big, big_b, name) for name in GEMM_KERNELS[5:]],
        lambda: gemm.gemm_nt(torch.from_numpy(a), torch.from_numpy(a)),  # split-K + reduction
        lambda: ew.relu(v),
        lambda: ew.relu(v, grid_stride_blocks=1),
        lambda: ew.saxpy(2.0, v, v),
        lambda: ew.thread_map(64, 32),
        lambda: explain_coalescing(strides=(1,), warps=1),
        lambda: explain_banks(rows=32, cols=32),   # both transpose kernels
        lambda: explain_divergence(n=64, iters=1),
    )
    left_out = 0
    for launch in launches:
        if time_up(deadline):
            left_out += 1
        else:
            launch()
    if backend.MODE == "gpu":
        torch.cuda.synchronize()
    return left_out


def driver_active_blocks(dispatcher, threads_per_block: int, dynamic_smem: int = 0) -> dict:
    """Resident blocks per SM of each compiled variant of a kernel, as the CUDA driver
    computes them (``cuOccupancyMaxActiveBlocksPerMultiprocessor``, through Numba's
    ``max_cooperative_grid_blocks``, which is that figure times the SM count).

    Args:
        dispatcher: a ``@cuda.jit`` kernel launched at least once (so it is compiled).
        threads_per_block: block size, 1..1024.
        dynamic_smem: bytes of dynamic shared memory per block, >= 0 (on top of the static).

    Returns:
        {argument types: active blocks per SM (int)} for every compiled variant.

    Raises:
        GpuRequired: no GPU (the simulator has no driver).
        ValueError: a block size outside 1..1024 or negative shared memory.

    Source: CUDA Driver API, occupancy functions; study Figure 6 (achieved occupancy).
    """
    reason = gpu_refusal()
    if reason:
        raise GpuRequired(reason)
    if not 1 <= threads_per_block <= 1024:
        raise ValueError(f"threads_per_block must be in 1..1024, got {threads_per_block}")
    if dynamic_smem < 0:
        raise ValueError(f"dynamic_smem must be >= 0 bytes, got {dynamic_smem}")
    sms = cuda.get_current_device().MULTIPROCESSOR_COUNT
    return {args: int(k.max_cooperative_grid_blocks(threads_per_block, dynamic_smem)) // sms
            for args, k in dispatcher.overloads.items()}


def _device_cc() -> str:
    major, minor = cuda.get_current_device().compute_capability
    return f"{major}.{minor}"


def measure(kernels: list[KernelSpec] | None = None, *, deadline: float | None = None
            ) -> list[dict]:
    """Registers per thread and shared memory per block of the workbook's kernels, compiled
    for this GPU, with the occupancy each gets at its block size.

    Compiles each kernel by launching it once on tiny inputs, then reads Numba's figures
    (``dispatcher.get_regs_per_thread()``, ``get_shared_mem_per_block()``,
    ``get_local_mem_per_thread()``: one per compiled variant). The occupancy is calculated by
    :func:`helpers.occupancy.occupancy` for this GPU's compute capability and, beside it, asked
    of the driver (:func:`driver_active_blocks`): the two should agree.

    Args:
        kernels: default :data:`helpers.kernels.KERNELS`.
        deadline: a :func:`time.monotonic` value after which no more kernels are launched
            (compiled); a kernel not compiled by then has no row. None: no deadline.

    Returns:
        One dict per (kernel, compiled variant): ``kernel, module, family, signature,
        threads_per_block, regs_per_thread, smem_per_block`` (bytes, static),
        ``local_mem_per_thread`` (bytes; register spills), ``active_blocks``, ``active_warps``,
        ``max_warps``, ``occupancy_pct`` (theoretical, %), ``limiter`` (calculated; None if the
        compute capability is not in :data:`helpers.occupancy.SM_LIMITS`),
        ``driver_active_blocks``, ``gpu``, ``compute_capability``, ``device`` ("GPU: name"),
        ``device_kind`` ("cuda").

    Raises:
        GpuRequired: no GPU (:func:`recorded` gives the tables recorded in ``results/``).

    Source: study Table II (registers and shared memory of each implementation's kernel) and
    Figure 6 (occupancy).
    """
    reason = gpu_refusal()
    if reason:
        raise GpuRequired(f"{reason}. To record the table on a GPU: {COMMAND}")
    _launch_every_kernel(deadline)
    cc = _device_cc()
    gpu_name = backend.info().gpu_name or cuda.get_current_device().name
    if isinstance(gpu_name, bytes):
        gpu_name = gpu_name.decode()
    rows = []
    for spec in kernels or KERNELS:
        kern = spec.dispatcher()
        regs = kern.get_regs_per_thread()
        smem = kern.get_shared_mem_per_block()
        local = kern.get_local_mem_per_thread()
        try:
            driver = driver_active_blocks(kern, spec.threads_per_block)
        except Exception:  # noqa: BLE001 - the calculated figure is still reported
            driver = {}
        for args in kern.overloads:
            row = {"kernel": spec.name, "module": spec.module, "family": spec.family,
                   "signature": ", ".join(str(a) for a in args),
                   "threads_per_block": spec.threads_per_block,
                   "regs_per_thread": int(regs[args]), "smem_per_block": int(smem[args]),
                   "local_mem_per_thread": int(local[args]),
                   "active_blocks": None, "active_warps": None, "max_warps": None,
                   "occupancy_pct": None, "limiter": None,
                   "driver_active_blocks": driver.get(args), "gpu": gpu_name,
                   "compute_capability": cc, "device": f"GPU: {gpu_name}",
                   "device_kind": "cuda"}
            if cc in occupancy.SM_LIMITS:
                occ = occupancy.occupancy(cc, spec.threads_per_block,
                                          max(1, row["regs_per_thread"]), row["smem_per_block"])
                row.update(active_blocks=occ.active_blocks, active_warps=occ.active_warps,
                           max_warps=occ.limits.max_warps,
                           occupancy_pct=round(100 * occ.occupancy, 1), limiter=occ.limiter)
            rows.append(row)
    return rows


def compare_with_driver(block_sizes=(32, 64, 128, 256, 512, 1024),
                        dynamic_smem=(0, 4096, 16384, 40960),
                        kernels: list[KernelSpec] | None = None) -> list[dict]:
    """:func:`helpers.occupancy.occupancy` against the CUDA driver's own figure, for every
    compiled kernel at several block sizes and amounts of dynamic shared memory (bytes).

    Returns:
        One dict per (kernel, block size, dynamic shared bytes): ``kernel, regs_per_thread,
        threads_per_block, smem_per_block`` (static + dynamic bytes), ``calculated``,
        ``driver`` (active blocks per SM), ``agree`` (bool). Combinations over the device's
        per-block limits are left out.

    Raises:
        GpuRequired: no GPU. ValueError: the GPU's compute capability is not in
            :data:`helpers.occupancy.SM_LIMITS`.

    Source: CUDA Driver API, occupancy functions; study Figure 6 (achieved occupancy).
    """
    reason = gpu_refusal()
    if reason:
        raise GpuRequired(reason)
    _launch_every_kernel()
    cc = _device_cc()
    lim = occupancy.limits_for(cc)
    rows = []
    for spec in kernels or KERNELS:
        kern = spec.dispatcher()
        for args, k in kern.overloads.items():
            regs, static = int(k.regs_per_thread), int(k.shared_mem_per_block)
            for tpb in block_sizes:
                if tpb > int(k.max_threads_per_block):
                    continue
                for dyn in dynamic_smem:
                    if static + dyn > min(lim.max_smem_per_block, 48 * 1024):
                        continue  # over 48 KB needs an opt-in attribute
                    calc = occupancy.occupancy(cc, tpb, max(1, regs), static + dyn).active_blocks
                    drv = driver_active_blocks(kern, tpb, dyn)[args]
                    rows.append({"kernel": spec.name, "regs_per_thread": regs,
                                 "threads_per_block": tpb, "smem_per_block": static + dyn,
                                 "calculated": calc, "driver": drv, "agree": calc == drv})
    return rows


def recorded(directory=None, *, every_gpu: bool = False) -> results.Recorded:
    """The tables of :func:`measure` recorded in ``results/kernel_resources_*`` (or
    ``directory``): the newest recording's, or with ``every_gpu`` those of every GPU recorded.

    Returns:
        A :class:`helpers.results.Recorded`: rows as :func:`measure` (``device`` the GPU and
        date); its ``note`` names them or, with no rows, says to run :data:`COMMAND` on a GPU.
        Never invents a figure.

    Source: study Table II.
    """
    rec = results.recorded(PREFIX, COMMAND, directory=directory)
    if not rec or every_gpu:
        return rec
    newest = max(rec.datasets, key=lambda ds: ds.date)
    label = f"{newest.device}, {newest.date[:10]}"
    return results.Recorded([r for r in rec.rows if r["device"] == label], [newest], rec.command)


_HEADER = (f"{'kernel':<24}{'threads/block':>14}{'regs/thread':>12}{'smem/block (B)':>16}"
           f"{'local (B)':>10}{'active warps':>14}{'occupancy':>11}{'driver blocks':>15}"
           "  limited by")


def _blank(value) -> bool:
    return value is None or value == ""


def _device(row: dict) -> str:
    return row.get("device") or f"GPU: {row['gpu']}"


def format_table(rows: list[dict], title: str = "") -> str:
    """Rows of :func:`measure` (live or recorded) as text, one line per kernel and one block per
    device, under ``title``; unknown figures shown as "?". No rows: ``title`` alone."""
    if not rows:
        return title
    lines = [title] if title else []
    for device in dict.fromkeys(_device(r) for r in rows):
        lines += [f"Our kernels on {device}", _HEADER]
        for r in (r for r in rows if _device(r) == device):
            warps = "?" if _blank(r["active_warps"]) else f"{r['active_warps']} of {r['max_warps']}"
            occ = "?" if _blank(r["occupancy_pct"]) else f"{r['occupancy_pct']:.1f} %"
            driver = "?" if _blank(r["driver_active_blocks"]) else r["driver_active_blocks"]
            lines.append(f"{r['kernel']:<24}{r['threads_per_block']:>14}{r['regs_per_thread']:>12}"
                         f"{r['smem_per_block']:>16,}{r['local_mem_per_thread']:>10}{warps:>14}"
                         f"{occ:>11}{driver!s:>15}  {r['limiter'] or '?'}")
    return "\n".join(lines)


def save_kernel_resources(directory=None, *, deadline: float | None = None,
                          command: str | None = None) -> tuple:
    """Write :func:`measure`'s rows on this GPU (``deadline`` as there) with
    :func:`helpers.results.save` as ``kernel_resources_<gpu>``, ``command`` (default
    :data:`COMMAND`) named as what made them.

    Returns:
        The (csv, json) paths written.

    Raises:
        GpuRequired: no GPU.
    """
    rows = measure(deadline=deadline)
    name = PREFIX + results.slug(rows[0]["gpu"])
    return results.save(name, rows, command=command or COMMAND, directory=directory)


def main(argv: list[str] | None = None) -> int:
    """``python -m helpers.experiments.kernel_resources [--save] [--out DIR] [--time-limit S]``:
    print our kernels' registers, shared memory and occupancy, measured now on a GPU (``--save``
    also writes them to ``--out``, default ``results/``; the kernels not compiled within
    ``--time-limit`` seconds are named, not tabled), else those recorded in ``results/``.
    Returns :data:`helpers.results.REFUSED` (3) without a GPU (nothing saved), 2 for a bad
    argument, else 0."""
    start = time.monotonic()
    parser = argparse.ArgumentParser(prog="python -m helpers.experiments.kernel_resources",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--save", action="store_true",
                        help=f"on a GPU, write the table to <out>/{PREFIX}<gpu>")
    parser.add_argument("--out", type=results.writable_folder, default=None, help="folder --save writes to (default results/)")
    parser.add_argument("--time-limit", type=float, default=None,
                        help="seconds after which no more kernels are compiled; those left out "
                             "are named")
    args = parser.parse_args(argv)
    if args.time_limit is not None and not args.time_limit > 0:
        parser.error(f"--time-limit must be > 0 seconds, got {args.time_limit:g}")
    deadline = None if args.time_limit is None else start + args.time_limit
    reason = gpu_refusal()
    if reason:
        if args.save:
            print(f"nothing saved: {reason}", flush=True)
        rec = recorded()
        print(format_table(rec.rows, f"No GPU here: {reason}.\n{rec.note}"))
        return results.REFUSED
    if args.save:
        paths = save_kernel_resources(args.out, deadline=deadline, command=" ".join(
            ["python -m helpers.experiments.kernel_resources",
             *(sys.argv[1:] if argv is None else argv)]))
        rows = results.load(paths[0].stem, paths[0].parent).rows
        print(format_table(rows, "Measured now and saved to " + ", ".join(map(str, paths))))
    else:
        rows = measure(deadline=deadline)
        print(format_table(rows, "Compiled and measured now"))
    missing = [k.name for k in KERNELS if k.name not in {r["kernel"] for r in rows}]
    if missing:
        why = time_limit_status(args.time_limit) if time_up(deadline) else "never launched"
        print(f"{why}: not compiled, so not in the table: " + ", ".join(missing))
    return 0


if __name__ == "__main__":
    sys.exit(main())
