"""The guest image: one Debian root filesystem tarball, the same bytes in every environment.

Built with mmdebstrap from Debian bookworm packages plus virtbench's native kernels (copied to
/opt/virtbench/bin), fetched from the mirrors and through the proxies this machine's apt uses. Cached under data_dir()/images/<hash>/ by a hash of everything that goes in.
Only the KEEP newest images keep their tarball; older ones keep just manifest.json (a record of
what they held), so disk use stays bounded at about KEEP x 0.5 GB. An image a live process uses is
never pruned: whoever takes an image (`require`, `hold`) leaves an owner record under
<hash>/users/ (machines/owners.py: host, boot id, pid and its start time, run), and pruning keeps
the tarball (and, in container/engine.py, the engine's copy) of every image with a live user, from
any checkout of the same user: one data directory, many runs.
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import hashlib
import json
import os
import shlex
import shutil
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from . import aptsources, kernels, paths, procs
from .kernels import sha256_of
from .errors import MissingTool, UserError
from .machines import owners

# Bump when the build recipe changes in a way the other inputs do not show.
IMAGE_FORMAT_VERSION = 1
SUITE = "bookworm"
# "apt" (essential set + apt + ours) against "minbase" (+ Priority:required) with this package list:
# 96.6 s / 523 MB against 93.3 s / 529 MB (same within network noise); apt is the smaller root.
VARIANT = "apt"
PACKAGES = (
    # benchmark tools
    "fio", "sysbench", "stress-ng", "iperf3", "bonnie++", "nginx-light", "wrk", "openmpi-bin",
    "sockperf",  # TCP request/response latency (workload netrr)
    # what workloads and drivers run around them (coreutils: sort od tee wc timeout)
    "procps", "iproute2", "coreutils", "grep", "sed", "mawk", "busybox",
    "openssh-server", "openssh-client",
    # the OpenMP runtime vb-npb links against (hybrid MPI + OpenMP ranks)
    "libgomp1",
    # for the VM driver: a kernel and initrd under /boot (here now so the hash does not churn later)
    "linux-image-cloud-amd64", "initramfs-tools",
)
# Documentation and translations are never read by a benchmark; leaving them out: 523 -> 457 MB.
DPKG_OPTIONS = (
    "path-exclude=/usr/share/man/*",
    "path-exclude=/usr/share/info/*",
    "path-exclude=/usr/share/doc/*",
    "path-include=/usr/share/doc/*/copyright",
    "path-exclude=/usr/share/locale/*",
)
GUEST_BIN_DIR = "/opt/virtbench/bin"
GUEST_MANIFEST = "/opt/virtbench/manifest.txt"
KEEP = 2
_held: set[Path] = set()  # this process's user records
USERS = "users"  # <hash>/users/<pid>-<start>.json: the owner record of each process that took the image
BUILD_TIMEOUT = 3600.0
TAG_PREFIX = "localhost/virtbench-guest"

# Runs under sh with $1 = the new root: copies the kernels in and records the installed package
# versions (inside the image and for manifest.json). {stage} and {pkgout} are filled in per build;
# the hash covers this template, not the temporary paths. One line: mmdebstrap stat()s the hook
# text as a possible file name and warns about newlines.
CUSTOMIZE_HOOK = " && ".join((
    'mkdir -p "$1{bindir}"',
    'cp -a {stage}/. "$1{bindir}/"',
    'chroot "$1" dpkg-query -W -f \'${{Package}}\\t${{Version}}\\n\' > "$1{manifest}"',
    'cp "$1{manifest}" {pkgout}',
))


@dataclass(frozen=True)
class ImageInfo:
    hash: str
    tarball: Path
    manifest: dict = field(compare=False, hash=False, repr=False)

    @property
    def tag(self) -> str:
        return f"{TAG_PREFIX}:{self.hash}"


def images_dir() -> Path:
    return paths.data_dir("images")


@lru_cache(maxsize=None)
def mmdebstrap_version(exe: str) -> str:
    res = procs.run([exe, "--version"], timeout=60)
    if not res.ok:
        raise UserError(f"'{exe} --version' failed: {res.describe_failure()}")
    return (res.stdout + res.stderr).strip()


def find_mmdebstrap() -> str:
    exe = shutil.which("mmdebstrap")
    if not exe:
        raise MissingTool("mmdebstrap", "mmdebstrap", "it builds the guest image")
    return exe


@lru_cache(maxsize=1)
def _arch() -> str:
    res = procs.run(["dpkg", "--print-architecture"], timeout=30)
    return res.stdout.strip() if res.ok else os.uname().machine


def native_files() -> dict[str, Path]:
    """The native kernels that go into the image, by name; UserError if they are not built."""
    bindir = kernels.native_bin_dir()
    files = {p.name: p for p in sorted(bindir.iterdir()) if p.is_file()} if bindir.is_dir() else {}
    if "vb-system" not in files:
        raise UserError(f"native kernels are not built (no vb-system in {bindir})",
                        hint=f"run: {kernels.advice()}")
    return files


def inputs() -> dict:
    """Everything that decides the image's content, in a form that hashes canonically."""
    return {
        "format": IMAGE_FORMAT_VERSION,
        "suite": SUITE,
        "variant": VARIANT,
        "arch": _arch(),
        # The host's apt sources for SUITE (the image's own sources.list); none: mmdebstrap's default.
        "mirrors": list(aptsources.sources(SUITE)),
        "packages": sorted(PACKAGES),
        "dpkg_options": list(DPKG_OPTIONS),
        "mmdebstrap": mmdebstrap_version(find_mmdebstrap()),
        "hook": CUSTOMIZE_HOOK,
        "guest_paths": [GUEST_BIN_DIR, GUEST_MANIFEST],
        "native": {name: sha256_of(path) for name, path in native_files().items()},
    }


