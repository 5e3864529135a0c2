"""Packages whose import is deferred until one of their attributes is first read: for the
compiler's child process (:mod:`helpers.compiler_worker`), which imports the workbook's kernel
modules for their ``@cuda.jit`` kernels only. Those modules import torch for their host code,
which no compilation reads: deferring it takes a child's start and two compilations from about
4.9 to 2.5 CPU-seconds.

:func:`defer` makes ``import torch`` (and ``import torch.nn.functional as F``) bind a stand-in
module. The first attribute read from any stand-in (``torch.float32``, ``torch.Tensor``)
imports the real packages, and every stand-in then reads through to its real module, so the
only thing that changes is when torch loads. The standard library's ``importlib.util.
LazyLoader`` cannot be used here: a second ``import torch`` reads the module's ``__spec__``,
which makes LazyLoader load it, and it does not defer submodules.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import threading
import types

__all__ = ["defer", "loaded"]

_LOCK = threading.RLock()


class _StandIn(types.ModuleType):
    """A deferred module: its first unknown attribute imports the real one (``_real``)."""

    def __getattr__(self, name: str):
        with _LOCK:
            real = self.__dict__.get("_real")
            if real is None:
                _release()
                real = importlib.import_module(self.__name__)
                self.__dict__["_real"] = real
        return getattr(real, name)


class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Answers the deferred packages and their submodules with stand-ins."""

    def __init__(self, roots: frozenset[str]) -> None:
        self.roots = roots

    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] not in self.roots:
            return None
        return importlib.machinery.ModuleSpec(name, self, is_package=True)

    def create_module(self, spec):
        module = _StandIn(spec.name)
        module.__path__ = []   # read by the import system for submodules: not a first use
        return module

    def exec_module(self, module) -> None:
        pass


def _release() -> None:
    """Stop deferring: remove the finder and the stand-ins from ``sys.modules``, so that the
    next import of any of them loads the real package."""
    sys.meta_path[:] = [f for f in sys.meta_path if not isinstance(f, _Finder)]
    for name in [n for n, m in sys.modules.items() if isinstance(m, _StandIn)]:
        del sys.modules[name]


def defer(*packages: str) -> None:
    """Defer importing ``packages`` (top-level names, such as ``"torch"``) in this process until
    an attribute of one of them is first read. Already imported packages stay as they are.

    Raises:
        ValueError: a name that is not a top-level package name.
    """
    for name in packages:
        if not name.isidentifier():
            raise ValueError(f"packages must be top-level package names, got {name!r}")
    roots = frozenset(p for p in packages if p not in sys.modules)
    if roots:
        with _LOCK:
            sys.meta_path.insert(0, _Finder(roots))


def loaded(package: str) -> bool:
    """Whether ``package`` has really been imported in this process (not only deferred)."""
    module = sys.modules.get(package)
    return module is not None and not isinstance(module, _StandIn)
