"""helpers.results: CSV rows beside JSON metadata, saved and loaded back."""

from __future__ import annotations

import argparse
import importlib
import json
import math
import os

import numpy as np
import pytest

from helpers.device import backend
from helpers import results


@pytest.fixture
def rows(rng):
    out = []
    for size in sorted(int(n) for n in rng.integers(1, 10**9, size=5)):
        t = float(rng.uniform(1e-6, 1.0))
        out.append({"backend": str(rng.choice(["numpy", "torch"])), "size": size,
                    "median_s": t, "gb_s": 8 * size / t / 1e9, "status": "ok",
                    "note": "M=96 N=128 K=363"})
    out[-1]["median_s"] = math.nan
    out[-1]["status"] = "skipped: estimated 3.2 s per call"
    return out


def test_save_then_load_round_trip(tmp_path, rows):
    csv_path, json_path = results.save("01_test_cpu", rows, command="pytest", directory=tmp_path)
    assert csv_path == tmp_path / "01_test_cpu.csv" and csv_path.is_file()
    assert json_path == tmp_path / "01_test_cpu.json" and json_path.is_file()

    ds = results.load("01_test_cpu", tmp_path)
    assert ds.name == "01_test_cpu"
    assert len(ds.rows) == len(rows)
    for got, want in zip(ds.rows, rows):
        assert list(got) == list(want)
        assert type(got["size"]) is int and got["size"] == want["size"]
        assert type(got["median_s"]) is float
        if math.isnan(want["median_s"]):
            assert math.isnan(got["median_s"])
        else:
            assert got["median_s"] == want["median_s"]  # repr round-trips floats exactly
            assert got["gb_s"] == want["gb_s"]
        assert got["backend"] == want["backend"] and got["status"] == want["status"]
        assert got["note"] == want["note"]


def test_meta_records_the_environment(tmp_path, rows):
    _, json_path = results.save("run", rows, command="python -m helpers.experiments.throughput --quick",
                                directory=tmp_path)
    meta = json.loads(json_path.read_text())
    ds = results.load("run", tmp_path)
    assert ds.meta == meta
    assert meta["name"] == "run"
    assert meta["rows"] == len(rows)
    assert meta["command"] == "python -m helpers.experiments.throughput --quick"
    assert meta["date"][:4].isdigit() and "T" in meta["date"]
    assert ds.date == meta["date"]
    env = meta["environment"]
    assert env["mode"] == backend.MODE
    assert env["cpu_model"] == backend.info().cpu_model
    assert "numpy" in env["versions"]
    if backend.MODE != "gpu":
        assert ds.device == f"CPU: {env['cpu_model']}"


def test_dataset_device_prefers_the_gpu(tmp_path, rows):
    results.save("gpu_run", rows, directory=tmp_path)
    meta_path = tmp_path / "gpu_run.json"
    meta = json.loads(meta_path.read_text())
    meta["environment"].update(gpu_name="NVIDIA H100 80GB HBM3", driver_version=None,
                               driver_cuda_version=None)
    meta_path.write_text(json.dumps(meta))
    ds = results.load("gpu_run", tmp_path)
    assert ds.device == "GPU: NVIDIA H100 80GB HBM3"
    assert ds.provenance == f"GPU: NVIDIA H100 80GB HBM3 ({meta['date'][:10]})"


def test_gpu_labels_name_the_driver_cuda_and_date(tmp_path, rows):
    results.save("gpu_run", rows, directory=tmp_path)
    meta_path = tmp_path / "gpu_run.json"
    meta = json.loads(meta_path.read_text())
    meta["date"] = "2026-01-02T03:04:05+00:00"
    meta["environment"].update(gpu_name="NVIDIA H100 80GB HBM3", driver_version="550.54.15",
                               driver_cuda_version="12.4")
    meta_path.write_text(json.dumps(meta))
    ds = results.load("gpu_run", tmp_path)
    assert ds.device == "GPU: NVIDIA H100 80GB HBM3 (driver 550.54.15)"
    assert ds.provenance == "GPU: NVIDIA H100 80GB HBM3 (driver 550.54.15, CUDA 12.4, 2026-01-02)"
    rec = results.recorded("gpu_", "make it", directory=tmp_path)
    assert {r["device"] for r in rec.rows} == {
        "GPU: NVIDIA H100 80GB HBM3 (driver 550.54.15), 2026-01-02"}
    assert rec.note == ("recorded in results/ on GPU: NVIDIA H100 80GB HBM3 "
                        "(driver 550.54.15, CUDA 12.4, 2026-01-02)")


