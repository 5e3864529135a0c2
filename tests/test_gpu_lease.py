"""tools/gpu_lease.py: one call for a lent GPU (recording tier one, the GPU tests, tier two)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading

import pytest
from conftest import simulator_only

from helpers import results
from helpers.experiments.gpu_reference import recording as ref
from tools import gpu_lease

ROOT = gpu_lease._ROOT

_PLANTED = textwrap.dedent("""
    from helpers import results

    def main(argv):
        out = argv[argv.index("--out") + 1]
        results.save("planted_" + argv[0], [{"x": 1, "status": "ok"}], directory=out)
        return 0
""")

#: A stand-in for pytest that prints a summary line and passes.
PASSING = [sys.executable, "-c", "print('== 3 passed, 1 skipped in 0.10s ==')"]


def _part(name: str, tier: int) -> ref.Part:
    args = (name, "--out", "{out}")
    return ref.Part(name, f"a planted tier-{tier} part", "planted_lease_part", args, args, 1.0,
                    tier, needs_numba=False)


CATALOGUE = (_part("first", 1), _part("second", 2))


@pytest.fixture(scope="module")
def _planted_worker(tmp_path_factory):
    """The folder of the planted parts' module, and one measuring process for this file's
    leases (each process loads torch and Numba: seconds of CPU)."""
    folder = tmp_path_factory.mktemp("planted")
    (folder / "planted_lease_part.py").write_text(_PLANTED)
    w = ref.new_worker()   # its process starts on first use, from a test (worker)
    yield folder, w
    w.close()


@pytest.fixture
def worker(_planted_worker, monkeypatch):
    """A measuring process that finds the planted parts' module; each part gets 5 s."""
    folder, w = _planted_worker
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(folder), str(ROOT)]))
    monkeypatch.setattr(ref, "_DRY_BUDGET_S", 5.0)
    return w


def _files(out) -> list[str]:
    return sorted(p.name for p in out.iterdir())


@pytest.mark.slow
def test_a_lease_records_tier_one_runs_the_tests_then_tier_two(worker, tmp_path):
    out = tmp_path / "out"
    rows, archive, code = gpu_lease.lease(out, budget_s=300, tests_s=60, dry_run=True,
                                          worker=worker, tests_argv=PASSING, catalogue=CATALOGUE)
    assert code == 0
    assert [(r["part"], r["status"]) for r in rows] == [("first", "ok"), ("second", "ok")]
    assert rows[0]["note"] == "tier one, above"   # recorded by the tier-one run, kept
    slug = archive.name.removeprefix(ref.PREFIX).removesuffix(".tar.gz")
    assert _files(out) == sorted([gpu_lease.TESTS_LOG, archive.name, f"{ref.PREFIX}{slug}.csv",
                                  f"{ref.PREFIX}{slug}.json"])
    assert "3 passed, 1 skipped" in gpu_lease._tests_line(out / gpu_lease.TESTS_LOG)


@pytest.mark.slow
def test_a_resumed_lease_keeps_every_part_an_earlier_call_recorded(worker, tmp_path):
    """The tier-one pass keeps the earlier tier-two rows in its summary, so that tier two does
    not measure them again, and each kept row says once that it was kept."""
    out = tmp_path / "out"
    first, _, _ = gpu_lease.lease(out, budget_s=300, tests_s=60, dry_run=True, worker=worker,
                                  tests_argv=PASSING, catalogue=CATALOGUE)
    rows, _, code = gpu_lease.lease(out, budget_s=300, tests_s=60, dry_run=True, resume=True,
                                    worker=worker, tests_argv=PASSING, catalogue=CATALOGUE)
    assert code == 0
    assert [(r["part"], r["note"]) for r in rows] == [
        ("first", f"{ref.KEPT_NOTE}; tier one, above"), ("second", ref.KEPT_NOTE)]
    assert [r["seconds"] for r in rows] == [r["seconds"] for r in first]
    assert [r["part"] for r in _summary_rows(out)] == ["first", "second"]


def _summary_rows(out) -> list[dict]:
    (csv,) = out.glob(f"{ref.PREFIX}*.csv")
    return results.load(csv.stem, out).rows


