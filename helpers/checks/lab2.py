"""Checkers for Lab 2: GEMM as a CUDA kernel, naive and tiled in shared memory.

One checker per TODO of ``labs/lab2_tiled_gemm.ipynb``, each returning a
:class:`helpers.checks.Report`: :func:`check_gemm_naive` for ``gemm_naive_kernel(a, b, c)``
(one thread per element of C) and :func:`check_gemm_tiled` for ``gemm_tiled_kernel(a, b, c)``
(``TILE x TILE`` tiles of A and B staged in shared memory between two ``cuda.syncthreads()``).
Shapes: ``a: (M, K)``, ``b: (K, N)``, ``c: (M, N)``, float32. Both kernels are launched by
:func:`run_gemm` the way :mod:`helpers.conv.gemm` launches its own (x along the columns of C,
y along the rows), on the cases of :func:`naive_shapes` and :func:`tiled_shapes`: sizes that
are not tile multiples, and one that is. Data are standard normal; references NumPy float64.

Source: Li et al., ICPP 2016, Section V-A and Figure 4 (GEMM is most of unrolling's time); the
tiled kernel is the textbook shared-memory matrix multiply (CUDA C Programming Guide, "Shared
Memory"; Numba's documentation, "CUDA Kernels: matrix multiplication", and numba issue #7324).
"""

from __future__ import annotations

import ast
import inspect
import textwrap
import traceback
import warnings

import numpy as np
from numba import cuda  # noqa: E402

from helpers.checks import (
    Case,
    Report,
    WrongResult,
    check_cases,
    compare,
    compiler_check,
    kernel_line,
    random_array,
)
from helpers.device import backend
from helpers.device.arrays import grid_for

__all__ = ["check_gemm_naive", "check_gemm_tiled", "run_gemm", "NAIVE_BLOCK",
           "SIMULATOR_MAX_THREADS", "SIMULATOR_MAX_TILE", "naive_shapes", "tiled_shapes",
           "KERNEL_ARGTYPES", "source_tree", "raises_not_implemented", "is_kernel",
           "padded_device_array", "written_inside", "in_kernel_source"]

#: The lab's kernels' arguments as :func:`run_gemm` launches them (2-D float32 views of larger
#: buffers, so any layout), for the compiler check (:func:`helpers.checks.compiler_check`).
KERNEL_ARGTYPES: tuple[str, ...] = ("float32[:, :]",) * 3

#: Block edge the naive kernel is checked with: blocks of 8 x 8 threads.
NAIVE_BLOCK = 8

#: Without a GPU, the most threads (C rounded up to whole blocks) :func:`run_gemm` launches.
SIMULATOR_MAX_THREADS = 4096

#: Without a GPU, the largest tile :func:`check_gemm_tiled` accepts (16 x 16 = 256 threads a
#: block, several seconds a check; 32 x 32 would take minutes).
SIMULATOR_MAX_TILE = 16


def naive_shapes() -> list[tuple[int, int, int]]:
    """(M, K, N) of the naive kernel's cases, with blocks of :data:`NAIVE_BLOCK`."""
    return [(5, 7, 3), (13, 19, 11), (1, 9, 17), (16, 8, 16), (10, 1, 9)]


def tiled_shapes(tile: int) -> list[tuple[int, int, int]]:
    """(M, K, N) of the tiled kernel's cases for a tile edge ``tile`` (>= 4).

    The last blocks have threads outside C and the last tile along K is partial, which
    numba issue #7324 is about: the Numba documentation's kernel lets those threads return
    before the barriers, or skip their loads, and is right only for tile multiples. Case 1 is
    an exact multiple, so such a kernel passes it and fails the next, which says so. With the
    lab's ``TILE = 8`` a case launches at most a few hundred threads, and a check runs in a few
    seconds in the Numba CUDA simulator.

    1. (2T, 2T, T): every size a multiple of the tile (a kernel right only there passes);
    2. (T+3, 2T+1, T+5): partial blocks at the bottom and right, the last K tile has 1 column;
       the first block is full, so a thread that skips its load leaves stale data from it;
    3. (1, T+1, T+2): one row of C (batch 1), a block of mostly idle threads;
    4. (T-3, 3, 2T+1): K smaller than one tile (one partial tile);
    5. (2T+1, T, T+1): K a tile multiple, M and N not.
    """
    t = tile
    return [(2 * t, 2 * t, t), (t + 3, 2 * t + 1, t + 5), (1, t + 1, t + 2), (t - 3, 3, 2 * t + 1),
            (2 * t + 1, t, t + 1)]


