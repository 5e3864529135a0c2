"""The GEMM ladder (helpers.conv.gemm, rungs 1-7 and split-K) against a float64 matmul, and what
the real compiler makes of each rung.

Every rung runs on odd shapes (nothing a multiple of a tile), on exact multiples and on shapes
that need the whole tiles and the edges at once; C starts as NaN, so an element no thread
wrote fails. The vectorised rungs' fast kernel (whole tiles, float4) is reached in the
simulator through small tile sizes of the same code (``make_kernel``). Planted host bugs show
the comparison failing them. The compiler tests need no GPU.
"""

from __future__ import annotations

import helpers  # noqa: F401  (first: decides simulator vs GPU before numba.cuda is imported)

import numpy as np
import pytest
import torch

from helpers import compiled, kernels
from helpers.conv import gemm as g
from helpers.conv.gemm import rung6_vectorized as r6
from helpers.conv.gemm import rung7_autotuned as r7
from helpers.conv.gemm import splitk
from helpers.device import backend
from helpers.device.arrays import cuda_device, kernel_array, poisoned

#: Largest |C - C_float64| allowed, relative to max |C_float64|.
RTOL = 1e-4


def _operands(seed: int, m: int, n: int, k: int):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((m, k)).astype(np.float32),
            rng.standard_normal((k, n)).astype(np.float32))


def _check(c, want: np.ndarray) -> None:
    c = np.asarray(c, dtype=np.float64)
    assert c.shape == want.shape
    assert not np.isnan(c).any(), f"{int(np.isnan(c).sum())} elements of C were never written"
    err = np.abs(c - want).max() / np.abs(want).max()
    assert err <= RTOL, f"relative error {err:.2e} > {RTOL:g}"


def test_the_ladder_is_in_order_and_its_files_are_its_rungs():
    assert [r.number for r in g.RUNGS] == list(range(1, 8))
    assert g.KERNELS == ("uncoalesced", "naive", "tiled", "blocktile-1d", "blocktile-2d",
                         "vectorized", "autotuned")
    for r in g.RUNGS:
        assert r.module.rsplit(".", 1)[1].startswith(f"rung{r.number}_")
        assert r.kernel is not None
    assert g.rung(3) is g.rung("tiled")
    with pytest.raises(ValueError, match="kernel must be one of"):
        g.rung(8)


# ------------------------------------------------------------------------------ correctness

SHAPES = [(1, 1, 1), (37, 29, 21), (3, 70, 9), (65, 66, 9)]


@pytest.mark.parametrize("kernel", [r.name for r in g.RUNGS if r.number != 3])
@pytest.mark.parametrize("m, n, k", SHAPES)
@pytest.mark.slow
def test_every_rung_matches_float64_on_odd_shapes(kernel, m, n, k):
    a, b = _operands(m * 1000 + n * 10 + k, m, n, k)
    _check(g.gemm(a, b, kernel), a.astype(np.float64) @ b.astype(np.float64))


def test_uncoalesced_and_naive_agree_bit_for_bit():
    """Rungs 1 and 2 add the same products in the same order: only the thread map differs."""
    a, b = _operands(5, 19, 23, 31)
    np.testing.assert_array_equal(g.gemm(a, b, "uncoalesced"), g.gemm(a, b, "naive"))


SMALL = r6.Config(32, 32, 8, 4, 4)   # 64 threads: the vectorised code at simulator speed


def _run_vectorized(cfg: r6.Config, a: np.ndarray, b: np.ndarray, plan=None) -> np.ndarray:
    """C = A @ B by the vectorised kernel at tile sizes ``cfg`` (whole tiles and edges, or the
    launches of ``plan``), on NaN-poisoned C."""
    m, k = a.shape
    n = b.shape[1]
    dev = cuda_device()
    ta, tb = torch.from_numpy(a).to(dev), torch.from_numpy(b).to(dev)
    c = poisoned((m, n), dev)
    flat = [kernel_array(t.reshape(-1)) for t in (ta, tb, c)]
    launches = plan if plan is not None else r6.tiles(cfg, m, n, k, vec=True)
    for guarded, grid, (by0, bx0) in launches:
        r7.kernel_for(cfg, guarded)[grid, cfg.threads](
            *flat, np.int64(m), np.int64(n), np.int64(k), np.int64(by0), np.int64(bx0))
    return c.cpu().numpy()


