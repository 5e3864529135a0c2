"""Fair GPU comparisons: the library baseline in float32 (TF32 off) and, apart, in TF32; its
backward without a second forward; poisoning, argument checks and host synchronisation out
of the timed calls."""

from __future__ import annotations

import threading

import numpy as np
import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from helpers.conv import STRATEGIES, ConvConfig, config_for, conv2d, conv2d_backward, reference
from helpers.conv.check import reference_backward, rel_error, tolerance
from helpers.device import arrays, backend
from helpers.device import precision as device_precision
from helpers.experiments import (
    conv_timing,
    phases,
    precision,
    sweep,
)
from helpers.experiments.sweep import analysis as sweep_findings
from helpers.experiments.todays_layers import compare as todays_layers_compare

CFG = config_for((2, 3, 9, 8), (4, 3, 3, 3), stride=(1, 2), padding=1)


def _inputs(cfg=CFG, seed=0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(cfg.x_shape, generator=g), torch.randn(cfg.w_shape, generator=g),
            torch.randn(cfg.y_shape, generator=g))


def _flags():
    return torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32


@pytest.fixture
def tf32_on_by_default():
    """torch's own defaults for convolutions (cuDNN TF32 allowed), both flags on, restored."""
    saved = _flags()
    torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = True
    yield
    torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = saved


class _Ops(TorchDispatchMode):
    """Every aten operator run inside the block, with the TF32 flags at the time."""

    def __init__(self):
        super().__init__()
        self.ops: list[tuple[str, tuple[bool, bool]]] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops.append((str(func), _flags()))
        return func(*args, **(kwargs or {}))

    def count(self, name: str) -> int:
        return sum(op == name for op, _ in self.ops)


# ----------------------------------------------------------------- the library's backward


def test_reference_backward_runs_no_forward_convolution():
    x, w, dy = _inputs()
    with _Ops() as seen:
        dx, dw = reference.backward(x, w, dy, CFG)
    assert seen.count("aten.convolution_backward.default") == 1
    assert seen.count("aten.convolution.default") == 0, seen.ops  # no forward again
    with _Ops() as seen:
        conv2d_backward(x, w, dy, stride=(1, 2), padding=1, strategy="reference")
    assert seen.count("aten.convolution.default") == 0, seen.ops
    dx64, dw64 = reference_backward(x, w, dy, (1, 2), 1)
    assert rel_error(dx, dx64) < 1e-5 and rel_error(dw, dw64) < 1e-5


def test_reference_backward_handles_groups_and_dilation_without_a_forward():
    cfg = config_for((1, 4, 9, 8), (4, 1, 3, 3), stride=1, padding=2, dilation=2, groups=4)
    x, w, dy = _inputs(cfg, seed=3)
    with _Ops() as seen:
        dx, dw = STRATEGIES["reference"].backward(x, w, dy, cfg, "cpu")
    assert seen.count("aten.convolution.default") == 0
    dx64, dw64 = reference_backward(x, w, dy, 1, 2, dilation=2, groups=4)
    assert rel_error(dx, dx64) < 1e-5 and rel_error(dw, dw64) < 1e-5


# ---------------------------------------------------------------- TF32 off, TF32 apart


def test_reference_computes_with_tf32_off_and_restores_torchs_flags(tf32_on_by_default):
    x, w, dy = _inputs()
    with _Ops() as seen:
        conv2d(x, w, stride=(1, 2), padding=1, strategy="reference")
        conv2d_backward(x, w, dy, stride=(1, 2), padding=1, strategy="reference")
    convs = [f for op, f in seen.ops if op.startswith("aten.convolution")]
    assert len(convs) == 2 and all(f == (False, False) for f in convs), seen.ops
    assert _flags() == (True, True)  # restored


def test_reference_tf32_is_the_same_call_with_tf32_allowed():
    x, w, dy = _inputs()
    strat = STRATEGIES["reference-tf32"]
    assert strat.family == "library" and strat.precision == "tf32"
    assert STRATEGIES["reference"].precision == "float32"
    with device_precision.tf32_mode(False), _Ops() as seen:
        y = strat.forward(x, w, CFG, "cuda")   # the strategy's own code, past its refusal
        dx, dw = strat.backward(x, w, dy, CFG, "cuda")
        assert _flags() == (False, False)
    convs = [f for op, f in seen.ops if op.startswith("aten.convolution")]
    assert len(convs) == 2 and all(f == (True, True) for f in convs), seen.ops
    assert rel_error(y, conv2d(x, w, stride=(1, 2), padding=1)) < tolerance("reference-tf32")


