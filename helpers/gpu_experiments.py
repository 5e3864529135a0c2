"""Inside the GPU: our kernels' registers and shared memory, and three small experiments on
how warps touch memory and branch (the study's Figure 6 and Table II).

The study explains its runtimes with nvprof metrics on the K40c: achieved occupancy mostly
under 30 % (cuda-convnet2 14-22 %: 116 registers per thread leave room for only 17 of 64
warps), global load efficiency under 20 %, and warp execution efficiency above 97 % for every
implementation except Theano-fft (66-81 %). Its Table II lists each implementation's registers
per thread and shared memory per block (:data:`STUDY_TABLE_II`). This module gives the same
views of the workbook's own kernels:

* :func:`kernel_resources` reads registers per thread and shared memory per block of every
  Numba CUDA kernel of the workbook from Numba's compiled kernels
  (``dispatcher.get_regs_per_thread()`` and ``get_shared_mem_per_block()``, after a launch has
  compiled them), with the occupancy each gets at its launch configuration, calculated by
  :mod:`helpers.occupancy` and asked of the CUDA driver
  (``cuOccupancyMaxActiveBlocksPerMultiprocessor`` through Numba). Only a GPU knows these
  figures: the simulator compiles nothing. :func:`resource_table` shows them live on a GPU,
  else from ``results/kernel_resources_*`` (written by :func:`save_kernel_resources`, or
  ``python -m helpers.gpu_experiments --resources --save`` on a GPU), else says none is
  recorded.

* Three experiments, each a small kernel with a function that **explains** it by recording,
  in the simulator (or on a GPU), which thread touched which address, and a function that
  **measures** it on a GPU (:func:`measure_coalescing`, :func:`measure_transpose`,
  :func:`measure_divergence`; :func:`gpu_timings` for all three, live or from
  ``results/gpu_experiments_*``):

  1. coalescing (:func:`strided_load_kernel`, :func:`explain_coalescing`): thread ``i`` loads
     ``src[i * stride]``; a warp's 32 addresses fall into 4 sectors of 32 bytes at stride 1 and
     32 sectors from stride 8 on, so 8 times the bytes move for the same useful data;
  2. shared-memory bank conflicts (:func:`transpose_shared_kernel`, :func:`explain_banks`): a
     transpose through a 32 x 32 tile reads a column of the tile; with 32 columns every lane
     of a warp hits the same bank (a 32-way conflict), with 33 (one column of padding) each
     lane hits its own;
  3. warp divergence (:func:`branch_kernel`, :func:`explain_divergence`): a branch on the
     parity of ``threadIdx.x`` splits every warp, which then runs both paths with half of its
     lanes; a branch on the warp index keeps every warp whole.

Addresses are counted from the start of each array, which ``cudaMalloc`` aligns to 256 bytes.
Shared memory has 32 banks of 4-byte words: word ``k`` lives in bank ``k % 32``.

Source: Li et al., "Performance Analysis of GPU-based Convolutional Neural Networks",
ICPP 2016, Section V-C, Figure 6 and Table II; NVIDIA CUDA C Best Practices Guide
("Coalesced access to global memory", "Shared memory and memory banks", "Branching and
divergence") and the "Efficient matrix transpose in CUDA C" example (32 x 33 tile).
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import sys

import numpy as np

from . import backend, occupancy, results, timing
from .kernels import KERNELS, KernelSpec
from numba import cuda, float32  # noqa: E402  (after helpers.backend decided the mode)

__all__ = [
    "STUDY_TABLE_II", "STUDY_FIGURE_6", "KernelSpec", "KERNELS", "GpuRequired",
    "gpu_refusal", "kernel_resources", "driver_active_blocks", "compare_with_driver",
    "ResourceTable", "resource_table", "save_kernel_resources",
    "strided_load_kernel", "transpose_naive_kernel", "transpose_shared_kernel", "branch_kernel",
    "TILE_DIM", "BLOCK_ROWS", "SECTOR_BYTES", "BANKS", "WARP", "SIMULATOR_MAX_THREADS",
    "sectors_of", "conflict_degree", "warp_efficiency",
    "CoalescingExplanation", "explain_coalescing", "BankExplanation", "explain_banks",
    "DivergenceExplanation", "explain_divergence",
    "measure_coalescing", "measure_transpose", "measure_divergence", "measure_all",
    "GpuTimings", "gpu_timings", "save_gpu_experiments", "main",
]

# ----------------------------------------------------------------------- the study's numbers

#: The study's Table II (K40c, CUDA 7.5, nvprof): registers per thread and shared memory per
#: block (KB) of each implementation's main convolution kernel, as the study reports them.
STUDY_TABLE_II: list[dict] = [
    {"implementation": "Caffe", "strategy": "unrolling", "regs_per_thread": 86, "smem_kb": 8.5},
    {"implementation": "cuDNN", "strategy": "unrolling", "regs_per_thread": 80, "smem_kb": 8.4},
    {"implementation": "Torch-cunn", "strategy": "unrolling", "regs_per_thread": 84,
     "smem_kb": 8.1},
    {"implementation": "Theano-CorrMM", "strategy": "unrolling", "regs_per_thread": 72,
     "smem_kb": 7.0},
    {"implementation": "cuda-convnet2", "strategy": "direct", "regs_per_thread": 116,
     "smem_kb": 16.0},
    {"implementation": "fbfft", "strategy": "FFT", "regs_per_thread": 106, "smem_kb": 10.0},
    {"implementation": "Theano-fft", "strategy": "FFT", "regs_per_thread": 2, "smem_kb": 4.5},
]

#: The study's Figure 6 (nvprof metrics on the K40c), in words, as the study reports them.
STUDY_FIGURE_6: dict[str, str] = {
    "achieved occupancy": "mostly under 30 %; cuda-convnet2 14-22 % (116 registers per thread: "
                          "17 active warps of 64)",
    "global load efficiency": "under 20 % for the implementations measured",
    "warp execution efficiency": "above 97 %, except Theano-fft (66-81 %)",
}

SECTOR_BYTES = 32   #: a global-memory transaction moves whole 32-byte sectors
BANKS = 32          #: shared-memory banks, each 4 bytes wide
WARP = 32           #: threads a warp
TILE_DIM = 32       #: edge of the transpose tile
BLOCK_ROWS = 8      #: the transpose's block is TILE_DIM x BLOCK_ROWS threads; each does 4 rows
TILE_WORDS = 1056   #: float32 words of the shared tile: TILE_DIM * (TILE_DIM + 1), padding included

#: Explanations run at most this many threads a launch (the simulator runs ~1e4 threads/s).
SIMULATOR_MAX_THREADS = 4_096

assert TILE_WORDS == TILE_DIM * (TILE_DIM + 1)  # a literal: Numba needs a constant array size


class GpuRequired(RuntimeError):
    """Raised by a measurement that needs a real CUDA GPU when there is none."""


def gpu_refusal() -> str | None:
    """None on a GPU, else why GPU measurements cannot be made here (for messages)."""
    if backend.MODE == "gpu":
        return None
    return (f"no CUDA GPU here (mode {backend.MODE!r}: {backend.MODE_REASON}); the simulator "
            "compiles nothing and times nothing")


# ------------------------------------------------------------------------------- kernels


@cuda.jit
def strided_load_kernel(src, dst, stride):
    """dst[i] = src[i * stride]: thread i loads the float32 ``stride`` elements after thread
    i - 1's. At stride 1 a warp's 32 loads are 128 consecutive bytes (coalesced)."""
    i = cuda.grid(1)
    if i < dst.size:
        dst[i] = src[i * stride]


@cuda.jit
def transpose_naive_kernel(src, dst):
    """dst[x, y] = src[y, x] straight from global memory: the reads of a warp are coalesced
    (consecutive x), its writes are a column of dst (a stride of one row apart)."""
    x = cuda.blockIdx.x * TILE_DIM + cuda.threadIdx.x
    y = cuda.blockIdx.y * TILE_DIM + cuda.threadIdx.y
    for j in range(0, TILE_DIM, BLOCK_ROWS):
        if y + j < src.shape[0] and x < src.shape[1]:
            dst[x, y + j] = src[y + j, x]


@cuda.jit
def transpose_shared_kernel(src, dst, pitch, record, rec):
    """dst = src.T through a 32 x 32 tile in shared memory, stored row by row with ``pitch``
    words a row: 32 (every lane of a column read in one bank) or 33 (one word of padding a
    row: each lane in its own bank). Reads and writes of global memory are both coalesced.

    Block (TILE_DIM, BLOCK_ROWS) threads, grid (ceil(W / 32), ceil(H / 32)). If ``rec`` is
    nonzero, the shared-memory word each thread writes (record[0]) and reads (record[1]) is
    recorded at ``record[kind, block, j // BLOCK_ROWS, threadIdx.y * 32 + threadIdx.x]``.
    """
    tile = cuda.shared.array(TILE_WORDS, float32)
    tx, ty = cuda.threadIdx.x, cuda.threadIdx.y
    bx, by = cuda.blockIdx.x, cuda.blockIdx.y
    block = by * cuda.gridDim.x + bx
    t = ty * TILE_DIM + tx  # linear thread index: warp t // 32 (= ty), lane t % 32 (= tx)
    x = bx * TILE_DIM + tx
    y = by * TILE_DIM + ty
    for j in range(0, TILE_DIM, BLOCK_ROWS):
        if y + j < src.shape[0] and x < src.shape[1]:
            k = (ty + j) * pitch + tx       # a row of the tile: lanes on consecutive words
            tile[k] = src[y + j, x]
            if rec:
                record[0, block, j // BLOCK_ROWS, t] = k
    cuda.syncthreads()
    x = by * TILE_DIM + tx                  # the transposed block
    y = bx * TILE_DIM + ty
    for j in range(0, TILE_DIM, BLOCK_ROWS):
        if y + j < dst.shape[0] and x < dst.shape[1]:
            k = tx * pitch + ty + j         # a column of the tile: lanes `pitch` words apart
            dst[y + j, x] = tile[k]
            if rec:
                record[1, block, j // BLOCK_ROWS, t] = k


@cuda.jit
def branch_kernel(x, out, path, iters, by_warp):
    """Two paths of equal length: ``iters`` multiply-adds (path 0) or ``iters`` square roots
    (path 1). The branch depends on the parity of threadIdx.x (``by_warp == 0``: every warp
    splits) or of the warp index threadIdx.x // 32 (``by_warp != 0``: warps stay whole).
    Each thread records its path in ``path[i]``."""
    i = cuda.grid(1)
    if i < x.size:
        t = cuda.threadIdx.x
        group = t // 32 if by_warp else t
        v = x[i]
        if group % 2 == 0:
            path[i] = 0
            for _ in range(iters):
                v = v * float32(0.99) + float32(0.01)
        else:
            path[i] = 1
            for _ in range(iters):
                v = math.sqrt(float32(0.5) * v * v + float32(1.0))
        out[i] = v


# --------------------------------------------------- resources of the workbook's kernels


def _launch_every_kernel() -> None:
    """Launch each kernel of :data:`KERNELS` once on tiny inputs (through the workbook's own
    host code where there is one), so that Numba compiles it for the current device with the
    argument types it really gets."""
    import torch

    from . import gemm
    from .conv import config_for, direct, unroll
    from .conv._arrays import cuda_device, to_torch

    rng = np.random.default_rng(0)
    dev = cuda_device()
    x_np = rng.standard_normal((1, 2, 8, 8), dtype=np.float32)
    w_np = rng.standard_normal((2, 2, 3, 3), dtype=np.float32)
    cfg = config_for(x_np.shape, w_np.shape, 1, 1)
    x, w = to_torch(x_np, dev), to_torch(w_np, dev)
    dy = to_torch(rng.standard_normal(cfg.y_shape, dtype=np.float32), dev)
    direct.forward_naive(x, w, cfg)
    direct.forward_tiled(x, w, cfg)
    direct.backward_cuda(x, w, dy, cfg)
    unroll.col2im(unroll.im2col(x, cfg), cfg)
    a = rng.standard_normal((20, 12), dtype=np.float32)
    gemm.gemm(a, a.T.copy(), "naive")
    gemm.gemm(a, a.T.copy(), "tiled")
    explain_coalescing(strides=(1,), warps=1)
    _transpose(np.zeros((32, 32), np.float32), "naive")
    explain_banks(rows=32, cols=32)
    explain_divergence(n=64, iters=1)
    if backend.MODE == "gpu":
        torch.cuda.synchronize()


def driver_active_blocks(dispatcher, threads_per_block: int, dynamic_smem: int = 0) -> dict:
    """Resident blocks per SM of each compiled variant of a kernel, as the CUDA driver
    computes them (``cuOccupancyMaxActiveBlocksPerMultiprocessor``, through Numba's
    ``max_cooperative_grid_blocks``, which is that figure times the SM count).

    Args:
        dispatcher: a ``@cuda.jit`` kernel launched at least once (so it is compiled).
        threads_per_block: block size, 1..1024.
        dynamic_smem: bytes of dynamic shared memory per block, >= 0 (on top of the static).

    Returns:
        {argument types: active blocks per SM} for every compiled variant.

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


def kernel_resources(kernels: list[KernelSpec] | None = None) -> list[dict]:
    """Registers per thread and shared memory per block of the workbook's kernels, compiled
    for this GPU, with the occupancy each gets at its block size.

    Compiles each kernel by launching it once on tiny inputs, then reads Numba's figures
    (``dispatcher.get_regs_per_thread()``, ``get_shared_mem_per_block()``,
    ``get_local_mem_per_thread()``: one per compiled variant). The occupancy is calculated by
    :func:`helpers.occupancy.occupancy` for this GPU's compute capability and, beside it, asked
    of the driver (:func:`driver_active_blocks`): the two should agree.

    Args:
        kernels: default :data:`KERNELS`.

    Returns:
        One dict per (kernel, compiled variant): ``kernel, module, family, signature,
        threads_per_block, regs_per_thread, smem_per_block`` (bytes, static),
        ``local_mem_per_thread`` (bytes; register spills), ``active_blocks``, ``active_warps``,
        ``max_warps``, ``occupancy_pct`` (theoretical, %), ``limiter`` (calculated; None if the
        compute capability is not in :data:`helpers.occupancy.SM_LIMITS`),
        ``driver_active_blocks``, ``gpu``, ``compute_capability``, ``device_kind`` ("cuda").

    Raises:
        GpuRequired: no GPU. Without one, :func:`resource_table` reads a recorded table.

    Source: study Table II (registers and shared memory of each implementation's kernel) and
    Figure 6 (occupancy).
    """
    reason = gpu_refusal()
    if reason:
        raise GpuRequired(f"{reason}. To record the table on a GPU: "
                          "python -m helpers.gpu_experiments --resources --save")
    _launch_every_kernel()
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
                   "compute_capability": cc, "device_kind": "cuda"}
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
    compiled kernel at several block sizes and amounts of dynamic shared memory.

    Returns:
        One dict per (kernel, block size, dynamic shared bytes): ``kernel, regs_per_thread,
        threads_per_block, smem_per_block`` (static + dynamic bytes), ``calculated``,
        ``driver`` (active blocks per SM), ``agree`` (bool). Combinations over the device's
        per-block limits are left out.

    Raises:
        GpuRequired: no GPU. ValueError: the GPU's compute capability is not in
            :data:`helpers.occupancy.SM_LIMITS`.
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


