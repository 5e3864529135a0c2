"""Charts (plotly): :mod:`~helpers.figures.style`, one module per notebook (``nbNN_*``), and
:mod:`~helpers.figures.colab_renderer` (how Colab draws them).

Only the notebooks, :mod:`helpers.widgets` and :mod:`helpers.notebook` import these modules.
"""
