"""The GPU reference run (``make gpu-reference``): its refusal without a GPU; its dry run on
this CPU through every part in one measuring process (without psutil, tqdm, nvidia-ml-py or
torchvision); the deadline, tiers and priorities; the folder it writes (summary and archive,
nothing else); resuming; planted slow, crashing and refusing parts; a stop by SIGTERM; the
headline last."""

from __future__ import annotations

import dataclasses
import os
import pathlib
import shutil
import signal
import subprocess
import sys
import tarfile
import textwrap
import threading
import types

import pytest
import torch
from conftest import simulator_only

from helpers import results
from helpers.conv import STRATEGIES
from helpers.device.worker import Worker
from helpers.experiments.gpu_reference import process as proc
from helpers.experiments.gpu_reference import recording as ref

ROOT = pathlib.Path(__file__).resolve().parent.parent

#: Optional packages the recording path must do without (a bare GPU server may lack them).
OPTIONAL = ("psutil", "tqdm", "pynvml", "torchvision")

#: What the remote machine brings back: at most this many plain files, and no folder.
MAX_FILES = 8


def _blocked(tmp: pathlib.Path) -> pathlib.Path:
    """A folder that, first on PYTHONPATH, makes importing each optional package fail."""
    for name in OPTIONAL:
        pkg = tmp / name
        pkg.mkdir(parents=True)
        (pkg / "__init__.py").write_text(f"raise ImportError('{name} is blocked by the test')\n")
    return tmp


def _results_snapshot() -> dict[str, float]:
    folder = results.RESULTS_DIR
    return {p.name: p.stat().st_mtime for p in folder.iterdir()} if folder.is_dir() else {}


def _env(*paths: pathlib.Path) -> dict:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), *map(str, paths)]),
               NUMBA_ENABLE_CUDASIM="1")
    env.pop("WORKBOOK_RESULTS", None)
    return env


@pytest.fixture(scope="module")
def dry_run(tmp_path_factory):
    """One dry run of every part into a scratch folder, with the optional packages blocked."""
    tmp = tmp_path_factory.mktemp("gpu_reference")
    out = tmp / "out"
    blocked = _blocked(tmp / "blocked")
    before = _results_snapshot()
    proc = subprocess.run([sys.executable, "-m", "helpers.experiments.gpu_reference", "--dry-run",
                           "--out", str(out), "--budget-s", "1500"], cwd=ROOT, env=_env(blocked),
                          capture_output=True, text=True, timeout=1800)
    return proc, out, before


def _summary(out: pathlib.Path) -> results.Dataset:
    (json_path,) = out.glob(f"{ref.PREFIX}*.json")
    return results.load(json_path.stem, out)


def _members(archive: pathlib.Path) -> set[str]:
    with tarfile.open(archive) as tar:
        return set(tar.getnames())


def _holds_only_the_summary_and_archive(out: pathlib.Path) -> None:
    entries = list(out.iterdir())
    assert len(entries) <= MAX_FILES and all(p.is_file() for p in entries), entries
    assert {p.suffix for p in entries} == {".csv", ".json", ".gz"}, entries


@pytest.mark.each_python
@pytest.mark.slow
def test_dry_run_runs_every_part(dry_run):
    proc, out, _ = dry_run
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    ds = _summary(out)
    assert [r["part"] for r in ds.rows] == [p.name for p in ref.PARTS]
    by = {r["part"]: r for r in ds.rows}
    for part in ref.PARTS:
        row = by[part.name]
        if part.gpu_only:
            assert row["status"] == "no GPU (dry run)", row
        else:
            assert row["status"] in ("ok", "partial"), row
    # the parts that can measure on a CPU wrote data, with measured rows
    for name in ("throughput", "conv-b128", "conv-b1", "phases", "training", "sweep"):
        assert by[name]["files"] and by[name]["measured"] > 0, by[name]
    assert ds.meta["dry_run"] is True and ds.meta["complete"] is True
    assert ds.meta["environment"]["cpu_model"]
    assert any("Numba kernel: ok" in line for line in ds.meta["preflight"])
    _holds_only_the_summary_and_archive(out)


@pytest.mark.each_python
@pytest.mark.slow
def test_dry_run_writes_nothing_to_results(dry_run):
    _, _, before = dry_run
    assert _results_snapshot() == before