@dataclasses.dataclass
class ResourceTable:
    """What :func:`resource_table` found.

    Attributes:
        rows: rows of :func:`kernel_resources` (empty if none).
        source: where they come from: measured now on this GPU, or ``results/NAME`` with the
            GPU and date; "" if none.
        device: the GPU that compiled the kernels ("" if none).
        note: why there are no rows, and how to make them ("" if there are).
    """

    rows: list[dict]
    source: str
    device: str
    note: str

    def __str__(self) -> str:
        if not self.rows:
            return self.note
        head = (f"{'kernel':<24}{'threads/block':>14}{'regs/thread':>12}{'smem/block (B)':>16}"
                f"{'local (B)':>10}{'active warps':>14}{'occupancy':>11}{'driver blocks':>15}"
                f"  limited by")
        lines = [f"Our kernels, {self.source}", head]
        for r in self.rows:
            warps = "?" if r["active_warps"] in (None, "") else (
                f"{r['active_warps']} of {r['max_warps']}")
            occ = "?" if r["occupancy_pct"] in (None, "") else f"{r['occupancy_pct']:.1f} %"
            driver = "?" if r["driver_active_blocks"] in (None, "") else r["driver_active_blocks"]
            lines.append(f"{r['kernel']:<24}{r['threads_per_block']:>14}{r['regs_per_thread']:>12}"
                         f"{r['smem_per_block']:>16,}{r['local_mem_per_thread']:>10}{warps:>14}"
                         f"{occ:>11}{driver!s:>15}  {r['limiter'] or '?'}")
        return "\n".join(lines)


