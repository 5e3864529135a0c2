"""Checker for Lab 5: pick the fastest convolution strategy that fits a memory budget.

The learner writes ``pick(rows, budget_bytes) -> str | None``: time every strategy on the
layer, use the fastest whose memory fits (cuDNN's benchmark mode decides so for its
workspace). ``rows`` are dicts like :func:`helpers.experiments.sweep.measure`'s plus
``tensor_bytes`` (x, w and y in bytes, :func:`tensor_bytes`); ``pick`` reads ``strategy``,
``median_ms`` (None: not timed), ``workspace_bytes`` (None: unknown), ``tensor_bytes`` and
``status``. :func:`check_pick` applies :data:`RULES` (also in the lab) to :func:`pick_cases`;
:func:`table1_rows` gives the lab its rows for the study's Table I layers at batch 128.

Source: cuDNN's ``cudnnFindConvolutionForwardAlgorithm`` behind
``torch.backends.cudnn.benchmark``; Li et al., ICPP 2016, Table I, Sections IV-B and V-B
(Figures 3 and 5: the fastest implementation, fbfft, needed the most memory).
"""

from __future__ import annotations

import copy
import dataclasses
import traceback

import numpy as np

from helpers import results
from helpers.checks import Report
from helpers.conv import STRATEGIES, ConvConfig
from helpers.experiments import conv_bench, sweep
from helpers.paper import TABLE_I

__all__ = ["RULES", "PickCase", "pick_cases", "reference_pick", "check_pick", "tensor_bytes",
           "with_tensor_bytes", "Table1Rows", "table1_rows", "STUDY_BATCH"]

#: The batch of the study's Table I layers.
STUDY_BATCH = 128

MIB = 2**20

#: The rules :func:`check_pick` applies, word for word as the lab states them.
RULES = """\
1. A row is a candidate only if its ``status`` is exactly ``"ok"``, it has a ``median_ms``,
   and its ``workspace_bytes`` is known. Its **footprint** is
   ``tensor_bytes + workspace_bytes``: the input, the filters and the output are on the device
   at the same time as the workspace, so both count. A candidate fits when its footprint is at
   most ``budget_bytes`` (equal fits). A row with ``workspace_bytes`` None (torch's own
   convolution: its workspace is the library's choice) cannot be shown to fit.
   ``budget_bytes`` is a number of bytes or None; only None means no limit (every
   candidate fits). A budget of 0 is a budget like any other: nothing fits in 0 bytes.
2. The fastest candidate that fits (smallest ``median_ms``) wins; return its ``strategy``.
3. Ties in ``median_ms``: the smaller footprint wins; still tied: the row that comes first
   in ``rows``.
4. No candidate fits (or nothing was measured, or there are no rows): return **None**. We
   chose None over raising ``ValueError`` because "no strategy fits" is an answer an autotuner
   must act on (a smaller batch, another device), not a mistake in the call; the caller tests
   ``if choice is None``.
5. ``rows`` must not be modified (sort a copy)."""


@dataclasses.dataclass
class PickCase:
    """One call of ``pick``: a title, the rows, the budget in bytes and the right answer."""

    title: str
    rows: list[dict]
    budget_bytes: int | None
    expected: str | None


def _row(strategy: str, median_ms: float | None, workspace_bytes: int | None,
         status: str = "ok", tensors: int = 0) -> dict:
    family = {"direct": "direct", "im2col": "unrolling", "fft": "fft", "winograd": "winograd",
              "reference": "library"}[strategy.split("-")[0]]
    return {"strategy": strategy, "family": family, "device": "synthetic", "pass": "forward",
            "median_ms": median_ms, "iqr_ms": None if median_ms is None else 0.01,
            "gflop_per_s": None, "flops": 10**9, "workspace_bytes": workspace_bytes,
            "peak_bytes": None, "tensor_bytes": tensors, "status": status}


def _check_budget(budget_bytes) -> None:
    if budget_bytes is None:
        return
    if isinstance(budget_bytes, bool) or not isinstance(budget_bytes, (int, float)) \
            or not budget_bytes >= 0:
        raise ValueError(f"budget_bytes must be a number of bytes >= 0, or None for no limit, "
                         f"got {budget_bytes!r}")