def input_hash(inp: dict) -> str:
    canonical = json.dumps(inp, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]


def _load(d: Path) -> ImageInfo | None:
    tarball, manifest = d / "rootfs.tar", d / "manifest.json"
    if not (tarball.is_file() and manifest.is_file()):
        return None
    try:
        data = json.loads(manifest.read_text())
    except (OSError, ValueError):
        return None
    return ImageInfo(d.name, tarball, data)


def find() -> ImageInfo | None:
    """The built image for the current inputs, or None. UserError if the native kernels are missing."""
    return _load(images_dir() / input_hash(inputs()))


def require() -> ImageInfo:
    """The built image for the current inputs, held for this process (`hold`); UserError if none."""
    info = find()
    if info is None or not hold(info):
        raise UserError("guest image not built for these kernels", hint="run: virtbench image build")
    return info


def hold(info: ImageInfo) -> bool:
    """Record that this process uses image `info`, so no build's pruning (here or in another checkout
    of this user) removes its tarball or its engine copy while the process lives; False if it was
    pruned before we got it. The record names the run this process works for now, if any."""
    users = info.tarball.parent / USERS
    with _prune_lock():
        if not info.tarball.is_file():
            return False
        users.mkdir(exist_ok=True)
        rec = owners.record()
        path = users / f"{rec['pid']}-{rec['pidstart']}.json"
        path.write_text(json.dumps(rec))
        if not _held:
            atexit.register(_release)
        _held.add(path)
    return True


def _release() -> None:
    """At exit: this process's records go (a killed process's are removed by `live_users`)."""
    for path in _held:
        with contextlib.suppress(OSError):
            path.unlink()


def live_users(h: str) -> list[dict]:
    """The owner records of the live processes that took image `h` (records of dead ones are removed)."""
    out = []
    for f in sorted((images_dir() / h / USERS).glob("*.json")):
        try:
            rec = json.loads(f.read_text())
        except (OSError, ValueError):
            continue
        if isinstance(rec, dict) and not owners.owner_dead(rec, here=True):
            out.append(rec)
        elif isinstance(rec, dict):
            with contextlib.suppress(OSError):
                f.unlink()
    return out


def users_text(users: list[dict]) -> str:
    """'run R (pid P)' for each user record, or 'pid P' for a process outside a run."""
    return ", ".join(f"run {u['run_id']} (pid {u.get('pid')})" if u.get("run_id") else f"pid {u.get('pid')}"
                     for u in users)


def build(force: bool = False, log: Callable[[str], None] | None = None) -> ImageInfo:
    """Build the image for the current inputs (or return the cached one unless force)."""
    log = log or (lambda line: None)
    exe = find_mmdebstrap()
    inp = inputs()
    h = input_hash(inp)
    d = images_dir() / h
    with _build_lock():
        # Another process may have built it while we waited for the lock.
        if not force and (info := _load(d)):
            return info
        d.mkdir(parents=True, exist_ok=True)
        _remove_partials(d)
        info = _build_into(exe, inp, h, d, log)
        hold(info)  # the builder is about to use it
        prune(keep=KEEP, log=log)
        return info


