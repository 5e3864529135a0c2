"""helpers.conv.fft: FFT convolution, forward and backward, against the float64 reference
(helpers.conv.check, torch in float64), plus its FFT size, workspace and FLOP model."""

from __future__ import annotations

import helpers  # noqa: F401  (must come first: decides simulator vs GPU before numba.cuda)
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from helpers.conv.check import reference as forward
from helpers.conv.check import reference_backward as backward
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from helpers.conv import fft
from helpers.conv.config import ConvConfig

TOL = 1e-3  # float32 FFTs spread round-off over the whole plane (see fft's module docstring)


def _rel(got: torch.Tensor, expected) -> float:
    """max|got - ref| / max(max|ref|, 1e-6), after checking shape and finiteness, and that the
    reference's exact zeros (structural with random data: windows that see only padding, taps or
    inputs no window reaches) are exact zeros here too, not FFT round-off."""
    got = got.detach().cpu().numpy().astype(np.float64)
    expected = np.asarray(expected, np.float64)
    assert got.shape == expected.shape
    assert np.isfinite(got).all()
    assert (got[expected == 0] == 0).all(), "FFT round-off where the result is exactly zero"
    return float(np.abs(got - expected).max() / max(np.abs(expected).max(), 1e-6))


def _data(cfg: ConvConfig, seed: int):
    rng = np.random.default_rng(seed)
    return tuple(torch.from_numpy(rng.standard_normal(shape, dtype=np.float32))
                 for shape in (cfg.x_shape, cfg.w_shape, cfg.y_shape))


def _check_against_reference(cfg: ConvConfig, seed: int, fft_shape=None) -> None:
    x, w, dy = _data(cfg, seed)
    stride, padding = (cfg.stride_h, cfg.stride_w), (cfg.pad_h, cfg.pad_w)

    y = fft.forward(x, w, cfg, fft_shape)
    assert tuple(y.shape) == cfg.y_shape and y.dtype == torch.float32
    assert _rel(y, forward(x.numpy(), w.numpy(), stride, padding)) < TOL

    dx, dw = fft.backward(x, w, dy, cfg, fft_shape)
    assert tuple(dx.shape) == cfg.x_shape and dx.dtype == torch.float32
    assert tuple(dw.shape) == cfg.w_shape and dw.dtype == torch.float32
    dx_ref, dw_ref = backward(x.numpy(), w.numpy(), dy.numpy(), stride, padding)
    assert _rel(dx, dx_ref) < TOL
    assert _rel(dw, dw_ref) < TOL


# ------------------------------------------------------------------- against the reference


@given(n=st.integers(1, 3), c=st.integers(1, 5), k=st.integers(1, 4),
       h=st.integers(1, 13), w=st.integers(1, 13), r=st.integers(1, 5), s=st.integers(1, 5),
       sh=st.integers(1, 3), sw=st.integers(1, 3), ph=st.integers(0, 2), pw=st.integers(0, 2),
       seed=st.integers(0, 2**31 - 1))
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.filter_too_much])
def test_forward_and_backward_match_the_float64_reference(n, c, k, h, w, r, s, sh, sw, ph, pw,
                                                          seed):
    assume(r <= h + 2 * ph and s <= w + 2 * pw)  # the kernel must fit the padded input
    cfg = ConvConfig.from_shapes((n, c, h, w), (k, c, r, s), (sh, sw), (ph, pw))
    _check_against_reference(cfg, seed)


@pytest.mark.parametrize("x_shape,w_shape,stride,padding", [
    ((1, 1, 1, 1), (1, 1, 1, 1), 1, 0),        # batch 1, everything 1
    ((1, 2, 5, 7), (3, 2, 1, 1), 1, 0),        # 1x1 kernel
    ((2, 3, 6, 4), (2, 3, 6, 4), 1, 0),        # kernel == input: a single output, no padding
    ((2, 1, 3, 4), (2, 1, 5, 6), 1, 1),        # kernel == padded input size
    ((1, 2, 7, 9), (2, 2, 3, 2), 3, 2),        # stride 3 with padding 2
    ((2, 2, 11, 6), (3, 2, 4, 3), (3, 1), (0, 2)),  # non-square, mixed stride and padding
    ((1, 1, 1, 1), (1, 1, 1, 1), (3, 1), (2, 0)),   # every window sees only padding: y == 0
    ((2, 2, 4, 5), (2, 2, 2, 1), (3, 3), (0, 0)),   # stride > kernel: dx partly exactly 0
], ids=["all-ones", "1x1-kernel", "kernel-eq-input", "kernel-eq-padded", "stride3-pad2",
        "mixed", "all-padding", "unreached-input"])
