"""storage=nfs and storage=nfs-datastore: an nfs-ganesha server on a server link, and the four
ways an instance gets at it (below). The other targets are targets.py's; this module uses its
mount points and image files."""

from __future__ import annotations

from pathlib import Path

from ..drivers.base import DiskHotplug, GuestRelay, SharedNfsMount
from ..machines.nfsclient import kernel_nfs_client
from . import hostnet, network, vmdisk
from ..errors import ConditionUnavailable
from .base import Applied, Instance
from .hostres import (Helper, HostCommandFailed, new_dir, remove_tree, require_root, require_tools, run, umount,
                      wait_for)
from .targets import NFS_PORT, REMOTE_DEFAULT_SIZE, here_only, image_file, mount_point

# Four ways, as study 004 had them (`storage_mounted_by` in every sample says which):
#   host       storage=nfs on a bare host: its kernel NFSv4.1 client mounts the export;
#   container  storage=nfs in a container: the host mounts it, the container sees it through its
#              /vb-mnt propagation mount (as a pod sees a PersistentVolume its node mounted);
#   guest      storage=nfs in a VM: the guest kernel's NFSv4.1 client, over the VM's user-mode
#              network: a guestfwd relay (drivers/vm/instance.py) opens exactly 10.0.2.100:2049 to the server;
#   hypervisor storage=nfs-datastore in a VM: QEMU's NFS block driver (libnfs) opens a disk image on
#              the export, with no mount anywhere (an ESXi NFS datastore), hot-plugged as a virtio
#              disk with ext4 in the guest.
# The server is nfs-ganesha (user space: no kernel nfsd) on a server link. libnfs in QEMU 7.2
# speaks NFSv3 only (QEMU sets no version), which finds the NFS and MOUNT ports through a
# portmapper on port 111: for the datastore ganesha also serves v3, and rpcbind runs beside it in
# the link's namespace with a private /run (its socket path is fixed), where ganesha registers
# (ganesha will not start v3 unregistered). libnfs then dials those port numbers on the address it
# asked, so a delay proxy in its path keeps them (network.route_same_port).

NFS_MOUNT_PORT, PORTMAP_PORT = 20048, 111
NFS_PSEUDO = "/vb"
GANESHA_CONF = """NFS_CORE_PARAM {{ Protocols = {protocols}; NFS_Port = {port}; MNT_Port = {mnt_port};
  Bind_addr = {addr}; Enable_NLM = false; Enable_RQUOTA = false; Mount_Path_Pseudo = true; }}
NFSV4 {{ Graceless = true; RecoveryBackend = fs; }}
NFS_KRB5 {{ Active_krb5 = false; }}
EXPORT {{ Export_Id = 1; Path = {export}; Pseudo = {pseudo}; Access_Type = RW; Squash = No_Root_Squash;
  Protocols = {protocols}; Transports = TCP; SecType = sys; FSAL {{ Name = VFS; }} }}
LOG {{ Default_Log_Level = WARN; }}
"""
# Run in the link's namespace under `unshare --mount`: ganesha's recovery directory (and rpcbind's
# /run) private to this server, so servers of concurrent runs do not share them.
# $1 config, $2 log, $3 pid file, $4 = 1: start rpcbind first (NFSv3).
_GANESHA_START = r"""
set -e
mkdir -p /var/lib/nfs/ganesha
mount -t tmpfs vb-nfs-state /var/lib/nfs/ganesha
if [ "$4" = 1 ]; then
  mount -t tmpfs vb-nfs-run /run
  mkdir -p /run/rpcbind
  rpcbind -f &
  i=0; while [ ! -S /run/rpcbind.sock ] && [ $i -lt 100 ]; do sleep 0.1; i=$((i+1)); done
fi
exec ganesha.nfsd -F -L "$2" -f "$1" -p "$3"
"""


def host_mount_refusal(inst: Instance) -> str | None:
    """Why the host-mounted ways cannot serve `inst` here, or None."""
    ok, why = kernel_nfs_client()
    if ok:
        return None
    if inst.traits.engine_container:
        return (f"storage=nfs in a container is mounted by the host's kernel NFS client and passed in "
                f"(as a pod's PersistentVolume): {why}")
    return f"storage=nfs on {inst.machine.name} is mounted by its kernel NFS client: {why}"


POD_MOUNTED_BY = {"kubernetes": "kubelet (PersistentVolume)", "kube-play": "podman (kube play volume)"}


