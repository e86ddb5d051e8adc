"""The same bytes everywhere: virtbench's native kernels (and other files) go to each machine once,
into a content-addressed cache there, verified by hash after the transfer.

Layout on a machine, under its virtbench directory (inventory `virtbench_dir`, default
~/.cache/virtbench): `native/<hash>/bin/` (the kernels) and `blobs/<sha256>/<name>` (files such as
the guest image tarball). A directory appears under its final name only once complete and
verified (extract into a temporary name, check every file's SHA-256, rename), so a transfer cut
short, or a full disk, never leaves half a cache entry that a later run would trust.
Where the shipped kernels cannot run (another architecture or C library), they are built there
from the same sources, and the source hash and compiler are recorded.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import re
import secrets
import tarfile
import threading
from dataclasses import dataclass
from pathlib import Path

from .. import kernels, paths
from ..errors import UserError
from ..kernels import sha256_of
from .base import Machine

DEFAULT_DIR = ".cache/virtbench"  # relative to the remote user's home
_lock = threading.Lock()
_done: dict[tuple[str, str], "Shipped"] = {}


@dataclass(frozen=True)
class Shipped:
    """Where a machine has the kernels, and how they got there (recorded with results)."""

    bin_dir: str
    native_hash: str
    how: str            # "shipped" | "cached" | "built"
    compiler: str = ""  # when built there


def is_shipped_to(machine: Machine) -> bool:
    """Do this controller's files reach `machine` by shipping? (Not on this machine itself.)"""
    return not machine.is_local


def data_dir(machine: Machine) -> str:
    """virtbench's own directory on `machine`: the data directory here, remote_dir() elsewhere."""
    return str(paths.data_dir()) if machine.is_local else remote_dir(machine)


def remote_dir(machine: Machine) -> str:
    base = machine.virtbench_dir or DEFAULT_DIR
    if base.startswith("~/"):
        base = base[2:]
    return base if base.startswith("/") else f"{machine.facts()['home'].rstrip('/')}/{base}"


def native_manifest() -> dict[str, str]:
    """name -> SHA-256 of every built kernel."""
    bindir = kernels.native_bin_dir()
    files = sorted(p for p in bindir.iterdir() if p.is_file()) if bindir.is_dir() else []
    if not any(p.name == "vb-system" for p in files):
        raise UserError(f"native kernels are not built (no vb-system in {bindir})",
                        hint=f"run: {kernels.advice()}")
    return {p.name: sha256_of(p) for p in files}


def manifest_hash(manifest: dict[str, str]) -> str:
    return hashlib.sha256(json.dumps(manifest, sort_keys=True).encode()).hexdigest()[:16]


