"""Checker for Lab 5: pick the fastest convolution strategy that fits a memory budget.

The learner writes ``pick(rows, budget_bytes) -> str | None``, the decision at the heart of an
autotuner such as cuDNN's benchmark mode (``torch.backends.cudnn.benchmark = True``): time
every algorithm on the layer, then use the fastest whose workspace fits the memory the
framework allows. ``rows`` are dicts shaped like those of
:func:`helpers.experiments.sweep.measure`; the keys ``pick`` reads are ``strategy`` (str),
``median_ms`` (float, or None when nothing was timed), ``workspace_bytes`` (int bytes, or None
when not known in advance) and ``status`` (``"ok"``, or the reason the strategy was not
measured or failed). :func:`check_pick` applies :data:`RULES` (also in the lab) to the cases of
:func:`pick_cases`.

Source: cuDNN's ``cudnnFindConvolutionForwardAlgorithm`` (times every algorithm and reports
each one's workspace) behind ``torch.backends.cudnn.benchmark``; Li et al., ICPP 2016,
Sections IV-B, V-B and VI (no implementation wins everywhere: speed is traded against memory).
"""

from __future__ import annotations

import copy
import dataclasses
import traceback

import numpy as np

from helpers.checks import Report

__all__ = ["RULES", "PickCase", "pick_cases", "reference_pick", "check_pick"]

MIB = 2**20

#: The rules :func:`check_pick` applies, word for word as the lab states them.
RULES = """\
1. A row is a candidate only if its ``status`` is exactly ``"ok"``, it has a ``median_ms``,
   and its ``workspace_bytes`` is known and at most ``budget_bytes`` (equal fits). A row with
   ``workspace_bytes`` None (torch's own convolution: its workspace is the library's choice)
   cannot be shown to fit, so it is not a candidate.
2. The fastest candidate (smallest ``median_ms``) wins; return its ``strategy``.
3. Ties in ``median_ms``: the smaller ``workspace_bytes`` wins; still tied: the row that comes
   first in ``rows``.
4. No candidate (nothing fits, nothing measured, or no rows): return **None**. We chose None
   over raising ``ValueError`` because "no strategy fits" is an answer an autotuner must act
   on (fall back to a smaller batch, or to the direct strategy with no workspace), not a
   mistake in the call; the caller tests ``if choice is None``.
5. ``rows`` must not be modified (sort a copy)."""


@dataclasses.dataclass
class PickCase:
    """One call of ``pick``: a title, the rows, the budget in bytes and the right answer."""

    title: str
    rows: list[dict]
    budget_bytes: int
    expected: str | None


def _row(strategy: str, median_ms: float | None, workspace_bytes: int | None,
         status: str = "ok") -> dict:
    family = {"direct": "direct", "im2col": "unrolling", "fft": "fft",
              "reference": "library"}[strategy.split("-")[0]]
    return {"strategy": strategy, "family": family, "device": "synthetic", "pass": "forward",
            "median_ms": median_ms, "iqr_ms": None if median_ms is None else 0.01,
            "gflop_per_s": None, "flops": 10**9, "workspace_bytes": workspace_bytes,
            "peak_bytes": None, "status": status}


def reference_pick(rows: list[dict], budget_bytes: int) -> str | None:
    """The rules above, written plainly: the reference :func:`check_pick` compares with.

    Args:
        rows: dicts with ``strategy``, ``median_ms``, ``workspace_bytes``, ``status``.
        budget_bytes: the workspace allowed, in bytes.

    Returns:
        The winning row's ``strategy``, or None when no row is a candidate.
    """
    best, best_key = None, None
    for i, row in enumerate(rows):
        ws, ms = row.get("workspace_bytes"), row.get("median_ms")
        if row.get("status") != "ok" or ms is None or ws is None or ws > budget_bytes:
            continue
        key = (ms, ws, i)
        if best_key is None or key < best_key:
            best, best_key = row["strategy"], key
    return best


def _shuffled_case() -> PickCase:
    rng = np.random.default_rng(5)
    names = ["direct-naive", "direct-tiled", "im2col-gemm", "im2col-tiled", "fft"]
    rows = []
    for layer in range(3):      # three measurements of each strategy, as from three runs
        for name in names:
            ws = 0 if name.startswith("direct") else int(rng.integers(1, 64)) * MIB
            ms = round(float(rng.uniform(0.5, 9.0)), 3)
            status = "ok" if rng.random() > 0.25 else "refused: over the 2 s time budget"
            rows.append(_row(name, ms if status == "ok" else None, ws, status))
    order = rng.permutation(len(rows))
    rows = [rows[i] for i in order]
    budget = 24 * MIB
    # the overall fastest measured row must be over the budget, or the case tests nothing new
    ok = [r for r in rows if r["status"] == "ok"]
    fastest = min(ok, key=lambda r: r["median_ms"])
    fastest["workspace_bytes"] = 48 * MIB
    if fastest["strategy"].startswith("direct"):
        fastest["strategy"] = "fft"
    return PickCase("15 rows in no particular order, some refused, the fastest over budget",
                    rows, budget, reference_pick(rows, budget))


