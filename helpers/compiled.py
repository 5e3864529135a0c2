"""The real compiler's view of a Numba CUDA kernel, with or without a GPU.

:func:`compile_kernel` compiles a ``@cuda.jit`` kernel for given argument types with Numba's
NVVM front end and links it for one GPU architecture with nvJitLink (``-Xptxas=-v``), as Numba
does on a GPU (link-time optimised where nvJitLink allows), and returns a
:class:`CompiledKernel`: registers per thread, static shared memory per block (bytes), spill
and local-memory bytes, barriers, the PTX with its FP64 instructions (and their source lines),
and the theoretical occupancy at a block size (:mod:`helpers.occupancy`).
The simulator's ``numba.cuda`` has no compiler, so without a GPU the work runs in a child
Python process with ``NUMBA_ENABLE_CUDASIM=0``. Targets: :data:`TARGETS` (sm_75 T4 ... sm_90
H100). Argument types are Numba type strings: ``"float32[:, ::1]"`` (C-contiguous 2-D),
``"float32[:, :]"`` (any layout), ``"int64"``.

Source: NVIDIA PTX ISA and nvJitLink documentation; the study's Table II (registers and shared
memory per kernel, read on the K40c) is the comparison.
"""

from __future__ import annotations

import ast
import dataclasses
import json
import textwrap
from collections.abc import Sequence

from helpers import compile_cache, compiler_process, occupancy
from helpers import compiler_worker as worker
from helpers.device import backend

__all__ = ["Target", "TARGETS", "DEFAULT_TARGETS", "Fp64Instruction", "CompiledKernel",
           "CompileError", "CompilerUnavailable", "compile_kernel", "compile_many",
           "fp64_advice", "source_line", "Job", "InstructionMix", "instruction_mix"]


@dataclasses.dataclass(frozen=True)
class Target:
    """A GPU architecture to compile for: ``arch`` (``"sm_90"``), compute capability ``cc``
    and the GPU the workbook names for it."""

    arch: str
    cc: tuple[int, int]
    gpu: str

    @property
    def cc_text(self) -> str:
        return f"{self.cc[0]}.{self.cc[1]}"


#: The targets the workbook reports: Colab's T4, the A100, the L4 and the H100.
TARGETS: dict[str, Target] = {t.arch: t for t in [
    Target("sm_75", (7, 5), "T4"), Target("sm_80", (8, 0), "A100"),
    Target("sm_89", (8, 9), "L4"), Target("sm_90", (9, 0), "H100")]}

#: The two targets the test suite compiles every kernel for (oldest and newest).
DEFAULT_TARGETS: tuple[str, ...] = ("sm_75", "sm_90")


class CompilerUnavailable(RuntimeError):
    """NVVM or nvJitLink cannot be loaded on this machine, so nothing can be compiled."""


class CompileError(Exception):
    """The compiler rejected a kernel.

    Attributes:
        kernel: the kernel's name. message: the compiler's first lines. line: the kernel's
        source line it points at (None if unknown). source: that line's text. hint: a fix for
        a known cause, or None.
    """

    def __init__(self, kernel: str, message: str, line: int | None = None,
                 source: str | None = None, hint: str | None = None):
        self.kernel, self.message, self.line, self.source, self.hint = (kernel, message, line,
                                                                        source, hint)
        where = f" (line {line}: {source})" if line and source else ""
        super().__init__(f"{kernel} does not compile{where}: {message}"
                         + (f"\nHint: {hint}" if hint else ""))


@dataclasses.dataclass(frozen=True)
class Fp64Instruction:
    """One FP64 instruction of the PTX: its text, and the kernel source line it comes from
    (``line``, ``source``; None where the PTX gives no location)."""

    ptx: str
    line: int | None
    source: str | None


