"""When one device is not enough: data and model parallelism on torch.distributed (notebook 11).

:func:`launch` starts W ranks with torchrun (``python -m torch.distributed.run``; gloo on CPU
processes, NCCL on GPUs), each running :mod:`helpers.experiments.parallel.ranks` on ResNet-20
and the bundled ``lfw_subset`` images, and returns their rows (:data:`ROW_KEYS`): images/s and
scaling efficiency against one rank, each step split into compute, waiting and gradient
all-reduce (``ddp``); two pipeline stages over M micro-batches and their idle share
(``pipeline``); all-reduce time and bandwidth over message sizes (``allreduce``). It refuses up
front what the machine cannot hold and stops every process it started on error or interrupt.
Seconds, bytes, GB/s (1e9 bytes/s). Command line: ``python -m helpers.experiments.parallel
[--ranks W...] [--device cpu|cuda|auto] [--save] [--out DIR] [--time-limit S]``.

Sources: the wiki guide to CNNs and GPUs ("Parallel computing"); Li et al., PyTorch
Distributed, VLDB 2020; Huang et al., GPipe, NeurIPS 2019; Amdahl, AFIPS 1967.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import pathlib
import signal
import subprocess
import sys
import tempfile
import time
import uuid

import torch

from helpers import results
from helpers.device import backend
from helpers.device.timing import device_label
from helpers.experiments.training import records as training_records
from helpers.experiments.training.learning import check_whole

try:
    import psutil
except ImportError:  # optional: a bare GPU server may lack it; /proc serves on Linux
    psutil = None

__all__ = ["PREFIX", "COMMAND", "ROW_KEYS", "EXPERIMENTS", "RANK_MEMORY_BYTES", "STARTUP_S",
           "usable_cores", "max_ranks", "refusal", "estimate_seconds", "launch", "measure",
           "amdahl", "ring_allreduce_seconds", "recorded", "format_table", "main"]

#: File-name prefix of the recorded results.
PREFIX = "parallel_"
#: The command that records them (on a machine with several GPUs, or many cores).
COMMAND = "python -m helpers.experiments.parallel --save"
#: Experiments :func:`launch` runs (``check`` also exists, for the tests).
EXPERIMENTS = ("ddp", "pipeline", "allreduce")
#: Memory one rank needs, bytes: a rank at the default sizes peaks near 0.8 GB resident (torch,
#: the images, the model, its activations, gloo), and torchrun about as much.
RANK_MEMORY_BYTES = 2**30
#: Seconds for torchrun and its ranks to start (each process imports torch), before any work.
STARTUP_S = 15.0
#: Training FLOP/s assumed for one CPU thread and one GPU, for :func:`estimate_seconds` only.
_ASSUMED_FLOPS = {"cpu": 5e9, "cuda": 5e12}
#: ResNet-20's forward FLOPs per 32 x 32 image (helpers.networks.training_cnns.forward_flops).
_RESNET20_FLOPS_32 = 81.1e6

#: Keys of every row, in order: each experiment fills its own and leaves the others NaN.
ROW_KEYS = ("experiment", "device_kind", "device", "backend", "model", "ranks",
            "threads_per_rank", "batch_per_rank", "global_batch", "microbatches",
            "message_bytes", "step_s", "images_per_s", "alone_step_s", "alone_images_per_s",
            "speedup", "efficiency", "compute_s", "wait_s", "allreduce_s", "split_step_s",
            "compute_s_max", "stage0_busy_s", "stage1_busy_s", "idle_share", "bubble_theory",
            "loss", "unsplit_loss", "unsplit_step_s", "stage0_bytes", "stage1_bytes",
            "algbw_gbps", "busbw_gbps", "copy_gbps", "status")

_ROOT = pathlib.Path(__file__).resolve().parents[3]


def usable_cores() -> int:
    """CPU cores this process may run on (its affinity mask where the OS has one)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # macOS, Windows
        return os.cpu_count() or 1