_RESOURCES_PREFIX = "kernel_resources_"
_HOW_TO_RESOURCES = ("On a machine with a CUDA GPU run `python -m helpers.gpu_experiments "
                     "--resources --save` (or helpers.gpu_experiments.save_kernel_resources()) "
                     "to record them in results/kernel_resources_<gpu>.csv.")


def resource_table(live: bool | None = None, directory=None) -> ResourceTable:
    """Our kernels' registers, shared memory and occupancy: measured now on a GPU, else the
    latest table recorded in ``results/`` (prefix ``kernel_resources_``), else none.

    Args:
        live: measure on this GPU (default: whenever there is one). ``True`` without a GPU
            raises.
        directory: where recorded tables are looked for (default ``results/``).

    Returns:
        A :class:`ResourceTable`; its ``note`` says, when there are no rows, that none is
        recorded and how to record one. Never invents a figure.

    Raises:
        GpuRequired: ``live=True`` without a GPU.

    Source: study Table II.
    """
    live = backend.MODE == "gpu" if live is None else live
    if live:
        rows = kernel_resources()
        device = f"GPU: {rows[0]['gpu']}" if rows else ""
        return ResourceTable(rows, f"compiled and measured now on {device} (cc "
                                   f"{rows[0]['compute_capability'] if rows else '?'})",
                             device, "")
    found = results.find(_RESOURCES_PREFIX, directory)
    if found:
        ds = found[-1]
        return ResourceTable(ds.rows, f"recorded on {ds.device}, {ds.date[:10]} "
                                      f"(results/{ds.name})", ds.device, "")
    return ResourceTable([], "", "", "No table of our kernels' registers and shared memory is "
                         "recorded in results/ yet, and this machine has no GPU to compile them "
                         "for (the simulator has no such figures). " + _HOW_TO_RESOURCES)


