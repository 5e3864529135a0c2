"""How a kernel reaches the real compiler: described to a child process, rebuilt there, compiled
to PTX by NVVM and assembled by nvJitLink; the assembler's report and the PTX parsed.

The simulator's ``numba.cuda`` has no compiler, so :mod:`helpers.compiled` runs
``python -m helpers.compiler_worker --serve`` with ``NUMBA_ENABLE_CUDASIM=0``, kept between
compilations by :mod:`helpers.compiler_process`, and hands it jobs as JSON on standard input: a
kernel by module and name (the workbook's own) or by source and the globals it uses (a notebook
cell's or a lab's), argument types, a target. Results come back as JSON, one per job. Numba's
front end runs once per kernel for every target and process (:mod:`helpers.compiler_front_end`);
nothing else of the workbook is imported but :mod:`helpers.compile_cache` and the kernels'
modules, and torch only if something reads it (:mod:`helpers.deferred_import`).
"""

from __future__ import annotations

import ast
import dis
import glob
import inspect
import json
import linecache
import os
import re
import subprocess
import sys
import textwrap
import types as pytypes

from helpers import compile_cache, compiler_front_end, deferred_import

# ----------------------------------------------------------------------- parsing the outputs


_SKIP_FP64 = {"ld", "st", "mov", "ret", "cvta", "prmt"}


def instructions(ptx: str):
    """(location, instruction) for each PTX instruction; location ``(file, line)`` from the
    latest ``.loc`` directive, or None."""
    loc = None
    for raw in ptx.splitlines():
        s = raw.strip()
        if s.startswith(".loc ") or s.startswith(".loc\t"):
            parts = s.split()
            loc = (int(parts[1]), int(parts[2]))
            continue
        if not s or s.startswith(("//", ".", "$", "{", "}", ")", "(")):
            continue
        if s.startswith("@"):
            s = s.split(None, 1)[1] if " " in s else s
        yield loc, s


def fp64_instructions(ptx: str, sources: dict[int, list[str]]) -> list[dict]:
    """Every PTX instruction that computes, compares or converts in float64 (loads, stores and
    moves of 64-bit values are not counted), as ``{"ptx", "line", "source"}`` dicts; ``sources``
    maps a ``.file`` index to that file's lines, for the source text."""
    found = []
    for loc, text in instructions(ptx):
        opcode = text.split()[0].rstrip(";")
        parts = opcode.split(".")
        if "f64" in parts[1:] and parts[0] not in _SKIP_FP64:
            line = loc[1] if loc else None
            lines = sources.get(loc[0]) if loc else None
            source = (lines[line - 1].strip() if lines and line and 0 < line <= len(lines)
                      else None)
            found.append({"ptx": text.rstrip(";"), "line": line, "source": source})
    return found


def ptxas_numbers(log: str) -> dict:
    """Registers per thread, barriers, static shared memory, stack frame and spill bytes from
    the assembler's ``-v`` report (0 where the report does not mention one)."""

    def grab(pattern, default=0):
        m = re.search(pattern, log)
        return int(m.group(1)) if m else default

    return {"regs_per_thread": grab(r"[Uu]sed (\d+) registers"),
            "barriers": grab(r"used (\d+) barriers"),
            "smem_per_block": grab(r"(\d+) bytes smem"),
            "stack_bytes": grab(r"(\d+) bytes stack frame"),
            "spill_store_bytes": grab(r"(\d+) bytes spill stores"),
            "spill_load_bytes": grab(r"(\d+) bytes spill loads")}


# ------------------------------------------------------------ describing a kernel to a child


def _global_names(code: pytypes.CodeType) -> set[str]:
    names = set()
    for ins in dis.get_instructions(code):
        if ins.opname in ("LOAD_GLOBAL", "LOAD_NAME"):
            names.add(ins.argval)
    for const in code.co_consts:
        if isinstance(const, pytypes.CodeType):
            names |= _global_names(const)
    return names


