"""Checkers for Lab 8: Winograd's minimal filtering, F(2, 3) by hand, then F(2x2, 3x3).

One checker per TODO of ``labs/lab8_winograd.ipynb``, each returning a
:class:`helpers.checks.Report`: :func:`check_f23_matrices` (``() -> (BT (4, 4), G (4, 3),
AT (2, 4))``, checked by the identity ``y = AT @ ((G @ g) * (BT @ d))``, not against one set
of matrices), :func:`check_winograd_1d` (``d: (n,)``, ``g: (3,)``, ``mats`` -> ``(n - 2,)``)
and :func:`check_winograd_tile_2d` (``d: (4, 4)``, ``g: (3, 3)``, ``mats`` -> ``(2, 2)``),
both probed with other valid and with wrong matrices ``mats = (BT, G, AT)``, and
:func:`check_multiply_counts` (``(m, r) -> (direct, winograd)`` multiplies of one m x m tile).
:func:`tile_transforms` gives the lab F(m, 3) up to m = 6. Cross-correlation throughout, as CNN
libraries compute it: ``y[i] = sum_r d[i + r] g[r]`` (``np.correlate(d, g, "valid")``); float64.

Source: Lavin and Gray, "Fast Algorithms for Convolutional Neural Networks", CVPR 2016. Beyond
the study (Li et al., ICPP 2016), whose strategies are direct, unrolling and FFT (Section II-B).
"""

from __future__ import annotations

import inspect

import numpy as np

from helpers.checks import Case, Report, WrongResult, check_cases, compare
from helpers.conv import winograd
from helpers.conv.check import reference

__all__ = ["F23_SHAPES", "F23_TOLERANCE", "SIGNAL_LENGTHS", "COUNT_CASES", "NOT_USING",
           "model_counts", "tile_transforms", "probe_matrices", "check_f23_matrices",
           "check_winograd_1d", "check_winograd_tile_2d", "check_multiply_counts"]

#: The shapes of (BT, G, AT) for F(2, 3): 4 products (the multiplies) from 4 inputs, 3 taps, 2
#: outputs.
F23_SHAPES = ((4, 4), (4, 3), (2, 4))
_NAMES = ("BT", "G", "AT")
#: Relative tolerance (of the largest output) of TODOs 1 to 3: float64, exact up to round-off.
F23_TOLERANCE = 1e-12
#: Signal lengths n of TODO 2: one tile, one tile exactly, odd outputs (a padded last tile), more.
SIGNAL_LENGTHS = (3, 4, 5, 8, 11, 64)
#: (m, r) of TODO 4: F(2x2, 3x3), F(4x4, 3x3), F(6x6, 3x3), a 5 x 5 filter, a 2 x 2 filter.
COUNT_CASES = ((2, 3), (4, 3), (6, 3), (2, 5), (3, 2))

#: The verdict on a TODO 2 or 3 answer whose output does not change with wrong matrices.
NOT_USING = ("your function gives the same output when the transform matrices are wrong: it is "
             "not using them — compute the output via the Winograd transforms")

_SHAPE_HINT = ("BT (4, 4): four combinations of the 4 inputs; G (4, 3): four combinations of "
               "the 3 taps; AT (2, 4): the 2 outputs from the 4 products.")
_CONVOLUTION_HINT = (
    "CNN layers compute cross-correlation, y[i] = sum_r d[i + r] g[r] (np.correlate); "
    "convolution (np.convolve) flips the filter. Check which tap of g each row of G, or each "
    "product, multiplies: g[0] goes with the first input of the window.")


def model_counts(m: int, r: int) -> tuple[int, int]:
    """The reference of :func:`check_multiply_counts`: multiplies for one m x m output tile of
    an r x r filter, ``(direct, winograd) = (m*m*r*r, (m + r - 1)**2)`` (ints). Source: Lavin
    and Gray, CVPR 2016: F(m x m, r x r) takes (m + r - 1)^2 multiplies."""
    return m * m * r * r, (m + r - 1) ** 2


