"""Charts of notebook 11 (helpers.figures.nb11_parallel) on synthetic rows."""

import helpers  # noqa: F401  (first: decides simulator vs GPU)
import math

import pytest

from helpers.experiments import parallel
from helpers.figures import nb11_parallel as figs


def _row(**kw):
    r = dict.fromkeys(parallel.ROW_KEYS, math.nan)
    r.update({"status": "ok", "device": "CPU: test (2 cores)", **kw})
    return r


DDP = _row(experiment="ddp", ranks=2, step_s=0.2, compute_s=0.17, wait_s=0.01,
           allreduce_s=0.03, speedup=1.8)
PIPE = [_row(experiment="pipeline", microbatches=m, step_s=0.1, idle_share=i, speedup=s)
        for m, i, s in ((1, 0.5, 0.9), (4, 0.25, 1.3))]
RED = [_row(experiment="allreduce", ranks=2, message_bytes=b, allreduce_s=t, busbw_gbps=b / t / 1e9,
            copy_gbps=10.0) for b, t in ((4096, 1e-4), (2**20, 1e-3))]


@pytest.mark.parametrize("draw", [figs.step_split_figure, figs.bubble_figure,
                                  figs.allreduce_figure, figs.scaling_figure])
def test_no_rows_gives_a_message_not_an_error(draw):
    fig = draw([_row(experiment="ddp", ranks=64, status="64 ranks refused")])
    assert fig.layout.annotations and "no " in fig.layout.annotations[0].text


def test_step_split_stacks_the_three_parts_in_ms():
    fig = figs.step_split_figure([DDP])
    bars = [t for t in fig.data if t.type == "bar"]
    assert [round(t.x[0], 6) for t in bars] == [170.0, 10.0, 30.0]
    assert fig.data[-1].x[0] == pytest.approx(200.0)          # DDP's own step


@pytest.mark.parametrize("m", [1, 2, 4, 8])
def test_schedule_idle_share_is_the_bubble(m):
    fig = figs.pipeline_schedule_figure(m)
    busy = {}
    for t in fig.data:
        for y, x in zip(t.y, t.x):
            busy[y] = busy.get(y, 0) + x
    end = max(b + x for t in fig.data for b, x in zip(t.base, t.x))
    for total in busy.values():
        assert 1 - total / end == pytest.approx(1 / (m + 1))
    assert sum(len(t.x) for t in fig.data) == 4 * m        # F and B of each micro-batch, 2 stages
    assert f"{1 / (m + 1):.0%}" in fig.layout.title.text


@pytest.mark.parametrize("bad", [0, 33, 2.0, True])
def test_schedule_refuses_bad_microbatches(bad):
    with pytest.raises(ValueError, match="microbatches"):
        figs.pipeline_schedule_figure(bad)


def test_bubble_and_allreduce_and_scaling():
    fig = figs.bubble_figure(PIPE)
    assert list(fig.data[0].y) == [0.5, 0.25] and list(fig.data[1].y) == [0.5, 0.2]
    fig = figs.allreduce_figure(RED)
    assert list(fig.data[0].x) == [4096, 2**20] and list(fig.data[1].y) == [10.0, 10.0]
    fig = figs.scaling_figure([DDP], serial_share=0.1)
    assert list(fig.data[0].x) == [1, 2] and list(fig.data[0].y) == [1.0, 1.8]
    assert fig.data[-1].y[-1] == pytest.approx(parallel.amdahl(0.9, 2))


def test_ideas_figure_names_both_schemes():
    fig = figs.ideas_figure()
    text = " ".join(a.text for a in fig.layout.annotations)
    for word in ("all-reduce", "activations", "data parallelism", "model parallelism"):
        assert word in text
