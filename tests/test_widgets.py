"""helpers.widgets: LiveChart and the throughput explorer of notebook 01, driven from Python.

The explorer measures on every change; the ranges here are small so each update takes a
fraction of a second. A widget must never raise: bad input shows a message instead.
"""

from __future__ import annotations

import json
import types

import plotly.graph_objects as go
import plotly.io as pio
import pytest
from planted import PlantedWorker

from helpers.device import backend
from helpers import results
from helpers.experiments.throughput import sweeps as tp
from helpers import widgets
from helpers.widgets import live

# point_budget_s: wide enough that a loaded machine never stops one of these real points (what
# depends on time is tested with a planted worker: tests/planted.py)
SMALL = dict(size_range=(1000, 10000), point_budget_s=60.0, min_run_time=0.005,
             reference_prefix="__no_reference_results__", update_budget_s=600.0)


@pytest.fixture(params=[False, True], ids=["output", "figurewidget"])
def use_fw(request):
    return request.param


@pytest.fixture
def explorer(use_fw):
    """An explorer in both display modes (FigureWidget and Output)."""
    return widgets.ThroughputExplorer(use_figurewidget=use_fw, **SMALL)


@pytest.fixture
def plain_explorer():
    """An explorer in Output mode only, for behaviour that does not depend on the display."""
    return widgets.ThroughputExplorer(use_figurewidget=False, **SMALL)


def _shown_figure(chart: widgets.LiveChart) -> go.Figure:
    """What the chart's widget displays: the FigureWidget itself, or the snapshot."""
    if chart.use_figurewidget:
        fw = chart.widget.children[0]
        assert isinstance(fw, go.FigureWidget)
        return fw
    return chart.figure


def _cpu_traces(chart) -> list:
    """The lines measured on this machine's CPU (a GPU machine adds GPU lines)."""
    cpu = tp.device_label("cpu")
    return [t for t in _shown_figure(chart).data if cpu in (t.name or "")]


def _xs(chart) -> set:
    return {x for trace in _shown_figure(chart).data for x in trace.x}


def _shows_charts(explorer) -> bool:
    return explorer.body.children == (explorer.charts,)


def _shows_message(explorer) -> bool:
    return explorer.body.children == (explorer.message,)


# ------------------------------------------------------------------------------- LiveChart


def _line(rng, name, n=5):
    return go.Figure(go.Scatter(x=list(range(n)), y=rng.standard_normal(n).tolist(), name=name))


def test_live_chart_update_replaces_the_data(rng, use_fw):
    chart = widgets.LiveChart(_line(rng, "first"), use_figurewidget=use_fw)
    assert chart.use_figurewidget is use_fw
    assert [t.name for t in _shown_figure(chart).data] == ["first"]

    new = _line(rng, "second")
    new.add_trace(go.Scatter(x=[1, 2], y=[3, 4], name="third"))
    new.update_layout(title="updated")
    chart.update(new)
    for fig in (chart.figure, _shown_figure(chart)):
        assert [t.name for t in fig.data] == ["second", "third"]
        assert list(fig.data[0].y) == list(new.data[0].y)
        assert fig.layout.title.text == "updated"
    # the snapshot is a copy: changing the figure passed in does not change the chart
    new.data[0].name = "changed later"
    assert chart.figure.data[0].name == "second"


def test_live_chart_starts_empty(use_fw):
    chart = widgets.LiveChart(use_figurewidget=use_fw)
    assert len(chart.figure.data) == 0
    chart.update(go.Figure(go.Bar(x=["a"], y=[1])))
    assert len(_shown_figure(chart).data) == 1


def test_live_chart_in_a_kernel_fills_its_output_with_the_figure(rng, monkeypatch):
    """In a kernel the Output path formats the figure itself, and shows nothing else: IPython's
    display formatter would call the figure's ``_ipython_display_`` (the chart in the running
    cell, the Output left empty), and the figure's ``_repr_mimebundle_`` shows plotly's
    set-up script in the running cell at every redraw."""
    import IPython.display
    from IPython.core.formatters import DisplayFormatter

    shown = []
    monkeypatch.setattr(live, "get_ipython",
                        lambda: types.SimpleNamespace(display_formatter=DisplayFormatter()))
    monkeypatch.setattr(go.Figure, "_ipython_display_", lambda fig: shown.append(fig))
    monkeypatch.setattr(IPython.display, "display_html", lambda *a, **_: shown.append(a))
    monkeypatch.setattr(pio.renderers, "default", "plotly_mimetype+notebook_connected")
    chart = widgets.LiveChart()
    assert chart.use_figurewidget is False            # the default, in every front end
    new = _line(rng, "second")
    for _ in range(2):
        chart.update(new)
    (output,) = chart.widget.outputs
    drawn = output["data"]["application/vnd.plotly.v1+json"]
    assert [t["name"] for t in drawn["data"]] == ["second"]
    assert list(drawn["data"][0]["y"]) == list(new.data[0].y)
    assert "text/html" in output["data"]              # the notebook_connected renderer's part
    assert shown == []                                # nothing shown outside the Output


