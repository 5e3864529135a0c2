"""helpers.checks.lab10: the 2-D blocktiling checker passes the solution, says "not implemented
yet" for the stub, and fails planted wrong rungs with a message that names each mistake.

Planted: the lab's 1-D kernel passed off as the answer, and the 1-D idea stretched to 64
threads (16 results of one column a thread: right values, 1-D reuse); a 2-D tile that reads
a_s / b_s inside the i-j loop; a float literal in the loads (float64 on a GPU); a register-tile
loop bounded at run time, and a register index computed from the thread (local memory); the
last partial K tile dropped, and tiles not zero-filled; one barrier per step along K; stores
without bounds checks; a register tile straight from global memory (no shared memory); a
2 x 8 thread tile. The solution and the 1-D kernel are written here exactly as in
labs/solutions/lab10_blocktiling.ipynb.
"""

from __future__ import annotations

import helpers  # noqa: F401  (decides simulator vs GPU before numba.cuda is imported)
import inspect
import json
import pathlib

import numpy as np
import pytest
from numba import cuda, float32

from helpers import compiled
from helpers.checks import lab10
from helpers.checks.lab10 import (
    A_TILE,
    B_TILE,
    BK,
    BM,
    BN,
    THREADS,
    THREADS_1D,
    TM,
    TN,
    check_blocktile_2d,
    run_blocktile,
)
from helpers.device import backend

ROOT = pathlib.Path(__file__).resolve().parents[1]
COLS = BN // TN       # threads along a row of the block's tile (8)
R = TM * TN           # results a thread (16)

# ------------------------------------------------------------------ the lab's kernels


