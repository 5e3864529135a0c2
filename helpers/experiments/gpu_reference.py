"""Record every GPU reference measurement in one command: ``make gpu-reference``.

``python -m helpers.experiments.gpu_reference`` runs each recording command of the workbook
(:data:`PARTS`) in its own process, within its time budget, writes the results and a summary
(``gpu_reference_<gpu>``) to ``results/``, packs them into one archive, and prints the headline
ratios last (:mod:`helpers.experiments.gpu_reference_summary`). A second run resumes: parts
recorded earlier are kept, failed or skipped ones run again. ``--dry-run`` runs the same path
on a CPU at tiny sizes into a scratch folder, never ``results/``. It needs only python3,
numpy, numba, numba-cuda and torch (psutil, tqdm, nvidia-ml-py, torchvision when present).
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import os
import pathlib
import subprocess
import sys
import tarfile
import threading
import time

from helpers import results
from helpers.device import backend
from helpers.experiments import gpu_reference_summary as summary

__all__ = [
    "ARCHIVE_LIMIT_BYTES",
    "DRY_RUN_DIR",
    "PARTS",
    "PREFIX",
    "Part",
    "gpu_refusal",
    "main",
    "plan",
    "run",
]

#: File-name prefix of the run's summary (one row per part) in the output folder.
PREFIX = "gpu_reference_"

#: The archive must come back from a remote machine: it stays under this size.
ARCHIVE_LIMIT_BYTES = 16 * 2**20

#: Where ``--dry-run`` writes unless told otherwise (never ``results/``).
DRY_RUN_DIR = pathlib.Path(__file__).resolve().parents[2] / "build" / "gpu-reference-dry-run"

_ROOT = pathlib.Path(__file__).resolve().parents[2]


@dataclasses.dataclass(frozen=True)
class Part:
    """One recording command and its time budget.

    Attributes:
        name: short name (``--parts`` takes these).
        what: one line for the summary.
        module: the command's module under ``helpers.experiments``.
        args: its arguments on a GPU; ``{out}``, ``{limit}`` and ``{slug}`` are filled in.
        dry_args: its arguments for ``--dry-run`` (tiny sizes on the CPU).
        budget_s: seconds it may take on an H100, start-up included.
        gpu_only: measures nothing without a GPU (the dry run expects its refusal, exit 1).
        time_limited: takes ``--time-limit`` and stops itself in time (else it is killed).
    """

    name: str
    what: str
    module: str
    args: tuple[str, ...]
    dry_args: tuple[str, ...]
    budget_s: float
    gpu_only: bool = False
    time_limited: bool = True


_OUT, _LIMIT = ("--out", "{out}"), ("--time-limit", "{limit}")

#: The parts, in the order they run: cheap and most read first, the long sweep last.
PARTS: tuple[Part, ...] = (
    Part("throughput", "notebook 01: GB/s and GFLOP/s sweeps, our tiled GEMM vs cuBLAS",
         "throughput", (*_OUT, "--devices", "cuda", *_LIMIT),
         (*_OUT, "--devices", "cpu", "--quick", *_LIMIT), 100),
    Part("conv-b128", "Table I, every strategy, forward and forward+backward, batch 128",
         "conv_bench", ("--batch", "128", "--device", "cuda", "--save", *_OUT, *_LIMIT),
         ("--quick", "--batch", "2", "--device", "cpu", "--save", *_OUT, *_LIMIT), 150),
    Part("conv-b1", "Table I, every strategy, forward and forward+backward, batch 1",
         "conv_bench", ("--batch", "1", "--device", "cuda", "--save", *_OUT, *_LIMIT),
         ("--quick", "--batch", "1", "--device", "cpu", "--save", *_OUT, *_LIMIT), 60),
    Part("kernel-resources", "notebook 07: our kernels' registers, shared memory, occupancy",
         "kernel_resources", ("--save", *_OUT), ("--save", *_OUT), 30, gpu_only=True,
         time_limited=False),
    Part("memory-access", "notebook 07: coalescing, bank conflicts, divergence (timed)",
         "memory_access", ("--save", *_OUT), ("--save", *_OUT), 45, gpu_only=True,
         time_limited=False),
    Part("transfers", "notebook 08: copy bandwidth, overlap, copy share (Figure 7)",
         "transfers", ("--save", *_OUT, *_LIMIT), ("--save", *_OUT, *_LIMIT), 75,
         gpu_only=True),
    Part("phases", "cuDNN's kernels per Table I layer; im2col and FFT steps (Figure 4)",
         "phases", ("--save", *_OUT), ("--quick", "--save", *_OUT), 40, time_limited=False),
    Part("hotspots", "notebook 02: time per layer type in four networks (Figure 2)",
         "hotspots", ("--model", "all", "--save", *_OUT, *_LIMIT),
         ("--model", "overfeat", "--device", "cpu", "--batch", "1", "--input", "71",
          "--iterations", "1", "--threads", "1", "--save", *_OUT, *_LIMIT), 120),
    Part("training", "notebook 09: training throughput, workers, depth, precision",
         "training_throughput", ("--save", *_OUT, *_LIMIT),
         ("--quick", "--save", *_OUT, *_LIMIT), 150),
    Part("precision", "notebook 10: GEMM and convolution in FP32, TF32, BF16, FP16: speed, error",
         "precision", ("--save", *_OUT, *_LIMIT), ("--save", *_OUT, *_LIMIT), 45,
         gpu_only=True),
    Part("algorithm-choice", "notebook 10: cuDNN's algorithm per Table I layer, ours beside it",
         "algorithm_choice", ("--device", "cuda", "--backward", "--strategies",
                              "im2col-gemm,fft,winograd", "--save", *_OUT, *_LIMIT),
         ("--device", "cuda", "--save", *_OUT, *_LIMIT), 60, gpu_only=True),
    Part("parallel", "notebook 11: DDP scaling over ranks, pipeline bubble, all-reduce bandwidth",
         "parallel", ("--save", *_OUT, *_LIMIT), ("--quick", "--ranks", "2", "--save", *_OUT,
                                                  *_LIMIT), 80),
    Part("sweep", "notebook 06: the study's sweeps (Figures 3 and 5), forward+backward",
         "sweep", ("--preset", "paper", "--device", "cuda", "--out",
                   "{out}/sweep_paper_{slug}.csv", *_LIMIT),
         ("--preset", "smoke", "--device", "cpu", "--out", "{out}/sweep_smoke_{slug}.csv",
          *_LIMIT), 240),
)

#: Budget of every part in a dry run (seconds): tiny sizes on a CPU.
_DRY_BUDGET_S = 90.0
#: Seconds a part's own time limit leaves for its start-up and saving.
_MARGIN_S = 20.0
#: A part still running this long after its budget is stopped.
_GRACE_S = 60.0


def gpu_refusal() -> str | None:
    """Why this machine cannot record GPU references (no GPU Numba can use), or None."""
    if backend.MODE == "gpu":
        return None
    return (f"make gpu-reference needs an NVIDIA GPU that Numba can use; here: "
            f"{backend.MODE_REASON}. Try the same path on this machine with --dry-run.")


def _numba_refusal() -> str | None:
    """On a GPU, why Numba cannot compile and launch a kernel there (a driver older than its
    PTX, NVVM missing...: :func:`helpers.device.backend.ptx_check`), or None. Checked once, in
    seconds, before any part: else each part that launches our kernels fails on its own."""
    problem = backend.ptx_check()
    return None if problem is None else (
        f"make gpu-reference stopped before any part: {problem}")


def _device_slug(dry_run: bool) -> str:
    info = backend.info()
    if dry_run:
        return "dry-run-" + results.slug(info.cpu_model or "cpu")
    return results.slug(info.gpu_name or "gpu")


def _fill(args: tuple[str, ...], out: pathlib.Path, limit: float, slug: str) -> list[str]:
    return [a.format(out=out, limit=f"{limit:g}", slug=slug) for a in args]


def plan(part: Part, out: pathlib.Path, slug: str, dry_run: bool,
         seconds_left: float) -> tuple[list[str] | None, float, str]:
    """The command line for ``part``, its time limit (s) and a note, or ``None`` and why not.

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
    args = _fill(part.dry_args if dry_run else part.args, out, limit, slug)
    return [sys.executable, "-m", f"helpers.experiments.{part.module}", *args], budget, note


