"""helpers.compile_cache: the real compiler's answers kept on disk between processes, keyed so
that a change to the code, the compiler or the Python misses, and never read half-written."""

from __future__ import annotations

import helpers  # noqa: F401  (first: decides simulator vs GPU before numba.cuda is imported)

import json

import pytest

from helpers import compile_cache, compiled, kernels


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv(compile_cache.ENV, str(tmp_path))
    return tmp_path


JOB = {"kernel": {"module": "helpers.conv.gemm.rung2_naive", "name": "gemm_naive_kernel"},
       "argtypes": ["float32[:, ::1]"] * 3, "target": "sm_90", "sass": False}


def test_an_answer_put_is_got_back(cache):
    assert compile_cache.get(JOB) is None
    compile_cache.put(JOB, {"ok": {"name": "x"}})
    assert compile_cache.get(JOB) == {"ok": {"name": "x"}}
    assert [p.suffix for p in cache.iterdir()] == [".json"]        # no temporary file left


def test_the_key_changes_with_the_job_and_the_fingerprint(cache, monkeypatch):
    other = dict(JOB, target="sm_75")
    assert compile_cache.key(JOB) != compile_cache.key(other)
    compile_cache.put(JOB, {"ok": 1})
    monkeypatch.setattr(compile_cache, "fingerprint",
                        lambda module=None: "another helpers or compiler")
    assert compile_cache.get(JOB) is None                          # changed code: a miss


#: A kernel defined in a notebook or a lab: its source and globals travel in the job.
CELL_JOB = {"kernel": {"name": "k", "source": "def k(a):\n    a[0] = 1\n", "first_line": 1,
                       "filename": "<cell>", "globals": {}},
            "argtypes": ["float32[::1]"], "target": "sm_90", "sass": False}
#: JOB's front end, as :mod:`helpers.compiler_front_end` keeps it.
FRONT_END = {"front_end": [json.dumps([JOB["kernel"], JOB["argtypes"]], sort_keys=True), True,
                           True, True]}

#: Files of helpers, and whether an edit to each keeps the answers of JOB (a GEMM kernel of
#: helpers.conv): kept for an experiment, a figure, a lab's checker; missed for its own module,
#: another module of helpers.conv (the GEMM's shared launch code, which the kernel's module does
#: not import), the device layer, the compiler and the package's __init__.
EDITS = {"experiments/sweep/presets.py": True, "figures/nb06_head_to_head.py": True,
         "checks/lab1.py": True, "conv/gemm/rung2_naive.py": False, "conv/gemm/launch.py": False,
         "device/backend.py": False, "compiler_worker.py": False, "__init__.py": False}


def test_an_edit_misses_only_the_answers_that_can_depend_on_it(monkeypatch):
    """A workbook kernel's answer (and its front end's) is kept across an edit to a part of
    helpers it cannot depend on, so a contributor who changes an experiment, a figure or a
    checker compiles nothing again; any edit misses a notebook's kernel, whose globals may come
    from anywhere. Hashing only the kernel's own module would keep JOB's answer across an edit
    to helpers.conv's launch code; hashing all of helpers would miss it after a figure's."""
    real = compile_cache._source

    def key_after(edited, job):
        compile_cache.fingerprint.cache_clear()
        monkeypatch.setattr(compile_cache, "_source",
                            lambda name: real(name) + b"\n#" * (name == edited))
        try:
            return compile_cache.key(job)
        finally:
            monkeypatch.setattr(compile_cache, "_source", real)
            compile_cache.fingerprint.cache_clear()

    before = {name: key_after(None, job) for name, job in
              (("job", JOB), ("front end", FRONT_END), ("cell", CELL_JOB))}
    for edited, kept in EDITS.items():
        assert (compile_cache.ROOT / edited).is_file(), edited
        assert (key_after(edited, JOB) == before["job"]) is kept, edited
        assert (key_after(edited, FRONT_END) == before["front end"]) is kept, edited
        assert key_after(edited, CELL_JOB) != before["cell"], edited


def test_a_kernels_scope_follows_the_imports_and_refuses_other_modules():
    conv = compile_cache.scope("helpers.conv.direct.forward")
    assert {"conv/gemm/launch.py", "device/backend.py", "compiler_worker.py", "occupancy.py",
            "__init__.py"} <= set(conv)
    assert not [f for f in conv if f.startswith(("experiments/", "figures/", "checks/",
                                                  "widgets/", "networks/"))]
    small = compile_cache.scope("helpers.access_kernels")
    assert "access_kernels.py" in small and not [f for f in small if f.startswith("conv/")]
    for bad in ("numpy", "helpers.no_such_module", "tests.test_compile_cache"):
        with pytest.raises(ValueError, match="module must be a module of helpers"):
            compile_cache.scope(bad)


