"""The sentences notebooks 10 to 12 print about their measurements hold for the numbers beside
them: a run whose layers out-compute its own ceiling is called inconsistent, not read; rates
say which FLOPs they count; ridge sides, the dense intensity formula, ResNeXt's groups, bias
and 'same' padding are computed, not typed."""

from __future__ import annotations

import warnings

import pytest
import torch
import torch.nn.functional as F

from helpers.conv import conv2d, same_padding
from helpers.conv.config import ConvConfig
from helpers.device.backend import lookup_gpu
from helpers.experiments.todays_layers import compare as tc
from helpers.experiments.todays_layers import findings as tlf
from helpers.paper import TABLE_I


def _layer(kind, intensity, gflop_s, network="MobileNet-V2", nbytes=3_000_000):
    return dict(network=network, layer_type=kind, intensity=intensity, gflop_s=gflop_s,
                bytes=nbytes, status="ok", name=f"{kind} {intensity}")


SHARES = [dict(network="MobileNet-V2", layer_type="depthwise", flop_share=0.07, time_share=0.44),
          dict(network="ResNeXt-50 (32x4d)", layer_type="1x1", flop_share=0.92,
               time_share=0.83)]
LIB = dict(strategy="reference", name="features.3.conv.1.0", network="MobileNet-V2",
           layer_type="depthwise", library="oneDNN", kernel="jit_dw", algorithm="direct",
           median_ms=0.508, flops=8_128_512, gflop_s=16.0,
           kernels="reorder a 0.125 ms; convolution jit_dw 0.261 ms; reorder b 0.122 ms")
#: a quiet run: ceiling 174 GFLOP/s, 12.5 GB/s; the layers under their roofs
QUIET = {"peak_flops": 174e9, "bandwidth": 12.5e9}
#: a busy run: the GEMM that measured the ceiling shared its core, 55 GFLOP/s
BUSY = {"peak_flops": 55e9, "bandwidth": 12.5e9}
TIMED = [_layer("depthwise", 2.25, 9.5), _layer("depthwise", 0.9, 4.0),
         _layer("1x1", 10.2, 87.0), _layer("1x1", 5.3, 60.0),
         _layer("1x1", 30.0, 150.0, network="ResNeXt-50 (32x4d)")]


def test_a_run_whose_layers_beat_its_own_ceiling_is_called_inconsistent():
    """The planted busy run: a 55 GFLOP/s ceiling below layers at 87 to 150 GFLOP/s (up to
    273 % of it). Nothing may be concluded from it: every reading says so and no more."""
    bad = tlf.roof_check(TIMED, BUSY)
    assert bad.startswith(tlf.INCONSISTENT) and "55 GFLOP/s" in bad and "273%" in bad
    assert tlf.roof_lines(TIMED, BUSY) == [bad]
    assert tlf.depthwise_reading(TIMED, BUSY, [LIB]) == bad
    found = dict(tlf.findings(SHARES, TIMED, [LIB], BUSY))
    texts = " ".join(found.values())
    assert texts.count(tlf.INCONSISTENT) == 2
    assert "ridge" not in texts and "roof account" not in texts
    assert tlf.roof_check(TIMED, None).startswith(tlf.INCONSISTENT)


def test_a_consistent_run_is_read():
    assert tlf.roof_check(TIMED, QUIET) is None
    # within the tolerance of noise, a layer at the ceiling is consistent
    assert tlf.roof_check([_layer("1x1", 50, 174 * (1 + tlf.ROOF_TOLERANCE) * 0.999)],
                          QUIET) is None
    assert tlf.roof_check([_layer("1x1", 50, 174 * (1 + tlf.ROOF_TOLERANCE) * 1.01)],
                          QUIET) is not None
    lines = tlf.roof_lines(TIMED, QUIET)
    assert lines[0].startswith("depthwise    2 layers:") and "2 left of the ridge (13.9" in lines[0]
    # 1x1: 87 GFLOP/s at 10.2 FLOP/B, under a slope of 12.5 x 10.2 = 127.5: 68 %; 60 at 5.3,
    # under 66.25: 91 %; 150 at 30, under the flat 174: 86 %. Median 86 %.
    assert "median 86% of the roof above them" in lines[1]
    found = dict(tlf.findings(SHARES, TIMED, [LIB], QUIET))
    first = found["convolutions are computation-intensive and arithmetic sets their speed "
                  "(IV-A, IV-B)"]
    assert "at 2.25 FLOP/B at most, left of this device's ridge (13.9 FLOP/B)" in first


