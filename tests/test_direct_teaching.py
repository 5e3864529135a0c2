"""helpers.conv.direct's teaching helpers (window_reads, tile_traffic) and notebook 03's charts."""

from __future__ import annotations

import helpers  # noqa: F401  (must come first: decides simulator vs GPU before numba.cuda)
import math

import numpy as np
import pytest

from helpers.conv import config_for, conv2d, direct

CASES = [((1, 2, 6, 5), (3, 2, 3, 2), 1, 0), ((2, 1, 7, 7), (1, 1, 3, 3), 1, 1),
         ((1, 2, 9, 8), (2, 2, 5, 3), (2, 3), (2, 1))]


@pytest.mark.parametrize("x_shape,w_shape,stride,padding", CASES)
def test_window_reads_are_exactly_the_inputs_an_output_depends_on(x_shape, w_shape, stride,
                                                                   padding):
    cfg = config_for(x_shape, w_shape, stride, padding)
    w = np.ones(cfg.w_shape, np.float32)
    # Probe: a one-hot input at (c, h, w) changes y[0, 0, p, q] iff the thread reads it.
    touched = {}
    for c in range(cfg.c):
        for h in range(cfg.h):
            for wi in range(cfg.w):
                x = np.zeros(cfg.x_shape, np.float32)
                x[0, c, h, wi] = 1.0
                y = conv2d(x, w, stride=stride, padding=padding, strategy="direct-naive",
                           device="cpu")
                for p, q in zip(*np.nonzero(y[0, 0])):
                    touched.setdefault((int(p), int(q)), set()).add((c, h, wi))
    for p in range(cfg.p):
        for q in range(cfg.q):
            reads = direct.window_reads(cfg, 0, 0, p, q)
            assert {(c, h, wi) for c, h, wi, _, _ in reads} == touched.get((p, q), set())
            assert len(reads) == len(set(reads)) <= cfg.c * cfg.r * cfg.s