def save_kernel_resources(directory=None) -> tuple:
    """Measure :func:`kernel_resources` on this GPU and write them with
    :func:`helpers.results.save` as ``kernel_resources_<gpu>``.

    Returns:
        The (csv, json) paths written.

    Raises:
        GpuRequired: no GPU.
    """
    rows = kernel_resources()
    name = _RESOURCES_PREFIX + results.slug(rows[0]["gpu"])
    return results.save(name, rows, command="python -m helpers.gpu_experiments --resources --save",
                        directory=directory)


# ------------------------------------------------------------------- explain: coalescing


def _check_positive_int(name: str, value, lo: int = 1, hi: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < lo or (
            hi is not None and value > hi):
        rng = f"{lo}..{hi}" if hi is not None else f">= {lo}"
        raise ValueError(f"{name} must be an integer in {rng}, got {value!r}")
    return int(value)


def _device_copy(a: np.ndarray):
    return cuda.to_device(np.ascontiguousarray(a))


@dataclasses.dataclass
class CoalescingExplanation:
    """What :func:`explain_coalescing` recorded.

    Attributes:
        strides: the strides run. warps: warps launched per stride.
        addresses: {stride: int64 array (warps * 32,)}: the element index each thread loaded,
            read back from the kernel's output (the source held each element's own index).
        rows: one dict per stride: ``stride, lanes, requested_bytes`` (per warp request),
            ``sectors`` (32-byte sectors it touches), ``fetched_bytes``, ``load_efficiency_pct``
            (requested / fetched), ``span_bytes`` (first to last byte).
        correct: every output equals NumPy's ``src[::stride]`` (output poisoned with NaN first).
        device: where the kernel ran.
    """

    strides: tuple[int, ...]
    warps: int
    addresses: dict[int, np.ndarray]
    rows: list[dict]
    correct: bool
    device: str

    def __str__(self) -> str:
        lines = [f"{'stride':>7}{'bytes asked':>13}{'sectors (32 B)':>16}{'bytes moved':>13}"
                 f"{'load efficiency':>17}"]
        for r in self.rows:
            lines.append(f"{r['stride']:>7}{r['requested_bytes']:>13}{r['sectors']:>16}"
                         f"{r['fetched_bytes']:>13}{r['load_efficiency_pct']:>16.1f}%")
        return "\n".join(lines)


def sectors_of(element_indices, itemsize: int = 4) -> np.ndarray:
    """The distinct 32-byte sectors that loads of these element indices touch (the array
    starting on a 256-byte boundary, as ``cudaMalloc`` places it)."""
    idx = np.asarray(element_indices, dtype=np.int64)
    return np.unique(idx * itemsize // SECTOR_BYTES)


def explain_coalescing(strides=(1, 2, 4, 8, 16, 32), warps: int = 2) -> CoalescingExplanation:
    """Run :func:`strided_load_kernel` at each stride and record which element each thread
    loaded; count the 32-byte sectors each warp request touches.

    The source array holds each element's own index (exact in float32 below 2**24), so the
    output tells which address each thread read. Runs in the simulator (or on a GPU: the same
    recording, deterministic either way).

    Args:
        strides: element strides, each 1..64.
        warps: warps per launch (threads = 32 * warps), 1..16.

    Returns:
        A :class:`CoalescingExplanation`. At stride s, a warp asks for 128 bytes and touches
        ``min(32, 4 s)`` sectors: load efficiency 100 %, 50 %, 25 %, then 12.5 % from stride 8.

    Raises:
        ValueError: a stride or warp count out of range (the message names it).

    Source: study Figure 6 (global load efficiency under 20 %); CUDA C Best Practices Guide,
    "Coalesced access to global memory".
    """
    strides = tuple(_check_positive_int("stride", s, 1, 64) for s in strides)
    if not strides:
        raise ValueError("strides must name at least one stride in 1..64")
    warps = _check_positive_int("warps", warps, 1, 16)
    n = warps * WARP
    addresses, rows, correct = {}, [], True
    for s in strides:
        src = np.arange((n - 1) * s + 1, dtype=np.float32)
        dst = _device_copy(np.full(n, np.nan, np.float32))
        strided_load_kernel[math.ceil(n / 64), 64](_device_copy(src), dst, s)
        got = dst.copy_to_host()
        correct &= bool(np.array_equal(got, src[::s][:n]))
        idx = np.where(np.isnan(got), -1, got).astype(np.int64)
        addresses[s] = idx
        per_warp = [len(sectors_of(idx[w * WARP:(w + 1) * WARP])) for w in range(warps)]
        sectors = max(per_warp)
        asked = WARP * 4
        warp0 = idx[:WARP]
        rows.append({"stride": s, "lanes": WARP, "requested_bytes": asked, "sectors": sectors,
                     "fetched_bytes": sectors * SECTOR_BYTES,
                     "load_efficiency_pct": 100 * asked / (sectors * SECTOR_BYTES),
                     "span_bytes": int((warp0.max() - warp0.min() + 1) * 4)})
    return CoalescingExplanation(strides, warps, addresses, rows, correct,
                                 timing.device_label("cuda"))


# ------------------------------------------------------------ explain: shared-memory banks


def _transpose(a: np.ndarray, kind: str, pitch: int = TILE_DIM + 1, record: bool = False):
    """Run one transpose kernel on a NumPy (H, W) float32 array; returns (dst, record)."""
    h, w = a.shape
    grid = (math.ceil(w / TILE_DIM), math.ceil(h / TILE_DIM))
    block = (TILE_DIM, BLOCK_ROWS)
    dst = _device_copy(np.full((w, h), np.nan, np.float32))
    src = _device_copy(a.astype(np.float32))
    if kind == "naive":
        transpose_naive_kernel[grid, block](src, dst)
        return dst.copy_to_host(), None
    shape = (2, grid[0] * grid[1], TILE_DIM // BLOCK_ROWS, TILE_DIM * BLOCK_ROWS) if record \
        else (2, 1, 1, 1)
    rec = _device_copy(np.full(shape, -1, np.int32))
    transpose_shared_kernel[grid, block](src, dst, pitch, rec, 1 if record else 0)
    return dst.copy_to_host(), (rec.copy_to_host() if record else None)


def conflict_degree(word_offsets) -> int:
    """Shared-memory wavefronts one warp request needs: the largest number of *distinct* 4-byte
    words that the request's lanes address in one bank (lanes reading the same word share it).
    1 = no conflict; 32 = every lane in one bank, a different word each. -1 entries (inactive
    lanes) are ignored; 0 if no lane is active."""
    w = np.asarray(word_offsets, dtype=np.int64)
    w = np.unique(w[w >= 0])
    if w.size == 0:
        return 0
    return int(np.bincount(w % BANKS, minlength=BANKS).max())


@dataclasses.dataclass
class BankExplanation:
    """What :func:`explain_banks` recorded.

    Attributes:
        shape: the (H, W) matrix transposed.
        words: {pitch: int32 array (2, blocks, 4, 256)}: the shared-memory word each thread
            wrote (``[0]``) and read (``[1]``), per block and row step; -1 = not active.
        rows: one dict per (pitch, access): ``layout, pitch, access`` ("write a row" /
            "read a column"), ``requests`` (full-warp requests seen), ``banks_hit`` (distinct
            banks in one such request), ``conflict_degree`` (largest over requests),
            ``mean_degree``.
        correct: {"naive": bool, 32: bool, 33: bool}: each transpose equals NumPy's ``a.T``
            (output poisoned with NaN first).
        device: where the kernels ran.
    """

    shape: tuple[int, int]
    words: dict[int, np.ndarray]
    rows: list[dict]
    correct: dict
    device: str

    def warp_words(self, pitch: int, access: str = "read", block: int = 0, step: int = 0,
                   warp: int = 0) -> np.ndarray:
        """The 32 word offsets of one warp request (lane order)."""
        k = 0 if access == "write" else 1
        return self.words[pitch][k, block, step, warp * WARP:(warp + 1) * WARP]

    def __str__(self) -> str:
        lines = [f"{'tile layout':<24}{'access':<15}{'banks hit':>10}{'conflict degree':>17}"]
        for r in self.rows:
            lines.append(f"{r['layout']:<24}{r['access']:<15}{r['banks_hit']:>10}"
                         f"{r['conflict_degree']:>16}-way")
        return "\n".join(lines)


def explain_banks(rows: int = 36, cols: int = 40) -> BankExplanation:
    """Transpose a (rows, cols) matrix with :func:`transpose_shared_kernel` at pitch 32 and 33
    (and :func:`transpose_naive_kernel`), recording the shared-memory word of every access.

    Args:
        rows, cols: matrix shape, 1..64 each (sizes that are not multiples of 32 check the
            kernels' edges).

    Returns:
        A :class:`BankExplanation`: with 32 columns the column read of a warp hits 1 bank
        32 times (32-way conflict), with 33 columns 32 banks once each; row writes are
        conflict-free in both.

    Raises:
        ValueError: rows or cols out of range.

    Source: CUDA C Best Practices Guide, "Shared memory and memory banks"; NVIDIA's
    "Efficient matrix transpose" (32 x 33 tile); study Figure 6 (shared memory efficiency).
    """
    rows = _check_positive_int("rows", rows, 1, 64)
    cols = _check_positive_int("cols", cols, 1, 64)
    a = np.arange(rows * cols, dtype=np.float32).reshape(rows, cols)
    got, _ = _transpose(a, "naive")
    correct = {"naive": bool(np.array_equal(got, a.T))}
    words, out = {}, []
    for pitch in (TILE_DIM, TILE_DIM + 1):
        got, rec = _transpose(a, "shared", pitch, record=True)
        correct[pitch] = bool(np.array_equal(got, a.T))
        words[pitch] = rec
        layout = f"{TILE_DIM} x {pitch} ({'padded' if pitch > TILE_DIM else 'unpadded'})"
        for k, access in ((0, "write a row"), (1, "read a column")):
            requests = rec[k].reshape(-1, WARP)
            full = [r for r in requests if (r >= 0).all()]
            degrees = [conflict_degree(r) for r in full]
            out.append({"layout": layout, "pitch": pitch, "access": access,
                        "requests": len(full),
                        "banks_hit": len(np.unique(full[0] % BANKS)) if full else 0,
                        "conflict_degree": max(degrees) if degrees else 0,
                        "mean_degree": float(np.mean(degrees)) if degrees else 0.0})
    return BankExplanation((rows, cols), words, out, correct, timing.device_label("cuda"))


# --------------------------------------------------------------- explain: warp divergence


def _branch_reference(x: np.ndarray, paths: np.ndarray, iters: int) -> np.ndarray:
    """NumPy's result of :func:`branch_kernel` for given paths (float32 throughout)."""
    a = x.astype(np.float32).copy()
    b = a.copy()
    for _ in range(iters):
        a = a * np.float32(0.99) + np.float32(0.01)
        b = np.sqrt(np.float32(0.5) * b * b + np.float32(1.0))
    return np.where(paths == 0, a, b)


def warp_efficiency(paths, warp: int = WARP) -> float:
    """Warp execution efficiency of a two-way branch, in % : active lanes over 32 lanes for
    every path a warp runs. A warp whose lanes all take one path runs it with 32 active lanes;
    a warp split 16/16 runs both paths with 16 each (50 %). Entries < 0 are lanes with no
    thread (the last warp of an n that is not a multiple of 32). Paths of equal length."""
    p = np.asarray(paths).ravel()
    pad = (-len(p)) % warp
    p = np.concatenate([p, np.full(pad, -1)]).reshape(-1, warp)
    active = issued = 0
    for lanes in p:
        for branch in (0, 1):
            k = int((lanes == branch).sum())
            if k:
                active += k
                issued += warp
    return 100.0 * active / issued if issued else 0.0


@dataclasses.dataclass
class DivergenceExplanation:
    """What :func:`explain_divergence` recorded.

    Attributes:
        n: threads. threads_per_block: block size. iters: loop length of each path.
        paths: {"parity": int8 (n,), "warp": int8 (n,)}: the path each thread took (0 or 1),
            as the kernel recorded it.
        rows: one dict per variant: ``variant, branch_on, warps, split_warps, efficiency_pct``
            (warp execution efficiency in the branch, from the recorded paths).
        correct: {variant: bool}: outputs match NumPy (rel. error < 1e-5; outputs poisoned with
            NaN, paths with -1, before the launch).
        device: where the kernel ran.
    """

    n: int
    threads_per_block: int
    iters: int
    paths: dict[str, np.ndarray]
    rows: list[dict]
    correct: dict
    device: str

    def __str__(self) -> str:
        lines = [f"{'branch on':<26}{'warps':>6}{'split warps':>13}"
                 f"{'warp execution efficiency':>28}"]
        for r in self.rows:
            lines.append(f"{r['branch_on']:<26}{r['warps']:>6}{r['split_warps']:>13}"
                         f"{r['efficiency_pct']:>27.1f}%")
        return "\n".join(lines)


_VARIANTS = {"parity": ("threadIdx.x % 2", 0), "warp": ("(threadIdx.x // 32) % 2", 1)}


def _run_branch(x: np.ndarray, iters: int, by_warp: int, threads_per_block: int):
    n = x.size
    out = _device_copy(np.full(n, np.nan, np.float32))
    path = _device_copy(np.full(n, -1, np.int8))
    branch_kernel[math.ceil(n / threads_per_block), threads_per_block](
        _device_copy(x), out, path, iters, by_warp)
    return out.copy_to_host(), path.copy_to_host()


def explain_divergence(n: int = 128, iters: int = 8,
                       threads_per_block: int = 64) -> DivergenceExplanation:
    """Run :func:`branch_kernel` with the branch on thread parity and on the warp index, read
    back the path every thread recorded, and compute each variant's warp execution efficiency.

    Args:
        n: threads, 1..SIMULATOR_MAX_THREADS. iters: loop length, 1..64.
        threads_per_block: a multiple of 32 in 32..1024.

    Returns:
        A :class:`DivergenceExplanation`: 50 % for the parity branch (every warp runs both
        paths with 16 lanes), 100 % for the warp branch (n a multiple of 32).

    Raises:
        ValueError: an argument out of range (the message names it).

    Source: study Figure 6 (warp execution efficiency above 97 %, Theano-fft 66-81 %); CUDA C
    Best Practices Guide, "Branching and divergence".
    """
    n = _check_positive_int("n", n, 1, SIMULATOR_MAX_THREADS)
    iters = _check_positive_int("iters", iters, 1, 64)
    threads_per_block = _check_positive_int("threads_per_block", threads_per_block, 32, 1024)
    if threads_per_block % WARP:
        raise ValueError(f"threads_per_block must be a multiple of 32 in 32..1024, got "
                         f"{threads_per_block}")
    x = np.random.default_rng(7).uniform(-2, 2, n).astype(np.float32)
    paths, rows, correct = {}, [], {}
    for variant, (label, by_warp) in _VARIANTS.items():
        out, path = _run_branch(x, iters, by_warp, threads_per_block)
        ref = _branch_reference(x, path, iters)
        err = np.abs(out.astype(np.float64) - ref) / np.maximum(np.abs(ref), 1e-6)
        correct[variant] = bool((path >= 0).all() and np.isfinite(out).all() and err.max() < 1e-5)
        paths[variant] = path
        warps = path.reshape(-1) if n % WARP == 0 else np.concatenate(
            [path, np.full((-n) % WARP, -1, np.int8)])
        split = sum(1 for w in warps.reshape(-1, WARP)
                    if len(set(w[w >= 0].tolist())) > 1)
        rows.append({"variant": variant, "branch_on": label, "warps": math.ceil(n / WARP),
                     "split_warps": split, "efficiency_pct": warp_efficiency(path)})
    return DivergenceExplanation(n, threads_per_block, iters, paths, rows, correct,
                                 timing.device_label("cuda"))


# ----------------------------------------------------------------------- measure on a GPU


def _row(experiment: str, variant: str, x, size: int, t, bytes_moved: int | None) -> dict:
    return {"experiment": experiment, "variant": variant, "x": x, "size": size,
            "median_ms": t.median_ms, "iqr_ms": t.iqr_s * 1e3,
            "gb_s": (bytes_moved / t.median_s / 1e9) if bytes_moved else None,
            "device": t.device, "device_kind": "cuda", "status": "ok"}


def _require_gpu() -> None:
    reason = gpu_refusal()
    if reason:
        raise GpuRequired(f"{reason}. Recorded GPU timings: gpu_timings() reads "
                          "results/gpu_experiments_*; to record them on a GPU: "
                          "python -m helpers.gpu_experiments --experiments --save")


def _cuda_tensor(shape, fill: str = "rand"):
    import torch

    t = (torch.rand(shape, device="cuda") if fill == "rand"
         else torch.full(shape, float("nan"), device="cuda"))
    return t, cuda.as_cuda_array(t)


def measure_coalescing(strides=(1, 2, 4, 8, 16, 32), n: int = 1 << 23,
                       min_run_time: float = 0.1) -> list[dict]:
    """Time :func:`strided_load_kernel` on the GPU at each stride: n threads, 256 a block.

    Args:
        strides: 1..64 each. n: threads (elements written), 1..2**26; the source holds
            ``(n - 1) * stride + 1`` float32. min_run_time: seconds of timed calls (> 0).

    Returns:
        One row per stride: ``experiment`` "coalescing", ``variant`` "stride S", ``x`` S,
        ``size`` n, ``median_ms``, ``iqr_ms``, ``gb_s`` (useful bytes, 4 read + 4 written per
        element, over the median time: the effective bandwidth), ``device``, ``device_kind``,
        ``status``.

    Raises:
        GpuRequired: no GPU. ValueError: an argument out of range.

    Source: study Figure 6 (global load efficiency); timing by :func:`helpers.timing.benchmark`
    (median, synchronised).
    """
    strides = tuple(_check_positive_int("stride", s, 1, 64) for s in strides)
    n = _check_positive_int("n", n, 1, 1 << 26)
    _require_gpu()
    rows = []
    dst_t, dst = _cuda_tensor((n,), "nan")  # keep the torch tensors alive while timing
    for s in strides:
        src_t, src = _cuda_tensor(((n - 1) * s + 1,))
        grid = math.ceil(n / 256)

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

    Returns:
        Three rows (``experiment`` "transpose"; ``variant`` "naive", "shared 32 x 32",
        "shared 32 x 33"; ``x`` the pitch or 0), ``gb_s`` = 8 bytes an element over the median
        time; other keys as :func:`measure_coalescing`.

    Raises:
        GpuRequired: no GPU. ValueError: size outside 32..32768.
    """
    size = _check_positive_int("size", size, 32, 32768)
    _require_gpu()
    src_t, src = _cuda_tensor((size, size))  # keep the torch tensors alive while timing
    dst_t, dst = _cuda_tensor((size, size), "nan")
    rec_i = cuda.device_array((2, 1, 1, 1), np.int32)  # not written: rec = 0
    grid = (math.ceil(size / TILE_DIM), math.ceil(size / TILE_DIM))
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
    index (same work per thread, same memory traffic).

    Returns:
        Two rows (``experiment`` "divergence"; ``variant`` "parity", "warp"; ``x`` iters;
        ``gb_s`` None: the kernel is compute-bound); other keys as :func:`measure_coalescing`.

    Raises:
        GpuRequired: no GPU. ValueError: an argument out of range.
    """
    n = _check_positive_int("n", n, 1, 1 << 28)
    iters = _check_positive_int("iters", iters, 1, 1 << 16)
    threads_per_block = _check_positive_int("threads_per_block", threads_per_block, 32, 1024)
    _require_gpu()
    x_t, x = _cuda_tensor((n,))  # keep the torch tensors alive while timing
    out_t, out = _cuda_tensor((n,), "nan")
    path = cuda.device_array(n, np.int8)
    grid = math.ceil(n / threads_per_block)
    rows = []
    for variant, (_label, by_warp) in _VARIANTS.items():
        def call(by_warp=by_warp):
            branch_kernel[grid, threads_per_block](x, out, path, iters, by_warp)

        t = timing.benchmark(call, device="cuda", label=variant, min_run_time=min_run_time)
        rows.append(_row("divergence", variant, iters, n, t, None))
    del x_t, out_t
    return rows


def measure_all(min_run_time: float = 0.1) -> list[dict]:
    """The three experiments on this GPU with their default sizes (rows as
    :func:`measure_coalescing`). Raises GpuRequired without a GPU."""
    _require_gpu()
    return (measure_coalescing(min_run_time=min_run_time)
            + measure_transpose(min_run_time=min_run_time)
            + measure_divergence(min_run_time=min_run_time))


@dataclasses.dataclass
class GpuTimings:
    """What :func:`gpu_timings` found: ``rows`` (:func:`measure_all`'s), ``source`` (measured
    now, or ``results/NAME`` with GPU and date), ``device`` and ``note`` (why none, if none)."""

    rows: list[dict]
    source: str
    device: str
    note: str


_EXPERIMENTS_PREFIX = "gpu_experiments_"


def gpu_timings(live: bool | None = None, min_run_time: float = 0.1,
                directory=None) -> GpuTimings:
    """The three experiments' GPU timings: measured now on a GPU, else the latest run recorded
    in ``results/`` (prefix ``gpu_experiments_``), else none with the reason.

    Args:
        live: measure on this GPU (default: whenever there is one).
        min_run_time: seconds of timed calls per kernel when measuring (> 0).
        directory: where recorded runs are looked for (default ``results/``).

    Returns:
        A :class:`GpuTimings`; rows as :func:`measure_coalescing` (``gb_s`` None where it does
        not apply), labelled with the GPU (and date) that measured them. Never invents a time.

    Raises:
        GpuRequired: ``live=True`` without a GPU.
    """
    live = backend.MODE == "gpu" if live is None else live
    if live:
        rows = measure_all(min_run_time)
        return GpuTimings(rows, f"measured now on {rows[0]['device']}", rows[0]["device"], "")
    found = results.find(_EXPERIMENTS_PREFIX, directory)
    if found:
        ds = found[-1]
        rows = [dict(r, gb_s=None if r.get("gb_s") in ("", None) else r["gb_s"]) for r in ds.rows]
        return GpuTimings(rows, f"recorded on {ds.device}, {ds.date[:10]} (results/{ds.name})",
                          ds.device, "")
    return GpuTimings([], "", "", "No GPU here and no GPU timings of these experiments in "
                      "results/ yet: on a GPU, `python -m helpers.gpu_experiments --experiments "
                      "--save` records them.")


def save_gpu_experiments(min_run_time: float = 0.1, directory=None) -> tuple:
    """Measure :func:`measure_all` on this GPU and write it with :func:`helpers.results.save`
    as ``gpu_experiments_<gpu>``. Returns the (csv, json) paths. Raises GpuRequired."""
    rows = measure_all(min_run_time)
    name = _EXPERIMENTS_PREFIX + results.slug(backend.info().gpu_name or "gpu")
    return results.save(name, rows,
                        command="python -m helpers.gpu_experiments --experiments --save",
                        directory=directory)


# ---------------------------------------------------------------------------- command line


def _print_timings(rows: list[dict]) -> None:
    print(f"{'experiment':<12}{'variant':<18}{'median (ms)':>12}{'IQR (ms)':>10}{'GB/s':>10}")
    for r in rows:
        gb = "" if r["gb_s"] in (None, "") else f"{r['gb_s']:.1f}"
        print(f"{r['experiment']:<12}{r['variant']:<18}{r['median_ms']:>12.4f}"
              f"{r['iqr_ms']:>10.4f}{gb:>10}")


def main(argv: list[str] | None = None) -> int:
    """``python -m helpers.gpu_experiments [--resources] [--experiments] [--explain]
    [--save]``: print our kernels' resources, the three experiments' GPU timings, or the
    simulator's explanations; ``--save`` writes what was measured on a GPU to ``results/``.
    Returns the exit status (1 if a GPU was needed and there is none)."""
    parser = argparse.ArgumentParser(prog="python -m helpers.gpu_experiments",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--resources", action="store_true",
                        help="registers, shared memory and occupancy of our kernels (GPU)")
    parser.add_argument("--experiments", action="store_true",
                        help="time coalescing, bank conflicts and divergence (GPU)")
    parser.add_argument("--explain", action="store_true",
                        help="record addresses, banks and paths (simulator or GPU)")
    parser.add_argument("--save", action="store_true", help="write measurements to results/")
    args = parser.parse_args(argv)
    if not (args.resources or args.experiments or args.explain):
        args.explain = True
    status = 0
    if args.explain:
        print(explain_coalescing(), "\n")
        print(explain_banks(), "\n")
        print(explain_divergence(), "\n")
    if args.resources:
        if backend.MODE != "gpu":
            print(resource_table())
            status = 1
        elif args.save:
            paths = save_kernel_resources()
            print(resource_table(live=False))
            print("saved", *paths)
        else:
            print(resource_table())
    if args.experiments:
        reason = gpu_refusal()
        if reason:
            print(gpu_timings().note)
            status = 1
        else:
            if args.save:
                paths = save_gpu_experiments()
                _print_timings(results.load(paths[0].stem, paths[0].parent).rows)
                print("saved", *paths)
            else:
                _print_timings(measure_all())
    return status


if __name__ == "__main__":
    # Run the copy that `import helpers.gpu_experiments` gives, so that the kernels compiled
    # here are the ones KERNELS names (``python -m`` loads this file a second time as __main__).
    from helpers.gpu_experiments import main as _main

    sys.exit(_main())
