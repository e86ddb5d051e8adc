"""The testbed registry's images: the sandbox ("pause") image built from the pinned module's pause.c,
and the guest image pushed there for the pods driver's kubernetes backend.

Split from up_down.py, which starts and removes the cluster; `sh` lives here because both use it.
"""

from __future__ import annotations

import contextlib
import subprocess
import tempfile
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

from ....errors import UserError
from . import KUBERNETES_VERSION, build, configs
from .configs import Layout

def sh(argv: list[str], check: bool = True, **kw) -> subprocess.CompletedProcess:
    res = subprocess.run(argv, capture_output=True, text=True, **kw)
    if check and res.returncode != 0:
        raise UserError(f"`{' '.join(argv)}` failed: {(res.stderr or res.stdout).strip()}")
    return res

def _podman(*args: str, timeout: float = 1800) -> subprocess.CompletedProcess:
    return sh(["podman", *args], timeout=timeout)


def push_pause(lay: Layout) -> None:
    """The sandbox ("pause") image, built from the pinned module's own pause.c (none can be pulled)."""
    src = build.cache_dir() / "go" / "mod" / f"k8s.io/kubernetes@{KUBERNETES_VERSION}" / "build/pause/linux/pause.c"
    if not src.is_file():
        raise UserError(f"pause.c is missing from the Go module cache ({src})", "run `virtbench testbed k8s up` "
                        "again: the build fetches it")
    with tempfile.TemporaryDirectory(prefix="vbk8s-pause-") as tmp:
        root = Path(tmp) / "root"
        root.mkdir()
        sh(["gcc", "-Os", "-static", "-DVERSION=v3.10-virtbench", "-o", str(root / "pause"), str(src)])
        sh(["tar", "-C", str(root), "-cf", f"{tmp}/pause.tar", "pause"])
        local = "localhost/virtbench-k8s-pause:3.10"
        _podman("import", "--change", 'ENTRYPOINT ["/pause"]', f"{tmp}/pause.tar", local)
        try:
            _podman("push", "--tls-verify=false", local, f"docker://{configs.PAUSE_REF}")
        finally:
            _podman("rmi", "-f", local, timeout=120)


def guest_ref(image_hash: str) -> str:
    return f"127.0.0.1:{configs.REGISTRY_PORT}/virtbench/guest:{image_hash}"


def push_guest(info, log: Callable[[str], None] = print) -> str:
    """The guest image into the testbed's registry (unless it is there); returns its reference."""
    from ...container.engine import ensure_image

    ref = guest_ref(info.hash)
    head = urllib.request.Request(
        f"http://127.0.0.1:{configs.REGISTRY_PORT}/v2/virtbench/guest/manifests/{info.hash}", method="HEAD",
        headers={"Accept": "application/vnd.oci.image.manifest.v1+json, "
                           "application/vnd.docker.distribution.manifest.v2+json"})
    with contextlib.suppress(OSError):
        urllib.request.urlopen(head, timeout=5)
        return ref  # 200: pushed before
    t0 = time.monotonic()
    ensure_image("podman", info)
    _podman("push", "--tls-verify=false", info.tag, f"docker://{ref}")
    log(f"pushed the guest image to the testbed's registry as {ref} ({time.monotonic() - t0:.0f} s)")
    return ref
