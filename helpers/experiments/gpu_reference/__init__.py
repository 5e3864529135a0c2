"""The GPU reference run (``make gpu-reference``): every recording command within one deadline.

:mod:`.parts`: what is recorded, the commands and their budgets (:data:`PARTS`).
:mod:`.recording`: the run itself, its deadline, resume, archive and headline
(``python -m helpers.experiments.gpu_reference``). :mod:`.process`: what runs inside its one
measuring process (the preflight, each part). :mod:`.summary`: each part's outcome and the
headline ratios.
"""

from helpers.experiments.gpu_reference.parts import PARTS, REFUSED, Part
from helpers.experiments.gpu_reference.recording import (
    ARCHIVE_LIMIT_BYTES,
    DEFAULT_BUDGET_S,
    DRY_RUN_DIR,
    OUT_DIR,
    PREFIX,
    gpu_refusal,
    main,
    new_worker,
    plan,
    print_report,
    run,
    stop_on_signals,
)

__all__ = ["ARCHIVE_LIMIT_BYTES", "DEFAULT_BUDGET_S", "DRY_RUN_DIR", "OUT_DIR", "PARTS", "PREFIX",
           "REFUSED", "Part", "gpu_refusal", "main", "new_worker", "plan", "print_report", "run",
           "stop_on_signals"]
