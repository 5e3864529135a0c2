"""Notebooks 08 and 09: the estimates their text states, whole tables, and their predict moments."""

import math
import pathlib

import nbformat
import plotly.graph_objects as go
import pytest

import helpers  # noqa: F401  (decides the backend first)
from helpers.experiments.training import throughput as training_throughput
from helpers.experiments.transfers import model as transfer_model
from helpers.figures import nb08_transfers
from helpers.paper import TABLE_I

NOTEBOOKS = pathlib.Path(__file__).resolve().parent.parent / "notebooks"
STATUS = ("not measured: no CUDA GPU here (backend mode 'simulator'); GPU rows come from "
          "results/training_* where present")


def _cells(name):
    return nbformat.read(NOTEBOOKS / name, as_version=4).cells


def _markdown(name):
    return "\n".join(c.source for c in _cells(name) if c.cell_type == "markdown")


# ------------------------------------------------------------------ 09: whole tables


def _rows():
    ok = [dict(model="small", device_kind="cpu", batch_size=b, images_per_s=100.0 * b,
               wait_share=0.2, status="ok") for b in (1, 8)]
    gpu = [dict(model="small", device_kind="cuda", batch_size=b, images_per_s=math.nan,
                wait_share=math.nan, status=STATUS) for b in (1, 8)]
    return ok + gpu


def test_format_table_cuts_no_text_and_keeps_rows_narrow():
    text = training_throughput.format_table(
        _rows(), ["model", "device_kind", "batch_size", "images_per_s", "wait_share", "status"])
    lines = text.splitlines()
    assert all(len(line) <= 100 for line in lines)
    # the long status is whole, once, as a note under the table; each row points to it
    assert " ".join(text.split()).count(STATUS) == 1
    assert sum(line.rstrip().endswith("[1]") for line in lines) == 2
    assert "ok" in lines[2] and "800" in lines[3]


def test_format_table_gives_each_long_text_its_own_note():
    rows = [dict(status="x" * 50), dict(status="y" * 50), dict(status="x" * 50), dict(status="ok")]
    text = training_throughput.format_table(rows, ["status"])
    assert text.count("[1] " + "x" * 50) == 1 and text.count("[2] " + "y" * 50) == 1
    assert [line.strip() for line in text.splitlines()[2:6]] == ["[1]", "[2]", "[1]", "ok"]


def test_format_table_keeps_short_text_in_its_cell():
    text = training_throughput.format_table([dict(device="CPU: AMD EPYC (2 cores)")],
                                            ["device"])
    assert "CPU: AMD EPYC (2 cores)" in text.splitlines()[2] and "[1]" not in text


def test_format_table_refuses_a_tiny_text_width():
    with pytest.raises(ValueError, match="max_text"):
        training_throughput.format_table(_rows(), ["status"], max_text=3)


def _table_lines(text):
    """The header, rule and rows of each format_table table in a printed text."""
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if i and line.startswith("---"):
            yield lines[i - 1]
            for row in lines[i:]:
                if not row.strip() or row.startswith("["):
                    break
                yield row


def test_every_table_printed_in_09_is_whole():
    tables = 0
    for cell in _cells("09_training_throughput.ipynb"):
        if cell.cell_type != "code" or "format_table" not in cell.source:
            continue
        for out in cell.outputs:
            text = out.get("text", "")
            table = list(_table_lines(text))
            tables += bool(table)
            assert all(len(line) <= 100 for line in table), table
            # the text of every note mark is printed whole under its table
            for mark in {w for line in table for w in line.split() if w.startswith("[")}:
                note = next(n for n in text.splitlines() if n.startswith(mark + " "))
                assert "..." not in note
    assert tables >= 2


# ------------------------------------------------------------------ 08: the estimate's claims


def test_conv2_channels_sweep_matches_the_worked_example():
    rows = transfer_model.estimate_channels("Conv2", channels=(3, 64))
    worked = transfer_model.estimate_share(TABLE_I[1])
    assert TABLE_I[1].c == 3
    assert rows[0]["copy_share"] == pytest.approx(worked["copy_share"])
    # the text: with the 64 channels of the suite's layer, less than half the share of C = 3
    assert rows[1]["copy_share"] < rows[0]["copy_share"] / 2


