"""helpers.device.memory.peak_memory: peak memory of one call above the baseline, method named."""

from __future__ import annotations

import time

import numpy as np
import pytest
import torch

from helpers.device import memory
from conftest import simulator_only

MB100 = 100 * 2**20


def _numpy_100mb():
    return np.ones(MB100 // 8, dtype=np.float64)  # np.ones writes every page


def _torch_100mb():
    return torch.ones(MB100 // 4, dtype=torch.float32)


def _numpy_temporary_100mb():
    a = np.ones(MB100 // 8)
    total = float(a.sum())
    del a
    return total


@pytest.fixture(scope="module", autouse=True)
def _warm():
    # the first call of each library may load code and allocator pools; not what we measure
    _numpy_100mb()
    _torch_100mb()
    torch.ones(10).sum()


@pytest.mark.parametrize("fn", [_numpy_100mb, _torch_100mb], ids=["numpy", "torch"])
def test_known_allocation_is_measured_within_10_percent(fn):
    r = memory.peak_memory(fn)
    assert r.peak_bytes == pytest.approx(MB100, rel=0.10)
    assert r.peak_mib == pytest.approx(r.peak_bytes / 2**20)
    assert r.baseline_bytes > 10 * 2**20  # a Python process with numpy and torch loaded
    assert r.value is not None and r.value.nbytes == MB100  # the return value passes through
    assert "RSS" in r.method
    assert r.device.startswith("CPU: ")


def test_a_temporary_allocation_counts_towards_the_peak():
    r = memory.peak_memory(_numpy_temporary_100mb)
    assert r.peak_bytes == pytest.approx(MB100, rel=0.10)
    assert r.value == pytest.approx(MB100 / 8)


def test_a_call_that_allocates_nothing_reports_much_less(rng):
    data = rng.standard_normal(1_000)
    r = memory.peak_memory(lambda v: float(v.sum()), data)
    assert 0 <= r.peak_bytes < 4 * 2**20
    assert r.value == pytest.approx(float(data.sum()))


def test_sizes_are_told_apart():
    small = memory.peak_memory(lambda: np.ones(MB100 // 8 // 4))
    large = memory.peak_memory(_numpy_100mb)
    assert small.peak_bytes == pytest.approx(MB100 / 4, rel=0.15)
    assert large.peak_bytes > 3 * small.peak_bytes


def test_args_and_kwargs_are_passed(rng):
    x = rng.standard_normal(16)
    r = memory.peak_memory(np.clip, x, a_min=-0.5, a_max=0.5)
    np.testing.assert_array_equal(r.value, np.clip(x, -0.5, 0.5))


def test_method_names_how_it_measured():
    r = memory.peak_memory(lambda: 7)
    assert r.value == 7
    assert ("VmHWM" in r.method) or ("sampled every" in r.method)


@simulator_only
def test_cuda_in_the_simulator_measures_host_memory_and_says_so():
    r = memory.peak_memory(_numpy_100mb, device="cuda")
    assert "simulator" in r.method and "host memory" in r.method
    assert r.device == "Numba CUDA simulator (correctness only)"
    assert r.peak_bytes == pytest.approx(MB100, rel=0.10)


def test_sampling_fallback_sees_a_held_allocation(monkeypatch):
    # where the kernel's peak counter cannot be reset, RSS is sampled by a thread
    monkeypatch.setattr(memory, "_reset_hwm", lambda: False)
    r = memory.peak_memory(_numpy_100mb, interval_s=0.001)
    assert "sampled every 1 ms" in r.method
    assert r.peak_bytes == pytest.approx(MB100, rel=0.10)


def test_sampling_fallback_catches_a_short_lived_peak(monkeypatch):
    def hold_then_free():
        a = np.ones(MB100 // 8)
        time.sleep(0.03)
        del a
        return "freed"

    monkeypatch.setattr(memory, "_reset_hwm", lambda: False)
    r = memory.peak_memory(hold_then_free, interval_s=0.001)
    assert r.value == "freed"
    assert r.peak_bytes == pytest.approx(MB100, rel=0.10)


@pytest.mark.parametrize("kwargs, match", [
    ({"device": "gpu"}, "device"),
    ({"interval_s": 0}, "interval"),
    ({"interval_s": -1.0}, "interval"),
])
def test_bad_arguments(kwargs, match):
    calls = []
    with pytest.raises(ValueError, match=match):
        memory.peak_memory(lambda: calls.append(1), **kwargs)
    assert calls == []


def test_available_bytes_counts_torchs_unused_cache_as_free_on_a_gpu(monkeypatch):
    # the driver counts the caching allocator's reserved blocks as used; this process reuses them
    monkeypatch.setattr(memory.backend, "MODE", "gpu")
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda: (10 * 2**30, 80 * 2**30))
    monkeypatch.setattr(torch.cuda, "memory_reserved", lambda: 50 * 2**30)
    monkeypatch.setattr(torch.cuda, "memory_allocated", lambda: 20 * 2**30)
    assert memory.available_bytes("cuda") == 40 * 2**30
    monkeypatch.setattr(memory.host, "ram_available_bytes", lambda: 7 * 2**30)
    assert memory.available_bytes("cpu") == 7 * 2**30


def test_available_bytes_is_host_memory_under_the_simulator(monkeypatch):
    monkeypatch.setattr(memory.backend, "MODE", "simulator")
    monkeypatch.setattr(memory.host, "ram_available_bytes", lambda: 3 * 2**30)
    assert memory.available_bytes("cuda") == 3 * 2**30
