"""Today's layers in every strategy: bias, groups (depthwise included), dilation and 'same' or
'valid' padding, forward and backward, on the CPU and on the CUDA path (the simulator without
a GPU), each against torch in float64; what a strategy cannot compute is refused by name."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from helpers.conv import STRATEGIES, config_for, conv2d, conv2d_backward, resolve_padding
from helpers.conv.check import reference, reference_backward, rel_error, tolerance

#: (name, x shape, w shape, stride, padding, dilation, groups, with a bias)
CASES = [
    ("depthwise 3x3, bias", (2, 4, 9, 7), (4, 1, 3, 3), 1, 1, 1, 4, True),
    ("groups 2, stride 2, 3x2", (1, 6, 8, 9), (4, 3, 3, 2), 2, (1, 0), 1, 2, False),
    ("dilation 2, bias", (2, 3, 11, 10), (2, 3, 3, 3), 1, 2, 2, 1, True),
    ("dilation (2, 1), stride (1, 2)", (1, 2, 12, 9), (3, 2, 3, 2), (1, 2), 1, (2, 1), 1, False),
    ("same, odd total (4x2), bias", (2, 3, 7, 8), (4, 3, 4, 2), 1, "same", 1, 1, True),
    ("same, dilated depthwise", (1, 3, 9, 9), (3, 1, 3, 3), 1, "same", 2, 3, True),
    ("valid, channel multiplier 2", (1, 2, 6, 7), (4, 1, 3, 3), 1, "valid", 1, 2, False),
    ("batch 1, dilation 3, stride 2, groups 2", (1, 4, 13, 11), (2, 2, 3, 3), 2, 2, 3, 2, True),
]

#: What each strategy may refuse, and the words its refusal must contain.
REFUSALS = {"winograd": {"dilation": "dilation", "kernel": "3 x 3 kernel", "stride": "stride"}}

PAIRS = [(s, d) for s in STRATEGIES for d in STRATEGIES[s].devices
         if STRATEGIES[s].unavailable(d) is None]  # reference-tf32: only with TF32 (sm_80+)


def _case(name, xs, ws, stride, padding, dilation, groups, with_bias, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(xs).astype(np.float32)
    w = rng.standard_normal(ws).astype(np.float32)
    bias = rng.standard_normal(ws[0]).astype(np.float32) if with_bias else None
    kw = dict(stride=stride, padding=padding, dilation=dilation, groups=groups)
    return x, w, bias, kw


def _expected_refusal(strategy: str, ws, kw) -> str | None:
    """The words the refusal must hold, or None where the strategy must compute the case."""
    if strategy != "winograd":
        return None
    if kw["dilation"] != 1:
        return REFUSALS["winograd"]["dilation"]
    if ws[2:] != (3, 3):
        return REFUSALS["winograd"]["kernel"]
    if kw["stride"] != 1:
        return REFUSALS["winograd"]["stride"]
    return None


@pytest.mark.parametrize("strategy, device", PAIRS, ids=[f"{s}-{d}" for s, d in PAIRS])
@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
@pytest.mark.slow
def test_every_strategy_matches_torch_in_float64_or_refuses_by_name(case, strategy, device):
    x, w, bias, kw = _case(*case)
    y_ref = reference(x, w, bias=bias, **kw)
    dy = np.random.default_rng(1).standard_normal(y_ref.shape).astype(np.float32)
    grads_ref = reference_backward(x, w, dy, bias=bias, **kw)
    words = _expected_refusal(strategy, case[2], kw)
    if words:
        with pytest.raises(ValueError, match=words):
            conv2d(x, w, bias, strategy=strategy, device=device, **kw)
        return
    y = conv2d(x, w, bias, strategy=strategy, device=device, **kw)
    grads = conv2d_backward(x, w, dy, bias, strategy=strategy, device=device, **kw)
    assert y.shape == y_ref.shape and y.dtype == np.float32
    assert len(grads) == (3 if bias is not None else 2)
    tol = 1e-4 if STRATEGIES[strategy].precision == "float32" else tolerance(strategy)
    assert rel_error(y, y_ref) < tol
    for got, ref, what in zip(grads, grads_ref, ("dx", "dw", "db")):
        assert got.shape == ref.shape, what
        assert rel_error(got, ref) < tol, what


# torch warns that its own 'same' padding of an even kernel may copy the input: the reference's
# cost, not what the test checks
@pytest.mark.filterwarnings("ignore:Using padding='same' with even kernel lengths:UserWarning")
def test_same_padding_keeps_the_size_and_puts_the_odd_row_at_the_end_as_torch_does():
    x = np.random.default_rng(2).standard_normal((1, 1, 6, 6)).astype(np.float32)
    w = np.zeros((1, 1, 2, 2), np.float32)
    w[0, 0, 0, 0] = 1.0                      # y[p, q] = x_padded[p, q]: shows where the pad is
    y = conv2d(x, w, padding="same", strategy="direct-naive")
    assert y.shape == x.shape
    np.testing.assert_array_equal(y, x)      # total 1: no row above, the extra one below
    assert resolve_padding("same", (1, 1, 4, 5), 1, (1, 2)) == ((1, 4), (1, 0))
    assert resolve_padding("valid", (1, 1, 4, 5)) == ((0, 0), (0, 0))
    t = torch.nn.functional.conv2d(torch.from_numpy(x), torch.from_numpy(w), padding="same")
    np.testing.assert_array_equal(y, t.numpy())


def test_a_grouped_convolution_is_the_groups_side_by_side():
    """Depthwise: each output channel is its own channel's 2-D cross-correlation."""
    x, w, _, kw = _case(*CASES[0])
    y = conv2d(x, w, strategy="im2col-gemm", **kw)
    for c in range(x.shape[1]):
        alone = conv2d(x[:, c:c + 1], w[c:c + 1], padding=1, strategy="reference")
        np.testing.assert_allclose(y[:, c:c + 1], alone, rtol=1e-5, atol=1e-5)


