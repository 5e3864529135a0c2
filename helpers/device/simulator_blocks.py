"""Numba's CUDA simulator: a block manager that runs a block's threads with less waiting.

numba-cuda 0.30.4 runs each CUDA thread as a Python thread and polls them, holding the GIL, until
all live ones wait at ``cuda.syncthreads()`` or end. :func:`run` gives the same results and errors:

* a kernel no block-level cooperation can reach (:func:`needs_threads`) runs its block's threads
  in turn in one Python thread, each with its own ``threadIdx`` (0.17 s instead of 0.94 s for
  the unrolling strategy's passes on a small layer);
* one whose threads meet only at ``cuda.syncthreads()`` (:func:`barriers_only`) runs them as
  greenlets in one Python thread, each to the barrier or its end, round by round (a 64 x 64
  transpose through a shared tile, blocks of 32 x 32: 0.28 s instead of 1.4 s);
* any other a Python thread per CUDA thread; the last live one to reach a barrier (or to end)
  releases the others, without polling.

:func:`install` puts it in place when the simulator's module loads, or at once if it has.
"""

from __future__ import annotations

import functools
import inspect
import sys
import threading
import types

from helpers.device import after_import

try:
    import greenlet
except ImportError:   # then every kernel with a barrier runs a Python thread per CUDA thread
    greenlet = None

__all__ = ["BARRIER_ONLY", "COOPERATION", "MODULE", "barriers_only", "install", "installed",
           "needs_threads", "run"]

#: The simulator's module that defines ``BlockManager`` and ``BlockThread``.
MODULE = "numba.cuda.simulator.kernel"

#: Parts of the names through which a block's threads wait for or read one another (barriers,
#: ``cuda.shared``, warp votes and shuffles, fences, atomic compare-and-swap and exchange,
#: cooperative groups). Too wide on purpose: a name that merely contains one (``cast``) only
#: costs a thread per CUDA thread.
COOPERATION = ("sync", "shared", "shfl", "ballot", "vote", "activemask", "lanemask", "match",
               "fence", "cas", "exch", "grid_group", "this_grid")

#: The cooperation names a kernel may use and still run its block as greenlets in one Python
#: thread: the block-wide barrier, shared arrays and memory fences (which order nothing when
#: one thread runs at a time). A warp's vote, shuffle or ``syncwarp`` needs its threads to run
#: side by side, and ``syncthreads_count`` a count across them.
BARRIER_ONLY = frozenset({"syncthreads", "shared", "threadfence", "threadfence_block",
                          "threadfence_system"})

#: Modules whose functions a kernel may call but which hold no kernel code of their own to
#: follow (the CUDA API's names are checked where the kernel uses them).
_LIBRARIES = ("numpy", "numba", "math", "cmath", "operator", "builtins")


@functools.lru_cache(maxsize=4096)
def _names(code: types.CodeType) -> tuple[frozenset[str], tuple[str, ...]]:
    """The :data:`COOPERATION` names ``code`` (or code nested in it) uses, and all the global
    and attribute names it uses."""
    names, todo = set(), [code]
    while todo:
        c = todo.pop()
        names.update(c.co_names)
        todo += [k for k in c.co_consts if isinstance(k, types.CodeType)]
    cooperative = {n for n in names if n == "cg" or any(part in n.lower() for part in COOPERATION)}
    return frozenset(cooperative), tuple(sorted(names))


def _python_function(value):
    """The Python function behind a kernel, a device function or a CPU-compiled function
    (simulated or real), or a plain function; else None."""
    if isinstance(value, types.FunctionType):
        return value
    if isinstance(value, type):
        return None
    for attribute in ("fn", "py_func"):   # read without running any __getattr__ of value's
        inner = inspect.getattr_static(value, attribute, None)
        if isinstance(inner, types.FunctionType):
            return inner
    return None


def needs_threads(kernel) -> bool:
    """Whether the threads of a block of ``kernel`` may wait for or read one another: its code,
    or the code of a function it can reach (a global, a closure's cell, a default argument, a
    function of a module it names), uses a :data:`COOPERATION` name. Looked up at each launch,
    since a notebook may redefine a device function a kernel calls.

    Args:
        kernel: a ``cuda.jit`` kernel or device function, or its Python function.
    """
    return bool(_cooperation(kernel, stop_at_first=True))


