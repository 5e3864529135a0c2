"""helpers.conv.direct's register-blocked kernels (forward, dx, the split dW and its reduction)
against the float64 reference on odd shapes, strides, paddings and dilations, batch 1 and
channel or filter counts that are no multiple of any tile; outputs start as NaN, so an element
no thread writes fails. Runs in the simulator without a GPU (tiny shapes), on the GPU with one.
Also: the launch shapes at the study's Table I layers, the fallback to the first kernels."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
import torch
from conftest import simulator_only
from hypothesis import given, settings
from hypothesis import strategies as st

from helpers import kernels, paper
from helpers.conv import STRATEGIES, ConvConfig, direct
from helpers.conv.check import reference, reference_backward, rel_error
from helpers.conv.direct import backward, forward
from helpers.device.arrays import MAX_GRID, cuda_device, to_torch

TOL = 1e-5


def _data(cfg: ConvConfig, seed: int):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(cfg.x_shape).astype(np.float32)
    w = rng.standard_normal(cfg.w_shape).astype(np.float32)
    dy = rng.standard_normal(cfg.y_shape).astype(np.float32)
    return x, w, dy


def _kw(cfg: ConvConfig) -> dict:
    return {"stride": (cfg.stride_h, cfg.stride_w), "padding": (cfg.pad_h, cfg.pad_w),
            "dilation": (cfg.dil_h, cfg.dil_w)}


def _check(cfg: ConvConfig, seed: int = 0) -> None:
    """forward_tiled, backward_dx_cuda and backward_dw_cuda, each against float64."""
    x, w, dy = _data(cfg, seed)
    dev = cuda_device()
    xt, wt, dyt = to_torch(x, dev), to_torch(w, dev), to_torch(dy, dev)
    y = direct.forward_tiled(xt, wt, cfg).cpu().numpy()
    dx = direct.backward_dx_cuda(wt, dyt, cfg).cpu().numpy()
    dw = direct.backward_dw_cuda(xt, dyt, cfg).cpu().numpy()
    dx_ref, dw_ref = reference_backward(x, w, dy, **_kw(cfg))
    for name, got, ref in (("y", y, reference(x, w, **_kw(cfg))), ("dx", dx, dx_ref),
                           ("dw", dw, dw_ref)):
        assert np.isfinite(got).all(), f"{name}: an element was never written (still NaN)"
        assert rel_error(got, ref) < TOL, (name, cfg, rel_error(got, ref))


#: (x shape, w shape, stride, padding, dilation): what each case exercises.
CASES = {
    "batch 1, 3x3, padding 1": ((1, 3, 9, 11), (5, 3, 3, 3), 1, 1, 1),
    "19 filters: a partial filter group": ((2, 2, 7, 6), (19, 2, 3, 2), 1, 0, 1),
    "40 filters: two filter tiles": ((1, 3, 6, 7), (40, 3, 2, 3), 1, 1, 1),
    "9 filters: two groups of 5": ((1, 4, 8, 5), (9, 4, 3, 3), 1, 1, 1),
    "27 taps, 40 filters: dw's lanes take filters": ((2, 3, 9, 8), (40, 3, 3, 3), 1, 1, 1),
    "9 taps, 70 filters, stride 2": ((1, 1, 9, 7), (70, 1, 3, 3), 2, 1, 1),
    "stride 2, odd sizes": ((2, 3, 11, 9), (4, 3, 3, 3), 2, 1, 1),
    "stride (3, 2), padding (2, 0)": ((1, 2, 13, 10), (3, 2, 5, 3), (3, 2), (2, 0), 1),
    "dilation (2, 1)": ((1, 2, 12, 9), (3, 2, 3, 3), 1, 2, (2, 1)),
    "dilation 3, stride 2": ((2, 1, 13, 12), (2, 1, 3, 2), 2, 3, 3),
    "padding beyond the window (dx crops)": ((1, 2, 5, 6), (3, 2, 1, 2), 1, (3, 2), 1),
    "1x1 filters, 37 channels: stages of 16": ((1, 37, 4, 3), (6, 37, 1, 1), 1, 0, 1),
    "11x11 on a 13x12 input": ((1, 2, 13, 12), (3, 2, 11, 11), 1, 0, 1),
    "window as large as the padded input": ((2, 1, 3, 4), (2, 1, 5, 6), 1, 1, 1),
    "1x1 input": ((1, 1, 1, 1), (1, 1, 1, 1), 1, 0, 1),
}


@pytest.mark.parametrize("case", list(CASES.values()), ids=list(CASES))
@pytest.mark.slow
def test_each_kernel_matches_the_float64_reference(case):
    x_shape, w_shape, stride, padding, dilation = case
    cfg = ConvConfig.from_shapes(x_shape, w_shape, stride, padding, dilation)
    assert direct.tiled_supports(cfg) is None
    _check(cfg)


@given(n=st.integers(1, 2), c=st.integers(1, 4), k=st.integers(1, 10),
       r=st.integers(1, 4), s=st.integers(1, 4), stride=st.tuples(*[st.integers(1, 3)] * 2),
       padding=st.tuples(*[st.integers(0, 3)] * 2), dil=st.tuples(*[st.integers(1, 3)] * 2),
       extra=st.tuples(*[st.integers(0, 4)] * 2), seed=st.integers(0, 2**31 - 1))
@settings(max_examples=12, deadline=None)
@pytest.mark.slow
def test_strides_paddings_dilations_and_batch_1_match_the_reference(n, c, k, r, s, stride,
                                                                   padding, dil, extra, seed):
    h = max(1, dil[0] * (r - 1) + 1 - 2 * padding[0]) + extra[0]
    w = max(1, dil[1] * (s - 1) + 1 - 2 * padding[1]) + extra[1]
    _check(ConvConfig.from_shapes((n, c, h, w), (k, c, r, s), stride, padding, dil), seed)


@pytest.mark.slow
def test_the_dw_split_sums_its_chunks_in_a_fixed_order():
    """Several chunks, tap tiles and filter tiles: the partial sums go through the workspace
    and the reduction, and two runs give the same bits (no atomics)."""
    cfg = ConvConfig.from_shapes((2, 15, 2, 2), (33, 15, 3, 3), padding=1)
    plan = direct.launches(cfg)["dw"]
    assert plan.grid == (2, 2, 2)                     # chunks, tap tiles, filter tiles
    assert plan.workspace_bytes == direct.dw_workspace_bytes(cfg) == 4 * 2 * 33 * 135
    x, w, dy = _data(cfg, 3)
    dev = cuda_device()
    first = direct.backward_dw_cuda(to_torch(x, dev), to_torch(dy, dev), cfg)
    again = direct.backward_dw_cuda(to_torch(x, dev), to_torch(dy, dev), cfg)
    assert torch.equal(first, again)
    assert rel_error(first.cpu().numpy(), reference_backward(x, w, dy, padding=1)[1]) < TOL


def test_a_nan_spreads_exactly_as_in_the_reference():
    """A NaN in x (or dy) reaches exactly the outputs whose windows hold it: the kernels read
    no padding, no pixel past P or Q and no tap past R or S as data."""
    cfg = ConvConfig.from_shapes((1, 2, 9, 8), (3, 2, 3, 3), stride=2, padding=1)
    x, w, dy = _data(cfg, 5)
    x[0, 1, 4, 3] = np.nan
    dy[0, 2, 1, 2] = np.nan
    dev = cuda_device()
    y = direct.forward_tiled(to_torch(x, dev), to_torch(w, dev), cfg).cpu().numpy()
    dx = direct.backward_dx_cuda(to_torch(w, dev), to_torch(dy, dev), cfg).cpu().numpy()
    dw = direct.backward_dw_cuda(to_torch(x, dev), to_torch(dy, dev), cfg).cpu().numpy()
    dx_ref, dw_ref = reference_backward(x, w, dy, **_kw(cfg))
    for got, ref in ((y, reference(x, w, **_kw(cfg))), (dx, dx_ref), (dw, dw_ref)):
        assert 0 < np.isnan(ref).sum() < ref.size
        assert (np.isnan(got) == np.isnan(ref)).all()


def test_both_direct_strategies_share_the_new_backward(monkeypatch):
    calls = []
    for name in ("backward_dx_cuda", "backward_dw_cuda"):
        original = getattr(direct, name)
        monkeypatch.setattr(direct, name, lambda *a, _o=original, _n=name: calls.append(_n)
                            or _o(*a))
    cfg = ConvConfig.from_shapes((1, 2, 6, 6), (3, 2, 3, 3))
    x, w, dy = _data(cfg, 1)
    for strategy in ("direct-naive", "direct-tiled"):
        STRATEGIES[strategy].backward(to_torch(x, cuda_device()), to_torch(w, cuda_device()),
                                      to_torch(dy, cuda_device()), cfg, "cuda")
    assert calls == ["backward_dx_cuda", "backward_dw_cuda"] * 2


def test_beyond_the_tiles_the_first_kernels_run_the_backward():
    """direct-naive takes any window and stride; where the register-blocked kernels refuse,
    its backward runs the first one-thread-per-element kernels, still right."""
    for stride, w_shape in ((4, (2, 2, 3, 3)), (1, (2, 2, 13, 3))):
        cfg = ConvConfig.from_shapes((1, 2, 15, 9), w_shape, stride)
        assert "direct-tiled sizes its shared input tile" in direct.tiled_supports(cfg)
        assert direct.naive_supports(cfg) is None
        assert direct.launches(cfg) == {"forward": None, "dx": None, "dw": None}
        assert direct.dw_workspace_bytes(cfg) == 0
        x, w, dy = _data(cfg, 2)
        dx_ref, dw_ref = reference_backward(x, w, dy, stride)
        dev = cuda_device()
        dx, dw = direct.backward_cuda(to_torch(x, dev), to_torch(w, dev), to_torch(dy, dev), cfg)
        assert rel_error(dx.cpu().numpy(), dx_ref) < TOL
        assert rel_error(dw.cpu().numpy(), dw_ref) < TOL


def test_the_kept_kernels_still_run_and_agree():
    cfg = ConvConfig.from_shapes((2, 3, 9, 7), (4, 3, 3, 2), (2, 1), 1)
    x, w, dy = _data(cfg, 4)
    dev = cuda_device()
    xt, wt, dyt = to_torch(x, dev), to_torch(w, dev), to_torch(dy, dev)
    y = direct.forward_tiled_teaching(xt, wt, cfg).cpu().numpy()
    assert rel_error(y, reference(x, w, **_kw(cfg))) < TOL
    dx, dw = direct.backward_first_cuda(xt, wt, dyt, cfg)
    dx_ref, dw_ref = reference_backward(x, w, dy, **_kw(cfg))
    assert rel_error(dx.cpu().numpy(), dx_ref) < TOL and rel_error(dw.cpu().numpy(), dw_ref) < TOL
    assert torch.equal(direct.backward_first_cuda(xt, wt, dyt, cfg, "dw"), dw)
    with pytest.raises(ValueError, match="which must be"):
        direct.backward_first_cuda(xt, wt, dyt, cfg, "dy")
    grouped = ConvConfig.from_shapes((1, 4, 5, 5), (4, 2, 3, 3), groups=2)
    with pytest.raises(ValueError, match="one group"):
        direct.backward_dw_cuda(xt, dyt, grouped)


# ------------------------------------------------------------------- launch shapes


def _blocks(grid) -> int:
    return math.prod(grid) if isinstance(grid, tuple) else grid


@pytest.mark.parametrize("batch", [128, 1])
def test_the_dw_split_fills_132_sms_at_every_table_i_layer(batch):
    """The first dW kernel launched K*C*R*S threads (2,592 at Conv2); the split launches at
    least one block per SM of an H100 at every layer of the study's Table I, batch 1 too."""
    for layer in paper.TABLE_I:
        cfg = dataclasses.replace(layer, n=batch)
        plan = direct.launches(cfg)["dw"]
        assert _blocks(plan.grid) >= 132, (cfg.name, batch, plan.grid)
        assert plan.workspace_bytes <= backward.MAX_WORKSPACE_BYTES
        assert plan.workspace_bytes == (4 * plan.chunks * cfg.k * cfg.c * cfg.r * cfg.s
                                        if plan.chunks > 1 else 0)


