"""What each rank runs for :mod:`helpers.experiments.parallel`, started by torchrun.

``python -m torch.distributed.run --nproc-per-node W -m helpers.experiments.parallel.ranks
--experiments E... --result FILE ...`` joins a process group (gloo on CPUs, NCCL on GPUs) and runs
experiments in turn: ``ddp`` (data parallelism: each step timed whole with DistributedDataParallel,
and split into compute, waiting for the slowest rank and the gradient all-reduce), ``pipeline``
(ResNet-20 in two stages on two ranks, GPipe over M micro-batches), ``allreduce`` (time and
bandwidth over message sizes) or ``check`` (a few DDP steps, the weights saved for comparison).
Rank 0 writes the rows (JSON) to FILE. Times in seconds, sizes in bytes, images NCHW float32.

Sources: Li et al., PyTorch Distributed, VLDB 2020 (DDP's bucketed, overlapped all-reduce);
Huang et al., GPipe, NeurIPS 2019 (micro-batches, the bubble (S - 1) / (M + S - 1)).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import sys
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from helpers.networks import datasets, training_cnns

__all__ = ["EXPERIMENTS", "images", "split_resnet", "main"]

#: Experiments a rank can run.
EXPERIMENTS = ("ddp", "pipeline", "allreduce", "check")


def images(image_size: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """The bundled ``lfw_subset`` training images in memory: ``x (150, 3, S, S) float32``
    (grey copied to 3 channels, standardised) and ``y (150,) int64`` (face 0, non-face 1).
    Every rank holds them all; each takes its own slice of every global batch."""
    ds = datasets.LFWFaces("train", size=image_size, channels=3)
    xs, ys = zip(*(ds[i] for i in range(len(ds))))
    return torch.stack(xs), torch.tensor(ys, dtype=torch.int64)


def global_batches(n_images: int, batch: int, steps: int, seed: int):
    """Index tensors of ``steps`` global batches of ``batch`` images: a seeded random order,
    renewed each pass over the data; the same on every rank."""
    g = torch.Generator().manual_seed(seed)
    order = torch.empty(0, dtype=torch.int64)
    for _ in range(steps):
        while len(order) < batch:
            order = torch.cat([order, torch.randperm(n_images, generator=g)])
        yield order[:batch]
        order = order[batch:]


def split_resnet(model: training_cnns.ResNetCifar, at: int) -> tuple[nn.Module, nn.Module]:
    """ResNet-20 cut into two stages: stem + the first ``at`` blocks, and the other blocks +
    global pooling + the dense layer. The stages share the model's weights (no copy)."""

    class Head(nn.Module):
        def __init__(self, blocks, fc):
            super().__init__()
            self.blocks, self.fc = blocks, fc

        def forward(self, x):
            x = self.blocks(x)
            return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))

    blocks = list(model.blocks)
    return (nn.Sequential(model.stem, *blocks[:at]),
            Head(nn.Sequential(*blocks[at:]), model.fc))


def ddp_bucket_bytes(model: nn.Module, first_bytes: int | None = None,
                     cap_bytes: int = 25 * 2**20) -> list[int]:
    """Bytes of each gradient bucket DDP all-reduces for ``model`` once it has rebuilt its
    buckets after the first step, in the order they are reduced: parameters taken last to first
    (the order their gradients are ready), a bucket closed once it holds at least its limit,
    ``first_bytes`` for the first (default torch's ``dist._DEFAULT_FIRST_BUCKET_BYTES``, 1 MiB)
    and ``cap_bytes`` (DDP's ``bucket_cap_mb``, 25 MiB) for the others. torch's own
    assignment (``dist._compute_bucket_assignment_by_size``). Source: Li et al., VLDB 2020.

    Raises:
        ValueError: a model without trainable parameters, or a limit < 1 byte.
    """
    first = dist._DEFAULT_FIRST_BUCKET_BYTES if first_bytes is None else first_bytes
    if first < 1 or cap_bytes < 1:
        raise ValueError(f"first_bytes and cap_bytes must be >= 1, got {first} and {cap_bytes}")
    params = [p for p in model.parameters() if p.requires_grad][::-1]
    if not params:
        raise ValueError("model must have trainable parameters")
    buckets, _ = dist._compute_bucket_assignment_by_size(params, [first, cap_bytes],
                                                         [False] * len(params))
    return [sum(params[i].numel() * params[i].element_size() for i in b) for b in buckets]


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _median(xs) -> float:
    return float(statistics.median(xs))


