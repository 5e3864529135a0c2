"""Bad input to every public function of helpers.conv: a ValueError or TypeError naming the
parameter, raised fast, before any large allocation, with the inputs left as they were.

Hypothesis draws a function, one of its parameters and a wrong value for it (a wrong type, a
value out of range, a shape that does not fit); every other argument is valid.
"""

from __future__ import annotations

import inspect
import re
import tracemalloc

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import steps
from helpers import conv
from helpers.conv import STRATEGIES, ConvConfig, fft
from helpers.conv import check as conv_check

GOOD_X = np.random.default_rng(0).standard_normal((1, 2, 5, 5)).astype(np.float32)
GOOD_W = np.random.default_rng(1).standard_normal((3, 2, 3, 3)).astype(np.float32)
GOOD_DY = np.random.default_rng(2).standard_normal((1, 3, 3, 3)).astype(np.float32)
CFG = ConvConfig.from_shapes(GOOD_X.shape, GOOD_W.shape)

#: A 4 TB float32 array that takes no memory (every stride 0): converting it would fail.
HUGE = np.broadcast_to(np.float32(1.0), (1000, 1000, 1000, 1000))

NOT_AN_INT = [None, "1", 1.5, np.float32(2.0), True, [1], object(), float("nan"), 2 + 0j]
NOT_A_STRING = [None, 3, ["fft"], ("cpu",), b"fft", True, np.array(["cpu"])]

WRONG = {
    "x": [None, [[1.0]], "x", 3, GOOD_X[0], GOOD_X.astype(np.int32), GOOD_X.astype(np.complex64),
          torch.ones(1, 2, 5, 5, dtype=torch.int64), np.ones((1, 3, 5, 5), np.float32),
          np.ones((0, 2, 5, 5), np.float32), np.ones((1, 2, 2, 2), np.float32), HUGE[:, :3]],
    "w": [None, [[1.0]], GOOD_W[0], GOOD_W.astype(np.int64), np.ones((3, 4, 3, 3), np.float32),
          np.ones((3, 2, 9, 9), np.float32), np.ones((0, 2, 3, 3), np.float32)],
    "dy": [None, [[1.0]], GOOD_DY[0], GOOD_DY.astype(np.int32), np.ones((1, 3, 4, 3), np.float32),
           HUGE],
    "stride": NOT_AN_INT + [0, -1, 2**31, 2**70, (1,), (1, 2, 3), [0, 1], np.array([[1, 2]]),
                            np.array([1.5, 2.0]), torch.tensor([1, 0])],
    "padding": NOT_AN_INT + [-1, 2**31, 2**70, (1, 2, 3), (0, -2), np.array([[0, 1]])],
    "strategy": NOT_A_STRING + ["winograd-4x4", "", "FFT"],
    "device": [v for v in NOT_A_STRING if v is not None] + ["tpu", "", "CUDA", "cuda:0"],
    "x_shape": [None, 5, "1,2,5,5", (1, 2, 5), (1, 2, 5.0, 5), (1, 2, "5", 5), (1, 2, -5, 5),
                (1, 2, 5, 5, 1), (True, 2, 5, 5)],
    "w_shape": [None, (3, 2, 3), (3, 2, 3.5, 3), (3, 7, 3, 3), (0, 2, 3, 3), (3, 2, 6, 6)],
    "backward": [None, "yes", 1, np.bool_(True)],
    "seed": [None, -1, 1.5, "0", True],
    "n": NOT_AN_INT + [0, -3],
    "cfg": [None, (1, 2, 5, 5), "cfg", {"n": 1}],
    "got": [None, [[1.0]], np.ones((1, 3, 3, 4)), np.array(["a"] * 27).reshape(1, 3, 3, 3),
            np.zeros((0,))],
}