# ---------------------------------------------------------------------------- common plumbing


_Wrong = WrongResult


def _check(name: str, run, cases: list[Case], hint: str | None) -> Report:
    """:func:`helpers.checks.check_cases`, with out-of-bounds :class:`IndexError` from
    :func:`run_gemm` reported as a failure of the case that raised it (a
    :class:`WrongResult`), not as an exception in the learner's code."""

    def guarded(*args, **kwargs):
        try:
            return run(*args, **kwargs)
        except IndexError as exc:
            if not str(exc).startswith("your kernel"):
                raise
            hint = _TILE_HINT if isinstance(exc, _OutsideLocalArray) else _BOUNDS_HINT
            raise WrongResult(str(exc), hint) from exc

    return check_cases(name, guarded, cases, hint)


_BOUNDS_HINT = ("the grid is rounded up to whole blocks, so some threads have a row i >= M or a "
                "column j >= N: they must not read A or B there, nor write C (`if i < M and "
                "j < N:` around the store).")

_TILE_HINT = ("a shared tile is TILE x TILE, so its indices run over 0..TILE-1 only: each thread "
              "loads element (ty, tx) of each tile and sums k over range(TILE), not over K (the "
              "loop over tiles walks along K); check the kernel with the TILE its "
              "cuda.shared.array calls are declared with.")


class _OutsideLocalArray(IndexError):
    """A thread indexed outside a shared or local array of the kernel, not A, B or C."""


def source_tree(kernel) -> ast.AST | None:
    fn = getattr(kernel, "py_func", kernel)
    try:
        return ast.parse(textwrap.dedent(inspect.getsource(fn)))
    except (OSError, TypeError, SyntaxError):
        return None


def raises_not_implemented(kernel) -> bool:
    """True if the kernel's Python source raises NotImplementedError (the lab's stub)."""
    tree = source_tree(kernel)
    for node in ast.walk(tree) if tree is not None else ():
        if isinstance(node, ast.Raise) and node.exc is not None:
            exc = node.exc.func if isinstance(node.exc, ast.Call) else node.exc
            if isinstance(exc, ast.Name) and exc.id == "NotImplementedError":
                return True
    return False


def is_kernel(kernel) -> bool:
    return hasattr(kernel, "py_func") and hasattr(type(kernel), "__getitem__")


def padded_device_array(a: np.ndarray, rows: int, cols: int, fill, rng: np.random.Generator | None):
    """A device array ``(a.rows + rows, a.cols + cols)`` holding ``a`` at its top left, the rest
    ``fill`` (or random data), and the view of ``a`` in it."""
    m, n = a.shape
    if rng is None:
        buf = np.full((m + rows, n + cols), fill, np.float32)
    else:
        buf = random_array(rng, (m + rows, n + cols))
    buf[:m, :n] = a
    d_buf = cuda.to_device(buf)
    return d_buf, d_buf[:m, :n]


def written_inside(buf: np.ndarray, rows: int, cols: int, name: str, index: str) -> np.ndarray:
    """The top-left ``rows x cols`` of ``buf``, a NaN-filled :func:`padded_device_array`
    copied back, after checking that the kernel wrote nothing past it.

    Raises:
        IndexError: an element outside that block is not NaN; names the array as ``name``
            and the first such element as ``index[i, j]``.
    """
    outside = ~np.isnan(buf)
    outside[:rows, :cols] = False
    if outside.any():
        i, j = (int(v) for v in np.argwhere(outside)[0])
        raise IndexError(f"your kernel wrote outside {name} ({rows} x {cols}): "
                         f"{int(outside.sum())} element(s), the first at {index}[{i}, {j}]")
    return buf[:rows, :cols]


def in_kernel_source(exc: BaseException, kernel) -> bool:
    """True if the innermost frame of ``exc`` is in the kernel's own source file: an index
    error raised there is on a NumPy array of the kernel (shared or local), while one on a
    simulator device array (A, B, C) is raised inside Numba's simulator."""
    code = getattr(getattr(kernel, "py_func", kernel), "__code__", None)
    frames = traceback.extract_tb(exc.__traceback__)
    return bool(frames) and code is not None and frames[-1].filename == code.co_filename


