"""Today's networks, layer by layer: what each convolution costs and how long it takes alone.

:func:`list_layers` builds MobileNet-V2, ResNeXt-50 (32x4d) or ConvNeXt-Tiny from torchvision
(``weights=None``: nothing is downloaded) and lists every ``nn.Conv2d`` with its input (forward
hooks, one 224 x 224 image), type, FLOPs, bytes and intensity (:mod:`.compare`);
:func:`time_layers` times each alone with torch; :func:`shares` sets each type's share of the
FLOPs beside its share of the time; :func:`ceilings` measures the roofline's ceilings and
:func:`roof` draws on them; :func:`measure` runs it all with our strategies on five layers
(:func:`.compare.compare`); :func:`recorded` reads ``results/todays_layers_*``.
``python -m helpers.experiments.todays_layers [--device cpu|cuda] [--save] [--out DIR]``.
Times in ms, rates in GFLOP/s, intensity in FLOP/byte, shapes NCHW (cuDNN symbols).

Source: Sandler et al., CVPR 2018 (MobileNet-V2); Xie et al., CVPR 2017 (ResNeXt); Liu et al.,
CVPR 2022 (ConvNeXt); the contrast: Li et al., ICPP 2016, Sections IV-A and IV-B.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import sys
import time
from collections.abc import Callable, Iterable, Sequence

import torch
import torch.nn.functional as F
from torch import nn

from helpers import results
from helpers.device import backend, timing
from helpers.device.progress import time_limit_status, time_up
from helpers.experiments.throughput import elementwise_sweep, gemm_sweep
from helpers.experiments.todays_layers.compare import (
    FIELDS,
    LAYER_TYPES,
    REPRESENTATIVE,
    compare,
    config_of,
    cpu_threads,
    cuda_settings,
    row,
)
from helpers.experiments.transfers import format_table as _text_table

__all__ = ["CEILING_BUDGET_S", "CEILING_SIZES", "COMMAND", "CPU_THREADS", "FIELDS", "INPUT_SIZE",
           "LAYER_COLUMNS", "LAYER_TYPES", "MIN_RUN_TIME", "NETWORKS", "PREFIX", "REPRESENTATIVE",
           "STRATEGY_COLUMNS", "build", "ceilings", "format_table", "linear_flops", "list_layers",
           "main", "measure", "missing_requirement", "recorded", "roof", "shares", "time_layers",
           "value_of"]

#: torchvision's name of each network, and how the workbook writes it.
NETWORKS = {"mobilenet_v2": "MobileNet-V2", "resnext50_32x4d": "ResNeXt-50 (32x4d)",
            "convnext_tiny": "ConvNeXt-Tiny"}
#: Height = width of the one image the layers are listed with (ImageNet's usual crop).
INPUT_SIZE = 224
#: Torch's CPU threads while timing (our choice: on a machine shared with other work, threads
#: that wait for each other inflate small layers' times far beyond their cost).
CPU_THREADS = 1
#: Seconds of timed calls per layer (:func:`helpers.device.timing.benchmark`).
MIN_RUN_TIME = {"cpu": 0.005, "cuda": 0.01}
PREFIX = "todays_layers_"
COMMAND = "python -m helpers.experiments.todays_layers --device cuda --save"
LAYER_COLUMNS = ("network", "index", "name", "layer_type", "n", "c", "h", "k", "r", "stride",
                 "groups", "flops", "intensity", "median_ms", "gflop_s", "status")
STRATEGY_COLUMNS = ("network", "name", "layer_type", "strategy", "library", "algorithm",
                    "kernel", "median_ms", "gflop_s", "max_rel_error", "status")


def _check_device(device: str) -> None:
    if device not in ("cpu", "cuda"):
        raise ValueError(f"device must be 'cpu' or 'cuda', got {device!r}")
    if device == "cuda" and (backend.MODE != "gpu" or not torch.cuda.is_available()):
        raise ValueError(f"device='cuda' needs a CUDA GPU torch can use ({backend.MODE_REASON})"
                         f"; GPU rows come from results/ ({PREFIX}*)")


def _check_network(network: str) -> str:
    if network not in NETWORKS:
        raise ValueError(f"network must be one of {list(NETWORKS)}, got {network!r}")
    return network


def missing_requirement() -> str | None:
    """Why the networks cannot be built here (torchvision missing or broken), or None."""
    try:
        import torchvision  # noqa: F401  (optional: a bare GPU server may lack it)
    except ImportError:
        return "torchvision is not installed"
    except RuntimeError as exc:  # a torchvision built for another torch
        return f"torchvision cannot be imported ({exc})"
    return None


def build(network: str, device: str | torch.device = "meta") -> nn.Module:
    """torchvision's ``network`` (a key of :data:`NETWORKS`) with ``weights=None`` (random
    weights: nothing is downloaded), in eval mode, float32, on ``device`` (default ``"meta"``:
    shapes only, nothing allocated).

    Raises:
        ValueError: an unknown network. ImportError: torchvision is not installed.
    """
    import torchvision  # optional: only the listing needs it

    with torch.device(device):
        return getattr(torchvision.models, _check_network(network))(weights=None).eval()


def _hooked(network: str, kind: type, input_size: int) -> list[tuple[str, nn.Module, tuple]]:
    """(name, module, input shape) of every ``kind`` module, in the order one forward pass of
    a (1, 3, input_size, input_size) image on the meta device runs them."""
    model = build(network)
    names = {m: n for n, m in model.named_modules()}
    seen: list[tuple[str, nn.Module, tuple]] = []
    hooks = [m.register_forward_hook(lambda m, inp, out: seen.append(
        (names[m], m, tuple(inp[0].shape)))) for m in model.modules() if isinstance(m, kind)]
    try:
        with torch.no_grad():
            model(torch.empty(1, 3, input_size, input_size, device="meta"))
    finally:
        for h in hooks:
            h.remove()
    return seen


def list_layers(network: str, input_size: int = INPUT_SIZE) -> list[dict]:
    """Every ``nn.Conv2d`` of ``network``, in the order a forward pass runs them, at batch 1.

    Returns:
        One :func:`.compare.row` per layer (``experiment="layer"``): ``network``
        (as :data:`NETWORKS` writes it), ``index``, ``name`` (the module's), ``layer_type``,
        N, C, H, W of its input, K, R, S, stride, padding, dilation, groups, ``flops``
        (``ConvConfig.flops``: 2 N K P Q (C/groups) R S), ``bytes`` (x + w + y, float32),
        ``intensity`` (FLOP/byte).

    Raises:
        ValueError: an unknown network, ``input_size`` < 32. ImportError: no torchvision.
    """
    _check_network(network)
    if isinstance(input_size, bool) or not isinstance(input_size, int) or input_size < 32:
        raise ValueError(f"input_size must be an int >= 32 pixels, got {input_size!r}")
    out = []
    for j, (name, m, x_shape) in enumerate(_hooked(network, nn.Conv2d, input_size)):
        cfg = config_of({"network": NETWORKS[network], "name": name, "n": x_shape[0],
                         "c": x_shape[1], "h": x_shape[2], "w": x_shape[3],
                         "k": m.out_channels, "r": m.kernel_size[0], "s": m.kernel_size[1],
                         "stride": _text(m.stride), "padding": _text(m.padding),
                         "dilation": _text(m.dilation), "groups": m.groups})
        out.append(row(cfg, "layer", index=j))
    return out


def _text(pair) -> int | str:
    return pair[0] if pair[0] == pair[1] else f"{pair[0]}x{pair[1]}"


def linear_flops(network: str, input_size: int = INPUT_SIZE) -> int:
    """FLOPs (2 x multiply-adds) of the ``nn.Linear`` layers of one forward pass at batch 1:
    ConvNeXt's 1 x 1 convolutions are Linear layers on channels-last tensors, so
    :func:`list_layers` does not see them. Raises as :func:`list_layers`."""
    _check_network(network)
    return sum(2 * m.in_features * m.out_features * (math.prod(shape) // m.in_features)
               for _, m, shape in _hooked(network, nn.Linear, input_size))


def time_layers(rows: Iterable[dict], device: str = "cpu", *, batch: int | None = None,
                min_run_time: float | None = None, threads: int | None = CPU_THREADS,
                seed: int = 0, deadline: float | None = None,
                time_limit: float | None = None,
                on_row: Callable[[dict], None] | None = None) -> list[dict]:
    """Each layer alone, forward, ``torch.nn.functional.conv2d`` on random float32 x and w (no
    bias), timed by :func:`helpers.device.timing.benchmark` (median after a warm-up; on a GPU
    two warm-up calls with cuDNN's benchmark mode on and TF32 off, :func:`cuda_settings`).

    Args:
        rows: layers from :func:`list_layers`. device: ``"cpu"`` or ``"cuda"`` (a GPU).
        batch: images N (None: each row's). min_run_time: seconds timed per layer (default
            :data:`MIN_RUN_TIME`). threads: CPU threads (:func:`cpu_threads`; None: torch's).
        seed: of the random inputs. deadline, time_limit: layers not started before the
            deadline (:func:`time.monotonic`) get ``"skipped: time limit of T s reached"``.
        on_row: called with each row once it is measured.

    Returns:
        Copies of the rows (FLOPs, bytes, intensity at ``batch``) with ``median_ms``,
        ``iqr_ms``, ``gflop_s``, ``threads``, ``tf32``, ``device``, ``device_kind``, ``status``.

    Raises:
        ValueError: an unknown device, ``"cuda"`` without a GPU, ``batch`` < 1, bad threads.
    """
    _check_device(device)
    if batch is not None and (isinstance(batch, bool) or not isinstance(batch, int) or batch < 1):
        raise ValueError(f"batch must be an int >= 1, got {batch!r}")
    seconds = MIN_RUN_TIME[device] if min_run_time is None else min_run_time
    label, gen = timing.device_label(device), torch.Generator().manual_seed(seed)
    out = []
    with cpu_threads(threads if device == "cpu" else None), \
            (cuda_settings() if device == "cuda" else contextlib.nullcontext()):
        for r in rows:
            cfg = config_of(r)
            cfg = cfg.with_batch(batch) if batch else cfg
            new = row(cfg, "layer", index=r["index"], device=label, device_kind=device,
                      threads=torch.get_num_threads() if device == "cpu" else None,
                      tf32=False if device == "cuda" else None)
            if time_up(deadline):
                new["status"] = time_limit_status(time_limit)
            else:
                try:
                    x, w = (torch.randn(s, generator=gen).to(device)
                            for s in (cfg.x_shape, cfg.w_shape))
                    t = timing.benchmark(lambda: F.conv2d(x, w, None, **cfg.kwargs),  # noqa: B023
                                         device=device, warmup=2 if device == "cuda" else 1,
                                         min_run_time=seconds, label=new["name"])
                    new.update(median_ms=t.median_ms, iqr_ms=t.iqr_s * 1e3, status="ok",
                               gflop_s=cfg.flops / t.median_s / 1e9)
                except Exception as exc:  # noqa: BLE001  (one layer fails, the rest go on)
                    new["status"] = f"failed: {type(exc).__name__}: {exc}"
            out.append(new)
            if on_row:
                on_row(new)
    return out


def shares(rows: Iterable[dict]) -> list[dict]:
    """Each layer type's share of the convolution FLOPs and of the time, per network, device
    and batch, from the measured (``ok``) rows of :func:`time_layers` (live or recorded).

    Returns:
        One dict per (network, device, n, layer type present), in :data:`LAYER_TYPES` order:
        ``network, device, n, layer_type, layers, flops, time_ms, flop_share, time_share``
        (fractions of the network's measured layers) and ``gflop_s`` (the type's FLOPs over
        its time).
    """
    groups: dict[tuple, list[dict]] = {}
    for r in rows:
        if r.get("experiment") == "layer" and r.get("status") == "ok":
            groups.setdefault((r["network"], r["device"], r["n"]), []).append(r)
    out = []
    for (network, device, n), mine in groups.items():
        flops = sum(r["flops"] for r in mine)
        ms = sum(r["median_ms"] for r in mine)
        for kind in LAYER_TYPES:
            of = [r for r in mine if r["layer_type"] == kind]
            if of:
                f, t = sum(r["flops"] for r in of), sum(r["median_ms"] for r in of)
                out.append({"network": network, "device": device, "n": n, "layer_type": kind,
                            "layers": len(of), "flops": f, "time_ms": t,
                            "flop_share": f / flops, "time_share": t / ms,
                            "gflop_s": f / t / 1e6})
    return out


#: Sizes of the ceilings' measurements: ReLU elements (float32) and the GEMM's n, per device.
CEILING_SIZES = {"cpu": (2**24, 1024), "cuda": (2**26, 4096)}
#: Seconds one ceiling's point may take. Its size is fixed, so this guards only against a
#: machine far too slow to use; a two-core CPU needs about 1 s for the ReLU point (0.6 s of it
#: drawing the operands) when idle and three times that while other work shares its cores.
CEILING_BUDGET_S = 30.0


def ceilings(device: str = "cpu", threads: int | None = CPU_THREADS) -> list[dict]:
    """The roofline's two ceilings *measured* on ``device`` with torch, as notebook 01 measures
    them: memory bandwidth by ReLU over :data:`CEILING_SIZES` float32 values (read and written,
    far beyond the caches), compute by a float32 n x n GEMM (TF32 off); each point within
    :data:`CEILING_BUDGET_S` seconds.

    Returns:
        Two :data:`FIELDS` rows, ``experiment="ceiling"``: ``name`` ``"bandwidth"`` (``bytes``
        moved, ``median_ms``) and ``"compute"`` (``flops``, ``median_ms``, ``gflop_s``), with
        ``kernel`` saying what was run, ``threads``, ``device``, ``status``.

    Raises:
        ValueError: an unknown device, ``"cuda"`` without a GPU, bad threads.
    """
    _check_device(device)
    elements, n = CEILING_SIZES[device]
    with cpu_threads(threads if device == "cpu" else None), \
            (cuda_settings() if device == "cuda" else contextlib.nullcontext()):
        relu = elementwise_sweep("relu", [elements], devices=(device,), backends=("torch",),
                                 point_budget_s=CEILING_BUDGET_S, progress=False)[0]
        gemm = gemm_sweep([n], devices=(device,), backends=("torch",),
                          point_budget_s=CEILING_BUDGET_S, progress=False)[0]
        used = torch.get_num_threads() if device == "cpu" else None
    out = []
    for name, r, what in (("bandwidth", relu, f"ReLU over {4 * elements / 2**20:.0f} MiB"),
                          ("compute", gemm, f"GEMM {n} x {n} x {n}")):
        ok = r["status"] == "ok"
        out.append(dict(dict.fromkeys(FIELDS), experiment="ceiling", name=name, kernel=what,
                        flops=r["flops"], bytes=r["bytes"], threads=used,
                        median_ms=r["median_s"] * 1e3 if ok else None,
                        gflop_s=r["gflop_s"] if ok and name == "compute" else None,
                        tf32=False if device == "cuda" else None, device=r["device"],
                        device_kind=device, status=r["status"]))
    return out


def roof(ceiling_rows: Sequence[dict], environment: dict | None = None) -> dict | None:
    """A device's roof for :func:`helpers.figures.nb12_todays_networks.roofline_figure`.

    Args:
        ceiling_rows: :func:`ceilings` of one device (live, or recorded in ``results/``).
        environment: the device's environment (a results file's ``meta["environment"]``;
            None: this machine's), for the nominal peak: a GPU's datasheet FP32 peak and
            bandwidth, a CPU's estimate (cores x clock x vector width, times the share of its
            cores the ceilings used).

    Returns:
        ``{"device", "peak_flops", "bandwidth"`` (measured, FLOP/s and bytes/s, or None),
        ``"peak_source", "bandwidth_source"`` (how they were measured), ``"nominal_flops",
        "nominal_bandwidth", "nominal_source"`` (None where unknown)}; None without a
        measured ceiling.
    """
    by = {r["name"]: r for r in ceiling_rows if r.get("experiment") == "ceiling"
          and r.get("status") == "ok" and value_of(r.get("median_ms"))}
    if not by:
        return None
    first = next(iter(by.values()))
    threads = first.get("threads")
    on = f", {threads} thread{'s' if threads != 1 else ''}" if threads else ""
    out = {"device": first["device"], "peak_flops": None, "bandwidth": None,
           "peak_source": None, "bandwidth_source": None, "nominal_flops": None,
           "nominal_bandwidth": None, "nominal_source": None}
    if "compute" in by:
        r = by["compute"]
        out.update(peak_flops=r["flops"] / (r["median_ms"] / 1e3),
                   peak_source=f"measured: torch {r['kernel']}, float32{on}")
    if "bandwidth" in by:
        r = by["bandwidth"]
        out.update(bandwidth=r["bytes"] / (r["median_ms"] / 1e3),
                   bandwidth_source=f"measured: torch {r['kernel']}{on}")
    env = environment if environment is not None else backend.info().as_dict()
    if first.get("device_kind") == "cuda" and env.get("gpu_peak_fp32_flops"):
        out.update(nominal_flops=env["gpu_peak_fp32_flops"],
                   nominal_bandwidth=env.get("gpu_peak_bandwidth_bytes_s"),
                   nominal_source=f"{env.get('gpu_name')} datasheet")
    elif first.get("device_kind") == "cpu" and env.get("cpu_peak_fp32_flops_estimate"):
        cores = env.get("cpu_logical_cores") or env.get("cpu_physical_cores") or 1
        used = min(int(threads or cores), cores)
        out.update(nominal_flops=env["cpu_peak_fp32_flops_estimate"] * used / cores,
                   nominal_source=f"estimated: {env.get('cpu_peak_source')}, scaled to the "
                                  f"{used} of {cores} cores used")
    return out


def value_of(v) -> float | None:
    """A number from a live row or a parsed results/ CSV, or None (empty, NaN)."""
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None


def measure(device: str = "cpu", *, networks: Sequence[str] = tuple(NETWORKS),
            batches: Sequence[int] = (1,), strategies: Sequence[str] | None = None,
            threads: int | None = CPU_THREADS, deadline: float | None = None,
            time_limit: float | None = None,
            on_rows: Callable[[list[dict]], None] | None = None) -> list[dict]:
    """The whole experiment, most needed first: the device's :func:`ceilings`; every
    network's layers timed at the first batch; :func:`compare` on :data:`REPRESENTATIVE` at
    batch 1 (``strategies``: ours beside the library; None: all, ``[]``: none); the layers at
    the other batches. A network that cannot be built (no torchvision) gets one row saying so.
    ``on_rows`` gets all rows so far after each step (to save them as they come).

    Raises:
        ValueError: as its parts (an unknown network, device or strategy, a bad batch).
    """
    for net in networks:
        _check_network(net)
    reason = missing_requirement()
    listed = {} if reason else {net: list_layers(net) for net in networks}
    rows: list[dict] = ceilings(device, threads) if not time_up(deadline) else []
    steps = [("layers", b) for b in batches[:1]] + [("compare", 1)] + [
        ("layers", b) for b in batches[1:]]
    for step, b in steps:
        if on_rows:
            on_rows(rows)
        if step == "compare":
            rows += compare(REPRESENTATIVE, device, strategies=strategies, threads=threads,
                            deadline=deadline, time_limit=time_limit)
            continue
        for net in networks:
            if reason:
                rows.append(dict(dict.fromkeys(FIELDS), experiment="layer", n=b,
                                 network=NETWORKS[net], device_kind=device,
                                 status=f"not measured: {reason}"))
            else:
                rows += time_layers(listed[net], device, batch=b, threads=threads,
                                    deadline=deadline, time_limit=time_limit)
    if on_rows:
        on_rows(rows)
    return rows


def recorded(directory=None, *, gpu_only: bool = True, **match) -> results.Recorded:
    """The rows recorded in ``results/todays_layers_*`` by :data:`COMMAND`, labelled with the
    device and date that measured them (:func:`helpers.results.recorded`); ``gpu_only``: GPU
    rows only; ``match`` keeps rows whose fields equal the values (``experiment="layer"``).
    Never invents a row."""
    return results.recorded(PREFIX, COMMAND, gpu_only=gpu_only, directory=directory, **match)


def format_table(rows: Sequence[dict], columns: Sequence[str] = LAYER_COLUMNS) -> str:
    """Rows as a fixed-width text table of ``columns`` (None as ``-``)."""
    return _text_table(rows, columns)


def _ints(text: str) -> list[int]:
    try:
        values = [int(v) for v in text.split(",") if v]
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a comma list of integers, got {text!r}")
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"must be integers >= 1, got {text!r}")
    return values


def main(argv: list[str] | None = None) -> int:
    """``python -m helpers.experiments.todays_layers [--device cpu|cuda] [--networks A,B]
    [--batch 1,32] [--strategies S] [--threads T] [--quick] [--save] [--out DIR]
    [--time-limit S]``: print the layers' times, each type's shares and our strategies beside
    the library; ``--save`` writes ``<out>/todays_layers_<device>.csv`` + ``.json`` (default
    ``results/``), rewritten after each network. Returns 0; 3 (:data:`helpers.results.REFUSED`)
    for ``--device cuda --save`` without a GPU (nothing measured); bad arguments exit with 2."""
    start = time.monotonic()
    gpu = backend.MODE == "gpu" and torch.cuda.is_available()
    parser = argparse.ArgumentParser(prog="python -m helpers.experiments.todays_layers",
                                     description=__doc__.split("\n\n")[0])
    add = parser.add_argument
    add("--device", choices=["cpu", "cuda"], default="cuda" if gpu else "cpu")
    add("--networks", default=",".join(NETWORKS), help="comma list of " + ", ".join(NETWORKS))
    add("--batch", type=_ints, default=None, help="comma list (default 1 on a CPU, 1,32 on a GPU)")
    add("--strategies", default=None, help="comma list of ours beside the library (default all)")
    add("--threads", type=int, default=CPU_THREADS, help=f"CPU threads (default {CPU_THREADS})")
    add("--quick", action="store_true", help="MobileNet-V2 only, and im2col-gemm only")
    add("--save", action="store_true", help=f"write <out>/{PREFIX}<device>.csv + .json")
    add("--out", type=results.writable_folder, default=None, help="folder (default results/)")
    add("--time-limit", type=float, default=None, dest="time_limit",
        help="seconds after which no further layer starts")
    args = parser.parse_args(argv)
    if args.time_limit is not None and not args.time_limit > 0:
        parser.error(f"--time-limit must be > 0 seconds, got {args.time_limit:g}")
    if not 1 <= args.threads <= 1024:
        parser.error(f"--threads must be from 1 to 1024, got {args.threads}")
    networks = ["mobilenet_v2"] if args.quick else [n for n in args.networks.split(",") if n]
    bad = [n for n in networks if n not in NETWORKS]
    if bad or not networks:
        parser.error(f"--networks must be among {list(NETWORKS)}, got {bad or args.networks!r}")
    strategies = (["im2col-gemm"] if args.quick else None) if args.strategies is None else \
        [s for s in args.strategies.split(",") if s]
    try:
        compare([], args.device, strategies=strategies)   # checks the names, measures nothing
    except ValueError as exc:
        parser.error(str(exc).replace("strategies must", "--strategies must"))
    if args.device == "cuda" and not gpu:
        print(f"--device cuda needs a CUDA GPU here ({backend.MODE_REASON}): nothing measured")
        if args.save:
            print("--save: nothing was measured, so nothing was saved")
            return results.REFUSED
        rec = recorded(args.out)
        print(format_table(rec.rows) if rec else "", rec.note, sep="\n")
        return 0
    batches = args.batch or ([1, 32] if args.device == "cuda" else [1])
    where = backend.info().gpu_name if args.device == "cuda" else backend.info().cpu_model
    name = f"{PREFIX}{results.slug(where or args.device)}"
    command = "python -m helpers.experiments.todays_layers " + " ".join(
        sys.argv[1:] if argv is None else argv)
    saved: list = []

    def save(rows: list[dict]) -> None:
        if args.save and rows:
            saved[:] = results.save(name, rows, command=command, directory=args.out,
                                    extra={"batches": batches})

    deadline = None if args.time_limit is None else start + args.time_limit
    rows = measure(args.device, networks=networks, batches=batches, strategies=strategies,
                   threads=args.threads, deadline=deadline, time_limit=args.time_limit,
                   on_rows=save)
    layers = [r for r in rows if r["experiment"] == "layer"]
    print(format_table(layers), "", format_table(shares(layers), (
        "network", "n", "layer_type", "layers", "flop_share", "time_share", "gflop_s")), "",
        format_table([r for r in rows if r["experiment"] == "strategy"], STRATEGY_COLUMNS),
        sep="\n")
    if saved:
        print("saved", *saved)
    return 0
