"""Where VMs run: a machine, and what QEMU needs on it (boot files, base disks, the accelerator).

On this machine everything is where `disk.py` and `kernels.py` build it. On a remote machine the
kernel and initramfs files (built here) go into its content-addressed blob cache (machines/ship.py),
and so does the guest image tarball, from which the base disk is built there with mke2fs, as here.
This machine reaches a remote VM's SSH port and its QMP and console sockets through forwards on the
machine's SSH connection (the machine's `forwards`: `forward`, `forward_unix`).
"""

from __future__ import annotations

import dataclasses
import io
import os
import tarfile
import threading
from pathlib import Path

from ...errors import UserError
from ...machines import Machine, ship
from ...machines.probe import scrub
from . import disk, accel_probe as probe, qemu

TOOLS = ((qemu.QEMU, "qemu-system-x86"), ("qemu-img", "qemu-utils"), ("mke2fs", "e2fsprogs"),
         ("dumpe2fs", "e2fsprogs"), ("tar", "tar"), ("flock", "util-linux"))

# Build a base disk on the machine, as root: $1 dir, $2 image tarball, $3 glue tarball, $4 file name,
# $5 size in KiB. Serialized per disk (flock); prints dumpe2fs's block counts of the result.
_BUILD = r"""
set -eu
d=$1 tarball=$2 glue=$3 name=$4 kib=$5
[ "$(id -u)" = 0 ] || { echo "building the VM base disk needs root there (the image's files have many owners)" >&2; exit 1; }
mkdir -p "$d"
exec 9>"$d/$name.lock"
flock 9
if [ ! -f "$d/$name" ]; then
  st="$d/stage.partial-$$" part="$d/$name.partial-$$"
  trap 'rm -rf "$st" "$part"' EXIT
  mkdir "$st"
  tar -C "$st" --numeric-owner -xpf "$tarball"
  [ ! -e "$st/etc/inittab" ] || { echo "the guest image has its own /etc/inittab" >&2; exit 1; }
  tar -C "$st" --numeric-owner -xpf "$glue"
  mke2fs -q -F -t ext4 -m 0 -L vbroot -E root_owner=0:0 -d "$st" "$part" "${kib}k"
  sync "$part"
  mv "$part" "$d/$name"
fi
dumpe2fs -h "$d/$name" 2>/dev/null | grep -E '^(Block count|Free blocks|Block size):'
"""


