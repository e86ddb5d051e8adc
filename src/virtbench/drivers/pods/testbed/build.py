"""The cluster's binaries: built from the Go modules in testbed/k8s, once per content hash.

The key hashes every file of the modules (go.mod, go.sum, the mains) and the Go version, so a
change of pin gives a fresh directory and an unchanged checkout (or a later clean clone on the same
machine) reuses what was built. Go's module and build caches live beside the binaries, in the
user's cache directory, so a rebuild after a pin change only compiles what changed. The build runs
at nice 19 (it takes minutes of CPU) and reports each binary as it lands.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import platformdirs

from .... import paths
from ....errors import UserError
from . import KUBERNETES_VERSION

GO_TOOLCHAIN = "go1.26.8"  # what setup.sh fetches when /usr/local/go is not there
# module directory -> the binaries its cmd/ holds
MODULES = {
    "cluster": ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubelet", "kube-proxy"),
    "registry": ("registry",),
}
BUILD_TIMEOUT = 3600.0


def source_dir() -> Path:
    return paths.PROJECT_ROOT / "testbed" / "k8s"


def cache_dir() -> Path:
    """Binaries under k8s/bin/<key>, Go's caches under go/ (VIRTBENCH_K8S_CACHE moves both)."""
    override = os.environ.get("VIRTBENCH_K8S_CACHE")
    return Path(override) if override else Path(platformdirs.user_cache_dir("virtbench"))


def go_binary() -> str:
    """/usr/local/go, else setup.sh's toolchain in the cache, else `go` on PATH (1.24 or newer)."""
    for cand in ("/usr/local/go/bin/go", str(cache_dir() / "go" / f"toolchain-{GO_TOOLCHAIN}" / "bin" / "go"), "go"):
        found = shutil.which(cand)
        if found:
            return found
    raise UserError("the Kubernetes testbed is built from source and needs Go (1.24 or newer): none found",
                    "run `bash setup.sh` (it fetches Go from the Go module proxy), or install Go into /usr/local/go")


def go_version(go: str) -> str:
    return subprocess.run([go, "env", "GOVERSION"], capture_output=True, text=True, check=True).stdout.strip()


def source_files() -> dict[str, Path]:
    root = source_dir()
    return {str(p.relative_to(root)): p for p in sorted(root.rglob("*"))
            if p.is_file() and p.suffix in (".go", ".mod", ".sum")}


def build_key(go_ver: str) -> str:
    files = source_files()
    if not files:
        raise UserError(f"the testbed's Go modules are missing ({source_dir()})",
                        "the Kubernetes testbed runs from a virtbench clone")
    inputs = {"files": {n: hashlib.sha256(p.read_bytes()).hexdigest() for n, p in files.items()},
              "go": go_ver, "version": KUBERNETES_VERSION}
    return hashlib.sha256(json.dumps(inputs, sort_keys=True).encode()).hexdigest()[:16]


def _ldflags() -> str:
    major, minor = KUBERNETES_VERSION.lstrip("v").split(".")[:2]
    pkg = "k8s.io/component-base/version"
    # without these the components report v0.0.0-master and the nodes say so
    return " ".join(["-s", "-w", f"-X {pkg}.gitVersion={KUBERNETES_VERSION}", f"-X {pkg}.gitMajor={major}",
                     f"-X {pkg}.gitMinor={minor}", f"-X {pkg}.gitTreeState=clean"])


def built_dir() -> Path | None:
    """The binaries' directory if they are built for the current sources, else None."""
    try:
        key = build_key(go_version(go_binary()))
    except (UserError, OSError, subprocess.CalledProcessError):
        return None
    d = cache_dir() / "k8s" / "bin" / key
    return d if (d / "build.json").is_file() else None


@contextlib.contextmanager
def _lock(base: Path):
    base.mkdir(parents=True, exist_ok=True)
    with open(base / ".lock", "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        yield


def ensure(log: Callable[[str], None] = print) -> Path:
    """The directory of the built binaries, building them first when the key is new."""
    go = go_binary()
    go_ver = go_version(go)
    base = cache_dir()
    dest = base / "k8s" / "bin" / build_key(go_ver)
    if (dest / "build.json").is_file():
        return dest
    with _lock(dest.parent):
        if (dest / "build.json").is_file():
            return dest  # built by another process while we waited
        tmp = dest.parent / f".build-{dest.name}-{os.getpid()}"
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        env = {**os.environ, "GOMODCACHE": str(base / "go" / "mod"), "GOCACHE": str(base / "go" / "build"),
               "GOFLAGS": "-mod=readonly", "CGO_ENABLED": "0", "GOTOOLCHAIN": "local"}
        started = time.monotonic()
        log(f"building the Kubernetes testbed ({KUBERNETES_VERSION}) with {go_ver} into {dest}: "
            f"once per version; from an empty cache about 10 min of CPU at nice 19")
        try:
            for module, names in MODULES.items():
                for name in names:
                    t0 = time.monotonic()
                    _go_build(go, source_dir() / module, name, tmp, env)
                    log(f"  {name}: {time.monotonic() - t0:.0f} s")
            took = time.monotonic() - started
            (tmp / "build.json").write_text(json.dumps({
                "version": KUBERNETES_VERSION, "go": go_ver, "seconds": round(took, 1),
                "files": {p.name: p.stat().st_size for p in sorted(tmp.iterdir())}}, indent=2))
            shutil.rmtree(dest, ignore_errors=True)
            os.rename(tmp, dest)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        log(f"built the Kubernetes testbed in {took:.0f} s")
    return dest


def _go_build(go: str, module: Path, name: str, out: Path, env: dict[str, str]) -> None:
    argv = ["nice", "-n", "19", go, "build", "-trimpath", "-ldflags", _ldflags(), "-o", str(out / name),
            f"./cmd/{name}"]
    try:
        res = subprocess.run(argv, cwd=module, env=env, capture_output=True, text=True, timeout=BUILD_TIMEOUT)
    except subprocess.TimeoutExpired:
        raise UserError(f"building {name} took more than {BUILD_TIMEOUT:.0f} s", "is the machine overloaded?") from None
    if res.returncode != 0:
        tail = "\n".join((res.stderr or res.stdout).strip().splitlines()[-15:])
        raise UserError(f"building {name} (go build in {module}) failed:\n{tail}",
                        "the module cache may be incomplete: it needs the Go module proxy once "
                        "(GOPROXY); rerun to retry")
