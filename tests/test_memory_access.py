"""helpers.experiments.memory_access: the three experiments' kernels checked against NumPy, the
recorded addresses, banks and paths against hand-worked figures, and the no-GPU behaviour of the
timings. GPU-only checks at the end are marked ``gpu``."""

import json
import time
from types import SimpleNamespace

import numpy as np
import pytest
from conftest import simulator_only
from numba import cuda

import helpers  # noqa: F401  (decides simulator vs GPU before numba.cuda is imported)
from helpers import results
from helpers.device import backend
from helpers.experiments import memory_access as ma
from helpers.experiments.memory_access import timings

# --------------------------------------------------------------------------- coalescing


def test_sectors_of():
    assert ma.sectors_of(range(32)).tolist() == [0, 1, 2, 3]          # 128 bytes, 4 sectors
    assert len(ma.sectors_of(np.arange(32) * 8)) == 32                 # 32 bytes apart
    assert ma.sectors_of([0, 0, 7]).tolist() == [0]                    # same sector once


def test_coalescing_records_addresses_and_counts_sectors():
    e = ma.explain_coalescing(strides=(1, 2, 4, 8, 16, 32), warps=2)
    assert e.correct
    for s in e.strides:
        assert e.addresses[s].tolist() == [i * s for i in range(64)]
    got = {r["stride"]: (r["sectors"], r["fetched_bytes"], r["load_efficiency_pct"])
           for r in e.rows}
    assert got == {1: (4, 128, 100.0), 2: (8, 256, 50.0), 4: (16, 512, 25.0),
                   8: (32, 1024, 12.5), 16: (32, 1024, 12.5), 32: (32, 1024, 12.5)}
    assert all(r["requested_bytes"] == 128 for r in e.rows)
    assert e.rows[0]["span_bytes"] == 128 and e.rows[-1]["span_bytes"] == 31 * 32 * 4 + 4
    assert "12.5%" in str(e)


def test_the_strided_kernel_leaves_unwritten_outputs_nan():
    # The poison works: launch too few threads and the elements nobody wrote stay NaN.
    src = cuda.to_device(np.arange(100, dtype=np.float32))
    dst = cuda.to_device(np.full(40, np.nan, np.float32))
    ma.strided_load_kernel[1, 32](src, dst, 2)
    out = dst.copy_to_host()
    assert np.array_equal(out[:32], np.arange(0, 64, 2, dtype=np.float32))
    assert np.isnan(out[32:]).all()


@pytest.mark.parametrize("kwargs, name", [
    (dict(strides=(0,)), "stride"), (dict(strides=(65,)), "stride"), (dict(strides=()), "strides"),
    (dict(warps=0), "warps"), (dict(warps=17), "warps"), (dict(strides=(1.5,)), "stride")])
def test_coalescing_bad_input(kwargs, name):
    with pytest.raises(ValueError, match=name):
        ma.explain_coalescing(**kwargs)


# --------------------------------------------------------------------------- banks


def test_conflict_degree():
    assert ma.conflict_degree(range(32)) == 1                      # one word per bank
    assert ma.conflict_degree(np.arange(32) * 32) == 32            # one bank, 32 words
    assert ma.conflict_degree(np.arange(32) * 33) == 1             # padded: all banks
    assert ma.conflict_degree([5] * 32) == 1                       # same word: broadcast
    assert ma.conflict_degree(np.arange(32) * 2) == 2              # two-way
    assert ma.conflict_degree([-1] * 32) == 0
    assert ma.conflict_degree([0, 32, -1, -1]) == 2


@pytest.mark.parametrize("shape", [(36, 40), (32, 32), (1, 5), (64, 33)])
def test_transposes_are_correct(shape):
    e = ma.explain_banks(*shape)
    assert e.correct == {"naive": True, 32: True, 33: True}