def max_ranks(device: str = "cpu", threads: int = 1) -> int:
    """The most ranks this machine holds: one per ``threads`` cores on the CPU, one per GPU
    (``torch.cuda.device_count()``) for ``"cuda"``; memory is checked by :func:`refusal`."""
    if device == "cuda":
        return torch.cuda.device_count() if torch.cuda.is_available() else 0
    return max(1, usable_cores() // threads)


def refusal(ranks: int, device: str = "cpu", experiments=("ddp",), *,
            threads: int = 1) -> str | None:
    """Why ``ranks`` ranks of ``experiments`` cannot run here, or None.

    A rank needs ``threads`` cores of its own on the CPU (more ranks than cores only time-share
    the cores, and measure that), a GPU of its own on ``"cuda"``, and :data:`RANK_MEMORY_BYTES`
    of available memory; ``pipeline`` has exactly two stages, so two ranks.
    """
    cap = max_ranks(device, threads)
    if ranks > cap:
        what = (f"{cap} GPU(s) torch can see" if device == "cuda" else
                f"{usable_cores()} CPU cores at {threads} thread(s) per rank")
        return (f"{ranks} ranks refused: this machine holds at most {cap} ({what}; one "
                f"{'GPU' if device == 'cuda' else 'set of cores'} per rank)")
    need, free = (ranks + 1) * RANK_MEMORY_BYTES, _available_memory()
    if free is not None and need > free:
        return (f"{ranks} ranks refused: they need about {need / 2**30:.1f} GiB of memory "
                f"(torchrun + {ranks} x {RANK_MEMORY_BYTES / 2**30:.2f} GiB), "
                f"{free / 2**30:.1f} GiB is available")
    if "pipeline" in experiments and ranks != 2:
        return f"the pipeline experiment has two stages, so needs ranks=2, got {ranks}"
    return None


def estimate_seconds(experiments, ranks: int, *, device: str = "cpu", batch: int = 16,
                     steps: int = 5, warmup: int = 2, microbatches=(1, 2, 4), sizes=(4096,),
                     seconds_per_size: float = 0.3, image_size: int = 32) -> float:
    """A rough wall time (seconds) of one :func:`launch`: :data:`STARTUP_S` plus the training
    steps at an assumed rate (the ``ddp`` experiment runs three passes of ``warmup + steps``,
    ``pipeline`` one per micro-batch count plus the stages alone) plus the all-reduce sizes."""
    step = 3 * _RESNET20_FLOPS_32 * (image_size / 32) ** 2 * batch / _ASSUMED_FLOPS[device]
    total = STARTUP_S
    if "ddp" in experiments or "check" in experiments:
        total += 3 * (warmup + steps) * step
    if "pipeline" in experiments:
        total += len(microbatches) * (warmup + steps + steps // 2 + 3) * step
    if "allreduce" in experiments:
        total += len(sizes) * (seconds_per_size + 0.1)
    return total


def _available_memory() -> int | None:
    """Bytes of memory available to new processes (None where it cannot be read)."""
    if psutil is not None:
        return psutil.virtual_memory().available
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def _descendants(pid: int) -> set[int]:
    """Process ids of every descendant of ``pid`` (psutil, or /proc on Linux)."""
    if psutil is not None:
        try:
            return {p.pid for p in psutil.Process(pid).children(recursive=True)}
        except psutil.Error:
            return set()
    parent = {}
    for d in os.listdir("/proc") if os.path.isdir("/proc") else ():
        try:
            with open(f"/proc/{d}/stat") as fh:
                parent[int(d)] = int(fh.read().rsplit(")", 1)[1].split()[1])
        except (ValueError, OSError, IndexError):
            continue
    found, todo = set(), [pid]
    while todo:
        here = todo.pop()
        kids = [c for c, pp in parent.items() if pp == here]
        found.update(kids)
        todo += kids
    return found


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie has finished; only its parent's wait is missing
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return True


def _stop(proc: subprocess.Popen, seen: set[int], grace_s: float = 10.0) -> None:
    """Stop torchrun and every rank it started: SIGTERM to torchrun (it stops its ranks, each
    in its own session), then SIGKILL to whatever is left after ``grace_s``."""
    seen |= _descendants(proc.pid)
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    end = time.monotonic() + grace_s
    while any(_alive(p) for p in seen) and time.monotonic() < end:
        time.sleep(0.1)
    for p in seen:
        if _alive(p):
            try:
                os.kill(p, signal.SIGKILL)
            except OSError:
                pass
    end = time.monotonic() + 5
    while any(_alive(p) for p in seen) and time.monotonic() < end:
        time.sleep(0.1)


def _start(cmd: list[str], log, env: dict) -> subprocess.Popen:
    """Start torchrun in a session of its own, its output to ``log``."""
    return subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=_ROOT,
                            start_new_session=True)


def failure_cause(lines) -> str | None:
    """The line of a torchrun log that says why a rank failed, or None: the last Python error
    (``...Error: ...``), else the C++ runtime's abort (``terminate called ...``, ``Fatal Python
    error``, which can follow a Python error as the process dies); never torchrun's own
    ``ChildFailedError`` report, which names only the signal."""
    lines = [ln.strip() for ln in lines if "ChildFailedError" not in ln]
    python = [ln for ln in lines if "Error" in ln and not ln.startswith("Fatal Python error")]
    aborts = [ln for ln in lines if ln.startswith(("terminate called", "Fatal Python error"))]
    return (python or aborts or [None])[-1]


def _row(**kw) -> dict:
    row = dict.fromkeys(ROW_KEYS, math.nan)
    row.update({k: v for k, v in kw.items() if k in row})
    return row


def launch(experiments=("ddp",), ranks: int = 2, *, device: str = "cpu", batch: int = 16,
           steps: int = 5, warmup: int = 2, threads: int = 1, image_size: int = 32,
           microbatches=(1, 2, 4), split_at: int = 4, sizes=(4096, 2**20),
           seconds_per_size: float = 0.3, timeout_s: float | None = None,
           workdir: str | os.PathLike | None = None, fail_rank: int = -1, seed: int = 0,
           run_id: str | None = None) -> list[dict]:
    """Run ``experiments`` on ``ranks`` ranks under torchrun, in a subprocess; return the rows.

    Args:
        experiments: names from :data:`EXPERIMENTS` (or ``"check"``), run in turn by the same
            ranks. ranks: W, in [1, :func:`max_ranks`]. device: ``"cpu"`` (gloo) or ``"cuda"``
            (NCCL, one GPU per rank).
        batch: images per rank per step (``ddp``, ``check``; weak scaling: the global batch is
            W x batch) or per step (``pipeline``, a multiple of every micro-batch count).
        steps, warmup: timed and untimed steps. threads: torch threads per rank.
        image_size: side S of the NCHW images (``lfw_subset`` upsampled), in [8, 128].
        microbatches: M values of ``pipeline``. split_at: ResNet-20 blocks in stage 0, [1, 8].
        sizes: all-reduce message sizes, bytes. seconds_per_size: timing per size.
        timeout_s: stop everything past this many seconds (default: 3 x the estimate + 60).
        workdir: folder for the rank's files (kept); default a temporary folder (removed).
        fail_rank: a rank that raises after joining the group (to test the clean-up).
        run_id: a tag placed on every rank's command line.

    Returns:
        Rows with :data:`ROW_KEYS` (device, backend, model and threads filled in).

    Raises:
        ValueError: a bad argument, or a rank count this machine cannot hold (the reason and
            the estimate), before anything starts.
        RuntimeError: a rank failed (the message ends with the ranks' last output lines).
        TimeoutError: past ``timeout_s``; every process was stopped first.
    """
    experiments = [experiments] if isinstance(experiments, str) else list(experiments)
    bad = [e for e in experiments if e not in (*EXPERIMENTS, "check")]
    if not experiments or bad:
        raise ValueError(f"experiments must be names from {EXPERIMENTS}, got {experiments!r}")
    if device not in ("cpu", "cuda"):
        raise ValueError(f"device must be 'cpu' or 'cuda', got {device!r}")
    check_whole("ranks", ranks, 1, 1024)
    for name, v, lo, hi in (("batch", batch, 1, 4096), ("steps", steps, 1, 10_000),
                            ("warmup", warmup, 0, 1000), ("threads", threads, 1, 256),
                            ("image_size", image_size, 8, 128), ("split_at", split_at, 1, 8)):
        check_whole(name, v, lo, hi)
    for m in microbatches:
        check_whole("microbatches", m, 1, 1024)
        if "pipeline" in experiments and batch % m:
            raise ValueError(f"batch ({batch}) must be a multiple of every micro-batch count, "
                             f"got microbatches={list(microbatches)}")
    for s in sizes:
        check_whole("sizes", s, 4, 2**31)
    reason = refusal(ranks, device, experiments, threads=threads)
    if reason:
        raise ValueError(reason)
    opts = dict(device=device, batch=batch, steps=steps, warmup=warmup,
                microbatches=microbatches, sizes=sizes, seconds_per_size=seconds_per_size,
                image_size=image_size)
    if timeout_s is None:
        timeout_s = 3 * estimate_seconds(experiments, ranks, **opts) + 60
    run_id = run_id or uuid.uuid4().hex[:12]
    with tempfile.TemporaryDirectory(prefix="parallel-") as tmp:
        folder = pathlib.Path(workdir or tmp)
        folder.mkdir(parents=True, exist_ok=True)
        result, log_path = folder / f"rows-{run_id}.json", folder / f"ranks-{run_id}.log"
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nnodes", "1",
               "--nproc-per-node", str(ranks), "-m", "helpers.experiments.parallel.ranks",
               "--experiments", *experiments, "--result", str(result), "--device", device,
               "--batch", str(batch), "--steps", str(steps), "--warmup", str(warmup),
               "--threads", str(threads), "--image-size", str(image_size),
               "--split-at", str(split_at), "--microbatches", *map(str, microbatches),
               "--sizes", *map(str, sizes), "--seconds-per-size", str(seconds_per_size),
               "--timeout", str(max(30.0, timeout_s)), "--fail-rank", str(fail_rank),
               "--seed", str(seed), "--run-id", run_id]
        env = dict(os.environ, OMP_NUM_THREADS=str(threads), PYTHONUNBUFFERED="1",
                   PYTHONPATH=os.pathsep.join([str(_ROOT), os.environ.get("PYTHONPATH", "")]))
        seen: set[int] = set()
        with open(log_path, "w") as log:
            proc = _start(cmd, log, env)
            deadline = time.monotonic() + timeout_s
            try:
                while proc.poll() is None:
                    seen |= _descendants(proc.pid)
                    if time.monotonic() > deadline:
                        tail = log_path.read_text(errors="replace").splitlines()[-8:]
                        raise TimeoutError(f"the {ranks} ranks ran past {timeout_s:.0f} s and "
                                           "were stopped; last lines:\n" + "\n".join(tail))
                    time.sleep(0.2)
            finally:
                _stop(proc, seen)
        if proc.returncode != 0 or not result.exists():
            tail = log_path.read_text(errors="replace").splitlines()
            cause = failure_cause(tail)
            raise RuntimeError(
                f"a rank failed (torchrun exit status {proc.returncode}); "
                + (f"cause: {cause}; " if cause else "")
                + "last lines:\n" + "\n".join(tail[-12:]))
        data = json.loads(result.read_text())
    label = device_label(device)
    return [_row(device_kind=device, device=label, backend="nccl" if device == "cuda" else "gloo",
                 model="resnet20", threads_per_rank=threads, status="ok", **r)
            for r in data["rows"]]


