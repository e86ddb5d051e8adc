"""Whose a testbed is and which runs use it: `owner.json` in its state directory (who ran `up`,
when), and a record under `runs/` for each run whose inventory names it, kept while the run's
process lives (boot id, pid and its start time name the process), so `down` does not pull hosts
from under a live run. testbed.py makes and removes the SSH testbeds; the Kubernetes testbed
(drivers/pods/testbed/) keeps the same records in its own state directory (the `*_in` functions)."""

from __future__ import annotations

import getpass
import json
import os
import re
import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

STATE_ROOT = Path("/var/lib/virtbench-testbed")


def user() -> str:
    """Who is running this: the user behind sudo, if any (testbeds need root)."""
    return os.environ.get("SUDO_USER") or getpass.getuser()


def state_dir(prefix: str = "vbtb") -> Path:
    return STATE_ROOT / prefix


def owner(prefix: str) -> dict | None:
    """{user, uid, host, created, pid} of whoever ran `up`, or None (no record)."""
    return owner_in(state_dir(prefix))


def owner_in(state: Path) -> dict | None:
    """The owner record in a testbed's state directory (this module's or another testbed kind's)."""
    try:
        return json.loads((state / "owner.json").read_text())
    except (OSError, ValueError):
        return None


def write_owner(state: Path) -> None:
    """Record in `state` that this user, here and now, made the testbed."""
    (state / "owner.json").write_text(json.dumps({"user": user(), "uid": os.getuid(), "host": socket.gethostname(),
                                                  "created": time.time(), "pid": os.getpid()}))


def owner_text(rec: dict | None) -> str:
    if not rec:
        return "by an unknown user (no owner record)"
    when = time.strftime("%Y-%m-%d %H:%M", time.localtime(rec.get("created", 0)))
    return f"by {rec.get('user', '?')} at {when}"


def _start_time(pid: int) -> str | None:
    """A process's start time in clock ticks since boot (field 22 of /proc/PID/stat): with the pid it
    names one process, also after the pid is reused."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[19]
    except (OSError, IndexError):
        return None


def _boot_id() -> str:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return ""


def live_runs(prefix: str) -> list[dict]:
    """The runs registered as using testbed `prefix` whose process still runs (same boot, pid and
    start time); records of runs that died without cleaning up are ignored."""
    return live_runs_in(state_dir(prefix))


def runs_text(runs: list[dict]) -> str:
    return ", ".join(f"{r['run_id']} (user {r.get('user', '?')}, pid {r.get('pid')})" for r in runs)


def live_runs_in(state: Path) -> list[dict]:
    """live_runs of the testbed whose state directory is `state`."""
    out = []
    for f in sorted((state / "runs").glob("*.json")):
        try:
            rec = json.loads(f.read_text())
        except (OSError, ValueError):
            continue
        if rec.get("boot_id") == _boot_id() and _start_time(rec.get("pid", -1)) == rec.get("start_time"):
            out.append(rec)
    return out


@contextmanager
def used_by(prefixes: list[str], run_id: str, db: str = "") -> Iterator[None]:
    """While the block runs, run `run_id` is registered with each testbed of `prefixes` that is up
    here (a testbed on another machine, or one this user cannot write to, is left alone)."""
    with used_in([state_dir(p) for p in prefixes if re.fullmatch(r"[a-z][a-z0-9]{0,9}", p)], run_id, db):
        yield


@contextmanager
def used_in(states: list[Path], run_id: str, db: str = "") -> Iterator[None]:
    """used_by for testbeds named by their state directories (any kind: SSH hosts, a Kubernetes cluster)."""
    made = []
    rec = {"run_id": run_id, "user": user(), "pid": os.getpid(), "start_time": _start_time(os.getpid()),
           "boot_id": _boot_id(), "host": socket.gethostname(), "db": db, "since": time.time()}
    for state in states:
        if not state.is_dir():
            continue
        try:
            (state / "runs").mkdir(exist_ok=True)
            path = state / "runs" / f"{run_id}.json"
            path.write_text(json.dumps(rec))
            made.append(path)
        except OSError:
            pass
    try:
        yield
    finally:
        for path in made:
            path.unlink(missing_ok=True)
