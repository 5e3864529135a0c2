"""Moving arrays between the user, torch and Numba kernels without copies where possible,
poisoned outputs, and the one launch-shape helper every kernel's host code uses.

The CUDA path of every strategy works on torch tensors on :func:`cuda_device` (the GPU, or
the CPU when kernels run in the Numba CUDA simulator). :func:`kernel_array` hands a tensor to a
Numba kernel without copying: through ``__cuda_array_interface__`` on a GPU, as the NumPy view
of the same memory in the simulator. A kernel's writes are therefore visible in the tensor.
:func:`poisoned` outputs start as NaN, except inside :func:`unpoisoned` (timed calls).
"""

from __future__ import annotations

import contextlib
import contextvars

import numpy as np
import torch

from helpers.device import backend

__all__ = ["cuda_device", "kernel_array", "poisoned", "unpoisoned", "poisoning", "all_finite",
           "to_torch", "MAX_GRID", "grid_for", "grid_refusal", "launch"]

#: The most blocks a grid may have along x, y and z (every GPU since compute capability 3.0).
#: The simulator does not enforce them; a real launch beyond them fails.
MAX_GRID: tuple[int, int, int] = (2**31 - 1, 65535, 65535)


def _dims(value, name: str) -> tuple[int, ...]:
    dims = (value,) if not isinstance(value, (tuple, list)) else tuple(value)
    if not 1 <= len(dims) <= 3:
        raise ValueError(f"{name} must be an int or up to three ints (x, y, z), got {value!r}")
    for v in dims:
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
            raise ValueError(f"{name} must be integers >= 1, got {value!r}")
    return tuple(int(v) for v in dims)