def pick_cases() -> list[PickCase]:
    """The checked cases, in order (deterministic synthetic rows, no measurement).

    Each case is built to catch one mistake: the budget ignored, the slowest picked, a refused
    or failed row picked, the budget compared with ``<`` instead of ``<=``, the first fitting
    row taken (right only when the rows happen to be sorted), ties broken the wrong way.
    """
    cases = [
        PickCase("three strategies, all within the budget", [
            _row("direct-naive", 5.0, 0), _row("fft", 2.0, 9 * MIB),
            _row("im2col-gemm", 1.2, 4 * MIB)], 64 * MIB, "im2col-gemm"),
        PickCase("the fastest needs more workspace than the budget", [
            _row("im2col-gemm", 1.5, 24 * MIB), _row("fft", 0.8, 96 * MIB),
            _row("direct-naive", 6.0, 0)], 32 * MIB, "im2col-gemm"),
        PickCase("a budget exactly equal to a workspace (it fits)", [
            _row("direct-naive", 3.0, 0), _row("im2col-gemm", 1.0, 8 * MIB)],
            8 * MIB, "im2col-gemm"),
        PickCase("refused rows: nothing timed (median_ms None)", [
            _row("direct-tiled", None, 0, "direct-tiled has no cpu implementation (it runs "
                 "on cuda)"),
            _row("fft", None, 2 * MIB, "refused: about 3.1 GFLOP at an assumed 8 GFLOP/s is "
                 "about 0.4 s a call, over the 0.2 s budget"),
            _row("direct-naive", 4.0, 0), _row("im2col-gemm", 2.5, MIB)],
            64 * MIB, "im2col-gemm"),
        PickCase("the fastest row ran but failed: its time does not count", [
            _row("im2col-gemm", 0.9, MIB), _row("fft", 0.4, MIB, "failed: wrong result, max "
                                                  "relative error 0.3"),
            _row("direct-naive", 2.0, 0)], 64 * MIB, "im2col-gemm"),
        PickCase("nothing fits: the answer is None", [
            _row("fft", 1.0, 64 * MIB), _row("im2col-gemm", 2.0, 16 * MIB),
            _row("direct-naive", None, 0, "refused: over the 2 s time budget")],
            MIB, None),
        PickCase("torch's own convolution: workspace unknown (None), not a candidate", [
            _row("reference", 0.5, None), _row("im2col-gemm", 1.0, 2 * MIB),
            _row("direct-naive", 4.0, 0)], 64 * MIB, "im2col-gemm"),
        PickCase("a tie in time: the smaller workspace wins", [
            _row("im2col-gemm", 2.0, 8 * MIB), _row("fft", 2.0, 4 * MIB),
            _row("direct-naive", 3.0, 0)], 64 * MIB, "fft"),
        PickCase("a tie in time and workspace: the first row wins", [
            _row("im2col-gemm", 1.0, 2 * MIB), _row("direct-naive", 1.5, 0),
            _row("direct-tiled", 1.5, 0)], 0, "direct-naive"),
        _shuffled_case(),
        PickCase("no rows at all", [], 64 * MIB, None),
    ]
    for case in cases:
        assert reference_pick(case.rows, case.budget_bytes) == case.expected, case.title
    return cases


def _table(rows: list[dict], budget_bytes: int) -> str:
    lines = [f"budget {budget_bytes / MIB:g} MiB; rows (strategy, median_ms, workspace MiB, "
             f"status):"]
    for r in rows:
        ws = "None" if r["workspace_bytes"] is None else f"{r['workspace_bytes'] / MIB:g}"
        lines.append(f"  {r['strategy']:<13} {r['median_ms']!s:>6}  {ws:>5}  {r['status']}")
    return "\n".join(lines)


def check_pick(fn) -> Report:
    """Check ``fn(rows, budget_bytes) -> str | None`` against :data:`RULES`.

    Args:
        fn: the learner's ``pick``. ``rows``: a list of dicts (a fresh copy per case);
            ``budget_bytes``: int, bytes.

    Returns:
        A :class:`Report`: passed if every case gives the expected strategy name (or None);
        otherwise the first failing case with its rows, the budget, what was expected and
        what came back; "not implemented yet" for a stub; an exception in ``fn`` or a
        modified ``rows`` is reported as such. Never raises for what ``fn`` does.
    """
    name = "Lab 5, TODO 1: pick the fastest strategy that fits"
    if not callable(fn):
        return Report(name, False, f"expected a function, got {type(fn).__name__}", 0, "error")
    cases = pick_cases()
    for n, case in enumerate(cases, start=1):
        rows = copy.deepcopy(case.rows)
        try:
            got = fn(rows, case.budget_bytes)
        except NotImplementedError:
            return Report(name, False, "Replace the `raise NotImplementedError` in the TODO "
                          "cell with your code, run that cell, then run this check again.",
                          n - 1, "not implemented")
        except Exception as exc:  # noqa: BLE001 - the learner's code, reported readably
            where = traceback.extract_tb(exc.__traceback__)[-1]
            return Report(name, False, f"on case '{case.title}': your code raised "
                          f"{type(exc).__name__}: {exc} (line {where.lineno}: "
                          f"{(where.line or '').strip()})\n{_table(case.rows, case.budget_bytes)}",
                          n, "error")
        problem = None
        if got is not None and not isinstance(got, str):
            problem = (f"your function returned {type(got).__name__}; return the winning row's "
                       f"'strategy' (a str), or None when no row is a candidate")
        elif got != case.expected:
            problem = f"expected {case.expected!r}, got {got!r}"
        elif rows != case.rows:
            problem = ("the answer is right but `rows` was modified (sorted in place?): sort a "
                       "copy, sorted(rows, key=...), so the caller's rows keep their order")
        if problem:
            return Report(name, False, f"on case '{case.title}': {problem}.\n"
                          f"{_table(case.rows, case.budget_bytes)}\nHint: candidates are rows "
                          f"with status == 'ok', a median_ms, and a known workspace_bytes <= "
                          f"the budget; the smallest median_ms wins, ties go to the smaller "
                          f"workspace, then to the earlier row; no candidate gives None.",
                          n, "failed")
    return Report(name, True, f"all {len(cases)} cases give the expected choice.", len(cases),
                  "passed")
