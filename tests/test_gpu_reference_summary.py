"""The GPU reference run's summary: each part's status from its outcome, the headline ratios
read from the files the run wrote (GEMM against cuBLAS, Table I against cuDNN, the climb's
targets), and the rows measured or skipped."""

from __future__ import annotations

import json

import pytest

from helpers import results
from helpers.experiments.gpu_reference import summary


def test_status_of_each_outcome():
    refused = results.REFUSED
    assert summary.status_of(refused, [], dry_run=True, gpu_only=True)[0] == "no GPU (dry run)"
    assert summary.status_of(refused, [], dry_run=False, gpu_only=True)[0] == "refused"
    assert summary.status_of(refused, [], dry_run=True, gpu_only=False)[0] == "refused"
    assert summary.status_of(1, [], dry_run=True, gpu_only=True)[0] == "failed"   # not a refusal
    assert summary.status_of(refused, ["a.csv"], dry_run=True, gpu_only=True)[0] == "failed"
    assert summary.status_of(0, [], dry_run=False, gpu_only=False)[0] == "failed"
    assert summary.status_of(0, [], dry_run=True, gpu_only=False)[0] == "ok"
    assert summary.status_of(0, ["a.csv"], dry_run=False, gpu_only=False) == ("ok", "")


def _gemm_row(backend, size, gflop_s, kind="cuda", status="ok"):
    return {"experiment": "gemm", "op": "gemm", "backend": backend, "device_kind": kind,
            "dtype": "float32", "size": size, "gflop_s": gflop_s, "status": status}


def _conv_row(layer, strategy, ms, ref_ms, pass_="forward+backward"):
    return {"layer": layer, "b": 128, "strategy": strategy, "pass": pass_, "median_ms": ms,
            "vs_reference": ms / ref_ms, "status": "ok"}


def test_headline_reads_the_ratios_from_the_files(tmp_path):
    g = [_gemm_row("torch", 4096, 50_000.0), _gemm_row("numba-tiled", 4096, 5_000.0),
         _gemm_row("numba-naive", 4096, 1_000.0), _gemm_row("torch", 8192, 60_000.0),
         _gemm_row("numba-tiled", 2048, 9_999.0), _gemm_row("numba-tiled", 4096, 1.0, "cpu")]
    results.save("01_throughput_test-gpu", g, directory=tmp_path)
    c = [_conv_row("Conv1", "reference", 2.0, 2.0), _conv_row("Conv1", "fft", 1.5, 2.0),
         _conv_row("Conv1", "im2col-gemm", 8.0, 2.0), _conv_row("Conv1", "direct-tiled", 20.0, 2.0),
         _conv_row("Conv1", "fft", 0.1, 2.0, "forward"),
         _conv_row("Conv2", "reference", 1.0, 1.0), _conv_row("Conv2", "fft", 3.0, 1.0)]
    results.save("conv_table1_b128_test-gpu", c, directory=tmp_path)
    rows = [{"part": "throughput", "files": "01_throughput_test-gpu.csv;01_throughput_test-gpu.json"},
            {"part": "conv-b128", "files": "conv_table1_b128_test-gpu.csv"}]
    head = summary.headline(tmp_path, rows)
    assert head["gemm"]["size"] == 4096
    assert head["gemm"]["tiled_vs_torch"] == pytest.approx(0.1)
    assert head["gemm"]["naive_gflop_s"] == 1_000.0
    t1 = {t["layer"]: t for t in head["table1"]}
    assert t1["Conv1"]["fft"] == pytest.approx(0.75) and t1["Conv1"]["fastest"] == "fft"
    assert t1["Conv1"]["im2col-gemm"] == pytest.approx(4.0)
    assert t1["Conv2"]["fastest"] == "reference" and t1["Conv2"]["direct-tiled"] is None
    text = summary.format_summary([dict(r, status="ok", seconds=1.0, budget_s=2.0, measured=1,
                                        rows=1, note="") for r in rows], tmp_path)
    assert "0.100 of it" in text and "0.75x" in text


def _climb_row(experiment, item, **kw):
    row = {k: None for k in ("experiment", "item", "rung", "layer", "n", "median_ms", "gflop_s",
                             "gb_s_written", "vs_fp32", "vs_tf32", "status")}
    row.update({"experiment": experiment, "item": item, "status": "ok", "median_ms": 1.0, **kw})
    return row


