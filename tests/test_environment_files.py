"""The environment files agree: environment.yml installs what pyproject.toml declares, and the
Makefile, CI script and README name the workbook's commands."""

from __future__ import annotations

import importlib.util
import pathlib
import re
import sys
import tomllib

import pytest
import yaml
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = pathlib.Path(__file__).resolve().parent.parent


def normalise(name: str) -> str:
    """PEP 503: lower case, runs of -, _ and . become a single -."""
    return re.sub(r"[-_.]+", "-", name).lower()


@pytest.fixture(scope="module")
def pyproject() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


@pytest.fixture(scope="module")
def environment() -> dict:
    return yaml.safe_load((ROOT / "environment.yml").read_text())


def _pip_list(environment) -> list[str]:
    lists = [d["pip"] for d in environment["dependencies"] if isinstance(d, dict) and "pip" in d]
    assert len(lists) == 1, "environment.yml should have exactly one pip: list"
    return [s for s in lists[0] if s.strip() != "-e ."]


def _declared(pyproject) -> list[str]:
    """The project's dependencies and those of every group uv installs by default."""
    groups = pyproject["tool"]["uv"]["default-groups"]
    assert set(groups) == set(pyproject["dependency-groups"]), "a group uv does not install"
    return list(pyproject["project"]["dependencies"]) + [
        r for g in groups for r in pyproject["dependency-groups"][g]]


@pytest.mark.parametrize("spec, name", [
    ("numba-cuda[cu13]>=0.30; sys_platform == 'linux'", "numba-cuda"),
    ("Py_CpuInfo>=9.0", "py-cpuinfo"),
    ("nvidia.ml__py >= 12", "nvidia-ml-py"),
    ("torch", "torch"),
])
def test_normalise(spec, name):
    assert normalise(Requirement(spec).name) == name == canonicalize_name(Requirement(spec).name)


def test_pip_names_equal_project_and_test_dependencies(pyproject, environment):
    pip = {normalise(Requirement(s).name) for s in _pip_list(environment)}
    declared = {normalise(Requirement(s).name) for s in _declared(pyproject)}
    assert pip == declared, (f"only in environment.yml: {sorted(pip - declared)}; "
                             f"only in pyproject.toml: {sorted(declared - pip)}")
    assert {"numpy", "torch", "numba", "numba-cuda", "pytest", "nbval", "hypothesis"} <= pip


def test_pip_requirements_match_exactly(pyproject, environment):
    # the same versions, extras and markers: same builds whichever way one installs
    def key(s):
        r = Requirement(s)
        return (normalise(r.name), tuple(sorted(r.extras)), str(r.specifier), str(r.marker))

    assert sorted(map(key, _pip_list(environment))) == sorted(map(key, _declared(pyproject)))


def test_environment_installs_the_workbook_and_python(pyproject, environment):
    deps = environment["dependencies"]
    pip = next(d["pip"] for d in deps if isinstance(d, dict))
    assert "-e ." in pip
    assert "pip" in deps
    python = next(d for d in deps if isinstance(d, str) and d.startswith("python"))
    assert python.replace("python", "", 1) == pyproject["project"]["requires-python"]


def _make_targets() -> set[str]:
    text = (ROOT / "Makefile").read_text()
    return set(re.findall(r"^([A-Za-z0-9_.-]+)\s*:(?!=)", text, flags=re.M))


def test_makefile_has_the_workbook_targets():
    targets = _make_targets()
    assert {"lab", "test", "run"} <= targets
    text = (ROOT / "Makefile").read_text()
    phony = re.search(r"^\.PHONY:(.*)$", text, flags=re.M)
    assert phony and {"lab", "test", "run"} <= set(phony.group(1).split())


