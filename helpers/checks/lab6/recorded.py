"""A learner's kernel run in Numba's CUDA simulator with every access to its arrays recorded.

:func:`record_launch` launches a copy of a ``@cuda.jit`` kernel in the simulator (on a GPU
machine too) with NumPy arrays wrapped so that each element access is logged with the thread
that made it, the line of the kernel, and the barriers that thread had passed. :class:`Recording`
groups the log into warp requests: for global arrays the 32-byte sectors per request against the
fewest that its bytes need; for shared arrays the conflict degree
(:func:`helpers.experiments.memory_access.conflict_degree`, 4-byte banks) and the reads of a
word another thread wrote with no barrier between (a race). Addresses count from each array's
start, which ``cudaMalloc`` aligns to 256 bytes.

Source: CUDA C Best Practices Guide, "Coalesced Access to Global Memory" and "Shared Memory and
Memory Banks"; CUDA C Programming Guide, "Synchronization Functions" (``__syncthreads``,
``__syncwarp``).
"""

from __future__ import annotations

import dataclasses
import linecache
import math
import sys
import types

import numpy as np
from numba import cuda

from helpers.experiments.memory_access import conflict_degree

__all__ = ["SECTOR_BYTES", "Race", "Recording", "SimulatorChanged", "Site", "record_launch",
           "simulated_module"]

SECTOR_BYTES = 32   #: a global-memory request moves whole 32-byte sectors
WARP = 32

#: The global name under which the kernel's copy keeps the real ``numba.cuda`` module, which
#: the simulator replaces by its in-kernel module while the kernel runs.
_SIM_NAME = "_lab6_in_kernel_cuda"


class SimulatorChanged(RuntimeError):
    """The simulator no longer works as :func:`simulated_module` expects."""


def simulated_module(env: dict):
    """The simulator's in-kernel ``cuda`` module of the launch now running (threadIdx,
    blockIdx, blockDim, syncthreads...), read from the kernel copy's globals ``env``.

    The one place that relies on how the simulator works inside: while it runs a kernel, it
    replaces every global of the kernel's function that is the ``numba.cuda`` module by an
    object implementing the in-kernel API (``numba.cuda.simulator.kernelapi``).

    Raises:
        SimulatorChanged: the global was not replaced, or the object lacks that API.
    """
    sim = env.get(_SIM_NAME)
    if sim is cuda or sim is None or not all(
            hasattr(sim, name) for name in ("threadIdx", "blockIdx", "blockDim", "gridDim")):
        raise SimulatorChanged(
            "Numba's CUDA simulator did not put its in-kernel cuda module in the kernel's "
            "globals during the launch: the access recorder of helpers.checks.lab6 must be "
            f"adapted to this numba-cuda version (got {type(sim).__name__})")
    return sim


@dataclasses.dataclass
class _Thread:
    block: int
    tid: int
    epoch: int = 0        # block-wide barriers passed
    warp_epoch: int = 0   # barriers passed that order this warp (block-wide or syncwarp)
    seen: dict = dataclasses.field(default_factory=dict)


class _Log:
    """The log of one launch: one tuple per element access."""

    def __init__(self, env: dict):
        self.env = env
        self.rows: list[tuple] = []
        self.arrays: dict[str, tuple[tuple[int, ...], int, str]] = {}  # name: shape, itemsize
        self.shared: dict[tuple, _Recorded] = {}
        self.threads: dict[tuple, _Thread] = {}

    def thread(self) -> _Thread:
        sim = simulated_module(self.env)
        b, t, d, g = sim.blockIdx, sim.threadIdx, sim.blockDim, sim.gridDim
        key = (b.x, b.y, b.z, t.x, t.y, t.z)
        state = self.threads.get(key)
        if state is None:
            block = b.x + g.x * (b.y + g.y * b.z)
            state = self.threads[key] = _Thread(block, t.x + d.x * (t.y + d.y * t.z))
        return state

    def add(self, arr: _Recorded, index, kind: str, frame) -> None:
        a = arr._a
        if not isinstance(index, tuple):
            index = (index,)
        offset = arr._base
        for i, n, s in zip(index, a.shape, a.strides):
            i = int(i)
            offset += (i + n if i < 0 else i) * s
        th = self.thread()
        where = (frame.f_code.co_filename, frame.f_lineno)
        key = (arr._name, kind, where)
        n = th.seen.get(key, 0)
        th.seen[key] = n + 1
        self.rows.append((arr._space, arr._name, kind, where, n, th.block, th.tid,
                          th.epoch, th.warp_epoch, offset, a.itemsize))