def test_figurewidget_not_used_in_vscode(monkeypatch):
    monkeypatch.setenv("VSCODE_PID", "1234")
    assert widgets.figurewidget_supported() is False
    assert widgets.LiveChart(use_figurewidget=True).use_figurewidget is False


# ------------------------------------------------------------------------------- explorer


@pytest.mark.slow
def test_explorer_measures_on_construction(explorer):
    assert _shows_charts(explorer)
    assert explorer.rows and all(r["status"] == "ok" for r in explorer.rows)
    assert {r["backend"] for r in explorer.rows if r["device_kind"] == "cpu"} == {"numpy", "torch"}
    assert sorted({r["size"] for r in explorer.rows}) == tp.log_sizes(1000, 10000, 2)
    for chart in (explorer.runtime_chart, explorer.throughput_chart):
        cpu = _cpu_traces(chart)
        assert len(cpu) == 2  # one line per backend
        assert sorted(t.name.split()[0] for t in cpu) == ["numpy", "torch"]
        assert all(list(t.x) == [1000, 3162, 10000] for t in cpu)
    assert _xs(explorer.throughput_chart) == {1000, 3162, 10000}
    assert "measured" in explorer.status.value
    assert "GB/s" in _shown_figure(explorer.throughput_chart).layout.yaxis.title.text


def test_explorer_without_measuring():
    ex = widgets.ThroughputExplorer(use_figurewidget=False, measure=False, **SMALL)
    assert ex.rows == []
    assert len(ex.throughput_chart.figure.data) == 0


@pytest.mark.slow
def test_changing_the_largest_size_redraws(explorer):
    explorer.size_max.value = 100_000
    assert _shows_charts(explorer)
    assert _xs(explorer.throughput_chart) == {1000, 3162, 10000, 31623, 100000}
    assert max(_xs(explorer.runtime_chart)) == 100_000


@pytest.mark.slow
def test_changing_the_dtype_redraws(plain_explorer):
    explorer = plain_explorer
    explorer.dtype.value = "bfloat16"
    assert _shows_charts(explorer)
    # numpy has no bfloat16: only torch is drawn, and the status says what was not measured
    cpu = _cpu_traces(explorer.throughput_chart)
    assert len(cpu) == 1
    assert cpu[0].name.startswith("torch bfloat16")
    assert "not measured" in explorer.status.value


@pytest.mark.slow
def test_bad_input_shows_a_message_then_recovers(explorer):
    before = _xs(explorer.throughput_chart)
    runtime_before = len(_shown_figure(explorer.runtime_chart).data)
    # (control, value, part of the reason); none of these may raise
    steps = [
        ("size_min", 0, "at least 1"),
        ("size_min", -5, "at least 1"),
        ("size_min", 20_000, "must not exceed"),
        ("size_min", 1_000, None),            # valid again: charts come back
        ("size_max", 0, "at least 1"),
        ("size_max", -1, "at least 1"),
        ("size_max", 10**13, "GiB"),
        ("size_max", 10_000, None),
    ]
    for control, value, reason in steps:
        getattr(explorer, control).value = value
        assert getattr(explorer, control).value == value  # the controls stay as left
        if reason is None:
            assert _shows_charts(explorer), explorer.message.value
            assert _xs(explorer.throughput_chart) == before
            assert len(_shown_figure(explorer.runtime_chart).data) == runtime_before
            assert len(_cpu_traces(explorer.throughput_chart)) == 2
            assert "measured" in explorer.status.value
            assert explorer.message_text == ""
        else:
            assert _shows_message(explorer), (control, value)
            assert reason in explorer.message.value, (control, value, explorer.message.value)
            assert reason in explorer.message_text
            assert explorer.status.value == ""


