"""virtbench's native kernels: their sources, where the built files live, and building them.

A clone builds native/ with `make -C native` into native/build/bin. An installed package carries
the same sources (virtbench/native) and builds them on first use into
data_dir()/native/<key>/bin, where the key hashes the sources, the compilers (their versions) and
the flags: a new compiler, Open MPI or virtbench version gets a fresh directory, never a mix of old
and new files. The guest image hashes the built files, so it follows.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import platform
import shlex
import shutil
import time
from collections.abc import Callable
from functools import lru_cache
from pathlib import Path

from . import paths, procs
from .errors import UserError

# The make variables the Makefiles read from the environment: they change the binaries.
FLAG_VARS = ("CC", "MPICC", "CFLAGS", "CPPFLAGS", "LDFLAGS")
COMPILER_PACKAGES = "build-essential"
MPI_PACKAGES = "libopenmpi-dev openmpi-bin"
LAPACK_PACKAGE = "liblapack-dev"  # vb-eigen links LAPACK statically
MPI_KERNELS = ("vb-npb", "vb-mpibench", "vb-hpa", "vb-eigen")
KEEP = 3  # built directories kept in an installed package's data directory
BUILD_TIMEOUT = 1800.0


def sha256_of(path: Path) -> str:
    """SHA-256 of a file, read in 1 MiB chunks (kernels, image tarballs, shipped files)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def source_files() -> dict[str, Path]:
    """The kernels' sources by relative path (native/ without its build output)."""
    root = paths.native_src_dir()
    if not root.is_dir():
        return {}
    return {str(p.relative_to(root)): p for p in sorted(root.rglob("*"))
            if p.is_file() and "build" not in p.relative_to(root).parts and p.suffix != ".o"}


def sources_hash(files: dict[str, Path]) -> str:
    """One hash of the sources (also names the source tree shipped to a machine that builds there)."""
    return hashlib.sha256(json.dumps({n: sha256_of(p) for n, p in files.items()},
                                     sort_keys=True).encode()).hexdigest()[:16]


def _version(argv: list[str]) -> str:
    res = procs.run(argv, timeout=60)
    return (res.stdout + res.stderr).strip() if res.returncode != 127 else "missing"


@lru_cache(maxsize=None)
def toolchain() -> dict[str, str]:
    """What besides the sources decides the binaries: compilers' versions, flags, architecture."""
    cc = shlex.split(os.environ.get("CC") or "cc")
    mpicc = shlex.split(os.environ.get("MPICC") or "mpicc")
    return {
        "arch": platform.machine(),
        "flags": " ".join(f"{v}={os.environ[v]}" for v in FLAG_VARS if os.environ.get(v)),
        "cc": _version([*cc, "--version"]),
        # Open MPI's wrapper: its version and the command it runs (include and library paths).
        "mpicc": _version([*mpicc, "--showme:version"]) + "\n" + _version([*mpicc, "--showme"]),
    }


@lru_cache(maxsize=None)
def build_key() -> str:
    """The installed package's content hash: sources + compilers + flags."""
    inputs = {"sources": sources_hash(source_files()), "toolchain": toolchain()}
    return hashlib.sha256(json.dumps(inputs, sort_keys=True).encode()).hexdigest()[:16]


def package_bin_dir() -> Path:
    return paths.data_dir() / "native" / build_key() / "bin"


def native_bin_dir() -> Path:
    """Directory holding virtbench's own compiled kernels (the same files go into the guest image):
    native/build/bin in a clone (`make -C native`); in an installed package a directory under the
    data directory named by the hash of sources, compilers and flags (`virtbench build`)."""
    override = os.environ.get("VIRTBENCH_BIN")
    if override:
        return Path(override)
    if paths.is_clone():
        return paths.PROJECT_ROOT / "native" / "build" / "bin"
    return package_bin_dir()


def advice() -> str:
    """What builds the kernels for the way virtbench was installed."""
    if os.environ.get("VIRTBENCH_BIN"):
        return "build the kernels into $VIRTBENCH_BIN, or unset it"
    return "make -C native" if paths.is_clone() else "virtbench build"


