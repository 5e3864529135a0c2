"""The three memory-access experiments recorded thread by thread, in the simulator or on a GPU.

:func:`explain_coalescing` (the element each thread of :func:`strided_load_kernel` loaded, and
the 32-byte sectors per warp), :func:`explain_banks` (the shared-memory word of every access of
the transposes: 32 x 32 tile, a 32-way bank conflict; 32 x 33, none) and
:func:`explain_divergence` (the path each thread of :func:`branch_kernel` took, and the warp
execution efficiency). Addresses count from the start of each array, which ``cudaMalloc``
aligns to 256 bytes; shared-memory word ``k`` lives in bank ``k % 32``.

Source: Li et al., ICPP 2016, Section V-C and Figure 6; NVIDIA CUDA C Best Practices Guide
(coalescing, shared memory banks, branching and divergence) and "Efficient matrix transpose in
CUDA C" (the 32 x 33 tile).
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
from numba import cuda

from helpers.access_kernels import (
    BANKS,
    BLOCK_ROWS,
    SECTOR_BYTES,
    TILE_DIM,
    WARP,
    branch_kernel,
    strided_load_kernel,
    transpose_naive_kernel,
    transpose_shared_kernel,
)
from helpers.device import timing
from helpers.device.arrays import grid_for

__all__ = ["SIMULATOR_MAX_THREADS", "BankExplanation", "CoalescingExplanation",
           "DivergenceExplanation", "conflict_degree", "explain_banks", "explain_coalescing",
           "explain_divergence", "sectors_of", "warp_efficiency"]

#: Explanations run at most this many threads a launch (the simulator runs ~1e4 threads/s).
SIMULATOR_MAX_THREADS = 4_096


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
    """What :func:`explain_coalescing` recorded: ``strides`` run, ``warps`` launched per stride,
    ``addresses`` {stride: int64 array (warps * 32,)}, the element index each thread loaded;
    ``rows``, one dict per stride: ``stride, lanes, requested_bytes`` (per warp request),
    ``sectors`` (32-byte sectors it touches), ``fetched_bytes``, ``load_efficiency_pct``
    (requested / fetched), ``span_bytes`` (first to last byte); ``correct``, every output equal
    to NumPy's ``src[::stride]`` (output poisoned with NaN first); ``device``, where it ran."""

    strides: tuple[int, ...]
    warps: int
    addresses: dict[int, np.ndarray]
    rows: list[dict]
    correct: bool
    device: str

    def __str__(self) -> str:
        lines = [(f"{'stride':>7}{'bytes asked':>13}{'sectors (32 B)':>16}{'bytes moved':>13}"
                  f"{'load efficiency':>17}")]
        lines += [f"{r['stride']:>7}{r['requested_bytes']:>13}{r['sectors']:>16}"
                  f"{r['fetched_bytes']:>13}{r['load_efficiency_pct']:>16.1f}%" for r in self.rows]
        return "\n".join(lines)


