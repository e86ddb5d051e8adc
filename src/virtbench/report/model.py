"""The report as data: documents, parts, sections and blocks, independent of the output format.

Sections build these; html.py, markdown.py and figures.py turn them into files.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Union


@dataclass
class Table:
    caption: str
    columns: list[str]
    rows: list[list[str]]
    # Optional per-row attributes (cell key, metric, environment): emitted as data-* in HTML so
    # tests and scripts can find a row without parsing its text.
    keys: list[dict[str, str]] | None = None
    numeric: set[int] = field(default_factory=set)  # column indexes to right-align
    note: str = ""
    collapsed: bool = False  # long tables: shown folded in HTML (still in the file)


@dataclass
class Note:
    text: str
    level: str = "info"  # info | warn


@dataclass
class Chart:
    """A figure: `draw(uid)` returns its SVG (uid keeps its pattern ids unique in a page); always
    followed by its data table."""

    id: str
    title: str
    description: str  # what the chart shows, for the caption and for screen readers
    draw: Callable[[str], str]
    table: Table
    rendered: tuple[str, bytes | None] | None = None  # (SVG, PNG) once drawn; charts.render caches here


@dataclass
class Facts:
    """A two-column list of labelled values (run summary)."""

    items: list[tuple[str, str]]


Block = Union[Table, Note, Chart, Facts]


@dataclass
class Section:
    id: str
    title: str
    blocks: list[Block] = field(default_factory=list)
    intro: str = ""


@dataclass
class Part:
    """Everything about one run (or one comparison)."""

    id: str
    title: str
    sections: list[Section]


@dataclass
class Document:
    title: str
    generated_at: float
    parts: list[Part]
    legend: str = ""

    def charts(self) -> list[Chart]:
        return [b for p in self.parts for s in p.sections for b in s.blocks if isinstance(b, Chart)]
