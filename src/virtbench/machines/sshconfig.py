"""Hosts by their ~/.ssh/config names, for runs without an inventory file: the concrete `Host`
names of the config (and the files it includes), an Inventory of them, and where `ssh -G` says a
name connects to. Only names and addresses: ssh itself applies the rest when it connects."""

from __future__ import annotations

import glob
import os
import re
import shlex
from collections.abc import Iterable
from pathlib import Path

from ..errors import UserError
from .inventory import HostSpec, Inventory


def ssh_config_hosts(path: str | os.PathLike = "~/.ssh/config") -> list[str]:
    """Concrete `Host` names of an ssh_config file (and the files it `Include`s); no patterns."""
    names: list[str] = []
    _read_ssh_config(Path(path).expanduser(), names, set())
    return names


def _read_ssh_config(path: Path, names: list[str], seen: set[Path]) -> None:
    if path in seen or not path.is_file():
        return
    seen.add(path)
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        m = re.match(r"(\w+)\s*(?:=\s*|\s)(.*)$", line)
        if not m:
            continue
        keyword, rest = m.group(1).lower(), m.group(2)
        try:
            args = shlex.split(rest, comments=True)
        except ValueError:
            args = rest.split()
        if keyword == "host":
            for a in args:
                if not any(c in a for c in "*?!") and a not in names:
                    names.append(a)
        elif keyword == "include":
            for a in args:
                inc = Path(a).expanduser()
                if not inc.is_absolute():
                    inc = Path("~/.ssh").expanduser() / inc
                for f in sorted(glob.glob(str(inc))):
                    _read_ssh_config(Path(f), names, seen)


def from_ssh_config(names: Iterable[str] | None = None, path: str | os.PathLike = "~/.ssh/config") -> Inventory:
    """Hosts by their ~/.ssh/config names: every concrete `Host` there, or just `names`.

    Only names: ssh itself applies HostName, Port, User, ProxyJump, IdentityFile ... when it connects.
    A name that the config does not mention is still accepted, as a plain ssh destination."""
    configured = ssh_config_hosts(path)
    wanted = [n.strip() for n in (names or []) if n and n.strip()]
    chosen = list(dict.fromkeys(wanted)) if wanted else configured
    if not chosen:
        raise UserError(f"no concrete Host entries in {path} (patterns with * or ? are not hosts)",
                        "name the hosts to use, or use an inventory file")
    listed = set(configured)
    hosts = {n: HostSpec(name=n, groups=("ssh_config",) if n in listed else ()) for n in chosen}
    groups = {"all": list(hosts)}
    in_config = [n for n in hosts if n in listed]
    if in_config:
        groups["ssh_config"] = in_config
    return Inventory(str(path), hosts, groups)


def ssh_config_address(name: str, timeout: float = 10) -> tuple[str, int] | None:
    """Where ssh would connect `name` to (`ssh -G`: HostName and Port); None when ssh is missing or
    fails. Only these two fields are read: never the user or the keys."""
    import shutil

    from .. import procs

    ssh = shutil.which("ssh")
    if not ssh:
        return None
    res = procs.run([ssh, "-G", "--", name], timeout=timeout)
    if not res.ok:
        return None
    fields = dict(ln.split(" ", 1) for ln in res.stdout.splitlines() if " " in ln)
    host, port = fields.get("hostname"), fields.get("port", "22")
    if not host:
        return None
    return host, int(port) if port.isdigit() else 22
