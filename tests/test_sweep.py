"""helpers.experiments.sweep: the study's sweeps as data, and the command that measures them."""

from __future__ import annotations

import csv
import json

import pytest

from helpers.conv import STRATEGIES, ConvConfig, config_for
from helpers.device import backend, timing
from helpers.experiments.sweep import (
    FIELDS,
    PRESETS,
    Preset,
    estimate_seconds,
    final,
    main,
    measure,
    refusal,
    run_preset,
)
from helpers.paper import TABLE_I


def test_paper_preset_has_the_studys_ranges_around_its_base():
    paper = PRESETS["paper"]
    assert paper.base == (64, 128, 64, 11, 1)
    pts = paper.points()
    by = {s: [p.x for p in pts if p.sweep == s] for s in ("batch", "input", "filters", "table1")}
    assert by["batch"] == list(range(32, 513, 32))
    assert by["input"] == list(range(32, 257, 16))
    assert by["filters"] == list(range(32, 513, 16))
    table1 = [p for p in pts if p.sweep == "table1"]
    assert [(p.cfg.name, *p.cfg.study, p.cfg.c) for p in table1] == [
        (layer.name, 128, *layer.study[1:], layer.c) for layer in TABLE_I]
    # every point varies exactly one parameter of the base
    for p in pts:
        if p.sweep != "table1":
            diffs = [a != b for a, b in zip(p.cfg.study, paper.base)]
            assert sum(diffs) <= 1 and p.cfg.c == 3


def test_every_point_of_both_presets_is_a_valid_configuration():
    for preset in PRESETS.values():
        assert all(isinstance(p.cfg, ConvConfig) for p in preset.points())  # else ValueError


def test_measure_times_a_supported_point_and_explains_the_others():
    cfg = config_for((1, 2, 9, 9), (3, 2, 3, 3))
    row = measure(cfg, "im2col-gemm", "cpu", min_run_time=0.01)
    assert row["status"] == "ok" and row["median_ms"] > 0 and row["gflop_per_s"] > 0
    assert row["flops"] == 3 * cfg.flops and row["workspace_bytes"] == 2 * 2 * 9 * 49 * 4
    assert row["device"].startswith("CPU")
    no_code = measure(cfg, "direct-tiled", "cpu")
    assert no_code["median_ms"] is None and "no cpu implementation" in no_code["status"]
    if backend.MODE == "simulator":
        sim = measure(cfg, "direct-naive", "cuda")
        assert sim["median_ms"] is None and "simulator" in sim["status"]


def test_points_over_the_time_budget_are_refused_with_the_estimate():
    cfg = config_for((64, 3, 128, 128), (64, 3, 11, 11))
    est = estimate_seconds(cfg, "direct-naive", "cpu")
    assert est > 2
    reason = refusal(cfg, "direct-naive", "cpu", budget_s=2.0)
    assert reason.startswith("refused") and "GFLOP" in reason and "budget" in reason
    row = measure(cfg, "direct-naive", "cpu", budget_s=2.0)
    assert row["median_ms"] is None and row["status"] == reason


def test_bad_arguments():
    cfg = config_for((1, 1, 5, 5), (1, 1, 3, 3))
    with pytest.raises(ValueError, match="strategy must be one of"):
        measure(cfg, "winograd-4x4", "cpu")
    with pytest.raises(ValueError, match="device must be"):
        measure(cfg, "fft", "tpu")
    with pytest.raises(ValueError, match="preset must be one of"):
        run_preset("huge")


TINY = Preset("tiny", (1, 8, 2, 3, 1), 1, range(1, 3), range(6, 9, 2), range(2, 3),
              range(3, 6, 2), range(1, 3), 1, "a test preset")


@pytest.mark.slow
def test_a_preset_gives_a_row_for_every_point_strategy_and_device(monkeypatch):
    # Table I at batch 1 is too slow for a unit test: keep only its smallest layer.
    monkeypatch.setattr("helpers.experiments.sweep.presets.TABLE_I", TABLE_I[3:4])
    rows = run_preset(TINY, min_run_time=0.005, progress=False)
    pts = TINY.points()
    assert len(rows) == len(pts) * len(STRATEGIES) * 2
    assert all(tuple(r) == FIELDS for r in rows)
    keys = {(r["sweep"], r["x"], r["strategy"], r["device"][:3]) for r in rows}
    assert len(keys) == len(rows)
    for r in rows:
        assert (r["median_ms"] is not None) == (r["status"] == "ok")
    assert sum(r["status"] == "ok" for r in rows) >= len(pts) * 4  # the four CPU strategies


@pytest.mark.slow
def test_the_rows_so_far_are_handed_over_after_each_pass(monkeypatch):
    """A run stopped later keeps what the passes before it measured (the command saves them)."""
    monkeypatch.setattr("helpers.experiments.sweep.presets.TABLE_I", TABLE_I[3:4])
    five = Preset("five", (1, 8, 2, 3, 1), 1, range(1, 6), range(8, 9), range(2, 3),
                  range(3, 4), range(1, 2), 1, "five batch sizes")
    passes = []
    rows = run_preset(five, devices=["cpu"], strategies=["reference"], min_run_time=0.002,
                      progress=False, on_pass=passes.append)
    assert len(passes) == 3 and passes[-1] == rows       # passes 0, 1 and 2 of batch 1..5
    assert [len(p) for p in passes] == sorted({len(p) for p in passes})
    first = {r["x"] for r in passes[0] if r["sweep"] == "batch"}
    assert first == {1, 5}                                # every fourth point, and the last
    assert all(r in rows for p in passes for r in p)


