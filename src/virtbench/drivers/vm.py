"""Virtual machines on QEMU, booting the guest image: KVM when a real probe boot works, else TCG.

Direct kernel boot of the image's Debian cloud kernel with virtbench's minimal initramfs (or the
image's own), root on a disk made from the same root filesystem (`vm/disk.py`), commands over SSH
with a per-run key through a port QEMU forwards on 127.0.0.1 (`vm/ssh.py`).

Networking: QEMU user mode with restrict=on (the guest reaches nothing outside). More loopback
forwards are added while a VM runs (`forward_port`, HMP hostfwd_add: the web workload's nginx).
VMs of one MPI cluster get a private L2 segment (`VmDriver.connect_cluster`): a NIC hot-plugged
over QMP into each, whose backend is a `socket` netdev on one UDP multicast group bound to
127.0.0.1 (no root, bridge or tap), a static address 10.213.N.x/24 and /etc/hosts naming them all.

Lifecycle marks, each from an event:
  requested  before the instance disk is made and QEMU spawned
  created    QEMU's QMP greeting arrives (the process exists and is set up; vCPUs paused)
  running    QEMU's RESUME event after `cont` (the hypervisor runs the vCPUs)
  init       the guest's PID 1 prints its marker on the serial console (timestamped on arrival)
  ready      the first command over SSH succeeded
The accelerator (kvm or tcg) is in every instance's metadata; TCG is software emulation and is
labelled so everywhere, never as hardware-virtualization overhead.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import os
import re
import secrets
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .. import image, procs
from ..errors import MissingTool, UserError
from ..model import EnvSpec, ExecResult
from ..vm import disk, guest, kernels, probe, qemu, ssh
from .base import Driver, Instance, OptionSpec, Problem

SCRATCH = "/var/tmp/vb-scratch"
DEFAULT_MEMORY_MB = 1024
# devices option -> (disk model, NIC model)
DEVICE_MODELS = {
    "paravirt": ("virtio", "virtio"),
    "emulated-disk": ("ide", "virtio"),
    "emulated": ("ide", "e1000"),
}
NIC_MODULES = {"virtio": "virtio_net", "e1000": "e1000", "rtl8139": "8139too"}
TCG_NOTE = "software emulation (QEMU TCG): not hardware virtualization; CPU-bound work runs ~10x slower"
SPAWN_RETRIES = 3
# Cluster segments: 10.213.N.0/24, N counting the segments of this process (separate L2 segments, so
# two processes using the same N never meet); multicast groups 239.213.x.y on a random port.
SEGMENT_NET = "10.213.{n}.0/24"
SEGMENT_MECHANISM = "qemu socket netdev: UDP multicast over 127.0.0.1"
NIC_DEVICES = {"virtio": "virtio-net-pci", "e1000": "e1000", "rtl8139": "rtl8139"}

# Inside a guest, after a NIC was hot-plugged: $1 = its MAC, $2 = address/prefix. Waits for the
# kernel to bind the driver, keeps IPv6 off it (QEMU's multicast socket loops a guest's own frames
# back, so duplicate address detection would fail), brings it up and prints its name.
_JOIN_SCRIPT = r"""
mac=$1 addr=$2 nic="" i=0
while [ -z "$nic" ]; do
  for d in /sys/class/net/*; do
    [ "$(cat "$d/address" 2>/dev/null)" = "$mac" ] && nic=${d##*/}
  done
  [ -n "$nic" ] && break
  i=$((i + 1))
  [ $i -gt 600 ] && { echo "no network interface with MAC $mac appeared within 60 s" >&2; exit 1; }
  sleep 0.1
done
echo 1 > "/proc/sys/net/ipv6/conf/$nic/disable_ipv6" 2>/dev/null || true
ip addr flush dev "$nic"
ip link set "$nic" up
ip addr add "$addr" dev "$nic"
echo "$nic"
"""

# $1 = the segment's name; stdin: "address hostname" lines of every member. Replaces earlier lines.
_HOSTS_SCRIPT = r"""
tag="# virtbench-segment"
{ grep -v "$tag" /etc/hosts 2>/dev/null || true; while read -r a n; do echo "$a $n $tag $1"; done; } > /etc/hosts.vb
mv /etc/hosts.vb /etc/hosts
"""


def _process_start(pid: int) -> str | None:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[19]
    except (OSError, IndexError):
        return None


class BootFailure(UserError):
    """A VM that did not become ready; carries how far it got."""

    def __init__(self, message: str, lifecycle: dict[str, float], console_tail: str = ""):
        super().__init__(message)
        self.lifecycle = dict(lifecycle)
        self.console_tail = console_tail


@dataclass
class Segment:
    """A private L2 segment for the VMs of one cluster: each member has a NIC whose QEMU backend is a
    socket netdev on one UDP multicast group bound to 127.0.0.1, so frames only travel over this
    machine's loopback and no root, bridge or tap device is needed."""

    index: int
    group: str
    port: int
    network: ipaddress.IPv4Network
    hosts: dict[str, int] = field(default_factory=dict)  # instance name -> host number

    @property
    def name(self) -> str:
        return f"{self.group}:{self.port}"

    def allocate(self, inst_name: str) -> ipaddress.IPv4Interface:
        if inst_name not in self.hosts:
            used = set(self.hosts.values())
            free = next((h for h in range(1, self.network.num_addresses - 1) if h not in used), None)
            if free is None:
                raise UserError(f"the cluster segment {self.network} has no free address left",
                                "use fewer VMs in one cluster (at most 253)")
            self.hosts[inst_name] = free
        return ipaddress.IPv4Interface(f"{self.network[self.hosts[inst_name]]}/{self.network.prefixlen}")

    def describe(self) -> dict[str, Any]:
        return {"mechanism": SEGMENT_MECHANISM, "group": self.name, "subnet": str(self.network)}


