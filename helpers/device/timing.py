"""One way to time anything in the workbook: warm up, repeat, synchronise, report the median.

:func:`benchmark` runs the call in blocks until a minimum total time has passed and reports
per-call times (on the CPU, a call of 10 ms or more is a block of its own, else the blocks are
``torch.utils.benchmark.Timer.blocked_autorange``'s, with the threads torch uses outside
it). On a GPU, work is asynchronous (a kernel launch returns before the kernel finishes), so
every timestamp is taken after ``torch.cuda.synchronize()``, which waits for all work on the
device, Numba's kernels included. Under the Numba CUDA simulator the numbers are
returned but flagged as meaningless. Between timed blocks it calls
:func:`helpers.device.cancel.check`, so a measuring process can stop it cooperatively.
"""

from __future__ import annotations

import dataclasses
import statistics
import time
import timeit
from collections.abc import Callable, Sequence
from typing import Any

from helpers.device import backend, cancel

__all__ = ["Timing", "benchmark", "device_label"]


@dataclasses.dataclass(frozen=True)
class Timing:
    """The result of :func:`benchmark`. Times are seconds per call.

    Attributes:
        label: what was timed.
        device: where it ran, e.g. ``"CPU: AMD EPYC 7B13 (2 cores)"`` or ``"GPU: NVIDIA H100 ..."``.
        median_s: median time per call.
        iqr_s: interquartile range of the per-call times (0 with fewer than 4 measurements).
        min_s, max_s: fastest and slowest measurement.
        repeats: number of measurements (each the mean over ``calls_per_repeat`` calls).
        calls_per_repeat: calls averaged inside one measurement (more for very fast calls).
        times_s: the per-call time of each measurement.
        meaningful: False when the time does not describe real hardware (the CUDA simulator).
    """

    label: str
    device: str
    median_s: float
    iqr_s: float
    min_s: float
    max_s: float
    repeats: int
    calls_per_repeat: int
    times_s: tuple[float, ...]
    meaningful: bool

    @property
    def median_ms(self) -> float:
        """Median time per call in milliseconds."""
        return self.median_s * 1e3

    def rate(self, amount: float) -> float:
        """``amount`` per second at the median time (e.g. bytes -> bytes/s, FLOPs -> FLOP/s)."""
        return amount / self.median_s

    def __str__(self) -> str:
        flag = "" if self.meaningful else "  [not a hardware timing]"
        return (f"{self.label}: median {_fmt_s(self.median_s)} "
                f"(IQR {_fmt_s(self.iqr_s)}, {self.repeats} x {self.calls_per_repeat} calls) "
                f"on {self.device}{flag}")


def _fmt_s(s: float) -> str:
    if s >= 1:
        return f"{s:.3g} s"
    if s >= 1e-3:
        return f"{s * 1e3:.3g} ms"
    return f"{s * 1e6:.3g} us"


def device_label(device: str) -> str:
    """Human label for ``"cpu"`` or ``"cuda"`` as used in every chart and table of the workbook."""
    info = backend.info()
    if device == "cpu":
        return info.cpu_label
    if device == "cuda":
        return info.device_label
    raise ValueError(f"device must be 'cpu' or 'cuda', got {device!r}")


def _torch_threads() -> int:
    """The number of threads torch uses for CPU operators here (``torch.get_num_threads``)."""
    import torch

    return torch.get_num_threads()


def _torch_benchmark():
    import logging

    # torch.utils.benchmark imports torch.utils.cpp_extension, which logs a warning about
    # CUDA_HOME on machines without a CUDA runtime; it is irrelevant to timing Python calls.
    logging.getLogger("torch.utils.cpp_extension").setLevel(logging.ERROR)
    from torch.utils import benchmark as tbench

    return tbench


def _cuda_synchronize() -> None:
    if backend.MODE == "gpu":
        import torch

        torch.cuda.synchronize()
    # In the simulator every launch has finished when it returns; nothing to wait for.


