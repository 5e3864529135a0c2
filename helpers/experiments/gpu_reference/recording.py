"""Record the GPU reference measurements within one deadline: ``make gpu-reference``.

``python -m helpers.experiments.gpu_reference --out DIR --budget-s N`` runs the workbook's
recording commands (:data:`PARTS`, most needed first) one after another in one measuring
process, so that torch, Numba and the compiled kernels are loaded once, and ends within N
seconds. After every part, and whenever a running part saves a file, DIR holds the summary
(``gpu_reference_<gpu>.csv`` and ``.json``) and one archive of everything recorded so far
(``.tar.gz``, members named ``results/...``): a kill loses only what was not saved. SIGTERM or
SIGINT stops that part, packs and prints the headline, which is always printed last.
``--resume`` keeps what an earlier run in DIR recorded. ``--dry-run`` runs the same path on a
CPU at tiny sizes. It needs only python3 with numpy, numba, numba-cuda and torch (psutil, tqdm,
nvidia-ml-py, torchvision when there).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import pathlib
import shutil
import signal
import sys
import tarfile
import tempfile
import threading
import time

from helpers import results
from helpers.device import backend
from helpers.device.worker import Worker
from helpers.experiments.gpu_reference import summary
from helpers.experiments.gpu_reference.parts import PARTS, REFUSED, Part

__all__ = [
    "ARCHIVE_LIMIT_BYTES",
    "DEFAULT_BUDGET_S",
    "DRY_RUN_DIR",
    "KEPT_NOTE",
    "OUT_DIR",
    "PARTS",
    "PREFIX",
    "REFUSED",
    "Part",
    "gpu_refusal",
    "main",
    "new_worker",
    "plan",
    "print_report",
    "run",
    "stop_on_signals",
]

#: File-name prefix of the run's summary (one row per part) and archive.
PREFIX = "gpu_reference_"

#: The archive must come back from a remote machine: it stays under this size.
ARCHIVE_LIMIT_BYTES = 16 * 2**20

#: The whole run's default deadline (s): one 10-minute remote command, with margin.
DEFAULT_BUDGET_S = 480.0

#: What the measuring process runs: the preflight and the parts (by name, for the worker).
_IN_PROCESS = "helpers.experiments.gpu_reference.process"

_ROOT = pathlib.Path(__file__).resolve().parents[3]

#: Where the run writes unless told otherwise; a dry run never writes to results/.
OUT_DIR = _ROOT / "build" / "gpu-reference"
DRY_RUN_DIR = _ROOT / "build" / "gpu-reference-dry-run"

#: Budget of every part in a dry run (seconds): tiny sizes on a CPU.
_DRY_BUDGET_S = 60.0
#: Seconds a part's own time limit leaves for its saving.
_MARGIN_S = 10.0
#: A part still running this long after its budget is killed.
_GRACE_S = 20.0
#: The note that leads the row of a part kept from an earlier run (``resume``).
KEPT_NOTE = "recorded by an earlier run, kept"
#: Seconds kept back at the end of the deadline for the summary, the archive and the headline.
_PACK_S = 10.0
#: The preflight's own limit (s), the measuring process's start not counted.
_PREFLIGHT_S = 20.0
#: Seconds between two looks for files a running part has saved (then packed at once).
_WATCH_S = 1.0


def gpu_refusal() -> str | None:
    """Why this machine cannot record GPU references (no GPU Numba can use), or None."""
    if backend.MODE == "gpu":
        return None
    return (f"make gpu-reference needs an NVIDIA GPU that Numba can use; here: "
            f"{backend.MODE_REASON}. Try the same path on this machine with --dry-run.")


def _fill(args: tuple[str, ...], out: pathlib.Path, limit: float, slug: str) -> list[str]:
    return [a.format(out=out, limit=f"{limit:g}", slug=slug) for a in args]


def plan(part: Part, out: pathlib.Path, slug: str, dry_run: bool,
         seconds_left: float) -> tuple[list[str] | None, float, str]:
    """The arguments for ``part``'s ``main``, its time (s) and a note; or ``None`` and why not.

    A part that does not fit the time left is skipped; one that limits itself
    (``time_limited``) runs with the time left instead, if that is at least half its budget.
    """
    budget = _DRY_BUDGET_S if dry_run else part.budget_s
    note = ""
    if seconds_left < budget:
        if not part.time_limited or seconds_left < budget / 2:
            return None, budget, (f"skipped: needs about {budget:.0f} s, only "
                                  f"{max(seconds_left, 0):.0f} s left of the total")
        budget, note = seconds_left, f"shortened to the {seconds_left:.0f} s left"
    limit = max(budget - _MARGIN_S, budget / 2)
    return _fill(part.dry_args if dry_run else part.args, out, limit, slug), budget, note


def new_worker():
    """A measuring process for the parts (:class:`helpers.device.worker.Worker`), which loads
    the part runner, torch and Numba before it reports ready."""
    return Worker(warm_up=(_IN_PROCESS, "warm_up"))



# ---------------------------------------------------------------------------- the run itself


def _data_files(folder: pathlib.Path) -> dict[str, float]:
    return {p.name: p.stat().st_mtime_ns for p in folder.glob("*")
            if p.suffix in (".csv", ".json") and not p.name.startswith(PREFIX)}


def _part_row(part: Part, status: str, seconds: float, budget: float, code, files, note,
              work: pathlib.Path | None = None) -> dict:
    counts = summary.count_rows(files, work)
    return {"part": part.name, "tier": part.tier, "what": part.what, "status": status,
            "seconds": round(seconds, 1), "budget_s": round(budget, 1),
            "exit_code": "" if code is None else code, "files": ";".join(files), **counts,
            "note": note}


def _unpack(archive: pathlib.Path, work: pathlib.Path) -> None:
    """An earlier run's archive into ``work`` (its ``results/`` prefix dropped)."""
    with tarfile.open(archive) as tar:
        for member in tar.getmembers():
            name = pathlib.PurePosixPath(member.name)
            if member.isfile() and name.parts[0] == "results" and ".." not in name.parts:
                target = work.joinpath(*name.parts[1:])
                target.parent.mkdir(parents=True, exist_ok=True)
                with tar.extractfile(member) as src, open(target, "wb") as dst:
                    shutil.copyfileobj(src, dst)


