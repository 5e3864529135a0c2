"""Lab 5's checker: it fails a stub and planted mistakes, and passes the solution's pick.

The solution below is that of ``labs/solutions/lab5_pick_the_fastest.ipynb``. The planted
mistakes: always None (the "zeros" of a choice), returning the input, the budget ignored,
the slowest picked, a refused or failed row picked, the budget compared with ``<`` (an
off-by-one border), the first fitting row taken (right only when the rows are sorted), ties
broken the wrong way, an unknown workspace taken as 0, rows sorted in place, a row returned
instead of its name.
"""

from __future__ import annotations

import pytest

from helpers.checks import lab5


# ------------------------------------------------------------------- the solution notebook's


def pick(rows, budget_bytes):
    candidates = [(row["median_ms"], row["workspace_bytes"], i, row["strategy"])
                  for i, row in enumerate(rows)
                  if row["status"] == "ok" and row["median_ms"] is not None
                  and row["workspace_bytes"] is not None
                  and row["workspace_bytes"] <= budget_bytes]
    if not candidates:
        return None
    return min(candidates)[3]


# ------------------------------------------------------------------------ planted mistakes


def fits(row, budget, strict=False, unknown_fits=False):
    ws = row["workspace_bytes"]
    if ws is None:
        return unknown_fits
    return ws < budget if strict else ws <= budget


def measured(row):
    return row["status"] == "ok" and row["median_ms"] is not None


def ignores_budget(rows, budget_bytes):
    ok = [r for r in rows if measured(r) and r["workspace_bytes"] is not None]
    return min(ok, key=lambda r: r["median_ms"])["strategy"] if ok else None


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
    assert any(r["workspace_bytes"] == c.budget_bytes for c in first for r in c.rows)
    shuffled = next(c for c in first if "no particular order" in c.title)
    times = [r["median_ms"] for r in shuffled.rows if r["status"] == "ok"]
    assert times != sorted(times) and shuffled.expected is not None
    fastest = min((r for r in shuffled.rows if r["status"] == "ok"), key=lambda r: r["median_ms"])
    assert fastest["workspace_bytes"] > shuffled.budget_bytes


def test_the_rules_are_published_for_the_lab():
    assert lab5.RULES.startswith("1.") and lab5.RULES.rstrip().endswith("(sort a copy).")
    assert "None" in lab5.RULES and '"ok"' in lab5.RULES


def test_the_failure_shows_the_rows_and_the_budget():
    report = lab5.check_pick(ignores_budget)
    assert "expected 'im2col-gemm', got 'fft'" in report.message
    assert "budget 32 MiB" in report.message and "fft" in report.message
