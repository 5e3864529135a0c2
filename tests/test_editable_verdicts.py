"""The verdicts on the kernels a learner edits in notebooks 01, 03 and 04 (helpers.editable):
each planted mistake is named (forgotten padding, `>` for `>=`, a stride off by one, indices in
the wrong order, an element never written), an exception inside the kernel becomes one sentence
with its line, and the package's kernel, or a correct one written differently, passes."""

from __future__ import annotations

import importlib.util
import inspect
import itertools
import pathlib
import re
import textwrap

import numpy as np
import pytest
from conftest import simulator_only

from helpers import compiled, editable, kernels
from helpers.conv import direct, unroll
from helpers.editable import cells, verdict
from helpers.editable.verdict import Region, describe_positions
from helpers.elementwise import relu_kernel

_COUNT = itertools.count()


def _plant(folder, kernel, *edits, header=""):
    """The package's ``kernel`` with each ``(old, new)`` edit made (``old`` must occur exactly
    once), defined in a file of its own as a notebook cell would define it."""
    source = textwrap.dedent(inspect.getsource(kernel.py_func))
    for old, new in edits:
        assert source.count(old) == 1, old
        source = source.replace(old, new)
    path = folder / f"cell_{next(_COUNT)}.py"
    path.write_text("import numpy as np\nfrom numba import cuda, float32\n" + header + "\n"
                    + source)
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return getattr(module, kernel.py_func.__name__)


@pytest.fixture
def planted(tmp_path, monkeypatch):
    """``planted(kernel, (old, new), ...)``: :func:`_plant`, with the compiler check left out
    (one test runs it), so that each check costs only its launch."""
    monkeypatch.setattr(cells, "compiler_check", lambda report, *args, **kw: report)
    return lambda kernel, *edits, header="": _plant(tmp_path, kernel, *edits, header=header)


def _failed(report, *phrases, status=("failed", "error")):
    text = str(report)
    assert not report.passed and report.status in status, text
    assert "FAILED" in text
    for phrase in phrases:
        assert re.search(phrase, text), (phrase, text)
    assert "Traceback" not in text and "site-packages" not in text and len(text) < 600, text
    return text


# ----------------------------------------------------------------- notebook 03: direct_naive

_HI = "hi = p * sh + r * dil_h - ph"
_WI = "wi = q * sw + s * dil_w - pw"


def test_the_shipped_direct_kernel_passes(planted):
    report = editable.check_direct_naive(planted(direct.direct_naive_kernel))
    assert report.passed and str(report).startswith(
        "direct_naive_kernel, x (2, 3, 9, 7), w (4, 3, 3, 3), stride 2, padding 1: PASSED. "
        "all 160 outputs of y (2, 4, 5, 4) match the float64 reference"), str(report)


def test_a_correct_direct_kernel_written_differently_passes(planted):
    """p and q taken from i the other way round: every thread still writes its own output."""
    kernel = planted(direct.direct_naive_kernel,
                     ("    q = i % q_\n    p = (i // q_) % p_\n",
                      "    p = i % p_\n    q = (i // p_) % q_\n"))
    assert editable.check_direct_naive(kernel).passed


def test_a_forgotten_padding_is_named(planted):
    kernel = planted(direct.direct_naive_kernel, (_HI, "hi = p * sh + r * dil_h"),
                     (_WI, "wi = q * sw + s * dil_w"))
    _failed(editable.check_direct_naive(kernel), r"wrong values in \d+ of 160 outputs",
            "without its padding", "1 row and 1 column too far down and right",
            "subtract the padding")


def test_a_padding_forgotten_in_the_rows_only_is_named(planted):
    kernel = planted(direct.direct_naive_kernel, (_HI, "hi = p * sh + r * dil_h"))
    _failed(editable.check_direct_naive(kernel), "padding is left out of the row index")


