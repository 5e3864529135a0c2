"""Checker for Lab 10: from 1-D to 2-D blocktiling, one rung of the GEMM ladder.

:func:`check_blocktile_2d` checks ``gemm_blocktile_2d_kernel(a, b, c, m, n, k)`` of
``labs/lab10_blocktiling.ipynb``: flat row-major float32 arrays a (M*K,), b (K*N,), c (M*N,) and
int64 sizes, a BM x BN tile of C a block, a TM x TN register tile a thread. :func:`run_blocktile`
launches it as the lab states (grid (ceil(N / BN), ceil(M / BM)), :data:`THREADS` threads);
:func:`compiled_rows` gives what the real compiler makes of kernels for the lab's table. The check
compares values with NumPy float64 on :func:`blocktile_shapes`, then reads the compiler's PTX for
a T4: no local memory, shared memory used, at least :data:`MIN_FFMA_PER_SHARED_LOAD` FFMA per
shared load, two barriers per step along K. Each failure names the mistake.

Source: Li et al., ICPP 2016, Figure 4 (GEMM is 80-87 % of the unrolling libraries' time);
S. Boehm (2022), kernels 4 and 5; rungs 4 and 5 of :mod:`helpers.conv.gemm`.
"""

from __future__ import annotations

import ast
import inspect
import math
import textwrap
import warnings

import numpy as np
from numba import cuda

from helpers import compiled
from helpers.checks import (
    COMPILER_TARGET,
    Case,
    Report,
    WrongResult,
    check_cases,
    compiler_check,
    kernel_line,
    random_array,
)
from helpers.checks.lab2 import (
    in_kernel_source,
    is_kernel,
    raises_not_implemented,
    source_tree,
    written_inside,
)
from helpers.device import backend

__all__ = ["BM", "BN", "BK", "TM", "TN", "THREADS", "THREADS_1D", "A_TILE", "B_TILE",
           "MIN_FFMA_PER_SHARED_LOAD", "KERNEL_ARGTYPES", "blocktile_shapes", "run_blocktile",
           "check_blocktile_2d", "compiled_rows"]

BM, BN, BK = 32, 32, 8         #: a block's tile of C (BM x BN) and its step along K
TM, TN = 4, 4                  #: a thread's register tile in the 2-D kernel (TM x TN results)
THREADS = BM * BN // (TM * TN)  #: 64 threads a block in the 2-D kernel
THREADS_1D = BM * BN // TM     #: 256 in the 1-D kernel (TM results of one column a thread)
A_TILE, B_TILE = BM * BK, BK * BN  #: elements of A's and B's tiles in shared memory (256 each)

#: The least FFMA per shared-memory load a TM x TN register tile gives: TM + TN loads per
#: TM * TN FMAs (2.0 for 4 x 4; the 1-D kernel does TM / (TM + 1) = 0.8).
MIN_FFMA_PER_SHARED_LOAD = TM * TN / (TM + TN)

#: The kernel's arguments as :func:`run_blocktile` passes them (contiguous flat views, int64
#: sizes), for the compiler.
KERNEL_ARGTYPES: tuple[str, ...] = ("float32[::1]",) * 3 + ("int64",) * 3

#: Without a GPU, the most threads (whole blocks) :func:`run_blocktile` launches.
SIMULATOR_MAX_THREADS = 2048


