"""helpers.device.simulator_shared: in Numba's CUDA simulator, every thread of a block gets the
same ``cuda.shared.array`` for a line, even when two threads ask for it at the same moment."""

from __future__ import annotations

import threading

import numpy as np
import pytest
from numba import cuda, float32

from helpers.device import backend, simulator_shared

pytestmark = pytest.mark.skipif(backend.MODE != "simulator", reason="the simulator's fix")


class _BothLookFirst(dict):
    """Allocations whose ``get`` lets no thread on until two have looked: the thread switch
    between looking the line up and storing its array, made certain."""

    def __init__(self):
        super().__init__()
        self.barrier = threading.Barrier(2, timeout=10)

    def get(self, key, default=None):
        found = super().get(key, default)
        self.barrier.wait()
        return found


def _two_threads_ask(method) -> list:
    from numba.cuda.simulator import kernelapi

    shared = kernelapi.FakeCUDAShared(0)
    shared._allocations = _BothLookFirst()
    got = []

    def ask():
        got.append(method(shared, 8, np.float32))   # one line: one key for both threads

    threads = [threading.Thread(target=ask) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return got


def test_two_threads_that_ask_at_once_get_one_array():
    assert simulator_shared.installed()
    first, second = _two_threads_ask(simulator_shared.array)
    assert first is second


def test_numbas_own_method_gives_them_two():
    """Why the fix exists: numba-cuda's method looks up, then stores, so both make their own
    (if a later numba-cuda stores atomically, this fails and the fix can go)."""
    first, second = _two_threads_ask(simulator_shared._NUMBA_ARRAY)
    assert first is not second


def test_it_keeps_numbas_key_dynamic_buffer_and_refusal():
    from numba.cuda.simulator import kernelapi

    shared = kernelapi.FakeCUDAShared(64)
    a = simulator_shared.array(shared, (2, 3), float32)
    b = simulator_shared.array(shared, (2, 3), float32)   # another line: another array
    assert a.shape == (2, 3) and a.dtype == np.float32 and a is not b
    again = [simulator_shared.array(shared, 4, np.float32) for _ in range(2)]   # one line
    assert again[0] is again[1]
    dynamic = simulator_shared.array(shared, 0, float32)
    assert dynamic.size == 16 and np.shares_memory(dynamic, shared._dynshared)
    with pytest.raises(RuntimeError, match="alignment"):
        simulator_shared.array(shared, 4, np.float32, alignment=16)
    assert kernelapi.FakeCUDAShared.array is simulator_shared.array


def test_a_tile_kernel_reads_what_its_block_wrote():
    @cuda.jit
    def neighbours(out):
        tile = cuda.shared.array(64, float32)
        t = cuda.threadIdx.x
        tile[t] = t
        cuda.syncthreads()
        out[cuda.blockIdx.x * 64 + t] = tile[(t + 1) % 64]

    out = np.full(128, np.nan, np.float32)
    neighbours[2, 64](out)
    np.testing.assert_array_equal(out, np.tile((np.arange(64) + 1) % 64, 2))
