"""Interactive controls: live charts that work in JupyterLab, Colab and VS Code, and the
explorers of notebooks 01 (throughput), 06 (one convolution layer) and 07 (occupancy).

A widget never shows a traceback: a bad value or a configuration too large for the device
shows a message in place of the chart, and the controls stay as the learner left them. The
explorers measure in a separate process, drawing each result as it arrives; displayed, each
carries a static copy of its charts as its fallback for front ends without widgets.
"""

from helpers.widgets.conv_explorer import ConvExplorer
from helpers.widgets.live import LiveChart, figurewidget_supported
from helpers.widgets.occupancy_explorer import OccupancyExplorer
from helpers.widgets.throughput_explorer import ThroughputExplorer

__all__ = ["ConvExplorer", "LiveChart", "OccupancyExplorer", "ThroughputExplorer",
           "figurewidget_supported"]
