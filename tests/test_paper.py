"""helpers.paper: the study's Table I layers and the GEMMs they become under im2col."""

from __future__ import annotations

import numpy as np
import pytest

from helpers.conv import ConvConfig
from helpers.paper import TABLE_I, GemmShape, im2col_gemm

STUDY_TUPLES = {
    "Conv1": (128, 128, 96, 11, 1),
    "Conv2": (128, 128, 96, 3, 1),
    "Conv3": (128, 32, 128, 9, 1),
    "Conv4": (128, 16, 128, 7, 1),
    "Conv5": (128, 13, 384, 3, 1),
}


def test_table_i_has_the_studys_five_layers():
    assert [layer.name for layer in TABLE_I] == list(STUDY_TUPLES)
    for layer in TABLE_I:
        assert isinstance(layer, ConvConfig)
        assert layer.study == STUDY_TUPLES[layer.name]
        # in cuDNN symbols: (N, H = W, K filters, R = S kernel, stride)
        assert (layer.n, layer.h, layer.k, layer.r, layer.stride_h) == STUDY_TUPLES[layer.name]
        assert (layer.w, layer.s, layer.stride_w) == (layer.h, layer.r, layer.stride_h)
        assert layer.pad_h == layer.pad_w == 0


def test_input_channels_as_documented():
    assert {layer.name: layer.c for layer in TABLE_I} == {
        "Conv1": 3, "Conv2": 3, "Conv3": 128, "Conv4": 128, "Conv5": 384}


@pytest.mark.parametrize("name, p", [
    ("Conv1", 118), ("Conv2", 126), ("Conv3", 24), ("Conv4", 10), ("Conv5", 11)])
def test_out_size_of_table_i(name, p):
    layer = next(layer for layer in TABLE_I if layer.name == name)
    assert layer.p == layer.q == p


@pytest.mark.parametrize("i, k, s, padding, expected", [
    (224, 11, 4, 2, 55),   # AlexNet conv1
    (13, 3, 1, 1, 13),     # "same" padding
    (7, 3, 2, 0, 3),
    (8, 3, 2, 0, 3),       # floor division
    (5, 5, 1, 0, 1),
])
def test_out_size_formula(i, k, s, padding, expected):
    cfg = ConvConfig.from_study(b=1, i=i, f=1, k=k, s=s, c=1, padding=padding)
    assert cfg.p == cfg.q == expected


def test_from_study_names_the_layer_but_does_not_compare_it():
    a = ConvConfig.from_study(2, 9, 3, 3, 2, c=4, padding=1, name="A")
    assert (a.x_shape, a.w_shape, (a.stride_h, a.pad_h)) == ((2, 4, 9, 9), (3, 4, 3, 3), (2, 1))
    assert a.name == "A" and a == ConvConfig.from_study(2, 9, 3, 3, 2, c=4, padding=1)
    assert a.with_batch(5).study == (5, 9, 3, 3, 2) and a.with_batch(5).name == "A"
    assert a.with_batch(np.int64(4)).n == 4


@pytest.mark.parametrize("kwargs, message", [
    (dict(b=0), r"b \(batch\) must be an integer >= 1, got 0"),
    (dict(i=0), r"i \(input size\) must be"),
    (dict(f=0), r"f \(filters\) must be"),
    (dict(k=0), r"k \(kernel size\) must be"),
    (dict(s=0), r"s \(stride\) must be"),
    (dict(c=0), r"c \(input channels\) must be"),
    (dict(padding=-1), "padding must be an integer >= 0"),
    (dict(k=11), r"k = 11 \(kernel size\) is larger than the padded input i \+ 2 \* padding = 8"),
])
def test_from_study_names_the_studys_symbol_in_its_errors(kwargs, message):
    """Not the cuDNN name of the same size: the study's k is the kernel size, cuDNN's K the
    filters, so an error about "K" would send a learner to the wrong argument."""
    args = dict(b=1, i=8, f=2, k=3, s=1, c=1) | kwargs
    with pytest.raises(ValueError, match=message):
        ConvConfig.from_study(**args)


def test_with_batch_refuses_a_batch_below_one():
    with pytest.raises(ValueError, match="batch n must be an integer >= 1"):
        TABLE_I[0].with_batch(0)


def test_conv1_im2col_gemm_by_hand():
    g = im2col_gemm(TABLE_I[0])
    assert (g.m, g.k, g.n) == (96, 3 * 11 * 11, 128 * 118 * 118)
    assert (g.m, g.k, g.n) == (96, 363, 1_782_272)
    assert g.itemsize == 4
    assert g.flops == 2 * 96 * 363 * 1_782_272
    assert g.min_bytes == (96 * 363 + 363 * 1_782_272 + 96 * 1_782_272) * 4


def test_conv5_im2col_gemm_by_hand():
    g = im2col_gemm(TABLE_I[4])
    assert (g.m, g.k, g.n) == (384, 384 * 3 * 3, 128 * 11 * 11)
    assert (g.m, g.k, g.n) == (384, 3456, 15_488)
    assert g.flops == 2 * 384 * 3456 * 15_488


def test_gemm_flops_equal_layer_flops():
    for layer in TABLE_I:
        g = im2col_gemm(layer)
        assert g.flops == layer.flops
        b, i, f, k, s = layer.study
        p = (i - k) // s + 1
        assert layer.flops == 2 * b * f * p * p * layer.c * k * k
        assert layer.name in g.name


def test_conv1_is_about_124_gflop():
    assert TABLE_I[0].flops == pytest.approx(124.2e9, rel=1e-3)


@pytest.mark.parametrize("itemsize", [2, 4, 8])
def test_intensity_is_flops_over_min_bytes(itemsize):
    for layer in TABLE_I:
        g = im2col_gemm(layer, itemsize)
        assert g.itemsize == itemsize
        assert g.min_bytes == (g.m * g.k + g.k * g.n + g.m * g.n) * itemsize
        assert g.intensity == pytest.approx(g.flops / g.min_bytes)
    # halving the element size doubles the intensity
    assert im2col_gemm(TABLE_I[2], 2).intensity == pytest.approx(
        2 * im2col_gemm(TABLE_I[2], 4).intensity)


def test_square_gemm_intensity_is_n_over_6_in_float32():
    for n in (64, 512, 4096):
        assert GemmShape("sq", n, n, n).intensity == pytest.approx(n / 6)


def test_layers_are_immutable():
    with pytest.raises(AttributeError):
        TABLE_I[0].n = 1  # type: ignore[misc]


def test_figure2_pairs_the_shares_with_the_networks_in_the_texts_order():
    # Section IV-A lists "AlexNet, GoogleNet, OverFeat and VGG" and gives "86%, 89%, 90% and 94%
    # respectively"; the caption of Figure 2 lists them in another order, which must not be used.
    from helpers.paper import STUDY_FIGURE2
    assert STUDY_FIGURE2 == {"alexnet": 0.86, "googlenet": 0.89, "overfeat": 0.90, "vgg16": 0.94}


def test_figure5_memory_ranges_order_as_the_study_reads_them():
    from helpers.paper import STUDY_FIGURE_5_MB as mb
    assert all(lo < hi for lo, hi in mb.values())
    assert min(mb, key=lambda n: mb[n][1]) == "cuda-convnet2"   # "the lowest consumption"
    assert max(mb, key=lambda n: mb[n][1]) == "fbfft"           # FFT "the highest"
    assert sorted(mb, key=lambda n: mb[n][1])[1] == "Torch-cunn"  # "followed closely"