def _describe_value(name: str, value, kernel: str) -> dict:
    import numpy as np
    from numba.core import types as nbtypes

    if isinstance(value, pytypes.ModuleType):
        return {"kind": "module", "module": value.__name__}
    if isinstance(value, (bool, int, float, str, type(None))) or (
            isinstance(value, tuple) and all(isinstance(v, (bool, int, float)) for v in value)):
        return {"kind": "value", "repr": repr(value)}
    if isinstance(value, np.generic):
        return {"kind": "numpy_scalar", "dtype": value.dtype.name, "value": value.item()}
    if isinstance(value, type) and issubclass(value, np.generic):
        return {"kind": "numpy_type", "name": value.__name__}
    if isinstance(value, nbtypes.Type):
        return {"kind": "numba_type", "name": str(value)}
    if hasattr(value, "py_func"):  # another kernel or device function
        return {"kind": "device", "ref": describe_kernel(value)}
    module = getattr(value, "__module__", None) or ""
    attr = getattr(value, "__name__", None)
    if attr and module and not module.startswith("__"):
        if module.startswith("numba.cuda.simulator"):
            module = "numba.cuda"
        return {"kind": "import", "module": module, "name": attr}
    raise ValueError(f"cannot compile {kernel}: it uses the global {name!r} "
                     f"({type(value).__name__}), which cannot be handed to the compiler; "
                     f"use a number, a module or a numba type there")


def describe_kernel(kernel) -> dict:
    """A JSON description of a kernel that a child process can rebuild: its module and name
    when it can be imported from there, else its source and the globals it uses."""
    fn = getattr(kernel, "py_func", kernel)
    if not isinstance(fn, pytypes.FunctionType):
        raise ValueError(f"kernel must be a @cuda.jit kernel or a Python function, got "
                         f"{type(kernel).__name__}")
    mod = sys.modules.get(fn.__module__ or "")
    if ((fn.__module__ or "").startswith(f"{__package__}.")
            and getattr(getattr(mod, fn.__name__, None), "py_func", None) is fn):
        return {"module": fn.__module__, "name": fn.__name__}  # the workbook's own kernels
    if fn.__closure__:
        raise ValueError(f"cannot compile {fn.__name__}: it uses variables of an enclosing "
                         f"function; define it at the top level of a cell or module")
    try:
        lines, first = inspect.getsourcelines(fn)
    except (OSError, TypeError) as exc:
        raise ValueError(f"cannot compile {fn.__name__}: its source is not available "
                         f"({exc})") from None
    source = textwrap.dedent("".join(lines))
    tree = ast.parse(source)
    func = tree.body[0]
    def_line = func.lineno  # the 'def' line, after any decorators
    src_lines = source.splitlines()
    body = [""] * (def_line - 1) + src_lines[def_line - 1:]  # decorators blanked, lines kept
    globals_ = {}
    for name in sorted(_global_names(fn.__code__)):
        if name in fn.__globals__:
            globals_[name] = _describe_value(name, fn.__globals__[name], fn.__name__)
    return {"name": fn.__name__, "source": "\n".join(body) + "\n", "first_line": first,
            "filename": fn.__code__.co_filename, "globals": globals_}


# ----------------------------------------------------------------------- the compiler itself


def _rebuild_value(spec: dict):
    import importlib

    import numpy as np
    from numba import cuda
    from numba.core import types as nbtypes

    kind = spec["kind"]
    if kind == "module":
        return importlib.import_module(spec["module"])
    if kind == "value":
        return ast.literal_eval(spec["repr"])
    if kind == "numpy_scalar":
        return np.dtype(spec["dtype"]).type(spec["value"])
    if kind == "numpy_type":
        return getattr(np, spec["name"])
    if kind == "numba_type":
        return getattr(nbtypes, spec["name"])
    if kind == "device":
        return cuda.jit(device=True)(_rebuild_kernel(spec["ref"])[0])
    return getattr(importlib.import_module(spec["module"]), spec["name"])


def _rebuild_kernel(ref: dict):
    """The Python function a :func:`describe_kernel` description stands for, and the lines of
    the source it was compiled from (None for a module's kernel: linecache has its file)."""
    import importlib

    if "module" in ref:
        fn = getattr(importlib.import_module(ref["module"]), ref["name"]).py_func
        return fn, None
    namespace = {"__name__": f"_compiled_{ref['name']}", "__builtins__": __builtins__}
    for name, spec in ref["globals"].items():
        namespace[name] = _rebuild_value(spec)
    padded = "\n" * (ref["first_line"] - 1) + ref["source"]
    exec(compile(padded, ref["filename"], "exec"), namespace)  # noqa: S102 - the kernel's own code
    return namespace[ref["name"]], padded.splitlines()


def _compiler_versions(ptx: str) -> str:
    from importlib import metadata

    from cuda.bindings import nvjitlink

    m = re.search(r"release ([\d.]+), V([\d.]+)", ptx)
    isa = re.search(r"^\.version ([\d.]+)", ptx, re.M)
    major, minor = nvjitlink.version()
    try:
        numba_cuda = metadata.version("numba-cuda")
    except metadata.PackageNotFoundError:  # pragma: no cover - numba-cuda is a dependency
        numba_cuda = "unknown"
    return (f"numba-cuda {numba_cuda}, NVVM of CUDA {m.group(2) if m else 'unknown'} "
            f"(PTX ISA {isa.group(1) if isa else '?'}), nvJitLink {major}.{minor}")


