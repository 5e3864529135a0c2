"""helpers.widgets.ConvExplorer driven from Python: sliders, checkboxes and the device.

Every change re-measures, in the explorer's measuring process; the layers here are small (a
few MFLOP) and the timing short. What depends on time (a strategy that does not finish, the
update's budget, a slider moved while measuring) is tested with a planted worker
(tests/planted.py), never against this machine's speed. A widget must never raise: an invalid
layer shows a message instead, and a strategy that cannot run is listed with its reason.
"""

from __future__ import annotations

import helpers  # noqa: F401  (first: decides simulator vs GPU before numba.cuda is imported)
import plotly.graph_objects as go
import pytest
from planted import PlantedWorker

from helpers.device import backend
from helpers import widgets
from helpers.conv import STRATEGIES, config_for
from helpers.figures import style
from helpers.widgets import conv_explorer

# budget_s: generous, so that a loaded machine never stops one of these real measurements
SMALL = dict(b=1, i=16, f=8, k=3, s=1, c=3, padding=0, device="cpu", min_run_time=0.005,
             budget_s=60.0, update_budget_s=600.0)
CPU_STRATEGIES = [n for n, st in STRATEGIES.items() if "cpu" in st.devices]

simulator_only = pytest.mark.skipif(backend.MODE != "simulator",
                                    reason="checks simulator-mode behaviour; a GPU is present")


@pytest.fixture
def explorer():
    return widgets.ConvExplorer(use_figurewidget=False, **SMALL)


@pytest.fixture
def fast_explorer():
    """Only the two fastest strategies, for behaviour that does not depend on which."""
    return widgets.ConvExplorer(use_figurewidget=False, strategies=["im2col-gemm", "reference"],
                                **SMALL)


def _bars(chart: widgets.LiveChart, trace: int = 0) -> dict[str, float]:
    """Bar height by strategy name."""
    bar = chart.figure.data[trace]
    return dict(zip(bar.x, bar.y))


def _shows_charts(explorer) -> bool:
    return explorer.body.children == (explorer.charts, explorer.notes)


def _shows_message(explorer) -> bool:
    return explorer.body.children == (explorer.message,)


@pytest.mark.slow
def test_measures_every_ticked_strategy_on_construction(explorer):
    assert _shows_charts(explorer)
    assert explorer.strategies == CPU_STRATEGIES
    assert [r["strategy"] for r in explorer.rows] == CPU_STRATEGIES
    assert all(r["status"] == "ok" for r in explorer.rows), explorer.message_text
    assert explorer.message_text == ""
    where = explorer.rows[0]["device"]
    assert "CPU" in where

    runtime = explorer.runtime_chart.figure
    assert len(runtime.data) == 1
    bar = runtime.data[0]
    assert list(bar.x) == CPU_STRATEGIES
    assert list(bar.y) == [r["median_ms"] for r in explorer.rows]
    # the error bar runs from the first to the third quartile, never below zero
    for r, up, down in zip(explorer.rows, bar.error_y.array, bar.error_y.arrayminus):
        assert 0 < r["q1_ms"] <= r["median_ms"] <= r["q3_ms"]
        assert r["median_ms"] + up == pytest.approx(r["q3_ms"])
        assert r["median_ms"] - down == pytest.approx(r["q1_ms"])
    assert bar.error_y.symmetric is False
    assert list(bar.marker.color) == [style.color_for(n) for n in CPU_STRATEGIES]
    assert "(ms)" in runtime.layout.yaxis.title.text
    assert where in runtime.layout.title.text
    assert "(1, 16, 8, 3, 1)" in runtime.layout.title.text

    memory = explorer.memory_chart.figure
    assert [t.name for t in memory.data] == ["measured peak", "analytic workspace"]
    assert memory.layout.barmode == "group"
    assert "(MiB)" in memory.layout.yaxis.title.text
    assert where in memory.layout.title.text
    assert list(memory.data[0].x) == list(memory.data[1].x) == CPU_STRATEGIES
    workspace = _bars(explorer.memory_chart, 1)
    for r in explorer.rows:
        expected = (r["workspace_bytes"] or 0) / 2**20
        assert workspace[r["strategy"]] == pytest.approx(expected)
        assert r["peak_bytes"] is not None
    # the library chooses its algorithm at run time: its workspace is labelled unknown
    assert dict(zip(memory.data[1].x, memory.data[1].text))["reference"] == "unknown"


