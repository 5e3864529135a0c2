"""Lab 5's checker: it fails a stub and planted mistakes, and passes the solution's pick.

The solution below is that of ``labs/solutions/lab5_pick_the_fastest.ipynb``. The planted
mistakes: always None (the "zeros" of a choice), returning the input, the budget ignored,
the workspace compared with the budget without the tensors, the smallest footprint picked
(memory alone), the slowest picked, a refused or failed row picked, the budget compared with
``<`` (an off-by-one border), the first fitting row taken (right only when the rows are
sorted), ties broken the wrong way, an unknown workspace taken as 0, rows sorted in place,
a row returned instead of its name; and in READINGS one wrong reading of one rule each (a
status that merely contains "ok", a workspace of 0 taken as unknown, ties by workspace or by
name in either order, ValueError or "" when nothing fits, rows marked or filtered in place).
"""

from __future__ import annotations

import pathlib
import sys

import pytest

from helpers.checks import lab5

MIB = 2**20
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))


# ------------------------------------------------------------------- the solution notebook's


def pick(rows, budget_bytes):
    candidates = [(row["median_ms"], row["tensor_bytes"] + row["workspace_bytes"], i,
                   row["strategy"])
                  for i, row in enumerate(rows)
                  if row["status"] == "ok" and row["median_ms"] is not None
                  and row["workspace_bytes"] is not None
                  and (budget_bytes is None      # None, and only None, is no limit
                       or row["tensor_bytes"] + row["workspace_bytes"] <= budget_bytes)]
    if not candidates:
        return None
    return min(candidates)[3]


# ------------------------------------------------------------------------ planted mistakes


def fits(row, budget, strict=False, unknown_fits=False, tensors=True):
    ws = row["workspace_bytes"]
    if ws is None:
        return unknown_fits
    if budget is None:
        return True
    need = ws + (row["tensor_bytes"] if tensors else 0)
    return need < budget if strict else need <= budget


def measured(row):
    return row["status"] == "ok" and row["median_ms"] is not None


def ignores_budget(rows, budget_bytes):
    ok = [r for r in rows if measured(r) and r["workspace_bytes"] is not None]
    return min(ok, key=lambda r: r["median_ms"])["strategy"] if ok else None


def workspace_only(rows, budget_bytes):
    ok = [r for r in rows if measured(r) and fits(r, budget_bytes, tensors=False)]
    return min(ok, key=lambda r: (r["median_ms"], r["workspace_bytes"]))["strategy"] if ok else None


def smallest_footprint(rows, budget_bytes):
    ok = [r for r in rows if measured(r) and fits(r, budget_bytes)]
    best = min(ok, key=lambda r: r["workspace_bytes"]) if ok else None
    return best and best["strategy"]


def picks_slowest(rows, budget_bytes):
    ok = [r for r in rows if measured(r) and fits(r, budget_bytes)]
    return max(ok, key=lambda r: r["median_ms"])["strategy"] if ok else None


def ignores_status(rows, budget_bytes):
    ok = [r for r in rows if r["median_ms"] is not None and fits(r, budget_bytes)]
    return min(ok, key=lambda r: r["median_ms"])["strategy"] if ok else None


def ignores_status_entirely(rows, budget_bytes):
    ok = [r for r in rows if fits(r, budget_bytes)]
    return min(ok, key=lambda r: r["median_ms"])["strategy"] if ok else None


def strict_budget(rows, budget_bytes):
    ok = [r for r in rows if measured(r) and fits(r, budget_bytes, strict=True)]
    return min(ok, key=lambda r: (r["median_ms"], r["workspace_bytes"]))["strategy"] if ok else None


def first_that_fits(rows, budget_bytes):
    for r in rows:
        if measured(r) and fits(r, budget_bytes):
            return r["strategy"]
    return None