def blocktile_shapes() -> list[tuple[int, int, int, str, str]]:
    """The check's cases, in order: (M, K, N, what the case tests, the hint if it fails)."""
    inside = ("threads whose rows or columns lie past C must still load (0.0 outside A or B) "
              "and reach both barriers; only their stores are skipped (`if row < m and col < "
              "n`).")
    return [
        (2 * BM, 2 * BK, BN, "every size a multiple of the tiles",
         "thread t owns rows (t // (BN // TN)) * TM + 0..TM-1 and columns (t % (BN // TN)) * TN "
         "+ 0..TN-1 of its block's tile; each step along K the THREADS threads copy all "
         "A_TILE elements of A's tile and B_TILE of B's (A_TILE // THREADS each)."),
        (BM, 2 * BK + 5, BN, "a last step along K that is partial (K % BK = 5)",
         "the last step along K covers only K % BK columns of A's tile and rows of B's: run "
         "all ceil(K / BK) steps (range(0, k, BK)), and in the last one load 0.0 where k0 + "
         "column >= k (for A) and k0 + row >= k (for B), so that no value of an earlier step "
         "stays in the tiles. With flat arrays a missing check reads the next row of A."),
        (37, 29, 21, "no size a multiple of a tile", inside),
        (1, 1, 1, "a 1 x 1 x 1 product", inside),
        (5, 19, 3, "M and N smaller than one tile, K not a multiple of BK", inside),
        (2 * BM + 6, BK, BN + 13, "K exactly one tile, M and N past whole tiles", inside),
    ]


# ------------------------------------------------------------------------------------ launch


class _OutsideLocalArray(IndexError):
    """A thread indexed outside a shared or local array of the kernel, not A, B or C."""


def _flat_device(values: np.ndarray, guard: int, fill, rng):
    """A device buffer of ``values`` followed by ``guard`` elements of ``fill`` (or random
    data), and the view of ``values`` in it."""
    tail = np.full(guard, fill, np.float32) if rng is None else random_array(rng, (guard,))
    d_buf = cuda.to_device(np.concatenate([values.astype(np.float32).ravel(), tail]))
    return d_buf, d_buf[:values.size]


def _outside(exc: IndexError, kernel, m: int, k: int, n: int) -> IndexError:
    """The simulator's out-of-bounds error, said in the lab's words: which array, which line."""
    line = kernel_line(exc, kernel)
    if in_kernel_source(exc, kernel):  # A, B and C fail inside the simulator's arrays
        return _OutsideLocalArray(
            f"your kernel indexed outside a shared (or local) array, not A, B or C (A's tile "
            f"holds A_TILE = {A_TILE} elements, B's B_TILE = {B_TILE}, the register tile TM x "
            f"TN = {TM} x {TN}): {exc}{line}")
    names = getattr(getattr(kernel, "py_func", kernel), "__code__").co_varnames[:3]
    code = line.split(": ", 1)[-1]
    lhs = code.split("=", 1)[0] if "=" in code and "==" not in code.split("=", 1)[0] else ""
    if lhs.strip().startswith(f"{names[2]}["):
        return IndexError(f"your kernel wrote outside C (M x N = {m} x {n}, {m * n} elements): "
                          f"{exc}{line}")
    return IndexError(f"your kernel read or wrote outside a matrix (A is {m} x {k}, B {k} x "
                      f"{n}, C {m} x {n}, each flat): {exc}{line}")