def test_the_config_counts_flops_and_shapes_per_group():
    cfg = config_for((2, 8, 10, 10), (8, 1, 3, 3), padding=2, dilation=2, groups=8)
    assert cfg.w_shape == (8, 1, 3, 3) and cfg.y_shape == (2, 8, 10, 10)
    assert cfg.flops == 2 * 2 * 8 * 10 * 10 * 1 * 9          # C/groups = 1 channel a filter
    dense = config_for((2, 8, 10, 10), (8, 8, 3, 3), padding=1)
    assert dense.flops == 8 * cfg.flops
    for name, strat in STRATEGIES.items():
        if strat.supports(cfg) is None:
            assert strat.flops(cfg) >= cfg.flops // 2, name  # per-group runs add up


@pytest.mark.parametrize("kw, words", [
    (dict(groups=3), "groups = 3 must divide the channels C = 4"),
    (dict(groups=0), "groups must be an integer >= 1"),
    (dict(groups=2, w_shape=(4, 4, 3, 3)), "C/groups = 2 channels per filter, got 4"),
    (dict(dilation=0), "dilation must be >= 1"),
    (dict(dilation=(1, 2, 3)), "dilation must be an int or an"),
    (dict(dilation=5), "dilated by .* is larger than the padded input"),
    (dict(padding="full"), "padding must be an int, an .* 'same' or 'valid'"),
    (dict(padding="same", stride=2), "padding='same' needs stride 1"),
    (dict(bias=np.zeros(3, np.float32)), r"bias must have shape \(K,\) = \(4,\)"),
    (dict(bias=2), "third parameter is bias"),
    (dict(bias=np.array([1, 2])), "third parameter is bias"),
])
def test_bad_arguments_are_refused_naming_the_parameter(kw, words):
    x = np.ones((1, 4, 9, 9), np.float32)
    w = np.ones(kw.pop("w_shape", (4, 2 if kw.get("groups") == 2 else 4, 3, 3)), np.float32)
    bias = kw.pop("bias", None)
    with pytest.raises(ValueError, match=words):
        conv2d(x, w, bias, **kw)
    with pytest.raises(ValueError, match=words):
        conv2d_backward(x, w, np.ones((1, 4, 7, 7), np.float32), bias, **kw)


