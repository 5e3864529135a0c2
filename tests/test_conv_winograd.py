"""Winograd convolution (helpers.conv.winograd): the transforms are exact, and forward and
backward agree with the float64 reference on the CPU and in the CUDA simulator, for F(2x2, 3x3)
and F(4x4, 3x3), on odd sizes, batch 1 and padding; what it refuses, and its costs."""

from __future__ import annotations

import helpers  # noqa: F401  (first: decides simulator vs GPU before numba.cuda is imported)
import numpy as np
import pytest
import torch

from helpers import kernels
from helpers.conv import STRATEGIES, config_for, conv2d, conv2d_backward, winograd
from helpers.conv.check import TOLERANCE, reference, reference_backward, rel_error

TOL = TOLERANCE["winograd"]


def _correlate_1d(d, g, m):
    return np.array([sum(g[k] * d[i + k] for k in range(len(g))) for i in range(m)])


@pytest.mark.parametrize("m, r", [(2, 3), (4, 3), (3, 2), (1, 3), (2, 2), (5, 3)])
def test_transforms_compute_the_correlation_exactly(m, r):
    at, g, bt = winograd.transforms(m, r)
    alpha = m + r - 1
    assert at.shape == (m, alpha) and g.shape == (alpha, r) and bt.shape == (alpha, alpha)
    rng = np.random.default_rng(m * 10 + r)
    for _ in range(5):
        d, f = rng.standard_normal(alpha), rng.standard_normal(r)
        np.testing.assert_allclose(at @ ((g @ f) * (bt @ d)), _correlate_1d(d, f, m),
                                   rtol=1e-10, atol=1e-10)
    # 2-D: Y = A^T [(G g G^T) * (B^T d B)] A is the m x m valid correlation
    d, f = rng.standard_normal((alpha, alpha)), rng.standard_normal((r, r))
    y = at @ ((g @ f @ g.T) * (bt @ d @ bt.T)) @ at.T
    want = np.array([[np.sum(d[i:i + r, j:j + r] * f) for j in range(m)] for i in range(m)])
    np.testing.assert_allclose(y, want, rtol=1e-10, atol=1e-10)
    assert np.all(bt == np.round(bt))  # B^T rows scaled to integers


def test_f2x3_matrices_are_lavin_and_grays_up_to_row_signs():
    at, g, bt = winograd.transforms(2, 3)
    lavin_bt = np.array([[1, 0, -1, 0], [0, 1, 1, 0], [0, -1, 1, 0], [0, 1, 0, -1]])
    lavin_g = np.array([[1, 0, 0], [.5, .5, .5], [.5, -.5, .5], [0, 0, 1]])
    lavin_at = np.array([[1, 1, 1, 0], [0, 1, -1, -1]])
    # a row of B^T may flip sign with the matching row of G or column of A^T: compare each
    # term i of y = sum_i A^T[:, i] (G g)[i] (B^T d)[i], which no such flip changes
    def terms(at, g, bt):
        return np.einsum("ui,ik,ij->iukj", at, g, bt)

    np.testing.assert_array_equal(terms(at, g, bt), terms(lavin_at, lavin_g, lavin_bt))
    np.testing.assert_array_equal(np.abs(bt), np.abs(lavin_bt))
    # 16 multiplies for a 2 x 2 output tile of a 3 x 3 filter, instead of 36
    assert bt.shape[0] ** 2 == 16 and 2 * 2 * 3 * 3 == 36


def test_a_wrong_transform_fails_the_identity():
    """The identity test can fail: B (not B^T), or G without its halves, give wrong outputs."""
    at, g, bt = winograd.transforms(2, 3)
    d, f = np.arange(4.0) + 1, np.array([1.0, -2.0, 0.5])
    right = _correlate_1d(d, f, 2)
    assert not np.allclose(at @ ((g @ f) * (bt.T @ d)), right)
    assert not np.allclose(at @ ((np.round(g + 0.01) @ f) * (bt @ d)), right)


@pytest.mark.parametrize("bad", [dict(m=0), dict(m=7), dict(r=6), dict(r=True), dict(m=5, r=5)])
def test_transforms_refuse_bad_sizes(bad):
    with pytest.raises(ValueError, match=r"\bm\b|\br\b|points"):
        winograd.transforms(**{"m": 2, "r": 3, **bad})


LAYERS = [
    ((2, 3, 9, 8), (4, 3, 3, 3), 1),     # odd width, padding 1
    ((1, 2, 5, 7), (3, 2, 3, 3), 0),     # batch 1, no padding, odd output 3 x 5
    ((2, 3, 10, 6), (5, 3, 3, 3), 2),    # padding 2 (the whole kernel in the padding)
    ((1, 1, 3, 3), (1, 1, 3, 3), 0),     # one output
    ((3, 5, 7, 11), (2, 5, 3, 3), 1),    # prime sizes
]