@pytest.mark.slow
def test_message_text_is_escaped(plain_explorer):
    explorer = plain_explorer
    explorer.show_message("<script>alert(1)</script>")
    assert "<script>" not in explorer.message.value
    assert "&lt;script&gt;" in explorer.message.value
    assert _shows_message(explorer)


@pytest.mark.slow
def test_switching_to_gemm_resets_sizes_and_measures(plain_explorer):
    explorer = plain_explorer
    explorer.op.value = "gemm"
    lo, hi = widgets.ThroughputExplorer.DEFAULT_RANGES["gemm"]
    assert (explorer.size_min.value, explorer.size_max.value) == (lo, hi)
    assert _shows_charts(explorer)
    assert {r["experiment"] for r in explorer.rows} == {"gemm"}
    assert sorted({r["size"] for r in explorer.rows}) == tp.log_sizes(lo, hi, 2)
    fig = _shown_figure(explorer.throughput_chart)
    assert "GEMM" in fig.layout.title.text and "GFLOP/s" in fig.layout.yaxis.title.text
    assert _xs(explorer.throughput_chart) == set(tp.log_sizes(lo, hi, 2))


def test_switching_op_measures_once():
    planted = PlantedWorker()
    ex = widgets.ThroughputExplorer(use_figurewidget=False, measure=False, worker=planted,
                                    **SMALL)
    ex.op.value = "saxpy"
    assert (ex.size_min.value, ex.size_max.value) == (1000, 1_000_000)
    sizes = tp.log_sizes(1000, 1_000_000, 2)
    backends = tp.backends_for("cpu", "elementwise")
    cpu = [args for _, args in planted.requests if args[3] == "cpu"]
    assert len(cpu) == len(backends) * len(sizes)  # each point once
    assert {args[1] for args in cpu} == {"saxpy"}
    assert {r["op"] for r in ex.rows} == {"saxpy"}


def test_each_backend_is_measured_in_increasing_size_torch_first():
    planted = PlantedWorker()
    widgets.ThroughputExplorer(use_figurewidget=False, worker=planted, **SMALL)
    cpu = [key for (key, _), (_, args) in zip(planted.calls, planted.requests)
           if args[3] == "cpu"]
    sizes = tp.log_sizes(1000, 10000, 2)
    assert cpu == [("torch", n) for n in sizes] + [("numpy", n) for n in sizes]


def test_a_point_that_does_not_finish_stops_its_backend_not_the_others():
    # planted: numpy at 3,162 takes 30 s, over the 2 s point budget; nothing is forecast
    planted = PlantedWorker(seconds={("numpy", 3162): 30.0})
    ex = widgets.ThroughputExplorer(use_figurewidget=False, worker=planted,
                                    **{**SMALL, "point_budget_s": 2.0})
    status = {(r["backend"], r["size"]): r["status"] for r in ex.rows if r["device_kind"] == "cpu"}
    assert status[("numpy", 1000)] == "ok"
    assert status[("numpy", 3162)] == "did not finish in 2 s: stopped"
    assert status[("numpy", 10000)] == "not measured: size 3,162 did not finish"
    assert all(status[("torch", n)] == "ok" for n in (1000, 3162, 10000))
    assert ("numpy", 10000) not in [key for key, _ in planted.calls]  # never run
    assert "numpy on cpu, size 3,162: did not finish in 2 s" in ex.message_text
    numpy_line = [t for t in _cpu_traces(ex.runtime_chart) if t.name.startswith("numpy")]
    assert list(numpy_line[0].x) == [1000]


def test_the_update_budget_is_shared_by_the_points():
    # 4 + 4 + 0.5 + 0.5 = the whole 9 s: numpy's larger sizes are not run
    planted = PlantedWorker(seconds={("torch", 1000): 4.0, ("torch", 3162): 4.0,
                                     ("torch", 10000): 0.5, ("numpy", 1000): 0.5})
    ex = widgets.ThroughputExplorer(use_figurewidget=False, worker=planted,
                                    **{**SMALL, "point_budget_s": 5.0, "update_budget_s": 9.0})
    assert planted.calls[:4] == [(("torch", 1000), 5.0), (("torch", 3162), 5.0),
                                 (("torch", 10000), 1.0), (("numpy", 1000), 0.5)]
    status = {(r["backend"], r["size"]): r["status"] for r in ex.rows if r["device_kind"] == "cpu"}
    assert status[("torch", 10000)] == status[("numpy", 1000)] == "ok"
    assert status[("numpy", 3162)].startswith("not measured: this update's 9 s")
    assert len(planted.calls) == 4


