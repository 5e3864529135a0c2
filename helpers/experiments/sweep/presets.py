"""The study's experiments as data, and the command that runs them.

``python -m helpers.experiments.sweep --preset NAME --out FILE.csv [--device cpu,cuda]
[--time-limit S] [--resume]`` measures every strategy of :data:`helpers.conv.STRATEGIES` over
the study's one-parameter sweeps and Table I's layers (:data:`PRESETS`) and writes one CSV row
per (point, strategy, device) plus ``FILE.json`` describing the machine. A point not run
(unsupported, the simulator, over a budget or the time limit) is a row whose ``status`` says
why, never a gap. Notebook 06 runs and reads these experiments.

Symbols: the study's 5-tuple (b, i, f, k, s) = (batch, input height = width, filters, kernel
height = width, stride), plus input channels c and padding; kernels use the cuDNN paper's
(N, C, H, W, K, R, S). The sweeps use c = 3 and padding 0 (the study does not state its input
channels; see :data:`PRESETS`); Table I's layers use the channels :mod:`helpers.paper` states.

Source: Li et al., ICPP 2016, Sections IV-B (Figure 3, runtime), V-B (Figure 5, memory), Table I.
"""

from __future__ import annotations

import argparse
import dataclasses
import pathlib
import sys
import time

from helpers import results
from helpers.conv import STRATEGIES, ConvConfig, config_for
from helpers.device import backend, timing
from helpers.device.progress import progress as progress_bar
from helpers.experiments.conv_timing import estimate_seconds, measure
from helpers.paper import TABLE_I

#: results/ file-name prefix of recorded runs of the 'paper' preset, and how to record one.
PREFIX = "sweep_paper_"
COMMAND = "python -m helpers.experiments.sweep --preset paper --out results/sweep_paper_<gpu>.csv"

__all__ = [
    "COMMAND",
    "DEVICES",
    "FIELDS",
    "PREFIX",
    "PRESETS",
    "Preset",
    "SweepPoint",
    "estimate",
    "fastest_map",
    "final",
    "main",
    "recorded",
    "run_preset",
]

#: The devices a sweep measures on.
DEVICES = ("cpu", "cuda")

#: Columns of every row (units in the names; ``device`` names the CPU or GPU).
FIELDS = ("preset", "sweep", "x", "layer", "b", "i", "f", "k", "s", "c", "padding", "strategy",
          "family", "device", "pass", "median_ms", "iqr_ms", "gflop_per_s", "flops",
          "workspace_bytes", "peak_bytes", "status")

@dataclasses.dataclass(frozen=True)
class SweepPoint:
    """One point of a sweep: which sweep, the swept value, and the layer (a :class:`ConvConfig`).

    Attributes:
        sweep: ``batch``, ``input``, ``filters``, ``kernel``, ``stride`` or ``table1``.
        x: the swept parameter's value (the layer's index 1..5 for ``table1``).
        cfg: the layer; ``cfg.name`` is Table I's layer name, or "" for sweep points.
    """

    sweep: str
    x: int
    cfg: ConvConfig

    def fields(self) -> dict:
        """The row fields in the study's symbols: sweep, x, layer, b, i, f, k, s, c, padding."""
        b, i, f, k, s = self.cfg.study
        return {"sweep": self.sweep, "x": self.x, "layer": self.cfg.name, "b": b, "i": i,
                "f": f, "k": k, "s": s, "c": self.cfg.c, "padding": self.cfg.pad_h}


#: The five one-parameter sweeps of a preset, in the order they are listed, then Table I.
SWEEPS = ("batch", "input", "filters", "kernel", "stride", "table1")


