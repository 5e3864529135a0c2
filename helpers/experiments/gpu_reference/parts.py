"""The GPU reference run's parts: the workbook's recording commands, each with its budget.

:data:`PARTS` lists them in the order they run, most needed first (tier one: the climb of notebook
13 and Table I against cuDNN in FP32 and TF32, the headline's numbers); each :class:`Part` names
the command's module (its ``main(argv)`` returns an exit status), its arguments on a GPU and for
a dry run on a CPU, and seconds it may take on an H100. Run by
:mod:`helpers.experiments.gpu_reference.recording`.
"""

from __future__ import annotations

import dataclasses

from helpers import results

__all__ = ["PARTS", "REFUSED", "Part"]

#: Exit status of a recording command that has nothing to measure here (no GPU), as distinct
#: from a failure (1) and from bad arguments (2).
REFUSED = results.REFUSED


@dataclasses.dataclass(frozen=True)
class Part:
    """One recording command and its time budget.

    Attributes:
        name: short name (``--parts`` takes these).
        what: one line for the summary.
        module: the command's module; its ``main(argv)`` returns an exit status.
        args: its arguments on a GPU; ``{out}``, ``{limit}`` and ``{slug}`` are filled in.
        dry_args: its arguments for ``--dry-run`` (tiny sizes on the CPU).
        budget_s: seconds it may take on an H100.
        tier: 1 for what the headline and the notebooks' GPU-only cells need, 2 for the rest.
        gpu_only: measures nothing without a GPU (in a dry run it refuses, exit :data:`REFUSED`).
        needs_numba: launches our Numba kernels (skipped when the preflight's kernel fails).
        time_limited: takes ``--time-limit`` and stops itself in time (else it is killed).
    """

    name: str
    what: str
    module: str
    args: tuple[str, ...]
    dry_args: tuple[str, ...]
    budget_s: float
    tier: int
    gpu_only: bool = False
    needs_numba: bool = True
    time_limited: bool = True


_OUT, _LIMIT = ("--out", "{out}"), ("--time-limit", "{limit}")
_X = "helpers.experiments."

#: The parts, in the order they run: tier one (the climb of notebook 13 and Table I against both
#: cuDNN baselines: the headline) first, then the sweep's kernel-size and stride points,
#: notebook 12's layers, and the rest.
PARTS: tuple[Part, ...] = (
    Part("climb", "notebook 13: the GEMM ladder vs cuBLAS FP32 and TF32, im2col and col2im "
         "old and new, direct dx and dW apart, split-K dW", _X + "climb", ("--save", *_OUT, *_LIMIT),
         ("--quick", "--save", *_OUT, *_LIMIT), 150, 1),
    Part("conv-b128", "Table I, every strategy, forward and forward+backward, batch 128, "
         "against cuDNN in FP32 and TF32", _X + "conv_bench",
         ("--batch", "128", "--device", "cuda", "--save", *_OUT, *_LIMIT),
         ("--quick", "--batch", "2", "--device", "cpu", "--save", *_OUT, *_LIMIT), 130, 1),
    Part("sweep", "notebook 06: the study's sweeps (Figures 3 and 5), forward+backward, the "
         "kernel-size and stride sweeps first", _X + "sweep",
         ("--preset", "paper", "--device", "cuda", "--first", "kernel,stride", "--out",
          "{out}/sweep_paper_{slug}.csv", *_LIMIT),
         ("--preset", "smoke", "--device", "cpu", "--first", "kernel,stride", "--out",
          "{out}/sweep_smoke_{slug}.csv", *_LIMIT), 150, 2),
    Part("todays-layers", "notebook 12: every conv layer of three networks timed, five layers",
         _X + "todays_layers", ("--device", "cuda", "--save", *_OUT, *_LIMIT),
         ("--device", "cpu", "--quick", "--save", *_OUT, *_LIMIT), 60, 2, needs_numba=False),
    Part("throughput", "notebook 01: GB/s and GFLOP/s sweeps, our tiled GEMM vs cuBLAS",
         _X + "throughput", (*_OUT, "--devices", "cuda", *_LIMIT),
         (*_OUT, "--devices", "cpu", "--quick", *_LIMIT), 80, 2),
    Part("kernel-resources", "notebook 07: our kernels' registers, shared memory, occupancy",
         _X + "kernel_resources", ("--save", *_OUT, *_LIMIT), ("--save", *_OUT, *_LIMIT), 30, 2,
         gpu_only=True),
    Part("precision", "notebook 10: GEMM and convolution in FP32, TF32, BF16, FP16: speed, error",
         _X + "precision", ("--save", *_OUT, *_LIMIT), ("--save", *_OUT, *_LIMIT), 40, 2,
         gpu_only=True, needs_numba=False),
    Part("phases", "cuDNN's kernels per Table I layer; im2col and FFT steps (Figure 4)",
         _X + "phases", ("--save", *_OUT, *_LIMIT), ("--quick", "--save", *_OUT, *_LIMIT), 40, 2),
    Part("conv-b1", "Table I, every strategy, forward and forward+backward, batch 1",
         _X + "conv_bench", ("--batch", "1", "--device", "cuda", "--save", *_OUT, *_LIMIT),
         ("--quick", "--batch", "1", "--device", "cpu", "--save", *_OUT, *_LIMIT), 60, 2),
    Part("algorithm-choice", "notebook 10: cuDNN's algorithm per Table I layer, ours beside it",
         _X + "algorithm_choice", ("--device", "cuda", "--backward", "--strategies",
                                   "im2col-gemm,fft,winograd", "--save", *_OUT, *_LIMIT),
         ("--device", "cuda", "--save", *_OUT, *_LIMIT), 60, 2, gpu_only=True),
    Part("memory-access", "notebook 07: coalescing, bank conflicts, divergence (timed)",
         _X + "memory_access", ("--save", *_OUT, *_LIMIT), ("--save", *_OUT, *_LIMIT), 40, 2,
         gpu_only=True),
    Part("transfers", "notebook 08: copy bandwidth, overlap, copy share (Figure 7)",
         _X + "transfers", ("--save", *_OUT, *_LIMIT), ("--save", *_OUT, *_LIMIT), 60, 2,
         gpu_only=True, needs_numba=False),
    Part("hotspots", "notebook 02: time per layer type in four networks (Figure 2)",
         _X + "hotspots", ("--model", "all", "--save", *_OUT, *_LIMIT),
         ("--model", "overfeat", "--device", "cpu", "--batch", "1", "--input", "71",
          "--iterations", "1", "--threads", "1", "--save", *_OUT, *_LIMIT), 120, 2,
         needs_numba=False),
    Part("training", "notebook 09: training throughput, workers, depth, precision",
         _X + "training.throughput", ("--save", *_OUT, *_LIMIT),
         ("--quick", "--save", *_OUT, *_LIMIT), 150, 2, needs_numba=False),
    Part("parallel", "notebook 11: DDP scaling over ranks, pipeline bubble, all-reduce bandwidth",
         _X + "parallel", ("--save", *_OUT, *_LIMIT),
         ("--quick", "--ranks", "2", "--save", *_OUT, *_LIMIT), 80, 2, needs_numba=False),
)
