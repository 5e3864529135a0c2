"""What a throughput point will cost before it is run, and running it within its budgets.

A point's cost: drawing its random operands, one warm-up call, then
:func:`helpers.device.timing.benchmark` (two calls for a slow call; for a fast one
``min_run_time`` plus up to :data:`TIMER_OVERHEAD_S` to choose how many calls to time). The
time of one call comes, for each backend's first size, from a small calibration call of the
same operation in the same dtype on the same device (:func:`calibrate`: GEMM m x m with m
doubled from 16 until a call takes 1 ms), scaled by the work ratio (n^3 for GEMM, n
elementwise) and a safety factor; for later sizes, from the last size measured. A point
estimated over its budget, or over the time left before a deadline, is skipped with its
estimate; after the warm-up call the estimate is checked again with that call's real time.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable

import numpy as np

from helpers.device import backend
from helpers.device.progress import time_up
from helpers.device.timing import Timing, benchmark
from helpers.experiments.throughput.calls import generated_elements, make_call

__all__ = ["CALLS_TIMED", "SAFETY_FIRST", "SAFETY_NEXT", "TIMER_OVERHEAD_S", "BackendBudget",
           "Calibration", "Estimate", "benchmark_seconds", "calibrate", "point_seconds",
           "setup_seconds",
           "wait_for_idle_cores", "warm_up"]

#: Calls :func:`benchmark` makes after the warm-up call when one call takes 10 ms or more and
#: at least half of ``min_run_time`` (blocks of one call, at least two).
CALLS_TIMED = 2
#: Seconds :func:`benchmark` may spend on fast calls beyond ``min_run_time`` (it grows its
#: block of calls tenfold until the clock's overhead is negligible).
TIMER_OVERHEAD_S = 0.15
#: Safety factor on a time scaled up from a smaller calibration call: larger operands leave
#: the caches (float16 GEMM on a 2-core CPU is 1.7 times slower per FLOP at n = 1024 than at 128).
SAFETY_FIRST = 2.0
#: Safety factor on a time scaled up from the last size measured.
SAFETY_NEXT = 1.25
#: A calibration call stops growing once one call takes this long (seconds).
CALIBRATION_TARGET_S = {"gemm": 1e-3, "elementwise": 2e-4}
#: Calibration sizes: (first, growth factor, largest).
CALIBRATION_SIZES = {"gemm": (16, 2, 1024), "elementwise": (4096, 4, 1 << 20)}
#: A calibration size counts once its time grew at least MIN_GROWTH times from the size before,
#: and at most MAX_GROWTH times as fast as the work (n ** 3 for GEMM, n elementwise) did: a
#: jump far beyond the work is a delay that began at that size, not the operation's cost.
MIN_GROWTH = {"gemm": 2.0, "elementwise": 1.5}
MAX_GROWTH = 8.0
#: Drawing and converting operands costs this many times the measured time to draw them.
SETUP_FACTOR = 1.5

_DRAW_S_PER_VALUE: list[float] = []
_WARM: set = set()


def setup_seconds(values: int) -> float:
    """Estimated seconds to draw ``values`` float32 standard-normal host values and place
    them on the device (the draw rate is measured once per process)."""
    if not _DRAW_S_PER_VALUE:
        probe, rng, best = 1 << 16, np.random.default_rng(0), math.inf
        for _ in range(3):
            start = time.perf_counter()
            rng.standard_normal(probe, dtype=np.float32)
            best = min(best, time.perf_counter() - start)
        _DRAW_S_PER_VALUE.append(best / probe)
    return values * _DRAW_S_PER_VALUE[0] * SETUP_FACTOR


def benchmark_seconds(per_call_s: float, min_run_time: float) -> float:
    """Estimated seconds of :func:`benchmark` after the warm-up call: :data:`CALLS_TIMED`
    calls of a slow call, or ``min_run_time`` plus :data:`TIMER_OVERHEAD_S` for fast ones
    (measured on a 2-core CPU with float32 GEMMs, ``min_run_time`` 0.05 s: 1.7 to 2.0 times
    the call from 40 ms up, at most 0.03 s beyond ``min_run_time`` below)."""
    return max(CALLS_TIMED * per_call_s, min_run_time + TIMER_OVERHEAD_S)


def point_seconds(per_call_s: float, setup_s: float, min_run_time: float) -> float:
    """Estimated seconds of one point: operands, a warm-up call, then :func:`benchmark`."""
    return setup_s + per_call_s + benchmark_seconds(per_call_s, min_run_time)


def _sync(device: str) -> None:
    if device == "cuda" and backend.MODE == "gpu":
        import torch

        torch.cuda.synchronize()


def _time_once(call: Callable[[], object], device: str) -> float:
    """Seconds of one call, the device synchronised before and after."""
    _sync(device)
    start = time.perf_counter()
    call()
    _sync(device)
    return time.perf_counter() - start


def wait_for_idle_cores(limit_s: float = 1.0) -> float:
    """Wait, at most ``limit_s`` seconds, until a 32 x 32 torch GEMM on the CPU takes under a
    millisecond (about 0.02 ms when the cores are free): NumPy's BLAS threads keep spinning
    for up to a second after a GEMM, and meanwhile every torch call waits for a core.
    Returns the seconds waited."""
    import torch

    a = torch.ones(32, 32)
    out = torch.empty_like(a)
    start = time.monotonic()
    while time.monotonic() - start < limit_s:
        t0 = time.perf_counter()
        torch.matmul(a, a, out=out)
        if time.perf_counter() - t0 < 1e-3:
            break
        time.sleep(0.02)
    return time.monotonic() - start


def warm_up(jobs=()) -> None:
    """Run, once per process, what a first measurement would otherwise pay inside its budget:
    the timer's imports, and the first call of each ``(device, experiment, backend)`` in
    ``jobs`` (thread pools, kernel compilation), at a tiny size in float32. Errors are left
    for the sweep to report."""
    if "timer" not in _WARM:
        benchmark(lambda: None, min_run_time=1e-3, warmup=0)
        _WARM.add("timer")
    for device, experiment, name in jobs:
        if (device, experiment, name) in _WARM:
            continue
        op, n = ("relu", 64) if experiment == "elementwise" else ("gemm", 8)
        try:
            make_call(experiment, op, name, n, "float32", device)()
            _sync(device)
        except Exception:  # noqa: BLE001  (the sweep reports this backend's failures)
            pass
        _WARM.add((device, experiment, name))


@dataclasses.dataclass(frozen=True)
class Calibration:
    """A calibration call: ``size`` (n), ``seconds`` of one call, and what it was."""

    size: int
    seconds: float
    what: str


def calibrate(experiment: str, op: str, name: str, dtype: str, device: str,
              largest: int) -> Calibration:
    """Time one small call of the operation in ``dtype`` on ``device`` (the device
    synchronised), growing its size from :data:`CALIBRATION_SIZES` until a call takes
    :data:`CALIBRATION_TARGET_S` and its time grew with the work (by :data:`MIN_GROWTH` from
    the size before: a fixed delay, such as another library's threads still spinning on the
    cores, does not; and by at most :data:`MAX_GROWTH` times the work's growth: a delay that
    begins at one size does not), or the size reaches ``largest`` (the sweep's smallest
    size). Each size is called once untimed, then three times; the fastest call counts."""
    first, growth, cap = CALIBRATION_SIZES[experiment]
    power = 3 if experiment == "gemm" else 1  # the work grows as size ** power
    size, before, before_size = min(first, largest), None, None
    while True:
        call = make_call(experiment, op, name, size, dtype, device)
        call()
        seconds = min(_time_once(call, device) for _ in range(3))
        del call
        grew = (before is not None and MIN_GROWTH[experiment] * before <= seconds
                <= MAX_GROWTH * (size / before_size) ** power * before)
        if (seconds >= CALIBRATION_TARGET_S[experiment] and grew) or size >= min(cap, largest):
            break
        size, before, before_size = min(size * growth, cap, largest), seconds, size
    what = (f"a {size} x {size} {dtype} calibration GEMM" if experiment == "gemm"
            else f"a {size:,}-element {dtype} calibration {op}")
    return Calibration(size, seconds, what)


@dataclasses.dataclass(frozen=True)
class Estimate:
    """Estimated ``per_call_s``, ``setup_s`` (operands) and ``point_s`` (the whole point),
    and where the time per call came from (``source``)."""

    per_call_s: float
    setup_s: float
    point_s: float
    source: str

    def text(self) -> str:
        return (f"estimated {self.per_call_s:.2g} s per call ({self.source}), about "
                f"{self.point_s:.2g} s for the point")


def _time_limit_text(time_limit: float | None) -> str:
    return "skipped: time limit" + ("" if time_limit is None else f" of {time_limit:g} s")


class BackendBudget:
    """One backend's points in a sweep, each measured only if it fits its budgets.

    Args:
        experiment, op, name, device, dtype: what is measured (see
            :func:`helpers.experiments.throughput.calls.make_call`).
        min_run_time: seconds of timed calls per point.
        smallest: the sweep's smallest size (the calibration call grows no further).
    """

    def __init__(self, experiment: str, op: str, name: str, device: str, dtype: str,
                 min_run_time: float, smallest: int):
        self.experiment, self.op, self.name = experiment, op, name
        self.device, self.dtype, self.min_run_time = device, dtype, min_run_time
        self.smallest = smallest
        self.power = 1 if experiment == "elementwise" else 3
        self.calibration: Calibration | None = None
        #: (size, seconds per call) of the last size measured (or of its warm-up call).
        self.last: tuple[int, float] | None = None

    def estimate(self, n: int) -> Estimate:
        """The estimated cost of size ``n`` (calibrating first if nothing is known yet)."""
        if self.last is not None:
            base_n, base_s = self.last
            safety, source = SAFETY_NEXT, f"from size {base_n:,}"
        else:
            if self.calibration is None:
                if self.device == "cpu" and self.name == "torch":
                    wait_for_idle_cores()
                self.calibration = calibrate(self.experiment, self.op, self.name, self.dtype,
                                             self.device, self.smallest)
            cal = self.calibration
            base_n, base_s, safety, source = cal.size, cal.seconds, SAFETY_FIRST, f"from {cal.what}"
        ratio = (n / base_n) ** self.power
        per_call = base_s * ratio * (safety if n > base_n else 1.0)
        setup = setup_seconds(generated_elements(self.experiment, n))
        return Estimate(per_call, setup, point_seconds(per_call, setup, self.min_run_time),
                        source)

    def run(self, n: int, point_budget_s: float, deadline: float | None = None,
            time_limit: float | None = None) -> tuple[str, Timing | None]:
        """Measure size ``n`` unless it is estimated over ``point_budget_s`` seconds or over
        the time left before ``deadline`` (a :func:`time.monotonic` value; ``time_limit`` is
        the limit it came from, for the text). Returns ``(status, timing)``: ``("ok",
        Timing)``, or why not and None. Errors of the call itself propagate."""
        est = self.estimate(n)
        if est.point_s > point_budget_s:
            return (f"skipped: {est.text()}, over the {point_budget_s:g} s budget per point",
                    None)
        if deadline is not None and est.point_s > deadline - time.monotonic():
            left = max(0.0, deadline - time.monotonic())
            return (f"{_time_limit_text(time_limit)}: {est.text()}, more than the {left:.2g} s "
                    "left"), None
        start = time.monotonic()
        call = make_call(self.experiment, self.op, self.name, n, self.dtype, self.device)
        first = _time_once(call, self.device)  # the warm-up call, timed
        self.last = (n, first)
        rest = benchmark_seconds(1.1 * first, self.min_run_time)  # calls vary a little
        spent = time.monotonic() - start
        if spent + rest > point_budget_s:
            return (f"skipped: its first call took {first:.2g} s, so the point would take about "
                    f"{spent + rest:.2g} s, over the {point_budget_s:g} s budget per point", None)
        if time_up(deadline) or (deadline is not None and rest > deadline - time.monotonic()):
            return (f"{_time_limit_text(time_limit)}: its first call took {first:.2g} s; "
                    f"timing it needs about {rest:.2g} s more than is left", None)
        timing = benchmark(call, device=self.device, label=f"{self.name} {self.op} n={n}",
                           warmup=0, min_run_time=self.min_run_time)
        self.last = (n, timing.median_s)
        return "ok", timing
