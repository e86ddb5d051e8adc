"""Storage targets: where a disk workload's files live, as a condition of the run.

Values are `KIND` or `KIND:SIZE` (e.g. `nbd`, `nbd:8g`, `tmpfs:2g`):
- local   the environment's own disk: the host's file system, a container's overlay, a VM's disk;
- tmpfs   memory;
- volume  a container-engine volume (podman/docker local driver), bind-mounted into the container
          (on the host: the same directory, as a same-disk baseline);
- nbd     a network block device: nbdkit serving a disk image from a server link (its own network
          namespace behind a veth), attached on the host with nbdfuse -> loop device (direct I/O)
          -> ext4;
- iscsi   tgt serving the image as an iSCSI LUN from a server link, attached with QEMU's
          user-space initiator (libiscsi, via qemu-nbd) -> nbdfuse -> loop -> ext4, because these
          kernels have no iSCSI initiator;
- nfs     nfs-ganesha (NFSv4) on a server link, mounted with the kernel's NFS client where the
          kernel has one; skipped with the reason where it does not.
Remote targets dial through applied.route(), so delay_ms/rate_mbit put themselves in the path.
Mounts are made on the host; a container sees them through its /vb-mnt propagation mount (the way a
node mounts a pod's volume). Every target and helper is removed by Applied.close(), also on Ctrl-C.
"""

from __future__ import annotations

import contextlib
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from .. import procs
from ..drivers.base import Instance
from ..errors import UserError
from . import hostmounts, hostnet
from .base import Applied, Condition, ConditionUnavailable
from .hostres import (Helper, HostCommandFailed, free_bytes, human, is_mounted, loop_attach, loop_detach,
                      new_dir, next_id, owner_tag, parse_size, remove_tree, require_root, require_tools, run,
                      umount, wait_for)

KINDS = ("local", "tmpfs", "volume", "nbd", "iscsi", "nfs")
REMOTE_DEFAULT_SIZE = 4 << 30
NBD_PORT, ISCSI_PORT, NFS_PORT = 10809, 3260, 2049
IQN_PREFIX = "iqn.2024-01.org.virtbench"


def split(value: str) -> tuple[str, int | None]:
    if is_external(value):
        return "nbd", None
    kind, _, size = str(value).partition(":")
    return kind, parse_size(size) if size else None


def is_external(value: str) -> bool:
    """An existing NBD export the user names (nbd://HOST:PORT[/EXPORT]): attached, never formatted."""
    return str(value).startswith("nbd://")


def _parse_external(uri: str) -> tuple[str, int, str]:
    parts = urlsplit(uri)
    try:
        port = parts.port or NBD_PORT
    except ValueError:
        raise ValueError(f"{uri!r}: the port is not a number") from None
    if not parts.hostname:
        raise ValueError(f"{uri!r} names no host; use nbd://HOST:PORT[/EXPORT]")
    return parts.hostname, port, parts.path.lstrip("/")


class Storage(Condition):
    key = "storage"
    help = "where disk workloads write: " + ", ".join(KINDS) + " (KIND or KIND:SIZE, e.g. nbd:8g)"
    order = 60

    def coerce(self, raw: Any) -> str:
        text = str(raw).strip()
        if is_external(text):
            _parse_external(text)
            return text
        text = text.lower()
        kind, _, size = text.partition(":")
        if kind not in KINDS:
            raise ValueError(f"{raw!r} is not a storage target; use one of {', '.join(KINDS)}")
        if size:
            if kind in ("local", "volume"):
                raise ValueError(f"storage '{kind}' takes no size")
            parse_size(size)
        return text

    def is_noop(self, value: Any) -> bool:
        return value == "local"

    def apply(self, value: Any, instances: dict[str, list[Instance]], applied: Applied,
              condition: dict[str, Any]) -> None:
        kind, size = split(value)
        seen = set()
        for pool in instances.values():
            for inst in pool:
                if inst.name in seen:
                    continue
                seen.add(inst.name)
                try:
                    if is_external(value):
                        path, meta = _nbd_external(inst, value, applied)
                    else:
                        path, meta = TARGETS[kind](inst, size, applied)
                except HostCommandFailed as exc:
                    # not a limit of this machine but a fault: recorded as a failed attempt
                    raise UserError(f"storage={value} could not be set up: {exc}") from None
                if path:
                    applied.set_storage(inst, path)
                for k, v in meta.items():
                    applied.metadata.setdefault(k, v)


