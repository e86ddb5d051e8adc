"""What runs inside a testbed host: the command lines of the processes in its network namespace."""

from __future__ import annotations

import subprocess
from pathlib import Path


def commands(ns: str) -> list[str]:
    pids = subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True).stdout.split()
    out = []
    for pid in pids:
        try:
            out.append(Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode().strip())
        except OSError:
            pass
    return out


def strays(ns: str) -> list[str]:
    """Processes in a testbed host other than its sshd (the listener and the sessions it serves)."""
    return [c for c in commands(ns) if c and not c.startswith(("/usr/sbin/sshd", "sshd:"))]
