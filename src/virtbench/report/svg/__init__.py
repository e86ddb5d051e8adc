"""Hand-built SVG charts: grouped and stacked horizontal bars, lines with error bars, linear and log
axes. Chosen over matplotlib to keep reports fast (no second-long import, milliseconds per chart)
and small; every series differs by hatch pattern, marker or dash pattern, never by colour alone.
"""

from .bars import bars, stacked
from .canvas import Canvas
from .lines import Line, lines

__all__ = ["Canvas", "Line", "bars", "lines", "stacked"]
