"""Charts (plotly): :mod:`~helpers.figures.style` and one module per notebook (``nbNN_*``).

Only the notebooks, :mod:`helpers.widgets` and :mod:`helpers.notebook` import these modules.
"""