def run_blocktile(kernel, a: np.ndarray, b: np.ndarray, threads: int = THREADS) -> np.ndarray:
    """Launch ``kernel(a, b, c, m, n, k)`` the lab's way and return C.

    A grid of ``(ceil(N / BN), ceil(M / BM))`` blocks of ``threads`` threads (1-D blocks), flat
    row-major views a (M*K,), b (K*N,), c (M*N,) and np.int64 sizes. A and B are followed by
    random data and C by NaN, and C starts as NaN: an unwritten element stays NaN, and a write
    past the end of C is caught (an index error in the simulator, the guard no longer NaN on a
    GPU). A read past A's row end lands in the next row of the flat array: a wrong value.

    Args:
        kernel: a ``@cuda.jit`` kernel. a: (M, K), b: (K, N), 2-D, converted to float32.
        threads: threads a block: :data:`THREADS` (2-D kernel) or :data:`THREADS_1D` (1-D).

    Returns:
        C, (M, N) float32 NumPy array.

    Raises:
        NotImplementedError: ``kernel`` is the lab's stub. TypeError: not a CUDA kernel.
        ValueError: inputs not 2-D, empty, or with inner dimensions that differ; threads not
            1..1024; without a GPU, more than :data:`SIMULATOR_MAX_THREADS` threads.
        IndexError: a thread wrote outside C, or (in the simulator) read or wrote outside A,
            B, C or an array of the kernel; the message says which, with the kernel's line.
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
    if isinstance(threads, bool) or not isinstance(threads, (int, np.integer)) \
            or not 1 <= threads <= 1024:
        raise ValueError(f"threads must be an integer in 1..1024, got {threads!r}")
    (m, k), n = a.shape, b.shape[1]
    grid = (math.ceil(n / BN), math.ceil(m / BM))
    total = grid[0] * grid[1] * int(threads)
    if backend.MODE == "simulator" and total > SIMULATOR_MAX_THREADS:
        raise ValueError(f"C is {m} x {n}: {total:,} threads would take the CUDA simulator "
                         f"many seconds; without a GPU keep C, rounded up to whole {BM} x {BN} "
                         f"tiles, at most {SIMULATOR_MAX_THREADS // threads} blocks")
    # C's guard reaches the last element a block could touch: (rows of whole tiles) x n + BN.
    rows = -(-(grid[1] * BM * n + grid[0] * BN) // n) + 1
    rng = np.random.default_rng(10)
    _, d_a = _flat_device(a, BM * k + BK * 4, None, rng)
    _, d_b = _flat_device(b, BK * n + BN * 4, None, rng)
    d_cbuf, d_c = _flat_device(np.full(m * n, np.nan, np.float32), rows * n - m * n, np.nan,
                               None)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # NumbaPerformanceWarning: tiny grids on a GPU
            kernel[grid, int(threads)](d_a, d_b, d_c, np.int64(m), np.int64(n), np.int64(k))
            cuda.synchronize()
    except IndexError as exc:  # the simulator checks every index
        if "out of bounds" not in str(exc):
            raise
        raise _outside(exc, kernel, m, k, n) from None
    return written_inside(d_cbuf.copy_to_host().reshape(rows, n), m, n, "C", "c")


# ---------------------------------------------------------------------------------- checker


def _cases() -> list[tuple[Case, str]]:
    rng = np.random.default_rng(1010)
    out = []
    for m, k, n, what, hint in blocktile_shapes():
        a, b = random_array(rng, (m, k)), random_array(rng, (k, n))
        grid = (math.ceil(n / BN), math.ceil(m / BM))
        out.append((Case((a, b), a.astype(np.float64) @ b.astype(np.float64),
                         f"A ({m}, {k}) @ B ({k}, {n}) ({what}), grid {grid[0]} x {grid[1]} "
                         f"blocks of {THREADS} threads"), hint))
    return out


def _shared_reads_in_fma(kernel) -> str | None:
    """The first statement that adds to a local array with a factor read from a shared array
    (``acc[i, j] += a_s[...] * b_s[...]``), as source text; None if there is none."""
    tree = source_tree(kernel)
    if tree is None:
        return None
    shared, local = set(), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call) \
                and isinstance(node.value.func, ast.Attribute) \
                and node.value.func.attr == "array" \
                and isinstance(node.value.func.value, ast.Attribute):
            kind = node.value.func.value.attr
            names = {t.id for t in node.targets if isinstance(t, ast.Name)}
            (shared if kind == "shared" else local if kind == "local" else set()).update(names)
    for node in ast.walk(tree):
        target = value = None
        if isinstance(node, ast.AugAssign):
            target, value = node.target, node.value
        elif isinstance(node, ast.Assign) and len(node.targets) == 1:
            target, value = node.targets[0], node.value
        if not (isinstance(target, ast.Subscript) and isinstance(target.value, ast.Name)
                and target.value.id in local and isinstance(value, ast.BinOp)):
            continue
        reads = {n.value.id for n in ast.walk(value)
                 if isinstance(n, ast.Subscript) and isinstance(n.value, ast.Name)}
        if reads & shared and any(isinstance(n, ast.BinOp) and isinstance(n.op, ast.Mult)
                                  for n in ast.walk(value)):
            fn = getattr(kernel, "py_func", kernel)
            source = textwrap.dedent(inspect.getsource(fn))
            return ast.get_source_segment(source, node) or ""
    return None


def _fail(report: Report, message: str) -> Report:
    return Report(report.name, False, f"your kernel gives the right C in all "
                  f"{report.cases_run} cases, but {message}", report.cases_run, "failed")


def _ratio_message(ratio: float) -> str:
    low = f"its PTX does {ratio:.2f} FFMA per shared-memory load, below the " \
          f"{MIN_FFMA_PER_SHARED_LOAD:g} of a {TM} x {TN} register tile ({TM} + {TN} loads per " \
          f"{TM * TN} FMAs)"
    if ratio <= 0.6:
        return (f"you load from shared memory inside the i-j loop: each FMA reads its operands "
                f"from shared memory ({low}; two loads per FMA is 0.5, the tiled kernel's "
                f"ratio). Per step d, copy TM values of A's tile and TN of B's into registers "
                f"(cuda.local.array), then do the TM x TN FMAs from those registers.")
    if ratio < 1.0:
        results = round(ratio / (1 - ratio))
        return (f"that is still 1-D blocktiling: {low}; about R / (R + 1) = {results} / "
                f"{results + 1} for R = {results} results in one column (the lab's 1-D "
                f"kernel: TM / (TM + 1) = {TM / (TM + 1):.1f}). Each "
                f"thread's results lie in one column (or one row) of C, so only one factor of "
                f"an FMA is reused from a register and the other is loaded for every FMA. Give "
                f"each thread a TM x TN square: rows (t // (BN // TN)) * TM + 0..TM-1, columns "
                f"(t % (BN // TN)) * TN + 0..TN-1.")
    return (f"{low}: is each thread's tile a thinner rectangle than TM x TN (2 x 8 gives 16 / 10 "
            f"= 1.6), or is a value loaded twice? A TM x TN square loads TM + TN values a step "
            f"d for TM x TN FMAs.")


def _compiler_rules(report: Report, kernel) -> Report:
    """Fail a report whose kernel's values are right on what the compiler makes of it."""
    try:
        res = compiled.compile_kernel(kernel, KERNEL_ARGTYPES, COMPILER_TARGET)
    except (compiled.CompilerUnavailable, compiled.CompileError, ValueError):
        report.message += (" (Register tile, shared memory and barriers not checked: the "
                           "compiler could not be run here.)")
        return report
    mix = res.mix
    if res.stack_bytes or res.spill_bytes:
        return _fail(report, (
            f"your register tile went to local memory: index cuda.local.array only with loop "
            f"variables of range() over constants. The compiler gives each thread a stack "
            f"frame of {res.stack_bytes} bytes (spills: {res.spill_bytes} bytes) on a T4: "
            f"an array stays in registers only if every loop over it runs a constant number of "
            f"times, so that the compiler can unroll it and make each index a constant. "
            f"A bound such as range(min(TM, m - row)) or an index computed at run time puts "
            f"the whole tile in local memory (device memory, cached), and every FMA loads and "
            f"stores its sum there. Keep range(TM) and range(TN), and guard each store with "
            f"`if row < m and col < n`."))
    if res.smem_per_block == 0 or mix.shared_loads == 0:
        return _fail(report, (
            f"it uses no shared memory: each thread reads its operands straight from global "
            f"memory ({mix.global_loads} global-load instructions, no shared load, in its PTX). "
            f"The rung stages A's BM x BK tile and B's BK x BN tile in cuda.shared.array once "
            f"per step along K, each element loaded from global memory by one thread, and each "
            f"thread then reads its TM + TN values a step d from shared memory."))
    ratio = mix.ffma_per_shared_load
    if ratio < MIN_FFMA_PER_SHARED_LOAD - 1e-9:
        return _fail(report, _ratio_message(ratio))
    statement = _shared_reads_in_fma(kernel)
    if statement is not None:
        return _fail(report, (
            f"you load from shared memory inside the i-j loop (`{statement}`): as written, "
            f"each FMA reads its operands from shared memory, two loads per FMA. Here the "
            f"compiler saw that the reads repeat, with nothing stored between them, and kept "
            f"the values in registers itself ({ratio:.1f} FFMA per shared-memory load in its "
            f"PTX); the rung is to write that reuse yourself, not to rely on it. Per step d, "
            f"copy TM values of A's tile into a local array and TN of B's into another, then "
            f"do the TM x TN FMAs from those two."))
    double_buffered = res.smem_per_block >= 2 * 4 * (A_TILE + B_TILE)
    if mix.barriers < 2 and not (double_buffered and mix.barriers == 1):
        return _fail(report, _barrier_message(mix.barriers))
    report.message += (f" Compiled for a T4: no local memory, {ratio:.1f} FFMA per "
                       f"shared-memory load, {mix.barriers} barriers.")
    return report


