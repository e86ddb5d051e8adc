"""The version of the code that turns a reproduce run's samples into verdicts: virtbench's version and
one hash of the scoring sources (the rules, the evidence they read, the statistics those use). A run
records it beside its study files' hashes when it starts; a stored run scored again later by other
scoring code says so, since the same samples could then give other verdicts."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

from .. import __version__

# The scoring sources, relative to the package: the rules and the evidence (studies/), and the
# statistics modules they import (stats/ and what it imports of its own; tests/test_scoring_version.py
# checks that none is missing).
SOURCES = ("studies/score.py", "studies/evidence.py", "stats/__init__.py", "stats/exact.py", "stats/bootstrap.py",
           "stats/linearity.py")
_ROOT = Path(__file__).resolve().parents[1]


def sources_hash(root: Path = _ROOT) -> str:
    """SHA-256 over the scoring sources, each file's name and bytes in SOURCES' order."""
    h = hashlib.sha256()
    for name in SOURCES:
        h.update(name.encode() + b"\0" + (root / name).read_bytes() + b"\0")
    return h.hexdigest()


def current() -> dict[str, Any]:
    """What a run records: {"version": virtbench's, "sha256": of the scoring sources, "sources": their names}."""
    return {"version": __version__, "sha256": sources_hash(), "sources": list(SOURCES)}


def describe(v: dict[str, Any] | None) -> str:
    """One line: "virtbench 0.1.0, scoring sources sha256 0123456789abcdef"."""
    if not v:
        return "not recorded (a run stored before the scoring code's version was)"
    return f"virtbench {v['version']}, scoring sources sha256 {v['sha256'][:16]}"


def rescored_note(recorded: dict[str, Any] | None, now: dict[str, Any] | None = None) -> str | None:
    """What a scorecard says when the code scoring a stored run is not the code it was recorded with
    (None: the same sources)."""
    now = now or current()
    if recorded is None:
        return (f"this run recorded no scoring code version (stored before it was recorded); scored now by "
                f"{describe(now)}")
    if recorded.get("sha256") == now["sha256"]:
        return None
    return (f"scored now by {describe(now)}, not by the code the run was recorded with ({describe(recorded)}): "
            "the same samples may give other verdicts than they did then")