def pod_nfs_choice(backend: str, share: str, refusal: str | None, routed: bool) -> dict[str, str]:
    """What storage=nfs is for a pod (pure): the environment's `nfs_share`, mounted when the pod was
    made, or ConditionUnavailable saying why not. A condition cannot add a volume to running pods,
    so the condition's own server is never used here; `routed`: delay_ms/rate_mbit are in effect,
    and they cannot sit in the path of a mount made before the cell."""
    if not share:
        raise ConditionUnavailable(
            "storage=nfs with the pods driver mounts the environment's NFS share in every pod when the pods "
            "are made (a PersistentVolume and its claim; a condition cannot add a volume to running pods): "
            "set nfs_share = \"SERVER:/EXPORT\" on the pods environment (an export the cluster's nodes reach; "
            "kube-play: this machine)")
    if refusal:
        raise ConditionUnavailable(refusal)
    if routed:
        raise ConditionUnavailable(
            f"delay_ms/rate_mbit cannot be put in the path to nfs_share {share}: the pods mounted it when they "
            "were made, before the cell's network conditions; use storage=nbd or iscsi for a delayed remote "
            "disk, or delay the path to the share outside virtbench")
    how = ("a PersistentVolume + claim, mounted by the node's kubelet (kernel NFSv4.1 client)"
           if backend == "kubernetes" else
           "the claim's podman NFS volume (kube play), mounted by the host's kernel NFSv4.1 client")
    return {"storage_fs": "nfs4", "storage_mounted_by": POD_MOUNTED_BY.get(backend, backend),
            "storage_mechanism": f"the existing NFS export {share} (nfs_share); {how}",
            "storage_nfs_share": share}


class Ganesha:
    """nfs-ganesha exporting a fresh directory on a server link (NFSv4.1; NFSv3 + rpcbind with v3)."""

    def __init__(self, inst: Instance, applied: Applied, what: str, v3: bool = False):
        m = self.machine = here_only(inst, what)
        require_root(m, what)
        tools = {"ganesha.nfsd": "nfs-ganesha nfs-ganesha-vfs", "ip": "iproute2", "nsenter": "util-linux",
                 "unshare": "util-linux"}
        if v3:
            tools["rpcbind"] = "rpcbind"
        require_tools(m, what, tools)
        if not list(Path("/usr/lib").glob("*/ganesha/libfsalvfs.so*")):
            raise ConditionUnavailable(f"{what}: nfs-ganesha has no VFS backend (apt-get install nfs-ganesha-vfs)")
        self.workdir = workdir = new_dir("nfs")
        applied.defer(lambda: remove_tree(m, workdir))
        self.export = workdir / "export"
        self.export.mkdir()
        self.export.chmod(0o777)
        self.link = link = hostnet.Link.create(m)
        applied.defer(link.destroy)
        protocols = "3, 4" if v3 else "4"
        conf = workdir / "ganesha.conf"
        conf.write_text(GANESHA_CONF.format(protocols=protocols, port=NFS_PORT, mnt_port=NFS_MOUNT_PORT,
                                            addr=link.ns_addr, export=self.export, pseudo=NFS_PSEUDO))
        server = Helper(m, ["unshare", "--mount", "--propagation", "private", "sh", "-c", _GANESHA_START, "sh",
                            str(conf), str(workdir / "ganesha.log"), str(workdir / "ganesha.pid"),
                            "1" if v3 else "0"],
                        name="nfs-ganesha", netns=link.netns, log=workdir / "ganesha.out")
        applied.defer(server.stop)
        ports = [NFS_PORT, NFS_MOUNT_PORT, PORTMAP_PORT] if v3 else [NFS_PORT]
        wait_for(lambda: all(hostnet.can_connect(link.ns_addr, p) for p in ports), 60,
                 "nfs-ganesha to listen", server)
        self.server = server


def nfs(inst: Instance, size: int | None, applied: Applied) -> tuple[str, dict]:
    if isinstance(inst, DiskHotplug):  # a guest with a kernel of its own mounts the export itself
        return _nfs_guest(inst, applied)
    if isinstance(inst, SharedNfsMount):
        return _nfs_pod(inst, applied)
    m = here_only(inst, "storage=nfs")
    refusal = host_mount_refusal(inst)
    if refusal:
        raise ConditionUnavailable(refusal)
    require_tools(m, "storage=nfs", {"mount.nfs4": "nfs-common"})
    srv = Ganesha(inst, applied, "storage=nfs")
    host, port = applied.route(srv.link.ns_addr, NFS_PORT)
    mount_dir, inside = mount_point(inst, "nfs", applied)
    run(m, ["mount", "-t", "nfs4", "-o", f"vers=4.1,proto=tcp,port={port},hard,timeo=600",
            f"{host}:{NFS_PSEUDO}", mount_dir], timeout=120)
    applied.defer(lambda: umount(m, mount_dir))
    if inst.traits.engine_container:
        return inside, {"storage_fs": "nfs4", "storage_mounted_by": "container", "storage_mechanism":
                        "nfs-ganesha on a server link; the host's kernel NFSv4.1 client, bind-propagated into "
                        "the container (as a pod's PersistentVolume)"}
    return inside, {"storage_fs": "nfs4", "storage_mounted_by": "host",
                    "storage_mechanism": "nfs-ganesha on a server link; the host's kernel NFSv4.1 client"}