def _tar(files: dict[str, Path], prefix: str) -> bytes:
    """A deterministic tar (fixed owner and times) so the same files give the same bytes."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name in sorted(files):
            info = tar.gettarinfo(str(files[name]), arcname=f"{prefix}{name}")
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            info.mtime = 0
            with open(files[name], "rb") as fh:
                tar.addfile(info, fh)
    return buf.getvalue()


# Verify the transferred tar, unpack it under a temporary name, check every file, then rename.
# Any failure removes both the tar and the partial directory.
_INSTALL = r'''
set -u
base=$1; name=$2; tarsum=$3; sums=$4; probe=${5:-}
tmp="$base/.incoming-$name-$$"; tarfile="$tmp.tar"
fail() { rm -rf "$tmp" "$tarfile"; echo "$1" >&2; exit 1; }
mkdir -p "$base" || fail "cannot make $base"
cat > "$tarfile" || fail "writing $tarfile failed"
echo "$tarsum  $tarfile" | sha256sum -c --status - || fail "the transferred archive does not match its SHA-256"
mkdir -p "$tmp" || fail "cannot make $tmp"
tar -xf "$tarfile" -C "$tmp" >&2 || fail "unpacking failed"
(cd "$tmp" && printf '%s' "$sums" | sha256sum -c --status -) || fail "a file does not match its SHA-256 after unpacking"
rm -f "$tarfile"
if [ -d "$base/$name" ]; then rm -rf "$tmp"; else mv "$tmp" "$base/$name" || fail "cannot rename $tmp"; fi
touch "$base/$name/.complete"
# Does what was shipped run there? (11: no; the caller builds from the sources instead)
if [ -n "$probe" ]; then "$base/$name/$probe" list >/dev/null 2>&1 || exit 11; fi
exit 0
'''


def _install(machine: Machine, base: str, name: str, files: dict[str, Path], prefix: str,
             what: str, probe: str = "") -> bool:
    """One round trip: the tar goes in on stdin, the script checks and places it. With `probe`
    (a program in it), False when that program does not run there."""
    data = _tar(files, prefix)
    sums = "".join(f"{sha256_of(files[n])}  {prefix}{n}\n" for n in sorted(files))
    res = machine.run(["sh", "-c", _INSTALL, "vb", base, name, hashlib.sha256(data).hexdigest(), sums, probe],
                      stdin=data, timeout=600)
    if probe and res.returncode == 11:
        return False
    if not res.ok:
        text = res.stderr.strip() or res.describe_failure()
        raise UserError(f"shipping {what} to {machine.name} failed: {text}", _space_hint(text, base))
    return True


def _space_hint(text: str, base: str) -> str:
    if "space" in text.lower():
        return f"the remote disk is full: free space under {base}, or point virtbench_dir at a bigger disk"
    return "check the connection and the host's virtbench_dir"


def ensure_native(machine: Machine, make_dirs: tuple[str, ...] = ()) -> Shipped:
    """The kernels on `machine` (shipped once per machine and content, verified; cached there).
    `make_dirs` are created in the same round trip (an instance's scratch directory)."""
    if machine.is_local:
        manifest = native_manifest()
        return Shipped(str(kernels.native_bin_dir()), manifest_hash(manifest), "local")
    manifest = native_manifest()
    h = manifest_hash(manifest)
    key = (machine.name, h)
    with _lock:
        done = _done.get(key)
    if done:
        if make_dirs:
            res = machine.run(["mkdir", "-p", "--", *make_dirs], timeout=60)
            if not res.ok:
                raise UserError(f"cannot make {', '.join(make_dirs)} on {machine.name}: {res.describe_failure()}",
                                "check the host's virtbench_dir and its permissions")
        return done
    base = f"{remote_dir(machine)}/native"
    bin_dir = f"{base}/{h}/bin"
    # One round trip when cached: present (10 if not) and runnable there (11 if not).
    check = ["sh", "-c", 'd=$1; shift; [ $# -eq 0 ] || mkdir -p -- "$@" || exit 12; [ -f "$d/.complete" ] || exit 10; '
             '"$d/bin/vb-system" list >/dev/null 2>&1 || exit 11', "vb", f"{base}/{h}", *make_dirs]
    res = machine.run(check, timeout=60)
    how, code = "cached", res.returncode
    if code == 10:
        files = {n: kernels.native_bin_dir() / n for n in manifest}
        runs = _install(machine, base, h, files, "bin/", "the native kernels", probe="bin/vb-system")
        how, code = "shipped", 0 if runs else 11
    shipped = Shipped(bin_dir, h, how)
    if code == 12:
        raise UserError(f"cannot make {', '.join(make_dirs)} on {machine.name}: {res.stderr.strip()}",
                        "check the host's virtbench_dir and its permissions")
    if code == 11:
        shipped = build_there(machine, "the shipped vb-system does not run there")
    elif code != 0:
        raise UserError(f"checking the native kernels on {machine.name} failed: {res.describe_failure()}",
                        "check the connection and the host's virtbench_dir")
    with _lock:
        _done[key] = shipped
    return shipped


def source_files() -> dict[str, Path]:
    """The kernels' sources (a clone's native/, or the installed package's copy)."""
    return kernels.source_files()


def build_there(machine: Machine, why: str) -> Shipped:
    """The shipped binaries do not run there: build the same sources on the machine."""
    files = source_files()
    h = kernels.sources_hash(files)
    base = f"{remote_dir(machine)}/native-src"
    name = f"src-{h}"
    if not machine.run(["test", "-f", f"{base}/{name}/.complete"], timeout=60).ok:
        _install(machine, base, name, files, "", "the native kernels' sources")
    src = f"{base}/{name}"
    if not machine.run(["test", "-x", f"{src}/build/bin/vb-system"], timeout=60).ok:
        res = machine.run(["make", "-s", "-C", src], timeout=1800)
        if not res.ok:
            raise UserError(f"the native kernels do not run on {machine.name} ({why}) and building them there "
                            f"failed: {res.describe_failure()}",
                            "install a C compiler, make and Open MPI there: apt-get install build-essential "
                            "libopenmpi-dev openmpi-bin")
    cc = machine.run(["sh", "-c", "cc --version | head -1"], timeout=60).stdout.strip()
    return Shipped(f"{src}/build/bin", f"src-{h}", "built", cc)


def file_sha256(path: Path) -> str:
    """SHA-256 of a big local file, cached beside it as `<file>.sha256` (sha256sum's format):
    hashing the guest image tarball costs seconds, and a file rewritten later is newer than its
    cached hash, so that one is computed again."""
    side = path.with_name(path.name + ".sha256")
    with contextlib.suppress(OSError, IndexError):
        if side.stat().st_mtime_ns >= path.stat().st_mtime_ns:
            cached = side.read_text().split()[0]
            if re.fullmatch(r"[0-9a-f]{64}", cached):
                return cached
    digest = sha256_of(path)
    tmp = side.with_name(f".{side.name}.{os.getpid()}")
    try:
        tmp.write_text(f"{digest}  {path.name}\n")
        os.replace(tmp, side)
    except OSError:  # a read-only directory: the hash is computed again next time
        with contextlib.suppress(OSError):
            tmp.unlink()
    return digest


# Check the transferred file against its hash, then give it its final name; otherwise remove it.
_PLACE = r'''
part=$1; dest=$2; sum=$3
if ! echo "$sum  $part" | sha256sum -c --status -; then
  rm -f "$part"; echo "the transferred file does not match its SHA-256" >&2; exit 1
fi
mv -f "$part" "$dest" || { rm -f "$part"; echo "cannot rename $part to $dest" >&2; exit 1; }
'''
_blob_locks: dict[tuple[str, str], threading.Lock] = {}


def ensure_blob(machine: Machine, local_path: Path, sha256: str, name: str) -> str:
    """The file `local_path` (of hash `sha256`) on `machine`, at `<remote_dir>/blobs/<sha256>/<name>`:
    transferred once per machine, checked by SHA-256 there, and only then given that name (so a cut
    transfer or a full disk never leaves a file a later run would trust). Its path there."""
    if machine.is_local:
        return str(local_path)
    base = f"{remote_dir(machine)}/blobs/{sha256}"
    dest = f"{base}/{name}"
    with _lock:
        lock = _blob_locks.setdefault((machine.name, sha256), threading.Lock())
    with lock:  # one transfer per blob and machine in this process
        if machine.run(["test", "-f", dest], timeout=60).ok:
            return dest
        res = machine.run(["mkdir", "-p", base], timeout=60)
        if not res.ok:
            raise UserError(f"cannot make {base} on {machine.name}: {res.describe_failure()}",
                            "check the host's virtbench_dir and its permissions")
        part = f"{base}/.incoming-{name}-{secrets.token_hex(4)}"
        try:
            machine.put(local_path, part)
        except BaseException as exc:  # Ctrl-C included: no partial file stays behind
            machine.run(["rm", "-f", part], timeout=60)
            if isinstance(exc, OSError):
                raise UserError(f"shipping {local_path.name} to {machine.name} failed: {exc}",
                                _space_hint(str(exc), base)) from None
            raise
        res = machine.run(["sh", "-c", _PLACE, "vb", part, dest, sha256], timeout=600)
        if not res.ok:
            text = res.stderr.strip() or res.describe_failure()
            raise UserError(f"installing {local_path.name} on {machine.name} failed: {text}",
                            f"the transfer was damaged, or {local_path} changed while it was read: try again"
                            if "SHA-256" in text
                            else _space_hint(text, base))
    return dest


def reset_cache() -> None:
    """Forget what was shipped in this process (tests that wipe a machine's cache)."""
    with _lock:
        _done.clear()

