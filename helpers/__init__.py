"""The workbook's importable code, in layers imported downward only (pyproject.toml's
import-linter contract): ``device`` (backend, timing, memory, arrays) -> ``conv``,
``elementwise``, ``occupancy``, ``compiled``, ``kernels`` -> ``paper``, ``results`` ->
``experiments`` -> ``figures`` -> ``widgets`` -> ``checks``, ``notebook``.

Importing :mod:`helpers` first decides where CUDA kernels run (:mod:`helpers.device.backend`),
so it must happen before ``numba.cuda`` is imported. The compute layers need only NumPy, Numba
and torch; only ``figures``, ``widgets`` and ``notebook`` need plotly, ipywidgets or IPython.
"""

from helpers.device import backend  # noqa: F401  (must run before anything imports numba.cuda)

__all__ = ["backend"]