def benchmark(
    fn: Callable[..., Any],
    *args: Any,
    device: str = "cpu",
    label: str | None = None,
    warmup: int = 1,
    min_run_time: float = 0.2,
    sync: Callable[[], None] | None = None,
    min_repeats: int = 2,
    deadline: float | None = None,
    **kwargs: Any,
) -> Timing:
    """Time ``fn(*args, **kwargs)``: warm-up calls, then repeated timed blocks; median per call.

    Args:
        fn: the call to time. For GPU work it may return before the work finishes: the timer
            synchronises the device before reading the clock.
        device: ``"cpu"`` or ``"cuda"``. ``"cuda"`` synchronises the GPU around every reading
            (``torch.cuda.synchronize``) and, under the simulator, marks the result not meaningful.
        label: name of what is timed (default: ``fn.__name__``).
        warmup: untimed calls first (JIT compilation, cuDNN/cuBLAS autotuning, caches). >= 0.
        min_run_time: seconds of timed calls to collect at least (on the CPU, one call first,
            a block of its own where it lasts 10 ms or more, else the blocks of
            ``blocked_autorange``; on ``"cuda"`` blocks of about a tenth of it,
            :func:`_synced_blocks`); a call slower than this is still measured at least twice.
            > 0.
        sync: overrides how the device is synchronised (for tests and other devices).
        min_repeats: timed blocks to collect at least (>= 1): more blocks are timed after
            ``min_run_time`` until there are this many, unless ``deadline`` stops them.
        deadline: a :func:`time.monotonic` value: no further block is begun when it would end
            after it (judged from the blocks so far); at least one block is always timed.

    Returns:
        A :class:`Timing` with the median, IQR, min and max of the per-call time in seconds.

    Raises:
        ValueError: unknown device, ``warmup < 0``, ``min_run_time <= 0`` or
            ``min_repeats < 1``.
        helpers.device.cancel.Cancelled: the measuring process was asked to stop.

    Source: GPU timing after a synchronise, medians over repeats: the study (Section IV) reports
    the mean of 10 iterations; the median is the robust choice for noisy machines.
    """
    dev = device_label(device)
    if warmup < 0:
        raise ValueError(f"warmup must be >= 0, got {warmup}")
    if not min_run_time > 0:
        raise ValueError(f"min_run_time must be > 0 seconds, got {min_run_time}")
    if not (isinstance(min_repeats, int) and min_repeats >= 1):
        raise ValueError(f"min_repeats must be an integer >= 1, got {min_repeats!r}")
    if sync is None:
        sync = _cuda_synchronize if device == "cuda" else (lambda: None)

    def call() -> None:
        fn(*args, **kwargs)

    def synced_clock() -> float:
        sync()
        return timeit.default_timer()

    for _ in range(warmup):
        cancel.check()
        call()
    sync()
    cancel.check()

    def room_for_another(times: list[float], number: int) -> bool:
        """Whether one more block, as long as the slowest so far, ends before the deadline."""
        return deadline is None or time.monotonic() + max(times) * number < deadline

    if device == "cuda":
        times, number = _synced_blocks(call, sync, min_run_time, warmed=warmup > 0)
        while len(times) < min_repeats and room_for_another(times, number):
            cancel.check()
            times += _synced_blocks(call, sync, 0.0, warmed=True, number=number)[0][-1:]
    else:
        def block(number: int) -> float:
            """Seconds per call of ``number`` calls in a row. (torch's ``Timer.timeit`` first
            makes two more calls, untimed: three calls where a slow point's block has one.)"""
            start = synced_clock()
            for _ in range(number):
                call()
            return (synced_clock() - start) / number

        # One call first. One of _ONE_CALL_S or more is a block of its own: blocks of one call
        # are what blocked_autorange would choose, after an untimed call of its own to find that
        # out. A shorter call was one more warm-up, and blocked_autorange chooses the blocks.
        # Timer runs torch on one thread unless told: measure with the threads torch would use
        # outside the timer (the profiler and Numba's parallel loops use every core too).
        times, number = [block(1)], 1
        if times[0] < _ONE_CALL_S:
            cancel.check()
            timer = _torch_benchmark().Timer(stmt="call()", globals={"call": call},
                                             timer=synced_clock, num_threads=_torch_threads())
            m = timer.blocked_autorange(callback=lambda *_: cancel.check(),
                                        min_run_time=min_run_time)
            times, number = list(m.times), m.number_per_run
        # until min_run_time is timed; a call slower than it gives one block: time more, for a
        # median and quartiles
        while ((sum(times) * number < min_run_time or len(times) < min_repeats)
               and room_for_another(times, number)):
            cancel.check()
            times.append(block(number))
    return _summarise(label or getattr(fn, "__name__", "call"), dev, times, number,
                      meaningful=(device == "cpu" or backend.timings_meaningful()))