def test_another_numpy_is_another_fingerprint(monkeypatch):
    """Numba types arrays through numpy, so a server's numpy 2.5 must not read what the same
    Python and compiler answered with another numpy (nor another compiler's answers)."""
    from importlib import metadata

    real = metadata.version

    def fingerprint_with(name, version):
        compile_cache.fingerprint.cache_clear()
        monkeypatch.setattr(metadata, "version", lambda n: version if n == name else real(n))
        try:
            return compile_cache.fingerprint()
        finally:
            monkeypatch.setattr(metadata, "version", real)
            compile_cache.fingerprint.cache_clear()

    here = fingerprint_with("numpy", real("numpy"))
    assert fingerprint_with("numpy", "9.5.0") != here != fingerprint_with("numpy", "0.3.0")
    assert fingerprint_with("numba-cuda", "0.0.1") != here
    assert fingerprint_with("plotly", "0.0.1") == here            # not what a kernel compiles with


def test_off_keeps_nothing(monkeypatch, tmp_path):
    monkeypatch.setenv(compile_cache.ENV, "off")
    assert compile_cache.folder() is None
    compile_cache.put(JOB, {"ok": 1})
    assert compile_cache.get(JOB) is None


def test_an_unreadable_entry_is_a_miss(cache):
    compile_cache.put(JOB, {"ok": 1})
    (cache / f"{compile_cache.key(JOB)}.json").write_text('{"ok": ')  # cut short
    assert compile_cache.get(JOB) is None


def test_the_oldest_entries_go_beyond_the_limit(cache, monkeypatch):
    monkeypatch.setattr(compile_cache, "MAX_ENTRIES", 3)
    for target in ("sm_75", "sm_80", "sm_89", "sm_90"):
        compile_cache.put(dict(JOB, target=target), {"ok": target})
    assert len(list(cache.glob("*.json"))) == 3


@pytest.mark.slow
def test_a_second_process_reads_the_compilers_answer_from_disk(cache, monkeypatch):
    """compile_many keeps what the compiler said; a fresh process (an empty in-memory cache)
    then gets the same answer without running the compiler."""
    spec = kernels.spec("gemm_naive_kernel")
    job = compiled.Job(spec.dispatcher(), spec.argtypes, "sm_90")
    monkeypatch.setattr(compiled, "_CACHE", {})
    try:
        first = compiled.compile_many([job])[0]
    except compiled.CompilerUnavailable as exc:
        pytest.skip(str(exc))
    monkeypatch.setattr(compiled, "_CACHE", {})

    def no_compiler(jobs):
        raise AssertionError("the compiler ran although its answer was on disk")

    monkeypatch.setattr(compiled, "_run", no_compiler)
    second = compiled.compile_many([job])[0]
    assert second.regs_per_thread == first.regs_per_thread and second.ptx == first.ptx
    entries = [json.loads(p.read_text()) for p in cache.glob("*.json")]
    (entry,) = [e for e in entries if "ok" in e]   # and the kernel's front end (the NVVM IR)
    assert entry["ok"]["name"] == "gemm_naive_kernel"
    assert [e for e in entries if "llvm_strs" in e]


@pytest.mark.skipif(compile_cache.fcntl is None, reason="no file locks here (Windows)")
def test_a_job_claimed_by_one_process_is_waited_for_by_another(cache):
    """The claim is a lock per job: a second claim on a held job gets it as someone else's,
    waits for the answer the first one puts, and claims it itself once the first is done."""
    other = dict(JOB, target="sm_75")
    with compile_cache.claim([JOB]) as (mine, theirs):
        assert (mine, theirs) == ([JOB], [])
        with compile_cache.claim([JOB, other]) as (mine2, theirs2):
            assert (mine2, theirs2) == ([other], [JOB])
        assert compile_cache.wait(JOB, timeout_s=0.3) is None       # still compiling, no answer
        compile_cache.put(JOB, {"ok": "from the first"})
    assert compile_cache.wait(JOB, timeout_s=0.3) == {"ok": "from the first"}
    with compile_cache.claim([JOB]) as (mine3, _):
        assert mine3 == [JOB]


@pytest.mark.skipif(compile_cache.fcntl is None, reason="no file locks here (Windows)")
@pytest.mark.slow
def test_compile_many_waits_for_a_kernel_another_process_is_compiling(cache, monkeypatch):
    """compile_many does not compile a job claimed elsewhere: it waits, then reads the answer
    the other process put (here planted from a real compile), without running the compiler."""
    import threading

    spec = kernels.spec("gemm_naive_kernel")
    job = compiled.Job(spec.dispatcher(), spec.argtypes, "sm_90")
    monkeypatch.setattr(compiled, "_CACHE", {})
    try:
        first = compiled.compile_many([job])[0]
    except compiled.CompilerUnavailable as exc:
        pytest.skip(str(exc))
    (entry,) = [p for p in cache.glob("*.json") if "ok" in json.loads(p.read_text())]
    answer = json.loads(entry.read_text())
    entry.unlink()
    described = json.loads(next(iter(compiled._CACHE)))
    monkeypatch.setattr(compiled, "_CACHE", {})

    def no_compiler(jobs):
        raise AssertionError("the compiler ran although another process was compiling the job")

    monkeypatch.setattr(compiled, "_run", no_compiler)
    got = []
    with compile_cache.claim([described]) as (mine, _):
        assert mine == [described]
        waiter = threading.Thread(target=lambda: got.append(compiled.compile_many([job])[0]))
        waiter.start()
        waiter.join(timeout=1.0)
        assert waiter.is_alive() and not got          # waiting for the claim
        compile_cache.put(described, answer)
    waiter.join(timeout=30)
    assert got and got[0].ptx == first.ptx


