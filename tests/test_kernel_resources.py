"""helpers.experiments.kernel_resources: the study's Table II as reported, the bookkeeping of
the resource table (with a stand-in kernel), the recorded tables and the no-GPU behaviour.
GPU-only checks are marked ``gpu``."""

import json
import time
from types import SimpleNamespace

import pytest
from conftest import simulator_only

import helpers  # noqa: F401  (decides simulator vs GPU before numba.cuda is imported)
from helpers import kernels, results
from helpers.conv import direct, gemm
from helpers.device import backend
from helpers.experiments import kernel_resources as kr
from helpers.experiments import memory_access as ma
from helpers.occupancy import SM_LIMITS

# --------------------------------------------------------------------------- the study


def test_the_studys_table_ii_as_reported():
    table = {r["implementation"]: (r["regs_per_thread"], r["smem_kb"]) for r in kr.STUDY_TABLE_II}
    assert table == {"Caffe": (86, 8.5), "cuDNN": (80, 8.4), "Torch-cunn": (84, 8.1),
                     "Theano-CorrMM": (72, 7.0), "cuda-convnet2": (116, 16.0),
                     "fbfft": (106, 10.0), "Theano-fft": (2, 4.5)}
    assert "14-22 %" in kr.STUDY_FIGURE_6["achieved occupancy"]
    assert "66-81 %" in kr.STUDY_FIGURE_6["warp execution efficiency"]


def test_kernel_specs_name_real_kernels():
    names = {k.name for k in kernels.KERNELS}
    assert {"direct_naive_kernel", "direct_tiled_kernel", "direct_dx_kernel", "direct_dw_kernel",
            "im2col_kernel", "col2im_kernel", "gemm_naive_kernel",
            "gemm_tiled_kernel", "strided_load_kernel", "branch_kernel"} <= names
    for spec in kernels.KERNELS:
        assert hasattr(spec.dispatcher(), "py_func"), spec.name
        assert 32 <= spec.threads_per_block <= 1024
    # the memory experiments' kernels are the ones memory_access launches
    assert kernels.spec("transpose_shared_kernel").dispatcher() is ma.transpose_shared_kernel


# ----------------------------------------------------------------- without a GPU


@simulator_only
def test_no_gpu_means_no_resources(tmp_path):
    with pytest.raises(ma.GpuRequired, match="kernel_resources --save"):
        kr.measure()
    with pytest.raises(ma.GpuRequired):
        kr.compare_with_driver()
    with pytest.raises(ma.GpuRequired):
        kr.driver_active_blocks(ma.strided_load_kernel, 128)
    with pytest.raises(ma.GpuRequired, match="no CUDA GPU"):
        kr.save_kernel_resources(tmp_path)
    rec = kr.recorded(tmp_path)
    assert not rec and rec.rows == []
    assert "python -m helpers.experiments.kernel_resources --save" in rec.note
    assert kr.format_table(rec.rows, rec.note) == rec.note


def _row(**kw):
    return dict({"kernel": "gemm_tiled_kernel", "module": "helpers.conv.gemm",
                 "family": "im2col-tiled", "signature": "array(float32, 2d, C) x 3",
                 "threads_per_block": 256, "regs_per_thread": 40, "smem_per_block": 2048,
                 "local_mem_per_thread": 0, "active_blocks": 6, "active_warps": 48,
                 "max_warps": 64, "occupancy_pct": 75.0, "limiter": "registers",
                 "driver_active_blocks": 6, "gpu": "Test GPU", "compute_capability": "9.0",
                 "device": "GPU: Test GPU", "device_kind": "cuda"}, **kw)


def save_as(monkeypatch, directory, name, rows, gpu, date):
    """Save rows as if measured on ``gpu`` on ``date`` (ISO 8601)."""
    monkeypatch.setattr(results.backend, "info", lambda: SimpleNamespace(
        as_dict=lambda: {"gpu_name": gpu}))
    _, meta = results.save(name, rows, command="pytest", directory=directory)
    meta.write_text(json.dumps(dict(json.loads(meta.read_text()), date=date)))