def tile_transforms(m: int, r: int = 3) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(AT, G, BT)`` of Winograd's F(m, r), float64 arrays of shapes (m, alpha), (alpha, r),
    (alpha, alpha), alpha = m + r - 1, such that ``y = AT @ ((G @ g) * (BT @ d))``: copies of
    :func:`helpers.conv.winograd.transforms` (m up to 6: F(6, 3) uses all seven of its points
    0, 1, -1, 2, -2, 1/2, -1/2 and infinity), so changing them changes nothing else.
    Source: Lavin and Gray, CVPR 2016 (F(m, r) and its nesting F(m x m, r x r)).

    Raises:
        ValueError: as :func:`helpers.conv.winograd.transforms`.
    """
    return tuple(a.copy() for a in winograd.transforms(m, r))


def _toom_cook_f23(points) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(BT, G, AT) of F(2, 3) from three finite points and infinity, float64 (as
    :func:`helpers.conv.winograd.transforms` builds them, with other points)."""
    v = np.array([[p ** j for j in range(4)] for p in points] + [[0, 0, 0, 1]], float)
    g = np.array([[p ** j for j in range(3)] for p in points] + [[0, 0, 1]], float)
    at = np.array([[p ** j for j in range(2)] for p in points] + [[0, 1]], float).T
    return np.linalg.inv(v).T, g, at