@pytest.mark.each_python
@pytest.mark.slow
def test_dry_run_prints_the_summary_and_the_headline_last(dry_run):
    proc, out, _ = dry_run
    lines = proc.stdout.strip().splitlines()
    assert "Table I, forward+backward" in proc.stdout
    assert lines[-1].startswith("  measured on CPU"), lines[-3:]   # the headline's last line
    head = _summary(out).meta["headline"]
    assert head["table1"], head
    for line in head["table1"]:
        assert line["fastest"] in STRATEGIES
        assert line["fastest_ms"] > 0


@pytest.mark.each_python
@pytest.mark.slow
def test_dry_run_archive_holds_every_file_under_the_limit(dry_run):
    _, out, _ = dry_run
    (archive,) = out.glob(f"{ref.PREFIX}*.tar.gz")
    assert archive.stat().st_size < ref.ARCHIVE_LIMIT_BYTES
    names = _members(archive)
    ds = _summary(out)
    listed = {f"results/{f}" for r in ds.rows for f in str(r["files"]).split(";") if f}
    assert listed and listed <= names
    assert f"results/{ds.name}.csv" in names and f"results/{ds.name}.json" in names
    logs = {n for n in names if n.startswith(f"results/{ref.PREFIX}logs/")}
    assert {f"results/{ref.PREFIX}logs/{p.name}.log" for p in ref.PARTS} <= logs


@pytest.mark.slow
def test_resume_keeps_what_was_recorded_and_redoes_a_lost_part(dry_run, tmp_path):
    proc, out, _ = dry_run
    assert proc.returncode == 0
    copy = tmp_path / "out"
    shutil.copytree(out, copy)
    ds = _summary(copy)
    lost = str(next(r for r in ds.rows if r["part"] == "conv-b1")["files"]).split(";")[0]
    (archive,) = copy.glob("*.tar.gz")
    with tarfile.open(archive) as old, tarfile.open(tmp_path / "new.tar.gz", "w:gz") as new:
        for member in old.getmembers():
            if member.name != f"results/{lost}":
                new.addfile(member, old.extractfile(member))
    os.replace(tmp_path / "new.tar.gz", archive)
    rows, archive = ref.run(copy, dry_run=True, parts=["conv-b128", "conv-b1"], resume=True)
    by = {r["part"]: r for r in rows}
    assert by["conv-b128"]["note"] == "recorded by an earlier run, kept"
    assert by["conv-b1"]["status"] in ("ok", "partial")
    assert by["conv-b1"]["note"] != "recorded by an earlier run, kept"
    assert f"results/{lost}" in _members(archive)
    _holds_only_the_summary_and_archive(copy)


# -------------------------------------------------------------------------- planted parts

_PLANTED = textwrap.dedent("""
    import sys, time
    from helpers import results

    def main(argv):
        kind, out = argv[0], argv[argv.index("--out") + 1]
        if kind == "fine":
            print("measuring ...")
            results.save("planted_fine", [{"x": 1, "status": "ok"}], directory=out)
            return 0
        if kind == "crash":
            raise RuntimeError("a planted crash")
        if kind == "refuse":
            print("no GPU here: nothing measured")
            return results.REFUSED
        if kind == "fail":
            return 1
        if kind == "saves-then-slow":   # one sub-experiment saved, the next never ends
            results.save("planted_early", [{"x": 1, "status": "ok"}], directory=out)
        time.sleep(600)   # "slow": never ends by itself
""")


def _planted(name, kind, **kw) -> ref.Part:
    args = (kind, "--out", "{out}")
    return ref.Part(name, f"a planted {kind} part", "planted_part", args, args, 1.0, 1, **kw)


@pytest.fixture(scope="module")
def _planted_worker(tmp_path_factory):
    """The folder of the planted parts' module, and one measuring process for every test that
    plants parts: each process loads torch and Numba (seconds of CPU), and a test that kills
    one has it replaced, as a run would."""
    folder = tmp_path_factory.mktemp("planted")
    (folder / "planted_part.py").write_text(_PLANTED)
    worker = ref.new_worker()   # its process starts on first use, from a test (planted)
    yield folder, worker
    worker.close()