def _snapshot(folder: pathlib.Path) -> dict[str, float]:
    return {p.name: p.stat().st_mtime for p in folder.glob("*") if p.suffix in (".csv", ".json")}


def _run_logged(cmd: list[str], log: pathlib.Path, timeout_s: float) -> tuple[int | None, str]:
    """Run ``cmd``, copying its output to this terminal and to ``log`` as it comes; stop it after
    ``timeout_s``. Returns (exit status or None if stopped, the last lines of its output)."""
    path = [str(_ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]
    env = dict(os.environ, PYTHONUNBUFFERED="1", PYTHONPATH=os.pathsep.join(path))
    tail: collections.deque[str] = collections.deque(maxlen=15)
    with open(log, "wb") as fh:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env,
                                cwd=_ROOT)

        def copy() -> None:
            for chunk in iter(lambda: os.read(proc.stdout.fileno(), 4096), b""):
                fh.write(chunk)
                sys.stdout.buffer.write(chunk)
                sys.stdout.flush()
                tail.extend(chunk.decode(errors="replace").replace("\r", "\n").splitlines())

        reader = threading.Thread(target=copy, daemon=True)
        reader.start()
        try:
            code = proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            code = None
        reader.join(timeout=10)
    lines = [line.strip() for line in tail if line.strip()]
    return code, " | ".join(lines[-3:])