def reference_pick(rows: list[dict], budget_bytes: int | None) -> str | None:
    """The rules above, written plainly: the reference :func:`check_pick` compares with.

    Args:
        rows: dicts with ``strategy``, ``median_ms``, ``workspace_bytes``, ``tensor_bytes``
            and ``status``.
        budget_bytes: the memory allowed for tensors + workspace, in bytes (>= 0; 0: nothing
            fits), or None: no limit.

    Returns:
        The winning row's ``strategy``, or None when no row is a candidate.

    Raises:
        ValueError: ``budget_bytes`` negative, not a number, or a bool.
    """
    _check_budget(budget_bytes)
    best, best_key = None, None
    for i, row in enumerate(rows):
        ws, ms = row.get("workspace_bytes"), row.get("median_ms")
        if row.get("status") != "ok" or ms is None or ws is None:
            continue
        footprint = row["tensor_bytes"] + ws
        if budget_bytes is not None and footprint > budget_bytes:
            continue
        key = (ms, footprint, i)
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
            rows.append(_row(name, ms if status == "ok" else None, ws, status, 4 * MIB))
    order = rng.permutation(len(rows))
    rows = [rows[i] for i in order]
    budget = 28 * MIB
    # the overall fastest measured row must be over the budget, or the case tests nothing new
    ok = [r for r in rows if r["status"] == "ok"]
    fastest = min(ok, key=lambda r: r["median_ms"])
    fastest["workspace_bytes"] = 48 * MIB
    if fastest["strategy"].startswith("direct"):
        fastest["strategy"] = "fft"
    return PickCase("15 rows in no particular order, some refused, the fastest over budget",
                    rows, budget, reference_pick(rows, budget))


def _conv1_case() -> PickCase:
    """Table I's Conv1 at batch 128 (float32, analytic sizes), times made up for the case: the
    FFT's workspace alone fits 1 GiB, with the tensors it does not."""
    cfg = TABLE_I[0]
    tensors = tensor_bytes(cfg)
    rows = [_row(name, ms, STRATEGIES[name].workspace_bytes(cfg, False), tensors=tensors)
            for name, ms in (("im2col-gemm", 45.0), ("fft", 30.0), ("direct-naive", 400.0))]
    return PickCase("Table I's Conv1 at batch 128, a 1 GiB budget: the FFT's workspace alone "
                    "would fit, not with the tensors", rows, 2**30, "direct-naive")