@dataclasses.dataclass(frozen=True)
class CompiledKernel:
    """What the compiler made of one kernel for one target.

    Attributes:
        name: the kernel. target: the :class:`Target`. argtypes: the Numba type strings.
        regs_per_thread: 32-bit registers per thread. smem_per_block: static shared memory,
        bytes. spill_store_bytes, spill_load_bytes: register spills to local memory, bytes per
        thread. stack_bytes: stack frame (local memory) per thread, bytes. barriers: named
        barriers used (``cuda.syncthreads`` uses barrier 0). fp64: the FP64 instructions
        (arithmetic, comparisons and conversions on ``.f64``). compiler: versions of the
        compiler pieces. ptx: the PTX text. sass: the disassembly, where ``cuobjdump`` is
        installed, else None. log: the assembler's report.
    """

    name: str
    target: Target
    argtypes: tuple[str, ...]
    regs_per_thread: int
    smem_per_block: int
    spill_store_bytes: int
    spill_load_bytes: int
    stack_bytes: int
    barriers: int
    fp64: tuple[Fp64Instruction, ...]
    compiler: str
    ptx: str
    sass: str | None
    log: str

    @property
    def fp64_count(self) -> int:
        return len(self.fp64)

    @property
    def spill_bytes(self) -> int:
        return self.spill_store_bytes + self.spill_load_bytes

    def occupancy(self, threads_per_block: int) -> occupancy.Occupancy:
        """Theoretical occupancy of a launch with ``threads_per_block`` threads on this target,
        from the compiler's registers and shared memory (:func:`helpers.occupancy.occupancy`).

        Raises:
            ValueError: a block size outside 1..1024.
        """
        return occupancy.occupancy(self.target.cc_text, threads_per_block,
                                   max(self.regs_per_thread, 1), self.smem_per_block)

    def problems(self) -> list[str]:
        """What would make this float32 kernel slow on a GPU: FP64 instructions and spills,
        one sentence each (empty if none)."""
        out = []
        if self.fp64:
            first = self.fp64[0]
            where = f" (first at line {first.line}: {first.source})" if first.source else ""
            out.append(f"{self.name} on {self.target.arch}: {self.fp64_count} FP64 "
                       f"instruction(s){where}")
        if self.spill_bytes:
            out.append(f"{self.name} on {self.target.arch}: spills {self.spill_store_bytes} "
                       f"bytes to local memory and reloads {self.spill_load_bytes}")
        return out

    @property
    def mix(self) -> "InstructionMix":
        """What the PTX holds, counted by kind (:func:`instruction_mix`)."""
        return instruction_mix(self.ptx)

    def ptx_for_line(self, line: int) -> list[str]:
        """The PTX instructions the compiler attributes to source ``line`` of the kernel's file
        (``.loc`` directives), in order; empty if none."""
        return [text for loc, text in worker.instructions(self.ptx) if loc and loc[1] == line]


@dataclasses.dataclass(frozen=True)
class InstructionMix:
    """Static counts of a kernel's PTX instructions by kind (each instruction once, however
    often a loop runs it; a ``.v4`` access counts once, as one instruction).

    Attributes:
        ffma: ``fma.rn.f32``. shared_loads, shared_stores, global_loads, global_stores:
        ``ld``/``st`` on ``.shared`` / ``.global`` (``ld.global.nc`` included). vector_loads:
        the ``.v2``/``.v4`` loads among them. div64: ``div``/``rem`` on 64-bit integers (a
        slow software routine on the GPU). div32: on 32-bit integers. barriers: block-wide
        barriers, ``bar.sync`` / ``barrier.sync`` (``cuda.syncthreads()``) and ``bar.red``
        (``cuda.syncthreads_count`` and friends); not ``bar.warp.sync`` (``cuda.syncwarp``).
        loop_global_loads: the global loads inside the outermost loop that holds the FFMAs (a
        GEMM's loop along K: the loads of one step), None when no loop holds FFMAs.
        inner_instructions_per_ffma: instructions per FFMA in the innermost loop that holds
        FFMAs (address arithmetic, loads, branches and the FFMAs themselves), None without one.
    """

    ffma: int
    shared_loads: int
    shared_stores: int
    global_loads: int
    global_stores: int
    vector_loads: int
    div64: int
    div32: int
    barriers: int = 0
    loop_global_loads: int | None = None
    inner_instructions_per_ffma: float | None = None

    @property
    def ffma_per_shared_load(self) -> float | None:
        """FFMAs per shared-memory load instruction; None without shared loads. Where both sit
        in one loop, unrolling changes both counts alike: the ratio is the loop's."""
        return self.ffma / self.shared_loads if self.shared_loads else None


def _loops(texts: list[str]) -> list[tuple[int, int]]:
    """(first, last) instruction indices of every loop of a kernel's PTX: a branch back to a
    label that comes before it closes a loop that starts at that label."""
    labels: dict[str, int] = {}
    loops = []
    for i, text in enumerate(texts):
        if text.endswith(":"):
            labels[text[:-1]] = i
        elif text.split()[0].rstrip(";").split(".")[0] == "bra":
            target = text.split()[-1].rstrip(";")
            if target in labels:
                loops.append((labels[target], i))
    return loops