def test_default_command_is_this_process(tmp_path, rows):
    import sys

    _, json_path = results.save("cmd", rows, directory=tmp_path)
    assert json.loads(json_path.read_text())["command"] == " ".join(sys.argv)


def test_save_creates_the_directory(tmp_path, rows):
    target = tmp_path / "a" / "b"
    results.save("x", rows, directory=target)
    assert (target / "x.csv").is_file()


def test_find_by_prefix(tmp_path, rows):
    for name in ("01_throughput_b", "01_throughput_a", "02_conv_a", "01_throughputs"):
        results.save(name, rows, directory=tmp_path)
    (tmp_path / "01_throughput_orphan.csv").write_text("a\n1\n")  # no JSON: ignored
    found = results.find("01_throughput_", tmp_path)
    assert [d.name for d in found] == ["01_throughput_a", "01_throughput_b"]
    assert all(len(d.rows) == len(rows) for d in found)
    assert [d.name for d in results.find("01_throughput", tmp_path)] == [
        "01_throughput_a", "01_throughput_b", "01_throughputs"]
    assert results.find("03", tmp_path) == []
    assert results.find("01", tmp_path / "missing") == []


def test_load_missing_raises(tmp_path):
    with pytest.raises(FileNotFoundError):
        results.load("nothing", tmp_path)


def test_save_rejects_empty_rows(tmp_path):
    with pytest.raises(ValueError, match="empty"):
        results.save("empty", [], directory=tmp_path)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("bad", [
    [{"a": 1, "b": 2}, {"a": 1}],
    [{"a": 1, "b": 2}, {"a": 1, "c": 2}],
    [{"a": 1, "b": 2}, {"b": 2, "a": 1}],
])
def test_save_rejects_mismatched_keys(tmp_path, bad):
    with pytest.raises(ValueError, match="same keys"):
        results.save("bad", bad, directory=tmp_path)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("text, expected", [
    ("NVIDIA H100 80GB HBM3", "nvidia-h100-80gb-hbm3"),
    ("Tesla V100-SXM2-16GB", "tesla-v100-sxm2-16gb"),
    ("AMD EPYC 7B13 64-Core Processor", "amd-epyc-7b13-64-core-processor"),
    ("Intel(R) Xeon(R) CPU @ 2.20GHz", "intel-r-xeon-r-cpu-2-20ghz"),
    ("  --Odd__name!!  ", "odd-name"),
])
def test_slug(text, expected):
    assert results.slug(text) == expected


def test_slug_is_file_name_safe(rng):
    chars = np.array(list("abcXYZ019 -_./\\:*?\"<>|()@#"))
    for _ in range(50):
        text = "".join(rng.choice(chars, size=int(rng.integers(1, 30))))
        s = results.slug(text)
        assert all(c.islower() or c.isdigit() or c == "-" for c in s)
        assert not s.startswith("-") and not s.endswith("-") and "--" not in s


def _gpu_dataset(tmp_path, gpu_name="NVIDIA H100 80GB HBM3"):
    rows = [
        {"experiment": "gemm", "op": "gemm", "device_kind": "cuda", "dtype": "float32",
         "size": 1024, "device": "GPU: x"},
        {"experiment": "gemm", "op": "gemm", "device_kind": "cuda", "dtype": "bfloat16",
         "size": 1024, "device": "GPU: x"},
        {"experiment": "gemm", "op": "gemm", "device_kind": "cpu", "dtype": "float32",
         "size": 1024, "device": "CPU: y"},
    ]
    results.save("01_throughput_test", rows, directory=tmp_path)
    meta_path = tmp_path / "01_throughput_test.json"
    meta = json.loads(meta_path.read_text())
    meta["environment"]["gpu_name"] = gpu_name
    meta_path.write_text(json.dumps(meta))
    return results.load("01_throughput_test", tmp_path)


