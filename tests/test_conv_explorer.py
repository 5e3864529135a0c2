"""helpers.widgets.ConvExplorer driven from Python: sliders, checkboxes and the device.

Every change re-measures; the layers here are small (a few MFLOP) and the timing short, so an
update takes a fraction of a second on a 2-core CPU. A widget must never raise: an invalid
layer shows a message instead, and a strategy that cannot run is listed with its reason.
"""

from __future__ import annotations

import helpers  # noqa: F401  (first: decides simulator vs GPU before numba.cuda is imported)
import plotly.graph_objects as go
import pytest

from helpers.device import backend
from helpers.experiments import sweep
from helpers import widgets
from helpers.conv import STRATEGIES, config_for
from helpers.figures import style

# budget_s: every strategy's pessimistic bound at this layer fits, so none depends on a timed
# probe (on a loaded machine a probe call can wait for a core; the budgets have their own tests)
SMALL = dict(b=1, i=16, f=8, k=3, s=1, c=3, padding=0, device="cpu", min_run_time=0.005,
             budget_s=30.0)
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
    assert list(bar.error_y.array) == pytest.approx([r["iqr_ms"] / 2 for r in explorer.rows])
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


def test_set_changes_several_sliders_and_measures_once(fast_explorer, monkeypatch):
    ex = fast_explorer
    calls = []
    real = sweep.measure

    def counting(cfg, name, *args, **kwargs):
        calls.append((cfg.h, cfg.r, name))
        return real(cfg, name, *args, **kwargs)

    monkeypatch.setattr(sweep, "measure", counting)
    ex.set(i=20, k=5)
    assert calls == [(20, 5, "reference"), (20, 5, "im2col-gemm")]  # the library first
    assert [r["strategy"] for r in ex.rows] == ["im2col-gemm", "reference"]  # drawn in order
    with pytest.raises(ValueError, match="unknown sliders"):
        ex.set(kernel=3)


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


def test_a_layer_over_the_time_budget_is_refused_with_the_estimate(fast_explorer):
    ex = fast_explorer
    ex.set(b=128, i=256, f=256, c=64, k=15)
    assert _shows_charts(ex)
    assert all(r["status"].startswith("refused") for r in ex.rows)
    assert "im2col-gemm: refused" in ex.message_text
    assert "budget" in ex.message_text and "GFLOP" in ex.message_text
    # nothing to draw: the charts say so instead of showing empty axes
    for chart in (ex.runtime_chart, ex.memory_chart):
        assert len(chart.figure.data) == 0
        assert "Nothing measured" in chart.figure.layout.annotations[0].text


@simulator_only
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


def test_unticking_a_strategy_removes_it(fast_explorer):
    ex = fast_explorer
    ex.strategy_boxes["im2col-gemm"].value = False
    assert list(_bars(ex.runtime_chart)) == ["reference"]
    assert list(ex.memory_chart.figure.data[1].x) == ["reference"]
    assert [r["strategy"] for r in ex.rows] == ["reference"]
    ex.strategy_boxes["reference"].value = False
    assert _shows_message(ex)
    assert "at least one strategy" in ex.message_text


def test_unexpected_error_shows_a_message(fast_explorer, monkeypatch):
    ex = fast_explorer

    def broken(*args, **kwargs):
        raise RuntimeError("device on fire")

    monkeypatch.setattr(sweep, "measure", broken)
    ex.f.value = 6  # must not raise
    assert _shows_message(ex)
    assert "RuntimeError" in ex.message_text and "device on fire" in ex.message_text
    monkeypatch.undo()
    ex.f.value = 8
    assert _shows_charts(ex)


def test_message_text_is_escaped(fast_explorer, monkeypatch):
    ex = fast_explorer
    real = sweep.measure

    def refuse(cfg, name, device, **kwargs):
        return {**real(cfg, name, device, **kwargs), "status": "<b>no</b>"}

    monkeypatch.setattr(sweep, "measure", refuse)
    ex.c.value = 2
    assert "reference: <b>no</b>" in ex.message_text
    assert "<b>" not in ex.notes.value and "&lt;b&gt;no&lt;/b&gt;" in ex.notes.value


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