def instruction_mix(ptx: str) -> InstructionMix:
    """Count the PTX instructions of :class:`InstructionMix`'s kinds in ``ptx``."""
    counts = dict.fromkeys(("ffma", "shared_loads", "shared_stores", "global_loads",
                            "global_stores", "vector_loads", "div64", "div32", "barriers"), 0)
    texts = []
    for raw in ptx.splitlines():        # instructions and labels, in order
        s = raw.strip()
        if s.startswith("$") and s.endswith(":"):
            texts.append(s)
        elif s and not s.startswith(("//", ".", "{", "}", ")", "(", "$")):
            texts.append(s.split(None, 1)[1] if s.startswith("@") and " " in s else s)
    kinds = []
    for text in texts:
        kind = None
        if not text.endswith(":"):
            parts = text.split()[0].rstrip(";").split(".")
            op = parts[0]
            if op == "fma" and parts[-1] == "f32":
                kind = "ffma"
            elif op in ("ld", "st") and ("shared" in parts or "global" in parts):
                kind = ("shared_" if "shared" in parts else "global_") + \
                    ("loads" if op == "ld" else "stores")
                counts["vector_loads"] += op == "ld" and ("v4" in parts or "v2" in parts)
            elif op in ("div", "rem") and parts[-1] in ("s64", "u64", "b64"):
                kind = "div64"
            elif op in ("div", "rem") and parts[-1] in ("s32", "u32", "b32"):
                kind = "div32"
            elif op in ("bar", "barrier") and "warp" not in parts and (
                    "sync" in parts or "red" in parts):
                kind = "barriers"
        if kind:
            counts[kind] += 1
        kinds.append(kind)
    fmas = [i for i, k in enumerate(kinds) if k == "ffma"]
    holding = [(a, b) for a, b in _loops(texts) if any(a <= i <= b for i in fmas)]
    loop_loads = per_ffma = None
    if holding:
        a, b = max(holding, key=lambda ab: ab[1] - ab[0])
        loop_loads = sum(1 for k in kinds[a:b + 1] if k == "global_loads")
        a, b = min(holding, key=lambda ab: ab[1] - ab[0])
        body = [t for t in texts[a:b + 1] if not t.endswith(":")]
        per_ffma = len(body) / sum(1 for k in kinds[a:b + 1] if k == "ffma")
    return InstructionMix(**counts, loop_global_loads=loop_loads,
                          inner_instructions_per_ffma=per_ffma)


# ------------------------------------------------------------------------------- public face


@dataclasses.dataclass(frozen=True)
class Job:
    """One compilation: a kernel, its argument types (Numba type strings), a target arch, and
    whether to disassemble it to SASS too (as :func:`compile_many`'s ``sass`` does for all)."""

    kernel: object
    argtypes: tuple[str, ...]
    target: str = "sm_90"
    sass: bool = False


_CACHE: dict[str, dict] = {}


def _run(jobs: list[dict]) -> list[dict]:
    answer = (worker.run_jobs(jobs) if backend.MODE != "simulator"
              else compiler_process.run(jobs))
    if answer["unavailable"]:
        raise CompilerUnavailable(f"no CUDA compiler here: {answer['unavailable']}")
    return answer["results"]


def _result(raw: dict) -> CompiledKernel:
    if "error" in raw:
        err = raw["error"]
        raise CompileError(err["kernel"], err["message"], err["line"], err["source"],
                           err["hint"])
    ok = dict(raw["ok"])
    ok["target"] = TARGETS[ok["target"]]
    ok["argtypes"] = tuple(ok["argtypes"])
    ok["fp64"] = tuple(Fp64Instruction(**f) for f in ok["fp64"])
    return CompiledKernel(**ok)


def compile_many(jobs: Sequence[Job], sass: bool = False) -> list[CompiledKernel | CompileError]:
    """Compile many kernels at once (one child process for all of them without a GPU).

    Args:
        jobs: :class:`Job` objects. sass: also disassemble every job (needs ``cuobjdump``);
            a job whose ``sass`` is set is disassembled either way.

    Returns:
        One :class:`CompiledKernel`, or the :class:`CompileError` the compiler raised, per job,
        in order. Results are cached per (kernel source, argument types, target), in this
        process and on disk for other processes (:mod:`helpers.compile_cache`).

    Raises:
        ValueError: an unknown target, argument types that are not a sequence of strings, or a
            kernel that cannot be described to the compiler (a closure, no source).
        CompilerUnavailable: NVVM or nvJitLink cannot be loaded here (the message says why).
    """
    described, keys = [], []
    for job in jobs:
        if job.target not in TARGETS:
            raise ValueError(f"target must be one of {sorted(TARGETS)}, got {job.target!r}")
        if isinstance(job.argtypes, str) or not all(isinstance(t, str) for t in job.argtypes):
            raise ValueError(f"argtypes must be a sequence of Numba type strings such as "
                             f"'float32[::1]', got {job.argtypes!r}")
        d = {"kernel": worker.describe_kernel(job.kernel), "argtypes": list(job.argtypes),
             "target": job.target, "sass": bool(sass or job.sass)}
        described.append(d)
        keys.append(json.dumps(d, sort_keys=True))
    todo = []
    for d, k in zip(described, keys):
        if k not in _CACHE:
            kept = compile_cache.get(d)   # compiled before, by this or another process
            if kept is None:
                todo.append(d)
            else:
                _CACHE[k] = kept
    if todo:
        # jobs another process is compiling right now are waited for, not compiled twice
        with compile_cache.claim(todo) as (mine, theirs):
            _compile_into_cache([d for d in mine if not _from_disk(d)])
        _compile_into_cache([d for d in theirs if not _from_disk(d, wait=True)])
    out = []
    for k in keys:
        try:
            out.append(_result(_CACHE[k]))
        except CompileError as exc:
            out.append(exc)
    return out