def test_layers_above_the_memory_slope_are_counted_as_cache_resident():
    """A small layer can beat the memory roof from the caches: counted, not inconsistent."""
    fast = [_layer("1x1", 5.3, 130.0)]            # slope 66 GFLOP/s there, ceiling 174
    assert tlf.roof_check(fast, QUIET) is None
    assert "1 above the memory roof" in tlf.roof_lines(fast, QUIET)[0]


def test_the_depthwise_reading_is_printed_from_the_data():
    text = tlf.depthwise_reading(TIMED, QUIET, [LIB])
    # roof at 2.25 FLOP/B: 12.5 x 2.25 = 28 GFLOP/s, 16 % of 174; reached 9.5 / 28.1 = 34 %
    # and 4.0 / 11.25 = 36 %: median 35 %
    assert "at most 2.25 FLOP/B" in text and "at most 28 GFLOP/s, 16% of the compute" in text
    assert "median 35% of that roof" in text
    assert "layout reorders took 0.247 of 0.508 ms" in text
    assert "at most 3.0 MB" in text and "came from the caches" in text
    assert "bringing the data" not in text


def test_the_ridge_sides_of_table_i_are_computed():
    k40 = lookup_gpu("Tesla K40c")
    ridge = k40.fp32_flops / k40.bandwidth_bytes_s
    text = tlf.ridge_sides(TABLE_I, ridge)
    right, left = text.split("; left of it (memory-bound): ")
    assert [c.name for c in TABLE_I if tc.intensity(c) <= ridge] == left.split(", ")
    for c in TABLE_I:
        assert (c.name in right) == (tc.intensity(c) > ridge)
    assert tlf.ridge_sides(TABLE_I, 1e9).endswith(", ".join(c.name for c in TABLE_I))


def test_rates_name_the_flops_they_count():
    """Winograd counts its own FLOPs (transforms and 16 GEMMs), not the layer's direct ones."""
    wino = dict(LIB, strategy="winograd", median_ms=2.0, gflop_s=43.2e6 / 2e-3 / 1e9,
                kernels=None)
    untimed = dict(LIB, strategy="fft", median_ms=None, gflop_s=None)
    lib, w, u = tlf.rate_rows([LIB, wino, untimed])
    assert lib["direct_equiv_gflop_s"] == pytest.approx(8_128_512 / 0.508e-3 / 1e9)
    assert lib["own_gflop_s"] is None                      # the library's own count: unknown
    assert w["direct_equiv_gflop_s"] == pytest.approx(8_128_512 / 2e-3 / 1e9)
    assert w["own_gflop_s"] == pytest.approx(21.6)
    assert u["direct_equiv_gflop_s"] is None and u["own_gflop_s"] is None
    note = tlf.rate_note([LIB, wino, untimed])
    assert "winograd on the depthwise layer (MobileNet-V2): it counts 43.2 MFLOP where " \
           "direct convolution counts 8.1" in note
    assert set(tlf.RATE_COLUMNS) >= {"direct_equiv_gflop_s", "own_gflop_s"}


