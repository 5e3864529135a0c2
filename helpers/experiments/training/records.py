"""Training throughput's results: the V100 review's numbers, GPU rows in ``results/``, tables.

:data:`REVIEW` quotes the review; :func:`recorded` reads the rows that
:mod:`helpers.experiments.training.throughput` saved as ``results/training_*`` on GPU machines
(:data:`COMMAND`), each labelled with its GPU and date; :func:`speedup_table` pairs each GPU with
the CPU of its own machine; :func:`format_table` prints rows. Images per second, percent.

Sources: the V100 review ("GPU vs CPU Deep Learning: Training Performance of Convolutional
Networks").
"""

from __future__ import annotations

import math
import textwrap
from collections.abc import Sequence

from helpers import results

__all__ = ["REVIEW", "PREFIX", "COMMAND", "EXPERIMENTS", "speedup_table", "recorded",
           "format_table"]

#: The V100 review's reported numbers: (what, value). Quoted, not measured here.
REVIEW: tuple[tuple[str, str], ...] = (
    ("more workers and a larger batch (small CNN, GPU)", "about 3x faster"),
    ("GPU utilisation with a small CNN", "0-10 % (the CPU input pipeline is the bottleneck)"),
    ("removing augmentation (GPU)", "425 -> 533 images/s"),
    ("128x128 inputs and one more conv block (GPU)", "425 -> 333 images/s"),
    ("deeper networks, GPU vs CPU", "about 4x, then about 23x, then about 100x faster"),
    ("CIFAR-10, batch 512, Tesla V100", "15,000-17,000 images/s at about 45 % utilisation"),
    ("CIFAR-10 on 16 CPU cores (2 x Xeon Silver 4110)", "about 210 images/s"),
    ("CIFAR-10 in a VirtualBox VM on a workstation", "about 90 images/s"),
)

#: File-name prefix of the training-throughput datasets in ``results/``.
PREFIX = "training_"

#: The command that records them, on a GPU machine.
COMMAND = "python -m helpers.experiments.training.throughput --save"

#: What a saved row's ``experiment`` can be (``"utilisation_trace"``: a trace's samples).
EXPERIMENTS = ("batch", "workers", "depth", "precision", "utilisation", "utilisation_trace")


def speedup_table(rows: Sequence[dict]) -> list[dict]:
    """GPU/CPU throughput ratio per model, each GPU compared with the CPU of its own machine.

    Rows are grouped by machine (``machine`` of :func:`recorded` rows; live rows, without it,
    are "this machine") and by model.

    Returns:
        One dict per (machine, model), this machine first, shallowest first: ``machine``,
        ``model``, ``depth``, ``cpu``/``gpu`` (device labels or ""), ``cpu_images_per_s``,
        ``gpu_images_per_s`` (NaN if not measured), ``speedup`` (gpu / cpu, NaN if either is
        missing), ``note`` (why a value is missing).

    Source: the V100 review's comparison of deeper networks (about 23x, then about 100x).
    """
    out: dict[tuple, dict] = {}
    for r in rows:
        key = (r.get("machine", "this machine"), r["model"])
        entry = out.setdefault(key, dict(
            machine=key[0], model=r["model"], depth=r["depth"], cpu="", gpu="",
            cpu_images_per_s=math.nan, gpu_images_per_s=math.nan, speedup=math.nan, note=""))
        kind = "gpu" if r["device_kind"] == "cuda" else "cpu"
        if r["status"] == "ok":
            entry[kind] = r["device"]
            entry[f"{kind}_images_per_s"] = float(r["images_per_s"])
        else:
            entry["note"] = f"{kind.upper()} {r['status']}"
    for e in out.values():
        if e["cpu_images_per_s"] > 0 and e["gpu_images_per_s"] > 0:
            e["speedup"] = e["gpu_images_per_s"] / e["cpu_images_per_s"]
    return sorted(out.values(),
                  key=lambda e: (e["machine"] != "this machine", e["machine"], e["depth"]))


