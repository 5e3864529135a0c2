"""Every Numba CUDA kernel of the workbook as its host code launches it, and what the real
compiler makes of each for today's GPUs, with no GPU needed.

:data:`KERNELS` gives each kernel's module, strategy family, block size and argument types
(Numba type strings, as the launches pass them: C-contiguous float32 tensors, int64 scalars).
:func:`compiled_table` compiles them for the targets of :data:`helpers.compiled.TARGETS` and
gives registers, shared memory, spills, FP64 instructions and theoretical occupancy per
(kernel, target); ``python -m helpers.kernels`` prints it.

Source: the study's Table II (registers and shared memory per kernel on the K40c).
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import math
import sys

from helpers import compiled
from helpers.conv import depthwise, direct, gemm, unroll, winograd
from helpers.conv.gemm import splitk

__all__ = ["KernelSpec", "KERNELS", "BEFORE_KERNELS", "spec", "compiled_table", "format_table",
           "ladder_table", "main"]

_F1, _F2, _F3 = "float32[::1]", "float32[:, ::1]", "float32[:, :, ::1]"
_F4 = "float32[:, :, :, ::1]"
_I = "int64"


@dataclasses.dataclass(frozen=True)
class KernelSpec:
    """One of the workbook's Numba CUDA kernels and how its host code launches it.

    Attributes:
        name: the kernel's name. module: where it lives. family: strategy family (for colour).
        threads_per_block: threads in each block of its launches (block x * y * z).
        argtypes: one Numba type string per argument, as the launches pass them.
    """

    name: str
    module: str
    family: str
    threads_per_block: int
    argtypes: tuple[str, ...] = ()

    def dispatcher(self):
        """The ``@cuda.jit`` dispatcher object."""
        return getattr(importlib.import_module(self.module), self.name)


#: The workbook's kernels: convolution (helpers.conv), GEMM (helpers.conv.gemm), the first kernels
#: of notebook 01 (helpers.elementwise) and the memory experiments of notebook 07.
KERNELS: list[KernelSpec] = [
    KernelSpec("direct_naive_kernel", "helpers.conv.direct", "direct-naive", direct.THREADS,
               (_F4, _F4, _F4) + (_I,) * 6),
    KernelSpec("direct_tiled_kernel", "helpers.conv.direct", "direct-tiled", direct.TILE ** 2,
               (_F1, _F1, _F1) + (_I,) * 14),
    KernelSpec("direct_dx_kernel", "helpers.conv.direct", "direct-naive", direct.THREADS,
               (_F4, _F4, _F4) + (_I,) * 6),
    KernelSpec("direct_dw_kernel", "helpers.conv.direct", "direct-naive", direct.THREADS,
               (_F4, _F4, _F4) + (_I,) * 6),
    *[KernelSpec(name, "helpers.conv.direct", "direct-tiled", launch.threads,
                 (_F1, _F1, _F1) + (_I,) * len(launch.args))
      for name, launch in direct.EXAMPLE_LAUNCHES.items()],
    KernelSpec("direct_dw_reduce_kernel", "helpers.conv.direct", "direct-tiled",
               direct.backward.REDUCE_THREADS, (_F1, _F1, _I, _I)),
    KernelSpec("depthwise_naive_kernel", "helpers.conv.depthwise", "direct-naive",
               depthwise.THREADS, (_F4, _F4, _F4) + (_I,) * 6),
    KernelSpec("depthwise_tiled_kernel", "helpers.conv.depthwise", "direct-tiled",
               depthwise.TILE ** 2, (_F1, _F1, _F1) + (_I,) * 14),
    KernelSpec("depthwise_dx_kernel", "helpers.conv.depthwise", "direct-naive",
               depthwise.THREADS, (_F4, _F4, _F4) + (_I,) * 6),
    KernelSpec("depthwise_dw_kernel", "helpers.conv.depthwise", "direct-naive",
               depthwise.THREADS, (_F4, _F4, _F4) + (_I,) * 6),
    KernelSpec("im2col_kernel", "helpers.conv.unroll", "im2col-gemm", unroll.THREADS,
               (_F4, _F2) + (_I,) * 10),
    KernelSpec("col2im_kernel", "helpers.conv.unroll", "im2col-gemm", unroll.THREADS,
               (_F2, _F4) + (_I,) * 10),
    *[KernelSpec(name, "helpers.conv.winograd", "winograd", winograd.THREADS,
                 (_F4,) + (_I,) * 5 + (_F3,))
      for name in ("input_transform_kernel", "filter_transform_kernel", "dy_transform_kernel",
                   "dw_input_kernel")],
    *[KernelSpec(name, "helpers.conv.winograd", "winograd", winograd.THREADS,
                 (_F3,) + (_I,) * 4 + (_F4,))
      for name in ("output_transform_kernel", "dw_output_kernel")],
    KernelSpec("im2col_window_kernel", "helpers.conv.unroll", "im2col-gemm", unroll.THREADS,
               (_F1, _F1) + (_I,) * 13),
    KernelSpec("col2im_window_kernel", "helpers.conv.unroll", "im2col-gemm", unroll.THREADS,
               (_F1, _F1) + (_I,) * 13),
    *[KernelSpec(r.kernel_name, r.module, "im2col-tiled", math.prod(r.threads),
                 (_F1,) * 3 + (_I,) * (5 if r.number >= 6 else 3) if r.flat else (_F2,) * 3)
      for r in gemm.RUNGS],
    KernelSpec("gemm_vectorized_edges_kernel", "helpers.conv.gemm.rung6_vectorized",
               "im2col-tiled", gemm.RUNGS[5].threads[0], (_F1,) * 3 + (_I,) * 5),
    KernelSpec("gemm_autotuned_edges_kernel", "helpers.conv.gemm.rung7_autotuned",
               "im2col-tiled", gemm.RUNGS[6].threads[0], (_F1,) * 3 + (_I,) * 5),
    KernelSpec("gemm_nt_splitk_kernel", "helpers.conv.gemm.splitk", "im2col-tiled",
               splitk.THREADS, (_F1,) * 3 + (_I,) * 4),
    KernelSpec("gemm_splitk_reduce_kernel", "helpers.conv.gemm.splitk", "im2col-tiled", 256,
               (_F1,) * 2 + (_I,) * 2),
    KernelSpec("relu_kernel", "helpers.elementwise", "elementwise", 256, (_F1, _F1)),
    KernelSpec("relu_grid_stride_kernel", "helpers.elementwise", "elementwise", 256,
               (_F1, _F1)),
    KernelSpec("saxpy_kernel", "helpers.elementwise", "elementwise", 256,
               ("float32", _F1, _F1, _F1)),
    KernelSpec("thread_map_kernel", "helpers.elementwise", "elementwise", 256,
               ("int32[::1]", "int32[::1]")),
    KernelSpec("strided_load_kernel", "helpers.access_kernels", "experiment", 256,
               (_F1, _F1, _I)),
    KernelSpec("transpose_naive_kernel", "helpers.access_kernels", "experiment", 256,
               (_F2, _F2)),
    KernelSpec("transpose_shared_kernel", "helpers.access_kernels", "experiment", 256,
               (_F2, _F2, _I, "int32[:, :, :, ::1]", _I)),
    KernelSpec("branch_kernel", "helpers.access_kernels", "experiment", 128,
               (_F1, _F1, "int8[::1]", _I, _I)),
]

#: Kernels kept to show what changed: the first ``direct_tiled_kernel`` (float64 accumulator,
#: about 130 registers) and the naive kernel with ``acc = 0.0``. Not launched by any
#: strategy; the compiler is expected to object to both.
BEFORE_KERNELS: list[KernelSpec] = [
    KernelSpec("direct_tiled_kernel_first", "helpers.conv.direct", "direct-tiled",
               direct.TILE ** 2, (_F4, _F4, _F4) + (_I,) * 4),
    KernelSpec("direct_naive_kernel_float64", "helpers.conv.direct", "direct-naive", direct.THREADS,
               (_F4, _F4, _F4) + (_I,) * 4),
]


def spec(name: str) -> KernelSpec:
    """The :class:`KernelSpec` of a kernel of :data:`KERNELS` or :data:`BEFORE_KERNELS`.

    Raises:
        ValueError: no kernel of that name (the message lists them).
    """
    for s in KERNELS + BEFORE_KERNELS:
        if s.name == name:
            return s
    raise ValueError(f"name must be one of {[s.name for s in KERNELS + BEFORE_KERNELS]}, "
                     f"got {name!r}")


def compiled_table(targets=compiled.DEFAULT_TARGETS,
                   kernels: list[KernelSpec] | None = None) -> list[dict]:
    """The compiler's view of each kernel on each target (no GPU needed).

    Args:
        targets: keys of :data:`helpers.compiled.TARGETS`. kernels: default :data:`KERNELS`.

    Returns:
        One dict per (kernel, target), in that order: ``kernel, family, target, gpu,
        threads_per_block, regs_per_thread, smem_per_block`` (static, bytes),
        ``spill_bytes, stack_bytes`` (per thread), ``barriers, fp64_instructions,
        active_warps, max_warps, occupancy_pct`` (theoretical, at its block size),
        ``limiter, compiler``; or, for a kernel the compiler rejects, ``error`` with its
        message and the resource fields None.

    Raises:
        CompilerUnavailable: no compiler here. ValueError: an unknown target.
    """
    kernels = KERNELS if kernels is None else kernels
    jobs = [compiled.Job(spec.dispatcher(), spec.argtypes, t) for spec in kernels
            for t in targets]
    results = compiled.compile_many(jobs)
    rows = []
    for job, spec, result in zip(jobs, [s for s in kernels for _ in targets], results):
        target = compiled.TARGETS[job.target]
        row = {"kernel": spec.name, "family": spec.family, "target": target.arch,
               "gpu": target.gpu, "threads_per_block": spec.threads_per_block}
        if isinstance(result, compiled.CompileError):
            rows.append({**row, "error": str(result), "regs_per_thread": None})
            continue
        occ = result.occupancy(spec.threads_per_block)
        rows.append({**row, "regs_per_thread": result.regs_per_thread,
                     "smem_per_block": result.smem_per_block,
                     "spill_bytes": result.spill_bytes, "stack_bytes": result.stack_bytes,
                     "barriers": result.barriers, "fp64_instructions": result.fp64_count,
                     "active_warps": occ.active_warps, "max_warps": occ.limits.max_warps,
                     "occupancy_pct": round(100 * occ.occupancy, 1), "limiter": occ.limiter,
                     "compiler": result.compiler})
    return rows


def ladder_table(target: str = "sm_90") -> list[dict]:
    """What the real compiler makes of each rung of the GEMM ladder (:data:`helpers.conv.gemm.RUNGS`)
    for one target: the numbers notebook 13 prints beside each rung.

    Returns:
        One dict per rung: ``rung, name, title, threads_per_block, regs_per_thread,
        smem_per_block, spill_bytes, fp64_instructions, occupancy_pct, ffma, shared_loads,
        global_loads, vector_loads`` (static PTX counts), ``ffma_per_shared_load`` (PTX ratio;
        None without shared memory) and ``ffma_per_global_load``: for the naive rungs the PTX
        ratio (one loop holds both), for the tiled rungs the FMAs a thread does per step of its
        block along K (from the tile sizes) over the global load instructions of that step (the
        PTX's loads inside the loop along K); ``instructions_per_ffma``: PTX instructions per
        FFMA in the innermost loop that holds FFMAs (what each FMA costs in issue slots).

    Raises:
        CompilerUnavailable: no compiler here. ValueError: an unknown target.
    """
    specs = {s.name: s for s in KERNELS}
    jobs = [compiled.Job(specs[r.kernel_name].dispatcher(), specs[r.kernel_name].argtypes,
                         target) for r in gemm.RUNGS]
    rows = []
    for r, res in zip(gemm.RUNGS, compiled.compile_many(jobs)):
        if isinstance(res, compiled.CompileError):
            raise res
        mix, threads = res.mix, math.prod(r.threads)
        per_global = (r.tile_fmas / mix.loop_global_loads if r.tile_fmas else
                      mix.ffma / mix.global_loads)
        rows.append({"rung": r.number, "name": r.name, "title": r.title,
                     "threads_per_block": threads, "regs_per_thread": res.regs_per_thread,
                     "smem_per_block": res.smem_per_block, "spill_bytes": res.spill_bytes,
                     "fp64_instructions": res.fp64_count,
                     "occupancy_pct": round(100 * res.occupancy(threads).occupancy, 1),
                     "ffma": mix.ffma, "shared_loads": mix.shared_loads,
                     "global_loads": mix.global_loads, "vector_loads": mix.vector_loads,
                     "ffma_per_shared_load": mix.ffma_per_shared_load,
                     "ffma_per_global_load": per_global,
                     "instructions_per_ffma": mix.inner_instructions_per_ffma})
    return rows


def format_table(rows: list[dict]) -> str:
    """:func:`compiled_table`'s rows as text, one line per (kernel, target), headed by the
    compiler's versions."""
    versions = sorted({r["compiler"] for r in rows if r.get("compiler")})
    name = max([28] + [len(r["kernel"]) + 1 for r in rows])   # a space after the longest name
    lines = [f"Compiled by {', '.join(versions) or 'nothing'} (no GPU needed)",
             f"{'kernel':<{name}}{'target':<12}{'block':>6}{'regs':>6}{'smem (B)':>10}"
             f"{'spill (B)':>10}{'FP64':>6}{'warps':>9}{'occupancy':>11}  limited by"]
    for r in rows:
        where = f"{r['target']} {r['gpu']}"
        if r.get("error"):
            lines.append(f"{r['kernel']:<{name}}{where:<12}  does not compile: {r['error']}")
            continue
        warps = f"{r['active_warps']}/{r['max_warps']}"
        lines.append(f"{r['kernel']:<{name}}{where:<12}{r['threads_per_block']:>6}"
                     f"{r['regs_per_thread']:>6}{r['smem_per_block']:>10,}{r['spill_bytes']:>10}"
                     f"{r['fp64_instructions']:>6}{warps:>9}{r['occupancy_pct']:>10.1f}%  "
                     f"{r['limiter']}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """``python -m helpers.kernels [--targets sm_75 sm_90 ...] [--before]``: print the
    compiler's table for every kernel and target. Returns 1 if any kernel of :data:`KERNELS`
    does not compile, computes in float64 or spills, else 0."""
    parser = argparse.ArgumentParser(prog="python -m helpers.kernels",
                                      description=__doc__.split("\n\n")[0])
    parser.add_argument("--targets", nargs="+", default=list(compiled.TARGETS),
                        choices=list(compiled.TARGETS), help="GPU architectures (default: all)")
    parser.add_argument("--before", action="store_true",
                        help="also the kernels kept as a 'before' (direct_tiled_kernel_first)")
    args = parser.parse_args(argv)
    try:
        rows = compiled_table(args.targets)
        before = compiled_table(args.targets, BEFORE_KERNELS) if args.before else []
    except compiled.CompilerUnavailable as exc:
        print(exc)
        return 1
    print(format_table(rows + before))
    bad = [r for r in rows if r.get("error") or r["fp64_instructions"] or r["spill_bytes"]]
    for r in bad:
        print(f"problem: {r['kernel']} on {r['target']}: "
              f"{r.get('error') or 'FP64 instructions or spills'}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
