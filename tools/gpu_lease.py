"""One command for a short lease of a GPU: ``make gpu-lease`` (``python3 -m tools.gpu_lease``).

Within ``--budget-s`` seconds (default 540, one 10-minute remote command with margin): the
GPU recording's preflight and its tier-one parts (helpers/experiments/gpu_reference/), then
the tests marked ``gpu`` (tools/gpu_tests.py, at most ``--tests-s``), then as many tier-two
parts as the time left holds, all in one measuring process. ``--out DIR`` then holds only the
recording's summary (csv, json), its archive and ``gpu_tests.log``: four files, rewritten as
they go, so a kill loses at most the step in progress. SIGTERM or SIGINT stops the step in
progress, packs and prints the headline, always the last thing printed. It needs only python3
with numpy, numba, numba-cuda, torch and pytest; ``--dry-run`` tries the same path on a CPU.
"""

from __future__ import annotations

import argparse
import pathlib
import sys
import threading
import time

from helpers import results
from helpers.experiments import gpu_reference as ref
from tools import gpu_tests

#: The whole call's default deadline (s): one 10-minute remote command, with margin.
DEFAULT_BUDGET_S = 540.0
#: Seconds kept for the GPU tests, after the tier-one recording.
DEFAULT_TESTS_S = 120.0
#: Seconds kept at the end for the last packing and the report.
_END_S = 10.0
#: Tier-two parts are tried only with at least this much time left (s).
_TIER_TWO_MIN_S = 45.0
#: The log of the GPU tests, beside the recording's summary and archive.
TESTS_LOG = "gpu_tests.log"

_ROOT = pathlib.Path(__file__).resolve().parent.parent
OUT_DIR = _ROOT / "build" / "gpu-lease"
DRY_RUN_DIR = _ROOT / "build" / "gpu-lease-dry-run"


def _tests_line(log: pathlib.Path) -> str:
    """pytest's last summary line in ``log`` ("== 40 passed in 95.1s =="), or why there is none."""
    if not log.exists():
        return "not run"
    lines = [ln.strip("= \n") for ln in log.read_text(errors="replace").splitlines()]
    done = [ln for ln in lines if " in " in ln and any(
        w in ln for w in ("passed", "failed", "skipped", "error", "deselected", "no tests"))]
    interrupted = [ln for ln in lines if ln.endswith("pytest interrupted")]
    return "; ".join(filter(None, [done[-1] if done else "no summary line",
                                   interrupted[-1] if interrupted else ""]))


