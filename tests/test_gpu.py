"""Checks that need a real CUDA GPU: kernels at full size, and timing that really waits.

Skipped in simulator mode (no GPU); run them on a GPU machine with ``make test``.
"""

import numpy as np
import pytest

import helpers  # noqa: F401  (decides the backend first)
from helpers.device import backend, memory, timing
from helpers import elementwise

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(backend.MODE != "gpu", reason="needs a real CUDA GPU"),
]


@pytest.mark.parametrize("n", [1, 1000, 1 << 20, (1 << 22) + 17])
def test_kernels_match_numpy_at_full_size(n):
    rng = np.random.default_rng(n)
    x = rng.standard_normal(n).astype(np.float32)
    y = rng.standard_normal(n).astype(np.float32)
    assert np.array_equal(elementwise.relu(x), np.maximum(x, 0))
    np.testing.assert_allclose(elementwise.saxpy(1.5, x, y), 1.5 * x + y, rtol=1e-6, atol=1e-6)
    assert np.array_equal(elementwise.relu(x, grid_stride_blocks=4), np.maximum(x, 0))


def test_benchmark_waits_for_the_gpu():
    import torch

    # torch.cuda._sleep spins the GPU for a number of clock cycles and returns at once: a timer
    # that did not synchronise would measure only the launch.
    clock_hz = torch.cuda.clock_rate() * 1e6 if hasattr(torch.cuda, "clock_rate") else 1.5e9
    cycles = int(clock_hz * 0.005)  # about 5 ms
    t = timing.benchmark(torch.cuda._sleep, cycles, device="cuda", min_run_time=0.05)
    assert t.meaningful
    assert t.median_s > 0.002


def test_gpu_memory_sees_a_torch_allocation():
    import torch

    n = 64 * 2**20 // 4  # 64 MiB of float32
    r = memory.peak_memory(lambda: torch.ones(n, device="cuda"), device="cuda")
    assert abs(r.peak_bytes - 4 * n) <= 0.1 * 4 * n, r


def test_backend_reports_the_gpu():
    info = backend.info()
    assert info.timings_meaningful
    assert info.gpu_name and info.gpu_sm_count and info.gpu_memory_bytes
