"""Lab 6, TODO 2: the transpose kernel through a padded shared-memory tile, launched and judged.

:func:`run_transpose` launches a learner's ``transpose_kernel(src, dst)`` the lab's way (blocks
of ``(TILE, BLOCK_ROWS)`` threads, the kernel's own globals or ``(32, 8)``, a grid of
``(ceil(W / TILE), ceil(H / TILE))``, ``src: (H, W)`` and ``dst: (W, H)`` float32 views into
larger buffers, ``dst`` poisoned with NaN); :func:`check_transpose_kernel` compares it with
NumPy's ``.T`` on :data:`TRANSPOSE_SHAPES`, judges its accesses as recorded warp by warp in the
simulator (:mod:`.transpose_pattern`: coalesced loads and stores, no bank conflict, a barrier
between the tile's writes and reads), and reads what the real compiler made of it for a T4
(:func:`helpers.compiled.compile_kernel`): shared memory used, a barrier.
:func:`compile_for_block_rows` compiles it for other block heights, for the occupancy table.

Source: Li et al., ICPP 2016, Section V-C and Figure 6 (shared-memory efficiency; padding as a
remedy for bank conflicts); NVIDIA, "An Efficient Matrix Transpose in CUDA C/C++" (the 32 x 33
tile); CUDA C Best Practices Guide, "Shared Memory and Memory Banks".
"""

from __future__ import annotations

import ast
import math
import types
import warnings

import numpy as np
from numba import cuda

from helpers import compiled
from helpers.checks import Case, Report, WrongResult, check_cases, compiler_check, kernel_line
from helpers.checks.lab2 import (
    in_kernel_source,
    is_kernel,
    padded_device_array,
    raises_not_implemented,
    source_tree,
    written_inside,
)
from helpers.checks.lab6 import transpose_pattern as pattern
from helpers.checks.lab6.recorded import Recording, SimulatorChanged

__all__ = [
    "BLOCK_ROWS",
    "KERNEL_ARGTYPES",
    "TILE",
    "TRANSPOSE_SHAPES",
    "check_transpose_kernel",
    "compile_for_block_rows",
    "launch_shape",
    "run_transpose",
]

TILE = 32           #: edge of the tile a block transposes (and of the grid's blocks)
BLOCK_ROWS = 8      #: rows of threads a block: each thread copies TILE // BLOCK_ROWS = 4 rows
#: The tile edges a kernel's own global TILE may take (one block of TILE x BLOCK_ROWS threads a
#: tile; a warp is one row of 32 threads or two of 16).
TILES = (16, 32)

#: The kernel's arguments as :func:`run_transpose` passes them (2-D float32 views of larger
#: buffers, so any layout): what the compiler check compiles it for.
KERNEL_ARGTYPES: tuple[str, ...] = ("float32[:, :]",) * 2

#: (H, W) of src in the order the checker tries them, and what each is for.
TRANSPOSE_SHAPES: list[tuple[tuple[int, int], str]] = [
    ((64, 64), "a square of whole tiles"),
    ((64, 32), "not square, whole tiles"),
    ((37, 45), "neither side a multiple of the tile: partial tiles at the bottom and right"),
    ((1, 70), "a single row: most threads of every block have nothing to copy"),
    ((33, 1), "a single column of 33 rows"),
]

_HINT = ("block (bx, by) copies src rows by*TILE .. by*TILE+TILE-1, columns bx*TILE .. "
         "bx*TILE+TILE-1 into tile[row, column] (x = bx*TILE + tx, y = by*TILE + ty, rows y + j "
         "for j in range(0, TILE, BLOCK_ROWS)); after cuda.syncthreads() it writes that tile to "
         "dst with the block indices swapped (x = by*TILE + tx, y = bx*TILE + ty) and the tile "
         "read across, dst[y + j, x] = tile[tx, ty + j]; every read of src is guarded by src's "
         "shape and every write of dst by dst's (W, H).")


class _OutsideTile(IndexError):
    """A thread indexed outside a shared (or local) array of the kernel, not src or dst."""


# ------------------------------------------------------------------------------------ launch


