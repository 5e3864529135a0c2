"""Checkers for Lab 1: first CUDA kernels (ReLU, SAXPY), the launch configuration, and the
grid-stride loop.

One checker per TODO of ``labs/lab1_first_kernels.ipynb``, each returning a
:class:`helpers.checks.Report`: :func:`check_relu` (``relu_kernel(x, out)``),
:func:`check_saxpy` (``saxpy_kernel(a, x, y, out)``), :func:`check_launch_config`
(``launch_config(n, threads_per_block) -> (blocks, threads)``) and
:func:`check_relu_grid_stride` (``relu_grid_stride_kernel(x, out)``). Arrays are 1-D float32 of
n elements; references are NumPy float64. The checkers launch the learner's ``@cuda.jit``
kernels themselves (on the GPU, or in the Numba CUDA simulator without one; see
:mod:`helpers.device.backend`), on guarded buffers (:func:`_launch_1d`).

Source: the CUDA thread hierarchy (grid, block, thread) of NVIDIA's CUDA C Programming Guide,
which Li et al., ICPP 2016, Section III-A, refer to (their reference [1]); the grid-stride loop
as in NVIDIA's "CUDA Pro Tip: Write Flexible Kernels with Grid-Stride Loops" (M. Harris, 2013).
"""

from __future__ import annotations

import ast
import inspect
import math
import textwrap
import warnings

import numpy as np
from numba import cuda  # noqa: E402

from helpers.checks import (
    Case,
    Report,
    WrongResult,
    check_cases,
    compiler_check,
    kernel_line,
    random_array,
)
from helpers.device import backend  # noqa: F401

__all__ = ["check_relu", "check_saxpy", "check_launch_config", "check_relu_grid_stride",
           "RELU_LAUNCHES", "GRID_STRIDE_LAUNCHES", "LAUNCH_CONFIG_CASES", "KERNEL_ARGTYPES"]

#: The lab's kernels' arguments as the checkers launch them (Numba type strings), for the
#: compiler check (:func:`helpers.checks.compiler_check`).
KERNEL_ARGTYPES: dict[str, tuple[str, ...]] = {
    "relu_kernel": ("float32[::1]", "float32[::1]"),
    "saxpy_kernel": ("float32", "float32[::1]", "float32[::1]", "float32[::1]"),
    "relu_grid_stride_kernel": ("float32[::1]", "float32[::1]"),
}

#: (n, threads_per_block) for the one-thread-per-element kernels, launched with
#: ``ceil(n / threads_per_block)`` blocks: a partial last block, a grid of one partial block,
#: an exact multiple (no spare threads), and larger blocks. Every case has positive and negative
#: inputs, so neither all zeros nor the input itself can pass; a check launches at most about
#: 900 threads, a fraction of a second in the simulator.
RELU_LAUNCHES: list[tuple[int, int]] = [(37, 32), (5, 32), (64, 32), (100, 64), (255, 128),
                                        (301, 32)]

#: (n, blocks, threads_per_block) for the grid-stride kernel: fewer threads than elements
#: (n a multiple of the grid, and not), more threads than elements, and one block.
GRID_STRIDE_LAUNCHES: list[tuple[int, int, int]] = [(50, 4, 32), (128, 2, 32), (300, 2, 32),
                                                     (129, 1, 64), (97, 3, 16), (7, 1, 32)]

#: (n, threads_per_block) for launch_config: exact multiples, remainders of 1, n smaller than a
#: block, and sizes far beyond what could be launched in the simulator (only the numbers are
#: checked).
LAUNCH_CONFIG_CASES: list[tuple[int, int]] = [(1000, 256), (1024, 256), (1, 32), (37, 32),
                                              (64, 32), (65, 64), (5, 1024), (257, 1),
                                              (1_000_001, 128), (2**24, 512)]

_BOUNDS_HINT = ("the grid is rounded up to whole blocks, so threads of the last block can have "
                "i >= n: they must do nothing (`if i < x.size:` around the body).")

#: The same failure in a grid-stride loop, whose `range` is the bounds check.
_LOOP_BOUNDS_HINT = ("a grid-stride loop stops before the end by itself: `for i in "
                     "range(cuda.grid(1), x.size, cuda.gridsize(1)):` never gives i >= x.size, "
                     "whatever the grid: stop at x.size, not x.size + 1.")


# ---------------------------------------------------------------------------- common plumbing


_Wrong = WrongResult


def _check(name: str, run, cases: list[Case], hint: str | None) -> Report:
    """:func:`helpers.checks.check_cases`; a :class:`WrongResult` from ``run`` fails its case."""
    return check_cases(name, run, cases, hint)


