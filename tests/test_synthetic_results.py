"""A recorded GPU run, end to end: every reader of results/ and every notebook cell that shows
recorded GPU data, on a synthetic results folder (tests/synthetic_results.py; never committed).

The readers must return the synthetic rows; executed with ``WORKBOOK_RESULTS`` pointing at the
folder, each notebook cell that says "nothing recorded in results/ yet" without a recording must
instead show the recorded GPU (its name, driver and date) in its text or in its chart, and the
study's number beside ours where the study has one.
"""

from __future__ import annotations

import json
import pathlib
import sys

import pytest

from helpers import results
from helpers.device import backend
from helpers.experiments import (
    conv_bench,
    hotspots,
    kernel_resources,
    memory_access,
    sweep,
    throughput,
    transfers,
)
from helpers.experiments.training import throughput as training_throughput
from tools import run_notebooks

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import notebook_slice  # noqa: E402
from synthetic_results import DATE, DRIVER, GPU_NAME, make_synthetic_results  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory) -> pathlib.Path:
    folder = tmp_path_factory.mktemp("synthetic_results")
    make_synthetic_results(folder)
    return folder


@pytest.fixture
def in_results(synthetic, monkeypatch) -> pathlib.Path:
    """The synthetic folder as the readers' default results/."""
    monkeypatch.setattr(results, "RESULTS_DIR", synthetic)
    return synthetic


# ------------------------------------------------------------------------- the folder itself


def test_every_dataset_is_marked_synthetic_and_names_its_gpu(synthetic):
    metas = [json.loads(p.read_text()) for p in sorted(synthetic.glob("*.json"))]
    assert len(metas) == 13
    for meta in metas:
        assert meta["synthetic"] is True and meta["date"] == DATE
        env = meta["environment"]
        assert env["gpu_name"] == GPU_NAME and env["driver_version"] == DRIVER
        assert env["gpu_peak_fp32_flops"] > 0 and env["gpu_peak_bandwidth_bytes_s"] > 0
        assert (synthetic / f"{meta['name']}.csv").is_file()


def _numbers(rows):
    return [v for r in rows for v in r.values()
            if isinstance(v, (int, float)) and not isinstance(v, bool)]


def _check(rec, fields=None, at_least=1):
    """A Recorded with synthetic GPU rows: labelled with the GPU, driver and date; the fields
    of the recording module; numbers positive."""
    assert rec, rec.note
    assert len(rec.rows) >= at_least
    assert GPU_NAME in rec.note and DRIVER in rec.note and DATE[:10] in rec.note
    for r in rec.rows:
        assert r["source"] == "reference"
        assert GPU_NAME in str(r["device"]) and DRIVER in str(r["device"])
        if fields:
            assert set(fields) <= set(r), set(fields) - set(r)
    assert all(v >= 0 for v in _numbers(rec.rows))


# --------------------------------------------------------------------------------- (a) readers


def test_throughput_reader(in_results):
    rec = throughput.recorded()
    _check(rec, at_least=50)
    assert {r["device_kind"] for r in rec.rows} == {"cuda"}  # the CPU rows are left out
    gemm = {(r["backend"], r["size"]) for r in rec.rows
            if r["experiment"] == "gemm" and r["dtype"] == "float32"}
    assert {("torch", 4096), ("numba-tiled", 4096), ("numba-naive", 4096)} <= gemm
    assert len([r for r in rec.rows if r["experiment"] == "table1-gemm"]) == 5
    assert all(r["gflop_s"] > 0 for r in rec.rows if r["experiment"] != "elementwise")
    assert throughput.recorded(op="relu", dtype="float32").rows
    # the datasheet peaks of the recorded GPU reach the chart's lines and roofs
    assert any(GPU_NAME in label for label, _ in throughput.bandwidth_peaks(rec))
    assert any(GPU_NAME in roof[0] for roof in throughput.rooflines(rec))