@pytest.fixture
def planted(_planted_worker, monkeypatch):
    """Planted parts (tests' module planted_part on the measuring process's path), each given
    2 s in a dry run and killed 1 s after that; and the worker they run in."""
    folder, worker = _planted_worker
    monkeypatch.setenv("PYTHONPATH", str(folder))   # for a process started during this test
    monkeypatch.setattr(ref, "_DRY_BUDGET_S", 2.0)
    monkeypatch.setattr(ref, "_GRACE_S", 1.0)
    return worker


@pytest.mark.slow
def test_planted_parts_each_get_their_own_status(planted, tmp_path):
    catalogue = (_planted("fine", "fine", needs_numba=False),
                 _planted("crash", "crash", needs_numba=False),
                 _planted("slow", "slow", needs_numba=False, time_limited=False),
                 _planted("refuse", "refuse", gpu_only=True, needs_numba=False),
                 _planted("fail", "fail", needs_numba=False),
                 _planted("fine-again", "fine", needs_numba=False))
    out = tmp_path / "out"
    rows, archive = ref.run(out, dry_run=True, catalogue=catalogue, budget_s=300, worker=planted)
    by = {r["part"]: r for r in rows}
    assert by["fine"]["status"] == "ok" and by["fine"]["files"] == "planted_fine.csv;" \
        "planted_fine.json"
    assert by["crash"]["status"] == "crashed" and "a planted crash" in by["crash"]["note"]
    assert by["slow"]["status"] == "killed"
    assert by["refuse"]["status"] == "no GPU (dry run)"
    assert by["fail"]["status"] == "failed" and "exit status 1" in by["fail"]["note"]
    assert by["fine-again"]["status"] == "ok"   # the process killed for "slow" was replaced
    names = _members(archive)
    assert "results/planted_fine.csv" in names
    with tarfile.open(archive) as tar:
        crash_log = tar.extractfile(f"results/{ref.PREFIX}logs/crash.log").read().decode()
    assert "Traceback" in crash_log and "a planted crash" in crash_log
    _holds_only_the_summary_and_archive(out)


@pytest.mark.slow
def test_a_crash_in_a_gpu_only_part_fails_the_dry_run(planted, tmp_path):
    """Without its own exit status, a refusal and a crash looked the same to the dry run."""
    catalogue = (_planted("gpu-crash", "crash", gpu_only=True, needs_numba=False),
                 _planted("gpu-fail", "fail", gpu_only=True, needs_numba=False))
    rows, _ = ref.run(tmp_path / "out", dry_run=True, catalogue=catalogue, budget_s=300,
                      worker=planted)
    assert [r["status"] for r in rows] == ["crashed", "failed"]


@pytest.mark.slow
def test_what_a_running_part_saves_is_packed_before_it_ends(planted, tmp_path, monkeypatch):
    """A kill during a long part loses only what the part had not saved yet."""
    monkeypatch.setattr(ref, "_DRY_BUDGET_S", 600.0)
    catalogue = (_planted("fine", "fine", needs_numba=False),
                 _planted("long", "saves-then-slow", needs_numba=False))
    out, stop, done = tmp_path / "out", threading.Event(), []
    runner = threading.Thread(target=lambda: done.append(ref.run(
        out, dry_run=True, catalogue=catalogue, budget_s=900, worker=planted, stop=stop)))
    runner.start()
    try:
        archive = None
        while not (archive and "results/planted_early.csv" in _members(archive)):
            assert runner.is_alive(), "the run ended before the long part saved"
            archive = next(out.glob("*.tar.gz"), None) if out.exists() else None
            stop.wait(0.1)
        ds = _summary(out)   # the snapshot a kill at this moment would leave
        by = {r["part"]: r for r in ds.rows}
        assert by["fine"]["status"] == "ok" and by["long"]["status"] == "in progress"
        assert by["long"]["files"] == "planted_early.csv;planted_early.json"
        assert by["long"]["rows"] == 1 and ds.meta["complete"] is False
        _holds_only_the_summary_and_archive(out)
    finally:
        stop.set()
        runner.join()
    assert {r["part"]: r["status"] for r in done[0][0]}["long"] == "stopped"


