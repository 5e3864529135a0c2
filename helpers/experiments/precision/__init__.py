"""Precision and tensor cores: error against float64 and speed of GEMM and convolution in
float32 (TF32 off), TF32, bfloat16 and float16.

:mod:`.support`: which precision runs where (:func:`supports`, :func:`native`,
:func:`arithmetic`, :func:`ceilings`); :mod:`.errors`: the error against float64 on seeded
inputs (:func:`error_vs_float64`); :mod:`.timings`: speed and error per (op, precision),
:func:`measure`, :func:`recorded` (``results/precision_*``) and :func:`main`. Shapes: GEMM
n x n x n; convolutions NCHW as :class:`helpers.conv.ConvConfig` (cuDNN symbols). Times in ms,
rates in TFLOP/s (10^12).

Source: NVIDIA A100 and H100 datasheets (TF32, BF16, FP16 tensor cores); Micikevicius et
al., "Mixed Precision Training", ICLR 2018; the study's Table I layers (Li et al., ICPP 2016).
"""

from helpers.experiments.precision import errors, support, timings
from helpers.experiments.precision.errors import (
    CPU_GEMM_SIZES,
    CPU_LAYERS,
    GPU_GEMM_SIZES,
    GPU_LAYERS,
    error_vs_float64,
    relative_errors,
)
from helpers.experiments.precision.support import (
    DTYPES,
    OPS,
    PRECISIONS,
    STRATEGY_PRECISIONS,
    arithmetic,
    ceilings,
    cpu_flags,
    native,
    precision_mode,
    strategy_reason,
    supports,
    tf32_mode,
)
from helpers.experiments.precision.timings import (
    COMMAND,
    DEFAULT_STRATEGIES,
    DIRECT_EQUIV,
    ERROR_BATCH,
    FIELDS,
    PREFIX,
    format_table,
    main,
    measure,
    recorded,
)

__all__ = ["PRECISIONS", "DTYPES", "OPS", "STRATEGY_PRECISIONS", "FIELDS", "PREFIX", "COMMAND",
           "CPU_GEMM_SIZES", "GPU_GEMM_SIZES", "CPU_LAYERS", "GPU_LAYERS", "DEFAULT_STRATEGIES",
           "DIRECT_EQUIV",
           "ERROR_BATCH", "tf32_mode", "precision_mode", "cpu_flags", "native", "arithmetic",
           "supports", "strategy_reason", "relative_errors", "error_vs_float64", "measure",
           "ceilings", "recorded", "format_table", "main", "errors", "support", "timings"]
