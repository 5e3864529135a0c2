"""helpers.experiments.conv_bench: the Table I timing command, on layers small enough for a test."""

from __future__ import annotations

import pytest

from helpers.conv import STRATEGIES, ConvConfig
from helpers.device import backend
from helpers.experiments.conv_bench import FIELDS, bench_layers, format_table, main

TINY = (ConvConfig.from_study(b=2, i=9, f=3, k=3, s=1, c=2, name="T1"),
        ConvConfig.from_study(b=2, i=7, f=2, k=5, s=2, c=1, name="T2"))


def test_rows_cover_every_layer_strategy_and_pass_with_the_reference_as_baseline():
    seen = []
    rows = bench_layers(batch=1, layers=TINY, min_run_time=0.01, progress=seen.append)
    assert rows and all(tuple(r) == FIELDS for r in rows)
    cpu_strategies = [n for n, s in STRATEGIES.items() if "cpu" in s.devices]
    for layer in TINY:
        for name in cpu_strategies:
            for pass_ in ("forward", "forward+backward"):
                [row] = [r for r in rows if (r["layer"], r["strategy"], r["pass"], r["device"][:3])
                         == (layer.name, name, pass_, "CPU")]
                assert row["b"] == 1  # the batch was replaced
                reason = STRATEGIES[name].supports(layer.with_batch(1), "cpu")
                if reason:  # winograd on T2 (5 x 5, stride 2): the row says why
                    assert row["status"] == reason and row["median_ms"] is None
                    continue
                assert row["status"] == "ok" and row["median_ms"] > 0
                assert row["vs_reference"] == pytest.approx(
                    row["median_ms"] / next(r["median_ms"] for r in rows if (
                        r["layer"], r["strategy"], r["pass"], r["device"]) == (
                        layer.name, "reference", pass_, row["device"])))
                cfg = layer.with_batch(1)
                assert row["flops"] == STRATEGIES[name].flops(cfg, pass_ != "forward")
                assert (row["peak_bytes"] is None) == (pass_ == "forward")
    assert len(seen) == len(rows)  # one progress line a row, measured or not
    assert any(r["strategy"] == "winograd" and r["status"] == "ok" for r in rows)  # T1: 3 x 3
    assert "Conv" not in format_table(rows) and "T2" in format_table(rows)


@pytest.mark.skipif(backend.MODE != "simulator", reason="the simulator's refusal")
def test_cuda_rows_in_the_simulator_say_why_nothing_was_timed():
    rows = bench_layers(layers=TINY[:1], strategies=["direct-naive", "reference"],
                        devices=["cuda"], min_run_time=0.01)
    assert len(rows) == 4
    for row in rows:
        assert row["median_ms"] is None and "simulator" in row["status"]


@pytest.mark.parametrize("kwargs,match", [
    ({"batch": 0}, "batch must be >= 1"),
    ({"strategies": ["winograd-4x4"]}, "strategy must be one of"),
    ({"devices": ["tpu"]}, "device must be 'cpu' or 'cuda'"),
])
def test_bad_arguments_are_refused(kwargs, match):
    with pytest.raises(ValueError, match=match):
        bench_layers(layers=TINY, **kwargs)


def test_command_refuses_a_bad_batch(capsys):
    assert main(["--batch", "0"]) == 2
    assert "--batch must be >= 1" in capsys.readouterr().out
