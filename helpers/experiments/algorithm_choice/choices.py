"""Which algorithm the libraries choose per layer and pass, measured: cuDNN on a GPU, oneDNN
on the CPU; the recordings in ``results/`` and the command line.

:func:`gpu_choice` runs a pass with ``torch.backends.cudnn.benchmark = True`` (TF32 off) and
names the kernels of a warm call (:mod:`.cudnn_kernels`); :func:`cpu_choice` reads oneDNN's
verbose lines (:mod:`.onednn_verbose`); :func:`measure` gives a row per (layer, pass),
:func:`choices_along` follows one of (b, i, f, k, s), :func:`summary` says a row in a sentence,
:func:`recorded` reads ``results/algorithm_choice_*``, :func:`main` is the command line. Layers
in the study's (b, i, f, k, s) plus channels c; times in ms.

Source: Li et al., ICPP 2016, Table I and Figure 3 (the layers and sweeps).
"""

from __future__ import annotations

import argparse
import re
import sys
import time
import types
from collections.abc import Iterable, Sequence

import torch
import torch.nn.functional as F

from helpers import results
from helpers.conv.config import ConvConfig
from helpers.device import backend, timing
from helpers.device.precision import tf32_mode
from helpers.device.progress import time_limit_status, time_up
from helpers.experiments import sweep
from helpers.experiments.algorithm_choice.cudnn_kernels import (
    _check_count,
    _classify,
    family_of_kernel,
    kernel_times,
    main_algorithm,
    short_kernel_name,
)
from helpers.experiments.algorithm_choice.onednn_verbose import (
    capture_fd,
    family_of_onednn,
    parse_onednn,
)
from helpers.experiments.transfers import format_table as _text_table
from helpers.experiments.transfers.model import layer_for
from helpers.paper import TABLE_I

__all__ = ["PASSES", "PARAMETERS", "FIELDS", "TABLE_COLUMNS", "PREFIX", "COMMAND",
           "torch_backend", "gpu_reason", "gpu_choice", "cpu_choice", "measure",
           "choices_along", "summary", "recorded", "format_table", "main"]

#: One line for ``--help``: what the command shows.
DESCRIPTION = "Which algorithm the libraries choose per layer: cuDNN on a GPU, oneDNN on the CPU."
#: The passes of a layer: y from x and w; dx from dy and w; dw from dy and x.
PASSES = ("forward", "backward-data", "backward-filter")
#: The study's symbols :func:`choices_along` can vary (Figure 3's axes).
PARAMETERS = ("b", "i", "f", "k", "s")
FIELDS = ("layer", "b", "c", "i", "f", "k", "s", "padding", "pass", "library", "algorithm",
          "kernel", "kernel_ms", "median_ms", "kernels", "tf32", "device", "device_kind",
          "status")
TABLE_COLUMNS = ("layer", "b", "pass", "library", "algorithm", "kernel", "kernel_ms",
                 "median_ms", "status")
PREFIX = "algorithm_choice_"
COMMAND = "python -m helpers.experiments.algorithm_choice --save"


def _check(value, name: str, allowed: tuple) -> None:
    if value not in allowed:
        raise ValueError(f"{name} must be one of {allowed}, got {value!r}")


def torch_backend(layer: ConvConfig | str, device: str = "cpu") -> str:
    """The convolution backend torch picks for ``layer`` (float32 NCHW) on ``device``:
    ``"Mkldnn"`` (oneDNN), ``"Slow2d"`` (torch's own im2col + GEMM), ``"Cudnn"``..., from
    torch's own selector ``torch._C._select_conv_backend``; ``"unknown"`` where it is missing.
    Raises ValueError for an unknown layer or device."""
    lay = layer_for(layer)
    _check(device, "device", ("cpu", "cuda"))
    x, w = torch.empty(lay.x_shape, device=device), torch.empty(lay.w_shape, device=device)
    try:
        chosen = torch._C._select_conv_backend(x, w, None, (lay.stride_h, lay.stride_w),
                                               (lay.pad_h, lay.pad_w), (1, 1), False, (0, 0),
                                               1, None)
    except (AttributeError, TypeError, RuntimeError):
        return "unknown"
    return str(chosen).rsplit(".", 1)[-1]