def _source_tree(fn) -> ast.AST | None:
    """The parsed source of ``fn`` (a kernel's Python function), or None if unavailable."""
    fn = getattr(fn, "py_func", fn)
    try:
        return ast.parse(textwrap.dedent(inspect.getsource(fn)))
    except (OSError, TypeError, SyntaxError):
        return None


def _raises_not_implemented(fn) -> bool:
    """True if the source of ``fn`` (a kernel's Python function) raises NotImplementedError."""
    tree = _source_tree(fn)
    for node in ast.walk(tree) if tree is not None else ():
        if isinstance(node, ast.Raise) and node.exc is not None:
            exc = node.exc.func if isinstance(node.exc, ast.Call) else node.exc
            if isinstance(exc, ast.Name) and exc.id == "NotImplementedError":
                return True
    return False


def _not_a_kernel(check: str, kernel, name: str) -> Report | None:
    """An error :class:`Report` if ``kernel`` is neither the lab's stub nor a CUDA kernel."""
    if _raises_not_implemented(kernel) or (hasattr(kernel, "py_func")
                                           and hasattr(type(kernel), "__getitem__")):
        return None
    return Report(check, False, f"{name} is not a CUDA kernel (got {type(kernel).__name__}): "
                  f"put @cuda.jit on the line above `def {name}(...)` and run that cell again.",
                  0, "error")


def _require_kernel(kernel) -> None:
    """Raise NotImplementedError for the lab's stub (its source still contains
    ``raise NotImplementedError``), without launching it: on a GPU a ``raise`` inside a kernel
    is not propagated to Python."""
    if _raises_not_implemented(kernel):
        raise NotImplementedError


def _steps_by_the_grid(kernel) -> bool:
    """False if the kernel's source (when available) never refers to ``gridsize`` or
    ``gridDim``: then its loop cannot step by the whole grid (a step of 1 or of
    ``cuda.blockDim.x`` gives the right values, each element computed by several threads)."""
    tree = _source_tree(kernel)
    if tree is None:
        return True
    names = {node.attr for node in ast.walk(tree) if isinstance(node, ast.Attribute)}
    names |= {node.id for node in ast.walk(tree) if isinstance(node, ast.Name)}
    return bool(names & {"gridsize", "gridDim"})


def _launch_1d(kernel, blocks: int, threads: int, scalars: tuple, inputs: list[np.ndarray],
               n: int, rng: np.random.Generator, hint: str = _BOUNDS_HINT) -> np.ndarray:
    """Launch ``kernel[blocks, threads](*scalars, *inputs, out)`` on guarded buffers.

    Each array is the first n elements of a buffer with ``blocks * threads + 1`` guard elements
    after it: random values after the inputs, NaN after the output. Returns the n elements of
    ``out`` (NaN where never written). Raises :class:`_Wrong` if a thread indexed past the end
    (simulator) or wrote into the output's guard (GPU). The guard also keeps a stray access
    inside memory the checker owns. The simulator runs a block's threads concurrently, so when
    several go past the end, which one the message names can change from run to run; every
    other part of a report is deterministic. ``hint`` goes with a failure past the end.
    """
    guard = blocks * threads + 1
    views = []
    for a in inputs:
        buf = np.concatenate([a, random_array(rng, (guard,), a.dtype)])
        views.append(cuda.to_device(buf)[:n])
    d_out = cuda.to_device(np.full(n + guard, np.nan, np.float32))
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # NumbaPerformanceWarning: tiny grids on a GPU
            kernel[blocks, threads](*scalars, *views, d_out[:n])
            cuda.synchronize()
    except IndexError as exc:  # the simulator checks every index
        if "out of bounds" not in str(exc):
            raise
        raise _Wrong(f"a thread indexed past the end of an array "
                     f"({exc}{kernel_line(exc, kernel)})", hint) from None
    out = d_out.copy_to_host()
    written = np.flatnonzero(~np.isnan(out[n:]))
    if written.size:
        raise _Wrong(f"{written.size} thread(s) wrote past the end of out, the first at index "
                     f"{n + int(written[0])} (out has {n} elements)", hint)
    return out[:n]


def _mixed_signs(rng: np.random.Generator, n: int) -> np.ndarray:
    """Random float32 data with at least one positive and one negative value (n >= 2)."""
    while True:
        x = random_array(rng, (n,))
        if (x > 0).any() and (x < 0).any():
            return x


