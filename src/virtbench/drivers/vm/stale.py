"""Run directories of the vm driver, and what killed runs left behind: the ledger's finder of
QEMU run directories (`leftovers`, machines/ledger.py).

Each driver's run directory here holds `owner.json` (the owner record of machines/owners.py); a
directory whose owner is gone is removed, after killing the QEMU its instances' pidfiles still name.
On another machine a run's directory there has an owner file beside it, swept by owners.sweep_dir.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import tempfile
import time
from pathlib import Path

from ...machines import Machine, owners, ship
from . import disk


def make_run_dir(root: Path, run_id: str) -> Path:
    """A new directory under `root`, owned by this process."""
    root.mkdir(parents=True, exist_ok=True)
    d = root / secrets.token_hex(4)
    d.mkdir()
    (d / "owner.json").write_text(json.dumps({**owners.record(run_id), "at": time.time()}))
    return d


def local_roots() -> list[Path]:
    """Where the vm driver makes its run directories on this machine (drivers/vm/driver.py:run_dir)."""
    return [disk.vm_root() / "run", Path(tempfile.gettempdir()) / "virtbench-vm"]


def remote_root(machine: Machine) -> str:
    """Where it makes them on another machine (drivers/vm/driver.py:_new, under drivers/vm/site.py's root)."""
    return f"{ship.data_dir(machine)}/vm/run"


def leftovers(machine: Machine) -> list[str]:
    """QEMU run directories of killed runs on the machine, their QEMUs killed and removed."""
    if ship.is_shipped_to(machine):
        return [f"vm run directory {d}" for d in owners.sweep_dir(machine, remote_root(machine))]
    return cleanup(local_roots())


def cleanup(roots: list[Path], keep: Path | None = None) -> list[str]:
    """Kill QEMUs and remove run directories under `roots` whose owning process is gone."""
    removed = []
    for root in roots:
        if not root.is_dir():
            continue
        for d in root.iterdir():
            if not d.is_dir() or d == keep:
                continue
            try:
                owner = json.loads((d / "owner.json").read_text())
            except (OSError, ValueError):
                owner = {}
            if isinstance(owner.get("pid"), int) and not owners.owner_dead(owner, here=True):
                continue  # its owner still runs
            if not owner and time.time() - d.stat().st_mtime < 60:
                continue  # being created right now
            for pidfile in d.glob("i*/qemu.pid"):
                kill_qemu(pidfile)
            shutil.rmtree(d, ignore_errors=True)
            removed.append(f"vm work directory {d}")
    return removed


def kill_qemu(pidfile: Path) -> None:
    """Kill the QEMU whose -pidfile this is, if that pid still is that QEMU."""
    try:
        pid = int(pidfile.read_text().strip())
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except (OSError, ValueError):
        return
    if str(pidfile).encode() in cmdline:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, 9)
