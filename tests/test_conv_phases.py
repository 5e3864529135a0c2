"""helpers.conv.phases: the steps of each strategy (the study's Figure 4), timed."""

from __future__ import annotations

import pytest

from helpers.experiments.phases import library_kernels, phase_times

X, W = (2, 3, 12, 12), (4, 3, 5, 5)


@pytest.mark.parametrize("strategy,device,backward,expected", [
    ("im2col-gemm", "cpu", False, ["im2col", "GEMM"]),
    ("im2col-gemm", "cpu", True, ["im2col", "GEMM (dw)", "GEMM (dcols)", "col2im"]),
    ("fft", "cpu", False, ["FFT (x)", "FFT (w)", "Cgemm", "inverse FFT (y)", "crop"]),
    ("fft", "cpu", True, ["FFT (dy)", "FFT (x)", "Cgemm (dw)", "inverse FFT (dw)", "FFT (w)",
                          "Cgemm (dx)", "inverse FFT (dx)", "crop"]),
    ("direct-naive", "cpu", True, ["direct (dx)", "direct (dw)"]),
    ("reference", "cpu", False, ["torch conv2d"]),
    ("direct-naive", "cuda", False, ["direct (y)"]),
    ("im2col-tiled", "cuda", False, ["im2col", "GEMM"]),
])
@pytest.mark.slow
def test_steps_in_order_with_shares_adding_up(strategy, device, backward, expected):
    x, w = ((1, 2, 6, 6), (2, 2, 3, 3)) if device == "cuda" else (X, W)
    rows = phase_times(strategy, x, w, padding=1, device=device, backward=backward, repeats=2)
    assert [r["phase"] for r in rows] == expected + ["other"]
    assert all(r["ms"] >= 0 for r in rows)
    assert sum(r["share"] for r in rows) == pytest.approx(1.0, abs=1e-6)
    assert sum(r["ms"] for r in rows[:-1]) > 0


def test_phases_cost_nothing_visible_outside_a_measurement():
    from helpers.conv import phases

    assert phases._recorder is None
    phase_times("fft", X, W, repeats=1)
    assert phases._recorder is None  # switched off again


def test_bad_arguments():
    with pytest.raises(ValueError, match="repeats must be >= 1"):
        phase_times("fft", X, W, repeats=0)
    with pytest.raises(ValueError, match="channel mismatch"):
        phase_times("fft", X, (4, 2, 3, 3))


def test_library_kernels_name_what_torch_ran():
    rows = library_kernels(X, W, backward=True)
    assert rows and all(r["ms"] >= 0 and r["calls"] >= 1 for r in rows)
    names = [r["name"] for r in rows]
    assert any("convolution" in n for n in names), names
    assert [r["ms"] for r in rows] == sorted((r["ms"] for r in rows), reverse=True)
