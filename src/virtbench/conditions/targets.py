"""Making storage targets on the machine of an instance: servers, block devices, mounts.

Each maker takes an instance and returns (the directory its disk workloads write to, as the
instance sees it, or None for its own; metadata to record), and registers on `applied` how to undo
everything it made. Commands run through the executor of the instance's machine.
- tmpfs, volume: mounted by the machine (a VM mounts tmpfs itself, vmdisk.py);
- nbd, iscsi, nfs: a server on a *server link* (its own network namespace behind a veth, so it is
  reached over a real interface, like another host), dialled through applied.route() (so
  delay_ms/rate_mbit put themselves in the path), attached by the machine (nbdfuse -> loop
  device with direct I/O -> ext4; the kernel's NFS client) or by QEMU for a VM.
Mounts are made by the machine; a container sees them through its /vb-mnt propagation mount
(hostdirs). Remote targets are made on this machine only so far: elsewhere the cell is skipped.
The NFS targets (nfs, nfs-datastore) are nfs.py's; storage.py holds the table of makers.
"""

from __future__ import annotations

import contextlib
import shutil
from collections.abc import Callable
from pathlib import Path

from .. import hostdirs
from ..hostdirs import owner_tag
from ..drivers.base import VolumeAttach
from ..machines import Machine, local
from ..machines.nfsclient import kernel_nfs_client
from . import hostnet, vmdisk
from ..errors import ConditionUnavailable
from .base import Applied, Instance
from ..sizes import human
from .hostres import (Helper, HostCommandFailed, free_bytes, is_mounted, is_root, loop_attach, loop_detach,
                      machine_dir, new_dir, next_id, remove_tree, require_root, require_tools, run, umount,
                      wait_for)

REMOTE_DEFAULT_SIZE = 4 << 30
NBD_PORT, ISCSI_PORT, NFS_PORT = 10809, 3260, 2049
IQN_PREFIX = "iqn.2024-01.org.virtbench"

Maker = Callable[[Instance, int | None, Applied], tuple[str | None, dict]]


# -- where a mount goes ------------------------------------------------------------------------------

def mount_point(inst: Instance, kind: str, applied: Applied) -> tuple[str, str]:
    """(directory on the machine to mount on, the same directory as the instance sees it)."""
    m = inst.machine
    if inst.traits.is_machine:  # it sees its machine's own file system
        parent = machine_dir(m, kind)
        d = f"{parent}/mnt"
        run(m, ["mkdir", d])
        applied.defer(lambda: remove_tree(m, parent))
        return d, d
    shared = inst.host_mount_dir
    if not shared:
        raise ConditionUnavailable(f"the {inst.env.driver} driver cannot pass a host mount into {inst.name}, "
                                   f"so storage={kind} cannot reach it")
    sub = f"{kind}-{next_id()}"
    d = f"{shared}/{sub}"
    run(m, ["mkdir", d])

    def rm() -> None:
        if not is_mounted(m, d):
            m.run(["rmdir", d], timeout=60)
    applied.defer(rm)
    return d, f"{hostdirs.GUEST_DIR}/{sub}"


def fs_type(inst: Instance, path: str) -> str:
    res = inst.exec(["stat", "-f", "-c", "%T", path], timeout=30)
    return res.stdout.strip() if res.ok else "unknown"


def here_only(inst: Instance, what: str) -> Machine:
    """The instance's machine, when it is this one; targets with servers, links and FUSE are made
    here only so far."""
    if not inst.machine.is_local:
        raise ConditionUnavailable(f"{what} on {inst.machine.name}: its server link, FUSE attachment and "
                                   "loop device are made on this machine only so far; storage=local and "
                                   "storage=tmpfs work on remote machines")
    return inst.machine


def _check_space(where: Path, size: int, what: str) -> None:
    free = free_bytes(where)
    if free < size + (1 << 30):
        raise ConditionUnavailable(f"{what}: a {human(size)} disk image needs that much free space (+1 GiB) "
                                   f"in {where}; {human(free)} free")