# -- where a mount goes ------------------------------------------------------------------------------

def _is_host(inst: Instance) -> bool:
    return inst.env.driver == "host"


def _mount_point(inst: Instance, kind: str, applied: Applied) -> tuple[Path, str]:
    """(directory on the host to mount on, the same directory as the instance sees it)."""
    if _is_host(inst):
        d = new_dir(kind) / "mnt"
        d.mkdir()
        applied.defer(lambda: remove_tree(d.parent))
        return d, str(d)
    shared = getattr(inst, "host_mount_dir", None)
    if not shared:
        raise ConditionUnavailable(f"the {inst.env.driver} driver cannot pass a host mount into {inst.name}, "
                                   f"so storage={kind} cannot reach it")
    sub = f"{kind}-{next_id()}"
    d = Path(shared) / sub
    d.mkdir()

    def rm() -> None:
        with contextlib.suppress(OSError):
            if not is_mounted(d):
                d.rmdir()
    applied.defer(rm)
    return d, f"{hostmounts.GUEST_DIR}/{sub}"


def _fs_type(inst: Instance, path: str) -> str:
    res = inst.exec(["stat", "-f", "-c", "%T", path], timeout=30)
    return res.stdout.strip() if res.ok else "unknown"


def _check_space(where: Path, size: int, what: str) -> None:
    free = free_bytes(where)
    if free < size + (1 << 30):
        raise ConditionUnavailable(f"{what}: a {human(size)} disk image needs that much free space (+1 GiB) "
                                   f"in {where}; {human(free)} free")


# -- virtual machines -------------------------------------------------------------------------------------
# A VM gets remote disks from QEMU itself (its built-in NBD client, libiscsi), hot-plugged as virtio
# disks through QMP and mounted inside the guest: the hypervisor-side initiator the studies used.

def _is_vm(inst: Instance) -> bool:
    return inst.env.driver == "vm" and getattr(inst, "qmp", None) is not None


# The guest image has busybox but not util-linux's mount.
_GUEST_FNS = ('vbmount() { if command -v mount >/dev/null 2>&1; then mount "$@"; '
              'else busybox mount "$@"; fi; }\n'
              'vbumount() { if command -v umount >/dev/null 2>&1; then umount "$@"; '
              'else busybox umount "$@"; fi; }\n')


def _guest(inst: Instance, script: str, *args: str, timeout: float = 120) -> str:
    res = inst.exec(["sh", "-c", _GUEST_FNS + script, "sh", *args], timeout=timeout)
    if not res.ok:
        raise HostCommandFailed(f"in {inst.name}: {res.describe_failure()}")
    return res.stdout


def _guest_quiet(inst: Instance, script: str, *args: str) -> None:
    inst.exec(["sh", "-c", _GUEST_FNS + script, "sh", *args], timeout=120)


def _guest_dir(inst: Instance, kind: str, applied: Applied) -> str:
    path = f"/var/tmp/vb-{kind}-{next_id()}"
    _guest(inst, 'mkdir -p "$1"', path)
    applied.defer(lambda: inst.exec(["rmdir", path], timeout=60))
    return path


