"""Guest kernels: the image's own Debian cloud kernel, or Debian's generic kernel of the same ABI.

The cloud kernel (linux-image-cloud-amd64) is small and boots fast but has drivers for para-virtual
and cloud devices only: no e1000, no rtl8139, no AHCI. The emulated device model of the second study
(IDE disk + e1000 NIC) needs the generic kernel (linux-image-<abi>-amd64). Its package holds 400 MB
of modules, so it is not in the guest image: it is fetched with `apt-get download` when a VM first
asks for it, and only its vmlinuz and the dozen modules the initramfs loads are kept, beside the
cloud kernel's boot files (on this machine: a VM elsewhere gets them shipped, `site.py`). The initramfs is the cloud one with the modules swapped (same busybox,
same init), and the root disk is the same, so only the kernel differs between the two flavours.
After switch_root the generic kernel finds no /lib/modules of its own: every driver a VM needs is
loaded in the initramfs, before that.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import time
from pathlib import Path

from ...errors import MissingTool, UserError
from ...machines import local
from . import disk, guest, initrd

FLAVOURS = ("cloud", "generic")
# ext4 and crc32c are built into the cloud kernel, modules in the generic one: the root needs them.
GENERIC_MODULES = (*guest.INITRD_MODULES, "ext4", "crc32c_generic", "crc32c_intel")


def generic_version(cloud_version: str) -> str:
    """6.1.0-56-cloud-amd64 -> 6.1.0-56-amd64 (same ABI, same upstream release)."""
    if not cloud_version.endswith("-cloud-amd64"):
        raise UserError(f"the guest kernel {cloud_version} is not a Debian cloud kernel; the generic "
                        "flavour is only known for those")
    return cloud_version.removesuffix("-cloud-amd64") + "-amd64"


def boot_files(cloud: disk.BootFiles, flavour: str, log=None) -> disk.BootFiles:
    """The boot files of `flavour` for the image whose cloud kernel's files are `cloud`."""
    if flavour == "cloud":
        return cloud
    if flavour != "generic":
        raise UserError(f"unknown guest kernel flavour {flavour!r}", f"use one of {', '.join(FLAVOURS)}")
    kver = generic_version(cloud.kernel_version)
    d = cloud.dir / f"kernel-{kver}"
    got = _load(d, cloud)
    if got:
        return got
    with disk.file_lock(cloud.dir / f"kernel-{kver}.lock"):
        got = _load(d, cloud)
        if got:
            return got
        _build(d, cloud, kver, log or (lambda msg: None))
    return _load(d, cloud)


def _load(d: Path, cloud: disk.BootFiles) -> disk.BootFiles | None:
    try:
        m = json.loads((d / "kernel.json").read_text())
    except (OSError, ValueError):
        return None
    return dataclasses.replace(cloud, dir=d, kernel=d / "vmlinuz", debian_initrd=d / "no-debian-initrd",
                               initrd=d / "vb-initrd.cpio", kernel_version=m["kernel_version"],
                               module_order=tuple(m["module_order"]), module_deps=m["module_deps"])


def _build(d: Path, cloud: disk.BootFiles, kver: str, log) -> None:
    for tool, pkg in (("apt-get", "apt"), ("dpkg-deb", "dpkg"), ("depmod", "kmod")):
        if not shutil.which(tool):
            raise MissingTool(tool, pkg, "the generic guest kernel is fetched and prepared with it")
    package = f"linux-image-{kver}"
    work = cloud.dir / f"kernel.partial-{os.getpid()}"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    try:
        log(f"fetching {package} (Debian's generic kernel, for emulated devices)")
        res = local().run(["apt-get", "download", package], timeout=600, cwd=str(work))
        debs = list(work.glob(f"{package}_*.deb"))
        if not res.ok or not debs:
            raise UserError(f"could not download {package} for the emulated device model: "
                            f"{(res.stderr or res.stdout).strip().splitlines()[-1:] or ['no .deb']}",
                            f"run `apt-get update` (the image's kernel ABI {kver} must be in the "
                            "package lists), or use devices = \"paravirt\" or \"emulated-disk\"")
        tree = work / "x"
        for argv, what in ((["dpkg-deb", "-x", str(debs[0]), str(tree)], "dpkg-deb -x"),
                           (["depmod", "-b", str(tree), kver], "depmod")):
            r = local().run(argv, timeout=600)
            if not r.ok:
                raise UserError(f"{what} of {package} failed: {r.describe_failure()}")
        moddir = tree / "lib" / "modules" / kver
        data, order, deps = initrd.rebuild(cloud.initrd.read_bytes(), moddir, GENERIC_MODULES)
        out = Path(f"{d}.partial-{os.getpid()}")
        shutil.rmtree(out, ignore_errors=True)
        out.mkdir()
        shutil.copyfile(tree / "boot" / f"vmlinuz-{kver}", out / "vmlinuz")
        (out / "vb-initrd.cpio").write_bytes(data)
        (out / "kernel.json").write_text(json.dumps({
            "kernel_version": kver, "package": debs[0].name, "module_order": order, "module_deps": deps,
            "built_at": time.time()}, indent=1))
        shutil.rmtree(d, ignore_errors=True)
        os.replace(out, d)
    finally:
        shutil.rmtree(work, ignore_errors=True)
