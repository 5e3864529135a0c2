"""One entry per experiment of the workbook, each with the same small face where it applies:
``estimate()`` (what the model predicts), ``measure()`` (a live run), ``recorded()`` (rows from
``results/``) and ``main()`` (its command line, ``python -m helpers.experiments.NAME``). An
experiment that needs several modules is a package (``training/``, ``transfers/`` ...) whose
``__init__`` is that face.
"""