def pick_cases() -> list[PickCase]:
    """The checked cases, in order (deterministic synthetic rows, no measurement).

    Each case is built to catch one mistake: the budget ignored, the workspace compared with
    the budget without the tensors, the smallest footprint picked instead of the fastest that
    fits, a refused or failed row picked (or one whose status merely contains "ok" or does
    not start with "failed"), the budget compared with ``<`` instead of ``<=``, a workspace of
    0 taken as unknown, the first fitting row taken (right only when the rows happen to be
    sorted), a row that says "ok" without a time taken, ties broken the wrong way (by
    workspace instead of footprint, by name in either order, by the last row), a budget of 0
    read as no limit (a truthiness test), a budget of None (no limit) not handled.
    """
    t = 8 * MIB     # the tensors (x, w, y) of the layer the rows of a case were measured on
    cases = [
        PickCase("three strategies, all fit: the fastest, not the smallest, wins", [
            _row("direct-naive", 5.0, 0, tensors=t), _row("fft", 2.0, 9 * MIB, tensors=t),
            _row("im2col-gemm", 1.2, 4 * MIB, tensors=t)], 64 * MIB, "im2col-gemm"),
        PickCase("the fastest needs more memory than the budget", [
            _row("im2col-gemm", 1.5, 16 * MIB, tensors=t), _row("fft", 0.8, 96 * MIB, tensors=t),
            _row("direct-naive", 6.0, 0, tensors=t)], 32 * MIB, "im2col-gemm"),
        PickCase("a workspace that fits alone but not with the tensors", [
            _row("fft", 0.8, 16 * MIB, tensors=40 * MIB),
            _row("im2col-gemm", 1.5, 30 * MIB, tensors=40 * MIB),
            _row("direct-naive", 6.0, 0, tensors=40 * MIB)], 48 * MIB, "direct-naive"),
        _conv1_case(),
        PickCase("a budget exactly equal to a footprint (it fits)", [
            _row("direct-naive", 3.0, 0, tensors=2 * MIB),
            _row("im2col-gemm", 1.0, 6 * MIB, tensors=2 * MIB)], 8 * MIB, "im2col-gemm"),
        PickCase("refused rows: nothing timed (median_ms None)", [
            _row("direct-tiled", None, 0, "direct-tiled has no cpu implementation (it runs "
                 "on cuda)", t),
            _row("fft", None, 2 * MIB, "refused: about 3.1 GFLOP at an assumed 8 GFLOP/s is "
                 "about 0.4 s a call, over the 0.2 s budget", t),
            _row("direct-naive", 4.0, 0, tensors=t), _row("im2col-gemm", 2.5, MIB, tensors=t)],
            64 * MIB, "im2col-gemm"),
        PickCase("the fastest row ran but failed: its time does not count", [
            _row("im2col-gemm", 0.9, MIB, tensors=t),
            _row("fft", 0.4, MIB, "failed: wrong result, max relative error 0.3", t),
            _row("direct-naive", 2.0, 0, tensors=t)], 64 * MIB, "im2col-gemm"),
        PickCase("nothing fits, not even direct (its tensors alone are over): the answer is None",
                 [_row("fft", 1.0, 64 * MIB, tensors=4 * MIB),
                  _row("im2col-gemm", 2.0, 16 * MIB, tensors=4 * MIB),
                  _row("direct-naive", 9.0, 0, tensors=4 * MIB)], 2 * MIB, None),
        PickCase("torch's own convolution: workspace unknown (None), not a candidate", [
            _row("reference", 0.5, None, tensors=t), _row("im2col-gemm", 1.0, 2 * MIB, tensors=t),
            _row("direct-naive", 4.0, 0, tensors=t)], 64 * MIB, "im2col-gemm"),
        PickCase("a tie in time: the smaller footprint wins", [
            _row("im2col-gemm", 2.0, 8 * MIB, tensors=t), _row("fft", 2.0, 4 * MIB, tensors=t),
            _row("direct-naive", 3.0, 0, tensors=t)], 64 * MIB, "fft"),
        PickCase("a tie in time: the smaller footprint, not the smaller workspace, wins", [
            _row("im2col-gemm", 2.0, 2 * MIB, tensors=10 * MIB),
            _row("fft", 2.0, 4 * MIB, tensors=6 * MIB),
            _row("direct-naive", 3.0, 0, tensors=6 * MIB)], 64 * MIB, "fft"),
        PickCase("a tie in time and footprint: the first row wins", [
            _row("im2col-gemm", 1.0, 2 * MIB, tensors=t), _row("direct-naive", 1.5, 0, tensors=t),
            _row("direct-tiled", 1.5, 0, tensors=t)], t, "direct-naive"),
        PickCase("a tie in time and footprint, names in reverse alphabetical order: the first "
                 "row wins, not the first name", [
                     _row("im2col-gemm", 1.0, 2 * MIB, tensors=t),
                     _row("direct-tiled", 1.5, 0, tensors=t),
                     _row("direct-naive", 1.5, 0, tensors=t)], t, "direct-tiled"),
        PickCase("a three-way tie: the first row wins, neither the first nor the last name", [
            _row("im2col-gemm", 2.0, 4 * MIB, tensors=t), _row("fft", 2.0, 4 * MIB, tensors=t),
            _row("im2col-tiled", 2.0, 4 * MIB, tensors=t),
            _row("direct-naive", 5.0, 0, tensors=t)], 64 * MIB, "im2col-gemm"),
        PickCase("a row that says 'ok' but has no time (median_ms None): not a candidate", [
            _row("fft", None, MIB, tensors=t), _row("im2col-gemm", 1.1, 2 * MIB, tensors=t),
            _row("direct-naive", 3.0, 0, tensors=t)], 64 * MIB, "im2col-gemm"),
        PickCase("timed rows whose status is not exactly 'ok': their times do not count", [
            _row("fft", 0.3, MIB, "skipped: result not checked", t),
            _row("winograd", 0.2, MIB, "ok: partial (2 of 5 repeats)", t),
            _row("im2col-tiled", 0.5, MIB, "failed: wrong result (the check took 2 s)", t),
            _row("im2col-gemm", 0.9, MIB, tensors=t),
            _row("direct-naive", 2.0, 0, tensors=t)], 64 * MIB, "im2col-gemm"),
        PickCase("nothing measured (every row refused or failed): the answer is None", [
            _row("fft", None, 2 * MIB, "refused: over the 0.2 s budget", t),
            _row("im2col-gemm", None, MIB, "failed: RuntimeError: out of memory", t),
            _row("direct-naive", None, 0, "skipped: time limit of 60 s reached", t)],
            64 * MIB, None),
        _shuffled_case(),
        PickCase("no rows at all", [], 64 * MIB, None),
        PickCase("a budget of 0 bytes: nothing fits (0 is a budget, not 'no limit')", [
            _row("im2col-gemm", 1.0, 2 * MIB, tensors=t), _row("direct-naive", 3.0, 0, tensors=t)],
            0, None),
        PickCase("budget_bytes None: no limit, so the fastest candidate wins whatever it needs", [
            _row("reference", 0.2, None, tensors=t), _row("im2col-gemm", 1.0, 2 * MIB, tensors=t),
            _row("fft", 0.5, 2**40, tensors=t), _row("direct-naive", 3.0, 0, tensors=t)],
            None, "fft"),
    ]
    for case in cases:
        assert reference_pick(case.rows, case.budget_bytes) == case.expected, case.title
    return cases


