"""The package's shape: layers imported downward only (import-linter), no import cycles, no
imports of helpers inside functions, short modules with short docstrings, and compute layers
that import on a machine without plotly, ipywidgets or jupyter."""

from __future__ import annotations

import ast
import json
import os
import pathlib
import shutil
import subprocess
import sys
import textwrap

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "helpers"

#: The layers without plotly, ipywidgets or jupyter: they run on a bare GPU machine.
COMPUTE = ["helpers.device", "helpers.occupancy", "helpers.compiler_worker",
           "helpers.compiler_process", "helpers.nvvm_ir",
           "helpers.conv", "helpers.elementwise", "helpers.access_kernels", "helpers.images",
           "helpers.networks", "helpers.compiled", "helpers.kernels", "helpers.results",
           "helpers.paper", "helpers.experiments"]
BLOCKED = ("plotly", "ipywidgets", "IPython", "jupyterlab", "jupyter_client", "jupyter_core",
           "anywidget", "ipykernel")

#: Modules allowed a helpers import inside a function, with the reason.
LOCAL_IMPORTS_ALLOWED: dict[str, str] = {
    # notebook 00's checks of the stack: each check imports what it tries (torch, Numba CUDA via
    # helpers.elementwise, plotly), so that a broken install is reported, not raised on import.
    "helpers.envcheck": "a check imports the package it checks",
}


def _modules() -> dict[str, pathlib.Path]:
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = path
    return out


MODULES = _modules()


def _lint_imports(cwd: pathlib.Path, env: dict | None = None) -> subprocess.CompletedProcess:
    exe = pathlib.Path(sys.executable).with_name("lint-imports")
    cmd = [str(exe)] if exe.exists() else [sys.executable, "-m", "importlinter.cli"]
    return subprocess.run([*cmd, "--no-cache", "--no-logo"], cwd=cwd, capture_output=True,
                          text=True, env=env, timeout=300)


def test_import_linter_contracts_hold():
    proc = _lint_imports(ROOT)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "2 kept, 0 broken" in proc.stdout


