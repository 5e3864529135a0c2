"""tools.run_notebooks: execute notebooks headless into a build folder, ipynb + html.

Kernel starts take seconds, so one module fixture runs everything once: ``main()`` in this
process on a good notebook, one whose cell fails and one whose kernel dies, into ``--out`` and,
at the same time in a subprocess, ``python -m tools.run_notebooks --in-place`` on copies of the
first two.
"""

from __future__ import annotations

import contextlib
import io
import re
import subprocess
import sys

import nbformat
import pytest

from tools import run_notebooks

#: A file the good notebook's kernel writes, in its folder, if Python's teardown runs in it: a
#: kernel stopped at once when its notebook is done (as nbval stops its kernels) never writes it.
TORN_DOWN = "kernel_torn_down"
GOOD = ("x = 6 * 7", "print('answer', x)",
        f"import atexit, pathlib\natexit.register(pathlib.Path({TORN_DOWN!r}).touch)")
BAD = ("y = 1", "raise ValueError('broken on purpose')", "print('never reached')")
#: The kernel process writes to its file descriptor 2 and exits, as a crashing library would.
#: (Where ipykernel captures that descriptor for the cell, it also copies what it reads to the
#: kernel's own stderr: the pause lets it.)
DIES = ("import os, time",
        "os.write(2, b'planted: the kernel goes down\\n')\ntime.sleep(1)\nos._exit(3)")


