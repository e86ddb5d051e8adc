"""Axis scales (linear, log10) with readable tick positions and labels."""

from __future__ import annotations

import math

import numpy as np

from ...render import num as fmt_num


class Scale:
    def __init__(self, lo: float, hi: float, r0: float, r1: float, *, log: bool = False):
        if log:
            lo, hi = math.log10(lo), math.log10(hi)
        if hi <= lo:
            hi = lo + 1
        self.lo, self.hi, self.r0, self.r1, self.log = lo, hi, r0, r1, log

    def __call__(self, v: float) -> float:
        x = math.log10(v) if self.log else v
        return self.r0 + (x - self.lo) / (self.hi - self.lo) * (self.r1 - self.r0)

    def many(self, v: np.ndarray) -> np.ndarray:
        """Vectorized __call__, for long series."""
        x = np.log10(v) if self.log else v
        return self.r0 + (x - self.lo) / (self.hi - self.lo) * (self.r1 - self.r0)

    def ticks(self, target: int = 6) -> list[tuple[float, str]]:
        if self.log:
            first, last = math.floor(self.lo + 1e-9), math.ceil(self.hi - 1e-9)
            step = max(1, math.ceil((last - first + 1) / 8))
            vals = [10.0 ** e for e in range(first, last + 1, step) if self.lo - 1e-9 <= e <= self.hi + 1e-9]
            return [(v, _label(v)) for v in vals]
        span = self.hi - self.lo
        raw = span / max(target, 1)
        mag = 10 ** math.floor(math.log10(raw))
        step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
        start = math.ceil(self.lo / step - 1e-9) * step
        out, v = [], start
        while v <= self.hi + step * 1e-9:
            out.append((0.0 if abs(v) < step * 1e-9 else v, _label(v if abs(v) >= step * 1e-9 else 0.0)))
            v += step
        return out


def _label(v: float) -> str:
    if v and (abs(v) >= 1e6 or abs(v) < 1e-3):
        return f"{v:.0e}".replace("e+0", "e").replace("e-0", "e-")
    return fmt_num(v, 4)


def nice_max(v: float) -> float:
    """A round upper bound at or above v (for a linear axis starting at 0)."""
    if v <= 0:
        return 1.0
    mag = 10 ** math.floor(math.log10(v))
    return next(m * mag for m in (1, 1.2, 1.5, 2, 2.5, 3, 4, 5, 6, 8, 10) if m * mag >= v)
