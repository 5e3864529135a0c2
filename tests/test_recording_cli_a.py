"""The recording commands' shared face (throughput, conv_bench, sweep, phases): --out,
--time-limit (deadline rows), --quick, --device(s), and a bare GPU server without psutil, tqdm
or pynvml."""

from __future__ import annotations

import csv
import json
import math
import os
import pathlib
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest
from conftest import simulator_only

from helpers import results
from helpers.conv import ConvConfig
from helpers.device import backend, memory, progress
from helpers.experiments import conv_bench, phases
from helpers.experiments.sweep import presets as sweep
from helpers.experiments.throughput import sweeps as tp

ROOT = pathlib.Path(__file__).resolve().parent.parent
LIMIT = 7.5
SKIPPED = "skipped: time limit of 7.5 s reached"
PAST = {"deadline": time.monotonic() - 1.0, "time_limit": LIMIT}  # a deadline already passed
TINY = ConvConfig.from_study(b=1, i=9, f=3, k=3, s=1, c=2, name="T1")


def _read(path: pathlib.Path) -> list[dict]:
    return list(csv.DictReader(path.read_text().splitlines()))


# ------------------------------------------------------------ a bare GPU server's packages


@pytest.mark.slow
def test_helpers_import_and_report_without_psutil_tqdm_or_pynvml():
    script = textwrap.dedent("""
        import importlib.abc, sys
        BLOCKED = ("psutil", "tqdm", "pynvml")

        class Block(importlib.abc.MetaPathFinder):
            def find_spec(self, name, path=None, target=None):
                if name.split(".")[0] in BLOCKED:
                    raise ImportError(f"{name} is blocked: not on a bare GPU server")
                return None

        sys.meta_path.insert(0, Block())
        import helpers
        from helpers.device import backend
        info = backend.info()
        from helpers import results
        from helpers.device import memory
        from helpers.experiments import conv_bench, phases, sweep, throughput
        assert memory.peak_memory(lambda: bytearray(2**20), device="cpu").peak_bytes >= 0
        assert not [m for m in sys.modules if m.split(".")[0] in BLOCKED]
        print("ok", info.cpu_logical_cores, info.ram_bytes, str(info).count("\\n") > 5)
    """)
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          cwd=ROOT, env=env, timeout=600, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    ok, cores, ram, report = proc.stdout.split()[-4:]
    assert ok == "ok" and int(cores) >= 1 and report == "True"
    assert ram == "None" or int(ram) > 0  # /proc/meminfo on Linux; None where nothing tells


def test_backend_info_tells_cores_and_ram():
    info = backend.info()
    assert info.cpu_logical_cores >= 1 and info.ram_bytes > 0
    assert info.cpu_label.startswith("CPU: ")


def test_cpu_peak_without_the_kernels_peak_counter_samples_rss(monkeypatch):
    monkeypatch.setattr(memory, "_reset_hwm", lambda: False)
    result = memory.peak_memory(lambda: np.ones(2**23), device="cpu")  # 64 MiB
    assert "sampled" in result.method and result.baseline_bytes > 0
    assert result.peak_bytes > 16 * 2**20


# ----------------------------------------------------------------------------- time limits


def test_time_limit_helpers():
    assert progress.time_limit_status(LIMIT) == SKIPPED
    assert progress.time_limit_status(60) == "skipped: time limit of 60 s reached"
    assert progress.time_limit_status(None).startswith("skipped: time limit")
    assert not progress.time_up(None)
    assert progress.time_up(time.monotonic() - 1e-3)
    assert not progress.time_up(time.monotonic() + 60)


def test_throughput_past_deadline_gives_only_skipped_rows():
    rows = tp.elementwise_sweep("relu", [100, 1000], progress=False, **PAST)
    rows += tp.gemm_sweep([8], dtype="bfloat16", progress=False, **PAST)
    assert len(rows) == 6 and {r["status"] for r in rows} == {SKIPPED}
    assert all(set(r) == set(rows[0]) and math.isnan(r["median_s"]) and r["repeats"] == 0
               for r in rows)
    table1 = tp.table1_gemm_rows(**PAST)  # GPU only: empty in the simulator
    assert all(r["status"] == SKIPPED for r in table1)