@pytest.mark.parametrize("device", ["cpu", "cuda"])
@pytest.mark.parametrize("m", [2, 4])
@pytest.mark.parametrize("x_shape, w_shape, padding", LAYERS)
def test_forward_and_backward_match_the_float64_reference(x_shape, w_shape, padding, m, device):
    cfg = config_for(x_shape, w_shape, 1, padding)
    rng = np.random.default_rng(sum(x_shape) + m)
    x = rng.standard_normal(x_shape).astype(np.float32)
    w = rng.standard_normal(w_shape).astype(np.float32)
    dy = rng.standard_normal(cfg.y_shape).astype(np.float32)
    xt, wt, dyt = map(torch.from_numpy, (x, w, dy))
    y = winograd.forward(xt, wt, cfg, device, m)
    dx, dw = winograd.backward(xt, wt, dyt, cfg, device, m)
    assert y.shape == cfg.y_shape and dx.shape == cfg.x_shape and dw.shape == cfg.w_shape
    assert rel_error(y, reference(x, w, 1, padding)) < TOL
    dx_ref, dw_ref = reference_backward(x, w, dy, 1, padding)
    assert rel_error(dx, dx_ref) < TOL and rel_error(dw, dw_ref) < TOL


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_the_registered_strategy_through_conv2d(device):
    rng = np.random.default_rng(7)
    x = rng.standard_normal((2, 4, 6, 9)).astype(np.float32)
    w = rng.standard_normal((3, 4, 3, 3)).astype(np.float32)
    y = conv2d(x, w, padding=1, strategy="winograd", device=device)
    assert isinstance(y, np.ndarray) and rel_error(y, reference(x, w, 1, 1)) < TOL
    dy = rng.standard_normal(y.shape).astype(np.float32)
    dx, dw = conv2d_backward(x, w, dy, padding=1, strategy="winograd", device=device)
    dx_ref, dw_ref = reference_backward(x, w, dy, 1, 1)
    assert rel_error(dx, dx_ref) < TOL and rel_error(dw, dw_ref) < TOL


def test_f4x4_error_is_larger_than_f2x2_but_within_the_tolerance():
    """Round-off grows with the tile: F(4x4, 3x3)'s transforms hold 4, 5 and 1/24."""
    cfg = config_for((2, 32, 16, 16), (16, 32, 3, 3), 1, 1)
    rng = np.random.default_rng(3)
    x = rng.standard_normal(cfg.x_shape).astype(np.float32)
    w = rng.standard_normal(cfg.w_shape).astype(np.float32)
    ref = reference(x, w, 1, 1)
    errors = [rel_error(winograd.forward(torch.from_numpy(x), torch.from_numpy(w), cfg, "cpu",
                                         m), ref) for m in (2, 4)]
    assert 0 < errors[0] < errors[1] < TOL, errors


def test_supports_names_the_reason():
    strat = STRATEGIES["winograd"]
    assert strat.family == "winograd" and set(strat.devices) == {"cpu", "cuda"}
    assert strat.supports(config_for((1, 1, 8, 8), (1, 1, 3, 3), 1, 1)) is None
    assert "3 x 3 kernel, got 5 x 5" in strat.supports(config_for((1, 1, 8, 8), (1, 1, 5, 5)))
    assert "3 x 3 kernel, got 3 x 1" in strat.supports(config_for((1, 1, 8, 8), (1, 1, 3, 1)))
    assert "stride 1, got stride (2, 1)" in strat.supports(
        config_for((1, 1, 8, 8), (1, 1, 3, 3), (2, 1)))
    x, w = np.ones((1, 1, 8, 8), np.float32), np.ones((1, 1, 5, 5), np.float32)
    with pytest.raises(ValueError, match="winograd cannot compute .* 3 x 3 kernel"):
        conv2d(x, w, strategy="winograd")


def test_flops_count_the_gemm_and_the_transforms():
    cfg = config_for((8, 64, 56, 56), (64, 64, 3, 3), 1, 1)
    tiles = 8 * 28 * 28
    gemm = 2 * 16 * 64 * 64 * tiles
    flops = winograd.flops(cfg)
    assert gemm < flops < 1.3 * gemm  # transforms are a small share at C = K = 64
    assert cfg.flops / gemm == pytest.approx(36 / 16)  # the multiplies saved by the GEMM
    assert STRATEGIES["winograd"].flops(cfg, backward=True) == 3 * flops
    assert winograd.flops(cfg, m=4) < flops  # bigger tiles, fewer multiplies


def test_workspace_counts_the_transformed_buffers():
    cfg = config_for((2, 3, 9, 8), (4, 3, 3, 3), 1, 1)
    tiles = 2 * 5 * 4  # P x Q = 9 x 8 in 2 x 2 tiles
    assert winograd.workspace_bytes(cfg) == 4 * 16 * (4 * 3 + 3 * tiles + 4 * tiles)
    assert winograd.workspace_bytes(cfg, backward=True) >= winograd.workspace_bytes(cfg)
    assert STRATEGIES["winograd"].workspace_bytes(cfg) == winograd.workspace_bytes(cfg)


def test_every_kernel_is_named_for_the_compiler_report():
    listed = {k.name for k in kernels.KERNELS if k.family == "winograd"}
    assert listed == set(winograd.KERNEL_NAMES.values())
    for (role, m, r), name in winograd.KERNEL_NAMES.items():
        kernel = getattr(winograd, name)
        assert kernel is winograd.kernel_for(role, m, r) and kernel.py_func.__name__ == name


def test_the_cuda_path_writes_every_output():
    """Outputs start as NaN (poisoned): a tile the kernels skipped would stay NaN."""
    cfg = config_for((1, 2, 7, 5), (3, 2, 3, 3), 1, 0)  # 5 x 3 output: partial tiles
    rng = np.random.default_rng(11)
    x = torch.from_numpy(rng.standard_normal(cfg.x_shape).astype(np.float32))
    w = torch.from_numpy(rng.standard_normal(cfg.w_shape).astype(np.float32))
    y = winograd.forward(x, w, cfg, "cuda")
    assert torch.isfinite(y).all()
