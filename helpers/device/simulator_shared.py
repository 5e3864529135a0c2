"""Numba's CUDA simulator: one shared array per block and line, even when threads race for it.

The simulator runs each CUDA thread as a Python thread, and numba-cuda 0.30.4 keeps a block's
``cuda.shared.array`` in a dict by the caller's file and line, filled in two steps: look up,
then, if missing, make an array and store it. A thread switch between the two gives two threads
two arrays; the one whose array is overwritten works on a tile nobody else sees, and a correct
kernel gives wrong values where it wrote. On a quiet machine that hardly ever happens; on a busy
laptop it makes a correct lab kernel fail its check now and then.

:func:`install` (called by :mod:`helpers.device.backend` in simulator mode) replaces that method
by one that stores with a single, atomic ``dict.setdefault``, when the simulator's module loads
or at once if it has. Numba's key, dynamic shared buffer (``shape=0``) and refusal of
``alignment`` stay. ``tests/test_simulator_shared.py`` shows Numba's method giving two arrays.
"""

from __future__ import annotations

import sys

from helpers.device import after_import

__all__ = ["MODULE", "array", "install", "installed"]

#: The simulator's module that defines ``FakeCUDAShared``.
MODULE = "numba.cuda.simulator.kernelapi"


def array(self, shape, dtype, alignment=None):
    """``cuda.shared.array`` in the simulator: the block's array for the calling line, made by
    whichever thread comes first and stored atomically (see the module's text)."""
    if shape == 0 or alignment is not None:   # the dynamic buffer, or Numba's refusal
        return _NUMBA_ARRAY(self, shape, dtype, alignment)
    kernelapi = sys.modules[MODULE]
    if isinstance(dtype, kernelapi.types.Type):
        dtype = kernelapi.numpy_support.as_dtype(dtype)
    caller = sys._getframe(1)
    key = (caller.f_code.co_filename, caller.f_lineno)   # Numba's key: the caller's file, line
    found = self._allocations.get(key)
    if found is None:
        import numpy as np

        found = self._allocations.setdefault(key, np.empty(shape, dtype))
    return found


array.race_free = True
_NUMBA_ARRAY = None


def _patch(module) -> bool:
    global _NUMBA_ARRAY
    shared = getattr(module, "FakeCUDAShared", None)
    method = getattr(shared, "array", None)
    if method is None or getattr(method, "race_free", False):
        return method is not None
    if not all(hasattr(module, name) for name in ("types", "numpy_support")):
        return False   # another simulator than the one this was written for: left alone
    _NUMBA_ARRAY = method
    shared.array = array
    return True


def installed() -> bool:
    """Whether the simulator's shared arrays are (or, once it loads, will be) race-free."""
    module = sys.modules.get(MODULE)
    if module is not None:
        return bool(getattr(getattr(getattr(module, "FakeCUDAShared", None), "array", None),
                            "race_free", False))
    return after_import.pending(MODULE, _patch)


def install() -> bool:
    """Patch the simulator's ``FakeCUDAShared.array`` now if its module is loaded, else when it
    loads. Returns whether it is (or will be) patched; safe to call more than once."""
    return after_import.when_loaded(MODULE, _patch)
