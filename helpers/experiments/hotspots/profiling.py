"""Profiling the study's four networks in training, the shares by layer type, and the command
line.

:func:`measure` trains one network of :mod:`helpers.networks.figure2` for a few iterations under
``torch.profiler`` (:mod:`helpers.experiments.layer_times`), after :func:`.budget.refusal`;
:func:`profile_models` runs several until a deadline; :func:`format_table` and
:func:`compare_with_study` set the shares beside the study's Figure 2; :func:`main` is
``python -m helpers.experiments.hotspots``. Units: seconds; input size in pixels (height =
width); batch in images.

Source: Li et al., "Performance Analysis of GPU-based Convolutional Neural Networks", ICPP 2016,
IV-A, Figure 2.
"""

from __future__ import annotations

import argparse
import sys
import time

from helpers import results
from helpers.device import backend
from helpers.device.progress import time_limit_status, time_up
from helpers.experiments.hotspots.budget import estimate, refusal
from helpers.experiments.hotspots.records import PREFIX, recorded, save
from helpers.experiments.layer_costs import GROUPS
from helpers.experiments.layer_times import HotspotProfile, profile_module
from helpers.networks import figure2
from helpers.networks.figure2 import MODELS, NAMES, NATIVE_INPUT
from helpers.paper import STUDY_FIGURE2

__all__ = ["CPU_DEFAULTS", "GPU_DEFAULTS", "compare_with_study", "format_table", "main",
           "measure", "profile_models"]

#: Default run on a CPU: small enough that all four networks take well under a minute on a
#: 2-core machine (our choice; the study gives no batch size for Figure 2). One thread:
#: on a machine shared with other work, threads that wait for each other inflate the time of
#: small operators (pooling, ReLU) far beyond their cost.
CPU_DEFAULTS = {"batch": 4, "input_size": 128, "iterations": 2, "threads": 1}

#: Default run on a GPU: batch 64, each network's native input size, 10 iterations as the study.
GPU_DEFAULTS = {"batch": 64, "input_size": None, "iterations": 10, "threads": None}


def measure(model_name: str, batch: int, input_size: int, iterations: int,
            device: str = "cpu", warmup: int = 1, budget_s: float = 120.0,
            seed: int = 0, threads: int | None = None) -> HotspotProfile:
    """Profile training iterations of one of the study's networks and group the time by layer
    type (:func:`helpers.experiments.layer_times.profile_module`, after :func:`refusal`).

    Each iteration: ``zero_grad``, forward pass, cross-entropy loss against random labels over
    1000 classes, backward pass, SGD step, on random float32 images ``(batch, 3, input_size,
    input_size)``; ``warmup`` iterations first, unrecorded.

    Args:
        model_name: a key of :data:`helpers.networks.figure2.MODELS`.
        batch: images per iteration, 1 to 65,536.
        input_size: height = width in pixels (the network's
            :data:`helpers.networks.figure2.MIN_INPUT` to 4096; native sizes are
            :data:`helpers.networks.figure2.NATIVE_INPUT`).
        iterations: profiled training iterations, 1 to 10,000 (the study used 10).
        device: ``"cpu"`` or ``"cuda"``.
        warmup: iterations run before the profiled ones, 0 to 100.
        budget_s: refuse (without running) a run estimated to take longer (seconds).
        seed: seed of the weights and the random images and labels.
        threads: CPU threads for torch during the run (1 to 1024; restored afterwards), or
            None to keep torch's setting. One thread keeps small operators' times honest on a
            machine shared with other work, where threads wait for each other.

    Returns:
        A :class:`helpers.experiments.layer_times.HotspotProfile` (seconds and shares per
        layer type, the device, batch, input size, iterations, profiled and wall time).

    Raises:
        ValueError: bad arguments (each names the parameter and its valid range), or the run is
            refused (:func:`refusal`: no GPU for ``device="cuda"``, too slow, too large).

    Source: Li et al., ICPP 2016, Figure 2 (10 training iterations, forward + backward).
    """
    reason = refusal(model_name, batch, input_size, iterations, device, warmup, budget_s, threads)
    if reason:
        raise ValueError(reason)
    model = figure2.build(model_name, seed=seed)
    return profile_module(model, (batch, 3, input_size, input_size), iterations, device, warmup,
                          num_classes=1000, seed=seed, name=model_name, threads=threads)


