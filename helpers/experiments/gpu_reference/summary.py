"""The summary of a GPU reference run: each part's outcome and the headline ratios.

The headline, read from the files the run wrote: the climb's targets (the best GEMM rung over
cuBLAS in FP32 and TF32 at 4096 x 4096; im2col's bytes written per second at the Figure 4
layer; the worst Table I layer's forward + backward time of ``direct-tiled`` and
``im2col-gemm`` over cuDNN's, FP32 and TF32), our tiled GEMM against cuBLAS from notebook 01's
sweep when recorded, and per Table I layer each strategy's time as a multiple of cuDNN's.
"""

from __future__ import annotations

import math
import pathlib

from helpers import results

__all__ = [
    "CLIMB_TARGETS",
    "GEMM_SIZE",
    "HEADLINE_STRATEGIES",
    "count_rows",
    "format_summary",
    "headline",
    "status_of",
]

#: The GEMM size of the headline (n of n x n, float32).
GEMM_SIZE = 4096

#: Our strategies the headline compares with torch's convolution (cuDNN on a GPU).
HEADLINE_STRATEGIES = ("direct-tiled", "im2col-gemm", "fft")

_TIME_LIMIT = "skipped: time limit"

#: The climb's targets: (key, what, target, stretch, unit); ``unit`` "x" is a ratio whose
#: target is a ceiling (time over cuDNN's), "of" a ratio whose target is a floor, "GB/s" a
#: floor in GB/s.
CLIMB_TARGETS = (
    ("gemm_vs_fp32", "best GEMM rung / cuBLAS FP32, n = 4096 (GFLOP/s ratio)", 0.50, 0.70, "of"),
    ("im2col_gb_s", "im2col, Figure 4 layer: bytes written per second", 2000.0, 2500.0, "GB/s"),
    ("direct_vs_fp32", "direct-tiled f+b / cuDNN FP32, worst Table I layer, b = 128", 10.0, 4.0,
     "x"),
    ("im2col_vs_fp32", "im2col-gemm f+b / cuDNN FP32, worst Table I layer, b = 128", 2.0, 1.2,
     "x"),
)


def _load(out: pathlib.Path, csv_name: str) -> results.Dataset | None:
    try:
        return results.load(csv_name.removesuffix(".csv"), out)
    except (FileNotFoundError, ValueError):
        return None


def count_rows(files: list[str], out: pathlib.Path | None = None) -> dict:
    """``rows``, ``measured`` (status ``ok``, or no status column) and ``skipped_for_time``
    (status ``skipped: time limit ...``) over the CSV files among ``files`` (names in ``out``)."""
    counts = {"rows": 0, "measured": 0, "skipped_for_time": 0}
    if out is None:
        return counts
    for name in files:
        ds = _load(out, name) if name.endswith(".csv") else None
        for r in ds.rows if ds else []:
            status = str(r.get("status", "ok"))
            counts["rows"] += 1
            counts["measured"] += status == "ok" or status.startswith("ok:")
            counts["skipped_for_time"] += status.startswith(_TIME_LIMIT)
    return counts


def status_of(code: int, files: list[str], *, dry_run: bool, gpu_only: bool
              ) -> tuple[str, str]:
    """A finished part's status and note from its exit status and the files it wrote.

    ``ok``; ``no GPU (dry run)`` for a GPU-only part that refused (exit
    :data:`helpers.results.REFUSED`, nothing written) in a dry run; ``refused`` for any other
    refusal; ``failed`` for another exit status, or nothing written on a GPU. (A part killed
    or stopped, or one that raised, never finished: the run names those itself.)
    """
    if code == results.REFUSED and not files:
        if dry_run and gpu_only:
            return "no GPU (dry run)", "refused as it should without a GPU"
        return "refused", f"nothing to measure here (exit status {code}); see its log"
    if code != 0:
        return "failed", f"exit status {code}; see its log"
    if not files and not dry_run:
        return "failed", "exit status 0 but no file written; see its log"
    return "ok", "" if files else "nothing to save without a GPU"


def _files(rows: list[dict], part: str, prefix: str) -> list[str]:
    for r in rows:
        if r["part"] == part:
            return [f for f in str(r["files"]).split(";") if f.startswith(prefix)
                    and f.endswith(".csv")]
    return []


