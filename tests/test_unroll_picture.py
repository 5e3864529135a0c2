"""helpers.conv.unroll.im2col_sources and notebook 04's charts (helpers.figures.nb04_unrolling)."""

import helpers  # noqa: F401  (decides simulator vs GPU before numba.cuda is imported)

import numpy as np
import pytest
import torch

from helpers.figures import nb04_unrolling
from helpers.conv import config_for, unroll

CONFIGS = [
    ((1, 1, 8, 8), (1, 1, 3, 3), 1, 1),
    ((2, 3, 7, 9), (4, 3, 3, 2), (2, 1), (1, 0)),
    ((1, 2, 5, 6), (3, 2, 5, 5), 2, 2),
    ((3, 1, 4, 4), (2, 1, 1, 1), 1, 0),
    ((1, 1, 6, 6), (1, 1, 6, 6), 1, 0),
]


def _brute_force_sources(cfg) -> np.ndarray:
    """The same map from the definition, with plain loops over (c, r, s) and (n, p, q)."""
    out = np.full((cfg.c * cfg.r * cfg.s, cfg.n * cfg.p * cfg.q), -1, dtype=np.int64)
    for c in range(cfg.c):
        for r in range(cfg.r):
            for s in range(cfg.s):
                for n in range(cfg.n):
                    for p in range(cfg.p):
                        for q in range(cfg.q):
                            hi = p * cfg.stride_h + r - cfg.pad_h
                            wi = q * cfg.stride_w + s - cfg.pad_w
                            if 0 <= hi < cfg.h and 0 <= wi < cfg.w:
                                out[(c * cfg.r + r) * cfg.s + s, (n * cfg.p + p) * cfg.q + q] = (
                                    ((n * cfg.c + c) * cfg.h + hi) * cfg.w + wi)
    return out


@pytest.mark.parametrize("x_shape,w_shape,stride,padding", CONFIGS)
def test_sources_match_the_definition_and_im2col(x_shape, w_shape, stride, padding, rng):
    cfg = config_for(x_shape, w_shape, stride, padding)
    src = unroll.im2col_sources(cfg)
    assert src.shape == (cfg.c * cfg.r * cfg.s, cfg.n * cfg.p * cfg.q)
    assert src.dtype == np.int64
    np.testing.assert_array_equal(src, _brute_force_sources(cfg))
    x = rng.standard_normal(x_shape).astype(np.float32)
    cols = unroll.im2col_cpu(torch.from_numpy(x), cfg).numpy()
    np.testing.assert_array_equal(cols, np.where(src >= 0, x.ravel()[src], 0))
    copies = np.bincount(src[src >= 0], minlength=x.size)
    assert copies.max() <= cfg.r * cfg.s


def test_every_pixel_copied_rs_times_inside_a_same_padded_image():
    cfg = config_for((1, 1, 8, 8), (1, 1, 3, 3), 1, 1)
    copies = np.bincount(unroll.im2col_sources(cfg).ravel() + 1, minlength=65)[1:].reshape(8, 8)
    assert copies[0, 0] == 4 and copies[0, 3] == 6 and copies[3, 3] == 9
    assert (copies[1:-1, 1:-1] == 9).all()


def test_sources_refuse_a_matrix_too_large_for_a_picture():
    cfg = config_for((128, 3, 128, 128), (96, 3, 11, 11))
    with pytest.raises(ValueError, match="im2col_sources is for pictures"):
        unroll.im2col_sources(cfg)


# ---------------------------------------------------------------------------- charts


def _picture(pixel=(3, 4)):
    cfg = config_for((1, 1, 8, 8), (1, 1, 3, 3), 1, 1)
    patch = np.linspace(0, 1, 64, dtype=np.float32).reshape(8, 8)
    cols = unroll.im2col_cpu(torch.from_numpy(patch[None, None]), cfg).numpy()
    return patch, cols, unroll.im2col_sources(cfg)


def test_picture_marks_every_copy_of_the_pixel():
    patch, cols, src = _picture()
    fig = nb04_unrolling.im2col_picture_figure(patch, cols, src, pixel=(3, 4), device="test device")
    marks = [t for t in fig.data if t.type == "scatter"]
    assert len(marks) == 1 and len(marks[0].x) == 9
    for r, c in zip(marks[0].y, marks[0].x):
        assert src[r, c] == 3 * 8 + 4
    assert "test device" in fig.layout.title.text
    assert "appears in 9 columns" in fig.layout.title.text
    corner = nb04_unrolling.im2col_picture_figure(patch, cols, src, pixel=(0, 0))
    assert "appears in 4 columns" in corner.layout.title.text