@pytest.mark.slow
def test_command_writes_csv_and_json(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(PRESETS, "tiny", TINY)
    monkeypatch.setattr("helpers.experiments.sweep.presets.TABLE_I", TABLE_I[3:4])
    out = tmp_path / "s.csv"
    assert main(["--preset", "tiny", "--out", str(out), "--no-progress",
                 "--min-run-time", "0.005"]) == 0
    rows = list(csv.DictReader(open(out)))
    assert rows and list(rows[0]) == list(FIELDS)
    meta = json.loads(out.with_suffix(".json").read_text())
    assert meta["preset"] == "tiny" and meta["scale"] == "a test preset"
    assert "cpu_model" in meta["environment"]
    assert "rows (" in capsys.readouterr().out


def test_final_rows_are_the_measured_and_those_refused_for_good():
    assert final({"status": "ok"})
    assert final({"status": "Winograd F(2x2, 3x3) needs a 3 x 3 kernel, got 5 x 5"})
    assert not final({"status": "skipped: time limit of 130 s reached"})
    assert not final({"status": "failed: ValueError: ... more than the 19.5 GiB free on cuda"})
    assert not final({"status": ""}) and not final({})


def _fake_measure(calls):
    def fake(cfg, strategy, device, *args, **kwargs):
        calls.append((cfg.n, cfg.h, strategy, device))
        return {"strategy": strategy, "family": STRATEGIES[strategy].family,
                "device": timing.device_label(device), "pass": "forward+backward",
                "median_ms": 2.0, "iqr_ms": 0.1, "gflop_per_s": 1.0, "flops": 10,
                "workspace_bytes": None, "peak_bytes": None, "status": "ok"}
    return fake


def test_resume_runs_only_what_an_earlier_run_left_unmeasured(tmp_path, monkeypatch, capsys):
    five = Preset("five", (1, 8, 2, 3, 1), 1, range(1, 6), range(8, 9), range(2, 3),
                  range(3, 4), range(1, 2), None, "five batch sizes")
    monkeypatch.setitem(PRESETS, "five", five)
    calls = []
    monkeypatch.setattr("helpers.experiments.sweep.presets.measure", _fake_measure(calls))
    out = tmp_path / "s.csv"
    args = ["--preset", "five", "--out", str(out), "--no-progress", "--device", "cpu"]
    assert main(args) == 0
    first = len(calls)
    rows = list(csv.DictReader(open(out)))
    assert first == len(rows) > 4
    # what a time limit, a failure and a measurement left behind
    rows[0]["status"], rows[0]["median_ms"] = "skipped: time limit of 5 s reached", ""
    rows[1]["status"], rows[1]["median_ms"] = "failed: RuntimeError: out of memory", ""
    rows[2]["median_ms"] = "123.5"                       # kept as it was, not measured again
    rows[3]["status"], rows[3]["median_ms"] = "needs a 3 x 3 kernel", ""   # refused for good
    with open(out, "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=FIELDS)
        writer.writeheader()
        writer.writerows(rows)
    calls.clear()
    assert main([*args, "--resume"]) == 0
    assert len(calls) == 2                               # rows 0 and 1, nothing else
    again = list(csv.DictReader(open(out)))
    assert [r["status"] for r in again[:4]] == ["ok", "ok", "ok", "needs a 3 x 3 kernel"]
    assert again[2]["median_ms"] == "123.5" and again[0]["median_ms"] == "2.0"
    meta = json.loads(out.with_suffix(".json").read_text())
    assert meta["resumed_from"]["rows_kept"] == len(rows) - 2
    assert "resuming the run of" in capsys.readouterr().out
    # rows of another device label are not this device's: all run again
    for r in again:
        r["device"] = "GPU: some other GPU"
    with open(out, "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=FIELDS)
        writer.writeheader()
        writer.writerows(again)
    calls.clear()
    assert main([*args, "--resume"]) == 0 and len(calls) == first


def test_resume_refuses_a_file_of_another_preset(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(PRESETS, "tiny", TINY)
    monkeypatch.setattr("helpers.experiments.sweep.presets.measure", _fake_measure([]))
    out = tmp_path / "s.csv"
    assert main(["--preset", "tiny", "--out", str(out), "--no-progress", "--device", "cpu"]) == 0
    with pytest.raises(SystemExit) as exc:
        main(["--preset", "smoke", "--out", str(out), "--no-progress", "--resume"])
    assert exc.value.code == 2 and "is not a run of the 'smoke' preset" in capsys.readouterr().err


def test_resume_refuses_a_csv_without_its_json(tmp_path, capsys):
    out = tmp_path / "s.csv"
    out.write_text(",".join(FIELDS) + "\n")
    with pytest.raises(SystemExit) as exc:
        main(["--preset", "smoke", "--out", str(out), "--no-progress", "--resume"])
    assert exc.value.code == 2 and "has no JSON beside it" in capsys.readouterr().err