def _gemm(out: pathlib.Path, rows: list[dict]) -> dict | None:
    for name in _files(rows, "throughput", "01_throughput_"):
        ds = _load(out, name)
        ok = [r for r in ds.rows if r["experiment"] == "gemm" and r["dtype"] == "float32"
              and r["status"] == "ok"] if ds else []
        by = {(r["backend"], r["device_kind"], r["size"]): r["gflop_s"] for r in ok}
        for kind in ("cuda", "cpu"):
            sizes = sorted({s for b, k, s in by if k == kind and b == "numba-tiled"}
                           & {s for b, k, s in by if k == kind and b == "torch"})
            if sizes:
                n = GEMM_SIZE if GEMM_SIZE in sizes else sizes[-1]
                tiled, torch = by[("numba-tiled", kind, n)], by[("torch", kind, n)]
                naive = by.get(("numba-naive", kind, n))
                return {"size": n, "device": ds.device, "tiled_gflop_s": tiled,
                        "naive_gflop_s": naive, "torch_gflop_s": torch,
                        "tiled_vs_torch": tiled / torch}
    return None


def _table1(out: pathlib.Path, rows: list[dict]) -> list[dict]:
    names = _files(rows, "conv-b128", "conv_table1_") or _files(rows, "conv-b1", "conv_table1_")
    lines = []
    for name in names:
        ds = _load(out, name)
        passes = [r for r in ds.rows if r["pass"] == "forward+backward"] if ds else []
        for layer in dict.fromkeys(r["layer"] for r in passes):
            mine = [r for r in passes if r["layer"] == layer]
            timed = [r for r in mine if isinstance(r["median_ms"], (int, float))
                     and not math.isnan(r["median_ms"])]
            line = {"layer": layer, "b": mine[0]["b"], "device": ds.device}
            for s in HEADLINE_STRATEGIES:
                got = [r["vs_reference"] for r in timed if r["strategy"] == s]
                line[s] = got[0] if got and isinstance(got[0], (int, float)) else None
            best = min(timed, key=lambda r: r["median_ms"], default=None)
            line["fastest"] = best["strategy"] if best else None
            line["fastest_ms"] = best["median_ms"] if best else None
            lines.append(line)
    return lines


def _ok(r: dict) -> bool:
    return str(r.get("status", "")).startswith("ok") and isinstance(r.get("median_ms"),
                                                                   (int, float))


def _climb(out: pathlib.Path, rows: list[dict]) -> dict | None:
    """The climb's targets, measured: from the climb's file and Table I's at batch 128."""
    got: dict = {}
    for name in _files(rows, "climb", "climb_"):
        ds = _load(out, name)
        if not ds:
            continue
        got["device"] = ds.device
        rungs = [r for r in ds.rows if r["experiment"] == "gemm" and r["rung"] not in ("", None)
                 and _ok(r)]
        best = max(rungs, key=lambda r: r["gflop_s"], default=None)
        if best:
            got.update(gemm_rung=best["item"], gemm_vs_fp32=best["vs_fp32"],
                       gemm_vs_tf32=best["vs_tf32"], gemm_gflop_s=best["gflop_s"])
        im = {r["item"]: r for r in ds.rows if r["experiment"] == "im2col"
              and r["layer"] == "Figure 4" and _ok(r)}
        if "im2col_window_kernel" in im:
            got["im2col_gb_s"] = im["im2col_window_kernel"]["gb_s_written"]
        if "im2col_kernel" in im:
            got["im2col_first_gb_s"] = im["im2col_kernel"]["gb_s_written"]
    for name in _files(rows, "conv-b128", "conv_table1_"):
        ds = _load(out, name)
        fb = [r for r in (ds.rows if ds else []) if r["pass"] == "forward+backward" and _ok(r)]
        ref = {(r["layer"], r["strategy"]): r["median_ms"] for r in fb
               if r["strategy"] in ("reference", "reference-tf32")}
        for strategy, key in (("direct-tiled", "direct"), ("im2col-gemm", "im2col")):
            worst = None
            for r in fb:
                if r["strategy"] == strategy and (r["layer"], "reference") in ref:
                    x = r["median_ms"] / ref[(r["layer"], "reference")]
                    if worst is None or x > worst[0]:
                        tf = ref.get((r["layer"], "reference-tf32"))
                        worst = (x, r["layer"], r["median_ms"] / tf if tf else None)
            if worst:
                got.update({f"{key}_vs_fp32": worst[0], f"{key}_layer": worst[1],
                            f"{key}_vs_tf32": worst[2]})
        got.setdefault("device", ds.device if ds else None)
    return got or None