def test_named_cases(x_shape, w_shape, stride, padding):
    cfg = ConvConfig.from_shapes(x_shape, w_shape, stride, padding)
    _check_against_reference(cfg, seed=11)


def test_the_padded_input_size_is_a_large_enough_fft():
    """Hf x Wf = the padded input size exactly (no rounding up) is already wrap-around free;
    prime sizes too (13 + 2*2 = 17)."""
    cfg = ConvConfig.from_shapes((2, 3, 13, 9), (4, 3, 5, 3), (1, 2), (2, 1))
    assert fft.fft_size(cfg, fast=False) == (17, 11)
    _check_against_reference(cfg, seed=5, fft_shape=(17, 11))
    _check_against_reference(cfg, seed=5, fft_shape=(32, 20))  # any larger size works too


def test_an_fft_smaller_than_the_padded_input_is_refused():
    cfg = ConvConfig.from_shapes((1, 1, 8, 8), (1, 1, 3, 3), 1, 1)
    x, w, dy = _data(cfg, 0)
    with pytest.raises(ValueError, match="wrap-around"):
        fft.forward(x, w, cfg, fft_shape=(9, 10))
    with pytest.raises(ValueError, match="wrap-around"):
        fft.backward(x, w, dy, cfg, fft_shape=(10, 9))


def test_medium_case_matches_torch_conv2d_and_autograd():
    cfg = ConvConfig.from_shapes((2, 3, 32, 32), (8, 3, 11, 11))
    x, w, dy = _data(cfg, 3)
    y_ref = F.conv2d(x.double(), w.double())
    assert _rel(fft.forward(x, w, cfg), y_ref) < TOL
    assert _rel(fft.forward(x, w, cfg), F.conv2d(x, w)) < TOL

    xg, wg = x.double().requires_grad_(), w.double().requires_grad_()
    F.conv2d(xg, wg).backward(dy.double())
    dx, dw = fft.backward(x, w, dy, cfg)
    assert _rel(dx, xg.grad) < TOL and _rel(dw, wg.grad) < TOL


def test_a_wrong_answer_is_caught():
    """The comparison is sharp enough: a flipped filter (convolution instead of
    cross-correlation) fails it."""
    cfg = ConvConfig.from_shapes((1, 2, 8, 8), (2, 2, 3, 3))
    x, w, _ = _data(cfg, 2)
    y_flipped = fft.forward(x, torch.flip(w, (2, 3)).contiguous(), cfg)
    assert _rel(y_flipped, forward(x.numpy(), w.numpy())) > 1e-2


# --------------------------------------------------------------------------- bad arguments


def test_tensors_that_do_not_fit_the_config_are_refused():
    cfg = ConvConfig.from_shapes((1, 2, 6, 6), (3, 2, 3, 3))
    x, w, dy = _data(cfg, 0)
    with pytest.raises(ValueError, match=r"x must have shape \(1, 2, 6, 6\)"):
        fft.forward(x[:, :1], w, cfg)
    with pytest.raises(ValueError, match="w must be float32"):
        fft.forward(x, w.double(), cfg)
    with pytest.raises(ValueError, match=r"dy must have shape \(1, 3, 4, 4\)"):
        fft.backward(x, w, dy[..., :3], cfg)
    with pytest.raises(ValueError, match="torch tensor"):
        fft.forward(x.numpy(), w, cfg)


# ------------------------------------------------------------------ size, memory and flops


def test_fft_size_is_at_least_the_padded_input_and_fast():
    for h, w, ph, pw in [(1, 1, 0, 0), (13, 7, 2, 0), (227, 224, 0, 1), (32, 31, 0, 0)]:
        cfg = ConvConfig.from_shapes((1, 1, h, w), (1, 1, 1, 1), 1, (ph, pw))
        hf, wf = fft.fft_size(cfg)
        assert fft.fft_size(cfg, fast=False) == (h + 2 * ph, w + 2 * pw)
        assert hf >= h + 2 * ph and wf >= w + 2 * pw
        for v in (hf, wf):
            for p in (2, 3, 5):
                while v % p == 0:
                    v //= p
            assert v == 1
    assert fft.next_fast_len(17) == 18 and fft.next_fast_len(227) == 240
    assert fft.next_fast_len(64) == 64 and fft.next_fast_len(1) == 1
    with pytest.raises(ValueError):
        fft.next_fast_len(0)


