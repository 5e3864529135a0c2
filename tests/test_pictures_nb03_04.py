"""The pictures of notebooks 03 and 04 tell what the kernels do: the direct-tiled block's halo,
its thread -> element map, and the tiled GEMM's tile schedule, checked against the definition
and against the real kernels (run in the simulator without a GPU)."""

import numpy as np
import pytest
import torch

import helpers  # noqa: F401  (decides simulator vs GPU before numba.cuda is imported)
from helpers.conv import config_for, conv2d, direct, gemm
from helpers.device.arrays import cuda_device, kernel_array, poisoned
from helpers.figures import nb03_tiled, nb04_unrolling

FOOTPRINTS = [  # h, w, r, s, stride, padding, tile_p, tile_q
    (20, 20, 5, 5, 1, 2, 1, 1),
    (20, 20, 5, 5, 1, 2, 0, 0),
    (30, 25, 3, 5, 2, 1, 1, 0),
    (40, 40, 11, 11, 3, 0, 0, 0),
    (9, 9, 3, 3, 1, 0, 0, 0),
]


def _brute_reads(h, w, r, s, stride, padding, tile_p, tile_q):
    """Per staged entry, the threads of the tile whose window covers it, from the convolution's
    definition: output (p, q) reads padded input rows p*stride .. p*stride + R - 1."""
    tile = direct.TILE
    p0, q0 = tile_p * tile, tile_q * tile
    rows, cols = (tile - 1) * stride + r, (tile - 1) * stride + s
    reads = np.zeros((rows, cols), dtype=np.int64)
    for p in range(p0, p0 + tile):
        for q in range(q0, q0 + tile):
            for rr in range(r):
                for ss in range(s):
                    reads[(p - p0) * stride + rr, (q - q0) * stride + ss] += 1
    return reads


@pytest.mark.parametrize("args", FOOTPRINTS)
def test_footprint_matches_the_definition(args):
    h, w, r, s, stride, padding, tile_p, tile_q = args
    fp = nb03_tiled.tiled_block_footprint(*args)
    np.testing.assert_array_equal(fp["reads"], _brute_reads(*args))
    assert fp["reads"].sum() == direct.TILE ** 2 * r * s
    assert fp["rows"] <= direct.IN_TILE and fp["cols"] <= direct.IN_TILE
    assert (fp["h0"], fp["w0"]) == (tile_p * direct.TILE * stride - padding,
                                    tile_q * direct.TILE * stride - padding)
    assert fp["core"].sum() == direct.TILE ** 2


def test_the_largest_filter_and_stride_fill_the_shared_array_exactly():
    fp = nb03_tiled.tiled_block_footprint(64, 64, direct.MAX_KERNEL, direct.MAX_KERNEL,
                                           direct.MAX_STRIDE)
    assert fp["rows"] == fp["cols"] == direct.IN_TILE


@pytest.mark.parametrize("bad", [dict(r=direct.MAX_KERNEL + 1), dict(stride=direct.MAX_STRIDE + 1),
                                 dict(tile_p=5), dict(padding=-1), dict(r=30)])
def test_footprint_refuses_what_the_kernel_refuses(bad):
    args = dict(h=20, w=20, r=5, s=5, stride=1, padding=0, tile_p=0, tile_q=0) | bad
    with pytest.raises(ValueError):
        nb03_tiled.tiled_block_footprint(**args)