# ------------------------------------------------------------------------------------ launch


def run_gemm(kernel, a: np.ndarray, b: np.ndarray, tile: int, swap_axes: bool = False
             ) -> np.ndarray:
    """Launch a GEMM kernel ``kernel(a, b, c)`` the lab's way and return C.

    Blocks of ``(tile, tile)`` threads, a grid of ``(ceil(N / tile), ceil(M / tile))`` blocks:
    x along the columns of C, y along the rows (``swap_axes=True`` swaps the grid's two numbers,
    for a kernel that puts x along the rows). A, B and C are views into larger buffers (A and B
    padded with random data, C with NaN) and C starts as NaN, so an unwritten element is NaN,
    and a thread that goes outside its matrix is caught (an out-of-bounds index in the
    simulator, a write into C's guard elements on a GPU) instead of touching memory the
    checker does not own. The simulator runs a block's threads concurrently, so when several
    go out of bounds, which one the message names can change from run to run; every other part
    of a report is deterministic. The lab's stub is not launched (on a GPU a ``raise`` in a
    kernel is not propagated to Python).

    Args:
        kernel: a ``@cuda.jit`` kernel taking ``(a, b, c)``.
        a: (M, K), b: (K, N): 2-D NumPy arrays (converted to float32).
        tile: block edge, 1..32 (tile * tile <= 1024 threads a block).
        swap_axes: launch ``(ceil(M / tile), ceil(N / tile))`` blocks instead.

    Returns:
        C, (M, N) float32 NumPy array.

    Raises:
        NotImplementedError: ``kernel`` is the lab's stub (its source raises it).
        TypeError: ``kernel`` is not a CUDA kernel.
        ValueError: inputs that are not 2-D, empty, or whose inner dimensions differ; tile out
            of range; without a GPU, more than :data:`SIMULATOR_MAX_THREADS` threads.
        IndexError: a thread read or wrote outside A, B or C, or (in the simulator) outside
            a shared or local array of the kernel (the message names which).
    """
    if raises_not_implemented(kernel):
        raise NotImplementedError("the kernel is still the stub: write it, then run its cell")
    if not is_kernel(kernel):
        raise TypeError(f"expected a @cuda.jit kernel, got {type(kernel).__name__}")
    a = np.ascontiguousarray(a, dtype=np.float32)
    b = np.ascontiguousarray(b, dtype=np.float32)
    if a.ndim != 2 or b.ndim != 2 or 0 in a.shape or 0 in b.shape:
        raise ValueError(f"a and b must be non-empty 2-D arrays, got shapes {a.shape} and "
                         f"{b.shape}")
    if a.shape[1] != b.shape[0]:
        raise ValueError(f"inner dimensions differ: a is {a.shape} and b is {b.shape}")
    if isinstance(tile, bool) or not isinstance(tile, (int, np.integer)) or not 1 <= tile <= 32:
        raise ValueError(f"tile must be an integer in 1..32 (at most 1024 threads a block), got "
                         f"{tile!r}")
    m, k = a.shape
    n = b.shape[1]
    grid = grid_for((n, m), (tile, tile))
    if swap_axes:
        grid = grid[::-1]
    threads = grid[0] * grid[1] * tile * tile
    if backend.MODE == "simulator" and threads > SIMULATOR_MAX_THREADS:
        raise ValueError(f"C is {m} x {n}: {threads:,} threads would take the CUDA simulator "
                         f"about {threads / 1000:.0f} s or more; without a GPU keep M*N, rounded "
                         f"up to whole blocks, at most {SIMULATOR_MAX_THREADS:,} threads")
    rng = np.random.default_rng(7)
    _, d_a = padded_device_array(a, tile, tile, None, rng)
    _, d_b = padded_device_array(b, tile, tile, None, rng)
    d_cbuf, d_c = padded_device_array(np.full((m, n), np.nan, np.float32), tile, tile, np.nan, None)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # NumbaPerformanceWarning: tiny grids on a GPU
            kernel[grid, (tile, tile)](d_a, d_b, d_c)
            cuda.synchronize()
    except IndexError as exc:  # the simulator checks every index
        if "out of bounds" not in str(exc):
            raise
        if in_kernel_source(exc, kernel):  # A, B and C fail inside the simulator's arrays
            raise _OutsideLocalArray(
                f"your kernel indexed outside a shared (or local) array, not A, B or C (a tile "
                f"is {tile} x {tile} here): {exc}{kernel_line(exc, kernel)}") from None
        raise IndexError(f"your kernel read or wrote outside a matrix (A is {m} x {k}, B {k} x "
                         f"{n}, C {m} x {n}): {exc}{kernel_line(exc, kernel)}") from None
    return written_inside(d_cbuf.copy_to_host(), m, n, "C", "c")


