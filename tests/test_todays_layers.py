"""Notebook 12's experiment: the layers of MobileNet-V2, ResNeXt-50 and ConvNeXt-Tiny listed,
classified and counted; FLOPs, bytes and intensity; five representative layers against
torchvision and, in every strategy, against the float64 reference; the library's choice; the
ceilings and the roof; save and read back with provenance; the command's refusals. No test
asserts a speed."""

from __future__ import annotations

import dataclasses
import json

import pytest
import torch
from torch import nn

from helpers import results
from helpers.conv import STRATEGIES, ConvConfig, conv2d
from helpers.conv.check import reference, rel_error
from helpers.device import backend
from helpers.experiments import gpu_reference
from helpers.experiments.todays_layers import compare as tc
from helpers.experiments.todays_layers import networks as tl
from helpers.experiments.algorithm_choice import FAMILIES

needs_gpu = pytest.mark.skipif(backend.MODE != "gpu", reason="needs a real CUDA GPU")
no_gpu = pytest.mark.skipif(backend.MODE == "gpu", reason="checks the refusal without a GPU")

#: Conv2d layers per type, counted from each network's definition (torchvision, and the papers):
#: MobileNet-V2 has 17 inverted-residual blocks (repeats 1, 2, 3, 4, 3, 3, 1), each with one
#: depthwise 3 x 3, a 1 x 1 projection and, but for the first, a 1 x 1 expansion, plus the dense
#: 3 x 3 stem and the final 1 x 1 (320 -> 1280): 17 + 16 + 17 + 1 = 34 1 x 1. ResNeXt-50 has
#: 3 + 4 + 6 + 3 = 16 bottlenecks, each a grouped 3 x 3 and two 1 x 1, four 1 x 1 shortcuts and
#: the 7 x 7 stem. ConvNeXt-Tiny has 3 + 3 + 9 + 3 = 18 blocks with one 7 x 7 depthwise each,
#: the 4 x 4 stem and three 2 x 2 downsamplers; its 1 x 1 layers are nn.Linear.
COUNTS = {"mobilenet_v2": {"depthwise": 17, "1x1": 34, "dense kxk": 1},
          "resnext50_32x4d": {"grouped": 16, "1x1": 36, "dense kxk": 1},
          "convnext_tiny": {"depthwise": 18, "dense kxk": 4}}

#: Multiply-adds per 224 x 224 image as the papers give them: MobileNet-V2 300M (Sandler et al.,
#: Table 4), ResNeXt-50 32x4d 4.2G (Xie et al., Table 1), ConvNeXt-T 4.5G (Liu et al., Table 1).
PAPER_MACS = {"mobilenet_v2": 300e6, "resnext50_32x4d": 4.2e9, "convnext_tiny": 4.5e9}


@pytest.fixture(scope="module")
def torchvision():
    """torchvision, imported by the tests that use it (a bare GPU server may lack it)."""
    return pytest.importorskip("torchvision")


@pytest.fixture(scope="module")
def listed(torchvision):
    return {net: tl.list_layers(net) for net in tl.NETWORKS}


def _own_count(torchvision, network: str) -> dict[str, int]:
    """The layer types counted straight from the modules' attributes, independently of
    :func:`tc.layer_type`."""
    counts: dict[str, int] = {}
    with torch.device("meta"):
        model = getattr(torchvision.models, network)(weights=None)
    for m in model.modules():
        if isinstance(m, nn.Conv2d):
            if m.groups == m.in_channels > 1:
                kind = "depthwise"
            elif m.groups > 1:
                kind = "grouped"
            elif m.kernel_size == (1, 1):
                kind = "1x1"
            else:
                kind = "dilated" if m.dilation != (1, 1) else "dense kxk"
            counts[kind] = counts.get(kind, 0) + 1
    return counts


