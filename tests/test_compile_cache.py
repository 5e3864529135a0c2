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
    monkeypatch.setattr(compile_cache, "fingerprint", lambda: "another helpers or compiler")
    assert compile_cache.get(JOB) is None                          # changed code: a miss


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
    entry = json.loads(next(cache.glob("*.json")).read_text())
    assert entry["ok"]["name"] == "gemm_naive_kernel"