@pytest.mark.slow
def test_tier_two_waits_for_enough_time(worker, tmp_path, monkeypatch):
    monkeypatch.setattr(gpu_lease, "_TIER_TWO_MIN_S", 10_000.0)
    rows, _, code = gpu_lease.lease(tmp_path / "out", budget_s=300, tests_s=60, dry_run=True,
                                    worker=worker, tests_argv=PASSING, catalogue=CATALOGUE)
    assert [r["part"] for r in rows] == ["first"] and code == 0


@pytest.mark.slow
def test_a_stop_during_the_tests_runs_nothing_after_them(worker, tmp_path):
    """The stop comes once the tests have begun (they write a file), not after a set time."""
    stop, begun = threading.Event(), tmp_path / "tests-begun"
    slow = [sys.executable, "-c", f"import pathlib, time; pathlib.Path({str(begun)!r}).touch(); "
            "time.sleep(600)"]

    def stop_once_begun():
        while not begun.exists() and not stop.wait(0.05):
            pass
        stop.set()

    watcher = threading.Thread(target=stop_once_begun, daemon=True)
    watcher.start()
    try:
        rows, _, code = gpu_lease.lease(tmp_path / "out", budget_s=300, tests_s=60,
                                        dry_run=True, worker=worker, tests_argv=slow,
                                        stop=stop, catalogue=CATALOGUE)
    finally:
        stop.set()
        watcher.join()
    assert begun.exists() and code != 0 and [r["part"] for r in rows] == ["first"]
    assert "stopped by a signal" in gpu_lease._tests_line(tmp_path / "out" / gpu_lease.TESTS_LOG)


@pytest.mark.slow
def test_failing_tests_fail_the_call(worker, tmp_path):
    failing = [sys.executable, "-c", "print('== 1 failed, 2 passed in 0.2s =='); exit(1)"]
    _, _, code = gpu_lease.lease(tmp_path / "out", budget_s=300, tests_s=60, dry_run=True,
                                 worker=worker, tests_argv=failing, catalogue=CATALOGUE)
    assert code == 1
    assert gpu_lease._tests_line(tmp_path / "out" / gpu_lease.TESTS_LOG) == \
        "1 failed, 2 passed in 0.2s"


@pytest.mark.parametrize("budget, tests, match", [(0, 60, "must be > 0"),
                                                  (300, -1, "must be > 0"),
                                                  (70, 60, "must exceed tests_s")])
def test_bad_budgets_are_refused_before_anything_runs(tmp_path, budget, tests, match):
    with pytest.raises(ValueError, match=match):
        gpu_lease.lease(tmp_path / "out", budget_s=budget, tests_s=tests, dry_run=True,
                        worker=object())   # a worker that would fail if it were used
    assert not (tmp_path / "out").exists()


@simulator_only
def test_without_a_gpu_it_stops_at_once(capsys):
    assert gpu_lease.main([]) == 2
    assert "make gpu-lease needs an NVIDIA GPU" in capsys.readouterr().err


@simulator_only
@pytest.mark.slow
def test_sigterm_during_the_tests_packs_and_prints_the_headline_last(tmp_path):
    """The real dry run: tier one on the CPU, then SIGTERM as the GPU tests begin."""
    out = tmp_path / "out"
    env = dict(os.environ, PYTHONPATH=str(ROOT), NUMBA_ENABLE_CUDASIM="1")
    proc = subprocess.Popen([sys.executable, "-m", "tools.gpu_lease", "--dry-run", "--out",
                             str(out), "--budget-s", "400", "--tests-s", "100"], cwd=ROOT,
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                            text=True)
    seen = []
    for line in proc.stdout:
        seen.append(line)
        if line.startswith("== the GPU tests"):
            proc.send_signal(signal.SIGTERM)
            break
    rest, _ = proc.communicate(timeout=120)
    text = "".join(seen) + rest
    assert proc.returncode == 128 + signal.SIGTERM, text[-3000:]
    assert "== tier two" not in text
    assert rest.strip().splitlines()[-1].startswith(("  measured on", "Table I vs cuDNN")), rest
    assert len(_files(out)) <= 4 and all((out / f).is_file() for f in _files(out))
    summary = results.load(next(out.glob(f"{ref.PREFIX}*.csv")).stem, out)
    assert {r["part"] for r in summary.rows} == {p.name for p in ref.PARTS if p.tier == 1}
    assert all(r["status"] in ("ok", "partial", "no GPU (dry run)") for r in summary.rows)