@pytest.mark.parametrize("kwargs,match", [
    (dict(pixel=(8, 0)), "pixel must lie inside"),
    (dict(kernel=(2, 2)), "R\\*S = 4 rows"),
])
def test_picture_rejects_bad_arguments(kwargs, match):
    patch, cols, src = _picture()
    args = dict(pixel=(3, 4)) | kwargs
    with pytest.raises(ValueError, match=match):
        nb04_unrolling.im2col_picture_figure(patch, cols, src, **args)
    with pytest.raises(ValueError, match="one shape"):
        nb04_unrolling.im2col_picture_figure(patch, cols[:, :5], src, pixel=(3, 4))


def test_memory_figure_has_input_and_buffer_per_batch():
    rows = [{"layer": "Conv1", "b": b, "input_bytes": 2**20 * b, "cols_bytes": 2**21 * b}
            for b in (128, 1)]
    fig = nb04_unrolling.im2col_memory_figure(rows)
    assert [t.name for t in fig.data] == ["input x, batch 128", "im2col buffer, batch 128",
                                          "input x, batch 1", "im2col buffer, batch 1"]
    assert fig.data[1].y[0] == pytest.approx(256.0)
    assert fig.layout.yaxis.type == "log"
    with pytest.raises(ValueError):
        nb04_unrolling.im2col_memory_figure([])


def _row(layer, strategy, pss, ms, device="CPU: test (2 cores)", **extra):
    return {"layer": layer, "strategy": strategy, "pass": pss, "device": device,
            "median_ms": ms, "iqr_ms": 0.1, "gflop_per_s": 10.0,
            "workspace_bytes": extra.get("ws", ""), "peak_bytes": extra.get("peak", "")}


def test_layers_figure_names_devices_and_draws_the_analytic_workspace():
    rows = [_row("Conv1", "reference", "forward", 1.0),
            _row("Conv1", "im2col-gemm", "forward+backward", 3.0, ws=2**21, peak=2**20),
            _row("Conv2", "im2col-gemm", "forward+backward", "", ws=2**21),  # not measured
            _row("Conv1", "im2col-gemm", "forward+backward", 0.3, device="GPU: test GPU",
                 ws=2**21, peak=2**21)]
    fig = nb04_unrolling.unroll_layers_figure(rows, title="t")
    assert "CPU: test (2 cores)" in fig.layout.title.text
    assert "GPU: test GPU" in fig.layout.title.text
    names = {t.name for t in fig.data}
    assert "im2col-gemm, forward+backward (gpu)" in names
    diamonds = [t for t in fig.data if t.type == "scatter"]
    assert len(diamonds) == 1 and diamonds[0].y[0] == pytest.approx(2.0)
    assert list(fig.data[0].x) == ["Conv1"]  # the unmeasured Conv2 row is left out
    with pytest.raises(ValueError, match="no measured rows"):
        nb04_unrolling.unroll_layers_figure([_row("Conv1", "reference", "forward", None)])


def test_phase_figure_stacks_to_100_percent_beside_the_study():
    rows = [{"phase": "im2col", "ms": 1.0, "share": 0.25}, {"phase": "GEMM", "ms": 2.0, "share": 0.5},
            {"phase": "other", "ms": 1.0, "share": 0.25}]
    fig = nb04_unrolling.unroll_phase_figure([("ours", rows)], device="CPU: test",
                                    study=[("Caffe (study, K40c)", 0.87)])
    totals = {}
    for t in fig.data:
        for label, v in zip(t.y, t.x):
            totals[label] = totals.get(label, 0.0) + (v or 0.0)
    assert totals == {"ours": pytest.approx(100.0), "Caffe (study, K40c)": pytest.approx(100.0)}
    assert [t.name for t in fig.data][:3] == ["im2col", "GEMM", "other"]
    assert "CPU: test" in fig.layout.title.text
    with pytest.raises(ValueError):
        nb04_unrolling.unroll_phase_figure([], device="x")
