"""Tests of notebook 09's training throughput: helpers.experiments.training's steps, throughput,
utilisation and records modules, and their command lines.

Fast: tiny batches, 16-pixel images and a few steps; the GPU checks are marked and skipped
without a GPU.
"""

import json
import math
import time

import pytest
import torch
from conftest import simulator_only
from torch import nn

import helpers  # noqa: F401  (decides the backend first)
from helpers.device import backend, host
from helpers.device.progress import time_limit_status
from helpers.experiments import training
from helpers.experiments.training import throughput as training_throughput
from helpers.experiments.training import utilisation as training_utilisation
from helpers.networks import datasets, training_cnns

TINY = dict(batch_size=4, steps=2, warmup=1, image_size=16, channels=1)


# ------------------------------------------------------------------------------ throughput


def test_endless_loader_never_runs_out_and_is_seeded():
    ds = datasets.LFWFaces("test")  # 50 images: ten batches of 16 need four passes
    first = [next(it) for it in [iter(training.endless_loader(ds, 16, seed=3))] for _ in range(10)]
    again = next(iter(training.endless_loader(ds, 16, seed=3)))
    assert all(x.shape == (16, 1, 25, 25) and y.dtype == torch.int64 for x, y in first)
    assert torch.equal(first[0][1], again[1])
    with pytest.raises(ValueError, match="dataset"):
        training.load_dataset(42)


def test_measure_row_structure_on_cpu():
    row = training_throughput.measure(**TINY)
    assert tuple(row) == training_throughput.ROW_KEYS
    assert row["status"] == "ok" and row["device_kind"] == "cpu"
    assert row["device"].startswith("CPU") and row["dataset"] == "lfw_subset"
    assert row["images_per_s"] > 0 and row["images"] == row["steps"] * 4
    assert row["wait_s"] >= 0 and row["compute_s"] > 0
    assert math.isclose(row["wait_s"] + row["compute_s"], row["total_s"], rel_tol=0.05,
                        abs_tol=0.005)
    assert math.isnan(row["gpu_util_mean"])


class _SlowData(torch.utils.data.Dataset):
    """Every item costs 2 ms to load: the time must show up as waiting, not computing."""

    name, channels, image_size, num_classes = "slow", 1, 8, 2

    def __len__(self):
        return 16

    def __getitem__(self, i):
        time.sleep(0.002)
        return torch.zeros(1, 8, 8), i % 2