def _earlier(work: pathlib.Path, slug: str) -> dict[str, dict]:
    """Rows of an earlier run's summary whose part finished and whose files are all there."""
    try:
        ds = results.load(PREFIX + slug, work)
    except (FileNotFoundError, ValueError):
        return {}
    kept = {}
    for r in ds.rows:
        files = [f for f in str(r.get("files") or "").split(";") if f]
        if r["status"] in ("ok", "partial") and all((work / f).exists() for f in files):
            kept[r["part"]] = dict(r, files=";".join(files))
    return kept


def _kept_row(row: dict, kept_note: str) -> dict:
    """An earlier run's row, kept: ``kept_note`` leads its note, unless it says already that
    it was kept (by this note or :data:`KEPT_NOTE`)."""
    before = str(row.get("note") or "")
    kept = kept_note in before or KEPT_NOTE in before
    return dict(row, note=before if kept else "; ".join(filter(None, [kept_note, before])))


def _replace_atomically(source: pathlib.Path, target: pathlib.Path) -> None:
    partial = target.with_name(target.name + results.PARTIAL)
    shutil.copyfile(source, partial)
    os.replace(partial, target)


def _pack(out: pathlib.Path, work: pathlib.Path, slug: str, rows: list[dict], meta: dict
          ) -> pathlib.Path:
    """Write the summary and the archive of everything in ``work`` into ``out``, each file
    replaced whole (a kill while packing leaves the previous one).

    Raises:
        RuntimeError: the archive is over :data:`ARCHIVE_LIMIT_BYTES`.
    """
    name = PREFIX + slug
    # sys.orig_argv: the command as typed (python3 -m tools.gpu_lease ..., say)
    results.save(name, rows, directory=work, command=" ".join(sys.orig_argv),
                 extra=dict(meta, headline=summary.headline(work, rows)))
    staged = work.parent / f"{name}.tar.gz"
    with tarfile.open(staged, "w:gz") as tar:
        for path in sorted(work.rglob("*")):
            if path.is_file() and path.suffix != results.PARTIAL:   # not one being written
                tar.add(path, arcname="results/" + path.relative_to(work).as_posix())
    size = staged.stat().st_size
    if size > ARCHIVE_LIMIT_BYTES:
        raise RuntimeError(f"the archive is {size / 2**20:.1f} MiB, over the "
                           f"{ARCHIVE_LIMIT_BYTES / 2**20:.0f} MiB a remote run can bring back")
    for suffix in (".csv", ".json"):
        _replace_atomically(work / f"{name}{suffix}", out / f"{name}{suffix}")
    _replace_atomically(staged, out / f"{name}.tar.gz")
    return out / f"{name}.tar.gz"


