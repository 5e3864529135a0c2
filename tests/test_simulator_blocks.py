"""helpers.device.simulator_blocks: the simulator's block manager, which runs a block's threads
in turn, as greenlets meeting at barriers, or as Python threads, keeps Numba's semantics: a
barrier holds every live thread until all have reached it, threads that ended do not hold it up,
and a thread's exception is raised, naming the thread, with the others stopped."""

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


@pytest.mark.parametrize("kernel, blocks, threaded", [
    ("failing_kernel", 1, True),             # its threads meet at a barrier
    ("failing_in_turn_kernel", 2, False),    # run in turn: the error names the same thread
])
def test_a_threads_exception_names_the_thread_as_numbas_manager_does(monkeypatch, kernel,
                                                                     blocks, threaded):
    from numba.cuda.simulator import kernel as simulator_kernel

    launch = globals()[kernel]
    assert simulator_blocks.needs_threads(launch) is threaded
    errors = []
    for method in (simulator_blocks.run, simulator_blocks._NUMBA_RUN):
        monkeypatch.setattr(simulator_kernel.BlockManager, "run", method)
        with pytest.raises(IndexError) as caught:
            launch[blocks, N](np.zeros(N, dtype=np.float32))
        errors.append(str(caught.value))
    ours, numbas = errors
    assert "tid=[5, 0, 0]" in ours and "ctaid=[0, 0, 0]" in ours
    assert ours == numbas


# ------------------------------------------------------ kernels whose threads never wait


@cuda.jit(device=True)
def _meet(tile, t):
    cuda.syncthreads()
    return tile[t]


@cuda.jit(device=True)
def _double(v):
    return 2 * v


@cuda.jit
def identity_kernel(out):
    """Each thread writes what the simulator tells it it is: block, thread, lane."""
    i = cuda.grid(1)
    if i < out.shape[0]:
        out[i, 0] = cuda.blockIdx.x
        out[i, 1] = cuda.threadIdx.x
        out[i, 2] = cuda.laneid
        out[i, 3] = _double(i)


@cuda.jit
def barrier_in_a_device_function_kernel(x, out):
    tile = x
    out[cuda.threadIdx.x] = _meet(tile, cuda.threadIdx.x)


def _make_closure_kernel(device_function):
    @cuda.jit
    def closure_kernel(out):
        out[cuda.threadIdx.x] = device_function(out, cuda.threadIdx.x)
    return closure_kernel


@cuda.jit
def failing_in_turn_kernel(out):
    t = cuda.threadIdx.x
    if t == 5:
        out[N + 100] = 1.0   # out of bounds: IndexError in thread 5
    out[t] = t


def test_what_decides_a_thread_per_cuda_thread():
    assert not simulator_blocks.needs_threads(identity_kernel)   # its device function too
    assert simulator_blocks.needs_threads(rotate_kernel)         # shared memory and barriers
    assert simulator_blocks.needs_threads(early_exit_kernel)
    # a barrier only in a device function it calls, by a global or a closure's cell
    assert simulator_blocks.needs_threads(barrier_in_a_device_function_kernel)
    assert simulator_blocks.needs_threads(_make_closure_kernel(_meet))
    assert not simulator_blocks.needs_threads(_make_closure_kernel(_double))


