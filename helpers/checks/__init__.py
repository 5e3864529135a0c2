"""Lab checkers: run a learner's function on many cases and say exactly what is wrong.

Every checker in ``helpers.checks.labN`` (a module, or a package where a lab needs several) is
built on :func:`check_cases`: it calls the learner's function on random cases (odd sizes, batch
1, stride > 1, sizes that are not tile multiples), compares with a reference computed
independently (NumPy in float64, or torch), and returns a :class:`Report`: passed, or the first
failing case described so that it can be fixed.

A checker never passes a stub, a function that returns zeros or its input, or one that is right
only on sizes that are multiples of a tile: the cases are random non-zero data with awkward
sizes, and every case's reference is checked to differ from those wrong answers.
"""

from __future__ import annotations

import dataclasses
import html
import importlib
import inspect
import traceback
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np

from helpers import compiled

__all__ = ["Report", "Case", "WrongResult", "check_cases", "compare", "random_array",
           "kernel_line", "compiler_check", "COMPILER_TARGET"]

#: The GPU a kernel that passed in the simulator is compiled for: Colab's T4.
COMPILER_TARGET = "sm_75"


@dataclasses.dataclass(repr=False)
class Report:
    """The outcome of one check.

    Attributes:
        name: what was checked (e.g. ``"Lab 2: tiled GEMM"``).
        passed: True if every case matched.
        message: one paragraph a learner can act on.
        cases_run: cases tried before the verdict.
        status: ``"passed"``, ``"failed"``, ``"not implemented"`` or ``"error"``.
    """

    name: str
    passed: bool
    message: str
    cases_run: int = 0
    status: str = "failed"

    def __bool__(self) -> bool:
        return self.passed

    def __str__(self) -> str:
        mark = {"passed": "PASSED", "not implemented": "NOT IMPLEMENTED YET"}.get(self.status,
                                                                                  "FAILED")
        return f"{self.name}: {mark}. {self.message}"

    __repr__ = __str__  # what a notebook shows where HTML is not rendered

    def _repr_html_(self) -> str:
        colour = {"passed": "#009E73", "not implemented": "#666666"}.get(self.status, "#D55E00")
        mark = {"passed": "passed", "not implemented": "not implemented yet"}.get(self.status,
                                                                                  "failed")
        return (f"<div style='border-left:4px solid {colour};padding:0.4em 0.8em'>"
                f"<b>{html.escape(self.name)}: {mark}</b><br>"
                f"{html.escape(self.message).replace(chr(10), '<br>')}</div>")


class WrongResult(Exception):
    """Raised by a checker's runner (not by the learner's code) for a wrong result that
    :func:`compare` cannot describe: a write past the end of an array, a bad launch
    configuration. :func:`check_cases` reports it as a failure of the case, with ``hint``."""

    def __init__(self, message: str, hint: str | None = None):
        super().__init__(message)
        self.hint = hint


@dataclasses.dataclass
class Case:
    """One call: positional ``args`` for the learner's function, the ``expected`` result, a
    human ``description`` (shapes, stride...), and the tolerance (relative to the largest
    expected magnitude)."""

    args: tuple
    expected: Any
    description: str
    rtol: float = 1e-4
    kwargs: dict = dataclasses.field(default_factory=dict)


def _as_array(value) -> np.ndarray | None:
    try:
        import torch

        if isinstance(value, torch.Tensor):
            return value.detach().cpu().resolve_conj().resolve_neg().numpy()
    except ImportError:  # pragma: no cover - torch is a dependency
        pass
    if hasattr(value, "copy_to_host"):  # a Numba device array
        return value.copy_to_host()
    if isinstance(value, np.ndarray):
        return value
    if isinstance(value, (list, tuple, int, float, complex, np.number)):
        return np.asarray(value)
    return None


