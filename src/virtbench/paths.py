"""Where virtbench keeps its files."""

from __future__ import annotations

import os
from pathlib import Path

import platformdirs

# The checkout root when installed editable (src layout): src/virtbench/paths.py -> ../../..
PROJECT_ROOT = Path(__file__).resolve().parents[2]


def data_dir() -> Path:
    """The user's data directory (override with VIRTBENCH_DATA)."""
    override = os.environ.get("VIRTBENCH_DATA")
    path = Path(override) if override else Path(platformdirs.user_data_dir("virtbench"))
    path.mkdir(parents=True, exist_ok=True)
    return path


def default_db() -> Path:
    return data_dir() / "virtbench.sqlite"


def native_bin_dir() -> Path:
    """Directory holding virtbench's own compiled kernels (the same files go into the guest image)."""
    override = os.environ.get("VIRTBENCH_BIN")
    return Path(override) if override else PROJECT_ROOT / "native" / "build" / "bin"


def suites_dir() -> Path:
    return PROJECT_ROOT / "suites"
