import json
import time

import plotly.graph_objects as go
import pytest
import torch
from conftest import simulator_only

import helpers  # noqa: F401  (decides the backend first)
from helpers import results
from helpers.device import backend
from helpers.experiments import transfers
from helpers.experiments.transfers import model as transfer_model
from helpers.experiments.transfers import streams as transfer_streams
from helpers.figures import nb08_transfers
from helpers.paper import TABLE_I

# ------------------------------------------------------------------ the estimate, by hand


def test_pcie_rates_from_the_specification():
    # 8 GT/s x 16 lanes x 128/130 encoding / 8 bits = 15.75 GB/s per direction
    assert transfer_model.LINKS["PCIe 3.0 x16"].raw_bytes_s == pytest.approx(15.7538e9, rel=1e-5)
    assert transfer_model.LINKS["PCIe 4.0 x16"].raw_bytes_s == pytest.approx(31.5077e9, rel=1e-5)
    assert transfer_model.LINKS["PCIe 5.0 x16"].raw_bytes_s == pytest.approx(63.0154e9, rel=1e-5)
    assert transfer_model.LINKS["PCIe 3.0 x16"].bytes_s == 12e9
    assert transfer_model.LINKS["PCIe 5.0 x16"].bytes_s == pytest.approx(0.75 * 63.0154e9, rel=1e-5)
    assert transfer_model.LINKS["NVLink-C2C"].bytes_s == 450e9
    for link in transfer_model.LINKS.values():
        assert link.bytes_s <= link.raw_bytes_s and link.basis and link.source


def test_estimate_worked_by_hand_conv2_batch1_forward():
    # Conv2 = (b, i, f, k, s) = (1, 128, 96, 3, 1), c = 3: P = 126.
    e = transfer_model.estimate_share("Conv2", "K40c", "PCIe 3.0 x16", batch=1, backward=False)
    assert e["bytes_in"] == 3 * 128 * 128 * 4 == 196_608
    assert e["bytes_out"] == 96 * 126 * 126 * 4 == 6_096_384
    assert e["gflop"] * 1e9 == pytest.approx(2 * 96 * 126 * 126 * 3 * 3 * 3) == 82_301_184
    assert e["copy_ms"] == pytest.approx(6_292_992 / 12e9 * 1e3)          # 0.524416 ms
    assert e["compute_ms"] == pytest.approx(82_301_184 / 4.29e12 * 1e3)    # 0.0191844 ms
    assert e["copy_share"] == pytest.approx(0.524416 / (0.524416 + 0.0191844), rel=1e-5)
    assert e["flop_per_byte"] == pytest.approx(82_301_184 / 6_292_992)
    assert e["kind"] == "estimate" and e["gpu"] == "Tesla K40c" and e["pass"] == "forward"
    assert list(e) == list(transfer_model.ESTIMATE_FIELDS)


def test_estimate_backward_triples_flops_and_input_only_drops_the_output():
    fwd = transfer_model.estimate_share("Conv1", backward=False)
    both = transfer_model.estimate_share("Conv1", backward=True)
    assert both["gflop"] == pytest.approx(3 * fwd["gflop"])
    assert both["compute_ms"] == pytest.approx(3 * fwd["compute_ms"])
    assert both["copy_ms"] == pytest.approx(fwd["copy_ms"])
    only_in = transfer_model.estimate_share("Conv1", copy_output=False)
    assert only_in["bytes_out"] == 0 and only_in["copies"] == "input only"
    assert only_in["copy_ms"] == pytest.approx(128 * 3 * 128 * 128 * 4 / 12e9 * 1e3)
    assert only_in["copy_share"] < both["copy_share"]


def test_estimate_share_is_the_closed_form():
    peak, bw = 4.29e12, 12e9
    for layer in TABLE_I:
        e = transfer_model.estimate_share(layer)
        assert e["copy_share"] == pytest.approx(1 / (1 + e["flop_per_byte"] * bw / peak))


def test_estimate_small_layers_have_the_largest_share():
    shares = {e["layer"]: e["copy_share"] for e in transfer_model.estimate(scenarios=[
        ("study", "K40c", "PCIe 3.0 x16")])}
    # Conv2 (3 x 3 kernel on a large input: little arithmetic per byte) leads, Conv3 is last.
    assert max(shares, key=shares.get) == "Conv2"
    assert min(shares, key=shares.get) == "Conv3"