def _setup(args) -> tuple[int, int, torch.device]:
    torch.set_num_threads(args.threads)
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    if args.device == "cuda":
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", rank)))
        torch.cuda.set_device(device)
    else:
        device = torch.device("cpu")
    dist.init_process_group("nccl" if args.device == "cuda" else "gloo",
                            timeout=datetime.timedelta(seconds=args.timeout))
    if args.fail_rank == rank:  # for tests: a rank that fails after joining the group
        raise RuntimeError(f"rank {rank} failed on purpose (--fail-rank {rank})")
    return rank, world, device


def _timed_step(model, opt, x, y, device) -> float:
    """Seconds of one training step (forward, cross-entropy, backward, update), synchronised."""
    _sync(device)
    t0 = time.perf_counter()
    opt.zero_grad(set_to_none=True)
    F.cross_entropy(model(x), y).backward()
    opt.step()
    _sync(device)
    return time.perf_counter() - t0


def _model(args, device):
    return training_cnns.build(args.model, 3, 2, args.image_size, seed=args.seed).to(device)


def _run_ddp(args, rank, world, device) -> list[dict]:
    x_all, y_all = (t.to(device) for t in images(args.image_size))
    b = args.batch                                    # images per rank per step
    steps = args.warmup + args.steps

    def slices():
        for idx in global_batches(len(x_all), b * world, steps, args.seed):
            mine = idx[rank * b:(rank + 1) * b]
            yield x_all[mine], y_all[mine]

    # 0. One rank alone, plain model, same per-rank batch: the baseline of the speedup.
    alone = []
    if rank == 0:
        net = _model(args, device)
        opt = torch.optim.SGD(net.parameters(), lr=0.05, momentum=0.9)
        for i, (x, y) in enumerate(slices()):
            seconds = _timed_step(net, opt, x, y, device)
            if i >= args.warmup:
                alone.append(seconds)
    dist.barrier()                      # the other ranks wait here meanwhile

    # 1. DistributedDataParallel as it is used: all-reduce in buckets, overlapped with backward;
    # 2. the same step in three visible parts, nothing overlapped. The two alternate, batch by
    # batch, so that both see the machine in the same state.
    ddp = DistributedDataParallel(_model(args, device))
    ddp_opt = torch.optim.SGD(ddp.parameters(), lr=0.05, momentum=0.9)
    net = _model(args, device)
    params = [p for p in net.parameters() if p.requires_grad]
    opt = torch.optim.SGD(params, lr=0.05, momentum=0.9)
    token = torch.zeros(1, device=device)
    whole, parts = [], {"compute": [], "wait": [], "allreduce": []}
    for i, (x, y) in enumerate(slices()):
        _sync(device)
        dist.barrier()                  # both variants start with the ranks together
        seconds = _timed_step(ddp, ddp_opt, x, y, device)
        if i >= args.warmup:
            whole.append(seconds)

        dist.barrier()
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        F.cross_entropy(net(x), y).backward()
        flat = torch.cat([p.grad.reshape(-1) for p in params])
        _sync(device)
        t1 = time.perf_counter()
        dist.all_reduce(token)          # returns once every rank has arrived: the wait
        _sync(device)
        t2 = time.perf_counter()
        dist.all_reduce(flat)           # the gradients, summed over ranks
        _sync(device)
        t3 = time.perf_counter()
        flat /= world
        offset = 0
        for p in params:
            p.grad.copy_(flat[offset:offset + p.numel()].view_as(p))
            offset += p.numel()
        opt.step()
        _sync(device)
        t4 = time.perf_counter()
        if i >= args.warmup:
            parts["compute"].append((t1 - t0) + (t4 - t3))
            parts["wait"].append(t2 - t1)
            parts["allreduce"].append(t3 - t2)
    mine = {"step_s": _median(whole), **{f"{k}_s": _median(v) for k, v in parts.items()}}
    every = [None] * world
    dist.all_gather_object(every, mine)
    if rank:
        return []
    mean = {k: statistics.fmean(r[k] for r in every) for k in mine}
    step, alone_step = max(r["step_s"] for r in every), _median(alone)
    return [{"experiment": "ddp", "ranks": world, "batch_per_rank": b, "global_batch": b * world,
             "step_s": step, "images_per_s": b * world / step,
             "alone_step_s": alone_step, "alone_images_per_s": b / alone_step,
             "speedup": (b * world / step) / (b / alone_step),
             "efficiency": (b * world / step) / (b / alone_step) / world,
             "compute_s": mean["compute_s"], "wait_s": mean["wait_s"],
             "allreduce_s": mean["allreduce_s"],
             "split_step_s": mean["compute_s"] + mean["wait_s"] + mean["allreduce_s"],
             "compute_s_max": max(r["compute_s"] for r in every),
             "message_bytes": 4 * sum(p.numel() for p in params)}]


