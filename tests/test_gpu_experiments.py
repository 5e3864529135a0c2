"""helpers.gpu_experiments: the three experiments' kernels checked against NumPy, the
recorded addresses, banks and paths against hand-worked figures, and the no-GPU behaviour of
the resource table and the timings. GPU-only checks at the end are marked ``gpu``."""

import helpers  # noqa: F401  (decides simulator vs GPU before numba.cuda is imported)
from types import SimpleNamespace

import numpy as np
import pytest

from conftest import simulator_only
from helpers import backend, results
from helpers import gpu_experiments as ge
from helpers.occupancy import SM_LIMITS


# --------------------------------------------------------------------------- the study


def test_the_studys_table_ii_as_reported():
    table = {r["implementation"]: (r["regs_per_thread"], r["smem_kb"]) for r in ge.STUDY_TABLE_II}
    assert table == {"Caffe": (86, 8.5), "cuDNN": (80, 8.4), "Torch-cunn": (84, 8.1),
                     "Theano-CorrMM": (72, 7.0), "cuda-convnet2": (116, 16.0),
                     "fbfft": (106, 10.0), "Theano-fft": (2, 4.5)}
    assert "14-22 %" in ge.STUDY_FIGURE_6["achieved occupancy"]
    assert "66-81 %" in ge.STUDY_FIGURE_6["warp execution efficiency"]


def test_kernel_specs_name_real_kernels():
    names = {k.name for k in ge.KERNELS}
    assert {"direct_naive_kernel", "direct_tiled_kernel", "direct_dx_kernel", "direct_dw_kernel",
            "im2col_kernel", "col2im_kernel", "gemm_naive_kernel",
            "gemm_tiled_kernel"} <= names
    for spec in ge.KERNELS:
        assert hasattr(spec.dispatcher(), "py_func"), spec.name
        assert 32 <= spec.threads_per_block <= 1024


# --------------------------------------------------------------------------- coalescing


def test_sectors_of():
    assert ge.sectors_of(range(32)).tolist() == [0, 1, 2, 3]          # 128 bytes, 4 sectors
    assert len(ge.sectors_of(np.arange(32) * 8)) == 32                 # 32 bytes apart
    assert ge.sectors_of([0, 0, 7]).tolist() == [0]                    # same sector once


def test_coalescing_records_addresses_and_counts_sectors():
    e = ge.explain_coalescing(strides=(1, 2, 4, 8, 16, 32), warps=2)
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
    from numba import cuda

    src = cuda.to_device(np.arange(100, dtype=np.float32))
    dst = cuda.to_device(np.full(40, np.nan, np.float32))
    ge.strided_load_kernel[1, 32](src, dst, 2)
    out = dst.copy_to_host()
    assert np.array_equal(out[:32], np.arange(0, 64, 2, dtype=np.float32))
    assert np.isnan(out[32:]).all()


@pytest.mark.parametrize("kwargs, name", [
    (dict(strides=(0,)), "stride"), (dict(strides=(65,)), "stride"), (dict(strides=()), "strides"),
    (dict(warps=0), "warps"), (dict(warps=17), "warps"), (dict(strides=(1.5,)), "stride")])
def test_coalescing_bad_input(kwargs, name):
    with pytest.raises(ValueError, match=name):
        ge.explain_coalescing(**kwargs)


# --------------------------------------------------------------------------- banks


def test_conflict_degree():
    assert ge.conflict_degree(range(32)) == 1                      # one word per bank
    assert ge.conflict_degree(np.arange(32) * 32) == 32            # one bank, 32 words
    assert ge.conflict_degree(np.arange(32) * 33) == 1             # padded: all banks
    assert ge.conflict_degree([5] * 32) == 1                       # same word: broadcast
    assert ge.conflict_degree(np.arange(32) * 2) == 2              # two-way
    assert ge.conflict_degree([-1] * 32) == 0
    assert ge.conflict_degree([0, 32, -1, -1]) == 2