def gpu_reason() -> str | None:
    """Why cuDNN's choice cannot be observed here (a sentence starting ``"not measured: "``),
    or None on a CUDA GPU that torch can use."""
    if backend.MODE != "gpu":
        return f"not measured: no CUDA GPU here ({backend.MODE_REASON})"
    if not torch.cuda.is_available():
        return "not measured: a GPU is present but torch cannot use it (a CPU-only build?)"
    return None


def _row(lay: ConvConfig, pass_: str, kind: str, **values) -> dict:
    return {**dict.fromkeys(FIELDS), **dict(zip("bifks", lay.study)), "layer": lay.name,
            "c": lay.c, "padding": lay.pad_h, "device_kind": kind, "pass": pass_, **values}


def _call(lay: ConvConfig, pass_: str, device: str, seed: int):
    """The pass as a call on random float32 tensors: F.conv2d, or aten's convolution_backward
    (what autograd runs) for dx or dw alone."""
    gen = torch.Generator(device=device).manual_seed(seed)
    x, w, dy = (torch.randn(shape, generator=gen, device=device)
                for shape in (lay.x_shape, lay.w_shape, lay.y_shape))
    stride, padding = (lay.stride_h, lay.stride_w), (lay.pad_h, lay.pad_w)
    if pass_ == "forward":
        return lambda: F.conv2d(x, w, None, stride, padding)
    mask = [pass_ == "backward-data", pass_ == "backward-filter", False]
    return lambda: torch.ops.aten.convolution_backward(dy, x, w, None, stride, padding, (1, 1),
                                                       False, (0, 0), 1, mask)


def cpu_choice(layer: ConvConfig | str, pass_: str = "forward", *, batch: int | None = None,
               timed: bool = True, min_run_time: float = 0.05, budget_s: float = 2.0,
               seed: int = 0) -> dict:
    """What torch ran on the CPU for one pass of a layer, as oneDNN's verbose mode reports it:
    one untimed call, one with verbose on and fd 1 captured, then (``timed``) the pass timed
    by :func:`helpers.device.timing.benchmark` for ``min_run_time`` s.

    Args:
        layer: a ConvConfig or a Table I name. pass_: one of :data:`PASSES`. batch: replaces
            the layer's (None: keep it). budget_s: refuse a call estimated longer (s, by
            :func:`helpers.experiments.sweep.refusal`). seed: of the random float32 inputs.

    Returns the keys of :data:`FIELDS`: ``library`` (``oneDNN <version>`` or ``torch
    (<backend>)``), ``algorithm`` (:func:`family_of_onednn` of the convolution line with the
    largest time; ``gemm`` when torch used its own im2col + GEMM), ``kernel`` (e.g.
    ``jit:avx2``), ``kernel_ms`` (the time oneDNN printed), ``kernels`` (every primitive it ran),
    ``median_ms``, ``status`` (``ok``, or what happened instead).

    Raises:
        ValueError: an unknown layer or pass, ``batch < 1``.
    """
    lay = layer_for(layer, batch)
    _check(pass_, "pass_", PASSES)
    dev, chosen = timing.device_label("cpu"), torch_backend(lay, "cpu")
    refused = sweep.refusal(lay, "reference", "cpu", pass_ != "forward", budget_s)
    if refused:
        return _row(lay, pass_, "cpu", device=dev, status=refused)
    call = _call(lay, pass_, "cpu", seed)
    call()
    try:
        with capture_fd() as cap, torch.backends.mkldnn.verbose(torch.backends.mkldnn.VERBOSE_ON):
            call()
    except AssertionError:  # torch's verbose scope asserts that oneDNN accepted the level
        cap = types.SimpleNamespace(text="")
    lines = parse_onednn(cap.text)
    convs = [c for c in lines if c["primitive"] == "convolution"]
    ms = timing.benchmark(call, device="cpu", min_run_time=min_run_time).median_ms if timed \
        else None
    common = dict(median_ms=ms, device=dev, library=f"torch ({chosen})")
    if convs:
        top = max(convs, key=lambda c: c["ms"] or 0.0)
        found = re.search(r"(?:oneDNN|MKL-DNN)\s+v([\d.]+)", torch.__config__.show())
        common["library"] = f"oneDNN {found.group(1)}" if found else "oneDNN"
        return _row(lay, pass_, "cpu", **common, algorithm=family_of_onednn(top["impl"]),
                    kernel=top["impl"], kernel_ms=top["ms"], status="ok",
                    kernels="; ".join(f"{c['primitive']} {c['impl']} {c['ms']} ms" for c in lines))
    if chosen in ("Slow2d", "SlowDilated2d"):
        aten = "forward" if pass_ == "forward" else "backward"
        return _row(lay, pass_, "cpu", **common, algorithm="gemm",
                    kernel=f"aten::_slow_conv2d_{aten}",
                    status="torch did not call oneDNN for this layer (it used its own "
                           "im2col + GEMM path, slow_conv2d)")
    return _row(lay, pass_, "cpu", **common, status="no oneDNN convolution line was printed "
                f"(torch's backend: {chosen})")


