"""CPU vs GPU throughput (notebook 01): memory-bound elementwise work and compute-bound GEMM.

:mod:`.sweeps`: the two sweeps (GB/s of ReLU and SAXPY, GFLOP/s of GEMM) over sizes and
backends, their rooflines, results/ and the command (``python -m helpers.experiments.throughput``).
:mod:`.calls`: the calls timed and the row of one point. :mod:`.budget`: what a point will cost
before it is run, and running it within its budget.
"""

from helpers.experiments.throughput.sweeps import (
    COMMAND,
    DTYPES,
    ELEMENTWISE_OPS,
    GEMM_SIZES,
    PREFIX,
    backends_for,
    bandwidth_peaks,
    check_sizes,
    elementwise_sweep,
    gemm_sweep,
    log_sizes,
    main,
    measured_bandwidth,
    memory_limit_bytes,
    recorded,
    ridge_point,
    roofline_sides,
    rooflines,
    table1_gemm_rows,
)

__all__ = ["COMMAND", "DTYPES", "ELEMENTWISE_OPS", "GEMM_SIZES", "PREFIX", "backends_for",
           "bandwidth_peaks", "check_sizes", "elementwise_sweep", "gemm_sweep", "log_sizes", "main",
           "measured_bandwidth", "memory_limit_bytes", "recorded", "ridge_point", "roofline_sides",
           "rooflines", "table1_gemm_rows"]
