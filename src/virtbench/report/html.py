"""Document -> one self-contained HTML file: inline CSS and SVG, no scripts, no requests.

Jinja2 autoescapes every value; only chart SVG is inserted raw, and svg/canvas.py escapes every text
it writes.
"""

from __future__ import annotations

from importlib import resources

import jinja2

from .. import __version__
from . import charts, fmt
from .model import Document

_env: jinja2.Environment | None = None


def _jinja() -> jinja2.Environment:
    global _env
    if _env is None:
        _env = jinja2.Environment(loader=jinja2.PackageLoader("virtbench.report", "templates"),
                                  autoescape=True, trim_blocks=True, lstrip_blocks=True,
                                  undefined=jinja2.StrictUndefined)
        _env.filters["kind"] = lambda obj: type(obj).__name__
    return _env


def render(doc: Document) -> str:
    inline = {c.id: charts.inline(charts.render(c)[0], f"{c.id}-cap") for c in doc.charts()}
    css = resources.files("virtbench.report").joinpath("templates/style.css").read_text()
    return _jinja().get_template("report.html.j2").render(
        doc=doc, svgs=inline, css=css, version=__version__, generated=fmt.when(doc.generated_at))
