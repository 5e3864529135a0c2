"""Numba's front end for the real compiler (:mod:`helpers.compiler_worker`): a kernel's typing
and lowering to NVVM IR, the larger part of a compilation, done once per kernel and argument
types for every target, in this process and, through :mod:`helpers.compile_cache`, in every
other; then its PTX, with line information, and the LTO-IR Numba links on a GPU, from it.

Runs in the compiler's child process, whose ``numba.cuda`` is the real one.
"""

from __future__ import annotations

import json

from helpers import compile_cache, nvvm_ir

__all__ = ["LIBRARIES", "KeptFrontEnd", "front_end", "ptx_and_code"]

#: Numba's front end's output (an NVVM IR library) for each kernel compiled in this process,
#: by kernel, argument types, line information and lowering class (see :func:`front_end`),
#: kept for the same kernel's jobs on the other targets.
LIBRARIES: dict[tuple, object] = {}


class KeptFrontEnd:
    """A front end's output read back from :mod:`helpers.compile_cache`: the NVVM IR of the
    kernel's modules and Numba's NVVM options, which is all NVVM compiles a kernel from (as
    numba-cuda's ``CUDACodeLibrary.get_asm_strs`` and ``get_ltoir`` do), for any target."""

    def __init__(self, llvm_strs: list[str], nvvm_options: dict) -> None:
        self.llvm_strs = list(llvm_strs)
        self._nvvm_options = dict(nvvm_options)

    def _options(self, cc: tuple[int, int]) -> dict:
        from numba.cuda.cudadrv import nvrtc

        return dict(self._nvvm_options, arch=nvrtc.get_arch_option(*cc))

    def get_asm_strs(self, cc: tuple[int, int]) -> list[str]:
        from numba.cuda.cudadrv import nvvm

        options = self._options(cc)
        if "g" in options:   # with debug information NVVM takes one module at a time
            ptxes = [nvvm.compile_ir(ir, **options) for ir in self.llvm_strs]
        else:
            ptxes = [nvvm.compile_ir(self.llvm_strs, **options)]
        return [ptx.decode().strip("\x00").strip() for ptx in ptxes]

    def get_ltoir(self, cc: tuple[int, int]) -> bytes:
        from numba.cuda.cudadrv import nvvm

        return nvvm.compile_ir(self.llvm_strs, **self._options(cc), **{"gen-lto": None})


def _keep(whose: tuple, library) -> None:
    """Put a front end's NVVM IR and options in the cache on disk, for other processes (the
    other test workers, a notebook's kernel, the next batch): where this numba-cuda keeps its
    options elsewhere, nothing is kept."""
    options = getattr(library, "_nvvm_options", None)
    try:
        answer = {"llvm_strs": list(library.llvm_strs), "nvvm_options": dict(options)}
        json.dumps(answer)
    except (AttributeError, TypeError, ValueError):
        return
    compile_cache.put({"front_end": list(whose)}, answer)


def front_end(key: str, fn, argtypes: tuple, cc: tuple[int, int], launch_bounds,
              lineinfo: bool):
    """The kernel's NVVM IR library from Numba's front end (typing, lowering), which NVVM then
    compiles for any target; None where this numba-cuda lacks the function its ``compile``
    uses for that (``_compile_pyfunc_with_fixup``).

    The front end costs several times each NVVM compilation after it, and a kernel is compiled
    for two to four targets, often by several processes (a notebook, the test workers): it runs
    once per kernel and argument types, and its output, the NVVM IR and options, is kept in
    :mod:`helpers.compile_cache` for the others (:class:`KeptFrontEnd`; like every entry, its
    key holds the fingerprint of the compiler and of the parts of helpers the kernel can depend
    on). Its output does not depend on the target, except where Numba's lowering picks
    instructions older GPUs lack (float64 atomic add before compute capability 6.0,
    ``tanh.approx`` before 7.5): every target here is 7.5 or newer, and the key keeps older
    ones apart should one be added."""
    from numba.core.compiler_lock import global_compiler_lock
    from numba.cuda import compiler

    run = getattr(compiler, "_compile_pyfunc_with_fixup", None)
    if run is None:
        return None
    whose = (key, lineinfo, cc >= (7, 5), cc >= (6, 0))
    if whose not in LIBRARIES:
        keeps = _nvvm_compiles_ir()
        kept = compile_cache.get({"front_end": list(whose)}) if keeps else None
        if kept is not None:
            LIBRARIES[whose] = KeptFrontEnd(kept["llvm_strs"], kept["nvvm_options"])
        else:
            with global_compiler_lock:
                LIBRARIES[whose], _ = run(fn, argtypes, lineinfo=lineinfo, device=False,
                                           cc=cc, abi="numba", launch_bounds=launch_bounds)
            if keeps:
                _keep(whose, LIBRARIES[whose])
    return LIBRARIES[whose]


