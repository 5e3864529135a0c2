"""tools/colab_bootstrap.py: the Colab installs, planned from the driver's CUDA version, the
installed packages and the platform, without Colab (the first cell's Colab branch itself runs in
tests/test_colab.py)."""

from __future__ import annotations

import ast
import ctypes
import pathlib
import re
import subprocess
import sys
import types

import pytest
from packaging.requirements import Requirement

from tools import colab_bootstrap as cb

ROOT = pathlib.Path(__file__).resolve().parent.parent
REQS = cb.read_requirements(str(ROOT))
PY, DIR = "/usr/bin/python3", "/content/gpu-cnn-workbook"

#: A Colab runtime as it comes: torch built for its driver, older Numba and widgets, no numba-cuda.
COLAB = {"torch": "2.5.1+cu124", "torchvision": "0.20.1+cu124", "numpy": "2.0.2",
         "numba": "0.60.0", "llvmlite": "0.43.0", "plotly": "5.24.1", "ipywidgets": "7.7.1",
         "ipykernel": "6.17.1", "tqdm": "4.67.1", "psutil": "5.9.5", "scikit-image": "0.25.2",
         "nbformat": "5.10.4", "notebook": "6.5.7"}
#: The same runtime after a first bootstrap for a CUDA 12 driver.
WARM_CU12 = {**COLAB, "numba": "0.62.1", "numba-cuda": "0.30.4", "cuda-bindings": "12.9.4",
             "cuda-toolkit": "12.9.1",
             "nvidia-nvjitlink-cu12": "12.9.86", "nvidia-cuda-cuobjdump": "13.0.85",
             "nvidia-cuda-nvdisasm": "13.0.85", "ipywidgets": "8.1.8", "plotly": "6.5.0",
             "anywidget": "0.9.21", "py-cpuinfo": "9.0.0", "nvidia-ml-py": "13.580.82",
             "greenlet": "3.5.6", "gpu-cnn-workbook": "0.1.0"}


def plan(driver, installed, platform="linux"):
    return cb.plan(driver, installed, platform, REQS, DIR, PY)


def installed_names(commands) -> list[str]:
    """The distribution names the commands would install (the workbook's folder aside)."""
    names = []
    for cmd in commands:
        assert cmd[:4] == [PY, "-m", "pip", "install"], cmd
        names += [Requirement(a).name.lower() for a in cmd[4:] if not a.startswith("-")
                  and a != DIR]
    return names


def numba_cuda_arg(commands) -> str | None:
    found = [a for cmd in commands for a in cmd if a.startswith("numba-cuda")]
    assert len(found) <= 1, found
    return found[0] if found else None


CASES = {
    "12.4 driver, older torch": ((12, 4), {**COLAB, "torch": "2.3.1+cu121",
                                           "torchvision": "0.18.1+cu121"}, "cu12"),
    "13.0 driver": ((13, 0), COLAB, "cu13"),
    "no GPU, warm runtime": (None, {**WARM_CU12, "cuda-bindings": "13.0.3",
                                    "cuda-toolkit": "13.0.2", "nvidia-nvjitlink": "13.0.88"},
                             None),
    "CPU runtime": (None, COLAB, "cu13"),
}


@pytest.mark.parametrize("case", CASES)
def test_no_plan_installs_torch_and_numba_cuda_follows_the_driver(case):
    driver, installed, extra = CASES[case]
    commands, summary = plan(driver, installed)
    names = installed_names(commands)
    assert not {"torch", "torchvision"} & set(names), commands
    assert not set(cb.KEEP) & set(names), commands
    assert all("torch" not in a for cmd in commands for a in cmd), commands
    arg = numba_cuda_arg(commands)
    if extra is None:
        assert arg is None, commands  # already installed with the pieces it needs
    else:
        assert arg == f"numba-cuda[{extra}]>=0.30", commands
    assert summary.count("\n") == 0 and summary.startswith("Colab setup (")
    assert f"keeping Colab's torch {installed['torch']}" in summary


