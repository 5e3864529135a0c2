"""The compiler's child process, kept between compilations (helpers.compiler_process): one child
answers a process's batches; a new one replaces a child that died, hung, or was started with
other modules or environment; and what the compiler's libraries print cannot garble an answer.
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

import pytest

from helpers import compiler_process, compiler_worker, kernels
from helpers.device import backend

ROOT = pathlib.Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.skipif(backend.MODE != "simulator",
                                reason="on a GPU the compiler runs in the process itself")


@pytest.fixture
def fresh():
    """No kept child before or after the test."""
    compiler_process.stop()
    yield compiler_process
    compiler_process.stop()


def _job(name: str = "gemm_naive_kernel", target: str = "sm_75") -> dict:
    spec = kernels.spec(name)
    return {"kernel": compiler_worker.describe_kernel(spec.dispatcher()),
            "argtypes": list(spec.argtypes), "target": target, "sass": False}


def _regs(answer: dict) -> int:
    assert answer["unavailable"] is None, answer
    (result,) = answer["results"]
    return result["ok"]["regs_per_thread"]


@pytest.mark.slow
def test_one_child_answers_every_batch_until_what_it_compiled_with_changes(fresh, monkeypatch):
    first = _regs(fresh.run([_job()]))
    child = fresh._CHILD
    assert _regs(fresh.run([_job("gemm_tiled_kernel")])) > 0
    assert fresh._CHILD is child and child.proc.poll() is None   # the same process, kept
    # a variable that steers Numba: a new child, started with it; the old one ends
    monkeypatch.setenv("NUMBA_OPT", "2")
    assert _regs(fresh.run([_job()])) == first
    assert fresh._CHILD is not child and child.proc.poll() is not None
    # a child that died between batches is replaced, and the batch answered
    fresh._CHILD.proc.kill()
    fresh._CHILD.proc.wait()
    assert _regs(fresh.run([_job()])) == first


@pytest.mark.slow
def test_the_child_keeps_front_ends_in_the_cache_its_caller_names_now(fresh, monkeypatch,
                                                                      tmp_path):
    """A kept child started with one compile cache writes each kernel's front end where its
    caller's cache is at each batch (another folder, or none), not where it was at its start."""
    first, second = tmp_path / "first", tmp_path / "second"

    def entries(folder):
        return sorted(p.name for p in folder.glob("*.json"))

    monkeypatch.setenv("WORKBOOK_COMPILE_CACHE", str(first))
    assert _regs(fresh.run([_job()])) > 0
    child, kept_first = fresh._CHILD, entries(first)
    assert len(kept_first) == 1   # the naive GEMM's front end (answers are kept by the caller)
    monkeypatch.setenv("WORKBOOK_COMPILE_CACHE", str(second))
    assert _regs(fresh.run([_job("gemm_tiled_kernel")])) > 0
    assert entries(first) == kept_first and len(entries(second)) == 1
    monkeypatch.setenv("WORKBOOK_COMPILE_CACHE", "off")
    assert _regs(fresh.run([_job("im2col_kernel")])) > 0
    assert entries(first) == kept_first and len(entries(second)) == 1
    assert fresh._CHILD is child   # one child all along


def test_the_signature_changes_with_a_module_of_helpers_or_a_numba_variable(tmp_path,
                                                                           monkeypatch):
    import os

    module = tmp_path / "helpers" / "conv" / "gemm.py"
    module.parent.mkdir(parents=True)
    module.write_text("x = 1\n")
    monkeypatch.setattr(compiler_process, "ROOT", tmp_path)
    before = compiler_process._signature()
    monkeypatch.setenv("WORKBOOK_RESULTS", str(tmp_path))   # steers no compiler
    assert compiler_process._signature() == before
    os.utime(module, ns=(module.stat().st_atime_ns, module.stat().st_mtime_ns + 10**9))
    edited = compiler_process._signature()
    assert edited != before
    monkeypatch.setenv("NUMBA_CUDA_DEFAULT_PTX_CC", "8.0")
    assert compiler_process._signature() != edited


#: A stand-in for the compiler's child: answers every batch at once, with no results.
ECHO = ("-c", "import json, sys\nfor line in sys.stdin:\n"
              "    print(json.dumps({'unavailable': None, 'results': []}), flush=True)")


def test_a_child_is_kept_between_batches_and_ended_when_idle(fresh, monkeypatch):
    import time

    monkeypatch.setattr(fresh._Child, "COMMAND", ECHO)
    monkeypatch.setattr(fresh, "IDLE_S", 1.0)
    assert fresh.run([]) == {"unavailable": None, "results": []}
    child = fresh._CHILD
    time.sleep(0.6)
    fresh.run([])   # within IDLE_S of the last: the same child, its idle time begun again
    time.sleep(0.6)
    assert fresh._CHILD is child and child.proc.poll() is None
    deadline = time.monotonic() + 10
    while child.proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert child.proc.poll() is not None and fresh._CHILD is None