def test_a_dilated_filter_too_wide_for_the_tiled_kernels_tile_is_refused_by_name():
    x = np.ones((1, 1, 16, 16), np.float32)
    w = np.ones((1, 1, 3, 3), np.float32)
    with pytest.raises(ValueError, match=r"dilated by \(6, 6\), spanning 13x13"):
        conv2d(x, w, dilation=6, strategy="direct-tiled", device="cuda")


@pytest.mark.slow
def test_random_layers_with_groups_and_dilation_match_torch():
    """Seeded random shapes: groups 1, 2 or C; dilation 1, 2 or non-square; odd sizes; stride
    1 or 2; any padding; with and without a bias; three strategies on both devices."""
    rng = np.random.default_rng(11)
    for trial in range(6):
        c = int(rng.choice([2, 4]))
        groups = int(rng.choice([1, 2, c]))
        k = groups * int(rng.integers(1, 3))
        r, s = int(rng.integers(1, 4)), int(rng.integers(1, 4))
        dil = [1, 2, (2, 1), (1, 3)][trial % 4]
        stride = int(rng.integers(1, 3))
        pad = int(rng.integers(0, 3))
        h, wd = int(rng.integers(9, 14)), int(rng.integers(9, 14))
        case = ("random", (int(rng.integers(1, 3)), c, h, wd), (k, c // groups, r, s), stride,
                pad, dil, groups, bool(trial % 2))
        x, w, bias, kw = _case(*case, seed=trial)
        y_ref = reference(x, w, bias=bias, **kw)
        dy = rng.standard_normal(y_ref.shape).astype(np.float32)
        grads_ref = reference_backward(x, w, dy, bias=bias, **kw)
        for strategy, device in [("direct-naive", "cpu"), ("direct-naive", "cuda"),
                                 ("im2col-gemm", "cpu"), ("im2col-gemm", "cuda"),
                                 ("direct-tiled", "cuda"), ("fft", "cpu")]:
            y = conv2d(x, w, bias, strategy=strategy, device=device, **kw)
            grads = conv2d_backward(x, w, dy, bias, strategy=strategy, device=device, **kw)
            assert rel_error(y, y_ref) < 1e-4, (case, strategy, device)
            for got, ref in zip(grads, grads_ref):
                assert rel_error(got, ref) < 1e-4, (case, strategy, device)


@pytest.mark.parametrize("strategy, runs", [("direct-naive", "forward_naive"),
                                            ("direct-tiled", "forward_tiled")])
@pytest.mark.slow
def test_a_depthwise_layer_runs_whole_on_the_depthwise_kernels(strategy, runs, monkeypatch):
    """groups = C on the CUDA path: one launch of the depthwise kernel for all channels (with a
    channel multiplier of 2 here), not one dense launch per channel."""
    from helpers.conv import depthwise

    calls = []
    original = getattr(depthwise, runs)
    monkeypatch.setattr(depthwise, runs, lambda *a: calls.append(a[2]) or original(*a))
    x, w, bias, kw = _case("multiplier 2", (2, 3, 10, 9), (6, 1, 3, 3), 1, 1, (1, 2), 3, True)
    y = conv2d(x, w, bias, strategy=strategy, device="cuda", **kw)
    assert len(calls) == 1 and calls[0].groups == 3 and calls[0].k == 6
    assert rel_error(y, reference(x, w, bias=bias, **kw)) < 1e-5


def test_the_depthwise_tiled_kernel_refuses_a_window_wider_than_its_tile():
    x = np.ones((1, 2, 24, 24), np.float32)
    w = np.ones((2, 1, 5, 5), np.float32)
    with pytest.raises(ValueError, match=r"windows spanning up to 9x9; this one spans 13x13"):
        conv2d(x, w, dilation=3, groups=2, strategy="direct-tiled", device="cuda")
    y = conv2d(x, w, dilation=3, groups=2, strategy="direct-naive", device="cuda")
    assert rel_error(y, reference(x, w, dilation=3, groups=2)) < 1e-5
