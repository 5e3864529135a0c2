"""One entry per experiment of the workbook, each with the same small face where it applies:
``estimate()`` (what the model predicts), ``measure()`` (a live run), ``recorded()`` (rows from
``results/``) and ``main()`` (its command line, ``python -m helpers.experiments.NAME``). An
experiment that needs several modules is a package (``training/``, ``transfers/`` ...) whose
``__init__`` is that face.
"""

import importlib

#: Modules of the earlier, flat layout and where they are now: ``from helpers.experiments import
#: transfer_model`` still works, so that a learner's copy of an older notebook keeps running.
MOVED = {"transfer_model": "transfers.model", "transfer_streams": "transfers.streams",
         "training_throughput": "training.throughput", "parallel_ranks": "parallel.ranks",
         "todays_layers_compare": "todays_layers.compare",
         "todays_layers_findings": "todays_layers.findings"}


def __getattr__(name: str):
    if name in MOVED:
        return importlib.import_module(f"{__name__}.{MOVED[name]}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