def _notebook(path, *sources):
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(s) for s in sources]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3",
                                 "language": "python"}
    nbformat.write(nb, path)
    return path


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    src = tmp_path_factory.mktemp("notebooks")
    good = _notebook(src / "01_good.ipynb", *GOOD)
    bad = _notebook(src / "02_bad.ipynb", *BAD)
    dies = _notebook(src / "03_dies.ipynb", *DIES)
    out = tmp_path_factory.mktemp("build")

    in_place = tmp_path_factory.mktemp("in_place")
    ip_good = _notebook(in_place / "01_good.ipynb", *GOOD)
    ip_bad = _notebook(in_place / "02_bad.ipynb", *BAD)
    ip_bad_before = ip_bad.read_bytes()
    proc = subprocess.Popen(
        [sys.executable, "-m", "tools.run_notebooks", "--in-place", "--timeout", "60",
         str(ip_good), str(ip_bad)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=run_notebooks.ROOT)

    stdout = io.StringIO()  # capsys is function-scoped; capture by hand
    try:
        with contextlib.redirect_stdout(stdout):
            code = run_notebooks.main([str(good), str(bad), str(dies), "--out", str(out),
                                       "--timeout", "60"])
    finally:
        ip_out, ip_err = proc.communicate(timeout=300)
    return {"code": code, "stdout": stdout.getvalue(), "out": out, "good": good,
            "ip_code": proc.returncode, "ip_stdout": ip_out, "ip_stderr": ip_err,
            "ip_dir": in_place, "ip_good": ip_good, "ip_bad": ip_bad,
            "ip_bad_before": ip_bad_before}


@pytest.mark.slow
def test_exit_code_is_1_when_a_notebook_fails(run):
    assert run["code"] == 1


@pytest.mark.slow
def test_one_line_per_notebook_and_a_total(run):
    lines = run["stdout"].strip().splitlines()
    good, bad, dies = lines[0], lines[1], lines[2]
    assert good.startswith("01_good.ipynb") and good.rstrip().endswith("ok")
    assert "failed" not in good
    assert " s " in good  # the seconds it took
    assert bad.startswith("02_bad.ipynb") and " failed" in bad
    assert "ValueError" in bad and "broken on purpose" in bad
    assert dies.startswith("03_dies.ipynb") and " failed" in dies and "DeadKernelError" in dies
    assert re.fullmatch(r"3 notebooks, 1 ok, 2 failed, \d+\.\d min in all", lines[-1])


@pytest.mark.slow
def test_kernel_output_is_shown_only_when_the_kernel_fails(run):
    """A cell's error is the cell's business: nothing of the kernel's own log under it. A dead
    kernel's report goes on with what the kernel process printed."""
    lines = run["stdout"].strip().splitlines()
    assert lines[2].startswith("03_dies.ipynb")
    assert lines[3] == "  kernel output:"
    report = lines[4:-1]
    assert report and all(ln.startswith("    ") for ln in report)
    assert "    planted: the kernel goes down" in report
    # the in-place run, all cells' failures: one line each and the total, on stdout only
    assert len(run["ip_stdout"].strip().splitlines()) == 3
    # stderr holds nothing, or only the note that a kernel which did not start was restarted
    assert all(ln.endswith("starting it again") for ln in run["ip_stderr"].splitlines()), (
        run["ip_stderr"])


@pytest.mark.slow
def test_executed_notebooks_and_html_land_in_out(run):
    out = run["out"]
    assert sorted(p.name for p in out.iterdir()) == [
        "01_good.html", "01_good.ipynb", "02_bad.html", "02_bad.ipynb", "03_dies.html",
        "03_dies.ipynb"]
    for stem in ("01_good", "02_bad"):
        html = (out / f"{stem}.html").read_text(encoding="utf-8")
        assert html.lstrip().lower().startswith("<!doctype html")
    good = nbformat.read(out / "01_good.ipynb", as_version=4)
    assert "answer 42" in good.cells[1].outputs[0]["text"]
    assert "answer 42" in (out / "01_good.html").read_text(encoding="utf-8")
    bad = nbformat.read(out / "02_bad.ipynb", as_version=4)
    assert bad.cells[1].outputs[0]["output_type"] == "error"
    assert bad.cells[1].outputs[0]["ename"] == "ValueError"
    assert bad.cells[2].outputs == []  # execution stopped at the error


@pytest.mark.slow
def test_each_kernel_is_stopped_at_once_when_its_notebook_is_done(run):
    """Every output is in by then; Python's teardown in the kernel (seconds of CPU with torch
    and Numba imported) would run its exit handlers, and the good notebook registers one."""
    assert "answer 42" in nbformat.read(run["out"] / "01_good.ipynb",
                                        as_version=4).cells[1].outputs[0]["text"]
    assert not (run["good"].parent / TORN_DOWN).exists()
    assert not (run["ip_dir"] / TORN_DOWN).exists()


@pytest.mark.slow
def test_sources_are_not_modified_when_writing_to_out(run):
    src = nbformat.read(run["good"], as_version=4)
    assert [c.source for c in src.cells] == list(GOOD)
    assert all(not c.outputs for c in src.cells)


@pytest.mark.slow
def test_in_place_refreshes_only_notebooks_that_ran(run):
    assert run["ip_code"] == 1, run["ip_stderr"]
    lines = run["ip_stdout"].strip().splitlines()
    assert len(lines) == 3 and lines[0].endswith("ok") and " failed" in lines[1]
    assert lines[2].startswith("2 notebooks, 1 ok, 1 failed")
    good = nbformat.read(run["ip_good"], as_version=4)
    assert "answer 42" in good.cells[1].outputs[0]["text"]
    # a failing notebook keeps its file exactly as it was
    assert run["ip_bad"].read_bytes() == run["ip_bad_before"]
    # and nothing else is written beside them
    assert sorted(p.name for p in run["ip_dir"].iterdir()) == ["01_good.ipynb", "02_bad.ipynb"]


@pytest.mark.slow
def test_a_cell_timeout_is_one_line(tmp_path):
    """A timed-out cell's error message repeats the cell's source over many lines: the report
    keeps its first line. The kernel's own log (its shutdown, here) is not the cause."""
    slow = _notebook(tmp_path / "04_slow.ipynb", "import time\n# a long comment line\n"
                     "time.sleep(120)")
    ok, _, error = run_notebooks.run_notebook(slow, tmp_path / "out", timeout=2)
    assert not ok   # stopped at the 2 s timeout (the message below says so), not after the sleep
    first, *rest = error.splitlines()
    assert first.startswith("CellTimeoutError: ") and "sleep" not in first
    assert first == "CellTimeoutError: A cell timed out while it was being executed, after 2 " \
                    "seconds." and rest == []


def _failing_starts(monkeypatch, failures):
    """The first ``failures`` kernel starts raise as a start whose port was taken does; the
    calls are counted."""
    from nbclient import NotebookClient
    real = NotebookClient.async_start_new_kernel
    calls = []

    async def start(self, **kwargs):
        calls.append(1)
        if len(calls) <= failures:
            raise RuntimeError("Kernel didn't respond in 60 seconds")
        return await real(self, **kwargs)

    monkeypatch.setattr(NotebookClient, "async_start_new_kernel", start)
    return calls


def test_a_kernel_that_does_not_start_is_started_again(tmp_path, monkeypatch, capsys):
    good = _notebook(tmp_path / "01_good.ipynb", *GOOD)
    calls = _failing_starts(monkeypatch, failures=1)
    ok, _, error = run_notebooks.run_notebook(good, tmp_path / "out")
    assert (ok, error, len(calls)) == (True, "", 2)
    assert "answer 42" in nbformat.read(tmp_path / "out" / "01_good.ipynb",
                                        as_version=4).cells[1].outputs[0]["text"]
    assert capsys.readouterr().err.strip() == (
        "01_good.ipynb: the kernel did not start (RuntimeError: Kernel didn't respond in 60 "
        "seconds); starting it again")


def test_a_kernel_that_never_starts_fails_after_the_last_try(tmp_path, monkeypatch):
    good = _notebook(tmp_path / "01_good.ipynb", *GOOD)
    calls = _failing_starts(monkeypatch, failures=run_notebooks.KERNEL_START_TRIES)
    ok, _, error = run_notebooks.run_notebook(good, None)
    assert not ok and error == "RuntimeError: Kernel didn't respond in 60 seconds"
    assert len(calls) == run_notebooks.KERNEL_START_TRIES
    assert all(not c.outputs for c in nbformat.read(good, as_version=4).cells)  # not rewritten


def test_a_cells_late_output_is_waited_for_past_nbclients_4_s(tmp_path, monkeypatch):
    """On a busy machine a cell's output can arrive seconds after its reply; nbclient's default
    4 s drops it with a "Timeout waiting for IOPub output" line on stderr."""
    import nbclient

    class Stop(BaseException):
        pass

    seen = []

    def execute(self, **kwargs):
        seen.append(self.iopub_timeout)
        raise Stop

    monkeypatch.setattr(nbclient.NotebookClient, "execute", execute)
    with pytest.raises(Stop):
        run_notebooks.execute(nbformat.v4.new_notebook(), tmp_path)
    assert seen == [run_notebooks.IOPUB_TIMEOUT_S] and run_notebooks.IOPUB_TIMEOUT_S >= 30
    assert nbclient.NotebookClient(nbformat.v4.new_notebook()).iopub_timeout == 4   # without


def test_nbval_starts_its_kernels_with_retries(capsys):
    """The repository's conftest wraps nbval's kernel start; wrapped, a start that fails once
    is made again, and one that always fails raises its own error after the last try."""
    import nbval.kernel

    assert nbval.kernel.start_new_kernel.retries_kernel_start
    assert nbval.kernel.start_new_kernel.__wrapped__.__module__ == "nbval.kernel"
    calls = []

    def start(startup_timeout=60, kernel_name="python", **kwargs):
        calls.append(kernel_name)
        if len(calls) == 1:
            raise RuntimeError("Kernel didn't respond in 60 seconds")
        return "km", "kc"

    assert run_notebooks.retry_kernel_start(start)(kernel_name="python3") == ("km", "kc")
    assert calls == ["python3", "python3"]
    assert capsys.readouterr().err == ("a kernel did not start (Kernel didn't respond in 60 "
                                       "seconds); starting it again\n")

    def never(**kwargs):
        calls.append("never")
        raise RuntimeError("Kernel died before replying to kernel_info")

    calls.clear()
    with pytest.raises(RuntimeError, match="Kernel died before replying"):
        run_notebooks.retry_kernel_start(never)(kernel_name="python3")
    assert len(calls) == run_notebooks.KERNEL_START_TRIES
