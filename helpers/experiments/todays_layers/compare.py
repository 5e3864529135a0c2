"""Today's layer types, and our strategies beside the library on five of them.

:func:`layer_type` names a convolution ``depthwise``, ``grouped``, ``1x1``, ``dilated`` or
``dense kxk``; :func:`bytes_moved` (x + w + y in float32) and :func:`intensity` (FLOP/byte)
place it on a roofline; :func:`row` is the one row (:data:`FIELDS`) of both experiments.
:data:`REPRESENTATIVE`: a depthwise 3 x 3 (MobileNet-V2), a grouped 3 x 3 (ResNeXt-50 32x4d),
a depthwise 7 x 7 (ConvNeXt-Tiny), a 1 x 1 (MobileNet-V2) and a dilated 3 x 3 (DeepLabV3's
ResNet-50), at a 224 x 224 input. :func:`library_choice` reads oneDNN's implementation or
cuDNN's kernels as :mod:`helpers.experiments.algorithm_choice` does, with groups and dilation;
:func:`compare` times our strategies and torch on a CPU or GPU, and in the CUDA simulator checks
them on :func:`tiny` copies against the float64 reference, untimed. Shapes NCHW (cuDNN
symbols); times in ms; rates in GFLOP/s.

Source: torchvision's models; Chen et al., "Rethinking Atrous Convolution", arXiv:1706.05587
(DeepLabV3); oneDNN verbose mode; cuDNN's cudnnConvolutionFwdAlgo_t.
"""

from __future__ import annotations

import contextlib
import dataclasses
import re
import types
from collections.abc import Iterable, Iterator, Sequence

import numba
import numpy as np
import torch
import torch.nn.functional as F

from helpers.conv import STRATEGIES, conv2d, simulator_refusal
from helpers.conv.check import reference, rel_error, tolerance
from helpers.conv.config import ConvConfig
from helpers.device import backend, timing
from helpers.device.precision import tf32_mode
from helpers.device.progress import time_limit_status, time_up
from helpers.experiments import algorithm_choice as choice
from helpers.experiments import sweep

__all__ = [
    "FIELDS",
    "LAYER_TYPES",
    "REPRESENTATIVE",
    "bytes_moved",
    "compare",
    "config_of",
    "cpu_threads",
    "cuda_settings",
    "intensity",
    "layer_type",
    "library_choice",
    "row",
    "tiny",
    "tolerance",
    "torch_backend",
]

#: The layer types, in the order charts and tables list them.
LAYER_TYPES = ("depthwise", "grouped", "1x1", "dilated", "dense kxk")

#: The row of a layer (``experiment="layer"``) and of a strategy on a layer (``"strategy"``).
FIELDS = ("experiment", "network", "index", "name", "layer_type", "n", "c", "h", "w", "k", "r",
          "s", "stride", "padding", "dilation", "groups", "flops", "bytes", "intensity",
          "strategy", "library", "algorithm", "kernel", "kernels", "median_ms", "iqr_ms",
          "gflop_s", "max_rel_error", "threads", "tf32", "device", "device_kind", "status")


def _layer(name: str, x_shape, w_shape, stride, padding, dilation=1, groups=1) -> ConvConfig:
    cfg = ConvConfig.from_shapes(x_shape, w_shape, stride, padding, dilation, groups)
    return dataclasses.replace(cfg, name=name)


#: Five layers as torchvision builds them at a 224 x 224 input, batch 1, named
#: ``"<network>: <module>"`` (tests/test_todays_layers.py checks each against torchvision).
#: The dilated one is DeepLabV3's: ResNet-50 with the strides of layer3 and layer4 replaced
#: by dilation (torchvision's ``replace_stride_with_dilation=[False, True, True]``).
REPRESENTATIVE: tuple[ConvConfig, ...] = (
    _layer("MobileNet-V2: features.3.conv.1.0", (1, 144, 56, 56), (144, 1, 3, 3), 1, 1, 1, 144),
    _layer("ResNeXt-50 (32x4d): layer1.0.conv2", (1, 128, 56, 56), (128, 4, 3, 3), 1, 1, 1, 32),
    _layer("ConvNeXt-Tiny: features.3.0.block.0", (1, 192, 28, 28), (192, 1, 7, 7), 1, 3, 1,
           192),
    _layer("MobileNet-V2: features.3.conv.0.0", (1, 24, 56, 56), (144, 24, 1, 1), 1, 0),
    _layer("DeepLabV3 (ResNet-50): layer3.1.conv2", (1, 256, 28, 28), (256, 256, 3, 3), 1, 2, 2),
)


