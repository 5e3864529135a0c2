"""helpers.compiled and helpers.kernels: every CUDA kernel of the workbook and of the lab
solutions through the real compiler (NVVM + nvJitLink), for the oldest and newest target, with
no GPU: no compile error, no FP64 instruction in a float32 kernel, no spill. Planted kernels
show that each of those is caught."""

from __future__ import annotations

import helpers  # noqa: F401  (first: decides simulator vs GPU before numba.cuda is imported)
import ast
import json
import linecache
import os
import pathlib

import numpy as np
import pytest
from numba import cuda, float32

from helpers.device import backend
from helpers import compiled, compiler_worker, kernels, nvvm_ir
from helpers.checks import lab1, lab2, lab6, lab10
from helpers.experiments import kernel_resources, memory_access

ROOT = pathlib.Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.each_python

F1, F2, F4 = "float32[::1]", "float32[:, ::1]", "float32[:, :, :, ::1]"

#: Argument types of the lab solutions' kernels, as the labs launch them.
LAB_ARGTYPES = {
    "lab1_first_kernels": {**lab1.KERNEL_ARGTYPES, "owner_kernel": ("int32[::1]",)},
    "lab2_tiled_gemm": {"gemm_naive_kernel": lab2.KERNEL_ARGTYPES,
                        "gemm_tiled_kernel": lab2.KERNEL_ARGTYPES,
                        "early_exit_kernel": lab2.KERNEL_ARGTYPES},
    "lab3_im2col": {"im2col_kernel": (F4, F2) + ("int64",) * 6,
                    "col2im_kernel": (F2, F4) + ("int64",) * 6},
    "lab6_transpose_and_occupancy": {"transpose_kernel": lab6.KERNEL_ARGTYPES},
    "lab10_blocktiling": {"gemm_blocktile_1d_kernel": lab10.KERNEL_ARGTYPES,
                          "gemm_blocktile_2d_kernel": lab10.KERNEL_ARGTYPES},
}


def _definitions_only(node: ast.stmt) -> bool:
    """Imports, functions, and assignments of constants: what a cell defines, not what it runs."""
    if isinstance(node, (ast.Import, ast.ImportFrom, ast.FunctionDef)):
        return True
    if isinstance(node, ast.Assign):
        allowed = (ast.Constant, ast.Name, ast.BinOp, ast.UnaryOp, ast.Tuple, ast.Load,
                   ast.operator, ast.unaryop)
        return all(isinstance(n, allowed) for n in ast.walk(node.value))
    return False


def notebook_kernels(path: pathlib.Path) -> dict:
    """The ``@cuda.jit`` kernels a notebook defines, rebuilt from its definitions (each cell's
    source registered with linecache, so the compiler sees the same lines a learner does)."""
    nb = json.loads(path.read_text())
    namespace = {"__name__": f"_nb_{path.stem}"}
    for i, cell in enumerate(nb["cells"]):
        if cell["cell_type"] != "code":
            continue
        source = "".join(cell["source"])
        tree = ast.parse(source)
        keep = [n for n in tree.body if _definitions_only(n)]
        if not keep:
            continue
        filename = f"<{path.stem} cell {i}>"
        linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
        exec(compile(ast.Module(keep, []), filename, "exec"), namespace)  # noqa: S102
    return {k: v for k, v in namespace.items() if hasattr(v, "py_func")}


def _lab_jobs():
    jobs, names = [], []
    for stem, argtypes in LAB_ARGTYPES.items():
        found = notebook_kernels(ROOT / "labs" / "solutions" / f"{stem}.ipynb")
        assert set(argtypes) <= set(found), f"{stem}: kernels {set(argtypes) - set(found)} gone"
        for name, types in argtypes.items():
            for target in compiled.DEFAULT_TARGETS:
                jobs.append(compiled.Job(found[name], types, target))
                names.append(f"{stem}:{name}@{target}")
    return names, jobs


#: The targets of notebook 07's table (a T4, an A100, an H100): compiled here with the same
#: jobs, they are in the compile cache when the notebook runs in the same test run.
TABLE_TARGETS = ("sm_75", "sm_80", "sm_90")


@pytest.fixture(scope="module")
def table():
    """The compiler's rows for every kernel of helpers, for notebook 07's targets (one child)."""
    return kernels.compiled_table(TABLE_TARGETS)