def _grid_text(n: int, blocks: int, threads: int) -> str:
    total = blocks * threads
    if total >= n:
        spare = f"{total - n} of them past the end" if total > n else "exactly one per element"
    else:
        spare = f"fewer than the elements: each thread must handle up to {math.ceil(n / total)}"
    return (f"{n} elements, launched as {blocks} block{'s' * (blocks != 1)} x {threads} threads "
            f"= {total} threads ({spare})")


# ---------------------------------------------------------------------------------- checkers


def check_relu(kernel) -> Report:
    """Check the learner's ReLU kernel, one thread per element.

    Args:
        kernel: a ``@cuda.jit`` kernel ``relu_kernel(x, out)``; x and out are 1-D float32
            arrays of n elements; it must set ``out[i] = max(x[i], 0)`` for every i.

    Returns:
        A :class:`~helpers.checks.Report`. Each case (:data:`RELU_LAUNCHES`) launches
        ``ceil(n / threads_per_block)`` blocks; fails on a missing or off-by-one bounds check,
        an unwritten element, or a wrong value (with the worst element). Never raises for
        anything the kernel does.
    """
    rng = np.random.default_rng(1)
    cases = []
    for n, tpb in RELU_LAUNCHES:
        x = _mixed_signs(rng, n)
        cases.append(Case((x, math.ceil(n / tpb), tpb), np.maximum(x.astype(np.float64), 0),
                          f"x of {_grid_text(n, math.ceil(n / tpb), tpb)}", rtol=1e-6))

    def run(x, blocks, threads):
        _require_kernel(kernel)
        return _launch_1d(kernel, blocks, threads, (), [x], x.size, rng)

    name, hint = "Lab 1: ReLU kernel", (
            "each thread computes i = cuda.grid(1) and, if i < x.size, writes "
            "out[i] = x[i] if x[i] > 0 else 0.")
    not_a_kernel = _not_a_kernel(name, kernel, "relu_kernel")
    if not_a_kernel is not None:
        return not_a_kernel
    return compiler_check(_check(name, run, cases, hint), kernel, KERNEL_ARGTYPES["relu_kernel"])


def check_saxpy(kernel) -> Report:
    """Check the learner's SAXPY kernel, one thread per element.

    Args:
        kernel: a ``@cuda.jit`` kernel ``saxpy_kernel(a, x, y, out)``; a is a float32 scalar,
            x, y and out 1-D float32 arrays of n elements; it must set
            ``out[i] = a * x[i] + y[i]``.

    Returns:
        A :class:`~helpers.checks.Report` (cases as :func:`check_relu`, with a = 2.5, -0.75,
        3 ... never 0 or 1, so ``x``, ``y``, ``x + y`` and ``a * x`` all fail). Never raises
        for anything the kernel does.
    """
    rng = np.random.default_rng(2)
    scalars = [2.5, -0.75, 3.0, -1.5, 0.5, 1.25]
    cases = []
    for (n, tpb), a in zip(RELU_LAUNCHES, scalars):
        x, y = random_array(rng, (n,)), random_array(rng, (n,))
        expected = a * x.astype(np.float64) + y.astype(np.float64)
        cases.append(Case((np.float32(a), x, y, math.ceil(n / tpb), tpb), expected,
                          f"a = {a}, x and y of {_grid_text(n, math.ceil(n / tpb), tpb)}",
                          rtol=1e-5))

    def run(a, x, y, blocks, threads):
        _require_kernel(kernel)
        return _launch_1d(kernel, blocks, threads, (a,), [x, y], x.size, rng)

    name, hint = "Lab 1: SAXPY kernel", (
            "out[i] = a * x[i] + y[i] for every i < x.size, with i = cuda.grid(1).")
    not_a_kernel = _not_a_kernel(name, kernel, "saxpy_kernel")
    if not_a_kernel is not None:
        return not_a_kernel
    return compiler_check(_check(name, run, cases, hint), kernel, KERNEL_ARGTYPES["saxpy_kernel"])