def test_reference_tf32_refuses_the_cpu_and_gpus_without_tf32(monkeypatch):
    strat = STRATEGIES["reference-tf32"]
    cpu = strat.supports(CFG, "cpu")
    assert "TF32" in cpu and "tensor cores" in cpu and "8.0" in cpu
    with pytest.raises(ValueError, match="TF32 is a mode of NVIDIA tensor cores"):
        conv2d(np.ones((1, 1, 4, 4), np.float32), np.ones((1, 1, 3, 3), np.float32),
               strategy="reference-tf32", device="cpu")
    if backend.MODE != "gpu":
        assert "TF32" in strat.supports(CFG, "cuda") and "no GPU" in strat.supports(CFG, "cuda")
    monkeypatch.setattr(backend, "MODE", "gpu")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *a: (7, 5))
    assert "sm_75" in strat.unavailable("cuda") and "8.0" in strat.unavailable("cuda")
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *a: (9, 0))
    assert strat.unavailable("cuda") is None
    assert STRATEGIES["reference"].unavailable("cpu") is None


def test_cpu_lists_leave_the_tf32_library_out():
    """No CPU run pays for it: it has no CPU code, so CPU defaults skip it."""
    assert "cpu" not in STRATEGIES["reference-tf32"].devices
    from helpers.experiments.conv_bench import bench_layers

    tiny = (ConvConfig.from_study(b=1, i=7, f=2, k=3, s=1, c=2, name="T"),)
    rows = bench_layers(layers=tiny, strategies=["reference", "reference-tf32"],
                        devices=["cpu"], min_run_time=0.005, measure_memory=False)
    assert {r["strategy"] for r in rows} == {"reference"}


def test_one_tf32_switch_for_the_whole_workbook():
    assert precision.tf32_mode is device_precision.tf32_mode
    assert set(precision.STRATEGY_PRECISIONS) == set(STRATEGIES)
    assert precision.strategy_reason("reference-tf32", "tf32") is None
    assert "reference's" in precision.strategy_reason("reference-tf32", "float32")
    assert "tensor cores" in precision.supports("tf32", "conv", "cpu")


def test_rankings_and_findings_compare_float32_with_float32():
    with pytest.raises(ValueError, match="strategies must be among"):
        todays_layers_compare.compare(device="cuda", strategies=["reference-tf32"])
    rows = [dict(sweep="stride", x=s, s=s, strategy=n, device="GPU", status="ok", median_ms=ms)
            for s, times in ((1, {"fft": 1.0, "reference": 2.0, "reference-tf32": 0.5}),
                             (4, {"fft": 1.0, "reference": 0.4, "reference-tf32": 0.1}))
            for n, ms in times.items()]
    [stride] = [f for f in sweep_findings.findings(rows) if f["finding"].startswith("FFT only")]
    assert "fastest at stride 4: reference" in stride["here"]
    assert "reference-tf32" not in stride["here"]


def test_the_tf32_colour_is_a_lighter_shade_of_the_references():
    pytest.importorskip("plotly")  # a bare GPU server has none
    from helpers.figures import style

    ref, tf32 = style.COLORS["reference"], style.COLORS["reference-tf32"]
    rgb = [tuple(int(c[i:i + 2], 16) for i in (1, 3, 5)) for c in (ref, tf32)]
    assert all(b > a for a, b in zip(*rgb))          # lighter in every channel
    others = {v for k, v in style.COLORS.items() if k != "reference-tf32"}
    assert tf32 not in others


# ------------------------------------------------------------ poisoning and the timed region


def test_poisoned_fills_with_nan_except_inside_unpoisoned(monkeypatch):
    assert arrays.poisoning() and torch.isnan(arrays.poisoned((3, 4), "cpu")).all()
    real_full = torch.full

    def no_fill(*a, **k):
        raise AssertionError("a NaN fill inside unpoisoned()")

    with arrays.unpoisoned():
        monkeypatch.setattr(torch, "full", no_fill)
        t = arrays.poisoned((3, 4), torch.device("cpu"))
        assert t.shape == (3, 4) and t.dtype == torch.float32 and not arrays.poisoning()
        with arrays.unpoisoned():
            assert not arrays.poisoning()
        assert not arrays.poisoning()
        seen = []
        other = threading.Thread(target=lambda: seen.append(arrays.poisoning()))
        other.start()
        other.join()
        assert seen == [True]   # another thread (a check running beside a timing) stays poisoned
        monkeypatch.setattr(torch, "full", real_full)
    assert arrays.poisoning() and torch.isnan(arrays.poisoned((2,), "cpu")).all()