def _vm_disk(inst: Instance, blockdev: dict, kind: str, applied: Applied, fstype: str = "ext4") -> str:
    """Hot-plug a QEMU block node as a virtio disk, mount its ext4 in the guest; the guest path."""
    before = set(_guest(inst, "ls /sys/block").split())
    node = f"vb{kind}{next_id()}"
    qmp = inst.qmp
    qmp.execute("blockdev-add", {"node-name": node, **blockdev}, timeout=120)
    applied.defer(lambda: _qmp_quiet(inst, "blockdev-del", {"node-name": node}))
    qmp.execute("device_add", {"driver": "virtio-blk-pci", "drive": node, "id": f"{node}-dev"}, timeout=60)

    def unplug() -> None:
        _qmp_quiet(inst, "device_del", {"id": f"{node}-dev"})
        with contextlib.suppress(HostCommandFailed):  # the guest releases it (ACPI eject)
            wait_for(lambda: not (set(_guest(inst, "ls /sys/block").split()) - before), 60,
                     "the guest to release the disk")
    applied.defer(unplug)
    new: list[str] = []

    def appeared() -> bool:
        new[:] = sorted(set(_guest(inst, "ls /sys/block").split()) - before)
        return bool(new)
    wait_for(appeared, 120, f"the guest to see the {kind} disk", interval=0.5)
    path = _guest_dir(inst, kind, applied)
    if fstype:
        _guest(inst, 'vbmount -t "$3" "$1" "$2"', f"/dev/{new[0]}", path, fstype)
    else:
        _guest(inst, 'vbmount "$1" "$2"', f"/dev/{new[0]}", path)
    applied.defer(lambda: _guest_quiet(inst, 'vbumount "$1"', path))
    return path


def _qmp_quiet(inst: Instance, command: str, args: dict) -> None:
    with contextlib.suppress(Exception):  # a VM already gone has nothing left to undo
        inst.qmp.execute(command, args, timeout=60)


# -- local, tmpfs, volume -------------------------------------------------------------------------------

def _local(inst: Instance, size: int | None, applied: Applied) -> tuple[str | None, dict]:
    return None, {"storage_fs": _fs_type(inst, applied.storage_dir(inst))}


def _tmpfs(inst: Instance, size: int | None, applied: Applied) -> tuple[str, dict]:
    if _is_vm(inst):
        path = _guest_dir(inst, "tmpfs", applied)
        _guest(inst, 'vbmount -t tmpfs -o "size=$1,mode=1777" virtbench-tmpfs "$2"', str(size) if size else "25%", path)
        applied.defer(lambda: _guest_quiet(inst, 'vbumount "$1"', path))
        return path, {"storage_fs": "tmpfs", "storage_mechanism": "tmpfs mounted in the guest"}
    require_root("storage=tmpfs")
    host_dir, inside = _mount_point(inst, "tmpfs", applied)
    opts = f"size={size},mode=1777" if size else "size=25%,mode=1777"
    run(["mount", "-t", "tmpfs", "-o", opts, "virtbench-tmpfs", str(host_dir)])
    applied.defer(lambda: umount(host_dir))
    return inside, {"storage_fs": "tmpfs", "storage_mechanism": "tmpfs mounted by the host"}


def _engine_cmd(inst: Instance) -> str:
    engine = getattr(inst, "engine", None)
    if engine is not None:
        return engine.cmd
    for cmd in ("podman", "docker"):
        if shutil.which(cmd):
            return cmd
    raise ConditionUnavailable("storage=volume needs a container engine (apt-get install podman)")


def _volume(inst: Instance, size: int | None, applied: Applied) -> tuple[str, dict]:
    if inst.env.driver not in ("host", "container"):
        raise ConditionUnavailable(f"storage=volume is a container-engine volume; a {inst.env.driver} "
                                   "has its own disk (storage=local)")
    cmd = _engine_cmd(inst)
    name = f"vb-vol-{owner_tag()}-{next_id()}"
    run([cmd, "volume", "create", "--label", "virtbench.cond=1", name], timeout=120)
    applied.defer(lambda: run([cmd, "volume", "rm", "-f", name], timeout=120, check=False))
    source = run([cmd, "volume", "inspect", "-f", "{{.Mountpoint}}", name], timeout=60).strip()
    if not source or not Path(source).is_dir():
        raise HostCommandFailed(f"{cmd} volume {name} has no local mount point ({source!r})")
    meta = {"storage_mechanism": f"{cmd} volume (local driver)"}
    if _is_host(inst):
        return source, {**meta, "storage_fs": _fs_type(inst, source)}
    require_root("storage=volume in a running container")
    host_dir, inside = _mount_point(inst, "volume", applied)
    run(["mount", "--bind", source, str(host_dir)])
    applied.defer(lambda: umount(host_dir))
    return inside, {**meta, "storage_fs": _fs_type(inst, inside)}


