"""This machine's directories of one virtbench process, and the mount table around them.

One directory per process (`$TMPDIR/virtbench-cond-<pid>-<start>`) holds what conditions make
here, and the shared mount points a container sees: a container is created with
`--mount type=bind,src=<dir>,dst=/vb-mnt,bind-propagation=rslave`, where <dir> is bound onto itself
and made a shared mount first. A storage condition applied later (tmpfs, a volume, a remote disk)
mounts under <dir> and appears under /vb-mnt inside; unmounting here removes it inside too. This is
how Kubernetes hands a pod a volume the node mounted.

Here, below drivers and conditions, because both use it: the container driver calls prepare() at
create time and release() after removal; storage conditions mount into those directories.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import ctypes.util
import os
import re
import shutil
import tempfile
import threading
from pathlib import Path

from . import procs

PREFIX = "virtbench-cond-"
GUEST_DIR = "/vb-mnt"
_MS_BIND, _MS_SHARED = 4096, 1 << 20  # <sys/mount.h>
_lock = threading.RLock()
_base: Path | None = None
_counter = 0


def start_ticks(pid: int) -> str | None:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[19]
    except (OSError, IndexError):
        return None


def owner_tag() -> str:
    """'<pid>-<start ticks>': names with it can be told apart from those of a dead process."""
    pid = os.getpid()
    return f"{pid}-{start_ticks(pid) or 0}"


def next_id() -> int:
    """A number unique in this process, for names under base_dir() and of other things made here."""
    global _counter
    with _lock:
        _counter += 1
        return _counter


def base_dir() -> Path:
    """This process's directory (created on first use, removed at exit unless something is mounted in it)."""
    global _base
    with _lock:
        if _base is None or not _base.exists():
            _base = Path(tempfile.gettempdir()) / f"{PREFIX}{owner_tag()}"
            _base.mkdir(mode=0o755, exist_ok=True)
            atexit.register(_remove_base)
        return _base


def ledger(path: Path, add: str | None = None, remove: str | None = None) -> list[str]:
    """A file of one item a line: add or remove one, and return what it holds."""
    with _lock:
        items = path.read_text().split() if path.exists() else []
        if add and add not in items:
            items.append(add)
        if remove in items:
            items.remove(remove)
        if add or remove:
            path.write_text("".join(f"{i}\n" for i in items))
        return items


def _remove_base() -> None:
    if _base is not None and _base.exists() and not mounts_under(_base):
        shutil.rmtree(_base, ignore_errors=True)


def _unescape(path: str) -> str:
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), path)


def parse_mounts(mountinfo: str, root: Path | str) -> list[str]:
    """Mount points at or below root in a mountinfo text, deepest first (pure)."""
    root = str(root).rstrip("/")
    out = set()
    for line in mountinfo.splitlines():
        mp = _unescape(line.split()[4])
        if mp == root or mp.startswith(root + "/"):
            out.add(mp)
    return sorted(out, key=lambda p: -p.count("/"))


def mounts_under(root: Path | str) -> list[str]:
    """Mount points at or below root in this process's mount namespace, deepest first."""
    with contextlib.suppress(OSError):
        return parse_mounts(Path("/proc/self/mountinfo").read_text(), root)
    return []


def is_mounted(path: Path | str) -> bool:
    return str(path).rstrip("/") in mounts_under(path)


def _mount(source: str | None, target: str, flags: int) -> bool:
    # mount(2) directly: two `mount` processes cost ~15 ms of every container start (start_overhead).
    libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
    return libc.mount(source.encode() if source else None, target.encode(), None, flags, None) == 0


def prepare(instance_name: str) -> str | None:
    """A shared directory here for this container, or None where that cannot be made (not root)."""
    if os.geteuid() != 0:
        return None
    d = base_dir() / "ctr" / instance_name
    d.mkdir(parents=True, exist_ok=True)
    if not is_mounted(d) and not _mount(str(d), str(d), _MS_BIND):
        return None
    if not _mount(None, str(d), _MS_SHARED):
        release(str(d))
        return None
    return str(d)


def release(path: str | None) -> None:
    """Detach whatever is still mounted under the directory, then remove it."""
    if not path:
        return
    for mp in mounts_under(path):
        procs.run(["umount", "-l", mp], timeout=60)
    with contextlib.suppress(OSError):
        for child in Path(path).iterdir():
            if child.is_dir() and not mounts_under(child):
                child.rmdir()
        Path(path).rmdir()


class ProcessDir:
    """This process's own directory on this machine (base_dir()), as an ability of the machine that
    has it (`Machine.process_dir`; None on every other kind, where owner files beside each path tell
    a later run whose it was): scratch names whose directory names their owner, a ledger of what the
    process made that a later run must find if this one is killed (loop devices), and directories
    shared into containers, where storage conditions mount what a container sees."""

    def new_dir(self, kind: str) -> str:
        """A fresh directory for files of one kind; the caller removes it."""
        d = base_dir() / f"{kind}-{next_id()}"
        d.mkdir(mode=0o755)
        return str(d)

    def new_file(self, kind: str) -> str:
        """A fresh file name (e.g. a helper's log); the caller removes the file."""
        return f"{base_dir()}/{kind}-{next_id()}.log"

    def remember(self, kind: str, item: str) -> None:
        """Note `item` of `kind` (one word) as made by this process."""
        ledger(base_dir() / kind, add=item)

    def forget(self, kind: str, item: str) -> None:
        """`item` is gone again."""
        ledger(base_dir() / kind, remove=item)

    def remembered(self, kind: str) -> list[str]:
        return ledger(base_dir() / kind)

    def container_mount_dir(self, name: str) -> str | None:
        """A directory shared into container `name` (mount propagation); None where it cannot be made."""
        return prepare(name)

    def release_mount_dir(self, path: str | None) -> None:
        """Detach what is mounted under a container_mount_dir() and remove it."""
        release(path)
