"""A learner's copy of a notebook or lab (``my-work/``) keeps the imports of the layout it was
copied from: the modules that moved into packages stay importable by their old names, with every
name those notebooks read from them.

The import lines and names below are those of the notebooks and labs before the families became
packages; each must still run and reach the same objects as the new names.
"""

from __future__ import annotations

import importlib

import pytest

#: (old import line, the alias it binds, the names the old notebooks read through it, the module
#: the alias must be now).
OLD = [
    ("from helpers.experiments import transfer_model", "transfer_model",
     ["LINKS", "SCENARIOS", "estimate", "estimate_channels", "estimate_share",
      "estimated_timeline", "layer_bytes", "layer_for"], "helpers.experiments.transfers.model"),
    ("from helpers.experiments import transfer_streams", "transfer_streams",
     ["event_times", "pipelined_run"], "helpers.experiments.transfers.streams"),
    ("from helpers.experiments import training_throughput", "training_throughput",
     ["REVIEW", "batch_size_sweep", "depth_sweep", "format_table", "precision_sweep", "recorded",
      "speedup_table", "time_steps", "utilisation_trace", "workers_sweep"],
     "helpers.experiments.training.throughput"),
    ("from helpers.experiments import parallel_ranks", "parallel_ranks",
     ["_run_ddp", "_run_pipeline", "split_resnet"], "helpers.experiments.parallel.ranks"),
    ("from helpers.experiments import todays_layers_compare as tc", "tc",
     ["REPRESENTATIVE", "bytes_moved", "compare", "intensity", "layer_type", "tolerance"],
     "helpers.experiments.todays_layers.compare"),
    ("from helpers.experiments import todays_layers_findings as tlf", "tlf",
     ["findings", "library_lines"], "helpers.experiments.todays_layers.findings"),
    ("from helpers.checks import lab7, lab7_data", "lab7_data",
     ["layer_stages", "timeline_text"], "helpers.checks.lab7.data"),
    ("from helpers.checks import lab9, lab9_sim", "lab9_sim", ["run_ranks"],
     "helpers.checks.lab9.sim"),
    ("from helpers.figures import nb03_direct", "nb03_direct",
     ["tiled_block_footprint", "tiled_halo_figure", "tiled_thread_map", "thread_map_figure"],
     "helpers.figures.nb03_direct"),
    ("from helpers.figures import nb07_inside_the_gpu", "nb07_inside_the_gpu",
     ["gpu_anatomy", "gpu_anatomy_figure"], "helpers.figures.nb07_inside_the_gpu"),
]


@pytest.mark.parametrize("line, alias, names, now", OLD, ids=[o[0] for o in OLD])
def test_an_older_notebooks_import_still_runs(line, alias, names, now):
    scope: dict = {}
    exec(line, scope)  # noqa: S102 - the notebooks' own import line
    module = scope[alias]
    assert module is importlib.import_module(now)
    missing = [n for n in names if not hasattr(module, n)]
    assert not missing, f"{line}: {alias} has no {missing}"


def test_an_unknown_name_is_still_an_import_error():
    with pytest.raises(ImportError, match="transfer_modle"):
        exec("from helpers.experiments import transfer_modle", {})  # noqa: S102
    with pytest.raises(ImportError, match="lab7_dta"):
        exec("from helpers.checks import lab7_dta", {})  # noqa: S102
    import helpers.figures.nb03_direct as nb03

    with pytest.raises(AttributeError, match="no attribute 'tiled_halo'"):
        nb03.tiled_halo  # noqa: B018
