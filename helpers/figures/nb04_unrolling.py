"""Charts of notebook 04: the im2col picture, its memory, and unrolling's runtime and steps."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import plotly.graph_objects as go

from helpers.conv import gemm
from helpers.figures.style import COLORS, color_for, layout, value

#: Colours of the unrolling strategy's steps (``helpers.conv.phases`` names): copies orange
#: (im2col) and vermilion (col2im), GEMMs in blues, bookkeeping grey.
UNROLL_PHASE_COLORS = {
    "im2col": "#E69F00", "GEMM": "#0072B2", "GEMM (dw)": "#0072B2", "GEMM (dcols)": "#56B4E9",
    "col2im": "#D55E00", "other": "#DDDDDD",
}


def im2col_picture_figure(patch: np.ndarray, cols: np.ndarray, sources: np.ndarray,
                          pixel: tuple[int, int], kernel: tuple[int, int] = (3, 3),
                          device: str = "") -> go.Figure:
    """An image patch above its im2col matrix, one input pixel and every copy of it outlined.

    Args:
        patch: (H, W) float grey image in [0, 1]: one image, one channel (N = C = 1).
        cols: its im2col matrix, (R*S, P*Q) float (:func:`helpers.conv.unroll.im2col_cpu` or
            the CUDA path's :func:`helpers.conv.unroll.im2col`).
        sources: (R*S, P*Q) int, :func:`helpers.conv.unroll.im2col_sources`: the flat index into
            ``patch`` that each entry copies, -1 for the zero padding.
        pixel: (h, w) of the input pixel to follow.
        kernel: (R, S), to label the matrix's rows with their offset (r, s) in the window.
        device: what computed ``cols`` (shown in the title).

    Returns:
        a plotly Figure: the patch (each pixel labelled with how many matrix entries copy it,
        at most R*S) and the matrix on the same grey scale, so the duplicated values are visibly
        the same; the pixel and its copies are outlined in red.

    Raises:
        ValueError: patch not 2-D, cols and sources of different shapes, rows other than R*S,
            or a pixel outside the patch.

    Source: Li et al., ICPP 2016, Sections II-B and V-B (the unrolled matrices need extra memory).
    """
    from plotly.subplots import make_subplots

    patch = np.asarray(patch, dtype=np.float32)
    cols = np.asarray(cols, dtype=np.float32)
    sources = np.asarray(sources)
    if patch.ndim != 2:
        raise ValueError(f"patch must be 2-D (H, W), got shape {patch.shape}")
    if cols.shape != sources.shape or cols.ndim != 2:
        raise ValueError(f"cols and sources must be 2-D of one shape, got {cols.shape} and "
                         f"{sources.shape}")
    r_, s_ = kernel
    if cols.shape[0] != r_ * s_:
        raise ValueError(f"cols must have R*S = {r_ * s_} rows for kernel {kernel}, got "
                         f"{cols.shape[0]}")
    h, w = patch.shape
    ph, pw = pixel
    if not (0 <= ph < h and 0 <= pw < w):
        raise ValueError(f"pixel must lie inside the {h} x {w} patch, got {pixel}")
    target = ph * w + pw
    counts = np.bincount(sources[sources >= 0].ravel(), minlength=h * w).reshape(h, w)
    rows_, ncols = cols.shape
    fig = make_subplots(rows=2, cols=1, row_heights=[0.62, 0.38], vertical_spacing=0.14,
                        subplot_titles=[
                            f"input patch x ({h} x {w}); number = its copies in the matrix",
                            f"im2col matrix cols ({rows_} x {ncols}): column = output position "
                            f"(p, q), row = offset (r, s)"])
    fig.add_trace(go.Heatmap(
        z=patch, text=counts, texttemplate="%{text}", textfont=dict(color="#E69F00", size=12),
        colorscale="gray", zmin=0, zmax=1, showscale=False, xgap=1, ygap=1,
        hovertemplate="x[%{y}, %{x}] = %{z:.3f}, copied %{text} times<extra></extra>"),
        row=1, col=1)
    where = np.where(sources >= 0, sources, -1)
    hover = np.where(where >= 0,
                     np.char.add(np.char.add("copies x[", (where // w).astype(str)),
                                 np.char.add(", ", np.char.add((where % w).astype(str), "]"))),
                     "zero padding")
    fig.add_trace(go.Heatmap(
        z=cols, colorscale="gray", zmin=0, zmax=1, showscale=False, xgap=1, ygap=1,
        customdata=hover,
        hovertemplate="row %{y}, column %{x}: %{z:.3f}, %{customdata}<extra></extra>"),
        row=2, col=1)
    fig.add_shape(type="rect", x0=pw - 0.5, x1=pw + 0.5, y0=ph - 0.5, y1=ph + 0.5,
                  line=dict(color="#FF2020", width=3), row=1, col=1)
    hit_r, hit_c = np.nonzero(sources == target)
    fig.add_trace(go.Scatter(
        x=hit_c, y=hit_r, mode="markers", showlegend=False,
        marker=dict(symbol="square-open", size=11, color="#FF2020", line=dict(width=2)),
        hovertemplate=f"a copy of x[{ph}, {pw}]<extra></extra>"), row=2, col=1)
    fig.update_xaxes(scaleanchor="y", constrain="domain", showgrid=False, dtick=1,
                     title_text="w", row=1, col=1)
    fig.update_yaxes(autorange="reversed", constrain="domain", showgrid=False, dtick=1,
                     title_text="h", row=1, col=1)
    fig.update_xaxes(scaleanchor="y2", constrain="domain", showgrid=False,
                     title_text="column = output position (p, q)", row=2, col=1)
    fig.update_yaxes(autorange="reversed", constrain="domain", showgrid=False, dtick=1,
                     ticktext=[f"({r}, {s})" for r in range(r_) for s in range(s_)],
                     tickvals=list(range(rows_)), title_text="(r, s)", row=2, col=1)
    fig.update_layout(
        title=(f"im2col of a real image: pixel x[{ph}, {pw}] (red) appears in "
               f"{int(counts[ph, pw])} columns<br><sup>matrix computed by {device}</sup>"),
        template="plotly_white", height=720, width=900, margin=dict(l=70, r=20, t=110, b=50))
    return fig


def im2col_memory_figure(rows: Sequence[dict]) -> go.Figure:
    """Input size against im2col buffer size per layer, for one or more batch sizes (log axis).

    Args:
        rows: dicts with ``layer``, ``b`` (batch), ``input_bytes`` (N*C*H*W*4) and
            ``cols_bytes`` (C*R*S*N*P*Q*4): analytic sizes, computed from the shapes.

    Returns:
        a plotly Figure: grouped bars in MiB (2**20 bytes), input grey and buffer in
        im2col-gemm's colour, batches told apart by hatching; hover gives the ratio.

    Raises:
        ValueError: no rows.

    Source: Li et al., ICPP 2016, Section II-B and Table I.
    """
    if not rows:
        raise ValueError("rows must not be empty")
    layers = list(dict.fromkeys(r["layer"] for r in rows))
    batches = list(dict.fromkeys(r["b"] for r in rows))
    patterns = ["", "/", ".", "x"]
    fig = go.Figure()
    for j, b in enumerate(batches):
        g = {r["layer"]: r for r in rows if r["b"] == b}
        ratio = [g[L]["cols_bytes"] / g[L]["input_bytes"] if L in g else None for L in layers]
        for key, label, color in (("input_bytes", "input x", COLORS["peak"]),
                                  ("cols_bytes", "im2col buffer", color_for("im2col-gemm"))):
            fig.add_trace(go.Bar(
                x=layers, y=[g[L][key] / 2**20 if L in g else None for L in layers],
                name=f"{label}, batch {b}", customdata=ratio,
                marker=dict(color=color, pattern_shape=patterns[j % len(patterns)]),
                hovertemplate=(f"%{{x}}, batch {b}: {label} %{{y:,.3g}} MiB"
                               "<br>buffer / input = %{customdata:.1f}<extra></extra>")))
    fig = layout(fig, "The memory price of unrolling: input vs im2col buffer (float32)"
                  "<br><sup>analytic sizes, computed from the layer shapes (not measured)</sup>",
                  "layer (Table I)", "size (MiB, log scale)", log_x=False, log_y=True)
    fig.update_layout(barmode="group")
    return fig


def unroll_layers_figure(rows: Sequence[dict], title: str = "Unrolling vs torch's convolution"
                         ) -> go.Figure:
    """Time, GFLOP/s and memory per layer: one bar per (strategy, pass[, device]).

    Args:
        rows: dicts with ``layer``, ``strategy``, ``pass`` (``forward`` or
            ``forward+backward``), ``device`` (its name), ``median_ms``, ``iqr_ms``,
            ``gflop_per_s``, ``workspace_bytes`` (analytic) and ``peak_bytes`` (measured);
            rows from :func:`helpers.experiments.sweep.measure` with ``layer`` added, or from
            ``results/conv_table1_*``. Rows without a median are left out; missing values may
            be None or "".
        title: figure title; the devices that measured the rows are named below it.

    Returns:
        a plotly Figure of three panels: median ms (log, IQR as error bars), GFLOP/s of the
        layer's FLOPs, and measured peak memory (MiB) with the analytic workspace as black
        diamonds. Colours by strategy, hatching for forward + backward; with rows from more
        than one device, the device's kind is in the legend and CPU bars are paler.

    Raises:
        ValueError: no row has a measurement.

    Source: Li et al., ICPP 2016, Figures 3 and 5 (runtime and memory of each library).
    """
    from plotly.subplots import make_subplots

    ok = [r for r in rows if value(r.get("median_ms")) is not None]
    if not ok:
        raise ValueError("no measured rows to draw (every row's median_ms is empty)")
    layers = list(dict.fromkeys(r["layer"] for r in ok))
    devices = list(dict.fromkeys(str(r["device"]) for r in ok))
    fig = make_subplots(rows=1, cols=3, horizontal_spacing=0.08, subplot_titles=[
        "median time per call (ms, log)", "throughput (GFLOP/s)",
        "peak memory (MiB; diamonds: analytic workspace)"])
    keys = list(dict.fromkeys((r["strategy"], r["pass"], str(r["device"])) for r in ok))
    for strategy, pss, device in keys:
        g = {r["layer"]: r for r in ok
             if (r["strategy"], r["pass"], str(r["device"])) == (strategy, pss, device)}
        kind = "cpu" if device.startswith("CPU") else "gpu"
        name = f"{strategy}, {pss}" + (f" ({kind})" if len(devices) > 1 else "")
        marker = dict(color=color_for(strategy), pattern_shape="" if pss == "forward" else "/",
                      opacity=0.55 if len(devices) > 1 and kind == "cpu" else 1.0)
        common = dict(x=layers, name=name, legendgroup=name, marker=marker)

        def col(key):
            return [value(g[L].get(key)) if L in g else None for L in layers]

        fig.add_trace(go.Bar(
            y=col("median_ms"), error_y=dict(type="data", array=[v or 0 for v in col("iqr_ms")],
                                             thickness=1),
            hovertemplate="%{x}: %{y:.3g} ms<extra>" + name + "</extra>", **common), row=1, col=1)
        fig.add_trace(go.Bar(
            y=col("gflop_per_s"), showlegend=False,
            hovertemplate="%{x}: %{y:.3g} GFLOP/s<extra>" + name + "</extra>", **common),
            row=1, col=2)
        peak = col("peak_bytes")
        if any(v is not None for v in peak):
            fig.add_trace(go.Bar(
                y=[v / 2**20 if v is not None else None for v in peak], showlegend=False,
                hovertemplate="%{x}: measured peak %{y:.3g} MiB<extra>" + name + "</extra>",
                **common), row=1, col=3)
    ws_rows = {}
    for r in ok:  # the analytic workspace of the unrolling strategies, forward + backward
        ws = value(r.get("workspace_bytes"))
        if ws is not None and r["pass"] == "forward+backward":
            ws_rows.setdefault(r["strategy"], {})[r["layer"]] = ws
    for strategy, g in ws_rows.items():
        fig.add_trace(go.Scatter(
            x=layers, y=[g[L] / 2**20 if L in g else None for L in layers], mode="markers",
            name=f"{strategy}: analytic workspace (cols + dcols)",
            marker=dict(symbol="diamond", size=10, color="#000000"),
            hovertemplate="%{x}: analytic %{y:.3g} MiB<extra>" + strategy + "</extra>"),
            row=1, col=3)
    fig.update_layout(title=f"{title}<br><sup>measured on {', '.join(devices)}</sup>",
                      barmode="group", template="plotly_white", height=520,
                      legend=dict(orientation="h", y=-0.22), margin=dict(l=60, r=20, t=90, b=110))
    fig.update_yaxes(type="log", title_text="ms", row=1, col=1)
    fig.update_yaxes(title_text="GFLOP/s", row=1, col=2)
    fig.update_yaxes(title_text="MiB", row=1, col=3)
    for c in (1, 2, 3):
        fig.update_xaxes(title_text="layer", row=1, col=c)
    return fig


def unroll_phase_figure(bars: Sequence[tuple[str, Sequence[dict]]], device: str,
                        study: Sequence[tuple[str, float]] = (),
                        title: str = "Where unrolling's time goes (the study's Figure 4)"
                        ) -> go.Figure:
    """Share of each step of a call, one horizontal stacked bar per pass, beside the study's.

    Args:
        bars: (label, rows of :func:`helpers.experiments.phases.phase_times`) per bar; rows have
            ``phase``, ``ms`` and ``share``.
        device: the device that measured them (shown in the title).
        study: (label, GEMM share in [0, 1]) per library *as reported by the study*; drawn
            hatched, as GEMM and "rest" (the study: mostly im2col and col2im).
        title: figure title.

    Returns:
        a plotly Figure: x = percent of the call's median time; hover gives milliseconds;
        colours from :data:`UNROLL_PHASE_COLORS`.

    Raises:
        ValueError: no bars and no study shares.

    Source: Li et al., ICPP 2016, Figure 4 (GEMM 87 / 83 / 80 % of Caffe / Torch-cunn /
    Theano-CorrMM at (64, 128, 64, 11, 1)).
    """
    if not bars and not study:
        raise ValueError("nothing to draw: give bars or study shares")
    labels = [label for label, _ in bars] + [label for label, _ in study]
    names: list[str] = []
    for _, rows in bars:
        for r in rows:
            if r["phase"] not in names:
                names.append(r["phase"])
    names = [n for n in names if n != "other"] + (["other"] if "other" in names else [])
    pad = [None] * len(study)
    fig = go.Figure()
    for name in names:
        share = [next((100 * r["share"] for r in rows if r["phase"] == name), 0.0)
                 for _, rows in bars]
        ms = [next((r["ms"] for r in rows if r["phase"] == name), 0.0) for _, rows in bars]
        fig.add_trace(go.Bar(
            y=labels, x=share + pad, orientation="h", name=name, customdata=ms + pad,
            text=[f"{v:.0f} %" if v >= 8 else "" for v in share] + [""] * len(study),
            textposition="inside",
            marker=dict(color=UNROLL_PHASE_COLORS.get(name, "#BBBBBB"),
                        pattern_shape="." if name == "GEMM (dcols)" else "",
                        line=dict(color="#FFFFFF", width=0.5)),
            hovertemplate=f"{name}: %{{x:.0f}} %% (%{{customdata:.3g}} ms)<extra></extra>"))
    if study:
        study_gemm = [100 * s for _, s in study]
        lead = [None] * len(bars)
        fig.add_trace(go.Bar(
            y=labels, x=lead + study_gemm, orientation="h",
            name="GEMM (reported by the study, K40c)",
            text=[""] * len(bars) + [f"{v:.0f} %" for v in study_gemm], textposition="inside",
            marker=dict(color=UNROLL_PHASE_COLORS["GEMM"], pattern_shape="/",
                        line=dict(color="#FFFFFF", width=0.5)),
            hovertemplate="GEMM: %{x:.0f} % (reported by the study)<extra></extra>"))
        fig.add_trace(go.Bar(
            y=labels, x=lead + [100 - v for v in study_gemm], orientation="h",
            name="rest (reported by the study: mostly im2col and col2im)",
            marker=dict(color="#BBBBBB", pattern_shape="/", line=dict(color="#FFFFFF", width=0.5)),
            hovertemplate="not GEMM: %{x:.0f} % (reported by the study)<extra></extra>"))
    fig = layout(fig, f"{title}<br><sup>our bars measured on {device}; hatched bars are the "
                       f"study's (K40c)</sup>",
                  "share of the call's median time (%)", "", log_x=False, log_y=False)
    fig.update_layout(barmode="stack", height=170 + 50 * len(labels),
                      legend=dict(orientation="h", y=-0.25), margin=dict(l=260, r=20, t=80, b=60))
    fig.update_yaxes(autorange="reversed")
    fig.update_xaxes(range=[0, 100])
    return fig


# -------------------------------------------- the tiled GEMM's tiles moving through shared memory


def gemm_tile_schedule(m: int, n: int, k: int, block: tuple[int, int]) -> list[dict]:
    """The tiles of A and B one block of :func:`helpers.conv.gemm.gemm_tiled_kernel` loads at
    each step of its loop over the inner dimension.

    Block ``(bx, by)`` (CUDA's x along the columns of C) computes the ``TILE x TILE`` tile of
    C from row ``by * TILE`` and column ``bx * TILE``. At step ``t`` (0 .. ceil(K / TILE) - 1)
    thread ``(tx, ty)`` copies ``A[by*TILE + ty, t*TILE + tx]`` and ``B[t*TILE + ty,
    bx*TILE + tx]`` into shared memory, or 0.0 where that lies outside A or B (a partial tile).

    Args:
        m, n, k: C is (M, N), A (M, K), B (K, N); each >= 1.
        block: (bx, by) inside the grid of :func:`helpers.conv.gemm.launch_config`.

    Returns:
        One dict per step: ``t``, ``a_rows`` and ``a_cols`` (the tile's index ranges in A, as
        ``range`` objects, possibly past A's edge), ``b_rows``, ``b_cols`` (likewise in B),
        ``a_valid`` and ``b_valid`` ((rows, cols) of the tile that hold real elements; the
        rest are zeros), and ``tile`` (TILE).

    Raises:
        ValueError: a size < 1 or a block outside the grid.

    Source: the textbook shared-memory matrix multiply (CUDA C Programming Guide); the study's
    Section V-A (GEMM is most of the unrolling libraries' time).
    """

    for name, v in (("m", m), ("n", n), ("k", k)):
        if int(v) < 1:
            raise ValueError(f"{name} must be >= 1, got {v}")
    tile = gemm.TILE
    (gx, gy), _ = gemm.launch_config(int(m), int(n))
    bx, by = (int(v) for v in block)
    if not (0 <= bx < gx and 0 <= by < gy):
        raise ValueError(f"block must be inside the grid ({gx}, {gy}) (x along the columns of "
                         f"C, y along its rows), got {block}")
    steps = []
    for t in range(-(-int(k) // tile)):
        a_rows = range(by * tile, (by + 1) * tile)
        a_cols = range(t * tile, (t + 1) * tile)
        b_rows, b_cols = a_cols, range(bx * tile, (bx + 1) * tile)
        steps.append({
            "t": t, "tile": tile, "a_rows": a_rows, "a_cols": a_cols, "b_rows": b_rows,
            "b_cols": b_cols,
            "a_valid": (max(0, min(m - a_rows.start, tile)), max(0, min(k - a_cols.start, tile))),
            "b_valid": (max(0, min(k - b_rows.start, tile)), max(0, min(n - b_cols.start, tile)))})
    return steps


def gemm_tiles_figure(m: int, n: int, k: int, block: tuple[int, int], label: str = ""
                      ) -> go.Figure:
    """The tiles of A and B one block of the tiled GEMM stages in shared memory, step by step.

    Three panels, A (M x K), B (K x N) and C (M x N), one cell per element, with a slider over
    the steps of the block's loop along K: at each step the A tile and the B tile it copies
    (dark; their part beyond the matrix, loaded as zeros, outlined dashed), the tiles of the
    earlier steps (pale), and the block's C tile (outlined), which accumulates
    ``a_tile @ b_tile`` every step. Counted from :func:`gemm_tile_schedule`, not measured.

    Args:
        m, n, k, block: as :func:`gemm_tile_schedule`.
        label: what the matrices are (e.g. "the im2col GEMM of ..."), shown in the title.

    Raises:
        ValueError: as :func:`gemm_tile_schedule`.
    """
    from plotly.subplots import make_subplots

    steps = gemm_tile_schedule(m, n, k, block)
    tile = steps[0]["tile"]
    bx, by = block
    color = color_for("im2col-tiled")
    ext_k, ext_n = max(k, len(steps) * tile), max(n, (bx + 1) * tile)  # tiles may overhang
    fig = make_subplots(rows=1, cols=3, horizontal_spacing=0.06,
                        column_widths=[ext_k, ext_n, ext_n],
                        subplot_titles=[f"A ({m} x {k})", f"B ({k} x {n})",
                                        f"C ({m} x {n})"])

    def state(shape, done, now, rows_of, cols_of):
        z = np.zeros(shape)
        for s in done:
            rr, cc = rows_of(s), cols_of(s)
            z[rr.start:min(rr.stop, shape[0]), cc.start:min(cc.stop, shape[1])] = 0.5
        rr, cc = rows_of(now), cols_of(now)
        z[rr.start:min(rr.stop, shape[0]), cc.start:min(cc.stop, shape[1])] = 1.0
        return z

    scale = [[0, "#f2f2f2"], [0.49, "#f2f2f2"], [0.5, "#bfe3d6"], [0.99, "#bfe3d6"],
             [1.0, color]]

    def traces(t):
        now, done = steps[t], steps[:t]
        za = state((m, k), done, now, lambda s: s["a_rows"], lambda s: s["a_cols"])
        zb = state((k, n), done, now, lambda s: s["b_rows"], lambda s: s["b_cols"])
        zc = np.zeros((m, n))
        rows_c = range(by * tile, min((by + 1) * tile, m))
        cols_c = range(bx * tile, min((bx + 1) * tile, n))
        zc[rows_c.start:rows_c.stop, cols_c.start:cols_c.stop] = 0.5 + 0.5 * (t + 1) / len(steps)
        return za, zb, zc

    za, zb, zc = traces(0)
    for col, z, name in ((1, za, "A"), (2, zb, "B"), (3, zc, "C")):
        fig.add_trace(go.Heatmap(z=z, zmin=0, zmax=1, colorscale=scale, showscale=False,
                                 xgap=1, ygap=1,
                                 hovertemplate=name + "[%{y}, %{x}]<extra></extra>"),
                      row=1, col=col)
        rows_, cols_ = z.shape
        fig.update_xaxes(range=[-0.5, max(cols_, (bx + 1) * tile if col > 1 else
                                          len(steps) * tile) - 0.5],
                         showgrid=False, zeroline=False, constrain="domain", row=1, col=col)
        fig.update_yaxes(range=[max(rows_, (by + 1) * tile if col != 2 else
                                    len(steps) * tile) - 0.5, -0.5],
                         showgrid=False, zeroline=False, constrain="domain", row=1, col=col)
        anchor = fig.get_subplot(1, col).yaxis.plotly_name.replace("axis", "")
        fig.update_xaxes(scaleanchor=anchor, row=1, col=col)

    def shapes(t):
        s = steps[t]
        out = []
        for col, rr, cc, (vr, vc) in ((1, s["a_rows"], s["a_cols"], s["a_valid"]),
                                      (2, s["b_rows"], s["b_cols"], s["b_valid"])):
            xref, yref = ("x", "y") if col == 1 else (f"x{col}", f"y{col}")
            out.append(dict(type="rect", xref=xref, yref=yref, x0=cc.start - 0.5,
                            x1=cc.stop - 0.5, y0=rr.start - 0.5, y1=rr.stop - 0.5,
                            line=dict(color=color, width=2,
                                      dash="dash" if (vr, vc) != (tile, tile) else "solid")))
        out.append(dict(type="rect", xref="x3", yref="y3", x0=bx * tile - 0.5,
                        x1=(bx + 1) * tile - 0.5, y0=by * tile - 0.5, y1=(by + 1) * tile - 0.5,
                        line=dict(color="#000000", width=2)))
        return out

    def caption(t):
        s = steps[t]
        zeros_a = tile * tile - s["a_valid"][0] * s["a_valid"][1]
        zeros_b = tile * tile - s["b_valid"][0] * s["b_valid"][1]
        return (f"step t = {t} of {len(steps)}: the block's {tile} x {tile} threads copy "
                f"A[{s['a_rows'].start}:{s['a_rows'].stop}, {s['a_cols'].start}:"
                f"{s['a_cols'].stop}] and B[{s['b_rows'].start}:{s['b_rows'].stop}, "
                f"{s['b_cols'].start}:{s['b_cols'].stop}] (one element each), "
                f"{zeros_a} + {zeros_b} of them zeros; barrier; {tile} multiply-adds each; "
                "barrier")

    head = (f"Tiled GEMM, block (bx={bx}, by={by}) of grid "
            f"{(-(-n // tile), -(-m // tile))}: C[{by * tile}:{(by + 1) * tile}, "
            f"{bx * tile}:{(bx + 1) * tile}] in {len(steps)} steps along K = {k}"
            + (f" ({label})" if label else ""))
    slider_steps = []
    for t in range(len(steps)):
        za, zb, zc = traces(t)
        slider_steps.append(dict(
            method="update", label=str(t),
            args=[{"z": [za, zb, zc]},
                  {"shapes": shapes(t),
                   "title.text": f"{head}<br><sup>{caption(t)}</sup>"}]))
    fig.update_layout(
        shapes=shapes(0), title=f"{head}<br><sup>{caption(0)}</sup>",
        sliders=[dict(active=0, steps=slider_steps, currentvalue=dict(prefix="step t = "),
                      pad=dict(t=40))],
        template="plotly_white", height=480, width=1000, margin=dict(l=40, r=20, t=100, b=40))
    return fig
