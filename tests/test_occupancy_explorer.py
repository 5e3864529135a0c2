"""helpers.widgets.OccupancyExplorer driven from Python: the study's example, the limiting
resource, messages instead of tracebacks, and (on a GPU) the driver's own figure."""

from __future__ import annotations

import helpers  # noqa: F401  (decides simulator vs GPU before numba.cuda is imported)
import plotly.graph_objects as go
import pytest

from helpers import widgets
from helpers.occupancy import GPU_ARCH, SM_LIMITS
from helpers.figures import nb07_inside_the_gpu


@pytest.fixture(params=[False, True], ids=["output", "figurewidget"])
def explorer(request):
    return widgets.OccupancyExplorer(use_figurewidget=request.param)


@pytest.fixture
def plain():
    return widgets.OccupancyExplorer(use_figurewidget=False)


def _shown(ex) -> go.Figure:
    if ex.chart.use_figurewidget:
        return ex.chart.widget.children[0]
    return ex.chart.figure


def _shows_chart(ex) -> bool:
    return ex.body.children == (ex.summary, ex.chart.widget)


def _marker(ex):
    return next(t for t in _shown(ex).data if t.name == "this configuration")


def test_the_studys_example_on_a_k40c(explorer):
    # 116 registers: the register file alone holds 16 warps (4 in each of its 4 parts; the
    # study's division of the whole file gives 17, Section V-C). In whole blocks of 128 threads
    # (4 warps) that is 4 blocks = 16 warps.
    assert _shows_chart(explorer)
    assert explorer.register_warps == 16
    r = explorer.result
    assert (r.active_blocks, r.active_warps, r.limiter) == (4, 16, "registers")
    assert "<b>16 warps</b>" in explorer.summary.value
    assert "16 of 64 warps" in explorer.summary.value
    assert list(_marker(explorer).x) == [116] and list(_marker(explorer).y) == [25.0]


def test_one_block_of_17_warps_cannot_launch_and_says_why(plain):
    plain.threads.value = 544  # 17 warps, counted as 20 by the hardware: 76,800 registers
    assert plain.result is None and plain.body.children[0] is plain.message
    assert "counted as 20" in plain.message_text and "76,800" in plain.message_text
    plain.threads.value = 512  # 16 warps in one block: 61,440 registers
    assert plain.result.active_warps == 16 and plain.result.active_blocks == 1


def test_table_ii_shared_memory_limits_cuda_convnet2_further(plain):
    plain.smem.value = 16 * 1024
    assert plain.result.active_warps == 12 and plain.result.limiter == "shared memory"
    assert "shared memory" in plain.summary.value


def test_every_gpu_of_the_dropdown(plain):
    values = [v for _, v in plain.gpu.options]
    assert set(GPU_ARCH) <= set(values)
    for gpu in GPU_ARCH:
        plain.gpu.value = gpu
        assert _shows_chart(plain), plain.message_text
        assert plain.result.limits is SM_LIMITS[GPU_ARCH[gpu]]
        assert gpu in _shown(plain).layout.title.text


def test_chart_against_threads_per_block(plain):
    plain.vary.value = "threads"
    fig = _shown(plain)
    assert fig.layout.xaxis.title.text == "threads per block"
    assert list(fig.data[0].x) == list(range(32, 1025, 32))
    assert list(_marker(plain).x) == [128]


def test_a_block_that_cannot_launch_shows_a_message_then_recovers(explorer):
    explorer.set(threads_per_block=1024, regs_per_thread=255)  # 262,144 registers a block
    assert explorer.body.children == (explorer.message,)
    assert "cannot launch" in explorer.message_text and "65,536" in explorer.message_text
    assert explorer.result is None and explorer.register_warps is None
    assert (explorer.threads.value, explorer.regs.value) == (1024, 255)  # controls stay
    explorer.set(threads_per_block=128, regs_per_thread=116)
    assert _shows_chart(explorer) and explorer.message_text == ""
    assert explorer.result.active_warps == 16


def test_too_much_shared_memory_for_a_k40c_but_not_for_an_h100(plain):
    plain.smem.value = 100 * 1024
    assert "cannot launch on K40c" in plain.message_text and "49,152" in plain.message_text
    plain.gpu.value = "H100"
    assert _shows_chart(plain)
    assert plain.result.limiter == "shared memory"  # 2 blocks of 101 KB (+1 KB) in 228 KB
    assert plain.result.active_blocks == 2


def test_unexpected_errors_show_a_message(plain, monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("chart on fire")

    monkeypatch.setattr(nb07_inside_the_gpu, "occupancy_curve_figure", broken)
    plain.regs.value = 40  # must not raise
    assert "RuntimeError" in plain.message_text and "chart on fire" in plain.message_text
    monkeypatch.undo()
    plain.regs.value = 116
    assert _shows_chart(plain)


def test_message_is_escaped(plain):
    plain.show_message("<b>x</b>")
    assert "<b>x</b>" not in plain.message.value and "&lt;b&gt;" in plain.message.value


@pytest.mark.parametrize("kwargs, name", [
    (dict(gpu="GTX 480"), "gpu"), (dict(threads_per_block=0), "threads_per_block"),
    (dict(threads_per_block=2048), "threads_per_block"), (dict(regs_per_thread=256), "regs"),
    (dict(smem_per_block=-1), "smem"), (dict(vary="smem"), "vary")])
def test_bad_constructor_arguments(kwargs, name):
    with pytest.raises(ValueError, match=name):
        widgets.OccupancyExplorer(use_figurewidget=False, **kwargs)


def test_set_rejects_unknown_controls(plain):
    with pytest.raises(ValueError, match="unknown controls"):
        plain.set(blocks=3)


def test_the_figure_function_directly():
    fig = nb07_inside_the_gpu.occupancy_curve_figure("K40c", 128, 116)
    y = list(fig.data[0].y)
    assert y[0] == 100.0            # 1 register: 16 blocks of 4 warps = all 64 warps
    assert y[115] == 25.0           # 116 registers: 16 warps by registers -> 4 blocks of 4
    assert y[-1] == 12.5            # 255 registers: 8 warps by registers -> 2 blocks of 4
    with pytest.raises(ValueError, match="vary"):
        nb07_inside_the_gpu.occupancy_curve_figure("K40c", 128, 116, vary="x")