def test_recorded_keeps_gpu_rows_that_match_and_labels_them(tmp_path):
    ds = _gpu_dataset(tmp_path)
    rec = results.recorded("01_throughput_", "make it", directory=tmp_path, dtype="float32")
    assert len(rec.rows) == 1 and rec and [d.name for d in rec.datasets] == [ds.name]
    assert rec.rows[0]["source"] == "reference"
    assert rec.rows[0]["device"] == f"GPU: NVIDIA H100 80GB HBM3, {ds.date[:10]}"
    assert rec.note == f"recorded in results/ on GPU: NVIDIA H100 80GB HBM3 ({ds.date[:10]})"
    # no filter: both GPU rows, never the CPU row; gpu_only=False keeps it
    assert len(results.recorded("01_throughput_", "x", directory=tmp_path).rows) == 2
    assert len(results.recorded("01_throughput_", "x", directory=tmp_path, gpu_only=False).rows) == 3
    # rows without device_kind are told apart by their device label
    results.save("conv_table1_b1_gpu", [{"strategy": "fft", "device": "GPU: y"},
                                        {"strategy": "fft", "device": "CPU: z"}], directory=tmp_path)
    assert [r["strategy"] for r in results.recorded("conv_table1_", "x",
                                                     directory=tmp_path).rows] == ["fft"]
    assert results.load(ds.name, tmp_path).rows[0]["device"] == "GPU: x"  # files untouched


def test_recorded_without_a_match_says_how_to_record(tmp_path):
    _gpu_dataset(tmp_path)
    rec = results.recorded("01_throughput_", "python -m x --save", directory=tmp_path,
                           dtype="float16")
    assert not rec and rec.rows == [] and rec.datasets == []
    assert rec.note == ("nothing recorded in results/ yet: run `python -m x --save` on a GPU "
                        "machine")
    assert not results.recorded("nothing_", "c", directory=tmp_path / "missing")
    with pytest.raises(ValueError, match="prefix and command"):
        results.recorded("", "c")



def test_save_adds_extra_fields_but_never_over_the_provenance(tmp_path):
    results.save("x", [{"a": 1}], directory=tmp_path, extra={"preset": "p", "seconds": 2.5})
    meta = results.load("x", tmp_path).meta
    assert (meta["preset"], meta["seconds"], meta["name"]) == ("p", 2.5, "x")
    with pytest.raises(ValueError, match=r"extra may not set \['date'\]"):
        results.save("y", [{"a": 1}], directory=tmp_path, extra={"date": "never"})
    assert not (tmp_path / "y.csv").exists()


def test_writable_folder_and_file_refuse_paths_that_cannot_be_written(tmp_path):
    a_file = tmp_path / "a_file"
    a_file.write_text("")
    assert results.writable_folder(str(tmp_path / "new" / "deeper")) == tmp_path / "new" / "deeper"
    assert not (tmp_path / "new").exists(), "checking must not create the folder"
    assert results.writable_file(str(tmp_path / "x.csv")) == tmp_path / "x.csv"
    for call, path, reason in [
            (results.writable_folder, a_file, "exists and is not a folder"),
            (results.writable_folder, a_file / "sub", "is not a folder"),
            (results.writable_file, tmp_path, "is a folder"),
            (results.writable_file, a_file / "x.csv", "is not a folder")]:
        with pytest.raises(argparse.ArgumentTypeError, match=reason):
            call(str(path))
    a_file.write_text("kept")
    assert results.writable_file(str(a_file)) == a_file and a_file.read_text() == "kept"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a_file"]  # the probe left nothing


@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="needs Linux's /proc")
def test_a_file_system_that_refuses_files_is_refused_even_for_root():
    """Permission bits do not stop root (a container, Colab), but no file can be created in
    /proc: the check tries, rather than trusting os.access."""
    for call, path in [(results.writable_file, "/proc/workbook-check/out.csv"),
                       (results.writable_folder, "/proc/workbook-check"),
                       (results.writable_folder, "/proc")]:
        with pytest.raises(argparse.ArgumentTypeError, match="no file can be created in /proc"):
            call(path)