def gpu_choice(layer: ConvConfig | str, pass_: str = "forward", *, batch: int | None = None,
               repeats: int = 3, min_run_time: float = 0.05, budget_s: float = 2.0,
               seed: int = 0, tf32: bool = False) -> dict:
    """cuDNN's choice for one pass of a layer on this GPU, named by the kernels it ran: with
    ``torch.backends.cudnn.benchmark = True`` and TF32 off (float32, as our strategies compute;
    allowed with ``tf32``, torch's default; both restored afterwards,
    :func:`helpers.device.precision.tf32_mode`), two untimed calls (in the
    first cuDNN times its candidates), ``repeats`` (>= 1) calls under ``torch.profiler`` whose
    kernels give :func:`main_algorithm`, then the pass timed by
    :func:`helpers.device.timing.benchmark` for ``min_run_time`` s (blocks of calls between two
    synchronisations). ``layer, pass_, batch, budget_s, seed``: as :func:`cpu_choice`.

    Returns the keys of :data:`FIELDS`: ``library`` (``cuDNN <version>``, or torch's backend
    when it did not call cuDNN), ``algorithm`` (of :data:`FAMILIES`, None if no kernel names
    one), ``kernel`` (:func:`short_kernel_name`), ``kernel_ms`` (its CUDA time per call),
    ``median_ms``, ``kernels`` (the five largest, with family and ms), ``tf32``
    (``torch.backends.cudnn.allow_tf32`` during the calls), ``status``; without a GPU, None
    and why.

    Raises:
        ValueError: an unknown layer or pass, ``batch < 1``, ``repeats < 1``, a non-bool tf32.
    """
    lay = layer_for(layer, batch)
    _check(pass_, "pass_", PASSES)
    _check_count(repeats, "repeats")
    flags = tf32_mode(tf32)
    reason = gpu_reason()
    if reason:
        return _row(lay, pass_, "cuda", device="no CUDA GPU", status=reason)
    dev = timing.device_label("cuda")
    try:
        reason = sweep.refusal(lay, "reference", "cuda", pass_ != "forward", budget_s)
        chosen = torch_backend(lay, "cuda")
    except Exception as exc:  # noqa: BLE001  (a sticky CUDA error from an earlier layer)
        reason = f"failed: {type(exc).__name__}: {exc}"
    if reason:
        return _row(lay, pass_, "cuda", device=dev, status=reason)
    v = torch.backends.cudnn.version() or 0  # 90100 is 9.1.0 (cuDNN 8: 8907 is 8.9.7)
    major, rest = divmod(v, 10000 if v >= 90000 else 1000)
    library = f"cuDNN {major}.{rest // 100}.{rest % 100}" if chosen == "Cudnn" \
        else f"torch ({chosen})"
    before = torch.backends.cudnn.benchmark
    torch.backends.cudnn.benchmark = True
    activities = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
    try:
        with flags:
            call = _call(lay, pass_, "cuda", seed)
            for _ in range(2):
                call()
            torch.cuda.synchronize()
            with torch.profiler.profile(activities=activities) as prof:
                for _ in range(repeats):
                    call()
                torch.cuda.synchronize()
            kernels = kernel_times(prof.events(), repeats)
            median = timing.benchmark(call, device="cuda", min_run_time=min_run_time).median_ms
    except Exception as exc:  # noqa: BLE001  (an out-of-memory, a CUDA or profiler error)
        return _row(lay, pass_, "cuda", library=library, device=dev,
                    status=f"failed: {type(exc).__name__}: {exc}")
    finally:
        torch.backends.cudnn.benchmark = before
    family, name, ms = main_algorithm(kernels)
    status = "ok" if chosen == "Cudnn" else f"torch did not call cuDNN (it chose {chosen})"
    if family is None:
        status = "no kernel named a known algorithm" if kernels else "no CUDA kernel recorded"
    elif _classify(kernels[0][0]) == ("other", None):
        status += f" (the largest kernel, {short_kernel_name(kernels[0][0])}, is not recognised)"
    listed = "; ".join(f"{family_of_kernel(n)} {t:.4g} ms {short_kernel_name(n, 48)}"
                       for n, t in kernels[:5])
    return _row(lay, pass_, "cuda", library=library, algorithm=family, kernel_ms=ms,
                kernel=short_kernel_name(name) if name else None, median_ms=median,
                kernels=listed, tf32=tf32, device=dev, status=status)


