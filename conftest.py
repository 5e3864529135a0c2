"""pytest, for every test path: nbval's kernel start is wrapped by ``tools.run_notebooks``'s
``retry_kernel_start``, so a kernel that does not start (another process took one of its ports
first) is started again instead of failing its whole notebook. Without nbval (a bare GPU
server runs only the GPU tests) there is nothing to wrap. The real compiler's answers are kept
in ``build/compile-cache`` (:mod:`helpers.compile_cache`), shared by the run's test workers and
the notebooks they execute, and kept for the next run; a ``WORKBOOK_COMPILE_CACHE`` already set
wins. Under pytest-xdist, the files with long tests are handed out first."""

import os
import pathlib

import pytest

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


def _long(item) -> bool:
    """A notebook's cell (nbval), or a test marked slow, notebook or browser."""
    return type(item).__module__.startswith("nbval") or any(
        item.get_closest_marker(name) for name in ("slow", "notebook", "browser"))


def pytest_configure(config) -> None:
    """pytest-xdist's ``--dist loadfile`` hands out files by their number of tests, most
    first (``--loadscope-reorder``), which leaves the files of a few long tests (the compiler's,
    the browser's) for last, and one worker running them after the others are done. Files go
    out in the order :func:`pytest_collection_modifyitems` gives them instead."""
    if hasattr(config.option, "loadscopereorder"):
        config.option.loadscopereorder = False


@pytest.hookimpl(trylast=True)   # after -m and -k have deselected what does not run
def pytest_collection_modifyitems(config, items) -> None:
    """The files that hold a long test (:func:`_long`) first, then the rest: the short files
    fill the workers' last minutes. Each file keeps its tests' order (a notebook its cells')."""
    long_files = {item.nodeid.split("::")[0] for item in items if _long(item)}
    items.sort(key=lambda item: item.nodeid.split("::")[0] not in long_files)
