"""The study's sweeps (notebook 06): every strategy over batch, input, filters, kernel, stride.

:mod:`.presets`: the sweeps as data (:data:`PRESETS`), running one, the fastest strategy per
point, results/, and the command (``python -m helpers.experiments.sweep``). :mod:`.analysis`:
what the rows show (times by point, the fastest, growth, the study's findings). One point's
timing, :func:`measure` and :func:`refusal`, is :mod:`helpers.experiments.conv_timing`'s.
"""

from helpers.conv import STRATEGIES
from helpers.experiments.conv_timing import ASSUMED_GFLOPS, estimate_seconds, measure, refusal
from helpers.experiments.sweep.analysis import (
    faster_at,
    fastest_at,
    fastest_text,
    findings,
    growth_text,
    times_by,
)
from helpers.experiments.sweep.presets import (
    COMMAND,
    DEVICES,
    FIELDS,
    PREFIX,
    PRESETS,
    Preset,
    SweepPoint,
    estimate,
    fastest_map,
    final,
    main,
    recorded,
    run_preset,
)

__all__ = ["ASSUMED_GFLOPS", "COMMAND", "DEVICES", "FIELDS", "PREFIX", "PRESETS", "Preset",
           "STRATEGIES", "SweepPoint", "estimate", "estimate_seconds", "fastest_at",
           "fastest_text", "faster_at", "fastest_map", "final", "findings", "growth_text", "main",
           "measure", "recorded", "refusal", "run_preset", "times_by"]
