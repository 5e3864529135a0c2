"""The environment files agree: environment.yml installs what pyproject.toml declares, and the
Makefile, CI script and README name the workbook's commands."""

from __future__ import annotations

import pathlib
import re
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


def test_the_test_commands_keep_bytecode():
    """Every pytest that make test and make test-fast start runs with PYTHONDONTWRITEBYTECODE
    empty, so that the test modules, rewritten once, are read back by the next process."""
    text = (ROOT / "Makefile").read_text()
    assert re.search(r"^KEEP_BYTECODE\s*:=\s*PYTHONDONTWRITEBYTECODE=\s*$", text, flags=re.M)
    for target in ("test", "test-fast"):
        recipe = re.search(rf"^{target}:.*\n((?:\t.*\n)+)", text, flags=re.M).group(1)
        runs = [line for line in recipe.splitlines() if "-m pytest" in line]
        assert runs and all("$(KEEP_BYTECODE) $(PY) -m pytest" in line for line in runs), \
            (target, recipe)


def test_ci_runs_make_test():
    ci = ROOT / ".ci" / "run"
    commands = [ln.strip() for ln in ci.read_text().splitlines()
                if ln.strip() and not ln.strip().startswith("#")]
    assert "make test" in commands
    assert ci.stat().st_mode & 0o111, ".ci/run should be executable"


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
