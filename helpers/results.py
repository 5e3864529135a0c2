"""Reference measurements in ``results/``: CSV rows beside JSON metadata naming the machine.

Every file pair ``results/NAME.csv`` + ``results/NAME.json`` comes from a real run: the JSON
records the device (GPU, driver, CUDA), library versions, the command that made it and the date.
Notebooks load them to show GPU curves on machines without a GPU, labelled with that GPU.
``WORKBOOK_RESULTS`` names another folder to read and write instead (a test's, say).
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import datetime as _dt
import json
import os
import pathlib
import re
import sys
import tempfile

from helpers.device import backend

__all__ = ["PARTIAL", "REFUSED", "RESULTS_DIR", "Dataset", "Recorded", "save", "load", "find",
           "recorded", "slug"]

#: Exit status of a recording command that has nothing to measure on this machine (a GPU-only
#: command without a GPU), as distinct from a failure (1) and from bad arguments (2).
REFUSED = 3

#: Suffix of a file :func:`save` is still writing; it then replaces the real one whole.
PARTIAL = ".partial"

#: The repository's ``results/`` folder, or the folder the environment variable
#: ``WORKBOOK_RESULTS`` names.
RESULTS_DIR = pathlib.Path(os.environ.get("WORKBOOK_RESULTS")
                           or pathlib.Path(__file__).resolve().parent.parent / "results")


@dataclasses.dataclass
class Dataset:
    """One saved measurement: ``rows`` (list of dicts; numbers parsed) and ``meta`` (dict)."""

    name: str
    rows: list[dict]
    meta: dict

    @property
    def device(self) -> str:
        """The GPU (with its driver, where recorded) or CPU that made the measurement, for
        labels: ``"GPU: NVIDIA H100 80GB HBM3 (driver 550.54.15)"``, ``"CPU: ..."``."""
        env = self.meta.get("environment", {})
        if not env.get("gpu_name"):
            return f"CPU: {env.get('cpu_model', 'unknown')}"
        driver = env.get("driver_version")
        return f"GPU: {env['gpu_name']}" + (f" (driver {driver})" if driver else "")

    @property
    def date(self) -> str:
        """Date of the run (ISO 8601)."""
        return self.meta.get("date", "unknown date")

    @property
    def provenance(self) -> str:
        """Device, driver, CUDA and date in one line for notes:
        ``"GPU: NVIDIA H100 80GB HBM3 (driver 550.54.15, CUDA 12.4, 2026-01-02)"``."""
        env = self.meta.get("environment", {})
        if not env.get("gpu_name"):
            return f"{self.device} ({self.date[:10]})"
        parts = [f"driver {env['driver_version']}" if env.get("driver_version") else "",
                 f"CUDA {env['driver_cuda_version']}" if env.get("driver_cuda_version") else "",
                 self.date[:10]]
        return f"GPU: {env['gpu_name']} ({', '.join(p for p in parts if p)})"


def slug(text: str) -> str:
    """File-name-safe lower-case form of a device name: ``"NVIDIA H100 80GB HBM3"`` -> ``"nvidia-h100-80gb-hbm3"``."""
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def _cannot_create_in(folder: pathlib.Path) -> str | None:
    """Why no file can be created in ``folder``, found by creating (and at once deleting) a
    temporary one: permission bits do not stop root, but a read-only or special file system
    (``/proc``) does."""
    try:
        with tempfile.TemporaryFile(dir=folder):
            return None
    except OSError as exc:
        return f"no file can be created in {folder} ({exc.strerror or exc})"


def _unwritable(path: pathlib.Path, folder: bool) -> str | None:
    if path.exists():
        if folder and not path.is_dir():
            return "it exists and is not a folder"
        if not folder and path.is_dir():
            return "it is a folder, not a file"
        if not os.access(path, os.W_OK | (os.X_OK if folder else 0)):
            return "permission denied"
        if folder:
            return _cannot_create_in(path)
        try:
            with open(path, "ab"):  # opened for appending: nothing written, nothing truncated
                return None
        except OSError as exc:
            return f"it cannot be opened for writing ({exc.strerror or exc})"
    ancestor = path.parent
    while not ancestor.exists():
        ancestor = ancestor.parent
    if not ancestor.is_dir():
        return f"{ancestor} is not a folder"
    if not os.access(ancestor, os.W_OK | os.X_OK):
        return f"no permission to create it in {ancestor}"
    return _cannot_create_in(ancestor)


def writable_folder(path: str) -> pathlib.Path:
    """``path`` as a folder results can be saved to (created later by :func:`save`).

    For an ``--out FOLDER`` option (``type=writable_folder``), so that a command refuses an
    unwritable folder before it measures anything, not after.

    Raises:
        argparse.ArgumentTypeError: the path is a file, lies under a file, or cannot be
            written; the message names the path and the reason.
    """
    p = pathlib.Path(path).expanduser()
    reason = _unwritable(p, folder=True)
    if reason:
        raise argparse.ArgumentTypeError(f"cannot save results to {path!r}: {reason}")
    return p


def writable_file(path: str) -> pathlib.Path:
    """``path`` as a file that can be written (its folder is created later if missing).

    For an ``--out FILE`` option; see :func:`writable_folder`.

    Raises:
        argparse.ArgumentTypeError: as :func:`writable_folder`, or the path is a folder.
    """
    p = pathlib.Path(path).expanduser()
    reason = _unwritable(p, folder=False)
    if reason:
        raise argparse.ArgumentTypeError(f"cannot write {path!r}: {reason}")
    return p


def save(name: str, rows: list[dict], *, command: str | None = None,
         directory: pathlib.Path | str | None = None,
         extra: dict | None = None) -> tuple[pathlib.Path, pathlib.Path]:
    """Write rows to ``NAME.csv`` and the environment to ``NAME.json``.

    Args:
        name: file stem, e.g. ``"01_throughput_nvidia-h100-80gb-hbm3"``.
        rows: dicts with the same keys; at least one.
        command: what produced them (default: this process's command line).
        directory: default :data:`RESULTS_DIR`.
        extra: more fields for the JSON (e.g. a sweep's preset); they may not replace ``name``,
            ``date``, ``command``, ``rows`` or ``environment``.

    Returns:
        The two paths written.

    Raises:
        ValueError: no rows, rows with different keys, or ``extra`` naming a reserved field.
    """
    if not rows:
        raise ValueError("rows must not be empty")
    reserved = {"name", "date", "command", "rows", "environment"} & set(extra or {})
    if reserved:
        raise ValueError(f"extra may not set {sorted(reserved)}")
    keys = list(rows[0])
    if any(list(r) != keys for r in rows):
        raise ValueError("all rows must have the same keys in the same order")
    out = pathlib.Path(directory) if directory else RESULTS_DIR
    out.mkdir(parents=True, exist_ok=True)
    csv_path, json_path = out / f"{name}.csv", out / f"{name}.json"
    partial = out / f"{name}.csv{PARTIAL}"   # each file replaced whole: never read half-written
    with open(partial, "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=keys)
        writer.writeheader()
        writer.writerows(rows)
    os.replace(partial, csv_path)
    meta = {
        "name": name,
        "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "command": command or " ".join(sys.argv),
        "rows": len(rows),
        **(extra or {}),
        "environment": backend.info().as_dict(),
    }
    partial = out / f"{name}.json{PARTIAL}"
    partial.write_text(json.dumps(meta, indent=2) + "\n")
    os.replace(partial, json_path)
    return csv_path, json_path


def _parse(value: str):
    for cast in (int, float):
        try:
            return cast(value)
        except ValueError:
            pass
    return value


def load(name: str, directory: pathlib.Path | str | None = None) -> Dataset:
    """Read ``NAME.csv`` and ``NAME.json``.

    Raises:
        FileNotFoundError: either file is missing.
    """
    base = pathlib.Path(directory) if directory else RESULTS_DIR
    with open(base / f"{name}.csv", newline="") as fh:
        rows = [{k: _parse(v) for k, v in row.items()} for row in csv.DictReader(fh)]
    meta = json.loads((base / f"{name}.json").read_text())
    return Dataset(name, rows, meta)


def find(prefix: str, directory: pathlib.Path | str | None = None) -> list[Dataset]:
    """Every dataset whose name starts with ``prefix`` and has both files, sorted by name."""
    base = pathlib.Path(directory) if directory else RESULTS_DIR
    if not base.is_dir():
        return []
    names = sorted(p.stem for p in base.glob(f"{prefix}*.csv") if p.with_suffix(".json").exists())
    return [load(n, base) for n in names]


@dataclasses.dataclass(frozen=True)
class Recorded:
    """What ``results/`` holds for one experiment: its rows, labelled, and how to record more.

    Attributes:
        rows: the matching rows of every dataset, numbers parsed, each with ``source`` =
            ``"reference"`` and ``device`` = the device (GPU with its driver) and date that
            measured it: ``"<Dataset.device>, <YYYY-MM-DD>"``, or for a row measured on a CPU
            its own ``"CPU: ..., <YYYY-MM-DD>"``; and ``machine`` = the file's device and date
            (the GPU of the machine, where it has one), for rows measured side by side.
        datasets: the datasets they came from (their ``meta`` names GPU, driver, versions, date).
        command: the command that records this experiment (on a GPU machine).
    """

    rows: list[dict]
    datasets: list[Dataset]
    command: str

    def __bool__(self) -> bool:
        return bool(self.rows)

    @property
    def note(self) -> str:
        """One line for a learner: which devices (GPU, driver, CUDA) and dates the rows come
        from, or how to record them."""
        if not self.rows:
            return f"nothing recorded in results/ yet: run `{self.command}` on a GPU machine"
        made = set()
        for ds in self.datasets:
            day = ds.date[:10]
            if any(_on_gpu(r) and r["device"] == f"{ds.device}, {day}" for r in self.rows):
                made.add(ds.provenance)
            gpu = ds.meta.get("environment", {}).get("gpu_name")
            for label in {r["device"] for r in self.rows if not _on_gpu(r)}:
                cpu, date = label.rsplit(", ", 1)
                if date == day:
                    host = f"; a machine whose GPU is {gpu}" if gpu else ""
                    made.add(f"{cpu} ({date}{host})")
        return "recorded in results/ on " + "; ".join(sorted(made))


def _on_gpu(row: dict) -> bool:
    """A row measured on a GPU: ``device_kind == "cuda"``, or a ``device`` label that does not
    name a CPU; rows that say neither count as GPU rows."""
    if row.get("device_kind") not in (None, ""):
        return row["device_kind"] == "cuda"
    return not str(row.get("device", "")).startswith("CPU")


def _cpu_label(ds: Dataset, row: dict) -> str:
    """A CPU row's own device ("CPU: ..."), also in a file recorded on a GPU machine (whose
    :attr:`Dataset.device` names the GPU): the data-parallel ranks run on its CPU, say."""
    own = str(row.get("device") or "")
    return own if own.startswith("CPU") else \
        f"CPU: {ds.meta.get('environment', {}).get('cpu_model', 'unknown')}"


def recorded(prefix: str, command: str, *, gpu_only: bool = True,
             directory: pathlib.Path | str | None = None, **match) -> Recorded:
    """The one reader of ``results/`` for an experiment: the rows of every dataset named
    ``prefix*``, labelled with the device that made them.

    Args:
        prefix: the experiment's file-name prefix, e.g. ``"transfers_"``.
        command: the command that records it, quoted in :attr:`Recorded.note`.
        gpu_only: keep only rows measured on a GPU (``device_kind == "cuda"``, or a ``device``
            that is not ``"CPU: ..."``).
        directory: default :data:`RESULTS_DIR`.
        match: keep rows whose fields equal these values, e.g. ``experiment="bandwidth"``.

    Raises:
        ValueError: an empty prefix or command.
    """
    if not prefix or not command:
        raise ValueError("prefix and command must be non-empty")
    rows, used = [], []
    for ds in find(prefix, directory):
        picked = [dict(r, source="reference", machine=f"{ds.device}, {ds.date[:10]}",
                       device=f"{ds.device if _on_gpu(r) else _cpu_label(ds, r)}, {ds.date[:10]}")
                  for r in ds.rows
                  if all(r.get(k) == v for k, v in match.items())
                  and not (gpu_only and not _on_gpu(r))]
        if picked:
            rows.extend(picked)
            used.append(ds)
    return Recorded(rows, used, command)