def ties_to_the_last(rows, budget_bytes):
    best = None
    for r in rows:
        if measured(r) and fits(r, budget_bytes):
            if best is None or r["median_ms"] <= best["median_ms"]:
                best = r
    return best and best["strategy"]


def ties_ignore_workspace(rows, budget_bytes):
    ok = [r for r in rows if measured(r) and fits(r, budget_bytes)]
    return min(ok, key=lambda r: r["median_ms"])["strategy"] if ok else None


def unknown_workspace_fits(rows, budget_bytes):
    ok = [r for r in rows if measured(r) and fits(r, budget_bytes, unknown_fits=True)]
    best = min(ok, key=lambda r: (r["median_ms"], r["workspace_bytes"] or 0)) if ok else None
    return best and best["strategy"]



def best_by(key, keep=None, ties=min):
    """pick with another reading of a rule: ``key(i, row)`` orders the candidates (the right
    one: (median_ms, footprint, i)); ``keep(row, budget)`` replaces the candidate test."""
    def run(rows, budget_bytes):
        ok = [(i, r) for i, r in enumerate(rows)
              if (keep(r, budget_bytes) if keep else measured(r) and fits(r, budget_bytes))]
        return ties(ok, key=lambda ir: key(*ir))[1]["strategy"] if ok else None
    return run


def footprint(r):
    return r["tensor_bytes"] + r["workspace_bytes"]


def fits_with(status_ok, need=footprint, workspace_known=lambda r: r["workspace_bytes"]
              is not None):
    def keep(r, budget):
        return (status_ok(r["status"]) and r["median_ms"] is not None and workspace_known(r)
                and (budget is None or need(r) <= budget))
    return keep


def right_key(i, r):
    return r["median_ms"], footprint(r), i


def raises_when_nothing_fits(rows, budget_bytes):
    choice = pick(rows, budget_bytes)
    if choice is None:
        raise ValueError("no strategy fits the budget")
    return choice


def marks_the_rows(rows, budget_bytes):
    for r in rows:
        r["footprint"] = r["tensor_bytes"] + (r["workspace_bytes"] or 0)
    return pick(rows, budget_bytes)


def filters_in_place(rows, budget_bytes):
    rows[:] = [r for r in rows if r["status"] == "ok"]
    return pick(rows, budget_bytes)


#: Wrong readings of one rule each, written as the right pick with that one part changed.
READINGS = {
    # rule 1: which rows are candidates, and what fits
    "status: anything but 'failed...'": best_by(right_key, fits_with(
        lambda st: not st.startswith("failed"))),
    "status: contains 'ok'": best_by(right_key, fits_with(lambda st: "ok" in st)),
    "workspace known read as truthy (0 bytes taken as unknown)": best_by(right_key, fits_with(
        lambda st: st == "ok", workspace_known=lambda r: bool(r["workspace_bytes"]))),
    "the tensors alone compared with the budget": best_by(right_key, fits_with(
        lambda st: st == "ok", need=lambda r: r["tensor_bytes"])),
    "the larger of tensors and workspace compared": best_by(right_key, fits_with(
        lambda st: st == "ok", need=lambda r: max(r["tensor_bytes"], r["workspace_bytes"]))),
    # rules 2 and 3: the order of the candidates
    "ties go to the larger footprint": best_by(lambda i, r: (r["median_ms"], -footprint(r), i)),
    "ties by workspace, not footprint": best_by(
        lambda i, r: (r["median_ms"], r["workspace_bytes"], i)),
    "ties by name, alphabetically": best_by(
        lambda i, r: (r["median_ms"], footprint(r), r["strategy"])),
    "ties by name, reverse alphabetically": best_by(
        lambda i, r: (r["median_ms"], footprint(r), [-ord(ch) for ch in r["strategy"]])),
    "ties to the last row (max with reversed keys)": best_by(
        lambda i, r: (-r["median_ms"], -footprint(r), i), ties=max),
    "the footprint first, then the time": best_by(lambda i, r: (footprint(r), r["median_ms"], i)),
    # rule 1: the budget itself
    "a budget of 0 read as no limit (a truthiness test)": lambda rows, budget_bytes: pick(
        rows, budget_bytes or None),
    "a budget of None (no limit) not handled": lambda rows, budget_bytes: pick(
        rows, budget_bytes) if budget_bytes is not None else min(
        (r["tensor_bytes"] + r["workspace_bytes"] <= budget_bytes and r["strategy"]
         for r in rows if r["status"] == "ok" and r["workspace_bytes"] is not None)),
    # rule 4: nothing fits
    "raises ValueError when nothing fits": raises_when_nothing_fits,
    "an empty string when nothing fits": lambda rows, budget_bytes: pick(rows, budget_bytes) or "",
    # rule 5: rows untouched
    "a key added to every row": marks_the_rows,
    "rows filtered in place": filters_in_place,
}


