"""tools/gpu_tests.py: the tests marked ``gpu`` with a server's python3 and pytest alone."""

from __future__ import annotations

import io
import os
import subprocess
import sys
import textwrap
import threading
import time

import pytest

from tools import gpu_tests

#: What a bare GPU server does not have (tools/test_pythons.py builds such an environment).
ABSENT = ("plotly", "ipywidgets", "IPython", "jupyterlab", "jupyter_client", "nbformat",
          "nbclient", "nbval", "hypothesis", "xdist", "anywidget")


def _blocked_pytest(args: list[str]) -> subprocess.CompletedProcess:
    """pytest.main(args) in a process where none of :data:`ABSENT` can be imported."""
    script = textwrap.dedent(f"""
        import importlib.abc, sys
        class Block(importlib.abc.MetaPathFinder):
            def find_spec(self, name, path=None, target=None):
                if name.split(".")[0] in {ABSENT!r}:
                    raise ImportError(f"{{name}} is blocked: not on a bare GPU server")
        sys.meta_path.insert(0, Block())
        import pytest
        sys.exit(pytest.main({args!r}))
    """)
    env = dict(gpu_tests.environment(), NUMBA_ENABLE_CUDASIM="1")
    return subprocess.run([sys.executable, "-c", script], cwd=gpu_tests.ROOT, env=env,
                          capture_output=True, text=True, timeout=600)


@pytest.mark.slow
def test_the_gpu_tests_collect_without_what_a_server_lacks():
    modules = gpu_tests.gpu_test_modules()
    argv = gpu_tests.command(modules)[3:]  # after "python -m pytest"
    proc = _blocked_pytest([*argv, "--collect-only", "-q"])
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    collected = [line for line in proc.stdout.splitlines() if "::" in line]
    assert len(collected) >= 30, proc.stdout[-2000:]
    assert {line.split("::")[0] for line in collected} == {
        str(m.relative_to(gpu_tests.ROOT)) for m in modules}


def test_a_gpu_test_beside_a_figure_import_is_caught(tmp_path):
    """The collection check fails for a module that marks a test gpu and imports plotly."""
    planted = tmp_path / "test_planted.py"
    planted.write_text("import plotly\nimport pytest\n\n@pytest.mark.gpu\ndef test_x():\n"
                       "    pass\n")
    proc = _blocked_pytest(["-p", "no:cacheprovider", "-o", "addopts=", "-m", "gpu",
                            "--collect-only", "-q", "--rootdir", str(tmp_path), str(planted)])
    assert proc.returncode != 0 and "blocked" in proc.stdout + proc.stderr


def test_modules_are_those_that_mark_a_test_gpu(tmp_path):
    (tmp_path / "test_a.py").write_text("import pytest\n\n@pytest.mark.gpu\ndef test_a(): pass\n")
    (tmp_path / "test_b.py").write_text(  # the mark only in a comment, a string, a longer name
        "import pytest\n# pytest.mark.gpu\nS = '@pytest.mark.gpu'\n"
        "pytestmark = [pytest.mark.gpuish]\n")
    (tmp_path / "test_c.py").write_text("import pytest\npytestmark = [pytest.mark.gpu]\n")
    (tmp_path / "helper.py").write_text("import pytest\npytest.mark.gpu\n")
    assert [p.name for p in gpu_tests.gpu_test_modules(tmp_path)] == ["test_a.py", "test_c.py"]
    found = {p.name for p in gpu_tests.gpu_test_modules()}
    assert {"test_gpu.py", "test_gpu_measurements.py", "test_compiled.py"} <= found
    assert "test_transfers.py" not in found  # its GPU tests moved to test_gpu_measurements.py