def layer_type(cfg: ConvConfig) -> str:
    """One of :data:`LAYER_TYPES`: ``depthwise`` (groups = C > 1: one input channel per
    filter), ``grouped`` (1 < groups < C), ``1x1`` (R = S = 1), ``dilated`` (dilation > 1),
    else ``dense kxk``; the first that applies."""
    if cfg.groups == cfg.c and cfg.c > 1:
        return "depthwise"
    if 1 < cfg.groups < cfg.c:
        return "grouped"
    if cfg.r == cfg.s == 1:
        return "1x1"
    if cfg.dil_h > 1 or cfg.dil_w > 1:
        return "dilated"
    return "dense kxk"


def bytes_moved(cfg: ConvConfig, itemsize: int = 4) -> int:
    """Bytes a forward pass must at least move: x, w and y each once, ``itemsize`` bytes per
    value (4: float32), in full. Real kernels move more; a layer whose stride exceeds its kernel
    (a 1 x 1 with stride 2) needs only the input values it samples, so there it counts more."""
    return itemsize * (int(np.prod(cfg.x_shape)) + int(np.prod(cfg.w_shape))
                       + int(np.prod(cfg.y_shape)))


def intensity(cfg: ConvConfig, itemsize: int = 4) -> float:
    """Arithmetic intensity of the forward pass in FLOP/byte: ``cfg.flops`` (2 N K P Q (C/G)
    R S) over :func:`bytes_moved`; the x coordinate of a roofline."""
    return cfg.flops / bytes_moved(cfg, itemsize)


def _square(a: int, b: int):
    return a if a == b else f"{a}x{b}"


def _pair(v) -> tuple[int, int]:
    if isinstance(v, str) and "x" in v:
        a, b = v.split("x")
        return int(a), int(b)
    return int(v), int(v)


def row(cfg: ConvConfig, experiment: str, **values) -> dict:
    """A dict with every key of :data:`FIELDS`: the layer's sizes (stride, padding, dilation
    as an int, or ``"HxW"`` when they differ), type, FLOPs, bytes, intensity, then ``values``.
    ``cfg.name`` ``"<network>: <module>"`` fills ``network`` and ``name``.

    Raises:
        ValueError: a key of ``values`` not in :data:`FIELDS`.
    """
    unknown = sorted(set(values) - set(FIELDS))
    if unknown:
        raise ValueError(f"values must be among FIELDS, got {unknown}")
    network, _, name = cfg.name.rpartition(": ")
    out = dict.fromkeys(FIELDS)
    out.update(experiment=experiment, network=network or None, name=name, n=cfg.n, c=cfg.c,
               h=cfg.h, w=cfg.w, k=cfg.k, r=cfg.r, s=cfg.s, groups=cfg.groups,
               layer_type=layer_type(cfg), stride=_square(cfg.stride_h, cfg.stride_w),
               padding=_square(cfg.pad_h, cfg.pad_w), dilation=_square(cfg.dil_h, cfg.dil_w),
               flops=cfg.flops, bytes=bytes_moved(cfg), intensity=intensity(cfg))
    out.update(values)
    return out


