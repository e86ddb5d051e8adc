"""What the storage and network conditions of one process (this one, or a child) leave behind on the
host: network namespaces, mounts, loop devices, helper processes, volumes. Tests take a snapshot
after tearing down and expect it empty."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

HELPERS = ("nbdkit", "tgtd", "qemu-nbd", "nbdfuse", "vb-delayproxy", "ganesha.nfsd", "rpcbind", "socat", "iperf3",
           "sockperf")


def _out(argv: list[str]) -> str:
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.TimeoutExpired):
        return ""


def descendants(pid: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            ppid = int((d / "stat").read_text().rpartition(")")[2].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(d.name))
    out, todo = [], [pid]
    while todo:
        for c in children.get(todo.pop(), []):
            out.append(c)
            todo.append(c)
    return out


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return ""


def runs_helper(pid: int) -> bool:
    """A helper program is one of the process's arguments (itself, or under a wrapper such as unshare or
    ip netns exec), by its file name: a VM whose QEMU arguments mention socat is not a socat."""
    try:
        args = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    names = {os.path.basename(a.decode(errors="replace")) for a in args if a}
    return bool(names & set(HELPERS))


def snapshot(pid: int | None = None) -> dict[str, list[str]]:
    """Everything of process `pid` (default: this one) that conditions create, by kind."""
    pid = pid or os.getpid()
    tag = f"virtbench-cond-{pid}-"
    netns = [ln.split()[0] for ln in _out(["ip", "netns", "list"]).splitlines()
             if ln.startswith(f"vb-{pid}-")]
    mounts = [ln.split()[4] for ln in Path("/proc/self/mountinfo").read_text().splitlines() if tag in ln.split()[4]]
    loops = []
    text = _out(["losetup", "--list", "--json", "--output", "NAME,BACK-FILE"])
    if text.strip():
        loops = [d["name"] for d in json.loads(text).get("loopdevices", []) if tag in (d.get("back-file") or "")]
    helpers = [f"{p} {cmdline(p)}" for p in descendants(pid) if runs_helper(p)]
    volumes = []
    if shutil.which("podman"):
        volumes = [v for v in _out(["podman", "volume", "ls", "--format", "{{.Name}}"]).split()
                   if v.startswith(f"vb-vol-{pid}-")]
    tgt = [s.name for s in Path("/var/run/tgtd").glob("socket.*")] if Path("/var/run/tgtd").is_dir() else []
    return {"netns": netns, "mounts": mounts, "loops": loops, "helpers": helpers, "volumes": volumes,
            "tgt_sockets": sorted(set(tgt) - _TGT_BEFORE)}


_TGT_BEFORE = {s.name for s in Path("/var/run/tgtd").glob("socket.*")} if Path("/var/run/tgtd").is_dir() else set()


def assert_clean(pid: int | None = None, *, containers_alive: bool = False) -> None:
    """containers_alive: the /vb-mnt propagation mounts of running containers are expected."""
    snap = snapshot(pid)
    if containers_alive:
        snap["mounts"] = [m for m in snap["mounts"] if not re.search(r"/ctr/[^/]+$", m)]
    left = {k: v for k, v in snap.items() if v}
    assert not left, f"left behind: {left}"


def run_events(store, run_id: str) -> list[str]:
    """The kinds of a run's events, in order, without its sweeps' removals of other runs' leftovers:
    on a shared machine earlier killed runs (tests that kill runs on purpose, other checkouts) leave
    some, and any run's sweep removes them and records a 'removed' event. A removal that names this
    run stays in: the run's own teardown (also an interrupted one) should have removed that."""
    return [e["kind"] for e in store.events(run_id) if e["kind"] != "removed" or run_id in (e["detail"] or "")]