def launch_shape(kernel) -> tuple[int, int]:
    """``(TILE, BLOCK_ROWS)`` the kernel is launched with: the ints of those names in its
    globals where its code reads them (the lab's cell defines them), else (32, 8).

    Raises:
        ValueError: TILE not in :data:`TILES`, or BLOCK_ROWS not a divisor of TILE (the message
            names the global and its value).
    """
    fn = getattr(kernel, "py_func", kernel)
    names = getattr(getattr(fn, "__code__", None), "co_names", ())
    env = getattr(fn, "__globals__", {})
    tile, rows = TILE, BLOCK_ROWS
    if "TILE" in names and "TILE" in env:
        tile = env["TILE"]
        if isinstance(tile, bool) or not isinstance(tile, (int, np.integer)) or tile not in TILES:
            raise ValueError(f"your global TILE is {tile!r}: the check launches one block of "
                             f"TILE x BLOCK_ROWS threads a TILE x TILE tile, TILE one of "
                             f"{' or '.join(map(str, TILES))} (the lab's is {TILE})")
    if "BLOCK_ROWS" in names and "BLOCK_ROWS" in env:
        rows = env["BLOCK_ROWS"]
        if isinstance(rows, bool) or not isinstance(rows, (int, np.integer)) or rows < 1 \
                or tile % rows:
            raise ValueError(f"your global BLOCK_ROWS is {rows!r}: it must divide TILE = "
                             f"{tile} (the lab's is {BLOCK_ROWS}), each thread copying "
                             f"TILE // BLOCK_ROWS rows of the tile")
    return int(tile), int(rows)


def run_transpose(kernel, a: np.ndarray) -> np.ndarray:
    """Launch ``kernel(src, dst)`` the lab's way and return dst, which should be ``a.T``.

    Blocks of ``(TILE, BLOCK_ROWS)`` threads (:func:`launch_shape`: the lab's ``(32, 8)``),
    a grid of ``(ceil(W / TILE), ceil(H / TILE))`` blocks: x along the columns of src. src and
    dst are views into larger buffers (src's padded with random data, dst's with NaN) and dst
    starts as NaN, so an element never written shows, and a thread that goes outside its
    matrix is caught. The lab's stub (its source raises NotImplementedError) is not launched.

    Args:
        kernel: a ``@cuda.jit`` kernel ``(src, dst)``. a: (H, W), converted to float32,
            1 <= H, W <= 96 (the simulator runs every thread in Python).

    Returns:
        dst, (W, H) float32 NumPy array.

    Raises:
        NotImplementedError: the stub. TypeError: not a CUDA kernel. ValueError: a not 2-D or
            out of range, or the kernel's TILE or BLOCK_ROWS unusable. IndexError: a thread
            read or wrote outside src, dst or a shared array (the message says which, with the
            kernel's line).
    """
    if raises_not_implemented(kernel):
        raise NotImplementedError("the kernel is still the stub: write it, then run its cell")
    if not is_kernel(kernel):
        raise TypeError(f"expected a @cuda.jit kernel, got {type(kernel).__name__}")
    a = np.ascontiguousarray(a, dtype=np.float32)
    if a.ndim != 2 or not (1 <= a.shape[0] <= 96 and 1 <= a.shape[1] <= 96):
        raise ValueError(f"a must be a 2-D array with 1..96 rows and columns, got shape "
                         f"{a.shape}")
    h, w = a.shape
    tile, rows = launch_shape(kernel)
    grid = (math.ceil(w / tile), math.ceil(h / tile))
    _, d_src = padded_device_array(a, TILE, TILE, None, np.random.default_rng(7))
    d_buf, d_dst = padded_device_array(np.full((w, h), np.nan, np.float32), TILE, TILE,
                                       np.nan, None)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # NumbaPerformanceWarning: tiny grids on a GPU
            kernel[grid, (tile, rows)](d_src, d_dst)
            cuda.synchronize()
    except IndexError as exc:  # the simulator checks every index
        if "out of bounds" not in str(exc):
            raise
        if in_kernel_source(exc, kernel):
            raise _OutsideTile(f"your kernel indexed outside its shared tile (or another "
                               f"array of its own), not src or dst: {exc}"
                               f"{kernel_line(exc, kernel)}") from None
        raise IndexError(f"your kernel read or wrote outside a matrix (src is {h} x {w}, dst "
                         f"{w} x {h}): {exc}{kernel_line(exc, kernel)}") from None
    return written_inside(d_buf.copy_to_host(), w, h, "dst", "dst")


# ---------------------------------------------------------------------------- source reading


def _calls(kernel, attr: str, owner: str | None = None) -> list[ast.Call]:
    """The calls ``<owner>.<attr>(...)`` (or ``attr(...)``) in the kernel's source."""
    tree = source_tree(kernel)
    found = []
    for node in ast.walk(tree) if tree is not None else ():
        if not isinstance(node, ast.Call):
            continue
        f = node.func
        name = f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", None)
        if name != attr:
            continue
        if owner is None or (isinstance(f, ast.Attribute) and owner in (
                getattr(f.value, "attr", None), getattr(f.value, "id", None))):
            found.append(node)
    return found


def _has_barrier(kernel) -> bool:
    return bool(_calls(kernel, "syncthreads"))