# -- local, tmpfs, volume -------------------------------------------------------------------------------

def local_disk(inst: Instance, size: int | None, applied: Applied) -> tuple[str | None, dict]:
    return None, {"storage_fs": fs_type(inst, applied.storage_dir(inst))}


def tmpfs(inst: Instance, size: int | None, applied: Applied) -> tuple[str, dict]:
    if vmdisk.is_vm(inst):
        return vmdisk.tmpfs(inst, size, applied)
    m = inst.machine
    require_root(m, "storage=tmpfs")
    mount_dir, inside = mount_point(inst, "tmpfs", applied)
    opts = f"size={size},mode=1777" if size else "size=25%,mode=1777"
    run(m, ["mount", "-t", "tmpfs", "-o", opts, "virtbench-tmpfs", mount_dir])
    applied.defer(lambda: umount(m, mount_dir))
    return inside, {"storage_fs": "tmpfs", "storage_mechanism": f"tmpfs mounted by {m.place}"}


def _engine_cmd(inst: Instance) -> str:
    if inst.engine is not None:
        return inst.engine.cmd
    for cmd in ("podman", "docker"):
        if shutil.which(cmd):
            return cmd
    raise ConditionUnavailable("storage=volume needs a container engine (apt-get install podman)")


def volume(inst: Instance, size: int | None, applied: Applied) -> tuple[str, dict]:
    if not (inst.traits.host_process or inst.traits.engine_container):
        raise ConditionUnavailable(f"storage=volume is a container-engine volume; a {inst.env.driver} "
                                   "instance has its own disk (storage=local)")
    m = here_only(inst, "storage=volume")
    cmd = _engine_cmd(inst)
    name = f"vb-vol-{owner_tag()}-{next_id()}"
    run(m, [cmd, "volume", "create", "--label", "virtbench.cond=1", name], timeout=120)
    applied.defer(lambda: run(m, [cmd, "volume", "rm", "-f", name], timeout=120, check=False))
    source = run(m, [cmd, "volume", "inspect", "-f", "{{.Mountpoint}}", name], timeout=60).strip()
    if not source or not Path(source).is_dir():
        raise HostCommandFailed(f"{cmd} volume {name} has no local mount point ({source!r})")
    meta = {"storage_mechanism": f"{cmd} volume (local driver)"}
    if inst.traits.host_process:
        return source, {**meta, "storage_fs": fs_type(inst, source)}
    require_root(m, "storage=volume in a running container")
    mount_dir, inside = mount_point(inst, "volume", applied)
    run(m, ["mount", "--bind", source, mount_dir])
    applied.defer(lambda: umount(m, mount_dir))
    return inside, {**meta, "storage_fs": fs_type(inst, inside)}


# -- remote block devices ----------------------------------------------------------------------------

def image_file(m: Machine, workdir: Path, size: int, what: str) -> Path:
    """A sparse disk image with an ext4 file system, made on the server's side before export."""
    _check_space(workdir, size, what)
    img = workdir / "disk.img"
    with open(img, "wb") as f:
        f.truncate(size)
    run(m, ["mkfs.ext4", "-q", "-F", "-m", "0", "-E", "lazy_itable_init=0,lazy_journal_init=0", str(img)],
        timeout=300)
    return img