def _part_row(part: Part, status: str, seconds: float, budget: float, code, files, note,
              out: pathlib.Path | None = None) -> dict:
    counts = summary.count_rows(files, out)
    return {"part": part.name, "what": part.what, "status": status,
            "seconds": round(seconds, 1), "budget_s": round(budget, 1),
            "exit_code": "" if code is None else code, "files": ";".join(files), **counts,
            "note": note}


def _previous(out: pathlib.Path, slug: str) -> dict[str, dict]:
    """Rows of an earlier run's summary whose part finished and whose files are all there."""
    try:
        ds = results.load(PREFIX + slug, out)
    except FileNotFoundError:
        return {}
    kept = {}
    for r in ds.rows:
        files = [f for f in str(r.get("files") or "").split(";") if f]
        if r["status"] in ("ok", "partial") and all((out / f).exists() for f in files):
            kept[r["part"]] = dict(r, files=";".join(files))
    return kept


def run(out: pathlib.Path, *, dry_run: bool = False, parts: list[str] | None = None,
        total_s: float = 1200.0, redo: bool = False) -> tuple[list[dict], pathlib.Path]:
    """Run the parts into ``out``; write the summary and the archive.

    Args:
        out: folder for every file (``results/``, or a scratch folder for a dry run).
        dry_run: tiny sizes on the CPU (the GPU-only parts are expected to refuse).
        parts: names from :data:`PARTS` (default all), run in :data:`PARTS`' order.
        total_s: the time all parts may take together (seconds).
        redo: run every part again, even those an earlier run in ``out`` recorded.

    Returns:
        (one summary row per part, the archive's path).

    Raises:
        ValueError: an unknown part, ``total_s <= 0``, or a dry run aimed at ``results/``.
    """
    names = [p.name for p in PARTS]
    unknown = sorted(set(parts or []) - set(names))
    if unknown:
        raise ValueError(f"parts must be among {names}, got {unknown}")
    if total_s <= 0:
        raise ValueError(f"total_s must be > 0, got {total_s}")
    out = pathlib.Path(out).resolve()
    if dry_run and out == results.RESULTS_DIR.resolve():
        raise ValueError("a dry run never writes to results/: give it a scratch folder")
    out.mkdir(parents=True, exist_ok=True)
    logs = out / f"{PREFIX}logs"
    logs.mkdir(exist_ok=True)
    slug = _device_slug(dry_run)
    earlier = {} if redo else _previous(out, slug)
    chosen = [p for p in PARTS if parts is None or p.name in parts]
    rows, start = [], time.monotonic()
    for n, part in enumerate(chosen, 1):
        head = f"[{n}/{len(chosen)}] {part.name}"
        if part.name in earlier:
            rows.append(dict(earlier[part.name], note="recorded by an earlier run, kept"))
            print(f"{head}: recorded by an earlier run ({earlier[part.name]['status']}), kept",
                  flush=True)
            continue
        cmd, budget, note = plan(part, out, slug, dry_run, total_s - (time.monotonic() - start))
        if cmd is None:
            rows.append(_part_row(part, "skipped", 0.0, budget, None, [], note))
            print(f"{head}: {note}", flush=True)
            continue
        print(f"{head}: {part.what}; budget {budget:.0f} s\n  $ {' '.join(cmd[1:])}", flush=True)
        before, t0 = _snapshot(out), time.monotonic()
        code, tail = _run_logged(cmd, logs / f"{part.name}.log", budget + _GRACE_S)
        seconds = time.monotonic() - t0
        after = _snapshot(out)
        files = sorted(f for f, m in after.items() if before.get(f) != m)
        status, why = summary.status_of(code, files, dry_run=dry_run, gpu_only=part.gpu_only,
                                        tail=tail)
        row = _part_row(part, status, seconds, budget, code, files,
                        "; ".join(filter(None, [note, why])), out)
        if status == "ok" and row["skipped_for_time"]:
            row["status"] = "partial"
        rows.append(row)
        print(f"{head}: {row['status']} in {seconds:.0f} s, {len(files)} files"
              + (f" ({row['note']})" if row["note"] else ""), flush=True)
    results.save(PREFIX + slug, rows, directory=out,
                 command="python -m helpers.experiments.gpu_reference " + " ".join(sys.argv[1:]),
                 extra={"dry_run": dry_run, "total_budget_s": total_s,
                        "headline": summary.headline(out, rows)})
    return rows, _archive(out, slug, rows)


