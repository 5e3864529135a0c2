"""Patch a module of another package as soon as it is loaded, or at once if it has been: how
:mod:`helpers.device` fixes numba-cuda's simulator before anything uses it.

:func:`when_loaded` puts a finder first on ``sys.meta_path`` that finds the module through the
other finders and wraps its loader: the module is executed as usual, then patched.
"""

from __future__ import annotations

import importlib.abc
import sys
from collections.abc import Callable

__all__ = ["pending", "when_loaded"]


class _Loader(importlib.abc.Loader):
    """Runs the wrapped loader, then the patch on the module it made."""

    def __init__(self, loader, patch: Callable) -> None:
        self._loader, self._patch = loader, patch

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module) -> None:
        self._loader.exec_module(module)
        self._patch(module)

    def __getattr__(self, name):  # get_source, get_filename, ... of the wrapped loader
        return getattr(self._loader, name)


class _Finder(importlib.abc.MetaPathFinder):
    """Finds module ``name`` through the other finders and wraps its loader in
    :class:`_Loader`; every other module is left to them."""

    def __init__(self, name: str, patch: Callable) -> None:
        self.name, self.patch, self._busy = name, patch, False

    def find_spec(self, name, path, target=None):
        if name != self.name or self._busy:
            return None
        self._busy = True
        try:
            for finder in sys.meta_path:
                find = getattr(finder, "find_spec", None)
                if finder is self or find is None:
                    continue
                spec = find(name, path, target)
                if spec is not None and spec.loader is not None:
                    spec.loader = _Loader(spec.loader, self.patch)
                    return spec
            return None
        finally:
            self._busy = False


def pending(name: str, patch: Callable) -> bool:
    """Whether ``patch`` waits for module ``name`` to load."""
    return any(isinstance(f, _Finder) and f.name == name and f.patch is patch
               for f in sys.meta_path)


def when_loaded(name: str, patch: Callable[[object], bool]) -> bool:
    """Call ``patch(module)`` on module ``name`` now if it is loaded (returning its answer),
    else right after it loads (returning True); safe to call more than once."""
    module = sys.modules.get(name)
    if module is not None:
        return patch(module)
    if not pending(name, patch):
        sys.meta_path.insert(0, _Finder(name, patch))
    return True
