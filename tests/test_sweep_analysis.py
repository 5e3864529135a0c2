"""helpers.experiments.sweep's analysis (fastest map, the study's findings) and the head-to-head charts."""

from __future__ import annotations

import helpers  # noqa: F401
import pytest

from helpers.conv import ConvConfig
from helpers.experiments import sweep
from helpers.experiments.sweep import fastest_map, findings
from helpers.figures import nb06_head_to_head


def _row(sweep, x, strategy, ms, ws=None, **cfg):
    base = dict(b=2, i=32, f=16, k=11, s=1, c=3)
    key = {"batch": "b", "input": "i", "filters": "f", "kernel": "k", "stride": "s"}.get(sweep)
    if key:
        base[key] = x
    base.update(cfg)
    return dict(preset="t", sweep=sweep, x=x, layer="", padding=0, strategy=strategy,
                family="", device="CPU: test", **{"pass": "forward+backward"},
                median_ms=ms, iqr_ms=0.0, gflop_per_s=1.0, flops=1, workspace_bytes=ws,
                peak_bytes=None, status="ok" if ms is not None else "refused", **base)


def _study_like():
    """fft wins at large kernels, loses at small; stride does not help it; fft needs the most."""
    rows = []
    for k in (3, 5, 9, 11):
        rows += [_row("kernel", k, "fft", 10.0, ws=8e6), _row("kernel", k, "reference",
                                                              5.0 if k < 7 else 20.0),
                 _row("kernel", k, "im2col-gemm", 12.0, ws=1e6)]
    for s in (1, 4):
        rows += [_row("stride", s, "fft", 10.0, ws=8e6), _row("stride", s, "reference", 8.0 / s),
                 _row("stride", s, "im2col-gemm", 9.0 / s, ws=1e6)]
    return rows


def test_findings_agree_with_study_like_data():
    out = {f["finding"]: f for f in findings(_study_like())}
    assert out["FFT beats the library for large kernels"]["agrees"] is True
    assert "k=9: fft/library 0.50" in out["FFT beats the library for large kernels"]["here"]
    assert out["The library beats FFT for small kernels"]["agrees"] is True
    assert out["FFT only pays at stride 1"]["agrees"] is True
    assert "fastest at stride 4: reference" in out["FFT only pays at stride 1"]["here"]
    assert out["FFT is the most memory-hungry"]["agrees"] is True
    unroll = out["Unrolling needs a k*k-times larger buffer"]
    assert unroll["agrees"] is True and "k=11" in unroll["here"]


def test_the_memory_findings_ignore_rows_that_did_not_run():
    """A planted winograd row at every point, refused (it takes 3 x 3 only) but carrying a huge
    workspace, must not win the memory finding; nor a refused im2col-gemm row the unroll one."""
    planted = [dict(_row("kernel", k, "winograd", None, ws=9e9),
                    status="winograd cannot compute this convolution") for k in (3, 5, 9, 11)]
    planted += [dict(_row("kernel", 13, "im2col-gemm", None, ws=9e9, k=13), status="refused")]
    out = {f["finding"]: f for f in findings(_study_like() + planted)}
    memory = out["FFT is the most memory-hungry"]
    assert memory["agrees"] is True and "at 6 of 6 points" in memory["here"], memory["here"]
    assert "k=11" in out["Unrolling needs a k*k-times larger buffer"]["here"]
    ran = [dict(r, status="ok", median_ms=1.0) for r in planted[:4]]   # had they run ...
    out = {f["finding"]: f for f in findings(_study_like() + ran)}
    memory = out["FFT is the most memory-hungry"]
    assert memory["agrees"] is False and "at 2 of 6 points" in memory["here"]   # ... they count


def test_a_strategy_that_cannot_run_a_configuration_has_no_workspace():
    cfg = ConvConfig.from_shapes((1, 2, 9, 9), (2, 2, 5, 5))
    row = sweep.measure(cfg, "winograd", "cpu", backward=True, min_run_time=0.001)
    assert row["status"].startswith("Winograd") and row["workspace_bytes"] is None
    row = sweep.measure(cfg, "im2col-gemm", "cpu", backward=True, min_run_time=0.001)
    assert row["status"] == "ok" and row["workspace_bytes"] > 0


def test_findings_can_disagree_and_can_say_they_cannot_tell():
    rows = [dict(r, median_ms=1.0) if r["strategy"] == "reference" else r for r in _study_like()]
    out = {f["finding"]: f for f in findings(rows)}
    assert out["FFT beats the library for large kernels"]["agrees"] is False
    only_small = [r for r in _study_like() if r["sweep"] != "kernel" or r["k"] < 7]
    out = {f["finding"]: f for f in findings(only_small)}
    assert out["FFT beats the library for large kernels"]["agrees"] is None


def test_fastest_map_measures_every_fitting_cell():
    rows, winners = fastest_map([3, 9], [8, 16], base=(1, 16, 2, 3, 1), c=1,
                                strategies=["reference", "im2col-gemm"], min_run_time=0.005)
    assert len(winners) == 2 and all(len(line) == 2 for line in winners)
    assert winners[1][0] is None  # a 9 x 9 kernel does not fit an 8 x 8 input
    assert all(w in ("reference", "im2col-gemm") for w in (winners[0][0], winners[0][1],
                                                             winners[1][1]))
    assert len(rows) == 3 * 2 and {(r["k"], r["i"]) for r in rows} == {(3, 8), (3, 16), (9, 16)}


def test_sweep_figure_draws_each_strategy_once_in_the_legend():
    fig = nb06_head_to_head.sweep_figure(_study_like(), "median_ms", "Runtime")
    names = [t.name for t in fig.data if t.showlegend]
    assert sorted(names) == ["fft", "im2col-gemm", "reference"]
    assert "CPU: test" in fig.layout.title.text
    fig = nb06_head_to_head.sweep_figure(_study_like(), "workspace_bytes", "Workspace")
    assert {t.name for t in fig.data} == {"fft", "im2col-gemm"}  # reference's is unknown
    assert max(max(t.y) for t in fig.data) == pytest.approx(8e6 / 2**20)


def test_fastest_map_figure_and_findings_table():
    fig = nb06_head_to_head.fastest_map_figure([1, 3], [16, 32], [["fft", None], ["reference", "fft"]],
                                   "CPU: test")
    assert list(fig.data[0].text[0]) == ["fft", ""] and "CPU: test" in fig.layout.title.text
    html = nb06_head_to_head.findings_table([{"finding": "a<b", "study": "s", "here": "h", "agrees": None}],
                                "CPU")
    assert "a&lt;b" in html and "cannot tell" in html