def test_every_launch_at_table_i_fits_the_cuda_limits_and_wastes_little():
    for cfg in paper.TABLE_I:
        plans = direct.launches(cfg)
        for kind, plan in plans.items():
            assert all(b <= m for b, m in zip(plan.grid, MAX_GRID)), (cfg.name, kind)
            assert plan.threads <= 1024 and plan.key.smem_bytes <= forward.MAX_SHARED_BYTES
        fwd = plans["forward"].key
        slots = forward.THREADS // fwd.kg * fwd.fp
        tiles = _blocks(plans["forward"].grid) // cfg.n // math.ceil(cfg.k / (fwd.fk * fwd.kg))
        assert cfg.p * cfg.q / (tiles * slots) > 0.75, cfg.name   # Conv4: 100 of 128 slots
    small = {c.name: direct.launches(c)["forward"].key for c in paper.TABLE_I}
    assert (small["Conv4"].tp, small["Conv4"].tq) == (10, 10)  # one tile holds a 10 x 10 output
    assert (small["Conv5"].tp, small["Conv5"].tq) == (11, 11)


def test_tiled_supports_names_the_new_limits():
    assert "up to 11x11" in direct.tiled_supports(
        ConvConfig.from_shapes((1, 1, 16, 16), (1, 1, 13, 13)))
    assert "strides up to 3" in direct.tiled_supports(
        ConvConfig.from_shapes((1, 1, 16, 16), (1, 1, 3, 3), stride=4))
    many = ConvConfig.from_shapes((65_536, 1, 3, 3), (4, 1, 3, 3))
    reason = direct.tiled_supports(many)
    assert "grid z" in reason and "65,535" in reason
    # direct-naive's 1-D grids take them: its backward then runs the first kernels
    assert direct.naive_supports(many) is None
    assert direct.launches(many)["dx"] is None and direct.launches(many)["dw"] is None