def _table(rows: list[dict], budget_bytes: int | None) -> str:
    budget = ("budget None (no limit)" if budget_bytes is None
              else f"budget {budget_bytes / MIB:g} MiB")
    lines = [f"{budget}; rows (strategy, median_ms, tensor MiB, workspace MiB, status):"]
    for r in rows:
        ws = "None" if r["workspace_bytes"] is None else f"{r['workspace_bytes'] / MIB:g}"
        lines.append(f"  {r['strategy']:<13} {r['median_ms']!s:>6}  "
                     f"{r['tensor_bytes'] / MIB:>7g}  {ws:>7}  {r['status'][:60]}")
    return "\n".join(lines)


def _learner_line(exc: BaseException, fn) -> traceback.FrameSummary:
    """The innermost frame of ``exc`` in the file that defines ``fn`` (the learner's cell), not
    in a library it called (``heapq``, say); the innermost frame if there is none."""
    frames = traceback.extract_tb(exc.__traceback__)
    home = getattr(getattr(fn, "__code__", None), "co_filename", None)
    return next((f for f in reversed(frames) if f.filename == home), frames[-1])


def check_pick(fn) -> Report:
    """Check ``fn(rows, budget_bytes) -> str | None`` against :data:`RULES`.

    Args:
        fn: the learner's ``pick``. ``rows``: a list of dicts (a fresh copy per case);
            ``budget_bytes``: int, bytes (0 included), or None for no limit.

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
            where = _learner_line(exc, fn)
            hint = ("\nHint: budget_bytes None means no limit (rule 1): every candidate fits, "
                    "so test `budget_bytes is None` before comparing a footprint with it."
                    if case.budget_bytes is None and isinstance(exc, TypeError) else "")
            return Report(name, False, f"on case '{case.title}': your code raised "
                          f"{type(exc).__name__}: {exc} (line {where.lineno}: "
                          f"{(where.line or '').strip()})\n{_table(case.rows, case.budget_bytes)}"
                          f"{hint}", n, "error")
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
                          f"with status == 'ok', a median_ms and a known workspace_bytes whose "
                          f"footprint tensor_bytes + workspace_bytes is <= the budget (a "
                          f"budget of 0 fits nothing; only None means no limit); the "
                          f"smallest median_ms wins, ties go to the smaller footprint, then to "
                          f"the earlier row; no candidate gives None.",
                          n, "failed")
    return Report(name, True, f"all {len(cases)} cases give the expected choice.", len(cases),
                  "passed")


def tensor_bytes(cfg: ConvConfig, itemsize: int = 4) -> int:
    """Bytes of a forward pass's tensors: input x (N, C, H, W), filters w (K, C, R, S) and
    output y (N, K, P, Q), ``itemsize`` bytes each (4: float32). The workspace comes on top."""
    return itemsize * sum(int(np.prod(s)) for s in (cfg.x_shape, cfg.w_shape, cfg.y_shape))


def with_tensor_bytes(rows: list[dict], cfg: ConvConfig) -> list[dict]:
    """Copies of ``rows`` (one layer's, as :func:`helpers.experiments.sweep.measure` returns
    them) with ``tensor_bytes`` = :func:`tensor_bytes` of ``cfg`` added."""
    return [dict(r, tensor_bytes=tensor_bytes(cfg)) for r in rows]


@dataclasses.dataclass(frozen=True)
class Table1Rows:
    """One row per strategy for each of the study's Table I layers at batch 128, forward pass.

    Attributes:
        rows: layer name (``"Conv1"`` ...) -> rows with ``strategy``, ``median_ms`` (at batch
            128; None where not timed), ``workspace_bytes`` and ``tensor_bytes`` (analytic, at
            batch 128, float32), ``status``.
        basis: ``"recorded"`` (a GPU's run in results/), ``"measured"`` (at batch 128 on this
            machine's GPU) or ``"estimated"`` (batch-1 median on this machine x 128).
        device: the device that made the times (recorded ones with their date).
        note: one line saying where the times come from.
    """

    rows: dict[str, list[dict]]
    basis: str
    device: str
    note: str


def table1_rows(device: str = "cpu", *, directory=None, min_run_time: float = 0.05,
                strategies: list[str] | None = None) -> Table1Rows:
    """The times and memory of every strategy on Table I's layers at the study's batch of 128.

    In order of preference: the forward rows at batch 128 of a GPU's recorded
    ``conv_table1_*`` run in results/ (the first GPU in name order); on a GPU, a measurement at
    batch 128 (:func:`helpers.experiments.sweep.measure`); else an estimate on this machine:
    the median at batch 1 times 128 (time grows about in proportion to the batch once a
    machine is busy; a CPU is busy at batch 1). Memory is analytic at batch 128 either way, and
    a row that did not run (status other than ``"ok"``) has no workspace (None).

    Args:
        device: ``"cpu"`` or ``"cuda"``: where to measure when nothing is recorded.
        directory: the results folder (default: results/).
        min_run_time: seconds of timed calls per measurement.
        strategies: names from :data:`helpers.conv.STRATEGIES` (default all).

    Raises:
        ValueError: an unknown device or strategy.

    Source: Li et al., ICPP 2016, Table I (the layers, batch 128).
    """
    if device not in ("cpu", "cuda"):
        raise ValueError(f"device must be 'cpu' or 'cuda', got {device!r}")
    names = list(strategies or STRATEGIES)
    for name in names:
        if name not in STRATEGIES:
            raise ValueError(f"strategy must be one of {sorted(STRATEGIES)}, got {name!r}")
    layers = {layer.name: layer for layer in TABLE_I}

    def memory(name: str, layer: ConvConfig, status: str) -> dict:
        """Analytic memory at batch 128; no workspace for a row that did not run."""
        return {"workspace_bytes": (STRATEGIES[name].workspace_bytes(layer, False)
                                    if status == "ok" else None),
                "tensor_bytes": tensor_bytes(layer)}

    rec = results.recorded(conv_bench.PREFIX, conv_bench.COMMAND, directory=directory,
                           **{"pass": "forward", "b": STUDY_BATCH})
    gpus = sorted({r["device"] for r in rec.rows})
    if gpus:
        rows = {name: [] for name in layers}
        for r in rec.rows:
            if r["device"] == gpus[0] and r["layer"] in layers and r["strategy"] in names:
                ms = r["median_ms"] if isinstance(r["median_ms"], (int, float)) else None
                rows[r["layer"]].append({"strategy": r["strategy"], "median_ms": ms,
                                         "status": r["status"],
                                         **memory(r["strategy"], layers[r["layer"]],
                                                  r["status"])})
        return Table1Rows(rows, "recorded", gpus[0], rec.note)
    measured_batch = STUDY_BATCH if device == "cuda" else 1
    rows, label = {}, device
    for name, layer in layers.items():
        rows[name] = []
        for strategy in names:
            m = sweep.measure(layer.with_batch(measured_batch), strategy, device,
                              backward=False, min_run_time=min_run_time, measure_memory=False)
            label = m["device"]
            ms = m["median_ms"]
            rows[name].append({"strategy": strategy, "status": m["status"],
                               "median_ms": None if ms is None
                               else ms * STUDY_BATCH / measured_batch,
                               **memory(strategy, layer, m["status"])})
    if device == "cuda":
        return Table1Rows(rows, "measured", label, f"measured at batch {STUDY_BATCH} on {label}")
    return Table1Rows(rows, "estimated", label,
                      f"estimated: the median at batch 1 on {label}, times {STUDY_BATCH}; "
                      f"{rec.note}")
