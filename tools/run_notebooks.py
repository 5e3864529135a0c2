"""Execute notebooks headless, in order, into a build folder: ``make run``.

For each notebook: run it top to bottom with nbclient (in this interpreter's kernel), write
the executed ``.ipynb`` and an HTML rendering to the output folder, and print one line:
name, seconds, ok or failed (with the error's last line); then a total. What the kernel process
itself prints (its log, not the cells' outputs) is kept, and shown only if the kernel failed.
A kernel that does not start (another process took one of its ports first) is started again.
Exits non-zero if any failed.

Usage: ``python -m tools.run_notebooks [NOTEBOOK ...] [--out build | --in-place] [--timeout 600]``
(default: every ``notebooks/[0-9]*.ipynb`` in name order).
"""

from __future__ import annotations

import argparse
import functools
import pathlib
import sys
import tempfile
import time

__all__ = ["execute", "retry_kernel_start", "run_notebook", "main"]

ROOT = pathlib.Path(__file__).resolve().parent.parent
#: How many of the kernel process's last output lines are shown under a failed notebook.
KERNEL_LOG_LINES = 20
#: How many times a kernel is started before the notebook is reported failed. A start fails
#: when another process binds one of the ports chosen for the kernel before the kernel does;
#: a kernel that dies after it started is not started again.
KERNEL_START_TRIES = 3

#: Seconds to wait, after a cell's reply, for the rest of its output (nbclient waits 4 s, then
#: logs "Timeout waiting for IOPub output" on stderr and keeps the cell without that output,
#: which a machine busy with other work can take longer than that to deliver).
IOPUB_TIMEOUT_S = 30


def execute(nb, cwd: pathlib.Path, timeout: int = 600, allow_errors: bool = False,
            name: str = "notebook", **start_kwargs) -> None:
    """Execute the notebook ``nb`` in place, in a new ``python3`` kernel working in ``cwd``.

    A kernel that does not start is started again, up to ``KERNEL_START_TRIES`` starts in all
    (each retry is noted on stderr, under ``name``); a kernel that dies after it started is
    not. Widget state is not stored: it would embed each chart widget's JavaScript in the
    file. A cell's output may arrive up to :data:`IOPUB_TIMEOUT_S` after its reply. When the
    last cell is done the kernel is stopped at once, as nbval stops its kernels: every output
    is in, and Python's teardown of torch and Numba would cost seconds of CPU for nothing.
    ``start_kwargs`` go to the kernel's start (``stdout=``, ``stderr=``: where the kernel
    process's own output goes).

    Raises:
        What nbclient raises: ``CellExecutionError`` (a cell raised, unless ``allow_errors``),
        ``CellTimeoutError``, ``DeadKernelError``, or ``RuntimeError`` for a kernel that did
        not start in any try.
    """
    from nbclient import NotebookClient

    for attempt in range(1, KERNEL_START_TRIES + 1):
        started = []
        client = NotebookClient(nb, timeout=timeout, kernel_name="python3",
                                iopub_timeout=IOPUB_TIMEOUT_S,
                                allow_errors=allow_errors, store_widget_state=False,
                                shutdown_kernel="immediate",
                                resources={"metadata": {"path": str(cwd)}},
                                on_notebook_start=lambda notebook: started.append(True))
        try:
            client.execute(**start_kwargs)
            return
        except Exception as exc:
            if started or attempt == KERNEL_START_TRIES:
                raise
            first = (str(exc).strip().splitlines() or [""])[0]
            print(f"{name}: the kernel did not start "
                  f"({type(exc).__name__}: {first}); starting it again",
                  file=sys.stderr, flush=True)


def retry_kernel_start(start):
    """Wrap a ``start_new_kernel(startup_timeout, kernel_name, **kwargs)`` function
    (jupyter_client's, or nbval's) so that a kernel that does not start is started again.

    Up to ``KERNEL_START_TRIES`` starts in all, each retry noted on stderr. The repository's
    ``conftest.py`` wraps nbval's, whose notebooks would otherwise fail whole on one lost port.

    Returns:
        The wrapped function; it returns what ``start`` returns (kernel manager, client) and
        raises ``start``'s ``RuntimeError`` if the kernel did not start in any try.
    """
    @functools.wraps(start)
    def start_with_retries(*args, **kwargs):
        for attempt in range(1, KERNEL_START_TRIES + 1):
            try:
                return start(*args, **kwargs)
            except RuntimeError as exc:
                if attempt == KERNEL_START_TRIES:
                    raise
                print(f"a kernel did not start ({exc}); starting it again",
                      file=sys.stderr, flush=True)
        raise AssertionError("unreachable")

    start_with_retries.retries_kernel_start = True
    return start_with_retries


