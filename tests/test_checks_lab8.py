"""Lab 8's checkers: they fail stubs and planted mistakes, and pass the solution's code.

The solution functions below are those of ``labs/solutions/lab8_winograd.ipynb``. The planted
mistakes, each failing with the words of the rule or the case that catches it: for F(2, 3)'s
matrices, convolution (the filter flipped), G without its 1/2, a sign wrong in BT, AT (4, 2)
transposed, three points only (3 multiplies), five (one wasted), the order of ``transforms``
(AT, G, BT), two matrices, zeros; for the 1-D signal, tiles stepping by 4, the last tile
dropped when the output count is odd, the last tile not padded (an index error), np.convolve;
for the 2-D tile, a transform on one side only, G g without G^T, no A on the right, the filter
flipped; for the counts, 1-D counts, (m + r)^2, m*r*r, the pair swapped. Matrices that differ
from Lavin and Gray's but are right (rows scaled, other points, the workbook's) pass.
"""

from __future__ import annotations

import nbformat
import numpy as np
import pytest

from helpers.checks import lab8
from helpers.conv import winograd
from tools.run_notebooks import ROOT

# ------------------------------------------------------------------- the solution notebook's


def f23_matrices():
    """(BT (4, 4), G (4, 3), AT (2, 4)) of F(2, 3), float64: y = AT @ ((G @ g) * (BT @ d))."""
    BT = np.array([[1, 0, -1, 0],      # d0 - d2
                   [0, 1, 1, 0],       # d1 + d2
                   [0, -1, 1, 0],      # d2 - d1
                   [0, 1, 0, -1]],     # d1 - d3
                  dtype=np.float64)
    G = np.array([[1, 0, 0],           # g0
                  [0.5, 0.5, 0.5],     # (g0 + g1 + g2) / 2
                  [0.5, -0.5, 0.5],    # (g0 - g1 + g2) / 2
                  [0, 0, 1]],          # g2
                 dtype=np.float64)
    AT = np.array([[1, 1, 1, 0],       # y0 = m1 + m2 + m3
                   [0, 1, -1, -1]],    # y1 = m2 - m3 - m4
                  dtype=np.float64)
    return BT, G, AT


