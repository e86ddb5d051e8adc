"""Host directories that show up inside a running container, mounts made later included.

A container is created with `--mount type=bind,src=<dir>,dst=/vb-mnt,bind-propagation=rslave`,
where <dir> is bound onto itself and made a shared mount first. A storage condition applied later
(tmpfs, a volume, a remote disk) mounts under <dir> on the host and appears under /vb-mnt inside;
unmounting on the host removes it inside too. This is how Kubernetes hands a pod a volume the node
mounted. The container driver calls prepare() at create time and release() after removal.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
from pathlib import Path

from .. import procs
from .hostres import base_dir, is_mounted, is_root, mounts_under

GUEST_DIR = "/vb-mnt"
_MS_BIND, _MS_SHARED = 4096, 1 << 20  # <sys/mount.h>


def _mount(source: str | None, target: str, flags: int) -> bool:
    # mount(2) directly: two `mount` processes cost ~15 ms of every container start (start_overhead).
    libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
    return libc.mount(source.encode() if source else None, target.encode(), None, flags, None) == 0


def prepare(instance_name: str) -> str | None:
    """A shared host directory for this instance, or None where that cannot be made (not root)."""
    if not is_root():
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
