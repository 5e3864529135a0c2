"""The study's numbers as data: Table I's layers (and the GEMMs they become under im2col),
Figure 2's convolution shares, Figure 3's kernel-size finding, Figure 4's GEMM shares, Figure 5's
memory ranges, Table II, Figure 6 and Figure 7.

Symbols: the study's 5-tuple (b, i, f, k, s) = (batch, input height = width, filters,
kernel height = width, stride); in kernels, the cuDNN paper's N, C, H, W, K, R, S, P, Q.

Input channels: the study does not state them. Conv1, Conv3, Conv4 and Conv5 are layers L1, L3,
L4 and L5 of the convnet-benchmarks suite the study cites, whose input channels are 3, 128, 128
and 384; we use those. Conv2 is the study's own layer: Conv1's input with a 3 x 3 kernel, so we
give it Conv1's 3 input channels. Padding is 0 throughout.

Source: Li et al., "Performance Analysis of GPU-based Convolutional Neural Networks",
ICPP 2016, Table I.
"""

from __future__ import annotations

import dataclasses

from helpers.conv.config import ConvConfig

__all__ = ["TABLE_I", "STUDY_FIGURE2", "STUDY_FIGURE3_KERNEL", "STUDY_FIGURE_5_MB",
           "STUDY_TABLE_II", "STUDY_FIGURE_6",
           "STUDY_FIGURE4_GEMM_SHARE", "STUDY_FIGURE_7", "GemmShape",
           "im2col_gemm"]


#: Table I of the study, with the input channels chosen as the module docstring explains.
TABLE_I: tuple[ConvConfig, ...] = (
    ConvConfig.from_study(b=128, i=128, f=96, k=11, s=1, c=3, name="Conv1"),
    ConvConfig.from_study(b=128, i=128, f=96, k=3, s=1, c=3, name="Conv2"),
    ConvConfig.from_study(b=128, i=32, f=128, k=9, s=1, c=128, name="Conv3"),
    ConvConfig.from_study(b=128, i=16, f=128, k=7, s=1, c=128, name="Conv4"),
    ConvConfig.from_study(b=128, i=13, f=384, k=3, s=1, c=384, name="Conv5"),
)


@dataclasses.dataclass(frozen=True)
class GemmShape:
    """A GEMM C[M, N] = A[M, K] @ B[K, N], with FLOPs and the bytes it must at least move.

    Attributes:
        name: label. m, n, k: the GEMM dimensions. itemsize: bytes per element (4 for float32).
    """

    name: str
    m: int
    n: int
    k: int
    itemsize: int = 4

    @property
    def flops(self) -> int:
        """2 * M * N * K (one multiply and one add per term)."""
        return 2 * self.m * self.n * self.k

    @property
    def min_bytes(self) -> int:
        """Bytes moved if A and B are read once and C written once: (MK + KN + MN) * itemsize."""
        return (self.m * self.k + self.k * self.n + self.m * self.n) * self.itemsize

    @property
    def intensity(self) -> float:
        """Arithmetic intensity in FLOP/byte (the roofline's x axis)."""
        return self.flops / self.min_bytes


def im2col_gemm(layer: ConvConfig, itemsize: int = 4) -> GemmShape:
    """The GEMM a forward convolution becomes under im2col (unrolling).

    The filter bank is a K x (C*R*S) matrix; im2col lays the input's local regions out as a
    (C*R*S) x (N*P*Q) matrix; their product is the K x (N*P*Q) output.

    Returns:
        ``GemmShape(m=K, n=N*P*Q, k=C*R*S)``.

    Source: the study, Section II-B ("unrolling-based convolution") and Figure 4.
    """
    return GemmShape(f"{layer.name} im2col GEMM", m=layer.k, n=layer.n * layer.p * layer.q,
                     k=layer.c * layer.r * layer.s, itemsize=itemsize)


#: The study's Figure 2: share of 10 training iterations (forward + backward) spent in
#: convolution layers, on a Tesla K40c (Section IV-A). The text lists "AlexNet, GoogleNet,
#: OverFeat and VGG" and gives "86%, 89%, 90% and 94% respectively". Reported, not measured here.
STUDY_FIGURE2: dict[str, float] = {"alexnet": 0.86, "googlenet": 0.89, "overfeat": 0.90,
                                   "vgg16": 0.94}