def test_greater_for_greater_or_equal_names_the_line_the_index_and_the_bounds_test(planted):
    kernel = planted(direct.direct_naive_kernel,
                     ("if i >= n_ * k_ * p_ * q_:", "if i > n_ * k_ * p_ * q_:"))
    path = pathlib.Path(inspect.getsourcefile(kernel.py_func))
    line = path.read_text().splitlines().index(
        "                        acc += x[n, c, hi, wi] * w[k, c, r, s]") + 1
    text = _failed(editable.check_direct_naive(kernel),
                   rf"IndexError at line {line} of {path.name}: x\[n, c, hi, wi\] with n = 2 "
                   r"out of range 0\.\.1", "thread i = 160", "past the last of the 160",
                   r"`i > n_ \* k_ \* p_ \* q_` lets i = 160 through", "check the bounds test",
                   status=("error",))
    assert "tid=" not in text


def test_a_stride_off_by_one_is_named(planted):
    kernel = planted(direct.direct_naive_kernel, (_HI, "hi = p * (sh + 1) + r * dil_h - ph"))
    _failed(editable.check_direct_naive(kernel), "a stride of 3 x 2 gives, not 2 x 2",
            "stride of the rows")


def test_input_indices_in_the_wrong_order_are_named(planted):
    kernel = planted(direct.direct_naive_kernel, ("x[n, c, hi, wi]", "x[n, c, wi, hi]"))
    _failed(editable.check_direct_naive(kernel),
            r"x\[n, c, wi, hi\] with hi = [78] out of range 0\.\.6",
            "hi stands where x's w index goes", r"x is indexed \[n, c, h, w\]",
            "order of the indices")


def test_a_transposed_filter_is_named(planted):
    kernel = planted(direct.direct_naive_kernel, ("w[k, c, r, s]", "w[k, c, s, r]"))
    _failed(editable.check_direct_naive(kernel), "each filter transposed")


def test_a_forgotten_lower_bounds_test_is_named(planted):
    kernel = planted(direct.direct_naive_kernel, ("if hi >= 0 and hi < h_:", "if hi < h_:"))
    _failed(editable.check_direct_naive(kernel), "reads the last rows of x",
            "test `hi >= 0`")


@pytest.mark.slow
def test_a_float64_accumulator_fails_at_the_compiler(tmp_path):
    """`acc = 0.0` gives the right values; the compiler's FP64 instructions fail it."""
    try:
        compiled.compile_kernel(direct.direct_naive_kernel,
                                kernels.spec("direct_naive_kernel").argtypes, "sm_75")
    except compiled.CompilerUnavailable as exc:
        pytest.skip(f"no CUDA compiler here: {exc}")
    kernel = _plant(tmp_path, direct.direct_naive_kernel, ("acc = float32(0.0)", "acc = 0.0"))
    _failed(editable.check_direct_naive(kernel), "right values", "FP64|float64")


# ------------------------------------------------------------------------ notebook 04: im2col

_HW = "hi, wi = p * sh + r * dil_h - ph, q * sw + s * dil_w - pw"


def test_the_shipped_im2col_kernel_passes(planted):
    report = editable.check_im2col(planted(unroll.im2col_kernel))
    assert report.passed and "cols (27, 40) equals torch's unfold" in str(report), str(report)


def test_an_im2col_split_the_other_way_round_passes(planted):
    """Notebook 04's item 2: `row, col = i % nrows, i // nrows` is slower on a GPU, not wrong."""
    kernel = planted(unroll.im2col_kernel,
                     ("    row, col = i // ncols, i % ncols\n",
                      "    nrows = c_ * r_ * s_\n    row, col = i % nrows, i // nrows\n"))
    assert editable.check_im2col(kernel).passed


def test_a_deleted_else_branch_is_named_as_the_padding_never_written(planted):
    kernel = planted(unroll.im2col_kernel, ("    else:\n        cols[row, col] = float32(0.0)\n",
                                            ""))
    _failed(editable.check_im2col(kernel), r"elements never written: \d+ of 1,080 elements",
            "exactly the padding", "`else` branch must write 0")


def test_a_forgotten_im2col_padding_is_named(planted):
    kernel = planted(unroll.im2col_kernel,
                     (_HW, "hi, wi = p * sh + r * dil_h, q * sw + s * dil_w"))
    _failed(editable.check_im2col(kernel), "without its padding")