def test_estimate_table_covers_every_scenario_and_layer():
    rows = transfer_model.estimate(batch=8)
    assert len(rows) == len(transfer_model.SCENARIOS) * len(TABLE_I)
    assert {r["scenario"] for r in rows} == {s[0] for s in transfer_model.SCENARIOS}
    assert all(r["b"] == 8 and 0 < r["copy_share"] < 1 for r in rows)


def test_estimated_timeline_worked_by_hand():
    # Conv5 at batch 2 in 2 chunks (one image each) on a K40c over PCIe 3.0 x16 at 12 GB/s:
    # x per image 384*13*13*4 = 259,584 B -> 21.632 us; y per image 384*11*11*4 = 185,856 B
    # -> 15.488 us; FLOPs per image 2*384*121*384*9 = 321,159,168 -> 74.862 us at 4.29 TFLOP/s.
    h, d, c = 259_584 / 12e9 * 1e3, 185_856 / 12e9 * 1e3, 321_159_168 / 4.29e12 * 1e3
    tl = transfer_model.estimated_timeline("Conv5", 2, batch=2)
    seq = [(t["kind"], t["start_ms"], t["end_ms"]) for t in tl if t["run"] == "sequential"]
    assert seq == [("h2d", 0.0, pytest.approx(2 * h)),
                   ("compute", pytest.approx(2 * h), pytest.approx(2 * h + 2 * c)),
                   ("d2h", pytest.approx(2 * h + 2 * c), pytest.approx(2 * h + 2 * c + 2 * d))]
    got = {(t["kind"], t["chunk"]): (t["start_ms"], t["end_ms"]) for t in tl
           if t["run"] == "overlapped"}
    expected = {("h2d", 0): (0, h), ("h2d", 1): (h, 2 * h),
                ("compute", 0): (h, h + c), ("compute", 1): (h + c, h + 2 * c),
                ("d2h", 0): (h + c, h + c + d), ("d2h", 1): (h + 2 * c, h + 2 * c + d)}
    assert set(got) == set(expected)
    for key, (s, e) in expected.items():
        assert got[key] == (pytest.approx(s), pytest.approx(e)), key
    assert all(t["source"] == "estimate" for t in tl)


def test_estimated_timeline_pipeline_is_never_slower_than_sequential():
    for layer in TABLE_I:
        tl = transfer_model.estimated_timeline(layer, 8)
        seq = max(t["end_ms"] for t in tl if t["run"] == "sequential")
        piped = max(t["end_ms"] for t in tl if t["run"] == "overlapped")
        assert piped <= seq * (1 + 1e-12)
        assert len(tl) == 3 + 3 * 8


# ------------------------------------------------------------------ small pure helpers


def test_chunk_bounds():
    assert transfer_model.chunk_bounds(10, 4) == [(0, 3), (3, 6), (6, 8), (8, 10)]
    assert transfer_model.chunk_bounds(5, 1) == [(0, 5)]
    assert transfer_model.chunk_bounds(3, 3) == [(0, 1), (1, 2), (2, 3)]
    for n, chunks in [(0, 1), (5, 0), (5, 6), (5, 2.0), (True, 1)]:
        with pytest.raises(ValueError, match="n must|chunks must"):
            transfer_model.chunk_bounds(n, chunks)


def test_overlap_achieved_by_hand():
    assert transfer_model.overlap_achieved(10, 10, 10, 30) == 0.0      # nothing hidden
    assert transfer_model.overlap_achieved(10, 10, 10, 10) == 1.0      # only the longest stage left
    assert transfer_model.overlap_achieved(10, 20, 10, 30) == pytest.approx(0.5)  # 10 of 20 hidden
    assert transfer_model.overlap_achieved(10, 20, 10, 45) == 0.0      # slower than sequential
    assert transfer_model.overlap_achieved(0, 5, 0, 5) == 0.0          # nothing could be hidden
    with pytest.raises(ValueError, match="h2d_ms"):
        transfer_model.overlap_achieved(-1, 1, 1, 1)
    with pytest.raises(ValueError, match="overlapped_ms"):
        transfer_model.overlap_achieved(1, 1, 1, 0)


