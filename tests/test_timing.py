"""helpers.device.timing.benchmark: warm-up, repeats, median, and synchronisation around the clock."""

from __future__ import annotations

import timeit

import numpy as np
import pytest

from helpers.device import backend, timing
from conftest import simulator_only


class FakeStream:
    """An asynchronous fake device with its own clock, which only it moves (planted as the
    timer's clock, ``timeit.default_timer``): like a CUDA stream, work runs in order on the
    device while the caller goes on. ``launch`` queues ``delay_s`` of device work and costs the
    caller ``LAUNCH_S``; ``sync`` waits until everything queued has finished
    (``torch.cuda.synchronize``); ``work`` is ``seconds`` of the caller's own work. With no
    thread, sleep or real clock, every timing below is exact whatever else the machine does."""

    LAUNCH_S = 1e-6

    def __init__(self, delay_s: float):
        self.delay_s = delay_s
        self.now = 0.0
        self.launches = 0
        self.syncs = 0
        self._ends: list[float] = []   # when each launched piece of work finishes

    def clock(self) -> float:
        return self.now

    @property
    def completed(self) -> int:
        return sum(end <= self.now for end in self._ends)

    def launch(self) -> None:
        self.launches += 1
        start = max([self.now, *self._ends[-1:]])
        self._ends.append(start + self.delay_s)
        self.now += self.LAUNCH_S

    def sync(self) -> None:
        self.syncs += 1
        self.now = max([self.now, *self._ends[-1:]])

    def work(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def stream(monkeypatch):
    s = FakeStream(0.02)
    monkeypatch.setattr(timeit, "default_timer", s.clock)
    return s


def test_summary_statistics_are_consistent(rng):
    a = rng.standard_normal(20_000)
    t = timing.benchmark(np.sort, a, min_run_time=0.02, label="sort")
    assert t.label == "sort"
    assert t.repeats >= 2 and len(t.times_s) == t.repeats
    assert t.min_s <= t.median_s <= t.max_s
    assert t.min_s == min(t.times_s) and t.max_s == max(t.times_s)
    assert t.median_s == pytest.approx(float(np.median(t.times_s)))
    assert t.iqr_s >= 0 and t.iqr_s <= t.max_s - t.min_s
    assert t.calls_per_repeat >= 1
    assert t.median_ms == pytest.approx(t.median_s * 1e3)
    assert t.rate(1e6) == pytest.approx(1e6 / t.median_s)
    assert t.meaningful is True
    assert t.device == backend.info().cpu_label
    assert "sort: median" in str(t)


def test_label_defaults_to_function_name():
    def my_call():
        return 1 + 1

    assert timing.benchmark(my_call, min_run_time=0.005).label == "my_call"


def test_measures_a_known_duration(stream):
    t = timing.benchmark(stream.work, 0.004, min_run_time=0.03, warmup=0)
    assert t.median_s == pytest.approx(0.004) and t.min_s == pytest.approx(0.004)
    assert t.repeats >= 2


def test_slow_call_is_still_measured_twice(stream):
    # a call longer than min_run_time: blocked_autorange collects one block, benchmark adds one
    t = timing.benchmark(stream.work, 0.012, min_run_time=0.005, warmup=0)
    assert t.repeats >= 2
    assert t.min_s == pytest.approx(0.012) and t.max_s == pytest.approx(0.012)


def test_a_call_of_10_ms_or_more_is_a_block_of_its_own(stream):
    # blocked_autorange would spend an untimed call choosing blocks of one call: no call is lost
    calls = []

    def slow():
        calls.append(1)
        stream.work(0.03)

    t = timing.benchmark(slow, min_run_time=0.02, warmup=0)
    assert len(calls) == t.repeats == 2 and t.calls_per_repeat == 1
    assert t.median_s == pytest.approx(0.03)
    # a shorter call than 10 ms is one more warm-up: the blocks are blocked_autorange's
    calls.clear()
    t = timing.benchmark(lambda: (calls.append(1), stream.work(0.004)), min_run_time=0.02,
                         warmup=0)
    assert t.median_s == pytest.approx(0.004) and t.calls_per_repeat == 1
    assert len(calls) == 2 + t.repeats   # the first call, blocked_autorange's own, the blocks
    calls.clear()   # blocks of one call until min_run_time: no call spent choosing them
    t = timing.benchmark(slow, min_run_time=0.1, warmup=0)
    assert len(calls) == t.repeats == 4 and t.calls_per_repeat == 1


def test_args_kwargs_and_warmup_calls():
    calls = []

    def record(a, b=None):
        calls.append((a, b))

    t = timing.benchmark(record, 3, b="x", warmup=5, min_run_time=0.005)
    assert set(calls) == {(3, "x")}
    assert len(calls) >= 5 + t.repeats * t.calls_per_repeat


def test_warmup_zero_allowed():
    calls = []
    timing.benchmark(lambda: calls.append(1), warmup=0, min_run_time=0.005)
    assert calls


@pytest.mark.parametrize("kwargs, match", [
    ({"device": "tpu"}, "device"),
    ({"device": "CPU"}, "device"),
    ({"warmup": -1}, "warmup"),
    ({"min_run_time": 0}, "min_run_time"),
    ({"min_run_time": -0.1}, "min_run_time"),
    ({"min_run_time": float("nan")}, "min_run_time"),
])
def test_bad_arguments(kwargs, match):
    calls = []
    with pytest.raises(ValueError, match=match):
        timing.benchmark(lambda: calls.append(1), **kwargs)
    assert calls == []  # refused before running anything


@simulator_only
def test_cuda_timings_in_the_simulator_are_flagged_not_meaningful():
    t = timing.benchmark(lambda: None, device="cuda", min_run_time=0.005)
    assert t.meaningful is False
    assert "not a hardware timing" in str(t)
    assert t.device == "Numba CUDA simulator (correctness only)"


def test_device_label():
    assert timing.device_label("cpu").startswith("CPU: ")
    assert timing.device_label("cuda") == backend.info().device_label
    with pytest.raises(ValueError):
        timing.device_label("gpu")


# -------------------------------------------------------------------------- synchronisation


def test_fake_stream_is_asynchronous(stream):
    stream.launch()
    stream.launch()
    assert stream.now == pytest.approx(2 * stream.LAUNCH_S) and stream.completed == 0
    stream.sync()   # the two run one after the other
    assert stream.now == pytest.approx(0.04) and stream.completed == 2


def test_benchmark_waits_for_asynchronous_work(stream):
    t = timing.benchmark(stream.launch, sync=stream.sync, min_run_time=0.05, warmup=1)
    # every timed call's 20 ms of work is inside the measurement, and nothing else
    assert t.min_s == pytest.approx(0.02) and t.max_s == pytest.approx(0.02)
    # sync was called before reading the clock: at least twice per measurement
    assert stream.syncs >= 2 * t.repeats
    assert stream.completed == stream.launches  # nothing left running when it returned


def test_without_waiting_the_same_work_looks_instant(stream):
    # the control: if the timer did not synchronise, it would measure only the launch
    t = timing.benchmark(stream.launch, sync=lambda: None, min_run_time=0.01, warmup=1)
    assert t.median_s == pytest.approx(stream.LAUNCH_S)
    assert stream.completed < stream.launches


def test_default_cpu_sync_does_not_wait(stream):
    t = timing.benchmark(stream.launch, device="cpu", min_run_time=0.01, warmup=1)
    assert t.median_s == pytest.approx(stream.LAUNCH_S)
    assert stream.syncs == 0


def test_cpu_timing_runs_torch_with_its_own_thread_count():
    """torch.utils.benchmark.Timer would run torch on one thread unless told: a CPU timing must
    use the threads torch uses elsewhere (as the profiler and Numba's parallel loops do)."""
    import torch

    before = torch.get_num_threads()
    wanted = 2 if before != 2 else 3
    seen: list[int] = []
    torch.set_num_threads(wanted)
    try:
        timing.benchmark(lambda: seen.append(torch.get_num_threads()), min_run_time=0.001)
    finally:
        torch.set_num_threads(before)
    assert seen and set(seen) == {wanted}


def test_quartiles_of_the_per_call_times():
    assert timing.quartiles([3.0, 1.0, 2.0, 5.0, 4.0]) == (2.0, 4.0)   # inclusive method
    assert timing.quartiles([7.0]) == (7.0, 7.0)
    with pytest.raises(ValueError, match="times_s"):
        timing.quartiles([])