def test_more_channels_mean_a_smaller_share():
    rows = transfer_model.estimate_channels("Conv2", channels=(1, 3, 16, 64, 384))
    shares = [r["copy_share"] for r in rows]
    assert shares == sorted(shares, reverse=True)
    assert [r["c"] for r in rows] == [1, 3, 16, 64, 384]


def test_estimate_channels_refuses_bad_channels():
    with pytest.raises(ValueError, match="channels"):
        transfer_model.estimate_channels("Conv2", channels=(3, 0))
    with pytest.raises(ValueError, match="layer"):
        transfer_model.estimate_channels("Conv9")


def test_keeping_y_on_the_gpu_helps_most_where_y_is_larger():
    both = transfer_model.estimate(scenarios=transfer_model.SCENARIOS[:1])
    x_only = transfer_model.estimate(scenarios=transfer_model.SCENARIOS[:1], copy_output=False)
    for lay, a, b in zip(TABLE_I, both, x_only):
        x_bytes, y_bytes = transfer_model.layer_bytes(lay)
        if lay.name in ("Conv1", "Conv2"):
            assert y_bytes > x_bytes and b["copy_share"] < a["copy_share"] / 2
        else:
            assert y_bytes < x_bytes and b["copy_share"] > a["copy_share"] / 2


def test_every_layer_share_grows_from_the_k40c_to_the_h100_pcie():
    k40 = transfer_model.estimate(scenarios=transfer_model.SCENARIOS[:1])
    h100 = transfer_model.estimate(scenarios=transfer_model.SCENARIOS[1:2])
    assert all(b["copy_share"] > a["copy_share"] for a, b in zip(k40, h100))


def test_channel_share_figure_draws_each_machine_and_mark():
    k40 = transfer_model.estimate_channels("Conv2", channels=(3, 64))
    fig = nb08_transfers.channel_share_figure([("K40c", k40), ("none", [])], marks=[(3, "C = 3")])
    assert isinstance(fig, go.Figure) and [t.name for t in fig.data] == ["K40c"]
    assert list(fig.data[0].x) == [3, 64]
    assert fig.data[0].y[0] == pytest.approx(100 * k40[0]["copy_share"])
    assert len(fig.layout.shapes) == 1 and fig.layout.annotations[0].text == "C = 3"
    assert fig.layout.xaxis.range[0] < math.log10(3) < fig.layout.xaxis.range[1] < math.log10(100)
    empty = nb08_transfers.channel_share_figure([])
    assert not empty.data


def test_08_text_keeps_to_the_study():
    text = _markdown("08_data_transfers.ipynb")
    assert "almost nothing crossed" not in text and "same ordering" not in text
    assert "prefetching" in text and "Section V-D" in text
    assert "Table I gives each layer as (b, i, f, k, s) and states" in text


# ------------------------------------------------------------------ predict, then run


@pytest.mark.parametrize("name", ["08_data_transfers.ipynb", "09_training_throughput.ipynb"])
def test_each_prediction_is_asked_before_it_is_revealed(name):
    cells = _cells(name)
    asks = [i for i, c in enumerate(cells)
            if c.cell_type == "markdown" and "**Predict.**" in c.source]
    reveals = [i for i, c in enumerate(cells)
               if c.cell_type == "code" and "notebook.reveal(" in c.source]
    assert asks and len(reveals) >= len(asks)
    for ask in asks:
        later = [r for r in reveals if r > ask]
        assert later, f"cell {ask} asks for a prediction that is never revealed"
        assert "guess=prediction" in cells[later[0]].source


@pytest.mark.parametrize("name", ["08_data_transfers.ipynb", "09_training_throughput.ipynb"])
def test_reveals_of_measurements_are_not_compared_by_nbval(name):
    for cell in _cells(name):
        if cell.cell_type == "code" and "notebook.reveal(" in cell.source:
            measured = any(k in cell.source for k in ("share_rows", "batch_rows", "depth_rows"))
            assert not measured or cell.source.startswith("# NBVAL_IGNORE_OUTPUT")