@pytest.mark.parametrize("network", list(tl.NETWORKS))
def test_every_conv_layer_is_listed_and_classified(listed, torchvision, network):
    rows = listed[network]
    got = {t: sum(r["layer_type"] == t for r in rows) for t in tl.LAYER_TYPES}
    own = _own_count(torchvision, network)
    assert {t: n for t, n in got.items() if n} == COUNTS[network] == own
    assert [r["index"] for r in rows] == list(range(len(rows)))
    assert all(r["network"] == tl.NETWORKS[network] and r["n"] == 1 for r in rows)
    assert rows[0]["c"] == 3 and rows[0]["h"] == rows[0]["w"] == 224   # the image itself


@pytest.mark.parametrize("network", list(tl.NETWORKS))
def test_flops_are_convconfig_flops_and_add_up_to_the_papers(listed, network):
    rows = listed[network]
    for r in rows:
        cfg = tc.config_of(r)
        assert r["flops"] == cfg.flops == 2 * cfg.n * cfg.k * cfg.p * cfg.q * (
            cfg.c // cfg.groups) * cfg.r * cfg.s
        assert r["bytes"] == tc.bytes_moved(cfg) and r["intensity"] == pytest.approx(
            cfg.flops / r["bytes"])
    macs = sum(r["flops"] for r in rows) / 2
    if network == "convnext_tiny":
        macs += tl.linear_flops(network) / 2
    assert macs == pytest.approx(PAPER_MACS[network], rel=0.03)


def test_a_depthwise_layer_by_hand():
    cfg = tc.REPRESENTATIVE[0]                       # x (1, 144, 56, 56), w (144, 1, 3, 3)
    assert cfg.flops == 2 * 1 * 144 * 56 * 56 * 1 * 3 * 3 == 8_128_512
    assert tc.bytes_moved(cfg) == 4 * (144 * 56 * 56 + 144 * 9 + 144 * 56 * 56) == 3_617_856
    assert tc.intensity(cfg) == pytest.approx(8_128_512 / 3_617_856)   # about R S / 4
    assert tc.intensity(cfg) == pytest.approx(9 / 4, rel=0.01)


@pytest.mark.parametrize("x, w, kw, kind", [
    ((1, 8, 9, 9), (8, 1, 3, 3), {"padding": 1, "groups": 8}, "depthwise"),
    ((1, 8, 9, 9), (16, 1, 3, 3), {"groups": 8}, "depthwise"),          # channel multiplier 2
    ((1, 8, 9, 9), (8, 2, 3, 3), {"groups": 4}, "grouped"),
    ((1, 8, 9, 9), (8, 2, 1, 1), {"groups": 4}, "grouped"),             # grouped first
    ((1, 8, 9, 9), (4, 8, 1, 1), {}, "1x1"),
    ((1, 8, 9, 9), (4, 8, 3, 3), {"dilation": 2}, "dilated"),
    ((1, 8, 9, 9), (4, 8, 3, 3), {"stride": 2}, "dense kxk"),
    ((1, 1, 9, 9), (4, 1, 3, 3), {}, "dense kxk"),                     # C = groups = 1
])
def test_layer_type(x, w, kw, kind):
    assert tc.layer_type(ConvConfig.from_shapes(x, w, **kw)) == kind


def test_row_and_config_round_trip_and_refuse_unknown_fields():
    cfg = dataclasses.replace(ConvConfig.from_shapes((2, 6, 11, 9), (4, 3, 3, 2), (2, 1), (1, 0),
                                                     (1, 2), 2), name="Net: block.conv")
    r = tc.row(cfg, "layer", index=3)
    assert list(r) == list(tc.FIELDS) and r["stride"] == "2x1" and r["dilation"] == "1x2"
    assert (r["network"], r["name"], r["groups"]) == ("Net", "block.conv", 2)
    assert tc.config_of(r) == cfg and tc.config_of(r).name == cfg.name
    with pytest.raises(ValueError, match="FIELDS"):
        tc.row(cfg, "layer", speed=1)


def test_the_representative_layers_are_torchvisions(listed, torchvision):
    by = {f"{r['network']}: {r['name']}": tc.config_of(r) for rows in listed.values()
          for r in rows}
    for cfg in tc.REPRESENTATIVE[:4]:
        assert by[cfg.name] == cfg, cfg.name
    assert [tc.layer_type(c) for c in tc.REPRESENTATIVE] == [
        "depthwise", "grouped", "depthwise", "1x1", "dilated"]
    # DeepLabV3's backbone: ResNet-50 with layer3's and layer4's strides replaced by dilation
    with torch.device("meta"):
        net = torchvision.models.resnet50(weights=None,
                                          replace_stride_with_dilation=[False, True, True])
    seen = {}
    net.layer3[1].conv2.register_forward_hook(lambda m, i, o: seen.update(x=tuple(i[0].shape)))
    with torch.no_grad():
        net.eval()(torch.empty(1, 3, 224, 224, device="meta"))
    m, dil = net.layer3[1].conv2, tc.REPRESENTATIVE[4]
    assert ConvConfig.from_shapes(seen["x"], tuple(m.weight.shape), m.stride, m.padding,
                                  m.dilation, m.groups) == dil


@pytest.mark.parametrize("cfg", tc.REPRESENTATIVE, ids=lambda c: tc.layer_type(c))
@pytest.mark.slow
def test_every_cpu_strategy_matches_float64_or_refuses_by_name(cfg):
    gen = torch.Generator().manual_seed(1)
    x, w = torch.randn(cfg.x_shape, generator=gen), torch.randn(cfg.w_shape, generator=gen)
    y64 = reference(x, w, **cfg.kwargs)
    for name, strat in STRATEGIES.items():
        if "cpu" not in strat.devices:
            continue
        reason = strat.supports(cfg, "cpu")
        if reason:
            assert name == "winograd" and ("3 x 3 kernel" in reason or "dilation" in reason)
            continue
        y = conv2d(x, w, **cfg.kwargs, strategy=name, device="cpu")
        assert rel_error(y, y64) <= tc.tolerance(name), name


@pytest.mark.slow
def test_the_cuda_path_checks_tiny_copies_in_the_simulator():
    strategies = ("direct-naive", "direct-tiled", "im2col-gemm", "fft", "winograd")
    for cfg in tc.REPRESENTATIVE:
        small = tc.tiny(cfg)
        assert tc.layer_type(small) == tc.layer_type(cfg)
        assert (small.r, small.s, small.stride_h, small.dil_h, small.pad_h) == (
            cfg.r, cfg.s, cfg.stride_h, cfg.dil_h, cfg.pad_h)
        if cfg.groups > 1:                                  # the same channels per group
            assert small.c // small.groups == cfg.c // cfg.groups
    if backend.MODE != "simulator":
        pytest.skip("the simulator path runs without a GPU")
    rows = tc.compare(tc.REPRESENTATIVE, "cuda", strategies=strategies)
    ours = [r for r in rows if r["strategy"] != "reference"]
    assert len(ours) == len(strategies) * len(tc.REPRESENTATIVE)
    assert all(r["median_ms"] is None and r["device_kind"] == "simulator" for r in ours)
    for r in ours:
        if r["max_rel_error"] is None:
            assert r["strategy"] == "winograd" and r["layer_type"] in ("depthwise", "1x1",
                                                                      "dilated")
        else:
            assert r["max_rel_error"] <= tc.tolerance(r["strategy"]), r
            assert r["status"].startswith("checked: correctness only")
    assert all(r["status"].startswith("not measured") for r in rows
               if r["strategy"] == "reference")


def test_compare_on_the_cpu_names_the_library_and_checks_ours():
    rows = tc.compare(tc.REPRESENTATIVE[:1] + tc.REPRESENTATIVE[3:4], "cpu",
                      strategies=["im2col-gemm"], min_run_time=0.005)
    assert [r["strategy"] for r in rows] == ["reference", "im2col-gemm"] * 2
    for r in rows:
        assert r["status"].startswith("ok") and r["median_ms"] > 0 and r["threads"] == 1
        assert r["max_rel_error"] <= tc.tolerance(r["strategy"])
    for lib in rows[::2]:
        assert lib["library"] and lib["algorithm"] in FAMILIES and lib["kernel"]
    with pytest.raises(ValueError, match="strategies"):
        tc.compare([], "cpu", strategies=["direct-tiled"])        # no CPU code
    with pytest.raises(ValueError, match="device"):
        tc.compare([], "tpu")


def test_time_layers_shares_and_threads(listed):
    before = torch.get_num_threads()
    rows = tl.time_layers(listed["mobilenet_v2"][:3], batch=2, min_run_time=0.002)
    assert torch.get_num_threads() == before
    assert all(r["status"] == "ok" and r["median_ms"] > 0 and r["n"] == 2 for r in rows)
    assert rows[0]["flops"] == 2 * listed["mobilenet_v2"][0]["flops"]
    share = tl.shares(rows)
    assert sum(s["flop_share"] for s in share) == pytest.approx(1)
    assert sum(s["time_share"] for s in share) == pytest.approx(1)
    assert {s["layer_type"] for s in share} == {"dense kxk", "depthwise", "1x1"}
    with pytest.raises(ValueError, match="batch"):
        tl.time_layers(rows, batch=0)
    with pytest.raises(ValueError, match="threads"):
        tl.time_layers(rows, threads=0)
    with pytest.raises(ValueError, match="device"):
        tl.time_layers(rows, device="gpu")


def test_shares_of_synthetic_rows():
    base = dict.fromkeys(tc.FIELDS)
    rows = [dict(base, experiment="layer", network="N", device="D", n=1, layer_type=t,
                 flops=f, median_ms=ms, status="ok")
            for t, f, ms in (("depthwise", 10, 3.0), ("1x1", 90, 1.0), ("1x1", 0, 0.0))]
    rows.append(dict(rows[0], status="skipped: time limit of 1 s reached"))
    by = {s["layer_type"]: s for s in tl.shares(rows)}
    assert by["depthwise"]["flop_share"] == pytest.approx(0.1)
    assert by["depthwise"]["time_share"] == pytest.approx(0.75)
    assert by["1x1"]["layers"] == 2 and list(by) == ["depthwise", "1x1"]


def test_the_roof_says_where_each_number_comes_from():
    base = dict.fromkeys(tc.FIELDS)
    rows = [dict(base, experiment="ceiling", name="bandwidth", kernel="ReLU over 64 MiB",
                 bytes=2e9, median_ms=100.0, threads=1, device="CPU: X", device_kind="cpu",
                 status="ok"),
            dict(base, experiment="ceiling", name="compute", kernel="GEMM 1024", flops=4e9,
                 median_ms=20.0, threads=1, device="CPU: X", device_kind="cpu", status="ok")]
    env = {"cpu_peak_fp32_flops_estimate": 400e9, "cpu_logical_cores": 4,
           "cpu_peak_source": "4 cores x 2 GHz x 50"}
    roof = tl.roof(rows, env)
    assert roof["bandwidth"] == pytest.approx(20e9) and roof["peak_flops"] == pytest.approx(200e9)
    assert "measured" in roof["bandwidth_source"] and "measured" in roof["peak_source"]
    assert roof["nominal_flops"] == pytest.approx(100e9)        # one core of four
    assert roof["nominal_source"].startswith("estimated")
    gpu = [dict(r, device_kind="cuda", threads=None) for r in rows]
    roof = tl.roof(gpu, {"gpu_name": "G", "gpu_peak_fp32_flops": 60e12,
                         "gpu_peak_bandwidth_bytes_s": 3e12})
    assert roof["nominal_flops"] == 60e12 and roof["nominal_bandwidth"] == 3e12
    assert "datasheet" in roof["nominal_source"]
    assert tl.roof([dict(rows[0], status="failed")]) is None


def test_cpu_ceilings_are_measured_rows_even_on_a_busy_machine(monkeypatch):
    """Drawing the ReLU ceiling's operands takes 0.6 s on an idle two-core CPU, several times
    that while other work shares its cores: estimated over a sweep's default 3 s per point,
    the ceilings are still measured (they have their own budget)."""
    from helpers.experiments.throughput import budget

    real = budget.setup_seconds
    monkeypatch.setattr(budget, "setup_seconds", lambda values: real(values) + 3.0)
    relu = budget.BackendBudget("elementwise", "relu", "torch", "cpu", "float32", 0.05, 2**24)
    assert relu.estimate(2**24).point_s > 3.0     # the default would skip it
    rows = tl.ceilings("cpu")
    assert [r["name"] for r in rows] == ["bandwidth", "compute"]
    assert all(r["status"] == "ok" and r["median_ms"] > 0 and r["threads"] == 1 for r in rows)
    roof = tl.roof(rows)
    assert roof["peak_flops"] > 0 and roof["bandwidth"] > 0


def test_without_torchvision_the_networks_say_so(monkeypatch):
    monkeypatch.setattr(tl, "missing_requirement", lambda: "torchvision is not installed")
    rows = tl.measure("cpu", networks=["convnext_tiny"], strategies=[])
    layer = [r for r in rows if r["experiment"] == "layer"]
    assert len(layer) == 1 and layer[0]["status"] == "not measured: torchvision is not installed"
    assert {r["experiment"] for r in rows} == {"ceiling", "layer", "strategy"}
    assert [r["strategy"] for r in rows if r["experiment"] == "strategy"] == ["reference"] * 5


@pytest.mark.slow
def test_save_and_recorded_round_trip_with_provenance(tmp_path, torchvision):
    assert tl.main(["--quick", "--strategies", "", "--save", "--out", str(tmp_path)]) == 0
    (csv_path,) = tmp_path.glob(f"{tl.PREFIX}*.csv")
    meta = json.loads(csv_path.with_suffix(".json").read_text())
    assert meta["command"].startswith("python -m helpers.experiments.todays_layers --quick")
    assert meta["environment"]["cpu_model"] and meta["batches"] == [1]
    assert not tl.recorded(tmp_path)                        # CPU rows: not a GPU's
    assert "--device cuda --save" in tl.recorded(tmp_path).note
    cpu = tl.recorded(tmp_path, gpu_only=False, experiment="layer")
    assert len(cpu.rows) == 52 and all(r["device"].startswith("CPU: ") for r in cpu.rows)
    assert all(r["source"] == "reference" and r["status"] == "ok" for r in cpu.rows)
    # the same file as if a GPU had made it: labelled with the GPU, driver and date
    meta["environment"].update(gpu_name="NVIDIA H100 80GB HBM3", driver_version="580.1")
    rows = results.load(csv_path.stem, tmp_path).rows
    gpu_rows = [dict(r, device_kind="cuda") for r in rows]
    results.save(f"{tl.PREFIX}nvidia-h100", gpu_rows, directory=tmp_path, command=tl.COMMAND)
    gpu_json = tmp_path / f"{tl.PREFIX}nvidia-h100.json"
    gpu_json.write_text(json.dumps(dict(json.loads(gpu_json.read_text()),
                                        environment=meta["environment"])))
    rec = tl.recorded(tmp_path, experiment="layer")
    assert len(rec.rows) == 52
    assert rec.rows[0]["device"].startswith("GPU: NVIDIA H100 80GB HBM3 (driver 580.1), 20")
    assert "NVIDIA H100 80GB HBM3" in rec.note
    assert tl.shares(rec.rows) and tl.config_of(rec.rows[0]) == tc.config_of(cpu.rows[0])


@pytest.mark.parametrize("argv, words", [
    (["--device", "gpu"], "--device"),
    (["--batch", "0"], "--batch"),
    (["--batch", "one"], "--batch"),
    (["--networks", "vgg16"], "--networks"),
    (["--strategies", "magic"], "--strategies"),
    (["--device", "cpu", "--strategies", "direct-tiled"], "--strategies"),
    (["--threads", "0"], "--threads"),
    (["--time-limit", "0"], "--time-limit"),
    (["--out", "/proc/no/such/folder"], "--out"),
])
def test_the_command_refuses_bad_arguments_by_name(argv, words, capsys):
    with pytest.raises(SystemExit) as stop:
        tl.main(argv)
    assert stop.value.code == 2
    assert words in capsys.readouterr().err


@no_gpu
def test_the_command_refuses_to_save_gpu_rows_without_a_gpu(tmp_path, capsys):
    assert tl.main(["--device", "cuda", "--save", "--out", str(tmp_path)]) == results.REFUSED
    assert "nothing was saved" in capsys.readouterr().out and not list(tmp_path.iterdir())


def test_it_is_a_tier_two_part_of_the_gpu_recording():
    part = next(p for p in gpu_reference.PARTS if p.name == "todays-layers")
    assert part.tier == 2 and part.module == "helpers.experiments.todays_layers"
    assert part.budget_s <= 60 and part.time_limited
    assert "--save" in part.args and "cuda" in part.args
    assert part.dry_args[:2] == ("--device", "cpu") and "--quick" in part.dry_args


def test_the_figures_draw_rows_live_and_labelled(listed):
    pytest.importorskip("plotly")
    from helpers.figures import nb12_todays_networks as figs

    rows = tl.time_layers(listed["convnext_tiny"][:5], min_run_time=0.002)
    roof = tl.roof(tl.ceilings("cpu"))
    fig = figs.roofline_figure(rows, roof, title="t")
    names = [t.name for t in fig.data]
    assert any(n.startswith("memory bandwidth") and "measured" in n for n in names)
    assert any(n.startswith("compute ceiling") and "measured" in n for n in names)
    assert any(n.startswith("depthwise: ConvNeXt-Tiny") for n in names)
    assert fig.layout.xaxis.type == "log" and "FLOP per byte" in fig.layout.xaxis.title.text
    bars = figs.shares_figure(tl.shares(rows))
    assert {t.name for t in bars.data} == {"share of FLOPs", "share of time"}
    assert figs.strategies_figure([]).layout.annotations       # a message, not an error


@pytest.mark.gpu
@needs_gpu
def test_on_a_gpu_layers_ceilings_and_the_library_are_measured(torchvision):
    rows = tl.time_layers(tl.list_layers("mobilenet_v2")[:4], "cuda", batch=8)
    assert all(r["status"] == "ok" and r["median_ms"] > 0 and r["tf32"] is False for r in rows)
    assert all(r["status"] == "ok" for r in tl.ceilings("cuda"))
    lib = tc.library_choice(tc.REPRESENTATIVE[0], "cuda")
    assert lib["status"].startswith("ok") and lib["max_rel_error"] < 1e-4
    assert lib["algorithm"] in FAMILIES and torch.backends.cudnn.allow_tf32   # restored


def test_the_library_lines_and_findings_are_read_from_the_rows():
    from helpers.experiments.todays_layers import findings as tlf

    lib = dict(strategy="reference", name="dw", network="MobileNet-V2", layer_type="depthwise",
               library="oneDNN", kernel="jit_dw", algorithm="direct", median_ms=0.5,
               kernels="reorder a 0.25 ms; conv jit_dw 0.5 ms; reorder b 0.125 ms")
    ours = [dict(lib, strategy="im2col-gemm", median_ms=2.0, kernels=None),
            dict(lib, strategy="direct-naive", median_ms=4.0, kernels=None)]
    assert tlf.reorder_ms(lib) == 0.375
    assert tlf.library_lines([lib, *ours]) == [
        "depthwise MobileNet-V2: oneDNN ran jit_dw (direct), 0.5 ms; its layout reorders took "
        "0.375 ms of the verbose call; our best, im2col-gemm, 4.0x its time"]
    shares = [dict(network="MobileNet-V2", layer_type="depthwise", flop_share=0.05,
                   time_share=0.4),
              dict(network="ResNeXt-50 (32x4d)", layer_type="1x1", flop_share=0.9,
                   time_share=0.8)]
    timed = [dict(network="MobileNet-V2", layer_type="depthwise", intensity=2.25)]
    found = dict(tlf.findings(shares, timed, [lib, *ours],
                              roof={"peak_flops": 130e9, "bandwidth": 10e9}))
    assert "took 40%, at 2.25 FLOP/B at most, left of this device's ridge (13.0 FLOP/B)" in \
        found["convolutions are computation-intensive and arithmetic sets their speed (IV-A, IV-B)"]
    assert found["no single implementation is the fastest in all scenarios (IV-B, VI)"] == (
        "fastest here: the library (1 layers); the fastest of ours: depthwise (MobileNet-V2) "
        "im2col-gemm")
    assert "by 8.0x" in found["no single metric can determine the performance (VI)"]