def _attach_nbd(m: Machine, uri: str, workdir: Path, mount_dir: str, applied: Applied, fstype: str = "ext4") -> None:
    """NBD export -> nbdfuse file -> loop device (direct I/O, so reads really cross the network) -> ext4."""
    fuse_dir = workdir / "fuse"
    fuse_dir.mkdir()
    applied.defer(lambda: remove_tree(m, fuse_dir) if not is_mounted(m, fuse_dir) else None)
    disk = fuse_dir / "disk"
    helper = Helper(m, ["nbdfuse", str(disk), uri], name="nbdfuse", log=workdir / "nbdfuse.log")

    def stop_fuse() -> None:
        if is_mounted(m, fuse_dir):
            m.run(["fusermount3" if shutil.which("fusermount3") else "fusermount", "-u", str(fuse_dir)], timeout=60)
        with contextlib.suppress(HostCommandFailed):  # it exits once unmounted
            wait_for(lambda: not helper.alive(), 10, "nbdfuse to exit")
        helper.stop()
        if is_mounted(m, fuse_dir):
            umount(m, fuse_dir)
    applied.defer(stop_fuse)
    wait_for(lambda: is_mounted(m, fuse_dir) and disk.exists(), 30, "the nbdfuse mount", helper)
    dev = loop_attach(m, disk, direct_io=True)
    applied.defer(lambda: loop_detach(m, dev))
    run(m, ["mount", *(["-t", fstype] if fstype else []), dev, mount_dir], timeout=120)
    applied.defer(lambda: umount(m, mount_dir))


def nbd_external(inst: Instance, export: tuple[str, int, str], applied: Applied) -> tuple[str, dict]:
    """An export someone else serves: its file system is mounted as it is (never formatted)."""
    m = here_only(inst, "storage=nbd://...")
    require_root(m, "storage=nbd://...")
    if not vmdisk.is_vm(inst):
        require_tools(m, "storage=nbd://...", {"nbdfuse": "libnbd-bin", "losetup": "mount"})
    host, port, name = export
    if not hostnet.can_connect(host, port, timeout=5):
        raise HostCommandFailed(f"cannot reach the NBD server {hostnet.fmt_addr(host, port)} "
                                "(connection refused or timed out)")
    dial_host, dial_port = applied.route(host, port)
    if vmdisk.is_vm(inst):
        path = vmdisk.hotplug(inst, {"driver": "nbd", "export": name,
                                     "server": {"type": "inet", "host": dial_host, "port": str(dial_port)}},
                              "nbd", applied, fstype="")
        return path, {"storage_fs": fs_type(inst, path),
                      "storage_mechanism": "an existing NBD export; QEMU's NBD client, virtio disk"}
    workdir = new_dir("nbdx")
    applied.defer(lambda: remove_tree(m, workdir))
    mount_dir, inside = mount_point(inst, "nbd", applied)
    _attach_nbd(m, f"nbd://{hostnet.fmt_addr(dial_host, dial_port)}/{name}", workdir, mount_dir, applied, fstype="")
    return inside, {"storage_fs": fs_type(inst, inside), "storage_mechanism":
                    "an existing NBD export; nbdfuse + loop (direct I/O) on the host"}


def _server_side(inst: Instance, kind: str, size: int | None, applied: Applied):
    """(machine, work dir, formatted disk image, server link) for a remote target of `inst`."""
    m = here_only(inst, f"storage={kind}")
    require_root(m, f"storage={kind}")
    tools = {"mkfs.ext4": "e2fsprogs", "ip": "iproute2", "nsenter": "util-linux"}
    if not vmdisk.is_vm(inst):
        tools.update({"nbdfuse": "libnbd-bin", "losetup": "mount"})
    require_tools(m, f"storage={kind}", tools)
    workdir = new_dir(kind)
    applied.defer(lambda: remove_tree(m, workdir))
    img = image_file(m, workdir, size or REMOTE_DEFAULT_SIZE, f"storage={kind}")
    link = hostnet.Link.create(m)
    applied.defer(link.destroy)
    return m, workdir, img, link


