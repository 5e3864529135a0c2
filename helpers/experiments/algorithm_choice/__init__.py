"""Which algorithm the libraries choose per layer: cuDNN on a GPU, oneDNN on the CPU.

:mod:`.choices` measures it (:func:`measure`, :func:`choices_along`, :func:`recorded`,
:func:`main`); :mod:`.cudnn_kernels` names the CUDA kernels a warm cuDNN call ran
(:func:`family_of_kernel`, :func:`main_algorithm`); :mod:`.onednn_verbose` reads the
implementation oneDNN printed (:func:`parse_onednn`). Layers in the study's (b, i, f, k, s)
plus channels c; times in ms. Command line: ``python -m helpers.experiments.algorithm_choice``.

Source: Li et al., ICPP 2016, Table I and Figure 3; cuDNN's algorithm enums
(cudnnConvolutionFwdAlgo_t); oneDNN's verbose mode documentation.
"""

from helpers.experiments.algorithm_choice import choices, cudnn_kernels, onednn_verbose
from helpers.experiments.algorithm_choice.choices import (
    COMMAND,
    FIELDS,
    PARAMETERS,
    PASSES,
    PREFIX,
    TABLE_COLUMNS,
    choices_along,
    cpu_choice,
    format_table,
    gpu_choice,
    gpu_reason,
    main,
    measure,
    recorded,
    summary,
    torch_backend,
)
from helpers.experiments.algorithm_choice.cudnn_kernels import (
    FAMILIES,
    family_of_kernel,
    kernel_times,
    main_algorithm,
    short_kernel_name,
)
from helpers.experiments.algorithm_choice.onednn_verbose import (
    capture_fd,
    family_of_onednn,
    parse_onednn,
)

__all__ = [
    "FAMILIES", "PASSES", "PARAMETERS", "FIELDS", "TABLE_COLUMNS", "PREFIX", "COMMAND",
    "family_of_kernel", "short_kernel_name", "kernel_times", "main_algorithm",
    "family_of_onednn", "parse_onednn", "capture_fd", "torch_backend", "gpu_reason",
    "gpu_choice", "cpu_choice", "measure", "choices_along", "summary", "recorded",
    "format_table", "main", "choices", "cudnn_kernels", "onednn_verbose",
]