# ------------------------------------------------------------------ lock(): one holder at a time

@pytest.mark.skipif(compile_cache.fcntl is None, reason="no file locks here (Windows)")
def test_a_lock_has_one_holder_and_the_next_waits_for_it(cache):
    import threading

    entered = []

    def other() -> None:
        with compile_cache.lock("numba-x"):
            entered.append("other")

    with compile_cache.lock("numba-x"):
        waiter = threading.Thread(target=other)
        waiter.start()
        waiter.join(timeout=0.5)
        assert waiter.is_alive() and entered == []     # waiting while this block holds it
        with compile_cache.lock("numba-y"):            # another name is another lock
            entered.append("y")
    waiter.join(timeout=10)
    assert entered == ["y", "other"]


@pytest.mark.skipif(compile_cache.fcntl is None, reason="no file locks here (Windows)")
def test_a_lock_held_too_long_is_passed_after_the_timeout(cache):
    import time

    with compile_cache.lock("numba-x"):
        began = time.monotonic()
        with compile_cache.lock("numba-x", timeout_s=0.3):   # runs without it
            waited = time.monotonic() - began
    assert 0.3 <= waited < 5


def test_a_lock_without_a_cache_folder_or_with_a_bad_name(monkeypatch, tmp_path):
    monkeypatch.setenv(compile_cache.ENV, "off")
    with compile_cache.lock("numba-x"):
        pass                                           # no folder: the block runs, unlocked
    monkeypatch.setenv(compile_cache.ENV, str(tmp_path / "cache"))
    for bad in ("", "../x", "a b", "x/y"):
        with pytest.raises(ValueError, match="name"), compile_cache.lock(bad):
            pass
    assert not (tmp_path / "cache").exists()           # refused before any file was made


#: One process of the test below: it waits for its twin, then compiles the direct forward loop
#: for the CPU (torch deferred: the loop needs only numpy) and prints Numba's cache misses.
_TWIN = """
import pathlib, sys, time
from helpers import deferred_import
deferred_import.defer("torch")
import numpy as np
from helpers.conv.direct import cpu
here, there = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
here.touch()
end = time.monotonic() + 120   # the twin may have failed to start: then go on alone
while not there.exists() and time.monotonic() < end:
    time.sleep(0.01)
x, w, y = np.ones((1, 1, 4, 4), np.float32), np.ones((1, 1, 3, 3), np.float32), np.zeros((1, 1, 2, 2), np.float32)
args = (x, w, y, 1, 1, 0, 0, 1, 1)
cpu._compiled(cpu._forward_cpu, args)
cpu._forward_cpu(*args)
print("misses", sum(cpu._forward_cpu.stats.cache_misses.values()), "y", y.ravel().tolist())
"""


@pytest.mark.skipif(compile_cache.fcntl is None, reason="no file locks here (Windows)")
@pytest.mark.slow
def test_processes_that_start_together_compile_a_numba_cpu_loop_once(tmp_path):
    """Two processes reach the direct forward loop's first call at the same moment, with
    Numba's cache on disk empty: one compiles it, the other waits and loads it (without the
    lock both compile it, each for seconds of CPU)."""
    import os
    import subprocess
    import sys

    from tools.run_notebooks import ROOT

    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path / "numba"),
               WORKBOOK_COMPILE_CACHE=str(tmp_path / "compiled"), PYTHONPATH=str(ROOT))
    a, b = tmp_path / "a", tmp_path / "b"
    procs = [subprocess.Popen([sys.executable, "-c", _TWIN, str(me), str(twin)], env=env,
                              cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for me, twin in ((a, b), (b, a))]
    try:
        outs = [p.communicate(timeout=300) for p in procs]
    finally:
        for p in procs:
            p.kill()
    for p, (out, err) in zip(procs, outs):
        assert p.returncode == 0, err
    lines = sorted(out.strip().splitlines()[-1] for out, _ in outs)
    assert lines == ["misses 0 y [9.0, 9.0, 9.0, 9.0]", "misses 1 y [9.0, 9.0, 9.0, 9.0]"]
