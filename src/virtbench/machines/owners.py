"""Owner files: what a run leaves on another machine, and who may remove it after a SIGKILL.

A run that makes a directory on a remote machine (an SSH instance's scratch, a remote VM's run
directory) writes `<dir>.owner` beside it: the controller's host name, boot id, pid and the pid's
start time. Teardown removes both. A run killed outright cannot, so the next run from the same
controller that uses the machine sweeps the directory's root once: every owner file of this
controller whose process is gone marks a leftover, whose processes (by marker or by the path in
their command line) are killed and whose directory is removed (`sweep_dir`, a finder of the ledger:
machines/ledger.py runs it once per machine per run). What another controller or a live run made is
never touched.
"""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path
from typing import Any

from ..hostdirs import start_ticks as process_start
from .base import Machine, MachineUnreachable

OWNER = ".owner"
# Every owner file under a root, one per line: path, a tab, the file's JSON.
_LIST = 'for f in "$1"/*' + OWNER + '; do [ -f "$f" ] || continue; printf "%s\\t" "$f"; tr "\\n" " " < "$f"; echo; done'


def controller() -> dict[str, Any]:
    """This process, as an owner file names it."""
    try:
        boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        boot = None
    return {"host": socket.gethostname(), "boot": boot, "pid": os.getpid(), "pidstart": process_start(os.getpid())}


def record(run_id: str) -> dict[str, Any]:
    """The owner record of what this process makes for run `run_id` (every kind writes this one)."""
    return {**controller(), "run_id": run_id}


def owner_dead(owner: dict[str, Any], here: bool = False) -> bool:
    """True when the process that made something is gone: the one owner rule for every leftover
    (owner files, the vm driver's run directories, container labels, the names of condition
    directories and namespaces). Only its own controller can tell: what was made from another host
    (or names no owner) is never judged dead here. `here`: a record kept on this machine, which
    older records name without a host. A pidstart of None, "" or "0" means unknown: then the pid's
    existence decides."""
    me = controller()
    host = owner.get("host") or (me["host"] if here else None)
    if host != me["host"] or not isinstance(owner.get("pid"), int):
        return False
    if owner.get("boot") and me["boot"] and owner["boot"] != me["boot"]:
        return True  # this controller rebooted since
    now = process_start(owner["pid"])
    start = owner.get("pidstart")
    return now is None or (start not in (None, "", "0") and now != str(start))


def claim(machine: Machine, path: str, run_id: str) -> None:
    """Write the owner file of directory `path` on the machine."""
    res = machine.run(["sh", "-c", 'cat > "$1"', "vb", path + OWNER], stdin=json.dumps(record(run_id)).encode(),
                      timeout=30)
    if not res.ok:
        raise MachineUnreachable(machine.name, f"cannot write {path + OWNER}: {res.stderr.strip()[-300:]}")


def sweep_dir(machine: Machine, root: str, mark_var: str | None = None) -> list[str]:
    """Remove the leftovers of this controller's killed runs under `root` on the machine; what was
    removed, one line each. A process belongs to a leftover when its command line or environment
    names the directory, or `mark_var`=<directory name>. MachineUnreachable when the machine stops
    answering."""
    res = machine.run(["sh", "-c", _LIST, "vb", root], timeout=30)
    removed = []
    for line in res.stdout.splitlines() if res.ok else []:
        path, _, text = line.partition("\t")
        try:
            owner = json.loads(text)
        except ValueError:
            continue
        if not path.endswith(OWNER) or not isinstance(owner, dict) or not owner_dead(owner):
            continue
        d = path[:-len(OWNER)]
        name = d.rsplit("/", 1)[-1]
        machine.kill_matching([d, *([f"{mark_var}={name}"] if mark_var else [])])
        machine.run(["rm", "-rf", "--", d, path], timeout=120)
        removed.append(f"{d} (run {owner.get('run_id', '?')}: its processes and directory)")
    return removed
