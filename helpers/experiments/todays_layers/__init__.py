"""Today's layers (notebook 12): depthwise, grouped, 1x1 and dilated convolutions, where FLOPs
stop predicting time.

:mod:`.networks`: three of today's networks layer by layer (costs, times, shares, rooflines),
results/ and the command (``python -m helpers.experiments.todays_layers``). :mod:`.compare`:
the layer types, and our strategies beside the library on five representative layers.
:mod:`.findings`: the notebook's readings of those rows.
"""

from helpers.experiments.todays_layers.networks import (
    CEILING_BUDGET_S,
    CEILING_SIZES,
    COMMAND,
    CPU_THREADS,
    FIELDS,
    INPUT_SIZE,
    LAYER_COLUMNS,
    LAYER_TYPES,
    MIN_RUN_TIME,
    NETWORKS,
    PREFIX,
    REPRESENTATIVE,
    STRATEGY_COLUMNS,
    build,
    ceilings,
    config_of,
    format_table,
    linear_flops,
    list_layers,
    main,
    measure,
    missing_requirement,
    recorded,
    roof,
    shares,
    time_layers,
    value_of,
)

__all__ = ["CEILING_BUDGET_S", "CEILING_SIZES", "COMMAND", "CPU_THREADS", "FIELDS", "INPUT_SIZE",
           "LAYER_COLUMNS", "LAYER_TYPES", "MIN_RUN_TIME", "NETWORKS", "PREFIX", "REPRESENTATIVE",
           "STRATEGY_COLUMNS", "build", "ceilings", "config_of", "format_table", "linear_flops",
           "list_layers", "main", "measure", "missing_requirement", "recorded", "roof", "shares",
           "time_layers", "value_of"]
