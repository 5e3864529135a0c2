"""What went wrong in a kernel a learner edited: launch it on guarded buffers, turn an
exception inside it into one sentence naming its line, and name the pattern of wrong outputs.

Arrays are NumPy (host) arrays; outputs are poisoned with NaN, so an element no thread writes
shows. Used by :mod:`helpers.editable.cells`.
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import linecache
import os
import re
import textwrap
import traceback
import warnings
from collections.abc import Callable, Sequence

import numpy as np
from numba import cuda

__all__ = ["Output", "KernelFailed", "launch", "grid_variable", "explain_exception",
           "describe_positions", "Region", "Candidate", "diagnose_values"]


@dataclasses.dataclass(frozen=True)
class Output:
    """A kernel argument the launch allocates: float32 of ``shape``, filled with NaN."""

    shape: tuple[int, ...]


class KernelFailed(Exception):
    """The kernel raised, or wrote outside its output: ``str(exc)`` is the sentence to show."""


# --------------------------------------------------------------------------------- launching


def _guarded(a: np.ndarray, tail: np.ndarray):
    """(whole buffer, view): a device buffer holding ``a`` then ``tail``, and the view of its
    start shaped like ``a``."""
    whole = cuda.to_device(np.concatenate([a.ravel(), tail.astype(a.dtype)]))
    return whole, whole[:a.size].reshape(a.shape)


def launch(kernel, blocks: int, threads: int, args: Sequence, *, explain: Callable) -> list:
    """Run ``kernel[blocks, threads](*args)``; return the host copy of every :class:`Output`.

    Each array lives at the start of a buffer with ``blocks * threads + size`` more elements
    (random after an input, NaN after an output), so that a thread that runs past the end reads
    and writes memory the check owns, on a GPU as in the simulator.

    Raises:
        KernelFailed: the kernel raised (``explain(exc)`` gives the sentence), or a thread
            wrote past the end of an output.
    """
    rng = np.random.default_rng(0)
    device_args, outputs = [], []
    for a in args:
        if isinstance(a, Output):
            size = int(np.prod(a.shape))
            whole, view = _guarded(np.full(a.shape, np.nan, np.float32),
                                   np.full(blocks * threads + size, np.nan))
            outputs.append((whole, size, a.shape))
            device_args.append(view)
        elif isinstance(a, np.ndarray):
            device_args.append(_guarded(a, rng.standard_normal(blocks * threads + a.size))[1])
        else:
            device_args.append(a)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # NumbaPerformanceWarning: a small grid on a GPU
            kernel[blocks, threads](*device_args)
            cuda.synchronize()
    except Exception as exc:  # noqa: BLE001 - the learner's kernel, explained in one sentence
        raise KernelFailed(explain(exc)) from None
    hosts = []
    for whole, size, shape in outputs:
        host = whole.copy_to_host()
        stray = np.flatnonzero(~np.isnan(host[size:]))
        if stray.size:
            raise KernelFailed(f"{stray.size} thread(s) wrote past the end of an output of "
                               f"{size:,} elements (the first at flat index "
                               f"{size + int(stray[0]):,}): check the bounds test")
        hosts.append(host[:size].reshape(shape))
    return hosts


# ------------------------------------------------------------------------- kernel exceptions


def _source(kernel) -> tuple[str, int] | None:
    """(source text, first line number in its file) of a kernel, or None."""
    try:
        lines, first = inspect.getsourcelines(getattr(kernel, "py_func", kernel))
    except (OSError, TypeError):
        return None
    return "".join(lines), first


def grid_variable(kernel) -> str | None:
    """The name the kernel gives ``cuda.grid(1)`` (``i = cuda.grid(1)``), or None."""
    found = _source(kernel)
    if found is None:
        return None
    for node in ast.walk(ast.parse(textwrap.dedent(found[0]))):
        if isinstance(node, ast.Assign) and len(node.targets) == 1 \
                and isinstance(node.targets[0], ast.Name) and isinstance(node.value, ast.Call) \
                and getattr(node.value.func, "attr", None) == "grid":
            return node.targets[0].id
    return None


def _lets_through(kernel, name: str) -> str | None:
    """The bounds test of ``name`` that is off by one (``i > n`` or ``i <= n``), or None."""
    found = _source(kernel)
    if found is None:
        return None
    for node in ast.walk(ast.parse(textwrap.dedent(found[0]))):
        if isinstance(node, ast.Compare) and isinstance(node.left, ast.Name) \
                and node.left.id == name and isinstance(node.ops[0], (ast.Gt, ast.LtE)):
            return ast.unparse(node)
    return None


@dataclasses.dataclass
class Failure:
    """Where a kernel raised: the exception, the line (:func:`_where`), the failing
    expression's text, and the thread's local variables."""

    exc: BaseException
    line: str
    code: str
    expression: str
    local: dict


def _where(filename: str, lineno: int) -> str:
    """"line 25 of your cell" (a notebook cell's numbering, as Jupyter shows it and as
    :func:`helpers.compiled.fp64_advice` counts), or "line 25 of cell.py" for a file."""
    if "ipykernel" in filename or filename.startswith("<ipython-input"):
        return f"line {lineno} of your cell"
    return f"line {lineno} of {os.path.basename(filename)}"


def _failure(exc: BaseException, kernel) -> Failure | None:
    """The innermost frame of ``exc``'s traceback that runs ``kernel``'s code, or None."""
    func = getattr(kernel, "py_func", kernel)
    code = getattr(func, "__code__", None)
    tb, found = exc.__traceback__, None
    while tb is not None:
        if tb.tb_frame.f_code is code:
            found = tb
        tb = tb.tb_next
    if found is None:
        return None
    summary = traceback.extract_tb(found, limit=1)[0]
    raw = linecache.getline(summary.filename, summary.lineno).rstrip("\n")
    expression = raw.strip()
    if summary.colno is not None and summary.end_lineno == summary.lineno:
        expression = raw[summary.colno:summary.end_colno]
    return Failure(exc, _where(summary.filename, summary.lineno), raw.strip(), expression,
                   dict(found.tb_frame.f_globals, **found.tb_frame.f_locals))


_BOUNDS = re.compile(r"index (-?\d+) is out of bounds for axis (\d+) with size (\d+)")
_THREAD = re.compile(r"^tid=\[(\d+), \d+, \d+\] ctaid=\[(\d+), \d+, \d+\]:\s*")


@dataclasses.dataclass
class BadIndex:
    """An out-of-range subscript: ``array[...]`` with the ``axis``-th index ``index`` (source
    text) equal to ``value``, outside 0..size-1."""

    subscript: str
    array: str
    axis: int
    index: str
    value: int
    size: int


def _bad_index(failure: Failure) -> BadIndex | None:
    """The subscript of the failing expression that the IndexError is about, or None."""
    m = _BOUNDS.search(str(failure.exc))
    if m is None:
        return None
    value, axis, size = (int(g) for g in m.groups())
    try:
        tree = ast.parse(failure.expression.strip())
    except SyntaxError:
        try:
            tree = ast.parse(failure.code)
        except SyntaxError:
            return None
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name)):
            continue
        items = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
        shape = getattr(failure.local.get(node.value.id), "shape", None)
        if shape is None or axis >= min(len(items), len(shape)) or shape[axis] != size:
            continue
        try:
            got = eval(compile(ast.Expression(items[axis]), "<index>", "eval"),  # noqa: S307
                       {"__builtins__": {}}, failure.local)
        except Exception:  # noqa: BLE001 - an index we cannot recompute is not the one
            continue
        if got == value:
            return BadIndex(ast.unparse(node), node.value.id, axis, ast.unparse(items[axis]),
                            value, size)
    return None


def _first_line(message: str, kernel) -> str:
    """The line of a long error message (Numba's typing errors) that says what is wrong, with
    the kernel's line where the message names one."""
    message = re.sub(r"\x1b\[[0-9;]*m", "", message)  # Numba colours its messages
    lines = [ln.strip() for ln in message.splitlines() if ln.strip()]
    at = next((k for k, ln in enumerate(lines) if not ln.startswith(("Failed in", "During:",
                                                                       "File ", "- "))), 0)
    said = lines[at] if lines else ""
    if said.endswith(":") and at + 1 < len(lines):  # "... found for signature:" and the call
        said += " " + lines[at + 1].lstrip("> ")
    code = getattr(getattr(kernel, "py_func", kernel), "__code__", None)
    name = os.path.basename(code.co_filename) if code is not None else None
    where = re.search(rf'File "[^"]*{re.escape(name)}", line (\d+)', message) if name else None
    if where:
        said += f" ({_where(code.co_filename, int(where.group(1)))})"
    return said


def explain_exception(exc: BaseException, kernel, *, work: int, noun: str, threads_total: int,
                      layouts: dict[str, str], fallback: Callable[[BadIndex], str]) -> str:
    """One sentence for an exception raised by a launch of ``kernel``.

    Args:
        exc: the exception. kernel: the learner's kernel.
        work: how many threads have work (the output elements), ``noun`` what they are;
            threads_total: the grid's threads.
        layouts: each array's axes, e.g. ``{"x": "n, c, h, w"}``, to spot indices out of order.
        fallback: the advice for an index out of range that is neither past the last thread
            nor out of order.
    """
    failure = _failure(exc, kernel)
    message = _THREAD.sub("", str(exc)).strip()
    if failure is None:  # raised outside the kernel's code: compiling or launching it
        return f"your kernel did not run: {type(exc).__name__}: {_first_line(message, kernel)}"
    where = f"{type(exc).__name__} at {failure.line}"
    bad = _bad_index(failure) if isinstance(exc, IndexError) else None
    if bad is None:
        return f"{where} (`{failure.code}`): {message}"
    text = (f"{where}: {bad.subscript} with {bad.index} = {bad.value} out of range "
            f"0..{bad.size - 1}")
    var = grid_variable(kernel)
    i = failure.local.get(var) if var else None
    if isinstance(i, (int, np.integer)) and i >= work:
        off = _lets_through(kernel, var)
        test = f"`{off}` lets {var} = {i} through" if off else "the bounds test must stop it"
        return (f"{text}, in thread {var} = {i}: past the last of the {work:,} {noun} "
                f"({var} = 0..{work - 1}; the grid has {threads_total:,} threads); {test}: "
                f"check the bounds test")
    axes = [a.strip() for a in layouts.get(bad.array, "").split(",") if a.strip()]
    key = bad.index if bad.index in axes else bad.index[:1]
    if len(axes) > bad.axis and key in axes and key != axes[bad.axis]:
        return (f"{text}: {bad.index} stands where {bad.array}'s {axes[bad.axis]} index goes "
                f"({bad.array} is indexed [{', '.join(axes)}]): check the order of the indices")
    return f"{text}; {fallback(bad)}"


# ----------------------------------------------------------------------- which outputs, values


@dataclasses.dataclass
class Region:
    """A named set of output positions (a boolean mask), with the advice when exactly these
    are wrong or never written."""

    name: str
    mask: np.ndarray
    advice: str


def _indices(idx: np.ndarray, last: int, sym: str, noun: str) -> str:
    if list(idx) == [last]:
        return f"the last {noun} ({sym} = {last})"
    if list(idx) == [0]:
        return f"the first {noun} ({sym} = 0)"
    shown = ", ".join(str(int(v)) for v in idx[:6]) + (", ..." if idx.size > 6 else "")
    return f"{noun}s {sym} = {shown}"


def describe_positions(mask: np.ndarray, axes: Sequence[tuple[str, str, str]],
                       regions: Sequence[Region] = ()) -> tuple[str, str | None]:
    """Say where the True elements of ``mask`` are: (phrase, advice or None).

    A named :class:`Region` that is exactly the mask comes first; then one axis along which
    the mask varies ("the last row (p = 4) of every output map"); then a run in memory order;
    then the first position. ``axes`` gives (symbol, noun, container) per axis, e.g.
    ``("p", "row", "output map")``.
    """
    for region in regions:
        if np.array_equal(mask, region.mask):
            return region.name, region.advice
    total = mask.size
    if mask.all():
        return "all of them", None
    varying = [a for a in range(mask.ndim)
               if not (mask == mask.any(axis=a, keepdims=True)).all()]
    if len(varying) == 1 and mask.ndim > 1:
        a = varying[0]
        idx = np.flatnonzero(mask.any(axis=tuple(b for b in range(mask.ndim) if b != a)))
        sym, noun, container = axes[a]
        return f"{_indices(idx, mask.shape[a] - 1, sym, noun)} of every {container}", None
    flat = np.flatnonzero(mask.ravel())
    if flat[-1] - flat[0] + 1 == flat.size:
        if flat[-1] == total - 1:
            head = f"the last {flat.size:,}" if flat.size > 1 else "the last one"
        elif flat[0] == 0:
            head = f"the first {flat.size:,}"
        else:
            head = "a run"
        span = f"flat index {flat[0]:,}" if flat.size == 1 else \
            f"flat indices {flat[0]:,}..{flat[-1]:,}"
        return f"{head} in memory order, {span}", None
    first = tuple(int(v) for v in np.unravel_index(int(flat[0]), mask.shape))
    return f"the first at index {first}", None


@dataclasses.dataclass
class Candidate:
    """A plausible wrong result, float64 like the reference, and the sentence naming it
    ("they are the convolution without the padding: ...")."""

    values: np.ndarray
    sentence: str


def diagnose_values(got: np.ndarray, want: np.ndarray, *, noun: str, rtol: float,
                    axes: Sequence[tuple[str, str, str]],
                    unwritten_regions: Sequence[Region] = (),
                    wrong_regions: Sequence[Region] = (),
                    candidates: Sequence[Candidate] = (), unwritten_advice: str,
                    places_advice: str, wrong_advice: str) -> str | None:
    """None if ``got`` equals ``want`` within ``rtol`` (of max |want|), else the sentence.

    In order: elements never written (NaN), where (a region of ``unwritten_regions`` brings
    its own advice); a :class:`Candidate` the values equal; every value right but some in the
    wrong place; else how many are wrong, where (``wrong_regions``), and the worst one.
    """
    total = got.size
    unwritten = ~np.isfinite(got)
    if unwritten.any():
        where, advice = describe_positions(unwritten, axes, unwritten_regions)
        return (f"elements never written: {int(unwritten.sum()):,} of {total:,} {noun} "
                f"({where}); {advice or unwritten_advice}")
    scale = max(float(np.abs(want).max()), 1e-6)
    wrong = np.abs(got - want) > rtol * scale
    if not wrong.any():
        return None
    count = f"wrong values in {int(wrong.sum()):,} of {total:,} {noun}"
    for cand in candidates:
        if cand.values.shape == got.shape and \
                not (np.abs(got - cand.values) > rtol * scale).any():
            return f"{count}: {cand.sentence}"
    if np.allclose(np.sort(got.ravel()), np.sort(want.ravel()), rtol=0, atol=rtol * scale):
        return (f"every value is right, but {int(wrong.sum()):,} of the {total:,} {noun} are "
                f"in the wrong place; {places_advice}")
    where, advice = describe_positions(wrong, axes, wrong_regions)
    at = np.unravel_index(int(np.abs(got - want).argmax()), got.shape)
    idx = tuple(int(v) for v in at)
    return (f"{count} ({where}), the worst at index {idx}: expected {want[at]:.6g}, got "
            f"{got[at]:.6g}; {advice or wrong_advice}")