@simulator_only
@pytest.mark.slow
def test_launch_every_kernel_launches_each_direct_kernel_of_the_table(monkeypatch):
    """helpers.kernels lists the register-blocked kernels by readable names; one call of
    direct.launch_every_kernel() compiles each on a GPU (kernel_resources reads them then)."""
    launched = set()
    kind = type(direct.direct_naive_kernel)
    getitem = kind.__getitem__
    monkeypatch.setattr(kind, "__getitem__",
                        lambda self, config: launched.add(id(self)) or getitem(self, config))
    assert direct.launch_every_kernel() == 11
    ours = [k for k in kernels.KERNELS if k.module == "helpers.conv.direct"]
    assert len(ours) == 12
    assert [k.name for k in ours if id(k.dispatcher()) not in launched] == []


def test_each_specialisation_is_a_module_attribute_by_its_name():
    """The real compiler's child process rebuilds a kernel from its module and name."""
    plan = direct.launches(paper.TABLE_I[4])
    for module, launch in ((forward, plan["forward"]), (forward, plan["dx"]),
                           (backward, plan["dw"])):
        fn = launch.kernel.py_func
        assert fn.__module__ == module.__name__
        assert getattr(module, fn.__name__) is launch.kernel
    with pytest.raises(AttributeError):
        forward.direct_fwd_kernel__x