def lease(out: pathlib.Path, *, budget_s: float = DEFAULT_BUDGET_S,
          tests_s: float = DEFAULT_TESTS_S, dry_run: bool = False, resume: bool = False,
          stop: threading.Event | None = None, worker=None, tests_argv=None,
          catalogue: tuple[ref.Part, ...] = ref.PARTS
          ) -> tuple[list[dict], pathlib.Path, int | None]:
    """The tier-one recording, the GPU tests and tier two into ``out``, within ``budget_s``.

    Args:
        out: folder for the recording's summary and archive and :data:`TESTS_LOG`.
        budget_s: seconds for all of it, from this call to the report.
        tests_s: seconds kept for the GPU tests (they get less when less is left).
        dry_run, resume, catalogue: as :func:`helpers.experiments.gpu_reference.run`.
        stop: once set (by a signal), the step in progress stops and nothing else starts.
        worker: the measuring process (default: a new one, closed at the end).
        tests_argv: the tests' command (default: :func:`tools.gpu_tests.command`).

    Returns:
        (the recording's rows, its archive, the tests' exit status or None when not run).

    Raises:
        ValueError: ``budget_s`` or ``tests_s`` not > 0, or ``budget_s`` too small to hold
            the tests and the end (before anything runs).
    """
    begun = time.monotonic()
    if not (budget_s > 0 and tests_s > 0):
        raise ValueError(f"budget_s and tests_s must be > 0 seconds, got {budget_s!r} and "
                         f"{tests_s!r}")
    if budget_s <= tests_s + 2 * _END_S:
        raise ValueError(f"budget_s ({budget_s:g} s) must exceed tests_s ({tests_s:g} s) by "
                         f"more than {2 * _END_S:g} s: the recording comes first")
    stop = stop or threading.Event()
    left = lambda: budget_s - (time.monotonic() - begun) - _END_S  # noqa: E731
    own = worker is None
    worker = worker or ref.new_worker()
    code = None
    try:
        print(f"== tier one: the recording the headline and the notebooks need "
              f"(budget {left() - tests_s:.0f} s)", flush=True)
        rows, archive = ref.run(out, dry_run=dry_run, tier=1, resume=resume, stop=stop,
                                budget_s=left() - tests_s, worker=worker, catalogue=catalogue)
        if not stop.is_set():
            print(f"\n== the GPU tests, python3 -m tools.gpu_tests (budget "
                  f"{min(tests_s, left()):.0f} s)", flush=True)
            code = gpu_tests.run(max(1.0, min(tests_s, left())), out / TESTS_LOG,
                                 argv=tests_argv, stop=stop)
        if not stop.is_set() and left() >= _TIER_TWO_MIN_S:
            print(f"\n== tier two, in the {left():.0f} s left", flush=True)
            rows, archive = ref.run(out, dry_run=dry_run, resume=True, stop=stop,
                                    budget_s=left(), worker=worker, catalogue=catalogue,
                                    kept_note="tier one, above")
        return rows, archive, code
    finally:
        if own:
            worker.close()


def main(argv: list[str] | None = None) -> int:
    """Returns 0 when every tier-one part was recorded and the GPU tests passed, 1 otherwise,
    2 for bad arguments or without a GPU (unless ``--dry-run``), 128 + the signal's number
    after SIGTERM or SIGINT."""
    begun = time.monotonic()
    parser = argparse.ArgumentParser(prog="python3 -m tools.gpu_lease",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=results.writable_folder, default=None,
                        help=f"folder for the four files (default {OUT_DIR}, or {DRY_RUN_DIR} "
                             "for --dry-run)")
    parser.add_argument("--budget-s", type=float, default=DEFAULT_BUDGET_S,
                        help=f"seconds for everything (default {DEFAULT_BUDGET_S:g})")
    parser.add_argument("--tests-s", type=float, default=DEFAULT_TESTS_S,
                        help=f"seconds kept for the GPU tests (default {DEFAULT_TESTS_S:g})")
    parser.add_argument("--dry-run", action="store_true",
                        help="the same path on a CPU at tiny sizes (the GPU tests skip)")
    parser.add_argument("--resume", action="store_true",
                        help="keep what an earlier call recorded in --out")
    args = parser.parse_args(argv)
    if not args.dry_run and (reason := ref.gpu_refusal()):
        print(reason.replace("make gpu-reference", "make gpu-lease"), file=sys.stderr)
        return 2
    out = pathlib.Path(args.out) if args.out else (DRY_RUN_DIR if args.dry_run else OUT_DIR)
    with ref.stop_on_signals() as (stop, caught):
        try:
            rows, archive, code = lease(out, budget_s=args.budget_s - (time.monotonic() - begun),
                                        tests_s=args.tests_s, dry_run=args.dry_run,
                                        resume=args.resume, stop=stop)
        except ValueError as exc:
            parser.error(str(exc))
    print(f"\nGPU tests: {_tests_line(out / TESTS_LOG)} (exit status "
          f"{'none' if code is None else code}; log {out / TESTS_LOG})")
    ref.print_report(rows, out, archive)
    if caught:
        return 128 + caught[0]
    done = {"ok", "partial", "no GPU (dry run)"}
    tier_one = all(r["status"] in done for r in rows if int(r["tier"]) == 1)
    return 0 if tier_one and code == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