def test_measure_checks_a_poisoned_warm_up_and_times_the_strategy_unpoisoned(monkeypatch):
    cfg = config_for((1, 2, 8, 8), (2, 2, 3, 3))
    public, timed = [], []
    real_conv2d, real_benchmark = conv_timing.conv2d, conv_timing.timing.benchmark

    def conv2d_spy(*a, **k):
        public.append((arrays.poisoning(), _flags()))
        return real_conv2d(*a, **k)

    def benchmark_spy(fn, *a, **k):
        calls_before = len(public)

        def spied():
            timed.append((arrays.poisoning(), _flags()))
            fn()
        out = real_benchmark(spied, *a, **k)
        assert len(public) == calls_before  # the timed calls skip the argument checks
        return out

    monkeypatch.setattr(conv_timing, "conv2d", conv2d_spy)
    monkeypatch.setattr(conv_timing.timing, "benchmark", benchmark_spy)
    saved = _flags()
    try:
        torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = True
        row = sweep.measure(cfg, "im2col-gemm", "cpu", backward=True, min_run_time=0.01,
                            measure_memory=True)
    finally:
        torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = saved
    assert row["status"] == "ok" and row["median_ms"] > 0 and row["peak_bytes"] is not None
    assert public == [(True, (False, False))]          # one warm-up, poisoned, TF32 off
    assert timed and all(t == (False, (False, False)) for t in timed)


def test_measure_fails_a_row_whose_warm_up_left_an_output_unwritten(monkeypatch):
    cfg = config_for((1, 2, 8, 8), (2, 2, 3, 3))
    real_conv2d = conv_timing.conv2d

    def leaves_a_hole(*a, **k):
        y = real_conv2d(*a, **k)
        y[0, 0, 0, 0] = float("nan")
        return y

    monkeypatch.setattr(conv_timing, "conv2d", leaves_a_hole)
    row = sweep.measure(cfg, "direct-naive", "cpu", backward=False, min_run_time=0.01,
                        measure_memory=False)
    assert row["median_ms"] is None and row["status"].startswith("failed") and "NaN" in \
        row["status"]


def test_phase_times_measures_unpoisoned_after_a_poisoned_warm_up(monkeypatch):
    seen = []
    real = phases.conv2d

    def spy(*a, **k):
        seen.append(arrays.poisoning())
        return real(*a, **k)

    monkeypatch.setattr(phases, "conv2d", spy)
    phases.phase_times("im2col-gemm", (1, 2, 8, 8), (2, 2, 3, 3), repeats=2)
    assert seen == [True, False, False]


def test_library_kernels_lists_the_float32_kernels_unless_asked_for_tf32(tf32_on_by_default,
                                                                          monkeypatch):
    seen = []
    real = torch.nn.functional.conv2d

    def spy(*a, **k):
        seen.append(_flags())
        return real(*a, **k)

    monkeypatch.setattr(torch.nn.functional, "conv2d", spy)
    phases.library_kernels((1, 2, 8, 8), (2, 2, 3, 3), backward=False)
    assert seen and all(f == (False, False) for f in seen)
    seen.clear()
    phases.library_kernels((1, 2, 8, 8), (2, 2, 3, 3), backward=False, tf32=True)
    assert seen and all(f == (True, True) for f in seen)
    assert _flags() == (True, True)


def test_precision_times_our_strategies_unpoisoned_and_checks_them_poisoned(monkeypatch):
    states = []
    real = precision.timings.benchmark

    def spy(fn, *a, **k):
        states.append(arrays.poisoning())
        return real(fn, *a, **k)

    monkeypatch.setattr(precision.timings, "benchmark", spy)
    rows = precision.measure(["conv"], ["float32"], device="cpu", strategies=["im2col-gemm"],
                             min_run_time=0.005)
    assert states == [False] and rows[0]["status"] == "ok"
    assert rows[0]["max_rel_error"] < 1e-5   # the checked output: every element written
    assert arrays.poisoning()