def test_layer_for():
    assert transfer_model.layer_for("Conv3") == TABLE_I[2]
    assert transfer_model.layer_for("Conv3", batch=4).n == 4
    assert transfer_model.layer_for(TABLE_I[0]) is TABLE_I[0]
    with pytest.raises(ValueError, match="layer must be one of"):
        transfer_model.layer_for("Conv9")
    with pytest.raises(ValueError, match="layer must be"):
        transfer_model.layer_for(3)
    with pytest.raises(ValueError, match="batch must"):
        transfer_model.layer_for("Conv1", batch=0)
    # a ConvConfig: k is the filters, s the kernel width; the study's (b, i, f, k, s) is .study
    lay = transfer_model.layer_for("Conv3", batch=4)
    assert lay.name == "Conv3" and lay.study == (4, 32, 128, 9, 1)
    assert transfer_model.layer_bytes(lay) == (4 * 128 * 32 * 32 * 4, 4 * 128 * 24 * 24 * 4)


def test_the_experiment_face():
    assert transfers.estimate is transfer_model.estimate
    for name in ("estimate", "measure", "recorded", "main"):
        assert name in transfers.__all__ and callable(getattr(transfers, name))


def test_format_table():
    text = transfers.format_table([{"layer": "Conv1", "copy_share": 0.25, "ms": 1.23456,
                                    "b": 1280, "x": None}], ["layer", "copy_share", "ms", "b", "x"])
    head, line = text.splitlines()
    assert head.split() == ["layer", "copy_share", "ms", "b", "x"]
    assert line.split() == ["Conv1", "25.0", "%", "1.235", "1,280", "-"]


@pytest.mark.parametrize("backward", [False, True])
def test_compute_function_matches_autograd_on_the_cpu(backward):
    layer = transfer_model.layer_for("Conv4", batch=2)
    g = torch.Generator().manual_seed(1)
    x = torch.randn(2, 128, 16, 16, generator=g)
    w = torch.randn(128, 128, 7, 7, generator=g)
    y = transfer_streams.compute_fn(w, layer, backward)(x)
    torch.testing.assert_close(y, torch.nn.functional.conv2d(x, w))
    if backward:  # the aten call the GPU path times computes the same gradients as autograd
        xx, ww = x.clone().requires_grad_(), w.clone().requires_grad_()
        torch.nn.functional.conv2d(xx, ww).sum().backward()
        dx, dw, _ = torch.ops.aten.convolution_backward(
            torch.ones_like(y), x, w, None, (1, 1), (0, 0), (1, 1), False, (0, 0), 1,
            (True, True, False))
        torch.testing.assert_close(dx, xx.grad)
        torch.testing.assert_close(dw, ww.grad)


# ------------------------------------------------------------------ argument errors


@pytest.mark.parametrize("kwargs, match", [
    (dict(direction="both"), "direction must be"),
    (dict(pinned="yes"), "pinned must be"),
    (dict(sizes=[]), "sizes must"),
    (dict(sizes=[0]), "sizes must"),
    (dict(sizes=[1.5]), "sizes must"),
    (dict(repeats=0), "repeats must"),
    (dict(warmup=-1), "warmup must"),
])
def test_copy_bandwidth_argument_errors(kwargs, match):
    with pytest.raises(ValueError, match=match):
        transfers.copy_bandwidth(**kwargs)


@pytest.mark.parametrize("kwargs, match", [
    (dict(layer="Conv6"), "layer must"),
    (dict(layer="Conv1", chunks=0), "chunks must"),
    (dict(layer="Conv1", chunks=5, batch=4), r"chunks must be an int in 1\.\.4"),
    (dict(layer="Conv1", batch=0), "batch must"),
    (dict(layer="Conv1", repeats=0), "repeats must"),
])
def test_overlap_experiment_argument_errors(kwargs, match):
    with pytest.raises(ValueError, match=match):
        transfers.overlap_experiment(**kwargs)


@pytest.mark.parametrize("kwargs, match", [
    (dict(strategy="zero-copy"), "strategy must be one of"),
    (dict(strategy="small-copies", pieces=0), "chunks must"),
    (dict(strategy="small-copies", pieces=9, batch=8), r"1\.\.8"),
    (dict(strategy="overlapped", chunks=0), "chunks must"),
    (dict(warmup=-2), "warmup must"),
])
def test_transfer_share_argument_errors(kwargs, match):
    with pytest.raises(ValueError, match=match):
        transfers.transfer_share("Conv2", **kwargs)


