"""The workbook's importable code: kernels, measurements, widgets and charts.

Importing :mod:`helpers` first decides where CUDA kernels run (see :mod:`helpers.backend`), so
it must happen before ``numba.cuda`` is imported. The compute modules need only NumPy, Numba and
torch; only :mod:`helpers.widgets` and :mod:`helpers.plots` need ipywidgets and plotly.
"""

from . import backend  # noqa: F401  (must run before anything imports numba.cuda)

__all__ = ["backend"]
