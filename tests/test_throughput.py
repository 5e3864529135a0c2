"""helpers.experiments.throughput: size lists, up-front size checks, and tiny CPU sweeps."""

from __future__ import annotations

import math
import re
import time

import pytest
from conftest import simulator_only
from hypothesis import given, settings
from hypothesis import strategies as st

from helpers.device import backend, host
from helpers.device.timing import device_label
from helpers.experiments.throughput import budget as tpb
from helpers.experiments.throughput import sweeps as tp

FAST = dict(min_run_time=0.005, progress=False)

ROW_KEYS = {"experiment", "op", "backend", "device_kind", "device", "dtype", "size", "bytes",
            "flops", "median_s", "iqr_s", "min_s", "max_s", "repeats", "gb_s", "gflop_s",
            "status"}


# -------------------------------------------------------------------------------- log_sizes


def test_log_sizes_examples():
    assert tp.log_sizes(1e3, 1e5) == [1_000, 10_000, 100_000]
    assert tp.log_sizes(1e3, 1e8, 2) == [1_000, 3_162, 10_000, 31_623, 100_000, 316_228,
                                         1_000_000, 3_162_278, 10_000_000, 31_622_777,
                                         100_000_000]
    assert tp.log_sizes(64, 512, 2) == [64, 181, 512]
    assert tp.log_sizes(7, 7) == [7]
    assert tp.log_sizes(5, 6) == [5, 6]


@settings(max_examples=300, deadline=None)
@given(lo=st.integers(1, 10**7), factor=st.floats(1.0, 1e5), per_decade=st.integers(1, 6))
def test_log_sizes_properties(lo, factor, per_decade):
    hi = max(lo, int(lo * factor))
    sizes = tp.log_sizes(lo, hi, per_decade)
    assert all(type(n) is int for n in sizes)
    assert sizes == sorted(set(sizes))          # sorted and unique
    assert sizes[0] == lo and sizes[-1] == hi   # endpoints included
    assert len(sizes) <= max(1, round(math.log10(hi / lo) * per_decade)) + 1
    # spaced on a log scale: the number of steps is the decades times per_decade, rounded,
    # so one step spans at most 1.5 / per_decade decades (plus rounding to whole numbers)
    for a, b in zip(sizes, sizes[1:]):
        assert b <= (a + 0.5) * 10 ** (1.5 / per_decade) + 0.5


@pytest.mark.parametrize("lo, hi", [(0, 10), (-5, 10), (10, 9), (0.5, 10), (100, 1)])
def test_log_sizes_rejects(lo, hi):
    with pytest.raises(ValueError):
        tp.log_sizes(lo, hi)


# ------------------------------------------------------------------------------ check_sizes


def test_check_sizes_accepts_reasonable_ranges():
    # no exception for sensible elementwise and GEMM ranges (op is ignored for GEMM)
    for dtype in tp.DTYPES:
        assert tp.check_sizes("elementwise", "relu", 1, 10**6, dtype, "cpu") is None
        tp.check_sizes("elementwise", "saxpy", 5, 5, dtype, "cpu")
        tp.check_sizes("gemm", "anything", 8, 1024, dtype, "cpu")


@pytest.mark.parametrize("experiment, op, lo, hi, dtype, match", [
    ("elementwise", "relu", 0, 100, "float32", "at least 1"),
    ("elementwise", "relu", 10, 0, "float32", "at least 1"),
    ("elementwise", "relu", -3, 100, "float32", "at least 1"),
    ("elementwise", "relu", 10, -1, "float32", "at least 1"),
    ("gemm", "gemm", 0, 8, "float32", "at least 1"),
    ("elementwise", "relu", 1000, 10, "float32", "must not exceed"),
    ("gemm", "gemm", 64, 8, "float32", "must not exceed"),
    ("elementwise", "tanh", 1, 10, "float32", "op must be one of"),
    ("elementwise", "relu", 1, 10, "int8", "dtype must be one of"),
    ("gemm", "gemm", 1, 10, "float64", "dtype must be one of"),
    ("conv", "relu", 1, 10, "float32", "experiment"),
    ("elementwise", "relu", 1.5, 10, "float32", "whole number"),
    ("elementwise", "relu", 1, True, "float32", "whole number"),
    ("elementwise", "relu", 1, 10**13, "float32", "GiB"),
    ("elementwise", "saxpy", 1, 10**12, "bfloat16", "GiB"),
    ("gemm", "gemm", 8, 10**6, "float32", "GiB"),
])
def test_check_sizes_refuses_with_the_reason(experiment, op, lo, hi, dtype, match):
    with pytest.raises(ValueError, match=match):
        tp.check_sizes(experiment, op, lo, hi, dtype, "cpu")


