"""im2col_window_kernel and col2im_window_kernel (helpers.conv.unroll): the kernels the unrolling
strategies run, against the CPU path and the first kernels on odd shapes, and what the real
compiler makes of them (no 64-bit division or remainder: the point of the rewrite).

im2col is a copy, so the window kernel must agree with the CPU's strided view exactly; col2im
sums, so it is compared with the CPU path in float64. Outputs start as NaN (poisoned), so an
entry no thread wrote fails. Shapes are tiny: the kernels run in the simulator here.
"""

from __future__ import annotations

import helpers  # noqa: F401  (first: decides simulator vs GPU before numba.cuda is imported)

import numpy as np
import pytest
import torch

from helpers import compiled, kernels
from helpers.conv import config_for, unroll
from helpers.device.arrays import cuda_device

CASES = [  # x shape, w shape, convolution arguments: batch 1, odd sizes, stride, padding, dilation
    ((1, 3, 9, 11), (4, 3, 3, 3), dict(stride=1, padding=1)),
    ((2, 2, 10, 7), (3, 2, 3, 2), dict(stride=2, padding=1)),
    ((2, 2, 13, 12), (2, 2, 3, 3), dict(stride=(2, 3), padding=(0, 2), dilation=(2, 1))),
    ((1, 1, 5, 5), (1, 1, 5, 5), dict()),
    ((3, 1, 8, 9), (2, 1, 1, 1), dict(stride=3)),
]


@pytest.mark.parametrize("x_shape, w_shape, kw", CASES)
def test_window_kernels_match_the_cpu_path(x_shape, w_shape, kw):
    cfg = config_for(x_shape, w_shape, **kw)
    rng = np.random.default_rng(sum(x_shape))
    x = torch.from_numpy(rng.standard_normal(x_shape).astype(np.float32)).to(cuda_device())
    cols = unroll.im2col(x, cfg).cpu()
    assert not torch.isnan(cols).any(), "an entry of cols was never written"
    assert torch.equal(cols, unroll.im2col_cpu(x.cpu(), cfg))          # a copy: exactly
    assert torch.equal(cols, unroll.im2col_first(x, cfg).cpu())
    dcols = torch.from_numpy(rng.standard_normal(tuple(cols.shape)).astype(np.float32))
    dx = unroll.col2im(dcols.to(cuda_device()), cfg).cpu()
    assert not torch.isnan(dx).any(), "an element of dx was never written"
    want = unroll.col2im_cpu(dcols.double(), cfg)
    assert float((dx.double() - want).abs().max() / want.abs().max()) < 1e-5


def test_the_launcher_refuses_arrays_of_another_layer():
    cfg = config_for((1, 2, 6, 6), (1, 2, 3, 3))
    with pytest.raises(ValueError, match="im2col_window_kernel takes"):
        unroll.launcher("im2col_window_kernel", torch.zeros(1, 2, 6, 7), torch.zeros(18, 16), cfg)
    with pytest.raises(ValueError, match="kernel must be"):
        unroll.launcher("im2col_fast", torch.zeros(1, 2, 6, 6), torch.zeros(18, 16), cfg)


@pytest.mark.slow
def test_the_window_kernels_divide_in_32_bits_only():
    """The first kernels' PTX holds 64-bit divisions and remainders (ten per element for
    im2col); the window kernels' holds none."""
    names = ("im2col_kernel", "im2col_window_kernel", "col2im_kernel", "col2im_window_kernel")
    specs = [kernels.spec(n) for n in names]
    try:
        done = compiled.compile_many([compiled.Job(s.dispatcher(), s.argtypes, "sm_90")
                                      for s in specs])
    except compiled.CompilerUnavailable as exc:
        pytest.skip(str(exc))
    div64 = {n: r.mix.div64 for n, r in zip(names, done)}
    assert div64["im2col_kernel"] == 10 and div64["col2im_kernel"] > 0
    assert div64["im2col_window_kernel"] == 0 and div64["col2im_window_kernel"] == 0
    assert all(not r.problems() for r in done)