def test_a_recorded_resource_table_is_read_and_labelled(tmp_path, monkeypatch):
    save_as(monkeypatch, tmp_path, "kernel_resources_test-gpu", [_row()], "Test GPU",
            "2026-01-02T00:00:00+00:00")
    rec = kr.recorded(tmp_path)
    assert rec.rows[0]["regs_per_thread"] == 40 and rec.rows[0]["source"] == "reference"
    assert rec.rows[0]["device"] == "GPU: Test GPU, 2026-01-02"
    assert rec.datasets[0].name == "kernel_resources_test-gpu"
    assert rec.note == "recorded in results/ on GPU: Test GPU (2026-01-02)"
    text = kr.format_table(rec.rows, rec.note)
    assert text.startswith(rec.note) and "Our kernels on GPU: Test GPU, 2026-01-02" in text
    assert "gemm_tiled_kernel" in text and "48 of 64" in text and "75.0 %" in text
    # another GPU recorded later: the newest by default, every GPU on request
    later = [_row(gpu="A GPU", regs_per_thread=32)]
    save_as(monkeypatch, tmp_path, "kernel_resources_a-gpu", later, "A GPU",
            "2026-03-04T00:00:00+00:00")
    assert [r["regs_per_thread"] for r in kr.recorded(tmp_path).rows] == [32]
    every = kr.recorded(tmp_path, every_gpu=True)
    assert len(every.rows) == 2 and len(every.datasets) == 2
    assert kr.format_table(every.rows).count("Our kernels on") == 2


@simulator_only
def test_command_line_without_a_gpu(capsys, monkeypatch, tmp_path):
    monkeypatch.setattr(results, "RESULTS_DIR", tmp_path)
    assert kr.main([]) == results.REFUSED
    out = capsys.readouterr().out
    assert "no CUDA GPU" in out and "kernel_resources --save" in out
    assert kr.main(["--save"]) == results.REFUSED
    assert not list(tmp_path.iterdir())


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


def test_measure_rows_from_numbas_figures(monkeypatch, tmp_path):
    # Only the bookkeeping: a GPU run reads the real figures (the gpu-marked tests below).
    spec = kernels.KernelSpec("fake_kernel", "tests", "direct-naive", 128)
    monkeypatch.setattr(kernels.KernelSpec, "dispatcher", lambda self: _FakeDispatcher())
    monkeypatch.setattr(kr, "gpu_refusal", lambda: None)
    monkeypatch.setattr(kr, "_launch_every_kernel", lambda deadline=None: 0)
    monkeypatch.setattr(kr, "_device_cc", lambda: "3.5")
    monkeypatch.setattr(kr.backend, "info", lambda: SimpleNamespace(
        gpu_name="Test GPU", as_dict=lambda: {"gpu_name": "Test GPU"}))
    monkeypatch.setattr(kr, "driver_active_blocks", lambda kern, tpb, dyn=0: {
        args: 3 for args in kern.overloads})
    rows = kr.measure([spec])
    assert len(rows) == 1
    r = rows[0]
    # Table II's cuda-convnet2 figures on a K40c, blocks of 128 threads: 3 blocks, 12 warps
    assert (r["regs_per_thread"], r["smem_per_block"], r["threads_per_block"]) == (116, 16384, 128)
    assert (r["active_blocks"], r["active_warps"], r["max_warps"]) == (3, 12, 64)
    assert r["occupancy_pct"] == 18.8 and r["limiter"] == "shared memory"
    assert r["driver_active_blocks"] == 3 and r["compute_capability"] == "3.5"
    assert r["signature"] == "float32[::1]" and r["device_kind"] == "cuda"
    assert r["gpu"] == "Test GPU" and r["device"] == "GPU: Test GPU"
    # an unknown compute capability: figures kept, occupancy left unknown
    monkeypatch.setattr(kr, "_device_cc", lambda: "12.0")
    r = kr.measure([spec])[0]
    assert r["regs_per_thread"] == 116 and r["occupancy_pct"] is None
    assert "?" in kr.format_table([r])
    # rows of the same keys, ready for results.save, and read back as recorded
    monkeypatch.setattr(kr, "measure", lambda deadline=None: rows + [r])
    paths = kr.save_kernel_resources(tmp_path)
    assert paths[0].name == "kernel_resources_test-gpu.csv"
    assert len(kr.recorded(tmp_path).rows) == 2
    # the command line saves what it was given, not a fixed command
    monkeypatch.setattr(kr, "gpu_refusal", lambda: None)
    monkeypatch.setattr(kr, "_launch_every_kernel", lambda deadline=None: 0)
    monkeypatch.setattr(kr, "KERNELS", [spec])
    assert kr.main(["--save", "--out", str(tmp_path), "--time-limit", "30"]) == 0
    meta = json.loads(paths[1].read_text())
    assert meta["command"] == ("python -m helpers.experiments.kernel_resources --save --out "
                               f"{tmp_path} --time-limit 30")


