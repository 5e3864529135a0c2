"""The explorers stay live: a burst of slider moves is one update, a measurement no longer
wanted stops in its process (which goes on), one that ignores the request is killed after the
grace with a warm spare in its place, every point says how many calls it timed, and every
point's budget is kept, the first one included.

The measuring process is real where its life is what is tested (tests/worker_calls.py plants
calls that stop, ignore a request or hang); bounds are far from this machine's speed.
"""

from __future__ import annotations

import helpers  # noqa: F401  (first: decides simulator vs GPU before numba.cuda is imported)
import os
import pathlib
import threading
import time

import pytest
import worker_calls
from planted import PlantedWorker

from helpers import widgets
from helpers.device.worker import Worker
from helpers.figures import nb06_head_to_head, style

TESTS = str(pathlib.Path(__file__).resolve().parent)
SMALL = dict(b=1, i=16, f=8, k=3, s=1, c=3, padding=0, device="cpu", min_run_time=0.005,
             budget_s=60.0, update_budget_s=600.0)
#: A point's budget where a planted point hangs: room for the real ones on a loaded machine.
BUDGET_S = 4.0


class RedirectWorker(Worker):
    """A real measuring process in which the points named in ``plant`` run a planted call of
    tests/worker_calls.py (``(function, seconds)``) instead of the measurement."""

    def __init__(self, plant: dict, **kwargs):
        super().__init__(**kwargs)
        self.plant = plant
        #: set once a planted call is being sent to the child: a stop from then on reaches it
        #: (before, the worker answers "stopped" without calling anything)
        self.planted_sent = threading.Event()

    def _call(self, module, *rest):
        if module == "worker_calls":
            self.planted_sent.set()
        return super()._call(module, *rest)

    def run(self, module, name, *args, timeout_s, **kwargs):
        key = args[1] if name == "conv_point" else (args[2], args[5])
        if key in self.plant:
            function, seconds = self.plant[key]
            return super().run("worker_calls", function, seconds, timeout_s=timeout_s, **kwargs)
        return super().run(module, name, *args, timeout_s=timeout_s, **kwargs)


@pytest.fixture
def tests_importable(monkeypatch):
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([TESTS, os.environ.get("PYTHONPATH", "")]))


@pytest.fixture(scope="module")
def live_worker():
    """One measuring process, warmed up as the explorers' is, for the tests that plant a
    hanging point (each sets ``plant``)."""
    with pytest.MonkeyPatch.context() as mp:  # for its replacements too
        mp.setenv("PYTHONPATH", os.pathsep.join([TESTS, os.environ.get("PYTHONPATH", "")]))
        worker = RedirectWorker({}, grace_s=0.5, warm_up=("helpers.experiments.live", "warm_up"))
        assert worker.wait_ready()
        yield worker
        worker.close()


def _row(strategy: str, median: float, repeats: int, q1=None, q3=None, calls=1) -> dict:
    return {"strategy": strategy, "median_ms": median, "q1_ms": q1, "q3_ms": q3,
            "iqr_ms": 0.0, "flops": 2e6, "gflop_per_s": 2e6 / median / 1e6,
            "repeats": repeats, "calls_per_repeat": calls, "threads": 1}


def test_a_two_call_point_has_no_quartile_bar_and_says_why():
    rows = [_row("fft", 50.0, 2), _row("reference", 1.0, 9, 0.9, 1.2, calls=20),
            _row("im2col-gemm", 3.0, 6, 1.0, 4.5)]
    bar = nb06_head_to_head.layer_runtime_figure(rows, "forward", "layer", "CPU").data[0]
    assert bar.error_y.array[0] is None and bar.error_y.arrayminus[0] is None
    assert bar.error_y.array[1] == pytest.approx(0.2)
    notes = [c[3] for c in bar.customdata]
    assert notes[0].startswith("median of 2 timed calls; too few for quartiles")
    assert notes[1].startswith("median of 9 timed blocks of 20 calls")
    assert "noisy: the machine is busy" in notes[2]  # 4.5 > 2 x 1.0
    assert "noisy" not in notes[1]
    assert list(bar.text) == ["2 timed", "", "noisy"]
    assert "%{customdata[3]}" in bar.hovertemplate


def test_every_measured_bar_says_how_many_calls_it_timed():
    ex = widgets.ConvExplorer(use_figurewidget=False, worker=PlantedWorker(),
                              strategies=["im2col-gemm", "reference"], **SMALL)
    bar = ex.runtime_chart.figure.data[0]
    assert len(bar.customdata) == 2
    for row, custom in zip(ex.rows, bar.customdata):
        assert row["repeats"] >= 5  # a fast point gets its five blocks
        assert custom[3].startswith(f"median of {row['repeats']} timed")
        assert f"{row['threads']} thread" in custom[3]