class VmInstance(Instance):
    def __init__(self, name: str, env: EnvSpec, role: str, index: int, driver: VmDriver, workdir: Path,
                 base: disk.BaseDisk, settings: dict[str, Any]):
        super().__init__(name, env, role, index)
        self.driver = driver
        self.dir = workdir
        self.base = base
        self.s = settings
        self.bootfiles = driver.boot_files(settings["kernel"])
        self.proc: subprocess.Popen | None = None
        self.qmp: qemu.Qmp | None = None
        self.console: qemu.Console | None = None
        self.channel: ssh.Channel | None = None
        self.disk_path: Path | None = None
        self.disk_format = "raw"
        self.disk_prep_s: float | None = None
        self.port: int | None = None
        self.guest_uptime_at_init: float | None = None
        self.boots: list[dict[str, float]] = []  # one entry per boot: marks of that boot
        self.extra_disks: list[dict[str, Any]] = []
        self._lock = threading.RLock()
        self._cancelled = False
        # User-mode networking alone: guests are not reachable from each other. A cluster joins them
        # on a Segment (a hot-plugged NIC); address is then this VM's address there.
        self.address = None
        self.segment: Segment | None = None
        self.segment_nic: dict[str, str] | None = None  # QEMU ids, MAC and guest name of that NIC
        self.forwards: dict[int, int] = {}  # guest TCP port -> port on 127.0.0.1 (hostfwd)
        self._nics = 0

    # -- starting -------------------------------------------------------------------------------
    def start(self) -> None:
        self.mark("requested")
        self.dir.mkdir(parents=True, exist_ok=True)
        self.disk_path, self.disk_format, self.disk_prep_s = disk.make_instance_disk(
            self.base, self.dir, self.s["image_mode"])
        self.channel = ssh.Channel(0, self.driver.keypair(), self.bootfiles.host_key_pub, self.dir)
        for attempt in range(SPAWN_RETRIES):
            if self._spawn():
                break
            if attempt == SPAWN_RETRIES - 1:
                self._fail("QEMU could not forward a port for SSH (tried 3 free ports)")
        self._await_boot(marker_index=0)

    def _append(self) -> str:
        disk_model, nic_model = DEVICE_MODELS[self.s["devices"]]
        wanted = ["virtio_pci", "virtio_rng"]
        wanted += ["virtio_blk"] if disk_model == "virtio" else ["ata_piix", "sd_mod"]
        wanted.append(NIC_MODULES[nic_model])
        # ext4 and crc32c are modules in the generic kernel (built in the cloud one: left out there).
        mods = self.bootfiles.modules_for([*wanted, "crc32c_generic", "crc32c_intel", "ext4"])
        root = "/dev/vda" if disk_model == "virtio" else "/dev/sda"
        args = ["console=ttyS0", "quiet", f"root={root}", f"init={guest.ROOT_INIT_PATH}",
                f"vb.key={self.driver.keypair().public_b64}", f"vb.hostname={self.hostname}"]
        if self.s["initrd"] == "minimal":
            args.append("vb.mods=" + ",".join(mods))
        else:
            args += ["rw", f"vb.nicmod={NIC_MODULES[nic_model]}"]
        if self.s["kernel_args"]:
            args.append(self.s["kernel_args"])
        return " ".join(args)

    @property
    def hostname(self) -> str:
        """The guest's host name: the instance name as a valid DNS label (Open MPI refuses ':' and
        cuts at '.', both of which environment names such as vm:c1.medium bring)."""
        return re.sub(r"[^A-Za-z0-9-]", "-", self.name)[:63].strip("-") or "vbguest"

    def qemu_config(self) -> qemu.Machine:
        disk_model, nic_model = DEVICE_MODELS[self.s["devices"]]
        boot = self.bootfiles
        shape = self.env.shape
        return qemu.Machine(
            name=self.name, accel=self.s["accel"], machine=self.s["machine"],
            vcpus=shape.vcpus or os.cpu_count() or 1, memory_mb=shape.memory_mb or DEFAULT_MEMORY_MB,
            kernel=boot.kernel, initrd=boot.initrd if self.s["initrd"] == "minimal" else boot.debian_initrd,
            append=self._append(), disk=self.disk_path, disk_format=self.disk_format, disk_model=disk_model,
            disk_cache=self.s["disk_cache"], nic_model=nic_model, ssh_port=self.port, cpu=self.s["cpu"])

    def _spawn(self) -> bool:
        """Start QEMU paused, mark created and running. False if the SSH port was taken meanwhile."""
        with self._lock:
            if self._cancelled:
                raise UserError(f"{self.name}: start cancelled")
            self.port = qemu.free_port()
            self.channel.port = self.port
            sock_path = self.dir / "qmp.sock"
            listener = qemu.qmp_listener(sock_path)
            err_path = self.dir / "qemu.err"
            try:
                with open(err_path, "wb") as err:
                    self.proc = qemu.spawn(self.qemu_config().argv(listener.fileno(), self.dir / "qemu.pid"),
                                           stdout=subprocess.PIPE, stderr=err, pass_fds=(listener.fileno(),))
                self.qmp = qemu.connect(sock_path)
            finally:
                listener.close()
            self.console = qemu.Console(self.proc.stdout, self.dir / "console.log")
        try:
            created = self.qmp.handshake(timeout=120)
        except (qemu.QmpError, OSError) as exc:
            self.proc.wait(timeout=30)
            errors = err_path.read_text(errors="replace").strip()
            if "hostfwd" in errors or "host forwarding" in errors:
                self._stop_qemu()
                return False
            self._fail(f"QEMU exited before it was up (status {self.proc.returncode}): "
                       f"{errors.splitlines()[-1] if errors else exc}")
        self.mark("created", created)
        self.qmp.execute("cont")
        self.mark("running", self.qmp.event_time("RESUME") or time.time())
        return True

    def _await_boot(self, marker_index: int) -> dict[str, float]:
        """Wait for the init and sshd markers after marker_index, then for SSH; mark init and ready."""
        deadline = time.monotonic() + self.s["ready_timeout"]
        marks: dict[str, float] = {}
        init = self._wait_marker(guest.MARK_INIT, marker_index, deadline, "the guest's init to start")
        marks["init"] = init.t
        self.mark("init", init.t)
        with contextlib.suppress(ValueError, IndexError):
            self.guest_uptime_at_init = float(init.text.split("uptime=")[1].split()[0])
        self._wait_marker(guest.MARK_SSHD, marker_index, deadline, "sshd to start in the guest")
        last = ""
        while True:
            self._check_guest(marker_index)
            why = self.channel.open(timeout=max(1.0, min(30.0, deadline - time.monotonic())))
            if why is None:
                res = self.channel.exec(["mkdir", "-p", SCRATCH], timeout=max(5.0, deadline - time.monotonic()))
                if res.ok:
                    marks["ready"] = res.ended
                    self.mark("ready", res.ended)
                    self.boots.append(marks)
                    return marks
                why = res.describe_failure()
            last = why
            if time.monotonic() > deadline:
                self._fail(f"SSH did not answer within {self.s['ready_timeout']:.0f} s: {last}")
            time.sleep(0.05)

    def _wait_marker(self, prefix: str, after: int, deadline: float, what: str) -> qemu.ConsoleLine:
        con = self.console

        def ready():
            return con.find(prefix, after) or con.failure(after) or (self.proc.poll() is not None) or self._cancelled

        con.wait_for(ready, max(0.0, deadline - time.monotonic()))
        found = con.find(prefix, after)
        if found:
            return found
        self._check_guest(after)
        self._fail(f"timed out after {self.s['ready_timeout']:.0f} s waiting for {what}")

    def _check_guest(self, after: int) -> None:
        if self._cancelled:
            raise UserError(f"{self.name}: start cancelled")
        bad = self.console.failure(after) if self.console else None
        if bad:
            self._fail(f"the guest failed to boot: {bad.text.removeprefix(guest.MARK_FAIL).strip()}")
        if self.proc is not None and self.proc.poll() is not None:
            errors = (self.dir / "qemu.err").read_text(errors="replace").strip() if (self.dir / "qemu.err").exists() else ""
            self._fail(f"QEMU exited with status {self.proc.returncode}"
                       + (f": {errors.splitlines()[-1]}" if errors else ""))

    def _fail(self, why: str):
        tail = self.console.tail(15) if self.console else ""
        msg = f"VM {self.name} did not become ready: {why}"
        if tail:
            msg += "\n  console tail:\n    " + "\n    ".join(tail.splitlines())
        raise BootFailure(msg, self.lifecycle, tail)

    # -- running --------------------------------------------------------------------------------
    def exec(self, argv: Sequence[str], timeout: float | None = None, stdin: bytes | None = None,
             env: Mapping[str, str] | None = None) -> ExecResult:
        argv = [str(a) for a in argv]
        now = time.time()
        if self._torn_down:
            return ExecResult(argv, 125, "", f"instance {self.name} was torn down", now, now)
        if not self.channel.is_open():
            why = self.channel.open(timeout=30) if self.alive() else "the VM is not running"
            if why:
                return ExecResult(argv, ssh.SSH_ERROR, "", f"instance {self.name}: no SSH connection: {why}",
                                  now, time.time())
        res = self.channel.exec(argv, timeout=timeout, stdin=stdin, env=env)
        if res.returncode == ssh.SSH_ERROR and not res.timed_out and not self.alive():
            res.stderr = res.stderr.rstrip() + f"\ninstance {self.name} is not running (QEMU exited)"
        return res

    def copy_in(self, src: Path, dest: str) -> None:
        self.channel.copy_in(src, dest)

    def copy_out(self, src: str, dest: Path) -> None:
        self.channel.copy_out(src, dest)

    def bin(self, name: str) -> str:
        return f"{image.GUEST_BIN_DIR}/{name}"

    def scratch_dir(self) -> str:
        return SCRATCH

    def alive(self) -> bool:
        if self._torn_down or self.proc is None or self.proc.poll() is not None:
            return False
        try:
            return bool(self.qmp.execute("query-status", timeout=10).get("running"))
        except (qemu.QmpError, OSError, ValueError):
            return False

    def metadata(self) -> dict[str, Any]:
        disk_model, nic_model = DEVICE_MODELS[self.s["devices"]]
        shape = self.env.shape
        accel = self.s["accel"]
        meta = {**super().metadata(), "accelerator": accel,
                "virtualization": "hardware (KVM)" if accel == "kvm" else "emulation (TCG)",
                "machine": self.s["machine"], "cpu_model": self.s["cpu"] or "qemu default",
                "vcpus": shape.vcpus or os.cpu_count(), "memory_mb": shape.memory_mb or DEFAULT_MEMORY_MB,
                "devices": self.s["devices"], "disk_model": disk_model, "nic_model": nic_model,
                "rng": "virtio-rng", "disk_cache": self.s["disk_cache"], "initrd": self.s["initrd"],
                "image_mode": self.s["image_mode"], "image_size": disk.format_size(self.base.requested),
                "disk_bytes": self.base.size, "pad_bytes": self.base.pad_bytes,
                "disk_prep_s": None if self.disk_prep_s is None else round(self.disk_prep_s, 4),
                "image_hash": self.driver.image.hash, "kernel_version": self.bootfiles.kernel_version,
                "kernel_flavour": self.s["kernel"],
                "qemu_version": self.driver.qemu_version, "guest_uptime_at_init": self.guest_uptime_at_init}
        meta["network"] = "qemu user-mode (restrict=on; SSH and forwarded ports on 127.0.0.1 only)"
        if self.segment is not None:
            meta["cluster_network"] = {**self.segment.describe(), "address": self.address,
                                       "nic_model": NIC_DEVICES[nic_model], "mac": self.segment_nic["mac"]}
        if self.forwards:
            meta["port_forwards"] = {str(g): h for g, h in self.forwards.items()}
        if accel == "tcg":
            meta["accelerator_note"] = TCG_NOTE
        if self.s["kernel_args"]:
            meta["kernel_args"] = self.s["kernel_args"]
        return meta

    # -- lifecycle operations (lifecycle checks use these) --------------------------------------
    def boot_id(self) -> str:
        res = self.exec(["cat", "/proc/sys/kernel/random/boot_id"], timeout=30)
        if not res.ok:
            raise UserError(f"{self.name}: cannot read boot_id: {res.describe_failure()}")
        return res.stdout.strip()

    def request_reboot(self) -> int:
        """Ask the guest to reboot (clean: busybox init stops everything, then reboot(2)). Returns the
        console marker index the next boot's markers will come after."""
        with self._lock:
            index = len(self.console.markers)
        # Detached, so the SSH session returns at once instead of hanging on a guest that vanishes
        # under it (a reset TCP peer behind QEMU's NAT is only noticed by keep-alive timeouts).
        res = self.channel.exec(["sh", "-c", "busybox setsid sh -c 'sleep 0.3; sync; busybox reboot' "
                                             "</dev/null >/dev/null 2>&1 &"], timeout=30)
        self.channel.close()
        if not res.ok:
            raise UserError(f"{self.name}: asking the guest to reboot failed: {res.describe_failure()}")
        return index

    def await_reboot(self, index: int) -> dict[str, float]:
        return self._await_boot(index)

    def reboot(self) -> dict[str, float]:
        return self.await_reboot(self.request_reboot())

    def attach_disk(self, size_bytes: int = 64 << 20, timeout: float = 60.0) -> dict[str, Any]:
        """Hot-plug a new blank virtio disk; returns its id and the device name the guest shows."""
        before = set(self._block_devices())
        n = len(self.extra_disks)
        path = self.dir / f"extra{n}.qcow2"
        disk.make_blank_disk(path, size_bytes)
        node, dev = f"extra{n}", f"extra{n}-dev"
        self.qmp.execute("blockdev-add", {"node-name": node, "driver": "qcow2",
                                          "file": {"driver": "file", "filename": str(path)}})
        self.qmp.execute("device_add", {"driver": "virtio-blk-pci", "drive": node, "id": dev})
        t0 = time.monotonic()
        new: list[str] = []
        while time.monotonic() - t0 < timeout:
            new = sorted(set(self._block_devices()) - before)
            if new:
                break
            time.sleep(0.1)
        info = {"id": dev, "node": node, "path": str(path), "size": size_bytes,
                "guest_device": f"/dev/{new[0]}" if new else None, "seconds": round(time.monotonic() - t0, 3)}
        self.extra_disks.append(info)
        return info

    def _block_devices(self) -> list[str]:
        res = self.exec(["ls", "/sys/block"], timeout=30)
        return res.stdout.split() if res.ok else []

    def snapshot_disk(self, dest: Path) -> float:
        """A crash-consistent copy of the root disk while the VM runs: sync in the guest, pause the
        vCPUs (QEMU drains in-flight I/O), copy, resume. Returns the seconds the VM was paused."""
        self.exec(["sync"], timeout=60)
        self.qmp.execute("stop")
        t0 = time.monotonic()
        try:
            disk.snapshot(self.disk_path, self.disk_format, dest)
        finally:
            self.qmp.execute("cont")
        return time.monotonic() - t0

    # -- networking beyond the SSH forward ------------------------------------------------------
    def forward_port(self, guest_port: int) -> tuple[str, int]:
        """(127.0.0.1, host port) that reaches `guest_port` in the guest: a hostfwd rule added to the
        running user-mode network (kept until teardown, reused on later calls)."""
        with self._lock:
            if guest_port in self.forwards:
                return "127.0.0.1", self.forwards[guest_port]
            last = ""
            for _ in range(SPAWN_RETRIES):
                port = qemu.free_port()
                last = self.qmp.execute("human-monitor-command", {
                    "command-line": f"hostfwd_add net0 tcp:127.0.0.1:{port}-:{guest_port}"}).strip()
                if not last:  # HMP answers nothing on success, an error sentence otherwise
                    self.forwards[guest_port] = port
                    return "127.0.0.1", port
            raise UserError(f"{self.name}: QEMU could not forward a port on 127.0.0.1 to guest port {guest_port}: "
                            f"{last}", "free some local ports, or run again (a free port was taken meanwhile)")

    def join_segment(self, seg: Segment) -> str:
        """Hot-plug a NIC on `seg` (QMP netdev_add + device_add) and give it this VM's address there."""
        if self.segment is seg:
            return self.address
        if self.segment is not None:
            self.leave_segment()
        iface = seg.allocate(self.name)
        _, nic_model = DEVICE_MODELS[self.s["devices"]]
        with self._lock:
            self._nics += 1
            netdev, dev = f"vbseg{self._nics}", f"vbseg{self._nics}-nic"
        host = seg.hosts[self.name]
        mac = f"52:54:00:d5:{seg.index % 256:02x}:{host:02x}"
        self.qmp.execute("netdev_add", {"type": "socket", "id": netdev, "mcast": seg.name,
                                        "localaddr": "127.0.0.1"})
        try:
            self.qmp.execute("device_add", {"driver": NIC_DEVICES[nic_model], "netdev": netdev, "id": dev,
                                            "mac": mac})
        except qemu.QmpError as exc:
            with contextlib.suppress(Exception):
                self.qmp.execute("netdev_del", {"id": netdev})
            hint = ("use machine = \"pc\" (its PCI bus takes hot-plugged devices)" if self.s["machine"] == "q35"
                    else "use instances = 1 in this environment")
            raise UserError(f"{self.name}: could not hot-plug the cluster NIC: {exc}", hint) from None
        self.segment_nic = {"netdev": netdev, "device": dev, "mac": mac}
        res = self.exec(["sh", "-c", _JOIN_SCRIPT, "sh", mac, str(iface)], timeout=90)
        if not res.ok:
            raise UserError(f"{self.name}: the guest did not bring up the cluster NIC: {res.describe_failure()}",
                            "see the guest's console log; the NIC driver may be missing from the guest kernel")
        self.segment_nic["guest_nic"] = res.stdout.strip().splitlines()[-1]
        self.segment = seg
        self.address = str(iface.ip)
        return self.address

    def leave_segment(self) -> None:
        """Unplug the cluster NIC (best effort: the address goes at once, the device when the guest lets go)."""
        nic, self.segment_nic = self.segment_nic, None
        if self.segment is not None:
            self.segment.hosts.pop(self.name, None)
        self.segment, self.address = None, None
        if not nic:
            return
        if nic.get("guest_nic"):
            self.exec(["ip", "addr", "flush", "dev", nic["guest_nic"]], timeout=30)
        for cmd, arg in (("device_del", nic["device"]), ("netdev_del", nic["netdev"])):
            with contextlib.suppress(Exception):
                self.qmp.execute(cmd, {"id": arg})

    # -- teardown -------------------------------------------------------------------------------
    def _stop_qemu(self) -> None:
        if self.qmp is not None:
            if self.proc is not None and self.proc.poll() is None:
                with contextlib.suppress(Exception):
                    self.qmp.execute("quit", timeout=2)
            self.qmp.close()
            self.qmp = None
        if self.proc is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=3)
            qemu.kill_group(self.proc, grace=1.0)
            if self.console is not None:
                self.console.join(5)
            with contextlib.suppress(Exception):
                self.proc.stdout.close()
            self.proc = None

    def _destroy(self) -> None:
        with self._lock:
            self._cancelled = True
        if self.channel is not None:
            self.channel.close()
        self._stop_qemu()
        if self.segment is not None:
            self.segment.hosts.pop(self.name, None)
        shutil.rmtree(self.dir, ignore_errors=True)
        self.driver._forget(self)


