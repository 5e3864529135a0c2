"""The real compiler's answers kept on disk, so that a kernel compiled once is not compiled again
by another process (a notebook, a test worker, the next run).

:func:`get` and :func:`put` read and write one answer of :mod:`helpers.compiler_worker` (a JSON
dict) under a key made from the job's description and :func:`fingerprint`: the Python version, the
versions of the compiler's packages and numpy, and the bytes of the modules of :mod:`helpers` the
answer can depend on (for a kernel of the workbook, those :func:`scope` names; for one from a
notebook or lab, all of them), so a change to those, the compiler or numpy misses. The folder is
``$WORKBOOK_COMPILE_CACHE``, else ``$XDG_CACHE_HOME/gpu-cnn-workbook/compiled`` (``~/.cache/...``);
``WORKBOOK_COMPILE_CACHE=off`` turns it off. Entries are written whole (a temporary file, then
renamed), so concurrent processes never read half an entry; an unreadable entry is a miss. A
process about to compile claims its jobs (:func:`claim`, a lock file per job), so that another
process needing the same kernel at the same time waits for that answer (:func:`wait`) instead of
compiling it too; :func:`lock` does the same for a Numba CPU function's first compilation.
"""

from __future__ import annotations

import ast
import contextlib
import functools
import hashlib
import json
import os
import pathlib
import tempfile
import time

try:
    import fcntl
except ImportError:   # Windows: no claims; each process compiles what it does not find
    fcntl = None

__all__ = ["ENV", "MAX_ENTRIES", "WAIT_S", "ALWAYS", "ROOT", "folder", "scope", "fingerprint", "key",
           "get", "put", "claim", "wait", "lock"]

#: The environment variable that moves the cache (a folder) or turns it off (``off``).
ENV = "WORKBOOK_COMPILE_CACHE"

#: Entries kept; beyond it the oldest are removed when one is written.
MAX_ENTRIES = 2000

#: Seconds a process waits for another one compiling the same job before compiling it itself.
WAIT_S = 900.0

#: What the answers depend on besides Python and helpers: the compiler, and numpy, through which
#: Numba types arrays and numpy's functions (numpy 2.5 changed what numba-cuda's typing finds).
_PACKAGES = ("numba", "numba-cuda", "llvmlite", "cuda-bindings", "nvidia-nvjitlink",
             "nvidia-cuda-nvcc", "nvidia-nvvm", "numpy")


def folder() -> pathlib.Path | None:
    """The cache's folder, or None when ``WORKBOOK_COMPILE_CACHE=off``."""
    where = os.environ.get(ENV, "")
    if where.lower() in ("off", "0", "no", "false"):
        return None
    if where:
        return pathlib.Path(where).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return pathlib.Path(base) / "gpu-cnn-workbook" / "compiled"


#: The parts of :mod:`helpers` every kernel's answer depends on: the package's ``__init__``, the
#: device layer (the simulator or the GPU, and what it changes in Numba) and the compiler's side
#: (it rebuilds the kernel, lowers, compiles and reads the result).
ALWAYS = ("helpers", "helpers.device", "helpers.compile_cache", "helpers.compiled",
          "helpers.compiler_front_end", "helpers.compiler_process", "helpers.compiler_worker",
          "helpers.deferred_import", "helpers.nvvm_ir")

#: The folder of :mod:`helpers`, which :func:`scope`'s paths are relative to.
ROOT = pathlib.Path(__file__).resolve().parent


def _file(module: str) -> pathlib.Path | None:
    """The file of a module of :mod:`helpers` (a package's ``__init__.py``), or None."""
    parts = module.split(".")[1:]
    for path in (ROOT.joinpath(*parts, "__init__.py"), ROOT.joinpath(*parts).with_suffix(".py")
                 if parts else None):
        if path is not None and path.is_file():
            return path
    return None


@functools.cache
def _imports(module: str) -> frozenset[str]:
    """The modules of :mod:`helpers` that ``module``'s import statements name (anywhere in it,
    relative ones resolved; ``from a import b`` counts ``a.b`` where that is a module)."""
    path = _file(module)
    if path is None:
        return frozenset()
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_bytes())):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[:len(package.split(".")) - node.level + 1]
                base = ".".join(up + ([base] if base else []))
            found.add(base)
            found.update(f"{base}.{a.name}" for a in node.names)
    return frozenset(m for m in found if m.split(".")[0] == "helpers" and _file(m) is not None)