def config_of(r: dict) -> ConvConfig:
    """The ConvConfig of a row of :func:`row` (live, or read back from ``results/``), named
    ``"<network>: <name>"``. Raises ValueError as :meth:`ConvConfig.from_shapes`."""
    n, c, k, g = (int(r[key]) for key in ("n", "c", "k", "groups"))
    cfg = ConvConfig.from_shapes((n, c, int(r["h"]), int(r["w"])),
                                 (k, c // g, int(r["r"]), int(r["s"])), _pair(r["stride"]),
                                 _pair(r["padding"]), _pair(r["dilation"]), g)
    return dataclasses.replace(cfg, name=f"{r['network']}: {r['name']}")


@contextlib.contextmanager
def cpu_threads(threads: int | None) -> Iterator[None]:
    """Within the block torch and Numba's parallel loops use ``threads`` CPU threads (None:
    leave them); restored afterwards. One thread keeps small layers' times honest on a shared
    machine, where threads wait for each other. Raises ValueError unless 1 to 1024."""
    if threads is None:
        yield
        return
    if isinstance(threads, bool) or not isinstance(threads, int) or not 1 <= threads <= 1024:
        raise ValueError(f"threads must be an integer from 1 to 1024, got {threads!r}")
    before_torch, before_numba = torch.get_num_threads(), numba.get_num_threads()
    torch.set_num_threads(threads)
    numba.set_num_threads(min(threads, numba.config.NUMBA_NUM_THREADS))
    try:
        yield
    finally:
        torch.set_num_threads(before_torch)
        numba.set_num_threads(before_numba)


@contextlib.contextmanager
def cuda_settings() -> Iterator[None]:
    """Within the block cuDNN times its algorithms and keeps the fastest
    (``torch.backends.cudnn.benchmark``) and float32 stays float32 (TF32 off for cuDNN and
    cuBLAS, :func:`helpers.device.precision.tf32_mode`, so that the FP32 roof is the right
    one); all restored afterwards."""
    before = torch.backends.cudnn.benchmark
    torch.backends.cudnn.benchmark = True
    try:
        with tf32_mode(False):
            yield
    finally:
        torch.backends.cudnn.benchmark = before


def tiny(cfg: ConvConfig, size: int = 6, batch: int = 1) -> ConvConfig:
    """A copy of ``cfg`` small enough for the CUDA simulator, of the same type: the same
    kernel, stride, padding, dilation and channels per group; ``size`` x ``size`` input,
    ``batch`` images, 4 depthwise channels, 2 groups, or at most 4 channels and filters.
    Raises ValueError if ``size`` or ``batch`` < 1."""
    if size < 1 or batch < 1:
        raise ValueError(f"size and batch must be >= 1, got {size} and {batch}")
    cg, kg = cfg.c // cfg.groups, cfg.k // cfg.groups
    kind = layer_type(cfg)
    groups = 4 if kind == "depthwise" else 2 if kind == "grouped" else 1
    c, k = (cg * groups, kg * groups) if groups > 1 else (min(cfg.c, 4), min(cfg.k, 4))
    side = max(size, cfg.r_extent - 2 * min(cfg.pad_h, cfg.pad_w))
    small = ConvConfig.from_shapes((batch, c, side, side), (k, c // groups, cfg.r, cfg.s),
                                   (cfg.stride_h, cfg.stride_w), (cfg.pad_h, cfg.pad_w),
                                   (cfg.dil_h, cfg.dil_w), groups)
    return dataclasses.replace(small, name=cfg.name)


def _inputs(cfg: ConvConfig, seed: int, device: str) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    x, w = (torch.randn(shape, generator=gen) for shape in (cfg.x_shape, cfg.w_shape))
    return (x.to(device), w.to(device)) if device == "cuda" else (x, w)


def _error(cfg: ConvConfig, strategy: str, device: str, seed: int) -> float:
    """Max relative error of ``strategy`` on one image of ``cfg`` against float64."""
    one = cfg.with_batch(1)
    x, w = _inputs(one, seed, device if backend.MODE == "gpu" else "cpu")
    y = conv2d(x, w, **one.kwargs, strategy=strategy, device=device)
    return rel_error(y.cpu(), reference(x.cpu(), w.cpu(), **one.kwargs))


def torch_backend(cfg: ConvConfig, device: str = "cpu") -> str:
    """The backend torch's selector picks for ``cfg`` (float32 NCHW) on ``device``:
    ``Mkldnn`` (oneDNN), ``Slow2d`` (torch's im2col + GEMM), ``Cudnn``, ``CudaDepthwise2d``
    (torch's own depthwise kernel)...; ``"unknown"`` where the selector is missing."""
    x, w = torch.empty(cfg.x_shape, device=device), torch.empty(cfg.w_shape, device=device)
    kw = cfg.kwargs
    try:
        chosen = torch._C._select_conv_backend(x, w, None, kw["stride"], kw["padding"],
                                               kw["dilation"], False, (0, 0), cfg.groups, None)
    except (AttributeError, TypeError, RuntimeError):
        return "unknown"
    return str(chosen).rsplit(".", 1)[-1]


def _family(kernel: str) -> str:
    """The algorithm family of a kernel name; torch's own depthwise kernels (one thread per
    output, its window read in a loop) are direct convolutions."""
    return "direct" if "depthwise" in kernel.lower() else choice.family_of_kernel(kernel)


def _cpu_choice(cfg: ConvConfig, min_run_time: float, seed: int) -> dict:
    x, w = _inputs(cfg, seed, "cpu")
    call = lambda: F.conv2d(x, w, None, **cfg.kwargs)
    call()
    try:
        with choice.capture_fd() as cap, \
                torch.backends.mkldnn.verbose(torch.backends.mkldnn.VERBOSE_ON):
            call()
    except AssertionError:  # torch's verbose scope asserts that oneDNN accepted the level
        cap = types.SimpleNamespace(text="")
    lines = choice.parse_onednn(cap.text)
    convs = [c for c in lines if c["primitive"] == "convolution"]
    t = timing.benchmark(call, device="cpu", min_run_time=min_run_time)
    chosen = torch_backend(cfg, "cpu")
    listed = "; ".join(f"{c['primitive']} {c['impl']} {c['ms']} ms" for c in lines)
    common = {"median_ms": t.median_ms, "iqr_ms": t.iqr_s * 1e3, "kernels": listed or None,
              "gflop_s": cfg.flops / t.median_s / 1e9}
    if convs:
        top = max(convs, key=lambda c: c["ms"] or 0.0)
        found = re.search(r"(?:oneDNN|MKL-DNN)\s+v([\d.]+)", torch.__config__.show())
        return dict(common, library="oneDNN" + (f" {found.group(1)}" if found else ""),
                    algorithm=choice.family_of_onednn(top["impl"]), kernel=top["impl"],
                    status="ok")
    if chosen in ("Slow2d", "SlowDilated2d"):
        return dict(common, library=f"torch ({chosen})", algorithm="gemm",
                    kernel="aten::_slow_conv2d_forward" if chosen == "Slow2d"
                    else "aten::slow_conv_dilated2d",
                    status="ok: torch did not call oneDNN (its own im2col + GEMM)")
    return dict(common, library=f"torch ({chosen})",
                status=f"ok: no oneDNN convolution line was printed (torch's backend: {chosen})")


def _gpu_choice(cfg: ConvConfig, min_run_time: float, seed: int) -> dict:
    x, w = _inputs(cfg, seed, "cuda")
    call = lambda: F.conv2d(x, w, None, **cfg.kwargs)
    chosen = torch_backend(cfg, "cuda")
    v = torch.backends.cudnn.version() or 0  # 90100 is 9.1.0 (cuDNN 8: 8907 is 8.9.7)
    major, rest = divmod(v, 10000 if v >= 90000 else 1000)
    library = (f"cuDNN {major}.{rest // 100}.{rest % 100}" if chosen == "Cudnn"
               else f"torch ({chosen})")
    with cuda_settings():
        for _ in range(2):  # the first call times cuDNN's candidates
            call()
        torch.cuda.synchronize()
        activities = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
        with torch.profiler.profile(activities=activities) as prof:
            for _ in range(3):
                call()
            torch.cuda.synchronize()
        kernels = choice.kernel_times(prof.events(), 3)
        t = timing.benchmark(call, device="cuda", min_run_time=min_run_time)
    family, name, _ = choice.main_algorithm(kernels)
    own = [(n, ms) for n, ms in kernels if _family(n) == "direct"]
    if family is None and own:  # torch's own depthwise kernel, which cuDNN's names miss
        family, name = "direct", max(own, key=lambda p: p[1])[0]
    status = "ok" if family else "ok: no kernel named a known algorithm"
    listed = "; ".join(f"{_family(n)} {ms:.4g} ms {choice.short_kernel_name(n, 48)}"
                       for n, ms in kernels[:5])
    return {"library": library, "algorithm": family, "median_ms": t.median_ms,
            "iqr_ms": t.iqr_s * 1e3, "gflop_s": cfg.flops / t.median_s / 1e9, "tf32": False,
            "kernel": choice.short_kernel_name(name) if name else None,
            "kernels": listed or None, "status": status}


def library_choice(cfg: ConvConfig, device: str = "cpu", *, min_run_time: float = 0.02,
                   seed: int = 0) -> dict:
    """What torch ran for ``cfg``'s forward pass (float32, no bias), and how long it took.

    CPU: oneDNN's verbose lines (:func:`helpers.experiments.algorithm_choice.parse_onednn`):
    ``kernel`` is the convolution's implementation (``jit_dw:avx512_core`` for depthwise),
    ``kernels`` every primitive with its ms (layout reorders included), or torch's own im2col +
    GEMM where it did not call oneDNN. GPU: with cuDNN's benchmark mode on and TF32 off
    (:func:`cuda_settings`), the kernels of three profiled calls; torch's own depthwise kernel
    (``CudaDepthwise2d``) counts as ``direct``. Timed by :func:`helpers.device.timing.benchmark`.

    Returns:
        A :func:`row` with ``experiment="strategy"``, ``strategy="reference"``, ``library``,
        ``algorithm`` (a family of :data:`helpers.experiments.algorithm_choice.FAMILIES`),
        ``kernel``, ``kernels``, ``median_ms``, ``gflop_s``, ``max_rel_error`` (one image,
        against float64), ``device``, ``status``; without a GPU for ``"cuda"``, why not.

    Raises:
        ValueError: an unknown device.
    """
    if device not in ("cpu", "cuda"):
        raise ValueError(f"device must be 'cpu' or 'cuda', got {device!r}")
    reason = choice.gpu_reason() if device == "cuda" else None
    if reason:
        return row(cfg, "strategy", strategy="reference", device="no CUDA GPU",
                   device_kind="cuda", status=reason)
    try:
        found = (_gpu_choice if device == "cuda" else _cpu_choice)(cfg, min_run_time, seed)
        found["max_rel_error"] = _error(cfg, "reference", device, seed)
    except Exception as exc:  # noqa: BLE001  (an out-of-memory, a CUDA or profiler error)
        found = {"status": f"failed: {type(exc).__name__}: {exc}"}
    return row(cfg, "strategy", strategy="reference", device=timing.device_label(device),
               device_kind=device, threads=torch.get_num_threads() if device == "cpu" else None,
               **found)


def _simulated(cfg: ConvConfig, strategy: str, seed: int) -> dict:
    """One strategy on the CUDA path in the simulator: :func:`tiny` ``cfg``, against float64."""
    small = tiny(cfg)
    strat = STRATEGIES[strategy]
    where = {"device": backend.info().device_label, "device_kind": "simulator"}
    reason = strat.supports(small, "cuda") or simulator_refusal(strat, small)
    if reason:
        return row(small, "strategy", strategy=strategy, status=reason, **where)
    x, w = _inputs(small, seed, "cpu")
    try:
        err = rel_error(conv2d(x, w, **small.kwargs, strategy=strategy, device="cuda"),
                        reference(x, w, **small.kwargs))
    except Exception as exc:  # noqa: BLE001  (reported in the row)
        return row(small, "strategy", strategy=strategy, status=f"failed: {exc}", **where)
    ok = err <= tolerance(strategy)
    return row(small, "strategy", strategy=strategy, max_rel_error=err, **where,
               status="checked: correctness only (simulator, never timed)" if ok
               else f"WRONG: error {err:.1e} over the tolerance {tolerance(strategy):g}")


def _timed(cfg: ConvConfig, strategy: str, device: str, min_run_time: float, budget_s: float,
           seed: int, deadline, time_limit) -> dict:
    r = sweep.measure(cfg, strategy, device, backward=False, min_run_time=min_run_time,
                      measure_memory=False, budget_s=budget_s, seed=seed, deadline=deadline,
                      time_limit=time_limit)
    err = None
    if r["status"] == "ok":
        try:
            err = _error(cfg, strategy, device, seed)
        except Exception as exc:  # noqa: BLE001  (reported in the row)
            r["status"] = f"timed, but the check failed: {exc}"
    if err is not None and err > tolerance(strategy):
        r["status"] = f"WRONG: error {err:.1e} over the tolerance {tolerance(strategy):g}"
    return row(cfg, "strategy", strategy=strategy, median_ms=r["median_ms"],
               iqr_ms=r["iqr_ms"], gflop_s=r["gflop_per_s"], max_rel_error=err,
               device=r["device"], device_kind=device, status=r["status"],
               threads=torch.get_num_threads() if device == "cpu" else None,
               tf32=False if device == "cuda" else None)


def compare(layers: Iterable[ConvConfig] = REPRESENTATIVE, device: str = "cpu", *,
            strategies: Sequence[str] | None = None, min_run_time: float = 0.02,
            budget_s: float = 5.0, threads: int | None = 1, seed: int = 0,
            deadline: float | None = None, time_limit: float | None = None) -> list[dict]:
    """Our strategies and the library, forward, on each layer.

    On ``"cpu"``, and on ``"cuda"`` with a GPU: :func:`library_choice`, then each strategy
    timed by :func:`helpers.experiments.sweep.measure` (refused up front over ``budget_s``
    seconds a call; a strategy runs a grouped layer once per group unless it has its own
    kernels for it) and checked on one image against float64. On ``"cuda"`` in the Numba
    simulator: each strategy on the :func:`tiny` copy of the layer, correctness only.

    Args:
        layers: ConvConfigs (default :data:`REPRESENTATIVE`). device: ``"cpu"`` or ``"cuda"``.
        strategies: keys of :data:`helpers.conv.STRATEGIES` other than the library's
            (``reference``, ``reference-tf32``; None: all with code for the device; ``[]``:
            the library only, in float32).
        min_run_time: seconds timed per call.
        threads: CPU threads during the run (:func:`cpu_threads`; None: leave them).
        deadline, time_limit: rows not started before the deadline (:func:`time.monotonic`)
            get the status ``"skipped: time limit of T s reached"``.

    Returns:
        :func:`row` dicts with ``experiment="strategy"``, the library's first for each layer.

    Raises:
        ValueError: an unknown device or strategy, or bad ``threads``.
    """
    if device not in ("cpu", "cuda"):
        raise ValueError(f"device must be 'cpu' or 'cuda', got {device!r}")
    # ours: every float32 strategy but the library (reference-tf32 is the library too)
    ours = [s for s, st in STRATEGIES.items() if st.family != "library"
            and device in st.devices]
    for s in strategies or ():
        if s not in ours:
            raise ValueError(f"strategies must be among {ours} on {device}, got {s!r}")
    names = ours if strategies is None else list(strategies)
    simulated = device == "cuda" and backend.MODE != "gpu"
    rows = []
    on_gpu = device == "cuda" and not simulated
    with cpu_threads(threads if device == "cpu" else None), \
            (cuda_settings() if on_gpu else contextlib.nullcontext()):
        for cfg in layers:
            for name in ["reference", *names]:
                if time_up(deadline):
                    rows.append(row(cfg, "strategy", strategy=name, device_kind=device,
                                    status=time_limit_status(time_limit)))
                elif simulated:
                    rows.append(_simulated(cfg, name, seed) if name != "reference" else
                                library_choice(cfg, device))
                elif name == "reference":
                    rows.append(library_choice(cfg, device, min_run_time=min_run_time,
                                               seed=seed))
                else:
                    rows.append(_timed(cfg, name, device, min_run_time, budget_s, seed,
                                       deadline, time_limit))
    return rows