def barriers_only(kernel) -> bool:
    """Whether every :data:`COOPERATION` name ``kernel`` can reach (as :func:`needs_threads`
    finds them) is one of :data:`BARRIER_ONLY`, and at least one is."""
    found = _cooperation(kernel, stop_at_first=False)
    return bool(found) and found <= BARRIER_ONLY


def _cooperation(kernel, stop_at_first: bool) -> set[str]:
    """The :data:`COOPERATION` names reachable from ``kernel`` (the first code's, with
    ``stop_at_first``)."""
    seen, todo, found = set(), [kernel], set()
    while todo:
        fn = _python_function(todo.pop())
        if fn is None or id(fn) in seen:
            continue
        seen.add(id(fn))
        cooperative, names = _names(fn.__code__)
        found |= cooperative
        if cooperative and stop_at_first:
            return found
        values = [fn.__globals__[n] for n in names if n in fn.__globals__]
        values += [c.cell_contents for c in fn.__closure__ or () if _filled(c)]
        values += list(fn.__defaults__ or ())
        for value in values:
            if isinstance(value, types.ModuleType):
                if value.__name__.split(".")[0] not in _LIBRARIES:
                    members = vars(value)
                    todo += [members[n] for n in names if n in members]
            else:
                todo.append(value)
    return found


def _filled(cell) -> bool:
    try:
        cell.cell_contents  # noqa: B018 - an empty cell raises
    except ValueError:
        return False
    return True


class _Barrier:
    """What a block's threads share: how many are live, how many wait at the barrier, and the
    first that failed. The last live thread to arrive, or to end, releases those waiting."""

    def __init__(self, threads: int) -> None:
        lock = threading.Lock()
        self.arrived, self.ended = threading.Condition(lock), threading.Condition(lock)
        self.live, self.waiting, self.round = threads, 0, 0
        self.failed = None
        self.aborted = False

    def release(self) -> None:   # with the lock held
        self.waiting = 0
        self.round += 1
        self.arrived.notify_all()


@functools.cache
def _thread_types(block_thread: type) -> tuple[type, type, type]:
    """The three thread classes, made from the simulator's ``BlockThread`` (which the in-kernel
    ``cuda`` module reads ``threadIdx``, ``blockIdx`` and the lane from)."""

    class Cooperating(block_thread):
        """One CUDA thread, counted at each barrier of its block."""

        def __init__(self, f, manager, grid_point, block_point, debug, barrier):
            super().__init__(f, manager, grid_point, block_point, debug)
            self._barrier = barrier

        def run(self):
            try:
                super().run()   # Numba's: an exception is kept, naming the thread
            finally:
                b = self._barrier
                with b.arrived:
                    b.live -= 1
                    if self.exception is not None and b.failed is None:
                        b.failed = self
                    if b.live and b.waiting == b.live:
                        b.release()
                    if not b.live or b.failed is not None:
                        b.ended.notify_all()

        def syncthreads(self):
            b = self._barrier
            with b.arrived:
                if self.abort:
                    raise RuntimeError("abort flag set on syncthreads call")
                b.waiting += 1
                if b.waiting == b.live:
                    b.release()
                else:
                    this = b.round
                    while b.round == this and not b.aborted:
                        b.arrived.wait()
                if self.abort:
                    raise RuntimeError("abort flag set on syncthreads clear")

    class InTurn(block_thread):
        """Every CUDA thread of a block, one after another, each with its own ``threadIdx``
        (for a kernel whose threads never wait for one another)."""

        def __init__(self, f, manager, grid_point, debug, points):
            super().__init__(f, manager, grid_point, (0, 0, 0), debug)
            self._kernel, self._points = f, points

        def run(self):
            import numpy as np

            with np.errstate(divide="raise") if self.debug else _nothing():
                for point in self._points:
                    _become(self, point)
                    try:
                        self._kernel()
                    except Exception as e:  # noqa: BLE001 - kept and raised as Numba's
                        _keep(self, e)
                        return

        def syncthreads(self):
            raise RuntimeError(
                "a kernel judged free of barriers (helpers.device.simulator_blocks."
                "needs_threads) reached cuda.syncthreads(); its threads ran in turn")

    class Greenlets(block_thread):
        """Every CUDA thread of a block as a greenlet in this one Python thread: in thread
        order, each runs until it reaches ``cuda.syncthreads()`` or ends; then those waiting
        go on, round after round (for a kernel whose threads meet only at barriers)."""

        def __init__(self, f, manager, grid_point, debug, points):
            super().__init__(f, manager, grid_point, (0, 0, 0), debug)
            self._kernel, self._points = f, points
            self._scheduler = None

        def run(self):
            import numpy as np

            def body():   # a greenlet has its own context, so NumPy's error state too
                with np.errstate(divide="raise") if self.debug else _nothing():
                    self._kernel()

            self._scheduler = greenlet.getcurrent()
            live = [(point, greenlet.greenlet(body)) for point in self._points]
            while live:
                waiting = []
                for point, thread in live:
                    _become(self, point)
                    try:
                        thread.switch()
                    except Exception as e:  # noqa: BLE001 - kept and raised as Numba's
                        _keep(self, e)
                        for _, other in live:   # end the others where they wait
                            if other and not other.dead:
                                other.throw(greenlet.GreenletExit)
                        return
                    if not thread.dead:
                        waiting.append((point, thread))
                live = waiting

        def syncthreads(self):
            if self._scheduler is None or greenlet.getcurrent() is self._scheduler:
                raise RuntimeError("cuda.syncthreads() outside a block's greenlet")
            self._scheduler.switch()

    return Cooperating, InTurn, Greenlets


