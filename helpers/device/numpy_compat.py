"""numba-cuda 0.30 on numpy 2.5: the one compatibility fix, installed before numba.cuda loads.

numpy 2.5 removed ``np.row_stack``, an alias of ``np.vstack``. numba-cuda 0.30.4 (its newest
release; the project is in maintenance mode, NVIDIA/numba-cuda#902) still registers an overload
for it when ``numba.cuda.np.arrayobj`` is imported, which happens at the first kernel compile, so
every compile fails with ``AttributeError: module 'numpy' has no attribute 'row_stack'``. The
one-line fix was declined upstream (NVIDIA/numba-cuda#907, #916); numba 0.67 fixed its own copy.

:func:`install` lends ``np.row_stack = np.vstack`` only while that one module executes, then
takes it back, so no other code sees the name. Where numpy still has ``row_stack`` (below 2.5)
it does nothing. ``tests/test_numpy_compat.py`` fails the day numba-cuda no longer needs it.
"""

from __future__ import annotations

import importlib.abc
import sys

__all__ = ["MODULE", "needed", "install", "installed"]

#: The module of numba-cuda whose import reads ``np.row_stack``.
MODULE = "numba.cuda.np.arrayobj"


def needed() -> bool:
    """True where the installed numpy has no ``row_stack`` (numpy 2.5 and newer)."""
    import numpy as np

    return not hasattr(np, "row_stack")


class _Loader(importlib.abc.Loader):
    """Runs the wrapped loader with ``np.row_stack`` lent for the duration of the import."""

    def __init__(self, loader):
        self._loader = loader

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module) -> None:
        import numpy as np

        lend = not hasattr(np, "row_stack")
        if lend:
            np.row_stack = np.vstack
        try:
            self._loader.exec_module(module)
        finally:
            if lend and np.__dict__.get("row_stack") is np.vstack:
                del np.row_stack

    def __getattr__(self, name):  # get_source, get_filename, ... of the wrapped loader
        return getattr(self._loader, name)


class _Finder(importlib.abc.MetaPathFinder):
    """Finds :data:`MODULE` through the other finders (numba-cuda's redirect among them) and
    wraps its loader in :class:`_Loader`; every other module is left to them."""

    _busy = False

    def find_spec(self, name, path, target=None):
        if name != MODULE or self._busy:
            return None
        self._busy = True
        try:
            for finder in sys.meta_path:
                find = getattr(finder, "find_spec", None)
                if finder is self or find is None:
                    continue
                spec = find(name, path, target)
                if spec is not None and spec.loader is not None:
                    spec.loader = _Loader(spec.loader)
                    return spec
            return None
        finally:
            self._busy = False


def installed() -> bool:
    """Whether :func:`install` has put its finder on ``sys.meta_path``."""
    return any(isinstance(f, _Finder) for f in sys.meta_path)


def install() -> bool:
    """Install the fix if numpy needs it and numba-cuda's module is not loaded yet.

    Returns True if the finder is (now) on ``sys.meta_path``. Safe to call more than once.
    Where numpy has ``row_stack`` (below 2.5), or :data:`MODULE` was already imported, it
    changes nothing and returns False.
    """
    if installed():
        return True
    if not needed() or MODULE in sys.modules:
        return False
    sys.meta_path.insert(0, _Finder())
    return True
