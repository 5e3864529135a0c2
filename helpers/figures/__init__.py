"""Charts (plotly): :mod:`~helpers.figures.style` and one module per notebook (``nbNN_*``).

Only the notebooks and :mod:`helpers.widgets` import these modules.
"""