class _SlowModel(nn.Module):
    """Every forward pass costs 10 ms: the time must show up as computing."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(64, 2)

    def forward(self, x):
        time.sleep(0.01)
        return self.fc(x.flatten(1))


def test_wait_and_compute_are_split_correctly():
    row = training_throughput.measure(_SlowModel(), _SlowData(), batch_size=4, steps=3, warmup=1)
    assert row["model"] == "_SlowModel" and row["dataset"] == "slow"
    assert row["wait_s"] >= 3 * 4 * 0.002 * 0.9
    assert row["compute_s"] >= 3 * 0.01 * 0.9
    assert row["wait_s"] < row["compute_s"] + 3 * 4 * 0.002 * 3  # not all the time is waiting


def test_time_steps_splits_each_step():
    def batches():
        while True:
            time.sleep(0.004)
            yield torch.zeros(2), torch.zeros(2)

    calls = []
    times = training_throughput.time_steps(batches(), lambda x, y: (calls.append(1), time.sleep(0.002)),
                                steps=3, warmup=2)
    assert len(calls) == 5 and times.steps == 3 and len(times.step_s) == 3
    assert times.wait_s >= 3 * 0.004 * 0.9 and times.compute_s >= 3 * 0.002 * 0.9
    assert math.isclose(sum(times.step_s), times.wait_s + times.compute_s, rel_tol=1e-9)
    assert times.total_s >= sum(times.step_s) and times.end - times.start == times.total_s
    assert min(times.step_s) <= times.median_step_s <= max(times.step_s)


def test_workers_and_augmentation_rows():
    rows = training_throughput.workers_sweep(workers=(0, 1), augment=(True,), **TINY)
    assert [r["workers"] for r in rows] == [0, 1]
    assert all(r["status"] == "ok" and r["augment"] is True for r in rows)
    assert all(r["experiment"] == "workers" for r in rows)


def test_min_seconds_keeps_stepping():
    row = training_throughput.measure(min_seconds=0.3, **TINY)
    assert row["total_s"] >= 0.3 and row["steps"] >= 2


@simulator_only
def test_gpu_rows_say_why_they_were_not_measured():
    rows = training_throughput.batch_size_sweep("small", [4, 8], ["cpu", "cuda"], **{
        k: v for k, v in TINY.items() if k != "batch_size"})
    assert len(rows) == 4
    gpu = [r for r in rows if r["device_kind"] == "cuda"]
    assert all(r["status"].startswith("not measured") and math.isnan(r["images_per_s"])
               for r in gpu)
    assert all(tuple(r) == training_throughput.ROW_KEYS for r in rows)
    assert training.gpu_reason() is not None
    with pytest.raises(ValueError, match="GPU"):
        training.train(device="cuda")


def test_speedup_table_pairs_cpu_and_gpu_of_one_machine():
    def row(model, depth, kind, ips, status="ok", **machine):
        return dict(model=model, depth=depth, device_kind=kind, device=kind.upper(),
                    images_per_s=ips, status=status, **machine)

    ref = dict(machine="GPU: H100, 2026-01-02")
    table = training_throughput.speedup_table([
        row("vgg", 11, "cpu", 10.0), row("vgg", 11, "cuda", 1000.0),
        row("small", 5, "cpu", 100.0), row("small", 5, "cuda", math.nan, "not measured: x"),
        row("small", 5, "cpu", 50.0, **ref), row("small", 5, "cuda", 500.0, **ref)])
    assert [(e["machine"], e["model"]) for e in table] == [
        ("this machine", "small"), ("this machine", "vgg"), ("GPU: H100, 2026-01-02", "small")]
    assert math.isnan(table[0]["speedup"]) and "not measured" in table[0]["note"]
    assert table[1]["speedup"] == pytest.approx(100.0)
    assert table[2]["speedup"] == pytest.approx(10.0)


def test_utilisation_sampler_on_the_cpu():
    with training_utilisation.UtilisationSampler(interval_s=0.02, gpu=False) as s:
        x = torch.randn(256, 256)
        guard = time.monotonic() + 300   # against a sampler that never samples, not a speed
        while len(s.samples) < 3 and time.monotonic() < guard:
            x = x @ x.T / 256
    assert len(s.samples) >= 3 and s.gpu_reason
    assert all(math.isnan(v["gpu_util"]) and 0 <= v["cpu_util"] <= 100 for v in s.samples)
    assert 0 <= s.mean("cpu_util") <= 100 and math.isnan(s.mean("gpu_util"))


def test_utilisation_trace_on_the_cpu():
    trace = training_throughput.utilisation_trace(device="cpu", seconds=0.3, interval_s=0.05,
                                       **{k: v for k, v in TINY.items() if k not in ("steps",)})
    assert trace["row"]["status"] == "ok" and trace["row"]["experiment"] == "utilisation"
    assert trace["samples"] and trace["gpu_reason"]


@pytest.mark.parametrize("kwargs", [
    dict(batch_size=0), dict(workers=-1), dict(precision="fp8"), dict(device="tpu"),
    dict(steps=0), dict(warmup=0), dict(model="alexnet"), dict(min_seconds=-1.0),
    dict(dataset="imagenet"), dict(image_size=4)])
def test_measure_bad_arguments_raise(kwargs):
    with pytest.raises(ValueError):
        training_throughput.measure(**{**TINY, **kwargs})


def test_sweeps_and_sampler_bad_arguments_raise():
    with pytest.raises(ValueError, match="batch_sizes"):
        training_throughput.batch_size_sweep("small", [])
    with pytest.raises(ValueError, match="workers"):
        training_throughput.workers_sweep(workers=())
    with pytest.raises(ValueError, match="models"):
        training_throughput.depth_sweep(models=())
    with pytest.raises(ValueError, match="interval_s"):
        training_utilisation.UtilisationSampler(interval_s=0)
    with pytest.raises(ValueError, match="seconds"):
        training_throughput.utilisation_trace(seconds=0)


def _save_h100_and_cpu_runs(folder):
    (folder / "training_h100.csv").write_text(
        "experiment,model,depth,device_kind,device,images_per_s,status\n"
        "depth,small,5,cuda,GPU: NVIDIA H100,5000.0,ok\n"
        "depth,small,5,cpu,CPU: Xeon,500.0,ok\n"
        "batch,small,5,cuda,GPU: NVIDIA H100,4000.0,ok\n")
    (folder / "training_h100.json").write_text(json.dumps(
        {"date": "2026-01-02T03:04:05+00:00", "environment": {"gpu_name": "NVIDIA H100"}}))
    (folder / "training_cpu.csv").write_text(
        "experiment,model,depth,device_kind,device,images_per_s,status\n"
        "depth,small,5,cpu,CPU: laptop,90.0,ok\n"
        "depth,small,5,cuda,GPU (none here),nan,not measured: no GPU\n")
    (folder / "training_cpu.json").write_text(json.dumps(
        {"date": "2026-01-03T00:00:00+00:00", "environment": {"cpu_model": "laptop"}}))


def test_recorded_rows_are_labelled_with_gpu_and_date(tmp_path):
    _save_h100_and_cpu_runs(tmp_path)
    rec = training_throughput.recorded("depth", directory=tmp_path)
    assert rec and len(rec.rows) == 1 and rec.rows[0]["source"] == "reference"
    assert rec.rows[0]["device"] == rec.rows[0]["machine"] == "GPU: NVIDIA H100, 2026-01-02"
    assert [ds.name for ds in rec.datasets] == ["training_h100"]
    assert "GPU: NVIDIA H100 (2026-01-02)" in rec.note
    # with the CPU rows of the same machine (not those of a machine without a GPU)
    both = training_throughput.recorded("depth", gpu_only=False, directory=tmp_path).rows
    assert [r["device_kind"] for r in both] == ["cuda", "cpu"]
    assert both[1]["device"] == "CPU beside GPU: NVIDIA H100, 2026-01-02"
    table = training_throughput.speedup_table(both)
    assert len(table) == 1 and table[0]["speedup"] == pytest.approx(10.0)


def test_recorded_says_which_command_records_the_numbers(tmp_path):
    rec = training_throughput.recorded("batch", directory=tmp_path / "missing")
    assert not rec and rec.rows == [] and rec.command == training_throughput.COMMAND
    assert "python -m helpers.experiments.training.throughput --save" in rec.note
    with pytest.raises(ValueError, match="experiment"):
        training_throughput.recorded("speed")


def test_command_line_prints_a_table(capsys):
    assert training_throughput.main(["--experiment", "batch", "--quick", "--batch-sizes", "4",
                                     "--image-size", "16", "--steps", "1"]) == 0
    out = capsys.readouterr().out
    assert "images_per_s" in out and "lfw_subset" in out and "cpu" in out


def test_training_command_line_prints_the_accuracy(capsys):
    assert training.main(["--epochs", "2"]) == 0
    out = capsys.readouterr().out
    assert "small on lfw_subset" in out and "test accuracy" in out and "threshold 0.9" in out


def test_format_table_handles_missing_numbers():
    text = training_throughput.format_table([dict(model="small", images_per_s=math.nan, status="ok")],
                                 ["model", "images_per_s", "status"])
    assert "small" in text and " - " in text


# ------------------------------------------------------------------------------ GPU


class _GpuSleep(nn.Module):
    """Spins the GPU about 20 ms per forward pass and returns at once on the host."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(64, 2)

    def forward(self, x):
        torch.cuda._sleep(int(torch.cuda.get_device_properties(0).clock_rate * 1e3 * 0.02))
        return self.fc(x.flatten(1))