class VmDriver(Driver):
    name = "vm"
    description = "a QEMU virtual machine booting the guest image (KVM if a probe boot works, else TCG emulation)"
    needs_image = True
    options = {
        "accel": OptionSpec(str, "auto", "accelerator; auto = KVM if a real probe boot works, else TCG",
                            ("auto", "kvm", "tcg")),
        "devices": OptionSpec(str, "paravirt", "device models: paravirt = virtio-blk + virtio-net; "
                              "emulated-disk = IDE disk + virtio-net; emulated = IDE disk + e1000 NIC",
                              tuple(DEVICE_MODELS)),
        "kernel": OptionSpec(str, "auto", "guest kernel: the image's Debian cloud kernel, or Debian's generic "
                             "kernel of the same ABI (fetched on first use; has the e1000 driver the cloud "
                             "kernel lacks); auto = cloud unless the device model needs generic",
                             ("auto", *kernels.FLAVOURS)),
        "machine": OptionSpec(str, "pc", "QEMU machine type (pc: i440FX with IDE and ACPI PCI hot-plug)",
                              ("pc", "q35")),
        "image_mode": OptionSpec(str, "overlay", "instance disk: a full copy of the base disk, a qcow2 "
                                 "overlay on it, or a reflink copy", disk.MODES),
        "image_size": OptionSpec(str, "auto", "disk image size (2G, 512M ...) padded with random data; "
                                 "auto = the image plus 512 MiB free"),
        "free_space": OptionSpec(str, "512M", "free space in an image_size = auto disk (the VM's local "
                                 "storage for disk workloads), e.g. 4G; the disk file is sparse"),
        "initrd": OptionSpec(str, "minimal", "initramfs: virtbench's minimal one, or the image's Debian one",
                             ("minimal", "debian")),
        "disk_cache": OptionSpec(str, "none", "QEMU cache mode of the instance disk (none = O_DIRECT on the host)",
                                 ("none", "writeback", "writethrough", "directsync", "unsafe")),
        "ready_timeout": OptionSpec(float, 300.0, "seconds a VM may take from QEMU start to SSH answering"),
        "kernel_args": OptionSpec(str, "", "extra kernel command-line arguments"),
    }

    def __init__(self, context):
        super().__init__(context)
        self._lock = threading.RLock()
        self._run_dir: Path | None = None
        self._key: ssh.KeyPair | None = None
        self._boot: disk.BootFiles | None = None
        self._kernels: dict[str, disk.BootFiles] = {}
        self._accel: dict[str, dict] = {}
        self._count = 0
        self._segments = 0
        self._live: set[VmInstance] = set()
        self.qemu_version = ""

    # -- shared state ---------------------------------------------------------------------------
    @property
    def image(self) -> image.ImageInfo:
        return self.context.image or image.require()

    def boot_files(self, flavour: str) -> disk.BootFiles:
        """Boot files of a kernel flavour (kernels.FLAVOURS); the generic one is fetched on first use."""
        with self._lock:
            if flavour not in self._kernels:
                self._kernels[flavour] = kernels.boot_files(self.boot, flavour)
            return self._kernels[flavour]

    @property
    def boot(self) -> disk.BootFiles:
        with self._lock:
            if self._boot is None:
                self._boot = disk.ensure_boot(self.image)
            return self._boot

    def run_dir(self) -> Path:
        with self._lock:
            if self._run_dir is None:
                root = disk.vm_root() / "run"
                if len(str(root)) > 60:  # keep socket paths (108 bytes at most) short
                    root = Path(tempfile.gettempdir()) / "virtbench-vm"
                root.mkdir(parents=True, exist_ok=True)
                d = root / secrets.token_hex(4)
                d.mkdir()
                pid = os.getpid()
                (d / "owner.json").write_text(json.dumps({"pid": pid, "pidstart": _process_start(pid),
                                                          "run_id": self.context.run_id, "at": time.time()}))
                self._run_dir = d
            return self._run_dir

    def keypair(self) -> ssh.KeyPair:
        with self._lock:
            if self._key is None:
                self._key = ssh.make_keypair(self.run_dir(), f"virtbench-{self.context.run_id}")
            return self._key

    def accelerator(self, want: str = "auto") -> dict:
        with self._lock:
            if want not in self._accel:
                self._accel[want] = probe.detect(self.boot.kernel, self.boot.kernel_version, disk.vm_root(), want)
            got = self._accel[want]
        if got["accel"] is None:
            raise UserError(f"QEMU cannot boot a guest with accel={want}: {got['kvm_problem']}",
                            "use accel = \"auto\" or \"tcg\"")
        return got

    def settings(self, env: EnvSpec) -> dict[str, Any]:
        opts = {k: env.options.get(k, spec.default) for k, spec in self.options.items()}
        for key, spec in self.options.items():
            if spec.choices and opts[key] not in spec.choices:
                raise UserError(f"vm option {key}={opts[key]!r} is not one of {', '.join(spec.choices)}")
        acc = self.accelerator(opts["accel"])
        opts["accel"], opts["cpu"] = acc["accel"], acc["cpu"]
        opts["ready_timeout"] = float(opts["ready_timeout"])
        disk_model, nic_model = DEVICE_MODELS[opts["devices"]]
        if opts["machine"] == "q35" and disk_model == "ide":
            raise UserError("q35 has no IDE controller (its SATA needs the ahci driver the cloud kernel lacks)",
                            "use machine = \"pc\" for emulated devices")
        if opts["kernel"] == "auto":
            opts["kernel"] = "cloud" if self.boot.has_module(NIC_MODULES[nic_model]) else "generic"
        if opts["kernel"] == "generic" and opts["initrd"] == "debian":
            raise UserError("the generic guest kernel boots with virtbench's minimal initramfs only (the "
                            "image has no Debian initrd for it)", "use initrd = \"minimal\"")
        boot = self.boot_files(opts["kernel"])
        if nic_model != "virtio" and not boot.has_module(NIC_MODULES[nic_model]):
            raise disk.ModeUnavailable(
                f"the guest kernel ({boot.kernel_version}) has no driver for the emulated {nic_model} NIC; "
                f"use kernel = \"generic\", or devices = \"emulated-disk\" (emulates the disk only)")
        if disk_model == "ide" and not boot.has_module("ata_piix"):
            raise disk.ModeUnavailable(f"the guest kernel ({boot.kernel_version}) has no IDE driver (ata_piix)")
        try:
            opts["size_bytes"] = disk.parse_size(opts["image_size"])
        except ValueError as exc:
            raise UserError(f"vm option image_size: {exc}") from None
        try:
            opts["free_bytes"] = disk.parse_size(opts["free_space"])
        except ValueError as exc:
            raise UserError(f"vm option free_space: {exc}") from None
        if opts["free_bytes"] is None:
            opts["free_bytes"] = disk.AUTO_FREE
        return opts

    # -- Driver interface -----------------------------------------------------------------------
    def check(self) -> list[Problem]:
        problems = []
        for tool, pkg in ((qemu.QEMU, "qemu-system-x86"), ("qemu-img", "qemu-utils"), ("ssh", "openssh-client"),
                          ("ssh-keygen", "openssh-client"), ("mke2fs", "e2fsprogs")):
            if not shutil.which(tool):
                problems.append(Problem(f"'{tool}' is not installed (the vm driver needs it)",
                                        f"apt-get install {pkg}"))
        if problems:
            return problems
        try:
            info = self.image
        except UserError as exc:
            return [Problem(exc.message, exc.hint or "run: virtbench image build")]
        if not (disk.artifacts_dir(info.hash) / "boot.json").exists() and os.geteuid() != 0:
            return [Problem("the VM boot files are not built yet and building them needs root",
                            "run once as root: virtbench check --driver vm")]
        try:
            self.boot
            self.accelerator("auto")
        except UserError as exc:
            return [Problem(exc.message, exc.hint or "")]
        return []

    def provision(self, env: EnvSpec, count: int = 1, role: str = "main") -> list[Instance]:
        settings = self.settings(env)
        base = disk.ensure_base(self.image, settings["size_bytes"], free=settings["free_bytes"])
        made = [self._new(env, role, i, base, settings) for i in range(count)]
        errors: list[BaseException | None] = [None] * count

        def start(k: int) -> None:
            try:
                made[k].start()
            except BaseException as exc:  # noqa: BLE001 - reported below
                errors[k] = exc

        try:
            procs.fan_out(start, count)
        except BaseException:
            self._teardown_all(made)  # Ctrl-C while booting: kill every QEMU, then stop
            raise
        failed = [(k, e) for k, e in enumerate(errors) if e is not None]
        if failed:
            self._teardown_all(made)
            k, exc = failed[0]
            if isinstance(exc, disk.ModeUnavailable):
                raise exc
            if count == 1 and isinstance(exc, UserError):
                raise exc
            raise UserError(f"could not start {count} VM(s) for {env.name}/{role} ({len(failed)} failed; "
                            f"first, #{k}: {exc})") from exc
        return list(made)

    def provision_from_disk(self, env: EnvSpec, source: Path, role: str = "main") -> VmInstance:
        """One instance whose disk is an overlay on `source` (e.g. a snapshot of another instance)."""
        settings = {**self.settings(env), "image_mode": "overlay"}
        size = source.stat().st_size
        base = disk.BaseDisk(source, size, None, 0, 0)
        inst = self._new(env, role, 0, base, settings)
        try:
            inst.start()
        except BaseException:
            self._teardown_all([inst])
            raise
        return inst

    def reboot(self, instances: Sequence[VmInstance]) -> list[dict[str, Any]]:
        """Reboot several instances in one call; wait until each is ready again. One result each."""
        indexes: dict[str, int] = {}
        for inst in instances:
            indexes[inst.name] = inst.request_reboot()
        results: list[dict[str, Any]] = [{} for _ in instances]

        def wait(k: int) -> None:
            inst = instances[k]
            try:
                results[k] = {"instance": inst.name, "ok": True, **inst.await_reboot(indexes[inst.name])}
            except Exception as exc:  # noqa: BLE001 - a failed reboot is a result
                results[k] = {"instance": inst.name, "ok": False, "error": str(exc)}

        procs.fan_out(wait, len(instances))
        return results

    def connect_cluster(self, instances: Sequence[VmInstance]) -> dict[str, Any]:
        """Put these VMs on one private L2 segment (a new one, or the one most of them are on already,
        e.g. when the runner replaced a dead member) with an address each and /etc/hosts naming them
        all. Returns what a sample records about the network."""
        with self._lock:
            counts: dict[int, int] = {}
            for inst in instances:
                if inst.segment is not None:
                    counts[id(inst.segment)] = counts.get(id(inst.segment), 0) + 1
            seg = None
            if counts:
                best = max(counts, key=counts.get)
                seg = next(i.segment for i in instances if id(i.segment) == best)
            if seg is None:
                n = self._segments
                self._segments += 1
                seg = Segment(n, f"239.213.{secrets.randbelow(256)}.{1 + secrets.randbelow(254)}",
                              20000 + secrets.randbelow(40000), ipaddress.IPv4Network(SEGMENT_NET.format(n=n % 256)))
            todo = [i for i in instances if i.segment is not seg]
            for inst in todo:  # addresses handed out here, not by the joining threads at once
                seg.allocate(inst.name)
        errors: list[BaseException] = []

        def join(inst: VmInstance) -> None:
            try:
                inst.join_segment(seg)
            except BaseException as exc:  # noqa: BLE001 - reported below
                errors.append(exc)

        procs.fan_out(lambda k: join(todo[k]), len(todo))
        if errors:
            raise errors[0]
        hosts = "".join(f"{i.address} {i.hostname}\n" for i in instances).encode()
        for inst in instances:
            res = inst.exec(["sh", "-c", _HOSTS_SCRIPT, "sh", seg.name], stdin=hosts, timeout=60)
            if not res.ok:
                raise UserError(f"{inst.name}: writing the cluster's names to /etc/hosts failed: "
                                f"{res.describe_failure()}", "see the guest's console log")
        return {**seg.describe(), "nic_model": NIC_DEVICES[DEVICE_MODELS[instances[0].s["devices"]][1]]}

    def _new(self, env: EnvSpec, role: str, index: int, base: disk.BaseDisk, settings: dict) -> VmInstance:
        with self._lock:
            n = self._count
            self._count += 1
            if not self.qemu_version:
                self.qemu_version = qemu.version()
        name = f"vb-{self.context.run_id[:15]}-{env.name}-{role}-{n}".replace("_", "-")
        with self._lock:
            inst = VmInstance(name, env, role, index, self, self.run_dir() / f"i{n}", base, settings)
            self._live.add(inst)
        return inst

    def _forget(self, inst: VmInstance) -> None:
        with self._lock:
            self._live.discard(inst)
            if not self._live and self._run_dir is not None:
                # The last instance is gone: nothing of this run stays on disk.
                shutil.rmtree(self._run_dir, ignore_errors=True)
                self._run_dir, self._key = None, None

    def close(self) -> None:
        """Tear down every instance this driver started and has not torn down (e.g. on Ctrl-C)."""
        with self._lock:
            live = list(self._live)
        self._teardown_all(live)

    def _teardown_all(self, instances: Sequence[VmInstance]) -> None:
        with procs.interrupts_held():  # a second Ctrl-C must not leave QEMUs behind
            for inst in instances:
                with contextlib.suppress(Exception):
                    inst.teardown()

    def cleanup_stale(self) -> list[str]:
        """Kill QEMUs and remove work directories of runs whose process is gone."""
        removed = []
        roots = [disk.vm_root() / "run", Path(tempfile.gettempdir()) / "virtbench-vm"]
        for root in roots:
            if not root.is_dir():
                continue
            for d in root.iterdir():
                if not d.is_dir() or d == self._run_dir:
                    continue
                try:
                    owner = json.loads((d / "owner.json").read_text())
                except (OSError, ValueError):
                    owner = {}
                pid = owner.get("pid")
                if isinstance(pid, int) and _process_start(pid) is not None and \
                        (owner.get("pidstart") in (None, _process_start(pid))):
                    continue  # its owner still runs
                if not owner and time.time() - d.stat().st_mtime < 60:
                    continue  # being created right now
                for pidfile in d.glob("i*/qemu.pid"):
                    _kill_qemu(pidfile)
                shutil.rmtree(d, ignore_errors=True)
                removed.append(f"vm work directory {d}")
        return removed


def _kill_qemu(pidfile: Path) -> None:
    """Kill the QEMU whose -pidfile this is, if that pid still is that QEMU."""
    try:
        pid = int(pidfile.read_text().strip())
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except (OSError, ValueError):
        return
    if str(pidfile).encode() in cmdline:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, 9)


__all__ = ["VmDriver", "VmInstance", "BootFailure", "MissingTool"]