@pytest.fixture(scope="module")
def lab_results():
    names, jobs = _lab_jobs()
    return dict(zip(names, compiled.compile_many(jobs)))


@pytest.mark.slow
def test_every_helpers_kernel_compiles_in_float32_without_spills(table):
    assert {r["kernel"] for r in table} == {k.name for k in kernels.KERNELS}
    assert {r["target"] for r in table} == set(TABLE_TARGETS)
    problems = [f"{r['kernel']}@{r['target']}: {r.get('error') or ''} fp64="
                f"{r.get('fp64_instructions')} spills={r.get('spill_bytes')}"
                for r in table if r.get("error") or r["fp64_instructions"] or r["spill_bytes"]]
    assert not problems, problems
    for r in table:
        assert 1 <= r["regs_per_thread"] <= 255
        assert 0 < r["occupancy_pct"] <= 100
        assert r["compiler"].startswith("numba-cuda ")


@pytest.mark.slow
def test_every_lab_solution_kernel_compiles_in_float32_without_spills(lab_results):
    assert len(lab_results) == 2 * sum(len(v) for v in LAB_ARGTYPES.values())
    bad = {name: (r if isinstance(r, compiled.CompileError) else r.problems())
           for name, r in lab_results.items()
           if isinstance(r, compiled.CompileError) or r.problems()}
    assert not bad, bad


@pytest.mark.slow
def test_direct_tiled_reaches_half_occupancy_on_an_h100(table):
    row = next(r for r in table if r["kernel"] == "direct_tiled_kernel" and r["target"] == "sm_90")
    assert row["regs_per_thread"] <= 64
    assert row["occupancy_pct"] >= 50.0
    assert row["smem_per_block"] >= 4 * 32 * 32  # its shared input tile is really allocated


def _multiplies_by_zero(ptx: str) -> list[str]:
    """The float32 multiplies and FMAs in ``ptx`` with the constant 0 (or -0) as a factor."""
    found = []
    for line in ptx.splitlines():
        op = line.strip().split(None, 1)
        if op and op[0] in ("mul.rn.f32", "fma.rn.f32", "mul.f32", "fma.f32"):
            factors = [a.strip(" ;") for a in op[1].split(",")][1:3]
            if {"0f00000000", "0f80000000"} & set(factors):
                found.append(line.strip())
    return found


@pytest.mark.slow
def test_the_winograd_kernels_leave_out_their_zero_coefficients():
    """IEEE arithmetic keeps x * 0 (NaN * 0 is NaN), so a constant 0 in a transform matrix
    still costs an FMA unless the kernel leaves the term out itself (notebook 10)."""
    specs = [s for s in kernels.KERNELS if s.module == "helpers.conv.winograd"]
    assert len(specs) == 6
    done = compiled.compile_many([compiled.Job(s.dispatcher(), s.argtypes) for s in specs])
    for spec, result in zip(specs, done):
        assert not _multiplies_by_zero(result.ptx), (spec.name, _multiplies_by_zero(result.ptx))
    planted = ("fma.rn.f32 \t%f1, %f2, 0f00000000, %f3;\n"     # a factor 0: caught
               "fma.rn.f32 %f4, %f5, 0f3F000000, 0f00000000;")  # 0.5 * x + 0: not a factor
    assert _multiplies_by_zero(planted) == ["fma.rn.f32 \t%f1, %f2, 0f00000000, %f3;"]


@pytest.mark.slow
def test_the_kept_first_versions_are_the_befores_the_compiler_objects_to(table):
    before = {r["kernel"]: r for r in kernels.compiled_table(("sm_90",), kernels.BEFORE_KERNELS)}
    now = {r["kernel"]: r for r in table if r["target"] == "sm_90"}
    first = before["direct_tiled_kernel_first"]
    assert first["fp64_instructions"] > 0 and first["occupancy_pct"] < 50.0
    assert first["regs_per_thread"] > now["direct_tiled_kernel"]["regs_per_thread"]
    assert before["direct_naive_kernel_float64"]["fp64_instructions"] > 0
    assert now["direct_naive_kernel"]["fp64_instructions"] == 0


TILE = 8


@cuda.jit
def planted_float64_accumulator(x, out):
    i = cuda.grid(1)
    if i < out.size:
        acc = 0.0
        for j in range(x.size):
            acc += x[j]
        out[i] = acc