def test_a_kernel_without_barriers_runs_each_block_in_one_thread_with_the_right_indices():
    import threading

    blocks, per_block = 3, 40
    seen = []
    original = identity_kernel.fn.__globals__["_double"]

    @cuda.jit(device=True)
    def spy(v):
        seen.append(threading.current_thread())   # kept: each thread object counted once
        return 2 * v

    out = np.full((blocks * per_block - 7, 4), -1, dtype=np.int64)
    identity_kernel.fn.__globals__["_double"] = spy
    try:
        identity_kernel[blocks, per_block](out)
    finally:
        identity_kernel.fn.__globals__["_double"] = original
    i = np.arange(out.shape[0])
    np.testing.assert_array_equal(out[:, 0], i // per_block)
    np.testing.assert_array_equal(out[:, 1], i % per_block)
    np.testing.assert_array_equal(out[:, 2], (i % per_block) % 32)
    np.testing.assert_array_equal(out[:, 3], 2 * i)
    assert len(seen) == out.shape[0] and len({id(t) for t in seen}) == blocks


def test_a_device_function_redefined_with_a_barrier_is_seen_at_the_next_launch():
    """A notebook may rebind the device function a kernel calls: the next launch must run a
    thread per CUDA thread, or the barrier would be met by one thread alone."""
    x = np.arange(N, dtype=np.float32)
    out = np.zeros(N, dtype=np.float32)
    g = identity_kernel.fn.__globals__
    original = g["_double"]
    assert not simulator_blocks.needs_threads(identity_kernel)
    g["_double"] = _meet
    try:
        assert simulator_blocks.needs_threads(identity_kernel)
    finally:
        g["_double"] = original
    barrier_in_a_device_function_kernel[1, N](x, out)   # meets its barrier: all threads live
    np.testing.assert_array_equal(out, x)


def test_a_barrier_reached_in_turn_is_an_error_not_a_hang(monkeypatch):
    monkeypatch.setattr(simulator_blocks, "needs_threads", lambda kernel: False)
    with pytest.raises(RuntimeError, match="needs_threads"):
        rotate_kernel[1, N](np.arange(N, dtype=np.float32), np.zeros(N, dtype=np.float32), 1)


class _Proxy:
    """A global like the lab 6 recorder's ``cuda``: it answers every attribute from the
    launch running now, and fails outside one."""

    def __getattr__(self, name):
        raise RuntimeError(f"{name} read outside a launch")


PROXY = _Proxy()


def _through_the_proxy(out):
    out[0] = PROXY.threadIdx.x


def _barrier_through_the_proxy(out):
    PROXY.syncthreads()


def test_the_decision_reads_no_attribute_of_a_global_it_does_not_know():
    assert not simulator_blocks.needs_threads(_through_the_proxy)
    assert simulator_blocks.needs_threads(_barrier_through_the_proxy)   # by the name it uses


# ------------------------------------------- kernels whose threads meet only at barriers


@cuda.jit
def count_kernel(x, out):
    """A barrier that counts across the block: its threads get a Python thread each."""
    out[cuda.threadIdx.x] = cuda.syncthreads_count(x[cuda.threadIdx.x] > 0)


_THREADS_SEEN: list = []


@cuda.jit(device=True)
def _note_thread(v):
    import threading

    _THREADS_SEEN.append(threading.get_ident())
    return v


@cuda.jit
def reverse_kernel(x, out):
    """Writes its value to a shared tile and, after a barrier, reads the mirror thread's."""
    tile = cuda.shared.array(N, float32)
    t = cuda.threadIdx.x
    tile[t] = x[t]
    cuda.syncthreads()
    out[t] = _note_thread(tile[N - 1 - t])


def test_what_decides_greenlets_in_one_thread():
    for kernel in (rotate_kernel, early_exit_kernel, failing_kernel, reverse_kernel,
                   barrier_in_a_device_function_kernel, _make_closure_kernel(_meet)):
        assert simulator_blocks.barriers_only(kernel), kernel
    assert simulator_blocks.needs_threads(count_kernel)
    assert not simulator_blocks.barriers_only(count_kernel)       # a count: threads
    assert not simulator_blocks.barriers_only(identity_kernel)    # no barrier: in turn


@pytest.mark.parametrize("with_greenlets", [True, False])
def test_a_barrier_kernel_gives_the_same_results_as_greenlets_or_as_threads(monkeypatch,
                                                                            with_greenlets):
    """As greenlets a block runs in one Python thread; without greenlet (a machine that lacks
    it) in a thread per CUDA thread; the results are the same."""
    if with_greenlets and simulator_blocks.greenlet is None:
        pytest.skip("greenlet is not installed")
    if not with_greenlets:
        monkeypatch.setattr(simulator_blocks, "greenlet", None)
    x = np.arange(N, dtype=np.float32)
    _THREADS_SEEN.clear()
    out = np.full(N, np.nan, dtype=np.float32)
    reverse_kernel[1, N](x, out)
    np.testing.assert_array_equal(out, x[::-1])
    assert len(set(_THREADS_SEEN)) == (1 if with_greenlets else N)
    out = np.full(N, np.nan, dtype=np.float32)
    rotate_kernel[1, N](x, out, 5)
    np.testing.assert_array_equal(out, np.roll(x, -5))
    out = np.full(N, np.nan, dtype=np.float32)
    early_exit_kernel[2, N](x, out)
    np.testing.assert_array_equal(out[:N // 2], 2 * x[:N // 2][::-1])


def test_a_counting_barrier_counts_every_thread_of_the_block():
    x = np.where(np.arange(N) % 3 == 0, 1.0, -1.0).astype(np.float32)
    out = np.zeros(N, dtype=np.int64)
    count_kernel[1, N](x, out)
    assert (out == (np.arange(N) % 3 == 0).sum()).all()
