"""pytest, for every test path: nbval's kernel start is wrapped by ``tools.run_notebooks``'s
``retry_kernel_start``, so a kernel that does not start (another process took one of its ports
first) is started again instead of failing its whole notebook. Without nbval (a bare GPU
server runs only the GPU tests) there is nothing to wrap. The real compiler's answers are kept
in ``build/compile-cache`` (:mod:`helpers.compile_cache`), shared by the run's test workers and
the notebooks they execute, and kept for the next run; a ``WORKBOOK_COMPILE_CACHE`` already set
wins. Notebook kernels start forked from a process that has already imported torch, Numba,
plotly and ipykernel (:mod:`tools.kernel_zygote`; ``WORKBOOK_KERNEL_ZYGOTE=0`` starts each
kernel on its own, as a learner's)."""

import os
import pathlib

from tools import kernel_zygote, run_notebooks

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

try:
    from jupyter_client.manager import KernelManager
except ImportError:
    KernelManager = None

if KernelManager is not None and not getattr(KernelManager.format_kernel_cmd, "zygote", False):
    _format_kernel_cmd = KernelManager.format_kernel_cmd

    def _through_zygote(self, extra_arguments=None):
        return kernel_zygote.command(_format_kernel_cmd(self, extra_arguments))

    _through_zygote.zygote = True
    KernelManager.format_kernel_cmd = _through_zygote