@dataclasses.dataclass(frozen=True)
class Preset:
    """A named set of sweeps: base tuple, ranges, Table I's batch (None: no Table I points),
    and how it relates to the study."""

    name: str
    base: tuple[int, int, int, int, int]
    c: int
    batch: range
    input: range
    filters: range
    kernel: range
    stride: range
    table1_batch: int | None
    note: str

    def points(self) -> list[SweepPoint]:
        """Every point of the five one-parameter sweeps, then Table I's layers (unless
        ``table1_batch`` is None).

        Raises:
            ValueError: a point that is not a valid layer (as :meth:`ConvConfig.from_study`).
        """
        b, i, f, k, s = self.base
        pts = []
        for sweep, values in (("batch", self.batch), ("input", self.input),
                              ("filters", self.filters), ("kernel", self.kernel),
                              ("stride", self.stride)):
            for v in values:
                t = {"b": b, "i": i, "f": f, "k": k, "s": s}
                t[{"batch": "b", "input": "i", "filters": "f", "kernel": "k", "stride": "s"}[sweep]] = v
                pts.append(SweepPoint(sweep, v, ConvConfig.from_study(c=self.c, **t)))
        for n, layer in enumerate(TABLE_I if self.table1_batch is not None else (), start=1):
            pts.append(SweepPoint("table1", n, layer.with_batch(self.table1_batch)))
        return pts


#: The presets. Input channels: the study does not state them. Its base (64, 128, 64, 11, 1)
#: has the shape of a first layer (convnet-benchmarks' L1, Table I's Conv1, is
#: (128, 128, 96, 11, 1) on RGB input), so the sweeps use c = 3, padding 0.
#:
#: * ``paper``: the study's ranges around its base, forward + backward as in its Figure 3:
#:   batch 32..512 step 32, input 32..256 step 16, filters 32..512 step 16; the study names no
#:   ranges for kernel size and stride, so kernel 1..15 (odd) and stride 1..4 are our choice;
#:   and Table I's five layers at batch 128. For a GPU.
#: * ``paper-small``: the same sweeps scaled so that every strategy finishes on a 2-core CPU in
#:   a few minutes: base (2, 32, 16, 11, 1); batch 1..16 (the study's /32), input 16..64 step 4
#:   (/4, from 16 so the 11 x 11 kernel fits), filters 8..128 step 8 (/4), kernel 1..15 (odd),
#:   stride 1..4, Table I at batch 1.
#: * ``lesson``: what notebook 06 measures live on a CPU (about 20 s on 2 quiet cores):
#:   ``paper-small``'s base and kernel-size and stride sweeps, its other sweeps at every third
#:   to fifth point (batch 1, 6, 11, 16; input 16..64 step 16; filters 8..128 step 40), no Table I.
#: * ``smoke``: a check that the command runs (about 10 s on a 2-core CPU): base
#:   (1, 16, 4, 3, 1), two values per sweep, no Table I points. Not a measurement to read.
PRESETS: dict[str, Preset] = {
    "paper": Preset(
        "paper", (64, 128, 64, 11, 1), 3, range(32, 513, 32), range(32, 257, 16),
        range(32, 513, 16), range(1, 16, 2), range(1, 5), 128,
        "the study's sweeps around (64, 128, 64, 11, 1), C = 3; Table I at batch 128"),
    "paper-small": Preset(
        "paper-small", (2, 32, 16, 11, 1), 3, range(1, 17), range(16, 65, 4),
        range(8, 129, 8), range(1, 16, 2), range(1, 5), 1,
        "the study's sweeps scaled for a CPU: base (2, 32, 16, 11, 1), C = 3, batch /32, "
        "input /4, filters /4; Table I at batch 1"),
    "lesson": Preset(
        "lesson", (2, 32, 16, 11, 1), 3, range(1, 17, 5), range(16, 65, 16),
        range(8, 129, 40), range(1, 16, 2), range(1, 5), None,
        "paper-small's sweeps, sparser and without Table I: notebook 06's live run on a CPU"),
    "smoke": Preset(
        "smoke", (1, 16, 4, 3, 1), 3, range(1, 3), range(12, 17, 4), range(4, 9, 4),
        range(3, 6, 2), range(1, 3), None,
        "a smoke test: base (1, 16, 4, 3, 1), C = 3, two values per sweep, no Table I"),
}


