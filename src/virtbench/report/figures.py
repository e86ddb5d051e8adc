"""--figures DIR: every chart as <id>.svg and <id>.png (for slides and papers)."""

from __future__ import annotations

from pathlib import Path

from ..errors import UserError
from . import charts
from .model import Document


def write(doc: Document, directory: str | Path) -> None:
    out = Path(directory)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UserError(f"cannot create the figures directory {out}: {exc.strerror}") from None
    for chart in doc.charts():
        svg, png = charts.render(chart, with_png=True)
        (out / f"{chart.id}.svg").write_text(svg)
        (out / f"{chart.id}.png").write_bytes(png)