def test_the_library_choice_is_float32_unless_tf32_is_asked_for():
    from helpers.experiments import algorithm_choice

    with pytest.raises(ValueError, match="tf32 must be True or False"):
        algorithm_choice.measure([], "cuda", tf32="yes")
    if backend.MODE != "gpu":
        row = algorithm_choice.gpu_choice("Conv5", tf32=True)
        assert row["median_ms"] is None and row["device"] == "no CUDA GPU"


@pytest.mark.parametrize("same_stream", [True, False])
def test_kernel_array_skips_the_stream_sync_on_torchs_default_stream(monkeypatch, same_stream):
    """On a GPU: Numba's legacy default stream orders after torch's default stream, so no
    host synchronisation there; on any other torch stream the synchronisation stays."""
    from numba import cuda

    calls = []
    monkeypatch.setattr(backend, "MODE", "gpu")
    monkeypatch.setattr(cuda, "as_cuda_array", lambda t, **k: calls.append(k) or "view",
                        raising=False)
    monkeypatch.setattr(torch.cuda, "current_stream", lambda *a: "torch default")
    monkeypatch.setattr(torch.cuda, "default_stream",
                        lambda *a: "torch default" if same_stream else "another")
    assert arrays.kernel_array(torch.zeros(4)) == "view"
    assert calls == ([{"sync": False}] if same_stream else [{}])


# ------------------------------------------------------------------------ on a real GPU

def gpu(test):
    """A test that needs a real CUDA GPU (run by ``python3 -m tools.gpu_tests`` there)."""
    return pytest.mark.gpu(pytest.mark.skipif(backend.MODE != "gpu",
                                              reason="needs a real CUDA GPU")(test))


@gpu
def test_on_a_gpu_reference_is_float32_and_reference_tf32_rounds_to_tf32():
    """TF32 reaches cuDNN only through reference-tf32. reference's forward and dx are within
    float32's error of float64; reference-tf32's within its tolerance, and on sm_80+ at least
    one of them shows TF32's rounding. Which kernel computes a pass is cuDNN's choice: with
    TF32 allowed, a dx of 64 channels at 16 x 16 stayed within float32's error on an H200,
    while the forward of every Table I layer rounded to TF32 (results/precision_nvidia-h200)."""
    cfg = config_for((32, 384, 13, 13), (384, 384, 3, 3), padding=1)
    x, w, dy = _inputs(cfg, seed=5)
    y64 = torch.nn.functional.conv2d(x.double(), w.double(), padding=1)
    dx64 = torch.nn.grad.conv2d_input(x.shape, w.double(), dy.double(), padding=1)
    x, w, dy = x.cuda(), w.cuda(), dy.cuda()

    def errors(strategy):
        y = conv2d(x, w, padding=1, strategy=strategy)
        dx = conv2d_backward(x, w, dy, padding=1, strategy=strategy)[0]
        return rel_error(y, y64), rel_error(dx, dx64)

    assert max(errors("reference")) < 1e-5
    if STRATEGIES["reference-tf32"].unavailable("cuda") is None:
        rounded = errors("reference-tf32")
        assert max(rounded) < tolerance("reference-tf32"), rounded
        assert max(rounded) > 1e-5, f"no pass rounded to TF32: {rounded}"


@gpu
def test_on_a_gpu_numba_kernels_see_torchs_queued_work_without_a_host_sync():
    """kernel_array skips the synchronisation on torch's default stream: a Numba kernel
    launched right after torch queued the work that produces its input still reads it."""
    cfg = config_for((16, 32, 64, 64), (32, 32, 3, 3), padding=1)
    x, w, _ = (t.cuda() for t in _inputs(cfg, seed=6))
    for _ in range(3):
        torch.cuda.synchronize()
        x2 = (x @ torch.eye(64, device="cuda")).mul_(2.0)  # queued, not finished
        y = conv2d(x2, w, padding=1, strategy="direct-naive")
        assert rel_error(y, conv2d(2.0 * x, w, padding=1)) < 1e-5


@gpu
def test_on_a_gpu_both_library_baselines_are_timed():
    layer = ConvConfig.from_study(b=32, i=16, f=64, k=3, s=1, c=64, name="small")
    rows = {name: sweep.measure(layer, name, "cuda", backward=True, min_run_time=0.05)
            for name in ("reference", "reference-tf32", "im2col-gemm")}
    assert rows["reference"]["status"] == "ok" and rows["im2col-gemm"]["status"] == "ok"
    tf32 = rows["reference-tf32"]
    assert tf32["status"] == "ok" or "TF32" in tf32["status"]