# ---------------------------------------------------------------------------------- checker


def _cases(tile: int, rows: int) -> list[Case]:
    rng = np.random.default_rng(61)
    cases = []
    for (h, w), what in TRANSPOSE_SHAPES:
        a = rng.standard_normal((h, w)).astype(np.float32)
        grid = (math.ceil(w / tile), math.ceil(h / tile))
        assert not np.allclose(a.T, 0)
        cases.append(Case((a,), a.T.astype(np.float64),
                          f"src (H, W) = ({h}, {w}), {what}; grid {grid[0]} x {grid[1]} blocks "
                          f"of {tile} x {rows} threads", rtol=0.0))
    return cases


def _no_shared(report: Report, rec: Recording | None) -> Report:
    store = next((s for s in rec.sites("global") if s.kind == "store"), None) if rec else None
    measured = (f": the {len(store.example)} lanes of a warp write {store.worst[0]} sectors of "
                f"32 bytes for {len(store.example) * 4} useful bytes (a store efficiency of "
                f"{100 * store.ideal / store.sectors:.1f} %, recorded in the simulator)"
                if store and store.sectors > store.ideal else "")
    return Report(report.name, False, (
        f"your kernel gives the right dst in all {report.cases_run} cases, but it uses no "
        "shared memory: it is the naive transpose. Its reads of src are coalesced (a warp "
        "reads neighbours in a row), but its writes to dst are a column, each lane a whole "
        f"row of dst from the next{measured}. Stage the block's tile in cuda.shared.array "
        "so that both the reads of src and the writes of dst are rows."),
        report.cases_run, "failed")


def _no_barrier(report: Report) -> Report:
    return Report(report.name, False, (
        f"your kernel gives the right dst in all {report.cases_run} cases here, but the "
        "compiler finds no barrier in it: "
        "nothing makes a thread wait until the other threads of its block have written the "
        "tile before it reads a column of it, written by 32 other threads (other warps among "
        "them). On a GPU warps run in any order, so it would read elements nobody has written "
        "yet. Put cuda.syncthreads() between the loop that fills the tile and the loop that "
        "reads it. (If each thread reads back only what it wrote itself, the tile does "
        "nothing: its writes to dst are a column again.)"), report.cases_run, "failed")


def _record(kernel, tile: int, rows: int) -> tuple[Recording | None, str]:
    """The recorded launch, or None and why not (the value cases then report the error)."""
    try:
        return pattern.record_transpose(kernel, tile, rows), ""
    except SimulatorChanged as exc:
        return None, str(exc)
    except Exception as exc:  # noqa: BLE001 - the learner's kernel, reported by the cases
        return None, f"the recorded launch raised {type(exc).__name__}"