def test_conv_bench_reader(in_results):
    rec = conv_bench.recorded()
    _check(rec, conv_bench.FIELDS, at_least=40)
    _, groups = conv_bench.recorded_by_gpu(("fft", "reference"))
    assert sorted(b for _, b in groups) == [1, 128]
    assert all(r["strategy"] in ("fft", "reference") for g in groups.values() for r in g)


def test_sweep_reader(in_results):
    rec = sweep.recorded(status="ok")
    _check(rec, sweep.FIELDS, at_least=200)
    assert {r["sweep"] for r in rec.rows} >= {"batch", "input", "filters", "kernel", "stride",
                                              "table1"}
    assert any(f["agrees"] is not None for f in sweep.findings(rec.rows))


def test_hotspots_reader(synthetic):
    rec = hotspots.recorded(directory=synthetic)
    assert rec and [p.model for p in rec.profiles] == ["alexnet", "googlenet", "vgg16", "overfeat"]
    assert GPU_NAME in rec.note and DRIVER in rec.note
    for p in rec.profiles:
        assert p.source == "reference" and p.date == DATE[:10] and GPU_NAME in p.device_label
        assert sum(p.shares.values()) == pytest.approx(1.0)
        assert p.batch == 64 and p.iterations == 10


def test_kernel_resources_reader(synthetic):
    rec = kernel_resources.recorded(synthetic)
    _check(rec, at_least=10)
    assert all(r["occupancy_pct"] > 0 and r["regs_per_thread"] > 0 for r in rec.rows)


def test_memory_access_reader(synthetic):
    rec = memory_access.recorded(synthetic)
    _check(rec, at_least=11)
    assert {r["experiment"] for r in rec.rows} == {"coalescing", "transpose", "divergence"}
    assert all(r["gb_s"] is None for r in rec.rows if r["experiment"] == "divergence")
    assert all(r["gb_s"] > 0 for r in rec.rows if r["experiment"] != "divergence")


@pytest.mark.parametrize("experiment", transfers.EXPERIMENTS)
def test_transfers_reader(synthetic, experiment):
    fields = {"bandwidth": transfers.BANDWIDTH_FIELDS, "overlap": transfers.OVERLAP_FIELDS,
              "share": transfers.SHARE_FIELDS, "timeline": transfers.TIMELINE_FIELDS}[experiment]
    rec = transfers.recorded(experiment, synthetic)
    _check(rec, fields, at_least=5)
    assert {r["experiment"] for r in rec.rows} == {experiment}


@pytest.mark.parametrize("experiment", training_throughput.EXPERIMENTS)
def test_training_reader(synthetic, experiment):
    rec = training_throughput.recorded(experiment, directory=synthetic)
    assert rec, rec.note
    assert GPU_NAME in rec.note and DRIVER in rec.note
    assert all(GPU_NAME in r["machine"] for r in rec.rows)
    if experiment != "utilisation_trace":
        assert all(set(training_throughput.ROW_KEYS) <= set(r) for r in rec.rows)
        assert all(r["images_per_s"] > 0 for r in rec.rows)
    else:
        assert all(r["gpu_util"] > 0 and r["t_s"] > 0 for r in rec.rows)


def test_training_reader_keeps_the_cpu_beside_the_gpu(synthetic):
    rec = training_throughput.recorded("depth", gpu_only=False, directory=synthetic)
    kinds = {r["device_kind"] for r in rec.rows}
    assert kinds == {"cpu", "cuda"}
    table = training_throughput.speedup_table(rec.rows)
    assert table and all(e["speedup"] > 1 for e in table)


# ------------------------------------------------------------------------ (b) the notebooks