def _barrier_message(barriers: int) -> str:
    return (f"its PTX has {barriers} barrier{'' if barriers == 1 else 's'} (bar.sync) where "
            f"each step along K needs two: cuda.syncthreads() after the loads, so that no "
            f"thread reads a tile before it is complete, and again after the FMAs, so that no "
            f"thread overwrites the tiles with the next step's loads while another still reads "
            f"them. A missing barrier is a race: a GPU gives wrong values only now and then, and "
            f"the simulator may not show it at all.")


def _notes(report: Report, kernel) -> Report:
    """Add what a failed kernel looks like, from the compiler (nothing is launched: on a GPU
    a kernel launched with other threads than it was written for may corrupt memory): the
    1-D kernel, or a kernel missing a barrier."""
    try:
        res = compiled.compile_kernel(kernel, KERNEL_ARGTYPES, COMPILER_TARGET)
    except Exception:  # noqa: BLE001 - no compiler, or it rejects the kernel: no note
        return report
    ratio = res.mix.ffma_per_shared_load
    if ratio is not None and abs(ratio - TM / (TM + 1)) < 0.02:
        report.message += (f"\nNote: your kernel's PTX does {ratio:.2f} FFMA per shared-memory "
                           f"load, TM / (TM + 1): that is the 1-D kernel, TM results of one "
                           f"column a thread, written for THREADS_1D = {THREADS_1D} threads a "
                           f"block. The 2-D kernel runs THREADS = {THREADS} threads, each a TM x "
                           f"TN = {TM} x {TN} tile.")
    elif res.mix.barriers < 2 and res.smem_per_block:
        report.message += ("\nNote: this is likely why: your kernel's "
                           + _barrier_message(res.mix.barriers).removeprefix("its "))
    return report