def run_preset(preset: str | Preset, devices: list[str] | None = None,
               strategies: list[str] | None = None, min_run_time: float = 0.05,
               budget_s: float = 2.0, progress: bool = True, *, deadline: float | None = None,
               time_limit: float | None = None, on_pass=None,
               keep: list[dict] | None = None, first: tuple[str, ...] = ()) -> list[dict]:
    """Run every (point, strategy, device) of a preset; rows with the keys of :data:`FIELDS`.

    Args:
        preset: a key of :data:`PRESETS` or a :class:`Preset`.
        devices: default the CPU, and ``cuda`` (the GPU, or rows saying the simulator cannot
            time it).
        strategies: default all of :data:`STRATEGIES`.
        min_run_time, budget_s, deadline, time_limit: as :func:`measure` (once the deadline
            has passed, every remaining row says so and nothing more is run).
        progress: show a progress bar (:func:`helpers.device.progress.progress`).
        on_pass: called after each pass of the coarse-to-fine order with the rows measured so
            far, in the points' order (to save them: a run stopped later keeps those).
        keep: rows of an earlier run of this preset: a job with a final row there (measured,
            or refused for a reason that does not change, see :func:`final`) on the same
            device label takes that row and is not run again.
        first: sweeps (``"kernel"``, ``"stride"``...) whose points run before all others,
            each pass of them coarse to fine; the rest follow in their own passes.

    Raises:
        ValueError: an unknown preset, strategy or device.
    """
    if isinstance(preset, str):
        if preset not in PRESETS:
            raise ValueError(f"preset must be one of {sorted(PRESETS)}, got {preset!r}")
        preset = PRESETS[preset]
    names = list(strategies or STRATEGIES)
    devs = list(devices or DEVICES)
    for d in devs:
        if d not in DEVICES:
            raise ValueError(f"device must be 'cpu' or 'cuda', got {d!r}")
    points = preset.points()
    jobs = [(p, n, d) for p in points for n in names for d in devs]
    kept = {_job_key(r): r for r in keep or [] if final(r)}
    rows: list[dict] = [kept.get(_job_key({"preset": preset.name, **p.fields(), "strategy": n,
                                           "device": timing.device_label(d)}), {})
                        for p, n, d in jobs]
    unknown = set(first) - set(SWEEPS)
    if unknown:
        raise ValueError(f"first must name sweeps of {SWEEPS}, got {sorted(unknown)}")
    level = _coarse_to_fine(points)
    level = [lv + (0 if p.sweep in first else len(set(level)) if first else 0)
             for lv, p in zip(level, points)]
    level_of = lambda j: level[j // (len(names) * len(devs))]  # noqa: E731
    order = sorted((j for j in range(len(jobs)) if not rows[j]), key=level_of)
    for n, j in enumerate(progress_bar(order, desc=f"sweep {preset.name}", unit=" runs",
                                       disable=not progress)):
        point, name, device = jobs[j]
        base = {"preset": preset.name, **point.fields()}
        rows[j] = {**base, **measure(point.cfg, name, device, True, min_run_time, True,
                                     budget_s, deadline=deadline, time_limit=time_limit)}
        if on_pass and (n + 1 == len(order) or level_of(order[n + 1]) != level_of(j)):
            on_pass([{k: r[k] for k in FIELDS} for r in rows if r])
    return [{k: r[k] for k in FIELDS} for r in rows]


def final(row: dict) -> bool:
    """Whether a row's status stands for the next run of its job: measured, or refused for a
    reason of the configuration; not a time limit or a failure (out of memory, say)."""
    status = str(row.get("status") or "")
    return status == "ok" or not (status.startswith("skipped: time limit")
                                  or status.startswith("failed") or status == "")


def _job_key(row: dict) -> tuple[str, ...]:
    """(preset, sweep, x, layer, strategy, device label) of a row, read back or fresh."""
    return tuple("" if row.get(k) is None else str(row[k])
                 for k in ("preset", "sweep", "x", "layer", "strategy", "device"))


def _coarse_to_fine(points: list[SweepPoint]) -> list[int]:
    """The pass in which each point is measured: 0 for Table I's layers and every fourth point of
    each sweep (its first and last included), 1 for the other even ones, 2 for the rest. Run in
    that order, a time limit leaves every sweep a coarser curve instead of cutting the last
    sweeps (kernel size, stride, Table I) entirely; the rows keep the points' order."""
    seen: dict[str, int] = {}
    last = {p.sweep: i for i, p in enumerate(points)}
    out = []
    for i, p in enumerate(points):
        k = seen[p.sweep] = seen.get(p.sweep, -1) + 1
        out.append(0 if p.sweep == "table1" or k % 4 == 0 or i == last[p.sweep]
                   else 1 if k % 2 == 0 else 2)
    return out


def estimate(cfg: ConvConfig, strategy: str, device: str, backward: bool = True) -> float:
    """Estimated seconds of one call (as :func:`estimate_seconds`, from the assumed rates)."""
    return estimate_seconds(cfg, strategy, device, backward)


def recorded(**match) -> results.Recorded:
    """Rows of every recorded GPU run of the 'paper' preset (``results/sweep_paper_*``), each
    labelled with its GPU and date, filtered by ``match`` (e.g. ``status="ok"``)."""
    return results.recorded(PREFIX, COMMAND, **match)


def fastest_map(kernels, inputs, base=(2, 32, 16, 11, 1), c: int = 3,
                strategies: list[str] | None = None, device: str = "cpu",
                min_run_time: float = 0.02, budget_s: float = 1.0,
                progress: bool = False) -> tuple[list[dict], list[list[str | None]]]:
    """Which strategy is fastest (forward + backward) over a grid of kernel size x input size.

    Args:
        kernels: kernel sizes k (rows of the map). inputs: input sizes i (columns).
        base: the other parameters (b, i, f, k, s); i and k are replaced from the grid.
        c: input channels. strategies: default the float32 ones with code for ``device``
            (``reference-tf32`` would compare TF32 with float32).
        device, min_run_time, budget_s: as :func:`measure`.

    Returns:
        (rows, winners): every :func:`measure` row (with ``k`` and ``i`` added), and
        ``winners[row][col]``, the fastest strategy's name for ``kernels[row]`` x
        ``inputs[col]``, or None where the kernel does not fit the input or nothing was measured.

    Source: the study's Figure 3 (d): cuDNN fastest under 7 x 7 kernels, fbfft above.
    """
    names = strategies or [n for n, st in STRATEGIES.items()
                           if device in st.devices and st.precision == "float32"]
    b, _, f, _, s = base
    rows, winners = [], []
    bar = progress_bar(total=len(kernels) * len(inputs) * len(names), desc="fastest map",
                       unit=" runs", disable=not progress)
    for k in kernels:
        line = []
        for i in inputs:
            best = None
            try:
                cfg = config_for((b, c, i, i), (f, c, k, k), s)
            except ValueError:
                bar.update(len(names))
                line.append(None)
                continue
            for name in names:
                row = dict(measure(cfg, name, device, True, min_run_time, False, budget_s), k=k, i=i)
                rows.append(row)
                bar.update()
                if row["median_ms"] is not None and (best is None or
                                                     row["median_ms"] < best["median_ms"]):
                    best = row
            line.append(best["strategy"] if best else None)
        winners.append(line)
    bar.close()
    return rows, winners


def write_csv(rows: list[dict], path: pathlib.Path | str, preset: Preset, seconds: float,
              resumed_from: dict | None = None) -> pathlib.Path:
    """Write the rows to ``path`` and the machine's description to ``path`` with ``.json``
    (:func:`helpers.results.save`, with the preset, its scale, the seconds it took and, for
    ``--resume``, ``resumed_from``: the earlier run's date, command and rows kept)."""
    path = pathlib.Path(path)
    if path.suffix != ".csv":
        raise ValueError(f"out must name a .csv file, got {str(path)!r}")
    extra = {"preset": preset.name, "scale": preset.note, "seconds": round(seconds, 1)}
    if resumed_from:
        extra["resumed_from"] = resumed_from
    _, json_path = results.save(
        path.stem, [{k: r[k] for k in FIELDS} for r in rows], directory=path.parent,
        command="python -m helpers.experiments.sweep " + " ".join(sys.argv[1:]), extra=extra)
    return json_path


def _earlier_rows(path: pathlib.Path, preset: Preset) -> tuple[list[dict], dict | None]:
    """``--resume``: the rows of an earlier run of ``preset`` at ``path`` with its final ones
    counted, or ([], None) when there is none.

    Raises:
        ValueError: the file there holds another preset, or is not a sweep's CSV.
    """
    if not path.exists():
        return [], None
    try:
        earlier = results.load(path.stem, path.parent)
    except FileNotFoundError as exc:
        raise ValueError(f"--resume: {path} has no JSON beside it ({exc})") from None
    if earlier.meta.get("preset") != preset.name or not earlier.rows \
            or set(earlier.rows[0]) != set(FIELDS):
        raise ValueError(f"--resume: {path} is not a run of the {preset.name!r} preset")
    kept = sum(final(r) for r in earlier.rows)
    return earlier.rows, {"date": earlier.meta.get("date"), "command": earlier.meta.get("command"),
                          "rows_kept": kept, "seconds": earlier.meta.get("seconds")}


def _devices_arg(values: list[str] | None) -> list[str] | None:
    """``--device`` values (repeated and/or comma lists) as a list without repeats, or None."""
    if not values:
        return None
    out = []
    for part in (p.strip() for v in values for p in v.split(",")):
        if part not in DEVICES:
            raise ValueError(f"--device must be cpu or cuda (or a comma list of them), got {part!r}")
        if part not in out:
            out.append(part)
    return out


def _csv_out(path: str) -> pathlib.Path:
    """``--out``: a writable ``.csv`` path, checked before anything is measured."""
    if not path.endswith(".csv"):
        raise argparse.ArgumentTypeError(f"must name a .csv file, got {path!r}")
    return results.writable_file(path)


def main(argv: list[str] | None = None) -> int:
    """``python -m helpers.experiments.sweep --preset NAME --out FILE.csv [--device D]
    [--time-limit S] [--budget S] [--min-run-time S] [--no-progress] [--resume]``; returns 0."""
    start = time.monotonic()
    parser = argparse.ArgumentParser(prog="python -m helpers.experiments.sweep", description=__doc__.split("\n\n")[0])
    parser.add_argument("--preset", required=True, choices=sorted(PRESETS),
                        help="'smoke' only checks that the command runs (no Table I)")
    parser.add_argument("--out", required=True, type=_csv_out,
                        help="CSV file to write (a .json is written beside it)")
    parser.add_argument("--device", action="append", default=None,
                        help="cpu or cuda; repeat it or give a comma list (default: both; cuda "
                             "rows without a GPU say why nothing was timed)")
    parser.add_argument("--time-limit", type=float, default=None,
                        help="seconds after which no new measurement starts; the rest are rows "
                             "with status 'skipped: time limit ...'")
    parser.add_argument("--budget", type=float, default=2.0,
                        help="refuse points estimated to take longer than this many seconds a call")
    parser.add_argument("--min-run-time", type=float, default=0.05,
                        help="seconds of timed calls per point (at least 2 calls)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    parser.add_argument("--first", default="",
                        help="comma list of sweeps measured before the others, e.g. "
                             "'kernel,stride'")
    parser.add_argument("--resume", action="store_true",
                        help="keep the final rows of an earlier run in --out (measured, or "
                             "refused for a reason of the configuration) and run the rest")
    args = parser.parse_args(argv)
    try:
        devices = _devices_arg(args.device)
    except ValueError as exc:
        parser.error(str(exc))
    if args.time_limit is not None and not args.time_limit > 0:
        parser.error(f"--time-limit must be a positive number of seconds, got {args.time_limit:g}")
    deadline = None if args.time_limit is None else start + args.time_limit
    preset = PRESETS[args.preset]
    first = tuple(f.strip() for f in args.first.split(",") if f.strip())
    if set(first) - set(SWEEPS):
        parser.error(f"--first must name sweeps of {', '.join(SWEEPS)}, got {args.first!r}")
    keep, resumed = [], None
    if args.resume:
        try:
            keep, resumed = _earlier_rows(args.out, preset)
        except ValueError as exc:
            parser.error(str(exc))
        print(f"resuming the run of {resumed['date']}: {resumed['rows_kept']} rows kept"
              if resumed else f"--resume: nothing at {args.out} yet, starting afresh")
    print(f"{preset.name}: {preset.note}")
    print(f"kernels: {backend.info().device_label}")
    rows = run_preset(preset, devices, min_run_time=args.min_run_time, budget_s=args.budget,
                      progress=not args.no_progress, deadline=deadline, time_limit=args.time_limit,
                      on_pass=lambda done: write_csv(done, args.out, preset,
                                                     time.monotonic() - start, resumed),
                      keep=keep, first=first)
    seconds = time.monotonic() - start
    json_path = write_csv(rows, args.out, preset, seconds, resumed)
    measured = sum(r["status"] == "ok" for r in rows)
    print(f"{len(rows)} rows ({measured} measured, {len(rows) - measured} with the reason "
          f"they were not) in {seconds:.0f} s: {args.out}, {json_path}")
    return 0