def test_throughput_without_deadline_measures_everything():
    rows = tp.gemm_sweep([8, 16], min_run_time=0.005, progress=False, deadline=None)
    assert len(rows) == 4 and all(r["status"] == "ok" for r in rows)


def test_throughput_deadline_mid_sweep_skips_the_rest():
    rows = tp.gemm_sweep([8, 16], min_run_time=0.005, progress=False,
                         deadline=time.monotonic() + 1e-4, time_limit=LIMIT)
    assert rows[0]["status"] in ("ok", SKIPPED)
    assert rows[-1]["status"] == SKIPPED  # torch's rows come after NumPy's


def test_sweep_past_deadline_gives_only_skipped_rows():
    preset = sweep.Preset("t", (1, 8, 2, 3, 1), 1, range(1, 2), range(8, 9), range(2, 3),
                          range(3, 4), range(1, 2), None, "a test preset")
    rows = sweep.run_preset(preset, progress=False, **PAST)
    assert len(rows) == 5 * len(sweep.STRATEGIES) * 2
    assert {r["status"] for r in rows} == {SKIPPED}
    assert all(tuple(r) == sweep.FIELDS and r["median_ms"] is None for r in rows)
    ok = sweep.run_preset(preset, ["cpu"], ["im2col-gemm"], min_run_time=0.005, progress=False)
    assert [r["status"] for r in ok] == ["ok"] * 5


def test_conv_bench_past_deadline_gives_only_skipped_rows():
    rows = conv_bench.bench_layers(layers=(TINY,), strategies=["reference", "fft"],
                                   devices=["cpu"], **PAST)
    assert len(rows) == 4 and {r["status"] for r in rows} == {SKIPPED}
    assert all(tuple(r) == conv_bench.FIELDS and r["median_ms"] is None for r in rows)
    done = conv_bench.bench_layers(layers=(TINY,), strategies=["reference"], devices=["cpu"],
                                   min_run_time=0.005, deadline=None)
    assert [r["status"] for r in done] == ["ok", "ok"]


def test_phases_past_deadline_gives_one_skipped_row_per_job():
    rows = phases.measure((TINY,), None, TINY, "cpu", progress=False, **PAST)
    assert len(rows) == 2 + 2 * len(phases.PHASE_STRATEGIES)
    assert {r["status"] for r in rows} == {SKIPPED}
    assert all(tuple(r) == phases.FIELDS and r["ms"] is None for r in rows)
    assert [r["experiment"] for r in rows] == ["library_kernels"] * 2 + ["phases"] * 4


# -------------------------------------------------------------------------------- throughput


def test_full_gemm_sizes_include_4096():
    assert 4096 in tp.GEMM_SIZES and min(tp.GEMM_SIZES) >= 64


@simulator_only
def test_numba_gemm_backends_are_not_listed_in_the_simulator():
    assert tp.backends_for("cuda", "gemm") == []
    assert "numba-tiled" not in tp.backends_for("cpu", "gemm")


@pytest.mark.parametrize("text, expected", [("cpu", ["cpu"]), ("cpu, cuda,cpu", ["cpu", "cuda"])])
def test_throughput_devices_argument(text, expected):
    assert tp._devices_arg(text) == expected
    with pytest.raises(ValueError, match="--devices"):
        tp._devices_arg("cpu,tpu")


@simulator_only
def test_throughput_command_without_a_gpu(tmp_path, capsys):
    assert tp.main(["--devices", "cuda", "--out", str(tmp_path)]) == 1
    assert not list(tmp_path.iterdir()) and "no GPU" in capsys.readouterr().out
    assert tp.main(["--quick", "--devices", "cpu", "--out", str(tmp_path), "--time-limit",
                    "1e-6"]) == 0
    [path] = tmp_path.glob(f"{tp.PREFIX}*.csv")
    rows = _read(path)
    assert rows and {r["status"] for r in rows} == {"skipped: time limit of 1e-06 s reached"}
    with pytest.raises(SystemExit):
        tp.main(["--time-limit", "0"])


