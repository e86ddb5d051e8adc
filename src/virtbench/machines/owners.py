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

import contextlib
import json
import os
import shutil
import socket
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from .. import procs
from ..hostdirs import start_ticks as process_start
from .base import Machine, MachineUnreachable

OWNER = ".owner"
# Every owner file under a root ($1; $2 the names' glob), one per line: path, a tab, the file's JSON.
_LIST = 'for f in "$1"/$2' + OWNER + '; do [ -f "$f" ] || continue; printf "%s\\t" "$f"; tr "\\n" " " < "$f"; echo; done'
# Detach what is mounted at or below $1 (deepest first), then remove $1 and its owner file $2
# without crossing into a mount that would not detach.
_REMOVE = ("awk -v d=\"$1\" '$5 == d || index($5, d \"/\") == 1 {print $5}' /proc/self/mountinfo | sort -r | "
           'while read -r m; do umount -l "$m"; done; rm -rf --one-file-system -- "$1" "$2"')

_run: list[str | None] = [None]  # the run this process works for now (running())


def controller() -> dict[str, Any]:
    """This process, as an owner file names it."""
    try:
        boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        boot = None
    return {"host": socket.gethostname(), "boot": boot, "pid": os.getpid(), "pidstart": process_start(os.getpid())}


def record(run_id: str | None = None) -> dict[str, Any]:
    """The owner record of what this process makes for run `run_id` (every kind writes this one);
    None: the run it works for now (`running`), for makers that are not told the run (conditions)."""
    return {**controller(), "run_id": run_id if run_id is not None else _run[-1]}


@contextlib.contextmanager
def running(run_id: str) -> Iterator[None]:
    """While inside, what this process makes without being told its run belongs to `run_id`."""
    _run.append(run_id)
    try:
        yield
    finally:
        _run.pop()


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


def claim(machine: Machine, path: str, run_id: str | None = None) -> None:
    """Write the owner file of directory `path` on the machine."""
    res = machine.run(["sh", "-c", 'cat > "$1"', "vb", path + OWNER], stdin=json.dumps(record(run_id)).encode(),
                      timeout=30)
    if not res.ok:
        raise MachineUnreachable(machine.name, f"cannot write {path + OWNER}: {res.stderr.strip()[-300:]}")


def local_workdir(prefix: str, run_id: str | None = None) -> Path:
    """A new temporary directory of this process (tempfile.mkdtemp) with its owner file beside it,
    so that after a SIGKILL the next run's sweep removes it (ledger: "local work directories");
    `remove_local` removes both. run_id None: the run this process works for now (`running`).
    A signal in between is held until both exist (a directory without its owner file is never
    swept); a caller that must not lose the path holds interrupts around its assignment too."""
    with procs.interrupts_deferred():
        path = Path(tempfile.mkdtemp(prefix=prefix))
        Path(str(path) + OWNER).write_text(json.dumps(record(run_id)))
    return path


def remove_local(path: Path) -> None:
    """Remove a `local_workdir` and its owner file, both or (on a signal) still both: the owner file
    goes last, so that what is left is always swept."""
    with procs.interrupts_deferred():
        shutil.rmtree(path, ignore_errors=True)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(str(path) + OWNER)


def listed(machine: Machine, root: str, names: str = "*") -> list[tuple[str, dict[str, Any]]]:
    """(path, owner record) of each entry under `root` on the machine matching the glob `names`
    that has an owner file."""
    res = machine.run(["sh", "-c", _LIST, "vb", root, names], timeout=30)
    out = []
    for line in res.stdout.splitlines() if res.ok else []:
        path, _, text = line.partition("\t")
        try:
            owner = json.loads(text)
        except ValueError:
            continue
        if path.endswith(OWNER) and isinstance(owner, dict):
            out.append((path[:-len(OWNER)], owner))
    return out


def gone(machine: Machine, root: str, names: str = "*") -> list[tuple[str, dict[str, Any]]]:
    """The entries of `listed` whose owner file names a gone owner of this controller."""
    return [(path, owner) for path, owner in listed(machine, root, names) if owner_dead(owner)]


def sweep_dir(machine: Machine, root: str, mark_var: str | None = None, names: str = "*",
              what: str = "its processes and directory") -> list[str]:
    """Remove the leftovers of this controller's killed runs under `root` on the machine (those of
    its entries that match the glob `names`); what was removed, one line each. A process belongs to
    a leftover when its command line or environment names the path, or `mark_var`=<its name>;
    what is mounted in a directory is detached first. MachineUnreachable when the machine stops
    answering."""
    removed = []
    for d, owner in gone(machine, root, names):
        path, name = d + OWNER, d.rsplit("/", 1)[-1]
        machine.kill_matching([d, *([f"{mark_var}={name}"] if mark_var else [])])
        machine.run(["sh", "-c", _REMOVE, "vb", d, path], timeout=120)
        removed.append(f"{d} (run {owner.get('run_id') or '?'}: {what})")
    return removed
