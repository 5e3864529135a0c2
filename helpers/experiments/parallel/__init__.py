"""Data and model parallelism on torch.distributed (notebook 11), when one device is not enough.

:mod:`.launcher`: starts W ranks with torchrun, refuses up front what the machine cannot hold,
collects their rows, models them (Amdahl, weak scaling, the ring all-reduce) and reads results/
(``python -m helpers.experiments.parallel``). :mod:`.ranks`: what each rank runs (DDP steps,
the two-stage pipeline, all-reduce over message sizes).
"""

from helpers.experiments.parallel.launcher import (
    COMMAND,
    EXPERIMENTS,
    PREFIX,
    RANK_MEMORY_BYTES,
    ROW_KEYS,
    STARTUP_S,
    amdahl,
    estimate_seconds,
    failure_cause,
    format_table,
    launch,
    main,
    max_ranks,
    measure,
    recorded,
    refusal,
    ring_allreduce_seconds,
    scaled_speedup,
    usable_cores,
)
from helpers.experiments.parallel.ranks import ddp_bucket_bytes

__all__ = ["PREFIX", "COMMAND", "ROW_KEYS", "EXPERIMENTS", "RANK_MEMORY_BYTES", "STARTUP_S",
           "usable_cores", "max_ranks", "refusal", "estimate_seconds", "launch", "measure",
           "amdahl", "scaled_speedup", "ring_allreduce_seconds", "ddp_bucket_bytes",
           "failure_cause", "recorded", "format_table", "main"]