def _become(thread, point: tuple[int, int, int]) -> None:
    """Make the one Python ``thread`` running a block's CUDA threads CUDA thread ``point``:
    what the in-kernel ``cuda`` module reads (``threadIdx``, the thread's id, its lane)."""
    x, y, _ = thread._manager._block_dim
    thread.threadIdx = type(thread.threadIdx)(*point)
    thread.thread_id = point[0] + x * (point[1] + y * point[2])


def _keep(thread, e: Exception) -> None:
    """Keep the exception CUDA thread ``thread.threadIdx`` raised as Numba's ``BlockThread``
    does: its message led by the thread and block, for :func:`run` to raise."""
    where = f"tid={list(thread.threadIdx)} ctaid={list(thread.blockIdx)}"
    thread.exception = (type(e)(f"{where}: {e}" if str(e) else where), sys.exc_info()[2])


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def run(self, grid_point, *args):
    """``BlockManager.run``: run every CUDA thread of the block at ``grid_point`` (in turn, as
    greenlets or as Python threads: see the module docstring), releasing the live ones together
    each time all wait in ``cuda.syncthreads()``, and raise the first exception a thread raised
    (the others stopped), as Numba's does."""
    import numpy as np

    cooperating, in_turn, greenlets = _thread_types(sys.modules[MODULE].BlockThread)

    def target():
        self._f(*args)

    points = list(np.ndindex(*self._block_dim))
    alone = not needs_threads(self._f)
    if alone or (greenlet is not None and barriers_only(self._f)):
        thread = (in_turn if alone else greenlets)(target, self, grid_point, self._debug, points)
        thread.start()
        thread.join()
        if thread.exception:
            raise thread.exception[0].with_traceback(thread.exception[1])
        return
    barrier = _Barrier(len(points))
    threads = [cooperating(target, self, grid_point, p, self._debug, barrier) for p in points]
    for t in threads:
        t.start()
    with barrier.ended:
        while barrier.live and barrier.failed is None:
            barrier.ended.wait()
        failed = barrier.failed
        if failed is not None:   # abort the others; do not join them (as Numba does)
            barrier.aborted = True
            for t in threads:
                t.abort = True
            barrier.arrived.notify_all()
    if failed is not None:
        raise failed.exception[0].with_traceback(failed.exception[1])


run.yields = True
_NUMBA_RUN = None


def _patch(module) -> bool:
    global _NUMBA_RUN
    manager = getattr(module, "BlockManager", None)
    method = getattr(manager, "run", None)
    if method is None or getattr(method, "yields", False):
        return method is not None
    if not hasattr(module, "BlockThread") or not hasattr(manager, "__init__"):
        return False   # another simulator than the one this was written for: left alone
    _NUMBA_RUN = method
    manager.run = run
    return True


def installed() -> bool:
    """Whether the simulator's block manager is (or, once it loads, will be) this one."""
    module = sys.modules.get(MODULE)
    if module is not None:
        return getattr(getattr(getattr(module, "BlockManager", None), "run", None), "yields",
                       False)
    return after_import.pending(MODULE, _patch)


def install() -> bool:
    """Put :func:`run` in place of ``BlockManager.run`` now if the simulator's module is
    loaded, else when it loads. Returns whether it is (or will be); safe to call again."""
    return after_import.when_loaded(MODULE, _patch)
