"""helpers.figures.nb05_fft, notebook 05's figures (FFT convolution): they build, keep pictures small,
name the device, and refuse bad arguments."""

from __future__ import annotations

import helpers  # noqa: F401  (must come first: decides simulator vs GPU before numba.cuda)
import numpy as np
import pytest

from helpers.figures import nb05_fft, style


def test_planes_figure_stores_small_8_bit_pictures():
    rng = np.random.default_rng(0)
    panels = [("image", rng.random((300, 200))), ("spectrum", rng.random((128, 65))),
              ("flat", np.ones((10, 10)))]
    fig = nb05_fft.fft_planes_figure(panels, "t", cols=2, max_side=100)
    assert len(fig.data) == 3
    z = [np.asarray(t.z) for t in fig.data]
    assert all(a.dtype == np.uint8 for a in z)
    assert max(z[0].shape) <= 100 and z[1].shape == (64, 33)
    assert z[0].min() == 0 and z[0].max() == 255 and (z[2] == 0).all()
    assert fig.layout.yaxis.autorange == "reversed" and fig.layout.yaxis2.scaleanchor == "x2"
    with pytest.raises(ValueError, match="2-D"):
        nb05_fft.fft_planes_figure([("bad", np.zeros(5))], "t")
    with pytest.raises(ValueError, match="empty"):
        nb05_fft.fft_planes_figure([], "t")


def test_cost_figure_lines_and_mark():
    ks = [1, 3, 5]
    fig = nb05_fft.fft_cost_figure(ks, [("fft", [3, 3, 3], "fft", "solid"),
                                     ("direct", [1, 4, 9], "direct-naive", "dash")],
                                "FLOPs", "t", mark=(3, "cross"))
    assert [t.name for t in fig.data] == ["fft", "direct", "cross"]
    assert fig.data[0].line.color == style.color_for("fft")
    assert fig.layout.yaxis.type == "log"
    with pytest.raises(ValueError, match="values"):
        nb05_fft.fft_cost_figure(ks, [("fft", [1, 2], "fft", "solid")], "FLOPs", "t")


def test_runtime_figure_names_the_device_and_skips_unmeasured_rows():
    rows = [{"strategy": "fft", "device": "CPU: test", "k": k, "median_ms": 1.0 + k,
             "iqr_ms": 0.1, "status": "ok"} for k in (1, 3)]
    rows.append({"strategy": "reference", "device": "CPU: test", "k": 1, "median_ms": None,
                 "iqr_ms": None, "status": "refused: too slow"})
    fig = nb05_fft.fft_runtime_figure(rows, "k", "kernel size", "t")
    assert [t.name for t in fig.data] == ["fft, CPU: test"]
    assert list(fig.data[0].x) == [1, 3]


def test_phase_figure_stacks_shares_with_other_last():
    fwd = [{"phase": "FFT (x)", "ms": 1.0, "share": 0.25},
           {"phase": "Cgemm", "ms": 2.0, "share": 0.5},
           {"phase": "other", "ms": 1.0, "share": 0.25}]
    bwd = [{"phase": "FFT (dy)", "ms": 1.0, "share": 0.5},
           {"phase": "other", "ms": 1.0, "share": 0.5}]
    fig = nb05_fft.fft_phase_figure([("forward", fwd), ("backward", bwd)], "CPU: test")
    assert [t.name for t in fig.data] == ["FFT (x)", "Cgemm", "FFT (dy)", "other"]
    assert list(fig.data[0].x) == [25.0, 0.0] and list(fig.data[-1].x) == [25.0, 50.0]
    assert "CPU: test" in fig.layout.title.text and fig.layout.barmode == "stack"