def grid_for(elements, threads):
    """Blocks along each axis so that every element gets a thread: ceil(elements / threads).

    Args:
        elements, threads: an int, or tuples of one to three ints in CUDA's (x, y, z) order,
            of equal length (threads = the block's shape).

    Returns:
        An int for ints, else a tuple. The last block along an axis may have threads past the
        end: a kernel must check its index against the size.

    Raises:
        ValueError: a value below 1, or lengths that differ.
    """
    e, t = _dims(elements, "elements"), _dims(threads, "threads")
    if len(e) != len(t):
        raise ValueError(f"elements {elements!r} and threads {threads!r} differ in length")
    grid = tuple(-(-a // b) for a, b in zip(e, t))
    return grid[0] if not isinstance(elements, (tuple, list)) else grid


def grid_refusal(grid, kernel: str) -> str | None:
    """None if a launch grid of ``grid`` blocks (an int, or up to three ints x, y, z) is
    within :data:`MAX_GRID`, else the reason, naming ``kernel`` and the axis that overflows.

    Source: CUDA C Programming Guide, "Compute Capabilities" (maximum grid dimensions)."""
    dims = (grid,) if isinstance(grid, (int, np.integer)) else tuple(grid)
    for axis, blocks, limit in zip("xyz", dims, MAX_GRID):
        if blocks > limit:
            return (f"{kernel} would launch {blocks:,} blocks along grid {axis}, beyond the "
                    f"CUDA limit of {limit:,}")
    return None


def launch(elements, threads, kernel: str):
    """``(grid, threads)`` for a launch ``kernel[grid, threads](...)`` with a thread per element.

    Args:
        elements, threads: as :func:`grid_for`; at most 1,024 threads a block (the CUDA limit).
        kernel: the kernel's name, for the error message.

    Raises:
        ValueError: as :func:`grid_for`; more than 1,024 threads a block; a grid beyond
            :data:`MAX_GRID` (the message names ``kernel`` and the axis).
    """
    grid = grid_for(elements, threads)
    block = _dims(threads, "threads")
    if int(np.prod(block)) > 1024:
        raise ValueError(f"threads per block must be at most 1024, got {threads!r} for {kernel}")
    reason = grid_refusal(grid, kernel)
    if reason:
        raise ValueError(reason)
    return grid, (block[0] if not isinstance(threads, (tuple, list)) else block)


def cuda_device() -> torch.device:
    """Where CUDA-path tensors live: ``cuda`` on a GPU, ``cpu`` under the simulator."""
    return torch.device("cuda" if backend.MODE == "gpu" else "cpu")


def kernel_array(t: torch.Tensor):
    """A zero-copy view of a contiguous tensor that a Numba CUDA kernel accepts: a Numba
    device array on a GPU, the tensor's NumPy view in the simulator.

    Raises ValueError: ``t`` not contiguous."""
    if not t.is_contiguous():
        raise ValueError("kernel arrays must be contiguous; call .contiguous() first")
    t = t.detach()
    if backend.MODE == "gpu":
        from numba import cuda

        # Numba launches on the legacy default stream, which runs after all earlier work on
        # torch's default stream (the same stream) and on every blocking stream: there the
        # kernel is ordered after whatever torch queued to produce t, with no wait on the host.
        # A synchronisation per argument would stall the host until the GPU drains, inside
        # every timed call. On another torch stream (created non-blocking) nothing orders the
        # two: keep as_cuda_array's default, which waits for the stream the interface names.
        if torch.cuda.current_stream(t.device) == torch.cuda.default_stream(t.device):
            return cuda.as_cuda_array(t, sync=False)
        return cuda.as_cuda_array(t)
    return t.numpy()


#: Whether :func:`poisoned` fills with NaN (True outside :func:`unpoisoned`); per thread and
#: per asyncio task, so a timing in one thread leaves a check in another poisoned.
_POISON: contextvars.ContextVar[bool] = contextvars.ContextVar("poison", default=True)


def poisoned(shape, device: torch.device, dtype: torch.dtype | None = None) -> torch.Tensor:
    """A new tensor of ``shape`` on ``device`` filled with NaN: an element a kernel fails to
    write stays NaN, so every check against a reference sees it. Inside :func:`unpoisoned`
    (timed calls) an uninitialised ``torch.empty`` instead: no fill kernel runs. ``dtype``:
    default float32."""
    dtype = torch.float32 if dtype is None else dtype
    if not _POISON.get():
        return torch.empty(tuple(shape), dtype=dtype, device=device)
    return torch.full(tuple(shape), float("nan"), dtype=dtype, device=device)


@contextlib.contextmanager
def unpoisoned():
    """Within the block :func:`poisoned` allocates without filling: the mode for timed calls,
    whose warm-up call ran poisoned (and was checked) first. The NaN fill is one more pass
    over every output and buffer (im2col's is up to R*S times the input), which the library's
    own calls do not make; outside the block poisoning is back on. Nests."""
    token = _POISON.set(False)
    try:
        yield
    finally:
        _POISON.reset(token)


def poisoning() -> bool:
    """Whether :func:`poisoned` fills with NaN here and now (False inside :func:`unpoisoned`)."""
    return _POISON.get()


def all_finite(t: torch.Tensor) -> bool:
    """Whether ``t`` holds no NaN and no infinity. A finite sum says so in one reduction
    (NaN and infinity propagate into it); only a sum that is not finite (or overflowed) needs
    the element-wise test. One host synchronisation on a GPU: keep it out of timed calls."""
    return bool(torch.isfinite(t.sum())) or bool(torch.isfinite(t).all())


def to_torch(a, device: torch.device | str) -> torch.Tensor:
    """A float32 contiguous tensor on ``device`` from a NumPy array or a tensor.

    A tensor that requires grad is detached first (kernels and NumPy code read its values
    only); the result shares memory with ``a`` where no conversion is needed."""
    if isinstance(a, np.ndarray):
        a = torch.from_numpy(np.ascontiguousarray(a))
    return a.detach().to(device=device, dtype=torch.float32).contiguous()