def compare(actual, expected, rtol: float = 1e-4) -> str | None:
    """None if ``actual`` matches ``expected`` within ``rtol`` (relative to max|expected|, at
    least 1e-6), else a sentence saying what differs: type, shape, unwritten (NaN) elements,
    imaginary parts (a complex result is compared by its real part only where its imaginary
    part is within the tolerance), or the largest error with its index and both values."""
    got = _as_array(actual)
    exp = np.asarray(expected, dtype=np.float64)
    if got is None:
        return (f"your function returned {type(actual).__name__}, expected an array of shape "
                f"{exp.shape}")
    if got.shape != exp.shape:
        return f"your result has shape {got.shape}, expected {exp.shape}"
    if got.dtype.kind not in "biufc":
        nones = [i for i, v in enumerate(got.flat) if v is None]
        if nones:
            idx = tuple(int(i) for i in np.unravel_index(nones[0], got.shape))
            return (f"{len(nones)} of {got.size} elements are None, first at index {idx}: "
                    f"expected numbers")
        try:  # a tuple of numbers of mixed types (an object array) is fine, text is not
            if got.dtype.kind != "O" or any(isinstance(v, (str, bytes)) for v in got.flat):
                raise TypeError
            got = got.astype(np.complex128 if any(isinstance(v, complex) for v in got.flat)
                             else np.float64)
        except (TypeError, ValueError):
            kinds = sorted({type(v).__name__ for v in got.flat})
            return (f"your result holds {', '.join(kinds)} values, expected numbers (an array "
                    f"of shape {exp.shape})")
    bad = ~np.isfinite(got)
    if bad.any():
        idx = tuple(int(i) for i in np.argwhere(bad)[0])
        return (f"{int(bad.sum())} of {got.size} elements are NaN or infinite, first at index "
                f"{idx}: were they ever written (or did you divide by zero)?")
    scale = max(float(np.abs(exp).max()) if exp.size else 0.0, 1e-6)
    if np.iscomplexobj(got):
        imag = np.abs(got.imag)
        if imag.size and imag.max() > rtol * scale:
            idx = tuple(int(i) for i in np.unravel_index(int(imag.argmax()), imag.shape))
            return (f"your result is complex, with an imaginary part up to {imag.max():.3g} "
                    f"(at index {idx}), expected real values: is a spectrum left untransformed, "
                    f"or an inverse transform of the wrong kind or size?")
        got = got.real
    got = got.astype(np.float64)
    err = np.abs(got - exp)
    if err.size and err.max() > rtol * scale:
        idx = tuple(int(i) for i in np.unravel_index(int(err.argmax()), err.shape))
        n_bad = int((err > rtol * scale).sum())
        return (f"max error {err.max():.3g} (relative {err.max() / scale:.2g}, allowed "
                f"{rtol:g}) at index {idx}: expected {exp[idx]:.6g}, got {got[idx]:.6g}; "
                f"{n_bad} of {err.size} elements are off")
    return None


def _learner_frame(exc: BaseException) -> traceback.FrameSummary:
    """The innermost frame of the traceback in the learner's code: not in an installed library
    (numba, torch, NumPy) nor in :mod:`helpers`; the innermost frame if there is none."""
    import os

    frames = traceback.extract_tb(exc.__traceback__)
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    for frame in reversed(frames):
        name = frame.filename
        if "site-packages" not in name and not os.path.abspath(name).startswith(here) \
                and not name.startswith("<frozen"):
            return frame
    return frames[-1]


def check_cases(name: str, fn: Callable, cases: Iterable[Case],
                hint: str | None = None) -> Report:
    """Run ``fn`` on every case and report the first failure.

    The report says:

    * ``passed``: every case matched within tolerance;
    * otherwise the **first failing case**: its description (shapes, stride, padding...), the
      maximum error and where it is, and the expected vs actual value at that element
      (:func:`compare`); an output of the wrong shape or type, or with elements never written
      (NaN), is named as such;
    * a stub that raises ``NotImplementedError`` reports "not implemented yet" (not a
      traceback); any other exception in the learner's code is reported readably with its last
      line.

    Args:
        name: the check's title. fn: the learner's function. cases: :class:`Case` objects.
        hint: a sentence added to a failure's message (a common cause).

    Returns:
        A :class:`Report`; never raises for anything the learner's code does.
    """
    if not callable(fn):
        return Report(name, False, f"expected a function, got {type(fn).__name__}", 0, "error")
    n = 0
    for case in cases:
        n += 1
        try:
            actual = fn(*case.args, **case.kwargs)
        except WrongResult as exc:
            message = f"on {case.description}: {exc}"
            message += "" if message.endswith(("?", ".")) else "."
            if exc.hint or hint:
                message += f"\nHint: {exc.hint or hint}"
            return Report(name, False, message, n, "failed")
        except NotImplementedError:
            return Report(name, False, "Replace the `raise NotImplementedError` in the TODO "
                          "cell with your code, run that cell, then run this check again.", n - 1,
                          "not implemented")
        except Exception as exc:  # noqa: BLE001 - the learner's code, reported readably
            where = _learner_frame(exc)
            return Report(name, False, f"on {case.description}: your code raised "
                          f"{type(exc).__name__}: {exc} (line {where.lineno}: "
                          f"{(where.line or '').strip()})", n, "error")
        problem = compare(actual, case.expected, case.rtol)
        if problem:
            message = f"on {case.description}: {problem}"
            message += "" if message.endswith(("?", ".")) else "."
            if hint:
                message += f"\nHint: {hint}"
            return Report(name, False, message, n, "failed")
    if n == 0:
        return Report(name, False, "no cases were run", 0, "error")
    return Report(name, True, f"all {n} cases match the reference.", n, "passed")