def _archive(out: pathlib.Path, slug: str, rows: list[dict]) -> pathlib.Path:
    """Pack the summary, every part's files and logs into ``gpu_reference_<slug>.tar.gz``,
    named ``results/...`` inside so that ``tar -xzf`` at the repository's root restores them.

    Raises:
        RuntimeError: the archive is over :data:`ARCHIVE_LIMIT_BYTES`.
    """
    names = {f for r in rows for f in str(r["files"]).split(";") if f}
    names |= {f"{PREFIX}{slug}.csv", f"{PREFIX}{slug}.json"}
    path = out / f"{PREFIX}{slug}.tar.gz"
    with tarfile.open(path, "w:gz") as tar:
        for name in sorted(names):
            if (out / name).exists():
                tar.add(out / name, arcname=f"results/{name}")
        for log in sorted((out / f"{PREFIX}logs").glob("*.log")):
            tar.add(log, arcname=f"results/{PREFIX}logs/{log.name}")
    size = path.stat().st_size
    if size > ARCHIVE_LIMIT_BYTES:
        raise RuntimeError(f"the archive {path} is {size / 2**20:.1f} MiB, over the "
                           f"{ARCHIVE_LIMIT_BYTES / 2**20:.0f} MiB a remote run can bring back")
    return path


def main(argv: list[str] | None = None) -> int:
    """``python -m helpers.experiments.gpu_reference [--dry-run] [--out DIR] [--parts a,b]
    [--redo] [--minutes M] [--list]``. Returns 0 when every part ran (or was kept), 1 when a
    part failed or was skipped, 2 without a GPU (unless ``--dry-run``) or for bad arguments."""
    parser = argparse.ArgumentParser(prog="python -m helpers.experiments.gpu_reference",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--dry-run", action="store_true",
                        help="tiny sizes on the CPU into a scratch folder (never results/)")
    parser.add_argument("--out", type=results.writable_folder, default=None,
                        help=f"output folder (default results/, or {DRY_RUN_DIR} for --dry-run)")
    parser.add_argument("--parts", default=None,
                        help="comma-separated parts to run: " + ", ".join(p.name for p in PARTS))
    parser.add_argument("--redo", action="store_true",
                        help="run every part again, even those recorded by an earlier run")
    parser.add_argument("--minutes", type=float, default=22.0,
                        help="time for all parts together (default 22)")
    parser.add_argument("--list", action="store_true", help="print the parts and exit")
    args = parser.parse_args(argv)
    if args.list:
        for p in PARTS:
            print(f"{p.name:<18}{p.budget_s:>5.0f} s  {p.what}\n{'':<25}python -m "
                  f"helpers.experiments.{p.module} {' '.join(p.args)}")
        print(f"{'total':<18}{sum(p.budget_s for p in PARTS):>5.0f} s")
        return 0
    if not args.dry_run:
        reason = gpu_refusal() or _numba_refusal()
        if reason:
            print(reason, file=sys.stderr)
            return 2
    out = pathlib.Path(args.out) if args.out else (DRY_RUN_DIR if args.dry_run
                                                   else results.RESULTS_DIR)
    try:
        rows, archive = run(out, dry_run=args.dry_run, total_s=args.minutes * 60,
                            redo=args.redo,
                            parts=args.parts.split(",") if args.parts else None)
    except ValueError as exc:
        parser.error(str(exc))
    print()
    print(summary.format_summary(rows, out))
    print(f"\narchive: {archive} ({archive.stat().st_size / 2**10:,.0f} KiB): "
          "`tar -xzf` it at the repository's root to restore results/")
    done = {"ok", "partial", "no GPU (dry run)"}
    return 0 if all(r["status"] in done for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