def test_workspace_formula_and_growth():
    cfg = ConvConfig.from_shapes((2, 3, 16, 16), (4, 3, 3, 3), 1, 0)  # 16 is 2-smooth: Hf = 16
    assert fft.fft_size(cfg) == (16, 16)
    spectra = 8 * 16 * (16 // 2 + 1) * (2 * 3 + 4 * 3 + 2 * 4)
    assert fft.workspace_bytes(cfg) == spectra              # no padding: no padded copy
    padded = ConvConfig.from_shapes((2, 3, 14, 14), (4, 3, 3, 3), 1, 1)  # padded to 16 x 16
    assert fft.workspace_bytes(padded) == spectra + 4 * 2 * 3 * 16 * 16

    # grows with the input ...
    sizes = [fft.workspace_bytes(ConvConfig.from_shapes((2, 3, h, h), (4, 3, 3, 3)))
             for h in (8, 16, 32, 64)]
    assert sizes == sorted(sizes) and len(set(sizes)) == 4
    # ... and not with the kernel: R*S from 1 to 121 at the same FFT size
    by_kernel = {fft.workspace_bytes(ConvConfig.from_shapes((2, 3, 16, 16), (4, 3, r, r)))
                 for r in (1, 3, 5, 11, 16)}
    assert by_kernel == {spectra}


def test_flops_are_independent_of_the_kernel_and_win_for_large_kernels():
    def layer(r):
        return ConvConfig.from_shapes((1, 64, 32, 32), (64, 64, r, r))

    assert fft.flops(layer(3)) == fft.flops(layer(11)) > 0
    # direct/im2col cost 2*N*K*P*Q*C*R*S: FFT loses at 3x3 and wins at 11x11
    assert fft.flops(layer(3)) > layer(3).flops
    assert fft.flops(layer(11)) < layer(11).flops
    # stride does not save FFT work (STRIDE_NOTE)
    strided = ConvConfig.from_shapes((1, 64, 32, 32), (64, 64, 3, 3), 2)
    assert fft.flops(strided) == fft.flops(layer(3))


def test_every_config_is_supported_and_the_stride_note_says_how():
    assert fft.supports(ConvConfig.from_shapes((1, 1, 9, 9), (1, 1, 3, 3), 3, 2)) is None
    assert "stride 1" in fft.STRIDE_NOTE and "every" in fft.STRIDE_NOTE


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (cuFFT path)")
def test_cuda_tensors_stay_on_the_gpu():
    cfg = ConvConfig.from_shapes((2, 3, 12, 10), (4, 3, 5, 3), (2, 1), (1, 2))
    x, w, dy = (t.cuda() for t in _data(cfg, 9))
    stride, padding = (2, 1), (1, 2)
    y = fft.forward(x, w, cfg)
    dx, dw = fft.backward(x, w, dy, cfg)
    assert y.is_cuda and dx.is_cuda and dw.is_cuda
    assert _rel(y, forward(x.cpu().numpy(), w.cpu().numpy(), stride, padding)) < TOL
    dx_ref, dw_ref = backward(x.cpu().numpy(), w.cpu().numpy(), dy.cpu().numpy(), stride, padding)
    assert _rel(dx, dx_ref) < TOL and _rel(dw, dw_ref) < TOL


# ----------------------------------------------------------------- pruned transforms


@given(k=st.integers(1, 4), c=st.integers(1, 3), r=st.integers(1, 6), s=st.integers(1, 6),
       hf=st.integers(6, 17), wf=st.integers(6, 17), seed=st.integers(0, 2**31 - 1))
@settings(max_examples=40, deadline=None)
def test_pruned_filter_transforms_equal_torch_fft(k, c, r, s, hf, wf, seed):
    """The filter spectrum from the taps alone equals rfft2 of the zero-padded filter, and the
    pruned inverse equals the first R x S points of irfft2 (odd and even sizes: the Nyquist
    column is weighted once, the others twice)."""
    cfg = ConvConfig(n=1, c=c, h=hf, w=wf, k=k, r=r, s=s)
    rng = np.random.default_rng(seed)
    w = torch.from_numpy(rng.standard_normal((k, c, r, s), dtype=np.float32))
    expected = torch.fft.rfft2(w.double(), s=(hf, wf))               # (K, C, Hf, Wf//2+1)
    got = fft._filter_spectrum(w, cfg, hf, wf)                        # (F, K, C)
    got = got.reshape(hf, wf // 2 + 1, k, c).permute(2, 3, 0, 1)
    assert torch.allclose(got.cdouble(), expected, rtol=0, atol=1e-5 * expected.abs().max())

    spec = torch.fft.rfft2(torch.from_numpy(rng.standard_normal((k, c, hf, wf))))
    full = torch.fft.irfft2(spec, s=(hf, wf))[:, :, :r, :s]
    flat = spec.to(torch.complex64).permute(2, 3, 0, 1).reshape(-1, k, c)
    pruned = fft._filter_gradient(flat, cfg, hf, wf)
    assert pruned.shape == (k, c, r, s)
    assert torch.allclose(pruned.double(), full, rtol=0, atol=1e-5 * full.abs().max())
