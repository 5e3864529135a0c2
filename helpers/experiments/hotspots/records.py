"""The GPU profiles of the hotspot experiment in ``results/hotspots_*``: read and written.

:func:`recorded` reads them back as :class:`helpers.experiments.layer_times.HotspotProfile`
(:class:`RecordedProfiles`, with a note naming their GPUs and dates, or :data:`COMMAND`);
:func:`save` writes GPU profiles, one row per network and layer type. Units: seconds.

Source: Li et al., ICPP 2016, IV-A, Figure 2.
"""

from __future__ import annotations

import dataclasses
import pathlib

from helpers import results
from helpers.device import backend
from helpers.experiments.layer_times import HotspotProfile

__all__ = ["COMMAND", "PREFIX", "RecordedProfiles", "recorded", "save"]

#: File-name prefix of this experiment's datasets in ``results/``.
PREFIX = "hotspots_"

#: The command that records the GPU profiles that :func:`recorded` reads (on a GPU machine).
COMMAND = "python -m helpers.experiments.hotspots --model all --save"


@dataclasses.dataclass(frozen=True)
class RecordedProfiles:
    """The GPU profiles in ``results/hotspots_*`` (from :func:`recorded`); true if any.

    Attributes:
        profiles: one :class:`helpers.experiments.layer_times.HotspotProfile` per network and
            run, ``source="reference"``, ``device_label`` the GPU and ``date`` the ISO date of
            the run (``detail`` is empty: only the groups are saved).
        note: one line for a learner: the GPUs and dates they come from, or the command
            (:data:`COMMAND`) that records them on a GPU machine.
    """

    profiles: list[HotspotProfile]
    note: str

    def __bool__(self) -> bool:
        return bool(self.profiles)


def recorded(*, directory: pathlib.Path | str | None = None) -> RecordedProfiles:
    """The GPU profiles recorded in ``results/`` by :data:`COMMAND` (or notebook 02 on a GPU),
    read through :func:`helpers.results.recorded` (rows with ``device_kind == "cuda"``).

    Args:
        directory: default :data:`helpers.results.RESULTS_DIR`.

    Returns:
        A :class:`RecordedProfiles` (no profiles, and a note naming :data:`COMMAND`, if nothing
        is recorded).
    """
    rec = results.recorded(PREFIX, COMMAND, directory=directory)
    # Each saved profile is a run of consecutive rows, one per group, of one device and model.
    runs: list[list[dict]] = []
    for r in rec.rows:
        run = runs[-1] if runs else None
        if (run is None or (r["device"], r["model"]) != (run[0]["device"], run[0]["model"])
                or any(x["group"] == r["group"] for x in run)):
            runs.append([r])
        else:
            run.append(r)
    profiles = []
    for run in runs:
        r0 = run[0]
        label, _, date = str(r0["device"]).rpartition(", ")
        profiles.append(HotspotProfile(
            model=str(r0["model"]), device="cuda", device_label=label,
            time_kind=str(r0["time_kind"]), batch=int(r0["batch"]),
            input_size=int(r0["input_size"]), iterations=int(r0["iterations"]),
            warmup=int(r0["warmup"]), seconds={r["group"]: float(r["seconds"]) for r in run},
            detail={}, total_s=float(r0["total_s"]), wall_s=float(r0["wall_s"]),
            threads=int(r0.get("threads") or 0), source="reference", date=date))
    return RecordedProfiles(profiles, rec.note)


def save(profiles: list[HotspotProfile], *, command: str,
         directory: pathlib.Path | str | None = None) -> tuple[pathlib.Path, pathlib.Path]:
    """Write GPU profiles to ``results/hotspots_<gpu>.csv`` + ``.json`` (one row per network
    and layer type; the JSON names the GPU, driver, library versions and date).

    Args:
        profiles: measured on a GPU (``device == "cuda"``). command: what produced them.
        directory: default :data:`helpers.results.RESULTS_DIR`.

    Returns:
        The two paths written.

    Raises:
        ValueError: no profiles, or a profile not measured on a GPU (``results/`` holds GPU
            measurements only).
    """
    if not profiles or any(p.device != "cuda" for p in profiles):
        raise ValueError("save needs profiles measured on a GPU (device 'cuda'): results/ holds "
                         "GPU measurements only")
    name = f"{PREFIX}{results.slug(backend.info().gpu_name or 'gpu')}"
    rows = [r for p in profiles for r in p.rows()]
    return results.save(name, rows, command=command, directory=directory)