@pytest.mark.slow
def test_parts_run_in_the_order_named_and_by_tier(planted, tmp_path):
    catalogue = (_planted("a", "fine", needs_numba=False),
                 dataclasses.replace(_planted("b", "refuse", gpu_only=True,
                                              needs_numba=False), tier=2))
    rows, _ = ref.run(tmp_path / "one", dry_run=True, catalogue=catalogue, parts=["b", "a"],
                      worker=planted)
    assert [r["part"] for r in rows] == ["b", "a"]
    rows, _ = ref.run(tmp_path / "two", dry_run=True, catalogue=catalogue, tier=2,
                      worker=planted)
    assert [r["part"] for r in rows] == ["b"]


@pytest.mark.slow
def test_a_part_that_does_not_fit_the_time_left_is_skipped_with_the_reason(planted, tmp_path,
                                                                            monkeypatch):
    monkeypatch.setattr(ref, "_DRY_BUDGET_S", 1e4)   # far more than the run's whole budget
    catalogue = (_planted("big", "slow", needs_numba=False, time_limited=False),)
    rows, archive = ref.run(tmp_path / "out", dry_run=True, catalogue=catalogue, budget_s=120,
                            worker=planted)
    (row,) = rows
    assert row["status"] == "skipped"
    assert "needs about" in row["note"] and "left of the total" in row["note"]
    assert archive.exists()


@pytest.mark.slow
def test_a_numba_failure_skips_only_the_parts_that_need_numba(planted, tmp_path, monkeypatch):
    real = Worker.run

    def broken_numba(self, module, name, *args, **kwargs):
        out = real(self, module, name, *args, **kwargs)
        if name == "preflight":
            value = dict(out.value, numba="a Numba kernel did not run: planted")
            return type(out)(out.status, value, out.seconds, out.error)
        return out

    monkeypatch.setattr(Worker, "run", broken_numba)
    catalogue = (_planted("torch-only", "fine", needs_numba=False), _planted("ours", "fine"))
    rows, _ = ref.run(tmp_path / "out", dry_run=True, catalogue=catalogue, worker=planted)
    by = {r["part"]: r for r in rows}
    assert by["torch-only"]["status"] == "ok"
    assert by["ours"]["status"] == "skipped" and "planted" in by["ours"]["note"]


@simulator_only
@pytest.mark.slow
def test_sigterm_stops_packs_prints_the_headline_and_resume_completes(tmp_path):
    out = tmp_path / "out"
    command = [sys.executable, "-m", "helpers.experiments.gpu_reference", "--dry-run", "--out",
               str(out), "--parts", "conv-b1,sweep,conv-b128", "--budget-s", "900"]
    proc = subprocess.Popen(command, cwd=ROOT, env=_env(), stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True)
    seen = []
    for line in proc.stdout:   # the first part's end is printed before the second begins
        seen.append(line)
        if line.startswith("[2/3] sweep"):
            proc.send_signal(signal.SIGTERM)
            break
    rest, _ = proc.communicate(timeout=120)
    assert proc.returncode == 128 + signal.SIGTERM, "".join(seen) + rest
    assert rest.strip().splitlines()[-1].startswith(("  measured on", "Table I vs cuDNN"))
    ds = _summary(out)
    by = {r["part"]: r for r in ds.rows}
    assert by["conv-b1"]["status"] in ("ok", "partial") and ds.meta["complete"] is False
    assert by["sweep"]["status"] == "stopped" and by["conv-b128"]["status"] == "not run"
    _holds_only_the_summary_and_archive(out)
    again = subprocess.run([*command, "--resume"], cwd=ROOT, env=_env(), capture_output=True,
                           text=True, timeout=900)
    assert again.returncode == 0, again.stdout[-3000:]
    by = {r["part"]: r for r in _summary(out).rows}
    assert by["conv-b1"]["note"] == "recorded by an earlier run, kept"
    assert by["sweep"]["status"] in ("ok", "partial")
    assert by["conv-b128"]["status"] in ("ok", "partial")


