"""The study files a reproduce run plans and scores with, recorded in the run: each file's text and
hash (pre-registration: the scorecard of a run is scored with the files as they were when it
started, and names their hashes), and read back from a stored run."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from . import studyfile
from .model import Study


def record(studies: list[Study]) -> list[dict[str, Any]]:
    """What a run stores of each study file: id, title, path, hash, built-in or not, and its text."""
    out = []
    for s in studies:
        text = Path(s.path).read_bytes()
        if studyfile.sha256(text) != s.sha256:
            raise RuntimeError(f"{s.path} changed while virtbench read it")
        out.append({"id": s.id, "title": s.title, "path": s.path if not s.builtin else Path(s.path).name,
                    "sha256": s.sha256, "builtin": s.builtin, "text": text.decode("utf-8")})
    return out


def from_spec(spec: dict[str, Any]) -> list[Study]:
    """The studies a stored run was planned with: its recorded files (read again, suite files
    unchecked); a run stored before files were recorded: the built-in studies it named."""
    files = spec.get("study_files")
    if not files:
        chosen = spec.get("studies")
        return [s for s in studyfile.builtin() if not chosen or s.id in chosen]
    out = []
    for f in files:
        base = studyfile.builtin_dir() if f["builtin"] else Path(f["path"]).parent
        out.append(studyfile.parse(f["text"].encode("utf-8"), f["path"], base, builtin=f["builtin"], stored=True))
    return out


def hashes(spec: dict[str, Any]) -> list[dict[str, str]]:
    """Each recorded study file's id, path and hash (none for a run stored before they were recorded)."""
    return [{"id": f["id"], "path": f["path"], "sha256": f["sha256"]} for f in spec.get("study_files") or []]
