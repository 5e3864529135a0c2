"""Data and model parallelism (helpers.experiments.parallel): two gloo ranks at tiny sizes.

DDP over 2 ranks must train exactly as one process does on the same global batches (batch norm
per rank's half, gradients averaged); the two-stage pipeline must give the unsplit model's loss;
bad input and rank counts the machine cannot hold are refused before any process starts; no
process is left behind after a failed rank, a timeout or an interrupt.
"""

import helpers  # noqa: F401  (first: decides simulator vs GPU)
import contextlib
import json
import math
import os
import signal
import subprocess
import sys
import time
import uuid

import psutil
import pytest
import torch
import torch.nn.functional as F

from helpers import results
from helpers.experiments.parallel import launcher as parallel
from helpers.experiments.parallel import ranks as parallel_ranks
from helpers.networks import training_cnns

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _ranks_of(run_id: str) -> list[psutil.Process]:
    """Processes (torchrun or ranks) whose command line carries ``run_id``."""
    found = []
    for p in psutil.process_iter(["cmdline"]):
        try:
            if p.pid != os.getpid() and any(run_id in a for a in (p.info["cmdline"] or [])):
                found.append(p)
        except psutil.Error:
            pass
    return found


def _rank_processes(run_id: str) -> list[psutil.Process]:
    """The ranks themselves among :func:`_ranks_of`: torchrun's children, not torchrun or the
    process that called ``launch``."""
    return [p for p in _ranks_of(run_id)
            if "helpers.experiments.parallel.ranks" in (cmd := _cmdline(p))
            and "torch.distributed.run" not in cmd]


def _cmdline(p: psutil.Process) -> list[str]:
    try:
        return p.cmdline()
    except psutil.Error:
        return []


def _gone(run_id: str, within_s: float = 5.0) -> bool:
    end = time.monotonic() + within_s
    while time.monotonic() < end:
        if not _ranks_of(run_id):
            return True
        time.sleep(0.2)
    return not _ranks_of(run_id)


@pytest.fixture
def no_launch(monkeypatch):
    """Fail the test if anything tries to start a process."""
    def refuse(*a, **k):
        raise AssertionError("a process was started for a refused configuration")
    monkeypatch.setattr(parallel, "_start", refuse)


# --- refusals and bad input: before any process starts ---------------------------------------

def test_more_ranks_than_cores_is_refused_with_the_count(no_launch):
    cores = parallel.usable_cores()
    with pytest.raises(ValueError, match=f"at most {cores}.*{cores} CPU cores"):
        parallel.launch(["ddp"], cores + 1)
    assert parallel.refusal(cores) is None
    assert "at most" in parallel.refusal(2, threads=cores)       # 2 ranks x all cores each


def test_gpu_ranks_need_a_gpu_each(no_launch):
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    with pytest.raises(ValueError, match=f"at most {gpus} .*GPU"):
        parallel.launch(["ddp"], gpus + 1, device="cuda")


def test_memory_refusal_gives_the_estimate(no_launch, monkeypatch):
    free = {"bytes": 1.5 * 2**30}
    monkeypatch.setattr(parallel, "_available_memory", lambda: free["bytes"])
    reason = parallel.refusal(2)
    assert reason and "3.0 GiB" in reason and "1.5 GiB is available" in reason
    with pytest.raises(ValueError, match="GiB"):
        parallel.launch(["ddp"], 2)
    free["bytes"] = 4 * 2**30
    assert parallel.refusal(2) is None                           # 3 x 1 GiB fits in 4


def test_pipeline_needs_two_ranks(no_launch):
    assert "ranks=2" in parallel.refusal(1, experiments=["pipeline"])
    assert parallel.refusal(2, experiments=["pipeline"]) is None
    with pytest.raises(ValueError, match="ranks=2"):
        parallel.launch(["pipeline"], 1)


@pytest.mark.parametrize("kwargs, name", [
    (dict(experiments=["ddp", "sgd"]), "experiments"),
    (dict(experiments=[]), "experiments"),
    (dict(device="tpu"), "device"),
    (dict(ranks=0), "ranks"),
    (dict(ranks=1.5), "ranks"),
    (dict(batch=0), "batch"),
    (dict(steps=True), "steps"),
    (dict(image_size=4), "image_size"),
    (dict(split_at=9), "split_at"),
    (dict(sizes=[0]), "sizes"),
    (dict(experiments=["pipeline"], batch=6, microbatches=(1, 4)), "batch"),
])
def test_bad_arguments_name_the_parameter(no_launch, kwargs, name):
    kwargs = {"experiments": ["ddp"], "ranks": 1, **kwargs}
    with pytest.raises(ValueError, match=name):
        parallel.launch(kwargs.pop("experiments"), kwargs.pop("ranks"), **kwargs)