def amdahl(parallel_share: float, workers) -> float:
    """Amdahl's law: the speedup on ``workers`` workers when ``parallel_share`` (in [0, 1]) of
    the one-worker time divides among them and the rest does not.

    Raises:
        ValueError: a share outside [0, 1] or fewer than one worker.
    """
    if not 0.0 <= parallel_share <= 1.0:
        raise ValueError(f"parallel_share must be in [0, 1], got {parallel_share!r}")
    if workers < 1:
        raise ValueError(f"workers must be at least 1, got {workers!r}")
    return 1.0 / ((1.0 - parallel_share) + parallel_share / workers)


def scaled_speedup(compute_s: float, overhead_s: float, workers) -> float:
    """Weak scaling's speedup when each of ``workers`` ranks computes its own share in
    ``compute_s`` and then pays ``overhead_s`` (waiting, all-reduce) that one rank alone never
    pays: ``W t_c / (t_c + t_o)``, one rank doing the W ranks' work in W t_c. Gustafson's
    ``W - s (W - 1)`` is the case where the part that does not divide is work one rank does too.

    Raises:
        ValueError: ``compute_s`` not > 0, ``overhead_s`` < 0, or fewer than one worker.
    """
    if not compute_s > 0:
        raise ValueError(f"compute_s must be > 0 seconds, got {compute_s!r}")
    if not overhead_s >= 0:
        raise ValueError(f"overhead_s must be >= 0 seconds, got {overhead_s!r}")
    if workers < 1:
        raise ValueError(f"workers must be at least 1, got {workers!r}")
    return workers * compute_s / (compute_s + overhead_s)