#: A padding that is valid as a number but makes the layer too large to allocate: refused by
#: the functions that allocate (:data:`ALLOCATING`), with the estimate.
TOO_LARGE_PADDING = [2**29, (0, 2**30)]
ALLOCATING = {"conv2d", "conv2d_backward", "memory_report", "reference", "reference_backward",
              "check"}

#: The study's symbols (b, i, f, k, s, c): none may be below 1 or a non-integer.
STUDY = {"b": 2, "i": 9, "f": 4, "k": 3, "s": 1, "c": 2, "padding": 0}
for symbol in STUDY:
    WRONG[symbol] = NOT_AN_INT + ([-1] if symbol == "padding" else [0, -1])


def _conv2d(**kw):
    args = dict(x=GOOD_X, w=GOOD_W, stride=1, padding=0, strategy="reference", device=None)
    return conv.conv2d(**{**args, **kw})


def _conv2d_backward(**kw):
    args = dict(x=GOOD_X, w=GOOD_W, dy=GOOD_DY, stride=1, padding=0, strategy="im2col-gemm",
                device="cpu")
    return conv.conv2d_backward(**{**args, **kw})


def _config_for(**kw):
    return conv.config_for(**{**dict(x_shape=GOOD_X.shape, w_shape=GOOD_W.shape, stride=1,
                                     padding=0), **kw})


def _memory_report(**kw):
    args = dict(strategy="reference", x_shape=GOOD_X.shape, w_shape=GOOD_W.shape, stride=1,
                padding=0, device="cpu", backward=False, seed=0)
    return conv.memory_report(**{**args, **kw})


def _memory_refusal(**kw):
    args = dict(strategy="fft", cfg=CFG, device="cpu", backward=False)
    return conv.memory_refusal(**{**args, **kw})


def _reference(**kw):
    return conv_check.reference(**{**dict(x=GOOD_X, w=GOOD_W, stride=1, padding=0), **kw})


def _reference_backward(**kw):
    args = dict(x=GOOD_X, w=GOOD_W, dy=GOOD_DY, stride=1, padding=0)
    return conv_check.reference_backward(**{**args, **kw})


def _rel_error(**kw):
    return conv_check.rel_error(**{**dict(got=GOOD_DY, ref=GOOD_DY), **kw})


def _check(**kw):
    args = dict(x_shape=(1, 2, 5, 5), w_shape=(3, 2, 3, 3), stride=1, padding=0, seed=0)
    return conv_check.check(**{**args, **kw})


def _from_study(**kw):
    return ConvConfig.from_study(**{**STUDY, **kw})


def _with_batch(**kw):
    return CFG.with_batch(**kw)


def _next_fast_len(**kw):
    return fft.next_fast_len(**kw)


#: (function, its parameters under test). ``check`` is run only with its arguments refused
#: (a valid call runs every strategy).
FUNCTIONS = {
    "conv2d": (_conv2d, ["x", "w", "stride", "padding", "strategy", "device"]),
    "conv2d_backward": (_conv2d_backward, ["x", "w", "dy", "stride", "padding", "strategy",
                                           "device"]),
    "config_for": (_config_for, ["x_shape", "w_shape", "stride", "padding"]),
    "memory_report": (_memory_report, ["strategy", "x_shape", "w_shape", "stride", "padding",
                                       "device", "backward", "seed"]),
    "memory_refusal": (_memory_refusal, ["strategy", "cfg", "device"]),
    "reference": (_reference, ["x", "w", "stride", "padding"]),
    "reference_backward": (_reference_backward, ["x", "w", "dy", "stride", "padding"]),
    "rel_error": (_rel_error, ["got"]),
    "check": (_check, ["x_shape", "w_shape", "stride", "padding", "seed"]),
    "from_study": (_from_study, list(STUDY)),
    "with_batch": (_with_batch, ["n"]),
    "next_fast_len": (_next_fast_len, ["n"]),
}

