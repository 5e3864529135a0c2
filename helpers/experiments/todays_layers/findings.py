"""Notebook 12's readings of its measurements, printed from the rows, never typed in.

:func:`ceiling_lines`: the roof's two ceilings and its ridge, or why one is missing;
:func:`roof_check`: whether a run's layers and roof agree (a busy machine measures a low
ceiling); :func:`roof_lines`, :func:`depthwise_reading`: the layers on the roof;
:func:`ridge_sides`: layers left and right of a ridge; :func:`rate_rows`, :func:`rate_note`:
rates under their two conventions; :func:`library_lines`: what the library ran beside our
best; :func:`findings`: the study's claims beside what the rows show. Rows are those of
:mod:`helpers.experiments.todays_layers` (``time_layers``, ``shares``, ``roof``) and
:func:`helpers.experiments.todays_layers.compare.compare`; times in ms, rates in GFLOP/s.
"""

from __future__ import annotations

import re
import statistics
from collections.abc import Iterable, Sequence

from helpers.conv.config import ConvConfig
from helpers.device import host
from helpers.experiments.todays_layers.compare import LAYER_TYPES, intensity

__all__ = ["ROOF_TOLERANCE", "INCONSISTENT", "RATE_COLUMNS", "ceiling_lines", "roof_check",
           "roof_lines", "depthwise_reading", "ridge_sides", "rate_rows", "rate_note",
           "reorder_ms", "library_lines", "findings"]

#: How far (a fraction) a layer may measure above the compute ceiling before the run is
#: called inconsistent: timing noise, never more.
ROOF_TOLERANCE = 0.10
#: The reading of a run whose layers ran faster than its own compute ceiling.
INCONSISTENT = "the measurements are inconsistent: the machine was busy; rerun"
#: The columns of notebook 12's strategy table, with both rates (:func:`rate_rows`).
RATE_COLUMNS = ("network", "layer_type", "strategy", "median_ms", "direct_equiv_gflop_s",
                "own_gflop_s", "max_rel_error", "status")


def _ok(timed: Iterable[dict]) -> list[dict]:
    return [r for r in timed if r.get("status") == "ok" and r.get("gflop_s")]


def _roof_at(roof: dict, at: float) -> float:
    """The roof in FLOP/s at ``at`` FLOP/B: min(compute ceiling, intensity x bandwidth)."""
    return min(roof["peak_flops"], at * roof["bandwidth"])


def ceiling_lines(ceiling_rows: Iterable[dict], roof: dict | None) -> list[str]:
    """The measured ceilings of one device and the ridge between them (FLOP per byte), then the
    nominal peak where one is known; for each ceiling not measured (a point skipped over its
    budget, a failure), its name and status instead, and no ridge.

    Args:
        ceiling_rows: ``ceilings()`` rows of the device. roof: ``roof()`` of those rows (None
            when neither ceiling was measured).
    """
    rows = [r for r in ceiling_rows if r.get("experiment") == "ceiling"]
    device = (roof or {}).get("device") or next((r["device"] for r in rows), "this device")
    parts, missing = [], []
    for name, key, unit, digits in (("bandwidth", "bandwidth", "GB/s", 1),
                                    ("compute", "peak_flops", "GFLOP/s", 0)):
        got = (roof or {}).get(key)
        if got:
            source = roof["bandwidth_source" if name == "bandwidth" else "peak_source"]
            parts.append(f"{name} {got / 1e9:.{digits}f} {unit} ({source})")
        else:
            status = next((r.get("status") for r in rows if r.get("name") == name), None)
            missing.append(f"the {name} ceiling was not measured: {status or 'no row'}"
                           + (" (rerun this cell when the machine is less busy)"
                              if str(status).startswith("skipped") else ""))
    out = []
    if parts:
        ridge = (f"; ridge {roof['peak_flops'] / roof['bandwidth']:.1f} FLOP/B" if not missing
                 else "")
        out.append(f"{device}: " + "; ".join(parts) + ridge)
    out += [f"{device}: {m}" for m in missing]
    if roof and roof.get("nominal_flops"):
        out.append(f"nominal peak {roof['nominal_flops'] / 1e9:.0f} GFLOP/s "
                   f"({roof['nominal_source']})")
    return out