#: The cells that show recorded GPU data, by a stable piece of their source; without a
#: recording each says "nothing recorded in results/ yet" or draws an empty chart. With one, each
#: shows the GPU, its driver and the date; where the study (or the V100 review) has a number for
#: the same experiment, the cell also shows it, labelled "then, ...", beside ours ("now, ...").
CELLS: dict[str, list[tuple[str, str | None]]] = {
    "01_cpu_vs_gpu_throughput": [
        ("references = (throughput.recorded()", None),
    ],
    "02_hotspot_layers": [
        ("recorded = hotspots.recorded()", "then, K40c"),
    ],
    "03_direct_convolution": [
        ('conv_bench.recorded_by_gpu(("direct-naive"', None),
    ],
    "04_unrolling_im2col_gemm": [
        ('conv_bench.recorded_by_gpu(("reference", "im2col-gemm"', None),
    ],
    "05_fft_convolution": [
        ('conv_bench.recorded_by_gpu(("fft"', "then, K40c"),
    ],
    "06_head_to_head": [
        ("gpu_runs = sweep.recorded(", None),
        ("# The same on a GPU: live if this machine has one", None),
        ("findings_table(sweep.findings(cpu_rows)", "then, K40c"),
    ],
    "07_inside_the_gpu": [
        ("recorded = kernel_resources.recorded()", None),
        ("nb07_inside_the_gpu.table2_figure(", "then, K40c"),
        ("recorded = memory_access.recorded()", "then, K40c"),
        ("nb07_inside_the_gpu.gpu_experiments_figure(", None),
    ],
    "08_data_transfers": [
        ("transfers.copy_bandwidth(transfers.DEFAULT_SIZES", None),
        ("nb08_transfers.transfer_bandwidth_figure(", None),
        ('saved_overlaps = transfers.recorded("overlap")', None),
        ("nb08_transfers.overlap_times_figure(", None),
        ("def timeline_for(name):", None),
        ('saved_shares = transfers.recorded("share")', "then, K40c"),
        ('title="Measured share of copies', None),
    ],
    "09_training_throughput": [
        ('recorded_batch = training_throughput.recorded("batch")', None),
        ('recorded_workers = training_throughput.recorded("workers")', "then, V100"),
        ('recorded_trace = training_throughput.recorded("utilisation_trace")', "then, V100"),
        ('recorded_depth = training_throughput.recorded("depth"', "then, V100"),
        ('recorded_prec = training_throughput.recorded("precision")', None),
    ],
}

#: What a cell shows when nothing is recorded.
PLACEHOLDERS = ("nothing recorded in results/ yet", "in results/ yet")


def _output_text(cell) -> str:
    """Everything a cell shows: stream text, plain text, HTML, and plotly figures' JSON."""
    parts = []
    for out in cell.get("outputs", []):
        if "text" in out:
            parts.append("".join(out["text"]))
        for mime, data in out.get("data", {}).items():
            if mime.startswith("text/") or mime.endswith("json"):
                parts.append(data if isinstance(data, str)
                             else "".join(data) if isinstance(data, list) else json.dumps(data))
        if out.get("output_type") == "error":
            parts.append("ERROR " + out.get("ename", "") + ": " + out.get("evalue", ""))
    return "\n".join(parts)


def test_every_listed_notebook_exists():
    for name in CELLS:
        assert (ROOT / "notebooks" / f"{name}.ipynb").is_file(), name


def _targets(nb, name: str) -> tuple[list[int], list[str]]:
    """Indices of the cells listed for notebook ``name``, and what could not be found."""
    targets, problems = [], []
    for piece, _ in CELLS[name]:
        found = [i for i, c in enumerate(nb.cells) if c.cell_type == "code" and piece in c.source]
        if len(found) != 1:
            problems.append(f"{len(found)} code cells contain {piece!r}")
        targets += found
    return targets, problems


def test_the_cut_keeps_what_a_cell_reads_and_drops_the_rest():
    import nbformat

    cells = ["import os", "a = 1", "b = 2  # never read", "a = a + 1", "def f():\n    return a",
             "for b in range(2):\n    print(b)", "print(f(), [b for b in 'xy'])", "c = 3"]
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
    nb.cells.insert(2, nbformat.v4.new_markdown_cell("a = 99"))  # markdown binds nothing
    cut, kept = notebook_slice.cut(nb, [7])
    # the comprehension's b is its own: neither "b = 2" nor the loop is needed
    assert [c.source for c in cut.cells] == ["import os", "a = 1", "a = a + 1",
                                            "def f():\n    return a",
                                            "print(f(), [b for b in 'xy'])"]
    assert kept == [0, 1, 4, 5, 7]
    assert notebook_slice.names("x[i] = y") == (set(), {"x", "i", "y"})
    assert notebook_slice.names("for p in ps:\n    q = p") == ({"p", "q"}, {"ps"})
    with pytest.raises(ValueError, match="targets"):
        notebook_slice.cut(nb, [2])