def _run_check(args, rank, world, device) -> list[dict]:
    """A few DDP steps from seeded weights; rank 0 saves the weights and per-step losses."""
    x_all, y_all = (t.to(device) for t in images(args.image_size))
    ddp = DistributedDataParallel(_model(args, device))
    opt = torch.optim.SGD(ddp.parameters(), lr=0.05, momentum=0.9)
    b, losses = args.batch, []
    for idx in global_batches(len(x_all), b * world, args.steps, args.seed):
        mine = idx[rank * b:(rank + 1) * b]
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(ddp(x_all[mine]), y_all[mine])
        loss.backward()
        opt.step()
        mean = loss.detach().reshape(1).clone()
        dist.all_reduce(mean)           # the loss of the global batch: mean over ranks
        losses.append(float(mean) / world)
    if rank:
        return []
    state = {k: v.detach().cpu() for k, v in ddp.module.state_dict().items()}
    torch.save(state, args.result + ".weights.pt")
    return [{"experiment": "check", "ranks": world, "batch_per_rank": b, "step": i + 1,
             "loss": v} for i, v in enumerate(losses)]


def _time_stage_alone(stage, inputs, device, repeats: int, input_grad: bool = False) -> float:
    """Seconds one stage computes forward + backward on its micro-batches, with no messages
    (median of ``repeats`` after one warm-up); ``input_grad``: also the gradient of its input,
    which a later stage sends back."""
    times = []
    for _ in range(repeats + 1):
        _sync(device)
        t0 = time.perf_counter()
        for x in inputs:
            x = x.detach().requires_grad_(input_grad)
            out = stage(x)
            out.float().sum().backward()
        _sync(device)
        times.append(time.perf_counter() - t0)
    return _median(times[1:])