@pytest.mark.gpu
@pytest.mark.skipif(backend.MODE != "gpu", reason="needs a GPU")
@pytest.mark.parametrize("name", ["numba-tiled", "numba-naive"])
def test_gpu_numba_gemm_rows_beside_cublas(name):
    assert tp.backends_for("cuda", "gemm") == ["torch", "numba-tiled", "numba-naive"]
    rows = tp.gemm_sweep([100, 256], devices=["cuda"], backends=[name, "torch"],
                         min_run_time=0.01, progress=False)
    assert [(r["backend"], r["size"]) for r in rows] == [
        ("torch", 100), ("torch", 256), (name, 100), (name, 256)]
    assert all(r["status"] == "ok" and r["gflop_s"] > 0 for r in rows)
    half = tp.gemm_sweep([64], devices=["cuda"], dtype="float16", backends=[name],
                         progress=False)
    assert half[0]["status"].startswith("unsupported")


@pytest.mark.gpu
@pytest.mark.skipif(backend.MODE != "gpu", reason="needs a GPU")
@pytest.mark.parametrize("name", ["numba-tiled", "numba-naive"])
def test_gpu_numba_gemm_call_computes_the_product(name):
    call = tp._gemm_call(name, 100, "float32", "cuda")  # operands already on the GPU
    call()
    held = dict(zip(call.__code__.co_freevars, (c.cell_contents for c in call.__closure__)))
    rng = np.random.default_rng(100)  # the operands _gemm_call made
    a = rng.standard_normal((100, 100), dtype=np.float32)
    b = rng.standard_normal((100, 100), dtype=np.float32)
    np.testing.assert_allclose(held["d_c"].copy_to_host(), a @ b, rtol=1e-4, atol=1e-3)


# -------------------------------------------------------------------------------- conv_bench


@pytest.mark.slow
def test_conv_bench_quick_saves_conv5_to_out(tmp_path, capsys):
    assert conv_bench.main(["--quick", "--device", "cpu", "--save", "--out", str(tmp_path)]) == 0
    rows = _read(tmp_path / "conv_table1_b1_cpu.csv")
    assert {r["layer"] for r in rows} == {"Conv5"} and {r["b"] for r in rows} == {"1"}
    assert {r["pass"] for r in rows} == {"forward", "forward+backward"}
    assert all(r["device"].startswith("CPU") for r in rows)
    assert any(r["status"] == "ok" for r in rows)
    assert (tmp_path / "conv_table1_b1_cpu.json").exists()


@simulator_only
def test_conv_bench_cuda_without_a_gpu_saves_nothing(tmp_path, capsys):
    assert conv_bench.main(["--device", "cuda", "--save", "--out", str(tmp_path)]) == 1
    assert not list(tmp_path.iterdir()) and "no GPU" in capsys.readouterr().out
    assert conv_bench.main(["--time-limit", "-1"]) == 2


# ------------------------------------------------------------------------------------- sweep


def test_smoke_preset_is_small_and_has_no_table1():
    preset = sweep.PRESETS["smoke"]
    pts = preset.points()
    assert preset.table1_batch is None and len(pts) == 10
    assert not [p for p in pts if p.sweep == "table1"]
    assert {p.sweep for p in pts} == {"batch", "input", "filters", "kernel", "stride"}
    assert all(p.cfg.c == 3 for p in pts)


@pytest.mark.parametrize("values, expected", [
    (None, None), (["cpu"], ["cpu"]), (["cpu,cuda"], ["cpu", "cuda"]),
    (["cuda", "cpu", "cuda"], ["cuda", "cpu"])])
def test_sweep_device_argument(values, expected):
    assert sweep._devices_arg(values) == expected