def check_transpose_kernel(kernel) -> Report:
    """Check the learner's ``transpose_kernel(src, dst)``: dst = src.T through a padded tile,
    coalesced on both sides and free of bank conflicts.

    Args:
        kernel: a ``@cuda.jit`` kernel; src (H, W) and dst (W, H) float32, launched by
            :func:`run_transpose` (blocks of TILE x BLOCK_ROWS threads, 32 x 8 in the lab,
            grid (ceil(W/TILE), ceil(H/TILE))).

    Returns:
        A :class:`~helpers.checks.Report`; never raises for anything the kernel does. First
        the kernel runs once in the simulator on a src of
        :data:`.transpose_pattern.RECORD_SHAPE` with every access recorded: a shared word read
        by one thread and written by another with no ``cuda.syncthreads()`` between fails
        (a ``cuda.syncwarp()`` orders one warp only). Then it must equal NumPy's ``.T``
        exactly on :data:`TRANSPOSE_SHAPES` (a square of whole tiles first, then shapes that
        are not square or not multiples of the tile). A kernel that passes is compiled for a
        T4 (:func:`helpers.checks.compiler_check`: it fails on a compile error or FP64
        instructions); the compiler's report must show a barrier (where no compiler can be
        loaded it is not checked, and the report says so). The recorded accesses must use
        shared memory (none: the naive transpose), and every warp request must touch no more
        32-byte sectors of src (loads) and dst (stores) than its bytes need, and have no bank
        conflict on a shared array (loads and stores): a failure names the side, the line, and
        the degree.
    """
    name = "Lab 6, TODO 2: transpose through a padded shared tile"
    if not (raises_not_implemented(kernel) or is_kernel(kernel)):
        return Report(name, False, f"transpose_kernel is not a CUDA kernel (got "
                      f"{type(kernel).__name__}): put @cuda.jit on the line above `def "
                      f"transpose_kernel(src, dst):` and run that cell again.", 0, "error")
    try:
        tile, rows = launch_shape(kernel)
    except ValueError as exc:
        return Report(name, False, str(exc), 0, "error")
    rec, why = (None, "") if raises_not_implemented(kernel) else _record(kernel, tile, rows)
    race = pattern.race_message(rec, bool(_calls(kernel, "syncwarp"))) if rec else None
    if race:
        return Report(name, False, race, 0, "failed")

    def guarded(a):
        try:
            return run_transpose(kernel, a)
        except IndexError as exc:
            if not str(exc).startswith("your kernel"):
                raise
            hint = (f"the shared tile's indices run over its own shape only (the lab's "
                    f"tile is {TILE} rows of {TILE + 1} words)." if isinstance(exc, _OutsideTile)
                    else "the grid covers src in whole tiles, so a block at the bottom "
                    "or right edge has threads outside the matrix: guard each read with src's "
                    "shape (H, W) and each write with dst's (W, H), after swapping the block "
                    "indices.")
            raise WrongResult(str(exc), hint) from exc

    report = check_cases(name, guarded, _cases(tile, rows), _HINT)
    if report.status == "failed" and not _has_barrier(kernel):
        report.message += ("\nNote: your kernel has no cuda.syncthreads(), so a thread can read "
                           "the tile before the other threads have written it.")
    report = compiler_check(report, kernel, KERNEL_ARGTYPES)
    if not report.passed:
        return report
    if rec is not None and not rec.sites("shared"):
        return _no_shared(report, rec)
    try:
        result = compiled.compile_kernel(kernel, KERNEL_ARGTYPES, "sm_75")
    except (compiled.CompilerUnavailable, compiled.CompileError, ValueError):
        result = None
    if result is not None and result.smem_per_block == 0:
        return _no_shared(report, rec)
    if result is not None and result.barriers < 1:
        return _no_barrier(report)
    if rec is None:
        report.message += f" (Coalescing and bank conflicts not checked: {why}.)"
    else:
        problem = pattern.coalescing_message(rec) or pattern.conflict_message(rec)
        if problem:
            return Report(name, False, f"your kernel gives the right dst in all "
                          f"{report.cases_run} cases, but {problem}", report.cases_run,
                          "failed")
        report.message += pattern.summary(rec)
    if result is None:
        report.message += (" (Shared memory and barrier not read from the compiler: it could "
                           "not be run here.)")
    else:
        report.message += (f" Compiled for a T4: {result.smem_per_block:,} bytes of shared "
                           f"memory a block, {result.barriers} "
                           f"barrier{'s' if result.barriers > 1 else ''}.")
    return report


# ------------------------------------------------------------------- other block heights


def compile_for_block_rows(kernel, block_rows=(2, 4, 8, 16, 32),
                           targets=("sm_75", "sm_90")) -> dict[tuple[str, int], object]:
    """Compile the transpose kernel for blocks of ``(32, rows)`` threads: the kernel as it is,
    with its global ``BLOCK_ROWS`` set to each of ``block_rows`` (each thread then copies
    ``TILE // rows`` rows), for each target, in one call of the compiler.

    Args:
        kernel: a ``@cuda.jit`` kernel that reads the global ``BLOCK_ROWS``.
        block_rows: divisors of 32. targets: keys of :data:`helpers.compiled.TARGETS`.

    Returns:
        ``{(target, rows): CompiledKernel}``: registers per thread and shared memory per block
        as the compiler reports them (a :class:`helpers.compiled.CompileError` raises).

    Raises:
        ValueError: the kernel does not read ``BLOCK_ROWS``, or rows that do not divide 32.
        helpers.compiled.CompilerUnavailable: no compiler here. helpers.compiled.CompileError.
    """
    fn = getattr(kernel, "py_func", kernel)
    if not isinstance(fn, types.FunctionType) or "BLOCK_ROWS" not in fn.__code__.co_names:
        raise ValueError("the kernel does not read the global BLOCK_ROWS, so it cannot be "
                         "compiled for other block heights")
    for rows in block_rows:
        if isinstance(rows, bool) or not isinstance(rows, int) or rows < 1 or TILE % rows:
            raise ValueError(f"block_rows must divide {TILE}, got {rows!r}")
    jobs, keys = [], []
    for rows in block_rows:
        env = dict(fn.__globals__, BLOCK_ROWS=rows)
        copy = types.FunctionType(fn.__code__, env, fn.__name__, fn.__defaults__, fn.__closure__)
        for target in targets:
            jobs.append(compiled.Job(copy, KERNEL_ARGTYPES, target))
            keys.append((target, rows))
    out = {}
    for key, result in zip(keys, compiled.compile_many(jobs)):
        if isinstance(result, compiled.CompileError):
            raise result
        out[key] = result
    return out