def test_estimate_grows_with_the_work():
    small = parallel.estimate_seconds(["ddp"], 2, steps=5)
    assert small > parallel.STARTUP_S
    assert parallel.estimate_seconds(["ddp"], 2, steps=50) > small
    assert parallel.estimate_seconds(["ddp", "pipeline", "allreduce"], 2) > small


def test_amdahl_and_the_ring_model():
    assert parallel.amdahl(1.0, 4) == pytest.approx(4.0)
    assert parallel.amdahl(0.0, 4) == pytest.approx(1.0)
    assert parallel.amdahl(0.9, 2) == pytest.approx(1 / 0.55)
    assert parallel.amdahl(0.9, 10**9) == pytest.approx(10.0, rel=1e-6)   # 1 / serial share
    with pytest.raises(ValueError, match="parallel_share"):
        parallel.amdahl(1.5, 2)
    with pytest.raises(ValueError, match="workers"):
        parallel.amdahl(0.5, 0)
    assert parallel.ring_allreduce_seconds(1e9, 1, 10.0, 1e-5) == 0.0
    # 2 ranks: 2 steps of half the message each, 1 s of bandwidth in all, plus 2 latencies
    assert parallel.ring_allreduce_seconds(1e9, 2, 1.0, 1e-3) == pytest.approx(1.002)
    # many ranks: bandwidth term tends to 2 x bytes / bandwidth
    assert parallel.ring_allreduce_seconds(1e9, 1000, 1.0, 0.0) == pytest.approx(1.998)


@pytest.mark.slow
def test_pipeline_split_is_the_whole_model():
    model = training_cnns.build("resnet20", 3, 2, 32, seed=0)
    x = parallel_ranks.images(32)[0][:5]
    for at in (1, 4, 8):
        first, second = parallel_ranks.split_resnet(model, at)
        with torch.no_grad():
            torch.testing.assert_close(second(first(x)), model(x), rtol=0, atol=0)
        n = sum(p.numel() for p in first.parameters()) + sum(p.numel() for p in second.parameters())
        assert n == training_cnns.parameter_count(model)


def test_global_batches_cover_the_data_in_new_orders():
    batches = list(parallel_ranks.global_batches(10, 4, 5, seed=0))
    assert [len(b) for b in batches] == [4] * 5
    flat = torch.cat(batches)
    assert set(flat[:10].tolist()) == set(range(10))          # one full pass first
    again = list(parallel_ranks.global_batches(10, 4, 5, seed=0))
    assert all(torch.equal(a, b) for a, b in zip(batches, again))


# --- real ranks under torchrun ---------------------------------------------------------------