@simulator_only
def test_default_strategies_without_a_gpu_are_those_with_cpu_code():
    ex = widgets.ConvExplorer(use_figurewidget=False, measure=False)
    assert ex.device.value == "cpu"
    assert ex.strategies == CPU_STRATEGIES
    assert "direct-tiled" not in ex.strategies and "im2col-tiled" not in ex.strategies
    assert (ex.b.value, ex.i.value, ex.f.value, ex.k.value, ex.s.value) == (2, 32, 16, 5, 1)
    assert ex.rows == [] and len(ex.runtime_chart.figure.data) == 0


@pytest.mark.slow
def test_moving_a_slider_remeasures(fast_explorer):
    ex = fast_explorer
    before_ms = _bars(ex.runtime_chart)
    before_ws = _bars(ex.memory_chart, 1)["im2col-gemm"]
    ex.i.value = 24
    assert _shows_charts(ex)
    assert "(1, 24, 8, 3, 1)" in ex.runtime_chart.figure.layout.title.text
    after_ms = _bars(ex.runtime_chart)
    assert list(after_ms) == ["im2col-gemm", "reference"]
    assert after_ms != before_ms
    # im2col's analytic workspace grows with the output: (C R S) x (N P Q) floats
    assert _bars(ex.memory_chart, 1)["im2col-gemm"] > before_ws
    assert all(r["flops"] == STRATEGIES[r["strategy"]].flops(
        config_for((1, 3, 24, 24), (8, 3, 3, 3)), True) for r in ex.rows)

    ex.f.value = 4
    assert "(1, 24, 4, 3, 1)" in ex.runtime_chart.figure.layout.title.text
    ex.backward.value = False
    assert {r["pass"] for r in ex.rows} == {"forward"}
    assert "forward:" in ex.runtime_chart.figure.layout.title.text


@pytest.mark.slow
def test_set_changes_several_sliders_and_measures_once():
    planted = PlantedWorker()
    ex = widgets.ConvExplorer(use_figurewidget=False, strategies=["im2col-gemm", "reference"],
                              worker=planted, **SMALL)
    planted.calls.clear()
    ex.set(i=20, k=5)
    assert [key for key, _ in planted.calls] == ["reference", "im2col-gemm"]  # the library first
    assert [r["strategy"] for r in ex.rows] == ["im2col-gemm", "reference"]  # drawn in order
    assert "(1, 20, 8, 5, 1)" in ex.runtime_chart.figure.layout.title.text
    with pytest.raises(ValueError, match="unknown sliders"):
        ex.set(kernel=3)


@pytest.mark.slow
def test_kernel_larger_than_padded_input_shows_the_reason_then_recovers(fast_explorer):
    ex = fast_explorer
    ex.k.value = 15  # input 16, padding 0: still fits
    assert _shows_charts(ex)
    rows = ex.rows
    ex.i.value = 12  # a 15 x 15 kernel on a 12 x 12 input
    assert _shows_message(ex)
    assert "kernel 15x15 is larger than the padded input 12x12" in ex.message_text
    assert "kernel 15x15" in ex.message.value
    assert (ex.i.value, ex.k.value) == (12, 15)  # the controls stay as left
    assert ex.rows is rows  # still the last rows measured

    ex.padding.value = 2  # padded input 16 x 16: valid again
    assert _shows_charts(ex)
    assert list(_bars(ex.runtime_chart)) == ["im2col-gemm", "reference"]
    assert ex.message_text == ""


@pytest.mark.slow
def test_a_strategy_that_cannot_run_is_listed_with_its_reason(fast_explorer):
    ex = fast_explorer
    ex.strategy_boxes["direct-tiled"].value = True  # CUDA only
    assert _shows_charts(ex)
    assert "direct-tiled" in ex.strategies
    assert list(_bars(ex.runtime_chart)) == ["im2col-gemm", "reference"]
    assert list(ex.memory_chart.figure.data[0].x) == ["im2col-gemm", "reference"]
    reason = STRATEGIES["direct-tiled"].supports(config_for((1, 3, 16, 16),
                                                                         (8, 3, 3, 3)), "cpu")
    assert f"direct-tiled: {reason}" in ex.message_text
    assert "no cpu implementation" in ex.notes.value


@pytest.mark.slow
def test_a_layer_too_large_for_memory_is_refused_with_the_estimate(fast_explorer):
    ex = fast_explorer
    ex.set(b=128, i=256, f=256, c=64, k=15)
    assert _shows_charts(ex)
    assert all(r["status"].startswith("refused") for r in ex.rows)
    assert "im2col-gemm: refused: needs about" in ex.message_text and "MiB" in ex.message_text
    # nothing to draw: the charts say so instead of showing empty axes
    for chart in (ex.runtime_chart, ex.memory_chart):
        assert len(chart.figure.data) == 0
        assert "Nothing measured" in chart.figure.layout.annotations[0].text


