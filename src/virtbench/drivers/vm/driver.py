"""Virtual machines on QEMU, booting the guest image: KVM when a real probe boot works, else TCG.

Direct kernel boot of the image's Debian cloud kernel with virtbench's minimal initramfs (or the
image's own), root on a disk made from the same root filesystem (`drivers/vm/disk.py`), commands over SSH
with a per-run key through a port QEMU forwards on 127.0.0.1 (`drivers/vm/guest_machine.py`).

Where: option `machine` names an inventory host; by default this machine. Everything that runs
there goes through that machine's executor (`drivers/vm/site.py`: boot files shipped, base disk built
there; `drivers/vm/instance.py`: QEMU spawned there, its SSH port, QMP and console forwarded here over the
SSH connection). The accelerator probe runs there too, so a remote KVM host gives KVM.

Networking: QEMU user mode with restrict=on (the guest reaches nothing outside but 10.0.2.100:2049,
a guestfwd relay to the NFS server of a storage=nfs cell: `VmInstance.set_relay`). More loopback
forwards are added while a VM runs (`forward_port`, HMP hostfwd_add: the web workload's nginx).
VMs of one MPI cluster get a private L2 segment (`connect_cluster`, `drivers/vm/segment.py`).

The modules: this one (options, settings, provisioning, shared per-run state), `drivers/vm/instance.py`
(one VM), `drivers/vm/segment.py` (cluster segments), `drivers/vm/stale.py` (run directories and leftovers of
killed runs), `drivers/vm/site.py` (the VMs' machine). The accelerator (kvm or tcg) is in every instance's
metadata; TCG is software emulation and is labelled so everywhere, never as hardware-virtualization
overhead.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .. import cpuset
from ... import image, procs
from ...errors import ConditionUnavailable, UserError
from ...machines import MachineUnreachable, ledger, owners, ship
from ...model import EnvSpec
from ...machines.ssh import KeyPair, make_keypair
from . import disk, guest_kernels as kernels, qemu, segment, stale
from .instance import DEFAULT_MEMORY_MB, NIC_MODULES, VmInstance
from .qemu import DEVICE_MODELS, NIC_DEVICES
from .segment import Segment
from .site import Site
from ..base import Driver, Instance, OptionSpec, Problem, ScratchSpace, Traits



class VmDriver(Driver):
    name = "vm"
    traits = Traits(machine_cores=True, hypervisor_guest=True)
    leftovers = (ledger.Finder("QEMU run directories", stale.leftovers),)
    default_memory_mb = DEFAULT_MEMORY_MB
    description = "a QEMU virtual machine booting the guest image (KVM if a probe boot works, else TCG emulation)"
    needs_image = True
    options = {
        "machine": OptionSpec(str, "", "inventory host the VMs run on (default: this machine)"),
        "accel": OptionSpec(str, "auto", "accelerator; auto = KVM if a real probe boot works, else TCG",
                            ("auto", "kvm", "tcg")),
        "devices": OptionSpec(str, "paravirt", "device models: paravirt = virtio-blk + virtio-net; "
                              "emulated-disk = IDE disk + virtio-net; emulated = IDE disk + e1000 NIC",
                              tuple(DEVICE_MODELS)),
        "kernel": OptionSpec(str, "auto", "guest kernel: the image's Debian cloud kernel, or Debian's generic "
                             "kernel of the same ABI (fetched on first use; has the e1000 driver the cloud "
                             "kernel lacks); auto = cloud unless the device model needs generic",
                             ("auto", *kernels.FLAVOURS)),
        "machine_type": OptionSpec(str, "pc", "QEMU machine type (pc: i440FX with IDE and ACPI PCI hot-plug)",
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
        "swap": OptionSpec(str, "", "a swap file of this size (256M, 1G ...) made in the guest at each boot "
                           "(the image has none): a shape with less memory than its workload then swaps, as "
                           "study 000's m1.small did, instead of killing it; it takes its room from free_space"),
        "cpuset": cpuset.OPTION,
    }

    def __init__(self, context):
        super().__init__(context)
        self._lock = threading.RLock()
        self._run_dir: Path | None = None  # here: instances' local files (and their disks when local)
        self._key: KeyPair | None = None
        self._boot: disk.BootFiles | None = None
        self._kernels: dict[str, disk.BootFiles] = {}
        self._sites: dict[str, Site] = {}
        self._remote_runs: dict[str, tuple[Site, Path]] = {}  # machine name -> this run's directory there
        self._count = 0
        self._segments = 0
        self._live: set[VmInstance] = set()

    # -- shared state ---------------------------------------------------------------------------
    @property
    def image(self) -> image.ImageInfo:
        return self.context.image or image.require()

    @property
    def boot(self) -> disk.BootFiles:
        """The image's boot files on this machine."""
        with self._lock:
            if self._boot is None:
                self._boot = Site.local_boot(self.image)
            return self._boot

    def site(self, name: str = "") -> Site:
        """The machine named `name` (inventory host; "" = this one), reachable."""
        with self._lock:
            if name not in self._sites:
                machine = self.context.machines.get(name or None)
                try:
                    machine.connect()
                except MachineUnreachable as exc:
                    raise UserError(f"cannot reach {machine.name} to run VMs there: {exc.reason}") from None
                site = Site.of(machine)
                missing = site.missing_tools()
                if missing:
                    raise UserError(f"{machine.name} lacks what the vm driver needs there: {', '.join(missing)}",
                                    "install them there: apt-get install qemu-system-x86 qemu-utils e2fsprogs")
                self._sites[name] = site
            return self._sites[name]

    def boot_files(self, flavour: str, site: Site | None = None) -> disk.BootFiles:
        """Boot files of a kernel flavour (kernels.FLAVOURS; the generic one is fetched here on first
        use), with paths on `site`'s machine (this one by default)."""
        with self._lock:
            if flavour not in self._kernels:
                self._kernels[flavour] = kernels.boot_files(self.boot, flavour)
            here = self._kernels[flavour]
        return site.boot_files(here) if site else here

    def run_dir(self) -> Path:
        with self._lock:
            if self._run_dir is None:
                root = disk.vm_root() / "run"
                if len(str(root)) > 60:  # keep socket paths (108 bytes at most) short
                    root = Path(tempfile.gettempdir()) / "virtbench-vm"
                self._run_dir = stale.make_run_dir(root, self.context.run_id)
            return self._run_dir

    def keypair(self) -> KeyPair:
        with self._lock:
            if self._key is None:
                self._key = make_keypair(self.run_dir(), f"virtbench-{self.context.run_id}")
            return self._key

    def accelerator(self, want: str = "auto", site: Site | None = None) -> dict:
        site = site or self.site()
        got = site.accelerator(self.boot_files("cloud", site), want)
        if got["accel"] is None:
            raise UserError(f"QEMU cannot boot a guest{site.machine.on} with accel={want}: {got['kvm_problem']}",
                            "use accel = \"auto\" or \"tcg\"")
        return got

    def settings(self, env: EnvSpec) -> dict[str, Any]:
        opts = {k: env.options.get(k, spec.default) for k, spec in self.options.items()}
        for key, spec in self.options.items():
            if spec.choices and opts[key] not in spec.choices:
                raise UserError(f"vm option {key}={opts[key]!r} is not one of {', '.join(spec.choices)}")
        site = self.site(opts["machine"])
        acc = self.accelerator(opts["accel"], site)
        opts["accel"], opts["cpu"] = acc["accel"], acc["cpu"]
        opts["ready_timeout"] = float(opts["ready_timeout"])
        disk_model, nic_model = DEVICE_MODELS[opts["devices"]]
        if opts["machine_type"] == "q35" and disk_model == "ide":
            raise UserError("q35 has no IDE controller (its SATA needs the ahci driver the cloud kernel lacks)",
                            "use machine_type = \"pc\" for emulated devices")
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
        try:
            opts["swap_bytes"] = disk.parse_size(opts["swap"] or "0") or 0
        except ValueError as exc:
            raise UserError(f"vm option swap: {exc}") from None
        if opts["swap_bytes"] and opts["size_bytes"] is None and opts["swap_bytes"] >= opts["free_bytes"]:
            raise UserError(f"vm option swap = {opts['swap']} does not fit the disk's free_space = {opts['free_space']}",
                            "give free_space room for the swap file and what the workload writes, e.g. "
                            "free_space = \"2G\" for swap = \"1G\"")
        if opts["cpuset"]:
            m = site.machine
            problems = cpuset.problems(opts["cpuset"], self.name, m.allowed_cpus(), m.place)
            if problems:
                raise UserError(problems[0].what, problems[0].fix)
        return opts

    @classmethod
    def scratch_space(cls, env: EnvSpec) -> ScratchSpace | None:
        """An auto-sized disk's free_space (each VM its own); a shape's disk or a fixed image size:
        what is free depends on the image, checked in the guest."""
        if env.shape.disk_gb:
            return None
        try:
            if disk.parse_size(env.options.get("image_size", "auto")) is not None:
                return None
            free = disk.parse_size(env.options.get("free_space", "512M"))
        except ValueError:
            return None  # the driver refuses the option itself
        free = disk.AUTO_FREE if free is None else free
        return ScratchSpace("the {free} free on a VM's disk (vm option free_space, e.g. 4G)", free,
                            shared=False)

    @classmethod
    def swap_bytes(cls, env: EnvSpec) -> int:
        try:
            return disk.parse_size(env.options.get("swap") or "0") or 0
        except ValueError:
            return 0  # settings() refuses the option with the reason

    def lifecycle_ops(self, env):
        from .checks import VmLifecycle

        return VmLifecycle(self, env)

    @classmethod
    def smallest_image(cls) -> int | None:
        with contextlib.suppress(Exception):
            return disk.min_size(disk.ensure_boot(image.require()))
        return None

    def prepare_boot_cell(self, env, params, log):
        """The cell's base disk is built before any boot is timed ('cached on the node')."""
        try:
            settings = self.settings(env)
            disk.ensure_base(self.context.image, settings["size_bytes"], log=log)
            reason = None
            if params["image_mode"] == "reflink":
                reason = disk.reflink_problem(disk.artifacts_dir(self.context.image.hash), self.run_dir())
            return reason, {"accelerator": settings["accel"]}
        except ConditionUnavailable as exc:
            return str(exc), {}

    # -- Driver interface -----------------------------------------------------------------------
    def check(self, env: EnvSpec | None = None) -> list[Problem]:
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
        site = self.site(settings["machine"])
        base = site.base_disk(self.image, self.boot, settings["size_bytes"], settings["free_bytes"])
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
        """One instance whose disk is an overlay on `source` (a path on the env's machine, e.g. a
        snapshot of another instance)."""
        settings = {**self.settings(env), "image_mode": "overlay"}
        size = disk.file_size(source, self.site(settings["machine"]).machine)
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
        """Put these VMs on one private L2 segment with an address each and /etc/hosts naming them
        all. Returns what a sample records about the network."""
        if len({i.machine.name for i in instances}) > 1:
            raise UserError("the VMs of one cluster must run on one machine (their segment is that machine's "
                            "loopback)", "give the cluster's environment one machine")
        with self._lock:
            seg, todo = segment.pick(instances, self._new_segment)
        segment.connect(seg, instances, todo)
        return {**seg.describe(), "nic_model": NIC_DEVICES[DEVICE_MODELS[instances[0].s["devices"]][1]]}

    def _new_segment(self) -> Segment:
        n = self._segments
        self._segments += 1
        return Segment.new(n)

    def _new(self, env: EnvSpec, role: str, index: int, base: disk.BaseDisk, settings: dict) -> VmInstance:
        site = self.site(settings["machine"])
        with self._lock:
            n = self._count
            self._count += 1
            here = self.run_dir() / f"i{n}"
            there = here
            if ship.is_shipped_to(site.machine):  # this run's directory here is not there
                name = site.machine.name
                if name not in self._remote_runs:
                    # This run's directory there gets its owner file (what killed runs left there
                    # went when the pool handed out the machine: `leftovers`, drivers/vm/stale.py).
                    d = Path(stale.remote_root(site.machine)) / f"{self.run_dir().name}-{os.getpid()}"
                    site.machine.run(["mkdir", "-p", str(d)], timeout=60)
                    owners.claim(site.machine, str(d), self.context.run_id)
                    self._remote_runs[name] = (site, d)
                there = self._remote_runs[name][1] / f"i{n}"
        name = f"vb-{self.context.run_id[:15]}-{env.name}-{role}-{n}".replace("_", "-")
        inst = VmInstance(name, env, role, index, self, site, here, there, base, settings)
        with self._lock:
            self._live.add(inst)
        return inst

    def forget(self, inst: VmInstance) -> None:
        with self._lock:
            self._live.discard(inst)
            if self._live:
                return
            # The last instance is gone: nothing of this run stays on disk, here or there.
            for site, d in self._remote_runs.values():
                site.machine.run(["rm", "-rf", str(d), str(d) + owners.OWNER], timeout=120)
            self._remote_runs.clear()
            if self._run_dir is not None:
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


__all__ = ["VmDriver"]