@pytest.mark.parametrize("module,line,expected", [
    # device is the bottom layer: a chart import there is an upward arrow
    ("helpers/device/timing.py", "from helpers.figures import style", "helpers.device.timing -> "
                                                                      "helpers.figures.style"),
    # a strategy may not reach up into an experiment
    ("helpers/conv/direct/__init__.py", "from helpers.experiments import sweep",
     "helpers.conv.direct -> helpers.experiments"),
    # a compute module may not need plotly
    ("helpers/experiments/sweep/presets.py", "import plotly.graph_objects",
     "helpers.experiments.sweep.presets -> plotly"),
])
def test_a_planted_wrong_import_breaks_a_contract(tmp_path, module, line, expected):
    shutil.copytree(PACKAGE, tmp_path / "helpers",
                    ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    target = tmp_path / module
    target.write_text(target.read_text() + f"\n{line}  # planted\n")
    env = dict(os.environ, PYTHONPATH=str(tmp_path))
    proc = _lint_imports(tmp_path, env)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert " 0 broken" not in proc.stdout and expected in proc.stdout, proc.stdout


def _imports(path: pathlib.Path, name: str):
    """(imported module, node, at top level) for each helpers import in the file."""
    tree = ast.parse(path.read_text())
    top = {id(n) for n in tree.body}
    # imports under `if __name__ == "__main__":` count as top level
    for node in tree.body:
        if isinstance(node, ast.If) and "__main__" in ast.unparse(node.test):
            top.update(id(n) for n in ast.walk(node))
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("helpers"):
            for alias in node.names:
                full = f"{node.module}.{alias.name}"
                yield (full if full in MODULES else node.module), node, id(node) in top
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("helpers"):
                    yield alias.name, node, id(node) in top


def test_no_helpers_import_inside_a_function():
    found = []
    for name, path in MODULES.items():
        for target, node, at_top in _imports(path, name):
            if not at_top and name not in LOCAL_IMPORTS_ALLOWED:
                found.append(f"{path.relative_to(ROOT)}:{node.lineno} imports {target}")
    assert not found, "import at the top of the file instead:\n" + "\n".join(found)


def _graph() -> dict[str, set[str]]:
    """Module -> modules it imports at load time. Importing helpers.a.b from outside helpers.a
    also runs helpers.a's __init__, so that counts as an edge to helpers.a too."""
    graph: dict[str, set[str]] = {name: set() for name in MODULES}
    for name, path in MODULES.items():
        for target, _, at_top in _imports(path, name):
            if not at_top or target not in MODULES:
                continue
            graph[name].add(target)
            parts = target.split(".")
            for i in range(2, len(parts)):
                parent = ".".join(parts[:i])
                if parent in MODULES and not name.startswith(parent + ".") and name != parent:
                    graph[name].add(parent)
    return graph


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(n: str) -> list[str] | None:
        state[n] = 1
        stack.append(n)
        for m in sorted(graph[n]):
            if state.get(m) == 1:
                return stack[stack.index(m):] + [m]
            if m not in state:
                found = visit(m)
                if found:
                    return found
        stack.pop()
        state[n] = 2
        return None

    for n in sorted(graph):
        if n not in state:
            found = visit(n)
            if found:
                return found
    return None


def test_no_import_cycles():
    cycle = _cycle(_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_the_cycle_finder_finds_a_cycle():
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None


def test_no_module_over_500_lines():
    """helpers, tools and tests alike: a longer module is split along a seam a reader would
    name, not squeezed."""
    paths = [*MODULES.values(), *sorted((ROOT / "tools").rglob("*.py")),
             *sorted((ROOT / "tests").rglob("*.py"))]
    long = {str(p.relative_to(ROOT)): n for p in paths
            if (n := len(p.read_text().splitlines())) > 500}
    assert not long, f"split these modules: {long}"


def test_module_docstrings_are_short():
    long = {}
    for path in MODULES.values():
        doc = ast.get_docstring(ast.parse(path.read_text()), clean=False)
        assert doc, f"{path.relative_to(ROOT)} has no module docstring"
        if len(doc.strip().splitlines()) > 15:
            long[str(path.relative_to(ROOT))] = len(doc.strip().splitlines())
    assert not long, f"module docstrings over 15 lines (the essay belongs in a notebook): {long}"


@pytest.mark.slow
def test_compute_layers_import_without_plotly_ipywidgets_or_jupyter():
    """Every compute module imports in a process where the front-end packages cannot load."""
    compute = sorted(n for n in MODULES
                     if any(n == c or n.startswith(c + ".") for c in COMPUTE)
                     and not n.endswith("__main__"))
    script = textwrap.dedent(f"""
        import importlib, importlib.abc, sys
        BLOCKED = {BLOCKED!r}

        class Block(importlib.abc.MetaPathFinder):
            def find_spec(self, name, path=None, target=None):
                if name.split(".")[0] in BLOCKED:
                    raise ImportError(f"{{name}} is blocked: not on a bare GPU machine")
                return None

        sys.meta_path.insert(0, Block())
        for name in {compute!r}:
            importlib.import_module(name)
        loaded = sorted(m for m in sys.modules if m.split(".")[0] in BLOCKED)
        assert not loaded, loaded
        print("imported", len({compute!r}))
    """)
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1", PYTHONPATH=str(ROOT))
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          env=env, cwd=ROOT, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert f"imported {len(compute)}" in proc.stdout
    assert len(compute) > 30


def test_the_blocker_blocks():
    script = ("import importlib.abc, sys\n"
              "class B(importlib.abc.MetaPathFinder):\n"
              "    def find_spec(self, name, path=None, target=None):\n"
              "        if name.split('.')[0] == 'plotly': raise ImportError('blocked')\n"
              "sys.meta_path.insert(0, B())\n"
              "import helpers.figures.style\n")
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          cwd=ROOT, env=dict(os.environ, NUMBA_ENABLE_CUDASIM="1"), timeout=300)
    assert proc.returncode != 0 and "blocked" in proc.stderr


def test_the_kernel_table_loads_kernels_only_from_layers_below_it():
    """helpers.kernels imports each kernel's module by name (import-linter cannot see that
    import): every one must sit in a layer below helpers.kernels."""
    from helpers.kernels import BEFORE_KERNELS, KERNELS

    below = ("helpers.conv", "helpers.elementwise", "helpers.access_kernels")
    modules = {spec.module for spec in (*KERNELS, *BEFORE_KERNELS)}
    assert len(modules) >= 4
    for m in modules:
        assert any(m == b or m.startswith(b + ".") for b in below), m


@pytest.mark.slow
def test_a_main_module_runs_only_as_a_program():
    """Importing a package's ``__main__`` (a documentation tool, an IDE) prints nothing and
    does not exit: its work sits under ``if __name__ == "__main__":``. One process imports them
    all, each with its own captured output; a SystemExit is caught and reported."""
    mains = sorted(PACKAGE.rglob("__main__.py"))
    assert len(mains) > 5
    names = [".".join(p.relative_to(ROOT).with_suffix("").parts) for p in mains]
    script = textwrap.dedent(f"""
        import contextlib, importlib, io, json
        out = {{}}
        for name in {names!r}:
            buf = io.StringIO()
            try:
                with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(buf):
                    importlib.import_module(name)
            except SystemExit as exc:
                buf.write(f"SystemExit({{exc.code!r}})")
            out[name] = buf.getvalue()
        print(json.dumps(out))
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          cwd=ROOT, timeout=300, env=dict(os.environ, NUMBA_ENABLE_CUDASIM="1"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    printed = json.loads(proc.stdout.strip().splitlines()[-1])
    assert sorted(printed) == sorted(names)
    noisy = {name: text[-500:] for name, text in printed.items() if text}
    assert not noisy, noisy
