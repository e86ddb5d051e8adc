"""Document -> Markdown: the same tables (and notes), for papers and issue trackers."""

from __future__ import annotations

from . import fmt
from .model import Chart, Document, Facts, Note, Table


def _cell(text: str) -> str:
    # A pipe or newline inside a cell would break the table; '<' stays text in renderers that allow HTML.
    return str(text).replace("\\", "\\\\").replace("|", "\\|").replace("\n", " ").replace("<", "&lt;")


def _table(t: Table, figure: str | None = None) -> list[str]:
    lines = [f"**{_cell(t.caption)}**" + (f" (figure: `{figure}`)" if figure else ""), ""]
    lines.append("| " + " | ".join(_cell(c) for c in t.columns) + " |")
    lines.append("|" + "|".join("---:" if i in t.numeric else "---" for i in range(len(t.columns))) + "|")
    lines += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in t.rows]
    if t.note:
        lines += ["", f"_{_cell(t.note)}_"]
    return lines + [""]


def render(doc: Document, figure_files: dict[str, str] | None = None) -> str:
    figure_files = figure_files or {}
    out = [f"# {_cell(doc.title)}", "", f"Generated {fmt.when(doc.generated_at)}.", ""]
    if doc.legend:
        out += [_cell(doc.legend), ""]
    for part in doc.parts:
        out += [f"## {_cell(part.title)}", ""]
        for s in part.sections:
            out += [f"### {_cell(s.title)}", ""]
            if s.intro:
                out += [_cell(s.intro), ""]
            for b in s.blocks:
                if isinstance(b, Facts):
                    out += _table(Table("Run", ["", ""], [[k, v] for k, v in b.items]))
                elif isinstance(b, Note):
                    out += [("> **Warning:** " if b.level == "warn" else "> ") + _cell(b.text), ""]
                elif isinstance(b, Table):
                    out += _table(b)
                elif isinstance(b, Chart):
                    out += _table(b.table, figure_files.get(b.id))
    return "\n".join(out).rstrip() + "\n"