def test_exact_commands_for_a_fresh_runtime_with_a_cuda_12_4_driver():
    commands, summary = plan((12, 4), COLAB)
    assert commands == [
        [PY, "-m", "pip", "install", "-q", "numba>=0.61", "numba-cuda[cu12]>=0.30",
         "nvidia-cuda-cuobjdump>=13", "nvidia-cuda-nvdisasm>=13", "ipywidgets>=8.1",
         "plotly>=6.0", "anywidget>=0.9", "py-cpuinfo>=9.0", "nvidia-ml-py>=12",
         "greenlet>=3.0"],
        [PY, "-m", "pip", "install", "-q", "--no-deps", "-e", DIR],
    ]
    assert "GPU driver for CUDA 12.4" in summary and "cu12: the driver's CUDA line" in summary
    assert summary.endswith("the workbook itself without its dependencies.")


def test_a_warm_runtime_installs_nothing():
    commands, summary = plan((12, 4), WARM_CU12)
    assert commands == []
    assert "nothing to install" in summary and summary.endswith("the workbook is installed.")


def test_cu13_pieces_on_a_cuda_12_driver_are_replaced_by_cu12():
    """numba-cuda being installed is not enough: with CUDA 13 pieces a 12.x driver rejects the
    compiled code, so it is installed again with the cu12 extra."""
    cu13 = {**WARM_CU12, "cuda-bindings": "13.0.3", "cuda-toolkit": "13.0.2",
            "nvidia-nvjitlink": "13.0.88"}
    del cu13["nvidia-nvjitlink-cu12"]
    commands, _ = plan((12, 4), cu13)
    assert commands == [[PY, "-m", "pip", "install", "-q", "numba-cuda[cu12]>=0.30"]]
    commands, _ = plan((13, 0), cu13)
    assert commands == []
    commands, _ = plan((12, 8), {**cu13, "numba-cuda": "0.20.0"})  # too old, and wrong pieces
    assert commands == [[PY, "-m", "pip", "install", "-q", "numba-cuda[cu12]>=0.30"]]


def test_a_newer_driver_takes_the_newest_extra():
    assert numba_cuda_arg(plan((14, 1), COLAB).commands) == "numba-cuda[cu13]>=0.30"
    assert numba_cuda_arg(plan((11, 8), COLAB).commands) == "numba-cuda[cu12]>=0.30"


def test_other_platforms_take_no_cuda_extra_and_no_linux_only_tools():
    commands, _ = plan(None, COLAB, platform="darwin")
    names = installed_names(commands)
    assert numba_cuda_arg(commands) == "numba-cuda>=0.30"
    assert "nvidia-cuda-cuobjdump" not in names and "nvidia-cuda-nvdisasm" not in names


def test_torch_older_than_the_floor_is_kept_and_said():
    commands, summary = plan((12, 2), {**COLAB, "torch": "2.1.0+cu121"})
    assert "torch" not in installed_names(commands)
    floor = ".".join(map(str, cb.TORCH_FLOOR))
    assert f"keeping Colab's torch 2.1.0+cu121 and torchvision 0.20.1+cu124 (older than the " \
           f"{floor} the workbook needs: some cells may fail)" in summary
    _, summary = plan((12, 2), {k: v for k, v in COLAB.items() if k != "torch"})
    assert "torch is missing" in summary


def test_torch_floor_is_pyprojects():
    deps = {Requirement(r).name: Requirement(r) for r in REQS}
    floor = ".".join(map(str, cb.TORCH_FLOOR))
    assert str(deps["torch"].specifier) == f">={floor}"


def test_names_are_matched_in_any_spelling():
    spelled = {k.replace("-", "_").upper(): v for k, v in WARM_CU12.items()}
    assert plan((12, 4), spelled).commands == []


def test_a_bad_driver_version_is_refused_by_name():
    for bad in ((12,), ("12", "4"), (12, 4, 0), 12.4):
        with pytest.raises(ValueError, match="^driver_cuda: expected"):
            plan(bad, COLAB)