def _while_parsing(excinfo) -> bool:
    """The exit came from inside argparse's reading of the command line, so before the command
    measured or wrote anything (a check of where, not of how long it took)."""
    return any(entry.frame.code.name in ("parse_args", "parse_known_args")
               for entry in excinfo.traceback)


def test_while_parsing_tells_a_refusal_at_parsing_from_a_later_one(capsys):
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int)
    with pytest.raises(SystemExit) as early:
        parser.parse_args(["--n", "x"])
    parser.parse_args(["--n", "1"])
    with pytest.raises(SystemExit) as late:
        parser.error("refused after parsing")
    assert _while_parsing(early) and not _while_parsing(late)


@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="needs Linux's /proc")
def test_the_sweep_refuses_an_out_in_proc_before_measuring(capsys):
    main = importlib.import_module("helpers.experiments.sweep").main
    with pytest.raises(SystemExit) as exc:
        main(["--preset", "paper", "--out", "/proc/workbook-check/sweep.csv"])
    assert exc.value.code == 2 and _while_parsing(exc)
    assert "no file can be created in /proc" in capsys.readouterr().err


COMMANDS_WITH_OUT = [
    ("sweep", ["--preset", "smoke", "--out", "{bad}/sweep.csv"]),
    ("conv_bench", ["--quick", "--save", "--out", "{bad}"]),
    ("hotspots", ["--save", "--out", "{bad}"]),
    ("kernel_resources", ["--save", "--out", "{bad}"]),
    ("memory_access", ["--save", "--out", "{bad}"]),
    ("phases", ["--save", "--out", "{bad}"]),
    ("training.throughput", ["--quick", "--save", "--out", "{bad}"]),
    ("transfers", ["--save", "--out", "{bad}"]),
    ("gpu_reference", ["--out", "{bad}"]),
    ("throughput", ["--out", "{bad}"]),
]


@pytest.mark.parametrize("module,argv", COMMANDS_WITH_OUT, ids=[m for m, _ in COMMANDS_WITH_OUT])
def test_an_unwritable_out_is_refused_before_anything_is_measured(module, argv, tmp_path, capsys):
    a_file = tmp_path / "a_file"
    a_file.write_text("")
    main = importlib.import_module(f"helpers.experiments.{module}").main
    with pytest.raises(SystemExit) as exc:
        main([a.format(bad=a_file / "sub") for a in argv])
    assert exc.value.code == 2 and _while_parsing(exc), module
    assert "--out" in capsys.readouterr().err


def test_cpu_rows_of_a_gpu_machine_keep_their_cpu_label(tmp_path):
    # the data-parallel ranks ran on the CPU of a machine that has a GPU: the file's environment
    # names the GPU, but these rows were not measured on it
    results.save("parallel_host", [
        {"experiment": "ddp", "device_kind": "cpu", "device": "CPU: Xeon (16 cores)", "x": 1},
        {"experiment": "ddp", "device_kind": "cpu", "device": "CPU: Xeon (16 cores)", "x": 2}],
        directory=tmp_path)
    meta_path = tmp_path / "parallel_host.json"
    meta = json.loads(meta_path.read_text())
    meta["environment"].update(gpu_name="NVIDIA H100 80GB HBM3", cpu_model="Xeon")
    meta_path.write_text(json.dumps(meta))
    rec = results.recorded("parallel_", "c", gpu_only=False, directory=tmp_path)
    day = rec.datasets[0].date[:10]
    assert [r["device"] for r in rec.rows] == [f"CPU: Xeon (16 cores), {day}"] * 2
    assert rec.note == (f"recorded in results/ on CPU: Xeon (16 cores) ({day}; a machine whose "
                        "GPU is NVIDIA H100 80GB HBM3)")
    assert "GPU:" not in rec.note
    assert not results.recorded("parallel_", "c", directory=tmp_path)   # no GPU rows at all
