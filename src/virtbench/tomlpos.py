"""Line numbers for keys of a TOML file, so suite errors can say 'file:line'.

tomllib gives values but no positions; this scans the text for table headers and `key =` lines.
"""

from __future__ import annotations

import re

_HEADER = re.compile(r"^\s*(\[\[?)\s*([^\]]+?)\s*\]\]?")
_KEY = re.compile(r"^\s*([A-Za-z0-9_.\-\"' ]+?)\s*=")


def _split(dotted: str) -> tuple[str, ...]:
    return tuple(part.strip().strip("\"'") for part in dotted.split("."))


def key_lines(text: str) -> dict[tuple, int]:
    """Map key paths (with list indexes for [[arrays]]) to 1-based line numbers."""
    lines: dict[tuple, int] = {}
    table: tuple = ()
    array_index: dict[tuple[str, ...], int] = {}
    for lineno, line in enumerate(text.splitlines(), 1):
        stripped = line.split("#", 1)[0] if '"' not in line and "'" not in line else line
        m = _HEADER.match(stripped)
        if m:
            parts = _split(m.group(2))
            if m.group(1) == "[[":
                array_index[parts] = array_index.get(parts, -1) + 1
            table = _resolve(parts, array_index)
            lines.setdefault(table, lineno)
            continue
        m = _KEY.match(stripped)
        if m:
            lines.setdefault(table + _split(m.group(1)), lineno)
    return lines


def _resolve(parts: tuple[str, ...], array_index: dict[tuple[str, ...], int]) -> tuple:
    """[workloads.params] inside the 2nd [[workloads]] -> ('workloads', 1, 'params')."""
    out: list = []
    for i, part in enumerate(parts):
        out.append(part)
        prefix = parts[: i + 1]
        if prefix in array_index:
            out.append(array_index[prefix])
    return tuple(out)


def line_of(lines: dict[tuple, int], path: tuple) -> int | None:
    """The line of `path`, or of its nearest enclosing table that has one."""
    for end in range(len(path), 0, -1):
        if path[:end] in lines:
            return lines[path[:end]]
    return None