def run_notebook(path: pathlib.Path, out_dir: pathlib.Path | None, timeout: int = 600
                 ) -> tuple[bool, float, str]:
    """Execute one notebook; write ``out_dir/NAME.ipynb`` and ``out_dir/NAME.html``.

    With ``out_dir=None`` the executed notebook replaces the original (refreshing its stored
    outputs), and only if every cell ran. The notebook runs through :func:`execute`. The
    kernel process's own stdout and stderr (its start-up log, and anything written outside a
    cell's capture) go to a temporary file.

    Returns:
        (ok, seconds, error text or ""). If the kernel itself failed (died, or did not start
        in ``KERNEL_START_TRIES`` tries) rather than a cell, the error text goes on with its
        last lines of output. The seconds include any failed starts.
    """
    import nbformat
    from nbclient.exceptions import CellExecutionError, CellTimeoutError
    from nbconvert import HTMLExporter

    nb = nbformat.read(path, as_version=4)
    start = time.perf_counter()
    error = ""
    with tempfile.TemporaryFile() as kernel_log:
        try:
            execute(nb, path.parent, timeout, name=path.name, stdout=kernel_log,
                    stderr=kernel_log)
        except CellExecutionError as exc:
            lines = [ln for ln in str(exc).strip().splitlines() if ln.strip()]
            error = lines[-1] if lines else "cell failed"
        except CellTimeoutError as exc:  # its message goes on with the cell's source
            error = f"CellTimeoutError: {str(exc).strip().splitlines()[0]}"
        except Exception as exc:  # noqa: BLE001 - report and go on to the next notebook
            # The kernel died or did not start: what it printed may say why.
            lines = str(exc).strip().splitlines()
            error = f"{type(exc).__name__}: {lines[0] if lines else ''}"
            kernel_log.seek(0)
            tail = kernel_log.read().decode(errors="replace").strip().splitlines()
            if tail:
                error += "\n  kernel output:\n" + "\n".join(
                    "    " + ln for ln in tail[-KERNEL_LOG_LINES:])
    seconds = time.perf_counter() - start
    if out_dir is None:
        if not error:
            nbformat.write(nb, path)
        return not error, seconds, error
    out_dir.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, out_dir / path.name)
    body, _ = HTMLExporter().from_notebook_node(nb)
    (out_dir / path.with_suffix(".html").name).write_text(body, encoding="utf-8")
    return not error, seconds, error


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.run_notebooks",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("notebooks", nargs="*", type=pathlib.Path)
    parser.add_argument("--out", type=pathlib.Path, default=ROOT / "build")
    parser.add_argument("--timeout", type=int, default=600, help="seconds per cell")
    parser.add_argument("--in-place", action="store_true",
                        help="refresh the notebooks' stored outputs instead of writing to --out")
    args = parser.parse_args(argv)
    paths = args.notebooks or sorted((ROOT / "notebooks").glob("[0-9]*.ipynb"))
    if not paths:
        print("no notebooks found", file=sys.stderr)
        return 2
    failed, total = 0, 0.0
    width = max(len(p.name) for p in paths)
    for path in paths:
        ok, seconds, error = run_notebook(path, None if args.in_place else args.out, args.timeout)
        failed += not ok
        total += seconds
        line = f"{path.name:<{width}}  {seconds:7.1f} s  {'ok' if ok else 'failed'}"
        first, _, rest = error.partition("\n")
        print(line + (f"  ({first})" if first else "") + (f"\n{rest}" if rest else ""), flush=True)
    print(f"{len(paths)} notebooks, {len(paths) - failed} ok, {failed} failed, "
          f"{total / 60:.1f} min in all", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