#: The study's Figure 3 (d) (Section IV-B): the kernel-size sweep around (64, 128, 64, 11, 1) on
#: the K40c (a layer's total runtime averaged over 10 iterations; the study does not split it
#: into passes): how many times faster the winner was, as (lowest, highest). Reported, not
#: measured here.
STUDY_FIGURE3_KERNEL: dict[str, tuple[float, float]] = {
    "fbfft faster than cuDNN, kernels above 7 x 7": (1.15, 19.0),
    "cuDNN faster than fbfft, kernels below 7 x 7": (1.21, 2.62),
}

#: The study's Figure 5 (Section V-B): the range of peak GPU memory (MB, from nvidia-smi on the
#: K40c) each implementation used over all the sweeps, as its text reports it (none for
#: Theano-fft). Reported, not measured here.
STUDY_FIGURE_5_MB: dict[str, tuple[int, int]] = {
    "cuda-convnet2": (125, 2076), "Torch-cunn": (170, 2093), "cuDNN": (155, 3810),
    "Caffe": (136, 3809), "Theano-CorrMM": (130, 3709), "fbfft": (1632, 10866),
}

#: The study's Table II (K40c, CUDA 7.5, nvprof; Section V-C): registers per thread and shared
#: memory per block (KB) of each implementation's main convolution kernel, as the study reports.
STUDY_TABLE_II: list[dict] = [
    {"implementation": "Caffe", "strategy": "unrolling", "regs_per_thread": 86, "smem_kb": 8.5},
    {"implementation": "cuDNN", "strategy": "unrolling", "regs_per_thread": 80, "smem_kb": 8.4},
    {"implementation": "Torch-cunn", "strategy": "unrolling", "regs_per_thread": 84,
     "smem_kb": 8.1},
    {"implementation": "Theano-CorrMM", "strategy": "unrolling", "regs_per_thread": 72,
     "smem_kb": 7.0},
    {"implementation": "cuda-convnet2", "strategy": "direct", "regs_per_thread": 116,
     "smem_kb": 16.0},
    {"implementation": "fbfft", "strategy": "FFT", "regs_per_thread": 106, "smem_kb": 10.0},
    {"implementation": "Theano-fft", "strategy": "FFT", "regs_per_thread": 2, "smem_kb": 4.5},
]

#: The study's Figure 6 (nvprof metrics on the K40c, Section V-C), in words, as it reports them.
STUDY_FIGURE_6: dict[str, str] = {
    "achieved occupancy": "mostly under 30 %; cuda-convnet2 14-22 % (116 registers per thread: "
                          "17 active warps of 64, by the study's count)",
    "global load efficiency": "under 20 % for most implementations; Theano-CorrMM 11.64-15.79 %",
    "global store efficiency": "under 60 % for most implementations",
    "shared memory efficiency": "lowest for Theano-fft (8.16-20 %); of the unrolling libraries, "
                                "cuDNN highest, over 130 % in most cases",
    "warp execution efficiency": "above 97 %, except Theano-fft (66-81 %)",
}

#: The study's Figure 4(a-c) (Section V-A): GEMM's share of the runtime of the unrolling
#: implementations at (64, 128, 64, 11, 1) on the K40c, as its text reports them.
STUDY_FIGURE4_GEMM_SHARE: dict[str, float] = {"Caffe": 0.87, "Torch-cunn": 0.83,
                                              "Theano-CorrMM": 0.80}

#: The study's Figure 7 (Section V-D): share of the runtime spent in CPU-GPU copies on the
#: Table I layers, K40c, per implementation, in its words. Caffe's near-0 % comes with a
#: prefetching thread that hides its copies, so a small share need not mean little data crossed.
STUDY_FIGURE_7: dict[str, str] = {
    "cuDNN, Caffe, fbfft": "near 0 %",
    "Torch-cunn, cuda-convnet2, Theano-fft": "1-15 %",
    "Theano-CorrMM": "over 60 % on Conv2 (the only share above 60 %)",
}