def test_a_burst_of_moves_is_one_update_of_the_last_value():
    planted = PlantedWorker()
    ex = widgets.ConvExplorer(use_figurewidget=False, worker=planted, measure=False,
                              background=True, strategies=["reference"], **SMALL)
    for b in range(2, 8):  # six quick presses
        ex.b.value = b
    assert ex.wait(timeout=120)
    assert [key for key, _ in planted.calls] == ["reference"]  # measured once
    assert planted.requests[0][1][0].x_shape[0] == 7
    assert "(7, 16, 8, 3, 1)" in ex.runtime_chart.figure.layout.title.text


@pytest.mark.slow
def test_a_strategy_that_ignores_a_stop_is_killed_named_and_replaced_warm(tests_importable):
    worker = RedirectWorker({"fft": ("ignores_cancel", 600.0)}, grace_s=0.5, spare=True,
                            warm_up=("worker_calls", "slow_warm_up"))
    try:
        assert worker.wait_ready()
        assert worker._spare is not None
        assert worker._spare.reply(120) == ("ready", None)  # the spare warmed up meanwhile
        worker._spare.replies.put(("ready", None))
        ex = widgets.ConvExplorer(use_figurewidget=False, worker=worker, measure=False,
                                  background=True, strategies=["reference", "fft"], **SMALL)
        ex.k.value = 5
        # the status says "measuring fft" a little before the call is sent: wait for the call
        assert worker.planted_sent.wait(120)
        assert "measuring fft" in ex.status.value
        worker.plant.clear()
        begun = time.monotonic()
        ex.k.value = 7  # fft ignores the request to stop: killed after the grace
        assert ex.wait(timeout=120)
        assert worker.kills == 1
        # the spare took over: the new update paid for no warm-up (SLOW_S seconds and more)
        assert time.monotonic() - begun < worker_calls.SLOW_S
        assert [r["status"] for r in ex.rows] == ["ok", "ok"]
        assert "fft did not stop when asked" in ex.status.value
    finally:
        worker.close()


@pytest.mark.slow
def test_a_hanging_strategy_is_stopped_within_its_budget_and_grace(live_worker):
    worker = live_worker
    worker.plant = {"fft": ("ignores_cancel", 600.0)}
    try:
        begun = time.monotonic()
        ex = widgets.ConvExplorer(use_figurewidget=False, worker=worker,
                                  strategies=["reference", "fft"],
                                  **{**SMALL, "budget_s": BUDGET_S})
        assert time.monotonic() - begun < 60
        status = {r["strategy"]: r["status"] for r in ex.rows}
        assert status["reference"] == "ok"
        assert status["fft"].startswith(f"did not finish in {BUDGET_S:g} s (its budget): "
                                        "stopped (it "
                                        "ignored the request to stop")
        assert "fft: did not finish" in ex.message_text
    finally:
        worker.plant = {}


@pytest.mark.slow
def test_the_conv_explorer_keeps_the_budget_of_its_first_point(live_worker):
    """The library is measured first: planted to hang, it is stopped within its budget and the
    grace, and the other strategy is still measured and drawn."""
    worker = live_worker
    worker.plant = {"reference": ("ignores_cancel", 600.0)}
    try:
        begun = time.monotonic()
        ex = widgets.ConvExplorer(use_figurewidget=False, worker=worker,
                                  strategies=["reference", "im2col-gemm"],
                                  **{**SMALL, "budget_s": BUDGET_S})
        assert time.monotonic() - begun < 60
        status = {r["strategy"]: r["status"] for r in ex.rows}
        assert status["reference"].startswith(
            f"did not finish in {BUDGET_S:g} s (its budget): stopped")
        assert status["im2col-gemm"] == "ok"
        assert list(ex.runtime_chart.figure.data[0].x) == ["im2col-gemm"]
    finally:
        worker.plant = {}


@pytest.mark.slow
def test_the_throughput_explorer_keeps_the_budget_of_its_first_size(live_worker):
    worker = live_worker
    worker.plant = {("torch", 1024): ("ignores_cancel", 600.0)}
    try:
        begun = time.monotonic()
        ex = widgets.ThroughputExplorer(op="relu", size_range=(1024, 1024), point_budget_s=0.5,
                                        use_figurewidget=False, worker=worker)
        took = time.monotonic() - begun
        assert took < 60  # not the ten minutes the first point would take
        assert any("torch on cpu, size 1,024: did not finish in 0.5 s" in line
                   for line in ex.message_text.splitlines())
    finally:
        worker.plant = {}


def test_statistics_notes_for_recorded_rows_stay_silent():
    assert style.timing_note({"median_ms": 1.0}, "q1_ms", "q3_ms") == ""


def test_the_charts_and_the_points_agree_on_how_many_blocks_make_quartiles():
    from helpers.experiments import live

    assert style.MIN_TIMED_BLOCKS == live.MIN_REPEATS