def test_estimate_argument_errors():
    with pytest.raises(ValueError, match="gpu must name"):
        transfer_model.estimate_share("Conv1", gpu="Voodoo2")
    with pytest.raises(ValueError, match="link must be one of"):
        transfer_model.estimate_share("Conv1", link="USB 2.0")
    with pytest.raises(ValueError, match="chunks must"):
        transfer_model.estimated_timeline("Conv1", chunks=129)
    with pytest.raises(ValueError, match="experiment must be one of"):
        transfers.recorded("latency")


# ------------------------------------------------------------------ without a GPU


@simulator_only
def test_gpu_reason_without_a_gpu():
    reason = transfers.gpu_reason()
    assert reason.startswith("not measured:") and "GPU" in reason


@simulator_only
@pytest.mark.parametrize("direction", transfers.DIRECTIONS)
@pytest.mark.parametrize("pinned", [False, True])
def test_copy_bandwidth_without_a_gpu_says_why(direction, pinned, tmp_path, monkeypatch):
    monkeypatch.setattr(results, "RESULTS_DIR", tmp_path)  # no reference rows
    rows = transfers.copy_bandwidth([4096, 2**20], direction, pinned)
    assert [r["size_bytes"] for r in rows] == [4096, 2**20]
    for r in rows:
        assert list(r) == list(transfers.BANDWIDTH_FIELDS)
        assert r["median_ms"] is None and r["gb_s"] is None and r["repeats"] == 0
        assert r["status"].startswith("not measured:") and r["source"] == "none"
        assert r["memory"] == ("pinned" if pinned else "pageable")


@simulator_only
def test_overlap_and_share_without_a_gpu_say_why():
    o = transfers.overlap_experiment("Conv2", 4, batch=8)
    assert o["timeline"] == [] and o["overlapped_ms"] is None and o["matches"] is None
    assert o["status"].startswith("not measured:")
    assert set(o) == set(transfers.OVERLAP_FIELDS) | {"timeline"}
    assert o["bytes_out"] == 8 * 96 * 126 * 126 * 4  # the analytic fields are still there
    # rows name the layer in the study's symbols: k is the kernel size, s the stride
    assert [o[f] for f in ("b", "c", "i", "f", "k", "s")] == [8, 3, 128, 96, 3, 1]
    for strategy in transfers.TRANSFER_STRATEGIES:
        s = transfers.transfer_share("Conv2", strategy, batch=8)
        assert list(s) == list(transfers.SHARE_FIELDS)
        assert s["copy_share"] is None and s["total_ms"] is None
        assert s["status"].startswith("not measured:")
    assert transfers.transfer_share("Conv2", "small-copies", batch=8)["pieces"] == 8
    assert transfers.transfer_share("Conv2", "overlapped", batch=8, chunks=2)["pieces"] == 2


@simulator_only
def test_measure_without_a_gpu_says_why():
    rows = transfers.measure(["Conv5"], batch=4, chunks=2, sizes=[4096], repeats=3)
    assert list(rows) == list(transfers.EXPERIMENTS)
    assert len(rows["bandwidth"]) == 4  # h2d and d2h, pageable and pinned; nothing recorded
    assert [list(r) for r in rows["overlap"]] == [list(transfers.OVERLAP_FIELDS)]
    assert len(rows["share"]) == len(transfers.TRANSFER_STRATEGIES) and rows["timeline"] == []
    assert all(r["status"].startswith("not measured:") for k in ("bandwidth", "overlap", "share")
               for r in rows[k])
    with pytest.raises(ValueError, match="chunks must"):
        transfers.measure(["Conv5"], batch=4, chunks=5)


def _write_reference(directory, name, rows, gpu_name="Test GPU (test fixture, not a measurement)"):
    """A results/ dataset written by hand for the reading code; its numbers mean nothing."""
    keys = list(rows[0])
    lines = [",".join(keys)] + [",".join("" if r[k] is None else str(r[k]) for k in keys)
                                for r in rows]
    (directory / f"{name}.csv").write_text("\n".join(lines) + "\n")
    (directory / f"{name}.json").write_text(json.dumps(
        {"name": name, "date": "2024-01-02T00:00:00+00:00",
         "environment": {"gpu_name": gpu_name}}))


def _fixture_bandwidth_rows():
    rows = []
    for size, gb_s, status in [(4096, 0.5, "ok"), (2**20, 10.0, "ok"), (2**28, None, "refused: x")]:
        rows.append({"experiment": "bandwidth", "direction": "h2d", "memory": "pinned",
                     "size_bytes": size, "repeats": 3, "median_ms": 1.0, "iqr_ms": 0.1,
                     "gb_s": gb_s, "device": "GPU: Test GPU", "device_kind": "cuda",
                     "source": "measured", "status": status})
    return rows