# ---------------------------------------------------------------------------- on a GPU


@pytest.mark.gpu
@pytest.mark.skipif(backend.MODE != "gpu", reason="needs a real CUDA GPU")
def test_resources_on_the_gpu_and_the_driver_agrees():
    rows = kr.measure()
    by = {r["kernel"]: r for r in rows}
    assert set(by) == {k.name for k in kernels.KERNELS}
    for r in rows:
        assert 1 <= r["regs_per_thread"] <= 255, r
        if r["compute_capability"] in SM_LIMITS:
            assert r["active_blocks"] == r["driver_active_blocks"], r
    # static shared memory: exactly the arrays the kernels declare
    assert by["transpose_shared_kernel"]["smem_per_block"] == 4 * 32 * 33
    assert by["gemm_tiled_kernel"]["smem_per_block"] == 2 * 4 * gemm.TILE * gemm.TILE
    assert by["direct_tiled_kernel"]["smem_per_block"] == direct.TILED_SHARED_BYTES
    assert by["strided_load_kernel"]["smem_per_block"] == 0
    assert "Our kernels on GPU" in kr.format_table(rows)


@pytest.mark.gpu
@pytest.mark.skipif(backend.MODE != "gpu", reason="needs a real CUDA GPU")
def test_occupancy_calculation_matches_the_driver():
    rows = kr.compare_with_driver()
    assert rows
    wrong = [r for r in rows if not r["agree"]]
    assert not wrong, wrong[:5]


# ------------------------------------------------------------------------------ --out


@simulator_only
def test_command_line_save_without_a_gpu_writes_nothing_into_out(capsys, tmp_path):
    out_dir = tmp_path / "out"
    assert kr.main(["--save", "--out", str(out_dir)]) == results.REFUSED
    assert capsys.readouterr().out.startswith("nothing saved: no CUDA GPU")
    assert not out_dir.exists()


@pytest.mark.gpu
@pytest.mark.skipif(backend.MODE != "gpu", reason="needs a real CUDA GPU")
def test_gpu_command_line_saves_into_out(tmp_path):
    assert kr.main(["--save", "--out", str(tmp_path)]) == 0
    assert [p.name for p in tmp_path.glob("kernel_resources_*.csv")]
    assert kr.recorded(tmp_path).rows


# ------------------------------------------------------------------------------ --time-limit


def test_no_kernel_is_launched_past_the_deadline(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("a kernel was launched past the deadline")

    class Refuse:
        def __getattr__(self, name):
            return refuse

    for module in ("direct", "depthwise", "unroll", "winograd", "gemm", "ew"):
        monkeypatch.setattr(kr, module, Refuse())
    for name in ("explain_coalescing", "explain_banks", "explain_divergence"):
        monkeypatch.setattr(kr, name, refuse)
    assert kr._launch_every_kernel(deadline=time.monotonic() - 1.0) == 22


@simulator_only
@pytest.mark.slow
def test_every_registered_kernel_is_launched_so_that_the_gpu_compiles_it(monkeypatch):
    # measure() reads the figures of compiled kernels: one never launched has no row
    launched = set()
    kind = type(kernels.KERNELS[0].dispatcher())
    getitem = kind.__getitem__

    def record(self, config):
        launched.add(id(self))
        return getitem(self, config)

    monkeypatch.setattr(kind, "__getitem__", record)
    assert kr._launch_every_kernel() == 0
    missing = [k.name for k in kernels.KERNELS if id(k.dispatcher()) not in launched]
    assert not missing, missing


def test_a_time_limit_that_is_not_positive_is_refused(capsys):
    with pytest.raises(SystemExit) as exc:
        kr.main(["--save", "--time-limit", "-1"])
    assert exc.value.code == 2 and "--time-limit must be > 0" in capsys.readouterr().err
