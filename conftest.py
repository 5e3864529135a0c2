"""pytest, for every test path: nbval's kernel start is wrapped by ``tools.run_notebooks``'s
``retry_kernel_start``, so a kernel that does not start (another process took one of its ports
first) is started again instead of failing its whole notebook. Without nbval (a bare GPU
server runs only the GPU tests) there is nothing to wrap. The real compiler's answers are kept
in ``build/compile-cache`` (:mod:`helpers.compile_cache`), shared by the run's test workers and
the notebooks they execute, and kept for the next run; a ``WORKBOOK_COMPILE_CACHE`` already set
wins."""

import os
import pathlib

from tools import run_notebooks

os.environ.setdefault("WORKBOOK_COMPILE_CACHE",
                      str(pathlib.Path(__file__).resolve().parent / "build" / "compile-cache"))

try:
    import nbval.kernel
except ImportError:
    nbval = None

if nbval is not None and not getattr(nbval.kernel.start_new_kernel, "retries_kernel_start",
                                     False):
    nbval.kernel.start_new_kernel = run_notebooks.retry_kernel_start(
        nbval.kernel.start_new_kernel)