def test_footprint_is_what_the_real_kernel_reads():
    """Changing every input outside one block's patch leaves that block's outputs unchanged;
    changing one halo element inside it changes them (the real kernel, simulator or GPU)."""
    h = w = 20
    r = s = 5
    fp = nb03_tiled.tiled_block_footprint(h, w, r, s, 1, 2, 1, 1)
    rng = np.random.default_rng(3)
    x = rng.standard_normal((1, 1, h, w)).astype(np.float32)
    wt = rng.standard_normal((1, 1, r, s)).astype(np.float32)
    tile = direct.TILE
    block = (slice(fp["p0"], fp["p0"] + tile), slice(fp["q0"], fp["q0"] + tile))
    y0 = conv2d(x, wt, padding=2, strategy="direct-tiled", device="cuda")[0, 0][block]
    staged = np.zeros((h, w), dtype=bool)
    staged[max(fp["h0"], 0):fp["h0"] + fp["rows"], max(fp["w0"], 0):fp["w0"] + fp["cols"]] = True
    outside = x.copy()
    outside[0, 0][~staged] += 100.0
    y1 = conv2d(outside, wt, padding=2, strategy="direct-tiled", device="cuda")[0, 0][block]
    np.testing.assert_array_equal(y0, y1)
    halo = x.copy()
    halo[0, 0, fp["h0"] + fp["rows"] - 1, fp["w0"] + fp["cols"] - 1] += 100.0  # last halo entry
    y2 = conv2d(halo, wt, padding=2, strategy="direct-tiled", device="cuda")[0, 0][block]
    assert not np.array_equal(y0, y2)


def test_thread_map_covers_every_output_once():
    cfg = config_for((2, 3, 12, 10), (4, 3, 3, 3), 1, 1)
    seen = {}
    grid = nb03_tiled.tiled_thread_map(cfg, (0, 0, 0), (0, 0))["grid"]
    for bx in range(grid[0]):
        for by in range(grid[1]):
            for bz in range(grid[2]):
                for tx in range(direct.TILE):
                    for ty in range(direct.TILE):
                        m = nb03_tiled.tiled_thread_map(cfg, (bx, by, bz), (tx, ty))
                        if m["writes"]:
                            key = (m["n"], m["k"], m["p"], m["q"])
                            assert key not in seen
                            seen[key] = (bx, by, bz, tx, ty)
                            assert len(m["reads"]) == len(direct.window_reads(cfg, *key))
                        else:
                            assert m["reads"] == []
    assert len(seen) == cfg.n * cfg.k * cfg.p * cfg.q
    assert grid == direct._tiled_grid(cfg)


def test_thread_map_matches_the_blocks_the_real_kernel_writes():
    """Launch the real kernel with a grid cut to blocks 0..bx, 0..by, 0..bz: exactly the
    outputs the map gives those blocks are written (the rest stay NaN)."""
    cfg = config_for((2, 1, 11, 9), (2, 1, 3, 3), 1, 1)
    rng = np.random.default_rng(5)
    x = torch.from_numpy(rng.standard_normal(cfg.x_shape).astype(np.float32)).to(cuda_device())
    w = torch.from_numpy(rng.standard_normal(cfg.w_shape).astype(np.float32)).to(cuda_device())
    cut = (3, 2, 1)  # blocks 0..2 along x, both filters, image 0
    y = poisoned(cfg.y_shape, cuda_device())
    dims = (cfg.c, cfg.h, cfg.w, cfg.k, cfg.r, cfg.s, cfg.p, cfg.q)
    args = (cfg.stride_h, cfg.stride_w, cfg.pad_h, cfg.pad_w, cfg.dil_h, cfg.dil_w)
    direct.direct_tiled_kernel[cut, (direct.TILE, direct.TILE)](
        kernel_array(x.reshape(-1)), kernel_array(w.reshape(-1)), kernel_array(y.reshape(-1)),
        *(np.int64(d) for d in dims), *(np.int64(a) for a in args))
    written = ~torch.isnan(y.cpu()).numpy()
    expected = np.zeros(cfg.y_shape, dtype=bool)
    for bx in range(cut[0]):
        for by in range(cut[1]):
            for bz in range(cut[2]):
                for tx in range(direct.TILE):
                    for ty in range(direct.TILE):
                        m = nb03_tiled.tiled_thread_map(cfg, (bx, by, bz), (tx, ty))
                        if m["writes"]:
                            expected[m["n"], m["k"], m["p"], m["q"]] = True
    np.testing.assert_array_equal(written, expected)


def test_thread_map_refuses_blocks_and_threads_outside_the_launch():
    cfg = config_for((1, 1, 8, 8), (1, 1, 3, 3))
    with pytest.raises(ValueError, match="block"):
        nb03_tiled.tiled_thread_map(cfg, (1, 0, 0), (0, 0))
    with pytest.raises(ValueError, match="thread"):
        nb03_tiled.tiled_thread_map(cfg, (0, 0, 0), (direct.TILE, 0))