def test_plan_shortens_a_self_limiting_part_and_skips_the_others(tmp_path):
    sweep = next(p for p in ref.PARTS if p.name == "sweep")
    argv, budget, note = ref.plan(sweep, tmp_path, "gpu", False, sweep.budget_s * 0.75)
    assert argv and budget == pytest.approx(sweep.budget_s * 0.75) and "shortened" in note
    limit = float(argv[argv.index("--time-limit") + 1])
    assert limit < budget
    assert f"{tmp_path}/sweep_paper_gpu.csv" in argv
    argv, _, note = ref.plan(sweep, tmp_path, "gpu", False, sweep.budget_s * 0.4)
    assert argv is None and note.startswith("skipped")
    fixed = _planted("fixed", "fine", time_limited=False)   # cannot be told a time
    argv, _, note = ref.plan(fixed, tmp_path, "gpu", False, fixed.budget_s - 0.1)
    assert argv is None and "needs about" in note
    argv, _, _ = ref.plan(fixed, tmp_path, "gpu", False, 1e9)
    assert argv == ["fine", "--out", str(tmp_path)]


def test_every_part_is_told_its_time():
    kr = next(p for p in ref.PARTS if p.name == "kernel-resources")
    argv, _, _ = ref.plan(kr, pathlib.Path("out"), "gpu", False, 1e9)
    assert argv == ["--save", "--out", "out", "--time-limit", f"{kr.budget_s - 10:g}"]
    for part in ref.PARTS:
        assert part.time_limited, part.name
        for args in (part.args, part.dry_args):
            assert "--time-limit" in args and "{limit}" in args, part.name


def test_tier_one_fits_the_default_budget():
    tier_one = [p for p in ref.PARTS if p.tier == 1]
    assert [p.name for p in tier_one] == ["climb", "conv-b128"]   # the climb first
    assert sum(p.budget_s for p in tier_one) + ref._PREFLIGHT_S + ref._PACK_S \
        <= ref.DEFAULT_BUDGET_S
    assert len({p.name for p in ref.PARTS}) == len(ref.PARTS)
    assert [p.tier for p in ref.PARTS] == sorted(p.tier for p in ref.PARTS)


def test_list_prints_the_tiers(capsys):
    assert ref.main(["--list"]) == 0
    text = capsys.readouterr().out
    assert text.index("tier 1:") < text.index("conv-b128") < text.index("tier 2:") \
        < text.index("\n  sweep ")


def test_bad_arguments_are_refused_before_anything_runs(tmp_path):
    with pytest.raises(ValueError, match="parts must be among"):
        ref.run(tmp_path, dry_run=True, parts=["nope"])
    with pytest.raises(ValueError, match="budget_s"):
        ref.run(tmp_path, dry_run=True, budget_s=0)
    with pytest.raises(ValueError, match="tier"):
        ref.run(tmp_path, dry_run=True, tier=3)
    with pytest.raises(ValueError, match="never writes to results"):
        ref.run(results.RESULTS_DIR, dry_run=True)
    assert not list(tmp_path.iterdir())


@simulator_only
def test_make_gpu_reference_without_a_gpu_stops_at_once():
    proc = subprocess.run(["make", "--no-print-directory", "gpu-reference"], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0
    assert "needs an NVIDIA GPU that Numba can use" in proc.stderr
    assert "--dry-run" in proc.stderr


def test_a_signal_in_the_block_sets_stop_and_the_old_handler_comes_back():
    before = signal.getsignal(signal.SIGTERM)
    with ref.stop_on_signals() as (stop, caught):
        os.kill(os.getpid(), signal.SIGTERM)
        assert stop.wait(10) and caught == [signal.SIGTERM]
    assert signal.getsignal(signal.SIGTERM) is before


def test_each_part_records_its_own_command_and_hands_cached_gpu_memory_back(monkeypatch, tmp_path):
    # a later part's memory checks read the driver's free memory: cached blocks count as used
    events = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: events.append("empty_cache"))
    part = types.ModuleType("fake_part")

    def main(argv):
        events.append(("main", argv))
        assert sys.argv == ["python -m fake_part", *argv]   # what results.save records
        if argv == ["--fail"]:
            raise RuntimeError("planted")
        return 3

    part.main = main
    monkeypatch.setitem(sys.modules, "fake_part", part)
    argv = list(sys.argv)
    assert proc.run_part("fake_part", ["--ok"], str(tmp_path / "log")) == 3
    assert events == [("main", ["--ok"]), "empty_cache"] and sys.argv == argv
    with pytest.raises(RuntimeError, match="planted"):
        proc.run_part("fake_part", ["--fail"], str(tmp_path / "log"))
    assert events[-1] == "empty_cache" and sys.argv == argv