#: A GPU measurement is split into about this many blocks of calls (min_run_time / blocks each).
_GPU_BLOCKS = 10
#: Seconds of a CPU call from which it is timed in blocks of one call at once (the clock's own
#: cost, about a microsecond, is then under 0.01 % of a block, blocked_autorange's bound).
_ONE_CALL_S = 0.01


def _synced_blocks(call: Callable[[], None], sync: Callable[[], None], min_run_time: float,
                   warmed: bool = True, number: int | None = None) -> tuple[list[float], int]:
    """Per-call times of blocks of ``number`` calls, each block between two synchronisations,
    until ``min_run_time`` seconds are timed and at least two blocks ran; and ``number``.

    One synchronised call sets ``number`` so that a block lasts about min_run_time / 10.
    ``blocked_autorange`` instead grows its block tenfold until the timer's overhead is under
    0.01 %: with a device synchronisation (about 10 us) in the timer that makes every block at
    least about 0.1 s, and a measurement up to ~30 times the call; here it costs about
    max(min_run_time, two calls) after the warm-up, and from min_run_time = 0.05 s on a
    synchronisation is at most 0.2 % of a block. A ``number`` given skips the probe (one
    more block of that many calls)."""

    def block(number: int) -> float:
        sync()
        start = timeit.default_timer()
        for _ in range(number):
            call()
        sync()
        return (timeit.default_timer() - start) / number

    if number is not None:
        return [block(number)], number
    probe = block(1)
    number = max(1, int(min_run_time / _GPU_BLOCKS / max(probe, 1e-9)))
    # a slow call's probe is a block of one already (unless it was the first call of all)
    times = [probe] if number == 1 and warmed else []
    while sum(times) * number < min_run_time or len(times) < 2:
        cancel.check()
        times.append(block(number))
    return times, number


def quartiles(times_s: Sequence[float]) -> tuple[float, float]:
    """First and third quartile of per-call times (inclusive method; both the one time when
    there is one), in the unit given.

    Raises:
        ValueError: ``times_s`` is empty.
    """
    ordered = sorted(times_s)
    if not ordered:
        raise ValueError("times_s must hold at least one time")
    if len(ordered) < 2:
        return ordered[0], ordered[0]
    q = statistics.quantiles(ordered, n=4, method="inclusive")
    return q[0], q[2]


def _summarise(label: str, device: str, times: list[float], calls: int,
               meaningful: bool) -> Timing:
    ordered = sorted(times)
    if len(ordered) >= 4:
        q1, q3 = quartiles(ordered)
        iqr = q3 - q1
    else:
        iqr = 0.0
    return Timing(
        label=label,
        device=device,
        median_s=statistics.median(ordered),
        iqr_s=iqr,
        min_s=ordered[0],
        max_s=ordered[-1],
        repeats=len(ordered),
        calls_per_repeat=calls,
        times_s=tuple(times),
        meaningful=meaningful,
    )