def test_a_cut_without_a_gpu_leaves_out_what_only_the_gpu_branches_read():
    import nbformat

    cells = ["import os", "profiles = measure()", "note = 'recorded'",
             'if info.mode == "gpu":\n    save(profiles)\nelse:\n    print(note)',
             'if backend.MODE != "gpu":\n    print(note)\nelse:\n    print(profiles)',
             'if info.mode == "cpu":\n    print(profiles)']
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
    for target in (3, 4):
        assert notebook_slice.cut(nb, [target], gpu=False)[1] == [0, 2, target]
        assert notebook_slice.cut(nb, [target])[1] == [0, 1, 2, target]   # on a GPU: both
    # only a test of the mode against "gpu" decides a branch
    assert notebook_slice.cut(nb, [5], gpu=False)[1] == [0, 1, 5]
    assert notebook_slice.names(cells[3], gpu=False) == (set(), {"info", "note"})


#: Measuring cells that the cuts need (for names a listed cell reads) run smaller here than in
#: their notebooks, which nbval runs as written: what a listed cell shows of the recorded GPU
#: does not depend on how much this CPU measured. (text, its replacement), each found exactly
#: once in the notebook's cut, or the notebook's test fails saying so.
SMALLER: dict[str, list[tuple[str, str]]] = {
    "04_unrolling_im2col_gemm": [("min_run_time=0.05)", "min_run_time=0.005)")],
    "06_head_to_head": [('sweep.run_preset("lesson",', 'sweep.run_preset("smoke",')],
    "09_training_throughput": [("BATCHES = [1, 8, 32, 128]", "BATCHES = [1, 8]")],
}


class _Cut:
    """One notebook's part of the combined run: the listed cells' indices in the notebook
    (``targets``) and those not found (``problems``: then it is not run); the notebook cut to
    them (``cut``, whose cells are the notebook's cells ``kept``); after the run, the listed
    cells executed (``shown``), or why its cells did not all run (``error``)."""

    def __init__(self, name: str, nb) -> None:
        self.name = name
        self.targets, self.problems = _targets(nb, name)
        # the test is skipped on a GPU: what only a notebook's GPU branches read is not needed
        self.cut, self.kept = (notebook_slice.cut(nb, self.targets, gpu=False)
                               if not self.problems else (None, []))
        for text, smaller in SMALLER.get(name, ()) if self.cut is not None else ():
            holding = [cell for cell in self.cut.cells if text in cell.source]
            if len(holding) != 1 or holding[0].source.count(text) != 1:
                self.problems.append(f"SMALLER: {text!r} is not in exactly one place of the "
                                     f"cut ({len(holding)} cells hold it)")
            else:
                holding[0].source = holding[0].source.replace(text, smaller)
        self.shown: list = []
        self.error = ""


def test_a_smaller_measurement_applies_once_or_fails_its_notebook(monkeypatch):
    import nbformat

    nb = nbformat.read(ROOT / "notebooks" / "06_head_to_head.ipynb", as_version=4)
    (old, new), = SMALLER["06_head_to_head"]
    applied = _Cut("06_head_to_head", nb)
    assert not applied.problems
    assert [c.source.count(new) for c in applied.cut.cells if old in c.source or new in c.source
            ] == [1]
    assert all(old not in c.source for c in applied.cut.cells)
    monkeypatch.setitem(SMALLER, "06_head_to_head", [("a text no cell holds", "x")])
    assert _Cut("06_head_to_head", nb).problems == [
        "SMALLER: 'a text no cell holds' is not in exactly one place of the cut (0 cells hold it)"]