@simulator_only
def test_recorded_rows_are_read_and_labelled(tmp_path, monkeypatch):
    empty = transfers.recorded("bandwidth", tmp_path)
    assert not empty and transfers.COMMAND in empty.note
    _write_reference(tmp_path, "transfers_bandwidth_test-gpu", _fixture_bandwidth_rows())
    _write_reference(tmp_path, "other_prefix", _fixture_bandwidth_rows())
    rec = transfers.recorded("bandwidth", tmp_path)
    refs = rec.rows
    assert len(refs) == 2  # the refused row is left out; the other prefix is not read
    assert all(r["source"] == "reference" for r in refs)
    assert refs[0]["device"] == "GPU: Test GPU (test fixture, not a measurement), 2024-01-02"
    assert "Test GPU" in rec.note and [ds.name for ds in rec.datasets] == [
        "transfers_bandwidth_test-gpu"]
    assert transfers.recorded("bandwidth", tmp_path, direction="d2h").rows == []
    assert not transfers.recorded("share", tmp_path)
    monkeypatch.setattr(results, "RESULTS_DIR", tmp_path)
    rows = transfers.copy_bandwidth([4096], "h2d", True)
    assert [r["source"] for r in rows] == ["none", "reference", "reference"]
    assert transfers.copy_bandwidth([4096], "h2d", False)[1:] == []  # pageable: none saved
    assert len(transfers.copy_bandwidth([4096], "h2d", True, references=False)) == 1