def sorts_in_place(rows, budget_bytes):
    rows.sort(key=lambda r: (r["median_ms"] is None, r["median_ms"] or 0))
    return pick(rows, budget_bytes)


def returns_the_row(rows, budget_bytes):
    name = pick(rows, budget_bytes)
    return next((r for r in rows if r["strategy"] == name), None)


PLANTED = {
    "always None (zeros)": lambda rows, budget_bytes: None,
    "the input": lambda rows, budget_bytes: rows,
    "budget ignored": ignores_budget,
    "workspace compared without the tensors": workspace_only,
    "memory alone (the smallest footprint)": smallest_footprint,
    "the slowest": picks_slowest,
    "a failed row picked": ignores_status,
    "status ignored entirely": ignores_status_entirely,
    "budget compared with < (off by one)": strict_budget,
    "first fitting row (right only when sorted)": first_that_fits,
    "ties go to the last row": ties_to_the_last,
    "ties ignore the workspace": ties_ignore_workspace,
    "unknown workspace taken as 0": unknown_workspace_fits,
    "rows sorted in place": sorts_in_place,
    "a row returned instead of its name": returns_the_row,
    **READINGS,
}


def stub(rows, budget_bytes):
    raise NotImplementedError


def test_a_stub_is_not_implemented_yet():
    report = lab5.check_pick(stub)
    assert not report and report.status == "not implemented" and report.cases_run == 0
    assert "not implemented yet" in report._repr_html_()


@pytest.mark.parametrize("name", PLANTED)
def test_a_planted_mistake_fails_with_the_case(name):
    report = lab5.check_pick(PLANTED[name])
    assert not report and report.status in ("failed", "error"), (name, str(report))
    assert "on case '" in report.message and "budget" in report.message


def test_the_solution_passes_every_case():
    report = lab5.check_pick(pick)
    assert report and report.status == "passed", str(report)
    assert report.cases_run == len(lab5.pick_cases())


def test_the_cases_are_deterministic_and_cover_the_rules():
    first, second = lab5.pick_cases(), lab5.pick_cases()
    assert [(c.rows, c.budget_bytes, c.expected) for c in first] == \
           [(c.rows, c.budget_bytes, c.expected) for c in second]
    assert any(c.expected is None and c.rows for c in first)              # nothing fits
    assert any(not c.rows for c in first)                                 # no rows
    assert any(r["status"] != "ok" and r["median_ms"] is not None
               for c in first for r in c.rows)                            # failed but timed
    assert any(r["workspace_bytes"] is not None
               and r["tensor_bytes"] + r["workspace_bytes"] == c.budget_bytes
               for c in first for r in c.rows)
    shuffled = next(c for c in first if "no particular order" in c.title)
    times = [r["median_ms"] for r in shuffled.rows if r["status"] == "ok"]
    assert times != sorted(times) and shuffled.expected is not None
    fastest = min((r for r in shuffled.rows if r["status"] == "ok"), key=lambda r: r["median_ms"])
    assert fastest["workspace_bytes"] > shuffled.budget_bytes