def profile_models(runs: list[tuple[str, int]], batch: int, iterations: int, device: str = "cpu",
                   warmup: int = 1, budget_s: float = 120.0, threads: int | None = None, *,
                   deadline: float | None = None, time_limit: float | None = None,
                   verbose: bool = False, on_profile=None
                   ) -> tuple[list[HotspotProfile], list[tuple[str, str]]]:
    """:func:`measure` each ``(model_name, input_size)`` of ``runs`` in turn, until a deadline.

    Args:
        runs: ``(model_name, input_size)`` pairs (keys of :data:`MODELS`, pixels).
        batch, iterations, device, warmup, budget_s, threads: as :func:`measure`.
        deadline: a :func:`time.monotonic` value; no network starts after it (one running then
            finishes). None: no deadline.
        time_limit: the ``--time-limit`` (seconds) the deadline came from, for the status text.
        verbose: print a line as each network starts.
        on_profile: called with the profiles so far after each network is measured (to save
            them: a run stopped later keeps those).

    Returns:
        ``(profiles, skipped)``: the :class:`HotspotProfile` of each network measured, in
        order, and ``(model_name, status)`` for each not measured, status
        ``"skipped: time limit of T s reached"`` for one not started, ``"failed: ..."`` for
        one whose run raised anything but a ValueError.

    Raises:
        ValueError: as :func:`measure` (a bad argument or a refused run).
    """
    profiles, skipped = [], []
    for model_name, size in runs:
        if time_up(deadline):
            skipped.append((model_name, time_limit_status(time_limit)))
            continue
        if verbose:
            print(f"profiling {MODELS[model_name]}: batch {batch}, input {size} px, {warmup} "
                  f"warm-up + {iterations} iterations on {device}...", flush=True)
        try:
            profiles.append(measure(model_name, batch, size, iterations, device, warmup,
                                    budget_s=budget_s, threads=threads))
            if on_profile:
                on_profile(list(profiles))
        except ValueError:
            raise
        except Exception as exc:  # noqa: BLE001  (an out-of-memory, a CUDA or profiler error:
            # this network is not measured, the others still are, and are saved)
            skipped.append((model_name, f"failed: {type(exc).__name__}: {exc}"))
    return profiles, skipped


def format_table(profiles: list[HotspotProfile], study: bool = True) -> str:
    """A text table: one line per profile with each group's share of the time (%), the time per
    iteration (ms), and profiled / wall time; the measuring devices named above it and, with
    ``study=True``, the study's convolution shares (Figure 2) beside ours.

    Args:
        profiles: from :func:`measure` or :func:`recorded`. study: add the study's column.

    Returns:
        The table (str, lines joined by newlines).
    """
    head = (f"{'model':<16}{'batch':>6}{'input':>6}  "
            + "".join(f"{g:>16}" for g in GROUPS)
            + f"{'ms/iter':>10}{'profiled/wall':>15}" + (f"{'study conv':>12}" if study else ""))
    lines = [f"measured on {label}" for label in dict.fromkeys(p.measured_on for p in profiles)]
    lines += ["share of training time (forward + backward + SGD step) by layer type", head,
              "-" * len(head)]
    for p in profiles:
        s = p.shares
        ratio = p.total_s / p.wall_s if p.wall_s else float("nan")
        line = (f"{p.name:<16}{p.batch:>6}{p.input_size:>6}  "
                + "".join(f"{100 * s[g]:>14.1f} %" for g in GROUPS)
                + f"{p.ms_per_iteration:>10.1f}{ratio:>15.2f}")
        if study:
            line += f"{100 * STUDY_FIGURE2[p.model]:>10.0f} %" if p.model in STUDY_FIGURE2 else ""
        lines.append(line)
    if study:
        lines.append("study conv: the study's Figure 2 (Tesla K40c, 2016), reported, not measured "
                     "here")
    return "\n".join(lines)


def compare_with_study(profiles: list[HotspotProfile]) -> list[dict]:
    """Each profile's largest layer type and its convolution share beside the study's.

    Args:
        profiles: from :func:`measure` or :func:`recorded`.

    Returns:
        One dict per profile: ``name, measured_on, date`` (of a profile from ``results/``, else
        ""), ``largest`` (the group of :data:`GROUPS` with the largest share), ``largest_share,
        conv_share`` (fractions), ``study_conv`` (the study's Figure 2 share, Section IV-A, or
        None for a model it did not profile) and ``conv_vs_study`` (``"above"``, ``"below"``,
        ``"equal"`` or None; compared in whole %).
    """
    out = []
    for p in profiles:
        shares = p.shares
        largest = max(GROUPS, key=lambda g: shares[g])
        study = STUDY_FIGURE2.get(p.model)
        ours = round(100 * shares["convolution"])
        vs = None if study is None else ("above" if ours > round(100 * study) else
                                         "below" if ours < round(100 * study) else "equal")
        out.append({"name": p.name, "measured_on": p.measured_on, "date": p.date,
                    "largest": largest, "largest_share": shares[largest],
                    "conv_share": shares["convolution"], "study_conv": study,
                    "conv_vs_study": vs})
    return out


def _sizes(model_names, input_size):
    return [(m, input_size if input_size is not None else NATIVE_INPUT[m]) for m in model_names]