def _passes(backward: bool) -> tuple[str, ...]:
    if not isinstance(backward, bool):
        raise ValueError(f"backward must be True or False, got {backward!r}")
    return PASSES if backward else PASSES[:1]


def measure(layers: Iterable[ConvConfig | str] = TABLE_I, device: str = "cuda", *,
            batch: int | None = None, backward: bool = False, strategies: Sequence[str] = (),
            timed: bool = True, min_run_time: float = 0.05, budget_s: float = 2.0,
            deadline: float | None = None, time_limit: float | None = None,
            tf32: bool = False) -> list[dict]:
    """The library's choice per layer and pass (:func:`gpu_choice` on ``"cuda"``,
    :func:`cpu_choice` on ``"cpu"``), with our strategies' forward times beside it.

    Args:
        layers: ConvConfigs or Table I names. device: ``"cuda"`` or ``"cpu"``. batch: replaces
            the layers' (None: keep it). backward: also the two backward passes.
        strategies: keys of :data:`helpers.conv.STRATEGIES`, each timed forward on the device
            by :func:`helpers.experiments.sweep.measure`, adding ``ours_<name>_ms`` and
            ``ours_<name>_status`` to every row (None on backward rows).
        timed: time the CPU calls too. min_run_time, budget_s, tf32: as :func:`gpu_choice`
            (float32 with TF32 off by default, as our strategies compute).
        deadline, time_limit: rows not started before the deadline (:func:`time.monotonic`)
            get status ``"skipped: time limit of T s reached"``.

    Returns one dict per (layer, pass): the keys of :data:`FIELDS` plus the ``ours_*`` keys.

    Raises:
        ValueError: an unknown layer, device or strategy, ``batch < 1``, a non-bool backward
            or tf32.
    """
    _check(device, "device", ("cpu", "cuda"))
    if not isinstance(tf32, bool):
        raise ValueError(f"tf32 must be True or False, got {tf32!r}")
    for name in strategies:
        _check(name, "strategies", tuple(sweep.STRATEGIES))
    lays, passes = [layer_for(lay, batch) for lay in layers], _passes(backward)
    rows = []
    for lay in lays:
        for pass_ in passes:
            if time_up(deadline):
                row = _row(lay, pass_, device, status=time_limit_status(time_limit))
            elif device == "cuda":
                row = gpu_choice(lay, pass_, min_run_time=min_run_time, budget_s=budget_s,
                                 tf32=tf32)
            else:
                row = cpu_choice(lay, pass_, timed=timed, min_run_time=min_run_time,
                                 budget_s=budget_s)
            for name in strategies:
                if pass_ != "forward" or row["status"].startswith(("not measured", "skipped")):
                    r = {"median_ms": None, "status": "not comparable: ours time dx and dw "
                         "together" if pass_ != "forward" else row["status"]}
                else:
                    r = sweep.measure(lay, name, device, backward=False, budget_s=budget_s,
                                      min_run_time=min_run_time, measure_memory=False)
                row[f"ours_{name}_ms"], row[f"ours_{name}_status"] = r["median_ms"], r["status"]
            rows.append(row)
    return rows