@simulator_only
def test_command_line_without_a_gpu(tmp_path, capsys):
    assert transfers.main(["--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "not measured: no CUDA GPU" in out and "ESTIMATE" in out and "Conv5" in out
    assert "nothing recorded in results/ yet" in out and transfers.COMMAND in out
    assert transfers.main(["--save", "--out", str(tmp_path)]) == results.REFUSED
    assert "nothing was saved" in capsys.readouterr().out
    assert list(tmp_path.iterdir()) == []


def test_command_line_argument_errors():
    for argv in (["--batch", "0"], ["--chunks", "0"], ["--batch", "4", "--chunks", "5"]):
        with pytest.raises(SystemExit) as exc:
            transfers.main(argv)
        assert exc.value.code == 2


# ------------------------------------------------------------------ plots


def test_bandwidth_figure():
    rows = [dict(r, source="reference", device="GPU: Test GPU, 2024-01-02")
            for r in _fixture_bandwidth_rows()]
    fig = nb08_transfers.transfer_bandwidth_figure(rows, [("PCIe 3.0 x16 (estimate)", 12e9)])
    assert isinstance(fig, go.Figure)
    assert len(fig.data) == 2  # one curve (the refused row left out) + the link line
    assert list(fig.data[0].x) == [4096.0, 2.0**20] and "(results/)" in fig.data[0].name
    assert "estimate" in fig.data[1].name and fig.data[1].y[0] == pytest.approx(12.0)
    assert fig.layout.xaxis.type == "log" and "GB/s" in fig.layout.yaxis.title.text
    assert "Test GPU" in fig.layout.title.text
    empty = nb08_transfers.transfer_bandwidth_figure(
        transfers.copy_bandwidth([4096], references=False) if backend.MODE != "gpu" else [])
    assert "No copy was measured" in empty.layout.annotations[0].text


def test_share_figure_from_the_estimate():
    rows = transfer_model.estimate()
    fig = nb08_transfers.transfer_share_figure(rows, "scenario", note="ESTIMATE")
    assert len(fig.data) == len(transfer_model.SCENARIOS)
    assert list(fig.data[0].x) == [layer.name for layer in TABLE_I]
    assert fig.data[0].y[1] == pytest.approx(100 * rows[1]["copy_share"])
    assert "ESTIMATE" in fig.layout.title.text
    assert "No copy share" in nb08_transfers.transfer_share_figure([]).layout.annotations[0].text


def test_timeline_figure_from_the_estimate():
    tl = transfer_model.estimated_timeline("Conv2", 4, batch=8)
    fig = nb08_transfers.overlap_timeline_figure(tl, "Conv2", "ESTIMATE (K40c, PCIe 3.0 x16)")
    assert len(fig.data) == 6  # three stages in each of the two panels
    bars = sum(len(t.x) for t in fig.data)
    assert bars == 3 + 3 * 4
    seq_compute = next(t for t in fig.data if t.name.startswith("compute") and t.yaxis == "y")
    assert seq_compute.base[0] == pytest.approx(tl[1]["start_ms"])
    assert seq_compute.x[0] == pytest.approx(tl[1]["end_ms"] - tl[1]["start_ms"])
    assert "ESTIMATE" in fig.layout.title.text and "ms" in fig.layout.xaxis2.title.text
    empty = nb08_transfers.overlap_timeline_figure([], "t", "n")
    assert "No timeline" in empty.layout.annotations[0].text


def test_overlap_times_figure():
    row = {"layer": "Conv1", "b": 8, "sequential_pageable_ms": 3.0, "sequential_pinned_ms": 2.0,
           "overlapped_ms": 1.5, "device": "GPU: Test GPU (fixture)", "status": "ok"}
    fig = nb08_transfers.overlap_times_figure([row])
    assert [t.y[0] for t in fig.data] == [3.0, 2.0, 1.5]
    assert "Test GPU" in fig.layout.title.text
    empty = nb08_transfers.overlap_times_figure([dict(row, overlapped_ms=None,
                                                      status="not measured")])
    assert "No overlap" in empty.layout.annotations[0].text


# --------------------------------------------------------------------- time limit, --out


SKIPPED = "skipped: time limit of 7.5 s reached"
PAST = {"deadline": time.monotonic() - 1.0, "time_limit": 7.5}  # a deadline already passed


def test_measure_past_deadline_gives_only_skipped_rows():
    handed = []
    rows = transfers.measure(["Conv5"], batch=4, chunks=2, sizes=[4096, 8192], repeats=3,
                             on_experiment=lambda e, r: handed.append((e, r)), **PAST)
    # each experiment is handed over (to be saved) as soon as it is done, in the order run
    assert [e for e, _ in handed] == ["bandwidth", "overlap", "timeline", "share"]
    assert all(r is rows[e] or r == rows[e] for e, r in handed)
    assert len(rows["bandwidth"]) == 8 and len(rows["overlap"]) == 1
    assert len(rows["share"]) == len(transfers.TRANSFER_STRATEGIES) and rows["timeline"] == []
    for experiment, fields in (("bandwidth", transfers.BANDWIDTH_FIELDS),
                               ("overlap", transfers.OVERLAP_FIELDS),
                               ("share", transfers.SHARE_FIELDS)):
        assert all(list(r) == list(fields) and r["status"] == SKIPPED for r in rows[experiment])
    assert all(r["gb_s"] is None for r in rows["bandwidth"])
    assert all(r["total_ms"] is None for r in rows["share"])
    # each experiment alone, too
    assert transfers.copy_bandwidth([4096], references=False, **PAST)[0]["status"] == SKIPPED
    assert transfers.overlap_experiment("Conv5", 2, batch=4, **PAST)["timeline"] == []
    assert transfers.transfer_share("Conv5", batch=4, **PAST)["status"] == SKIPPED


def test_measure_without_deadline_skips_nothing():
    rows = transfers.measure(["Conv5"], batch=4, chunks=2, sizes=[4096], repeats=3,
                             deadline=None, time_limit=7.5)
    statuses = [r["status"] for k in ("bandwidth", "overlap", "share") for r in rows[k]]
    assert len(statuses) == 4 + 1 + len(transfers.TRANSFER_STRATEGIES)
    assert not any(s.startswith("skipped") for s in statuses)
    if backend.MODE == "gpu":
        assert set(statuses) == {"ok"} and rows["timeline"]


@simulator_only
def test_command_line_save_without_a_gpu_returns_1_at_once(tmp_path, capsys):
    assert transfers.main(["--save", "--out", str(tmp_path), "--time-limit", "30"]) == results.REFUSED
    out = capsys.readouterr().out
    assert "not measured: no CUDA GPU" in out and "nothing was saved" in out
    assert "ESTIMATE" not in out  # nothing else is run first
    assert list(tmp_path.iterdir()) == []


def test_command_line_rejects_a_time_limit_that_is_not_positive(capsys):
    with pytest.raises(SystemExit) as exc:
        transfers.main(["--time-limit", "0"])
    assert exc.value.code == 2 and "--time-limit must be > 0" in capsys.readouterr().err
