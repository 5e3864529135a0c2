"""The GPU reference run (``make gpu-reference``): its refusal without a GPU, its dry run on this
CPU through every part (without psutil, tqdm, nvidia-ml-py or torchvision), resuming, budgets,
the archive and the headline ratios."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys
import tarfile

import pytest
from conftest import simulator_only

from helpers import results
from helpers.experiments import gpu_reference as ref
from helpers.experiments import gpu_reference_summary as summary

ROOT = pathlib.Path(__file__).resolve().parent.parent

#: Optional packages the recording path must do without (a bare GPU server may lack them).
OPTIONAL = ("psutil", "tqdm", "pynvml", "torchvision")


def _blocked(tmp: pathlib.Path) -> pathlib.Path:
    """A folder that, first on PYTHONPATH, makes importing each optional package fail."""
    for name in OPTIONAL:
        pkg = tmp / name
        pkg.mkdir(parents=True)
        (pkg / "__init__.py").write_text(f"raise ImportError('{name} is blocked by the test')\n")
    return tmp


def _results_snapshot() -> dict[str, float]:
    folder = results.RESULTS_DIR
    return {p.name: p.stat().st_mtime for p in folder.iterdir()} if folder.is_dir() else {}


@pytest.fixture(scope="module")
def dry_run(tmp_path_factory):
    """One dry run of every part into a scratch folder, with the optional packages blocked."""
    tmp = tmp_path_factory.mktemp("gpu_reference")
    out = tmp / "out"
    blocked = _blocked(tmp / "blocked")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), str(blocked)]),
               NUMBA_ENABLE_CUDASIM="1")
    env.pop("WORKBOOK_RESULTS", None)
    before = _results_snapshot()
    proc = subprocess.run([sys.executable, "-m", "helpers.experiments.gpu_reference", "--dry-run",
                           "--out", str(out)], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=900)
    return proc, out, before


def _summary(out: pathlib.Path) -> results.Dataset:
    (json_path,) = out.glob(f"{ref.PREFIX}*.json")
    return results.load(json_path.stem, out)


@pytest.mark.each_python
def test_dry_run_runs_every_part(dry_run):
    proc, out, _ = dry_run
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    ds = _summary(out)
    assert [r["part"] for r in ds.rows] == [p.name for p in ref.PARTS]
    by = {r["part"]: r for r in ds.rows}
    for part in ref.PARTS:
        row = by[part.name]
        if part.gpu_only:
            assert row["status"] == "no GPU (dry run)", row
        else:
            assert row["status"] in ("ok", "partial"), row
    # the parts that can measure on a CPU wrote data, with measured rows
    for name in ("throughput", "conv-b128", "conv-b1", "phases", "training", "sweep"):
        assert by[name]["files"] and by[name]["measured"] > 0, by[name]
    assert ds.meta["dry_run"] is True
    assert ds.meta["environment"]["cpu_model"]


@pytest.mark.each_python
def test_dry_run_writes_nothing_to_results(dry_run):
    _, _, before = dry_run
    assert _results_snapshot() == before


@pytest.mark.each_python
def test_dry_run_prints_the_summary_and_headline(dry_run):
    proc, out, _ = dry_run
    text = proc.stdout
    assert "Table I, forward+backward" in text
    assert "fastest" in text
    head = _summary(out).meta["headline"]
    assert head["table1"], head
    for line in head["table1"]:
        assert line["fastest"] in ("reference", "direct-naive", "direct-tiled", "im2col-gemm",
                                   "im2col-tiled", "fft")
        assert line["fastest_ms"] > 0


@pytest.mark.each_python
def test_dry_run_archive_holds_every_file_under_the_limit(dry_run):
    _, out, _ = dry_run
    (archive,) = out.glob(f"{ref.PREFIX}*.tar.gz")
    assert archive.stat().st_size < ref.ARCHIVE_LIMIT_BYTES
    with tarfile.open(archive) as tar:
        names = set(tar.getnames())
    ds = _summary(out)
    listed = {f"results/{f}" for r in ds.rows for f in str(r["files"]).split(";") if f}
    assert listed and listed <= names
    assert f"results/{ds.name}.csv" in names and f"results/{ds.name}.json" in names
    assert any(n.startswith(f"results/{ref.PREFIX}logs/") for n in names)


def test_a_second_run_keeps_what_was_recorded_and_redoes_a_lost_part(dry_run, tmp_path):
    proc, out, _ = dry_run
    assert proc.returncode == 0
    ds = _summary(out)
    lost = next(r for r in ds.rows if r["part"] == "conv-b1")
    first_file = str(lost["files"]).split(";")[0]
    (out / first_file).unlink()
    rows, _ = ref.run(out, dry_run=True, parts=["conv-b128", "conv-b1"])
    by = {r["part"]: r for r in rows}
    assert by["conv-b128"]["note"] == "recorded by an earlier run, kept"
    assert by["conv-b1"]["status"] in ("ok", "partial")
    assert by["conv-b1"]["note"] != "recorded by an earlier run, kept"
    assert (out / first_file).exists()


def test_a_part_that_does_not_fit_the_time_left_is_skipped_with_the_reason(tmp_path):
    rows, archive = ref.run(tmp_path, dry_run=True, parts=["kernel-resources"], total_s=5)
    (row,) = rows
    assert row["status"] == "skipped"
    assert "needs about" in row["note"] and "left of the total" in row["note"]
    assert archive.exists()


def test_plan_shortens_a_self_limiting_part_and_skips_the_others(tmp_path):
    sweep = next(p for p in ref.PARTS if p.name == "sweep")
    cmd, budget, note = ref.plan(sweep, tmp_path, "gpu", False, sweep.budget_s * 0.75)
    assert cmd and budget == pytest.approx(sweep.budget_s * 0.75) and "shortened" in note
    limit = float(cmd[cmd.index("--time-limit") + 1])
    assert limit < budget
    assert f"{tmp_path}/sweep_paper_gpu.csv" in cmd
    cmd, _, note = ref.plan(sweep, tmp_path, "gpu", False, sweep.budget_s * 0.4)
    assert cmd is None and note.startswith("skipped")
    kr = next(p for p in ref.PARTS if p.name == "kernel-resources")
    cmd, _, note = ref.plan(kr, tmp_path, "gpu", False, kr.budget_s - 1)
    assert cmd is None and "needs about" in note
    cmd, _, _ = ref.plan(kr, tmp_path, "gpu", False, 1e9)
    assert cmd[:3] == [sys.executable, "-m", "helpers.experiments.kernel_resources"]


def test_every_part_fits_twenty_minutes_together():
    assert sum(p.budget_s for p in ref.PARTS) <= 20 * 60  # start-up of each process on top
    assert len({p.name for p in ref.PARTS}) == len(ref.PARTS)


def test_bad_arguments_are_refused_before_anything_runs(tmp_path):
    with pytest.raises(ValueError, match="parts must be among"):
        ref.run(tmp_path, dry_run=True, parts=["nope"])
    with pytest.raises(ValueError, match="total_s"):
        ref.run(tmp_path, dry_run=True, total_s=0)
    with pytest.raises(ValueError, match="never writes to results"):
        ref.run(results.RESULTS_DIR, dry_run=True)
    assert not list(tmp_path.iterdir())


@simulator_only
def test_make_gpu_reference_without_a_gpu_stops_at_once():
    proc = subprocess.run(["make", "--no-print-directory", "gpu-reference"], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0
    assert "needs an NVIDIA GPU that Numba can use" in proc.stderr
    assert "--dry-run" in proc.stderr


def test_status_of_each_outcome():
    assert summary.status_of(None, [], dry_run=False, gpu_only=False, tail="x")[0] == "killed"
    assert summary.status_of(1, [], dry_run=True, gpu_only=True, tail="no GPU")[0] == \
        "no GPU (dry run)"
    assert summary.status_of(1, [], dry_run=False, gpu_only=True, tail="boom")[0] == "failed"
    assert summary.status_of(1, ["a.csv"], dry_run=True, gpu_only=True, tail="")[0] == "failed"
    assert summary.status_of(0, [], dry_run=False, gpu_only=False, tail="")[0] == "failed"
    assert summary.status_of(0, [], dry_run=True, gpu_only=False, tail="")[0] == "ok"
    assert summary.status_of(0, ["a.csv"], dry_run=False, gpu_only=False, tail="") == ("ok", "")


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


def test_count_rows_tells_measured_from_skipped(tmp_path):
    rows = [{"x": 1, "status": "ok"}, {"x": 2, "status": "ok: M=1"},
            {"x": 3, "status": "skipped: time limit of 5 s reached"},
            {"x": 4, "status": "refused: too slow"}]
    results.save("t", rows, directory=tmp_path)
    assert summary.count_rows(["t.csv", "t.json"], tmp_path) == {
        "rows": 4, "measured": 2, "skipped_for_time": 1}