def test_make_test_runs_the_tests_marked_alone_from_the_files_it_names():
    """make test runs ``pytest -m alone`` on the files its ALONE names only, after the rest: a
    test marked alone anywhere else would not run at all."""
    text = (ROOT / "Makefile").read_text()
    named = re.search(r"^ALONE\s*:=\s*(.+)$", text, flags=re.M).group(1).split()
    assert '-m "not alone"' in text and "-m alone $(ALONE)" in text
    mark = re.compile(r"^(@pytest\.mark\.alone|pytestmark = .*\balone\b)", flags=re.M)
    marked = {str(f.relative_to(ROOT)) for f in (ROOT / "tests").glob("test_*.py")
              if mark.search(f.read_text())}
    assert marked and marked <= set(named), (marked, named)


def test_the_test_commands_keep_bytecode_and_let_idle_threads_sleep():
    """Every pytest that make test and make test-fast start, and make test-pythons, runs with
    PYTHONDONTWRITEBYTECODE empty, so that the test modules, rewritten once, are read back by
    the next process, and with OMP_WAIT_POLICY=PASSIVE and OPENBLAS_NUM_THREADS=1 unless the
    caller set them, so that no idle thread spins on a core another test process needs."""
    text = (ROOT / "Makefile").read_text()
    assert re.search(r"^KEEP_BYTECODE\s*:=\s*PYTHONDONTWRITEBYTECODE=\s*$", text, flags=re.M)
    assert re.search(r"^TEST_ENV\s*:=\s*\$\(KEEP_BYTECODE\) "
                     r"OMP_WAIT_POLICY=\$\$\{OMP_WAIT_POLICY:-PASSIVE\} \\\n"
                     r"\tOPENBLAS_NUM_THREADS=\$\$\{OPENBLAS_NUM_THREADS:-1\}\s*$", text,
                     flags=re.M)
    for target, run in (("test", "$(TEST_ENV) $(PY) -m pytest"),
                        ("test-fast", "$(TEST_ENV) $(PY) -m pytest"),
                        ("test-pythons", "$(TEST_ENV) UV=$(UV) $(PY) -m tools.test_pythons")):
        recipe = re.search(rf"^{target}:.*\n((?:\t.*\n)+)", text, flags=re.M).group(1)
        runs = [line for line in recipe.splitlines() if "-m pytest" in line or "-m tools" in line]
        assert runs and all(run in line for line in runs), (target, recipe)


FAKE_MAKE = """#!/usr/bin/env bash
echo "start $* $(date +%s.%N)" >> "$CALLS"
[ "$*" = test ] && sleep 1.5
[ "$*" = test-pythons ] && echo "the Pythons' report"
echo "end $* $(date +%s.%N)" >> "$CALLS"
[ "$*" = "$FAIL" ] && exit 3
exit 0
"""


def _run_ci(tmp_path, fail: str):
    """.ci/run in a copy of the repository's root with `make` (and Chromium) replaced by scripts
    that log each call's target, start and end; the target named ``fail`` exits 3."""
    import os
    import subprocess

    (tmp_path / ".ci").mkdir()
    (tmp_path / ".ci" / "run").write_bytes((ROOT / ".ci" / "run").read_bytes())
    (tmp_path / ".ci" / "run").chmod(0o755)
    bin_ = tmp_path / "bin"
    bin_.mkdir()
    for name, text in (("make", FAKE_MAKE), ("chromium", "#!/bin/sh\nexit 0\n")):
        (bin_ / name).write_text(text)
        (bin_ / name).chmod(0o755)
    calls = tmp_path / "calls.txt"
    env = dict(os.environ, PATH=f"{bin_}{os.pathsep}{os.environ['PATH']}", CALLS=str(calls),
               FAIL=fail)
    out = subprocess.run([str(tmp_path / ".ci" / "run")], env=env, capture_output=True,
                         text=True, timeout=60)
    log = {}
    for line in calls.read_text().splitlines():
        what, target, when = line.split()
        log[(what, target)] = float(when)
    return out, log