def test_memory_refusal_names_the_numbers_and_the_device():
    with pytest.raises(ValueError) as err:
        tp.check_sizes("elementwise", "relu", 1, 10**13, "float32", "cpu")
    text = str(err.value)
    assert "10,000,000,000,000" in text
    # relu: x and out in float32, plus the two float32 host arrays they are generated from
    assert f"{4 * 10**13 * 4 / 2**30:.1f} GiB" in text
    assert device_label("cpu") in text


def test_memory_limit_is_positive_and_below_ram():
    limit = tp.memory_limit_bytes("cpu")
    assert 0 < limit <= host.ram_total_bytes()


# ------------------------------------------------------------------------------ backends_for


def test_backends_for_cpu():
    assert tp.backends_for("cpu", "elementwise") == ["numpy", "torch"]
    assert tp.backends_for("cpu", "gemm") == ["numpy", "torch"]


@simulator_only
def test_backends_for_cuda_is_empty_without_a_gpu():
    assert tp.backends_for("cuda", "elementwise") == []
    assert tp.backends_for("cuda", "gemm") == []


@pytest.mark.parametrize("device, experiment", [("gpu", "gemm"), ("cpu", "conv")])
def test_backends_for_rejects(device, experiment):
    with pytest.raises(ValueError):
        tp.backends_for(device, experiment)


# ----------------------------------------------------------------------------------- sweeps


def _check_timed_row(r):
    assert set(r) == ROW_KEYS
    assert r["status"] == "ok"
    assert r["device_kind"] == "cpu" and r["device"] == device_label("cpu")
    assert r["repeats"] >= 2
    assert 0 < r["min_s"] <= r["median_s"] <= r["max_s"]
    assert r["gb_s"] == pytest.approx(r["bytes"] / r["median_s"] / 1e9)
    assert r["gflop_s"] == pytest.approx(r["flops"] / r["median_s"] / 1e9)


@pytest.mark.parametrize("op, arrays, flops_per", [("relu", 2, 1), ("saxpy", 3, 2)])
def test_elementwise_sweep_rows(op, arrays, flops_per):
    rows = tp.elementwise_sweep(op, [1000, 100], **FAST)  # unsorted on purpose
    assert [(r["backend"], r["size"]) for r in rows] == [
        ("numpy", 100), ("numpy", 1000), ("torch", 100), ("torch", 1000)]
    for r in rows:
        _check_timed_row(r)
        assert r["experiment"] == "elementwise" and r["op"] == op and r["dtype"] == "float32"
        assert r["bytes"] == arrays * r["size"] * 4
        assert r["flops"] == flops_per * r["size"]


def test_gemm_sweep_rows():
    rows = tp.gemm_sweep([8, 16], **FAST)
    assert [(r["backend"], r["size"]) for r in rows] == [
        ("numpy", 8), ("numpy", 16), ("torch", 8), ("torch", 16)]
    for r in rows:
        _check_timed_row(r)
        n = r["size"]
        assert r["experiment"] == "gemm" and r["op"] == "gemm"
        assert r["flops"] == 2 * n**3
        assert r["bytes"] == 3 * n * n * 4


def test_backends_argument_restricts():
    rows = tp.gemm_sweep([8], backends=["torch"], **FAST)
    assert [r["backend"] for r in rows] == ["torch"]


def test_bfloat16_numpy_rows_are_unsupported_rows_not_gaps():
    rows = tp.elementwise_sweep("relu", [100, 1000], dtype="bfloat16", **FAST)
    numpy_rows = [r for r in rows if r["backend"] == "numpy"]
    torch_rows = [r for r in rows if r["backend"] == "torch"]
    assert [r["size"] for r in numpy_rows] == [100, 1000]
    for r in numpy_rows:
        assert r["status"].startswith("unsupported")
        assert "bfloat16" in r["status"]
        assert math.isnan(r["median_s"]) and math.isnan(r["gb_s"]) and r["repeats"] == 0
        assert r["bytes"] == 2 * r["size"] * 2  # bfloat16 is 2 bytes
    assert [r["status"] for r in torch_rows] == ["ok", "ok"]
    assert all(r["dtype"] == "bfloat16" and r["bytes"] == 4 * r["size"] for r in torch_rows)