def recorded(experiment: str, *, gpu_only: bool = True, directory=None) -> results.Recorded:
    """The measured rows of one experiment saved in ``results/training_*`` on GPU machines.

    Args:
        experiment: one of :data:`EXPERIMENTS` (``"utilisation_trace"``: the samples ``t_s``,
            ``gpu_util``, ``cpu_util`` of a trace).
        gpu_only: keep only the GPU rows; False keeps the same machines' CPU rows too (for
            same-machine speedups), with ``device`` = ``"CPU beside <machine>"`` and
            ``cpu_device`` = that CPU's own label (``"CPU: ... (16 cores)"``).
        directory: folder to read (default ``results/``).

    Returns:
        :class:`helpers.results.Recorded`: ``rows`` (numbers parsed; flags as the strings
        "True"/"False"), each with ``source="reference"`` and ``machine`` = the GPU and date that
        recorded it; ``note`` names them, or says to run :data:`COMMAND` on a GPU machine.

    Raises:
        ValueError: an unknown experiment.
    """
    if experiment not in EXPERIMENTS:
        raise ValueError(f"experiment must be one of {EXPERIMENTS}, got {experiment!r}")
    rec = results.recorded(PREFIX, COMMAND, gpu_only=gpu_only, directory=directory,
                           experiment=experiment)
    ok = [r for r in rec.rows if str(r.get("status", "ok")) == "ok"]
    gpu_machines = {r["machine"] for r in ok if r.get("device_kind") == "cuda"}
    rows = [r if r.get("device_kind") == "cuda" else
            dict(r, device=f"CPU beside {r['machine']}", cpu_device=r["device"].rsplit(", ", 1)[0])
            for r in ok if r["machine"] in gpu_machines]
    sets = [ds for ds in rec.datasets if ds.meta.get("environment", {}).get("gpu_name")]
    return results.Recorded(rows, sets if rows else [], rec.command)


def format_table(rows: Sequence[dict], columns: Sequence[str] = (
        "experiment", "model", "device_kind", "batch_size", "workers", "augment", "precision",
        "channels_last", "images_per_s", "wait_share", "gpu_util_mean", "status"),
        max_text: int = 40) -> str:
    """Plain-text table of rows, every cell whole: nothing is cut off.

    Numbers are rounded (NaN shows as ``-``). A text longer than ``max_text`` characters (a
    status that says why a row was not measured) is shown as a numbered note mark, ``[1]``, in
    its cell, and in full under the table (``[1] not measured: ...``, wrapped at 100 characters),
    once however many rows share it. So the columns stay narrow and every row fits on one line.

    Args:
        rows: result rows (dicts); a missing key shows as an empty cell.
        columns: the keys to show, in order.
        max_text: the longest text kept in its cell, >= 4 characters.

    Returns:
        The table's lines, then the notes, joined by newlines.

    Raises:
        ValueError: ``max_text < 4``.
    """
    if max_text < 4:
        raise ValueError(f"max_text must be >= 4 characters, got {max_text!r}")
    notes: dict[str, str] = {}

    def cell(v):
        if isinstance(v, float):
            if math.isnan(v):
                return "-"
            return f"{v:,.0f}" if abs(v) >= 100 else f"{v:.3g}"
        text = str(v)
        if len(text) <= max_text:
            return text
        return notes.setdefault(text, f"[{len(notes) + 1}]")

    table = [[cell(r.get(c, "")) for c in columns] for r in rows]
    widths = [max(len(c), *(len(t[i]) for t in table)) if table else len(c)
              for i, c in enumerate(columns)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(columns, widths)).rstrip(),
             "  ".join("-" * w for w in widths)]
    lines += ["  ".join(v.ljust(w) for v, w in zip(t, widths)).rstrip() for t in table]
    lines += [textwrap.fill(f"{mark} {text}", 100, subsequent_indent=" " * (len(mark) + 1))
              for text, mark in notes.items()]
    return "\n".join(lines)
