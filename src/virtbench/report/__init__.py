"""Reports: one self-contained HTML file (or Markdown) with the studies' figures, from stored runs.

    report.write(store, ["RUN_ID"], "out.html")            # HTML
    report.write(store, ["RUN_ID"], "out.md", fmt="md")   # Markdown tables
    report.write_compare(store, "A", "B", "ab.html")       # two runs side by side
"""

from __future__ import annotations

from pathlib import Path

from ..errors import UserError
from ..store import Store
from . import build, compare, figures, html, markdown
from .model import Document


def _unique_ids(doc: Document) -> None:
    """Chart and section ids become HTML ids and file names: make repeats unique."""
    seen: set[str] = set()
    for thing in [s for p in doc.parts for s in p.sections] + doc.charts():
        base, k = thing.id, 2
        while thing.id in seen:
            thing.id, k = f"{base}-{k}", k + 1
        seen.add(thing.id)


def emit(doc: Document, output: str | Path | None, fmt: str = "html", figures_dir: str | Path | None = None) -> str:
    """Render a built Document to text (and the file, and the figures); returns the text."""
    _unique_ids(doc)
    if figures_dir:
        figures.write(doc, figures_dir)
    if fmt == "md":
        files = {c.id: str(Path(figures_dir) / f"{c.id}.svg") for c in doc.charts()} if figures_dir else {}
        text = markdown.render(doc, files)
    elif fmt == "html":
        text = html.render(doc)
    else:
        raise UserError(f"unknown report format '{fmt}'", "use html or md")
    if output is not None:
        try:
            Path(output).write_text(text, encoding="utf-8")
        except OSError as exc:
            raise UserError(f"cannot write the report to {output}: {exc.strerror}") from None
    return text


def write(store: Store, run_ids: list[str], output: str | Path | None, *, fmt: str = "html",
          figures_dir: str | Path | None = None, margin: float | None = None) -> str:
    return emit(build.document(store, list(run_ids), margin), output, fmt, figures_dir)


def write_compare(store: Store, run_a: str, run_b: str, output: str | Path | None, *, fmt: str = "html",
                  margin: float | None = None) -> str:
    return emit(compare.document(store, run_a, run_b, margin), output, fmt, None)


__all__ = ["write", "write_compare", "emit", "Document"]