def test_float16_gemm_is_unsupported_in_numpy_only():
    rows = tp.gemm_sweep([8], dtype="float16", **FAST)
    status = {r["backend"]: r["status"] for r in rows}
    assert status["numpy"].startswith("unsupported")
    assert status["torch"] == "ok"


@simulator_only
def test_cuda_device_adds_no_rows_without_a_gpu():
    rows = tp.elementwise_sweep("relu", [100], devices=("cpu", "cuda"), **FAST)
    assert {r["device_kind"] for r in rows} == {"cpu"}
    assert len(rows) == 2
    assert tp.gemm_sweep([8], devices=("cuda",), **FAST) == []


def test_devices_may_be_any_iterable():
    # devices is typed Iterable[str]; a generator must measure the same as a tuple
    rows = tp.elementwise_sweep("relu", [100], devices=(d for d in ["cpu"]), **FAST)
    assert len(rows) == 2


def test_point_budget_skips_every_size_over_it_the_first_included():
    rows = tp.elementwise_sweep("relu", [100, 1000, 10_000], point_budget_s=1e-9, **FAST)
    for name in ("numpy", "torch"):
        mine = [r for r in rows if r["backend"] == name]
        assert [r["size"] for r in mine] == [100, 1000, 10_000]
        for r in mine:  # nothing measured: each estimate comes from the calibration call
            assert re.fullmatch(r"skipped: estimated \S+ s per call \(from a [\d,]+-element "
                                r"float32 calibration relu\), about \S+ s for the point, over "
                                r"the 1e-09 s budget per point", r["status"]), r["status"]
            assert math.isnan(r["median_s"]) and r["repeats"] == 0


def test_point_budget_estimates_later_sizes_from_the_last_measured():
    rows = tp.gemm_sweep([8, 1024], point_budget_s=1.0, **FAST)
    for name in ("numpy", "torch"):
        small, large = [r for r in rows if r["backend"] == name]
        assert small["status"] == "ok"
        assert large["status"].startswith("skipped: estimated"), large["status"]
        assert "(from size 8)" in large["status"] and "over the 1 s budget" in large["status"]


def test_first_call_over_budget_stops_the_point(monkeypatch):
    # a calibration that claims GEMM is free: the estimate passes, the warm-up call does not
    fake = tpb.Calibration(8, 1e-12, "a fake calibration")
    monkeypatch.setattr(tpb, "calibrate", lambda *args, **kwargs: fake)
    real = tpb._time_once
    calls = []

    def slow(call, device):  # a machine where the first call takes 0.7 s (planted, not slept)
        calls.append(device)
        return real(call, device) + 0.7

    monkeypatch.setattr(tpb, "_time_once", slow)
    rows = tp.gemm_sweep([512], dtype="float16", backends=["torch"], point_budget_s=0.6,
                         **FAST)
    assert len(calls) == 1   # the first call, and nothing measured after it
    [r] = rows
    assert r["status"].startswith("skipped: its first call took"), r["status"]
    assert "over the 0.6 s budget per point" in r["status"]


def test_deadline_skips_points_estimated_to_end_after_it(monkeypatch):
    # a planted calibration: n = 8 takes 1 ms, so n = 1024 (128 ** 3 times the work) ~2,000 s
    planted = tpb.Calibration(8, 1e-3, "planted")
    monkeypatch.setattr(tpb, "calibrate", lambda *args, **kwargs: planted)
    rows = tp.gemm_sweep([8, 1024], point_budget_s=1e6, deadline=time.monotonic() + 2,
                         time_limit=2, **FAST)
    for name in ("numpy", "torch"):
        large = [r for r in rows if r["backend"] == name][-1]
        assert large["status"].startswith("skipped: time limit of 2 s"), large["status"]
    assert any("estimated" in r["status"] for r in rows if r["size"] == 1024)


@pytest.mark.parametrize("kwargs", [dict(point_budget_s=0), dict(point_budget_s=float("nan")),
                                    dict(point_budget_s="1"), dict(min_run_time=-1),
                                    dict(min_run_time=True)])
