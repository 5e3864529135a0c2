"""The GPU table: datasheet figures of the GPUs the workbook knows, found by CUDA's device name.

:class:`GpuSpec` holds one board's figures: SMs, memory (bytes), peak FP32 FLOP/s on CUDA cores,
dense FP16, TF32 and BF16 tensor-core peaks (FLOP/s, without sparsity), memory bandwidth
(bytes/s) and the datasheet they come from. :data:`KNOWN_GPUS` lists them by name patterns;
:func:`lookup_gpu` maps a device name as CUDA reports it to its entry. Datasheet figures, never
measured here; :mod:`helpers.device.backend` re-exports all three.

Source: NVIDIA's datasheets and board specifications named in each entry.
"""

from __future__ import annotations

import dataclasses
import re

__all__ = ["GpuSpec", "KNOWN_GPUS", "lookup_gpu"]


@dataclasses.dataclass(frozen=True)
class GpuSpec:
    """Datasheet figures for one GPU board.

    Attributes:
        name: board name as marketed.
        sms: streaming multiprocessors.
        memory_bytes: device memory in bytes.
        fp32_flops: peak FP32 FLOP/s (CUDA cores, boost clock unless the source says base).
        fp16_tensor_flops: dense FP16 tensor-core peak FLOP/s, or None where there are no tensor
            cores.
        bandwidth_bytes_s: peak memory bandwidth in bytes/s.
        source: the datasheet the figures come from.
        tf32_tensor_flops, bf16_tensor_flops: dense TF32 (float32 GEMMs and convolutions
            with TF32 allowed) and BF16 tensor-core peaks, FLOP/s; None before Ampere (sm_80).
    """

    name: str
    sms: int
    memory_bytes: int
    fp32_flops: float
    fp16_tensor_flops: float | None
    bandwidth_bytes_s: float
    source: str
    tf32_tensor_flops: float | None = None
    bf16_tensor_flops: float | None = None


_GB = 10**9
_GIB = 2**30
_T = 1e12

#: Patterns (lower case, all must occur in the device name) mapped to datasheet figures.
#: Ordered: the first match wins, so specific variants come before generic ones.
#:
#: Tensor-core columns (the last two: TF32, BF16) are dense, without sparsity. The A100
#: datasheet lists dense figures (TF32 156, BF16 = FP16 312 TFLOPS). The L4, H100 and H200
#: datasheets list "with sparsity" figures (*), twice the dense ones, so dense = half: TF32
#: 120* (L4), 756* (H100 PCIe), 835* (H100 NVL, H200 NVL), 989* (H100 SXM, H200 SXM). The
#: FP16 column rounds a half down (1,979* -> 989); BF16 takes the FP16 value, as each of these
#: datasheets lists the same figure for both. K40, T4 and V100: no TF32 or BF16 tensor cores.
KNOWN_GPUS: list[tuple[tuple[str, ...], GpuSpec]] = [
    (("k40",), GpuSpec(
        "Tesla K40c", 15, 12 * _GIB, 4.29 * _T, None, 288 * _GB,
        "NVIDIA Tesla K40 GPU Accelerator board specification (BD-06902-001), base clock 745 MHz; "
        "the figures the ICPP 2016 study quotes")),
    (("t4",), GpuSpec(
        "Tesla T4", 40, 16 * _GIB, 8.1 * _T, 65 * _T, 320 * _GB,
        "NVIDIA T4 Tensor Core GPU datasheet")),
    (("v100", "pcie"), GpuSpec(
        "Tesla V100 PCIe", 80, 16 * _GIB, 14 * _T, 112 * _T, 900 * _GB,
        "NVIDIA Tesla V100 GPU Accelerator datasheet (PCIe)")),
    (("v100",), GpuSpec(
        "Tesla V100 SXM2", 80, 16 * _GIB, 15.7 * _T, 125 * _T, 900 * _GB,
        "NVIDIA Tesla V100 GPU Accelerator datasheet (SXM2)")),
    (("a100", "80gb", "pcie"), GpuSpec(
        "A100 80GB PCIe", 108, 80 * _GIB, 19.5 * _T, 312 * _T, 1935 * _GB,
        "NVIDIA A100 Tensor Core GPU datasheet (80GB PCIe)", 156 * _T, 312 * _T)),
    (("a100", "80gb"), GpuSpec(
        "A100 80GB SXM", 108, 80 * _GIB, 19.5 * _T, 312 * _T, 2039 * _GB,
        "NVIDIA A100 Tensor Core GPU datasheet (80GB SXM)", 156 * _T, 312 * _T)),
    (("a100",), GpuSpec(
        "A100 40GB", 108, 40 * _GIB, 19.5 * _T, 312 * _T, 1555 * _GB,
        "NVIDIA A100 Tensor Core GPU datasheet (40GB)", 156 * _T, 312 * _T)),
    (("l4",), GpuSpec(
        "L4", 58, 24 * _GIB, 30.3 * _T, 121 * _T, 300 * _GB,
        "NVIDIA L4 Tensor Core GPU datasheet", 120 / 2 * _T, 121 * _T)),
    (("h100", "pcie"), GpuSpec(
        "H100 PCIe", 114, 80 * _GIB, 51 * _T, 756 * _T, 2000 * _GB,
        "NVIDIA H100 Tensor Core GPU datasheet (H100 PCIe)", 756 / 2 * _T, 756 * _T)),
    (("h100", "nvl"), GpuSpec(
        "H100 NVL", 132, 94 * _GIB, 60 * _T, 835 * _T, 3900 * _GB,
        "NVIDIA H100 Tensor Core GPU datasheet (H100 NVL)", 835 / 2 * _T, 835 * _T)),
    (("h100",), GpuSpec(
        "H100 SXM", 132, 80 * _GIB, 67 * _T, 989 * _T, 3350 * _GB,
        "NVIDIA H100 Tensor Core GPU datasheet (H100 SXM)", 989 / 2 * _T, 989 * _T)),
    (("h200", "nvl"), GpuSpec(
        "H200 NVL", 132, 141 * _GB, 60 * _T, 835 * _T, 4800 * _GB,
        "NVIDIA H200 Tensor Core GPU datasheet (H200 NVL)", 835 / 2 * _T, 835 * _T)),
    (("h200",), GpuSpec(
        "H200 SXM", 132, 141 * _GB, 67 * _T, 989 * _T, 4800 * _GB,
        "NVIDIA H200 Tensor Core GPU datasheet (H200 SXM)", 989 / 2 * _T, 989 * _T)),
]


def lookup_gpu(device_name: str) -> GpuSpec | None:
    """Datasheet figures for a device name as CUDA reports it, or None if the GPU is not known.

    Args:
        device_name: e.g. ``"NVIDIA H100 80GB HBM3"`` or ``"Tesla T4"``.

    Returns:
        The first entry of :data:`KNOWN_GPUS` whose patterns all occur in the lower-cased name.
    """
    name = device_name.lower()
    for patterns, spec in KNOWN_GPUS:
        if all(_word_in(p, name) for p in patterns):
            return spec
    return None


def _word_in(pattern: str, name: str) -> bool:
    # "l4" must not match inside "l40"; "t4" must not match inside "rtx 4090".
    return re.search(rf"(?<![a-z0-9]){re.escape(pattern)}(?![0-9])", name) is not None