def nbd(inst: Instance, size: int | None, applied: Applied) -> tuple[str, dict]:
    require_tools(here_only(inst, "storage=nbd"), "storage=nbd", {"nbdkit": "nbdkit"})
    m, workdir, img, link = _server_side(inst, "nbd", size, applied)
    server = Helper(m, ["nbdkit", "--foreground", "--exit-with-parent", "--ipaddr", link.ns_addr,
                        "--port", str(NBD_PORT), "file", f"file={img}"],
                    name="nbdkit", netns=link.netns, log=workdir / "nbdkit.log")
    applied.defer(server.stop)
    wait_for(lambda: hostnet.can_connect(link.ns_addr, NBD_PORT), 30, "nbdkit to listen", server)
    host, port = applied.route(link.ns_addr, NBD_PORT)
    if vmdisk.is_vm(inst):
        path = vmdisk.hotplug(inst, {"driver": "nbd", "server": {"type": "inet", "host": host, "port": str(port)}},
                              "nbd", applied)
        return path, {"storage_fs": "ext4", "storage_mechanism":
                      "nbdkit on a server link; QEMU's NBD client, virtio disk, ext4 in the guest"}
    mount_dir, inside = mount_point(inst, "nbd", applied)
    _attach_nbd(m, f"nbd://{hostnet.fmt_addr(host, port)}", workdir, mount_dir, applied)
    return inside, {"storage_fs": "ext4", "storage_mechanism":
                    "nbdkit on a server link; nbdfuse + loop (direct I/O) + ext4 on the host"}


def iscsi_initiator() -> str:
    """qemu-nbd with QEMU's libiscsi block driver: a user-space initiator, on this machine."""
    require_tools(local(), "storage=iscsi", {"qemu-nbd": "qemu-utils", "tgtd": "tgt", "tgtadm": "tgt"})
    if not list(Path("/usr/lib").glob("*/qemu/block-iscsi.so")):
        raise ConditionUnavailable("storage=iscsi: no iSCSI initiator here: the kernel has none and QEMU's "
                                   "user-space one is missing (apt-get install qemu-block-extra)")
    return "qemu-nbd"


def _tgt_control_port() -> int:
    for port in range(20000 + (next_id() % 1000), 30000):
        if not Path(f"/var/run/tgtd/socket.{port}").exists():
            return port
    raise HostCommandFailed("no free tgtd control port")


def iscsi(inst: Instance, size: int | None, applied: Applied) -> tuple[str, dict]:
    here_only(inst, "storage=iscsi")
    iscsi_initiator()
    m, workdir, img, link = _server_side(inst, "iscsi", size, applied)
    cport = _tgt_control_port()
    tgtadm = ["tgtadm", "-C", str(cport), "--lld", "iscsi"]
    server = Helper(m, ["tgtd", "-f", "-C", str(cport), "--iscsi", f"portal={link.ns_addr}:{ISCSI_PORT}"],
                    name="tgtd", netns=link.netns, log=workdir / "tgtd.log")

    def stop_tgtd() -> None:
        m.run([*tgtadm, "--mode", "target", "--op", "delete", "--force", "--tid", "1"], timeout=30)
        m.run(["tgtadm", "-C", str(cport), "--mode", "system", "--op", "delete"], timeout=30)
        with contextlib.suppress(HostCommandFailed):  # it exits on 'system delete'
            wait_for(lambda: not server.alive(), 5, "tgtd to exit")
        server.stop()
        for suffix in ("", ".lock"):
            with contextlib.suppress(OSError):
                Path(f"/var/run/tgtd/socket.{cport}{suffix}").unlink()
    applied.defer(stop_tgtd)
    wait_for(lambda: m.run(["tgtadm", "-C", str(cport), "--mode", "system", "--op", "show"], timeout=10).ok,
             30, "tgtd to answer", server)
    iqn = f"{IQN_PREFIX}:{owner_tag()}-{next_id()}"
    run(m, [*tgtadm, "--mode", "target", "--op", "new", "--tid", "1", "--targetname", iqn])
    run(m, [*tgtadm, "--mode", "logicalunit", "--op", "new", "--tid", "1", "--lun", "1", "--backing-store", str(img)])
    run(m, [*tgtadm, "--mode", "target", "--op", "bind", "--tid", "1", "--initiator-address", "ALL"])
    wait_for(lambda: hostnet.can_connect(link.ns_addr, ISCSI_PORT), 30, "tgtd to listen", server)
    host, port = applied.route(link.ns_addr, ISCSI_PORT)
    if vmdisk.is_vm(inst):
        path = vmdisk.hotplug(inst, {"driver": "iscsi", "transport": "tcp", "portal": hostnet.fmt_addr(host, port),
                                     "target": iqn, "lun": 1}, "iscsi", applied)
        return path, {"storage_fs": "ext4", "storage_mechanism":
                      "tgt on a server link; QEMU's iSCSI initiator (libiscsi), virtio disk, ext4 in the guest"}
    sock = workdir / "nbd.sock"
    initiator = Helper(m, ["qemu-nbd", "--persistent", "--format=raw", "--cache=none", "--socket", str(sock),
                           f"iscsi://{hostnet.fmt_addr(host, port)}/{iqn}/1"],
                       name="qemu-nbd (iSCSI initiator)", log=workdir / "qemu-nbd.log")
    applied.defer(initiator.stop)
    wait_for(sock.exists, 60, "qemu-nbd to log in to the iSCSI target", initiator)
    mount_dir, inside = mount_point(inst, "iscsi", applied)
    _attach_nbd(m, f"nbd+unix:///?socket={sock}", workdir, mount_dir, applied)
    return inside, {"storage_fs": "ext4", "storage_mechanism":
                    "tgt on a server link; user-space initiator (qemu-nbd/libiscsi) + nbdfuse + loop + ext4"}