def _from_disk(d: dict, wait: bool = False) -> bool:
    """Whether job ``d``'s answer is on disk now (after another process's claim on it ended,
    with ``wait``); if so it is kept in this process too."""
    kept = compile_cache.wait(d) if wait else compile_cache.get(d)
    if kept is not None:
        _CACHE[json.dumps(d, sort_keys=True)] = kept
    return kept is not None


def _compile_into_cache(todo: list[dict]) -> None:
    """Compile the described jobs in one child process; keep each answer here and on disk."""
    if todo:
        for d, raw in zip(todo, _run(todo)):
            _CACHE[json.dumps(d, sort_keys=True)] = raw
            compile_cache.put(d, raw)


def compile_kernel(kernel, argtypes: Sequence[str], target: str = "sm_90",
                   sass: bool = False) -> CompiledKernel:
    """Compile one kernel for one target (see the module docstring).

    Args:
        kernel: a ``@cuda.jit`` kernel (from a module, a notebook cell or a lab) or the Python
            function under it.
        argtypes: one Numba type string per argument, e.g. ``("float32[::1]", "int64")``.
        target: a key of :data:`TARGETS`.
        sass: also return the SASS disassembly (None where ``cuobjdump`` is not installed).

    Returns:
        A :class:`CompiledKernel`.

    Raises:
        CompileError: the compiler rejected the kernel (with its line and a hint).
        CompilerUnavailable: no compiler here. ValueError: as :func:`compile_many`.
    """
    if isinstance(argtypes, str):
        raise ValueError(f"argtypes must be a sequence of Numba type strings such as "
                         f"('float32[::1]',), got the string {argtypes!r}")
    result = compile_many([Job(kernel, tuple(argtypes), target)], sass=sass)[0]
    if isinstance(result, CompileError):
        raise result
    return result


def source_line(kernel, text: str) -> int:
    """The line number, in its file, of the first line of ``kernel``'s source that contains
    ``text``: the number :meth:`CompiledKernel.ptx_for_line` takes.

    Raises:
        ValueError: no line of the kernel contains ``text``, or its source is unavailable.
    """
    import inspect

    try:
        lines, first = inspect.getsourcelines(getattr(kernel, "py_func", kernel))
    except (OSError, TypeError) as exc:
        raise ValueError(f"the kernel's source is not available ({exc})") from None
    for offset, line in enumerate(lines):
        if text in line:
            return first + offset
    raise ValueError(f"no line of the kernel contains {text!r}")


def fp64_advice(compiled: CompiledKernel, kernel_source: str | None = None) -> str | None:
    """A learner's fix for a kernel's FP64 instructions, or None if it has none.

    Names an accumulator started from a float literal (``acc = 0.0``) when the source has one,
    else the first line the FP64 instructions come from.

    Args:
        compiled: the :class:`CompiledKernel`. kernel_source: the kernel's source (dedented),
            to find the literal; optional.
    """
    if not compiled.fp64:
        return None
    first = compiled.fp64[0]
    where = f"line {first.line}: `{first.source}`" if first.source else "its arithmetic"
    culprits = []
    if kernel_source:
        try:
            tree = ast.parse(textwrap.dedent(kernel_source))
        except SyntaxError:
            tree = None
        augmented = {n.target.id for n in ast.walk(tree) if isinstance(n, ast.AugAssign)
                     and isinstance(n.target, ast.Name)} if tree else set()
        for node in ast.walk(tree) if tree else []:
            if (isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant)
                    and isinstance(node.value.value, float) and len(node.targets) == 1
                    and isinstance(node.targets[0], ast.Name)
                    and node.targets[0].id in augmented):
                culprits.append((node.targets[0].id, node.value.value))
    if culprits:
        name, value = culprits[0]
        return (f"on a GPU this kernel would compute in float64 ({compiled.fp64_count} FP64 "
                f"instructions, the first from {where}): a float literal such as "
                f"`{name} = {value!r}` is a float64 in Numba, so every `{name} += ...` is a "
                f"float64 add, up to 64 times slower than float32. Write "
                f"`{name} = float32({value!r})` (`from numba import float32`).")
    return (f"on a GPU this kernel would compute in float64 ({compiled.fp64_count} FP64 "
            f"instructions, the first from {where}): a Python float literal, or float32 "
            f"mixed with an int (as in max(x, 0)), is computed as float64 in Numba. Use "
            f"float32 constants there, e.g. float32(0) (`from numba import float32`).")