@cuda.jit
def planted_runtime_shared_size(x, out):
    tile = cuda.shared.array(cuda.blockDim.x, float32)  # the size is known only at launch
    i = cuda.grid(1)
    tile[cuda.threadIdx.x] = x[i]
    cuda.syncthreads()
    out[i] = tile[0]


@cuda.jit
def planted_float32(x, out):
    i = cuda.grid(1)
    if i < out.size:
        acc = float32(0.0)
        for j in range(x.size):
            acc += x[j]
        out[i] = acc * TILE


@pytest.mark.slow
def test_a_float64_accumulator_is_caught_with_its_line_and_fix():
    c = compiled.compile_kernel(planted_float64_accumulator, (F1, F1), "sm_75")
    assert c.fp64_count > 0
    assert "acc += x[j]" in {f.source for f in c.fp64}
    assert any(f.ptx.startswith("add.f64") for f in c.fp64)
    assert c.problems() and "FP64" in c.problems()[0]
    import inspect

    advice = compiled.fp64_advice(c, inspect.getsource(planted_float64_accumulator.py_func))
    assert "acc = float32(0.0)" in advice
    ok = compiled.compile_kernel(planted_float32, (F1, F1), "sm_75")
    assert ok.fp64 == () and ok.problems() == [] and compiled.fp64_advice(ok) is None
    # the multiply-add of the fixed kernel is a float32 add in the PTX
    line = planted_float32.py_func.__code__.co_firstlineno + 6  # decorator line + 6
    assert any(s.startswith("add.f32") for s in ok.ptx_for_line(line))


#: Runs the compiler worker's jobs (stdin) in this process three times: as it does, with one
#: front-end run per kernel for all targets (kept in the compile cache); as another process
#: does after it, with those front ends read back from the cache (the types of the front ends
#: it used are printed too); then as it does with a numba-cuda that lacks the function for
#: that: each job on its own through numba-cuda's public ``compile``.
ALL_PATHS = """
import json, sys
from helpers import compiler_front_end, compiler_worker
jobs = json.loads(sys.stdin.read())
shared = compiler_worker.run_jobs(jobs)
compiler_front_end.LIBRARIES.clear()
kept = compiler_worker.run_jobs(jobs)
used = sorted({type(lib).__name__ for lib in compiler_front_end.LIBRARIES.values()})
compiler_front_end.front_end = lambda *args, **kwargs: None
print(json.dumps([shared, kept, used, compiler_worker.run_jobs(jobs)]))
"""