# -- cloud volumes --------------------------------------------------------------------------------------

def cloud_volume(inst: Instance, size: int | None, applied: Applied) -> tuple[str, dict]:
    """A volume of the cloud API: the instance makes, attaches and mounts it (VolumeInstance)."""
    if not isinstance(inst, VolumeAttach):
        raise ConditionUnavailable(f"storage=cloud-volume is a volume of a cloud API; a {inst.env.driver} "
                                   "instance has none (use the cloud driver)")
    path, meta, undo = inst.attach_volume(size)
    applied.defer(undo)
    return path, meta


def availability() -> dict[str, tuple[bool, str]]:
    """What `doctor` reports: can each target be made on this machine, and if not, why."""
    root = is_root(local())
    out: dict[str, tuple[bool, str]] = {"local": (True, ""), "tmpfs": (root, "needs root")}
    out["volume"] = ((bool(shutil.which("podman") or shutil.which("docker"))),
                     "needs a container engine (apt-get install podman)")
    for kind, tools in (("nbd", {"nbdkit": "nbdkit", "nbdfuse": "nbdfuse"}),
                        ("iscsi", {"tgtd": "tgt", "qemu-nbd": "qemu-utils", "nbdfuse": "nbdfuse"})):
        missing = [f"{t} ({p})" for t, p in tools.items() if not shutil.which(t)]
        if not root:
            out[kind] = (False, "needs root (namespaces, loop devices, mounts)")
        elif missing:
            out[kind] = (False, "missing " + ", ".join(missing))
        elif not Path("/dev/fuse").exists():
            out[kind] = (False, "no /dev/fuse")
        else:
            out[kind] = (True, "")
    if out["iscsi"][0]:
        try:
            iscsi_initiator()
        except ConditionUnavailable as exc:
            out["iscsi"] = (False, str(exc))
    # nfs: the host-mounted ways (host, container); a VM mounts it itself (guestfwd relay).
    if not shutil.which("ganesha.nfsd"):
        server = (False, "no NFS server (apt-get install nfs-ganesha nfs-ganesha-vfs)")
    else:
        server = (root, "needs root (a server link, mounts)")
    ok, why = kernel_nfs_client()
    out["nfs"] = server if not server[0] else (ok, f"on hosts and containers: {why}")
    missing = ["rpcbind (rpcbind)"] if not shutil.which("rpcbind") else []
    if not list(Path("/usr/lib").glob("*/qemu/block-nfs.so")):
        missing.append("QEMU's NFS block driver (qemu-block-extra)")
    out["nfs-datastore"] = server if not server[0] else (not missing, "missing " + ", ".join(missing))
    out["cloud-volume"] = (True, "")  # made by the cloud API, for cloud instances
    return out
