"""An SVG document being drawn: shapes, text (always escaped), hatch patterns and markers."""

from __future__ import annotations

import math
from html import escape

FONT = "system-ui, -apple-system, 'Segoe UI', Roboto, 'Helvetica Neue', Arial, 'DejaVu Sans', sans-serif"
CHAR_W = 0.6  # average glyph width of a sans-serif font, in em: for laying out labels without metrics

# Readable without colour: hatch k and marker k differ in shape; colours (Okabe-Ito, colour-blind
# safe) only repeat what the pattern says.
COLORS = ["#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#F0E442", "#000000"]
_HATCH_LINES = [  # pattern k: line segments in a 8x8 tile ('' = solid fill)
    "", "M0,8 L8,0 M-2,2 L2,-2 M6,10 L10,6", "M1,1 h0.1 M5,5 h0.1 M1,5 h0.1 M5,1 h0.1",
    "M0,0 L8,8 M0,8 L8,0", "M0,0 L8,8 M-2,6 L2,10 M6,-2 L10,2", "M0,4 H8", "M4,0 V8", "M0,4 H8 M4,0 V8"]
DASHES = ["", "6 3", "2 2", "7 2 2 2"]
MARKERS = ["circle", "square", "triangle", "diamond", "down", "plus", "cross", "star"]


def esc(text: object) -> str:
    return escape(str(text), quote=True)


def text_width(text: str, size: float) -> float:
    return len(str(text)) * size * CHAR_W


def num(v: float) -> str:
    return f"{v:.1f}".rstrip("0").rstrip(".") if abs(v) < 1e7 else f"{v:.0f}"


class Canvas:
    def __init__(self, uid: str, width: float, height: float):
        self.uid, self.width, self.height = uid, width, height
        self.body: list[str] = []
        self._defs: dict[str, str] = {}

    # -- styles ------------------------------------------------------------------------------
    def fill(self, k: int) -> str:
        """Fill for series k: its colour, overlaid with its hatch pattern (k > 0)."""
        color = COLORS[k % len(COLORS)]
        hatch = _HATCH_LINES[k % len(_HATCH_LINES)]
        if not hatch:
            return color
        pid = f"{self.uid}-h{k}"
        if pid not in self._defs:
            self._defs[pid] = (f'<pattern id="{pid}" patternUnits="userSpaceOnUse" width="8" height="8">'
                               f'<rect width="8" height="8" fill="{color}"/>'
                               f'<path d="{hatch}" stroke="#000" stroke-width="1.1" stroke-linecap="square"/>'
                               "</pattern>")
        return f"url(#{pid})"

    def marker(self, k: int, x: float, y: float, r: float = 3.5) -> None:
        shape, color = MARKERS[k % len(MARKERS)], COLORS[k % len(COLORS)]
        style = f'fill="{color}" stroke="#000" stroke-width="0.7"'
        if shape == "circle":
            self.body.append(f'<circle cx="{num(x)}" cy="{num(y)}" r="{r}" {style}/>')
            return
        pts = {
            "square": [(-r, -r), (r, -r), (r, r), (-r, r)],
            "triangle": [(0, -r * 1.2), (r * 1.1, r * 0.8), (-r * 1.1, r * 0.8)],
            "diamond": [(0, -r * 1.3), (r, 0), (0, r * 1.3), (-r, 0)],
            "down": [(0, r * 1.2), (r * 1.1, -r * 0.8), (-r * 1.1, -r * 0.8)],
            "star": [(0, -r * 1.4), (r * .4, -r * .4), (r * 1.4, -r * .3), (r * .6, r * .3), (r * .9, r * 1.3),
                     (0, r * .7), (-r * .9, r * 1.3), (-r * .6, r * .3), (-r * 1.4, -r * .3), (-r * .4, -r * .4)],
        }.get(shape)
        if pts:
            d = " ".join(f"{num(x + a)},{num(y + b)}" for a, b in pts)
            self.body.append(f'<polygon points="{d}" {style}/>')
        else:  # plus / cross: strokes
            a = r * 1.2
            d = (f"M{num(x - a)},{num(y)} H{num(x + a)} M{num(x)},{num(y - a)} V{num(y + a)}" if shape == "plus"
                 else f"M{num(x - a)},{num(y - a)} L{num(x + a)},{num(y + a)} M{num(x - a)},{num(y + a)} "
                      f"L{num(x + a)},{num(y - a)}")
            self.body.append(f'<path d="{d}" stroke="{color}" stroke-width="2.2"/>'
                             f'<path d="{d}" stroke="#000" stroke-width="0.6"/>')

    # -- shapes ------------------------------------------------------------------------------
    def rect(self, x: float, y: float, w: float, h: float, fill: str, title: str = "") -> None:
        tip = f"<title>{esc(title)}</title>" if title else ""
        self.body.append(f'<rect x="{num(x)}" y="{num(y)}" width="{num(max(w, 0))}" height="{num(h)}" '
                         f'fill="{fill}" stroke="#000" stroke-width="0.7">{tip}</rect>')

    def line(self, x1: float, y1: float, x2: float, y2: float, *, color: str = "#000", width: float = 1,
             dash: str = "") -> None:
        if not all(math.isfinite(v) for v in (x1, y1, x2, y2)):
            return  # e.g. the whisker of a CI that one sample cannot give: nothing to draw
        extra = f' stroke-dasharray="{dash}"' if dash else ""
        self.body.append(f'<line x1="{num(x1)}" y1="{num(y1)}" x2="{num(x2)}" y2="{num(y2)}" '
                         f'stroke="{color}" stroke-width="{width}"{extra}/>')

    def polyline(self, points: list[tuple[float, float]], *, color: str, width: float = 1.5, dash: str = "") -> None:
        extra = f' stroke-dasharray="{dash}"' if dash else ""
        pts = " ".join([f"{x:.1f},{y:.1f}" for x, y in points])  # long series: plain formatting is faster
        self.body.append(f'<polyline points="{pts}" fill="none" stroke="{color}" stroke-width="{width}" '
                         f'stroke-linejoin="round"{extra}/>')

    def text(self, x: float, y: float, text: object, *, size: float = 11, anchor: str = "start",
             bold: bool = False, italic: bool = False, rotate: bool = False, color: str = "#1b1b1b") -> None:
        attrs = f'x="{num(x)}" y="{num(y)}" font-size="{size}" text-anchor="{anchor}" fill="{color}"'
        if bold:
            attrs += ' font-weight="bold"'
        if italic:
            attrs += ' font-style="italic"'
        if rotate:
            attrs += f' transform="rotate(-90 {num(x)} {num(y)})"'
        self.body.append(f'<text {attrs} dominant-baseline="middle">{esc(text)}</text>')

    def render(self, title: str) -> str:
        defs = f"<defs>{''.join(self._defs.values())}</defs>" if self._defs else ""
        return (f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {num(self.width)} {num(self.height)}" '
                f'width="{num(self.width)}" height="{num(self.height)}" font-family="{FONT}">'
                f"<title>{esc(title)}</title>{defs}"
                f'<rect width="100%" height="100%" fill="#fff"/>{"".join(self.body)}</svg>')