class _Watch:
    """Packs again whenever the part in progress has saved a file (checked every
    :data:`_WATCH_S` seconds), so that a kill loses at most what it had not saved yet."""

    def __init__(self, work: pathlib.Path, before: dict[str, float], pack):
        self.work, self.before, self.pack = work, before, pack
        self.seen, self.checked = dict(before), time.monotonic()

    def poll(self) -> bool:
        """Pack if a file changed since the last look; always False (never cancels)."""
        if time.monotonic() - self.checked < _WATCH_S:
            return False
        self.checked = time.monotonic()
        now = _data_files(self.work)
        if now != self.seen:
            self.seen = now
            try:
                self.pack(sorted(f for f, m in now.items() if self.before.get(f) != m))
            except RuntimeError:   # an archive over the limit: the part's end says so
                pass
        return False


def _outcome_status(outcome, part: Part, files: list[str], dry_run: bool, stopped: bool
                    ) -> tuple[str, str, int | None]:
    """(status, note, exit status) of a part from the measuring process's outcome."""
    if outcome.status == "ok":
        code = outcome.value
        status, why = summary.status_of(code, files, dry_run=dry_run, gpu_only=part.gpu_only)
        return status, why, code
    if outcome.status == "stopped" or stopped:
        return "stopped", "stopped by a signal; its files so far are kept", None
    if outcome.status == "did not finish":
        return "killed", f"still running {outcome.seconds:.0f} s after it began: killed", None
    return "crashed", outcome.error[:300], None


def run(out: pathlib.Path, *, dry_run: bool = False, parts: list[str] | None = None,
        budget_s: float = DEFAULT_BUDGET_S, resume: bool = False, tier: int | None = None,
        catalogue: tuple[Part, ...] = PARTS, stop: threading.Event | None = None,
        worker=None, kept_note: str = KEPT_NOTE) -> tuple[list[dict], pathlib.Path]:
    """Run the parts, rewriting the summary and archive in ``out`` after each one.

    Args:
        out: folder for the summary and the archive (nothing else is written there).
        dry_run: tiny sizes on the CPU (the GPU-only parts are expected to refuse).
        parts: names from ``catalogue``, run in the order named (default: all, in its order).
        budget_s: seconds for the whole run, from this call to the last archive.
        resume: keep the parts an earlier run's archive in ``out`` recorded.
        kept_note: the note of a kept part's row, before the note it had.
        tier: run only the parts of this tier (1 or 2).
        catalogue: the parts to choose from (:data:`PARTS`).
        stop: once set (by a signal), the part in progress is stopped and the run packs.
        worker: the measuring process to run the parts in (default: :func:`new_worker`,
            closed at the end).

    Returns:
        (one summary row per part, the archive's path).

    Raises:
        ValueError: an unknown part or tier, ``budget_s`` not > 0, or a dry run aimed at
            ``results/`` (before anything runs).
    """
    begun = time.monotonic()
    names = [p.name for p in catalogue]
    unknown = [n for n in parts or [] if n not in names]
    if unknown:
        raise ValueError(f"parts must be among {names}, got {unknown}")
    if tier not in (None, 1, 2):
        raise ValueError(f"tier must be 1 or 2, got {tier!r}")
    if not budget_s > 0:
        raise ValueError(f"budget_s must be > 0 seconds, got {budget_s!r}")
    out = pathlib.Path(out).resolve()
    if dry_run and out == results.RESULTS_DIR.resolve():
        raise ValueError("a dry run never writes to results/: give it a scratch folder")
    chosen = ([next(p for p in catalogue if p.name == n) for n in dict.fromkeys(parts)]
              if parts else list(catalogue))
    chosen = [p for p in chosen if tier is None or p.tier == tier]
    deadline = begun + budget_s
    stop = stop or threading.Event()
    out.mkdir(parents=True, exist_ok=True)
    scratch = pathlib.Path(tempfile.mkdtemp(prefix=PREFIX))
    work = scratch / "results"
    (work / f"{PREFIX}logs").mkdir(parents=True)
    own_worker = worker is None
    if own_worker:
        worker = new_worker()
    rows: list[dict] = []
    try:
        return _run(out, work, chosen, dry_run, resume, deadline, budget_s, stop, worker, rows,
                    kept_note)
    finally:
        if own_worker:
            worker.close()
        shutil.rmtree(scratch, ignore_errors=True)