# ---------------------------------------------------------------------------------- checkers


def _cases(shapes, seed: int, block: int, unit: str) -> list[Case]:
    rng = np.random.default_rng(seed)
    cases = []
    for m, k, n in shapes:
        a, b = random_array(rng, (m, k)), random_array(rng, (k, n))
        grid = grid_for((n, m), (block, block))
        multiple = "" if m % block or n % block or k % block else f", all multiples of the {unit}"
        cases.append(Case((a, b), a.astype(np.float64) @ b.astype(np.float64),
                          f"A ({m}, {k}) @ B ({k}, {n}), grid {grid[0]} x {grid[1]} blocks of "
                          f"{block} x {block} threads{multiple}", rtol=1e-4))
    return cases


def _not_a_kernel(name: str, kernel, fname: str) -> Report | None:
    """An error :class:`Report` if ``kernel`` is neither the lab's stub nor a CUDA kernel."""
    if raises_not_implemented(kernel) or is_kernel(kernel):
        return None
    return Report(name, False, f"{fname} is not a CUDA kernel (got {type(kernel).__name__}): "
                  f"put @cuda.jit on the line above `def {fname}(...)` and run that cell again.",
                  0, "error")


def _axes_note(report: Report, kernel, cases: list[Case], tile: int) -> Report:
    """Add a note to a failed report if the kernel is right with x along the rows instead."""
    if report.status != "failed":
        return report
    case = cases[report.cases_run - 1]
    try:
        swapped = run_gemm(kernel, *case.args, tile=tile, swap_axes=True)
    except Exception:  # noqa: BLE001 - only a diagnosis; the report stands as it is
        return report
    if compare(swapped, case.expected, case.rtol) is None:
        report.message += ("\nNote: your kernel gives the right C when x runs along the rows. In "
                           "this lab x (cuda.threadIdx.x, the first value of cuda.grid(2)) runs "
                           "along the columns of C and y along the rows: `j, i = cuda.grid(2)`.")
    return report


def check_gemm_naive(kernel) -> Report:
    """Check the learner's naive GEMM kernel: one thread per element of C.

    Args:
        kernel: a ``@cuda.jit`` kernel ``gemm_naive_kernel(a, b, c)``; a (M, K), b (K, N),
            c (M, N) float32; thread ``(j, i) = cuda.grid(2)`` (x along columns) sets
            ``c[i, j] = sum_k a[i, k] * b[k, j]`` if it lies inside C.

    Returns:
        A :class:`~helpers.checks.Report` over :func:`naive_shapes` (blocks of
        :data:`NAIVE_BLOCK` x :data:`NAIVE_BLOCK`); fails on a missing bounds check, a skipped
        term of the sum, an unwritten element, or a wrong value (with the worst element).
        Never raises for anything the kernel does.
    """
    name = "Lab 2: naive GEMM kernel"
    cases = _cases(naive_shapes(), 21, NAIVE_BLOCK, "block")

    def run(a, b):
        return run_gemm(kernel, a, b, NAIVE_BLOCK)

    not_a_kernel = _not_a_kernel(name, kernel, "gemm_naive_kernel")
    if not_a_kernel is not None:
        return not_a_kernel
    report = _check(name, run, cases, "thread (j, i) = cuda.grid(2) sums a[i, k] * b[k, j] "
                    "over all k < K (a.shape[1]) in a local variable, then writes c[i, j] once.")
    return compiler_check(_axes_note(report, kernel, cases, NAIVE_BLOCK), kernel,
                          KERNEL_ARGTYPES)