def lto_available() -> bool:
    """Whether Numba links kernels with link-time optimisation on a GPU here: it does when
    nvJitLink 12.3 or newer is installed (``numba.cuda.decorators.jit``, ``lto=None``)."""
    try:
        from cuda.bindings import nvjitlink

        return nvjitlink.version() >= (12, 3)
    except Exception:  # noqa: BLE001 - no usable nvJitLink
        return False


def _link(code: bytes, lto: bool, arch: str, want_sass: bool) -> tuple[str, str | None]:
    """Assemble PTX (``lto=False``) or link LTO-IR with ``-lto`` for ``arch``: (log, SASS)."""
    from cuda.bindings import nvjitlink

    options = [f"-arch={arch}", "-Xptxas=-v", "-verbose"] + (["-lto"] if lto else [])
    handle = nvjitlink.create(len(options), options)
    try:
        kind = nvjitlink.InputType.LTOIR if lto else nvjitlink.InputType.PTX
        nvjitlink.add_data(handle, kind, code, len(code), "kernel")
        try:
            nvjitlink.complete(handle)
        finally:
            size = nvjitlink.get_info_log_size(handle)
            buf = bytearray(size)
            nvjitlink.get_info_log(handle, buf)
            log = buf.decode(errors="replace").rstrip("\x00")
        sass = None
        if want_sass:
            cubin = bytearray(nvjitlink.get_linked_cubin_size(handle))
            nvjitlink.get_linked_cubin(handle, cubin)
            sass = _disassemble(bytes(cubin))
        return log, sass
    finally:
        nvjitlink.destroy(handle)


def _disassemble(cubin: bytes) -> str | None:
    """SASS of a cubin by ``cuobjdump --dump-sass`` (which calls ``nvdisasm``) where both are
    installed (on PATH, or from the PyPI packages nvidia-cuda-cuobjdump and
    nvidia-cuda-nvdisasm), else None."""
    import shutil
    import tempfile

    tool = shutil.which("cuobjdump")
    if tool is None:  # the PyPI package nvidia-cuda-cuobjdump puts it in nvidia/*/bin
        try:
            import nvidia

            found = [p for base in nvidia.__path__
                     for p in sorted(glob.glob(os.path.join(base, "*", "bin", "cuobjdump")))]
            tool = found[0] if found else None
        except ImportError:
            tool = None
    if tool is None:
        return None
    env = dict(os.environ, PATH=os.pathsep.join([os.path.dirname(tool),
                                                   os.environ.get("PATH", "")]))
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        out = subprocess.run([tool, "--dump-sass", f.name], capture_output=True, text=True,
                             env=env)
    return out.stdout if out.returncode == 0 else None


def _error_location(text: str, filename: str | None, lines: list[str] | None) -> int | None:
    """The kernel line an error points at: from the message where Numba gives one, else, for a
    shared or local array of unknown size, the first such array whose size is not a literal,
    a name or a tuple of those."""
    found = [int(m.group(2)) for m in re.finditer(r'File "([^"]+)", line (\d+)', text)
             if filename is None or m.group(1) == filename]
    if found:
        return found[-1]
    if lines and ("shared.array" in text or "local.array" in text):
        arrays = [(i, m.group(1)) for i, s in enumerate(lines, 1)
                  for m in [re.search(r"(?:shared|local)\.array\(\s*(.+?),", s)] if m]
        for i, size in arrays:
            try:
                node = ast.parse(size.strip(), mode="eval").body
            except SyntaxError:
                return i
            parts = node.elts if isinstance(node, ast.Tuple) else [node]
            if not all(isinstance(p, (ast.Constant, ast.Name)) for p in parts):
                return i
        return arrays[0][0] if arrays else None
    return None


def _hint_for(text: str) -> str | None:
    if "shared.array" in text or "local.array" in text:
        return ("the size of cuda.shared.array (and cuda.local.array) must be known when the "
                "kernel is compiled: a literal such as (16, 16), or a global constant such as "
                "TILE; not an argument, x.shape, or an expression computed in the kernel "
                "(put a product such as TILE * TILE in a global constant of its own).")
    if "Untyped global name" in text:
        return "the kernel uses a name that is not defined where the kernel was defined."
    return None


def _launch_bounds(ref: dict):
    """The ``launch_bounds`` a workbook kernel was declared with (``@cuda.jit(launch_bounds=
    ...)``: they change its register budget), or None."""
    if "module" not in ref:
        return None
    import importlib

    disp = getattr(importlib.import_module(ref["module"]), ref["name"])
    return getattr(disp, "targetoptions", {}).get("launch_bounds")