def test_the_command_drops_addopts_and_selects_gpu():
    cmd = gpu_tests.command([gpu_tests.ROOT / "tests" / "test_gpu.py"], python="python3")
    assert cmd[:3] == ["python3", "-m", "pytest"]
    assert cmd[cmd.index("-o") + 1] == "addopts=" and cmd[cmd.index("-m", 3) + 1] == "gpu"
    assert cmd[-1] == "tests/test_gpu.py" and "--nbval" not in cmd
    env = gpu_tests.environment()
    assert env["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] == "1"
    assert env["PYTHONPATH"].split(os.pathsep)[0] == str(gpu_tests.ROOT)


def test_a_run_past_its_budget_is_interrupted_and_logged(tmp_path):
    log, out = tmp_path / "gpu_tests.log", io.StringIO()
    slow = [sys.executable, "-c", "import time; print('started', flush=True); time.sleep(600)"]
    code = gpu_tests.run(0.5, log, argv=slow, out=out)
    assert code != 0
    text = log.read_text()
    assert "budget of 0.5 s reached: pytest interrupted" in text
    assert text == out.getvalue()


def test_the_interrupt_reaches_pytest_when_the_caller_ignores_it(monkeypatch):
    """Started in the background by a script (``make gpu-lease &``), the caller ignores SIGINT
    and its children would inherit that: the budget's interrupt must still stop pytest, not
    wait out the grace and kill it."""
    import signal

    monkeypatch.setattr(gpu_tests, "_GRACE_S", 60.0)
    slow = [sys.executable, "-c", "import time; print('started', flush=True); time.sleep(600)"]
    before = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        begun = time.monotonic()
        code = gpu_tests.run(0.5, argv=slow, out=io.StringIO())
    finally:
        signal.signal(signal.SIGINT, before)
    assert code not in (0, -9) and time.monotonic() - begun < 30, code


class _Started(io.StringIO):
    """Output that sets ``started`` once the child has printed "started"."""

    def __init__(self):
        super().__init__()
        self.started = threading.Event()

    def write(self, text):
        if "started" in text:
            self.started.set()
        return super().write(text)


def test_a_run_that_ignores_the_interrupt_is_killed(tmp_path, monkeypatch):
    # The stop comes only once the child ignores SIGINT: an interrupt that arrived while its
    # interpreter was still starting (seconds on a busy machine) would end it as Python's
    # default handler does, with status 1, and this test would judge nothing.
    monkeypatch.setattr(gpu_tests, "_GRACE_S", 0.5)
    stubborn = [sys.executable, "-c", "import signal, time; signal.signal(signal.SIGINT, "
                "signal.SIG_IGN); print('started', flush=True); time.sleep(600)"]
    out = _Started()
    assert gpu_tests.run(120, argv=stubborn, out=out, stop=out.started) == -9
    assert out.getvalue().startswith("started\n")


def test_a_passing_run_returns_its_status(tmp_path):
    out = io.StringIO()
    assert gpu_tests.run(60, argv=[sys.executable, "-c", "print('fine')"], out=out) == 0
    assert out.getvalue() == "fine\n"
    assert gpu_tests.run(60, argv=[sys.executable, "-c", "raise SystemExit(4)"],
                         out=io.StringIO()) == 4


@pytest.mark.parametrize("budget", ["0", "-5"])
def test_a_budget_that_is_not_positive_is_refused(budget, capsys):
    with pytest.raises(SystemExit) as exc:
        gpu_tests.main(["--budget-s", budget])
    assert exc.value.code == 2 and "--budget-s must be > 0" in capsys.readouterr().err
    with pytest.raises(ValueError, match="budget_s"):
        gpu_tests.run(float(budget), argv=[sys.executable, "-c", "pass"])


def test_a_run_is_interrupted_once_stop_is_set(tmp_path):
    stop, out = threading.Event(), io.StringIO()
    stop.set()
    slow = [sys.executable, "-c", "import time; time.sleep(600)"]
    assert gpu_tests.run(600, argv=slow, out=out, stop=stop) != 0
    assert "stopped by a signal: pytest interrupted" in out.getvalue()
