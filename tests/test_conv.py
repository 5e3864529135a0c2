"""helpers.conv: every strategy, forward and backward, on the CPU and the CUDA path (the
simulator without a GPU), against the float64 reference (helpers.conv.check)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from helpers.device import backend
from helpers.conv import STRATEGIES, ConvConfig, conv2d, conv2d_backward, simulator_refusal

from helpers.conv import check as ref


#: What a strategy accepts beyond any shape (its ``supports``), so that the generator draws
#: those cases instead of filtering most draws away: Winograd F(2x2, 3x3) takes 3 x 3, stride 1.
ACCEPTS = {"winograd": {"kernel": (3, 3), "stride": (1, 1)}}


@st.composite
def conv_cases(draw, name: str = ""):
    """(x shape, w shape, stride, padding, seed) of a random layer that ``name`` accepts."""
    fixed = ACCEPTS.get(name, {})
    n, c, k = draw(st.integers(1, 3)), draw(st.integers(1, 5)), draw(st.integers(1, 4))
    ph, pw = draw(st.integers(0, 2)), draw(st.integers(0, 2))
    if "kernel" in fixed:
        r, s = fixed["kernel"]
        h = draw(st.integers(max(1, r - 2 * ph), 13))
        w = draw(st.integers(max(1, s - 2 * pw), 13))
    else:
        h, w = draw(st.integers(1, 13)), draw(st.integers(1, 13))
        r = draw(st.integers(1, min(5, h + 2 * ph)))
        s = draw(st.integers(1, min(5, w + 2 * pw)))
    stride = fixed.get("stride") or (draw(st.integers(1, 3)), draw(st.integers(1, 3)))
    seed = draw(st.integers(0, 2**31 - 1))
    return (n, c, h, w), (k, c, r, s), stride, (ph, pw), seed


def _rel(got, expected) -> float:
    got = np.asarray(got, np.float64)
    assert got.shape == expected.shape
    assert np.isfinite(got).all(), "non-finite output: an element was never written"
    return float(np.abs(got - expected).max() / max(np.abs(expected).max(), 1e-6))


#: Every (strategy, device) that can run here: reference-tf32 needs a GPU with TF32.
CASES = [(name, device) for name, s in STRATEGIES.items() for device in s.devices
         if s.unavailable(device) is None]
# Shared-memory kernels run a Python thread per CUDA thread with real barriers in the
# simulator: an order of magnitude slower, so fewer examples there.
SLOW = ({("direct-tiled", "cuda"), ("im2col-tiled", "cuda")}
        if backend.MODE == "simulator" else set())
HEALTH = [HealthCheck.filter_too_much, HealthCheck.too_slow]


@pytest.mark.parametrize("name,device", [c for c in CASES if c not in SLOW])
@given(data=st.data())
@settings(max_examples=25, deadline=None, suppress_health_check=HEALTH)
@pytest.mark.slow
def test_forward_and_backward_match_the_float64_reference(name, device, data):
    _check_case(name, device, data.draw(conv_cases(name), label="case"))


@pytest.mark.parametrize("name,device", sorted(SLOW))
@given(data=st.data())
@settings(max_examples=8, deadline=None, suppress_health_check=HEALTH)
@pytest.mark.slow
def test_shared_memory_kernels_match_the_float64_reference(name, device, data):
    _check_case(name, device, data.draw(conv_cases(name), label="case"))


def _check_case(name, device, case):
    x_shape, w_shape, stride, padding, seed = case
    strat = STRATEGIES[name]
    cfg = ConvConfig.from_shapes(x_shape, w_shape, stride, padding)
    assume(strat.supports(cfg, device) is None)
    if device == "cuda":
        assume(simulator_refusal(strat, cfg, backward=True) is None)
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(x_shape).astype(np.float32)
    w = rng.standard_normal(w_shape).astype(np.float32)
    dy = rng.standard_normal(cfg.y_shape).astype(np.float32)
    tol = ref.tolerance(name)

    y = conv2d(x, w, stride=stride, padding=padding, strategy=name, device=device)
    assert isinstance(y, np.ndarray) and y.dtype == np.float32
    assert _rel(y, ref.reference(x, w, stride, padding)) < tol

    dx, dw = conv2d_backward(x, w, dy, stride=stride, padding=padding, strategy=name, device=device)
    dx_ref, dw_ref = ref.reference_backward(x, w, dy, stride, padding)
    assert _rel(dx, dx_ref) < tol
    assert _rel(dw, dw_ref) < tol


@pytest.mark.parametrize("name,device", CASES)
@pytest.mark.slow
def test_named_awkward_cases(name, device):
    """Batch 1, a 1x1 kernel, a kernel as large as the padded input, stride 3 with padding 2."""
    rng = np.random.default_rng(7)
    for x_shape, w_shape, stride, padding in [
        ((1, 1, 1, 1), (1, 1, 1, 1), 1, 0),
        ((1, 2, 5, 7), (3, 2, 1, 1), 1, 0),
        ((2, 1, 3, 4), (2, 1, 5, 6), 1, 1),
        ((1, 2, 7, 9), (2, 2, 3, 2), 3, 2),
    ]:
        strat = STRATEGIES[name]
        cfg = ConvConfig.from_shapes(x_shape, w_shape, stride, padding)
        if strat.supports(cfg, device):
            continue
        x = rng.standard_normal(x_shape).astype(np.float32)
        w = rng.standard_normal(w_shape).astype(np.float32)
        dy = rng.standard_normal(cfg.y_shape).astype(np.float32)
        tol = ref.tolerance(name)
        pair = (cfg.stride_h, cfg.stride_w), (cfg.pad_h, cfg.pad_w)
        y = conv2d(x, w, stride=stride, padding=padding, strategy=name, device=device)
        assert _rel(y, ref.reference(x, w, *pair)) < tol
        dx, dw = conv2d_backward(x, w, dy, stride=stride, padding=padding,
                                 strategy=name, device=device)
        dx_ref, dw_ref = ref.reference_backward(x, w, dy, *pair)
        assert _rel(dx, dx_ref) < tol and _rel(dw, dw_ref) < tol


def test_the_reference_check_catches_a_wrong_answer():
    rng = np.random.default_rng(3)
    x = rng.standard_normal((1, 2, 6, 6)).astype(np.float32)
    w = rng.standard_normal((2, 2, 3, 3)).astype(np.float32)
    y = conv2d(x, w)
    expected = ref.reference(x, w)
    assert _rel(y, expected) < 1e-5
    off_by_one = np.roll(y, 1, axis=3)
    assert _rel(off_by_one, expected) > 1e-2
    with pytest.raises(AssertionError):
        _rel(np.full_like(y, np.nan), expected)


# ------------------------------------------------------------------------- kinds and devices


def test_numpy_in_numpy_out_and_tensor_in_tensor_out():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((1, 2, 5, 5)).astype(np.float32)
    w = rng.standard_normal((3, 2, 3, 3)).astype(np.float32)
    y_np = conv2d(x, w, strategy="im2col-gemm")
    y_t = conv2d(torch.from_numpy(x), torch.from_numpy(w), strategy="im2col-gemm")
    assert isinstance(y_np, np.ndarray) and isinstance(y_t, torch.Tensor)
    assert y_t.device.type == "cpu"
    np.testing.assert_allclose(y_t.numpy(), y_np, rtol=1e-6)
    # float64 input is accepted and converted to float32
    assert conv2d(x.astype(np.float64), w).dtype == np.float32


def test_pairs_and_ints_are_the_same():
    rng = np.random.default_rng(1)
    x = rng.standard_normal((1, 1, 6, 6)).astype(np.float32)
    w = rng.standard_normal((1, 1, 3, 3)).astype(np.float32)
    np.testing.assert_array_equal(conv2d(x, w, stride=2, padding=1),
                                  conv2d(x, w, stride=(2, 2), padding=(1, 1)))


# ------------------------------------------------------------------------------- bad input


GOOD_X = np.ones((1, 2, 5, 5), np.float32)
GOOD_W = np.ones((3, 2, 3, 3), np.float32)


@pytest.mark.parametrize("x,w,stride,padding,match", [
    (np.ones((2, 5, 5), np.float32), GOOD_W, 1, 0, "x must be 4-D"),
    (GOOD_X, np.ones((3, 2, 3), np.float32), 1, 0, "w must be 4-D"),
    (GOOD_X, np.ones((3, 4, 3, 3), np.float32), 1, 0, "channel mismatch"),
    (GOOD_X, np.ones((3, 2, 7, 3), np.float32), 1, 0, "larger than the padded input"),
    (GOOD_X, np.ones((3, 2, 8, 3), np.float32), 1, 1, "larger than the padded input"),
    (GOOD_X, GOOD_W, 0, 0, "stride must be >= 1"),
    (GOOD_X, GOOD_W, (1, -1), 0, "stride must be >= 1"),
    (GOOD_X, GOOD_W, 1, -1, "padding must be >= 0"),
    (GOOD_X, GOOD_W, 1.5, 0, "stride must be an integer"),
    (GOOD_X, GOOD_W, (1, 2, 3), 0, "stride must be an int or an"),
    (np.ones((0, 2, 5, 5), np.float32), GOOD_W, 1, 0, "batch N must be >= 1"),
    (GOOD_X, np.ones((0, 2, 3, 3), np.float32), 1, 0, "filters K must be >= 1"),
    (np.ones((1, 2, 5, 5), np.int32), GOOD_W, 1, 0, "floating-point"),
    ([[1.0]], GOOD_W, 1, 0, "NumPy array or a torch tensor"),
])
def test_bad_input_is_refused_with_the_reason(x, w, stride, padding, match):
    with pytest.raises(ValueError, match=match):
        conv2d(x, w, stride=stride, padding=padding)
    with pytest.raises(ValueError, match=match):
        conv2d_backward(x, w, np.ones((1, 3, 3, 3), np.float32), stride=stride, padding=padding)


def test_unknown_strategy_and_device():
    with pytest.raises(ValueError, match="strategy must be one of"):
        conv2d(GOOD_X, GOOD_W, strategy="winograd-4x4")
    with pytest.raises(ValueError, match="device must be 'cpu' or 'cuda'"):
        conv2d(GOOD_X, GOOD_W, device="tpu")


def test_dy_of_the_wrong_shape():
    with pytest.raises(ValueError, match=r"dy must have the output's shape \(1, 3, 3, 3\)"):
        conv2d_backward(GOOD_X, GOOD_W, np.ones((1, 3, 4, 3), np.float32))


def test_fft_and_winograd_refuse_non_finite_input_and_others_propagate_it():
    x = GOOD_X.copy()
    x[0, 0, 0, 0] = np.nan
    with pytest.raises(ValueError, match="fft needs finite values: x contains NaN.*every output"):
        conv2d(x, GOOD_W, strategy="fft")
    with pytest.raises(ValueError, match="winograd needs finite values: x contains NaN.*4 x 4"):
        conv2d(x, GOOD_W, strategy="winograd")
    dy = np.ones((1, 3, 3, 3), np.float32)
    dy[0, 1, 1, 1] = np.inf
    with pytest.raises(ValueError, match="winograd needs finite values: dy contains"):
        conv2d_backward(GOOD_X, GOOD_W, dy, strategy="winograd")
    assert [n for n, s in STRATEGIES.items() if s.finite_only] == ["fft", "winograd"]
    big = np.full((1, 1, 5, 5), 3e38, np.float32)   # finite, but their float32 sum overflows
    for strategy in ("fft", "winograd"):
        conv2d(big, GOOD_W[:1, :1], strategy=strategy)   # accepted: no NaN or infinity in it
    y = conv2d(x, GOOD_W, strategy="im2col-gemm")
    assert np.isnan(y[0, :, 0, 0]).all() and np.isfinite(y[0, :, 2, 2]).all()


def test_unsupported_configurations_say_why():
    with pytest.raises(ValueError, match="direct-tiled has no cpu implementation"):
        conv2d(GOOD_X, GOOD_W, strategy="direct-tiled", device="cpu")
    x = np.ones((1, 1, 13, 13), np.float32)
    w = np.ones((1, 1, 13, 13), np.float32)
    with pytest.raises(ValueError, match="up to 11x11"):
        conv2d(x, w, strategy="direct-tiled", device="cuda")
    assert STRATEGIES["direct-tiled"].supports(ConvConfig.from_shapes(x.shape, w.shape)) is not None


@pytest.mark.skipif(backend.MODE != "simulator", reason="simulator budget")
def test_a_layer_too_large_for_the_simulator_is_refused_up_front():
    x = np.ones((8, 16, 32, 32), np.float32)
    w = np.ones((16, 16, 3, 3), np.float32)
    with pytest.raises(ValueError, match="simulator"):
        conv2d(x, w, strategy="direct-naive", device="cuda")
    # the CPU path takes the same layer
    assert conv2d(x, w, strategy="direct-naive", device="cpu").shape == (8, 16, 30, 30)


# -------------------------------------------------------------------------------- registry


def test_registry_families_flops_and_workspace():
    assert {s.family for s in STRATEGIES.values()} == {"direct", "unrolling", "fft", "winograd",
                                                         "library"}
    assert {"direct-naive", "direct-tiled", "im2col-gemm", "im2col-tiled", "fft",
            "reference"} <= set(STRATEGIES)
    cfg = ConvConfig.from_shapes((2, 3, 9, 8), (4, 3, 3, 2), (2, 1), (1, 0))
    assert (cfg.p, cfg.q) == ((9 + 2 - 3) // 2 + 1, 8 - 2 + 1)
    assert STRATEGIES["direct-naive"].flops(cfg) == 2 * 2 * 4 * cfg.p * cfg.q * 3 * 3 * 2
    assert STRATEGIES["direct-naive"].flops(cfg, backward=True) == 3 * cfg.flops
    assert STRATEGIES["im2col-gemm"].workspace_bytes(cfg) == 3 * 3 * 2 * 2 * cfg.p * cfg.q * 4
    assert STRATEGIES["direct-naive"].workspace_bytes(cfg) == 0
    assert STRATEGIES["reference"].workspace_bytes(cfg) is None
    assert STRATEGIES["fft"].workspace_bytes(cfg) > 0
    assert "stride 1 natively" in STRATEGIES["fft"].stride_note
    for s in STRATEGIES.values():
        assert s.description and s.devices


@pytest.mark.slow
def test_check_command_reports_every_strategy(capsys):
    from helpers.conv.check import main

    assert main(["--check"]) == 0
    out = capsys.readouterr().out
    for name in STRATEGIES:
        assert name in out
    assert "FAILED" not in out and " ok" in out


def test_memory_report_puts_analytic_and_measured_side_by_side():
    from helpers.conv import memory_report

    x_shape, w_shape = (1, 16, 24, 24), (8, 16, 5, 5)
    cfg = ConvConfig.from_shapes(x_shape, w_shape, 1, 2)
    r = memory_report("im2col-gemm", x_shape, w_shape, padding=2)
    assert r["flops"] == cfg.flops
    assert r["workspace_bytes"] == 16 * 25 * 24 * 24 * 4
    assert r["output_bytes"] == 8 * 24 * 24 * 4
    assert r["peak_bytes"] >= 0 and r["method"] and r["device"].startswith("CPU")
    rb = memory_report("im2col-gemm", x_shape, w_shape, padding=2, backward=True)
    assert rb["flops"] == 3 * cfg.flops and rb["workspace_bytes"] == 2 * r["workspace_bytes"]
    # a large im2col buffer shows up in the measured peak (the CPU reads the process's RSS)
    big = memory_report("im2col-gemm", (1, 64, 96, 96), (8, 64, 7, 7), padding=3)
    assert big["workspace_bytes"] > 100 * 2**20
    assert big["peak_bytes"] > 0.5 * big["workspace_bytes"]
    with pytest.raises(ValueError, match="strategy must be one of"):
        memory_report("winograd-4x4", x_shape, w_shape)


def test_the_float64_reference_follows_the_definition():
    """helpers.conv.check.reference against the definition written as plain loops (NumPy,
    float64): y[n,k,p,q] = sum_{c,r,s} xpad[n, c, p*sh + r, q*sw + s] * w[k, c, r, s]."""
    rng = np.random.default_rng(11)
    x = rng.standard_normal((2, 3, 7, 6))
    w = rng.standard_normal((4, 3, 3, 2))
    (sh, sw), (ph, pw) = (2, 1), (1, 2)
    xp = np.pad(x, ((0, 0), (0, 0), (ph, ph), (pw, pw)))
    p_, q_ = (7 + 2 * ph - 3) // sh + 1, (6 + 2 * pw - 2) // sw + 1
    y = np.zeros((2, 4, p_, q_))
    for n in range(2):
        for k in range(4):
            for p in range(p_):
                for q in range(q_):
                    y[n, k, p, q] = np.sum(xp[n, :, p * sh:p * sh + 3, q * sw:q * sw + 2] * w[k])
    got = ref.reference(x, w, (sh, sw), (ph, pw))
    assert got.dtype == np.float64 and got.shape == y.shape
    np.testing.assert_allclose(got, y, rtol=1e-12, atol=1e-12)
    # and its backward is the gradient of sum(y * dy): check one entry of each by differences
    dy = rng.standard_normal(y.shape)
    dx, dw = ref.reference_backward(x, w, dy, (sh, sw), (ph, pw))
    eps = 1e-6
    for arr, grad, idx in ((x, dx, (1, 2, 3, 4)), (w, dw, (2, 1, 0, 1))):
        bumped = arr.copy()
        bumped[idx] += eps
        args = (bumped, w) if arr is x else (x, bumped)
        numeric = (np.sum(ref.reference(*args, (sh, sw), (ph, pw)) * dy) - np.sum(y * dy)) / eps
        assert numeric == pytest.approx(grad[idx], rel=1e-4, abs=1e-6)