@pytest.mark.slow
def test_one_front_end_per_kernel_gives_what_compiling_each_job_alone_gives(tmp_path):
    """The worker lowers a kernel once, with line information, for all its targets, and takes
    its PTX from that and its LTO-IR (as Numba builds kernels on a GPU, without line
    information) from that with the line information taken out; it keeps that front end in the
    compile cache, from where another process takes it instead of lowering the kernel again.
    Compiled each on its own by Numba's public ``compile`` instead, every number and every PTX
    instruction is the same, whichever of the three. The depthwise kernel is one where a wrong
    reading shows: its LTO-IR built with line information gets other registers on sm_75 (64
    instead of 61 with numba-cuda 0.30.4)."""
    import re
    import subprocess
    import sys

    specs = [kernels.spec("depthwise_tiled_kernel"), kernels.spec("gemm_tiled_kernel")]
    jobs = [{"kernel": compiler_worker.describe_kernel(s.dispatcher()),
             "argtypes": list(s.argtypes), "target": t, "sass": False}
            for s in specs for t in ("sm_75", "sm_90")]
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="0", PYTHONWARNINGS="ignore",
               PYTHONPATH=str(ROOT), WORKBOOK_COMPILE_CACHE=str(tmp_path))
    out = subprocess.run([sys.executable, "-c", ALL_PATHS], input=json.dumps(jobs),
                         capture_output=True, text=True, cwd=ROOT, env=env, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    shared, kept, used, alone = json.loads(out.stdout.splitlines()[-1])
    if shared["unavailable"]:
        pytest.skip(f"no CUDA compiler here: {shared['unavailable']}")
    assert used == ["KeptFrontEnd"]   # the second run lowered nothing itself

    def names_out(ptx: str) -> str:  # mangled names and shared arrays carry a counter
        return re.sub(r"_cudapy_smem_\d+", "SMEM", re.sub(r"_ZN\w+", "NAME", ptx))

    def timeless(answer: dict) -> dict:   # the assembler's log says how long it took
        return dict(answer, log=re.sub(r"Compile time = [\d.]+ ms", "", answer["log"]))

    assert len(shared["results"]) == len(kept["results"]) == len(alone["results"]) == len(jobs)
    for first, again, other in zip(shared["results"], kept["results"], alone["results"]):
        assert "ok" in first and "ok" in again and "ok" in other, (
            first.get("error"), again.get("error"), other.get("error"))
        first, again, other = first["ok"], again["ok"], other["ok"]
        assert timeless(again) == timeless(first)   # the kept front end: the same PTX and log
        numbers = [k for k in first if k not in ("ptx", "log", "sass")]
        assert {k: first[k] for k in numbers} == {k: other[k] for k in numbers}
        assert names_out(first["ptx"]) == names_out(other["ptx"])


#: The worker's jobs (stdin) compiled as with a numba-cuda whose NVVM wrapper lacks what a kept
#: front end is compiled with (``nvrtc.get_arch_option``, ``nvvm.compile_ir``): the answers,
#: and the cache's files.
WITHOUT_ARCH_OPTION = """
import json, os, pathlib, sys
from helpers import compiler_front_end, compiler_worker
compiler_front_end._nvvm_compiles_ir = lambda: False
answer = compiler_worker.run_jobs(json.loads(sys.stdin.read()))
folder = pathlib.Path(os.environ["WORKBOOK_COMPILE_CACHE"])
print(json.dumps([answer, sorted(p.name for p in folder.glob("*.json"))]))
"""


@pytest.mark.slow
def test_a_numba_cuda_without_what_a_kept_front_end_needs_compiles_without_keeping_one(
        tmp_path):
    """Where NVVM cannot be called as :class:`KeptFrontEnd` calls it, nothing is kept or read
    back: each process lowers its kernels itself, and the answer is the compiler's as ever."""
    import subprocess
    import sys

    spec = kernels.spec("gemm_tiled_kernel")
    jobs = [{"kernel": compiler_worker.describe_kernel(spec.dispatcher()),
             "argtypes": list(spec.argtypes), "target": "sm_75", "sass": False}]
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="0", PYTHONWARNINGS="ignore",
               PYTHONPATH=str(ROOT), WORKBOOK_COMPILE_CACHE=str(tmp_path))
    out = subprocess.run([sys.executable, "-c", WITHOUT_ARCH_OPTION], input=json.dumps(jobs),
                         capture_output=True, text=True, cwd=ROOT, env=env, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    answer, files = json.loads(out.stdout.splitlines()[-1])
    if answer["unavailable"]:
        pytest.skip(f"no CUDA compiler here: {answer['unavailable']}")
    (result,) = answer["results"]
    assert result["ok"]["regs_per_thread"] > 0 and files == []


IR_WITH_LINES = """\
define void @"k"(float* %"a") !dbg !5
{
entry:
  call void @"llvm.dbg.declare"(metadata float* %"a", metadata !6, metadata !7), !dbg !8
  %".2" = load float, float* %"a", !dbg !8, !range !9
  br i1 true, label %"x", label %"y", !dbg !8, !prof !10
}
declare void @"llvm.dbg.declare"(metadata %".1", metadata %".2", metadata %".3")
!nvvmir.version = !{ !0 }
!llvm.dbg.cu = !{ !2 }
!llvm.module.flags = !{ !3, !4, !11 }
!nvvm.annotations = !{ !12 }
!0 = !{ i32 2, i32 0, i32 3, i32 2 }
!1 = !DIFile(directory: "/d", filename: "k.py")
!2 = distinct !DICompileUnit(emissionKind: DebugDirectivesOnly, file: !1)
!3 = !{ i32 2, !"Dwarf Version", i32 4 }
!4 = !{ i32 2, !"Debug Info Version", i32 3 }
!5 = distinct !DISubprogram(file: !1, line: 3, unit: !2)
!6 = !DILocalVariable(name: "a", scope: !5)
!7 = !DIExpression()
!8 = !DILocation(line: 4, scope: !5)
!9 = !{ i64 0, i64 9 }
!10 = !{ !"branch_weights", i32 1, i32 99 }
!11 = !{ i32 4, !"nvvm-reflect-ftz", i32 0 }
!12 = !{ void (float*)* @"k", !"kernel", i32 1 }
"""


def test_without_debug_info_keeps_the_code_and_its_own_metadata_only():
    """What NVVM is given for the LTO-IR: the line information's calls, attachments, compile
    unit, module flags and nodes gone; the code, its ranges and branch weights, the kernel's
    annotation and any other module flag kept."""
    out = nvvm_ir.without_debug_info(IR_WITH_LINES)
    assert "dbg" not in out and "DI" not in out and "Dwarf" not in out, out
    assert 'define void @"k"(float* %"a")\n' in out
    assert '%".2" = load float, float* %"a", !range !9' in out
    assert '!prof !10' in out and "!llvm.module.flags = !{ !11 }" in out
    for kept in ("!0 = ", "!9 = ", "!10 = ", "!11 = ", "!12 = ", "!nvvm.annotations = !{ !12 }"):
        assert kept in out, kept
    for dropped in ("!1 = ", "!2 = ", "!3 = ", "!5 = ", "!8 = "):
        assert dropped not in out, dropped


def test_the_kernel_table_keeps_a_space_after_the_longest_name():
    """A 28-letter kernel name (``gemm_vectorized_edges_kernel``) once ran into its target."""
    row = {"kernel": "gemm_vectorized_edges_kernel", "target": "sm_75", "gpu": "T4",
           "threads_per_block": 256, "regs_per_thread": 146, "smem_per_block": 8192,
           "spill_bytes": 0, "fp64_instructions": 0, "active_warps": 8, "max_warps": 32,
           "occupancy_pct": 25.0, "limiter": "registers", "compiler": "x"}
    header, line = kernels.format_table([row, dict(row, kernel="k")]).splitlines()[1:3]
    assert line.split()[:3] == ["gemm_vectorized_edges_kernel", "sm_75", "T4"]
    assert header.index("target") == line.index("sm_75")


def test_a_shared_array_sized_at_run_time_does_not_compile():
    with pytest.raises(compiled.CompileError) as info:
        compiled.compile_kernel(planted_runtime_shared_size, (F1, F1), "sm_90")
    err = info.value
    assert err.kernel == "planted_runtime_shared_size"
    assert err.source.startswith("tile = cuda.shared.array(cuda.blockDim.x, float32)")
    assert "global constant" in err.hint


def test_compile_many_returns_errors_in_place_and_caches():
    jobs = [compiled.Job(planted_float32, (F1, F1), "sm_90"),
            compiled.Job(planted_runtime_shared_size, (F1, F1), "sm_90")]
    first = compiled.compile_many(jobs)
    assert isinstance(first[0], compiled.CompiledKernel)
    assert isinstance(first[1], compiled.CompileError)
    again = compiled.compile_many(jobs[:1])
    assert again[0] == first[0]


@pytest.mark.parametrize("argtypes, target, match", [
    ((F1, F1), "sm_61", "target must be one of"),
    (F1, "sm_90", "argtypes must be a sequence"),
    ((F1, 3), "sm_90", "argtypes must be a sequence"),
])
def test_bad_arguments_are_refused_before_compiling(argtypes, target, match):
    with pytest.raises(ValueError, match=match):
        compiled.compile_kernel(planted_float32, argtypes, target)


def test_a_kernel_that_cannot_be_described_is_refused():
    scale = 2.0

    def closure(x, out):
        out[0] = x[0] * scale

    with pytest.raises(ValueError, match="enclosing function"):
        compiled.compile_kernel(closure, (F1, F1))
    with pytest.raises(ValueError, match="must be a @cuda.jit kernel"):
        compiled.compile_kernel(np.sum, (F1,))


def test_ptxas_report_is_parsed():
    log = ("ptxas         .     8 bytes stack frame, 12 bytes spill stores, 16 bytes spill loads\n"
           "ptxas info    : Used 40 registers, used 1 barriers\n"
           "info    : used 40 registers, used 1 barriers, 8 stack, 3072 bytes smem, 0 bytes lmem\n")
    got = compiler_worker.ptxas_numbers(log)
    assert got == {"regs_per_thread": 40, "barriers": 1, "smem_per_block": 3072,
                   "stack_bytes": 8, "spill_store_bytes": 12, "spill_load_bytes": 16}


def test_fp64_scan_counts_arithmetic_not_moves():
    ptx = ("\t.file 1 \"k.py\"\n\t.loc 1 3 0\n\tld.global.f64 %fd1, [%rd1];\n"
           "\tmov.f64 %fd2, %fd1;\n\t.loc 1 4 0\n\tfma.rn.f64 %fd3, %fd1, %fd2, %fd2;\n"
           "\t@%p1 cvt.rn.f32.f64 %f1, %fd3;\n\tfma.rn.f32 %f2, %f1, %f1, %f1;\n")
    found = compiler_worker.fp64_instructions(ptx, {1: ["a", "b", "c = x", "acc += c"]})
    assert [f["ptx"].split()[0] for f in found] == ["fma.rn.f64", "cvt.rn.f32.f64"]
    assert {f["line"] for f in found} == {4} and found[0]["source"] == "acc += c"


@pytest.mark.slow
def test_kernels_command_prints_every_kernel_and_target(capsys):
    assert kernels.main(["--targets", "sm_75", "sm_90"]) == 0
    out = capsys.readouterr().out
    assert "nvJitLink" in out
    rows = {tuple(line.split()[:3]) for line in out.splitlines()}
    for spec in kernels.KERNELS:
        assert {(spec.name, "sm_75", "T4"), (spec.name, "sm_90", "H100")} <= rows, spec.name


@pytest.mark.gpu
@pytest.mark.skipif(backend.MODE != "gpu", reason="needs a real CUDA GPU")
def test_the_compiler_agrees_with_the_loaded_kernels():
    """On a GPU: registers read from the kernels Numba loaded equal the compiler's for this
    GPU's architecture (shared memory within the 1 KB sm_90 reports as reserved)."""
    major, minor = cuda.get_current_device().compute_capability
    arch = f"sm_{major}{minor}"
    if arch not in compiled.TARGETS:
        pytest.skip(f"{arch} is not one of the compiled targets")
    ours = {r["kernel"]: r for r in kernels.compiled_table((arch,))}
    loaded = {r["kernel"]: r for r in kernel_resources.measure()}
    for name, r in loaded.items():
        assert r["regs_per_thread"] == ours[name]["regs_per_thread"], name
        assert abs(r["smem_per_block"] - ours[name]["smem_per_block"]) <= 1024, name
    assert backend.MODE == "gpu"


def test_each_spec_names_its_kernel_with_one_type_per_argument():
    for spec in kernels.KERNELS + kernels.BEFORE_KERNELS:
        fn = spec.dispatcher().py_func
        assert fn.__code__.co_argcount == len(spec.argtypes), spec.name
    assert kernels.spec("transpose_shared_kernel").threads_per_block == (
        memory_access.TILE_DIM * memory_access.BLOCK_ROWS)
    with pytest.raises(ValueError, match="name must be one of"):
        kernels.spec("no_such_kernel")


@pytest.mark.slow
def test_sass_shows_the_float64_add_the_gpu_would_run():
    """The SASS (cuobjdump + nvdisasm, installed with the workbook on Linux): the machine code
    of the float64 accumulator adds in double precision (DADD), the float32 one does not."""
    bad = compiled.compile_kernel(planted_float64_accumulator, (F1, F1), "sm_90", sass=True)
    good, plain = compiled.compile_many([
        compiled.Job(planted_float32, (F1, F1), "sm_90", sass=True),
        compiled.Job(planted_float32, (F1, F1), "sm_75")])
    if bad.sass is None:
        pytest.skip("cuobjdump and nvdisasm are not installed here (Linux installs them)")
    assert "DADD" in bad.sass and "DADD" not in good.sass
    assert "FADD" in good.sass
    assert plain.sass is None   # a job is disassembled only when it (or the call) asks


def test_the_instruction_mix_counts_block_barriers_only():
    """``cuda.syncthreads()`` is ``bar.sync 0`` (``barrier.sync`` in newer PTX), the
    ``syncthreads_count`` family ``bar.red``; ``cuda.syncwarp()`` (``bar.warp.sync``) waits for
    a warp, not the block, and is not counted."""
    ptx = "\n".join(["\tbar.sync \t0;", "\tbarrier.sync.aligned \t0;",
                     "\tbar.red.popc.u32 \t%r1, 0, %p1;", "\tbar.warp.sync \t-1;",
                     "\t@%p2 bar.sync \t0;", "\tfma.rn.f32 \t%f1, %f2, %f3, %f1;"])
    mix = compiled.instruction_mix(ptx)
    assert mix.barriers == 4 and mix.ffma == 1