def choices_along(parameter: str, values: Iterable[int], base_layer: ConvConfig | str | None = None,
                  device: str = "cpu", *, backward: bool = False, timed: bool = False,
                  budget_s: float = 2.0) -> list[dict]:
    """The chosen algorithm as one of the study's (b, i, f, k, s) varies (its Figure 3 axes).

    Args:
        parameter: one of :data:`PARAMETERS`. values: the values it takes (ints).
        base_layer: a ConvConfig or a Table I name; None: the study's sweep base in
            :data:`helpers.experiments.sweep.PRESETS` (``paper`` on a GPU, ``paper-small`` on
            the CPU), c = 3. device: ``"cpu"`` (cheap: untimed unless ``timed``) or ``"cuda"``.
        backward, timed, budget_s: as :func:`measure`.

    Returns:
        One dict per (value, pass): the keys of :data:`FIELDS` plus ``parameter`` and ``x``.

    Raises:
        ValueError: an unknown parameter or device, no values, or a value that makes no layer
            (naming the symbol, as :meth:`ConvConfig.from_study`).
    """
    _check(parameter, "parameter", PARAMETERS)
    _check(device, "device", ("cpu", "cuda"))
    if base_layer is None:
        preset = sweep.PRESETS["paper" if device == "cuda" else "paper-small"]
        base = ConvConfig.from_study(*preset.base, c=preset.c)
    else:
        base = layer_for(base_layer)
    values = list(values)
    if not values:
        raise ValueError("values must hold at least one value")
    study = dict(zip(PARAMETERS, base.study))
    lays = [ConvConfig.from_study(**{**study, parameter: v}, c=base.c, padding=base.pad_h)
            for v in values]
    rows = measure(lays, device, backward=backward, timed=timed, budget_s=budget_s)
    per = len(_passes(backward))
    return [dict(r, parameter=parameter, x=values[j // per]) for j, r in enumerate(rows)]


def summary(row: dict) -> str:
    """One sentence for a row of :func:`measure`: what the library picked, in how long, and
    our strategies' times beside it (or why nothing was measured)."""
    where = f"{row['layer'] or 'layer'} {row['pass']} (b={row['b']})"
    if row.get("algorithm") is None:
        return f"{where}: {row['status']}"
    inside = "" if row.get("kernel_ms") is None else f", {row['kernel_ms']:.3g} ms in it"
    took = "" if row.get("median_ms") is None else f"; the call took {row['median_ms']:.3g} ms"
    ours = [f"our {k[5:-3]} took {v:.3g} ms" for k, v in row.items()
            if k.startswith("ours_") and k.endswith("_ms") and v is not None]
    return (f"{where}: {row['library']} picked {row['algorithm']} ({row['kernel']}{inside})"
            f"{took} on {row['device']}" + ("; " + ", ".join(ours) if ours else ""))


def recorded(directory=None, **match) -> results.Recorded:
    """The GPU rows recorded in ``results/algorithm_choice_*`` by :data:`COMMAND`, labelled with
    their GPU and date (:func:`helpers.results.recorded`); ``match`` keeps rows whose fields
    equal the values given (e.g. ``layer="Conv1"``). Never invents a row."""
    return results.recorded(PREFIX, COMMAND, directory=directory, **match)


def format_table(rows: Sequence[dict], columns: Sequence[str] = TABLE_COLUMNS) -> str:
    """Rows as a fixed-width text table of ``columns`` (None as ``-``)."""
    return _text_table(rows, columns)


def main(argv: list[str] | None = None) -> int:
    """``python -m helpers.experiments.algorithm_choice [--device D] [--batch N] [--layers L]
    [--backward] [--strategies S] [--tf32] [--save] [--out DIR] [--time-limit S]``: print
    the choices (cuDNN in float32, TF32 off, unless ``--tf32``);
    ``--save`` writes GPU rows to ``<out>/algorithm_choice_<gpu>.csv`` + ``.json``. Returns 0;
    3 (:data:`helpers.results.REFUSED`) for ``--save`` without a GPU (nothing is measured then);
    bad arguments exit with 2."""
    start = time.monotonic()
    parser = argparse.ArgumentParser(prog="python -m helpers.experiments.algorithm_choice",
                                     description=DESCRIPTION)
    parser.add_argument("--device", choices=["cpu", "cuda"],
                        default="cuda" if backend.MODE == "gpu" else "cpu")
    parser.add_argument("--batch", type=int, help="default: 128 (Table I) on a GPU, 1 on a CPU")
    parser.add_argument("--layers", default=",".join(lay.name for lay in TABLE_I),
                        help="comma list of Table I layers")
    parser.add_argument("--backward", action="store_true", help="also both backward passes")
    parser.add_argument("--strategies", default="", help="comma list of our strategies to time")
    parser.add_argument("--tf32", action="store_true",
                        help="let cuDNN use TF32 (torch's default); without it float32, TF32 off")
    parser.add_argument("--save", action="store_true", help=f"write <out>/{PREFIX}<gpu>.csv")
    parser.add_argument("--out", type=results.writable_folder, help="default: results/")
    parser.add_argument("--time-limit", type=float, dest="time_limit",
                        help="seconds after which no further layer starts")
    args = parser.parse_args(argv)
    if args.time_limit is not None and not args.time_limit > 0:
        parser.error(f"--time-limit must be > 0 seconds, got {args.time_limit:g}")
    if args.batch is not None and args.batch < 1:
        parser.error(f"--batch must be >= 1, got {args.batch}")
    strategies = [s for s in args.strategies.split(",") if s]
    try:
        layers = [layer_for(name) for name in args.layers.split(",")]
        measure([], args.device, strategies=strategies)  # checks the names, measures nothing
    except ValueError as exc:
        parser.error(str(exc))
    reason = gpu_reason() if args.device == "cuda" else None
    if args.save and (args.device != "cuda" or reason):
        print(reason or "--save records GPU rows: run it with --device cuda on a GPU")
        print("--save: nothing was measured, so nothing was saved")
        return results.REFUSED
    if reason:
        rec = recorded(args.out)
        print(reason, format_table(rec.rows) if rec else "", rec.note, sep="\n")
        return 0
    rows = measure(layers, args.device, batch=args.batch or (128 if args.device == "cuda" else 1),
                   backward=args.backward, strategies=strategies, time_limit=args.time_limit,
                   tf32=args.tf32,
                   deadline=None if args.time_limit is None else start + args.time_limit)
    print(format_table(rows), *map(summary, rows), sep="\n")
    if args.save:
        name = f"{PREFIX}{results.slug(backend.info().gpu_name or 'gpu')}"
        command = "python -m helpers.experiments.algorithm_choice " + " ".join(
            sys.argv[1:] if argv is None else argv)
        print("saved", *results.save(name, rows, command=command, directory=args.out))
    return 0