def test_the_rules_are_published_for_the_lab():
    assert lab5.RULES.startswith("1.") and lab5.RULES.rstrip().endswith("(sort a copy).")
    assert "None" in lab5.RULES and '"ok"' in lab5.RULES


#: The case that must catch a reading (the first case where its answer differs).
CAUGHT_BY = {
    "status: anything but 'failed...'": "not exactly 'ok'",
    "status: contains 'ok'": "not exactly 'ok'",
    "workspace known read as truthy (0 bytes taken as unknown)": "fits alone but not with",
    "ties by workspace, not footprint": "not the smaller workspace",
    "ties by name, alphabetically": "reverse alphabetical order",
    "ties by name, reverse alphabetically": "a tie in time and footprint: the first row wins",
    "ties to the last row (max with reversed keys)": "the first row wins",
    "ties go to the larger footprint": "the smaller footprint",
    "first fitting row (right only when sorted)": "the fastest, not the smallest",
    "rows sorted in place": "three strategies, all fit",
    "raises ValueError when nothing fits": "nothing fits",
    "a budget of 0 read as no limit (a truthiness test)": "a budget of 0 bytes",
    "a budget of None (no limit) not handled": "budget_bytes None: no limit",
}


@pytest.mark.parametrize("name", CAUGHT_BY)
def test_a_wrong_reading_fails_on_the_case_built_for_it(name):
    report = lab5.check_pick(PLANTED[name])
    assert not report and CAUGHT_BY[name] in report.message.splitlines()[0], report.message


def test_ties_by_name_would_pass_without_the_tie_cases_in_other_orders():
    """The tie cases are needed: without the ones whose row order is not alphabetical, a pick
    that breaks ties by name gives every answer right."""
    alphabetical = READINGS["ties by name, alphabetically"]
    differs = [c.title for c in lab5.pick_cases()
               if alphabetical([dict(r) for r in c.rows], c.budget_bytes) != c.expected]
    assert differs and all("tie" in title for title in differs), differs


def test_a_budget_of_zero_fits_nothing_and_only_none_is_no_limit():
    """0 is a budget (nothing fits in it); None, and only None, means no limit: a pick that
    reads 0 as no limit fails on the case built for it, and one that cannot take None is told
    what None means."""
    zero = next(c for c in lab5.pick_cases() if c.budget_bytes == 0)
    assert zero.expected is None and pick(zero.rows, None) is not None
    free = next(c for c in lab5.pick_cases() if c.budget_bytes is None)
    assert free.expected == "fft"
    assert lab5.reference_pick(free.rows, 64 * MIB) != free.expected   # a limit changes it
    report = lab5.check_pick(PLANTED["a budget of 0 read as no limit (a truthiness test)"])
    assert report.status == "failed" and "expected None, got 'im2col-gemm'" in report.message
    assert "budget 0 MiB" in report.message and "a budget of 0 fits nothing" in report.message
    report = lab5.check_pick(PLANTED["a budget of None (no limit) not handled"])
    assert report.status == "error" and "TypeError" in report.message
    assert "budget None (no limit)" in report.message
    assert "budget_bytes None means no limit (rule 1)" in report.message
    assert "only None means no limit" in lab5.RULES.replace("\n   ", " ")


@pytest.mark.parametrize("budget", [-1, True, "1 GiB", float("nan")])
def test_the_reference_refuses_a_budget_that_is_not_bytes(budget):
    with pytest.raises(ValueError, match="budget_bytes"):
        lab5.reference_pick([], budget)


def test_the_failure_shows_the_rows_and_the_budget():
    report = lab5.check_pick(ignores_budget)
    assert "expected 'im2col-gemm', got 'fft'" in report.message
    assert "budget 32 MiB" in report.message and "fft" in report.message


