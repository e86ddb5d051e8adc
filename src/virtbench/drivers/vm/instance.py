"""One VM: its disk, its QEMU (on the VM's machine, through that machine's executor), and the machine
inside it: the guest over SSH (drivers/vm/guest_machine.py: the same OpenSSH code as remote hosts).

Lifecycle marks, each from an event:
  requested  before the instance disk is made and QEMU spawned
  created    QEMU's QMP greeting arrives (the process exists and is set up; vCPUs paused)
  running    QEMU's RESUME event after `cont` (the hypervisor runs the vCPUs)
  init       the guest's PID 1 prints its marker on the serial console (timestamped on arrival)
  ready      the first command over SSH succeeded
A VM on another machine is reached through forwards on that machine's SSH connection: the guest's
SSH port, QMP and the serial console; its files live in a directory there (`mdir`), this
process's own (console log, SSH key material and control socket) in `dir` here. On this machine
both are one directory.
"""

from __future__ import annotations

import contextlib
import re
import shutil
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

from ...image import ImageInfo
from ..base import GuestImageInstance
from ...errors import UserError
from ...model import EnvSpec, ExecResult
from ...machines.base import Forwards
from ...machines.ssh import SSH_ERROR, KeyPair
from .guest_machine import GuestMachine
from . import disk, guest, qemu, segment
from .qemu import DEVICE_MODELS, NIC_DEVICES
from .segment import Segment
from .site import Site

SCRATCH = "/var/tmp/vb-scratch"
DEFAULT_MEMORY_MB = 1024
NIC_MODULES = {"virtio": "virtio_net", "e1000": "e1000", "rtl8139": "8139too"}
TCG_NOTE = "software emulation (QEMU TCG): not hardware virtualization; CPU-bound work runs ~10x slower"
SPAWN_RETRIES = 3
# Guest ports QEMU's user-mode network relays to a server on the VM's machine (guestfwd, allowed
# with restrict=on): the guest dials RELAY_ADDR:port, QEMU runs socat for each connection, and
# socat dials the address written in the instance's relay-PORT file (set_relay), so the target
# can be chosen while the VM runs. No file: the connection is closed at once.
RELAY_ADDR = "10.0.2.100"
RELAY_PORTS = (2049,)  # NFS (storage=nfs in a VM: the guest kernel's NFSv4.1 client)


class BootFailure(UserError):
    """A VM that did not become ready; carries how far it got."""

    def __init__(self, message: str, lifecycle: dict[str, float], console_tail: str = ""):
        super().__init__(message)
        self.lifecycle = dict(lifecycle)
        self.console_tail = console_tail


class VmMaker(Protocol):
    """What a VM asks of the driver that made it (drivers/vm/driver.py's VmDriver, a layer above this one)."""

    @property
    def image(self) -> ImageInfo: ...

    def boot_files(self, flavour: str, site: Site | None = None) -> disk.BootFiles: ...

    def keypair(self) -> KeyPair: ...

    def forget(self, inst: VmInstance) -> None: ...


