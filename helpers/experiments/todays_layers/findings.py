"""Notebook 12's readings of its measurements, printed from the rows, never typed in.

:func:`library_lines`: per representative layer, what the library ran and how our best
strategy compared. :func:`findings`: the study's claims beside what the rows show. Rows are
those of :mod:`helpers.experiments.todays_layers` (``time_layers``, ``shares``) and
:func:`helpers.experiments.todays_layers.compare.compare`; times in ms.
"""

from __future__ import annotations

import re

__all__ = ["reorder_ms", "library_lines", "findings"]


def reorder_ms(row: dict) -> float:
    """Milliseconds of oneDNN's layout reorders in a library row's verbose kernel list (0 when
    it lists none, as cuDNN's rows do)."""
    return sum(float(ms) for ms in re.findall(r"reorder \S+ ([\d.]+) ms", row.get("kernels") or ""))


def library_lines(rows: list[dict]) -> list[str]:
    """One line per timed library row: its kernel and algorithm, its time, its reorders, and
    our fastest strategy's time as a multiple of it."""
    timed = [r for r in rows if r["median_ms"] is not None]
    out = []
    for r in timed:
        if r["strategy"] != "reference":
            continue
        ours = [o for o in timed if o["name"] == r["name"] and o["strategy"] != "reference"]
        line = (f"{r['layer_type']:<9} {r['network']}: {r['library']} ran {r['kernel']} "
                f"({r['algorithm']}), {r['median_ms']:.3g} ms")
        if reorder_ms(r):
            line += f"; its layout reorders took {reorder_ms(r):.3g} ms of the verbose call"
        if ours:
            best = min(ours, key=lambda o: o["median_ms"])
            line += (f"; our best, {best['strategy']}, {best['median_ms'] / r['median_ms']:.1f}x "
                     f"its time")
        out.append(line)
    return out


def findings(shares: list[dict], timed: list[dict], rows: list[dict],
             ridge: float) -> list[tuple[str, str]]:
    """(the study's claim, what was measured here) pairs for notebook 12.

    Args:
        shares: per (network, layer type) FLOP and time shares. timed: every layer timed alone.
        rows: the representative layers by every strategy. ridge: the roof's ridge, FLOP/B.

    Raises:
        KeyError: the rows lack MobileNet-V2's depthwise or ResNeXt's 1 x 1 layers.
    """
    by = {(s["network"], s["layer_type"]): s for s in shares}
    dwm, pwr = by[("MobileNet-V2", "depthwise")], by[("ResNeXt-50 (32x4d)", "1x1")]
    dw_rows = [r for r in timed
               if r["layer_type"] == "depthwise" and r["network"] == "MobileNet-V2"]
    lib = [r for r in rows if r["strategy"] == "reference" and r["algorithm"]]
    gemm = [f"{r['layer_type']} ({r['kernel']})" for r in lib if r["algorithm"] == "gemm"]
    other = [f"{r['layer_type']} ({r['kernel']}, {r['algorithm']})" for r in lib
             if r["algorithm"] != "gemm"]
    fastest, ours = {}, {}
    for r in (r for r in rows if r["median_ms"] is not None):
        key = f"{r['layer_type']} ({r['network']})"
        for best, mine in ((fastest, True), (ours, r["strategy"] != "reference")):
            if mine and (key not in best or r["median_ms"] < best[key]["median_ms"]):
                best[key] = r
    winners = sorted({"the library" if r["strategy"] == "reference" else r["strategy"]
                      for r in fastest.values()})
    return [
        ("convolutions are computation-intensive and arithmetic sets their speed (IV-A, IV-B)",
         f"where the arithmetic is dense it still does: ResNeXt's 1 x 1 layers, "
         f"{pwr['flop_share']:.0%} of its FLOPs, took {pwr['time_share']:.0%} of its time; "
         f"MobileNet-V2's depthwise layers, {dwm['flop_share']:.1%} of its FLOPs, took "
         f"{dwm['time_share']:.0%}, at {max(r['intensity'] for r in dw_rows):.2f} FLOP/B at "
         f"most, left of this CPU's ridge ({ridge:.1f} FLOP/B)"),
        ("GEMM is the essence of the convolutional layers (V-A, Figure 4)",
         "the library ran a GEMM for " + (", ".join(gemm) or "none of the five layers")
         + "; other kernels for " + (", ".join(other) or "none")),
        ("no single implementation is the fastest in all scenarios (IV-B, VI)",
         "fastest here: " + ", ".join(winners) + f" ({len(fastest)} layers); the fastest of "
         "ours: " + "; ".join(f"{k} {r['strategy']}" for k, r in ours.items())),
        ("no single metric can determine the performance (VI)",
         f"FLOPs alone misjudge MobileNet-V2's depthwise layers' share of the time by "
         f"{dwm['time_share'] / dwm['flop_share']:.1f}x; their intensity and the roof account "
         f"for it"),
    ]