def test_banks_of_the_transpose_tile():
    e = ma.explain_banks(36, 40)
    degree = {(r["pitch"], r["access"]): (r["banks_hit"], r["conflict_degree"]) for r in e.rows}
    assert degree == {(32, "write a row"): (32, 1), (32, "read a column"): (1, 32),
                      (33, "write a row"): (32, 1), (33, "read a column"): (32, 1)}
    # the recorded words are those of the formulas in the kernel: lane t of warp 0 (ty = 0),
    # row step 0, reads word t * pitch
    assert e.warp_words(32).tolist() == [32 * t for t in range(32)]
    assert e.warp_words(33).tolist() == [33 * t for t in range(32)]
    assert e.warp_words(33, "write").tolist() == list(range(32))
    # 36 x 40: 2 x 2 blocks of 8 warps x 4 row steps; only full-warp requests are counted
    assert e.words[32].shape == (2, 4, 4, 256)
    assert all(r["requests"] > 0 for r in e.rows)
    assert "32-way" in str(e)


@pytest.mark.parametrize("kwargs", [dict(rows=0), dict(cols=65), dict(rows=2.0)])
def test_banks_bad_input(kwargs):
    with pytest.raises(ValueError, match="rows|cols"):
        ma.explain_banks(**kwargs)


# --------------------------------------------------------------------------- divergence


def test_warp_efficiency():
    assert ma.warp_efficiency([0] * 32 + [1] * 32) == 100.0
    assert ma.warp_efficiency([0, 1] * 32) == 50.0
    assert ma.warp_efficiency([0] * 16) == 50.0         # a half-empty warp: 16 of 32 lanes
    assert ma.warp_efficiency([0] * 31 + [1]) == pytest.approx(50.0)  # one lane splits it
    assert ma.warp_efficiency([0, 1, -1, -1] * 8) == 25.0  # 16 active lanes, two paths issued
    assert ma.warp_efficiency([-1] * 32) == 0.0