def ring_allreduce_seconds(nbytes: float, ranks: int, bandwidth_gbps: float,
                           latency_s: float) -> float:
    """Time of a ring all-reduce of ``nbytes`` over ``ranks`` ranks: 2 (W - 1) steps, each
    sending ``nbytes / W`` over a link of ``bandwidth_gbps`` (1e9 bytes/s) after ``latency_s``.
    Each rank sends and receives ``2 (W - 1) / W`` of the message. One rank: 0. Source:
    Patarasuk and Yuan, J. Parallel Distrib. Comput. 69(2), 2009."""
    if ranks <= 1:
        return 0.0
    return 2 * (ranks - 1) * (latency_s + nbytes / ranks / (bandwidth_gbps * 1e9))


def measure(ranks=(1, 2), *, device: str = "cpu", allreduce_sizes=None, progress: bool = True,
            deadline: float | None = None, **opts) -> list[dict]:
    """Every experiment at each W in ``ranks``: ``ddp`` and ``allreduce`` at every W,
    ``pipeline`` where W = 2; a W the machine cannot hold gets a row saying why, as does a W
    not started before ``deadline`` (``time.monotonic()``). ``opts`` go to :func:`launch`."""
    rows = []
    sizes = allreduce_sizes or [2**k for k in range(10, 23, 2)]
    for w in ranks:
        exps = ["ddp"] + (["pipeline"] if w == 2 else []) + (["allreduce"] if w > 1 else [])
        reason = refusal(w, device, exps, threads=opts.get("threads", 1))
        if reason is None and deadline is not None and time.monotonic() > deadline:
            reason = "skipped: time limit"
        if reason:
            rows.append(_row(experiment="ddp", device_kind=device, device=device_label(device),
                             ranks=w, status=reason))
            continue
        if progress:
            print(f"{w} rank(s) on {device_label(device)}: {', '.join(exps)} ...", flush=True)
        rows += launch(exps, w, device=device, sizes=sizes, **opts)
    return rows


