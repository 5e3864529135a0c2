"""First CUDA kernels: ReLU and SAXPY, one thread per element, and the grid-stride loop.

Thread ``t`` of block ``b`` handles element ``i = b * threads_per_block + t``
(``cuda.grid(1)``); the grid is rounded up to whole blocks, so every kernel checks ``i < n``.
A grid-stride loop (:func:`relu_grid_stride_kernel`) lets a fixed-size grid cover any ``n``.
Notebook 01 teaches the thread hierarchy with these kernels.

Arrays are 1-D, float32 unless said otherwise. Without a GPU the kernels run in the Numba CUDA
simulator (see :mod:`helpers.device.backend`): correct, but about a million times slower, so host
wrappers refuse sizes the simulator cannot finish quickly (:data:`SIMULATOR_MAX_ELEMENTS`).

Source: "How GPUs accelerate deep learning" (an activation over a vector is embarrassingly
parallel); the CUDA thread hierarchy of NVIDIA's CUDA C Programming Guide (the study's
reference [1]).
"""

from __future__ import annotations


import numpy as np
from numba import cuda  # noqa: E402

from helpers.device import backend
from helpers.device.arrays import launch

__all__ = [
    "relu_kernel",
    "relu_grid_stride_kernel",
    "saxpy_kernel",
    "thread_map_kernel",
    "launch_config",
    "relu",
    "saxpy",
    "thread_map",
    "SIMULATOR_MAX_ELEMENTS",
]

#: Largest number of elements a host wrapper hands to the simulator (about 0.1-0.3 ms each).
SIMULATOR_MAX_ELEMENTS = 20_000


# ------------------------------------------------------------------------------------ kernels


@cuda.jit
def relu_kernel(x, out):
    """out[i] = max(x[i], 0), one thread per element; threads past the end do nothing."""
    i = cuda.grid(1)  # blockIdx.x * blockDim.x + threadIdx.x
    if i < x.size:
        out[i] = x[i] if x[i] > 0 else 0


@cuda.jit
def relu_grid_stride_kernel(x, out):
    """ReLU with a grid-stride loop: any grid size covers any n.

    Each thread handles elements ``i, i + stride, i + 2*stride, ...`` from its
    ``i = cuda.grid(1)``, with ``stride = blocks * threads_per_block`` (``cuda.gridsize(1)``).
    """
    start = cuda.grid(1)
    stride = cuda.gridsize(1)  # gridDim.x * blockDim.x
    for i in range(start, x.size, stride):
        out[i] = x[i] if x[i] > 0 else 0


@cuda.jit
def saxpy_kernel(a, x, y, out):
    """out[i] = a * x[i] + y[i] (Single-precision A times X Plus Y), one thread per element."""
    i = cuda.grid(1)
    if i < x.size:
        out[i] = a * x[i] + y[i]


@cuda.jit
def thread_map_kernel(block_of, thread_of):
    """Each thread writes its block and thread index into the element it owns."""
    i = cuda.grid(1)
    if i < block_of.size:
        block_of[i] = cuda.blockIdx.x
        thread_of[i] = cuda.threadIdx.x


# ------------------------------------------------------------------------------ host wrappers


def launch_config(n: int, threads_per_block: int = 256) -> tuple[int, int]:
    """Blocks and threads per block for one thread per element.

    Args:
        n: number of elements, >= 1.
        threads_per_block: 1..1024 (the CUDA limit); a multiple of 32 (the warp size) wastes
            no lanes.

    Returns:
        ``(blocks, threads_per_block)`` with ``blocks = ceil(n / threads_per_block)``.

    Raises:
        ValueError: n < 1, threads_per_block outside 1..1024, or more blocks than a grid may
            have (2**31 - 1 along x).
    """
    if not isinstance(n, (int, np.integer)) or isinstance(n, bool) or n < 1:
        raise ValueError(f"n must be an integer >= 1, got {n!r}")
    if (not isinstance(threads_per_block, (int, np.integer)) or isinstance(threads_per_block, bool)
            or not 1 <= threads_per_block <= 1024):
        raise ValueError(f"threads_per_block must be in 1..1024, got {threads_per_block!r}")
    return launch(int(n), int(threads_per_block), f"one thread per element of {n:,}")