class _Recorded:
    """A NumPy array whose element loads and stores are logged (slices give logged views)."""

    __slots__ = ("_a", "_base", "_name", "_space", "_log")

    def __init__(self, a: np.ndarray, name: str, space: str, log: _Log, base: int = 0):
        self._a, self._name, self._space, self._log, self._base = a, name, space, log, base

    shape = property(lambda self: self._a.shape)
    ndim = property(lambda self: self._a.ndim)
    size = property(lambda self: self._a.size)
    dtype = property(lambda self: self._a.dtype)
    strides = property(lambda self: self._a.strides)

    def __len__(self) -> int:
        return len(self._a)

    def __getitem__(self, index):
        value = self._a[index]
        if isinstance(value, np.ndarray):
            base = value.__array_interface__["data"][0] - self._a.__array_interface__["data"][0]
            return _Recorded(value, self._name, self._space, self._log, self._base + base)
        self._log.add(self, index, "load", sys._getframe(1))
        return value

    def __setitem__(self, index, value):
        self._a[index] = value
        self._log.add(self, index, "store", sys._getframe(1))


class _Shared:
    def __init__(self, log: _Log):
        self._log = log

    def array(self, shape, dtype, alignment=None):
        """One array per block and line of the kernel, as on a GPU."""
        log = self._log
        sim = simulated_module(log.env)
        frame = sys._getframe(1)
        line = frame.f_lineno
        if shape == 0:   # dynamic shared memory: the simulator's one buffer
            key = (id(sim), "dynamic", str(dtype))
            make = lambda: sim.shared.array(0, dtype)  # noqa: E731
        else:
            b = sim.blockIdx
            key = ((b.x, b.y, b.z), frame.f_code.co_filename, line)
            make = lambda: np.zeros(shape, np.dtype(dtype if isinstance(  # noqa: E731
                dtype, (np.dtype, type)) else str(dtype)))
        arr = log.shared.get(key)
        if arr is None:
            name = f"the shared array of line {line}"
            a = make()
            log.arrays[name] = (a.shape, a.itemsize, frame.f_code.co_filename)
            arr = log.shared.setdefault(key, _Recorded(a, name, "shared", log))
        return arr


class _Cuda:
    """The ``cuda`` a recorded kernel sees: the simulator's, with shared arrays and barriers
    recorded, and ``syncwarp`` (which the simulator lacks) counted as a warp barrier."""

    def __init__(self, log: _Log):
        self._log = log
        self.shared = _Shared(log)

    def __getattr__(self, name):
        return getattr(simulated_module(self._log.env), name)

    def _barrier(self, call, *args):
        result = call(*args)
        th = self._log.thread()
        th.epoch += 1
        th.warp_epoch += 1
        return result

    def syncthreads(self):
        return self._barrier(simulated_module(self._log.env).syncthreads)

    def syncthreads_count(self, value):
        return self._barrier(simulated_module(self._log.env).syncthreads_count, value)

    def syncthreads_and(self, value):
        return self._barrier(simulated_module(self._log.env).syncthreads_and, value)

    def syncthreads_or(self, value):
        return self._barrier(simulated_module(self._log.env).syncthreads_or, value)

    def syncwarp(self, mask=0xFFFFFFFF):
        self._log.thread().warp_epoch += 1


# ------------------------------------------------------------------------------- analysis


@dataclasses.dataclass
class Site:
    """The warp requests of one line's accesses to one array: ``space`` ("global" or
    "shared"), ``array`` (its name), ``kind`` ("load" / "store"), ``line`` (number, code),
    ``requests`` (count); global: ``sectors`` and ``ideal`` (32-byte sectors touched and the
    fewest the same bytes need, summed over the requests), ``worst`` (the request farthest from
    ideal: its sectors and ideal); shared: ``degree`` (largest conflict degree), ``mean_degree``;
    ``example``: the element indices (row, column) of the lanes of that worst request."""

    space: str
    array: str
    kind: str
    line: tuple[int, str]
    requests: int
    sectors: int = 0
    ideal: int = 0
    worst: tuple[int, int] = (0, 0)
    degree: int = 0
    mean_degree: float = 0.0
    example: list = dataclasses.field(default_factory=list)

    @property
    def per_request(self) -> float:
        """Sectors a request on average (global)."""
        return self.sectors / self.requests if self.requests else 0.0

    @property
    def ideal_per_request(self) -> float:
        return self.ideal / self.requests if self.requests else 0.0


@dataclasses.dataclass
class Race:
    """A shared word read by one thread and written by another with no barrier between that
    orders them: ``array``, ``index`` (element), the ``writer`` and ``reader`` (tx, ty, tz)
    with their warps and lines."""

    array: str
    index: tuple[int, ...]
    writer: tuple[int, int, int]
    writer_warp: int
    writer_line: tuple[int, str]
    reader: tuple[int, int, int]
    reader_warp: int
    reader_line: tuple[int, str]


def _line(where) -> tuple[int, str]:
    filename, lineno = where
    return lineno, linecache.getline(filename, lineno).strip()