def test_a_strategy_that_does_not_finish_is_stopped_and_the_others_drawn():
    # planted: direct-naive takes 5 s, over the 2 s budget; nothing is forecast
    planted = PlantedWorker(seconds={"direct-naive": 5.0, "im2col-gemm": 0.5, "fft": 0.5})
    ex = widgets.ConvExplorer(use_figurewidget=False, worker=planted,
                              **{**SMALL, "budget_s": 2.0, "update_budget_s": 10.0})
    assert [r["strategy"] for r in ex.rows] == CPU_STRATEGIES
    status = {r["strategy"]: r["status"] for r in ex.rows}
    assert status["direct-naive"] == "did not finish in 2 s (its budget): stopped"
    others = [n for n in CPU_STRATEGIES if n != "direct-naive"]
    assert all(status[n] == "ok" for n in others)
    assert list(_bars(ex.runtime_chart)) == others
    assert "direct-naive: did not finish in 2 s" in ex.message_text
    # every strategy was given the whole per-strategy budget, none was refused before running
    assert all(timeout == 2.0 for _, timeout in planted.calls)


def test_the_update_budget_is_shared_by_what_was_measured():
    # reference 0.01 + direct-naive 2.5 + im2col-gemm 2.5 = 5.01 s of a 6 s update: fft gets
    # what is left (0.99 s) and, planted at 1.5 s, does not finish in it
    planted = PlantedWorker(seconds={"direct-naive": 2.5, "im2col-gemm": 2.5, "fft": 1.5})
    ex = widgets.ConvExplorer(use_figurewidget=False, worker=planted, measure=False,
                              **{**SMALL, "budget_s": 3.0, "update_budget_s": 6.0})
    planted.calls.clear()
    ex.update()
    timeouts = dict(planted.calls)
    assert timeouts["reference"] == timeouts["direct-naive"] == timeouts["im2col-gemm"] == 3.0
    assert timeouts["fft"] == pytest.approx(6.0 - 5.01)
    status = {r["strategy"]: r["status"] for r in ex.rows}
    assert status["fft"].startswith("did not finish in 0.99 s (what was left of this update's 6 s)")
    assert status["im2col-gemm"] == "ok"


def test_moving_a_slider_while_measuring_stops_the_measurement_in_progress():
    planted = PlantedWorker(blocking={"direct-naive"})
    ex = widgets.ConvExplorer(use_figurewidget=False, worker=planted, measure=False,
                              background=True, strategies=["direct-naive", "reference"],
                              **SMALL)
    ex.k.value = 5  # measures in a thread: the callback returns while direct-naive runs
    assert planted.started.wait(timeout=60)
    assert "measuring direct-naive" in ex.status.value
    planted.blocking.clear()
    ex.k.value = 7  # moves again: the measurement of k = 5 is stopped, k = 7 is measured
    assert ex.wait(timeout=60)
    assert planted.stopped == ["direct-naive"]
    assert "(1, 16, 8, 7, 1)" in ex.runtime_chart.figure.layout.title.text
    assert [r["status"] for r in ex.rows] == ["ok", "ok"]
    assert [key for key, _ in planted.calls] == ["reference", "direct-naive",
                                                 "reference", "direct-naive"]


def test_every_update_measures_once_with_at_least_five_blocks(monkeypatch):
    """No second pass for the first update: the median of five or more timed blocks keeps the
    slow first calls at a new size out of the bar."""
    passes = []
    real = conv_explorer._Plan
    monkeypatch.setattr(conv_explorer, "_Plan",
                        lambda *a, **k: passes.append(k.get("passes")) or real(*a, **k))
    ex = widgets.ConvExplorer(use_figurewidget=False, worker=PlantedWorker(),
                              strategies=["reference"], **SMALL)
    ex.set(i=20)
    assert passes == [1, 1]
    assert ex.rows[0]["repeats"] >= 5


@simulator_only
@pytest.mark.slow
def test_cuda_in_the_simulator_reports_why_nothing_is_timed(fast_explorer):
    ex = fast_explorer
    ex.device.value = "cuda"
    assert _shows_charts(ex)
    assert all(r["status"] != "ok" for r in ex.rows)
    assert "simulator" in ex.rows[0]["device"].lower()
    assert ex.rows[0]["device"] in ex.message_text
    for name in ex.strategies:
        assert f"{name}: CUDA simulator" in ex.message_text
    assert ex.rows[0]["device"] in ex.runtime_chart.figure.layout.annotations[0].text
    ex.device.value = "cpu"
    assert list(_bars(ex.runtime_chart)) == ["im2col-gemm", "reference"]