def test_sweep_command_with_device_and_time_limit(tmp_path, capsys):
    out = tmp_path / "s.csv"
    assert sweep.main(["--preset", "smoke", "--out", str(out), "--device", "cpu",
                       "--time-limit", "1e-6", "--no-progress"]) == 0
    rows = _read(out)
    assert len(rows) == 10 * len(sweep.STRATEGIES)
    assert {r["status"] for r in rows} == {"skipped: time limit of 1e-06 s reached"}
    assert json.loads(out.with_suffix(".json").read_text())["preset"] == "smoke"
    for bad in (["--device", "tpu"], ["--time-limit", "0"]):
        with pytest.raises(SystemExit):
            sweep.main(["--preset", "smoke", "--out", str(out), *bad])


# ------------------------------------------------------------------------------------ phases


def test_phases_measure_rows_on_the_cpu():
    small = ConvConfig.from_study(b=1, i=12, f=4, k=5, s=1, c=3, name="small")
    rows = phases.measure((TINY,), None, small, "cpu", top=3, repeats=1, progress=False)
    assert all(tuple(r) == phases.FIELDS and r["status"] == "ok" for r in rows)
    lib = [r for r in rows if r["experiment"] == "library_kernels"]
    assert {r["pass"] for r in lib} == {"forward", "forward+backward"}
    assert all(1 <= r["rank"] <= 3 and r["name"] and r["strategy"] is None for r in lib)
    steps = [r for r in rows if r["experiment"] == "phases"]
    assert {(r["strategy"], r["pass"]) for r in steps} == {
        (s, p) for s in phases.PHASE_STRATEGIES for p in ("forward", "backward")}
    assert all(r["layer"] == "small" and r["rank"] is None for r in steps)
    for strategy in phases.PHASE_STRATEGIES:
        share = sum(r["share"] for r in steps if r["strategy"] == strategy
                    and r["pass"] == "forward")
        assert share == pytest.approx(1.0)


def test_phases_figure4_is_the_studys_configuration():
    assert phases.FIGURE4.study == (64, 128, 64, 11, 1) and phases.FIGURE4.c == 3


def test_phases_bad_arguments():
    with pytest.raises(ValueError, match="experiment must be one of"):
        phases.recorded("hotspots")
    with pytest.raises(ValueError, match="batch must be >= 1"):
        phases.measure(batch=0, device="cpu")
    with pytest.raises(ValueError, match="device must be"):
        phases.measure(device="tpu")
    if backend.MODE != "gpu":
        with pytest.raises(ValueError, match="needs a GPU"):
            phases.measure(device="cuda")


@simulator_only
def test_phases_command_without_a_gpu(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(results, "RESULTS_DIR", tmp_path / "results")
    assert phases.main(["--save"]) == 1
    assert phases.main([]) == 0
    assert phases.main(["--quick", "--save"]) == 1  # results/ takes GPU runs only
    assert "--out" in capsys.readouterr().out
    assert not (tmp_path / "results").exists()
    out = tmp_path / "out"
    assert phases.main(["--quick", "--save", "--out", str(out)]) == 0
    [path] = out.glob(f"{phases.PREFIX}*.csv")
    rows = _read(path)
    assert list(rows[0]) == list(phases.FIELDS)
    assert {r["experiment"] for r in rows} == set(phases.EXPERIMENTS)
    assert {r["layer"] for r in rows if r["experiment"] == "library_kernels"} == {"Conv5"}
    meta = json.loads(path.with_suffix(".json").read_text())
    assert meta["command"].startswith("python -m helpers.experiments.phases --quick")


def test_phases_recorded_reads_gpu_rows_of_one_experiment(tmp_path, monkeypatch):
    monkeypatch.setattr(results, "RESULTS_DIR", tmp_path)
    assert not phases.recorded("phases") and phases.COMMAND in phases.recorded("phases").note
    row = dict.fromkeys(phases.FIELDS, "")
    rows = [dict(row, experiment=e, device_kind=k, status="ok", ms=1.5)
            for e in phases.EXPERIMENTS for k in ("cuda", "cpu")]
    results.save(f"{phases.PREFIX}test-gpu", rows, directory=tmp_path)
    rec = phases.recorded("library_kernels")
    assert len(rec.rows) == 1 and rec.rows[0]["device_kind"] == "cuda"
    assert rec.rows[0]["ms"] == 1.5