@pytest.mark.parametrize("x_shape,w_shape,stride,padding", CASES)
def test_window_reads_reproduce_the_output(rng, x_shape, w_shape, stride, padding):
    cfg = config_for(x_shape, w_shape, stride, padding)
    x = rng.standard_normal(cfg.x_shape).astype(np.float32)
    w = rng.standard_normal(cfg.w_shape).astype(np.float32)
    y = conv2d(x, w, stride=stride, padding=padding, strategy="direct-naive", device="cpu")
    for n, k, p, q in [(0, 0, 0, 0), (cfg.n - 1, cfg.k - 1, cfg.p - 1, cfg.q - 1),
                       (0, cfg.k - 1, cfg.p // 2, cfg.q // 2)]:
        by_hand = sum(float(x[n, c, h, wi]) * float(w[k, c, r, s])
                      for c, h, wi, r, s in direct.window_reads(cfg, n, k, p, q))
        assert by_hand == pytest.approx(float(y[n, k, p, q]), rel=1e-5, abs=1e-5)


def test_window_reads_match_the_cuda_kernel():
    x = (np.arange(36) * 7 % 10).reshape(1, 1, 6, 6).astype(np.float32)
    w = np.arange(9, dtype=np.float32).reshape(1, 1, 3, 3) - 4
    cfg = config_for(x.shape, w.shape, 1, 1)
    y = conv2d(x, w, padding=1, strategy="direct-naive", device="cuda")
    for p, q in [(0, 0), (2, 3), (5, 5)]:
        by_hand = sum(x[0, c, h, wi] * w[0, c, r, s]
                      for c, h, wi, r, s in direct.window_reads(cfg, 0, 0, p, q))
        assert by_hand == y[0, 0, p, q]  # small integers: exact in float32
    assert len(direct.window_reads(cfg, 0, 0, 0, 0)) == 4  # corner: 5 of 9 taps on the padding


def test_window_reads_refuses_indices_outside_the_output():
    cfg = config_for((1, 1, 5, 5), (2, 1, 3, 3))
    with pytest.raises(ValueError, match=r"p must be in 0\.\.2"):
        direct.window_reads(cfg, 0, 0, 3, 0)
    with pytest.raises(ValueError, match=r"k must be in 0\.\.1"):
        direct.window_reads(cfg, 0, 2, 0, 0)
    with pytest.raises(ValueError, match="n must be"):
        direct.window_reads(cfg, -1, 0, 0, 0)


def test_tile_traffic_counts():
    t = direct.tile_traffic(3, 3, 1, tile=8)
    assert (t.macs, t.naive_loads, t.tiled_x_loads, t.tiled_w_loads) == (576, 1152, 100, 9)
    assert t.input_reuse == pytest.approx(5.76)
    assert t.naive_intensity == 0.25
    assert t.tiled_intensity == pytest.approx(2 * 576 / (4 * 109))
    assert t.reads_per_input == 9
    # A 1 x 1 tile reuses nothing beyond what one thread does; big tiles approach R*S / stride^2.
    assert direct.tile_traffic(3, 3, 1, tile=1).input_reuse == 1.0
    for r, s, stride in [(3, 3, 1), (11, 11, 1), (5, 3, 2), (11, 11, 4)]:
        big = direct.tile_traffic(r, s, stride, tile=4096)
        assert big.input_reuse == pytest.approx(r * s / stride**2, rel=0.01)
        reuse = [direct.tile_traffic(r, s, stride, t).input_reuse for t in (1, 2, 4, 8, 16, 32)]
        assert reuse == sorted(reuse)


def test_tile_traffic_matches_the_kernels_shared_tile():
    # The tiled kernel's shared input tile holds the footprint of the largest case it supports.
    t = direct.tile_traffic(direct.MAX_KERNEL, direct.MAX_KERNEL, direct.MAX_STRIDE, direct.TILE)
    assert t.tiled_x_loads == direct.IN_TILE ** 2
    assert direct.TILED_SHARED_BYTES == 4 * direct.IN_TILE ** 2  # the filter is not staged


@pytest.mark.parametrize("r,stride", [(3, 1), (3, 2), (5, 2), (7, 3), (2, 3)])
def test_reads_per_input_is_the_most_windows_covering_one_input(r, stride):
    h = 40
    cover = np.zeros(h, int)
    for p in range((h - r) // stride + 1):
        cover[p * stride:p * stride + r] += 1
    most_1d = int(cover.max())
    assert most_1d == math.ceil(r / stride)
    assert direct.tile_traffic(r, r, stride).reads_per_input == most_1d ** 2


def test_tile_traffic_refuses_bad_sizes():
    for kwargs, name in [(dict(r=0, s=3), "r"), (dict(r=3, s=0), "s"),
                         (dict(r=3, s=3, stride=0), "stride"), (dict(r=3, s=3, tile=0), "tile")]:
        with pytest.raises(ValueError, match=f"{name} must be >= 1"):
            direct.tile_traffic(**kwargs)


# ------------------------------------------------------------------ notebook 03's charts


def test_filtered_images_figure(rng):
    from helpers.figures import style

    panels = [(f"panel {j}", rng.standard_normal((300, 200))) for j in range(5)]
    fig = style.filtered_images_figure(panels, device="CPU: test", cols=3, max_px=64)
    assert len(fig.data) == 5
    for trace in fig.data:
        z = np.asarray(trace.z)
        assert z.dtype == np.uint8 and max(z.shape) <= 64 and z.max() == 255 and z.min() == 0
    assert "CPU: test" in fig.layout.title.text
    assert fig.layout.yaxis5.autorange == "reversed" and fig.layout.xaxis5.scaleanchor == "y5"
    with pytest.raises(ValueError, match="must be a 2-D image"):
        style.filtered_images_figure([("bad", np.zeros((2, 3, 4)))], device="x")
    with pytest.raises(ValueError, match="must not be empty"):
        style.filtered_images_figure([], device="x")


def test_conv_window_figure():
    from helpers.figures import nb03_direct

    cfg = config_for((1, 1, 6, 6), (1, 1, 3, 3), 1, 1)
    x = np.arange(36, dtype=np.float32).reshape(6, 6)
    y = np.zeros((6, 6), np.float32)
    reads = direct.window_reads(cfg, 0, 0, 0, 0)
    fig = nb03_direct.conv_window_figure(x, np.ones((3, 3)), y, reads, p=0, q=0, padding=1, device="sim")
    z = np.asarray(fig.data[0].z)
    assert z.shape == (8, 8)
    assert (z == -1).sum() == 8 * 8 - 36 and (z == 1).sum() == 4  # padding ring; 4 reads
    assert "reads 4 inputs" in fig.layout.title.text and "sim" in fig.layout.title.text
    with pytest.raises(ValueError, match="x must be 2-D"):
        nb03_direct.conv_window_figure(x[None], np.ones((3, 3)), y, reads, 0, 0)


def test_direct_runtime_and_phase_and_reuse_figures():
    from helpers.figures import nb03_direct

    rows = [{"layer": f"Conv{j}", "strategy": s, "pass": ps, "median_ms": 1.0 + j, "iqr_ms": 0.1,
             "gflop_per_s": 2.0, "device": "CPU: test"}
            for j in (1, 2) for s in ("reference", "direct-naive")
            for ps in ("forward", "forward+backward")]
    rows.append({"layer": "Conv3", "strategy": "direct-naive", "pass": "forward", "median_ms": None,
                 "iqr_ms": None, "gflop_per_s": None, "device": "CPU: test"})
    fig = nb03_direct.direct_runtime_figure(rows)
    assert len(fig.data) == 8 and "CPU: test" in fig.layout.title.text
    assert fig.layout.yaxis.type == "log"
    with pytest.raises(ValueError, match="no measured rows"):
        nb03_direct.direct_runtime_figure(rows[-1:])

    steps = [{"phase": "direct (y)", "ms": 3.0, "share": 0.9},
             {"phase": "other", "ms": 0.3, "share": 0.1}]
    fig = nb03_direct.direct_phases_figure([("direct-naive, forward", steps)], device="CPU: test")
    assert [t.name for t in fig.data] == ["direct (y)", "other"]
    assert "CPU: test" in fig.layout.title.text

    tiles = [1, 2, 4, 8]
    traffic = [direct.tile_traffic(3, 3, 1, t) for t in tiles]
    fig = nb03_direct.tile_reuse_figure([("3 x 3", tiles, traffic)], mark_tile=8)
    assert list(fig.data[0].y) == [direct.tile_traffic(3, 3, 1, t).input_reuse for t in tiles]


def test_tiled_grid_fits_the_cuda_limits_where_the_old_one_overflowed():
    # The first tiled kernel put N*K on grid z (at most 65,535): b = 256, f = 512 overflowed.
    assert direct.tiled_supports(config_for((256, 3, 64, 64), (512, 3, 3, 3))) is None
    too_many_images = config_for((65_536, 1, 3, 3), (1, 1, 3, 3))
    reason = direct.tiled_supports(too_many_images)
    assert reason is not None and "grid z" in reason and "65,535" in reason
    # the register-blocked kernel puts K / 32 on grid y: up to 32 * 65,535 filters
    assert direct.tiled_supports(config_for((1, 1, 3, 3), (32 * 65_535, 1, 3, 3))) is None
    too_many_filters = config_for((1, 1, 3, 3), (32 * 65_535 + 1, 1, 3, 3))
    assert "grid y" in direct.tiled_supports(too_many_filters)


def test_strategies_refuse_an_oversized_grid_before_launching():
    from helpers import conv

    cfg = conv.config_for((1, 1, 3, 3), (32 * 65_535 + 1, 1, 3, 3))  # K / 32 on grid y
    assert "grid y" in conv.STRATEGIES["direct-tiled"].supports(cfg, "cuda")
    with pytest.raises(ValueError, match="grid y"):
        direct.forward_tiled(None, None, cfg)  # refused before touching the tensors
