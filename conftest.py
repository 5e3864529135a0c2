"""pytest, for every test path: nbval's kernel start is wrapped by ``tools.run_notebooks``'s
``retry_kernel_start``, so a kernel that does not start (another process took one of its ports
first) is started again instead of failing its whole notebook. Without nbval (a bare GPU
server runs only the GPU tests) there is nothing to wrap. The real compiler's answers are kept
in ``build/compile-cache`` (:mod:`helpers.compile_cache`), shared by the run's test workers and
the notebooks they execute, and kept for the next run; a ``WORKBOOK_COMPILE_CACHE`` already set
wins. Notebook kernels start forked from a process that has already imported torch, Numba,
plotly and ipykernel (:mod:`tools.kernel_zygote`; ``WORKBOOK_KERNEL_ZYGOTE=0`` starts each
kernel on its own, as a learner's). Under ``--dist loadfile`` the longest files go first."""

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

#: The files that hold a test worker longest (a minute or more each on two busy cores), longest
#: first. Under ``--dist loadfile`` (``make test``) they are handed out first and the rest after
#: them, most tests first (pytest-xdist's own order), so that no long file starts near the end
#: while the other workers run out of work. A file missing here only starts later.
LONGEST_FIRST = (
    "tests/test_gpu_reference.py",
    "notebooks/07_inside_the_gpu.ipynb",
    "tests/test_direct_compiled.py",
    "tests/test_parallel.py",
    "tests/test_browser.py",
    "tests/test_gemm_ladder.py",
    "tests/test_compiled.py",
    "tests/test_synthetic_results.py",
    "tests/test_checks_lab9.py",
)


def _by_file(config) -> bool:
    return config.getoption("dist", "no") == "loadfile"


def pytest_configure(config) -> None:
    if _by_file(config):
        config.option.loadscopereorder = False  # the order below is the order handed out


def pytest_collection_modifyitems(config, items) -> None:
    if not _by_file(config):
        return
    counts: dict[str, int] = {}
    for item in items:
        path = item.nodeid.split("::")[0]
        counts[path] = counts.get(path, 0) + 1
    first = {path: i for i, path in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: (first.get(item.nodeid.split("::")[0], len(first)),
                                 -counts[item.nodeid.split("::")[0]],
                                 item.nodeid.split("::")[0]))