def roof_check(timed: Iterable[dict], roof: dict | None,
               tolerance: float = ROOF_TOLERANCE) -> str | None:
    """None when a run is consistent; else :data:`INCONSISTENT` and the evidence.

    A run is consistent when it has a measured roof and no layer ran more than ``tolerance``
    above its compute ceiling (a layer cannot out-compute the GEMM that measured it; a ceiling
    measured while other work held the core is too low). A layer above the bandwidth's slope is
    not inconsistent: its tensors can come from the caches, the slope from memory.

    Args:
        timed: rows of ``time_layers`` (``gflop_s``, ``status``). roof: ``roof()`` of the same
            device, FLOP/s and bytes/s.
    """
    if not roof or not roof.get("peak_flops") or not roof.get("bandwidth"):
        return f"{INCONSISTENT} (no measured roof: a ceiling is missing)"
    above = [r["gflop_s"] * 1e9 / roof["peak_flops"] for r in _ok(timed)
             if r["gflop_s"] * 1e9 > (1 + tolerance) * roof["peak_flops"]]
    if above:
        return (f"{INCONSISTENT} (compute ceiling {roof['peak_flops'] / 1e9:.0f} GFLOP/s, below "
                f"{len(above)} of the layers it bounds, up to {max(above):.0%} of it)")
    return None


def roof_lines(timed: Sequence[dict], roof: dict | None) -> list[str]:
    """Per layer type: its intensities, how many lie left of the ridge, the median share of
    the roof above them reached, how many ran above the bandwidth's slope; or one line,
    :func:`roof_check`'s, when the run is inconsistent."""
    bad = roof_check(timed, roof)
    if bad:
        return [bad]
    ridge = roof["peak_flops"] / roof["bandwidth"]
    out = []
    for kind in LAYER_TYPES:
        of = [r for r in _ok(timed) if r["layer_type"] == kind]
        if not of:
            continue
        reach = [r["gflop_s"] * 1e9 / _roof_at(roof, r["intensity"]) for r in of]
        over = sum(x > 1 + ROOF_TOLERANCE for x in reach)
        out.append(f"{kind:<10} {len(of):3d} layers: {min(r['intensity'] for r in of):5.2f} to "
                   f"{max(r['intensity'] for r in of):6.1f} FLOP/B; "
                   f"{sum(r['intensity'] < ridge for r in of)} left of the ridge "
                   f"({ridge:.1f} FLOP/B); median {statistics.median(reach):.0%} of the roof "
                   f"above them" + (f"; {over} above the memory roof (tensors from the caches)"
                                    if over else ""))
    return out


def _total_ms(row: dict) -> float:
    return sum(float(ms) for ms in re.findall(r"([\d.]+) ms", row.get("kernels") or ""))


def depthwise_reading(timed: Sequence[dict], roof: dict | None, rows: Sequence[dict],
                      network: str = "MobileNet-V2") -> str:
    """Why ``network``'s depthwise layers are slow, from the data: their highest intensity and
    the roof it allows next to the compute ceiling; the median share of their roof reached;
    the library's layout reorders on the representative depthwise layer (``rows`` of
    ``compare``); the most bytes one layer moves, timed over and over (cache-resident).
    :func:`roof_check`'s sentence instead when the run is inconsistent."""
    bad = roof_check(timed, roof)
    if bad:
        return bad
    dw = [r for r in _ok(timed) if r["layer_type"] == "depthwise" and r["network"] == network]
    if not dw:
        return f"no depthwise layer of {network} was timed"
    top = max(r["intensity"] for r in dw)
    ceiling = _roof_at(roof, top)
    reach = statistics.median(r["gflop_s"] * 1e9 / _roof_at(roof, r["intensity"]) for r in dw)
    text = (f"{network}'s depthwise layers do at most {top:.2f} FLOP/B, so even at the full "
            f"measured bandwidth ({roof['bandwidth'] / 1e9:.1f} GB/s) their roof is at most "
            f"{ceiling / 1e9:.0f} GFLOP/s, {ceiling / roof['peak_flops']:.0%} of the compute "
            f"ceiling; measured, they reached a median {reach:.0%} of that roof")
    lib = [r for r in rows if r.get("strategy") == "reference" and r.get("network") == network
           and r.get("layer_type") == "depthwise" and reorder_ms(r)]
    if lib:
        text += (f"; in the library's verbose call on {lib[0]['name']}, layout reorders took "
                 f"{reorder_ms(lib[0]):.3g} of {_total_ms(lib[0]):.3g} ms")
    most, cache = max(r["bytes"] for r in dw), host.largest_cache_bytes()
    text += (f"; each layer was timed over and over on the same tensors (x, w and y: at most "
             f"{most / 1e6:.1f} MB" + (f", against a largest cache of {cache / 2**20:.0f} MiB"
                                       if cache else "")
             + "), so they came from the caches" + ("" if not cache or most <= cache else
                                                     " as far as they fit"))
    return text


def ridge_sides(layers: Iterable[ConvConfig], ridge: float) -> str:
    """Which ``layers`` (named ConvConfigs) lie right of ``ridge`` FLOP/B (compute-bound) and
    which left (memory-bound), by :func:`helpers.experiments.todays_layers.compare.intensity`."""
    layers = list(layers)
    right = [c.name for c in layers if intensity(c) > ridge]
    left = [c.name for c in layers if intensity(c) <= ridge]
    return (f"right of the ridge ({ridge:.1f} FLOP/B, compute-bound): "
            f"{', '.join(right) or 'none'}; left of it (memory-bound): {', '.join(left) or 'none'}")