SMALL_PREFETCH = r6.Config(32, 32, 8, 4, 4, prefetch=True)   # rung 7's kernel, small


@pytest.mark.parametrize("cfg", [SMALL, SMALL_PREFETCH], ids=["rung6", "rung7-prefetch"])
@pytest.mark.parametrize("m, n, k, fast", [
    (64, 96, 16, True),     # whole tiles only: the float4 kernel alone
    (70, 100, 20, False),   # K not a multiple of bk: the guarded kernel everywhere
    (70, 100, 24, True),    # whole tiles, then the right strip and the bottom strip
    (64, 62, 16, False),    # N not a multiple of 4: rows not 16-byte aligned
    (31, 33, 8, False),     # smaller than one tile
])
@pytest.mark.slow
def test_vectorized_whole_tiles_and_edges(cfg, m, n, k, fast):
    plan = r6.tiles(cfg, m, n, k, vec=(n % 4 == 0 and k % 4 == 0))
    assert any(not guarded for guarded, _, _ in plan) == fast
    a, b = _operands(m + n + k, m, n, k)
    _check(_run_vectorized(cfg, a, b, plan), a.astype(np.float64) @ b.astype(np.float64))


@pytest.mark.parametrize("m, n, k", [(96, 64, 24), (100, 70, 16), (33, 65, 4), (1, 1, 1)])
def test_tiles_cover_c_exactly_once(m, n, k):
    """Every tile of C belongs to exactly one launch, whichever kernel it goes to."""
    for vec in (True, False):
        seen = []
        for _, (gx, gy), (by0, bx0) in r6.tiles(SMALL, m, n, k, vec):
            seen += [(by0 + y, bx0 + x) for y in range(gy) for x in range(gx)]
        want = [(y, x) for y in range(-(-m // SMALL.bm)) for x in range(-(-n // SMALL.bn))]
        assert sorted(seen) == want


def test_poison_catches_a_plan_that_forgets_the_corner():
    """Planted host bug: the bottom strip stops short of the last column of tiles, so the
    corner tile stays NaN and the check fails on it."""
    m, n, k = 70, 100, 24
    plan = r6.tiles(SMALL, m, n, k, vec=True)
    broken = [(gd, (gx - 1, gy) if (by0, bx0) == (m // SMALL.bm, 0) else (gx, gy), (by0, bx0))
              for gd, (gx, gy), (by0, bx0) in plan]
    a, b = _operands(7, m, n, k)
    with pytest.raises(AssertionError, match="never written"):
        _check(_run_vectorized(SMALL, a, b, broken), a.astype(np.float64) @ b.astype(np.float64))


@pytest.mark.parametrize("cfg", r7.CANDIDATES)
def test_every_candidate_tile_size_is_valid(cfg):
    assert cfg.problem() is None
    assert cfg.threads <= 1024 and cfg.shared_bytes <= 48 * 1024


@pytest.mark.parametrize("bad, match", [
    (r6.Config(128, 128, 8, 6, 8), "multiples of 4"),
    (r6.Config(128, 128, 6, 8, 8), "bk must be a multiple of 4"),
    (r6.Config(8, 8, 4, 4, 4), "threads a block"),
    (r6.Config(128, 128, 8, 8, 8, prefetch=True), "rung 7's kernel"),
])
def test_make_kernel_refuses_invalid_tile_sizes(bad, match):
    with pytest.raises(ValueError, match=match):
        r6.make_kernel(bad)


def test_without_a_gpu_autotune_refuses_and_the_default_is_chosen():
    if backend.MODE == "gpu":
        pytest.skip("checks the no-GPU behaviour")
    assert r7.chosen(4096, 4096, 4096) == r7.DEFAULT
    with pytest.raises(RuntimeError, match="GPU"):
        r7.autotune(64, 64, 64)


# ------------------------------------------------------------------------------------ split-K


@pytest.mark.parametrize("m, n, kd, min_chunk", [(37, 29, 1000, 256), (5, 3, 50, 16),
                                                  (70, 66, 33, 256), (1, 1, 1, 256)])
@pytest.mark.slow
def test_split_k_matches_float64(monkeypatch, m, n, kd, min_chunk):
    monkeypatch.setattr(g.launch, "SPLITK_MIN_CHUNK", min_chunk)
    splits, chunk = g.splitk_plan(m, n, kd)
    assert chunk % splitk.BK == 0 and splits * chunk >= kd > (splits - 1) * chunk
    rng = np.random.default_rng(kd)
    a = rng.standard_normal((m, kd)).astype(np.float32)
    b = rng.standard_normal((n, kd)).astype(np.float32)
    c = g.gemm_nt(torch.from_numpy(a), torch.from_numpy(b)).cpu().numpy()
    _check(c, a.astype(np.float64) @ b.astype(np.float64).T)


def test_split_k_splits_a_long_reduction_over_many_blocks():
    """Table I's Conv2 at batch 128: dW is 96 x 27 with a 2.03 M-long reduction."""
    splits, chunk = g.splitk_plan(96, 27, 128 * 126 * 126)
    tiles = 2 * 1
    assert tiles * splits >= 512                     # enough blocks for every SM, many times
    assert chunk >= g.launch.SPLITK_MIN_CHUNK


def test_split_k_refuses_mismatched_operands():
    with pytest.raises(ValueError, match="b's columns"):
        g.gemm_nt(torch.ones(3, 4), torch.ones(2, 5))


# ------------------------------------------------------------------------ the real compiler


@pytest.fixture(scope="module")
def ladder():
    try:
        return {t: kernels.ladder_table(t) for t in compiled.DEFAULT_TARGETS}
    except compiled.CompilerUnavailable as exc:
        pytest.skip(str(exc))


@pytest.mark.slow
def test_every_rung_compiles_in_float32_without_spills(ladder):
    for target, rows in ladder.items():
        for r in rows:
            assert r["fp64_instructions"] == 0, (target, r["name"])
            assert r["spill_bytes"] == 0, (target, r["name"])


@pytest.mark.slow
def test_ffma_per_shared_load_rises_rung_by_rung(ladder):
    ratios = [r["ffma_per_shared_load"] for r in ladder["sm_90"] if r["rung"] in (3, 4, 5, 6)]
    assert ratios == sorted(ratios) and len(set(ratios)) == 4
    assert ratios[0] == pytest.approx(0.5) and ratios[-1] == pytest.approx(16.0)


@pytest.mark.slow
def test_ffma_per_global_load_rises_rung_by_rung(ladder):
    ratios = [r["ffma_per_global_load"] for r in ladder["sm_90"]]
    assert ratios[0] == ratios[1] == pytest.approx(0.5)
    assert ratios[2:6] == sorted(ratios[2:6]) and len(set(ratios[2:6])) == 4


@pytest.mark.slow
def test_the_vectorized_rungs_load_128_bits_and_keep_two_blocks_an_sm(ladder):
    for r in ladder["sm_90"]:
        if r["rung"] >= 6:
            assert r["vector_loads"] > 0 and r["shared_loads"] == 4
            assert r["regs_per_thread"] <= 128, "two blocks of 256 threads must fit an SM"
        else:
            assert r["vector_loads"] == 0


@pytest.mark.slow
def test_split_k_and_the_edge_kernels_compile_clean():
    names = ("gemm_vectorized_edges_kernel", "gemm_autotuned_edges_kernel",
             "gemm_nt_splitk_kernel", "gemm_splitk_reduce_kernel")
    specs = [kernels.spec(n) for n in names]
    try:
        done = compiled.compile_many([compiled.Job(s.dispatcher(), s.argtypes, "sm_90")
                                      for s in specs])
    except compiled.CompilerUnavailable as exc:
        pytest.skip(str(exc))
    for name, res in zip(names, done):
        assert not isinstance(res, compiled.CompileError), res
        assert not res.problems(), (name, res.problems())
        assert res.mix.div64 == 0, name


@pytest.mark.slow
def test_every_candidate_tile_size_compiles_clean_both_ways():
    """Rung 7 may launch any candidate, at whole tiles or at the edges: none may spill."""
    from helpers.conv.gemm.rung7_autotuned import kernel_for
    args = ("float32[::1]",) * 3 + ("int64",) * 5
    jobs = [compiled.Job(kernel_for(cfg, guarded), args, "sm_90")
            for cfg in r7.CANDIDATES for guarded in (False, True)]
    try:
        done = compiled.compile_many(jobs)
    except compiled.CompilerUnavailable as exc:
        pytest.skip(str(exc))
    for job, res in zip(jobs, done):
        assert not isinstance(res, compiled.CompileError), res
        assert not res.problems(), res.problems()
        assert res.regs_per_thread * max(c.threads for c in r7.CANDIDATES) <= 65536