def check_launch_config(fn) -> Report:
    """Check the learner's ``launch_config(n, threads_per_block) -> (blocks, threads)``.

    Args:
        fn: the learner's function. For n >= 1 elements and 1 <= threads_per_block <= 1024 it
            must return two ints: ``threads == threads_per_block`` and the smallest number of
            blocks that gives every element a thread, ``blocks = ceil(n / threads_per_block)``.

    Returns:
        A :class:`~helpers.checks.Report`; a failure says which elements would get no thread
        (too few blocks) or how many threads would have nothing to do (a whole spare block),
        for the first failing case of :data:`LAUNCH_CONFIG_CASES`. Never raises for anything
        ``fn`` does.
    """
    cases = [Case((n, tpb), np.array([math.ceil(n / tpb), tpb], np.float64),
                  f"n = {n:,}, threads_per_block = {tpb}") for n, tpb in LAUNCH_CONFIG_CASES]

    def run(n, tpb):
        result = fn(n, tpb)
        if not isinstance(result, (tuple, list)) or len(result) != 2:
            raise _Wrong(f"your function returned {result!r}; expected a pair (blocks, threads)")
        blocks, threads = result
        for label, v in (("blocks", blocks), ("threads", threads)):
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
                raise _Wrong(f"{label} is {v!r} ({type(v).__name__}); a launch needs an int",
                             "use integer division: `//`, or int(math.ceil(...)).")
        if threads != tpb:
            raise _Wrong(f"you returned threads = {threads}; expected the requested "
                         f"threads_per_block, {tpb}", "return (blocks, threads_per_block).")
        if blocks < 1 or blocks * threads < n:
            covered = max(blocks, 0) * threads
            raise _Wrong(f"{blocks} blocks x {threads} threads = {covered:,} threads: elements "
                         f"{covered:,} to {n - 1:,} would never be touched",
                         "round the division up: blocks = ceil(n / threads_per_block), in "
                         "integers (n + threads_per_block - 1) // threads_per_block.")
        if (blocks - 1) * threads >= n:
            spare = blocks * threads - n
            raise _Wrong(f"{blocks} blocks x {threads} threads = {blocks * threads:,} threads "
                         f"for {n:,} elements: {spare:,} threads would have nothing to do, at "
                         f"least one whole block", "use the fewest blocks that cover n: "
                         "ceil(n / threads_per_block), not n // threads_per_block + 1.")
        return np.array([blocks, threads], np.float64)

    return _check("Lab 1: launch configuration", run, cases, None)


def check_relu_grid_stride(kernel) -> Report:
    """Check the learner's grid-stride ReLU kernel on grids smaller and larger than n.

    Args:
        kernel: a ``@cuda.jit`` kernel ``relu_grid_stride_kernel(x, out)`` (1-D float32, n
            elements) that sets ``out[i] = max(x[i], 0)`` for every i whatever the grid: each
            thread handles ``i = start, start + stride, ...`` with ``start = cuda.grid(1)`` and
            ``stride = cuda.gridsize(1)``.

    Returns:
        A :class:`~helpers.checks.Report` over :data:`GRID_STRIDE_LAUNCHES`; a kernel that
        covers only ``blocks * threads`` elements leaves the rest unwritten (reported as NaN).
        A kernel whose source never refers to ``cuda.gridsize`` or ``cuda.gridDim`` fails even
        with the right values: its loop steps by less than the grid (1, or
        ``cuda.blockDim.x``), so threads redo each other's elements. Never raises for anything
        the kernel does.
    """
    rng = np.random.default_rng(3)
    cases = []
    for n, blocks, tpb in GRID_STRIDE_LAUNCHES:
        x = _mixed_signs(rng, n)
        cases.append(Case((x, blocks, tpb), np.maximum(x.astype(np.float64), 0),
                          f"x of {_grid_text(n, blocks, tpb)}", rtol=1e-6))

    def run(x, blocks, threads):
        _require_kernel(kernel)
        return _launch_1d(kernel, blocks, threads, (), [x], x.size, rng, _LOOP_BOUNDS_HINT)

    name, hint = "Lab 1: grid-stride ReLU kernel", (
            "loop `for i in range(cuda.grid(1), x.size, cuda.gridsize(1)):` so that a "
            "grid of any size covers all n elements.")
    not_a_kernel = _not_a_kernel(name, kernel, "relu_grid_stride_kernel")
    if not_a_kernel is not None:
        return not_a_kernel
    report = _check(name, run, cases, hint)
    if report.passed and not _steps_by_the_grid(kernel):
        return Report(name, False, "your kernel gives the right values, but its loop does not "
                      "step by the whole grid: nothing in it refers to cuda.gridsize (or "
                      "cuda.gridDim). With a step of 1 or of cuda.blockDim.x, threads redo each "
                      "other's elements and each walks most of the array. Step by "
                      "cuda.gridsize(1): `for i in range(cuda.grid(1), x.size, "
                      "cuda.gridsize(1)):`.", report.cases_run, "failed")
    return compiler_check(report, kernel, KERNEL_ARGTYPES["relu_grid_stride_kernel"])