def _run(out, work, chosen, dry_run, resume, deadline, budget_s, stop, worker, rows, kept_note):
    left = lambda: deadline - time.monotonic() - _PACK_S  # noqa: E731
    meta = {"dry_run": dry_run, "budget_s": budget_s, "complete": False}
    worker.start_timeout_s = max(1.0, min(300.0, left()))
    pre = worker.run(_IN_PROCESS, "preflight", dry_run, timeout_s=max(1.0, min(_PREFLIGHT_S,
                                                                           left())),
                     cancelled=stop.is_set)
    if pre.status != "ok":
        slug = "dry-run" if dry_run else "gpu"
        flight = {"slug": slug, "lines": [f"preflight: {pre.status} {pre.error}"],
                  "numba": f"the preflight did not finish ({pre.status})", "cudnn": "?"}
    else:
        flight = pre.value
    slug = flight["slug"]
    print("\n".join(flight["lines"]), flush=True)
    meta["preflight"] = flight["lines"]
    archive = out / f"{PREFIX}{slug}.tar.gz"
    earlier = {}
    if resume and archive.exists():
        _unpack(archive, work)
        earlier = _earlier(work, slug)
    # what the earlier run recorded of parts not chosen now stays in the summary (and so in
    # the next resume), after this run's parts
    names = {p.name for p in chosen}
    others = [_kept_row(r, kept_note) for name, r in earlier.items() if name not in names]
    logs = work / f"{PREFIX}logs"
    for n, part in enumerate(chosen, 1):
        head = f"[{n}/{len(chosen)}] {part.name} (tier {part.tier})"
        if part.name in earlier:
            rows.append(_kept_row(earlier[part.name], kept_note))
            print(f"{head}: {kept_note} ({earlier[part.name]['status']})", flush=True)
            continue
        if stop.is_set():
            rows.append(_part_row(part, "not run", 0.0, 0.0, None, [], "stopped by a signal"))
            continue
        if part.needs_numba and flight["numba"]:
            rows.append(_part_row(part, "skipped", 0.0, 0.0, None, [],
                                  f"skipped: {flight['numba']}"))
            print(f"{head}: skipped, {flight['numba']}", flush=True)
            continue
        argv, budget, note = plan(part, work, slug, dry_run, left())
        if argv is None:
            rows.append(_part_row(part, "skipped", 0.0, budget, None, [], note))
            print(f"{head}: {note}", flush=True)
            continue
        timeout = max(1.0, min(budget + _GRACE_S, left()))
        print(f"{head}: {part.what}; budget {budget:.0f} s\n  $ python -m {part.module} "
              + " ".join(argv), flush=True)
        before = _data_files(work)
        running = _part_row(part, "in progress", 0.0, budget, None, [],
                            "the run ended during this part; the files it had saved are kept")
        watch = _Watch(work, before, lambda files, running=running: _pack(
            out, work, slug, [*rows, dict(running, files=";".join(files),
                                          **summary.count_rows(files, work)), *others], meta))
        outcome = worker.run(_IN_PROCESS, "run_part", part.module, argv,
                             str(logs / f"{part.name}.log"), timeout_s=timeout,
                             cancelled=lambda watch=watch: watch.poll() or stop.is_set())
        after = _data_files(work)
        files = sorted(f for f, m in after.items() if before.get(f) != m)
        status, why, code = _outcome_status(outcome, part, files, dry_run, stop.is_set())
        row = _part_row(part, status, outcome.seconds, budget, code, files,
                        "; ".join(filter(None, [note, why])), work)
        if status == "ok" and row["skipped_for_time"]:
            row["status"] = "partial"
        rows.append(row)
        print(f"{head}: {row['status']} in {outcome.seconds:.0f} s, {len(files)} files"
              + (f" ({row['note']})" if row["note"] else ""), flush=True)
        archive = _pack(out, work, slug, rows + others, meta)
    meta["complete"] = not stop.is_set()
    rows.extend(others)
    return rows, _pack(out, work, slug, rows, meta)