@functools.cache
def scope(module: str) -> tuple[str, ...]:
    """The files of :mod:`helpers` (paths relative to it, with ``/``) that the compiler's answer for a kernel
    defined in ``module`` can depend on: every module of its part of the package (all of
    ``helpers.conv`` for ``helpers.conv.direct.forward``; the module alone for a top-level one),
    :data:`ALWAYS`, and whatever these import of :mod:`helpers`, followed to the end, parent
    packages included. An edit anywhere else (an experiment, a figure, a lab's checker) keeps
    the answer.

    Raises:
        ValueError: ``module`` is not a module of :mod:`helpers`.
    """
    if module.split(".")[0] != "helpers" or _file(module) is None:
        raise ValueError(f"module must be a module of helpers, got {module!r}")
    part = ".".join(module.split(".")[:2])
    todo = [*ALWAYS, part]
    for whole in ("helpers.device", part):
        if _file(whole).name == "__init__.py":   # a package below helpers: all of it
            todo += [".".join(("helpers", *p.relative_to(ROOT).with_suffix("").parts))
                     .removesuffix(".__init__") for p in _file(whole).parent.rglob("*.py")]
    seen: set[str] = set()
    while todo:
        name = todo.pop()
        if name in seen or _file(name) is None:
            continue
        seen.add(name)
        parts = name.split(".")
        todo += [".".join(parts[:i]) for i in range(1, len(parts))]   # parent packages run first
        todo += _imports(name)
    return tuple(sorted(_file(m).relative_to(ROOT).as_posix() for m in seen))


@functools.cache
def fingerprint(module: str | None = None) -> str:
    """A hash of the Python version (Numba compiles its bytecode), the versions of the compiler's
    packages and numpy, and the ``.py`` files of :mod:`helpers` an answer was computed with:
    for a kernel defined in ``module`` those of :func:`scope`, else (None, or not a module of
    :mod:`helpers`: a notebook's or a lab's kernel) every one."""
    import sys
    from importlib import metadata

    h = hashlib.sha256(f"python {sys.version_info[0]}.{sys.version_info[1]}".encode())
    try:
        files = scope(module) if module is not None else None
    except ValueError:
        files = None
    if files is None:
        files = sorted(p.relative_to(ROOT).as_posix() for p in ROOT.rglob("*.py"))
    for name in files:
        h.update(name.encode())
        h.update(_source(name))
    for name in _PACKAGES:
        try:
            h.update(f"{name}={metadata.version(name)}".encode())
        except metadata.PackageNotFoundError:
            h.update(f"{name}=none".encode())
    return h.hexdigest()


def _source(name: str) -> bytes:
    """The bytes of the file ``name`` of :mod:`helpers` (a path relative to it)."""
    return (ROOT / name).read_bytes()


def _module_of(job: dict) -> str | None:
    """The module that defines a job's kernel, for a kernel of the workbook (a compile job, or a
    front end, whose first item is the JSON of the kernel's description and argument types)."""
    kernel = job.get("kernel")
    if kernel is None and isinstance(job.get("front_end"), list) and job["front_end"]:
        try:
            kernel = json.loads(job["front_end"][0])[0]
        except (TypeError, ValueError, IndexError, KeyError):
            return None
    module = kernel.get("module") if isinstance(kernel, dict) else None
    return module if isinstance(module, str) else None


def key(job: dict) -> str:
    """The cache key of one job's JSON description (kernel, argument types, target, SASS), with
    the :func:`fingerprint` of what its answer depends on."""
    text = json.dumps(job, sort_keys=True)
    return hashlib.sha256((fingerprint(_module_of(job)) + text).encode()).hexdigest()


def get(job: dict) -> dict | None:
    """The answer kept for ``job``, or None (no cache, no entry, or an unreadable one)."""
    where = folder()
    if where is None:
        return None
    try:
        return json.loads((where / f"{key(job)}.json").read_text())
    except (OSError, ValueError):
        return None