@pytest.mark.gpu
@pytest.mark.skipif(backend.MODE != "gpu", reason="needs a real CUDA GPU")
def test_gpu_step_time_includes_the_work_after_the_launch():
    # Without torch.cuda.synchronize() before each clock reading the 20 ms of GPU work
    # would be missed (the launch returns at once).
    row = training_throughput.measure(_GpuSleep(), _SlowData(), device="cuda", batch_size=4, steps=5,
                           warmup=1, min_seconds=0)
    assert row["status"] == "ok"
    assert row["compute_s"] / row["steps"] > 0.015


@pytest.mark.gpu
@pytest.mark.skipif(backend.MODE != "gpu", reason="needs a real CUDA GPU")
def test_gpu_measurements_run_with_utilisation_and_mixed_precision():
    row = training_throughput.measure("resnet20", device="cuda", batch_size=128, steps=5,
                           sample_utilisation=True, min_seconds=1.5)
    assert row["status"] == "ok" and row["device"].startswith("GPU")
    assert row["images_per_s"] > 0 and not math.isnan(row["gpu_util_mean"])
    rows = training_throughput.precision_sweep("small", 64, "cuda", steps=3, min_seconds=0)
    assert len(rows) == 6 and all(r["status"] == "ok" for r in rows)


# ------------------------------------------------------------------- time limit, --out, NVML