@pytest.mark.parametrize("wrong", [ignores_budget, workspace_only, smallest_footprint])
def test_each_wrong_reading_of_the_budget_has_a_case_with_another_answer(wrong):
    """The rule is enforced: for each plausible wrong reading some case's answer differs."""
    differs = [c.title for c in lab5.pick_cases()
               if wrong([dict(r) for r in c.rows], c.budget_bytes) != c.expected]
    assert differs, wrong.__name__


def test_the_workspace_only_reading_fails_on_the_study_layer():
    report = lab5.check_pick(workspace_only)
    assert "workspace that fits alone" in report.message
    case = next(c for c in lab5.pick_cases() if "Conv1 at batch 128" in c.title)
    assert workspace_only(case.rows, case.budget_bytes) == "fft" and case.expected == "direct-naive"


def test_tensor_bytes_counts_input_filters_and_output():
    cfg = lab5.TABLE_I[0]                       # (128, 3, 128, 128) * (96, 3, 11, 11)
    assert lab5.tensor_bytes(cfg) == 4 * (128 * 3 * 128 * 128 + 96 * 3 * 11 * 11
                                          + 128 * 96 * 118 * 118)
    rows = [{"strategy": "fft"}]
    out = lab5.with_tensor_bytes(rows, cfg)
    assert out[0]["tensor_bytes"] == lab5.tensor_bytes(cfg) and "tensor_bytes" not in rows[0]


def test_table1_rows_prefers_a_recorded_gpu_run(tmp_path):
    from synthetic_results import GPU_NAME, make_synthetic_results

    make_synthetic_results(tmp_path)            # GPU runs at batch 128 and at batch 1
    got = lab5.table1_rows("cpu", directory=tmp_path)
    assert got.basis == "recorded" and GPU_NAME in got.device and GPU_NAME in got.note
    assert set(got.rows) == {layer.name for layer in lab5.TABLE_I}
    conv1 = {r["strategy"]: r for r in got.rows["Conv1"]}
    assert "direct-naive" in conv1 and conv1["direct-naive"]["median_ms"] > 0
    assert conv1["fft"]["tensor_bytes"] == lab5.tensor_bytes(lab5.TABLE_I[0])
    assert conv1["fft"]["workspace_bytes"] == lab5.STRATEGIES["fft"].workspace_bytes(
        lab5.TABLE_I[0], False)
    assert lab5.table1_rows("cpu", directory=tmp_path / "empty", strategies=["im2col-gemm"],
                            min_run_time=0.01).basis == "estimated"


def test_a_row_that_did_not_run_has_no_footprint(tmp_path):
    """Winograd takes 3 x 3 kernels only: at Conv1 (11 x 11) it is refused, and its analytic
    workspace there (about 24 GiB) must not be shown or counted."""
    got = lab5.table1_rows("cpu", directory=tmp_path, strategies=["winograd"],
                           min_run_time=0.01)
    conv1, conv5 = got.rows["Conv1"][0], got.rows["Conv5"][0]
    assert conv1["status"].startswith("Winograd") and conv1["workspace_bytes"] is None
    assert lab5.STRATEGIES["winograd"].workspace_bytes(lab5.TABLE_I[0], False) > 2**34
    assert conv5["status"] == "ok" and conv5["workspace_bytes"] > 0


def test_table1_rows_estimates_on_the_cpu_when_nothing_is_recorded(tmp_path):
    got = lab5.table1_rows("cpu", directory=tmp_path, strategies=["im2col-gemm"],
                           min_run_time=0.01)
    assert got.basis == "estimated" and "times 128" in got.note
    row = got.rows["Conv4"][0]
    assert row["status"] == "ok" and row["median_ms"] > 0
    assert row["workspace_bytes"] == lab5.STRATEGIES["im2col-gemm"].workspace_bytes(
        lab5.TABLE_I[3], False)
    with pytest.raises(ValueError, match="device"):
        lab5.table1_rows("tpu")