def main(argv: list[str] | None = None) -> int:
    """``python -m helpers.experiments.hotspots``: profile training and print the shares by
    layer type; ``--save`` writes GPU profiles to ``--out`` (default ``results/``).

    Networks that cannot be built here (torchvision missing) and those not started before
    ``--time-limit`` seconds are named and skipped. Returns 0 when at least one network was
    measured, 1 when none was, 2 for a refused run (bad arguments exit with status 2)."""
    start = time.monotonic()
    parser = argparse.ArgumentParser(
        prog="python -m helpers.experiments.hotspots",
        description="Share of CNN training time by layer type (the study's Figure 2). CPU "
                    f"defaults: batch {CPU_DEFAULTS['batch']}, input {CPU_DEFAULTS['input_size']} "
                    f"px, {CPU_DEFAULTS['iterations']} iterations, {CPU_DEFAULTS['threads']} "
                    "thread; GPU defaults: batch "
                    f"{GPU_DEFAULTS['batch']}, native input (224 px, OverFeat 231 px), "
                    f"{GPU_DEFAULTS['iterations']} iterations.")
    parser.add_argument("--model", required=True, choices=[*NAMES, "all"])
    parser.add_argument("--batch", type=int, default=None, help="images per iteration")
    parser.add_argument("--input", type=int, default=None, dest="input_size",
                        help="input height = width in pixels")
    parser.add_argument("--iterations", type=int, default=None, help="profiled iterations")
    parser.add_argument("--warmup", type=int, default=1, help="iterations before profiling")
    parser.add_argument("--threads", type=int, default=None,
                        help="CPU threads for torch (CPU default 1; GPU default: torch's)")
    parser.add_argument("--device", choices=["cpu", "cuda"], default=None,
                        help="default: cuda on a GPU machine, else cpu")
    parser.add_argument("--budget", type=float, default=120.0,
                        help="refuse runs estimated to take longer than this many seconds")
    parser.add_argument("--save", action="store_true",
                        help=f"on a GPU, save the rows to <out>/{PREFIX}<gpu>.csv/.json")
    parser.add_argument("--out", type=results.writable_folder, default=None, help="folder --save writes to (default results/)")
    parser.add_argument("--time-limit", type=float, default=None, dest="time_limit",
                        help="seconds after which no further network is profiled")
    args = parser.parse_args(argv)
    if args.time_limit is not None and not args.time_limit > 0:
        parser.error(f"--time-limit must be > 0 seconds, got {args.time_limit:g}")
    deadline = None if args.time_limit is None else start + args.time_limit
    device = args.device or ("cuda" if backend.MODE == "gpu" else "cpu")
    defaults = GPU_DEFAULTS if device == "cuda" else CPU_DEFAULTS
    batch = args.batch if args.batch is not None else defaults["batch"]
    iterations = args.iterations if args.iterations is not None else defaults["iterations"]
    input_size = args.input_size if args.input_size is not None else defaults["input_size"]
    threads = args.threads if args.threads is not None else defaults["threads"]
    if threads is not None and not 1 <= threads <= 1024:
        parser.error(f"threads must be an integer from 1 to 1024, got {threads}")
    names = list(NAMES) if args.model == "all" else [args.model]
    missing = {m: figure2.missing_requirement(m) for m in names}
    for m in names:
        if missing[m]:
            print(f"{MODELS[m]}: skipped: {missing[m]}")
    runs = _sizes([m for m in names if not missing[m]], input_size)
    if not runs:
        print("nothing measured: no network can be built here")
        return 1
    try:
        reasons = [refusal(m, batch, s, iterations, device, args.warmup, args.budget, threads)
                   for m, s in runs]
        total_est = sum(estimate(m, batch, s, iterations, device, args.warmup, threads)
                        for m, s in runs) if device == "cpu" or backend.MODE == "gpu" else 0.0
    except ValueError as exc:
        parser.error(str(exc))
    for (m, _), reason in zip(runs, reasons):
        if reason:
            print(f"{MODELS[m]}: {reason}")
            if device == "cuda" and backend.MODE != "gpu":
                refs = recorded()
                print(format_table(refs.profiles) if refs else refs.note)
            return 2
    if total_est > args.budget:
        print(f"refused: the {len(runs)} runs together are estimated at about {total_est:,.0f} s, "
              f"over the {args.budget:g} s budget (raise --budget or measure fewer models)")
        return 2
    command = "python -m helpers.experiments.hotspots " + " ".join(
        sys.argv[1:] if argv is None else argv)
    saving = args.save and device == "cuda"   # after each network, what a later stop keeps
    profiles, late = profile_models(runs, batch, iterations, device, args.warmup, args.budget,
                                    threads, deadline=deadline, time_limit=args.time_limit,
                                    verbose=True,
                                    on_profile=(lambda done: save(done, command=command,
                                                                  directory=args.out))
                                    if saving else None)
    for m, status in late:
        print(f"{MODELS[m]}: {status}")
    if not profiles:
        print("nothing measured")
        return 1
    print(format_table(profiles))
    if args.save:
        if saving:
            print("saved", *save(profiles, command=command, directory=args.out))
        else:
            print("not saved: results/ holds GPU measurements (run with --device cuda on a GPU)")
    return 0