def check_blocktile_2d(kernel) -> Report:
    """Check the learner's ``gemm_blocktile_2d_kernel(a, b, c, m, n, k)``.

    Args:
        kernel: a ``@cuda.jit`` kernel; flat row-major float32 a (M*K,), b (K*N,), c (M*N,),
            int64 m, n, k; launched by :func:`run_blocktile` (:data:`THREADS` threads, a BM x BN
            tile of C a block, a TM x TN register tile a thread).

    Returns:
        A :class:`~helpers.checks.Report`; never raises for anything the kernel does. Rules, in
        order: (1) C within 1e-4 (relative) of NumPy float64 on every case of
        :func:`blocktile_shapes`: a wrong value, an unwritten element (NaN) and a write outside
        C are each named, with a hint for the case; (2) compiled for a T4: no compile error nor
        FP64 instruction (:func:`helpers.checks.compiler_check`), no stack frame or spill, shared
        memory used, at least :data:`MIN_FFMA_PER_SHARED_LOAD` FFMA per shared load (below it
        the report says whether it looks like 1-D blocktiling or loads inside the i-j loop), no
        shared-memory read in the FMA statement itself, and two barriers per step along K (one
        if the tiles are double-buffered). Without a compiler, rule 2 is skipped with a note.
    """
    name = "Lab 10: 2-D blocktiling"
    if not (raises_not_implemented(kernel) or is_kernel(kernel)):
        return Report(name, False, f"gemm_blocktile_2d_kernel is not a CUDA kernel (got "
                      f"{type(kernel).__name__}): put @cuda.jit on the line above `def "
                      f"gemm_blocktile_2d_kernel(a, b, c, m, n, k):` and run that cell again.",
                      0, "error")

    def guarded(a, b):
        try:
            return run_blocktile(kernel, a, b)
        except IndexError as exc:
            if not str(exc).startswith("your kernel"):
                raise
            hint = ("a shared tile's indices run over 0..A_TILE-1 and 0..B_TILE-1, the register "
                    "tile's over 0..TM-1 and 0..TN-1." if isinstance(exc, _OutsideLocalArray)
                    else "the grid covers C in whole BM x BN tiles, so the last blocks have "
                    "threads whose rows or columns lie past C: store only `if row < m and col "
                    "< n`, and load 0.0 outside A and B.")
            raise WrongResult(str(exc), hint) from exc

    cases = _cases()
    report, done = None, 0
    for case, hint in cases:
        report = check_cases(name, guarded, [case], hint)
        done += report.cases_run
        report.cases_run = done
        if not report.passed:
            break
    if report.passed:
        report.message = f"all {done} cases match the reference."
    elif report.status == "failed":
        return _notes(report, kernel)
    report = compiler_check(report, kernel, KERNEL_ARGTYPES)
    if not report.passed:
        return _float_literal_note(report, kernel)
    return _compiler_rules(report, kernel)


