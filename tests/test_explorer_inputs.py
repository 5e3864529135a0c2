"""The explorers and helpers.occupancy refuse bad arguments by name, fast, and leave them as
they were; and an explorer stops what does not finish in its time, without forecasting it.

Property tests feed wrong types and values (None, strings, floats for integers, bools,
negative and huge integers, lists, NumPy arrays, NaN) to every constructor argument and to the
occupancy functions: each must raise TypeError or ValueError naming the parameter, in under a
second, without a large allocation, before anything is built or measured.
"""

from __future__ import annotations

import helpers  # noqa: F401  (first: decides simulator vs GPU before numba.cuda is imported)
import copy
import math
import re
import tracemalloc

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
import steps
from planted import PlantedWorker

from helpers import occupancy as occ
from helpers import widgets
from helpers.conv import STRATEGIES, config_for
from helpers.experiments import sweep
from helpers.experiments.throughput import budget as tpb
from helpers.experiments.throughput import sweeps as tp

FAST = settings(max_examples=40, deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

# what a process does once (describing the CPU for messages) is not what is timed here
tp.device_label("cpu")

# ------------------------------------------------------------------------------ bad values

_ARRAYS = st.builds(lambda n, kind: np.arange(n, dtype=kind), st.integers(0, 4),
                    st.sampled_from([np.int64, np.float32]))
#: Values that are of no argument's type.
_JUNK = st.one_of(st.none(), st.text(max_size=12), st.binary(max_size=6),
                  st.lists(st.integers(-3, 3), max_size=4), st.tuples(st.integers()),
                  st.dictionaries(st.text(max_size=2), st.integers(), max_size=2), _ARRAYS,
                  st.just(object()), st.just(1j))


def bad_ints(lo: int, hi: int):
    """Anything but an integer in lo..hi: junk, floats, bools, integers outside the range."""
    return st.one_of(_JUNK, st.floats(allow_nan=True), st.booleans(),
                     st.integers(max_value=lo - 1), st.integers(min_value=hi + 1),
                     st.just(2**70), st.just(-(2**70)), st.just(np.float64(lo)),
                     st.just(np.bool_(True)), st.just(str(lo)))


def bad_seconds(hi: float):
    """Anything but a number of seconds in (0, hi]."""
    return st.one_of(_JUNK, st.booleans(), st.floats(max_value=0.0), st.integers(max_value=0),
                     st.floats(min_value=hi * 1.001, allow_infinity=True),
                     st.integers(min_value=int(hi) + 1), st.just(math.nan), st.just(2**70),
                     st.just("1.0"), st.just(np.array([0.5])))


def bad_bools(optional: bool = False):
    """Anything but True or False (or None where ``optional``)."""
    junk = _JUNK.filter(lambda v: v is not None) if optional else _JUNK
    return st.one_of(junk, st.integers(), st.floats(), st.just("True"), st.just([True]))


def bad_choices(options, optional: bool = False):
    """Anything but one of the strings ``options`` (or None where ``optional``)."""
    junk = _JUNK.filter(lambda v: v is not None) if optional else _JUNK
    return st.one_of(junk, st.integers(), st.floats(), st.booleans(),
                     st.text(max_size=12).filter(lambda s: s not in options),
                     st.just([options[0]]), st.just(options[0].upper() + " "),
                     st.just(np.array(options[:1])))


def _same(a, b) -> bool:
    """a equals b, arrays and NaN included (the argument was not changed)."""
    if isinstance(a, np.ndarray):
        return (isinstance(b, np.ndarray) and a.dtype == b.dtype and a.shape == b.shape
                and np.array_equal(a, b))
    if isinstance(a, float) and math.isnan(a):
        return isinstance(b, float) and math.isnan(b)
    if isinstance(a, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(map(_same, a, b))
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if type(a) is object:  # a plain object() has no value to compare: its copy is another
        return type(b) is object
    return a is b or a == b


#: A refusal comes before any work: within this many interpreter steps (Python lines run and C
#: functions called, tests/steps.py; the refusals here take at most about 530). Steps, unlike
#: seconds, do not depend on the machine or its load.
REFUSAL_STEPS = 5_000


def assert_refused(call, name: str, bad) -> str:
    """``call()`` raises TypeError or ValueError naming ``name``, before any work (in fewer
    than REFUSAL_STEPS interpreter steps, with a peak of traced allocations under 4 MiB), and
    ``bad`` is left as it was."""
    before = copy.deepcopy(bad)
    tracemalloc.start()
    try:
        with pytest.raises((TypeError, ValueError)) as err, steps.counted() as work:
            call()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    text = str(err.value)
    assert re.search(rf"(?<!\w){re.escape(name)}(?!\w)", text), (name, bad, text)
    assert work.total < REFUSAL_STEPS, (name, bad, f"{work.total} steps")
    assert peak < 4 * 2**20, (name, bad, peak)
    assert _same(bad, before), (name, bad, before)
    return text


# ------------------------------------------------------------------- ThroughputExplorer

THROUGHPUT_BAD = {
    "op": bad_choices(["relu", "saxpy", "gemm"]),
    "dtype": bad_choices(list(tp.DTYPES)),
    "size_range": st.one_of(
        _JUNK.filter(lambda v: v is not None and not (isinstance(v, (list, tuple))
                                                       and len(v) == 2
                                                       and all(isinstance(x, int) and x >= 1
                                                               for x in v))),
        st.tuples(bad_ints(1, 2**53), st.integers(1, 10**4)),
        st.tuples(st.integers(1, 10**4), bad_ints(1, 2**53)),
        st.lists(st.integers(1, 100), min_size=3, max_size=4),
        st.integers(2, 10**6).map(lambda n: [n, n - 1]),   # smallest above largest
        st.just((1, 10**13))),                              # more than the memory
    "point_budget_s": bad_seconds(600),
    "min_run_time": bad_seconds(10),
    "update_budget_s": bad_seconds(3600),
    "use_figurewidget": bad_bools(optional=True),
    "measure": bad_bools(),
    "reference_prefix": st.one_of(_JUNK.filter(lambda v: not isinstance(v, str)),
                                  st.just("../results/x"), st.just("a/b"), st.just("x" * 300)),
}


@FAST
@given(data=st.data())
@pytest.mark.slow
def test_throughput_explorer_refuses_each_bad_argument(data):
    name = data.draw(st.sampled_from(sorted(THROUGHPUT_BAD)))
    bad = data.draw(THROUGHPUT_BAD[name], label=name)
    args = {"use_figurewidget": False, "measure": False, name: bad}
    assert_refused(lambda: widgets.ThroughputExplorer(**args), name, bad)


def test_throughput_explorer_unknown_op_and_none_size():
    text = assert_refused(lambda: widgets.ThroughputExplorer(op="conv", measure=False), "op",
                          "conv")
    assert "'relu'" in text and "'conv'" in text
    assert_refused(lambda: widgets.ThroughputExplorer(size_range=(None, 5), measure=False),
                   "size_range[0]", None)


# ------------------------------------------------------------------------ ConvExplorer

_CONV_RANGES = widgets.ConvExplorer.RANGES
CONV_BAD = {
    **{symbol: bad_ints(lo, hi) for symbol, (lo, hi) in _CONV_RANGES.items()},
    "strategies": st.one_of(
        _JUNK.filter(lambda v: v is not None and not (isinstance(v, (list, tuple))
                                                       and all(x in STRATEGIES for x in v))),
        st.just("reference"), st.just(["reference", 3]), st.just(("fft", None)),
        st.lists(st.sampled_from(sorted(STRATEGIES)), max_size=3).map(lambda v: v + ["gemm"]),
        st.just(np.array(["reference"]))),
    "backward": bad_bools(),
    "device": bad_choices(["cpu", "cuda"], optional=True),
    "min_run_time": bad_seconds(10),
    "budget_s": bad_seconds(600),
    "update_budget_s": bad_seconds(3600),
    "measure_memory": bad_bools(),
    "use_figurewidget": bad_bools(optional=True),
    "measure": bad_bools(),
}


@FAST
@given(data=st.data())
def test_conv_explorer_refuses_each_bad_argument(data):
    name = data.draw(st.sampled_from(sorted(CONV_BAD)))
    bad = data.draw(CONV_BAD[name], label=name)
    args = {"use_figurewidget": False, "measure": False, name: bad}
    assert_refused(lambda: widgets.ConvExplorer(**args), name, bad)


def test_conv_explorer_none_channels_names_the_parameter():
    text = assert_refused(lambda: widgets.ConvExplorer(c=None, measure=False), "c", None)
    assert text == "c (input channels c) must be an integer between 1 and 64, got None"


@settings(max_examples=12, deadline=None)
@given(data=st.data())
def test_bad_arguments_with_measurement_on_measure_nothing(data):
    """measure=True and tiny settings: a bad argument is refused before any measurement."""
    planted = PlantedWorker()
    if data.draw(st.booleans(), label="conv"):
        name = data.draw(st.sampled_from(["b", "k", "strategies", "budget_s", "backward"]))
        bad = data.draw(CONV_BAD[name], label=name)
        args = dict(b=1, i=8, f=2, k=3, c=1, device="cpu", strategies=["reference"],
                    min_run_time=0.005, use_figurewidget=False, worker=planted)
        args[name] = bad
        assert_refused(lambda: widgets.ConvExplorer(**args), name, bad)
    else:
        name = data.draw(st.sampled_from(["size_range", "point_budget_s", "dtype"]))
        bad = data.draw(THROUGHPUT_BAD[name], label=name)
        args = dict(op="gemm", size_range=(8, 16), min_run_time=0.005,
                    use_figurewidget=False, worker=planted)
        args[name] = bad
        assert_refused(lambda: widgets.ThroughputExplorer(**args), name, bad)
    assert planted.calls == []


@pytest.mark.slow
def test_strategies_list_is_not_changed():
    names = ["reference", "im2col-gemm"]
    ex = widgets.ConvExplorer(strategies=names, measure=False, use_figurewidget=False)
    assert names == ["reference", "im2col-gemm"]
    ex.strategy_boxes["fft"].value = False
    ex.strategy_boxes["reference"].value = False
    assert names == ["reference", "im2col-gemm"] and ex.strategies == ["im2col-gemm"]


@settings(max_examples=30, deadline=None)
@given(values=st.fixed_dictionaries({symbol: st.integers(lo, hi) for symbol, (lo, hi)
                                     in _CONV_RANGES.items()}),
       bad=st.sampled_from(sorted(_CONV_RANGES)).flatmap(
           lambda s: st.tuples(st.just(s), bad_ints(*_CONV_RANGES[s]))))
def test_conv_explorer_set_checks_every_value_before_changing_any(values, bad):
    ex = _plain_conv()
    before = {symbol: slider.value for symbol, slider in ex.sliders.items()}
    symbol, value = bad
    assert_refused(lambda: ex.set(**{**values, symbol: value}), symbol, value)
    assert {symbol: slider.value for symbol, slider in ex.sliders.items()} == before


_PLAIN = []


def _plain_conv():
    if not _PLAIN:
        _PLAIN.append(widgets.ConvExplorer(measure=False, use_figurewidget=False))
    return _PLAIN[0]


# -------------------------------------------------------------------- OccupancyExplorer

_OCC_RANGES = widgets.OccupancyExplorer.RANGES
OCCUPANCY_EXPLORER_BAD = {
    "gpu": bad_choices(list(occ.GPU_ARCH)),
    **{name: bad_ints(lo, hi) for name, (lo, hi, _) in _OCC_RANGES.items()},
    "vary": bad_choices(["registers", "threads"]),
    "use_figurewidget": bad_bools(optional=True),
}


@FAST
@given(data=st.data())
def test_occupancy_explorer_refuses_each_bad_argument(data):
    name = data.draw(st.sampled_from(sorted(OCCUPANCY_EXPLORER_BAD)))
    bad = data.draw(OCCUPANCY_EXPLORER_BAD[name], label=name)
    args = {"use_figurewidget": False, name: bad}
    assert_refused(lambda: widgets.OccupancyExplorer(**args), name, bad)


@settings(max_examples=30, deadline=None)
@given(data=st.data())
def test_occupancy_explorer_set_refuses_bad_values(data):
    ex = _plain_occupancy()
    name = data.draw(st.sampled_from(["gpu", "threads_per_block", "regs_per_thread",
                                      "smem_per_block", "vary"]))
    bad = data.draw(OCCUPANCY_EXPLORER_BAD[name], label=name)
    before = (ex.gpu.value, ex.threads.value, ex.regs.value, ex.smem.value, ex.vary.value)
    assert_refused(lambda: ex.set(**{name: bad}), name, bad)
    assert (ex.gpu.value, ex.threads.value, ex.regs.value, ex.smem.value, ex.vary.value) == before


_OCC_PLAIN = []


def _plain_occupancy():
    if not _OCC_PLAIN:
        _OCC_PLAIN.append(widgets.OccupancyExplorer(use_figurewidget=False))
    return _OCC_PLAIN[0]


@settings(max_examples=40, deadline=None)
@given(gpu=st.sampled_from(sorted(occ.GPU_ARCH)), threads=st.integers(1, 32).map(lambda w: 32 * w),
       regs=st.integers(1, 255), smem=st.integers(0, 228 * 1024).map(lambda b: b - b % 256))
@pytest.mark.slow
def test_occupancy_explorer_updates_for_any_valid_setting(gpu, threads, regs, smem):
    ex = _plain_occupancy()
    ex.set(gpu=gpu, threads_per_block=threads, regs_per_thread=regs, smem_per_block=smem)
    # a result, or the reason it cannot launch: never both, never neither
    assert (ex.result is None) == bool(ex.message_text)
    if ex.result is not None:  # calculated by the occupancy rules, nothing measured
        assert 0 < ex.result.occupancy <= 1
        assert ex.result == occ.occupancy(gpu, threads, regs, smem)


# ------------------------------------------------------------------ helpers.occupancy

_GPU = st.sampled_from(sorted(occ.GPU_ARCH) + sorted(occ.SM_LIMITS))
OCCUPANCY_ARGS = {
    "gpu": bad_choices(sorted(occ.GPU_ARCH) + sorted(occ.SM_LIMITS)),
    "threads_per_block": bad_ints(1, 1024),
    "regs_per_thread": bad_ints(1, 255),
    "smem_per_block": st.one_of(_JUNK, st.floats(), st.booleans(), st.integers(max_value=-1),
                                st.just(-(2**70)), st.just("0")),
}


@FAST
@given(data=st.data(), gpu=_GPU)
def test_occupancy_refuses_each_bad_argument(data, gpu):
    name = data.draw(st.sampled_from(sorted(OCCUPANCY_ARGS)))
    bad = data.draw(OCCUPANCY_ARGS[name], label=name)
    args = dict(gpu=gpu, threads_per_block=128, regs_per_thread=32, smem_per_block=0)
    args[name] = bad
    assert_refused(lambda: occ.occupancy(**args), name, bad)


@FAST
@given(data=st.data(), gpu=_GPU)
def test_register_limit_refuses_bad_arguments(data, gpu):
    name = data.draw(st.sampled_from(["gpu", "regs_per_thread"]))
    bad = data.draw(OCCUPANCY_ARGS[name], label=name)
    args = {"gpu": gpu, "regs_per_thread": 116, name: bad}
    assert_refused(lambda: occ.warps_limited_by_registers(**args), name, bad)
    if name == "gpu":
        assert_refused(lambda: occ.limits_for(bad), "gpu", bad)


@FAST
@given(bad=st.one_of(_JUNK, st.integers(), st.floats(), st.booleans()))
def test_launch_refusal_refuses_bad_arguments(bad):
    cannot = occ.occupancy("K40c", 544, 116)  # 17 warps counted as 20: cannot launch
    assert cannot.active_blocks == 0
    assert_refused(lambda: occ.launch_refusal(bad, "K40c"), "r", bad)
    if not isinstance(bad, str) or not bad.strip():  # any other text is a display name
        assert_refused(lambda: occ.launch_refusal(cannot, bad), "gpu", bad)


def test_launch_refusal_of_a_launch_that_runs():
    runs = occ.occupancy("K40c", 128, 32)
    assert runs.active_blocks > 0
    with pytest.raises(ValueError, match="r must be a launch with no active block"):
        occ.launch_refusal(runs, "K40c")


@settings(max_examples=60, deadline=None)
@given(gpu=_GPU, threads=st.integers(1, 1024), regs=st.integers(1, 255),
       smem=st.integers(0, 2**70), kind=st.sampled_from([int, np.int64, np.int32]))
def test_occupancy_accepts_numpy_integers_and_huge_shared_memory(gpu, threads, regs, smem, kind):
    smem = min(smem, 2**31 - 1) if kind is np.int32 else min(smem, 2**63 - 1)
    r = occ.occupancy(gpu, kind(threads), kind(regs), kind(smem) if kind is not int else smem)
    assert type(r.threads_per_block) is int and type(r.smem_per_block) is int
    assert 0 <= r.occupancy <= 1
    if smem > r.limits.max_smem_per_block:
        assert r.active_blocks == 0 and "shared memory" in r.limiter


# ------------------------------------------------------------------------ time budgets
#
# The explorers hold no forecast: a point is measured, or stopped when its time is up. Here
# real points far too large for a CPU are stopped by the real measuring process; what is
# checked is what the rows say, never how long this machine took (the budget arithmetic has
# planted tests in test_conv_explorer.py and test_widgets.py).

_NOT_FORECAST = re.compile(r"estimat|about [\d.,]+ s|skipped")


@pytest.mark.slow
def test_a_gemm_too_large_for_its_budget_is_stopped_not_forecast():
    # 5 s a point: a 64 x 64 GEMM (microseconds a call) finishes even on a machine loaded
    # several times over, where busy cores hold the measuring process's threads for seconds;
    # n = 8192 (1.1 TFLOP) is still far over it on a CPU
    ex = widgets.ThroughputExplorer(op="gemm", dtype="float32", size_range=(64, 8192),
                                    point_budget_s=5.0, update_budget_s=8.0,
                                    use_figurewidget=False)
    torch_rows = [r for r in ex.rows if r["backend"] == "torch"]
    assert [r["size"] for r in torch_rows] == tp.log_sizes(64, 8192, 2)
    assert torch_rows[0]["status"] == "ok"  # a 64 x 64 GEMM: microseconds
    assert torch_rows[-1]["status"] != "ok"  # n = 8192 on a CPU: 1.1 TFLOP, far over 5 s
    for r in ex.rows:
        assert not _NOT_FORECAST.search(r["status"]), r["status"]
        assert r["status"] == "ok" or re.match(
            r"did not finish in [\d.]+ s: stopped|not measured: (size [\d,]+ did not finish|"
            r"this update's 8 s)", r["status"]), r["status"]


@pytest.mark.parametrize("layer", [
    dict(b=128, i=256, f=256, k=15, s=1, c=64, padding=7),  # more memory than the machine
    dict(b=32, i=128, f=1, k=5, s=2, c=64, padding=7),      # seconds a call on a CPU
])
@pytest.mark.slow
def test_a_large_conv_layer_is_measured_or_stopped_never_forecast(layer):
    ex = widgets.ConvExplorer(device="cpu", budget_s=0.5, update_budget_s=2.0,
                              use_figurewidget=False, **layer)
    assert len(ex.rows) == len(ex.strategies)
    cfg = config_for((layer["b"], layer["c"], layer["i"], layer["i"]),
                     (layer["f"], layer["c"], layer["k"], layer["k"]), layer["s"],
                     layer["padding"])
    for r in ex.rows:
        reason = STRATEGIES[r["strategy"]].supports(cfg, "cpu")  # winograd: 3 x 3 only
        if reason:
            assert r["status"] == reason, r
        else:
            assert not _NOT_FORECAST.search(r["status"]), r["status"]
            assert r["status"] == "ok" or re.match(
                r"did not finish in [\d.]+ s|not measured: this update's 2 s|refused: needs "
                r"about [\d,]+ MiB", r["status"]), r["status"]


def _calls_taking(monkeypatch, seconds_of) -> list[int]:
    """Calibration calls whose timed length is ``seconds_of(n)`` exactly (``make_call`` and
    the timer replaced: a real sleep on a loaded machine oversleeps by more than these rules
    allow for); returns the sizes called, in order."""
    sizes = []

    def make(experiment, op, name, n, dtype, device):
        sizes.append(n)
        call = lambda: None
        call.seconds = seconds_of(n)
        return call

    monkeypatch.setattr(tpb, "make_call", make)
    monkeypatch.setattr(tpb, "_time_once", lambda call, device: call.seconds)
    return sizes


def test_calibration_does_not_take_a_delay_that_begins_at_one_size(monkeypatch):
    """GEMM that costs 1 ns per n ** 3 (a 64 x 64 call takes 0.26 ms), with 20 ms more a
    call from n = 64 on: the jump at 64 is far past the work's growth (8 times), so the
    calibration goes on to a size whose time grew with the work, not stopping at the delay."""
    sizes = _calls_taking(monkeypatch, lambda n: 1e-9 * n ** 3 + (0.02 if n >= 64 else 0.0))
    cal = tpb.calibrate("gemm", "gemm", "torch", "float32", "cpu", 1024)
    assert cal.size > 64 and max(sizes) == cal.size, (cal, sizes)


def test_calibration_ignores_a_fixed_delay(monkeypatch):
    """A call that takes 5 ms whatever its size (another library's threads holding the cores)
    does not stop the calibration early: it grows to the sweep's smallest size."""
    _calls_taking(monkeypatch, lambda n: 0.005)
    cal = tpb.calibrate("gemm", "gemm", "torch", "float32", "cpu", 256)
    assert cal.size == 256 and cal.seconds == 0.005