def winograd_1d(d, g, mats=None):
    """Valid cross-correlation of d (n,) with g (3,), n >= 3, by F(2, 3) tiles: y (n - 2,).
    mats: the transforms (BT, G, AT) to compute with; None: f23_matrices()."""
    BT, G, AT = f23_matrices() if mats is None else mats
    n = len(d)
    U = G @ g                                  # the filter, transformed once: 4 values
    tiles = -(-(n - 2) // 2)                   # ceil((n - 2) / 2) tiles of 2 outputs
    dp = np.zeros(2 * tiles + 2)
    dp[:n] = d                                 # one zero at the end when n - 2 is odd
    y = np.concatenate([AT @ (U * (BT @ dp[2 * t:2 * t + 4])) for t in range(tiles)])
    return y[:n - 2]


def winograd_tile_2d(d, g, mats=None):
    """F(2x2, 3x3): the 2 x 2 cross-correlation of a 4 x 4 tile d with a 3 x 3 filter g.
    mats: the transforms (BT, G, AT) to compute with; None: f23_matrices()."""
    BT, G, AT = f23_matrices() if mats is None else mats
    U = G @ g @ G.T                            # (4, 4): the filter transformed
    V = BT @ d @ BT.T                          # (4, 4): the tile transformed
    return AT @ (U * V) @ AT.T                 # (2, 2): 16 multiplies in U * V


def multiply_counts(m, r):
    """(direct, winograd) multiplies for one m x m output tile of an r x r filter."""
    return m * m * r * r, (m + r - 1) ** 2


# ------------------------------------------------------------------------ planted mistakes


def matrices(bt=None, g=None, at=None, order=("bt", "g", "at")):
    """f23_matrices with some matrices replaced (and optionally returned in another order)."""
    def run():
        right = dict(zip(("bt", "g", "at"), f23_matrices()))
        mats = {**right, **{k: v for k, v in (("bt", bt), ("g", g), ("at", at))
                            if v is not None}}
        return tuple(mats[k] for k in order)
    return run


BT0, G0, AT0 = f23_matrices()
SIGN_IN_BT = BT0.copy()
SIGN_IN_BT[3] = [0, 1, 0, 1]                    # d1 + d3 instead of d1 - d3
THREE_POINTS = matrices(bt=np.array([[1.0, 0, -1, 0], [0, 1, 1, 0], [0, -1, 1, 0]]),
                        g=np.array([[1.0, 0, 0], [0.5, 0.5, 0.5], [0.5, -0.5, 0.5]]),
                        at=np.array([[1.0, 1, 1], [0, 1, -1]]))   # 0, 1, -1: no infinity
FIVE_POINTS = matrices(bt=np.vstack([BT0, [1, 2, 3, 4]]), g=np.vstack([G0, [1, 1, 1]]),
                       at=np.hstack([AT0, [[0], [0]]]))       # a fifth product, never used


def tile_1d(step=2, drop_odd=False, pad=True, flip=False):
    """winograd_1d with one mistake."""
    def run(d, g, mats=None):
        BT, G, AT = f23_matrices() if mats is None else mats
        n = len(d)
        U = G @ (g[::-1] if flip else g)
        starts = range(0, n - 2 - (n % 2 == 1 and drop_odd), step)   # tile starts
        dp = np.zeros(n + 4) if pad else np.asarray(d)
        if pad:
            dp[:n] = d
        y = [AT @ (U * (BT @ dp[i:i + 4])) for i in starts]
        return np.concatenate(y)[:n - 2] if y else np.zeros(0)
    return run


def tile_2d(one_side=False, no_gt=False, no_a=False, flip=False):
    """winograd_tile_2d with one mistake."""
    def run(d, g, mats=None):
        BT, G, AT = f23_matrices() if mats is None else mats
        g = g[::-1, ::-1] if flip else g
        U = G @ g if no_gt else G @ g @ G.T
        V = BT @ d if one_side else BT @ d @ BT.T
        M = U * V
        return AT @ M if no_a else AT @ M @ AT.T
    return run


def raising(exc):
    def run(*args):
        raise exc
    return run


#: (checker, solution, {name: (wrong function, words the message must hold)}).
CHECKERS = {
    "f23": (lab8.check_f23_matrices, f23_matrices, {
        "convolution (g flipped)": (matrices(g=G0[:, ::-1]), ["convolution", "case 1 of 12"]),
        "G without the 1/2 factors": (matrices(g=np.array([[1.0, 0, 0], [1, 1, 1], [1, -1, 1],
                                                           [0, 0, 1]])), ["case 1 of 12"]),
        "a sign error in BT": (matrices(bt=SIGN_IN_BT), ["case 1 of 12", "max error"]),
        "AT (4, 2), transposed": (matrices(at=AT0.T), ["AT has shape (4, 2)", "transposed"]),
        "three points only: 3 multiplies": (THREE_POINTS, ["3 multiplies", "minimum"]),
        "five points: one multiply wasted": (FIVE_POINTS, ["5 multiplies", "4 suffice"]),
        "(AT, G, BT), the order of winograd.transforms": (
            matrices(order=("at", "g", "bt")), ["another order", "(BT, G, AT)"]),
        "two matrices returned": (lambda: (BT0, G0), ["2 values", "three matrices"]),
        "zeros": (matrices(bt=np.zeros((4, 4)), g=np.zeros((4, 3)), at=np.zeros((2, 4))),
                  ["case 1 of 12"]),
    }),
    "1d": (lab8.check_winograd_1d, winograd_1d, {
        "tiles stepping by 4": (tile_1d(step=4), ["n = 5", "shape"]),
        "last tile dropped when the output count is odd": (tile_1d(drop_odd=True),
                                                           ["n = 3", "shape (0,)"]),
        "last tile not padded": (tile_1d(pad=False), ["n = 3", "raised"]),
        "np.convolve semantics": (tile_1d(flip=True), ["n = 3", "convolution"]),
        "the input returned": (lambda d, g, mats: d, ["n = 3", "shape"]),
        "zeros": (lambda d, g, mats: np.zeros(len(d) - 2), ["n = 3", "max error"]),
    }),
    "tile": (lab8.check_winograd_tile_2d, winograd_tile_2d, {
        "a transform on one side only (BT d)": (tile_2d(one_side=True), ["case 1 of 6"]),
        "G g without G^T": (tile_2d(no_gt=True), ["case 1 of 6", "raised"]),
        "AT M without A": (tile_2d(no_a=True), ["case 1 of 6", "shape (2, 4)"]),
        "the filter flipped": (tile_2d(flip=True), ["case 1 of 6", "convolution"]),
        "the tile transposed": (lambda d, g, mats: winograd_tile_2d(d.T, g, mats),
                                ["case 1 of 6"]),
        "the input's corner": (lambda d, g, mats: d[:2, :2], ["case 1 of 6", "max error"]),
    }),
    "counts": (lab8.check_multiply_counts, multiply_counts, {
        "1-D counts": (lambda m, r: (m * r, m + r - 1), ["m = 2, r = 3"]),
        "(m + r)**2": (lambda m, r: (m * m * r * r, (m + r) ** 2), ["m = 2, r = 3"]),
        "m*r*r direct": (lambda m, r: (m * r * r, (m + r - 1) ** 2), ["m = 2, r = 3"]),
        "the pair swapped": (lambda m, r: ((m + r - 1) ** 2, m * m * r * r), ["m = 2, r = 3"]),
        "one number": (lambda m, r: (m + r - 1) ** 2, ["m = 2, r = 3", "a pair of counts"]),
    }),
}

PLANTED = [(kind, name) for kind, (_, _, wrongs) in CHECKERS.items() for name in wrongs]


@pytest.mark.parametrize("kind", CHECKERS)
def test_the_solution_passes_every_case(kind):
    checker, solution, _ = CHECKERS[kind]
    report = checker(solution)
    assert report and report.status == "passed", str(report)


@pytest.mark.parametrize("kind,name", PLANTED)
def test_a_planted_mistake_fails_with_the_rule_or_case_that_catches_it(kind, name):
    checker, _, wrongs = CHECKERS[kind]
    wrong, words = wrongs[name]
    report = checker(wrong)
    assert not report and report.status in ("failed", "error"), (name, str(report))
    for word in words:
        assert word in report.message, (name, word, report.message)


@pytest.mark.parametrize("kind", CHECKERS)
def test_a_stub_is_not_implemented_yet(kind):
    report = CHECKERS[kind][0](raising(NotImplementedError))
    assert not report and report.status == "not implemented" and report.cases_run == 0
    assert "not implemented yet" in report._repr_html_()


@pytest.mark.parametrize("kind", CHECKERS)
def test_a_learner_exception_is_reported_readably(kind):
    report = CHECKERS[kind][0](raising(ValueError("my own bug")))
    assert report.status == "error" and "ValueError: my own bug" in report.message
    assert "raise exc" in report.message      # the line of the learner's code


def test_todos_2_and_3_are_checked_with_the_matrices_they_are_given():
    """The checks pass the matrices (mats), so TODOs 2 and 3 pass while TODO 1 is still a stub
    that the functions' default (mats=None) would call."""
    def stub_default(fn):
        def run(d, g, mats=None):
            if mats is None:
                raising(NotImplementedError)()
            return fn(d, g, mats)
        return run
    assert lab8.check_winograd_1d(stub_default(winograd_1d)).status == "passed"
    assert lab8.check_winograd_tile_2d(stub_default(winograd_tile_2d)).status == "passed"


def test_the_unpadded_last_tile_is_the_learners_error_with_its_line():
    report = lab8.check_winograd_1d(tile_1d(pad=False))
    assert report.status == "error" and "line" in report.message


def test_the_rules_of_todo_1_come_in_order():
    """The shape rule catches a right identity with a wasted product (only it can), and the
    product-count rule comes before the per-matrix shapes."""
    bt, g, at = FIVE_POINTS()
    d, f = np.arange(4.0) + 1, np.array([1.0, -2.0, 0.5])
    assert np.allclose(at @ ((g @ f) * (bt @ d)), np.correlate(d, f, "valid"))
    assert "5 multiplies" in lab8.check_f23_matrices(FIVE_POINTS).message
    assert "G must be (4, 3)" in lab8.check_f23_matrices(matrices(g=G0.T)).message


# -------------------------------------------------------- right answers other than the solution


def scaled():
    """Row i of G times s_i, column i of AT divided by s_i: the same products, rescaled."""
    s = np.array([2.0, -1.0, 4.0, 0.5])
    return BT0, G0 * s[:, None], AT0 / s


def from_points(points):
    """F(2, 3) by Toom-Cook from three finite points and infinity (float, not exact)."""
    def run():
        v = np.array([[p ** j for j in range(4)] for p in points] + [[0, 0, 0, 1]], float)
        bt = np.linalg.inv(v).T
        g = np.array([[p ** j for j in range(3)] for p in points] + [[0, 0, 1]], float)
        at = np.array([[p ** j for j in range(2)] for p in points] + [[0, 1]], float).T
        return bt, g, at
    return run


def workbooks():
    at, g, bt = winograd.transforms(2, 3)
    return bt, g, at


@pytest.mark.parametrize("right", [scaled, from_points((0, 1, 2)), from_points((0, -1, 0.5)),
                                   workbooks, lambda: tuple(a.tolist() for a in f23_matrices()),
                                   lambda: tuple(a.astype(np.float32) for a in f23_matrices())])
def test_other_right_matrices_pass(right):
    assert lab8.check_f23_matrices(right).status == "passed"


def test_the_solution_matrices_are_lavin_and_grays():
    """Lavin and Gray's F(2, 3), Section 4.1: m1 = (d0 - d2) g0, m2 = (d1 + d2)(g0 + g1 + g2)/2,
    m3 = (d2 - d1)(g0 - g1 + g2)/2, m4 = (d1 - d3) g2; y0 = m1 + m2 + m3, y1 = m2 - m3 - m4."""
    d, g = np.array([1.0, 2, 3, 4]), np.array([1.0, -1, 2])
    m = [(d[0] - d[2]) * g[0], (d[1] + d[2]) * g.sum() / 2,
         (d[2] - d[1]) * (g[0] - g[1] + g[2]) / 2, (d[1] - d[3]) * g[2]]
    BT, G, AT = f23_matrices()
    assert np.array_equal((G @ g) * (BT @ d), m)
    assert np.array_equal(AT @ m, [m[0] + m[1] + m[2], m[1] - m[2] - m[3]])


# ------------------------------------------------------------------------- tile_transforms


@pytest.mark.parametrize("m", [1, 2, 3, 4, 5])
def test_tile_transforms_are_the_workbooks_where_it_builds_them(m):
    for mine, theirs in zip(lab8.tile_transforms(m), winograd.transforms(m)):
        assert np.array_equal(mine, theirs)


@pytest.mark.parametrize("m", [2, 4, 6])
def test_tile_transforms_compute_the_cross_correlation(m):
    at, g, bt = lab8.tile_transforms(m)
    alpha = m + 2
    assert (at.shape, g.shape, bt.shape) == ((m, alpha), (alpha, 3), (alpha, alpha))
    rng = np.random.default_rng(m)
    d, f = rng.standard_normal((alpha, alpha)), rng.standard_normal((3, 3))
    y = at @ ((g @ f @ g.T) * (bt @ d @ bt.T)) @ at.T
    want = np.array([[np.sum(d[i:i + 3, j:j + 3] * f) for j in range(m)] for i in range(m)])
    assert np.allclose(y, want, rtol=0, atol=1e-9 * np.abs(want).max())
    assert np.array_equal(bt, np.round(bt))         # integer rows of B^T, as the workbook's


def test_tile_transforms_are_copies_and_refuse_too_many_points():
    lab8.tile_transforms(2)[0][:] = 0
    assert winograd.transforms(2)[0].any()
    for bad in ({"m": 7}, {"m": 0}, {"m": 2, "r": True}, {"m": 4, "r": 6}):
        with pytest.raises(ValueError, match=r"\bm\b|\br\b|points"):
            lab8.tile_transforms(**bad)


def test_model_counts_save_what_the_lab_states():
    ratios = [d / w for d, w in (lab8.model_counts(m, 3) for m in (2, 4, 6))]
    assert ratios == pytest.approx([2.25, 4.0, 5.0625])


@pytest.mark.parametrize("folder", ["labs", "labs/solutions"])
def test_the_lab_states_the_cases_its_checkers_try(folder):
    """The cases the lab's text names are the checkers' own."""
    nb = nbformat.read(ROOT / folder / "lab8_winograd.ipynb", as_version=4)
    text = " ".join(c.source for c in nb.cells if c.cell_type == "markdown")
    lengths = ", ".join(map(str, lab8.SIGNAL_LENGTHS[:-1])) + f" and {lab8.SIGNAL_LENGTHS[-1]}"
    counts = ", ".join(map(str, lab8.COUNT_CASES[:-1])) + f" and {lab8.COUNT_CASES[-1]}"
    assert f"n = {lengths}" in " ".join(text.split())
    assert f"(m, r) = {counts}" in " ".join(text.split())
    assert f"within {lab8.F23_TOLERANCE:g}" in text