# -- remote block devices ----------------------------------------------------------------------------

def _image(workdir: Path, size: int, what: str) -> Path:
    """A sparse disk image with an ext4 file system, made on the server's side before export."""
    _check_space(workdir, size, what)
    img = workdir / "disk.img"
    with open(img, "wb") as f:
        f.truncate(size)
    run(["mkfs.ext4", "-q", "-F", "-m", "0", "-E", "lazy_itable_init=0,lazy_journal_init=0", str(img)],
        timeout=300)
    return img


def _attach_nbd(uri: str, workdir: Path, mount_dir: Path, applied: Applied, fstype: str = "ext4") -> None:
    """NBD export -> nbdfuse file -> loop device (direct I/O, so reads really cross the network) -> ext4."""
    fuse_dir = workdir / "fuse"
    fuse_dir.mkdir()
    applied.defer(lambda: remove_tree(fuse_dir) if not is_mounted(fuse_dir) else None)
    disk = fuse_dir / "disk"
    helper = Helper(["nbdfuse", str(disk), uri], name="nbdfuse", log=workdir / "nbdfuse.log")

    def stop_fuse() -> None:
        if is_mounted(fuse_dir):
            procs.run(["fusermount3" if shutil.which("fusermount3") else "fusermount", "-u", str(fuse_dir)],
                      timeout=60)
        with contextlib.suppress(Exception):
            helper.proc.wait(timeout=10)
        helper.stop()
        if is_mounted(fuse_dir):
            umount(fuse_dir)
    applied.defer(stop_fuse)
    wait_for(lambda: is_mounted(fuse_dir) and disk.exists(), 30, "the nbdfuse mount", helper)
    dev = loop_attach(disk, direct_io=True)
    applied.defer(lambda: loop_detach(dev))
    run(["mount", *(["-t", fstype] if fstype else []), dev, str(mount_dir)], timeout=120)
    applied.defer(lambda: umount(mount_dir))


def _nbd_external(inst: Instance, uri: str, applied: Applied) -> tuple[str, dict]:
    """An export someone else serves: its file system is mounted as it is (never formatted)."""
    require_root("storage=nbd://...")
    if not _is_vm(inst):
        require_tools("storage=nbd://...", {"nbdfuse": "libnbd-bin", "losetup": "mount"})
    host, port, export = _parse_external(uri)
    if not hostnet.can_connect(host, port, timeout=5):
        raise HostCommandFailed(f"cannot reach the NBD server {hostnet.fmt_addr(host, port)} "
                                "(connection refused or timed out)")
    dial_host, dial_port = applied.route(host, port)
    if _is_vm(inst):
        path = _vm_disk(inst, {"driver": "nbd", "export": export,
                               "server": {"type": "inet", "host": dial_host, "port": str(dial_port)}},
                        "nbd", applied, fstype="")
        return path, {"storage_fs": _fs_type(inst, path),
                      "storage_mechanism": "an existing NBD export; QEMU's NBD client, virtio disk"}
    workdir = new_dir("nbdx")
    applied.defer(lambda: remove_tree(workdir))
    mount_dir, inside = _mount_point(inst, "nbd", applied)
    _attach_nbd(f"nbd://{hostnet.fmt_addr(dial_host, dial_port)}/{export}", workdir, mount_dir, applied, fstype="")
    return inside, {"storage_fs": _fs_type(inst, inside), "storage_mechanism":
                    "an existing NBD export; nbdfuse + loop (direct I/O) on the host"}


