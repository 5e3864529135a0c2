"""Charts of notebook 03's tiled direct kernel: the halo one block stages in shared memory, and
which thread computes which output.

:func:`tiled_block_footprint` counts what a block of
:func:`helpers.conv.direct.direct_tiled_kernel` copies and reads, from the kernel's own
constants; :func:`tiled_halo_figure` draws it; :func:`tiled_thread_map` and
:func:`thread_map_figure` map a block and thread to the outputs and inputs it touches. Symbols as
in the cuDNN paper (N, C, H, W, K, R, S, P, Q). Counted, not measured.

Source: the study's Section II-B (direct convolution); the tiling is our kernel's.
"""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go

from helpers.conv import direct
from helpers.figures.style import color_for


def tiled_block_footprint(h: int, w: int, r: int, s: int, stride: int = 1, padding: int = 0,
                          tile_p: int = 0, tile_q: int = 0) -> dict:
    """What one block of :func:`helpers.conv.direct.direct_tiled_kernel` copies into shared
    memory for one input channel, from the kernel's own constants and index arithmetic.

    The block owns output tile ``(tile_p, tile_q)`` (``TILE x TILE`` outputs from
    ``(p0, q0) = (tile_p * TILE, tile_q * TILE)``). Its patch starts at input row
    ``h0 = p0 * stride - padding`` (column ``w0`` likewise) and spans
    ``(TILE - 1) * stride + R`` rows and ``(TILE - 1) * stride + S`` columns; shared-memory
    entry ``x_tile[a, b]`` holds ``x[h0 + a, w0 + b]`` (0 outside the input) and is copied by
    thread ``(tq, tp) = (b % TILE, a % TILE)`` in its copy round ``(a // TILE, b // TILE)``.

    Args:
        h, w: input height H and width W (>= 1); r, s: filter R and S (1..MAX_KERNEL).
        stride: both axes (1..MAX_STRIDE); padding: both axes (>= 0).
        tile_p, tile_q: the block's output tile (row and column of tiles, >= 0, inside P x Q).

    Returns:
        dict with ``tile``, ``in_tile`` (the shared array's edge), ``p0, q0, h0, w0``, ``rows``,
        ``cols``, ``p``, ``q`` (the layer's output size), ``reads`` (int array (rows, cols):
        how many of the block's TILE*TILE threads read each staged entry), ``inside`` (bool
        array (rows, cols): the entry is a real input element, not padding or beyond the input),
        ``core`` (rows, cols bool: rows/columns where a window starts, p*stride; the rest of
        the patch is the halo).

    Raises:
        ValueError: sizes out of the ranges above (the kernel's limits: ``MAX_KERNEL``,
            ``MAX_STRIDE``), or a tile outside the output.

    Source: the study's Section II-B (direct convolution); the tiling is our kernel's.
    """

    tile = direct.TILE
    for name, v, lo, hi in (("h", h, 1, None), ("w", w, 1, None), ("r", r, 1, direct.MAX_KERNEL),
                            ("s", s, 1, direct.MAX_KERNEL), ("stride", stride, 1,
                                                             direct.MAX_STRIDE),
                            ("padding", padding, 0, None), ("tile_p", tile_p, 0, None),
                            ("tile_q", tile_q, 0, None)):
        if int(v) < lo or (hi is not None and int(v) > hi):
            bound = f"{lo}..{hi}" if hi is not None else f">= {lo}"
            raise ValueError(f"{name} must be {bound} (direct_tiled_kernel's limits), got {v}")
    p_ = (h + 2 * padding - r) // stride + 1
    q_ = (w + 2 * padding - s) // stride + 1
    if p_ < 1 or q_ < 1:
        raise ValueError(f"the {r} x {s} filter is larger than the padded {h} x {w} input")
    tiles_p, tiles_q = -(-p_ // tile), -(-q_ // tile)
    if tile_p >= tiles_p or tile_q >= tiles_q:
        raise ValueError(f"tile ({tile_p}, {tile_q}) is outside the output's {tiles_p} x "
                         f"{tiles_q} tiles of {tile} x {tile}")
    p0, q0 = tile_p * tile, tile_q * tile
    h0, w0 = p0 * stride - padding, q0 * stride - padding
    rows, cols = (tile - 1) * stride + r, (tile - 1) * stride + s
    reads = np.zeros((rows, cols), dtype=np.int64)
    for tp in range(tile):          # the compute loop: x_tile[tp*stride + r, tq*stride + s]
        for tq in range(tile):
            reads[tp * stride:tp * stride + r, tq * stride:tq * stride + s] += 1
    hi = h0 + np.arange(rows)[:, None]
    wi = w0 + np.arange(cols)[None, :]
    inside = (hi >= 0) & (hi < h) & (wi >= 0) & (wi < w)
    core = np.zeros((rows, cols), dtype=bool)
    core[0:(tile - 1) * stride + 1:stride, 0:(tile - 1) * stride + 1:stride] = True
    return {"tile": tile, "in_tile": direct.IN_TILE, "p0": p0, "q0": q0, "h0": h0, "w0": w0,
            "rows": rows, "cols": cols, "p": p_, "q": q_, "reads": reads, "inside": inside,
            "core": core}


def _grid_axes(fig, row, col, n_rows, n_cols, title_x="", title_y=""):
    """Square cells, row 0 at the top, for the subplot at (row, col)."""
    fig.update_xaxes(range=[-0.5, n_cols - 0.5], showgrid=False, zeroline=False,
                     title_text=title_x, constrain="domain", row=row, col=col)
    fig.update_yaxes(range=[n_rows - 0.5, -0.5], showgrid=False, zeroline=False,
                     title_text=title_y, constrain="domain", row=row, col=col)
    sub = fig.get_subplot(row, col)
    fig.update_xaxes(scaleanchor=sub.yaxis.plotly_name.replace("axis", ""), row=row, col=col)


def _rect(fig, x0, y0, x1, y1, color, row, col, dash="solid", width=2):
    fig.add_shape(type="rect", x0=x0 - 0.5, x1=x1 + 0.5, y0=y0 - 0.5, y1=y1 + 0.5,
                  line=dict(color=color, width=width, dash=dash), row=row, col=col)


def tiled_halo_figure(h: int, w: int, r: int, s: int, stride: int = 1, padding: int = 0,
                      tile_p: int = 0, tile_q: int = 0) -> go.Figure:
    """The input patch one block of ``direct-tiled`` stages in shared memory, halo included.

    Left: the input plane x[n, c] (H x W, padding around it in grey), each element the block
    copies coloured by how many of its threads read it from shared memory (the core, where
    windows start, solid outline; the halo the rest of the dashed outline). Right: the shared
    array ``x_tile`` as the kernel declares it, ``IN_TILE x IN_TILE`` floats (sized for
    ``MAX_KERNEL`` and ``MAX_STRIDE``), the part this layer uses coloured by the copy round
    that fills it (TILE x TILE threads copy TILE x TILE entries a round). Counted from
    :func:`tiled_block_footprint`, not measured.

    Args and Raises: as :func:`tiled_block_footprint`.
    """
    from plotly.subplots import make_subplots

    fp = tiled_block_footprint(h, w, r, s, stride, padding, tile_p, tile_q)
    tile, in_tile, rows, cols = fp["tile"], fp["in_tile"], fp["rows"], fp["cols"]
    hp, wp = h + 2 * padding, w + 2 * padding
    z = np.full((hp, wp), np.nan)                      # reads per element, padded coordinates
    z[padding:padding + h, padding:padding + w] = 0.0
    text = np.full((hp, wp), "", dtype=object)
    a0, b0 = fp["h0"] + padding, fp["w0"] + padding   # patch corner in padded coordinates
    for a in range(rows):
        for b in range(cols):
            pa, pb = a0 + a, b0 + b
            if 0 <= pa < hp and 0 <= pb < wp:
                if fp["inside"][a, b]:
                    z[pa, pb] = fp["reads"][a, b]
                text[pa, pb] = (f"x_tile[{a}, {b}] = x[{fp['h0'] + a}, {fp['w0'] + b}]"
                                + ("" if fp["inside"][a, b] else " (padding: 0)")
                                + f"<br>copied by thread (tx={b % tile}, ty={a % tile})"
                                + f"<br>read by {fp['reads'][a, b]} threads")
    max_reads = int(fp["reads"].max())
    fig = make_subplots(rows=1, cols=2, column_widths=[0.5, 0.5], horizontal_spacing=0.14,
                        subplot_titles=[
                            f"input x[n, c]: {h} x {w}, padding {padding} (grey)",
                            f"shared array x_tile: {in_tile} x {in_tile} floats "
                            f"({4 * in_tile * in_tile:,} bytes)"])
    pad_bg = np.where(np.isnan(z), 1.0, np.nan)
    fig.add_trace(go.Heatmap(z=pad_bg, colorscale=[[0, "#dddddd"], [1, "#dddddd"]],
                             showscale=False, hoverinfo="skip", xgap=1, ygap=1), row=1, col=1)
    fig.add_trace(go.Heatmap(
        z=z, text=text, colorscale="Blues", zmin=0, zmax=max_reads, xgap=1, ygap=1,
        colorbar=dict(title="threads<br>reading", x=0.47, len=0.75, thickness=12),
        hovertemplate="padded row %{y}, col %{x}<br>%{text}<extra></extra>"), row=1, col=1)
    # the patch (core + halo) and the core where windows start
    _rect(fig, b0, a0, b0 + cols - 1, a0 + rows - 1, color_for("direct-tiled"), 1, 1, "dash", 3)
    span = (tile - 1) * stride
    _rect(fig, b0, a0, b0 + span, a0 + span, color_for("direct-tiled"), 1, 1, "solid", 2)
    _grid_axes(fig, 1, 1, hp, wp, "padded column", "padded row")
    # the shared array: rounds of the copy loop
    rounds = np.full((in_tile, in_tile), np.nan)
    per_side = -(-cols // tile)
    for a in range(rows):
        for b in range(cols):
            rounds[a, b] = (a // tile) * per_side + b // tile
    used = -(-rows // tile) * per_side
    fig.add_trace(go.Heatmap(z=np.where(np.isnan(rounds), 1.0, np.nan),
                             colorscale=[[0, "#eeeeee"], [1, "#eeeeee"]], showscale=False,
                             xgap=1, ygap=1, hoverinfo="skip"), row=1, col=2)
    fig.add_trace(go.Heatmap(
        z=rounds, colorscale="Viridis", zmin=0, zmax=max(used - 1, 1), xgap=1, ygap=1,
        colorbar=dict(title="copy<br>round", x=1.01, len=0.75, thickness=12),
        hovertemplate="x_tile[%{y}, %{x}]: copy round %{z}<extra></extra>"), row=1, col=2)
    _grid_axes(fig, 1, 2, in_tile, in_tile, "b (column of x_tile)", "a (row of x_tile)")
    halo = rows * cols - int(fp["core"].sum())
    fig.update_layout(
        title=(f"One block of direct-tiled (output tile ({tile_p}, {tile_q})): {tile} x {tile} "
               f"threads stage a {rows} x {cols} input patch<br>for a {r} x {s} filter at "
               f"stride {stride}: {tile} x {tile} window starts (solid) + {halo} halo entries"
               f"<br><sup>TILE = {tile}, IN_TILE = (TILE-1)*MAX_STRIDE + MAX_KERNEL = "
               f"{in_tile}: counted from the kernel's constants, not measured</sup>"),
        template="plotly_white", height=560, width=1000, margin=dict(l=60, r=60, t=120, b=50))
    return fig


def tiled_thread_map(cfg, block: tuple[int, int, int], thread: tuple[int, int]) -> dict:
    """Which output element a thread of ``direct-tiled`` writes, and what it reads.

    The kernel's launch and index arithmetic: grid ``(tiles_p * tiles_q, K, N)``, block
    ``(TILE, TILE)``; thread ``(tx, ty)`` of block ``(bx, by, bz)`` computes
    ``y[n, k, p, q]`` with ``n = bz``, ``k = by``, ``p = (bx // tiles_q) * TILE + ty``,
    ``q = (bx % tiles_q) * TILE + tx``.

    Args:
        cfg: a :class:`helpers.conv.ConvConfig` (N, C, H, W, K, R, S; P, Q derived).
        block: (bx, by, bz) inside the grid; thread: (tx, ty), each 0..TILE-1.

    Returns:
        dict with ``n, k, p, q``, ``p0, q0`` (the block's tile origin), ``tiles`` ((tiles_p,
        tiles_q)), ``grid`` (the launch grid), ``writes`` (False for a thread of an edge
        tile whose output lies outside y: it copies and waits at the barriers, but stores
        nothing) and ``reads`` (:func:`helpers.conv.direct.window_reads`, the (c, hi, wi, r, s)
        of its multiply-adds; empty if it writes nothing).

    Raises:
        ValueError: a block outside the grid or a thread outside the block.
    """

    tile = direct.TILE
    tiles_p, tiles_q = -(-cfg.p // tile), -(-cfg.q // tile)
    grid = (tiles_p * tiles_q, cfg.k, cfg.n)
    for name, v, lim in zip(("bx", "by", "bz"), block, grid):
        if not 0 <= int(v) < lim:
            raise ValueError(f"block {name} must be in 0..{lim - 1} (grid {grid}), got {v}")
    for name, v in zip(("tx", "ty"), thread):
        if not 0 <= int(v) < tile:
            raise ValueError(f"thread {name} must be in 0..{tile - 1}, got {v}")
    bx, by, bz = (int(v) for v in block)
    tx, ty = (int(v) for v in thread)
    p0, q0 = (bx // tiles_q) * tile, (bx % tiles_q) * tile
    n, k, p, q = bz, by, p0 + ty, q0 + tx
    writes = p < cfg.p and q < cfg.q
    return {"n": n, "k": k, "p": p, "q": q, "p0": p0, "q0": q0, "tiles": (tiles_p, tiles_q),
            "grid": grid, "writes": writes,
            "reads": direct.window_reads(cfg, n, k, p, q) if writes else []}


def thread_map_figure(cfg, block: tuple[int, int, int], thread: tuple[int, int]) -> go.Figure:
    """One thread of ``direct-tiled`` in a multi-channel 2-D convolution: what it reads, what
    it writes.

    Top row: the C input channels x[n, c] (padded, grey border), the thread's window outlined
    and its inputs filled, the block's whole patch shaded. Middle row: the filter w[k], one
    R x S slice per channel, all read. Bottom: the output plane y[n, k], the block's tile
    shaded (its threads outside y hatched grey), the thread's element filled; hovering over
    any output element names the block and thread that compute it.

    Args and Raises: as :func:`tiled_thread_map`.
    """
    from plotly.subplots import make_subplots


    m = tiled_thread_map(cfg, block, thread)
    tile = direct.TILE
    c_ = cfg.c
    hp, wp = cfg.h + 2 * cfg.pad_h, cfg.w + 2 * cfg.pad_w
    titles = [f"input x[{m['n']}, {c}]" for c in range(c_)]
    titles += [f"filter w[{m['k']}, {c}]" for c in range(c_)]
    titles += [f"output y[{m['n']}, {m['k']}] ({cfg.p} x {cfg.q})"] + [""] * (c_ - 1)
    fig = make_subplots(rows=3, cols=c_, subplot_titles=titles, vertical_spacing=0.08,
                        horizontal_spacing=0.04, row_heights=[0.4, 0.2, 0.4])
    color = color_for("direct-tiled")
    bx, by, bz = block
    tx, ty = thread
    # block patch in padded coordinates
    a0, b0 = m["p0"] * cfg.stride_h, m["q0"] * cfg.stride_w
    a1 = min(a0 + (tile - 1) * cfg.stride_h + cfg.r, hp) - 1
    b1 = min(b0 + (tile - 1) * cfg.stride_w + cfg.s, wp) - 1
    for c in range(c_):
        z = np.full((hp, wp), 0.0)
        z[:cfg.pad_h, :] = z[hp - cfg.pad_h:, :] = -1.0
        z[:, :cfg.pad_w] = z[:, wp - cfg.pad_w:] = -1.0
        z[a0:a1 + 1, b0:b1 + 1] = np.where(z[a0:a1 + 1, b0:b1 + 1] < 0, -0.5, 0.5)
        for cc, hi, wi, _r, _s in m["reads"]:
            if cc == c:
                z[hi + cfg.pad_h, wi + cfg.pad_w] = 1.0
        fig.add_trace(go.Heatmap(
            z=z, zmin=-1, zmax=1, showscale=False, xgap=1, ygap=1,
            colorscale=[[0, "#bbbbbb"], [0.24, "#bbbbbb"], [0.25, "#d9c2d4"], [0.49, "#d9c2d4"],
                        [0.5, "#f2f2f2"], [0.74, "#f2f2f2"], [0.75, "#f0dcea"],
                        [0.99, "#f0dcea"], [1.0, color]],
            hovertemplate=f"x[{m['n']}, {c}, row %{{y}} - {cfg.pad_h}, col %{{x}} - "
                          f"{cfg.pad_w}]<extra></extra>"), row=1, col=c + 1)
        if m["writes"]:
            top, left = m["p"] * cfg.stride_h, m["q"] * cfg.stride_w
            _rect(fig, left, top, left + cfg.s - 1, top + cfg.r - 1, color, 1, c + 1)
        _grid_axes(fig, 1, c + 1, hp, wp)
        fig.add_trace(go.Heatmap(
            z=np.ones((cfg.r, cfg.s)), showscale=False, xgap=1, ygap=1,
            colorscale=[[0, color], [1, color]] if m["writes"] else [[0, "#eeeeee"],
                                                                       [1, "#eeeeee"]],
            hovertemplate=f"w[{m['k']}, {c}, %{{y}}, %{{x}}]<extra></extra>"), row=2, col=c + 1)
        _grid_axes(fig, 2, c + 1, cfg.r, cfg.s)
    # output plane with the block/thread of every element in its hover text
    tiles_q = m["tiles"][1]
    rows_out = max(cfg.p, m["p0"] + tile)
    cols_out = max(cfg.q, m["q0"] + tile)
    z = np.full((rows_out, cols_out), np.nan)
    text = np.full((rows_out, cols_out), "", dtype=object)
    for p in range(rows_out):
        for q in range(cols_out):
            inside = p < cfg.p and q < cfg.q
            ebx = (p // tile) * tiles_q + q // tile
            in_block = m["p0"] <= p < m["p0"] + tile and m["q0"] <= q < m["q0"] + tile
            if inside:
                z[p, q] = 0.5 if in_block else 0.0
                text[p, q] = (f"y[{m['n']}, {m['k']}, {p}, {q}] is written by thread "
                              f"(tx={q % tile}, ty={p % tile}) of block "
                              f"({ebx}, {m['k']}, {m['n']})")
            elif in_block:
                z[p, q] = -1.0
                text[p, q] = (f"thread (tx={q - m['q0']}, ty={p - m['p0']}) of this block: "
                              "no output here; it copies and waits at the barriers only")
    if m["writes"]:
        z[m["p"], m["q"]] = 1.0
    fig.add_trace(go.Heatmap(
        z=z, text=text, zmin=-1, zmax=1, showscale=False, xgap=1, ygap=1,
        colorscale=[[0, "#bbbbbb"], [0.49, "#bbbbbb"], [0.5, "#f2f2f2"], [0.74, "#f2f2f2"],
                    [0.75, "#f0dcea"], [0.99, "#f0dcea"], [1.0, color]],
        hovertemplate="%{text}<extra></extra>"), row=3, col=1)
    _rect(fig, m["q0"], m["p0"], m["q0"] + tile - 1, m["p0"] + tile - 1, color, 3, 1, "dash")
    _grid_axes(fig, 3, 1, rows_out, cols_out, "q", "p")
    for j in range(2, c_ + 1):
        fig.update_xaxes(visible=False, row=3, col=j)
        fig.update_yaxes(visible=False, row=3, col=j)
    what = (f"writes y[{m['n']}, {m['k']}, {m['p']}, {m['q']}], reading {len(m['reads'])} "
            f"inputs x[{m['n']}, c, h, w] and as many weights w[{m['k']}, c, r, s], "
            f"c = 0..{c_ - 1}"
            if m["writes"] else "has no output element (edge tile): it only helps copy")
    fig.update_layout(
        title=(f"direct-tiled: thread (tx={tx}, ty={ty}) of block ({bx}, {by}, {bz})<br>{what}"
               f"<br><sup>x {cfg.x_shape}, w {cfg.w_shape}, stride {cfg.stride_h}, padding "
               f"{cfg.pad_h}; grid {m['grid']} = (tiles, K, N), block ({tile}, {tile})</sup>"
               "<br><sup>pale: the block's input patch and output tile; grey in y: threads "
               "with no output (from the kernel's index arithmetic)</sup>"),
        template="plotly_white", height=840, width=max(760, 280 * c_),
        margin=dict(l=50, r=20, t=150, b=40))
    return fig
