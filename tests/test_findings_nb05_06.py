"""The sweep's findings and summary texts (notebooks 05 and 06): computed from the rows, the
study's numbers read from helpers.paper; and the two notebooks' predict-then-run moments."""

from __future__ import annotations

import pathlib
import re

import nbformat
import pytest

import helpers  # noqa: F401
from helpers import paper
from helpers.experiments import sweep
from helpers.experiments.sweep import analysis as sweep_findings

ROOT = pathlib.Path(__file__).resolve().parents[1]


def _row(sweep_name, x, strategy, ms, ws=None, device="CPU: test", **cfg):
    base = dict(b=2, i=32, f=16, k=11, s=1, c=3)
    key = {"kernel": "k", "stride": "s"}.get(sweep_name)
    if key:
        base[key] = x
    base.update(cfg)
    return dict(preset="t", sweep=sweep_name, x=x, layer="", padding=0, strategy=strategy,
                family="", device=device, **{"pass": "forward+backward"}, median_ms=ms,
                iqr_ms=0.0, gflop_per_s=1.0, flops=1, workspace_bytes=ws, peak_bytes=None,
                status="ok" if ms is not None else "refused", **base)


def _rows():
    """fft flat at 10 ms; the library 2 ms at k = 1 growing to 30 ms at k = 15; im2col slower."""
    rows = []
    for k, lib in ((1, 2.0), (3, 4.0), (11, 20.0), (15, 30.0)):
        rows += [_row("kernel", k, "fft", 10.0, ws=8e6), _row("kernel", k, "reference", lib),
                 _row("kernel", k, "im2col-gemm", 1.5 * lib, ws=1e6 * k * k)]
    for s in (1, 2, 4):
        rows += [_row("stride", s, "fft", 10.0, ws=8e6), _row("stride", s, "reference", 8.0 / s),
                 _row("stride", s, "im2col-gemm", 9.0 / s, ws=1e6)]
    return rows


# ------------------------------------------------------------------ the study's side of findings

def test_findings_read_the_studys_numbers_from_paper(monkeypatch):
    planted = {"fbfft faster than cuDNN, kernels above 7 x 7": (1.5, 42.0),
               "cuDNN faster than fbfft, kernels below 7 x 7": (1.01, 3.5)}
    monkeypatch.setattr(sweep_findings, "STUDY_FIGURE3_KERNEL", planted)
    study = {f["finding"]: f["study"] for f in sweep.findings(_rows())}
    assert "by 1.5x to 42x" in study["FFT beats the library for large kernels"]
    assert "by 1.01x to 3.5x" in study["The library beats FFT for small kernels"]
    # the unpatched text carries the paper's numbers, not these
    monkeypatch.undo()
    study = {f["finding"]: f["study"] for f in sweep.findings(_rows())}
    lo, hi = paper.STUDY_FIGURE3_KERNEL["fbfft faster than cuDNN, kernels above 7 x 7"]
    assert f"by {lo:g}x to {hi:g}x" in study["FFT beats the library for large kernels"]


def test_every_study_text_names_its_section_and_types_no_number_paper_lacks():
    known = {f"{v:g}" for pair in paper.STUDY_FIGURE3_KERNEL.values() for v in pair}
    for f in sweep.findings(_rows()):
        assert "Section" in f["study"], f
        text = re.sub(r"(Section [IVX]+-[A-D]|Figure \d\(?\w?\)?|\d+ x \d+|cuda-convnet2"
                      r"|stride 1|above 1)", "", f["study"])
        numbers = set(re.findall(r"\d+(?:\.\d+)?", text))
        assert numbers <= known, (f["finding"], numbers - known)


def test_memory_finding_says_it_compares_analytic_workspace():
    mem = next(f for f in sweep.findings(_rows())
               if f["finding"] == "FFT is the most memory-hungry")
    assert "analytic workspace" in mem["here"] and "Figure 5" in mem["study"]
    # fft largest at the 3 stride points and k = 1 (8 MB against 1 MB); im2col at k = 3, 11, 15
    assert "at 4 of 7 points" in mem["here"] and mem["agrees"] is True


def test_stride_finding_disagrees_when_fft_gains_more_from_the_stride():
    rows = [dict(r, median_ms=r["median_ms"] / r["s"] ** 2)
            if r["sweep"] == "stride" and r["strategy"] == "fft" else r for r in _rows()]
    stride = next(f for f in sweep.findings(rows) if f["finding"] == "FFT only pays at stride 1")
    assert stride["agrees"] is False and "fastest at stride 4: fft" in stride["here"]