def test_halo_and_thread_figures_name_what_they_draw():
    fig = nb03_tiled.tiled_halo_figure(20, 20, 5, 5, 1, 2, 1, 1)
    assert "12 x 12" in fig.layout.title.text
    assert f"MAX_STRIDE + MAX_KERNEL = {direct.IN_TILE}" in fig.layout.title.text
    cfg = config_for((2, 3, 12, 12), (4, 3, 3, 3), 1, 1)
    fig = nb03_tiled.thread_map_figure(cfg, (3, 2, 1), (2, 1))
    assert "writes y[1, 2, 9, 10]" in fig.layout.title.text and "27 inputs" in \
        fig.layout.title.text
    edge = nb03_tiled.thread_map_figure(cfg, (3, 2, 1), (7, 7))
    assert "no output" in edge.layout.title.text


GEMMS = [(20, 64, 27, (2, 1)), (5, 7, 20, (0, 0)), (33, 17, 16, (1, 2)), (16, 16, 48, (0, 0))]


@pytest.mark.parametrize("m,n,k,block", GEMMS)
def test_gemm_schedule_adds_up_to_the_blocks_tile_of_c(m, n, k, block):
    rng = np.random.default_rng(7)
    a = rng.standard_normal((m, k)).astype(np.float64)
    b = rng.standard_normal((k, n)).astype(np.float64)
    steps = nb04_unrolling.gemm_tile_schedule(m, n, k, block)
    tile = gemm.TILE
    assert len(steps) == -(-k // tile)
    acc = np.zeros((tile, tile))
    for st in steps:  # zero-filled tiles, as the kernel loads them
        at, bt = np.zeros((tile, tile)), np.zeros((tile, tile))
        (ar, ac), (br, bc) = st["a_valid"], st["b_valid"]
        at[:ar, :ac] = a[st["a_rows"].start:st["a_rows"].start + ar,
                         st["a_cols"].start:st["a_cols"].start + ac]
        bt[:br, :bc] = b[st["b_rows"].start:st["b_rows"].start + br,
                         st["b_cols"].start:st["b_cols"].start + bc]
        acc += at @ bt
    bx, by = block
    rows = slice(by * tile, min((by + 1) * tile, m))
    cols = slice(bx * tile, min((bx + 1) * tile, n))
    want = (a @ b)[rows, cols]
    np.testing.assert_allclose(acc[:want.shape[0], :want.shape[1]], want, rtol=1e-12)


@pytest.mark.slow
def test_gemm_schedule_agrees_with_the_real_tiled_kernel():
    m, n, k, block = 20, 64, 27, (2, 1)
    rng = np.random.default_rng(11)
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    c = gemm.gemm(a, b, kernel="tiled")
    tile = gemm.TILE
    steps = nb04_unrolling.gemm_tile_schedule(m, n, k, block)
    ks = sorted({i for st in steps for i in st["a_cols"] if i < k})
    assert ks == list(range(k))  # every step's columns of A together: the whole inner dimension
    bx, by = block
    rows, cols = slice(by * tile, min((by + 1) * tile, m)), slice(bx * tile, (bx + 1) * tile)
    np.testing.assert_allclose(c[rows, cols], (a @ b)[rows, cols], rtol=1e-4, atol=1e-4)
    assert gemm.launch_config(m, n)[0] == (-(-n // tile), -(-m // tile))


def test_gemm_schedule_refuses_a_block_outside_the_grid():
    with pytest.raises(ValueError, match="grid"):
        nb04_unrolling.gemm_tile_schedule(20, 64, 27, (4, 0))
    with pytest.raises(ValueError):
        nb04_unrolling.gemm_tile_schedule(0, 64, 27, (0, 0))


def test_gemm_figure_has_one_slider_step_per_tile_of_k():
    fig = nb04_unrolling.gemm_tiles_figure(20, 64, 27, (2, 1), "a test")
    steps = fig.layout.sliders[0].steps
    assert len(steps) == 2
    assert "A[16:32, 16:32]" in steps[1].args[1]["title.text"]
    assert "in 2 steps along K = 27" in fig.layout.title.text
