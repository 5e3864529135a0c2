"""helpers.checks: the report a learner sees, for right, wrong, unwritten and unfinished code."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from helpers.checks import Case, check_cases, compare, random_array

RNG = np.random.default_rng(0)
X = [random_array(RNG, (3, 5)), random_array(RNG, (1, 7))]
CASES = [Case((x,), np.maximum(x, 0), f"x of shape {x.shape}") for x in X]


def relu(x):
    return np.maximum(x, 0)


def stub(x):
    raise NotImplementedError


def test_a_right_answer_passes():
    report = check_cases("relu", relu, CASES)
    assert report and report.status == "passed" and report.cases_run == 2
    assert "PASSED" in str(report) and "passed" in report._repr_html_()


def test_a_stub_says_not_implemented_yet_not_a_traceback():
    report = check_cases("relu", stub, CASES)
    assert not report and report.status == "not implemented"
    assert "NOT IMPLEMENTED YET" in str(report) and "Traceback" not in report.message


@pytest.mark.parametrize("wrong,expected_text", [
    (lambda x: np.zeros_like(x), "max error"),
    (lambda x: x, "max error"),
    (lambda x: np.maximum(x, 0)[:, :-1], "shape"),
    (lambda x: np.where(np.arange(x.size).reshape(x.shape) == 0, np.nan, np.maximum(x, 0)),
     "NaN"),
    (lambda x: "relu", "returned str"),
    (lambda x: np.maximum(x, 0)[None], "shape"),                      # no broadcasting
    (lambda x: np.maximum(x, 0).T, "shape"),
    (lambda x: np.maximum(x, 0).ravel(), "shape"),
    (lambda x: np.abs(x), "max error"),
    (lambda x: np.maximum(x, 0) + 1j * x, "imaginary part"),          # the real part is right
    (lambda x: [["0"] * x.shape[1]] * x.shape[0], "holds str_ values"),
    (lambda x: np.where(x > 0, x.astype(object), None), "None"),
])
def test_wrong_answers_fail_with_the_case_and_the_worst_element(wrong, expected_text):
    report = check_cases("relu", wrong, CASES, hint="negative inputs become 0")
    assert not report and report.status == "failed"
    assert expected_text in report.message and "x of shape (3, 5)" in report.message
    if "max error" in expected_text:
        assert "expected" in report.message and "got" in report.message
        assert "Hint: negative inputs become 0" in report.message


def test_an_exception_in_learner_code_is_reported_readably():
    def broken(x):
        return x[10, 10]

    report = check_cases("relu", broken, CASES)
    assert report.status == "error" and "IndexError" in report.message
    assert "return x[10, 10]" in report.message


@pytest.mark.parametrize("right", [
    lambda x: np.maximum(x, 0).tolist(),                                 # a list
    lambda x: np.maximum(x, 0).astype(np.float32),
    lambda x: np.maximum(x, 0) + 1e-9j,                                  # round-off imaginary part
    lambda x: torch.from_numpy(np.maximum(x, 0)),
])
def test_right_answers_in_other_types_pass(right):
    assert check_cases("relu", right, CASES).status == "passed"


def test_compare_reads_a_pair_of_numbers_of_mixed_types():
    assert compare((np.int64(12), 3.5), np.array([12.0, 3.5])) is None
    assert "elements are None" in compare((12, None), np.array([12.0, 3.5]))
    assert compare(np.int64(3), 3.0) is None


def test_compare_tolerance_is_relative_to_the_largest_value():
    exp = np.array([1000.0, 1.0])
    assert compare(exp + [0.05, 0.05], exp, rtol=1e-4) is None
    assert "relative" in compare(exp + [0.5, 0.0], exp, rtol=1e-4)


def test_a_wrong_result_the_runner_detects_fails_its_case_with_its_hint():
    from helpers.checks import WrongResult

    def runner(x):
        raise WrongResult("a thread wrote past the end of out", hint="check i < n")

    report = check_cases("relu", runner, CASES, hint="unused")
    assert report.status == "failed" and report.cases_run == 1
    assert report.message == ("on x of shape (3, 5): a thread wrote past the end of out.\n"
                              "Hint: check i < n")
