"""The kernels a learner edits in place in the notebooks: each editable copy is the package's
kernel, character for character, so the notebook teaches the code the workbook runs."""

from __future__ import annotations

import ast
import inspect
import json
import pathlib
import textwrap

import pytest

from helpers import elementwise
from helpers.conv import direct, unroll

ROOT = pathlib.Path(__file__).resolve().parent.parent

#: (notebook, the id of the cell holding the copy, the package's kernel)
EDITABLE = [("notebooks/01_cpu_vs_gpu_throughput.ipynb", "edit-relu-code",
             elementwise.relu_kernel),
            ("notebooks/03_direct_convolution.ipynb", "edit-direct-naive-code",
             direct.direct_naive_kernel),
            ("notebooks/04_unrolling_im2col_gemm.ipynb", "edit-im2col-code",
             unroll.im2col_kernel),
            ("notebooks/07_inside_the_gpu.ipynb", "edit-direct-tiled-code",
             direct.direct_tiled_kernel)]


def _function_source(code: str, name: str) -> str:
    """The source of the function ``name`` defined in ``code``, decorators included."""
    tree = ast.parse(code)
    node = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == name)
    lines = code.splitlines()
    start = min([d.lineno for d in node.decorator_list] + [node.lineno]) - 1
    return "\n".join(lines[start:node.end_lineno])


@pytest.mark.parametrize("notebook, cell_id, kernel", EDITABLE, ids=lambda v: str(v)[:40])
def test_the_editable_copy_is_the_packages_kernel(notebook, cell_id, kernel):
    cells = json.loads((ROOT / notebook).read_text())["cells"]
    cell = next(c for c in cells if c.get("id") == cell_id)
    copy = _function_source("".join(cell["source"]), kernel.py_func.__name__)
    original = textwrap.dedent(inspect.getsource(kernel.py_func)).rstrip()
    assert copy == original


def test_the_tiled_copy_is_sized_by_the_packages_constants():
    """Notebook 07's copy of direct_tiled_kernel reads TILE and IN_TILE from its own cell: they
    must start as the package's, or the copy would be another kernel."""
    cells = json.loads((ROOT / "notebooks/07_inside_the_gpu.ipynb").read_text())["cells"]
    code = "".join(next(c for c in cells if c.get("id") == "edit-direct-tiled-code")["source"])
    tree = ast.parse(code)
    constants = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name) \
                and node.targets[0].id in {"TILE", "MAX_KERNEL", "MAX_STRIDE", "IN_TILE"}:
            constants[node.targets[0].id] = eval(compile(ast.Expression(node.value), "", "eval"),
                                                 dict(constants))  # noqa: S307
    assert constants == {"TILE": direct.TILE, "MAX_KERNEL": direct.MAX_KERNEL,
                         "MAX_STRIDE": direct.MAX_STRIDE, "IN_TILE": direct.IN_TILE}


def test_the_copy_is_read_exactly_and_a_changed_copy_is_told_apart():
    # a cell's other code is left out, the kernel kept whole; one changed character differs
    code = textwrap.dedent(inspect.getsource(elementwise.relu_kernel.py_func)).rstrip()
    cell = f"import numpy as np\n\n{code}\n\nslope = 0.0\nprint(slope)\n"
    assert _function_source(cell, "relu_kernel") == code
    changed = cell.replace("if i < x.size:", "if i <= x.size:")
    assert _function_source(changed, "relu_kernel") != code


#: (notebook, editable cell, the start of its stored verdict) for the kernels helpers.editable
#: checks: the shipped kernel's cell shows PASSED, and nbval compares it on every run.
VERDICTS = [("notebooks/01_cpu_vs_gpu_throughput.ipynb", "edit-relu-code",
             "relu_kernel, 1,001 elements, slope 0: PASSED. "),
            ("notebooks/03_direct_convolution.ipynb", "edit-direct-naive-code",
             "direct_naive_kernel, x (2, 3, 9, 7), w (4, 3, 3, 3), stride 2, padding 1: PASSED. "),
            ("notebooks/04_unrolling_im2col_gemm.ipynb", "edit-im2col-code",
             "im2col_kernel, x (2, 3, 9, 7), 3 x 3 windows, stride 2, padding 1: PASSED. ")]


@pytest.mark.parametrize("notebook, cell_id, verdict", VERDICTS, ids=lambda v: str(v)[:40])
def test_the_editable_cell_stores_a_compared_verdict(notebook, cell_id, verdict):
    cells = json.loads((ROOT / notebook).read_text())["cells"]
    cell = next(c for c in cells if c.get("id") == cell_id)
    source = "".join(cell["source"])
    assert "NBVAL_IGNORE_OUTPUT" not in source and "NBVAL_SKIP" not in source
    shown = ["".join(o.get("data", {}).get("text/plain", "")) for o in cell["outputs"]
             if o["output_type"] == "execute_result"]
    assert len(shown) == 1 and shown[0].startswith(verdict), shown
    assert "FP64" in shown[0]  # compiled: a float64 accumulator would have failed it