def _uses_shared_memory_and_barriers(kernel) -> str | None:
    """None if the kernel's source allocates ``cuda.shared.array`` and calls
    ``cuda.syncthreads()`` twice (after the loads and after the sums; or the source is
    unavailable), else what is missing. One barrier leaves a race that a GPU may not show on
    small sizes (a fast warp loads the next tiles while a slow one still reads them), unless
    the tiles are double-buffered: more than two shared arrays, or a 3-D one."""
    tree = source_tree(kernel)
    if tree is None:
        return None
    barriers = sum(isinstance(node, ast.Call) and "syncthreads" in (
        getattr(node.func, "attr", None), getattr(node.func, "id", None))
        for node in ast.walk(tree))
    shared = [node for node in ast.walk(tree) if isinstance(node, ast.Call)
              and isinstance(node.func, ast.Attribute) and node.func.attr == "array"
              and "shared" in (getattr(node.func.value, "attr", None),
                               getattr(node.func.value, "id", None))]
    double_buffered = len(shared) > 2 or any(
        node.args and isinstance(node.args[0], ast.Tuple) and len(node.args[0].elts) > 2
        for node in shared)
    missing = [what for what, ok in (("cuda.shared.array", shared),
                                     ("cuda.syncthreads()", barriers > 0),
                                     ("second cuda.syncthreads()",
                                      barriers != 1 or double_buffered)) if not ok]
    return " and ".join(missing) if missing else None


def check_gemm_tiled(kernel, tile: int) -> Report:
    """Check the learner's tiled shared-memory GEMM kernel on sizes that are not tile multiples.

    Args:
        kernel: a ``@cuda.jit`` kernel ``gemm_tiled_kernel(a, b, c)``; a (M, K), b (K, N),
            c (M, N) float32; launched with blocks of ``(tile, tile)`` threads, x along the
            columns of C. It must stage ``tile x tile`` tiles of A and B in
            ``cuda.shared.array`` with ``cuda.syncthreads()`` barriers, zero-fill the parts of a
            tile outside A or B, keep every thread (even outside C) in the loop so that all
            reach every barrier, and store only inside C.
        tile: the tile edge the kernel was written for (the lab's ``TILE``), 4..32; without a
            GPU at most :data:`SIMULATOR_MAX_TILE`.

    Returns:
        A :class:`~helpers.checks.Report` over :func:`tiled_shapes` (the first case is all tile
        multiples, so a kernel right only there fails the second); a right answer whose source
        has no ``cuda.shared.array``, or fewer than two ``cuda.syncthreads()`` with tiles that
        are not double-buffered, also fails. Never raises for anything the kernel does.
    """
    name = "Lab 2: tiled GEMM kernel"
    if isinstance(tile, bool) or not isinstance(tile, (int, np.integer)) or not 4 <= tile <= 32:
        return Report(name, False, f"tile must be an integer from 4 to 32 (the TILE your kernel "
                      f"uses), got {tile!r}.", 0, "error")
    if backend.MODE == "simulator" and tile > SIMULATOR_MAX_TILE:
        return Report(name, False, f"TILE = {tile} means {tile * tile} threads a block, too "
                      f"slow for the CUDA simulator (minutes): without a GPU use TILE = 8 "
                      f"(at most {SIMULATOR_MAX_TILE}).", 0, "error")
    cases = _cases(tiled_shapes(int(tile)), 22, int(tile), "tile")

    def run(a, b):
        return run_gemm(kernel, a, b, int(tile))

    not_a_kernel = _not_a_kernel(name, kernel, "gemm_tiled_kernel")
    if not_a_kernel is not None:
        return not_a_kernel
    report = _check(name, run, cases, "when a size is not a multiple of TILE, every thread must "
                    "still load (0.0 where its element lies outside A or B) and reach both "
                    "cuda.syncthreads() in every iteration over ceil(K / TILE) tiles; only the "
                    "final store is skipped outside C.")
    if report.passed:
        missing = _uses_shared_memory_and_barriers(kernel)
        if missing:
            return Report(name, False, f"your kernel computes the right C, but its source has "
                          f"no {missing}: this TODO is to stage tiles of A and B in shared "
                          f"memory, with a barrier after loading them and another after using "
                          f"them.", report.cases_run, "failed")
    return compiler_check(_axes_note(report, kernel, cases, int(tile)), kernel,
                          KERNEL_ARGTYPES)
