"""Notebooks 00-02: the roofline finding, the hotspot comparison with the study, and the claims
their text makes about the study (Figure 2) and about the data beside it."""

from __future__ import annotations

import pathlib

import nbformat
import pytest
from conftest import simulator_only

from helpers import paper
from helpers.device import backend
from helpers.experiments import hotspots
from helpers.experiments.layer_costs import layer_flops
from helpers.experiments.layer_times import HotspotProfile
from helpers.experiments.throughput import sweeps as tp
from helpers.figures import nb01_throughput

NOTEBOOKS = pathlib.Path(__file__).resolve().parents[1] / "notebooks"
TABLE_I_MARKS = [(layer.name, paper.im2col_gemm(layer).intensity) for layer in paper.TABLE_I]
K40C = ("Tesla K40c", 4.29e12, 288e9, "#999999")
H100 = ("H100 SXM", 67e12, 3.35e12, "#56B4E9")


def _nb(name: str):
    return nbformat.read(NOTEBOOKS / name, as_version=4)


def _sides(roofs, marks=TABLE_I_MARKS) -> dict[tuple[str, str], str]:
    return {(s["roof"], s["gemm"]): s["side"] for s in tp.roofline_sides(roofs, marks)}


# ------------------------------------------------------------------------------- the roofline


def test_ridge_points_of_the_study_gpu_and_an_h100():
    assert tp.ridge_point(4.29e12, 288e9) == pytest.approx(14.9, abs=0.05)
    assert tp.ridge_point(67e12, 3.35e12) == pytest.approx(20.0, abs=0.05)


@pytest.mark.parametrize("peak, bw", [(0, 1e9), (1e12, 0), (-1e12, 1e9), (1e12, -5.0)])
def test_ridge_point_rejects_non_positive_peaks(peak, bw):
    with pytest.raises(ValueError, match="must be > 0"):
        tp.ridge_point(peak, bw)


def test_conv2_alone_is_left_of_the_k40c_and_h100_ridges():
    """Notebook 01's markdown: four of the five Table I GEMMs lie right of both ridges, Conv2
    left of both (with the input channels helpers.paper chooses)."""
    sides = _sides([K40C, H100])
    for roof in ("Tesla K40c", "H100 SXM"):
        left = [g for (r, g), side in sides.items() if r == roof and side == "left"]
        assert left == ["Conv2"]
    conv2 = paper.im2col_gemm(paper.TABLE_I[1])
    assert conv2.intensity == pytest.approx(10.5, abs=0.05)
    # the limit the reveal's "why" gives: 2 M K / (4 (M + K)) for a very long N
    assert conv2.intensity == pytest.approx(2 * conv2.m * conv2.k / (4 * (conv2.m + conv2.k)),
                                            rel=1e-3)


def test_roofline_sides_follow_the_roof_not_the_layer():
    # A planted roof with a ridge at 100 FLOP/B puts every Table I GEMM but Conv5 on its slope;
    # one at 5 FLOP/B puts them all on the flat roof.
    sides = _sides([("steep", 100e12, 1e12, "#000"), ("flat", 5e12, 1e12, "#000")])
    assert [g for (r, g), s in sides.items() if r == "steep" and s == "left"] == [
        "Conv1", "Conv2", "Conv3", "Conv4"]
    assert all(s == "right" for (r, _), s in sides.items() if r == "flat")
    bound = {(s["roof"], s["gemm"]): s["bound_gflop_s"] for s in tp.roofline_sides(
        [("steep", 100e12, 1e12, "#000")], [("a", 10.0), ("b", 1000.0)])}
    assert bound == {("steep", "a"): pytest.approx(10e3), ("steep", "b"): pytest.approx(100e3)}


@simulator_only
def test_rooflines_add_comparison_gpus_once():
    labels = [r[0] for r in tp.rooflines((), cpu_bandwidth=None, compare=("H100 SXM",))]
    assert labels == ["Tesla K40c, the study's GPU (datasheet)",
                      "H100 SXM (datasheet, for comparison)"]
    # an unknown name, and the K40c already drawn, add nothing
    assert len(tp.rooflines((), None, compare=("Tesla K40c", "no such GPU"))) == 1
    assert tp.rooflines((), None) == tp.rooflines((), None, compare=())


def test_roofline_figure_marks_each_ridge():
    fig = nb01_throughput.roofline_figure([K40C, H100], [], TABLE_I_MARKS)
    ridges = [t for t in fig.data if t.name.startswith("ridge points")]
    assert len(ridges) == 1
    assert list(ridges[0].x) == pytest.approx([4.29e12 / 288e9, 67e12 / 3.35e12])
    assert list(ridges[0].y) == pytest.approx([4290, 67000])


# ---------------------------------------------------------------------- hotspots vs the study


def _profile(model: str, seconds: dict[str, float]) -> HotspotProfile:
    total = sum(seconds.values())
    return HotspotProfile(model=model, device="cpu", device_label="CPU: test", time_kind="CPU time",
                          batch=4, input_size=128, iterations=2, warmup=1, seconds=seconds,
                          detail={}, total_s=total, wall_s=total, threads=1)


def test_compare_with_study_names_the_largest_group_and_the_side():
    fc_heavy = _profile("alexnet", {"convolution": 3.0, "fully connected": 6.0, "other": 1.0})
    conv_heavy = _profile("vgg16", {"convolution": 9.6, "pooling": 0.4})
    same = _profile("googlenet", {"convolution": 8.9, "other": 1.1})
    found = hotspots.compare_with_study([fc_heavy, conv_heavy, same])
    assert [f["largest"] for f in found] == ["fully connected", "convolution", "convolution"]
    assert [f["conv_vs_study"] for f in found] == ["below", "above", "equal"]
    assert found[0]["conv_share"] == pytest.approx(0.3)
    assert found[1]["study_conv"] == paper.STUDY_FIGURE2["vgg16"] == 0.94
    # a network the study did not profile has no study share to compare with
    other = hotspots.compare_with_study([_profile("resnet", {"convolution": 1.0})])[0]
    assert other["study_conv"] is None and other["conv_vs_study"] is None


