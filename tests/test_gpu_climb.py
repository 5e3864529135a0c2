"""On a real GPU: the climb's kernels at sizes the simulator cannot reach, against torch.

The GEMM ladder at 1,024 (whole tiles: the float4 kernels) and at an odd size (whole tiles and
edges), split-K, and the im2col / col2im window kernels at a Table I layer, each on NaN-poisoned
outputs. Needs only numpy, numba, numba-cuda, torch and pytest (tools/gpu_tests.py runs it on a
bare GPU server); skipped without a GPU.
"""

from __future__ import annotations

import helpers  # noqa: F401  (first: decides simulator vs GPU before numba.cuda is imported)

import dataclasses

import pytest
import torch

from helpers.conv import gemm as g
from helpers.conv import unroll
from helpers.device import backend
from helpers.paper import TABLE_I

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(backend.MODE != "gpu", reason="needs a CUDA GPU"),
]


def _rel(got: torch.Tensor, want: torch.Tensor) -> float:
    assert not torch.isnan(got).any(), f"{int(torch.isnan(got).sum())} elements never written"
    return float((got.double() - want).norm() / want.norm())


@pytest.mark.parametrize("m, n, k", [(1024, 1024, 1024), (1000, 1030, 517)])
@pytest.mark.parametrize("kernel", [r.name for r in g.RUNGS])
def test_every_rung_on_the_gpu(kernel, m, n, k):
    gen = torch.Generator(device="cuda").manual_seed(m + k)
    a = torch.randn((m, k), device="cuda", generator=gen)
    b = torch.randn((k, n), device="cuda", generator=gen)
    assert _rel(g.gemm(a, b, kernel), a.double() @ b.double()) < 1e-5


def test_split_k_on_the_gpu():
    gen = torch.Generator(device="cuda").manual_seed(5)
    a = torch.randn((96, 200_003), device="cuda", generator=gen)
    b = torch.randn((27, 200_003), device="cuda", generator=gen)
    assert _rel(g.gemm_nt(a, b), a.double() @ b.double().t()) < 1e-5


@pytest.mark.parametrize("layer", [TABLE_I[0], TABLE_I[3]], ids=["Conv1", "Conv4"])
def test_window_kernels_match_the_first_ones_on_the_gpu(layer):
    cfg = dataclasses.replace(layer, n=8)
    gen = torch.Generator(device="cuda").manual_seed(6)
    x = torch.randn(cfg.x_shape, device="cuda", generator=gen)
    assert torch.equal(unroll.im2col(x, cfg), unroll.im2col_first(x, cfg))
    dcols = torch.randn((cfg.c * cfg.r * cfg.s, cfg.n * cfg.p * cfg.q), device="cuda",
                        generator=gen)
    assert _rel(unroll.col2im(dcols, cfg), unroll.col2im_first(dcols, cfg).double()) < 1e-6
