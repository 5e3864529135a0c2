"""One rank of Lab 9's real check: a learner's ring all-reduce on gloo, beside dist.all_reduce.

Run as a script, once per rank, by :mod:`helpers.checks.lab9.real`:
``python rank.py MODULE FUNCTION RANK GROUPS SIZES SEED OUT``. GROUPS is ``W:PORT,...``,
largest W first: the rank joins each gloo group it belongs to (RANK < W) at 127.0.0.1:PORT in
turn, and for each n in SIZES calls ``FUNCTION(x, RANK, W, torch.distributed)`` on n seeded
float32 values (:func:`inputs`) and ``dist.all_reduce`` on a copy. OUT (JSON) is rewritten at
every stage: ``stage`` (``starting``, ``joining``, ``running``, ``done``), per (W, n) the largest
difference and where, the learner's exception with its line, or ``setup_error``. It imports
torch only (not helpers), so that it starts fast.
"""

import datetime
import importlib.util
import json
import os
import sys
import time
import traceback

import torch
import torch.distributed as dist

#: Seconds a rank waits for the others to join, and for a collective, before it gives up.
GROUP_TIMEOUT_S = 120


def inputs(seed: int, world: int, rank: int, n: int) -> torch.Tensor:
    """The float32 tensor (n,) rank ``rank`` of ``world`` starts from: standard normal, seeded."""
    g = torch.Generator().manual_seed(seed * 1_000_003 + world * 10_007 + rank * 7919 + n)
    return torch.randn(n, generator=g, dtype=torch.float32)


def _write(path: str, data: dict) -> None:
    data["time"] = time.time()
    tmp = path + ".part"
    with open(tmp, "w") as fh:
        json.dump(data, fh)
    os.replace(tmp, path)


def _learner_error(exc: BaseException, module_path: str, world, n) -> dict:
    frames = traceback.extract_tb(exc.__traceback__)
    mine = [f for f in frames if os.path.abspath(f.filename) == os.path.abspath(module_path)]
    where = (mine or frames or [None])[-1]
    return {"type": type(exc).__name__, "message": str(exc), "world": world, "n": n,
            "line": getattr(where, "line", "") or "", "function": getattr(where, "name", "")}


def _case(world: int, n: int, x: torch.Tensor, mine: torch.Tensor, expected: torch.Tensor):
    err = (mine.double() - expected.double()).abs()
    worst = int(err.argmax()) if n else 0
    return {"world": world, "n": n, "max_err": float(err.max()) if n else 0.0,
            "scale": float(expected.abs().max()) if n else 0.0, "index": worst,
            "expected": float(expected[worst]) if n else 0.0,
            "got": float(mine[worst]) if n else 0.0,
            "finite": bool(torch.isfinite(mine).all()), "unchanged": bool(torch.equal(mine, x))}


def main(argv: list[str]) -> int:
    module_path, function, rank, groups, sizes, seed, out = argv
    rank, seed = int(rank), int(seed)
    result = {"rank": rank, "stage": "starting", "world": None, "cases": [], "error": None,
              "setup_error": None}
    _write(out, result)
    try:
        spec = importlib.util.spec_from_file_location("lab9_learner", module_path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        fn = getattr(module, function)
    except Exception as exc:  # noqa: BLE001 - the learner's source, reported by the parent
        result["error"] = _learner_error(exc, module_path, None, None)
        _write(out, result)
        return 1
    for group in groups.split(","):
        world, port = (int(v) for v in group.split(":"))
        if rank >= world:
            continue
        result.update(stage="joining", world=world)
        _write(out, result)
        try:
            dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                                    world_size=world,
                                    timeout=datetime.timedelta(seconds=GROUP_TIMEOUT_S))
        except Exception as exc:  # noqa: BLE001 - the machine's, not the learner's
            result["setup_error"] = f"{type(exc).__name__}: {exc}".strip()[:500]
            _write(out, result)
            return 2
        result["stage"] = "running"
        _write(out, result)
        for n in (int(s) for s in sizes.split(",")):
            x = inputs(seed, world, rank, n)
            expected = x.clone()
            dist.all_reduce(expected)
            mine = x.clone()
            try:
                fn(mine, rank, world, dist)
            except Exception as exc:  # noqa: BLE001 - the learner's code, reported by the parent
                result["error"] = _learner_error(exc, module_path, world, n)
                _write(out, result)
                return 1
            result["cases"].append(_case(world, n, x, mine, expected))
        dist.barrier()                  # no rank leaves while another still receives
        dist.destroy_process_group()
    result["stage"] = "done"
    _write(out, result)
    return 0


if __name__ == "__main__":
    status = main(sys.argv[1:])
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)                    # no interpreter shutdown racing gloo's threads