def recorded(directory=None) -> results.Recorded:
    """What ``results/`` holds (every device: CPU ranks on a large machine count too), each
    row labelled with the machine and date that measured it."""
    return results.recorded(PREFIX, COMMAND, gpu_only=False, directory=directory)


def format_table(rows, columns=("experiment", "ranks", "microbatches", "message_bytes",
                                "images_per_s", "speedup", "efficiency", "compute_s", "wait_s",
                                "allreduce_s", "idle_share", "busbw_gbps", "status")) -> str:
    """Rows as a plain-text table: :func:`helpers.experiments.training.records.format_table`
    with this experiment's columns (a long status shown as a note under the table)."""
    return training_records.format_table(rows, columns)


def main(argv: list[str] | None = None) -> int:
    """``python -m helpers.experiments.parallel``: measure at each ``--ranks`` W, print a table,
    and with ``--save`` write ``<out>/parallel_<device>.csv``/``.json``. ``--device auto``
    takes NCCL over the GPUs when there are at least two, else gloo over CPU processes.
    Returns 0, or 1 when no W could run here."""
    start = time.monotonic()
    p = argparse.ArgumentParser(prog="python -m helpers.experiments.parallel",
                                description="Data and model parallelism with torch.distributed: "
                                            "DDP scaling, pipeline bubble, all-reduce bandwidth.")
    p.add_argument("--ranks", type=int, nargs="+", default=None,
                   help="world sizes W (default 1 2 4 8 ... up to what the machine holds)")
    p.add_argument("--device", default="auto", choices=("auto", "cpu", "cuda"))
    p.add_argument("--batch", type=int, default=16, help="images per rank per step")
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--quick", action="store_true", help="W = 1 and 2, 2 steps (a smoke test)")
    p.add_argument("--save", action="store_true", help="write <out>/parallel_<device>.csv/.json")
    p.add_argument("--out", type=results.writable_folder, default=None,
                   help="folder --save writes to (default results/)")
    p.add_argument("--time-limit", type=float, default=None, dest="time_limit",
                   help="seconds after which no further W is started")
    args = p.parse_args(argv)
    if args.time_limit is not None and not args.time_limit > 0:
        p.error(f"--time-limit must be > 0 seconds, got {args.time_limit:g}")
    device = args.device
    if device == "auto":
        device = "cuda" if max_ranks("cuda") >= 2 else "cpu"
    top = max(1, max_ranks(device))
    ranks = args.ranks or ([1, 2] if args.quick else
                           sorted({w for w in (1, 2, 4, 8, 16, 32) if w <= top} | {top}))
    steps = 2 if args.quick else args.steps
    print(f"device: {device_label(device)}; ranks: {ranks}; "
          f"{'NCCL' if device == 'cuda' else 'gloo'}")
    deadline = None if args.time_limit is None else start + args.time_limit
    try:
        rows = measure(ranks, device=device, batch=args.batch, steps=steps,
                       warmup=1 if args.quick else 2, deadline=deadline,
                       allreduce_sizes=[2**10, 2**16, 2**20] if args.quick else None)
    except ValueError as exc:
        print(f"nothing measured: {exc}")
        return 1
    print(format_table(rows))
    if all(r["status"] != "ok" for r in rows):
        return 1
    if args.save:
        info = backend.info()
        name = info.gpu_name if device == "cuda" else info.cpu_model
        command = " ".join(["python -m helpers.experiments.parallel",
                            *(sys.argv[1:] if argv is None else argv)])
        print("wrote", *results.save(f"{PREFIX}{results.slug(name or device)}", rows,
                                     command=command, directory=args.out))
    return 0
