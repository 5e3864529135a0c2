"""GEMM, C = A @ B, as a ladder of Numba CUDA kernels: the teaching path to im2col and to cuBLAS.

Unrolling (im2col) turns a whole convolution into one matrix product, and in the study GEMM is
80-87 % of the time of Caffe, Torch-cunn and Theano-CorrMM (Section V-A, Figure 4), so the
workbook builds the GEMM itself, one idea per rung, each file one kernel (``rung1_...`` to
``rung7_...``): uncoalesced and coalesced naive kernels, shared-memory tiles, 1-D and 2-D
register blocktiling, 128-bit loads, autotuned tile sizes; :mod:`.splitk` splits a long
reduction over blocks. :func:`gemm` runs any rung with checks; :func:`launcher` returns a bare
launch to time. Shapes: a (M, K), b (K, N), c (M, N), float32; every rung is correct for any
M, N, K >= 1. Without a GPU they run, slowly, in the Numba CUDA simulator.

Source: Li et al., ICPP 2016, Section II-B and Figure 4; S. Boehm, "How to Optimize a CUDA
Matmul Kernel for cuBLAS-like Performance: a Worklog" (2022), whose kernels 1-6 and 9 the rungs
follow.
"""

from __future__ import annotations

from helpers.conv.gemm.launch import (
    KERNELS,
    RUNGS,
    SIMULATOR_MAX_THREADS,
    WORKLOG_A6000,
    Rung,
    gemm,
    gemm_flops,
    gemm_nt,
    launch_config,
    launcher,
    rung,
    rung_launch,
    simulator_refusal,
    splitk_plan,
)
from helpers.conv.gemm.rung2_naive import gemm_naive_kernel
from helpers.conv.gemm.rung3_tiled import TILE, gemm_tiled_kernel

__all__ = ["TILE", "KERNELS", "RUNGS", "Rung", "SIMULATOR_MAX_THREADS", "WORKLOG_A6000",
           "gemm_naive_kernel", "gemm_tiled_kernel", "launch_config", "rung", "rung_launch",
           "launcher", "gemm", "gemm_nt", "gemm_flops", "simulator_refusal", "splitk_plan"]