def test_divergence_paths_and_efficiency():
    e = ma.explain_divergence(n=128, iters=4, threads_per_block=64)
    assert e.correct == {"parity": True, "warp": True}
    t = np.arange(128) % 64  # threadIdx.x
    assert e.paths["parity"].tolist() == (t % 2).tolist()
    assert e.paths["warp"].tolist() == ((t // 32) % 2).tolist()
    rows = {r["variant"]: r for r in e.rows}
    assert (rows["parity"]["split_warps"], rows["parity"]["efficiency_pct"]) == (4, 50.0)
    assert (rows["warp"]["split_warps"], rows["warp"]["efficiency_pct"]) == (0, 100.0)
    assert "50.0%" in str(e)


def test_divergence_with_a_partial_last_warp():
    e = ma.explain_divergence(n=80, iters=2, threads_per_block=128)
    assert e.correct == {"parity": True, "warp": True}
    rows = {r["variant"]: r for r in e.rows}
    # warps of 32, 32, 16 lanes: warp branch (32 + 32 + 16) / (3 * 32); parity twice the issues
    assert rows["warp"]["efficiency_pct"] == pytest.approx(100 * 80 / 96)
    assert rows["parity"]["efficiency_pct"] == pytest.approx(100 * 80 / 192)
    assert rows["warp"]["warps"] == 3
    assert (rows["parity"]["split_warps"], rows["warp"]["split_warps"]) == (3, 0)


@pytest.mark.parametrize("kwargs, name", [
    (dict(n=0), "n"), (dict(n=10**6), "n"), (dict(iters=0), "iters"),
    (dict(threads_per_block=48), "threads_per_block"),
    (dict(threads_per_block=2048), "threads_per_block")])
def test_divergence_bad_input(kwargs, name):
    with pytest.raises(ValueError, match=name):
        ma.explain_divergence(**kwargs)


# ----------------------------------------------------------------- without a GPU


@simulator_only
def test_no_gpu_means_no_timings(tmp_path):
    assert "no CUDA GPU" in ma.gpu_refusal()
    for fn in (ma.measure_coalescing, ma.measure_transpose, ma.measure_divergence, ma.measure,
               ma.save_gpu_experiments):
        with pytest.raises(ma.GpuRequired, match="no CUDA GPU"):
            fn()
    with pytest.raises(ma.GpuRequired, match="memory_access --save"):
        ma.measure()
    rec = ma.recorded(tmp_path)
    assert not rec and rec.rows == []
    assert "python -m helpers.experiments.memory_access --save" in rec.note


def _timing(**kw):
    return dict({"experiment": "coalescing", "variant": "stride 1", "x": 1, "size": 8,
                 "median_ms": 1.0, "iqr_ms": 0.1, "gb_s": 2.0, "device": "GPU: Test GPU",
                 "device_kind": "cuda", "status": "ok"}, **kw)


def save_as(monkeypatch, directory, name, rows, gpu, date):
    """Save rows as if measured on ``gpu`` on ``date`` (ISO 8601)."""
    monkeypatch.setattr(results.backend, "info", lambda: SimpleNamespace(
        as_dict=lambda: {"gpu_name": gpu}))
    _, meta = results.save(name, rows, command="pytest", directory=directory)
    meta.write_text(json.dumps(dict(json.loads(meta.read_text()), date=date)))


def test_recorded_timings_are_read_and_labelled(tmp_path, monkeypatch):
    rows = [_timing(), _timing(experiment="divergence", variant="parity", gb_s=None)]
    save_as(monkeypatch, tmp_path, "gpu_experiments_test-gpu", rows, "Test GPU", "2026-01-02")
    rec = ma.recorded(tmp_path)
    assert [r["experiment"] for r in rec.rows] == ["coalescing", "divergence"]
    assert rec.rows[0]["gb_s"] == 2.0 and rec.rows[1]["gb_s"] is None
    assert {r["device"] for r in rec.rows} == {"GPU: Test GPU, 2026-01-02"}
    assert all(r["source"] == "reference" for r in rec.rows)
    assert rec.note == "recorded in results/ on GPU: Test GPU (2026-01-02)"
    # another GPU recorded later: the newest recording by default, every GPU on request
    save_as(monkeypatch, tmp_path, "gpu_experiments_a-gpu", [_timing(median_ms=0.5)], "A GPU",
            "2026-03-04")
    newest = ma.recorded(tmp_path)
    assert [r["median_ms"] for r in newest.rows] == [0.5] and "A GPU" in newest.note
    assert [ds.name for ds in newest.datasets] == ["gpu_experiments_a-gpu"]
    assert len(ma.recorded(tmp_path, every_gpu=True).rows) == 3


@simulator_only
@pytest.mark.slow
def test_command_line_without_a_gpu(capsys, monkeypatch, tmp_path):
    monkeypatch.setattr(results, "RESULTS_DIR", tmp_path)
    assert ma.main([]) == 0
    out = capsys.readouterr().out
    assert "load efficiency" in out and "32-way" in out and "50.0%" in out
    assert "memory_access --save" in out
    assert ma.main(["--save"]) == results.REFUSED
    assert "nothing saved: no CUDA GPU" in capsys.readouterr().out
    assert not list(tmp_path.iterdir())


# ---------------------------------------------------------------------------- on a GPU


@pytest.mark.gpu
@pytest.mark.skipif(backend.MODE != "gpu", reason="needs a real CUDA GPU")
def test_gpu_timings_show_the_effects():
    # The command's size (2**23 threads), after a discarded pass, so that neither a small
    # launch's fixed cost nor a cold card's first timings decide it: at 2**22 with no such
    # pass an H200 gave stride 1 only 1.9x stride 32's GB/s, the recording at 2**23 5.2x.
    ma.measure_coalescing(strides=(1,), min_run_time=0.05)
    co = {r["x"]: r for r in ma.measure_coalescing(strides=(1, 32), min_run_time=0.1)}
    assert co[1]["gb_s"] > 2 * co[32]["gb_s"], co
    tr = {r["variant"]: r for r in ma.measure_transpose(size=4096, min_run_time=0.05)}
    assert tr["shared 32 x 33"]["median_ms"] < tr["shared 32 x 32"]["median_ms"], tr
    dv = {r["variant"]: r for r in ma.measure_divergence(n=1 << 20, iters=256,
                                                         min_run_time=0.05)}
    assert dv["parity"]["median_ms"] > 1.3 * dv["warp"]["median_ms"], dv
    for r in [*co.values(), *tr.values(), *dv.values()]:
        assert r["status"] == "ok" and r["device"].startswith("GPU")


@pytest.mark.gpu
@pytest.mark.skipif(backend.MODE != "gpu", reason="needs a real CUDA GPU")
def test_gpu_timings_are_saved_and_read_back(tmp_path):
    paths = ma.save_gpu_experiments(min_run_time=0.02, directory=tmp_path)
    assert paths[0].name.startswith("gpu_experiments_")
    rec = ma.recorded(tmp_path)
    assert [r["experiment"] for r in rec.rows].count("transpose") == 3
    assert all(r["gb_s"] is None for r in rec.rows if r["experiment"] == "divergence")


# ------------------------------------------------------------------------------ --out


@simulator_only
def test_command_line_save_without_a_gpu_returns_1_at_once(capsys, tmp_path):
    out_dir = tmp_path / "out"
    assert ma.main(["--save", "--out", str(out_dir)]) == results.REFUSED
    out = capsys.readouterr().out
    assert out.startswith("nothing saved: no CUDA GPU")
    assert "load efficiency" not in out  # the simulator's explanations are not run first
    assert not out_dir.exists()


@pytest.mark.gpu
@pytest.mark.skipif(backend.MODE != "gpu", reason="needs a real CUDA GPU")
def test_gpu_command_line_saves_into_out(tmp_path):
    assert ma.main(["--save", "--out", str(tmp_path)]) == 0
    assert [p.name for p in tmp_path.glob("gpu_experiments_*.csv")]
    assert ma.recorded(tmp_path).rows


# ------------------------------------------------------------------------------ --time-limit


def _stub_experiments(monkeypatch) -> list[str]:
    """The three experiments replaced by stubs that note their call (no GPU needed)."""
    called = []

    def stub(name):
        def run(min_run_time):
            called.append(name)
            return [{"experiment": name, "variant": "v", "x": 1, "size": 8, "median_ms": 1.0,
                     "iqr_ms": 0.1, "gb_s": 2.0, "device": "GPU: planted", "device_kind": "cuda",
                     "status": "ok"}]
        return run

    monkeypatch.setattr(timings, "_require_gpu", lambda: None)
    for name in ("coalescing", "transpose", "divergence"):
        monkeypatch.setattr(timings, f"measure_{name}", stub(name))
    return called


def test_experiments_not_begun_by_the_deadline_are_rows_saying_so(monkeypatch):
    called = _stub_experiments(monkeypatch)
    rows = ma.measure(deadline=time.monotonic() - 1.0, time_limit=7.5)
    assert called == []
    assert [r["experiment"] for r in rows] == ["coalescing", "transpose", "divergence"]
    assert all(r["status"] == "skipped: time limit of 7.5 s reached" and r["median_ms"] is None
               for r in rows)
    assert all(list(r) == list(timings._row("e", "v", 1, 8, SimpleNamespace(
        median_ms=1.0, iqr_s=0.0, median_s=1e-3, device="GPU: x"), None)) for r in rows)
    rows = ma.measure(deadline=None)
    assert called == ["coalescing", "transpose", "divergence"]
    assert all(r["status"] == "ok" for r in rows)


def test_recorded_leaves_out_the_experiments_a_time_limit_skipped(monkeypatch, tmp_path):
    _stub_experiments(monkeypatch)
    ok = ma.measure()[0]
    skipped = dict(ok, experiment="transpose", variant="", median_ms=None, iqr_ms=None,
                   gb_s=None, status="skipped: time limit of 7.5 s reached")
    results.save(ma.PREFIX + "planted", [ok, skipped], directory=tmp_path)
    rows = ma.recorded(tmp_path).rows
    assert [r["experiment"] for r in rows] == ["coalescing"]


def test_a_time_limit_that_is_not_positive_is_refused(capsys):
    with pytest.raises(SystemExit) as exc:
        ma.main(["--save", "--time-limit", "0"])
    assert exc.value.code == 2 and "--time-limit must be > 0" in capsys.readouterr().err