@contextlib.contextmanager
def stop_on_signals():
    """Within the block, SIGTERM and SIGINT do not end the process: they set the yielded
    ``stop`` event (what :func:`run` watches) and are appended to ``caught``; the previous
    handlers are restored after it. Yields ``(stop, caught)``."""
    stop, caught = threading.Event(), []

    def on_signal(signum, frame):  # noqa: ARG001
        caught.append(signum)
        stop.set()

    old = {s: signal.signal(s, on_signal) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield stop, caught
    finally:
        for s, handler in old.items():
            signal.signal(s, handler)


def print_report(rows: list[dict], out: pathlib.Path, archive: pathlib.Path) -> None:
    """Print the archive's place, then :func:`run`'s rows and the headline read from the
    archive's files: the headline is printed last."""
    with tempfile.TemporaryDirectory() as tmp:
        _unpack(archive, pathlib.Path(tmp))
        print(f"\narchive: {archive} ({archive.stat().st_size / 2**10:,.0f} KiB): `tar -xzf` "
              "it at the repository's root to add its files to results/\n")
        print(summary.format_summary(rows, pathlib.Path(tmp)), flush=True)


def main(argv: list[str] | None = None) -> int:
    """``python -m helpers.experiments.gpu_reference [--dry-run] [--out DIR] [--budget-s N]
    [--parts a,b] [--tier 1|2] [--resume] [--list]``.

    Returns 0 when every part ran (or was kept), 1 when a part failed, crashed or was skipped,
    2 for bad arguments or without a GPU (unless ``--dry-run``), and 128 + the signal's number
    after SIGTERM or SIGINT."""
    begun = time.monotonic()
    parser = argparse.ArgumentParser(prog="python -m helpers.experiments.gpu_reference",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--dry-run", action="store_true",
                        help="tiny sizes on the CPU into a scratch folder (never results/)")
    parser.add_argument("--out", type=results.writable_folder, default=None,
                        help=f"folder for the summary and the archive (default {OUT_DIR}, or "
                             f"{DRY_RUN_DIR} for --dry-run); nothing else is written there")
    parser.add_argument("--budget-s", type=float, default=DEFAULT_BUDGET_S,
                        help="seconds for the whole run, start-up and packing included "
                             f"(default {DEFAULT_BUDGET_S:g})")
    parser.add_argument("--parts", default=None,
                        help="comma-separated parts, run in this order: "
                             + ", ".join(p.name for p in PARTS))
    parser.add_argument("--tier", type=int, choices=(1, 2), default=None,
                        help="only the parts of this tier (1: the headline and the notebooks' "
                             "GPU-only cells)")
    parser.add_argument("--resume", action="store_true",
                        help="keep the parts that an earlier run's archive in --out recorded")
    parser.add_argument("--list", action="store_true", help="print the parts and exit")
    args = parser.parse_args(argv)
    if args.list:
        for t in (1, 2):
            print(f"tier {t}:")
            for p in (p for p in PARTS if p.tier == t):
                print(f"  {p.name:<18}{p.budget_s:>5.0f} s  {p.what}\n{'':<25}python -m "
                      f"{p.module} {' '.join(p.args)}")
        print(f"  {'total':<18}{sum(p.budget_s for p in PARTS):>5.0f} s")
        return 0
    if not args.budget_s > 0:
        parser.error(f"--budget-s must be > 0 seconds, got {args.budget_s:g}")
    if not args.dry_run and (reason := gpu_refusal()):
        print(reason, file=sys.stderr)
        return 2
    out = pathlib.Path(args.out) if args.out else (DRY_RUN_DIR if args.dry_run else OUT_DIR)
    with stop_on_signals() as (stop, caught):
        try:
            rows, archive = run(out, dry_run=args.dry_run, resume=args.resume, tier=args.tier,
                                budget_s=args.budget_s - (time.monotonic() - begun), stop=stop,
                                parts=args.parts.split(",") if args.parts else None)
        except ValueError as exc:
            parser.error(str(exc))
    print_report(rows, out, archive)
    if caught:
        return 128 + caught[0]
    done = {"ok", "partial", "no GPU (dry run)"}
    return 0 if all(r["status"] in done for r in rows) else 1
