"""Hotspot layers: the share of CNN training time each layer type takes (the study's Figure 2).

:mod:`.profiling` trains the four networks of :mod:`helpers.networks.figure2` for a few
iterations under ``torch.profiler`` and splits the time by layer type (:func:`measure`,
:func:`format_table`, :func:`compare_with_study`, :func:`main`); :mod:`.budget` refuses runs
that would take far too long (:func:`estimate`, :func:`refusal`); :mod:`.records` reads and
writes the GPU profiles in ``results/hotspots_*`` (:func:`recorded`, :func:`save`)::

    python -m helpers.experiments.hotspots --model alexnet|googlenet|vgg16|overfeat|all [--batch N
        --input S --iterations I --warmup W --device cpu|cuda --threads T --budget S --save
        --out DIR --time-limit S]

Units: seconds; input size in pixels (height = width); batch in images. Source: Li et al.,
"Performance Analysis of GPU-based Convolutional Neural Networks", ICPP 2016, IV-A, Figure 2.
"""

from helpers.experiments.hotspots import budget, profiling, records
from helpers.experiments.hotspots.budget import ASSUMED_EFFICIENCY, estimate, refusal
from helpers.experiments.hotspots.profiling import (
    CPU_DEFAULTS,
    GPU_DEFAULTS,
    compare_with_study,
    format_table,
    main,
    measure,
    profile_models,
)
from helpers.experiments.hotspots.records import COMMAND, PREFIX, RecordedProfiles, recorded, save
from helpers.paper import STUDY_FIGURE2

__all__ = ["ASSUMED_EFFICIENCY", "COMMAND", "CPU_DEFAULTS", "GPU_DEFAULTS", "PREFIX",
           "STUDY_FIGURE2", "RecordedProfiles", "compare_with_study", "estimate", "format_table",
           "main", "measure", "profile_models", "recorded", "refusal", "save", "budget",
           "profiling", "records"]