# ------------------------------------------------------------------------ the summary texts

def _kernel():
    return [r for r in _rows() if r["sweep"] == "kernel"]


def test_times_by_refuses_rows_of_several_sweeps_or_devices():
    with pytest.raises(ValueError, match="at k = 11: keep the rows of one sweep"):
        sweep.times_by(_rows(), "k")  # the stride sweep's rows have k = 11 too
    two = _kernel() + [dict(r, device="GPU: other") for r in _kernel()]
    with pytest.raises(ValueError, match="one device"):
        sweep.times_by(two, "k")
    assert sweep.times_by(two, "k", device="GPU: other") == sweep.times_by(_kernel(), "k")


def test_times_by_and_faster_at():
    t = sweep.times_by(_kernel(), "k")
    assert list(t["reference"]) == [1, 3, 11, 15] and t["reference"][11] == 20.0
    assert sweep.faster_at(_kernel(), "k", "fft", "reference") == [11, 15]
    assert sweep.faster_at(_kernel(), "k", "fft", "im2col-gemm") == [11, 15]
    assert sweep.faster_at(_kernel(), "k", "fft", "reference", device="GPU: other") == []
    # a point where one of the two was not timed is not a win
    rows = [r for r in _kernel() if not (r["k"] == 15 and r["strategy"] == "reference")]
    assert sweep.faster_at(rows, "k", "fft", "reference") == [11]


def test_fastest_text_names_the_winner_and_how_far_behind_the_others_were():
    assert sweep.fastest_text(_kernel(), "k", 3, "kernel") == (
        "at kernel 3: reference, 4 ms (im2col-gemm 1.5x slower, fft 2.5x slower)")
    assert sweep.fastest_text(_kernel(), "k", 15, "kernel").startswith("at kernel 15: fft, 10 ms")
    assert sweep.fastest_text(_kernel(), "k", 7, "kernel") == "at kernel 7: nothing measured"
    stride = [r for r in _rows() if r["sweep"] == "stride"]
    assert sweep.fastest_at(stride, "s", 4)[0] == "reference"


def test_growth_text_is_computed_and_says_where_a_strategy_has_fewer_points():
    text = sweep.growth_text(_kernel(), "k", "kernel")
    assert text.startswith("from kernel 1 to 15: ")
    assert "fft x1.00 (10 to 10 ms)" in text and "reference x15.00 (2 to 30 ms)" in text
    rows = [r for r in _kernel() if not (r["k"] == 15 and r["strategy"] == "fft")]
    assert "fft x1.00 (10 to 10 ms, kernel 1 to 11 only)" in sweep.growth_text(rows, "k", "kernel")
    assert sweep.growth_text([], "k", "kernel") == "not measured"


# ------------------------------------------------------------------------------ the notebooks

def _cells(name):
    return nbformat.read(ROOT / "notebooks" / f"{name}.ipynb", as_version=4).cells


@pytest.mark.parametrize("name", ["05_fft_convolution", "06_head_to_head"])
def test_each_notebook_predicts_then_reveals_a_computed_answer(name):
    cells = _cells(name)
    ask = next(i for i, c in enumerate(cells)
               if c.cell_type == "markdown" and c.source.startswith("**Predict.**"))
    guess = next(i for i, c in enumerate(cells) if i > ask and c.cell_type == "code")
    assert cells[guess].source.startswith("prediction = ")
    reveal = next(i for i, c in enumerate(cells)
                  if i > guess and c.cell_type == "code" and "notebook.reveal(" in c.source)
    src = cells[reveal].source
    # the answer depends on this run's numbers: computed from rows, and not compared by nbval
    assert src.startswith("# NBVAL_IGNORE_OUTPUT") and "guess=prediction" in src
    assert "sweep." in src
    measuring = [i for i, c in enumerate(cells) if ask < i < reveal and c.cell_type == "code"
                 and ("measure(" in c.source or "run_preset(" in c.source)]
    assert measuring, "the measurement runs between the question and the answer"


def test_notebook_texts_hold_for_any_measurement():
    text05 = "\n".join(c.source for c in _cells("05_fft_convolution") if c.cell_type == "markdown")
    text06 = "\n".join(c.source for c in _cells("06_head_to_head") if c.cell_type == "markdown")
    assert "stays flat with the stride" not in text05
    assert "did not exist in cuDNN v3" not in text06
    assert "That is why the study measured cuDNN ahead" not in text05
    # a measured error range is printed by code, never typed into the text
    assert not re.search(r"10\^\{-[67]\}", text05)
    assert "Chetlur et al., 2014" in text06 and "Section IV-B" in text05