def _remote_common(inst: Instance, kind: str, size: int | None, applied: Applied, host_attach: bool = True):
    require_root(f"storage={kind}")
    tools = {"mkfs.ext4": "e2fsprogs", "ip": "iproute2", "nsenter": "util-linux"}
    if host_attach:
        tools.update({"nbdfuse": "libnbd-bin", "losetup": "mount"})
    require_tools(f"storage={kind}", tools)
    workdir = new_dir(kind)
    applied.defer(lambda: remove_tree(workdir))
    img = _image(workdir, size or REMOTE_DEFAULT_SIZE, f"storage={kind}")
    link = hostnet.Link.create()
    applied.defer(link.destroy)
    return workdir, img, link


def _nbd(inst: Instance, size: int | None, applied: Applied) -> tuple[str, dict]:
    require_tools("storage=nbd", {"nbdkit": "nbdkit"})
    workdir, img, link = _remote_common(inst, "nbd", size, applied, host_attach=not _is_vm(inst))
    server = Helper(["nbdkit", "--foreground", "--exit-with-parent", "--ipaddr", link.ns_addr,
                     "--port", str(NBD_PORT), "file", f"file={img}"],
                    name="nbdkit", netns=link.netns, log=workdir / "nbdkit.log")
    applied.defer(server.stop)
    wait_for(lambda: hostnet.can_connect(link.ns_addr, NBD_PORT), 30, "nbdkit to listen", server)
    host, port = applied.route(link.ns_addr, NBD_PORT)
    if _is_vm(inst):
        path = _vm_disk(inst, {"driver": "nbd", "server": {"type": "inet", "host": host, "port": str(port)}},
                        "nbd", applied)
        return path, {"storage_fs": "ext4", "storage_mechanism":
                      "nbdkit on a server link; QEMU's NBD client, virtio disk, ext4 in the guest"}
    mount_dir, inside = _mount_point(inst, "nbd", applied)
    _attach_nbd(f"nbd://{hostnet.fmt_addr(host, port)}", workdir, mount_dir, applied)
    return inside, {"storage_fs": "ext4", "storage_mechanism":
                    "nbdkit on a server link; nbdfuse + loop (direct I/O) + ext4 on the host"}


def _iscsi_initiator() -> str:
    """qemu-nbd with QEMU's libiscsi block driver: a user-space initiator."""
    require_tools("storage=iscsi", {"qemu-nbd": "qemu-utils", "tgtd": "tgt", "tgtadm": "tgt"})
    if not any(Path(p).exists() for p in ("/usr/lib/x86_64-linux-gnu/qemu/block-iscsi.so",
                                          "/usr/lib/aarch64-linux-gnu/qemu/block-iscsi.so")) \
            and not list(Path("/usr/lib").glob("*/qemu/block-iscsi.so")):
        raise ConditionUnavailable("storage=iscsi: no iSCSI initiator here: the kernel has none and QEMU's "
                                   "user-space one is missing (apt-get install qemu-block-extra)")
    return "qemu-nbd"


def _tgt_control_port() -> int:
    for port in range(20000 + (next_id() % 1000), 30000):
        if not Path(f"/var/run/tgtd/socket.{port}").exists():
            return port
    raise HostCommandFailed("no free tgtd control port")