def rate_rows(rows: Iterable[dict]) -> list[dict]:
    """Copies of ``compare`` rows with ``direct_equiv_gflop_s`` (the layer's direct FLOPs,
    2 N K P Q (C/G) R S, over the median: comparable across rows) and ``own_gflop_s`` (the
    FLOPs our strategy counts for itself over the median, the ``gflop_s`` of its row; None for
    the library, whose own count is unknown). None where a row was not timed."""
    out = []
    for r in rows:
        ms = r.get("median_ms")
        ms = float(ms) if ms not in (None, "") else None
        direct = float(r["flops"]) / (ms / 1e3) / 1e9 if ms else None
        own = r.get("gflop_s") if ms and r.get("strategy") != "reference" else None
        out.append(dict(r, direct_equiv_gflop_s=direct,
                        own_gflop_s=float(own) if own not in (None, "") else None))
    return out


def rate_note(rows: Iterable[dict]) -> str:
    """What the two rate columns of :func:`rate_rows` count, with the timed row whose own FLOP
    count differs most from the direct one as the example."""
    rated = [r for r in rate_rows(rows) if r["own_gflop_s"] and r["direct_equiv_gflop_s"]]
    text = ("direct_equiv_gflop_s: the layer's direct FLOPs, 2NKPQ(C/G)RS, over each row's time, "
            "library included: comparable across rows, like 1 / time. own_gflop_s: the FLOPs each "
            "of our strategies counts for itself over its time (notebook 10's convention); the "
            "library's own count is not known")
    if rated:
        r = max(rated, key=lambda r: abs(r["own_gflop_s"] / r["direct_equiv_gflop_s"] - 1))
        own = r["own_gflop_s"] * 1e9 * float(r["median_ms"]) / 1e3
        text += (f". The two differ most for {r['strategy']} on the {r['layer_type']} layer "
                 f"({r['network']}): it counts {own / 1e6:.1f} MFLOP where direct convolution "
                 f"counts {float(r['flops']) / 1e6:.1f}")
    return text


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
             roof: dict | None) -> list[tuple[str, str]]:
    """(the study's claim, what was measured here) pairs for notebook 12.

    Args:
        shares: per (network, layer type) FLOP and time shares. timed: every layer timed alone.
        rows: the representative layers by every strategy. roof: ``roof()`` of the device that
            timed them; where :func:`roof_check` finds the run inconsistent, the claims that
            read the roof say so instead.

    Raises:
        KeyError: the rows lack MobileNet-V2's depthwise or ResNeXt's 1 x 1 layers.
    """
    bad = roof_check(timed, roof)
    by = {(s["network"], s["layer_type"]): s for s in shares}
    dwm, pwr = by[("MobileNet-V2", "depthwise")], by[("ResNeXt-50 (32x4d)", "1x1")]
    dw_rows = [r for r in timed
               if r["layer_type"] == "depthwise" and r["network"] == "MobileNet-V2"]
    top = max(r["intensity"] for r in dw_rows)
    ridge = roof["peak_flops"] / roof["bandwidth"] if not bad else None
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
         bad or (f"where the arithmetic is dense it still does: ResNeXt's 1 x 1 layers, "
                 f"{pwr['flop_share']:.0%} of its FLOPs, took {pwr['time_share']:.0%} of its "
                 f"time; MobileNet-V2's depthwise layers, {dwm['flop_share']:.1%} of its FLOPs, "
                 f"took {dwm['time_share']:.0%}, at {top:.2f} FLOP/B at most, "
                 + ("left of" if top < ridge else "not all left of")
                 + f" this device's ridge ({ridge:.1f} FLOP/B)")),
        ("GEMM is the essence of the convolutional layers (V-A, Figure 4)",
         "the library ran a GEMM for " + (", ".join(gemm) or "none of the five layers")
         + "; other kernels for " + (", ".join(other) or "none")),
        ("no single implementation is the fastest in all scenarios (IV-B, VI)",
         "fastest here: " + ", ".join(winners) + f" ({len(fastest)} layers); the fastest of "
         "ours: " + "; ".join(f"{k} {r['strategy']}" for k, r in ours.items())),
        ("no single metric can determine the performance (VI)",
         f"FLOPs alone misjudge MobileNet-V2's depthwise layers' share of the time by "
         f"{dwm['time_share'] / dwm['flop_share']:.1f}x; "
         + (bad or "their intensity and the roof account for part of it: "
            + depthwise_reading(timed, roof, rows))),
    ]