def _single_process(steps: int, world: int, b: int, per_rank_bn: bool):
    """The same training in one process: the global batch in ``world`` parts of ``b`` images,
    each part's mean loss averaged (what DDP's averaged gradients compute) with batch norm over
    each part (per_rank_bn) or, the wrong reading, over the whole global batch."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as each rank runs; given back for the tests that follow
    try:
        return _train_single_process(steps, world, b, per_rank_bn)
    finally:
        torch.set_num_threads(threads)


def _train_single_process(steps: int, world: int, b: int, per_rank_bn: bool):
    model = training_cnns.build("resnet20", 3, 2, 32, seed=0)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    x, y = parallel_ranks.images(32)
    losses = []
    for idx in parallel_ranks.global_batches(len(x), b * world, steps, 0):
        opt.zero_grad()
        if per_rank_bn:
            parts = [F.cross_entropy(model(x[idx[r * b:(r + 1) * b]]), y[idx[r * b:(r + 1) * b]])
                     for r in range(world)]
            loss = sum(parts) / world
        else:
            loss = F.cross_entropy(model(x[idx]), y[idx])
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
    return {k: v.detach() for k, v in model.named_parameters()}, losses


def _max_rel(a: dict, b: dict) -> float:
    return max(float((a[k] - b[k]).abs().max() / b[k].abs().max().clamp_min(1e-12)) for k in b)


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory):
    """One run of the three experiments and the check on 2 gloo ranks at tiny sizes (shared by
    the tests: each run starts torchrun and two ranks, each importing torch); the ranks' files
    are kept in the returned folder."""
    run_id = "test-" + uuid.uuid4().hex[:8]
    folder = tmp_path_factory.mktemp("two_ranks")
    rows = parallel.launch(["ddp", "pipeline", "allreduce", "check"], 2, batch=8, steps=3,
                           warmup=1, microbatches=(1, 2, 4), sizes=(4096, 65536),
                           seconds_per_size=0.05, run_id=run_id, workdir=folder)
    return rows, run_id, folder


@pytest.mark.slow
def test_ddp_on_two_ranks_trains_as_one_process(two_ranks):
    steps, world, b = 3, 2, 8   # as two_ranks ran the check
    rows, _, folder = two_ranks
    rows = [r for r in rows if r["experiment"] == "check"]
    weights = torch.load(next(folder.glob("*.weights.pt")))
    reference, losses = _single_process(steps, world, b, per_rank_bn=True)
    wrong, _ = _single_process(steps, world, b, per_rank_bn=False)
    params = {k: weights[k] for k in reference}
    assert _max_rel(params, reference) < 1e-4
    assert _max_rel(params, wrong) > 1e-3         # the check tells the two readings apart
    assert [r["loss"] for r in rows] == pytest.approx(losses, rel=1e-5)
    assert not any(torch.equal(params[k], training_cnns.build("resnet20", 3, 2, 32, seed=0)
                               .state_dict()[k]) for k in ("fc.weight", "stem.0.weight"))


@pytest.mark.slow
def test_ddp_row_splits_the_step(two_ranks):
    rows, run_id, _ = two_ranks
    assert _gone(run_id)
    assert all(list(r) == list(parallel.ROW_KEYS) and r["status"] == "ok" for r in rows)
    (ddp,) = [r for r in rows if r["experiment"] == "ddp"]
    assert ddp["backend"] == "gloo" and ddp["ranks"] == 2 and ddp["global_batch"] == 16
    assert ddp["device"].startswith("CPU")
    n = training_cnns.parameter_count(training_cnns.build("resnet20", 3, 2, 32))
    assert ddp["message_bytes"] == 4 * n
    for k in ("compute_s", "wait_s", "allreduce_s", "step_s", "alone_step_s"):
        assert ddp[k] > 0
    assert ddp["split_step_s"] == pytest.approx(ddp["compute_s"] + ddp["wait_s"]
                                                + ddp["allreduce_s"])
    assert ddp["images_per_s"] == pytest.approx(16 / ddp["step_s"])
    assert ddp["speedup"] == pytest.approx(ddp["images_per_s"] / ddp["alone_images_per_s"])
    assert ddp["efficiency"] == pytest.approx(ddp["speedup"] / 2)


@pytest.mark.slow
def test_pipeline_gives_the_unsplit_loss(two_ranks):
    rows, _, _ = two_ranks
    pipe = [r for r in rows if r["experiment"] == "pipeline"]
    assert [r["microbatches"] for r in pipe] == [1, 2, 4]
    model = training_cnns.build("resnet20", 3, 2, 32, seed=0)
    x, y = parallel_ranks.images(32)
    idx = next(parallel_ranks.global_batches(len(x), 8, 1, 0))
    for r in pipe:
        m = r["microbatches"]
        with torch.no_grad():   # batch norm per micro-batch, as GPipe computes it
            want = sum(float(F.cross_entropy(model(a), b))
                       for a, b in zip(x[idx].chunk(m), y[idx].chunk(m))) / m
        assert r["loss"] == pytest.approx(want, rel=1e-5)
        assert r["unsplit_loss"] == pytest.approx(want, rel=1e-5)
        assert r["bubble_theory"] == pytest.approx(1 / (m + 1))
        assert 0 < r["stage0_busy_s"] and 0 < r["stage1_busy_s"]
        assert r["idle_share"] < 1 and r["step_s"] > 0
        assert r["stage0_bytes"] + r["stage1_bytes"] == 4 * training_cnns.parameter_count(model)
    # with micro-batches of different sizes, batch norm sees different statistics
    assert pipe[0]["loss"] != pytest.approx(pipe[2]["loss"], rel=1e-5)


@pytest.mark.slow
def test_allreduce_rows(two_ranks):
    rows, _, _ = two_ranks
    red = [r for r in rows if r["experiment"] == "allreduce"]
    assert [r["message_bytes"] for r in red] == [4096, 65536]
    for r in red:
        assert r["algbw_gbps"] == pytest.approx(r["message_bytes"] / r["allreduce_s"] / 1e9)
        assert r["busbw_gbps"] == pytest.approx(r["algbw_gbps"])     # 2 (W - 1) / W = 1
        assert r["copy_gbps"] > 0


_TORCHRUN_REPORT = """\
Traceback (most recent call last):
  File "torch/distributed/launcher/api.py", line 386, in launch_agent
    raise ChildFailedError(
torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
======================================================
helpers.experiments.parallel.ranks FAILED
Root Cause (first observed failure):
[0]:
  rank      : 1 (local_rank: 1)
  exitcode  : -6 (pid: 27492)  (SIGABRT)
  traceback : Signal 6 (SIGABRT) received by PID 27492
======================================================"""


def test_failure_cause_names_the_ranks_error_not_torchruns_report():
    python = ["rank 1/2: ddp started", "Traceback (most recent call last):",
              '  File "parallel_ranks.py", line 98, in _setup',
              "RuntimeError: rank 1 failed on purpose (--fail-rank 1)"]
    assert (parallel.failure_cause(python + _TORCHRUN_REPORT.splitlines())
            == "RuntimeError: rank 1 failed on purpose (--fail-rank 1)")
    # a C++ abort after the rank's work is done names no Python error: its one line is the cause
    abort = ["rank 0/2: allreduce done", "terminate called without an active exception"]
    assert (parallel.failure_cause(abort + _TORCHRUN_REPORT.splitlines())
            == "terminate called without an active exception")
    # a Python error stays the cause when the dying process aborts after it
    assert (parallel.failure_cause(python + abort[1:] + ["Fatal Python error: Aborted"])
            == "RuntimeError: rank 1 failed on purpose (--fail-rank 1)")
    assert (parallel.failure_cause(abort + ["Fatal Python error: Aborted"])
            == "Fatal Python error: Aborted")
    assert parallel.failure_cause(_TORCHRUN_REPORT.splitlines()) is None


@pytest.mark.slow
def test_a_failed_rank_stops_them_all():
    run_id = "fail-" + uuid.uuid4().hex[:8]
    with pytest.raises(RuntimeError, match="failed on purpose"):
        parallel.launch(["ddp"], 2, steps=1000, fail_rank=1, run_id=run_id)
    assert _gone(run_id)


@pytest.mark.slow
def test_a_timeout_stops_them_all():
    run_id = "slow-" + uuid.uuid4().hex[:8]
    with pytest.raises(TimeoutError, match="stopped"):
        parallel.launch(["ddp"], 2, steps=10_000, timeout_s=10, run_id=run_id)
    assert _gone(run_id)


@pytest.mark.slow
def test_an_interrupt_stops_them_all(tmp_path):
    run_id = "intr-" + uuid.uuid4().hex[:8]
    code = ("from helpers.experiments import parallel\n"
            f"parallel.launch(['ddp'], 2, steps=10_000, run_id={run_id!r})\n")
    # SIGINT as a terminal delivers it: a test worker (pytest-xdist) may ignore SIGINT, and a
    # child started from it would inherit that and never see the interrupt
    proc = subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, stderr=subprocess.PIPE,
                            text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        end = time.monotonic() + 90
        while len(_rank_processes(run_id)) < 2 and time.monotonic() < end:  # ranks started
            time.sleep(0.5)
        assert len(_rank_processes(run_id)) == 2
        proc.send_signal(signal.SIGINT)          # Ctrl-C, or a notebook's interrupt
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
        gone = _gone(run_id, within_s=10)
        for p in _ranks_of(run_id):  # whatever happened, leave no rank of 10,000 steps behind
            with contextlib.suppress(psutil.Error):
                p.kill()
    assert "KeyboardInterrupt" in err
    assert gone


@pytest.mark.slow
def test_command_line_saves_and_recorded_reads(tmp_path, capsys):
    assert parallel.main(["--ranks", "1", "--quick", "--save", "--out", str(tmp_path)]) == 0
    ds = results.find(parallel.PREFIX, tmp_path)
    assert len(ds) == 1 and ds[0].rows[0]["experiment"] == "ddp"
    assert ds[0].rows[0]["ranks"] == 1 and math.isclose(ds[0].rows[0]["efficiency"],
                                                        ds[0].rows[0]["speedup"])
    rec = parallel.recorded(tmp_path)
    assert rec and rec.rows[0]["device"].startswith("CPU") and "recorded" in rec.note
    assert json.loads((tmp_path / f"{ds[0].name}.json").read_text())["command"].startswith(
        "python -m helpers.experiments.parallel")


def test_command_line_refuses_what_the_machine_cannot_hold(tmp_path, capsys, no_launch):
    too_many = parallel.usable_cores() + 1
    assert parallel.main(["--ranks", str(too_many), "--device", "cpu", "--out",
                          str(tmp_path), "--save"]) == 1
    assert f"{too_many} ranks refused" in capsys.readouterr().out
    assert not list(tmp_path.iterdir())


@pytest.mark.slow
def test_process_tracking_without_psutil(monkeypatch):
    """A bare GPU server may lack psutil: /proc gives the same descendants and memory."""
    proc = subprocess.Popen(["sh", "-c", "sleep 30 & sleep 30 & wait"])
    try:
        end = time.monotonic() + 10
        while len(parallel._descendants(proc.pid)) < 2 and time.monotonic() < end:
            time.sleep(0.1)
        with_psutil = parallel._descendants(proc.pid)
        memory = parallel._available_memory()
        monkeypatch.setattr(parallel, "psutil", None)
        assert parallel._descendants(proc.pid) == with_psutil and len(with_psutil) == 2
        assert abs(parallel._available_memory() - memory) < 0.2 * memory
        parallel._stop(proc, set(), grace_s=2)
        assert proc.poll() is not None
        assert not any(parallel._alive(p) for p in with_psutil)
    finally:
        proc.kill()


def test_weak_scaling_charges_only_the_ranks_for_their_overhead():
    # compute 64 ms, waiting + all-reduce 5.6 ms: 2 x 64 / 69.6, not Gustafson's 2 - s
    assert parallel.scaled_speedup(0.064, 0.0056, 2) == pytest.approx(2 * 0.064 / 0.0696)
    s = 0.0056 / 0.0696
    assert parallel.scaled_speedup(0.064, 0.0056, 2) == pytest.approx(2 * (1 - s))
    assert parallel.scaled_speedup(0.064, 0.0056, 2) < 2 - s          # the old formula
    assert parallel.scaled_speedup(1.0, 0.0, 8) == 8.0
    assert parallel.scaled_speedup(1.0, 5.0, 1) == pytest.approx(1 / 6)
    for kwargs, name in (({"compute_s": 0.0}, "compute_s"), ({"overhead_s": -1.0}, "overhead_s"),
                         ({"workers": 0}, "workers")):
        args = {**dict(compute_s=1.0, overhead_s=0.1, workers=2), **kwargs}
        with pytest.raises(ValueError, match=name):
            parallel.scaled_speedup(**args)


def test_ddp_buckets_are_the_ones_ddp_builds(tmp_path):
    """ResNet-20's gradient overflows DDP's 1 MiB first bucket into a second one; the sizes are
    those DDP itself reports after rebuilding its buckets in a one-rank gloo group."""
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    from helpers.experiments.parallel import ddp_bucket_bytes

    model = training_cnns.build("resnet20", 3, 2, 32, seed=0)
    buckets = ddp_bucket_bytes(model)
    assert sum(buckets) == 4 * sum(p.numel() for p in model.parameters()) > 2**20
    assert len(buckets) == 2 and buckets[0] >= 2**20 > buckets[1]
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0,
                            world_size=1)
    try:
        ddp = DistributedDataParallel(model)
        x, y = torch.randn(4, 3, 32, 32), torch.randint(0, 2, (4,))
        for _ in range(3):      # DDP rebuilds its buckets at the second step's forward
            F.cross_entropy(ddp(x), y).backward()
        built = ddp._get_ddp_logging_data()["rebuilt_bucket_sizes"]
    finally:
        dist.destroy_process_group()
    assert [int(b) for b in built.split(",")] == buckets
    with pytest.raises(ValueError, match="first_bytes"):
        ddp_bucket_bytes(model, first_bytes=0)