def _iscsi(inst: Instance, size: int | None, applied: Applied) -> tuple[str, dict]:
    _iscsi_initiator()
    workdir, img, link = _remote_common(inst, "iscsi", size, applied, host_attach=not _is_vm(inst))
    cport = _tgt_control_port()
    tgtadm = ["tgtadm", "-C", str(cport), "--lld", "iscsi"]
    server = Helper(["tgtd", "-f", "-C", str(cport), "--iscsi", f"portal={link.ns_addr}:{ISCSI_PORT}"],
                    name="tgtd", netns=link.netns, log=workdir / "tgtd.log")

    def stop_tgtd() -> None:
        procs.run([*tgtadm, "--mode", "target", "--op", "delete", "--force", "--tid", "1"], timeout=30)
        procs.run(["tgtadm", "-C", str(cport), "--mode", "system", "--op", "delete"], timeout=30)
        with contextlib.suppress(Exception):
            server.proc.wait(timeout=5)
        server.stop()
        for suffix in ("", ".lock"):
            with contextlib.suppress(OSError):
                Path(f"/var/run/tgtd/socket.{cport}{suffix}").unlink()
    applied.defer(stop_tgtd)
    wait_for(lambda: procs.run(["tgtadm", "-C", str(cport), "--mode", "system", "--op", "show"], timeout=10).ok,
             30, "tgtd to answer", server)
    iqn = f"{IQN_PREFIX}:{owner_tag()}-{next_id()}"
    run([*tgtadm, "--mode", "target", "--op", "new", "--tid", "1", "--targetname", iqn])
    run([*tgtadm, "--mode", "logicalunit", "--op", "new", "--tid", "1", "--lun", "1", "--backing-store", str(img)])
    run([*tgtadm, "--mode", "target", "--op", "bind", "--tid", "1", "--initiator-address", "ALL"])
    wait_for(lambda: hostnet.can_connect(link.ns_addr, ISCSI_PORT), 30, "tgtd to listen", server)
    host, port = applied.route(link.ns_addr, ISCSI_PORT)
    if _is_vm(inst):
        path = _vm_disk(inst, {"driver": "iscsi", "transport": "tcp", "portal": hostnet.fmt_addr(host, port),
                               "target": iqn, "lun": 1}, "iscsi", applied)
        return path, {"storage_fs": "ext4", "storage_mechanism":
                      "tgt on a server link; QEMU's iSCSI initiator (libiscsi), virtio disk, ext4 in the guest"}
    sock = workdir / "nbd.sock"
    initiator = Helper(["qemu-nbd", "--persistent", "--format=raw", "--cache=none", "--socket", str(sock),
                        f"iscsi://{hostnet.fmt_addr(host, port)}/{iqn}/1"],
                       name="qemu-nbd (iSCSI initiator)", log=workdir / "qemu-nbd.log")
    applied.defer(initiator.stop)
    wait_for(sock.exists, 60, "qemu-nbd to log in to the iSCSI target", initiator)
    mount_dir, inside = _mount_point(inst, "iscsi", applied)
    _attach_nbd(f"nbd+unix:///?socket={sock}", workdir, mount_dir, applied)
    return inside, {"storage_fs": "ext4", "storage_mechanism":
                    "tgt on a server link; user-space initiator (qemu-nbd/libiscsi) + nbdfuse + loop + ext4"}


# -- NFS -----------------------------------------------------------------------------------------------

GANESHA_CONF = """NFS_CORE_PARAM {{ Protocols = 4; NFS_Port = {port}; Bind_addr = {addr};
  Enable_NLM = false; Enable_RQUOTA = false; }}
NFSV4 {{ Graceless = true; RecoveryBackend = fs; }}
NFS_KRB5 {{ Active_krb5 = false; }}
EXPORT {{ Export_Id = 1; Path = {export}; Pseudo = /vb; Access_Type = RW; Squash = No_Root_Squash;
  Protocols = 4; Transports = TCP; SecType = sys; FSAL {{ Name = VFS; }} }}
LOG {{ Default_Log_Level = WARN; }}
"""


def kernel_nfs_client() -> tuple[bool, str]:
    def has() -> bool:
        with contextlib.suppress(OSError):
            names = {line.split()[-1] for line in Path("/proc/filesystems").read_text().splitlines() if line.strip()}
            return bool(names & {"nfs", "nfs4"})
        return False
    if has():
        return True, ""
    if shutil.which("modprobe"):
        procs.run(["modprobe", "-q", "nfs"], timeout=60)
        if has():
            return True, ""
    return False, ("this kernel has no NFS client (no nfs/nfs4 in /proc/filesystems, 'modprobe nfs' failed), "
                   "and no user-space NFS client can mount a file system; remote storage works here with "
                   "storage=nbd or storage=iscsi")