def _compile_one(job: dict) -> dict:
    from numba.core import types as nbtypes

    ref, arch = job["kernel"], job["target"]
    name, padded = ref["name"], None
    try:
        fn, padded = _rebuild_kernel(ref)
        namespace = {k: getattr(nbtypes, k) for k in dir(nbtypes) if not k.startswith("_")}
        argtypes = tuple(eval(t, {"__builtins__": {}}, namespace)  # noqa: S307 - type names
                         for t in job["argtypes"])
        cc = (int(arch[3:-1]), int(arch[-1]))  # "sm_90" -> (9, 0)
        lto = lto_available()
        key = json.dumps([ref, job["argtypes"]], sort_keys=True)
        ptx, code = compiler_front_end.ptx_and_code(key, fn, argtypes, cc,
                                                    _launch_bounds(ref), lto)
    except Exception as exc:  # noqa: BLE001 - the compiler's verdict, reported
        text = re.sub(r" at 0x[0-9a-f]+", "", f"{type(exc).__name__}: {exc}")
        filename = ref.get("filename")
        lines = padded if padded is not None else (linecache.getlines(filename or "") or None)
        line = _error_location(text, filename, lines)
        source = lines[line - 1].strip() if line and lines and line <= len(lines) else None
        first = [s.strip() for s in text.splitlines() if s.strip()][:2]
        return {"error": {"kind": "compile", "kernel": name, "message": " ".join(first),
                          "line": line, "source": source, "hint": _hint_for(text)}}
    files = {int(m.group(1)): m.group(2) for m in re.finditer(r'^\s*\.file\s+(\d+)\s+"([^"]+)"',
                                                             ptx, re.M)}
    sources = {}
    for index, path in files.items():
        if padded is not None and path == ref.get("filename"):
            sources[index] = padded
        else:
            sources[index] = linecache.getlines(path)
    log, sass = _link(code, lto, arch, job.get("sass", False))
    compiler = _compiler_versions(ptx) + (" with LTO" if lto else "")
    return {"ok": {"name": name, "target": arch, "argtypes": list(job["argtypes"]),
                   **ptxas_numbers(log),
                   "fp64": fp64_instructions(ptx, sources),
                   "compiler": compiler, "ptx": ptx, "sass": sass, "log": log}}


def run_jobs(jobs: list[dict]) -> dict:
    """Compile every job in this process (whose numba.cuda must be the real one):
    ``{"unavailable": None or why not, "results": [one dict per job]}``."""
    try:
        from cuda.bindings import nvjitlink
        from numba.cuda import compile_ptx

        if compile_ptx is None:
            raise ImportError("numba.cuda here is the simulator")
        nvjitlink.version()
    except Exception as exc:  # noqa: BLE001 - any failure to load the compiler
        return {"unavailable": f"{type(exc).__name__}: {exc}", "results": []}
    return {"unavailable": None, "results": [_compile_one(job) for job in jobs]}


def serve() -> None:
    """Answer batches of jobs until standard input closes (:mod:`helpers.compiler_process`
    keeps this process between compilations): each request a line of JSON, ``{"path": the
    caller's sys.path, "cache": the caller's compile cache folder or "off", "jobs": [...]}``,
    each answer a line of :func:`run_jobs`'s JSON. What
    anything else prints, Python or the compiler's libraries, goes to standard error."""
    answers = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    for line in sys.stdin:
        request = json.loads(line)
        sys.path += [p for p in request.get("path", []) if p not in sys.path]
        if "cache" in request:   # the caller's compile cache, for the front ends
            os.environ[compile_cache.ENV] = request["cache"]
        compiler_front_end.LIBRARIES.clear()   # a batch's front ends; memory stays one batch's
        answers.write(json.dumps(run_jobs(request["jobs"])) + "\n")
        answers.flush()


def end_now() -> None:
    """Leave the process at once, as :mod:`multiprocessing`'s workers do: its standard streams
    flushed, nothing torn down. Python's own teardown of the compiler's libraries (and of
    torch, where something read it) costs up to two seconds of CPU, for nothing: the answers
    are sent and the compile cache's entries are whole files already."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(0)


if __name__ == "__main__":
    # The kernels' modules import torch for their host code, which no compilation reads.
    deferred_import.defer("torch")
    if sys.argv[1:] == ["--serve"]:
        serve()
        end_now()
    else:   # one batch: all of standard input, one answer
        print(json.dumps(run_jobs(json.loads(sys.stdin.read() or "[]"))))