@pytest.mark.slow
def test_changing_a_control_while_measuring_stops_the_measurement_in_progress():
    planted = PlantedWorker(blocking={("torch", 3162)})
    ex = widgets.ThroughputExplorer(use_figurewidget=False, worker=planted, measure=False,
                                    background=True, **SMALL)
    ex.size_max.value = 100_000  # sizes 1,000, 3,162, 10,000, 31,623, 100,000
    assert planted.started.wait(timeout=60)
    planted.blocking.clear()
    ex.size_max.value = 10_000
    assert ex.wait(timeout=60)
    assert planted.stopped == [("torch", 3162)]
    assert sorted({r["size"] for r in ex.rows}) == tp.log_sizes(1000, 10000, 2)
    assert all(r["status"] == "ok" for r in ex.rows)


@pytest.mark.slow
def test_unexpected_error_shows_a_message(plain_explorer):
    class Broken(PlantedWorker):
        def run(self, *args, **kwargs):
            raise RuntimeError("device on fire")

    explorer = plain_explorer
    worker = explorer.worker
    explorer.worker = Broken()
    explorer.size_max.value = 20_000  # must not raise
    assert _shows_message(explorer)
    assert "RuntimeError" in explorer.message.value
    assert "device on fire" in explorer.message.value

    explorer.worker = worker
    explorer.size_max.value = 10_000
    assert _shows_charts(explorer)


def test_nothing_measurable_shows_the_reasons():
    sizes = tp.log_sizes(1000, 20000, 2)
    planted = PlantedWorker(errors={(b, n): "MemoryError: test" for b in ("numpy", "torch")
                                    for n in sizes})
    explorer = widgets.ThroughputExplorer(use_figurewidget=False, worker=planted,
                                          **{**SMALL, "size_range": (1000, 20000)})
    assert _shows_message(explorer)
    assert "Nothing could be measured" in explorer.message.value
    assert "failed: MemoryError: test" in explorer.message.value


# ------------------------------------------------------------- reference curves (results/)


@pytest.mark.skipif(backend.MODE == "gpu", reason="references are drawn only without a GPU")
def test_reference_gpu_rows_are_drawn_with_the_gpus_bandwidth(tmp_path, monkeypatch, rng):
    rows = []
    for n in (1000, 3162, 10000, 10**6):
        t = float(rng.uniform(1e-6, 1e-5))
        rows.append(dict(tp._row("elementwise", "relu", "torch", "cpu", "float32", n),
                         device_kind="cuda", device="GPU: NVIDIA H100 80GB HBM3",
                         median_s=t, iqr_s=0.0, min_s=t, max_s=t, repeats=10,
                         gb_s=8 * n / t / 1e9, gflop_s=n / t / 1e9))
    results.save("01_throughput_test-gpu", rows, directory=tmp_path)
    meta_path = tmp_path / "01_throughput_test-gpu.json"
    meta = json.loads(meta_path.read_text())
    meta["environment"].update(gpu_name="NVIDIA H100 80GB HBM3",
                               gpu_peak_bandwidth_bytes_s=3.35e12)
    meta_path.write_text(json.dumps(meta))
    monkeypatch.setattr(results, "RESULTS_DIR", tmp_path)

    ex = widgets.ThroughputExplorer(use_figurewidget=False, size_range=(1000, 10000),
                                    point_budget_s=60.0, min_run_time=0.005,
                                    worker=PlantedWorker())
    fig = ex.throughput_chart.figure
    assert {r["size"] for r in ex.rows} == {1000, 3162, 10000}   # drawn beside what it measured
    reference = [t for t in fig.data if "(results/)" in t.name]
    assert len(reference) == 1
    assert "NVIDIA H100 80GB HBM3" in reference[0].name
    assert reference[0].line.dash == "dot"
    assert list(reference[0].x) == [1000, 3162, 10000]  # only sizes inside the range
    # the reference GPU's datasheet bandwidth is drawn (as a labelled line or annotation)
    labels = [t.name or "" for t in fig.data] + [a.text or "" for a in fig.layout.annotations]
    assert any("3,350 GB/s" in text and "NVIDIA H100 80GB HBM3" in text for text in labels)