def test_flop_shares_at_native_size_sit_above_the_study_time_shares():
    """Notebook 02: at native size convolution is 91-99 % of the FLOPs, a few points above the
    study's time share in every network."""
    for model, study in paper.STUDY_FIGURE2.items():
        cost = layer_flops(model, {"overfeat": 231}.get(model, 224))
        share = cost.shares["convolution"]
        assert 0.91 <= share <= 0.995
        assert 0 < share - study < 0.11, model


# ------------------------------------------------------------------ the notebooks' own claims


def _text(nb, kind="markdown") -> str:
    return "\n".join(c.source for c in nb.cells if c.cell_type == kind)


def _stream(cell) -> str:
    return "".join(o.get("text", "") for o in cell.get("outputs", []) if o.output_type == "stream")


@pytest.mark.parametrize("name", ["00_start_here.ipynb", "02_hotspot_layers.ipynb"])
def test_figure2_shares_are_printed_from_helpers_paper(name):
    nb = _nb(name)
    cells = [c for c in nb.cells if c.cell_type == "code" and "STUDY_FIGURE2.items()" in c.source]
    assert len(cells) == 1 and not cells[0].source.startswith("# NBVAL_IGNORE_OUTPUT")
    out = _stream(cells[0])
    names = {"alexnet": "AlexNet", "googlenet": "GoogLeNet", "overfeat": "OverFeat",
             "vgg16": "VGG"}
    for key, share in paper.STUDY_FIGURE2.items():
        assert f"{names[key]:<10}{share:>5.0%}" in out
    # no hand-typed table of the shares is left in the markdown (it had VGG and OverFeat swapped)
    assert "| VGG |" not in _text(nb) and "| OverFeat |" not in _text(nb)


def test_notebook02_text_pairs_figure2_shares_as_the_study():
    text = _text(_nb("02_hotspot_layers.ipynb"))
    assert "AlexNet 86 %, GoogLeNet 89 %, OverFeat 90 %, VGG 94 %" in text
    assert paper.STUDY_FIGURE2 == {"alexnet": 0.86, "googlenet": 0.89, "overfeat": 0.90,
                                   "vgg16": 0.94}


def test_notebook01_no_longer_calls_every_table1_gemm_compute_bound():
    nb = _nb("01_cpu_vs_gpu_throughput.ipynb")
    text = _text(nb)
    assert "sits far right of the ridge" not in text
    assert "all have high arithmetic intensity" not in text
    assert "Conv2 lies left of both" in text
    # the study's fastest implementation was FFT-based (Section IV-B), not a GEMM one
    assert "study's fastest convolutions turn the convolution into a GEMM" not in text
    assert "fbfft, which is FFT-based (Section IV-B" in text
    # the finding is printed by code, from the roofs drawn
    code = _text(nb, "code")
    assert "throughput.roofline_sides(roofs, marks)" in code
    assert 'compare=("H100 SXM",)' in code


@pytest.mark.parametrize("name, measured", [
    ("01_cpu_vs_gpu_throughput.ipynb", "roofline_sides"),
    ("02_hotspot_layers.ipynb", "compare_with_study"),
])
def test_predict_then_run(name, measured):
    """A **Predict.** cell, a `prediction` variable, then a reveal computed from the data,
    whose output is ignored by nbval (it depends on this run's measurements)."""
    cells = _nb(name).cells
    ask = [i for i, c in enumerate(cells)
           if c.cell_type == "markdown" and "**Predict.**" in c.source]
    assert ask
    reveal = [i for i, c in enumerate(cells) if c.cell_type == "code"
              and "notebook.reveal(" in c.source and "guess=prediction" in c.source]
    assert reveal and reveal[0] > ask[0]
    src = cells[reveal[0]].source
    assert src.startswith("# NBVAL_IGNORE_OUTPUT") and measured in src
    assert any(c.cell_type == "code" and c.source.startswith('prediction = ""')
               for c in cells[ask[0]:reveal[0]])


def test_notebook02_measured_findings_are_printed_not_typed():
    nb = _nb("02_hotspot_layers.ipynb")
    text = _text(nb)
    # the old text stated this run's ranking as a fact
    assert "convolution was the largest group for GoogLeNet and VGG-16" not in text
    printed = [c for c in nb.cells if c.cell_type == "code"
               and "compare_with_study(profiles + references)" in c.source]
    assert len(printed) == 1 and printed[0].source.startswith("# NBVAL_IGNORE_OUTPUT")


@pytest.mark.skipif(backend.MODE == "gpu", reason="stored outputs were made without a GPU")
def test_notebook01_stored_roofline_printout_matches_the_data():
    """The stored printout places Conv2 left of the K40c's and the H100's ridges (the H100's
    datasheet roof is drawn under the recorded GPU's name, or as "H100 SXM" without one)."""
    nb = _nb("01_cpu_vs_gpu_throughput.ipynb")
    cell = next(c for c in nb.cells if c.cell_type == "code"
                and "left (memory-bound)" in c.source)
    lines = _stream(cell).splitlines()
    for roof in ("Tesla K40c", "H100"):
        i = next(j for j, line in enumerate(lines)
                 if not line.startswith(" ") and roof in line.split(":")[0])
        assert "left (memory-bound): Conv2;" in lines[i + 1]