def random_array(rng: np.random.Generator, shape: Sequence[int], dtype=np.float32) -> np.ndarray:
    """Standard-normal data of ``shape`` (never zeros, so unwritten or zeroed outputs show)."""
    return rng.standard_normal(tuple(shape)).astype(dtype)


def kernel_line(exc: BaseException, kernel) -> str:
    """``"; line N: code"`` for the deepest frame of ``exc`` inside ``kernel``'s source (a Numba
    CUDA kernel or a plain function), or "": where a learner's kernel failed, for a report."""
    code = getattr(getattr(kernel, "py_func", kernel), "__code__", None)
    frames = [f for f in traceback.extract_tb(exc.__traceback__)
              if code is not None and f.filename == code.co_filename]
    if not frames:
        return ""
    return f"; line {frames[-1].lineno}: {(frames[-1].line or '').strip()}"


def compiler_check(report: Report, kernel, argtypes: Sequence[str],
                   target: str = COMPILER_TARGET) -> Report:
    """Compile a kernel that passed its cases for a real GPU (:mod:`helpers.compiled`) and
    fail the report if the compiler rejects it or it would compute in float64.

    The simulator runs Python, so it accepts what a GPU cannot compile (a shared array sized
    at run time) and computes float64 where a GPU would spend a float64 unit. A passed
    ``report`` becomes failed with the line and the fix; one that did not pass is returned as
    it is. Where no compiler can be loaded the report stays passed, with a note saying so.

    Args:
        report: the :class:`Report` of the kernel's cases. kernel: the learner's kernel.
        argtypes: its arguments as the checker launches them (Numba type strings).
        target: a key of :data:`helpers.compiled.TARGETS`.
    """
    if not report.passed:
        return report
    try:
        result = compiled.compile_kernel(kernel, argtypes, target)
    except compiled.CompilerUnavailable as exc:
        report.message += f" (Not compiled for a GPU here: {exc}.)"
        return report
    except compiled.CompileError as exc:
        where = f" (line {exc.line}: {exc.source})" if exc.line and exc.source else ""
        return Report(report.name, False, f"your kernel passes in the simulator, but the CUDA "
                      f"compiler rejects it for a GPU{where}: {exc.message}"
                      + (f"\nHint: {exc.hint}" if exc.hint else ""), report.cases_run,
                      "failed")
    except ValueError as exc:  # a kernel the compiler cannot be handed (no source, a closure)
        report.message += f" (Not compiled for a GPU: {exc}.)"
        return report
    if result.fp64:
        try:
            source = inspect.getsource(getattr(kernel, "py_func", kernel))
        except (OSError, TypeError):
            source = None
        return Report(report.name, False, "your kernel gives the right values, but "
                      + compiled.fp64_advice(result, source), report.cases_run, "failed")
    return report


#: Checker modules of the earlier layout and where they are now (``from helpers.checks import
#: lab7_data`` still works, so that a learner's copy of an older lab keeps running).
MOVED = {"lab6_transpose": "lab6.transpose", "lab7_data": "lab7.data", "lab7_model": "lab7.model",
         "lab9_sim": "lab9.sim", "lab9_real": "lab9.real"}


def __getattr__(name: str):
    if name in MOVED:
        return importlib.import_module(f"{__name__}.{MOVED[name]}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