def _float_literal_note(report: Report, kernel) -> Report:
    """Name a plain float literal given to a variable (``v = 0.0``) in a float64 report."""
    tree = source_tree(kernel)
    if "float64" not in report.message or tree is None:
        return report
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and len(node.targets) == 1 \
                and isinstance(node.targets[0], ast.Name) and isinstance(node.value, ast.Constant) \
                and isinstance(node.value.value, float):
            name, value = node.targets[0].id, node.value.value
            if f"{name} = float32(" not in report.message:
                report.message += (f"\nNote: `{name} = {value!r}` in your kernel is such a "
                                   f"literal: `{name}` is then a float64 wherever it is used. "
                                   f"Write `{name} = float32({value!r})`.")
            break
    return report


# ---------------------------------------------------------------------- the compiler's table


def compiled_rows(kernels: dict, targets=("sm_75", "sm_90")) -> list[dict]:
    """What the real compiler makes of the lab's kernels, one row per (kernel, target).

    Args:
        kernels: ``{label: (kernel, threads_per_block)}``; each takes ``(a, b, c, m, n, k)``
            as :data:`KERNEL_ARGTYPES` and computes a BM x BN tile of C a block.
        targets: keys of :data:`helpers.compiled.TARGETS`.

    Returns:
        Dicts ``label, target, threads, regs_per_thread, smem_per_block, stack_bytes, ffma,
        shared_loads, global_loads, barriers`` (static PTX counts), ``ffma_per_shared_load``
        (PTX ratio) and ``ffma_per_global_load``: the FMAs a thread does per step along K
        (BM * BN * BK / threads) over its PTX's global-load instructions (each tile is loaded
        in straight-line code).

    Raises:
        helpers.compiled.CompilerUnavailable, helpers.compiled.CompileError, ValueError.
    """
    jobs = [(label, kernel, threads, target) for label, (kernel, threads) in kernels.items()
            for target in targets]
    results = compiled.compile_many([compiled.Job(kernel, KERNEL_ARGTYPES, target)
                                     for _, kernel, _, target in jobs])
    rows = []
    for (label, _, threads, target), res in zip(jobs, results):
        if isinstance(res, compiled.CompileError):
            raise res
        mix = res.mix
        rows.append({"label": label, "target": target, "threads": threads,
                     "regs_per_thread": res.regs_per_thread,
                     "smem_per_block": res.smem_per_block, "stack_bytes": res.stack_bytes,
                     "ffma": mix.ffma, "shared_loads": mix.shared_loads,
                     "global_loads": mix.global_loads, "barriers": mix.barriers,
                     "ffma_per_shared_load": mix.ffma_per_shared_load,
                     "ffma_per_global_load": (BM * BN * BK / threads / mix.global_loads
                                              if mix.global_loads else None)})
    return rows