def _combine(cuts: list[_Cut], folder: pathlib.Path):
    """One notebook: for each cut in order, the namespace-emptying cell, then the cut's cells.

    Returns:
        (the notebook, {name: index in it of the cut's namespace-emptying cell}).
    """
    import nbformat

    nb = nbformat.v4.new_notebook(metadata=cuts[0].cut.metadata)
    starts = {}
    for c in cuts:
        starts[c.name] = len(nb.cells)
        nb.cells.append(nbformat.v4.new_code_cell(
            notebook_slice.FRESH_NAMESPACE.format(folder=str(folder))))
        nb.cells += [nbformat.v4.new_code_cell(cell.source) for cell in c.cut.cells]
    return nb, starts


@pytest.fixture(scope="module")
def executed(synthetic) -> dict[str, _Cut]:
    """Every listed notebook's cut, executed with ``WORKBOOK_RESULTS`` at the synthetic folder,
    by name.

    The cuts run one after another in one kernel (a kernel's start, the setup cell's imports
    and the helpers' imports cost about 10 s a notebook), each after a cell that empties the
    namespace; the setup cell runs again in each. A cell that fails stops the run, as it would
    stop its own notebook's: that notebook gets the error, naming the cell; the cuts after it
    run again, combined, in a new kernel. A notebook whose listed cells are not all found is
    not run.
    """
    import nbformat

    folder = ROOT / "notebooks"
    cuts = [_Cut(name, nbformat.read(folder / f"{name}.ipynb", as_version=4))
            for name in sorted(CELLS)]
    pending = [c for c in cuts if not c.problems]
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("WORKBOOK_RESULTS", str(synthetic))  # the kernel inherits it
        while pending:
            nb, starts = _combine(pending, folder)
            try:   # the timeout is per cell, as in each notebook's own run
                run_notebooks.execute(nb, folder, timeout=600, name="the notebooks' cuts")
                ran, rest = pending, []
            except Exception as exc:  # noqa: BLE001 - the error goes to the notebook it was in
                failure = f"{type(exc).__name__}: {exc}"
                # the cell that was running: the last whose execution began
                began = [i for i, cell in enumerate(nb.cells) if "execution" in cell.metadata]
                if not began:  # the kernel did not start, or died before the first cell
                    for c in pending:
                        c.error = f"{c.name}.ipynb's cut did not run:\n{failure}"
                    break
                culprit = [c for c in pending if starts[c.name] <= began[-1]][-1]
                at = began[-1] - starts[culprit.name] - 1
                where = ("the cell that empties the namespace before its cut" if at < 0
                         else f"its cell {culprit.kept[at]} (index in the notebook)")
                culprit.error = (f"{culprit.name}.ipynb failed at {where}, run in its cut "
                                 f"after the other notebooks' cuts before it:\n{failure}")
                ran = pending[:pending.index(culprit)]
                rest = pending[pending.index(culprit) + 1:]
            for c in ran:
                first = starts[c.name] + 1
                c.shown = [nb.cells[first + c.kept.index(i)] for i in c.targets]
            pending = rest
    return {c.name: c for c in cuts}


@pytest.mark.notebook
@pytest.mark.skipif(backend.MODE == "gpu",
                    reason="on a GPU the notebooks measure live instead of reading results/")
@pytest.mark.parametrize("name", sorted(CELLS))
def test_notebook_draws_the_recorded_gpu(name, executed):
    """The listed cells, and the cells they need, executed (nbval runs the whole notebook);
    all the notebooks' cuts in one kernel, each in an emptied namespace (``executed``)."""
    run = executed[name]
    assert not run.problems, "\n".join(run.problems)
    if run.error:
        pytest.fail(run.error, pytrace=False)
    problems = []
    for (piece, then), cell in zip(CELLS[name], run.shown):
        shown = _output_text(cell)
        for what in (GPU_NAME, DRIVER, DATE[:10]) + ((then, "now, ") if then else ()):
            if what not in shown:
                problems.append(f"cell with {piece!r} does not show {what!r}: {shown[:300]!r}")
        for placeholder in PLACEHOLDERS:
            if placeholder in shown:
                problems.append(f"cell with {piece!r} still says {placeholder!r}")
    assert not problems, "\n".join(problems)
