"""Line charts: one line per series with its own marker and dash pattern, optional CI error bars,
linear or log axes, labels at the line ends and a legend below. Coordinates are computed with numpy:
a time series has thousands of points."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from .canvas import COLORS, DASHES, Canvas, text_width
from .scale import Scale, nice_max

WIDTH, FONT = 760, 11


@dataclass
class Line:
    label: str
    x: Sequence[float]
    y: Sequence[float]
    lo: Sequence[float | None] | None = None  # CI bounds, absolute
    hi: Sequence[float | None] | None = None
    style: int = 0
    reference: bool = False  # an ideal/reference line: black, dotted, no markers


def _arr(values) -> np.ndarray:
    return np.array([np.nan if v is None else v for v in values], dtype=float) if values is not None else None


def _usable(v: np.ndarray, log: bool) -> np.ndarray:
    ok = np.isfinite(v)
    return ok & (v > 0) if log else ok


def lines(uid: str, title: str, series: list[Line], xlabel: str, ylabel: str, *, log_x: bool = False,
          log_y: bool = False, end_labels: bool = True, markers: int = 10, height: float = 330) -> str:
    data = []
    for s in series:
        x, y = np.asarray(s.x, dtype=float), np.asarray(s.y, dtype=float)
        lo, hi = _arr(s.lo), _arr(s.hi)
        ok = _usable(x, log_x) & _usable(y, log_y)
        data.append((s, x[ok], y[ok], None if lo is None else lo[ok], None if hi is None else hi[ok]))
    all_x = np.concatenate([d[1] for d in data] or [np.empty(0)])
    all_y = np.concatenate([d[2] for d in data] + [h[_usable(h, log_y)] for *_, h in data if h is not None]
                           or [np.empty(0)])
    if not all_x.size or not all_y.size:
        all_x, all_y = np.array([1.0, 10.0]), np.array([1.0, 10.0])
    legend_rows = math.ceil(len(series) / 4)
    c = Canvas(uid, WIDTH, height + 18 * legend_rows + 8)
    right, top, bottom = WIDTH - (120 if end_labels else 20), 12, height - 44
    y_min, y_max = float(all_y.min()), float(all_y.max())
    if log_y:
        y = Scale(10 ** math.floor(math.log10(y_min)), 10 ** math.ceil(math.log10(y_max)), bottom, top, log=True)
    else:
        y = Scale(min(0.0, y_min), nice_max(y_max * 1.05) if y_max > 0 else 1.0, bottom, top)  # headroom
    y_ticks = y.ticks(6)
    left = 34 + max((text_width(label, FONT - 1) for _, label in y_ticks), default=30)
    x = Scale(float(all_x.min()), float(all_x.max()), left, right, log=log_x)
    x_ticks = x.ticks(8)
    if np.all(np.mod(all_x, 1) == 0):  # cores, ranks, replicas: no fractional ticks
        x_ticks = [(v, label) for v, label in x_ticks if float(v).is_integer()]
    for v, label in x_ticks:
        c.line(x(v), top, x(v), bottom, color="#e3e3e3", width=0.8)
        c.text(x(v), bottom + 13, label, size=FONT - 1, anchor="middle")
    for v, label in y_ticks:
        c.line(left, y(v), right, y(v), color="#e3e3e3", width=0.8)
        c.text(left - 5, y(v), label, size=FONT - 1, anchor="end")
    c.line(left, bottom, right, bottom)
    c.line(left, top, left, bottom)
    c.text((left + right) / 2, bottom + 30, xlabel, size=FONT, anchor="middle")
    c.text(14, (top + bottom) / 2, ylabel, size=FONT, anchor="middle", rotate=True)
    ends: list[list] = []  # [y, x, label] of each line's end label
    for s, xs, ys, lo, hi in data:
        if not xs.size:
            continue
        px, py = x.many(xs), y.many(ys)
        color = "#000" if s.reference else COLORS[s.style % len(COLORS)]
        dash = "2 3" if s.reference else DASHES[s.style % len(DASHES)]
        c.polyline(list(zip(px.tolist(), py.tolist())), color=color, width=1.2 if s.reference else 1.6, dash=dash)
        if lo is not None and hi is not None:
            for a, l_, h_ in zip(px.tolist(), lo.tolist(), hi.tolist()):
                if math.isfinite(l_) and math.isfinite(h_) and (l_ > 0 or not log_y):
                    c.line(a, y(l_), a, y(h_), width=1)
                    c.line(a - 3, y(l_), a + 3, y(l_), width=1)
                    c.line(a - 3, y(h_), a + 3, y(h_), width=1)
        if not s.reference and markers:
            step = 1 if xs.size <= 25 else max(1, xs.size // markers)
            for a, b in zip(px[::step].tolist(), py[::step].tolist()):
                c.marker(s.style, a, b)
        if end_labels:
            ends.append([float(py[-1]), float(px[-1]) + 6, s.label])
    for ly, lx, label in _spread(ends, FONT + 1, top, bottom):
        c.text(lx, ly, label, size=FONT - 1)
    for k, s in enumerate(series):  # legend: dash sample + marker + name, four per row
        lx, ly = left + (k % 4) * (WIDTH - left) / 4, height + 18 * (k // 4) + 4
        color = "#000" if s.reference else COLORS[s.style % len(COLORS)]
        c.line(lx, ly, lx + 26, ly, color=color, width=1.6, dash="2 3" if s.reference else DASHES[s.style % 4])
        if not s.reference:
            c.marker(s.style, lx + 13, ly)
        c.text(lx + 32, ly, s.label if text_width(s.label, FONT - 1) < 130 else s.label[:24] + "…", size=FONT - 1)
    return c.render(title)


def _spread(labels: list[list], gap: float, top: float, bottom: float) -> list[list]:
    """End labels moved apart vertically (in y order, at least `gap` apart) where lines end close
    together, kept inside [top, bottom] as far as they fit."""
    out = sorted(labels, key=lambda t: t[0])
    for i in range(1, len(out)):
        out[i][0] = max(out[i][0], out[i - 1][0] + gap)
    over = out[-1][0] - bottom if out else 0
    if over > 0:  # pushed past the bottom: shift the stack up, without passing the top
        for t in out:
            t[0] = max(top, t[0] - over)
        for i in range(1, len(out)):
            out[i][0] = max(out[i][0], out[i - 1][0] + gap)
    return out