SKIPPED = "skipped: time limit of 7.5 s reached"
PAST = {"deadline": time.monotonic() - 1.0, "time_limit": 7.5}  # a deadline already passed


def test_skipped_status_text():
    assert time_limit_status(7.5) == SKIPPED
    assert time_limit_status(60) == "skipped: time limit of 60 s reached"
    assert time_limit_status(None) == "skipped: time limit reached"


def test_sweeps_past_deadline_give_only_skipped_rows():
    tiny = {k: v for k, v in TINY.items() if k != "batch_size"}
    rows = (training_throughput.batch_size_sweep("small", [4, 8], ["cpu", "cuda"], **tiny,
                                                 **PAST)
            + training_throughput.workers_sweep("small", [0, 1], (False, True), **TINY, **PAST)
            + training_throughput.depth_sweep(["small", "resnet20"], 4, ["cpu"], **tiny, **PAST)
            + training_throughput.precision_sweep("small", 4, "cpu", **tiny, **PAST))
    assert len(rows) == 4 + 4 + 2 + 6
    assert all(tuple(r) == training_throughput.ROW_KEYS and r["status"] == SKIPPED
               and math.isnan(r["images_per_s"]) for r in rows)
    assert [r["batch_size"] for r in rows[:4]] == [4, 8, 4, 8]
    assert [r["device_kind"] for r in rows[:4]] == ["cpu", "cpu", "cuda", "cuda"]
    assert [(r["workers"], r["augment"]) for r in rows[4:8]] == [
        (0, False), (1, False), (0, True), (1, True)]
    assert [(r["model"], r["depth"]) for r in rows[8:10]] == [("small", 5), ("resnet20", 20)]
    assert {r["precision"] for r in rows[10:]} == {"fp32", "bf16", "fp16"}
    assert all(r["dataset"] == "lfw_subset" and r["experiment"] in training_throughput.EXPERIMENTS
               for r in rows)
    trace = training_throughput.utilisation_trace(device="cpu", seconds=0.3, **PAST)
    assert trace["row"]["status"] == SKIPPED and trace["samples"] == []
    assert tuple(trace["row"]) == training_throughput.ROW_KEYS