@cuda.jit
def gemm_blocktile_1d_kernel(a, b, c, m, n, k):
    """c = a @ b (flat row-major); THREADS_1D threads, TM results of one column each."""
    a_s = cuda.shared.array(A_TILE, float32)   # A's tile, row-major (BM, BK)
    b_s = cuda.shared.array(B_TILE, float32)   # B's tile, row-major (BK, BN)
    t = cuda.threadIdx.x
    row0 = cuda.blockIdx.y * BM                # the block's first row and column of C
    col0 = cuda.blockIdx.x * BN
    trow = (t // BN) * TM                      # this thread's first row in the tile
    tcol = t % BN                              # and its column
    ar, ac = t // BK, t % BK                   # the element of A's tile this thread loads
    br, bc = t // BN, t % BN                   # and of B's
    acc = cuda.local.array(TM, float32)        # TM registers
    for i in range(TM):
        acc[i] = float32(0.0)
    for k0 in range(0, k, BK):
        v = float32(0.0)
        if row0 + ar < m and k0 + ac < k:
            v = a[(row0 + ar) * k + k0 + ac]
        a_s[t] = v                             # t == ar * BK + ac
        v = float32(0.0)
        if k0 + br < k and col0 + bc < n:
            v = b[(k0 + br) * n + col0 + bc]
        b_s[t] = v                             # t == br * BN + bc
        cuda.syncthreads()                     # 1: both tiles complete
        for d in range(BK):
            bv = b_s[d * BN + tcol]            # one load of B ...
            for i in range(TM):                # ... reused TM times
                acc[i] += a_s[(trow + i) * BK + d] * bv
        cuda.syncthreads()                     # 2: all read before the next tiles
    col = col0 + tcol
    for i in range(TM):
        row = row0 + trow + i
        if row < m and col < n:
            c[row * n + col] = acc[i]


@cuda.jit
def gemm_blocktile_2d_kernel(a, b, c, m, n, k):
    """c = a @ b (flat row-major); THREADS threads, a TM x TN register tile each."""
    a_s = cuda.shared.array(A_TILE, float32)   # A's tile, row-major (BM, BK)
    b_s = cuda.shared.array(B_TILE, float32)   # B's tile, row-major (BK, BN)
    t = cuda.threadIdx.x
    row0 = cuda.blockIdx.y * BM
    col0 = cuda.blockIdx.x * BN
    trow = (t // (BN // TN)) * TM              # this thread's first row and column in the tile
    tcol = (t % (BN // TN)) * TN
    acc = cuda.local.array((TM, TN), float32)  # the register tile
    a_r = cuda.local.array(TM, float32)        # a column of A's tile, in registers
    b_r = cuda.local.array(TN, float32)        # a row of B's tile, in registers
    for i in range(TM):
        for j in range(TN):
            acc[i, j] = float32(0.0)
    for k0 in range(0, k, BK):
        for l in range(A_TILE // THREADS):     # each thread copies A_TILE // THREADS of A
            e = t + l * THREADS
            r, q = e // BK, e % BK
            v = float32(0.0)
            if row0 + r < m and k0 + q < k:
                v = a[(row0 + r) * k + k0 + q]
            a_s[e] = v
        for l in range(B_TILE // THREADS):     # and B_TILE // THREADS of B
            e = t + l * THREADS
            r, q = e // BN, e % BN
            v = float32(0.0)
            if k0 + r < k and col0 + q < n:
                v = b[(k0 + r) * n + col0 + q]
            b_s[e] = v
        cuda.syncthreads()                     # 1: both tiles complete
        for d in range(BK):
            for i in range(TM):                # TM loads of A ...
                a_r[i] = a_s[(trow + i) * BK + d]
            for j in range(TN):                # ... and TN of B ...
                b_r[j] = b_s[d * BN + tcol + j]
            for i in range(TM):                # ... for TM * TN FMAs
                for j in range(TN):
                    acc[i, j] += a_r[i] * b_r[j]
        cuda.syncthreads()                     # 2: all read before the next tiles
    for i in range(TM):
        row = row0 + trow + i
        for j in range(TN):
            col = col0 + tcol + j
            if row < m and col < n:
                c[row * n + col] = acc[i, j]


@cuda.jit
def stub(a, b, c, m, n, k):
    raise NotImplementedError("TODO: write the 2-D blocktiling kernel")


# -------------------------------------------------------------------------- planted kernels


@cuda.jit
def one_column_of_16(a, b, c, m, n, k):  # 1-D stretched to 64 threads: R rows of one column
    a_s = cuda.shared.array(A_TILE, float32)
    b_s = cuda.shared.array(B_TILE, float32)
    t = cuda.threadIdx.x
    row0 = cuda.blockIdx.y * BM
    col0 = cuda.blockIdx.x * BN
    trow = (t // BN) * R
    tcol = t % BN
    acc = cuda.local.array(R, float32)
    for i in range(R):
        acc[i] = float32(0.0)
    for k0 in range(0, k, BK):
        for l in range(A_TILE // THREADS):
            e = t + l * THREADS
            r, q = e // BK, e % BK
            v = float32(0.0)
            if row0 + r < m and k0 + q < k:
                v = a[(row0 + r) * k + k0 + q]
            a_s[e] = v
        for l in range(B_TILE // THREADS):
            e = t + l * THREADS
            r, q = e // BN, e % BN
            v = float32(0.0)
            if k0 + r < k and col0 + q < n:
                v = b[(k0 + r) * n + col0 + q]
            b_s[e] = v
        cuda.syncthreads()
        for d in range(BK):
            bv = b_s[d * BN + tcol]
            for i in range(R):
                acc[i] += a_s[(trow + i) * BK + d] * bv
        cuda.syncthreads()
    for i in range(R):
        row = row0 + trow + i
        if row < m and col0 + tcol < n:
            c[row * n + col0 + tcol] = acc[i]


def _variant(name: str, replacements: list[tuple[str, str]], namespace: dict | None = None):
    """The solution's source with ``replacements`` (each must apply), compiled as a new
    kernel ``name`` in this module (so that the compiler sees its source)."""
    source = inspect.getsource(gemm_blocktile_2d_kernel.py_func)
    for old, new in replacements:
        assert old in source, old
        source = source.replace(old, new)
    source = source.replace("def gemm_blocktile_2d_kernel(", f"def {name}(")
    path = ROOT / "tests" / f"_lab10_{name}.py"
    code = compile(source, str(path), "exec")
    import linecache

    linecache.cache[str(path)] = (len(source), None, source.splitlines(True), str(path))
    scope = dict(globals(), **(namespace or {}))
    exec(code, scope)  # noqa: S102 - a planted kernel, from this file's own source
    return scope[name]


_FMA = """            for i in range(TM):                # TM loads of A ...
                a_r[i] = a_s[(trow + i) * BK + d]
            for j in range(TN):                # ... and TN of B ...
                b_r[j] = b_s[d * BN + tcol + j]
            for i in range(TM):                # ... for TM * TN FMAs
                for j in range(TN):
                    acc[i, j] += a_r[i] * b_r[j]"""

shared_in_the_fma = _variant("shared_in_the_fma", [(_FMA, """            for i in range(TM):
                for j in range(TN):
                    acc[i, j] += a_s[(trow + i) * BK + d] * b_s[d * BN + tcol + j]""")])

float_literal_in_the_loads = _variant("float_literal_in_the_loads", [
    ("""            v = float32(0.0)
            if row0 + r < m and k0 + q < k:""", """            v = 0.0
            if row0 + r < m and k0 + q < k:""")])

fma_loop_bounded_at_run_time = _variant("fma_loop_bounded_at_run_time", [
    ("""            for i in range(TM):                # ... for TM * TN FMAs""",
     """            for i in range(min(TM, m - row0 - trow)):   # no FMAs for rows past C""")])

register_index_from_the_thread = _variant("register_index_from_the_thread", [
    ("""                for j in range(TN):
                    acc[i, j] += a_r[i] * b_r[j]""", """                for j in range(TN):
                    jj = (j + t) % TN                  # rotated by the thread
                    acc[i, jj] += a_r[i] * b_r[jj]""")])

drops_the_partial_k_tile = _variant("drops_the_partial_k_tile", [
    ("for k0 in range(0, k, BK):", "for k0 in range(0, k - k % BK, BK):")])

tiles_not_zero_filled = _variant("tiles_not_zero_filled", [
    ("""            v = float32(0.0)
            if row0 + r < m and k0 + q < k:
                v = a[(row0 + r) * k + k0 + q]
            a_s[e] = v""", """            if row0 + r < m and k0 + q < k:
                a_s[e] = a[(row0 + r) * k + k0 + q]"""),
    ("""            v = float32(0.0)
            if k0 + r < k and col0 + q < n:
                v = b[(k0 + r) * n + col0 + q]
            b_s[e] = v""", """            if k0 + r < k and col0 + q < n:
                b_s[e] = b[(k0 + r) * n + col0 + q]""")])

one_barrier_a_step = _variant("one_barrier_a_step", [
    ("""        cuda.syncthreads()                     # 2: all read before the next tiles
""", "")])

stores_unguarded = _variant("stores_unguarded", [
    ("""            if row < m and col < n:
                c[row * n + col] = acc[i, j]""", """            c[row * n + col] = acc[i, j]""")])


@cuda.jit
def no_shared_memory(a, b, c, m, n, k):  # the register tile filled straight from global memory
    t = cuda.threadIdx.x
    trow = cuda.blockIdx.y * BM + (t // COLS) * TM
    tcol = cuda.blockIdx.x * BN + (t % COLS) * TN
    acc = cuda.local.array((TM, TN), float32)
    a_r = cuda.local.array(TM, float32)
    b_r = cuda.local.array(TN, float32)
    for i in range(TM):
        for j in range(TN):
            acc[i, j] = float32(0.0)
    for d in range(k):
        for i in range(TM):
            a_r[i] = a[(trow + i) * k + d] if trow + i < m else float32(0.0)
        for j in range(TN):
            b_r[j] = b[d * n + tcol + j] if tcol + j < n else float32(0.0)
        for i in range(TM):
            for j in range(TN):
                acc[i, j] += a_r[i] * b_r[j]
    for i in range(TM):
        for j in range(TN):
            if trow + i < m and tcol + j < n:
                c[(trow + i) * n + tcol + j] = acc[i, j]


two_by_eight = _variant("two_by_eight", [
    ("(TM, TN)", "(TM2, TN2)"), ("local.array(TM, float32)", "local.array(TM2, float32)"),
    ("local.array(TN, float32)", "local.array(TN2, float32)"),
    ("range(TM)", "range(TM2)"), ("range(TN)", "range(TN2)"),
    ("(t // (BN // TN)) * TM", "(t // (BN // TN2)) * TM2"),
    ("(t % (BN // TN)) * TN", "(t % (BN // TN2)) * TN2")], {"TM2": 2, "TN2": 8})

#: name -> (kernel, a phrase the report must hold). Each is a plausible wrong reading of the rung.
WRONG = {
    "the lab's 1-D kernel passed off as the answer": (gemm_blocktile_1d_kernel,
                                                      "TM / (TM + 1): that is the 1-D kernel"),
    "1-D stretched to 64 threads (16 rows of a column)": (one_column_of_16,
                                                           "that is still 1-D blocktiling"),
    "a_s and b_s read inside the i-j loop": (shared_in_the_fma,
                                             "you load from shared memory inside the i-j loop"),
    "a float literal (float64) in the loads": (float_literal_in_the_loads,
                                               "`v = float32(0.0)`"),
    "the FMA loop bounded at run time": (fma_loop_bounded_at_run_time,
                                         "your register tile went to local memory"),
    "a register index computed from the thread": (register_index_from_the_thread,
                                                  "your register tile went to local memory"),
    "the last partial K tile dropped": (drops_the_partial_k_tile, "max error"),
    "tiles not zero-filled": (tiles_not_zero_filled, "max error"),
    "one barrier a step along K": (one_barrier_a_step, "1 barrier (bar.sync)"),
    "stores without bounds checks": (stores_unguarded, "wrote outside C"),
    "no shared memory": (no_shared_memory, "it uses no shared memory"),
    "a 2 x 8 thread tile": (two_by_eight, "2 x 8 gives 16 / 10"),
}


@pytest.mark.each_python
@pytest.mark.slow
def test_the_solution_passes_every_rule():
    report = check_blocktile_2d(gemm_blocktile_2d_kernel)
    assert report.passed and report.status == "passed", report
    assert report.cases_run == len(lab10.blocktile_shapes())
    assert "no local memory, 2.0 FFMA per shared-memory load, 2 barriers" in report.message


def test_the_stub_is_not_implemented_yet():
    report = check_blocktile_2d(stub)
    assert report.status == "not implemented" and "NOT IMPLEMENTED YET" in str(report)


def test_a_plain_function_is_named_as_not_a_kernel():
    report = check_blocktile_2d(gemm_blocktile_2d_kernel.py_func)
    assert report.status == "error" and "@cuda.jit" in report.message


@pytest.mark.parametrize("planted", sorted(WRONG))
@pytest.mark.slow
def test_planted_wrong_rungs_fail_naming_the_mistake(planted):
    kernel, phrase = WRONG[planted]
    report = check_blocktile_2d(kernel)
    assert not report and report.status == "failed", report
    assert phrase in report.message, report.message


@pytest.mark.slow
def test_the_right_values_without_the_property_fail_after_every_case():
    """The 1-D reuse, the shared reads in the FMA, the stack and the missing shared memory
    give the right C in every case: only the compiler's report tells them from the rung."""
    for kernel in (one_column_of_16, shared_in_the_fma, fma_loop_bounded_at_run_time,
                   no_shared_memory, two_by_eight):
        report = check_blocktile_2d(kernel)
        assert report.cases_run == len(lab10.blocktile_shapes()), report
        assert report.message.startswith("your kernel gives the right C in all 6 cases, but")


@pytest.mark.slow
def test_the_partial_k_case_names_its_hint():
    for kernel in (drops_the_partial_k_tile, tiles_not_zero_filled):
        report = check_blocktile_2d(kernel)
        assert report.cases_run == 2 and "K % BK = 5" in report.message, report
        assert "Hint: the last step along K covers only K % BK columns" in report.message


@pytest.mark.slow
def test_the_missing_barrier_is_named_whether_or_not_the_simulator_shows_the_race():
    report = check_blocktile_2d(one_barrier_a_step)
    assert "each step along K needs two" in report.message
    if report.cases_run < len(lab10.blocktile_shapes()):   # the race showed: a note says why
        assert "\nNote: this is likely why: your kernel's PTX has 1 barrier" in report.message


@pytest.mark.slow
def test_the_1d_kernel_is_right_with_its_own_launch():
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((37, 21)), rng.standard_normal((21, 29))
    c = run_blocktile(gemm_blocktile_1d_kernel, a, b, threads=THREADS_1D)
    np.testing.assert_allclose(c, a @ b, rtol=1e-5, atol=1e-5)
    report = check_blocktile_2d(gemm_blocktile_1d_kernel)
    assert "NaN" in report.message and f"THREADS_1D = {THREADS_1D} threads" in report.message


@pytest.mark.parametrize("ratio, phrase", [
    (0.5, "you load from shared memory inside the i-j loop"),
    (TM / (TM + 1), "that is still 1-D blocktiling"),
    (R / (R + 1), "that is still 1-D blocktiling"),
    (1.6, "2 x 8 gives 16 / 10"),
])
def test_each_ratio_band_names_its_mistake(ratio, phrase):
    """The bands of FFMA per shared load: two loads per FMA (0.5), 1-D reuse (R / (R + 1)),
    a thinner rectangle (1.6 for 2 x 8)."""
    assert phrase in lab10._ratio_message(ratio)
    assert lab10.MIN_FFMA_PER_SHARED_LOAD == pytest.approx(2.0)


# -------------------------------------------------------------------------- run_blocktile


def test_run_blocktile_returns_c_and_nan_where_unwritten():
    rng = np.random.default_rng(1)
    a, b = rng.standard_normal((5, 6)), rng.standard_normal((6, 3))
    c = run_blocktile(gemm_blocktile_2d_kernel, a, b)
    assert c.dtype == np.float32 and c.shape == (5, 3)
    np.testing.assert_allclose(c, a @ b, rtol=1e-5, atol=1e-5)
    half = run_blocktile(gemm_blocktile_1d_kernel, np.ones((20, 3)), np.ones((3, 4)))
    assert np.isnan(half[8:]).all()    # 64 threads of a 1-D kernel write rows 0..7 only


def test_run_blocktile_names_a_write_outside_c():
    with pytest.raises(IndexError, match="wrote outside C"):
        run_blocktile(stores_unguarded, np.ones((3, 3)), np.ones((3, 3)))


def test_a_write_past_c_is_found_in_the_nan_guard():
    """On a GPU nothing checks a flat view's bounds: a write past C lands in the NaN guard
    that run_blocktile puts after it, and written_inside names the first one."""
    from helpers.checks.lab2 import written_inside

    buf = np.full(5 * 4, np.nan, np.float32)
    buf[:3 * 4] = 1.0
    buf[13] = 2.0                              # c[13]: row 3 of a C that has 3 rows
    with pytest.raises(IndexError, match=r"wrote outside C \(3 x 4\): 1 element\(s\), the "
                                         r"first at c\[3, 1\]"):
        written_inside(buf.reshape(5, 4), 3, 4, "C", "c")


@pytest.mark.parametrize("a_shape, b_shape, threads, text", [
    ((3, 4), (5, 2), THREADS, "inner dimensions differ"),
    ((3,), (3, 2), THREADS, "2-D"),
    ((3, 4), (4, 2), 0, "threads must be"),
    ((3, 4), (4, 2), 2048, "threads must be"),
])
def test_run_blocktile_refuses_bad_input(a_shape, b_shape, threads, text):
    with pytest.raises(ValueError, match=text):
        run_blocktile(gemm_blocktile_2d_kernel, np.ones(a_shape), np.ones(b_shape), threads)


def test_run_blocktile_refuses_a_size_too_large_for_the_simulator():
    if backend.MODE != "simulator":
        pytest.skip("no limit on a GPU")
    with pytest.raises(ValueError, match="simulator"):
        run_blocktile(gemm_blocktile_2d_kernel, np.ones((300, 4)), np.ones((4, 300)))


def test_run_blocktile_names_a_stub_and_a_plain_function():
    with pytest.raises(NotImplementedError):
        run_blocktile(stub, np.ones((2, 2)), np.ones((2, 2)))
    with pytest.raises(TypeError, match="cuda.jit"):
        run_blocktile(gemm_blocktile_2d_kernel.py_func, np.ones((2, 2)), np.ones((2, 2)))


def test_the_cases_cover_the_awkward_shapes():
    shapes = [(m, k, n) for m, k, n, _, _ in lab10.blocktile_shapes()]
    assert shapes[0][0] % BM == 0 and shapes[0][1] % BK == 0 and shapes[0][2] % BN == 0
    assert (1, 1, 1) in shapes
    assert any(k % BK and not m % BM and not n % BN for m, k, n in shapes)  # partial K only
    assert any(m % BM and n % BN and k % BK for m, k, n in shapes)          # nothing a multiple
    assert any(m < BM and n < BN for m, k, n in shapes)
    for case, _ in lab10._cases():
        assert np.abs(case.expected).max() > 0


# ----------------------------------------------------------------- the compiler's table


@pytest.mark.each_python
def test_compiled_rows_show_the_rung_the_lab_teaches():
    rows = lab10.compiled_rows({"1-D": (gemm_blocktile_1d_kernel, THREADS_1D),
                                "2-D": (gemm_blocktile_2d_kernel, THREADS)}, ("sm_75",))
    by = {r["label"]: r for r in rows}
    assert by["1-D"]["ffma_per_shared_load"] == pytest.approx(TM / (TM + 1))
    assert by["2-D"]["ffma_per_shared_load"] == pytest.approx(TM * TN / (TM + TN))
    assert by["1-D"]["barriers"] == by["2-D"]["barriers"] == 2
    # The same 32 x 32 block tile: the same FMAs per global load, BM * BN / (BM + BN).
    assert by["1-D"]["ffma_per_global_load"] == by["2-D"]["ffma_per_global_load"] == 16
    assert by["1-D"]["stack_bytes"] == by["2-D"]["stack_bytes"] == 0


@pytest.mark.each_python
def test_two_barriers_a_step_are_two_in_the_ptx():
    """The loop along K holds two cuda.syncthreads(): two barrier instructions in the PTX (the
    loop is not unrolled, its trip count being a run-time value); one when one is left out."""
    two, one = compiled.compile_many([compiled.Job(kern, lab10.KERNEL_ARGTYPES, "sm_75")
                                      for kern in (gemm_blocktile_2d_kernel, one_barrier_a_step)])
    assert (two.mix.barriers, one.mix.barriers) == (2, 1)


def test_the_kernels_here_are_the_lab_solutions():
    nb = json.loads((ROOT / "labs" / "solutions" / "lab10_blocktiling.ipynb").read_text())
    cells = ["".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code"]
    for kernel in (gemm_blocktile_1d_kernel, gemm_blocktile_2d_kernel):
        body = inspect.getsource(kernel.py_func).split('"""')[-1].rstrip()
        assert any(body in cell for cell in cells), kernel.__name__