def headline(out: pathlib.Path, rows: list[dict]) -> dict:
    """The headline numbers from the files the run wrote in ``out`` (JSON-ready).

    Returns:
        ``{"climb": {device, gemm_rung, gemm_vs_fp32, gemm_vs_tf32, gemm_gflop_s,
        im2col_gb_s, im2col_first_gb_s, direct_vs_fp32, direct_vs_tf32, direct_layer,
        im2col_vs_fp32, im2col_vs_tf32, im2col_layer} (those measured) or None, "gemm":
        {size, device, tiled_gflop_s, naive_gflop_s, torch_gflop_s, tiled_vs_torch} or None,
        "table1": [{layer, b, device, direct-tiled, im2col-gemm, fft (each time / torch's,
        forward+backward), fastest, fastest_ms}]}``.
    """
    return {"climb": _climb(out, rows), "gemm": _gemm(out, rows), "table1": _table1(out, rows)}


def _target_lines(c: dict) -> list[str]:
    if not str(c.get("device") or "").startswith("GPU"):
        return [f"The climb's targets are judged on a GPU; this run measured on "
                f"{c.get('device')}, so none is judged here."]
    lines = [f"The climb, measured on {c.get('device')} (targets: the workbook's):"]
    for key, what, target, stretch, unit in CLIMB_TARGETS:
        v = c.get(key)
        if v is None:
            lines.append(f"  {what}: not measured in this run")
            continue
        if unit == "GB/s":
            was = c.get("im2col_first_gb_s")
            text = f"{v:,.0f} GB/s" + (f" (first kernel: {was:,.0f} GB/s)" if was else "")
            met = v >= target
            goal = f"target >= {target:,.0f}, stretch >= {stretch:,.0f}"
        elif unit == "of":
            tf = c.get("gemm_vs_tf32")
            text = f"{v:.3f} ({c.get('gemm_rung')}" + (f"; {tf:.3f} of TF32)" if tf else ")")
            met = v >= target
            goal = f"target >= {target:.2f}, stretch >= {stretch:.2f}"
        else:
            side = key.split("_")[0]
            tf = c.get(f"{side}_vs_tf32")
            text = f"{v:.2f}x at {c.get(f'{side}_layer')}" + (f" ({tf:.2f}x TF32)" if tf else "")
            met = v <= target
            goal = f"target <= {target:g}x, stretch <= {stretch:g}x"
        lines.append(f"  {what}: {text}  [{goal}: {'met' if met else 'not met'}]")
    return lines


def _x(v) -> str:
    return "-" if v is None else f"{v:.2f}x"


def format_summary(rows: list[dict], out: pathlib.Path) -> str:
    """The parts as a table, then the headline ratios, as text."""
    lines = [(f"{'part':<18}{'status':<18}{'seconds':>8}{'budget':>8}{'measured':>10}"
             f"{'rows':>7}  note")]
    for r in rows:
        lines.append(f"{r['part']:<18}{r['status']:<18}{r['seconds']:>8}{r['budget_s']:>8}"
                     f"{r['measured']:>10}{r['rows']:>7}  {str(r['note'])[:100]}")
    head = headline(out, rows)
    g = head["gemm"]
    lines.append("")
    if head["climb"]:
        lines += _target_lines(head["climb"])
    if g:
        lines.append(f"Our tiled GEMM vs torch (cuBLAS on a GPU), {g['size']} x {g['size']} "
                     f"float32 on {g['device']}: {g['tiled_gflop_s']:,.0f} vs "
                     f"{g['torch_gflop_s']:,.0f} GFLOP/s = {g['tiled_vs_torch']:.3f} of it")
    elif not head["climb"]:
        lines.append("Our tiled GEMM vs cuBLAS: not measured in this run")
    if head["table1"]:
        lines.append("Table I, forward+backward, time as a multiple of torch's convolution "
                     "(cuDNN on a GPU, FP32):")
        lines.append(f"  {'layer':<7}{'batch':>6}" + "".join(f"{s:>14}" for s in
                                                         HEADLINE_STRATEGIES) + "   fastest")
        for t in head["table1"]:
            lines.append(f"  {t['layer']:<7}{t['b']:>6}" + "".join(
                f"{_x(t[s]):>14}" for s in HEADLINE_STRATEGIES) + f"   {t['fastest']}")
        lines.append(f"  measured on {head['table1'][0]['device']}")
    else:
        lines.append("Table I vs cuDNN: not measured in this run")
    return "\n".join(lines)