def _check_vector(name: str, a) -> np.ndarray:
    if hasattr(a, "__cuda_array_interface__") or type(a).__module__.startswith("numba"):
        raise TypeError(f"{name}: pass a NumPy array; for device arrays launch the kernel directly")
    a = np.asarray(a)
    if a.ndim != 1:
        raise ValueError(f"{name} must be 1-D, got shape {a.shape}")
    a = np.ascontiguousarray(a)  # strided views (x[::2]) are copied: to_device needs contiguity
    if a.size < 1:
        raise ValueError(f"{name} must have at least 1 element, got 0")
    if a.dtype not in (np.float32, np.float64):
        raise ValueError(f"{name} must be float32 or float64, got {a.dtype}")
    if backend.MODE == "simulator" and a.size > SIMULATOR_MAX_ELEMENTS:
        raise ValueError(
            f"{name} has {a.size:,} elements; the CUDA simulator runs about 5,000 threads a "
            f"second, so it would take about {a.size / 5000:.0f} s. Use at most "
            f"{SIMULATOR_MAX_ELEMENTS:,} elements without a GPU.")
    return a


def _poisoned_output(like: np.ndarray):
    """A device array the size of ``like``, filled with NaN so an unwritten element shows."""
    return cuda.to_device(np.full_like(like, np.nan))


def relu(x, threads_per_block: int = 256, grid_stride_blocks: int | None = None) -> np.ndarray:
    """ReLU on the GPU (or the simulator): copy in, launch, copy out.

    Args:
        x: 1-D float32/float64 NumPy array, at least 1 element.
        threads_per_block: 1..1024.
        grid_stride_blocks: if given, launch :func:`relu_grid_stride_kernel` with this many
            blocks (>= 1) instead of one thread per element.

    Returns:
        ``max(x, 0)`` as a new NumPy array of x's dtype and shape.

    Raises:
        ValueError: bad shape, dtype, launch configuration, or a size too large for the simulator.
    """
    x = _check_vector("x", x)
    d_x, d_out = cuda.to_device(x), _poisoned_output(x)
    if grid_stride_blocks is None:
        blocks, tpb = launch_config(x.size, threads_per_block)
        relu_kernel[blocks, tpb](d_x, d_out)
    else:
        if grid_stride_blocks < 1:
            raise ValueError(f"grid_stride_blocks must be >= 1, got {grid_stride_blocks}")
        _, tpb = launch_config(1, threads_per_block)
        relu_grid_stride_kernel[grid_stride_blocks, tpb](d_x, d_out)
    return d_out.copy_to_host()


def saxpy(a: float, x, y, threads_per_block: int = 256) -> np.ndarray:
    """SAXPY on the GPU (or the simulator): ``a * x + y``.

    Args:
        a: scalar.
        x, y: 1-D float arrays of equal length and dtype.
        threads_per_block: 1..1024.

    Returns:
        ``a * x + y`` as a new NumPy array.

    Raises:
        ValueError: mismatched lengths or dtypes, bad shapes, or a size too large for the
            simulator.
    """
    x, y = _check_vector("x", x), _check_vector("y", y)
    if x.shape != y.shape or x.dtype != y.dtype:
        raise ValueError(f"x and y must match: x is {x.shape} {x.dtype}, y is {y.shape} {y.dtype}")
    if not np.isfinite(a):
        raise ValueError(f"a must be finite, got {a}")
    blocks, tpb = launch_config(x.size, threads_per_block)
    d_out = _poisoned_output(x)
    saxpy_kernel[blocks, tpb](x.dtype.type(a), cuda.to_device(x), cuda.to_device(y), d_out)
    return d_out.copy_to_host()


def thread_map(n: int, threads_per_block: int) -> tuple[np.ndarray, np.ndarray]:
    """Which block and which thread handled each element of an n-element launch.

    Returns:
        ``(block_of, thread_of)``: int32 arrays of length n; -1 would mark an element no thread
        wrote (there is none when the launch is right).

    Raises:
        ValueError: as :func:`launch_config`, or n too large for the simulator.
    """
    blocks, tpb = launch_config(n, threads_per_block)
    if backend.MODE == "simulator" and n > SIMULATOR_MAX_ELEMENTS:
        raise ValueError(f"n={n:,} is too large for the simulator (at most {SIMULATOR_MAX_ELEMENTS:,})")
    d_block = cuda.to_device(np.full(n, -1, np.int32))
    d_thread = cuda.to_device(np.full(n, -1, np.int32))
    thread_map_kernel[blocks, tpb](d_block, d_thread)
    return d_block.copy_to_host(), d_thread.copy_to_host()
