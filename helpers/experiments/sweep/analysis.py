"""What the study's sweeps show, read from rows of :func:`helpers.experiments.sweep.measure`
(live or recorded): median times by point, the fastest strategy at a point, how a strategy's time
grows along a sweep, and the study's findings checked one by one (:func:`findings`).

Rows are dicts with at least ``sweep``, ``x``, ``strategy``, ``device``, ``status`` and
``median_ms`` (ms, median of one forward + backward call). Source: Li et al., ICPP 2016,
Section IV-B (Figure 3) and Section V-B (Figure 5).
"""

from __future__ import annotations

from helpers.conv import STRATEGIES
from helpers.paper import STUDY_FIGURE3_KERNEL

__all__ = ["fastest_at", "fastest_text", "faster_at", "findings", "growth_text", "times_by"]


def _median_of(rows: list[dict], **match) -> dict[str, float]:
    """{strategy: median_ms} over the measured rows matching ``match`` (one point each)."""
    return {r["strategy"]: r["median_ms"] for r in rows
            if r.get("median_ms") not in (None, "")
            and all(r.get(k) == v for k, v in match.items())}


def times_by(rows: list[dict], key: str, device: str | None = None) -> dict[str, dict]:
    """Median times of measured rows by strategy and by the value under ``key``.

    Args:
        rows: rows of :func:`measure` or :func:`run_preset` (with ``key`` in each, e.g. ``"k"``
            or ``"s"``); rows without a time (``median_ms`` None or "") are left out.
        key: the swept parameter's field. device: keep only rows of this device (None: all
            rows, which must then be of one device).

    Returns:
        ``{strategy: {value: median_ms}}``, values in ascending order (ms, float).

    Raises:
        ValueError: two timed rows of one strategy at one value (rows of several sweeps or
            devices: filter them to one first).
    """
    out: dict[str, dict] = {}
    for r in rows:
        if r.get("median_ms") in (None, "") or (device is not None and r["device"] != device):
            continue
        times = out.setdefault(r["strategy"], {})
        if r[key] in times:
            raise ValueError(f"rows hold two times of {r['strategy']} at {key} = {r[key]}: "
                             "keep the rows of one sweep and one device")
        times[r[key]] = float(r["median_ms"])
    return {n: dict(sorted(t.items())) for n, t in out.items()}


def fastest_at(rows: list[dict], key: str, value, device: str | None = None
               ) -> tuple[str, dict[str, float]] | None:
    """The fastest strategy where ``key`` equals ``value``, and every strategy's time there.

    Returns:
        ``(name, {strategy: median_ms})``, or None when nothing was measured at that value.
    """
    at = {n: t[value] for n, t in times_by(rows, key, device).items() if value in t}
    return (min(at, key=at.get), at) if at else None


def faster_at(rows: list[dict], key: str, a: str, b: str, device: str | None = None) -> list:
    """The values of ``key`` at which strategy ``a`` was measured faster than ``b`` (both timed).

    Returns:
        list of values in ascending order (empty when ``a`` never won, or nothing was timed).
    """
    t = times_by(rows, key, device)
    ta, tb = t.get(a, {}), t.get(b, {})
    return [v for v in ta if v in tb and ta[v] < tb[v]]


def fastest_text(rows: list[dict], key: str, value, label: str, device: str | None = None) -> str:
    """Which strategy was fastest where ``key`` equals ``value``, and how much slower the others
    were, as text computed from the rows, e.g. ``"at kernel 3: reference, 0.52 ms (fft 3.1x
    slower, im2col-gemm 1.4x slower)"``; ``"at kernel 3: nothing measured"`` without rows."""
    found = fastest_at(rows, key, value, device)
    if found is None:
        return f"at {label} {value}: nothing measured"
    best, at = found
    others = ", ".join(f"{n} {t / at[best]:.1f}x slower" for n, t in
                       sorted(at.items(), key=lambda kv: kv[1]) if n != best)
    return f"at {label} {value}: {best}, {at[best]:.3g} ms" + (f" ({others})" if others else "")


def growth_text(rows: list[dict], key: str, label: str, device: str | None = None) -> str:
    """How each strategy's time changed from the smallest to the largest value of ``key``, as a
    sentence computed from the rows, e.g. ``"from kernel 1 to 15: fft x1.35, reference x8.61"``.

    Args:
        rows, key, device: as :func:`times_by`. label: the parameter's name in the text.

    Returns:
        str; "not measured" when no strategy has two values.
    """
    times = {n: t for n, t in times_by(rows, key, device).items() if len(t) >= 2}
    if not times:
        return "not measured"
    lo = min(min(t) for t in times.values())
    hi = max(max(t) for t in times.values())
    parts = []
    for name, t in times.items():
        (a, first), (b, last) = next(iter(t.items())), list(t.items())[-1]
        where = "" if (a, b) == (lo, hi) else f", {label} {a} to {b} only"
        parts.append(f"{name} x{last / first:.2f} ({first:.3g} to {last:.3g} ms{where})")
    return f"from {label} {lo} to {hi}: " + ", ".join(parts)


def _study_kernel(winner: str) -> str:
    """The study's Figure 3 (d) finding whose winner is ``winner``, read from
    :data:`helpers.paper.STUDY_FIGURE3_KERNEL`, as text."""
    what, (lo, hi) = next((w, v) for w, v in STUDY_FIGURE3_KERNEL.items()
                          if w.startswith(winner))
    return f"{what}, by {lo:g}x to {hi:g}x (Section IV-B, Figure 3(d))"