def test_greater_in_im2col_names_the_thread_past_the_end(planted):
    kernel = planted(unroll.im2col_kernel,
                     ("if i >= c_ * r_ * s_ * ncols:", "if i > c_ * r_ * s_ * ncols:"))
    _failed(editable.check_im2col(kernel), "IndexError at line \\d+ of cell_\\d+\\.py",
            "with (row = 27 out of range 0..26|c = 3 out of range 0..2)", "thread i = 1080",
            r"`i > c_ \* r_ \* s_ \* ncols` lets i = 1080 through", status=("error",))


def test_an_im2col_stride_off_by_one_is_named(planted):
    kernel = planted(unroll.im2col_kernel, (_HW, "hi, wi = p * sh + r * dil_h - ph, "
                                                 "q * (sw - 1) + s * dil_w - pw"))
    _failed(editable.check_im2col(kernel), "a stride of 2 x 1 gives, not 2 x 2",
            "stride of the columns")


def test_row_and_column_swapped_in_im2col_are_named(planted):
    kernel = planted(unroll.im2col_kernel, ("row, col = i // ncols, i % ncols",
                                            "row, col = i % ncols, i // ncols"))
    _failed(editable.check_im2col(kernel), "IndexError at line \\d+ of cell_\\d+\\.py",
            "check how i is split into row and col", status=("error",))


def test_window_rows_in_the_wrong_order_are_named(planted):
    kernel = planted(unroll.im2col_kernel, ("    s = row % s_\n    r = (row // s_) % r_\n",
                                            "    r = row % r_\n    s = (row // r_) % s_\n"))
    _failed(editable.check_im2col(kernel), r"the rows are in \(c, s, r\) order")


# ------------------------------------------------------------------------ notebook 01: ReLU


def test_the_shipped_relu_kernel_passes_and_a_leaky_one_with_its_slope(planted):
    assert editable.check_relu(planted(relu_kernel)).passed
    leaky = planted(relu_kernel, ("else 0", "else slope * x[i]"),
                    header="slope = np.float32(0.01)\n")
    report = editable.check_relu(leaky, np.float32(0.01))
    assert report.passed and "slope 0.01" in str(report), str(report)
    other = planted(relu_kernel, ("out[i] = x[i] if x[i] > 0 else 0",
                                  "out[i] = max(x[i], slope * x[i])"),
                    header="slope = np.float32(0.01)\n")
    assert editable.check_relu(other, np.float32(0.01)).passed


def test_a_relu_without_its_slope_is_named(planted):
    _failed(editable.check_relu(planted(relu_kernel), np.float32(0.01)),
            r"wrong values in \d+ of 1,001 outputs: they are a plain ReLU's",
            r"`else` branch must be `slope \* x\[i\]`")


def test_less_or_equal_in_the_relu_bounds_test_names_the_read_past_the_end(planted):
    kernel = planted(relu_kernel, ("if i < x.size:", "if i <= x.size:"))
    _failed(editable.check_relu(kernel), r"IndexError at line \d+ of cell_\d+\.py: x\[i\] "
            r"with i = 1001 out of range 0\.\.1000", r"`i <= x.size` lets i = 1001 through",
            status=("error",))


def test_threads_that_ignore_their_block_leave_outputs_unwritten(planted):
    kernel = planted(relu_kernel, ("i = cuda.grid(1)", "i = cuda.threadIdx.x"))
    _failed(editable.check_relu(kernel), "elements never written: 873 of 1,001 outputs "
            r"\(all but the first 128\)", "count the blocks too")


def test_one_element_short_names_the_last_output(planted):
    kernel = planted(relu_kernel, ("if i < x.size:", "if i < x.size - 1:"))
    _failed(editable.check_relu(kernel), r"elements never written: 1 of 1,001 outputs \(the "
            r"last one in memory order, flat index 1,000\)", "bounds test")


def test_a_function_without_cuda_jit_is_told_so():
    report = editable.check_relu(relu_kernel.py_func)
    assert report.status == "error" and "put @cuda.jit" in str(report)


# ----------------------------------------------------------------------- shared machinery


