"""helpers.device.simulator_blocks: the simulator's block manager, which lets the block's threads
run while it waits, keeps Numba's semantics: a barrier holds every live thread until all have
reached it, threads that ended do not hold it up, and a thread's exception is raised, naming the
thread, with the others aborted."""

from __future__ import annotations

import numpy as np
import pytest
from numba import cuda, float32

from helpers.device import backend, simulator_blocks

pytestmark = pytest.mark.skipif(backend.MODE != "simulator", reason="the simulator's fix")

N = 64


@cuda.jit
def rotate_kernel(x, out, steps):
    """Each step: every thread writes its value to the tile, and after a barrier reads its
    neighbour's: right only if no thread reads before all have written."""
    tile = cuda.shared.array(N, float32)
    t = cuda.threadIdx.x
    v = x[t]
    for _ in range(steps):
        tile[t] = v
        cuda.syncthreads()
        v = tile[(t + 1) % N]
        cuda.syncthreads()
    out[t] = v


@cuda.jit
def early_exit_kernel(x, out):
    """The upper half returns before the barrier; the lower half meets there and reads what
    the others of the lower half wrote."""
    tile = cuda.shared.array(N, float32)
    t = cuda.threadIdx.x
    if t >= N // 2:
        return
    tile[t] = x[t] * 2
    cuda.syncthreads()
    out[t] = tile[N // 2 - 1 - t]


@cuda.jit
def failing_kernel(out):
    t = cuda.threadIdx.x
    cuda.syncthreads()
    if t == 5:
        out[N + 100] = 1.0   # out of bounds: IndexError in thread 5
    cuda.syncthreads()
    out[t] = t


def test_it_is_installed():
    from numba.cuda.simulator import kernel

    assert simulator_blocks.installed() and kernel.BlockManager.run is simulator_blocks.run


def test_a_barrier_holds_every_thread_until_all_have_written():
    x = np.arange(N, dtype=np.float32)
    out = np.full(N, np.nan, dtype=np.float32)
    rotate_kernel[1, N](x, out, 5)
    np.testing.assert_array_equal(out, np.roll(x, -5))


def test_threads_that_ended_do_not_hold_up_the_barrier():
    x = np.arange(N, dtype=np.float32)
    out = np.full(N, np.nan, dtype=np.float32)
    early_exit_kernel[2, N](x, out)   # two blocks: each manages its own threads
    half = N // 2
    np.testing.assert_array_equal(out[:half], 2 * x[:half][::-1])
    assert np.isnan(out[half:]).all()


def test_a_threads_exception_names_the_thread_as_numbas_manager_does(monkeypatch):
    from numba.cuda.simulator import kernel

    errors = []
    for method in (simulator_blocks.run, simulator_blocks._NUMBA_RUN):
        monkeypatch.setattr(kernel.BlockManager, "run", method)
        with pytest.raises(IndexError) as caught:
            failing_kernel[1, N](np.zeros(N, dtype=np.float32))
        errors.append(str(caught.value))
    ours, numbas = errors
    assert "tid=[5, 0, 0]" in ours and "ctaid=[0, 0, 0]" in ours
    assert ours == numbas
