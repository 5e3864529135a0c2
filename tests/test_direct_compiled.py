"""The register-blocked direct kernels through the real compiler (NVVM + nvJitLink, no GPU
needed), as the study's Table I layers launch them, for sm_75 and sm_90: no FP64 instruction,
no spill, no stack frame, no 64-bit division, the shared memory the launch plan expects, and
an inner step that is the register tile and nothing else (FK * FP FMAs per FK + FP shared
loads; in the SASS, FMAs a third of the hot loop, a fifth for the smallest tiles)."""

from __future__ import annotations

import re
from collections import Counter

import pytest

from helpers import compiled, paper
from helpers.conv import direct

F1, I64 = "float32[::1]", "int64"
TARGETS = compiled.DEFAULT_TARGETS                      # sm_75 and sm_90


def _argtypes(launch) -> tuple[str, ...]:
    return (F1, F1, F1) + (I64,) * len(launch.args)


def _plans():
    """(label, launch, fk, fp): what a thread's inner step holds, per kernel of each layer."""
    out = []
    for cfg in paper.TABLE_I:
        plan = direct.launches(cfg)
        for kind in ("forward", "dx"):
            key = plan[kind].key
            out.append((f"{cfg.name} {kind}", plan[kind], key.fk, key.fp))
        key = plan["dw"].key
        out.append((f"{cfg.name} dw", plan["dw"], key.fk, key.ft))
    return out


PLANS = _plans()


@pytest.fixture(scope="module")
def results():
    """Every Table I kernel and the reduction, compiled for both targets (one child process);
    disassembled to SASS for sm_90 only, the SASS read (about a third of a second a kernel)."""
    jobs = [compiled.Job(launch.kernel, _argtypes(launch), t, sass=t == "sm_90")
            for _, launch, _, _ in PLANS for t in TARGETS]
    jobs += [compiled.Job(direct.direct_dw_reduce_kernel, (F1, F1, I64, I64), t)
             for t in TARGETS]
    done = compiled.compile_many(jobs)
    labels = [f"{label}@{t}" for label, *_ in PLANS for t in TARGETS]
    labels += [f"dw reduce@{t}" for t in TARGETS]
    return dict(zip(labels, done))


@pytest.mark.slow
def test_every_kernel_compiles_in_float32_without_spills_stack_or_64_bit_division(results):
    bad = {}
    for label, r in results.items():
        if isinstance(r, compiled.CompileError):
            bad[label] = str(r)
            continue
        problems = r.problems() + [f"{r.stack_bytes} B stack"] * bool(r.stack_bytes)
        problems += [f"{r.mix.div64} 64-bit div/rem"] * bool(r.mix.div64)
        if problems:
            bad[label] = problems
    assert not bad, bad


@pytest.mark.slow
def test_shared_memory_is_what_the_plan_declares(results):
    for label, launch, _, _ in PLANS:
        for t in TARGETS:
            r = results[f"{label}@{t}"]
            assert r.smem_per_block == launch.key.smem_bytes, label
            assert r.occupancy(launch.threads).active_warps >= 8, (label, t)


@pytest.mark.slow
def test_the_inner_step_is_the_register_tile(results):
    """Only the inner loop loads shared memory, and each of its steps does fk * fp FMAs for
    fk + fp shared loads (8 x 4: 32 FMAs per 12 loads), however the compiler unrolled it."""
    for label, _, fk, fp in PLANS:
        mix = results[f"{label}@sm_90"].mix
        steps = mix.ffma / (fk * fp)
        assert steps == int(steps) >= 1, (label, mix)
        assert mix.shared_loads == steps * (fk + fp), (label, mix)


def _loop_with_most_ffma(sass: str) -> Counter:
    """Opcode counts of the backward-branching loop of ``sass`` that holds the most FFMAs."""
    lines = [ln for ln in sass.splitlines() if re.search(r"/\*[0-9a-f]{4}\*/", ln)]
    ops = []
    for ln in lines:
        m = re.search(r"/\*([0-9a-f]{4})\*/\s+(?:@!?U?P\w+\s+)?([A-Z0-9_.]+)", ln)
        if m:
            ops.append((int(m.group(1), 16), m.group(2).split(".")[0], ln))
    best = Counter()
    for at, op, ln in ops:
        target = re.search(r"BRA\s+.*?0x([0-9a-f]+)", ln) if op == "BRA" else None
        if target and int(target.group(1), 16) < at:
            body = Counter(o for a, o, _ in ops if int(target.group(1), 16) <= a <= at)
            if body["FFMA"] > best["FFMA"]:
                best = body
    return best


@pytest.mark.slow
def test_the_sass_inner_loop_is_mostly_arithmetic(results):
    """Unsigned shared-memory indices leave out Numba's negative-index wraparound (five 64-bit
    instructions per load): at least a third of the hot loop's instructions are FFMAs where a
    thread's step is 24 FMAs or more, a fifth where it is fewer (Conv2's dw: 8 filters x 1
    tap). The first tiled kernel issued about 25 instructions per FMA."""
    sass = {label: results[f"{label}@sm_90"].sass for label, *_ in PLANS}
    if not all(sass.values()):
        pytest.skip("no cuobjdump here to disassemble the SASS")
    for (label, _, fk, fp), text in zip(PLANS, sass.values()):
        loop = _loop_with_most_ffma(text)
        share = 1 / 3 if fk * fp >= 24 else 1 / 5
        assert loop["FFMA"] >= share * sum(loop.values()), (label, dict(loop))
