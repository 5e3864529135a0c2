"""How warps touch memory and branch: coalescing, shared-memory bank conflicts, warp divergence.

Three small kernels (:mod:`helpers.access_kernels`), each recorded thread by thread by an
``explain_*`` function (:mod:`.explain`: simulator or GPU) and timed on a GPU by :func:`measure`
(:mod:`.timings`, with :func:`recorded` and :func:`main`). Times in ms, bandwidths in GB/s.
Command line: ``python -m helpers.experiments.memory_access``.

Source: Li et al., ICPP 2016, Section V-C and Figure 6; NVIDIA CUDA C Best Practices Guide.
"""

from helpers.access_kernels import (
    BANKS,
    BLOCK_ROWS,
    SECTOR_BYTES,
    TILE_DIM,
    WARP,
    branch_kernel,
    strided_load_kernel,
    transpose_naive_kernel,
    transpose_shared_kernel,
)
from helpers.experiments.memory_access import explain, timings
from helpers.experiments.memory_access.explain import (
    SIMULATOR_MAX_THREADS,
    BankExplanation,
    CoalescingExplanation,
    DivergenceExplanation,
    conflict_degree,
    explain_banks,
    explain_coalescing,
    explain_divergence,
    sectors_of,
    warp_efficiency,
)
from helpers.experiments.memory_access.timings import (
    COMMAND,
    PREFIX,
    GpuRequired,
    gpu_refusal,
    main,
    measure,
    measure_coalescing,
    measure_divergence,
    measure_transpose,
    recorded,
    save_gpu_experiments,
)

__all__ = [
    "BANKS", "BLOCK_ROWS", "COMMAND", "PREFIX", "SECTOR_BYTES", "SIMULATOR_MAX_THREADS",
    "TILE_DIM", "WARP", "BankExplanation", "CoalescingExplanation", "DivergenceExplanation",
    "GpuRequired", "branch_kernel", "conflict_degree", "explain", "explain_banks",
    "explain_coalescing", "explain_divergence", "gpu_refusal", "main", "measure",
    "measure_coalescing", "measure_divergence", "measure_transpose", "recorded",
    "save_gpu_experiments", "sectors_of", "strided_load_kernel", "timings",
    "transpose_naive_kernel", "transpose_shared_kernel", "warp_efficiency"]