def put(job: dict, answer: dict) -> None:
    """Keep ``answer`` for ``job`` (silently nothing where the folder cannot be written)."""
    where = folder()
    if where is None:
        return
    try:
        where.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=where, suffix=".part")
        with os.fdopen(fd, "w") as fh:
            json.dump(answer, fh)
        os.replace(tmp, where / f"{key(job)}.json")
        entries = sorted(where.glob("*.json"), key=lambda p: p.stat().st_mtime)
        for old in entries[:max(0, len(entries) - MAX_ENTRIES)]:
            old.unlink(missing_ok=True)
            old.with_suffix(".lock").unlink(missing_ok=True)
    except OSError:
        return


@contextlib.contextmanager
def claim(jobs: list[dict]):
    """Claim the jobs that no other process is compiling now.

    Yields ``(mine, theirs)``: the jobs this process should compile (their claims held until
    the ``with`` block ends, which is after their answers are :func:`put`), and those another
    process holds (:func:`wait` for them after the block: a process that waits holds nothing,
    so two processes never wait for each other). Without a cache folder, or without file locks
    (Windows), or where the folder cannot be written, every job is ``mine``.
    """
    where = folder()
    held: list = []
    mine, theirs = [], []
    try:
        if where is None or fcntl is None:
            raise OSError("no claims here")
        where.mkdir(parents=True, exist_ok=True)
        for job in jobs:
            fh = open(where / f"{key(job)}.lock", "a")   # noqa: SIM115 (held past the loop)
            try:
                fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                fh.close()
                theirs.append(job)
                continue
            held.append(fh)
            mine.append(job)
    except OSError:
        for fh in held:
            fh.close()
        held, mine, theirs = [], list(jobs), []
    try:
        yield mine, theirs
    finally:
        for fh in held:
            fh.close()   # closing the file releases its lock


def wait(job: dict, timeout_s: float | None = None) -> dict | None:
    """``job``'s answer once no process holds its claim (:func:`claim`): as :func:`get`, after
    waiting at most ``timeout_s`` seconds (default :data:`WAIT_S`); None if there is still
    none (the other process failed, or took too long: then compile it here)."""
    where = folder()
    if where is None or fcntl is None:
        return get(job)
    try:
        with open(where / f"{key(job)}.lock", "a") as fh:
            _flock(fh, fcntl.LOCK_SH, timeout_s)
    except OSError:
        pass
    return get(job)


def _flock(fh, mode: int, timeout_s: float | None) -> bool:
    """Take the file lock ``mode`` (shared or exclusive) on ``fh``, trying every 0.1 s for at
    most ``timeout_s`` seconds (default :data:`WAIT_S`); whether it was taken."""
    deadline = time.monotonic() + (WAIT_S if timeout_s is None else timeout_s)
    while True:
        try:
            fcntl.flock(fh, mode | fcntl.LOCK_NB)
            return True
        except OSError:
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.1)


@contextlib.contextmanager
def lock(name: str, timeout_s: float | None = None):
    """Hold the lock ``name`` (a file in the cache's folder) for the ``with`` block, shared by
    every process that uses the same folder: for work that one process should do while the
    others wait and then reuse it, such as a Numba function's first compilation, which Numba
    keeps in its own cache on disk (:mod:`helpers.conv.direct.cpu`).

    Args:
        name: the lock's name (letters, digits, ``-``, ``_`` and ``.``).
        timeout_s: seconds to wait for another holder (default :data:`WAIT_S`); after that,
            and where there is no cache folder, no file locks (Windows) or no writable folder,
            the block runs without the lock.

    Raises:
        ValueError: ``name`` is empty or holds another character (before any file is touched).
    """
    if not name or not all(ch.isalnum() or ch in "-_." for ch in name):
        raise ValueError(f"name must be letters, digits, '-', '_' or '.', got {name!r}")
    where = folder()
    fh = None
    if where is not None and fcntl is not None:
        try:
            where.mkdir(parents=True, exist_ok=True)
            fh = open(where / f"{name}.lock", "a")   # noqa: SIM115 (held for the block)
            if not _flock(fh, fcntl.LOCK_EX, timeout_s):
                raise OSError("held by another process past the timeout")
        except OSError:
            if fh is not None:
                fh.close()
            fh = None
    try:
        yield
    finally:
        if fh is not None:
            fh.close()   # closing the file releases its lock