def test_sweeps_refuse_bad_budgets(kwargs):
    name = next(iter(kwargs))
    with pytest.raises(ValueError, match=name):
        tp.gemm_sweep([8], progress=False, **kwargs)


def test_generous_point_budget_skips_nothing():
    rows = tp.gemm_sweep([8, 16, 32], point_budget_s=60, **FAST)
    assert all(r["status"] == "ok" for r in rows)


def test_gemm_budget_uses_cubic_estimate():
    # with a budget just above min_run_time, a size 100x larger is far over (cubic scaling)
    rows = tp.gemm_sweep([4, 400], point_budget_s=0.01, min_run_time=0.005, progress=False)
    statuses = [r["status"] for r in rows if r["size"] == 400]
    assert all(s.startswith("skipped: estimated") for s in statuses)


@pytest.mark.parametrize("call", [
    lambda: tp.elementwise_sweep("relu", [], **FAST),
    lambda: tp.gemm_sweep([], **FAST),
    lambda: tp.elementwise_sweep("relu", [0, 10], **FAST),
    lambda: tp.elementwise_sweep("relu", [10, 10**13], **FAST),
    lambda: tp.elementwise_sweep("gelu", [10], **FAST),
    lambda: tp.elementwise_sweep("relu", [10], devices=("tpu",), **FAST),
    lambda: tp.gemm_sweep([8], dtype="float64", **FAST),
])
def test_sweeps_refuse_bad_arguments(call):
    with pytest.raises(ValueError):
        call()


def test_measured_bandwidth_is_the_best_at_the_largest_size():
    rows = [
        {"experiment": "elementwise", "status": "ok", "device_kind": "cpu", "size": 10,
         "gb_s": 90.0},
        {"experiment": "elementwise", "status": "ok", "device_kind": "cpu", "size": 1000,
         "gb_s": 12.0},
        {"experiment": "elementwise", "status": "ok", "device_kind": "cpu", "size": 1000,
         "gb_s": 15.0},
        {"experiment": "elementwise", "status": "skipped", "device_kind": "cpu", "size": 10**6,
         "gb_s": float("nan")},
        {"experiment": "elementwise", "status": "ok", "device_kind": "cuda", "size": 10**6,
         "gb_s": 900.0},
    ]
    assert tp.measured_bandwidth(rows) == pytest.approx(15e9)
    assert tp.measured_bandwidth(rows, "cuda") == pytest.approx(900e9)
    assert tp.measured_bandwidth([]) is None


@simulator_only
def test_rooflines_name_their_sources_and_include_the_study_gpu():
    roofs = tp.rooflines((), cpu_bandwidth=20e9)
    labels = [r[0] for r in roofs]
    k40 = [r for r in roofs if "K40c" in r[0]]
    assert len(k40) == 1
    assert k40[0][1] == pytest.approx(4.29e12) and k40[0][2] == pytest.approx(288e9)
    if backend.info().cpu_peak_fp32_flops_estimate:
        cpu = [r for r in roofs if "estimated peak, measured bandwidth" in r[0]]
        assert len(cpu) == 1 and cpu[0][2] == 20e9
    assert all("datasheet" in label or "estimated" in label for label in labels)
    # without a measured CPU bandwidth there is no CPU roof
    assert not any("estimated" in r[0] for r in tp.rooflines((), cpu_bandwidth=None))


@simulator_only
def test_bandwidth_peaks_use_the_reference_gpus_datasheet(tmp_path):
    from helpers import results

    rows = [{"experiment": "elementwise", "status": "ok", "device_kind": "cpu", "size": 10,
             "gb_s": 10.0}]
    results.save("ref", [{"a": 1}], directory=tmp_path)
    ds = results.load("ref", tmp_path)
    ds.meta["environment"].update(gpu_name="NVIDIA H100 80GB HBM3",
                                  gpu_peak_bandwidth_bytes_s=3.35e12, gpu_peak_fp32_flops=67e12)
    peaks = tp.bandwidth_peaks([ds], rows)
    assert peaks[0][1] == pytest.approx(10e9) and "measured" in peaks[0][0]
    assert ("NVIDIA H100 80GB HBM3 datasheet", 3.35e12) in peaks
    roofs = tp.rooflines([ds], cpu_bandwidth=None)
    assert roofs[0][:3] == ("NVIDIA H100 80GB HBM3 (datasheet)", 67e12, 3.35e12)