def probe_matrices() -> dict[str, list[tuple[str, tuple[np.ndarray, np.ndarray, np.ndarray]]]]:
    """The matrices ``mats = (BT (4, 4), G (4, 3), AT (2, 4))``, float64, with which TODOs 2
    and 3 are called: ``"workbook"``, the workbook's F(2, 3) (points 0, 1, -1, infinity);
    ``"valid"``, two other sets that compute the same cross-correlation (the four products
    reordered and rescaled by powers of 2, exactly; the points 0, 2, -2 and infinity);
    ``"wrong"``, three sets with one matrix changed (one row doubled), each changing every
    case's answer. Each as ``(description, mats)``; fresh copies on every call.
    Source: Lavin and Gray, CVPR 2016 (the matrices are not unique)."""
    at, g, bt = tile_transforms(2)                          # copies: transforms caches them
    order = [2, 0, 3, 1]                                   # the products reordered
    s, t = np.array([2.0, -0.5, 4.0, 0.25]), np.array([-1.0, 2.0, 0.5, 4.0])
    scaled = (bt[order] * t[:, None], g[order] * s[:, None], at[:, order] / (s * t))

    def doubled(i: int, row: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        mats = [bt.copy(), g.copy(), at.copy()]
        mats[i][row] *= 2
        return tuple(mats)

    return {"workbook": [("the workbook's F(2, 3) matrices", (bt, g, at))],
            "valid": [("the four products reordered and rescaled: rows of BT and G times "
                       "powers of 2, the columns of AT divided back", scaled),
                      ("the matrices of the points 0, 2, -2 and infinity",
                       _toom_cook_f23((0.0, 2.0, -2.0)))],
            "wrong": [("BT with its second row doubled", doubled(0, 1)),
                      ("G with its third row doubled", doubled(1, 2)),
                      ("AT with its first row doubled", doubled(2, 0))]}


# ------------------------------------------------------------------------------ helpers


def _fmt(a: np.ndarray) -> str:
    """A short vector for a case description: integers as such, else 3 decimals."""
    if np.all(a == np.round(a)):
        return "[" + ", ".join(str(int(v)) for v in a) + "]"
    return "[" + ", ".join(f"{v:.3f}" for v in a) + "]"


def _not_convolution(actual, expected, flipped, what: str) -> None:
    """WrongResult if ``actual`` is the convolution (``flipped``) rather than ``expected``."""
    if compare(actual, expected, F23_TOLERANCE) is not None and \
            compare(actual, flipped, F23_TOLERANCE) is None:
        raise WrongResult(f"{what} is the convolution, np.convolve (the filter flipped), not "
                          f"the cross-correlation", hint=_CONVOLUTION_HINT)


def _ints(rng: np.random.Generator, shape, high: int) -> np.ndarray:
    """Non-zero integers from -high to high, as float64."""
    return (rng.integers(1, high + 1, shape) * rng.choice([-1, 1], shape)).astype(np.float64)


def _guarded(expected: np.ndarray, flipped: np.ndarray, *inputs: np.ndarray) -> None:
    """A case must tell the answer from zeros, an input, and the convolution."""
    assert np.abs(expected).max() > 0, "a case whose answer is all zeros"
    assert compare(flipped, expected, F23_TOLERANCE) is not None, "convolution would pass"
    for a in inputs:
        assert a.shape != expected.shape or not np.allclose(a, expected), "answer is an input"


def _tiled_1d(d: np.ndarray, g: np.ndarray, mats) -> np.ndarray:
    """F(2, 3) tiles over d (n,) with ``mats = (BT, G, AT)``, the last tile zero-padded."""
    bt, gm, at = mats
    n = len(d)
    tiles = -(-(n - 2) // 2)
    dp = np.zeros(2 * tiles + 2)
    dp[:n] = d
    return np.concatenate([at @ ((gm @ g) * (bt @ dp[2 * t:2 * t + 4]))
                           for t in range(tiles)])[:n - 2]


def _nested_2d(d: np.ndarray, g: np.ndarray, mats) -> np.ndarray:
    """F(2x2, 3x3) on one tile with ``mats = (BT, G, AT)``."""
    bt, gm, at = mats
    return at @ ((gm @ g @ gm.T) * (bt @ d @ bt.T)) @ at.T


def _probes_tell(expected: np.ndarray, winograd_with) -> None:
    """A case must give its answer with every valid set of :func:`probe_matrices`, and a
    clearly different one (by more than 1e-3 of the largest output) with every wrong set."""
    sets = probe_matrices()
    for what, mats in sets["workbook"] + sets["valid"]:
        assert compare(winograd_with(mats), expected, F23_TOLERANCE) is None, what
    for what, mats in sets["wrong"]:
        assert compare(winograd_with(mats), expected, 1e-3) is not None, what


def _takes_matrices(fn, call: str) -> None:
    """WrongResult unless ``fn`` can be called as ``fn(d, g, mats)``."""
    try:
        inspect.signature(fn).bind(None, None, None)
    except TypeError:
        raise WrongResult(
            f"your function cannot be called as {call}: the check passes the transforms as a "
            "third argument, mats = (BT, G, AT)",
            hint=f"start from the stub's first two lines: `def {call.split('(')[0]}(d, g, "
                 "mats=None):` and `BT, G, AT = f23_matrices() if mats is None else mats`."
        ) from None
    except ValueError:          # no signature to read (a builtin): let the call decide
        pass


def _probe(fn, call: str, d: np.ndarray, g: np.ndarray, expected: np.ndarray,
           flipped: np.ndarray):
    """Call ``fn(d, g, mats)`` with every set of :func:`probe_matrices` and return its output
    with the workbook's matrices (for :func:`check_cases` to compare). WrongResult for a
    convolution, for an output right with the workbook's matrices but not with another valid
    set, and for one that stays right with a wrong set (:data:`NOT_USING`)."""
    _takes_matrices(fn, call)
    sets = probe_matrices()

    def fresh(mats):            # a learner's in-place edit of one call's matrices stays there
        return tuple(a.copy() for a in mats)

    y = fn(d.copy(), g.copy(), fresh(sets["workbook"][0][1]))
    _not_convolution(y, expected, flipped, "your result")
    if compare(y, expected, F23_TOLERANCE) is not None:
        return y
    for what, mats in sets["valid"]:
        problem = compare(fn(d.copy(), g.copy(), fresh(mats)), expected, F23_TOLERANCE)
        if problem:
            raise WrongResult(
                f"with the workbook's F(2, 3) matrices your result is right, but with another "
                f"valid set ({what}), which gives the same y, it is not: {problem}",
                hint="compute with all three matrices you are given (BT, G, AT = mats), not "
                     "with entries of your own: any BT, G, AT that satisfy the identity must "
                     "give the same output.")
    for what, mats in sets["wrong"]:
        if compare(fn(d.copy(), g.copy(), fresh(mats)), expected, F23_TOLERANCE) is None:
            raise WrongResult(
                f"{NOT_USING} (the check passed {what}, which changes the right answer; your "
                "output stayed the same)",
                hint="take the matrices from the argument, `BT, G, AT = f23_matrices() if mats "
                     "is None else mats`, and compute the output from them: transform the "
                     "filter and the input, multiply elementwise, transform back. A direct "
                     "sum over the filter's taps, or np.correlate, gives the right numbers "
                     "without Winograd's method.")
    return y


def _matrices(result) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(BT, G, AT) as float64 arrays from what ``f23_matrices()`` returned; WrongResult with
    the rule it breaks: three 2-D arrays of numbers, in the order (BT, G, AT), four products
    (G and BT with 4 rows), then each shape."""
    if not isinstance(result, (tuple, list)) or len(result) != 3:
        got = (f"{len(result)} values" if isinstance(result, (tuple, list))
               else f"a {type(result).__name__}")
        raise WrongResult(f"f23_matrices() returned {got}; expected three matrices, "
                          f"(BT, G, AT)", hint="end with `return BT, G, AT`.")
    mats = []
    for name, a in zip(_NAMES, result):
        try:
            arr = np.asarray(a, dtype=np.float64)
        except (TypeError, ValueError):
            raise WrongResult(f"{name} is a {type(a).__name__} that is not a matrix of "
                              f"numbers") from None
        if arr.ndim != 2:
            raise WrongResult(f"{name} has {arr.ndim} dimension(s) (shape {arr.shape}); "
                              f"expected a 2-D array")
        if not np.isfinite(arr).all():
            raise WrongResult(f"{name} holds NaN or infinite values")
        mats.append(arr)
    shapes = tuple(a.shape for a in mats)
    if shapes != F23_SHAPES and sorted(shapes) == sorted(F23_SHAPES):
        raise WrongResult(f"the three matrices have shapes {shapes}: they are in another order; "
                          f"return (BT, G, AT), shapes {F23_SHAPES}",
                          hint="helpers.conv.winograd.transforms returns (AT, G, BT); this "
                               "lab's order is (BT, G, AT).")
    bt, g, at = mats
    if g.shape[0] != 4 or bt.shape[0] != 4:
        n_g, n_b = g.shape[0], bt.shape[0]
        if n_g == n_b:
            why = ("fewer cannot give both outputs for every d and g: 4 is the minimum, "
                   "m + r - 1" if n_g < 4 else "the extra products are wasted: 4 suffice")
            raise WrongResult(f"G has shape {g.shape} and BT {bt.shape}: (G @ g) * (BT @ d) "
                              f"has {n_g} products, so {n_g} multiplies; F(2, 3) takes "
                              f"exactly 4 ({why})", hint=_SHAPE_HINT)
        raise WrongResult(f"G @ g has {n_g} entries and BT @ d has {n_b}: the elementwise "
                          f"product needs 4 of each (4 multiplies); G must be (4, 3), BT (4, 4)",
                          hint=_SHAPE_HINT)
    for name, a, want in zip(_NAMES, mats, F23_SHAPES):
        if a.shape != want:
            turned = " (transposed?)" if a.shape == want[::-1] else ""
            raise WrongResult(f"{name} has shape {a.shape}, expected {want}{turned}: "
                              + {"BT": "it maps the 4 inputs d to 4 values",
                                 "G": "it maps the 3 taps g to 4 values",
                                 "AT": "it maps the 4 products to the 2 outputs"}[name],
                              hint=_SHAPE_HINT)
    return bt, g, at


# ------------------------------------------------------------------------------- cases


def _f23_cases() -> list[Case]:
    rng = np.random.default_rng(81)
    cases = []
    for k in range(12):
        if k < 4:   # small integers: the exact answer is an integer
            d, g = _ints(rng, 4, 5), _ints(rng, 3, 4)
            while g[0] == g[2]:   # a symmetric filter would not tell convolution apart
                g = _ints(rng, 3, 4)
            kind = "integers"
        else:
            d, g = rng.standard_normal(4), rng.standard_normal(3)
            kind = "random normal"
        expected = np.correlate(d, g, "valid")
        flipped = np.convolve(d, g, "valid")
        _guarded(expected, flipped, d, g)
        cases.append(Case((d, g), expected, f"d = {_fmt(d)}, g = {_fmt(g)} ({kind}, case "
                          f"{k + 1} of 12; expected y = {_fmt(expected)})", F23_TOLERANCE))
    return cases


def _signal_cases() -> list[Case]:
    rng = np.random.default_rng(82)
    cases = []
    for n in SIGNAL_LENGTHS:
        d, g = rng.standard_normal(n), rng.standard_normal(3)
        expected = np.correlate(d, g, "valid")
        _guarded(expected, np.convolve(d, g, "valid"), d, g)
        _probes_tell(expected, lambda mats: _tiled_1d(d, g, mats))
        tiles = -(-(n - 2) // 2)
        last = "the last tile padded with one zero" if (n - 2) % 2 else "no padding"
        cases.append(Case((d, g), expected, f"n = {n}: d (n,) = ({n},), g (3,), output "
                          f"({n - 2},): {tiles} tile(s) of 4 stepping by 2, {last}",
                          F23_TOLERANCE))
    return cases


def _correlate_2d(d: np.ndarray, g: np.ndarray) -> np.ndarray:
    return reference(d[None, None], g[None, None])[0, 0]


def _tile_cases() -> list[Case]:
    rng = np.random.default_rng(83)
    cases = []
    for k in range(6):
        if k == 0:
            d, g = _ints(rng, (4, 4), 5), _ints(rng, (3, 3), 4)
            kind = "integers"
        else:
            d, g = rng.standard_normal((4, 4)), rng.standard_normal((3, 3))
            kind = "random normal"
        expected = _correlate_2d(d, g)
        _guarded(expected, _correlate_2d(d, g[::-1, ::-1].copy()), d, g)
        for other in (_correlate_2d(d.T.copy(), g), _correlate_2d(d, g.T.copy())):
            assert compare(other, expected, F23_TOLERANCE) is not None, "a transpose passes"
        _probes_tell(expected, lambda mats: _nested_2d(d, g, mats))
        cases.append(Case((d, g), expected, f"tile d (4, 4) and filter g (3, 3), {kind} "
                          f"(case {k + 1} of 6)", F23_TOLERANCE))
    return cases


def _count_cases() -> list[Case]:
    return [Case((m, r), np.array(model_counts(m, r), dtype=np.float64),
                 f"m = {m}, r = {r}: one {m} x {m} output tile, a {r} x {r} filter, input tile "
                 f"{m + r - 1} x {m + r - 1}", 1e-12) for m, r in COUNT_CASES]


def _count(value) -> int | None:
    """``value`` as an int if it is a whole number (an int, or a float such as 36.0)."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.number)):
        return None
    return int(value) if float(value).is_integer() else None


def _judge_counts(result, m: int, r: int) -> np.ndarray:
    """``result`` as an array if it is ``model_counts(m, r)``; else WrongResult in counts:
    not a pair, not whole numbers, the pair swapped, or which count differs, by how many."""
    want = model_counts(m, r)
    if not isinstance(result, (tuple, list, np.ndarray)) or len(result) != 2:
        raise WrongResult(f"multiply_counts({m}, {r}) returned {result!r}: expected a pair of "
                          "counts, (direct, winograd)", hint="end with `return direct, winograd`.")
    got = [_count(v) for v in result]
    for which, value, count in zip(("direct", "Winograd"), result, got):
        if count is None:
            raise WrongResult(f"your {which} count is {value!r}: a number of multiplications "
                              "is a whole number")
    if got != list(want) and got == list(want[::-1]):
        raise WrongResult(f"you return ({got[0]}, {got[1]}): the pair is swapped, expected "
                          f"(direct, winograd) = {want}")
    for which, count, expected in zip(("direct", "Winograd"), got, want):
        if count != expected:
            raise WrongResult(f"{which}: you count {count} multiplications, expected "
                              f"{expected}")
    return np.array(got, dtype=np.float64)


# ---------------------------------------------------------------------------- checkers


def check_f23_matrices(fn) -> Report:
    """Check ``fn() -> (BT, G, AT)``, the matrices of F(2, 3), by the identity they must satisfy.

    Args:
        fn: the learner's function, no arguments. It must return three 2-D arrays (NumPy, or
            anything ``np.asarray`` reads as float64): BT (4, 4), G (4, 3), AT (2, 4).

    Returns:
        A :class:`Report`; never raises for what ``fn`` does. The matrices are not unique (row
        i of G may be scaled if column i of AT is scaled back; other points give others), so
        they are not compared with Lavin and Gray's. The rules, in order: three 2-D arrays of
        finite numbers; in the order (BT, G, AT) (a permutation is named); G and BT with 4 rows,
        so that ``(G @ g) * (BT @ d)`` has 4 products (4 multiplies, not fewer, not more); the
        three shapes (a transposed one is named); then, on 12 cases (4 of small integers, 8
        random normal, fixed seed), ``AT @ ((G @ g) * (BT @ d))`` equals
        ``np.correlate(d, g, "valid")`` within :data:`F23_TOLERANCE` of the largest output, and
        matrices that compute the convolution (the filter flipped) are named as such.
    """
    def identity(d, g):
        bt, gm, at = _matrices(fn())
        y = at @ ((gm @ g) * (bt @ d))
        _not_convolution(y, np.correlate(d, g, "valid"), np.convolve(d, g, "valid"),
                         "AT @ ((G @ g) * (BT @ d))")
        return y

    return check_cases(
        "Lab 8, TODO 1: the matrices of F(2, 3)", identity, _f23_cases(),
        hint="write each of the four products as (a combination of d) times (a combination of "
             "g): row i of BT holds the coefficients of d in product i, row i of G those of g "
             "(the middle two carry the 1/2), and column i of AT says how product i adds into "
             "y0 and y1. Check one sign at a time on d = [1, 0, 0, 0], [0, 1, 0, 0], ...")


def check_winograd_1d(fn) -> Report:
    """Check ``fn(d, g, mats) -> y``, a whole 1-D valid cross-correlation by F(2, 3) tiles.

    Args:
        fn: the learner's function. ``d``: (n,) float64, n >= 3; ``g``: (3,) float64;
            ``mats``: ``(BT (4, 4), G (4, 3), AT (2, 4))`` float64, the transforms to compute
            with. It must return ``y``: (n - 2,), ``y[i] = sum_r d[i + r] g[r]``.

    Returns:
        A :class:`Report` over n in :data:`SIGNAL_LENGTHS` (fixed seed), against
        ``np.correlate(d, g, "valid")`` in float64 within :data:`F23_TOLERANCE`: one tile
        (n = 3, padded; n = 4), an odd number of outputs whose last tile needs a zero (5, 11),
        and many tiles (64). Each case is run with every set of :func:`probe_matrices`: the
        workbook's and the other valid sets must give the answer, the wrong sets must change
        it, so a method that ignores the matrices (direct sums, ``np.correlate``) fails with
        :data:`NOT_USING`. A function that takes no ``mats``, and a convolution (the filter
        flipped), are named as such; an index error from an unpadded last tile is reported as
        the learner's error, with its line. Never raises for what ``fn`` does.
    """
    def run(d, g):
        return _probe(fn, "winograd_1d(d, g, mats)", d, g, np.correlate(d, g, "valid"),
                      np.convolve(d, g, "valid"))

    return check_cases(
        "Lab 8, TODO 2: 1-D cross-correlation by F(2, 3) tiles", run, _signal_cases(),
        hint="tile t covers d[2*t : 2*t + 4] and gives y[2*t], y[2*t + 1]: tiles step by 2 "
             "(m), not 4, and overlap by r - 1 = 2 samples; there are ceil((n - 2) / 2) of "
             "them; when n - 2 is odd pad d with one zero and keep the first n - 2 outputs.")


def check_winograd_tile_2d(fn) -> Report:
    """Check ``fn(d, g, mats) -> Y``, F(2x2, 3x3) on one tile: ``AT [(G g G^T) * (BT d B)] A``.

    Args:
        fn: the learner's function. ``d``: (4, 4) float64 input tile; ``g``: (3, 3) float64
            filter; ``mats``: ``(BT (4, 4), G (4, 3), AT (2, 4))`` float64, the transforms to
            compute with. It must return ``Y``: (2, 2), ``Y[i, j] = sum_{r, s} d[i + r, j + s]
            g[r, s]``.

    Returns:
        A :class:`Report` over 6 cases (one of integers, five random normal, fixed seed; none
        symmetric, so a transposed tile or filter fails), against torch's ``conv2d`` in float64
        (:func:`helpers.conv.check.reference`) within :data:`F23_TOLERANCE`, each run with
        every set of :func:`probe_matrices` as in :func:`check_winograd_1d` (a direct method
        fails with :data:`NOT_USING`); a convolution (the filter flipped) is named. Never
        raises for what ``fn`` does.
    """
    def run(d, g):
        return _probe(fn, "winograd_tile_2d(d, g, mats)", d, g, _correlate_2d(d, g),
                      _correlate_2d(d, g[::-1, ::-1].copy()))

    return check_cases(
        "Lab 8, TODO 3: F(2x2, 3x3) on one 4 x 4 tile", run, _tile_cases(),
        hint="transform on both sides: V = BT @ d @ BT.T (columns, then rows), U = G @ g @ G.T "
             "(a 4 x 4 from the 3 x 3 filter), then Y = AT @ (U * V) @ AT.T (2 x 2).")


def check_multiply_counts(fn) -> Report:
    """Check ``fn(m, r) -> (direct, winograd)`` against :func:`model_counts`.

    Args:
        fn: the learner's function. ``m``: output tile side; ``r``: filter side (ints). It
            must return the multiplies of one m x m output tile of an r x r filter: direct
            ``m*m*r*r`` and Winograd F(m x m, r x r) ``(m + r - 1)**2``, as a pair of numbers.

    Returns:
        A :class:`Report` over :data:`COUNT_CASES`: the counts must be whole numbers equal to
        :func:`model_counts`; a failure says it in counts ("you count 12 multiplications,
        expected 36"), and names a swapped pair. Never raises for what ``fn`` does.
    """
    return check_cases(
        "Lab 8, TODO 4: multiplies of direct and Winograd per output tile",
        (lambda m, r: _judge_counts(fn(m, r), m, r)) if callable(fn) else fn, _count_cases(),
        hint="count in 2-D: direct, each of the m*m outputs takes r*r multiplies; Winograd, "
             "one multiply per element of the transformed (m + r - 1) x (m + r - 1) tile.")
