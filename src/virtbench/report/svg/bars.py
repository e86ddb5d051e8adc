"""Horizontal bar charts: grouped bars with CI whiskers and value labels; stacked phase bars."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable

from .canvas import Canvas, text_width
from .scale import Scale, nice_max

WIDTH = 760
FONT = 11
BAR = 15  # px per bar
GAP = 9  # px between groups
LOG_SPAN = 20  # max/min ratio beyond which a linear axis would hide the small bars
LABEL_CHARS = 48  # longer group labels are cut (the full text is in the table and the bar's tooltip)
TOP, BOTTOM = 10, 46  # room above; room below for tick labels and the axis title

Item = tuple[float, float | None, float | None, str]  # value, ci low, ci high, mark


def bars(uid: str, title: str, groups: list[str], series: list[str], get: Callable[[str, str], Item | None],
         xlabel: str, *, refline: float | None = None, bold: Iterable[str] = (),
         style_of: Callable[[str], int] | None = None, digits: Callable[[float], str] = str) -> str:
    """get(group, series) -> (value, ci_low, ci_high, mark) or None ('no data' is written instead)."""
    bold = set(bold)
    n = max(1, len(series))
    shown = {g: g if len(g) <= LABEL_CHARS else g[:LABEL_CHARS - 1] + "…" for g in groups}
    items = {(g, s): get(g, s) for g in groups for s in series}
    labels = {}
    for (g, s), it in items.items():
        prefix = f"{s}: " if n > 1 else ""
        labels[(g, s)] = (f"{prefix}no data" if it is None or it[0] is None
                          else f"{prefix}{digits(it[0])} {it[3]}".rstrip())
    ends = [max(it[0], it[2] if it[2] is not None else it[0]) for it in items.values() if it and it[0] is not None]
    starts = [min(it[0], it[1] if it[1] is not None else it[0]) for it in items.values() if it and it[0] is not None]
    # Ratios spanning more than LOG_SPAN are drawn on a log axis, as bars from 1 (> 1 right, < 1 left).
    log = bool(refline and starts and min(starts) > 0 and max(ends + [refline]) / min(starts + [refline]) > LOG_SPAN)
    left = 14 + max((text_width(g, FONT) for g in shown.values()), default=20)
    right_pad = 10 + max((text_width(t, FONT - 1) for t in labels.values()), default=20)
    height = TOP + len(groups) * (n * BAR + GAP) + BOTTOM
    c = Canvas(uid, WIDTH, height)
    if log:
        lo_e, hi_e = math.floor(math.log10(min(starts + [refline]))), math.ceil(math.log10(max(ends + [refline])))
        x = Scale(10.0 ** lo_e, 10.0 ** hi_e, left, WIDTH - right_pad, log=True)
        origin = refline
        xlabel += " (log scale)"
    else:
        x = Scale(0.0, nice_max(max(ends + [refline or 0.0]) or 1.0), left, WIDTH - right_pad)
        origin = 0.0
    plot_bottom = height - BOTTOM
    for v, label in x.ticks():
        c.line(x(v), TOP, x(v), plot_bottom, color="#ddd", width=0.8)
        c.line(x(v), plot_bottom, x(v), plot_bottom + 4)
        c.text(x(v), plot_bottom + 13, label, size=FONT - 1, anchor="middle")
    c.line(left, plot_bottom, WIDTH - right_pad, plot_bottom)
    c.line(left, TOP, left, plot_bottom)
    c.text((left + WIDTH - right_pad) / 2, height - 12, xlabel, size=FONT, anchor="middle")
    y = TOP + GAP / 2
    for g in groups:
        c.text(left - 6, y + n * BAR / 2, shown[g], size=FONT, anchor="end", bold=g in bold)
        for si, s in enumerate(series):
            it = items[(g, s)]
            mid = y + si * BAR + BAR / 2
            if it is None or it[0] is None:
                c.text(left + 4, mid, labels[(g, s)], size=FONT - 1, italic=True)
                continue
            value, lo, hi, _ = it
            k = style_of(s) if style_of else si
            a, b = sorted((x(origin), x(value)))
            c.rect(a, mid - BAR * 0.42, b - a, BAR * 0.84, c.fill(k), title=f"{g}, {labels[(g, s)]}")
            end = value
            if lo is not None and hi is not None:
                c.line(x(lo), mid, x(hi), mid, width=1.2)
                for edge in (lo, hi):
                    c.line(x(edge), mid - 4, x(edge), mid + 4, width=1.2)
                end = max(value, hi)
            c.text(x(end) + 4, mid, labels[(g, s)], size=FONT - 1, bold=g in bold)
        y += n * BAR + GAP
    if refline is not None:
        c.line(x(refline), TOP, x(refline), plot_bottom, width=1, dash="5 3")
    return c.render(title)


def stacked(uid: str, title: str, rows: list[str], segments: list[str], values: list[list[float | None]],
            xlabel: str, *, total: Callable[[float], str] = lambda t: f"{t:.2f} s",
            digits: list[int] | None = None) -> str:
    """One bar per row made of consecutive segments (e.g. start-up phases); a legend names them.
    `digits`: decimals of each row's segment lengths (a row timed in whole seconds says no more)."""
    left = 14 + max((text_width(r, FONT) for r in rows), default=20)
    totals = [sum(v for v in vals if v) for vals in values]
    top_value = nice_max(max(totals, default=1.0) or 1.0)
    legend_h = 24
    height = TOP + len(rows) * (BAR + GAP) + BOTTOM + legend_h
    c = Canvas(uid, WIDTH, height)
    x = Scale(0.0, top_value, left, WIDTH - 70)
    plot_bottom = TOP + len(rows) * (BAR + GAP)
    for v, label in x.ticks():
        c.line(x(v), TOP, x(v), plot_bottom, color="#ddd", width=0.8)
        c.text(x(v), plot_bottom + 13, label, size=FONT - 1, anchor="middle")
    c.line(left, plot_bottom, WIDTH - 70, plot_bottom)
    c.text((left + WIDTH - 70) / 2, plot_bottom + 32, xlabel, size=FONT, anchor="middle")
    for i, (row, vals) in enumerate(zip(rows, values)):
        mid = TOP + i * (BAR + GAP) + GAP / 2 + BAR / 2
        c.text(left - 6, mid, row, size=FONT, anchor="end")
        start = 0.0
        for k, v in enumerate(vals):
            if v:
                c.rect(x(start), mid - BAR * 0.42, x(start + v) - x(start), BAR * 0.84, c.fill(k + 1),
                       title=f"{row}: {segments[k]} {v:.{3 if digits is None else digits[i]}f} s")
                start += v
        c.text(x(start) + 4, mid, total(start), size=FONT - 1)
    lx = left
    for k, name in enumerate(segments):
        c.rect(lx, height - legend_h + 2, 14, 11, c.fill(k + 1))
        c.text(lx + 18, height - legend_h + 8, name, size=FONT - 1)
        lx += 30 + text_width(name, FONT - 1)
    return c.render(title)
