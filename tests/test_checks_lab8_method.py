"""Lab 8's checkers judge the method, not only the numbers, and speak in counts.

TODOs 2 and 3 are called with the transforms as an argument, ``mats = (BT, G, AT)``: the
workbook's, other valid sets (rescaled products, other points) and sets with one row wrong. An
answer that is not Winograd (direct loops, ``np.correlate``), or that ignores the matrices it
is given, returns the right values and still fails, with the message that names the mistake.
TODO 4's counts are integers: a wrong count is said as one ("you count 18 multiplications,
expected 36"), not as a float error with a tolerance.
"""

from __future__ import annotations

import numpy as np
import pytest
from test_checks_lab8 import f23_matrices, winograd_1d, winograd_tile_2d

from helpers.checks import lab8

# ---------------------------------------------------------------- answers that are not Winograd


def direct_1d(d, g, mats=None):
    """The right values by the definition: three multiplies per output."""
    return np.array([sum(d[i + r] * g[r] for r in range(3)) for i in range(len(d) - 2)])


def correlate_1d(d, g, mats=None):
    return np.correlate(d, g, "valid")


def own_matrices_1d(d, g, mats=None):
    """Winograd, but with its own f23_matrices() whatever it is given."""
    return winograd_1d(d, g)


def direct_2d(d, g, mats=None):
    return np.array([[np.sum(d[i:i + 3, j:j + 3] * g) for j in range(2)] for i in range(2)])


def own_matrices_2d(d, g, mats=None):
    return winograd_tile_2d(d, g)


def g_only_2d(d, g, mats=None):
    """Takes G from mats, but BT and AT are its own: right with the workbook's matrices."""
    BT, _, AT = f23_matrices()
    G = mats[1]
    return AT @ ((G @ g @ G.T) * (BT @ d @ BT.T)) @ AT.T


NOT_WINOGRAD = {
    "1-D direct loops": (lab8.check_winograd_1d, direct_1d),
    "1-D np.correlate": (lab8.check_winograd_1d, correlate_1d),
    "1-D Winograd with its own matrices, not the ones given": (lab8.check_winograd_1d,
                                                               own_matrices_1d),
    "2-D direct loops": (lab8.check_winograd_tile_2d, direct_2d),
    "2-D Winograd with its own matrices, not the ones given": (lab8.check_winograd_tile_2d,
                                                               own_matrices_2d),
}


@pytest.mark.parametrize("name", NOT_WINOGRAD)
def test_an_answer_that_ignores_the_matrices_fails_with_the_mistake_named(name):
    checker, fn = NOT_WINOGRAD[name]
    report = checker(fn)
    assert not report and report.status == "failed", (name, str(report))
    assert lab8.NOT_USING in report.message, report.message
    assert ("your function gives the same output when the transform matrices are wrong: it is "
            "not using them \u2014 compute the output via the Winograd transforms"
            in report.message)
    assert "doubled" in report.message and "Hint:" in report.message


def test_an_answer_that_uses_only_part_of_the_matrices_fails_on_a_valid_set():
    report = lab8.check_winograd_tile_2d(g_only_2d)
    assert report.status == "failed", str(report)
    assert "with the workbook's F(2, 3) matrices your result is right" in report.message
    assert "another valid set" in report.message and "max error" in report.message


@pytest.mark.parametrize("checker,call", [(lab8.check_winograd_1d, "winograd_1d(d, g, mats)"),
                                          (lab8.check_winograd_tile_2d,
                                           "winograd_tile_2d(d, g, mats)")])
def test_a_function_without_the_matrices_argument_is_told_the_signature(checker, call):
    report = checker(lambda d, g: np.zeros(1))
    assert report.status == "failed" and f"cannot be called as {call}" in report.message
    assert "mats=None" in report.message


def test_the_solution_computes_with_whatever_valid_matrices_it_is_given():
    """The probe's valid sets differ from the workbook's, and the solution agrees on them."""
    sets = lab8.probe_matrices()
    workbook = sets["workbook"][0][1]
    rng = np.random.default_rng(0)
    d, g = rng.standard_normal(11), rng.standard_normal(3)
    d2, g2 = rng.standard_normal((4, 4)), rng.standard_normal((3, 3))
    for what, mats in sets["valid"]:
        assert not all(np.array_equal(a, b) for a, b in zip(mats, workbook)), what
        assert np.allclose(winograd_1d(d, g, mats), np.correlate(d, g, "valid"), atol=1e-12)
        assert np.allclose(winograd_tile_2d(d2, g2, mats), direct_2d(d2, g2), atol=1e-12)
    for what, mats in sets["wrong"]:
        assert not np.allclose(winograd_1d(d, g, mats), np.correlate(d, g, "valid")), what
        assert not np.allclose(winograd_tile_2d(d2, g2, mats), direct_2d(d2, g2)), what
    for _, mats in sets["workbook"] + sets["valid"] + sets["wrong"]:
        assert [a.shape for a in mats] == list(lab8.F23_SHAPES)


def test_the_probe_matrices_are_fresh_copies():
    lab8.probe_matrices()["workbook"][0][1][0][:] = 0
    assert lab8.probe_matrices()["workbook"][0][1][0].any()


# ---------------------------------------------------------------------------- TODO 4 in counts


@pytest.mark.parametrize("fn,words", [
    (lambda m, r: (m * r * r, (m + r - 1) ** 2),
     "direct: you count 18 multiplications, expected 36"),
    (lambda m, r: (m * m * r * r, (m + r) ** 2),
     "Winograd: you count 25 multiplications, expected 16"),
    (lambda m, r: ((m + r - 1) ** 2, m * m * r * r), "the pair is swapped"),
    (lambda m, r: (m * m * r * r, (m + r - 1) ** 2 + 0.5), "is 16.5: a number of multiplications"),
    (lambda m, r: (m * m * r * r,), "a pair of counts"),
])
def test_a_wrong_count_is_said_in_counts(fn, words):
    report = lab8.check_multiply_counts(fn)
    assert report.status == "failed" and "m = 2, r = 3" in report.message
    assert words in report.message, report.message
    assert "max error" not in report.message and "relative" not in report.message


def test_counts_as_whole_floats_or_numpy_ints_pass():
    assert lab8.check_multiply_counts(lambda m, r: (float(m * m * r * r),
                                                    np.int64((m + r - 1) ** 2)))
    assert lab8.check_multiply_counts(lambda m, r: np.array([m * m * r * r, (m + r - 1) ** 2]))
