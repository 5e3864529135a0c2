"""The recording commands on a real GPU: hotspots, precision, transfers (skipped without one).

Like every module with tests marked ``gpu``, this one imports only what a bare GPU server has
(no plotly, Jupyter or hypothesis), so that ``python3 -m tools.gpu_tests`` runs it there; the
tests of these commands without a GPU, and of their figures, are in test_hotspots.py,
test_precision.py and test_transfers.py.
"""

import math

import pytest

import helpers  # noqa: F401  (decides the backend first)
from helpers.device import backend
from helpers.experiments import hotspots, transfers
from helpers.experiments import precision as P

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(backend.MODE != "gpu", reason="needs a real CUDA GPU")]


# ----------------------------------------------------------------------- hotspots (notebook 02)


def test_measure_on_the_gpu_uses_kernel_time():
    p = hotspots.measure("alexnet", 16, 224, 2, "cuda")
    assert p.time_kind == "GPU time (CUDA kernels)" and p.device_label.startswith("GPU: ")
    assert math.isclose(sum(p.shares.values()), 1.0, rel_tol=1e-9)
    assert p.conv_share > 0.2
    assert p.total_s <= 1.05 * p.wall_s  # kernel time cannot exceed the synchronised wall time


def test_gpu_command_saves_into_out(tmp_path):
    assert hotspots.main(["--model", "overfeat", "--batch", "2", "--iterations", "1", "--save",
                          "--out", str(tmp_path), "--time-limit", "60"]) == 0
    rec = hotspots.recorded(directory=tmp_path)
    assert [p.model for p in rec.profiles] == ["overfeat"]


# ---------------------------------------------------------------------- precision (notebook 10)


def test_gpu_tf32_is_less_accurate_than_float32_where_it_exists():
    rows = P.measure(["gemm"], device="cuda", sizes=[1024], min_run_time=0.05)
    by = {r["precision"]: r for r in rows}
    assert by["float32"]["status"] == "ok" and by["float32"]["max_rel_error"] < 1e-5
    if P.native("tf32", "cuda"):
        assert by["tf32"]["status"] == "ok"
        assert by["tf32"]["max_rel_error"] > 10 * by["float32"]["max_rel_error"]
        assert by["bfloat16"]["max_rel_error"] > by["float16"]["max_rel_error"]
    else:
        assert "compute capability 8.0" in by["tf32"]["status"]
    assert all(r["device"].startswith("GPU") for r in rows)


# ---------------------------------------------------------------------- transfers (notebook 08)


@pytest.mark.parametrize("direction", transfers.DIRECTIONS)
@pytest.mark.parametrize("pinned", [False, True])
def test_gpu_copy_bandwidth_is_measured(direction, pinned):
    rows = transfers.copy_bandwidth([2**20, 64 * 2**20], direction, pinned, repeats=5)
    for r in rows:
        assert r["status"] == "ok" and r["source"] == "measured", r
        assert r["gb_s"] > 0 and r["median_ms"] > 0 and r["repeats"] == 5
        assert r["device"].startswith("GPU:")


@pytest.mark.parametrize("layer, chunks", [("Conv2", 4), ("Conv5", 3)])
def test_gpu_overlap_gives_the_sequential_output(layer, chunks):
    o = transfers.overlap_experiment(layer, chunks, batch=16, repeats=3, warmup=1)
    assert o["status"] == "ok", o["status"]
    assert o["matches"] and o["max_rel_error"] < transfers.OUTPUT_TOLERANCE
    assert o["overlapped_ms"] > 0 and o["sequential_pageable_ms"] > 0
    assert 0.0 <= o["overlap"] <= 1.0
    stages = {(t["kind"], t["chunk"]): t for t in o["timeline"] if t["run"] == "overlapped"}
    assert len(stages) == 3 * chunks
    for j in range(chunks):  # each chunk is computed after it arrived, copied out after
        assert stages[("compute", j)]["start_ms"] >= stages[("h2d", j)]["end_ms"] - 1e-3
        assert stages[("d2h", j)]["start_ms"] >= stages[("compute", j)]["end_ms"] - 1e-3
    assert all(t["end_ms"] >= t["start_ms"] for t in o["timeline"])


@pytest.mark.parametrize("strategy", list(transfers.TRANSFER_STRATEGIES))
def test_gpu_transfer_share_is_measured(strategy):
    s = transfers.transfer_share("Conv4", strategy, batch=8, chunks=2, repeats=3, warmup=1)
    assert s["status"] == "ok", s["status"]
    assert s["total_ms"] > 0 and s["compute_ms"] > 0
    assert 0.0 <= s["copy_share"] <= 1.0
    if strategy != "overlapped":
        assert s["h2d_ms"] > 0 and s["d2h_ms"] > 0
        assert s["copy_ms"] == pytest.approx(s["h2d_ms"] + s["d2h_ms"])
    assert s["pieces"] == {"small-copies": 8, "overlapped": 2}.get(strategy, 1)


def test_gpu_command_line_saves_what_recorded_reads(tmp_path):
    assert transfers.main(["--quick", "--batch", "4", "--chunks", "2", "--save",
                           "--out", str(tmp_path)]) == 0
    names = sorted(p.name for p in tmp_path.glob("transfers_*.csv"))
    assert len(names) == 4, names
    for experiment in transfers.EXPERIMENTS:
        refs = transfers.recorded(experiment, tmp_path).rows
        assert refs and all(r["source"] == "reference" for r in refs)
    assert all(math.isfinite(float(r["gb_s"])) for r in
               transfers.recorded("bandwidth", tmp_path).rows)


def test_gpu_command_line_past_its_time_limit_saves_skipped_rows(tmp_path):
    assert transfers.main(["--quick", "--batch", "4", "--chunks", "2", "--save",
                           "--out", str(tmp_path), "--time-limit", "1e-6"]) == 0
    names = sorted(p.name for p in tmp_path.glob("transfers_*.csv"))
    assert len(names) == 3, names  # bandwidth, overlap, share; no timeline measured
    assert all(transfers.recorded(e, tmp_path).rows == [] for e in transfers.EXPERIMENTS)
