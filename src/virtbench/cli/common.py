"""What the `virtbench` commands share: the two consoles, the --db option, JSON output, building
the kernels on first use, reading an inventory and KEY=VALUE flags."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click
from rich.console import Console

from .. import paths
from ..errors import UserError
from ..store import Store


err = Console(stderr=True)
# Piped output is read by people too: do not squeeze tables into 80 columns there.
out = Console(width=None if sys.stdout.isatty() else 200)

DB_HELP = "results database: a SQLite file path or a postgresql:// URL [default: the user's data directory]"
MARGIN_HELP = ("equivalence margin of the verdicts, a fraction of the baseline: a ratio whose whole CI lies within "
               "it of 1 is 'equivalent' [default: the suite's margin, else 0.02 = ±2 %]")
MARGIN_TYPE = click.FloatRange(0, 1, min_open=True, max_open=True)


def open_store(db: str | None, *, reading: bool = False) -> Store:
    """The results database. Commands that only read (runs, show, report, compare, export) must not
    create an empty database at a mistyped --db path and then say the run is not in it."""
    if reading and db and "://" not in db and not Path(db).expanduser().exists():
        raise UserError(f"no results database at {db}",
                        "check the --db path (virtbench run writes one there), or leave --db out for the default")
    return Store(db or paths.default_db(), named=db)


def emit_json(data) -> None:
    click.echo(json.dumps(data, indent=2, default=str))


def ensure_kernels() -> None:
    """Build the native kernels on first use (installed package) or when missing (clone)."""
    from .. import kernels

    kernels.ensure(log=log_line)


def log_line(line: str) -> None:
    err.print(line, highlight=False, markup=False, soft_wrap=True)


def inventory_path(path: str) -> str:
    """An inventory file's absolute path, read once now so a mistake stops the command at once."""
    from ..machines import inventory as inventory_mod

    full = str(Path(path).expanduser().resolve())
    inventory_mod.load(full)
    return full


def _key_values(items: tuple[str, ...], flag: str, example: str) -> dict[str, str]:
    """KEY=VALUE flags (--param, --option) as a dict; a malformed one stops the command."""
    values = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise UserError(f"{flag} {item!r} is not KEY=VALUE", f"for example: {flag} {example}")
        values[key.strip()] = value.strip()
    return values


def parse_params(items: tuple[str, ...]) -> dict[str, str]:
    return _key_values(items, "--param", "duration=2")


def parse_options(items: tuple[str, ...]) -> dict[str, str]:
    return _key_values(items, "--option", "devices=emulated-disk")