def test_a_child_that_fails_is_reported_with_its_last_words_and_replaced(fresh, monkeypatch):
    monkeypatch.setattr(fresh._Child, "COMMAND", (
        "-c", "import sys; print('NVVM could not be loaded', file=sys.stderr); sys.exit(3)"))
    answer = fresh.run([])
    assert answer["results"] == []
    assert answer["unavailable"] == "the compiler process failed: NVVM could not be loaded"
    assert fresh._CHILD is None   # the next batch starts a new one


def test_a_child_that_does_not_answer_in_time_is_stopped(fresh, monkeypatch):
    monkeypatch.setattr(fresh._Child, "COMMAND", ("-c", "import time; time.sleep(60)"))
    monkeypatch.setattr(fresh, "CHILD_TIMEOUT_S", 0.5)
    started = []
    real = fresh._Child.__init__

    def init(self, signature):
        real(self, signature)
        started.append(self)

    monkeypatch.setattr(fresh._Child, "__init__", init)
    answer = fresh.run([])
    assert answer == {"unavailable": "the compiler process took over 0.5 s and was stopped",
                      "results": []}
    assert started[0].proc.poll() is not None and fresh._CHILD is None


def test_what_the_compiler_prints_goes_to_stderr_not_into_the_answers():
    """Python's print and a C library's write to file descriptor 1 during a batch: the
    answers stay one JSON line each, in order."""
    script = (
        "import os, sys\n"
        "from helpers import compiler_worker as w\n"
        "def run_jobs(jobs):\n"
        "    print('a warning from Python')\n"
        "    os.write(1, b'a note from a C library\\n')\n"
        "    return {'unavailable': None, 'results': jobs}\n"
        "w.run_jobs = run_jobs\n"
        "w.serve()\n")
    requests = "".join(json.dumps({"path": [], "jobs": [n]}) + "\n" for n in (1, 2))
    proc = subprocess.run([sys.executable, "-c", script], input=requests, capture_output=True,
                          text=True, cwd=ROOT, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert [json.loads(s)["results"] for s in proc.stdout.splitlines()] == [[1], [2]]
    assert proc.stderr.count("a warning from Python") == 2
    assert proc.stderr.count("a note from a C library") == 2


def test_the_child_leaves_at_once_when_its_input_closes(tmp_path):
    """Its answers are sent and the compile cache's entries are whole files: when its parent
    closes its input, the serving child leaves without Python's teardown (about two seconds of
    CPU with the compiler's libraries loaded), so an exit handler never runs. One batch without
    ``--serve`` ends as any script does, and its handler runs."""
    script = ("import atexit, pathlib, runpy, sys\n"
              "atexit.register(pathlib.Path(sys.argv[1]).touch)\n"
              "sys.argv = ['compiler_worker'] + sys.argv[2:]\n"
              "runpy.run_module('helpers.compiler_worker', run_name='__main__')\n")
    for args, torn_down in ((["--serve"], False), ([], True)):
        marker = tmp_path / f"torn_down_{len(args)}"
        proc = subprocess.run([sys.executable, "-c", script, str(marker), *args], input="",
                              capture_output=True, text=True, cwd=ROOT, timeout=120)
        assert proc.returncode == 0, proc.stderr
        assert marker.exists() == torn_down, (args, proc.stdout, proc.stderr)


@pytest.mark.slow
def test_the_child_compiles_the_workbooks_kernels_without_loading_torch():
    """The kernels' modules import torch for their host code; the child defers it
    (helpers.deferred_import), and no compilation reads it, so torch's library never loads
    (``python -X importtime`` names every module the child imported)."""
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="0", PYTHONWARNINGS="ignore",
               PYTHONPATH=str(ROOT))
    request = {"path": [str(ROOT)], "cache": "off",
               "jobs": [_job("gemm_naive_kernel"), _job("im2col_kernel")]}
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", *compiler_process._Child.COMMAND],
        input=json.dumps(request) + "\n", capture_output=True, text=True, cwd=ROOT, env=env,
        timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    answer = json.loads(proc.stdout)
    assert [r["ok"]["regs_per_thread"] > 0 for r in answer["results"]] == [True, True], answer
    imported = {line.rsplit("|", 1)[-1].strip() for line in proc.stderr.splitlines()
                if line.startswith("import time:")}
    assert {"helpers.conv.gemm.rung2_naive", "helpers.conv.unroll", "torch"} <= imported
    assert not {"torch._C", "torch.nn.modules"} & imported