@pytest.mark.slow
def test_unticking_a_strategy_removes_it(fast_explorer):
    ex = fast_explorer
    ex.strategy_boxes["im2col-gemm"].value = False
    assert list(_bars(ex.runtime_chart)) == ["reference"]
    assert list(ex.memory_chart.figure.data[1].x) == ["reference"]
    assert [r["strategy"] for r in ex.rows] == ["reference"]
    ex.strategy_boxes["reference"].value = False
    assert _shows_message(ex)
    assert "at least one strategy" in ex.message_text


def test_a_strategy_that_fails_is_listed_and_escaped():
    planted = PlantedWorker(errors={"reference": "RuntimeError: <b>device on fire</b>"})
    ex = widgets.ConvExplorer(use_figurewidget=False, worker=planted,
                              strategies=["im2col-gemm", "reference"], **SMALL)
    assert "reference: failed: RuntimeError: <b>device on fire</b>" in ex.message_text
    assert "<b>" not in ex.notes.value and "&lt;b&gt;device on fire" in ex.notes.value
    assert list(_bars(ex.runtime_chart)) == ["im2col-gemm"]


def test_unexpected_error_shows_a_message():
    class Broken(PlantedWorker):
        def run(self, *args, **kwargs):
            raise RuntimeError("device on fire")

    ex = widgets.ConvExplorer(use_figurewidget=False, worker=Broken(),
                              strategies=["reference"], **SMALL)  # must not raise
    assert _shows_message(ex)
    assert "RuntimeError" in ex.message_text and "device on fire" in ex.message_text


@pytest.mark.slow
def test_figurewidget_mode_shows_the_bars():
    ex = widgets.ConvExplorer(use_figurewidget=True, strategies=["reference"], **SMALL)
    fw = ex.runtime_chart.widget.children[0]
    assert isinstance(fw, go.FigureWidget)
    assert list(fw.data[0].x) == ["reference"]
    ex.i.value = 20
    assert "(1, 20, 8, 3, 1)" in fw.layout.title.text


def test_bad_constructor_arguments_raise():
    with pytest.raises(ValueError, match="unknown strategies"):
        widgets.ConvExplorer(strategies=["winograd-4x4"], measure=False, use_figurewidget=False)
    with pytest.raises(ValueError, match="device"):
        widgets.ConvExplorer(device="tpu", measure=False, use_figurewidget=False)
    with pytest.raises(ValueError, match="kernel size k"):
        widgets.ConvExplorer(k=99, measure=False, use_figurewidget=False)
    with pytest.raises(TypeError, match="worker"):
        widgets.ConvExplorer(worker="fast", measure=False, use_figurewidget=False)


def test_quartile_bars_reach_the_quartiles_and_never_below_zero():
    rows = [{"median_ms": 2.0, "q1_ms": 1.5, "q3_ms": 4.0},                 # skewed: 0.5 down, 2 up
            {"median_ms": 1.0, "q1_ms": None, "q3_ms": None, "iqr_ms": 6.0},  # recorded: IQR only
            {"median_ms": 1.0, "iqr_ms": None}]
    up, down = style.quartile_bars(rows, "median_ms", "q1_ms", "q3_ms", "iqr_ms")
    assert up == [2.0, 3.0, 0.0] and down == [0.5, 1.0, 0.0]
    up_ms, _ = style.quartile_bars([{"m": 0.002, "a": 0.001, "b": 0.003}], "m", "a", "b", "i",
                                   scale=1e3)
    assert up_ms == [pytest.approx(1.0)]


@pytest.mark.slow
def test_groups_and_dilation_set_the_layer_and_a_bad_groups_shows_why(fast_explorer):
    ex = fast_explorer
    ex.set(c=4, f=4, groups=4, dilation=2)          # a depthwise, dilated layer
    assert _shows_charts(ex)
    assert all(r["status"] == "ok" for r in ex.rows), ex.message_text
    flops = {r["strategy"]: r["flops"] for r in ex.rows}
    ex.set(groups=1)                                # the same layer, dense: 4 x the FLOPs
    assert {r["strategy"]: r["flops"] for r in ex.rows} == {k: 4 * v for k, v in flops.items()}
    ex.groups.value = 3                             # does not divide c = 4
    assert _shows_message(ex)
    assert "groups = 3 must divide the channels C = 4" in ex.message_text