def test_positions_are_named_by_the_axis_they_vary_along():
    axes = cells._Y_AXES
    mask = np.zeros((2, 4, 5, 4), bool)
    mask[:, :, 4, :] = True
    assert describe_positions(mask, axes) == (
        "the last row (p = 4) of every output map", None)
    mask = np.zeros((2, 4, 5, 4), bool)
    mask[:, :, :, 0] = True
    assert describe_positions(mask, axes)[0] == "the first column (q = 0) of every output map"
    region = Region("the border", mask, "look at the border")
    assert describe_positions(mask, axes, [region]) == ("the border", "look at the border")
    flat = np.zeros(10, bool)
    flat[3:5] = True
    assert describe_positions(flat, [])[0] == "a run in memory order, flat indices 3..4"


def test_the_windows_are_torchs_unfold():
    import torch

    x = np.random.default_rng(0).standard_normal((2, 3, 9, 7)).astype(np.float32)
    win = cells.windows(x, 3, 3, 5, 4, (2, 2), (1, 1)).reshape(27, 40)
    want = torch.nn.functional.unfold(torch.from_numpy(x).double(), (3, 3), padding=1,
                                      stride=2).permute(1, 0, 2).reshape(27, 40).numpy()
    assert np.array_equal(win, want)


def test_a_misspelt_name_is_one_sentence_with_its_line(planted):
    kernel = planted(relu_kernel, ("else 0", "else slop * x[i]"))
    _failed(editable.check_relu(kernel), r"NameError at line \d+ of cell_\d+\.py "
            r"\(`out\[i\] = x\[i\] if x\[i\] > 0 else slop \* x\[i\]`\): name 'slop' is not "
            "defined", status=("error",))


def test_a_kernel_with_another_signature_did_not_run(planted):
    kernel = planted(relu_kernel, ("def relu_kernel(x, out):", "def relu_kernel(x, out, n):"))
    _failed(editable.check_relu(kernel), "your kernel did not run: TypeError: .*missing 1 "
            "required positional argument: 'n'", status=("error",))


def test_a_compiler_error_is_cut_to_the_line_that_says_what_is_wrong():
    """On a GPU a kernel that does not type-checks raises at the launch, with a long message:
    the sentence keeps what is wrong and the kernel's line."""
    import numba

    @numba.njit
    def kernel(x, out):
        i = 0
        out[i] = x[i] + "a"

    with pytest.raises(numba.core.errors.TypingError) as info:
        kernel(np.zeros(3), np.zeros(3))
    lines, first = inspect.getsourcelines(kernel.py_func)
    line = first + next(k for k, text in enumerate(lines) if '+ "a"' in text)
    text = verdict.explain_exception(info.value, kernel, work=3, noun="outputs",
                                     threads_total=3, layouts={}, fallback=str)
    assert text == ("your kernel did not run: TypingError: No implementation of function "
                    "Function(<built-in function add>) found for signature: add(float64, "
                    f"Literal[str](a)) (line {line} of test_editable_verdicts.py)"), text


@simulator_only
def test_a_write_past_the_end_of_an_output_is_caught_by_its_guard():
    """On a GPU nothing checks an index: a thread past the end writes into the guard after the
    output, and the launch says so. A stand-in kernel writes there as such a thread would."""

    class StrayWriter:
        py_func = None

        def __getitem__(self, config):
            return self.run

        @staticmethod
        def run(x, out):
            buffer = out._ary
            while buffer.base is not None:  # the view's buffer, guard included
                buffer = buffer.base
            buffer[: out.size] = 1.0
            buffer[out.size + 3] = 1.0

    with pytest.raises(verdict.KernelFailed, match=r"1 thread\(s\) wrote past the end of an "
                       r"output of 6 elements \(the first at flat index 9\): check the bounds"):
        verdict.launch(StrayWriter(), 1, 8, (np.ones(6, np.float32), verdict.Output((2, 3))),
                       explain=str)


@pytest.mark.parametrize("slope", [float("nan"), "0.01", None])
def test_a_slope_that_is_no_number_is_refused_by_name(slope):
    with pytest.raises(ValueError, match="slope must be a finite number"):
        editable.check_relu(relu_kernel, slope)
