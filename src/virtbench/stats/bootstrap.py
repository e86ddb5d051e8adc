"""Bootstrap resamples of a group's median, one set per group, for :mod:`virtbench.stats`.

One set of resamples per group of values (bootstrap uses): the bootstrap medians of a group
are drawn from a random stream of its own, seeded by ``seed`` and a hash of
the values (so two different groups are resampled independently), and kept
in a small memo. The CI of a group's median, every ratio it enters and every
index it is part of reuse the same resamples instead of drawing new ones
(analysis of a 10,000-sample run bootstraps each group once, not ~6 times).
The memo changes no result: the same values, ``resamples`` and ``seed`` give
the same resamples whether they come from the memo or not.

Split out of ``stats/`` (issue 23); ``stats`` imports what it uses from here.
"""

from __future__ import annotations

import functools
import hashlib

import numpy as np

NAN = float("nan")


def _bootstrap_medians(x: np.ndarray, resamples: int, rng: np.random.Generator) -> np.ndarray:
    """Median of each of ``resamples`` bootstrap resamples of ``x`` (vectorized)."""
    n = x.size
    idx = rng.integers(0, n, size=(int(resamples), n))
    # A full row sort is several times faster than np.median(axis=1) for the
    # small n of benchmark repetitions; pick the middle element(s) directly.
    rows = x[idx]
    rows.sort(axis=1)
    mid = n // 2
    if n % 2:
        return rows[:, mid]
    return (rows[:, mid - 1] + rows[:, mid]) / 2.0


#: Groups whose resamples are kept (about 16 kB each at 2000 resamples).
BOOT_MEMO = 1024


@functools.lru_cache(maxsize=BOOT_MEMO)
def _memo_boot(data: bytes, resamples: int, seed: int, tag: int) -> np.ndarray:
    x = np.frombuffer(data, dtype=float)
    digest = int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "little")
    rng = np.random.default_rng([int(seed), digest, int(tag)])
    boot = _bootstrap_medians(x, resamples, rng)
    boot.flags.writeable = False  # shared by every caller
    return boot


def group_boot(x: np.ndarray, resamples: int, seed: int, tag: int = 0) -> np.ndarray:
    """Bootstrap medians of one group of values (already cleaned, n >= 1), from the group's own
    stream (``seed`` + a hash of the values + ``tag``), memoized. Read-only: do not modify."""
    return _memo_boot(np.ascontiguousarray(x, dtype=float).tobytes(), int(resamples), int(seed), int(tag))


def distinct_boots(groups: list[np.ndarray], resamples: int, seed: int) -> list[np.ndarray]:
    """Resamples of several groups, independent even where two groups hold identical values."""
    seen: dict[bytes, int] = {}
    out = []
    for x in groups:
        key = np.ascontiguousarray(x, dtype=float).tobytes()
        tag = seen.get(key, -1) + 1
        seen[key] = tag
        out.append(group_boot(x, resamples, seed, tag))
    return out


def percentile_ci(boot: np.ndarray, confidence: float) -> tuple[float, float]:
    """Percentile-method interval; NaN when any bootstrap statistic is not finite."""
    if not np.all(np.isfinite(boot)):
        return NAN, NAN
    tail = (1.0 - confidence) / 2.0
    lo, hi = np.quantile(boot, [tail, 1.0 - tail])
    return float(lo), float(hi)