def findings(rows: list[dict]) -> list[dict]:
    """The study's main findings, each checked against a sweep's rows.

    Args:
        rows: rows of :func:`run_preset` (or loaded from its CSV) for one device.

    Returns:
        One dict per finding: ``finding``, ``study`` (what the study reported, with its
        section and figure; its numbers read from :mod:`helpers.paper`), ``here`` (what these
        rows show, computed from them), ``agrees`` (True, False, or None when the rows cannot
        tell). Only float32 rows count: ``reference-tf32`` (the library in TF32) is left out,
        and "the library" is ``reference``.

    Source: Li et al., ICPP 2016, Sections IV-B (Figure 3) and V-B (Figure 5).
    """
    rows = [r for r in rows if getattr(STRATEGIES.get(r["strategy"]), "precision",
                                       "float32") == "float32"]
    out = []
    kernel = [r for r in rows if r["sweep"] == "kernel" and r["status"] == "ok"]
    ks = sorted({r["k"] for r in kernel})

    def ratio(k):
        """fft's time over the library's at kernel size k, or None."""
        m = _median_of(kernel, k=k)
        return m["fft"] / m["reference"] if "fft" in m and "reference" in m else None

    large = [(k, ratio(k)) for k in ks if k > 7 and ratio(k) is not None]
    small = [(k, ratio(k)) for k in ks if k < 7 and ratio(k) is not None]
    out.append({
        "finding": "FFT beats the library for large kernels",
        "study": _study_kernel("fbfft faster"),
        "here": (", ".join(f"k={k}: fft/library {q:.2f}" for k, q in large) or "no kernel > 7"),
        "agrees": all(q < 1 for _, q in large) if large else None})
    out.append({
        "finding": "The library beats FFT for small kernels",
        "study": _study_kernel("cuDNN faster"),
        "here": (", ".join(f"k={k}: fft/library {q:.2f}" for k, q in small) or "no kernel < 7"),
        "agrees": all(q > 1 for _, q in small) if small else None})
    stride = [r for r in rows if r["sweep"] == "stride" and r["status"] == "ok"]
    s_vals = sorted({r["s"] for r in stride})
    if len(s_vals) >= 2:
        lo, hi = s_vals[0], s_vals[-1]
        f_lo, f_hi = _median_of(stride, s=lo).get("fft"), _median_of(stride, s=hi).get("fft")
        r_lo, r_hi = (_median_of(stride, s=lo).get("reference"),
                      _median_of(stride, s=hi).get("reference"))
        here = (f"from stride {lo} to {hi}, fft's time x{f_hi / f_lo:.2f}, the library's "
                f"x{r_hi / r_lo:.2f}" if f_lo and f_hi and r_lo and r_hi else "not measured")
        at_hi = _median_of(stride, s=hi)
        fastest_hi = min(at_hi, key=at_hi.get) if at_hi else None
        agrees = None if not (f_lo and f_hi and r_lo and r_hi) else (f_hi / f_lo > r_hi / r_lo)
        out.append({
            "finding": "FFT only pays at stride 1",
            "study": "fbfft and Theano-fft support stride 1 only; for strides above 1 cuDNN "
                     "was fastest (Section IV-B, Figure 3(e))",
            "here": here + f"; fastest at stride {hi}: {fastest_hi}",
            "agrees": agrees})
    by_point: dict[tuple, dict[str, float]] = {}
    for r in rows:   # only what ran: a strategy that cannot run a point has no footprint there
        if (r["sweep"] != "table1" and r["status"] == "ok"
                and r.get("workspace_bytes") not in (None, "")):
            point = by_point.setdefault((r["sweep"], r["x"]), {})
            point[r["strategy"]] = float(r["workspace_bytes"])
    if by_point:
        top = [max(m, key=m.get) for m in by_point.values()]
        n_fft = sum(t == "fft" for t in top)
        out.append({
            "finding": "FFT is the most memory-hungry",
            "study": "fbfft had the highest peak GPU memory of the seven implementations, "
                     "followed by Theano-fft (Section V-B, Figure 5)",
            "here": (f"fft has the largest analytic workspace (not a measured peak) at {n_fft} "
                     f"of {len(top)} points (im2col-gemm at {top.count('im2col-gemm')})"),
            "agrees": n_fft > len(top) / 2})
    base_rows = [r for r in rows if r["sweep"] == "kernel" and r["strategy"] == "im2col-gemm"
                 and r["status"] == "ok" and r.get("workspace_bytes") not in (None, "")]
    if base_rows:
        r = max(base_rows, key=lambda r: r["k"])
        x_bytes = 4 * r["b"] * r["c"] * r["i"] * r["i"]
        fwd_cols = float(r["workspace_bytes"]) / 2  # the backward pass holds cols and dcols
        p = (r["i"] - r["k"]) // r["s"] + 1  # output size, padding 0 as in the presets
        out.append({
            "finding": "Unrolling needs a k*k-times larger buffer",
            "study": "Caffe, Torch-cunn and Theano-CorrMM need extra memory for the unrolled "
                     "matrices; cuda-convnet2 (direct) needs none (Section V-B)",
            "here": (f"k={r['k']}: the im2col buffer is {fwd_cols / x_bytes:.1f}x the input "
                     f"(k*k * P*Q / (H*W) = {r['k'] ** 2} * {p * p} / {r['i'] ** 2})"),
            "agrees": fwd_cols / x_bytes > 1})
    return out