def _nvvm_compiles_ir() -> bool:
    """Whether this numba-cuda has the two functions :class:`KeptFrontEnd` compiles with
    (elsewhere no front end is kept or read: each process runs its own)."""
    from numba.cuda.cudadrv import nvrtc, nvvm

    return hasattr(nvrtc, "get_arch_option") and hasattr(nvvm, "compile_ir")


def ptx_and_code(key: str, fn, argtypes: tuple, cc: tuple[int, int], launch_bounds,
                 lto: bool) -> tuple[str, bytes]:
    """The kernel's PTX with line information (which source line each instruction comes from),
    and what nvJitLink is given to find its resources as Numba gets them on a GPU: with
    nvJitLink, Numba compiles kernels without line information to LTO-IR and links them with
    link-time optimisation (``lto``), which allocates registers differently from PTX (and line
    information can change that allocation too), else that PTX. The LTO-IR comes from the same
    lowering with its line information taken out (:mod:`helpers.nvvm_ir`)."""
    from numba.core.compiler_lock import global_compiler_lock
    from numba.cuda import compiler

    with_lines = front_end(key, fn, argtypes, cc, launch_bounds, lineinfo=True)
    if with_lines is None:  # another numba-cuda: its public compile, one front end each
        ptx, _ = compiler.compile(fn, argtypes, cc=cc, device=False, abi="numba",
                                  output="ptx", lineinfo=True, launch_bounds=launch_bounds)
        if not lto:
            return ptx, ptx.encode()
        code, _ = compiler.compile(fn, argtypes, cc=cc, device=False, abi="numba",
                                   output="ltoir", launch_bounds=launch_bounds)
        return ptx, bytes(code)
    with global_compiler_lock:
        (ptx,) = with_lines.get_asm_strs(cc=cc)
        if not lto:
            return ptx, ptx.encode()
        ltoir = _ltoir_without_lines(with_lines, cc)
        if ltoir is None:  # another numba-cuda: the front end again, without line information
            plain = front_end(key, fn, argtypes, cc, launch_bounds, lineinfo=False)
            ltoir = plain.get_ltoir(cc=cc)
        return ptx, bytes(ltoir)


def _ltoir_without_lines(library, cc: tuple[int, int]) -> bytes | None:
    """The LTO-IR Numba builds on a GPU (without line information), from the library lowered
    with it (:func:`helpers.nvvm_ir.without_debug_info`), so that a kernel's front end runs
    once; None where this numba-cuda keeps its NVVM options or the architecture's name
    elsewhere."""
    from numba.cuda.cudadrv import nvrtc, nvvm

    options = getattr(library, "_nvvm_options", None)
    arch = getattr(nvrtc, "get_arch_option", None)
    if options is None or arch is None or not hasattr(nvvm, "compile_ir"):
        return None
    options = dict(options, arch=arch(*cc))
    options["gen-lto"] = None
    return nvvm.compile_ir([nvvm_ir.without_debug_info(ir) for ir in library.llvm_strs],
                           **options)