def test_headline_prints_the_climb_targets_measured_in_the_run(tmp_path):
    """Each target of the climb, read from the run's own files, with met or not met."""
    climb = [_climb_row("gemm", "cuBLAS FP32", n=4096, gflop_s=50_000.0, vs_fp32=1.0),
             _climb_row("gemm", "128-bit loads", rung=6, n=4096, gflop_s=30_000.0, vs_fp32=0.6,
                        vs_tf32=0.2),
             _climb_row("gemm", "autotuned tiles", rung=7, n=4096, gflop_s=36_000.0,
                        vs_fp32=0.72, vs_tf32=0.24),
             _climb_row("gemm", "naive, coalesced", rung=2, status="failed: planted"),
             _climb_row("im2col", "im2col_kernel", layer="Figure 4", gb_s_written=183.0),
             _climb_row("im2col", "im2col_window_kernel", layer="Figure 4", gb_s_written=2100.0),
             _climb_row("im2col", "im2col_window_kernel", layer="Conv1", gb_s_written=9999.0)]
    results.save("climb_test-gpu", climb, directory=tmp_path)
    conv = [_conv_row(layer, s, ms, ref) for layer, s, ms, ref in (
        ("Conv1", "reference", 2.0, 2.0), ("Conv1", "reference-tf32", 1.0, 2.0),
        ("Conv1", "direct-tiled", 30.0, 2.0), ("Conv1", "im2col-gemm", 3.0, 2.0),
        ("Conv2", "reference", 1.0, 1.0), ("Conv2", "direct-tiled", 12.0, 1.0),
        ("Conv2", "im2col-gemm", 2.5, 1.0))]
    results.save("conv_table1_b128_test-gpu", conv, directory=tmp_path)
    for name in ("climb_test-gpu", "conv_table1_b128_test-gpu"):   # as a GPU machine saves them
        meta_path = tmp_path / f"{name}.json"
        meta = json.loads(meta_path.read_text())
        meta["environment"].update(gpu_name="Test GPU", driver_version="1.0")
        meta_path.write_text(json.dumps(meta))
    rows = [{"part": "climb", "files": "climb_test-gpu.csv;climb_test-gpu.json"},
            {"part": "conv-b128", "files": "conv_table1_b128_test-gpu.csv"}]
    c = summary.headline(tmp_path, rows)["climb"]
    assert c["gemm_rung"] == "autotuned tiles" and c["gemm_vs_fp32"] == pytest.approx(0.72)
    assert c["im2col_gb_s"] == 2100.0 and c["im2col_first_gb_s"] == 183.0   # Figure 4's, only
    assert (c["direct_vs_fp32"], c["direct_layer"]) == (15.0, "Conv1")       # the worst layer
    assert c["direct_vs_tf32"] == pytest.approx(30.0)
    assert (c["im2col_vs_fp32"], c["im2col_layer"]) == (2.5, "Conv2")
    text = summary.format_summary([dict(r, status="ok", seconds=1.0, budget_s=2.0, measured=1,
                                        rows=1, note="") for r in rows], tmp_path)
    assert "0.720 (autotuned tiles; 0.240 of TF32)" in text
    assert "2,100 GB/s (first kernel: 183 GB/s)" in text
    assert "15.00x at Conv1 (30.00x TF32)  [target <= 10x, stretch <= 4x: not met]" in text
    assert "2.50x at Conv2" in text and text.count(": met]") == 2
    assert "measured on GPU: Test GPU (driver 1.0)" in text


def test_the_climb_targets_are_not_judged_on_a_cpu_run(tmp_path):
    """A dry run's CPU timings stand against no GPU target: the headline says so instead."""
    results.save("climb_cpu", [_climb_row("gemm", "autotuned tiles", rung=7, gflop_s=5.0,
                                          vs_fp32=0.9)], directory=tmp_path)
    rows = [{"part": "climb", "files": "climb_cpu.csv;climb_cpu.json", "status": "ok",
             "seconds": 1.0, "budget_s": 2.0, "measured": 1, "rows": 1, "note": ""}]
    text = summary.format_summary(rows, tmp_path)
    assert "judged on a GPU" in text and ": met]" not in text and "not met" not in text


def test_count_rows_tells_measured_from_skipped(tmp_path):
    rows = [{"x": 1, "status": "ok"}, {"x": 2, "status": "ok: M=1"},
            {"x": 3, "status": "skipped: time limit of 5 s reached"},
            {"x": 4, "status": "refused: too slow"}]
    results.save("t", rows, directory=tmp_path)
    assert summary.count_rows(["t.csv", "t.json"], tmp_path) == {
        "rows": 4, "measured": 2, "skipped_for_time": 1}
