"""Moving arrays between the user, torch and Numba kernels without copies where possible.

The CUDA path of every strategy works on torch tensors on :func:`cuda_device` (the GPU, or
the CPU when kernels run in the Numba CUDA simulator). :func:`kernel_array` hands a tensor to a
Numba kernel without copying: through ``__cuda_array_interface__`` on a GPU, as the NumPy view
of the same memory in the simulator. A kernel's writes are therefore visible in the tensor.
"""

from __future__ import annotations

import numpy as np
import torch

from .. import backend

__all__ = ["cuda_device", "kernel_array", "poisoned", "to_torch"]


def cuda_device() -> torch.device:
    """Where CUDA-path tensors live: ``cuda`` on a GPU, ``cpu`` under the simulator."""
    return torch.device("cuda" if backend.MODE == "gpu" else "cpu")


def kernel_array(t: torch.Tensor):
    """A zero-copy view of a contiguous tensor that a Numba CUDA kernel accepts."""
    if not t.is_contiguous():
        raise ValueError("kernel arrays must be contiguous; call .contiguous() first")
    t = t.detach()
    if backend.MODE == "gpu":
        from numba import cuda

        return cuda.as_cuda_array(t)
    return t.numpy()


def poisoned(shape, device: torch.device, dtype=torch.float32) -> torch.Tensor:
    """A new tensor filled with NaN: an element a kernel fails to write stays NaN."""
    return torch.full(tuple(shape), float("nan"), dtype=dtype, device=device)


def to_torch(a, device: torch.device | str) -> torch.Tensor:
    """A float32 contiguous tensor on ``device`` from a NumPy array or a tensor."""
    if isinstance(a, np.ndarray):
        a = torch.from_numpy(np.ascontiguousarray(a))
    return a.to(device=device, dtype=torch.float32).contiguous()