class VmInstance(GuestImageInstance):
    def __init__(self, name: str, env: EnvSpec, role: str, index: int, driver: VmMaker, site: Site,
                 workdir: Path, mdir: Path, base: disk.BaseDisk, settings: dict[str, Any]):
        super().__init__(name, env, role, index)
        self.driver = driver
        self.site = site
        self.machine = site.machine
        self.dir = workdir  # here
        self.mdir = mdir    # on the VM's machine (the same directory when that is this one)
        self.base = base
        self.s = settings
        self.bootfiles = driver.boot_files(settings["kernel"], site)
        self.proc = None  # machines.Process of QEMU
        self.qmp: qemu.Qmp | None = None
        self.console: qemu.Console | None = None
        self.inside: GuestMachine | None = None  # the machine inside it: the guest over SSH
        self.disk_path: Path | None = None
        self.disk_format = "raw"
        self.disk_prep_s: float | None = None
        self.port: int | None = None  # the guest's SSH port on the VM machine's 127.0.0.1
        self.guest_uptime_at_init: float | None = None
        self.boots: list[dict[str, float]] = []  # one entry per boot: marks of that boot
        self.extra_disks: list[dict[str, Any]] = []
        self._lock = threading.RLock()
        self._cancelled = False
        self._reach: list = []  # forwards made on the machine's connection (nothing on this machine)
        # User-mode networking alone: guests are not reachable from each other. A cluster joins them
        # on a Segment (a hot-plugged NIC); address is then this VM's address there.
        self.address = None
        self.segment: Segment | None = None
        self.segment_nic: dict[str, str] | None = None  # QEMU ids, MAC and guest name of that NIC
        self.forwards: dict[int, int] = {}  # guest TCP port -> port on this machine's 127.0.0.1
        self._nics = 0

    # -- starting -------------------------------------------------------------------------------
    def start(self) -> None:
        self.mark("requested")
        self.dir.mkdir(parents=True, exist_ok=True)
        try:
            self.machine.makedirs(self.mdir)  # the same directory when the VM runs here
        except OSError as exc:
            self._fail(str(exc))
        self.disk_path, self.disk_format, self.disk_prep_s = disk.make_instance_disk(
            self.base, self.mdir, self.s["image_mode"], self.machine)
        self.inside = GuestMachine(self.name, self.driver.keypair(), self.bootfiles.host_key_pub)
        for attempt in range(SPAWN_RETRIES):
            if self._spawn():
                break
            if attempt == SPAWN_RETRIES - 1:
                self._fail("QEMU could not forward a port for SSH (tried 3 ports)")
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

    def qemu_config(self) -> qemu.QemuConfig:
        disk_model, nic_model = DEVICE_MODELS[self.s["devices"]]
        boot = self.bootfiles
        shape = self.env.shape
        return qemu.QemuConfig(
            name=self.name, accel=self.s["accel"], machine=self.s["machine_type"],
            vcpus=shape.vcpus or self._host_cores(), memory_mb=shape.memory_mb or DEFAULT_MEMORY_MB,
            kernel=str(boot.kernel), initrd=str(boot.initrd if self.s["initrd"] == "minimal" else boot.debian_initrd),
            append=self._append(), disk=str(self.disk_path), disk_format=self.disk_format, disk_model=disk_model,
            disk_cache=self.s["disk_cache"], nic_model=nic_model, ssh_port=self.port, cpu=self.s["cpu"],
            guestfwd=[self._relay_rule(port) for port in RELAY_PORTS])

    def _relay_rule(self, port: int) -> str:
        # stderr would go into the guest's connection: silenced. $(cat) of a missing file gives
        # socat no address, so it exits and the guest sees the connection closed.
        target = self.mdir / f"relay-{port}"
        return (f"tcp:{RELAY_ADDR}:{port}-cmd:sh -c 'exec 2>/dev/null; "
                f"exec socat -b 262144 - TCP:$(cat {target}),nodelay'")

    def set_relay(self, port: int, target: tuple[str, int] | None) -> tuple[str, int]:
        """Make the guest's RELAY_ADDR:port reach `target` (host, port as the VM's machine dials it),
        or nothing (None). Returns the address the guest dials. New connections only."""
        if port not in RELAY_PORTS:
            raise UserError(f"{self.name}: guest port {port} is not relayed (only {RELAY_PORTS})")
        path = str(self.mdir / f"relay-{port}")
        if target is None:
            self.machine.run(["rm", "-f", path], timeout=30)
        else:
            host, tport = target
            addr = f"[{host}]:{tport}" if ":" in host else f"{host}:{tport}"
            res = self.machine.run(["sh", "-c", 'printf "%s\n" "$1" > "$2"', "sh", addr, path], timeout=30)
            if not res.ok:
                raise UserError(f"{self.name}: cannot write {path}: {res.describe_failure()}")
        return RELAY_ADDR, port

    def _host_cores(self) -> int:
        return self.machine.cpu_count()

    def _spawn(self) -> bool:
        """Start QEMU paused, mark created and running. False if the SSH port was taken meanwhile."""
        m = self.machine
        with self._lock:
            if self._cancelled:
                raise UserError(f"{self.name}: start cancelled")
            self.port = qemu.free_port(m)
            qmp_path, con_path = str(self.mdir / "qmp.sock"), str(self.mdir / "console.sock")
            argv = self.qemu_config().argv(qmp_path, con_path, str(self.mdir / "qemu.pid"))
            if self.s["cpuset"]:  # every QEMU thread (vCPUs, I/O) stays on the cpuset
                argv = ["taskset", "-c", self.s["cpuset"], *argv]
            self.proc = qemu.spawn(m, argv, str(self.mdir / "qemu.log"))
            fw = self._reach_from_here()
            qmp_here, con_here = fw.forward_unix(qmp_path), fw.forward_unix(con_path)
            self._reach += [qmp_here, con_here]
        try:
            self.qmp = qemu.await_qmp(qmp_here, lambda: not self.proc.alive(), timeout=120)
        except (qemu.QmpError, OSError) as exc:
            errors = self._qemu_log()
            if "hostfwd" in errors or "host forwarding" in errors:
                self._stop_qemu()
                return False
            self._fail(f"QEMU exited before it was up: {errors.splitlines()[-1] if errors else exc}")
        self.mark("created", self.qmp.greeted_at)
        # Connected before `cont`: the console drops what it prints while no one listens.
        self.console = qemu.Console(qemu.unix_connect(con_here).makefile("rb"), self.dir / "console.log")
        ssh_here = self._reach_from_here().forward("127.0.0.1", self.port)
        self._reach.append(ssh_here)
        self.inside.set_port(ssh_here[1])
        self.qmp.execute("cont")
        self.mark("running", self.qmp.event_time("RESUME") or time.time())
        return True

    def _qemu_log(self) -> str:
        res = self.machine.run(["tail", "-n", "20", str(self.mdir / "qemu.log")], timeout=30)
        return res.stdout.strip()

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
            why = self.inside.open(timeout=max(1.0, min(30.0, deadline - time.monotonic())))
            if why is None:
                res = self.inside.run(["mkdir", "-p", SCRATCH], timeout=max(5.0, deadline - time.monotonic()))
                if res.ok:
                    marks["ready"] = res.ended
                    self.mark("ready", res.ended)
                    self.boots.append(marks)
                    self._swap_on()
                    return marks
                why = res.describe_failure()
            last = why
            if time.monotonic() > deadline:
                self._fail(f"SSH did not answer within {self.s['ready_timeout']:.0f} s: {last}")
            time.sleep(0.05)

    def _swap_on(self) -> None:
        """Option swap: a swap file made at the first boot and switched on at every boot, after the
        boot is timed (the image has no swap; busybox's swapon, as the image has no mount package)."""
        size = self.s.get("swap_bytes") or 0
        if not size:
            return
        script = ('set -e; f=/vb-swapfile; if [ ! -f "$f" ]; then fallocate -l "$1" "$f"; chmod 600 "$f"; '
                  'mkswap "$f" >/dev/null; fi; swapon "$f" 2>/dev/null || busybox swapon "$f"')
        res = self.inside.run(["sh", "-c", script, "sh", str(size)], timeout=120)
        if not res.ok:
            self._fail(f"could not switch on its {disk.format_size(size)} swap file (vm option swap): "
                       f"{res.describe_failure()}")

    def _wait_marker(self, prefix: str, after: int, deadline: float, what: str) -> qemu.ConsoleLine:
        con = self.console

        def ready():
            return con.find(prefix, after) or con.failure(after) or self._cancelled

        # The console ends (wait_for returns) when QEMU exits.
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
        if self.console is not None and self.console.closed:
            errors = self._qemu_log()
            self._fail("QEMU exited" + (f": {errors.splitlines()[-1]}" if errors else ""))

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
        if gone := self._gone(argv):
            return gone
        now = time.time()
        if not self.inside.is_open():
            why = self.inside.open(timeout=30) if self.alive() else "the VM is not running"
            if why:
                return ExecResult(argv, SSH_ERROR, "", f"instance {self.name}: no SSH connection: {why}",
                                  now, time.time())
        res = self.inside.run(argv, timeout=timeout, stdin=stdin, env=env)
        if res.returncode == SSH_ERROR and not res.timed_out and not self.alive():
            res.stderr = res.stderr.rstrip() + f"\ninstance {self.name} is not running (QEMU exited)"
        return res

    def scratch_dir(self) -> str:
        return SCRATCH

    def alive(self) -> bool:
        # The console ends when QEMU does: no command needed to know it is gone.
        if self._torn_down or self.proc is None or self.console is None or self.console.closed:
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
                "machine_type": self.s["machine_type"], "cpu_model": self.s["cpu"] or "qemu default",
                **({"cpuset": self.s["cpuset"]} if self.s["cpuset"] else {}),
                "vcpus": shape.vcpus or self._host_cores(), "memory_mb": shape.memory_mb or DEFAULT_MEMORY_MB,
                "devices": self.s["devices"], "disk_model": disk_model, "nic_model": nic_model,
                "rng": "virtio-rng", "disk_cache": self.s["disk_cache"], "initrd": self.s["initrd"],
                "image_mode": self.s["image_mode"], "image_size": disk.format_size(self.base.requested),
                "disk_bytes": self.base.size, "pad_bytes": self.base.pad_bytes,
                "disk_prep_s": None if self.disk_prep_s is None else round(self.disk_prep_s, 4),
                "image_hash": self.driver.image.hash, "kernel_version": self.bootfiles.kernel_version,
                "kernel_flavour": self.s["kernel"],
                "qemu_version": self.site.qemu_version(), "guest_uptime_at_init": self.guest_uptime_at_init}
        meta["network"] = ("qemu user-mode (restrict=on; SSH and forwarded ports on 127.0.0.1 only; the guest "
                           f"reaches only {RELAY_ADDR}:{','.join(map(str, RELAY_PORTS))}, relayed to a storage=nfs "
                           "server while one is set)")
        if self.machine.reached_via:
            meta["network"] += f"; reached over {self.machine.reached_via}"
        if self.segment is not None:
            meta["cluster_network"] = {**self.segment.describe(), "address": self.address,
                                       "nic_model": NIC_DEVICES[nic_model], "mac": self.segment_nic["mac"]}
        if self.forwards:
            meta["port_forwards"] = {str(g): h for g, h in self.forwards.items()}
        if accel == "tcg":
            meta["accelerator_note"] = TCG_NOTE
        if self.s["kernel_args"]:
            meta["kernel_args"] = self.s["kernel_args"]
        if self.s.get("swap_bytes"):
            meta["swap_bytes"] = self.s["swap_bytes"]
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
        res = self.inside.run(["sh", "-c", "busybox setsid sh -c 'sleep 0.3; sync; busybox reboot' "
                                             "</dev/null >/dev/null 2>&1 &"], timeout=30)
        self.inside.disconnect()
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
        path = self.mdir / f"extra{n}.qcow2"
        disk.make_blank_disk(path, size_bytes, machine=self.machine)
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
        """A crash-consistent copy of the root disk while the VM runs (at `dest` on the VM's machine):
        sync in the guest, pause the vCPUs (QEMU drains in-flight I/O), copy, resume. Returns the
        seconds the VM was paused."""
        self.exec(["sync"], timeout=60)
        self.qmp.execute("stop")
        t0 = time.monotonic()
        try:
            disk.snapshot(self.disk_path, self.disk_format, dest, machine=self.machine)
        finally:
            self.qmp.execute("cont")
        return time.monotonic() - t0

    # -- networking beyond the SSH forward ------------------------------------------------------
    def new_nic_number(self) -> int:
        """The number of the next NIC hot-plugged into this VM (1, 2, ...): its netdev's and device's ids."""
        with self._lock:
            self._nics += 1
            return self._nics

    def forward_port(self, guest_port: int) -> tuple[str, int]:
        """(127.0.0.1, port here) that reaches `guest_port` in the guest: a hostfwd rule added to the
        running user-mode network (kept until teardown, reused on later calls), forwarded here over
        the machine's SSH connection when the VM runs elsewhere."""
        with self._lock:
            if guest_port in self.forwards:
                return "127.0.0.1", self.forwards[guest_port]
            last = ""
            for _ in range(SPAWN_RETRIES):
                port = qemu.free_port(self.machine)
                last = self.qmp.execute("human-monitor-command", {
                    "command-line": f"hostfwd_add net0 tcp:127.0.0.1:{port}-:{guest_port}"}).strip()
                if not last:  # HMP answers nothing on success, an error sentence otherwise
                    here = self._reach_from_here().forward("127.0.0.1", port)
                    self._reach.append(here)
                    self.forwards[guest_port] = here[1]
                    return "127.0.0.1", here[1]
            raise UserError(f"{self.name}: QEMU could not forward a port on 127.0.0.1 to guest port {guest_port}: "
                            f"{last}", "free some local ports, or run again (a free port was taken meanwhile)")

    def join_segment(self, seg: Segment) -> str:
        return segment.join(self, seg)

    def leave_segment(self) -> None:
        segment.leave(self)

    # -- teardown -------------------------------------------------------------------------------
    def _stop_qemu(self) -> None:
        if self.qmp is not None:
            if self.console is not None and not self.console.closed:
                with contextlib.suppress(Exception):
                    self.qmp.execute("quit", timeout=2)
            self.qmp.close()
            self.qmp = None
        if self.proc is not None:
            if self.console is not None:
                self.console.wait_for(lambda: self.console.closed, 3)  # QEMU quits: its console ends
            self.proc.stop(grace=1.0)
            if self.console is not None:
                self.console.join(5)
                with contextlib.suppress(Exception):
                    self.console.stream.close()
            self.proc = None
        for here in self._reach:
            with contextlib.suppress(Exception):
                self._reach_from_here().cancel_forward(here)
        self._reach = []

    def _reach_from_here(self) -> Forwards:
        """How this controller reaches QEMU's port and sockets on the VM's machine (its `forwards`)."""
        if self.machine.forwards is None:
            raise UserError(f"{self.name}: VMs run here or on SSH hosts; {self.machine.kind} machine "
                            f"{self.machine.name} forwards no ports to this controller")
        return self.machine.forwards

    def _destroy(self) -> None:
        with self._lock:
            self._cancelled = True
        if self.inside is not None:
            self.inside.close()
        self._stop_qemu()
        if self.segment is not None:
            self.segment.hosts.pop(self.name, None)
        if self.mdir != self.dir:  # its directory on another machine
            self.machine.run(["rm", "-rf", str(self.mdir)], timeout=120)
        shutil.rmtree(self.dir, ignore_errors=True)
        self.driver.forget(self)
