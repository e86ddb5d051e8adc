"""Numbers with unit suffixes, as users write sizes and counts ("64k", "4M", "1.5G", "1MiB"), and
byte counts for messages. One parser; each caller says which units and forms it accepts (what the
tool it feeds reads: fio and dd, vb-mpibench, the MPI codes' counts)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

BINARY = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}


def parse_suffixed(value: Any, units: Mapping[str, int | float], *, decimals: bool = False, truncate: bool = False,
                   ignore_case: bool = False, ib: bool = False) -> int:
    """A whole number with an optional unit suffix from `units` ({"": 1, "k": 1024, ...}).

    decimals: "1.5M" is read (and must come out whole unless `truncate`, which drops the fraction);
    ignore_case: the text is lower-cased first (so `units` has lower-case keys);
    ib: "i" and "B" may follow the unit ("KiB", "MB", "4096b").
    Ints (and whole floats) pass through. ValueError, without a message, for anything else: each
    caller words its own."""
    if isinstance(value, bool):
        raise ValueError
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    text = str(value).lower() if ignore_case else str(value)
    number = r"\d+(?:\.\d+)?" if decimals else r"\d+"
    letters = re.escape("".join(u for u in units if u))
    m = re.fullmatch(rf"\s*({number})\s*([{letters}]?){'i?b?' if ib else ''}\s*", text)
    if not m:
        raise ValueError
    if not decimals:
        return int(m.group(1)) * int(units[m.group(2)])
    n = float(m.group(1)) * units[m.group(2)]
    if not n.is_integer() and not truncate:
        raise ValueError
    return int(n)


def human(n: float) -> str:
    """Bytes in binary units: '512 B', '1.5 MiB', '2.0 GiB'."""
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024:
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"