def _nfs(inst: Instance, size: int | None, applied: Applied) -> tuple[str, dict]:
    if inst.env.driver == "vm":
        # The guest kernel has an NFS client, but it must open a connection to the server: with
        # user-mode networking and restrict=on (SSH forwarded in, nothing out) it cannot.
        raise ConditionUnavailable("storage=nfs in a VM: the guest must connect to the NFS server, and the vm "
                                   "driver's user-mode network lets guests open no connections to the host")
    ok, why = kernel_nfs_client()
    if not ok:
        raise ConditionUnavailable(why)
    require_root("storage=nfs")
    require_tools("storage=nfs", {"ganesha.nfsd": "nfs-ganesha nfs-ganesha-vfs", "mount.nfs4": "nfs-common"})
    workdir = new_dir("nfs")
    applied.defer(lambda: remove_tree(workdir))
    export = workdir / "export"
    export.mkdir(mode=0o777)
    link = hostnet.Link.create()
    applied.defer(link.destroy)
    conf = workdir / "ganesha.conf"
    conf.write_text(GANESHA_CONF.format(port=NFS_PORT, addr=link.ns_addr, export=export))
    server = Helper(["ganesha.nfsd", "-F", "-L", str(workdir / "ganesha.log"), "-f", str(conf),
                     "-p", str(workdir / "ganesha.pid")], name="nfs-ganesha", netns=link.netns,
                    log=workdir / "ganesha.out")
    applied.defer(server.stop)
    wait_for(lambda: hostnet.can_connect(link.ns_addr, NFS_PORT), 60, "nfs-ganesha to listen", server)
    host, port = applied.route(link.ns_addr, NFS_PORT)
    mount_dir, inside = _mount_point(inst, "nfs", applied)
    run(["mount", "-t", "nfs4", "-o", f"vers=4.1,proto=tcp,port={port},hard,timeo=600",
         f"{host}:/vb", str(mount_dir)], timeout=120)
    applied.defer(lambda: umount(mount_dir))
    return inside, {"storage_fs": "nfs4", "storage_mechanism": "nfs-ganesha on a server link; kernel NFSv4.1 client"}


TARGETS: dict[str, Callable[[Instance, int | None, Applied], tuple[str | None, dict]]] = {
    "local": _local, "tmpfs": _tmpfs, "volume": _volume, "nbd": _nbd, "iscsi": _iscsi, "nfs": _nfs,
}


def availability() -> dict[str, tuple[bool, str]]:
    """What `doctor` reports: can each target work on this machine, and if not, why."""
    from .hostres import is_root
    out: dict[str, tuple[bool, str]] = {"local": (True, ""), "tmpfs": (is_root(), "needs root")}
    out["volume"] = ((bool(shutil.which("podman") or shutil.which("docker"))),
                     "needs a container engine (apt-get install podman)")
    for kind, tools in (("nbd", {"nbdkit": "nbdkit", "nbdfuse": "nbdfuse"}),
                        ("iscsi", {"tgtd": "tgt", "qemu-nbd": "qemu-utils", "nbdfuse": "nbdfuse"})):
        missing = [f"{t} ({p})" for t, p in tools.items() if not shutil.which(t)]
        if not is_root():
            out[kind] = (False, "needs root (namespaces, loop devices, mounts)")
        elif missing:
            out[kind] = (False, "missing " + ", ".join(missing))
        elif not Path("/dev/fuse").exists():
            out[kind] = (False, "no /dev/fuse")
        else:
            out[kind] = (True, "")
    if out["iscsi"][0]:
        try:
            _iscsi_initiator()
        except ConditionUnavailable as exc:
            out["iscsi"] = (False, str(exc))
    ok, why = kernel_nfs_client()
    if ok and not shutil.which("ganesha.nfsd"):
        ok, why = False, "no NFS server (apt-get install nfs-ganesha nfs-ganesha-vfs)"
    out["nfs"] = (ok, why)
    return out
