"""VM disks from the guest image: cached base disks, boot files, and per-instance disks.

Base disks are ext4 images made with `mke2fs -d` from the unpacked image plus the VM boot glue
(`guest.py`), without mounting anything. They are cached under data_dir()/vm/base/<image>-<glue>/
by size: `disk-auto.raw` (the image plus 512 MiB free) or `disk-<bytes>.raw`, an image of exactly
that many bytes whose filesystem is filled with real, incompressible (seeded pseudo-random) data
up to a small reserve, so copying it costs what copying an image of that size costs.

On a remote machine the base disk is built there (`site.py`); instance disks, blank disks and
snapshots are made on the VM's machine through its executor.

Instance disks are made from a base disk in one of three modes:
- copy: a full copy of the base disk (what Eucalyptus did; time grows with the image size);
- overlay: a qcow2 file backed by the base disk (copy-on-write; constant time);
- reflink: a copy that shares blocks (`cp --reflink=always`), where the filesystem supports it.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

from ... import paths
from ...errors import ConditionUnavailable, MissingTool, UserError
from ...machines import Machine, local
from ...machines.ssh import make_keypair
from . import guest, initrd

MODES = ("copy", "overlay", "reflink")
AUTO_FREE = 512 << 20  # free space in an unpadded ("auto") disk
PAD_RESERVE_MIN = 64 << 20  # free space left in a padded disk: max(this, PAD_RESERVE_FRACTION)
PAD_RESERVE_FRACTION = 0.02
PAD_PATH = "/opt/virtbench/pad/padding.bin"
ALIGN = 16 << 20
BUILD_TIMEOUT = 3600.0

_SIZE_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGT]?)(i?B)?\s*$", re.IGNORECASE)


class ModeUnavailable(ConditionUnavailable):
    """This image mode cannot work here (e.g. reflink on ext4): the cell is skipped with the reason."""


def parse_size(text: str | int | None) -> int | None:
    """'2G', '512M', '1.5G', 3000000000 -> bytes (binary units); None/'auto'/'' -> None (auto size)."""
    if text is None or (isinstance(text, str) and text.strip().lower() in ("", "auto", "min")):
        return None
    if isinstance(text, int):
        return text
    m = _SIZE_RE.match(str(text))
    if not m:
        raise ValueError(f"{text!r} is not a size such as 2G, 512M or auto")
    mult = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}[m.group(2).upper()]
    if m.group(2) == "" and "." in m.group(1):
        raise ValueError(f"{text!r}: give a unit (K, M, G) with a fractional size")
    return int(float(m.group(1)) * mult)


def format_size(size: int | None) -> str:
    """Bytes -> '2G', '1.5G', '816M' (binary units; at most 3 significant digits); None -> 'auto'."""
    if size is None:
        return "auto"
    for unit, mult in (("T", 1 << 40), ("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if size >= mult:
            return f"{size / mult:.3g}{unit}"
    return f"{size}B"


def vm_root() -> Path:
    return paths.data_dir("vm")


@dataclass(frozen=True)
class BootFiles:
    """Kernel, initramfs files and facts of one (image, glue) pair."""

    dir: Path
    kernel: Path
    debian_initrd: Path
    initrd: Path  # virtbench's minimal initramfs
    kernel_version: str
    module_order: tuple[str, ...]
    module_deps: dict
    host_key_pub: str
    used_bytes: int  # filesystem bytes the image itself takes (measured on an unpadded build)

    def modules_for(self, wanted: list[str]) -> list[str]:
        return initrd.load_list(list(self.module_order), self.module_deps, wanted)

    def has_module(self, name: str) -> bool:
        return name.replace("-", "_") in {m.replace("-", "_") for m in self.module_order}


@dataclass(frozen=True)
class BaseDisk:
    path: Path  # on the VM's machine
    size: int  # bytes of the disk image
    requested: int | None  # the size asked for (None: auto)
    pad_bytes: int
    free_bytes: int


def _require_tools() -> None:
    for tool, pkg in (("mke2fs", "e2fsprogs"), ("dumpe2fs", "e2fsprogs"), ("debugfs", "e2fsprogs"),
                      ("ssh-keygen", "openssh-client"), ("tar", "tar")):
        if not shutil.which(tool):
            raise MissingTool(tool, pkg, "the vm driver builds its disks with it")


def artifacts_dir(image_hash: str) -> Path:
    return vm_root() / "base" / f"{image_hash}-{guest.glue_hash()}"


@contextlib.contextmanager
def file_lock(path: Path):
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        yield


def _run(argv: list[str], what: str, timeout: float = BUILD_TIMEOUT, machine: Machine | None = None) -> str:
    res = (machine or local()).run(argv, timeout=timeout)
    if not res.ok:
        raise UserError(f"{what} failed: {res.describe_failure()}")
    return res.stdout


def _load_boot(d: Path) -> BootFiles | None:
    meta = d / "boot.json"
    if not meta.is_file():
        return None
    try:
        m = json.loads(meta.read_text())
    except ValueError:
        return None
    return BootFiles(d, d / "vmlinuz", d / "initrd.img", d / "vb-initrd.cpio", m["kernel_version"],
                     tuple(m["module_order"]), m["module_deps"], m["host_key_pub"], m["used_bytes"])


def _remove_partials(d: Path) -> None:
    for p in d.glob("*.partial-*"):
        pid = p.name.rpartition("-")[2]
        alive = pid.isdigit() and Path(f"/proc/{pid}").exists()
        if not alive:
            with contextlib.suppress(OSError):
                shutil.rmtree(p) if p.is_dir() and not p.is_symlink() else p.unlink()


class _Stage:
    """The unpacked image plus the boot glue, made once per build and removed after."""

    def __init__(self, d: Path, tarball: Path):
        self.dir = d / f"stage.partial-{os.getpid()}"
        self.tarball = tarball
        self.ready = False

    def __enter__(self) -> _Stage:
        return self

    def make(self, host_key: Path) -> Path:
        if self.ready:
            return self.dir
        if os.geteuid() != 0:
            raise UserError("the vm driver builds its base disk from the unpacked image, which needs root "
                            "(the image's files have many owners)",
                            "run once as root (e.g. sudo virtbench check --driver vm) to fill the cache")
        shutil.rmtree(self.dir, ignore_errors=True)
        self.dir.mkdir(parents=True)
        _run(["tar", "-C", str(self.dir), "--numeric-owner", "-xpf", str(self.tarball)], "unpacking the guest image")
        if (self.dir / guest.INITTAB_PATH.lstrip("/")).exists():
            raise UserError(f"the guest image has its own {guest.INITTAB_PATH}; the vm driver would overwrite it")
        for rel, (data, mode) in glue_files(host_key).items():
            path = self.dir / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
            os.chmod(path, mode)
        (self.dir / PAD_PATH.lstrip("/")).parent.mkdir(parents=True, exist_ok=True)
        self.ready = True
        return self.dir

    def __exit__(self, *exc) -> None:
        shutil.rmtree(self.dir, ignore_errors=True)


def glue_files(host_key: Path) -> dict[str, tuple[bytes, int]]:
    """What the driver adds to the unpacked image: path in the root -> (content, mode)."""
    glue = guest.GLUE_DIR.lstrip("/")
    return {f"{glue}/init": (guest.ROOT_INIT.encode(), 0o755),
            f"{glue}/sshd_config": (guest.SSHD_CONFIG.encode(), 0o644),
            f"{glue}/ssh_host_ed25519_key": (host_key.read_bytes(), 0o600),
            guest.INITTAB_PATH.lstrip("/"): (guest.INITTAB.encode(), 0o644)}


def _fs_facts(image: Path) -> dict[str, int]:
    out = _run(["dumpe2fs", "-h", str(image)], "dumpe2fs")
    facts = {}
    for key in ("Block count", "Free blocks", "Block size"):
        m = re.search(rf"^{key}:\s+(\d+)", out, re.MULTILINE)
        if not m:
            raise UserError(f"dumpe2fs printed no '{key}' for {image}")
        facts[key] = int(m.group(1))
    return facts


def _mke2fs(root: Path, out: Path, size: int) -> dict[str, int]:
    with contextlib.suppress(FileNotFoundError):
        out.unlink()
    _run(["mke2fs", "-q", "-F", "-t", "ext4", "-m", "0", "-L", "vbroot", "-E", "root_owner=0:0",
          "-d", str(root), str(out), f"{size // 1024}k"], f"mke2fs of {out.name}")
    return _fs_facts(out)


def _write_pad(path: Path, nbytes: int, seed: int) -> None:
    """Incompressible, reproducible bytes (a seeded PCG64 stream)."""
    import numpy as np

    rng = np.random.default_rng(seed)
    chunk = 64 << 20
    with open(path, "wb") as f:
        left = nbytes
        while left > 0:
            n = min(chunk, left)
            f.write(rng.bytes(n))
            left -= n


def ensure_boot(info, log=None) -> BootFiles:
    """Kernel, initramfs and host key for the image (built on first use, cached)."""
    d = artifacts_dir(info.hash)
    got = _load_boot(d)
    if got:
        return got
    _require_tools()
    with file_lock(d.parent / f"{d.name}.lock"):
        got = _load_boot(d)
        if got:
            return got
        d.mkdir(parents=True, exist_ok=True)
        _remove_partials(d)
        with _Stage(d, info.tarball) as stage:
            built = _build_boot(d, stage, log)
    # Boot files and disks of pruned images, or of an older glue, are dead weight (~1.5 GB each).
    with contextlib.suppress(Exception):
        from ... import image as image_mod

        prune({i.hash for i in image_mod.installed()} | {info.hash})
    return built


def _build_boot(d: Path, stage: _Stage, log) -> BootFiles:
    log = log or (lambda msg: None)
    key = d / "ssh_host_ed25519_key"
    if not key.exists():
        tmp = d / f"hostkey.partial-{os.getpid()}"
        make_keypair(d, "virtbench-guest", name=tmp.name)
        os.replace(f"{tmp}.pub", f"{key}.pub")
        os.replace(tmp, key)
    log("unpacking the guest image for the VM disk")
    root = stage.make(key)
    kernels = sorted((root / "boot").glob("vmlinuz-*"))
    if not kernels:
        raise UserError("the guest image has no kernel under /boot", "it needs linux-image-cloud-amd64")
    kver = kernels[-1].name.removeprefix("vmlinuz-")
    shutil.copyfile(kernels[-1], d / "vmlinuz")
    deb_initrd = root / "boot" / f"initrd.img-{kver}"
    if deb_initrd.exists():
        shutil.copyfile(deb_initrd, d / "initrd.img")
    data, order, deps = initrd.build(root, kver)
    (d / "vb-initrd.cpio").write_bytes(data)
    # Measure what the image takes in a filesystem: build once at a generous size, unpadded.
    probe = d / f"probe.partial-{os.getpid()}.raw"
    try:
        facts = _mke2fs(root, probe, 8 << 30)
        used = (facts["Block count"] - facts["Free blocks"]) * facts["Block size"]
    finally:
        with contextlib.suppress(FileNotFoundError):
            probe.unlink()
    meta = {"kernel_version": kver, "module_order": order, "module_deps": deps,
            "host_key_pub": (d / "ssh_host_ed25519_key.pub").read_text().strip(), "used_bytes": used,
            "built_at": time.time(), "glue": guest.glue_hash()}
    tmp = d / f"boot.json.partial-{os.getpid()}"
    tmp.write_text(json.dumps(meta, indent=1))
    os.replace(tmp, d / "boot.json")
    return _load_boot(d)


def min_size(boot: BootFiles) -> int:
    """The smallest image size this image fits in (with the padded disks' reserve)."""
    need = boot.used_bytes * 1.04 + PAD_RESERVE_MIN + (32 << 20)
    return int(-(-need // ALIGN) * ALIGN)


def auto_total(boot: BootFiles, free: int) -> int:
    """Bytes of an unpadded disk of this image with `free` bytes free."""
    return int(-(-(boot.used_bytes * 1.04 + free) // ALIGN) * ALIGN)


def disk_name(size: int | None, free: int = AUTO_FREE) -> str:
    if size is None:
        return "disk-auto.raw" if free == AUTO_FREE else f"disk-auto-free{free}.raw"
    return f"disk-{size}.raw"


def ensure_base(info, size: int | None, log=None, free: int | None = None) -> BaseDisk:
    """The base disk of `size` bytes (None: the image plus `free` bytes free, 512 MiB by default),
    built once and cached."""
    free = AUTO_FREE if free is None else free
    boot = ensure_boot(info, log)
    d = boot.dir
    out = d / disk_name(size, free)
    meta = out.with_suffix(".json")
    if out.exists() and meta.exists():
        return BaseDisk(out, **json.loads(meta.read_text()))
    smallest = min_size(boot)
    if size is not None and size < smallest:
        raise UserError(f"image size {format_size(size)} is smaller than the guest image needs "
                        f"({format_size(smallest)})", f"use an image size of at least {format_size(smallest)}")
    _require_tools()
    log = log or (lambda msg: None)
    with file_lock(d / f"{out.name}.lock"):
        if out.exists() and meta.exists():
            return BaseDisk(out, **json.loads(meta.read_text()))
        _remove_partials(d)
        with _Stage(d, info.tarball) as stage:
            root = stage.make(d / "ssh_host_ed25519_key")
            tmp = d / f"{out.name}.partial-{os.getpid()}"
            try:
                if size is None:
                    total = auto_total(boot, free)
                    facts = _mke2fs(root, tmp, total)
                    pad = 0
                else:
                    total = size
                    log(f"building a {format_size(size)} base disk (padding with random data)")
                    facts = _mke2fs(root, tmp, total)
                    free = facts["Free blocks"] * facts["Block size"]
                    reserve = max(PAD_RESERVE_MIN, int(total * PAD_RESERVE_FRACTION))
                    # Block-aligned, and a little slack for the pad file's own extent tree.
                    pad = max(0, (free - reserve) // facts["Block size"] * facts["Block size"] - (4 << 20))
                    if pad:
                        padfile = root / PAD_PATH.lstrip("/")
                        _write_pad(padfile, pad, seed=size)
                        try:
                            facts = _mke2fs(root, tmp, total)
                        finally:
                            padfile.unlink()
                free = facts["Free blocks"] * facts["Block size"]
                record = {"size": total, "requested": size, "pad_bytes": pad, "free_bytes": free}
                _fsync(local(), tmp)
                os.replace(tmp, out)
                meta.write_text(json.dumps(record))
                return BaseDisk(out, **record)
            finally:
                with contextlib.suppress(FileNotFoundError):
                    tmp.unlink()


# -- instance disks -----------------------------------------------------------------------------

_reflink_cache: dict[tuple[str, str, str], str | None] = {}

# $1, $2: probe files in the two directories. Prints why a reflink copy fails there.
_REFLINK_PROBE = r"""
head -c 65536 /dev/urandom > "$1" || exit 1
cp --reflink=always "$1" "$2" 2>&1 >/dev/null | tail -n 1
rm -f "$1" "$2"
"""


def reflink_problem(src_dir: Path, dest_dir: Path, machine: Machine | None = None) -> str | None:
    """None if `cp --reflink=always` works from src_dir to dest_dir (on `machine`), else why not."""
    machine = machine or local()
    key = (machine.name, str(src_dir), str(dest_dir.parent))  # instance dirs of a run share a filesystem
    if key in _reflink_cache:
        return _reflink_cache[key]
    tag = f".reflink-probe-{os.getpid()}"
    res = machine.run(["sh", "-c", _REFLINK_PROBE, "vb", f"{src_dir}/{tag}", f"{dest_dir}/{tag}"], timeout=60)
    problem = res.stdout.strip() or (None if res.ok else res.describe_failure())
    if problem:
        fs = machine.run(["stat", "-f", "-c", "%T", str(dest_dir)], timeout=30).stdout.strip() or "unknown"
        problem = f"reflink copies are not supported on this filesystem ({fs}): {problem}"
    _reflink_cache[key] = problem
    return problem


def make_instance_disk(base: BaseDisk, dest_dir: Path, mode: str,
                       machine: Machine | None = None) -> tuple[Path, str, float]:
    """(path, qemu format, seconds it took) of a new instance disk from `base`, on `machine`."""
    machine = machine or local()
    t0 = time.monotonic()
    if mode == "copy":
        dest = dest_dir / "disk.raw"
        # --reflink=never: a real copy of every block, even where the filesystem could share them.
        _run(["cp", "--reflink=never", "--sparse=always", str(base.path), str(dest)], "copying the base disk",
             machine=machine)
        _fsync(machine, dest)  # the copy is done when it is on disk, not when it sits in the page cache
        fmt = "raw"
    elif mode == "overlay":
        if not machine.which("qemu-img"):
            raise MissingTool("qemu-img", "qemu-utils", "overlay disks are qcow2 files made by it")
        dest = dest_dir / "disk.qcow2"
        _run(["qemu-img", "create", "-q", "-f", "qcow2", "-F", "raw", "-b", str(base.path), str(dest)],
             "qemu-img create of the overlay", machine=machine)
        fmt = "qcow2"
    elif mode == "reflink":
        problem = reflink_problem(base.path.parent, dest_dir, machine)
        if problem:
            raise ModeUnavailable(problem)
        dest = dest_dir / "disk.raw"
        _run(["cp", "--reflink=always", str(base.path), str(dest)], "reflink copy of the base disk", machine=machine)
        _fsync(machine, dest)
        fmt = "raw"
    else:
        raise UserError(f"unknown image mode {mode!r}", "use one of: " + ", ".join(MODES))
    return dest, fmt, time.monotonic() - t0


def _fsync(machine: Machine, path: Path) -> None:
    """fsync a file on the machine."""
    try:
        machine.fsync(path)
    except OSError as exc:
        raise UserError(f"sync of {path} failed: {exc}") from None


def make_blank_disk(path: Path, size: int, fmt: str = "qcow2", machine: Machine | None = None) -> None:
    _run(["qemu-img", "create", "-q", "-f", fmt, str(path), str(size)], "qemu-img create", machine=machine)


def snapshot(src: Path, src_format: str, dest: Path, machine: Machine | None = None) -> None:
    """A standalone copy of a disk (all layers flattened) as a raw file, on `machine`."""
    _run(["qemu-img", "convert", "-U", "-f", src_format, "-O", "raw", str(src), str(dest)], "qemu-img convert",
         machine=machine)


def file_size(path: Path, machine: Machine | None = None) -> int:
    return (machine or local()).file_size(path)


def cached() -> list[dict]:
    """Base disks on disk: what `virtbench doctor` and pruning look at."""
    out = []
    base = vm_root() / "base"
    if not base.exists():
        return out
    for meta in base.glob("*/disk-*.json"):
        with contextlib.suppress(OSError, ValueError):
            rec = json.loads(meta.read_text())
            out.append({"path": str(meta.with_suffix(".raw")), **rec})
    return out


def prune(keep_images: set[str]) -> list[str]:
    """Remove cached VM artifacts of images not in keep_images (their tarballs were pruned)."""
    removed = []
    base = vm_root() / "base"
    if not base.exists():
        return removed
    keep = {f"{h}-{guest.glue_hash()}" for h in keep_images}
    for d in base.iterdir():
        if d.is_dir() and d.name not in keep:
            with file_lock(base / f"{d.name}.lock"):  # not while another process builds it
                shutil.rmtree(d, ignore_errors=True)
            (base / f"{d.name}.lock").unlink(missing_ok=True)
            removed.append(str(d))
    return removed


def qemu_img_info(path: Path, machine: Machine | None = None) -> dict:
    res = (machine or local()).run(["qemu-img", "info", "-U", "--output=json", str(path)], timeout=60)
    return json.loads(res.stdout) if res.ok else {}