def _run_pipeline(args, rank, world, device) -> list[dict]:
    from torch.distributed.pipelining import PipelineStage, ScheduleGPipe

    if world != 2:
        raise ValueError(f"the pipeline experiment needs exactly 2 ranks, got {world}")
    x_all, y_all = (t.to(device) for t in images(args.image_size))
    model = _model(args, device)
    stages = split_resnet(model, args.split_at)
    mine = stages[rank]
    stage_bytes = 4 * sum(p.numel() for p in mine.parameters())
    first = next(global_batches(len(x_all), args.batch, 1, args.seed))
    unsplit = {}
    if rank == 0:   # the whole model on one rank: its loss on the first batch, its step time
        for m in args.microbatches:
            with torch.no_grad():
                unsplit[m] = statistics.fmean(
                    float(F.cross_entropy(model(x), y))
                    for x, y in zip(x_all[first].chunk(m), y_all[first].chunk(m)))
        unsplit["step_s"] = _time_stage_alone(
            lambda x: F.cross_entropy(model(x), y_all[first]), [x_all[first]], device,
            max(2, args.steps // 2))
    dist.barrier()
    rows = []
    for m in args.microbatches:
        if args.batch % m:
            raise ValueError(f"batch {args.batch} is not a multiple of {m} micro-batches")
        stage = PipelineStage(mine, rank, 2, device)
        schedule = ScheduleGPipe(stage, n_microbatches=m,
                                 loss_fn=lambda out, y: F.cross_entropy(out, y))
        opt = torch.optim.SGD(mine.parameters(), lr=0.0)  # lr 0: every M sees the same weights
        times, loss = [], float("nan")
        for i, idx in enumerate(global_batches(len(x_all), args.batch,
                                               args.warmup + args.steps, args.seed)):
            _sync(device)
            t0 = time.perf_counter()
            opt.zero_grad(set_to_none=True)
            if rank == 0:
                schedule.step(x_all[idx])
            else:
                losses = []
                schedule.step(target=y_all[idx], losses=losses)
                if i == 0:      # the loss on the first batch, for the comparison with unsplit
                    loss = float(torch.stack(losses).detach().mean())
            opt.step()
            _sync(device)
            if i >= args.warmup:
                times.append(time.perf_counter() - t0)
        step = _median(times)
        # this rank's busy time: its stage alone, on the same micro-batches
        idx = next(global_batches(len(x_all), args.batch, 1, args.seed))
        inputs = x_all[idx].chunk(m)
        if rank == 1:
            with torch.no_grad():
                inputs = [stages[0](x) for x in inputs]
        busy = _time_stage_alone(mine, inputs, device, max(2, args.steps // 2), rank == 1)
        every = [None] * world
        dist.all_gather_object(every, {"step_s": step, "busy_s": busy, "loss": loss,
                                       "bytes": stage_bytes})
        if rank == 0:
            step_s = max(r["step_s"] for r in every)
            rows.append({"experiment": "pipeline", "ranks": 2, "microbatches": m,
                         "global_batch": args.batch, "step_s": step_s,
                         "images_per_s": args.batch / step_s,
                         "stage0_busy_s": every[0]["busy_s"], "stage1_busy_s": every[1]["busy_s"],
                         "idle_share": 1 - statistics.fmean(r["busy_s"] for r in every) / step_s,
                         "bubble_theory": 1 / (m + 1), "loss": every[1]["loss"],
                         "unsplit_loss": unsplit[m], "unsplit_step_s": unsplit["step_s"],
                         "speedup": unsplit["step_s"] / step_s,
                         "stage0_bytes": every[0]["bytes"], "stage1_bytes": every[1]["bytes"]})
        dist.barrier()
    return rows


def _run_allreduce(args, rank, world, device) -> list[dict]:
    rows = []
    for nbytes in args.sizes:
        buf = torch.ones(max(1, nbytes // 4), device=device)
        for _ in range(2):
            dist.all_reduce(buf)
        times, budget_end = [], time.perf_counter() + args.seconds_per_size
        go = torch.ones(1, device=device)
        while True:
            # every rank must make the same number of calls: continue while any rank wants to
            go.fill_(float(len(times) < 3 or (time.perf_counter() < budget_end
                                              and len(times) < 50)))
            dist.all_reduce(go, op=dist.ReduceOp.MAX)
            if not go.item():
                break
            _sync(device)
            dist.barrier()
            t0 = time.perf_counter()
            dist.all_reduce(buf)
            _sync(device)
            times.append(time.perf_counter() - t0)
        t = torch.tensor([_median(times)], dtype=torch.float64, device=device)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        if rank == 0:
            seconds, size = float(t), 4 * buf.numel()
            algbw = size / seconds / 1e9
            rows.append({"experiment": "allreduce", "ranks": world, "message_bytes": size,
                         "allreduce_s": seconds, "algbw_gbps": algbw,
                         "busbw_gbps": algbw * 2 * (world - 1) / world})
    if rank == 0:   # the link's bandwidth: one plain copy of the largest message
        src = torch.ones(max(1, max(args.sizes) // 4), device=device)
        dst = torch.empty_like(src, device=("cuda:1" if device.type == "cuda"
                                            and torch.cuda.device_count() > 1 else device))
        copies = []
        for _ in range(7):
            _sync(device)
            t0 = time.perf_counter()
            dst.copy_(src)
            _sync(dst.device)
            copies.append(time.perf_counter() - t0)
        link = 4 * src.numel() / _median(copies[2:]) / 1e9
        for r in rows:
            r["copy_gbps"] = link
    return rows


_RUNNERS = {"ddp": _run_ddp, "pipeline": _run_pipeline, "allreduce": _run_allreduce,
            "check": _run_check}


def main(argv: list[str] | None = None) -> int:
    """Entry point of one rank (torchrun sets ``RANK``, ``WORLD_SIZE``, ``MASTER_ADDR``...)."""
    p = argparse.ArgumentParser(prog="python -m helpers.experiments.parallel.ranks")
    p.add_argument("--experiments", required=True, nargs="+", choices=EXPERIMENTS)
    p.add_argument("--result", required=True, help="JSON file rank 0 writes its rows to")
    p.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    p.add_argument("--model", default="resnet20", choices=list(training_cnns.MODELS))
    p.add_argument("--image-size", type=int, default=32)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--split-at", type=int, default=4)
    p.add_argument("--microbatches", type=int, nargs="+", default=[1, 2, 4])
    p.add_argument("--sizes", type=int, nargs="+", default=[4096, 2**20])
    p.add_argument("--seconds-per-size", type=float, default=0.3)
    p.add_argument("--timeout", type=float, default=120.0)
    p.add_argument("--fail-rank", type=int, default=-1)
    p.add_argument("--run-id", default="", help="a tag on the command line (to find the ranks)")
    args = p.parse_args(argv)
    rank, world, device = _setup(args)
    try:
        rows = []
        for e in args.experiments:
            print(f"rank {rank}/{world}: {e} started", flush=True)
            rows += _RUNNERS[e](args, rank, world, device)
            print(f"rank {rank}/{world}: {e} done", flush=True)
        if rank == 0:
            tmp = args.result + ".part"
            with open(tmp, "w") as fh:
                json.dump({"rows": rows, "world": world}, fh)
            os.replace(tmp, args.result)
        dist.barrier()                  # no rank closes its connections while another still reads
    finally:
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    # Once a DistributedDataParallel model has been built (even if deleted since), the gloo
    # group's worker threads outlive destroy_process_group. A worker that frees a tensor while
    # the interpreter shuts down needs a GIL that is gone, and the rank aborts ("terminate called
    # without an active exception") after its work is done. The rank ends as multiprocessing's
    # children do: output flushed, then os._exit, with no interpreter shutdown for a worker to
    # race.
    status = main()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)