def missing_packages() -> list[str]:
    """Debian packages a full build still needs here: a C compiler and make; Open MPI's mpicc
    (without it the MPI kernels are left out); LAPACK's static library (without it vb-eigen is)."""
    out = []
    if not (shutil.which(shlex.split(os.environ.get("CC") or "cc")[0]) and shutil.which("make")):
        out.append(COMPILER_PACKAGES)
    mpicc = shutil.which(shlex.split(os.environ.get("MPICC") or "mpicc")[0])
    if not mpicc:
        out.append(MPI_PACKAGES)
    else:
        # the compiler prints the bare name back when it finds no such file (as native/eigen/Makefile asks)
        res = procs.run([mpicc, "-print-file-name=liblapack.a"], timeout=60)
        if res.ok and "/" not in res.stdout.strip():
            out.append(LAPACK_PACKAGE)
    return out


def ensure(log: Callable[[str], None] | None = None, force: bool = False) -> Path:
    """The built kernels' directory, building them first if vb-system is not there (or if force).
    With VIRTBENCH_BIN set the caller chose the files: nothing is built."""
    log = log or (lambda line: None)
    bindir = native_bin_dir()
    if os.environ.get("VIRTBENCH_BIN") or ((bindir / "vb-system").is_file() and not force):
        return bindir
    if paths.is_clone():
        # make is incremental: cheap when nothing changed.
        log(f"building the native kernels: make -C {paths.PROJECT_ROOT / 'native'}")
        _make(paths.PROJECT_ROOT / "native", None, log)
        return bindir
    return _build_package(bindir.parent, log, force)


def _make(src: Path, bindir: Path | None, log: Callable[[str], None]) -> None:
    if COMPILER_PACKAGES in missing_packages():
        raise UserError("cannot build the native kernels: no C compiler or make",
                        f"apt-get install {COMPILER_PACKAGES}, then {advice()}")
    res = procs.run(["make", "-s", "-C", str(src), *([f"BINDIR={bindir}"] if bindir else [])],
                    timeout=BUILD_TIMEOUT)
    for line in res.stderr.splitlines():
        if "skipped" in line:  # MPI kernels left out: say why, the build goes on
            log(line.strip())
    if not res.ok:
        raise UserError(f"building the native kernels failed: {res.describe_failure()}",
                        f"check the compiler (apt-get install {COMPILER_PACKAGES} {MPI_PACKAGES})")


@contextlib.contextmanager
def _lock(base: Path):
    with open(base / ".lock", "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        yield


def _build_package(dest: Path, log: Callable[[str], None], force: bool) -> Path:
    """Build into a temporary directory beside dest, then rename: dest is complete or absent."""
    base = dest.parent
    base.mkdir(parents=True, exist_ok=True)
    files = source_files()
    if "Makefile" not in files:
        raise UserError(f"the kernel sources are missing from the package ({paths.native_src_dir()})",
                        "reinstall virtbench")
    with _lock(base):
        if (dest / "bin" / "vb-system").is_file() and not force:
            return dest / "bin"  # another process built it while we waited
        for stale in base.glob(".build-*"):  # left by a killed build (we hold the lock)
            shutil.rmtree(stale, ignore_errors=True)
        tmp = base / f".build-{dest.name}-{os.getpid()}"
        try:
            for rel, path in files.items():  # a copy: the package directory may be read-only
                (tmp / "src" / rel).parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(path, tmp / "src" / rel)
            log(f"building virtbench's native kernels into {dest} (once per version and compiler)")
            started = time.time()
            _make(tmp / "src", tmp / "bin", log)
            built = {p.name: sha256_of(p) for p in sorted((tmp / "bin").iterdir())}
            (tmp / "build.json").write_text(json.dumps({
                "key": dest.name, "sources": sources_hash(files), "toolchain": toolchain(), "files": built,
                "built_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started)),
            }, indent=2, sort_keys=True))
            shutil.rmtree(tmp / "src")
            shutil.rmtree(dest, ignore_errors=True)
            os.rename(tmp, dest)
            log(f"built {len(built)} native kernels in {time.time() - started:.1f} s")
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        _prune(base, keep=KEEP)
    return dest / "bin"


def _prune(base: Path, keep: int) -> None:
    """Older builds go (images keep their own copies of the kernels)."""
    built = sorted((d for d in base.iterdir() if d.is_dir() and not d.name.startswith(".")),
                   key=lambda d: d.stat().st_mtime, reverse=True)
    for old in built[keep:]:
        shutil.rmtree(old, ignore_errors=True)