#: What the message must contain (as a word) to name the parameter, where it is not the
#: parameter's own name: x_shape and w_shape are checked and named as the shapes of x and w;
#: the study's symbols are named with their meaning, "b (batch)"; the batch of with_batch is
#: "batch n".
SPOKEN = {("config_for", "x_shape"): "x", ("config_for", "w_shape"): "w",
          ("memory_report", "x_shape"): "x", ("memory_report", "w_shape"): "w",
          ("check", "x_shape"): "x", ("check", "w_shape"): "w",
          ("with_batch", "n"): "batch n", ("next_fast_len", "n"): "n must"}

# The valid-argument calls (every function but ``check``) must succeed: the property below is
# about the one argument made wrong.
VALID_NEEDS_NO_ARGS = {"with_batch", "next_fast_len"}


@pytest.mark.parametrize("name", sorted(set(FUNCTIONS) - {"check"} - VALID_NEEDS_NO_ARGS))
def test_each_function_accepts_its_valid_arguments(name):
    FUNCTIONS[name][0]()


def _names_the_parameter(message: str, function: str, param: str) -> bool:
    if function == "from_study" and param != "padding":
        return f"{param} (" in message  # "b (batch) must be an integer >= 1, got None"
    word = SPOKEN.get((function, param), param)
    return re.search(rf"(?<![\w']){re.escape(word)}(?!\w)", message) is not None


def _snapshot(value):
    if isinstance(value, np.ndarray) and value.nbytes > 2**20:
        return (value.shape, value.strides, value.flat[0])  # HUGE: a view, never copied
    if isinstance(value, np.ndarray):
        return value.copy()
    if isinstance(value, torch.Tensor):
        return value.clone()
    return repr(value)


def _same(before, value) -> bool:
    if isinstance(value, np.ndarray) and value.nbytes > 2**20:
        return before == (value.shape, value.strides, value.flat[0])
    if isinstance(value, np.ndarray):
        return np.array_equal(before, value, equal_nan=value.dtype.kind in "fc")
    if isinstance(value, torch.Tensor):
        return torch.equal(before, value)
    return before == repr(value)


@st.composite
def wrong_calls(draw):
    name = draw(st.sampled_from(sorted(FUNCTIONS)))
    fn, params = FUNCTIONS[name]
    param = draw(st.sampled_from(params))
    extra = TOO_LARGE_PADDING if param == "padding" and name in ALLOCATING else []
    value = draw(st.sampled_from(WRONG[param] + extra))
    return name, fn, param, value


#: A refusal comes before any work: in fewer interpreter steps (Python lines run and C functions
#: called, tests/steps.py) than this, where the refusals here take at most about 520. Steps,
#: unlike seconds, do not depend on the machine or its load. Work done inside one C call counts
#: as one step: the traced-allocation limit beside it catches an array made before refusing.
REFUSAL_STEPS = 5_000


def test_the_step_count_sees_work():
    def python_loop(n):
        total = 0
        for i in range(n):
            total += i
        return total

    with steps.counted() as work:
        python_loop(4 * REFUSAL_STEPS)
    assert work.total > 8 * REFUSAL_STEPS   # two lines per pass of the loop


@given(call=wrong_calls())
@settings(max_examples=250, deadline=None)
def test_a_wrong_argument_is_refused_by_name_before_any_work(call):
    name, fn, param, value = call
    goods = [GOOD_X, GOOD_W, GOOD_DY]
    before = [_snapshot(v) for v in (value, *goods)]
    tracemalloc.start()
    try:
        with pytest.raises((ValueError, TypeError)) as info, steps.counted() as work:
            fn(**{param: value})
    finally:
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
    message = str(info.value)
    assert _names_the_parameter(message, name, param), (name, param, value, message)
    assert work.total < REFUSAL_STEPS, (name, param, f"{work.total} steps")
    assert peak < 8 * 2**20, (name, param, f"{peak / 2**20:.0f} MiB allocated")
    assert all(_same(b, v) for b, v in zip(before, (value, *goods))), "an input was changed"


