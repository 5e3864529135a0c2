"""The explorers and helpers.occupancy refuse bad arguments by name, fast, and leave them as
they were; and an explorer's update stays within its time budget whatever the settings.

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
import time
import tracemalloc

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from helpers import occupancy as occ
from helpers import widgets
from helpers.conv import STRATEGIES, config_for
from helpers.experiments import sweep
from helpers.experiments import throughput as tp
from helpers.experiments import throughput_budget as tpb
from helpers.widgets import conv_budget

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


def assert_refused(call, name: str, bad) -> str:
    """``call()`` raises TypeError or ValueError naming ``name``, in under a second, with a
    peak of traced allocations under 4 MiB, and ``bad`` is left as it was."""
    before = copy.deepcopy(bad)
    tracemalloc.start()
    start = time.perf_counter()
    try:
        with pytest.raises((TypeError, ValueError)) as err:
            call()
        seconds = time.perf_counter() - start
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    text = str(err.value)
    assert re.search(rf"(?<!\w){re.escape(name)}(?!\w)", text), (name, bad, text)
    assert seconds < 1.0, (name, bad, seconds)
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
    calls = []

    def counting(real):
        def wrapped(*args, **kwargs):
            calls.append(real.__name__)
            return real(*args, **kwargs)
        return wrapped

    with pytest.MonkeyPatch.context() as mp:
        for module, attr in ((tp, "gemm_sweep"), (tp, "elementwise_sweep"), (sweep, "measure")):
            mp.setattr(module, attr, counting(getattr(module, attr)))
        if data.draw(st.booleans(), label="conv"):
            name = data.draw(st.sampled_from(["b", "k", "strategies", "budget_s", "backward"]))
            bad = data.draw(CONV_BAD[name], label=name)
            args = dict(b=1, i=8, f=2, k=3, c=1, device="cpu", strategies=["reference"],
                        min_run_time=0.005, use_figurewidget=False)
            args[name] = bad
            assert_refused(lambda: widgets.ConvExplorer(**args), name, bad)
        else:
            name = data.draw(st.sampled_from(["size_range", "point_budget_s", "dtype"]))
            bad = data.draw(THROUGHPUT_BAD[name], label=name)
            args = dict(op="gemm", size_range=(8, 16), min_run_time=0.005,
                        use_figurewidget=False)
            args[name] = bad
            assert_refused(lambda: widgets.ThroughputExplorer(**args), name, bad)
    assert calls == []


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
def test_occupancy_explorer_updates_fast_for_any_valid_setting(gpu, threads, regs, smem):
    ex = _plain_occupancy()
    start = time.perf_counter()
    ex.set(gpu=gpu, threads_per_block=threads, regs_per_thread=regs, smem_per_block=smem)
    assert time.perf_counter() - start < 1.0
    # a result, or the reason it cannot launch: never both, never neither
    assert (ex.result is None) == bool(ex.message_text)
    if ex.result is not None:
        assert 0 < ex.result.occupancy <= 1


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


def _timed_update(ex) -> float:
    start = time.monotonic()
    ex.update()
    return time.monotonic() - start


@pytest.mark.parametrize("dtype, size_range", [("float16", (1024, 4096)),
                                               ("bfloat16", (2048, 8192)),
                                               ("float32", (4096, 8192))])
def test_large_gemm_update_stays_within_budget_and_reports_estimates(dtype, size_range):
    budget = 3.0
    ex = widgets.ThroughputExplorer(op="gemm", dtype=dtype, size_range=size_range,
                                    point_budget_s=0.5, update_budget_s=budget, measure=False,
                                    use_figurewidget=False)
    seconds = _timed_update(ex)
    assert seconds < budget + 1.0, ex.message_text
    torch_rows = [r for r in ex.rows if r["backend"] == "torch"]
    assert [r["size"] for r in torch_rows] == tp.log_sizes(*size_range, 2)
    estimate = (r"skipped: estimated [\d.e+-]+ s per call \(from (a \d+ x \d+ {dtype} "
                r"calibration GEMM|size [\d,]+)\), about [\d.e+-]+ s for the point, over the "
                r"0.5 s budget per point").format(dtype=dtype)
    assert torch_rows[-1]["status"] != "ok"  # n = 4096 or 8192 on a CPU: far over 0.5 s
    for r in torch_rows:  # refused up front with its estimate, the first size included
        if r["status"] != "ok":
            assert re.fullmatch(estimate, r["status"]), r["status"]
            assert f"torch on cpu, size {r['size']:,}: {r['status']}" in ex.message_text
    if torch_rows[0]["status"] != "ok":  # nothing measured before it: the calibration's
        assert f"{dtype} calibration GEMM" in torch_rows[0]["status"]


def test_elementwise_update_with_huge_sizes_stays_within_budget():
    budget = 2.0
    ex = widgets.ThroughputExplorer(op="relu", size_range=(10**5, 10**8), point_budget_s=1,
                                    update_budget_s=budget, min_run_time=0.005, measure=False,
                                    use_figurewidget=False)
    seconds = _timed_update(ex)
    assert seconds < budget + 1.0, ex.message_text
    not_measured = [r for r in ex.rows if r["status"] != "ok"]
    assert not_measured  # 1e8 elements: seconds just to draw the random operands
    for r in not_measured:
        assert any(w in r["status"] for w in ("estimated", "first call", "time limit")), r


@pytest.mark.parametrize("layer", [
    dict(b=128, i=256, f=256, k=15, s=1, c=64, padding=7),  # far over every estimate
    dict(b=128, i=192, f=8, k=1, s=4, c=8, padding=3),      # memory-bound: 1,000x the FLOP rate
    dict(b=16, i=192, f=1, k=11, s=1, c=1, padding=0),      # one filter
    dict(b=32, i=128, f=1, k=5, s=2, c=64, padding=7),
])
def test_conv_update_stays_within_budget(layer):
    budget = 2.0
    ex = widgets.ConvExplorer(device="cpu", update_budget_s=budget, measure=False,
                              use_figurewidget=False, **layer)
    seconds = _timed_update(ex)
    assert seconds < budget + 1.0, ex.message_text
    assert len(ex.rows) == len(ex.strategies)
    cfg = config_for((layer["b"], layer["c"], layer["i"], layer["i"]),
                     (layer["f"], layer["c"], layer["k"], layer["k"]), layer["s"],
                     layer["padding"])
    for r in ex.rows:
        reason = STRATEGIES[r["strategy"]].supports(cfg, "cpu")  # winograd: 3 x 3 only
        if reason:
            assert r["status"] == reason, r
        else:
            assert r["status"] == "ok" or re.search(r"refused|skipped|budget", r["status"]), r


def test_conv_first_update_refuses_a_layer_over_budget_with_the_estimate():
    ex = widgets.ConvExplorer(b=128, i=128, f=128, k=11, s=1, c=16, device="cpu",
                              use_figurewidget=False)
    assert ex.seconds < ex.update_budget_s + 1.0
    rows = [r for r in ex.rows if r["strategy"] != "winograd"]  # k = 11: winograd says why
    assert "3 x 3 kernel" in next(r["status"] for r in ex.rows if r["strategy"] == "winograd")
    assert rows and all(r["status"].startswith("refused") for r in rows), ex.rows
    assert all(re.search(r"about [\d.,]+ s", r["status"]) for r in rows)


def test_probe_measures_a_small_layer_and_scales_a_large_one():
    small = config_for((1, 3, 16, 16), (8, 3, 3, 3))
    found = conv_budget.probe(small, "reference", "cpu")
    # Measured whole, as a rule; on a loaded machine a reduced step can wait for a core and
    # stop the probe early (how it then estimates is tested with planted times below).
    assert found.text.startswith(("one call measured at", "the fastest call at")), found.text
    assert 0 < found.seconds < 10, found.text
    # Memory-bound, 1 x 1 kernel. On a 2-core CPU, batch 16 of it takes about 10 ms and batch
    # 64 about 0.1 s (a layer of batch 64 was probed up to its full size: a step can stay under
    # PROBE_TARGET_S), so the probe stops by batch 64, a quarter of this layer's work.
    large = config_for((256, 8, 128, 128), (8, 8, 1, 1), 1, 0)
    ran = []

    def recorded(step, *args):
        ran.append(step.n)
        return call_seconds(step, *args)

    call_seconds = conv_budget._call_seconds
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(conv_budget, "_call_seconds", recorded)
        found = conv_budget.probe(large, "im2col-gemm", "cpu")
    assert ran and max(ran) <= large.n // 4, ran  # the probe ran reduced copies only
    assert "scaled to this layer" in found.text and found.seconds > 0
    # measuring takes the warm-up, the timed calls and the memory call, plus drawing inputs
    need = conv_budget.measure_seconds(large, found.seconds, 0.02, True, True)
    assert need > conv_budget.calls(True) * found.seconds


def _fake_calls(monkeypatch, seconds_at):
    """Replace one probe call by ``seconds_at(fraction of the full layer's work, call index)``."""
    full = config_for((8, 3, 64, 64), (16, 3, 5, 5))
    work = conv_budget._work(full, "reference", True)
    count = []

    def fake(step, strategy, device, backward, gen):
        count.append(step)
        w = conv_budget._work(step, strategy, backward)
        return seconds_at(min(w[0] / work[0], w[1] / work[1]), len(count))

    monkeypatch.setattr(conv_budget, "_call_seconds", fake)
    return full, count


def test_probe_ignores_a_delayed_call(monkeypatch):
    """Every third call waits 0.2 s for a core: the fastest call of each step counts, so the
    estimate is that of the true 1 s layer, not the delay scaled up by the work."""
    full, _ = _fake_calls(monkeypatch, lambda u, i: u * 1.0 + (0.2 if i % 3 == 1 else 0.0))
    found = conv_budget.probe(full, "reference", "cpu")
    assert found.seconds <= 1.0 * conv_budget.SAFETY * 1.01, found.text
    assert found.seconds >= 1.0, found.text  # never below the true time


def test_probe_does_not_scale_a_fixed_delay(monkeypatch):
    """A fixed 50 ms a call (threads waiting for a core) plus 2 s of work at the full layer:
    the fixed part is fitted from the last two steps and not multiplied by the work."""
    full, count = _fake_calls(monkeypatch, lambda u, i: 0.05 + 2.0 * u)
    found = conv_budget.probe(full, "reference", "cpu")
    assert "fixed delay" in found.text and "scaled to this layer" in found.text, found.text
    assert 2.05 <= found.seconds <= 0.05 + 2.0 * conv_budget.SAFETY * 1.01, found.text
    step = count[-1]  # scaling the whole time of the last step would have said far more
    scale = 1 / min(a / b for a, b in zip(conv_budget._work(step, "reference", True),
                                          conv_budget._work(full, "reference", True)))
    assert (0.05 + 2.0 / scale) * scale * conv_budget.SAFETY > 1.5 * found.seconds
    # a delay that does not grow with the work: the probe goes on to the full layer
    full, _ = _fake_calls(monkeypatch, lambda u, i: 0.05 + 0.01 * u)
    found = conv_budget.probe(full, "reference", "cpu")
    assert found.text == "one call measured at 0.06 s"


def test_probe_does_not_take_a_delay_that_begins_at_one_step_for_the_work(monkeypatch):
    """From a thousandth of the layer's work on, every call waits 50 ms (a library's threads
    start once the work is large enough, and wait for cores another process holds). The step
    where the delay begins jumps far past the growth of its work: it is not taken as the
    layer's cost scaled up (about 0.05 s x 1,000 times), the probe goes on and fits the delay."""
    full, count = _fake_calls(monkeypatch, lambda u, i: 1.0 * u + (0.05 if u >= 1e-3 else 0.0))
    found = conv_budget.probe(full, "reference", "cpu")
    assert 1.0 <= found.seconds <= 0.05 + 1.0 * conv_budget.SAFETY * 1.01, found.text
    work = [min(a / b for a, b in zip(conv_budget._work(step, "reference", True),
                                      conv_budget._work(full, "reference", True)))
            for step in dict.fromkeys(count)]
    assert any(u >= 1e-3 for u in work[:-1]), work  # the probe went past the jump
    # without the jump (no delay), the same layer's probe stops earlier and agrees
    full, _ = _fake_calls(monkeypatch, lambda u, i: 1.0 * u)
    assert 1.0 <= conv_budget.probe(full, "reference", "cpu").seconds <= 2.0 * 1.01


def test_probe_measures_a_layer_whole_when_no_step_reaches_the_target(monkeypatch):
    """A layer whose full call takes 5 ms: no reduced step reaches PROBE_TARGET_S, so the
    probe ends at the full layer and reports that one call, not a scaled estimate."""
    full, count = _fake_calls(monkeypatch, lambda u, i: 0.005 * u)
    found = conv_budget.probe(full, "reference", "cpu")
    assert found.text == "one call measured at 0.005 s" and found.seconds == 0.005
    assert count[-1] == full


def test_probe_repeats_only_short_calls(monkeypatch):
    """A call of at least REPEAT_BELOW_S is not repeated (the delay hardly matters there)."""
    full, count = _fake_calls(monkeypatch, lambda u, i: 2 * conv_budget.REPEAT_BELOW_S)
    found = conv_budget.probe(full, "reference", "cpu")
    assert len(count) == len(set(count)) > 1  # no step repeated; it never grew: up to full
    assert found.text.startswith("one call measured at")


def test_calibration_does_not_take_a_delay_that_begins_at_one_size(monkeypatch):
    """GEMM that costs 1 ns per n ** 3 (a 64 x 64 call takes 0.26 ms), with 20 ms more a
    call from n = 64 on: the jump at 64 is far past the work's growth (8 times), so the
    calibration goes on to a size whose time grew with the work, not stopping at the delay."""
    sizes = []

    def fake(experiment, op, name, n, dtype, device):
        sizes.append(n)
        return lambda: time.sleep(1e-9 * n ** 3 + (0.02 if n >= 64 else 0.0))

    monkeypatch.setattr(tpb, "make_call", fake)
    cal = tpb.calibrate("gemm", "gemm", "torch", "float32", "cpu", 1024)
    assert cal.size > 64 and max(sizes) == cal.size, (cal, sizes)


def test_calibration_ignores_a_fixed_delay(monkeypatch):
    """A call that takes 5 ms whatever its size (another library's threads holding the cores)
    does not stop the calibration early: it grows to the sweep's smallest size."""
    def slow(experiment, op, name, n, dtype, device):
        return lambda: time.sleep(0.005)

    monkeypatch.setattr(tpb, "make_call", slow)
    cal = tpb.calibrate("gemm", "gemm", "torch", "float32", "cpu", 256)
    assert cal.size == 256 and cal.seconds >= 0.005