def test_a_dense_layers_intensity_grows_with_k_and_c_as_the_formula_says():
    """Stride 1, P = H: intensity = (RS / 2) / (1/K + 1/C + RS / (N P Q)), exactly."""
    for k, c in ((64, 64), (512, 64), (64, 512)):
        cfg = ConvConfig.from_shapes((1, c, 28, 28), (k, c, 3, 3), 1, 1)
        formula = (9 / 2) / (1 / k + 1 / c + 9 / (28 * 28))
        assert tc.intensity(cfg) == pytest.approx(formula)
    base = tc.intensity(ConvConfig.from_shapes((1, 64, 28, 28), (64, 64, 3, 3), 1, 1))
    assert tc.intensity(ConvConfig.from_shapes((1, 64, 28, 28), (512, 64, 3, 3), 1, 1)) > base


def test_a_stride_2_1x1_layer_uses_a_quarter_of_its_input():
    cfg = ConvConfig.from_shapes((1, 256, 56, 56), (512, 256, 1, 1), 2, 0)
    used = torch.zeros(cfg.x_shape[2:])
    used[::2, ::2] = 1                                # the positions a 1 x 1 stride-2 filter reads
    assert used.mean().item() == 0.25 and (cfg.p, cfg.q) == (28, 28)


def test_bias_and_same_padding_with_an_odd_total():
    """'same' with a 2 x 4 kernel: totals 1 and 3, so 0 on top and 1 at the bottom, 1 left and
    2 right, torch's own rule; bias added once per filter."""
    assert same_padding(2, 4, 1, 1) == ((0, 1), (1, 1))
    g = torch.Generator().manual_seed(0)
    x, w, b = (torch.randn(s, generator=g) for s in ((1, 2, 5, 6), (3, 2, 2, 4), (3,)))
    y = conv2d(x, w, b, padding="same", strategy="im2col-gemm")
    assert y.shape == (1, 3, 5, 6)
    by_hand = F.conv2d(F.pad(x, (1, 2, 0, 1)), w) + b.view(1, -1, 1, 1)
    torch.testing.assert_close(y, by_hand, rtol=1e-5, atol=1e-5)
    with warnings.catch_warnings():   # torch: an even kernel makes it pad a copy of x
        warnings.simplefilter("ignore", UserWarning)
        ref = F.conv2d(x, w, b, padding="same")
    torch.testing.assert_close(y, ref, rtol=1e-5, atol=1e-5)


def _ceiling(name, status="ok"):
    return dict(experiment="ceiling", name=name, status=status, device="CPU: test")


def test_the_ceilings_line_gives_the_ridge_only_when_both_were_measured():
    """A busy machine can skip a ceiling's point over its budget: the line names the missing
    ceiling and why, and gives no ridge (reading one as zero or dividing by nothing is wrong)."""
    roof = dict(QUIET, device="CPU: test", peak_source="measured: GEMM",
                bandwidth_source="measured: ReLU", nominal_flops=None)
    both = tlf.ceiling_lines([_ceiling("bandwidth"), _ceiling("compute")], roof)
    assert both == [("CPU: test: bandwidth 12.5 GB/s (measured: ReLU); compute 174 GFLOP/s "
                     "(measured: GEMM); ridge 13.9 FLOP/B")]
    skipped = "skipped: estimated 1.2 s per call, about 4.1 s for the point, over the 3 s budget"
    lines = tlf.ceiling_lines([_ceiling("bandwidth", skipped), _ceiling("compute")],
                              dict(roof, bandwidth=None))
    assert lines[0] == "CPU: test: compute 174 GFLOP/s (measured: GEMM)"
    assert lines[1].startswith(f"CPU: test: the bandwidth ceiling was not measured: {skipped}")
    assert "less busy" in lines[1] and not any("ridge" in line for line in lines)
    failed = tlf.ceiling_lines([_ceiling("bandwidth", "failed: RuntimeError: x"),
                                _ceiling("compute", "failed: RuntimeError: x")], None)
    assert failed == ["CPU: test: the bandwidth ceiling was not measured: failed: RuntimeError: x",
                      "CPU: test: the compute ceiling was not measured: failed: RuntimeError: x"]
    nominal = tlf.ceiling_lines([], dict(roof, nominal_flops=200e9, nominal_source="estimated"))
    assert nominal[-1] == "nominal peak 200 GFLOP/s (estimated)"
