"""Lab 6, TODO 2: the transpose kernel through a padded shared-memory tile, launched and judged.

:func:`run_transpose` launches a learner's ``transpose_kernel(src, dst)`` the lab's way (blocks
of ``(32, 8)`` threads, a grid of ``(ceil(W / 32), ceil(H / 32))``, ``src: (H, W)`` and
``dst: (W, H)`` float32 views into larger buffers, ``dst`` poisoned with NaN);
:func:`check_transpose_kernel` compares it with NumPy's ``.T`` on :data:`TRANSPOSE_SHAPES`, then
reads what the real compiler made of it for a T4 (:func:`helpers.compiled.compile_kernel`):
shared memory used, a barrier, and a tile padded so that a column read has no bank conflict.
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
from helpers.experiments.memory_access import conflict_degree

__all__ = [
    "BLOCK_ROWS",
    "KERNEL_ARGTYPES",
    "TILE",
    "TRANSPOSE_SHAPES",
    "UNPADDED_TILE_BYTES",
    "check_transpose_kernel",
    "compile_for_block_rows",
    "run_transpose",
]

TILE = 32           #: edge of the tile a block transposes (and of the grid's blocks)
BLOCK_ROWS = 8      #: rows of threads a block: each thread copies TILE // BLOCK_ROWS = 4 rows

#: The kernel's arguments as :func:`run_transpose` passes them (2-D float32 views of larger
#: buffers, so any layout): what the compiler check compiles it for.
KERNEL_ARGTYPES: tuple[str, ...] = ("float32[:, :]",) * 2

#: Bytes of an unpadded 32 x 32 float32 tile: the shared memory of a kernel whose column reads
#: are a 32-way bank conflict.
UNPADDED_TILE_BYTES = TILE * TILE * 4

#: (H, W) of src in the order the checker tries them, and what each is for.
TRANSPOSE_SHAPES: list[tuple[tuple[int, int], str]] = [
    ((64, 64), "a square of 2 x 2 whole tiles"),
    ((64, 32), "not square: 2 tiles down, 1 across"),
    ((37, 45), "neither side a multiple of 32: partial tiles at the bottom and right"),
    ((1, 70), "a single row: most threads of every block have nothing to copy"),
    ((33, 1), "a single column, one row more than a tile"),
]

_HINT = ("block (bx, by) copies src rows by*32 .. by*32+31, columns bx*32 .. bx*32+31 into "
         "tile[row, column] (x = bx*32 + tx, y = by*32 + ty, rows y + j for j in range(0, "
         "TILE, BLOCK_ROWS)); after cuda.syncthreads() it writes that tile to dst with the "
         "block indices swapped (x = by*32 + tx, y = bx*32 + ty) and the tile read across, "
         "dst[y + j, x] = tile[tx, ty + j]; every read of src is guarded by src's shape and "
         "every write of dst by dst's (W, H).")


class _OutsideTile(IndexError):
    """A thread indexed outside a shared (or local) array of the kernel, not src or dst."""


# ------------------------------------------------------------------------------------ launch


def run_transpose(kernel, a: np.ndarray) -> np.ndarray:
    """Launch ``kernel(src, dst)`` the lab's way and return dst, which should be ``a.T``.

    Blocks of ``(TILE, BLOCK_ROWS) = (32, 8)`` threads, a grid of ``(ceil(W / 32), ceil(H /
    32))`` blocks: x along the columns of src. src and dst are views into larger buffers (src's
    padded with random data, dst's with NaN) and dst starts as NaN, so an element never written
    shows, and a thread that goes outside its matrix is caught. The lab's stub (its source
    raises NotImplementedError) is not launched.

    Args:
        kernel: a ``@cuda.jit`` kernel ``(src, dst)``. a: (H, W), converted to float32,
            1 <= H, W <= 96 (the simulator runs every thread in Python).

    Returns:
        dst, (W, H) float32 NumPy array.

    Raises:
        NotImplementedError: the stub. TypeError: not a CUDA kernel. ValueError: a not 2-D or
            out of range. IndexError: a thread read or wrote outside src, dst or a shared
            array (the message says which, with the kernel's line).
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
    grid = (math.ceil(w / TILE), math.ceil(h / TILE))
    _, d_src = padded_device_array(a, TILE, TILE, None, np.random.default_rng(7))
    d_buf, d_dst = padded_device_array(np.full((w, h), np.nan, np.float32), TILE, TILE,
                                       np.nan, None)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # NumbaPerformanceWarning: tiny grids on a GPU
            kernel[grid, (TILE, BLOCK_ROWS)](d_src, d_dst)
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


def _value(node: ast.AST, env: dict):
    """The int (or tuple of ints) an expression of literals and global ints stands for, or
    None: enough to read a ``cuda.shared.array`` shape such as ``(TILE, TILE + 1)``."""
    if isinstance(node, ast.Constant) and isinstance(node.value, int):
        return node.value
    if isinstance(node, ast.Name):
        v = env.get(node.id)
        return int(v) if isinstance(v, (int, np.integer)) and not isinstance(v, bool) else None
    if isinstance(node, ast.Tuple):
        parts = [_value(e, env) for e in node.elts]
        return None if any(p is None or isinstance(p, tuple) for p in parts) else tuple(parts)
    if isinstance(node, ast.BinOp):
        left, right = _value(node.left, env), _value(node.right, env)
        if isinstance(left, int) and isinstance(right, int):
            ops = {ast.Add: lambda x, y: x + y, ast.Sub: lambda x, y: x - y,
                   ast.Mult: lambda x, y: x * y,
                   ast.FloorDiv: lambda x, y: x // y if y else None}
            op = ops.get(type(node.op))
            return op(left, right) if op else None
    return None


def _unpadded_rows(kernel) -> tuple[int, ...] | None:
    """The shape of a 2-D (or more) shared array of the kernel whose rows are a multiple of 32
    words long (each column of it lies in one bank), or None."""
    env = getattr(getattr(kernel, "py_func", kernel), "__globals__", {})
    for call in _calls(kernel, "array", "shared"):
        shape = _value(call.args[0], env) if call.args else None
        if isinstance(shape, tuple) and len(shape) >= 2 and shape[-1] % 32 == 0:
            return shape
    return None


def _has_barrier(kernel) -> bool:
    return bool(_calls(kernel, "syncthreads"))


# ---------------------------------------------------------------------------------- checker


def _cases() -> list[Case]:
    rng = np.random.default_rng(61)
    cases = []
    for (h, w), what in TRANSPOSE_SHAPES:
        a = rng.standard_normal((h, w)).astype(np.float32)
        grid = (math.ceil(w / TILE), math.ceil(h / TILE))
        assert not np.allclose(a.T, 0)
        cases.append(Case((a,), a.T.astype(np.float64),
                          f"src (H, W) = ({h}, {w}), {what}; grid {grid[0]} x {grid[1]} blocks "
                          f"of {TILE} x {BLOCK_ROWS} threads", rtol=0.0))
    return cases


def _no_shared(report: Report) -> Report:
    return Report(report.name, False, (
        f"your kernel gives the right dst in all {report.cases_run} cases, but the compiler "
        "finds no shared memory in it "
        "(0 bytes a block): it is the naive transpose. Its reads of src are coalesced (a warp "
        "reads 32 neighbours of a row), but its writes to dst are a column: the 32 lanes of "
        "a warp write 32 floats a whole row of dst apart, 32 sectors of 32 bytes for 128 "
        "useful bytes (a store efficiency of 12.5 %). Stage the block's 32 x 32 tile in "
        "cuda.shared.array so that both the reads of src and the writes of dst are rows."),
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


def _unpadded(report: Report, shape, smem: int) -> Report:
    column = [k * TILE for k in range(TILE)]        # a column of a tile 32 words a row
    degree = conflict_degree(column)
    layout = (f"its shared array is {' x '.join(map(str, shape))} ({smem:,} bytes), rows of "
              f"{shape[-1]} words" if shape else f"its tile takes {smem:,} bytes, an unpadded "
              f"{TILE} x {TILE} float32 tile, rows of {TILE} words")
    return Report(report.name, False, (
        f"your kernel gives the right dst in all {report.cases_run} cases, but {layout}: the "
        f"words of a column are "
        f"{TILE} apart, so all {TILE} lanes of a warp reading a column hit one bank. "
        f"conflict_degree(words 0, 32, 64, ..., 992) = {degree}: a {degree}-way bank "
        f"conflict, the read served in {degree} passes instead of 1. Pad each row to "
        f"{TILE + 1} words (a global constant such as PADDED = TILE + 1, and "
        f"cuda.shared.array((TILE, PADDED), float32)): row r then starts in bank r, and a "
        f"column spreads over all {TILE} banks."), report.cases_run, "failed")


def check_transpose_kernel(kernel) -> Report:
    """Check the learner's ``transpose_kernel(src, dst)``: dst = src.T through a padded tile.

    Args:
        kernel: a ``@cuda.jit`` kernel; src (H, W) and dst (W, H) float32, launched by
            :func:`run_transpose` (blocks of 32 x 8 threads, grid (ceil(W/32), ceil(H/32))).

    Returns:
        A :class:`~helpers.checks.Report`; never raises for anything the kernel does. The
        kernel must equal NumPy's ``.T`` exactly on :data:`TRANSPOSE_SHAPES` (a square of whole
        tiles first, then shapes that are not square or not multiples of 32). A kernel that
        passes is compiled for a T4 (:func:`helpers.checks.compiler_check`: it fails on a
        compile error or FP64 instructions), and the compiler's report must show shared memory
        (0 bytes: the naive transpose, whose writes are columns), a barrier, and a padded tile
        (an unpadded 32 x 32 float32 tile, :data:`UNPADDED_TILE_BYTES`, or a shared array whose
        rows are a multiple of 32 words: a 32-way bank conflict on the column reads). Where no
        compiler can be loaded those three are not checked, and the report says so.
    """
    name = "Lab 6, TODO 2: transpose through a padded shared tile"
    if not (raises_not_implemented(kernel) or is_kernel(kernel)):
        return Report(name, False, f"transpose_kernel is not a CUDA kernel (got "
                      f"{type(kernel).__name__}): put @cuda.jit on the line above `def "
                      f"transpose_kernel(src, dst):` and run that cell again.", 0, "error")

    def guarded(a):
        try:
            return run_transpose(kernel, a)
        except IndexError as exc:
            if not str(exc).startswith("your kernel"):
                raise
            hint = (f"the shared tile's indices run over its own shape only (the lab's "
                    f"tile is {TILE} rows of {TILE + 1} words)." if isinstance(exc, _OutsideTile)
                    else "the grid covers src in whole 32 x 32 tiles, so a block at the bottom "
                    "or right edge has threads outside the matrix: guard each read with src's "
                    "shape (H, W) and each write with dst's (W, H), after swapping the block "
                    "indices.")
            raise WrongResult(str(exc), hint) from exc

    report = check_cases(name, guarded, _cases(), _HINT)
    if report.status == "failed" and not _has_barrier(kernel):
        report.message += ("\nNote: your kernel has no cuda.syncthreads(), so a thread can read "
                           "the tile before the other threads have written it.")
    report = compiler_check(report, kernel, KERNEL_ARGTYPES)
    if not report.passed:
        return report
    try:
        result = compiled.compile_kernel(kernel, KERNEL_ARGTYPES, "sm_75")
    except (compiled.CompilerUnavailable, compiled.CompileError, ValueError):
        report.message += (" (Shared memory, barrier and padding not checked: the compiler "
                           "could not be run here.)")
        return report
    if result.smem_per_block == 0:
        return _no_shared(report)
    if result.barriers < 1:
        return _no_barrier(report)
    shape = _unpadded_rows(kernel)
    if result.smem_per_block == UNPADDED_TILE_BYTES or shape is not None:
        return _unpadded(report, shape, result.smem_per_block)
    report.message += (f" Compiled for a T4: {result.smem_per_block:,} bytes of shared memory "
                       f"a block, {result.barriers} barrier{'s' if result.barriers > 1 else ''}.")
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