def _nfs_pod(inst: SharedNfsMount, applied: Applied) -> tuple[str, dict]:
    """The pod's own mount of the environment's nfs_share (drivers/pods/common.py), a directory per pod."""
    meta = pod_nfs_choice(inst.backend_name, inst.nfs_share, inst.nfs_refusal, applied.routed)
    d = inst.nfs_dir()
    res = inst.exec(["mkdir", "-p", d], timeout=120)
    if not res.ok:
        raise HostCommandFailed(f"cannot make {d} on nfs_share {inst.nfs_share} in {inst.name}: "
                                f"{res.describe_failure()} (the export must let the pod's root user write: "
                                "no_root_squash, or a top directory with mode 1777)")
    applied.defer(lambda: inst.exec(["rm", "-rf", d], timeout=600))  # the share is the user's: leave nothing
    return d, meta


def _nfs_guest(inst: Instance, applied: Applied) -> tuple[str, dict]:
    """The guest kernel mounts the export, reaching the server through the VM's guestfwd relay."""
    if not isinstance(inst, GuestRelay):
        raise ConditionUnavailable(f"storage=nfs in {inst.name}: this VM cannot relay a guest connection "
                                   "to the NFS server (no guestfwd)")
    m = here_only(inst, "storage=nfs")
    require_tools(m, "storage=nfs in a VM", {"socat": "socat"})
    srv = Ganesha(inst, applied, "storage=nfs")
    target = applied.route(srv.link.ns_addr, NFS_PORT)
    addr, port = inst.set_relay(NFS_PORT, target)
    applied.defer(lambda: inst.set_relay(NFS_PORT, None))
    path = vmdisk.nfs_mount(inst, addr, port, NFS_PSEUDO, applied)
    return path, {"storage_fs": "nfs4", "storage_mounted_by": "guest", "storage_mechanism":
                  "nfs-ganesha on a server link; the guest kernel's NFSv4.1 client over QEMU user-mode "
                  "networking (guestfwd relay)"}


def nfs_datastore(inst: Instance, size: int | None, applied: Applied) -> tuple[str, dict]:
    """The VM's disk is an image file on the export, opened by QEMU's NFS client (libnfs, NFSv3)."""
    if not vmdisk.is_vm(inst):
        raise ConditionUnavailable(f"storage=nfs-datastore puts a VM's disk image on NFS, opened by the "
                                   f"hypervisor; a {inst.env.driver} instance has no hypervisor (use storage=nfs)")
    if not list(Path("/usr/lib").glob("*/qemu/block-nfs.so")):
        raise ConditionUnavailable("storage=nfs-datastore: QEMU's NFS block driver is missing "
                                   "(apt-get install qemu-block-extra)")
    srv = Ganesha(inst, applied, "storage=nfs-datastore", v3=True)
    # NFSv3 asks the portmapper (port 111) for the MOUNT and NFS ports and dials them on the same
    # address: a delay proxy in the path must keep every port number (network.route_same_port).
    routes = {network.route_same_port(applied, srv.link.ns_addr, p)
              for p in (PORTMAP_PORT, NFS_MOUNT_PORT, NFS_PORT)}
    hosts = {h for h, _ in routes}
    if len(hosts) != 1 or any(p not in (PORTMAP_PORT, NFS_MOUNT_PORT, NFS_PORT) for _, p in routes):
        raise HostCommandFailed(f"the routes to the NFS server do not share one address: {sorted(routes)}")
    host = hosts.pop()
    img = image_file(srv.machine, srv.export, size or REMOTE_DEFAULT_SIZE, "storage=nfs-datastore")
    img.chmod(0o666)
    path = vmdisk.hotplug(inst, {"driver": "nfs", "server": {"type": "inet", "host": host},
                                 "path": f"{NFS_PSEUDO}/{img.name}"}, "nfs", applied)
    return path, {"storage_fs": "ext4", "storage_mounted_by": "hypervisor", "storage_mechanism":
                  "nfs-ganesha on a server link; QEMU's NFS client (libnfs, NFSv3) opens the disk image on the "
                  "export (datastore, no mount), virtio disk, ext4 in the guest"}