class Site:
    """One machine VMs run on, with what was prepared there for this process."""

    def __init__(self, machine: Machine):
        self.machine = machine
        self._lock = threading.RLock()
        self._boot: dict[Path, disk.BootFiles] = {}  # local kernel dir -> the same files there
        self._bases: dict[tuple, disk.BaseDisk] = {}
        self._accel: dict[str, dict] = {}
        self._qemu_version: str | None = None

    @staticmethod
    def of(machine: Machine) -> "Site":
        """The site for `machine`: one that ships what it needs, or this machine's, which builds it."""
        return Site(machine) if ship.is_shipped_to(machine) else LocalSite(machine)

    @property
    def root(self) -> Path:
        """virtbench's VM directory on the machine."""
        return Path(ship.data_dir(self.machine)) / "vm"

    @property
    def accel_cache(self) -> Path:
        """Where the accelerator probe's answer for this machine is kept (here)."""
        return disk.vm_root() / f"accel-{self.machine.name}.json"

    def missing_tools(self) -> list[str]:
        """'tool (package)' for each tool the machine lacks."""
        res = self.machine.run(["sh", "-c", 'for t; do command -v "$t" >/dev/null || echo "$t"; done', "vb",
                                *(t for t, _ in TOOLS)], timeout=60)
        if not res.ok:
            return [f"(cannot ask {self.machine.name}: {res.describe_failure()})"]
        pkg = dict(TOOLS)
        return [f"{t} ({pkg.get(t, t)})" for t in res.stdout.split()]

    @staticmethod
    def local_boot(info) -> disk.BootFiles:
        """The image's boot files on this machine (built once, cached)."""
        return disk.ensure_boot(info)

    def _blob(self, path: Path, name: str) -> Path:
        return Path(ship.ensure_blob(self.machine, path, ship.file_sha256(path), name))

    def boot_files(self, boot: disk.BootFiles) -> disk.BootFiles:
        """`boot` (files here) with kernel and initramfs paths on the machine, shipped once."""
        with self._lock:
            if boot.dir not in self._boot:
                debian = boot.debian_initrd
                self._boot[boot.dir] = dataclasses.replace(
                    boot, kernel=self._blob(boot.kernel, "vmlinuz"), initrd=self._blob(boot.initrd, "vb-initrd.cpio"),
                    debian_initrd=self._blob(debian, "initrd.img") if debian.is_file() else debian)
            return self._boot[boot.dir]

    def base_disk(self, info, boot: disk.BootFiles, size: int | None, free: int) -> disk.BaseDisk:
        """The base disk on the machine: built here (disk.ensure_base), or there from the shipped image.
        `boot`: the image's own (cloud kernel) boot files here, whose directory holds the guest host key."""
        if size is not None:
            raise UserError("padded disk images (image_size other than auto) are built on this machine only",
                            "use image_size = \"auto\" (with free_space) for VMs on another machine")
        key = (info.hash, free)
        with self._lock:
            if key not in self._bases:
                self._bases[key] = self._build_base(info, boot, free)
            return self._bases[key]

    def _build_base(self, info, boot: disk.BootFiles, free: int) -> disk.BaseDisk:
        m = self.machine
        tarball = self._blob(info.tarball, "rootfs.tar")
        glue = self._blob(_glue_tar(boot), "vm-glue.tar")
        d = self.root / "base" / boot.dir.name
        name = disk.disk_name(None, free)
        total = disk.auto_total(boot, free)
        res = m.run(["sh", "-c", _BUILD, "vb", str(d), str(tarball), str(glue), name, str(total // 1024)],
                    timeout=disk.BUILD_TIMEOUT)
        if not res.ok:
            raise UserError(f"building the VM base disk on {m.name} failed: {res.describe_failure()}",
                            "the VM's machine needs root, e2fsprogs and free space under its virtbench_dir")
        facts = {k.strip(): int(v) for k, _, v in (ln.partition(":") for ln in res.stdout.splitlines()) if v.strip()}
        free_bytes = facts["Free blocks"] * facts["Block size"]
        return disk.BaseDisk(d / name, total, None, 0, free_bytes)

    def accelerator(self, boot: disk.BootFiles, want: str = "auto") -> dict:
        """The probe's answer for this machine (`boot`: files on it), once per process and request."""
        with self._lock:
            if want not in self._accel:
                self._accel[want] = probe.detect(self.machine, str(boot.kernel), boot.kernel_version,
                                                 self.accel_cache, want)
            return self._accel[want]

    def qemu_version(self) -> str:
        with self._lock:
            if self._qemu_version is None:
                self._qemu_version = qemu.version(self.machine)
            return self._qemu_version


class LocalSite(Site):
    """This machine: everything is where disk.py and kernels.py build it, nothing is shipped."""

    @property
    def root(self) -> Path:
        return disk.vm_root()

    @property
    def accel_cache(self) -> Path:
        return disk.vm_root() / "accel.json"

    def boot_files(self, boot: disk.BootFiles) -> disk.BootFiles:
        return boot

    def base_disk(self, info, boot: disk.BootFiles, size: int | None, free: int) -> disk.BaseDisk:
        return disk.ensure_base(info, size, free=free)


def accelerator_of(machine: Machine, want: str = "auto") -> dict:
    """Which accelerator really boots a guest on `machine` (the image's kernel, shipped there when
    remote): the same probe the vm driver runs; what `virtbench hosts` reports."""
    from ... import image

    site = Site.of(machine)
    boot = site.boot_files(site.local_boot(image.require()))
    return site.accelerator(boot, want)


def kvm_column(machine: Machine) -> str:
    """Does KVM really boot a guest there? The vm driver's own probe (a real boot with a timeout,
    the image's kernel shipped there); what the `kvm` column says when asked for."""
    try:
        got = accelerator_of(machine)
    except Exception as exc:  # no QEMU there, no image here: say why, never guess
        return f"boot not tried: {scrub(str(exc).splitlines()[0], machine)}"
    if got["accel"] == "kvm":
        return "boots a guest (KVM)"
    return "TCG only: " + scrub(got.get("kvm_problem") or "KVM did not boot a guest", machine)


def _glue_tar(boot: disk.BootFiles) -> Path:
    """The files the driver adds to the image (disk.glue_files) as a tarball beside the boot files,
    made once: it is shipped with the image tarball and unpacked over it there."""
    out = boot.dir / "vm-glue.tar"
    if out.is_file():
        return out
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for rel, (data, mode) in sorted(disk.glue_files(boot.dir / "ssh_host_ed25519_key").items()):
            info = tarfile.TarInfo(rel)
            info.size, info.mode, info.mtime = len(data), mode, 0
            tar.addfile(info, io.BytesIO(data))
    tmp = out.with_name(f"{out.name}.partial-{os.getpid()}")
    tmp.write_bytes(buf.getvalue())
    tmp.replace(out)
    return out