class Recording:
    """What :func:`record_launch` logged: ``rows`` (one tuple per access), ``arrays`` {name:
    (shape, itemsize, file)}, ``block`` (the launch's block shape); :meth:`sites` and
    :meth:`races` read it."""

    def __init__(self, log: _Log, block: tuple[int, int, int]):
        self.rows = log.rows
        self.arrays = log.arrays
        self.block = block

    def _index(self, name: str, offset: int) -> tuple[int, ...]:
        shape, itemsize, _ = self.arrays[name]
        return tuple(int(i) for i in np.unravel_index(offset // itemsize, shape))

    def sites(self, space: str) -> list[Site]:
        """The access sites of ``space`` ("global" or "shared"), by line, loads first; the
        example of each is its first worst request (by occurrence, block, warp)."""
        groups: dict[tuple, dict[tuple, list]] = {}
        for sp, name, kind, where, n, block, tid, _, _, offset, size in self.rows:
            if sp == space:
                groups.setdefault((name, kind, where), {}).setdefault(
                    (n, block, tid // WARP), []).append((tid % WARP, offset, size))
        out = []
        for (name, kind, where), requests in sorted(
                groups.items(), key=lambda kv: (kv[0][2][1], kv[0][1], kv[0][0])):
            site = Site(space, name, kind, _line(where), len(requests))
            worst_gap, degrees = None, []
            for _, lanes in sorted(requests.items()):
                lanes.sort()
                if space == "global":
                    sectors = len({o // SECTOR_BYTES for _, o, _ in lanes})
                    nbytes = len({o for _, o, _ in lanes}) * lanes[0][2]
                    ideal = math.ceil(nbytes / SECTOR_BYTES)
                    site.sectors += sectors
                    site.ideal += ideal
                    gap = sectors - ideal
                else:
                    gap = conflict_degree([o // 4 for _, o, _ in lanes])
                    degrees.append(gap)
                if worst_gap is None or gap > worst_gap:
                    worst_gap = gap
                    site.example = [self._index(name, o) for _, o, _ in lanes]
                    if space == "global":
                        site.worst = (sectors, ideal)
            if degrees:
                site.degree, site.mean_degree = max(degrees), float(np.mean(degrees))
            out.append(site)
        return out

    def races(self) -> list[Race]:
        """Reads of one shared word by one thread and writes by another that no barrier
        orders: in the same interval between block-wide barriers, and not in one warp
        separated by a ``syncwarp``. One per array: the first with the two threads in
        different warps if there is one (by block, interval, word, reader, writer)."""
        words: dict[tuple, list] = {}
        for sp, name, kind, where, _, block, tid, epoch, wepoch, offset, _ in self.rows:
            if sp == "shared":
                words.setdefault((name, block, epoch, offset), []).append(
                    (kind, tid, wepoch, where))
        found: dict[str, tuple] = {}
        for (name, block, epoch, offset), accesses in sorted(words.items()):
            if found.get(name, (1,))[0] == 0:
                continue
            stores = sorted(a for a in accesses if a[0] == "store")
            for kind, tid, wepoch, where in sorted(accesses):
                if kind != "load":
                    continue
                for _, wtid, wwepoch, wwhere in stores:
                    same_warp = wtid // WARP == tid // WARP
                    if wtid != tid and (not same_warp or wwepoch == wepoch):
                        key = (int(same_warp), block, epoch, offset, tid, wtid)
                        if name not in found or key < found[name][0:6]:
                            found[name] = key + (Race(
                                name, self._index(name, offset), self._xyz(wtid), wtid // WARP,
                                _line(wwhere), self._xyz(tid), tid // WARP, _line(where)),)
        return [entry[-1] for entry in found.values()]

    def _xyz(self, tid: int) -> tuple[int, int, int]:
        bx, by, _ = self.block
        return tid % bx, tid // bx % by, tid // (bx * by)


def record_launch(kernel, grid, block, **arrays: np.ndarray) -> Recording:
    """Launch ``kernel`` in the CUDA simulator on ``arrays`` (passed in order, by keyword,
    each wrapped so its accesses are logged under its keyword) and return the log.

    Args:
        kernel: a ``@cuda.jit`` kernel (its ``py_func`` is run; the kernel itself and its
            globals are left unchanged). grid, block: the launch shape (ints or tuples).
        arrays: NumPy arrays, written in place by the kernel.

    Returns:
        A :class:`Recording`.

    Raises:
        Whatever the kernel raises in the simulator; :class:`SimulatorChanged` if the
        simulator no longer runs kernels as this module expects.
    """
    from numba.cuda import simulator   # the simulator runs on a GPU machine too

    fn = getattr(kernel, "py_func", kernel)
    env = dict(fn.__globals__)
    log = _Log(env)
    proxy = _Cuda(log)
    for key, value in fn.__globals__.items():
        if value is cuda:
            env[key] = proxy
    env[_SIM_NAME] = cuda
    copy = types.FunctionType(fn.__code__, env, fn.__name__, fn.__defaults__, fn.__closure__)
    wrapped = [_Recorded(a, name, "global", log) for name, a in arrays.items()]
    for name, a in arrays.items():
        log.arrays[name] = (a.shape, a.itemsize, "")
    simulator.jit(copy)[grid, block](*wrapped)
    block3 = tuple(block) + (1,) * (3 - len(block)) if isinstance(block, tuple) else (block, 1, 1)
    return Recording(log, block3)
