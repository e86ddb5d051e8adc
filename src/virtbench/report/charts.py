"""Chart output: the SVG a chart draws (inlined in HTML, or a file), and PNG for --figures.

PNG is rasterized from the same SVG by rsvg-convert (Debian: librsvg2-bin), so both files agree.
"""

from __future__ import annotations

import re
import shutil
import subprocess

from ..errors import MissingTool, UserError
from .model import Chart


def render(chart: Chart, *, with_png: bool = False) -> tuple[str, bytes | None]:
    """(standalone SVG text, PNG bytes or None); drawn once and cached on the chart."""
    if chart.rendered is None:
        chart.rendered = (chart.draw(chart.id), None)
    if with_png and chart.rendered[1] is None:
        chart.rendered = (chart.rendered[0], png(chart.rendered[0]))
    return chart.rendered


def inline(svg_text: str, label_id: str) -> str:
    """The SVG as embedded in HTML: labelled by its caption, and scaling with the page (viewBox only)."""
    text = re.sub(r'^<svg ([^>]*?) width="[^"]*" height="[^"]*"', r"<svg \1", svg_text, count=1)
    return text.replace("<svg ", f'<svg role="img" aria-labelledby="{label_id}" ', 1)


def png(svg_text: str, zoom: float = 2.0) -> bytes:
    tool = shutil.which("rsvg-convert")
    if tool is None:
        raise MissingTool("rsvg-convert", "librsvg2-bin", "to write PNG figures")
    res = subprocess.run([tool, "--format", "png", "--zoom", str(zoom), "--background-color", "white"],
                         input=svg_text.encode(), capture_output=True, timeout=60)
    if res.returncode != 0:
        raise UserError(f"rsvg-convert could not rasterize a chart: {res.stderr.decode(errors='replace')[:300]}")
    return res.stdout