def test_every_listed_parameter_is_a_real_parameter():
    """A misspelt name in FUNCTIONS would make every draw raise TypeError (unexpected
    keyword) and the property above pass for the wrong reason."""
    targets = {"conv2d": conv.conv2d, "conv2d_backward": conv.conv2d_backward,
               "config_for": conv.config_for, "memory_report": conv.memory_report,
               "memory_refusal": conv.memory_refusal, "reference": conv_check.reference,
               "reference_backward": conv_check.reference_backward,
               "rel_error": conv_check.rel_error, "check": conv_check.check,
               "from_study": ConvConfig.from_study, "with_batch": ConvConfig.with_batch,
               "next_fast_len": fft.next_fast_len}
    assert set(targets) == set(FUNCTIONS)
    for name, (_, params) in FUNCTIONS.items():
        accepted = set(inspect.signature(targets[name]).parameters)
        assert set(params) <= accepted, (name, set(params) - accepted)


@pytest.mark.parametrize("strategy", sorted(s for s, v in STRATEGIES.items() if "cpu" in v.devices))
def test_tensors_that_require_grad_are_accepted_and_left_alone(strategy):
    x = torch.tensor(GOOD_X, requires_grad=True)
    w = torch.tensor(GOOD_W, requires_grad=True)
    dy = torch.tensor(GOOD_DY)
    y = conv.conv2d(x, w, strategy=strategy, device="cpu")
    dx, dw = conv.conv2d_backward(x, w, dy, strategy=strategy, device="cpu")
    expected = conv_check.reference(GOOD_X, GOOD_W)
    assert conv_check.rel_error(y, expected) < 1e-3
    assert dx.shape == x.shape and dw.shape == w.shape
    assert x.grad is None and w.grad is None and x.requires_grad
    assert torch.equal(x.detach(), torch.tensor(GOOD_X))


def test_stride_and_padding_accept_numpy_and_tensor_integers():
    expected = conv_check.reference(GOOD_X, GOOD_W, (1, 2), (1, 0))
    for stride, padding in [(np.array([1, 2]), np.array([1, 0])),
                            (torch.tensor([1, 2]), (np.int64(1), 0)),
                            ((np.int32(1), 2), torch.tensor([1, 0]))]:
        y = conv.conv2d(GOOD_X, GOOD_W, stride=stride, padding=padding)
        assert conv_check.rel_error(y, expected) < 1e-5


def test_a_padding_too_large_for_memory_is_refused_with_the_estimate():
    with pytest.raises(ValueError, match=r"padding .* too large.* GiB .*more than the .* GiB free"):
        conv.conv2d(GOOD_X, GOOD_W, padding=2**20, strategy="fft")


def test_a_wrong_dy_shape_is_refused_before_conversion():
    """HUGE is a 4 TB view: converting it to float32 first would fail with a MemoryError."""
    with pytest.raises(ValueError, match=r"dy must have the output's shape \(1, 3, 3, 3\)"):
        conv.conv2d_backward(GOOD_X, GOOD_W, HUGE)


@given(n=st.integers(1, 20_000))
@settings(max_examples=200, deadline=None)
def test_next_fast_len_is_the_least_smooth_length(n):
    def smooth(m):
        for p in (2, 3, 5):
            while m % p == 0:
                m //= p
        return m == 1

    got = fft.next_fast_len(n)
    assert got >= n and smooth(got)
    assert not any(smooth(m) for m in range(n, got))


def test_next_fast_len_is_fast_for_huge_lengths():
    with steps.counted() as work:
        got = fft.next_fast_len(2**61 + 1)
    assert work.total < 100_000, work.total   # about 27,000; a scan from n up, about 2**61
    assert 2**61 < got <= 2**62  # never beyond the next power of two
    m = got
    for p in (2, 3, 5):
        while m % p == 0:
            m //= p
    assert m == 1 and got > 2**61