def test_ci_installs_then_runs_make_test_with_test_pythons_beside_it(tmp_path):
    assert (ROOT / ".ci" / "run").stat().st_mode & 0o111, ".ci/run should be executable"
    out, log = _run_ci(tmp_path, fail="none")
    assert out.returncode == 0, out.stdout + out.stderr
    assert log[("end", "env")] <= min(log[("start", "test")], log[("start", "test-pythons")])
    assert log[("start", "test-pythons")] < log[("end", "test")]        # beside, not after
    assert "the Pythons' report" in out.stdout                         # its output is shown


@pytest.mark.parametrize("failing", ["test", "test-pythons", "env"])
def test_ci_fails_when_either_fails(tmp_path, failing):
    out, log = _run_ci(tmp_path, fail=failing)
    assert out.returncode != 0, (failing, out.stdout)
    if failing != "env":
        assert ("end", "test") in log and ("end", "test-pythons") in log   # both ran to the end


def test_readme_names_the_commands():
    readme = (ROOT / "README.md").read_text()
    assert "make lab" in readme
    assert "make test" in readme


def test_the_lock_leaves_out_the_slow_iri_checker(pyproject):
    """uv installs no rfc3987-syntax: jsonschema imports it eagerly and builds its parsers, about
    a second in every Jupyter kernel and JupyterLab start, for a format no Jupyter schema uses.
    Where this environment came from the lock (the project's .venv), it is not installed."""
    import importlib.util
    import sys

    overrides = pyproject["tool"]["uv"].get("override-dependencies", [])
    left_out = [Requirement(o) for o in overrides if canonicalize_name(Requirement(o).name)
                == "rfc3987-syntax"]
    assert left_out and not left_out[0].marker.evaluate(), overrides
    lock = tomllib.loads((ROOT / "uv.lock").read_text())
    assert {"name": "rfc3987-syntax", "marker": "sys_platform == 'never'"} in (
        lock.get("manifest", {}).get("overrides", [])), "uv.lock is older than pyproject.toml"
    if pathlib.Path(sys.prefix).resolve() == (ROOT / ".venv").resolve():
        assert importlib.util.find_spec("rfc3987_syntax") is None, "run make env"


def test_the_longest_files_are_handed_out_first_and_exist():
    """Under ``--dist loadfile`` the root conftest.py hands out its LONGEST_FIRST files first, in
    that order (pytest-xdist's reordering by number of tests is turned off), then the others,
    most tests first; a file renamed away from the list would silently start late."""
    root = next((m for m in list(sys.modules.values())
                 if getattr(m, "__file__", None) == str(ROOT / "conftest.py")), None)
    if root is None:  # not loaded under that name: load a copy (its patches guard themselves)
        spec = importlib.util.spec_from_file_location("root_conftest", ROOT / "conftest.py")
        root = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(root)

    assert all((ROOT / path).is_file() for path in root.LONGEST_FIRST)

    class Item:
        def __init__(self, nodeid):
            self.nodeid = nodeid

    class Config:
        def __init__(self, dist):
            self.dist, self.option = dist, type("Options", (), {"loadscopereorder": True})()

        def getoption(self, name, default=None):
            return self.dist if name == "dist" else default

    ids = ["tests/test_a.py::x", "tests/test_b.py::x", "tests/test_b.py::y",
           f"{root.LONGEST_FIRST[1]}::x", f"{root.LONGEST_FIRST[0]}::x",
           f"{root.LONGEST_FIRST[0]}::y"]
    items = [Item(i) for i in ids]
    config = Config("loadfile")
    root.pytest_configure(config)
    root.pytest_collection_modifyitems(config, items)
    assert config.option.loadscopereorder is False
    assert [i.nodeid for i in items] == [ids[4], ids[5], ids[3], ids[1], ids[2], ids[0]]
    items, config = [Item(i) for i in ids], Config("load")
    root.pytest_configure(config)
    root.pytest_collection_modifyitems(config, items)
    assert [i.nodeid for i in items] == ids and config.option.loadscopereorder is True