@contextlib.contextmanager
def _build_lock():
    with open(images_dir() / ".build.lock", "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        yield


@contextlib.contextmanager
def _prune_lock():
    # Short, and apart from the build lock (held for a whole build): a process taking an image and a
    # prune deciding what goes never interleave.
    with open(images_dir() / ".prune.lock", "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        yield


def _remove_partials(d: Path) -> None:
    """Delete temp files of builds whose process is gone (killed before its own cleanup ran)."""
    for p in d.glob("*.partial-*"):
        pid = p.name.rpartition("-")[2]
        if not (pid.isdigit() and _pid_alive(int(pid))):
            with contextlib.suppress(OSError):
                shutil.rmtree(p) if p.is_dir() else p.unlink()


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _build_into(exe: str, inp: dict, h: str, d: Path, log: Callable[[str], None]) -> ImageInfo:
    pid = os.getpid()
    tmp_tar = d / f"rootfs.tar.partial-{pid}"
    stage = d / f"stage.partial-{pid}"  # a copy, so what we hashed is exactly what goes in
    pkgout = d / f"packages.partial-{pid}"
    tmp_manifest = d / f"manifest.json.partial-{pid}"
    try:
        stage.mkdir()
        for name, src in native_files().items():
            shutil.copyfile(src, stage / name)
            os.chmod(stage / name, 0o755)
            if sha256_of(stage / name) != inp["native"].get(name):
                raise UserError(f"native kernel {name} changed during the image build", hint="run it again")
        hook = CUSTOMIZE_HOOK.format(stage=shlex.quote(str(stage)), pkgout=shlex.quote(str(pkgout)),
                                     bindir=GUEST_BIN_DIR, manifest=GUEST_MANIFEST)
        argv = [exe, f"--mode={'root' if os.geteuid() == 0 else 'unshare'}", f"--variant={VARIANT}",
                "--include=" + ",".join(sorted(PACKAGES)), "--format=tar",
                *[f"--dpkgopt={o}" for o in DPKG_OPTIONS], f"--customize-hook={hook}",
                # a proxy changes where bytes come from, not which: not in the hash
                *[f"--aptopt={o}" for o in aptsources.proxies()],
                SUITE, str(tmp_tar), *inp["mirrors"]]
        log(f"building guest image {h}: mmdebstrap --variant={VARIANT}, {len(PACKAGES)} packages, "
            f"{len(inp['native'])} native kernels")
        started = time.time()
        run_streaming(argv, log, BUILD_TIMEOUT)
        seconds = time.time() - started
        packages = dict(line.split("\t", 1) for line in pkgout.read_text().splitlines() if "\t" in line)
        size = tmp_tar.stat().st_size
        manifest = {
            "hash": h, "inputs": inp, "packages": packages,
            "built_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started)),
            "built_at_epoch": started, "build_seconds": round(seconds, 1),
            "size_bytes": size, "tarball_sha256": sha256_of(tmp_tar),
        }
        tmp_manifest.write_text(json.dumps(manifest, indent=2, sort_keys=True))
        # The manifest is renamed last: a directory with both files is a complete image.
        os.replace(tmp_tar, d / "rootfs.tar")
        os.replace(tmp_manifest, d / "manifest.json")
        log(f"built guest image {h} in {seconds:.1f} s, {size / 1e6:.0f} MB ({len(packages)} packages)")
        return ImageInfo(h, d / "rootfs.tar", manifest)
    finally:
        for p in (tmp_tar, pkgout, tmp_manifest):
            with contextlib.suppress(FileNotFoundError):
                p.unlink()
        shutil.rmtree(stage, ignore_errors=True)


def run_streaming(argv: list[str], log: Callable[[str], None], timeout: float) -> None:
    """Run argv, passing each output line to log; kill its process group on timeout or Ctrl-C."""
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            start_new_session=True)
    fired = threading.Event()

    def on_timeout():
        fired.set()
        procs.kill_group(proc)

    timer = threading.Timer(timeout, on_timeout)
    timer.daemon = True
    timer.start()
    tail: list[str] = []
    try:
        assert proc.stdout is not None
        for raw in proc.stdout:
            line = raw.decode(errors="replace").rstrip()
            tail = (tail + [line])[-20:]
            log(line)
        proc.wait()
    except BaseException:
        procs.kill_group(proc)
        raise
    finally:
        timer.cancel()
    if fired.is_set():
        raise UserError(f"mmdebstrap took longer than {timeout:.0f} s and was stopped")
    if proc.returncode != 0:
        raise UserError(f"mmdebstrap failed (exit {proc.returncode}):\n  " + "\n  ".join(tail[-10:]),
                        hint="check that the Debian mirror is reachable (apt-get update)")


def installed() -> list[ImageInfo]:
    """Complete images on disk, newest first."""
    out = [info for d in images_dir().iterdir() if d.is_dir() and (info := _load(d))]
    return sorted(out, key=lambda i: i.manifest.get("built_at_epoch", 0), reverse=True)


def prune(keep: int = KEEP, log: Callable[[str], None] = lambda line: None) -> None:
    """Remove the tarballs of all but the `keep` newest images, except those a live process uses
    (said in `log`, with who uses them)."""
    with _prune_lock():
        for old in installed()[keep:]:
            if users := live_users(old.hash):
                log(f"kept old guest image tarball {old.hash} (older than the newest {keep}): "
                    f"in use by {users_text(users)}")
                continue
            with contextlib.suppress(OSError):
                old.tarball.unlink()
                log(f"removed old guest image tarball {old.hash} (manifest kept)")


def pruned(h: str) -> bool:
    """True when image `h` was built in this data directory, its tarball has been pruned and no live
    process uses it: its engine copies may go. An image this data directory never built (another
    VIRTBENCH_DATA, another installation sharing the engine) is not ours to judge: False."""
    d = images_dir() / h
    return (d / "manifest.json").is_file() and not (d / "rootfs.tar").exists() and not live_users(h)