def test_sweep_without_deadline_measures_every_point():
    rows = training_throughput.batch_size_sweep(
        "small", [2, 4], ["cpu"], deadline=None, time_limit=7.5,
        **{k: v for k, v in TINY.items() if k != "batch_size"})
    assert [r["status"] for r in rows] == ["ok", "ok"]


def test_the_gpu_run_keeps_what_notebook_09_reads_and_few_cpu_points():
    plan = training_throughput._plan(quick=False, gpu=True, cores=16)
    assert plan["batch"] == [("cpu", [16, 64]), ("cuda", [16, 64, 256, 1024])]
    assert plan["workers"] == [("cuda", 256, [0, 1, 2, 4, 8])]  # notebook 09 reads the GPU's
    assert plan["depth"] == (list(training_cnns.MODELS), 64)  # both devices: the speedups
    cpu_only = training_throughput._plan(quick=False, gpu=False, cores=2)
    assert cpu_only["workers"] == [("cpu", 64, [0, 1, 2])]
    quick = training_throughput._plan(quick=True, gpu=False, cores=2, steps=20)
    assert quick["depth"] == (["small"], 32) and quick["workers"][0][2] == [0]
    assert quick["common"]["steps"] == 3 and quick["utilisation"][1] == 1.0


def test_command_line_saves_into_out(tmp_path, capsys):
    assert training_throughput.main(["--experiment", "batch", "--quick", "--batch-sizes", "4",
                                     "--image-size", "16", "--save", "--out",
                                     str(tmp_path)]) == 0
    (csv_path,) = tmp_path.glob("training_*.csv")
    meta = json.loads(csv_path.with_suffix(".json").read_text())
    assert meta["rows"] == 2 and "--out" in meta["command"]
    assert "wrote" in capsys.readouterr().out


def test_command_line_past_its_time_limit_saves_skipped_rows(tmp_path):
    assert training_throughput.main(["--quick", "--image-size", "16", "--save", "--out",
                                     str(tmp_path), "--time-limit", "1e-6"]) == 0
    (csv_path,) = tmp_path.glob("training_*.csv")  # no utilisation trace: nothing sampled
    lines = csv_path.read_text().splitlines()[1:]
    assert len(lines) > 10
    assert all("skipped: time limit of 1e-06 s reached" in line for line in lines)


def test_command_line_without_the_dataset_returns_1(monkeypatch, capsys):
    def missing(*args, **kwargs):
        raise ModuleNotFoundError("No module named 'skimage'")

    monkeypatch.setattr(training.learning, "load_dataset", missing)
    assert training_throughput.main(["--quick"]) == 1
    assert "nothing measured" in capsys.readouterr().out


def test_command_line_rejects_a_time_limit_that_is_not_positive(capsys):
    with pytest.raises(SystemExit) as exc:
        training_throughput.main(["--quick", "--time-limit", "0"])
    assert exc.value.code == 2 and "--time-limit must be > 0" in capsys.readouterr().err


def test_sampler_without_nvml_or_psutil_samples_the_cpu(monkeypatch):
    monkeypatch.setattr(training_utilisation, "pynvml", None)
    monkeypatch.setattr(training_utilisation, "gpu_reason", lambda: None)  # as on a GPU
    monkeypatch.setattr(host, "psutil", None)  # CPU utilisation from /proc/stat
    with training_utilisation.UtilisationSampler(interval_s=0.02, gpu=True) as s:
        guard = time.monotonic() + 300   # against a sampler that never samples, not a speed
        while len(s.samples) < 3 and time.monotonic() < guard:
            pass
    assert s.gpu_reason == training_utilisation.NVML_MISSING
    assert "NVML is not installed" in s.gpu_reason
    assert len(s.samples) >= 3 and all(math.isnan(v["gpu_util"]) for v in s.samples)
    cpu = [v["cpu_util"] for v in s.samples if not math.isnan(v["cpu_util"])]
    assert cpu and all(0 <= v <= 100 for v in cpu)