@pytest.mark.slow
def test_keep_lists_only_the_workbooks_own_dependencies_that_notebooks_do_not_import():
    names = {Requirement(r).name for r in REQS}
    assert set(cb.KEEP) <= names
    # Apart from torch and torchvision, the notebooks and helpers never import them.
    sources = [p.read_text() for p in (ROOT / "helpers").rglob("*.py")]
    for path in [*(ROOT / "notebooks").glob("*.ipynb"), *(ROOT / "labs").rglob("*.ipynb")]:
        import nbformat
        sources += [c.source for c in nbformat.read(path, as_version=4).cells
                    if c.cell_type == "code"]
    imported = set()
    for text in sources:
        try:
            tree = ast.parse(text)
        except SyntaxError:  # a cell with IPython magics
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                imported |= {a.name.split(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                imported.add(node.module.split(".")[0])
    assert not (set(cb.KEEP) - {"torch", "torchvision"}) & imported
    assert {"torch", "torchvision"} <= imported


class _FakeLibcuda:
    def __init__(self, version: int, rc: int = 0):
        self.version, self.rc = version, rc

    def cuDriverGetVersion(self, ref):
        ref._obj.value = self.version
        return self.rc


def test_driver_cuda_version_from_libcuda(monkeypatch):
    def cdll(name):
        if name == "libcuda.so.1":
            return _FakeLibcuda(12040)
        raise OSError(name)
    monkeypatch.setattr(ctypes, "CDLL", cdll)
    assert cb.driver_cuda_version() == (12, 4)
    monkeypatch.setattr(ctypes, "CDLL", lambda name: _FakeLibcuda(13000))
    assert cb.driver_cuda_version() == (13, 0)
    monkeypatch.setattr(ctypes, "CDLL", lambda name: _FakeLibcuda(0, rc=100))
    assert cb.driver_cuda_version() is None

    def missing(name):
        raise OSError(name)
    monkeypatch.setattr(ctypes, "CDLL", missing)
    assert cb.driver_cuda_version() is None


def test_installed_packages_are_this_environments():
    found = cb.installed_packages()
    assert re.match(r"\d+\.\d+", found["torch"]) and "numba-cuda" in found
    assert all(k == k.lower() and "_" not in k for k in found)


def test_bootstrap_runs_the_plan_and_prints_one_line(monkeypatch, capsys):
    monkeypatch.setattr(cb, "driver_cuda_version", lambda: (12, 4))
    monkeypatch.setattr(cb, "installed_packages", lambda: dict(COLAB))
    activated = []
    monkeypatch.setattr(cb, "activate_numba_cuda", lambda: activated.append(1))
    ran = []
    result = cb.bootstrap(ROOT, run=ran.append)
    assert ran == result.commands and len(ran) == 2
    assert ran[0][0] == sys.executable and ran[1][-1] == str(ROOT)
    assert activated == [1]  # numba-cuda was installed: its import redirect is put in place
    assert capsys.readouterr().out == result.summary + "\n"
    # where numba.cuda was imported already, the line ends saying to restart
    monkeypatch.setattr(cb, "activate_numba_cuda", lambda: "Restart, please.")
    result = cb.bootstrap(ROOT, run=ran.append)
    assert capsys.readouterr().out == result.summary + " Restart, please.\n"
    monkeypatch.setattr(cb, "driver_cuda_version", lambda: None)
    cb.bootstrap(ROOT, run=ran.append)
    out = capsys.readouterr().out.splitlines()
    assert out[0] == cb.GPU_HINT and "T4 GPU" in out[0] and out[1].startswith("Colab setup")


def test_module_needs_only_the_standard_library_and_packaging():
    tree = ast.parse((ROOT / "tools" / "colab_bootstrap.py").read_text())
    top = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            top |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            top.add(node.module.split(".")[0])
    assert top - {"__future__", "packaging", "pip", "_numba_cuda_redirector"} <= \
        set(sys.stdlib_module_names), top


def test_cuda_toolkit_of_the_wrong_line_is_replaced():
    commands, _ = plan((12, 4), {**WARM_CU12, "cuda-toolkit": "13.0.2"})
    assert commands == [[PY, "-m", "pip", "install", "-q", "numba-cuda[cu12]>=0.30"]]


def test_odd_versions_and_requirements_are_handled():
    """A version that is not PEP 440 counts as not installed; extras and URLs are kept, markers
    are evaluated and dropped."""
    reqs = ["foo[bar]>=1; sys_platform == 'linux'", "baz @ https://example.org/baz-1.0.whl",
            "qux>=2; sys_platform == 'win32'", "torch>=2.6"]
    commands, _ = cb.plan(None, {"foo": "banana", "torch": "2.6.0"}, "linux", reqs, DIR, PY)
    assert commands[0] == [PY, "-m", "pip", "install", "-q", "foo[bar]>=1",
                           "baz @ https://example.org/baz-1.0.whl"]


def test_pip_output_is_shown_only_when_pip_fails(capsys):
    ok = cb._pip([sys.executable, "-c", "print('collecting...')"])
    assert ok == "collecting...\n" and capsys.readouterr().out == ""
    with pytest.raises(subprocess.CalledProcessError):
        cb._pip([sys.executable, "-c", "import sys; print('no matching distribution'); "
                                       "sys.exit(3)"])
    assert "no matching distribution" in capsys.readouterr().out


def test_pips_conflict_report_becomes_part_of_the_line(monkeypatch, capsys):
    monkeypatch.setattr(cb, "driver_cuda_version", lambda: (12, 4))
    monkeypatch.setattr(cb, "installed_packages", lambda: dict(COLAB))
    monkeypatch.setattr(cb, "activate_numba_cuda", lambda: None)
    report = ("ERROR: pip's dependency resolver does not currently take into account all the "
              "packages that are installed. This behaviour is the source of the following "
              "dependency conflicts.\ncudf-cu12 24.12.0 requires numba<0.61,>=0.59.1, but you "
              "have numba 0.62.1 which is incompatible.\ntorch 2.5.1+cu124 requires "
              "nvidia-cuda-nvrtc-cu12==12.4.127; ..., but you have 12.9.86 which is "
              "incompatible.\n")
    cb.bootstrap(ROOT, run=lambda cmd: report if "--no-deps" not in cmd else "")
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 1
    assert out[0].endswith("pip: cudf-cu12, torch now find other versions of their "
                           "dependencies than they ask for (`pip check` lists them).")


def test_a_numba_cuda_installed_now_takes_over_numba_cuda(monkeypatch):
    """Python reads numba-cuda's .pth file only at start-up; the bootstrap does what it does."""
    monkeypatch.setattr(sys, "meta_path", list(sys.meta_path))
    monkeypatch.delitem(sys.modules, "_numba_cuda_redirector", raising=False)
    monkeypatch.delitem(sys.modules, "numba.cuda", raising=False)
    assert cb.activate_numba_cuda() is None
    assert "_numba_cuda_redirector" in sys.modules
    assert any(type(f).__name__ == "NumbaCudaFinder" for f in sys.meta_path)
    monkeypatch.setitem(sys.modules, "numba.cuda", types.ModuleType("numba.cuda"))
    assert "Restart session" in cb.activate_numba_cuda()


@pytest.mark.parametrize("numpy, installs", [
    ("2.5.2", False),    # Colab's numpy 2.5 stays: helpers.device.numpy_compat covers it
    ("2.4.6", False),
    ("1.24.4", True),    # below the floor: upgraded, within the bound
    (None, True),        # missing
])
def test_colab_numpy_is_kept_above_its_floor_and_installed_within_the_bound_below_it(
        numpy, installs):
    installed = {k: v for k, v in {**WARM_CU12, "numpy": numpy}.items() if v is not None}
    commands, _ = plan((12, 4), installed)
    args = [a for cmd in commands for a in cmd[4:]
            if not a.startswith("-") and a != DIR and Requirement(a).name == "numpy"]
    assert bool(args) == installs, commands
    if installs:
        assert Requirement(args[0]).specifier.contains("2.4.6")
        assert not Requirement(args[0]).specifier.contains("2.5.0")
