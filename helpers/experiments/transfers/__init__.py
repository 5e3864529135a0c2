"""CPU-GPU copies (notebook 08): their bandwidth, their overlap with compute, their share.

:mod:`.model`: the analytic model (copy time at a stated link bandwidth beside compute at a
datasheet peak; the schedule in chunks). :mod:`.streams`: how a copy and a convolution run and
are timed on a GPU (pinned buffers, events, streams). :mod:`.measured`: the three measured
experiments and results/. :mod:`.command`: all of them in one run, and its command line
(``python -m helpers.experiments.transfers``).
"""

from helpers.experiments.transfers.command import format_table, main, measure
from helpers.experiments.transfers.measured import (
    BANDWIDTH_FIELDS,
    COMMAND,
    DEFAULT_SIZES,
    DIRECTIONS,
    EXPERIMENTS,
    MEMORY_KINDS,
    OUTPUT_TOLERANCE,
    OVERLAP_FIELDS,
    PREFIX,
    SHARE_FIELDS,
    TIMELINE_FIELDS,
    TRANSFER_STRATEGIES,
    copy_bandwidth,
    gpu_reason,
    overlap_experiment,
    recorded,
    transfer_share,
)
from helpers.experiments.transfers.model import estimate

__all__ = ["DIRECTIONS", "MEMORY_KINDS", "TRANSFER_STRATEGIES", "DEFAULT_SIZES", "PREFIX",
           "COMMAND", "EXPERIMENTS", "OUTPUT_TOLERANCE", "BANDWIDTH_FIELDS", "OVERLAP_FIELDS",
           "SHARE_FIELDS", "TIMELINE_FIELDS", "gpu_reason", "copy_bandwidth", "overlap_experiment",
           "transfer_share", "estimate", "measure", "recorded", "format_table", "main"]
