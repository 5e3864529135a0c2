"""What the GPU reference run (:mod:`helpers.experiments.gpu_reference`) does inside its one
measuring process: load torch and Numba once, check the machine (the preflight), and run each
recording command's ``main`` with its output logged, and torch's settings and cached GPU memory
put back after it."""

from __future__ import annotations

import contextlib
import gc
import importlib
import importlib.metadata
import sys
import traceback
from collections.abc import Callable

from helpers import results
from helpers.device import backend

__all__ = ["preflight", "release_cached_memory", "run_part", "warm_up"]


def warm_up() -> None:
    """Load torch and Numba's CUDA module in the measuring process before its first call: a
    part's time then starts with the part, and a process started after a kill is ready."""
    import numba.cuda  # noqa: F401
    import torch  # noqa: F401


def preflight(dry_run: bool) -> dict:
    """What this machine is, and whether a Numba kernel and a cuDNN convolution run on it.

    Runs in the measuring process. Returns ``{"slug", "lines" (text to print), "numba"
    (None, or why Numba kernels cannot run), "cudnn" (None, or why)}``.
    """
    import numpy as np
    import torch

    info = backend.info()
    slug = ("dry-run-" + results.slug(info.cpu_model or "cpu") if dry_run
            else results.slug(info.gpu_name or "gpu"))
    versions = {"torch": torch.__version__, "CUDA (torch)": str(torch.version.cuda),
                "cuDNN": str(torch.backends.cudnn.version()), "numpy": np.__version__}
    for dist in ("numba", "numba-cuda"):
        try:
            versions[dist] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            versions[dist] = "not installed"
    lines = [f"machine: {info.device_label if info.mode == 'gpu' else 'no GPU (dry run)'}; "
             f"CPU: {info.cpu_model}",
             f"driver: {info.driver_version or '-'}; " + ", ".join(
                 f"{k} {v}" for k, v in versions.items())]
    numba_problem = cudnn_problem = None
    try:
        from numba import cuda

        @cuda.jit
        def add_one(a):   # one thread: compiling, linking and launching are what is checked
            a[0] += 1.0

        d = cuda.to_device(np.full(1, 41.0, dtype=np.float32))
        add_one[1, 1](d)
        if d.copy_to_host()[0] != 42.0:
            numba_problem = "a Numba kernel ran but gave wrong results"
    except Exception as exc:  # noqa: BLE001  (reported: the torch-only parts still run)
        numba_problem = f"a Numba kernel did not run: {type(exc).__name__}: {exc}"
    try:
        device = "cuda" if info.mode == "gpu" else "cpu"
        x = torch.arange(3 * 8 * 8, dtype=torch.float32).reshape(1, 3, 8, 8) / 100
        w = torch.ones(2, 3, 3, 3)
        y = torch.nn.functional.conv2d(x.to(device), w.to(device)).cpu()
        want = torch.nn.functional.conv2d(x.double(), w.double()).float()
        if not torch.allclose(y, want, rtol=1e-3, atol=1e-3):
            cudnn_problem = "torch's convolution ran but gave wrong results"
    except Exception as exc:  # noqa: BLE001
        cudnn_problem = f"torch's convolution did not run: {type(exc).__name__}: {exc}"
    lines.append("Numba kernel: " + (numba_problem or "ok") + "; "
                 + ("cuDNN" if info.mode == "gpu" else "torch") + " convolution: "
                 + (cudnn_problem or "ok"))
    return {"slug": slug, "lines": lines, "numba": numba_problem, "cudnn": cudnn_problem}


class _Tee:
    """A text stream that writes to several."""

    def __init__(self, *streams):
        self.streams = streams

    def write(self, text: str) -> int:
        for stream in self.streams:
            stream.write(text)
        return len(text)

    def flush(self) -> None:
        for stream in self.streams:
            stream.flush()

    def isatty(self) -> bool:
        return False


def _torch_settings() -> Callable[[], None]:
    """Torch's process-wide settings that a part may change (TF32, cuDNN autotuning, threads,
    default dtype), and a function that puts them back: the next part measures as if alone."""
    import torch

    cuda_matmul, cudnn = torch.backends.cuda.matmul, torch.backends.cudnn
    saved = (cuda_matmul.allow_tf32, cudnn.allow_tf32, cudnn.benchmark, cudnn.deterministic,
             torch.get_float32_matmul_precision(), torch.get_num_threads(),
             torch.get_default_dtype())

    def restore() -> None:
        (cuda_matmul.allow_tf32, cudnn.allow_tf32, cudnn.benchmark, cudnn.deterministic,
         precision, threads, dtype) = saved
        torch.set_float32_matmul_precision(precision)
        torch.set_num_threads(threads)
        torch.set_default_dtype(dtype)

    return restore


def release_cached_memory() -> None:
    """Hand the GPU memory that torch's caching allocator keeps but no tensor uses back to the
    driver, after collecting what the last part left unreferenced: the next part then finds
    the card's memory free, as if alone (the driver counts cached blocks as used)."""
    import torch

    gc.collect()
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.empty_cache()


def run_part(module: str, argv: list[str], log: str) -> int:
    """``module.main(argv)`` in this process, its output copied to ``log`` and to standard
    error, with ``sys.argv`` set to the part's command meanwhile (what :func:`results.save`
    records), torch's settings put back afterwards (:func:`_torch_settings`) and its cached
    GPU memory released (:func:`release_cached_memory`).

    Returns:
        Its exit status (an ``argparse`` error gives 2). An exception propagates, with its
        traceback written to ``log`` too.
    """
    restore = _torch_settings()
    # the part's own command line, as results.save records it (not the measuring process's)
    saved_argv, sys.argv = sys.argv, [f"python -m {module}", *argv]
    with open(log, "a", encoding="utf-8") as fh:
        tee = _Tee(fh, sys.__stderr__)
        with contextlib.redirect_stdout(tee), contextlib.redirect_stderr(tee):
            try:
                code = importlib.import_module(module).main(argv)
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else (exc.code is not None)
            except BaseException:
                traceback.print_exc()
                raise
            finally:
                sys.argv = saved_argv
                restore()
                release_cached_memory()
                tee.flush()
    return int(code or 0)
