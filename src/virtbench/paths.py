"""Where virtbench keeps its files."""

from __future__ import annotations

import os
from pathlib import Path

import platformdirs

# The checkout root when installed editable (src layout): src/virtbench/paths.py -> ../../..
PROJECT_ROOT = Path(__file__).resolve().parents[2]
# The installed package; a wheel carries the kernel sources and suites inside it (see setup.py).
PACKAGE_DIR = Path(__file__).resolve().parent


def is_clone() -> bool:
    """Running from a checkout (src layout, native/ beside it), not from an installed package."""
    return PACKAGE_DIR.parent.name == "src" and (PROJECT_ROOT / "native" / "Makefile").is_file()


def pip_advice(extra: str) -> str:
    """How to install an optional dependency group: a clone's locked venv, or the package's extra
    (requirements.lock exists only in a clone)."""
    if is_clone():
        return f"{PROJECT_ROOT / '.venv/bin/pip'} install -r {PROJECT_ROOT / 'requirements.lock'}"
    return f"pip install 'virtbench[{extra}]' (into the environment virtbench is installed in)"


def data_dir(sub: str = "") -> Path:
    """The user's data directory (override with VIRTBENCH_DATA), or its subdirectory `sub`; made if
    missing."""
    override = os.environ.get("VIRTBENCH_DATA")
    path = (Path(override) if override else Path(platformdirs.user_data_dir("virtbench"))) / sub
    path.mkdir(parents=True, exist_ok=True)
    return path


def default_db() -> Path:
    return data_dir() / "virtbench.sqlite"


def native_src_dir() -> Path:
    """The kernels' sources: native/ in a clone, virtbench/native in an installed package."""
    return PROJECT_ROOT / "native" if is_clone() else PACKAGE_DIR / "native"


def suites_dir() -> Path:
    return PROJECT_ROOT / "suites" if is_clone() else PACKAGE_DIR / "suites"


def install_description() -> str:
    """How this virtbench was installed: a clone's git revision, or the installed package's version."""
    if is_clone():
        from . import procs

        res = procs.run(["git", "-C", PROJECT_ROOT, "describe", "--always", "--dirty"], timeout=10)
        return f"git {res.stdout.strip() if res.ok else 'revision unknown'}, clone at {PROJECT_ROOT}"
    from importlib import metadata

    try:
        return f"package {metadata.version('virtbench')} at {PACKAGE_DIR}"
    except metadata.PackageNotFoundError:
        return f"not installed, at {PACKAGE_DIR}"