def sectors_of(element_indices, itemsize: int = 4) -> np.ndarray:
    """The distinct 32-byte sectors (int64 indices, sorted) that loads of these element indices
    touch, the array starting on a 256-byte boundary as ``cudaMalloc`` places it."""
    idx = np.asarray(element_indices, dtype=np.int64)
    return np.unique(idx * itemsize // SECTOR_BYTES)


def explain_coalescing(strides=(1, 2, 4, 8, 16, 32), warps: int = 2) -> CoalescingExplanation:
    """Run :func:`strided_load_kernel` at each element stride (1..64) with ``warps`` warps
    (1..16) and record which element each thread loaded: the float32 source holds each element's
    own index (exact below 2**24). Simulator or GPU, deterministic either way.

    Returns:
        A :class:`CoalescingExplanation`. At stride s a warp asks for 128 bytes and touches
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
        strided_load_kernel[grid_for(n, 64), 64](_device_copy(src), dst, s)
        got = dst.copy_to_host()
        correct &= bool(np.array_equal(got, src[::s][:n]))
        idx = np.where(np.isnan(got), -1, got).astype(np.int64)
        addresses[s] = idx
        sectors = max(len(sectors_of(idx[w * WARP:(w + 1) * WARP])) for w in range(warps))
        asked, warp0 = WARP * 4, idx[:WARP]
        rows.append({"stride": s, "lanes": WARP, "requested_bytes": asked, "sectors": sectors,
                     "fetched_bytes": sectors * SECTOR_BYTES,
                     "load_efficiency_pct": 100 * asked / (sectors * SECTOR_BYTES),
                     "span_bytes": int((warp0.max() - warp0.min() + 1) * 4)})
    return CoalescingExplanation(strides, warps, addresses, rows, correct,
                                 timing.device_label("cuda"))



def _transpose(a: np.ndarray, kind: str, pitch: int = TILE_DIM + 1, record: bool = False):
    """Run one transpose kernel on a NumPy (H, W) float32 array; returns (dst, record)."""
    h, w = a.shape
    grid = grid_for((w, h), (TILE_DIM, TILE_DIM))
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
    """What :func:`explain_banks` recorded: ``shape``, the (H, W) matrix transposed; ``words``
    {pitch: int32 array (2, blocks, 4, 256)}, the shared-memory word each thread wrote (``[0]``)
    and read (``[1]``) per block and row step, -1 = not active; ``rows``, one dict per (pitch,
    access): ``layout, pitch, access`` ("write a row" / "read a column"), ``requests`` (full-warp
    requests seen), ``banks_hit`` (distinct banks in one), ``conflict_degree`` (largest over
    requests), ``mean_degree``; ``correct`` {"naive": bool, 32: bool, 33: bool}, each transpose
    equal to NumPy's ``a.T`` (output poisoned with NaN first); ``device``, where they ran."""

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
        lines += [f"{r['layout']:<24}{r['access']:<15}{r['banks_hit']:>10}"
                  f"{r['conflict_degree']:>16}-way" for r in self.rows]
        return "\n".join(lines)


def explain_banks(rows: int = 36, cols: int = 40) -> BankExplanation:
    """Transpose a (rows, cols) float32 matrix, 1..64 each (sizes not multiples of 32 check the
    edges), with :func:`transpose_naive_kernel` and with :func:`transpose_shared_kernel` at pitch
    32 and 33, recording the shared-memory word of every access.

    Returns:
        A :class:`BankExplanation`: with 32 columns the column read of a warp hits 1 bank 32
        times (32-way conflict), with 33 columns 32 banks once each; row writes never conflict.

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
            full = [r for r in rec[k].reshape(-1, WARP) if (r >= 0).all()]
            degrees = [conflict_degree(r) for r in full]
            out.append({"layout": layout, "pitch": pitch, "access": access,
                        "requests": len(full),
                        "banks_hit": len(np.unique(full[0] % BANKS)) if full else 0,
                        "conflict_degree": max(degrees) if degrees else 0,
                        "mean_degree": float(np.mean(degrees)) if degrees else 0.0})
    return BankExplanation((rows, cols), words, out, correct, timing.device_label("cuda"))



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
    p = np.concatenate([p, np.full((-len(p)) % warp, -1)]).reshape(-1, warp)
    lanes = np.stack([(p == branch).sum(axis=1) for branch in (0, 1)])  # (2, warps) active
    active, issued = int(lanes.sum()), warp * int((lanes > 0).sum())
    return 100.0 * active / issued if issued else 0.0


@dataclasses.dataclass
class DivergenceExplanation:
    """What :func:`explain_divergence` recorded: ``n`` threads, ``threads_per_block``, ``iters``
    (loop length of each path); ``paths`` {"parity": int8 (n,), "warp": int8 (n,)}, the path (0
    or 1) each thread recorded; ``rows``, one dict per variant: ``variant, branch_on, warps,
    split_warps, efficiency_pct`` (warp execution efficiency, %, from the recorded paths);
    ``correct`` {variant: bool}, outputs equal to NumPy's (rel. error < 1e-5; outputs poisoned
    with NaN, paths with -1, before the launch); ``device``, where the kernel ran."""

    n: int
    threads_per_block: int
    iters: int
    paths: dict[str, np.ndarray]
    rows: list[dict]
    correct: dict
    device: str

    def __str__(self) -> str:
        lines = [(f"{'branch on':<26}{'warps':>6}{'split warps':>13}"
                  f"{'warp execution efficiency':>28}")]
        lines += [f"{r['branch_on']:<26}{r['warps']:>6}{r['split_warps']:>13}"
                  f"{r['efficiency_pct']:>27.1f}%" for r in self.rows]
        return "\n".join(lines)


_VARIANTS = {"parity": ("threadIdx.x % 2", 0), "warp": ("(threadIdx.x // 32) % 2", 1)}


def explain_divergence(n: int = 128, iters: int = 8,
                       threads_per_block: int = 64) -> DivergenceExplanation:
    """Run :func:`branch_kernel` on ``n`` float32 values (1..SIMULATOR_MAX_THREADS threads,
    ``iters`` 1..64, ``threads_per_block`` a multiple of 32 in 32..1024) with the branch on thread
    parity and on the warp index; read back each thread's path; compute warp execution efficiency.

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
        out = _device_copy(np.full(n, np.nan, np.float32))
        path = _device_copy(np.full(n, -1, np.int8))
        branch_kernel[grid_for(n, threads_per_block), threads_per_block](
            _device_copy(x), out, path, iters, by_warp)
        out, path = out.copy_to_host(), path.copy_to_host()
        ref = _branch_reference(x, path, iters)
        err = np.abs(out.astype(np.float64) - ref) / np.maximum(np.abs(ref), 1e-6)
        correct[variant] = bool((path >= 0).all() and np.isfinite(out).all() and err.max() < 1e-5)
        paths[variant] = path
        warps = np.concatenate([path, np.full((-n) % WARP, -1, np.int8)]).reshape(-1, WARP)
        split = sum(1 for w in warps if len(set(w[w >= 0].tolist())) > 1)
        rows.append({"variant": variant, "branch_on": label, "warps": math.ceil(n / WARP),
                     "split_warps": split, "efficiency_pct": warp_efficiency(path)})
    return DivergenceExplanation(n, threads_per_block, iters, paths, rows, correct,
                                 timing.device_label("cuda"))