@pytest.mark.parametrize("shape", [(36, 40), (32, 32), (1, 5), (64, 33)])
def test_transposes_are_correct(shape):
    e = ge.explain_banks(*shape)
    assert e.correct == {"naive": True, 32: True, 33: True}


def test_banks_of_the_transpose_tile():
    e = ge.explain_banks(36, 40)
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
        ge.explain_banks(**kwargs)


# --------------------------------------------------------------------------- divergence


def test_warp_efficiency():
    assert ge.warp_efficiency([0] * 32 + [1] * 32) == 100.0
    assert ge.warp_efficiency([0, 1] * 32) == 50.0
    assert ge.warp_efficiency([0] * 16) == 50.0         # a half-empty warp: 16 of 32 lanes
    assert ge.warp_efficiency([0] * 31 + [1]) == pytest.approx(50.0)  # one lane splits it


def test_divergence_paths_and_efficiency():
    e = ge.explain_divergence(n=128, iters=4, threads_per_block=64)
    assert e.correct == {"parity": True, "warp": True}
    t = np.arange(128) % 64  # threadIdx.x
    assert e.paths["parity"].tolist() == (t % 2).tolist()
    assert e.paths["warp"].tolist() == ((t // 32) % 2).tolist()
    rows = {r["variant"]: r for r in e.rows}
    assert (rows["parity"]["split_warps"], rows["parity"]["efficiency_pct"]) == (4, 50.0)
    assert (rows["warp"]["split_warps"], rows["warp"]["efficiency_pct"]) == (0, 100.0)
    assert "50.0%" in str(e)


def test_divergence_with_a_partial_last_warp():
    e = ge.explain_divergence(n=80, iters=2, threads_per_block=128)
    assert e.correct == {"parity": True, "warp": True}
    rows = {r["variant"]: r for r in e.rows}
    # warps of 32, 32, 16 lanes: warp branch (32 + 32 + 16) / (3 * 32); parity twice the issues
    assert rows["warp"]["efficiency_pct"] == pytest.approx(100 * 80 / 96)
    assert rows["parity"]["efficiency_pct"] == pytest.approx(100 * 80 / 192)
    assert rows["warp"]["warps"] == 3


@pytest.mark.parametrize("kwargs, name", [
    (dict(n=0), "n"), (dict(n=10**6), "n"), (dict(iters=0), "iters"),
    (dict(threads_per_block=48), "threads_per_block"),
    (dict(threads_per_block=2048), "threads_per_block")])
def test_divergence_bad_input(kwargs, name):
    with pytest.raises(ValueError, match=name):
        ge.explain_divergence(**kwargs)


# ----------------------------------------------------------------- without a GPU


@simulator_only
def test_no_gpu_means_no_resources_and_no_timings(tmp_path):
    assert "no CUDA GPU" in ge.gpu_refusal()
    with pytest.raises(ge.GpuRequired, match="--resources --save"):
        ge.kernel_resources()
    with pytest.raises(ge.GpuRequired):
        ge.compare_with_driver()
    with pytest.raises(ge.GpuRequired):
        ge.driver_active_blocks(ge.strided_load_kernel, 128)
    for fn in (ge.measure_coalescing, ge.measure_transpose, ge.measure_divergence,
               ge.measure_all, ge.save_gpu_experiments, ge.save_kernel_resources):
        with pytest.raises(ge.GpuRequired, match="no CUDA GPU"):
            fn()
    table = ge.resource_table(directory=tmp_path)
    assert table.rows == [] and table.source == ""
    assert "none" in table.note.lower() or "no table" in table.note.lower()
    assert "python -m helpers.gpu_experiments --resources --save" in table.note
    assert str(table) == table.note
    timings = ge.gpu_timings(directory=tmp_path)
    assert timings.rows == [] and "--experiments --save" in timings.note
    with pytest.raises(ge.GpuRequired):
        ge.resource_table(live=True)


@simulator_only
def test_a_recorded_resource_table_is_read_and_labelled(tmp_path):
    row = {"kernel": "gemm_tiled_kernel", "module": "helpers.gemm", "family": "im2col-tiled",
           "signature": "array(float32, 2d, C) x 3", "threads_per_block": 256,
           "regs_per_thread": 40, "smem_per_block": 2048, "local_mem_per_thread": 0,
           "active_blocks": 6, "active_warps": 48, "max_warps": 64, "occupancy_pct": 75.0,
           "limiter": "registers", "driver_active_blocks": 6, "gpu": "Test GPU",
           "compute_capability": "9.0", "device_kind": "cuda"}
    results.save("kernel_resources_test-gpu", [row], command="pytest", directory=tmp_path)
    table = ge.resource_table(directory=tmp_path)
    assert table.rows[0]["regs_per_thread"] == 40
    assert "kernel_resources_test-gpu" in table.source and table.device in table.source
    text = str(table)
    assert "gemm_tiled_kernel" in text and "48 of 64" in text and "75.0 %" in text
    # a recorded timing run is read the same way
    t = {"experiment": "coalescing", "variant": "stride 1", "x": 1, "size": 8, "median_ms": 1.0,
         "iqr_ms": 0.1, "gb_s": 2.0, "device": "GPU: Test GPU", "device_kind": "cuda",
         "status": "ok"}
    d = dict(t, experiment="divergence", variant="parity", gb_s=None)
    results.save("gpu_experiments_test-gpu", [t, d], command="pytest", directory=tmp_path)
    timings = ge.gpu_timings(directory=tmp_path)
    assert [r["experiment"] for r in timings.rows] == ["coalescing", "divergence"]
    assert timings.rows[1]["gb_s"] is None and "gpu_experiments_test-gpu" in timings.source


@simulator_only
def test_command_line_without_a_gpu(capsys):
    assert ge.main(["--resources", "--experiments"]) == 1
    out = capsys.readouterr().out
    assert "--resources --save" in out and "--experiments --save" in out


def test_command_line_explains(capsys):
    assert ge.main(["--explain"]) == 0
    out = capsys.readouterr().out
    assert "load efficiency" in out and "32-way" in out and "50.0%" in out


# ---------------------------------------------------------------------------- on a GPU

@pytest.mark.gpu
@pytest.mark.skipif(backend.MODE != "gpu", reason="needs a real CUDA GPU")
def test_resources_on_the_gpu_and_the_driver_agrees():
    from helpers import gemm
    from helpers.conv import direct

    rows = ge.kernel_resources()
    by = {r["kernel"]: r for r in rows}
    assert set(by) == {k.name for k in ge.KERNELS}
    for r in rows:
        assert 1 <= r["regs_per_thread"] <= 255, r
        if r["compute_capability"] in SM_LIMITS:
            assert r["active_blocks"] == r["driver_active_blocks"], r
    # static shared memory: exactly the arrays the kernels declare
    assert by["transpose_shared_kernel"]["smem_per_block"] == 4 * 32 * 33
    assert by["gemm_tiled_kernel"]["smem_per_block"] == 2 * 4 * gemm.TILE * gemm.TILE
    assert by["direct_tiled_kernel"]["smem_per_block"] == direct.TILED_SHARED_BYTES
    assert by["strided_load_kernel"]["smem_per_block"] == 0
    table = ge.resource_table()
    assert table.rows and "GPU" in table.source


@pytest.mark.gpu
@pytest.mark.skipif(backend.MODE != "gpu", reason="needs a real CUDA GPU")
def test_occupancy_calculation_matches_the_driver():
    rows = ge.compare_with_driver()
    assert rows
    wrong = [r for r in rows if not r["agree"]]
    assert not wrong, wrong[:5]


@pytest.mark.gpu
@pytest.mark.skipif(backend.MODE != "gpu", reason="needs a real CUDA GPU")
def test_gpu_timings_show_the_effects():
    co = {r["x"]: r for r in ge.measure_coalescing(strides=(1, 32), n=1 << 22,
                                                    min_run_time=0.05)}
    assert co[1]["gb_s"] > 2 * co[32]["gb_s"], co
    tr = {r["variant"]: r for r in ge.measure_transpose(size=4096, min_run_time=0.05)}
    assert tr["shared 32 x 33"]["median_ms"] < tr["shared 32 x 32"]["median_ms"], tr
    dv = {r["variant"]: r for r in ge.measure_divergence(n=1 << 20, iters=256,
                                                         min_run_time=0.05)}
    assert dv["parity"]["median_ms"] > 1.3 * dv["warp"]["median_ms"], dv
    for r in [*co.values(), *tr.values(), *dv.values()]:
        assert r["status"] == "ok" and r["device"].startswith("GPU")


# ------------------------------------------- the GPU path's bookkeeping, with a stand-in kernel


class _FakeOverload:
    regs_per_thread, shared_mem_per_block, max_threads_per_block = 116, 16384, 1024


class _FakeDispatcher:
    """Stands in for a compiled ``@cuda.jit`` kernel: the figures Numba would report."""

    overloads = {("float32[::1]",): _FakeOverload()}

    def get_regs_per_thread(self):
        return {k: v.regs_per_thread for k, v in self.overloads.items()}

    def get_shared_mem_per_block(self):
        return {k: v.shared_mem_per_block for k, v in self.overloads.items()}

    def get_local_mem_per_thread(self):
        return {k: 0 for k in self.overloads}


def test_kernel_resources_rows_from_numbas_figures(monkeypatch, tmp_path):
    # Only the bookkeeping: a GPU run reads the real figures (the gpu-marked tests above).
    spec = ge.KernelSpec("fake_kernel", "tests", "direct-naive", 128)
    monkeypatch.setattr(ge.KernelSpec, "dispatcher", lambda self: _FakeDispatcher())
    monkeypatch.setattr(ge, "gpu_refusal", lambda: None)
    monkeypatch.setattr(ge, "_launch_every_kernel", lambda: None)
    monkeypatch.setattr(ge, "_device_cc", lambda: "3.5")
    monkeypatch.setattr(ge.backend, "info", lambda: SimpleNamespace(
        gpu_name="Test GPU", as_dict=lambda: {"gpu_name": "Test GPU"}))
    monkeypatch.setattr(ge, "driver_active_blocks", lambda kern, tpb, dyn=0: {
        args: 3 for args in kern.overloads})
    rows = ge.kernel_resources([spec])
    assert len(rows) == 1
    r = rows[0]
    # Table II's cuda-convnet2 figures on a K40c, blocks of 128 threads: 3 blocks, 12 warps
    assert (r["regs_per_thread"], r["smem_per_block"], r["threads_per_block"]) == (116, 16384, 128)
    assert (r["active_blocks"], r["active_warps"], r["max_warps"]) == (3, 12, 64)
    assert r["occupancy_pct"] == 18.8 and r["limiter"] == "shared memory"
    assert r["driver_active_blocks"] == 3 and r["compute_capability"] == "3.5"
    assert r["signature"] == "float32[::1]" and r["device_kind"] == "cuda"
    assert r["gpu"] == "Test GPU"
    # an unknown compute capability: figures kept, occupancy left unknown
    monkeypatch.setattr(ge, "_device_cc", lambda: "12.0")
    r = ge.kernel_resources([spec])[0]
    assert r["regs_per_thread"] == 116 and r["occupancy_pct"] is None
    assert "?" in str(ge.ResourceTable([r], "test", "test", ""))
    # rows of the same keys, ready for results.save
    ge.results.save("kernel_resources_fake", rows + [r], command="pytest", directory=tmp_path)
