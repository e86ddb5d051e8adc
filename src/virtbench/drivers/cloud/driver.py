"""Cloud instances through the EC2 API (boto3), reached over SSH: a machine that an API creates.

A start is: RunInstances (tags and a client token in the call itself) -> the state polled every
`poll_interval` s (0.1) until running -> the instance's SSH host key (from its console output, or a
known_hosts file) -> the first command over SSH (ssh_ready) -> the kernels shipped and a scratch
directory made, exactly as for any SSH host (ready). Each phase's time is recorded; a start that
fails is torn down at once and its exception carries how far it got (`lifecycle`).

Teardown: the instance's volumes detached and deleted, the instance terminated and waited for.
Everything is tagged virtbench:run=<run id> and virtbench:owner=<user@host>, so `virtbench cleanup`
finds what a killed run left. `max_instances` bounds what one environment may run at once.

moto starts no machines: with `ssh_override` (tests only), SSH goes to hosts of the inventory (the
testbed) instead of the API's instances, and every result says so (backend "moto+testbed").
"""

from __future__ import annotations

import contextlib
import importlib
import itertools
import math
import secrets
import shutil
import threading
import time
from collections.abc import Callable
from typing import Any

from ... import paths, procs
from . import ec2 as api, cleanup, volumes
from .ec2 import CloudApiError, Target
from . import settings as settings_mod
from .poller import FAILED, StatePoller, StateTimeout
from .settings import Settings
from ...errors import UserError
from ...machines import Machine, MachineUnreachable, machine_for
from ...machines.inventory import HostSpec
from ...model import EnvSpec
from ..base import Driver, Instance, Problem, Traits
from ..ssh.driver import SCRATCH, SshInstance, open_scratch

HOST_KEY_MARKERS = ("-----BEGIN SSH HOST KEY KEYS-----", "-----END SSH HOST KEY KEYS-----")
KEY_PREFERENCE = ("ssh-ed25519", "ecdsa-sha2-nistp256", "ecdsa-sha2-nistp384", "ecdsa-sha2-nistp521", "ssh-rsa")


class StartFailed(Exception):
    """A start that did not reach ready; `lifecycle` holds the phases it did reach."""

    def __init__(self, message: str, lifecycle: dict[str, float]):
        super().__init__(message)
        self.lifecycle = lifecycle


def parse_console_keys(text: str) -> list[str]:
    """The host keys cloud-init prints to the console ("type base64" lines), best type first."""
    start, end = HOST_KEY_MARKERS
    if start not in text:
        return []
    block = text.split(start, 1)[1].split(end, 1)[0]
    keys = []
    for line in block.splitlines():
        parts = line.split()
        if len(parts) >= 2 and parts[0] in KEY_PREFERENCE:
            keys.append(f"{parts[0]} {parts[1]}")
    return sorted(keys, key=lambda k: KEY_PREFERENCE.index(k.split()[0]))


class CloudInstance(SshInstance):
    def __init__(self, name: str, env: EnvSpec, role: str, index: int, machine: Machine, scratch: str, shipped,
                 address: str | None, *, driver: "CloudDriver", settings: Settings, instance_id: str,
                 info: dict[str, Any], shared_host: bool):
        super().__init__(name, env, role, index, machine, scratch, shipped, address)
        self.driver = driver
        self.settings = settings
        self.instance_id = instance_id
        self.info = info              # what results record: backend, ids, type, zone, resolution
        self.shared_host = shared_host  # SSH reaches a stand-in host (ssh_override), not the instance
        self.volumes: list[str] = []
        self._devices = itertools.count()

    @property
    def vcpus(self) -> int:
        # An instance type's vCPUs are the provider's, not necessarily the shape's.
        res = self.exec(["nproc"], timeout=30)
        return int(res.stdout.strip()) if res.ok and res.stdout.strip().isdigit() else 1

    def metadata(self) -> dict[str, Any]:
        return {**super().metadata(), **self.info}

    def attach_volume(self, size: int | None) -> tuple[str, dict[str, Any], Callable[[], None]]:
        """A new cloud volume attached here and mounted: (directory, metadata, undo). The storage
        condition's `cloud-volume` target calls this (conditions know instances, not drivers)."""
        return self.driver.attach_volume(self, size)

    def next_device(self) -> str:
        return f"/dev/sd{'fghijklmnop'[next(self._devices) % 11]}"

    def _destroy(self) -> None:
        try:
            if self.shared_host:  # the stand-in host outlives the instance: remove what we left there
                with contextlib.suppress(Exception):
                    super()._destroy()
        finally:
            self.driver.terminate(self)


class CloudDriver(Driver):
    name = "cloud"
    traits = Traits(is_machine=True)
    leftovers = (SCRATCH,)  # on hosts of ssh_override (pool machines); a fresh instance has none
    description = "cloud instances through the EC2 API (AWS or an EC2-compatible endpoint), reached over SSH"
    options = settings_mod.OPTIONS
    def __init__(self, context):
        super().__init__(context)
        self._lock = threading.Lock()
        self._instances: dict[str, Target] = {}  # created, not yet terminated
        self._snapshots: dict[str, Target] = {}
        self._targets: set[Target] = set()
        self._pollers: dict[Target, StatePoller] = {}
        self._names = itertools.count()
        self._hosts = itertools.count()
        self._closing = False

    def settings(self, env: EnvSpec) -> Settings:
        return settings_mod.from_env(env)

    def backend(self, s: Settings) -> str:
        """Which backend produced a result: the API's (endpoint host, or moto), plus the SSH side
        when it is a stand-in."""
        b = api.backend(s.target)
        if s.ssh_override:
            specs = self.context.machines.select(s.ssh_override)
            b += "+testbed" if specs and all(h.vars.get("virtbench_testbed") for h in specs) else "+ssh_override"
        return b

    # -- the driver interface ------------------------------------------------------------------
    def check(self, env: EnvSpec | None = None) -> list[Problem]:
        problems = []
        try:
            importlib.import_module("boto3")
        except ImportError:
            problems.append(Problem("boto3 is not installed", paths.pip_advice("cloud")))
        if not shutil.which("ssh"):
            problems.append(Problem("the ssh client is not installed", "apt-get install openssh-client"))
        return problems

    def check_env(self, env: EnvSpec) -> list[Problem]:
        try:
            s = self.settings(env)
            images = set(settings_mod.mapping(env.options.get("images", ""), "images").values()) or {s.image}
            # One cheap call: credentials, endpoint and image ids are right before anything starts.
            api.client(s.target)("describe_images", ImageIds=sorted(images))
            if s.ssh_override:
                self.context.machines.select(s.ssh_override)
        except UserError as exc:
            return [Problem(exc.message, exc.hint or "check the cloud options of the environment")]
        return []

    def lifecycle_ops(self, env):
        from .checks import CloudLifecycle

        return CloudLifecycle(self, env)

    def prepare_boot_cell(self, env, params, log):
        if params["image_mode"] != "overlay":
            return "image modes do not apply to cloud instances: the cloud makes each disk from its image", {}
        try:
            self.settings(env)  # an image for this size (option images), an instance type for the shape
        except UserError as exc:
            return exc.message, {}
        return None, {}

    def plan(self, env: EnvSpec, count: int) -> list[str]:
        s = self.settings(env)
        if count > s.max_instances:
            raise UserError(f"environment {env.name} would run {count} cloud instance(s) at once, more than "
                            f"max_instances = {s.max_instances}",
                            "each instance is billed: raise max_instances in the environment if you mean it, "
                            "or ask for fewer instances")
        where = f"region {s.target.region} at {self.backend(s)}"
        again = f"virtbench cleanup --run {self.context.run_id} --region {s.target.region}" + \
            (f" --endpoint {s.target.endpoint}" if s.target.endpoint else "")
        return [f"cloud plan for {env.name}: up to {count} instance(s) of {s.instance_type} from {s.image}, "
                f"{where}, each with a cloud volume where storage = cloud-volume; all tagged "
                f"{api.TAG_RUN}={self.context.run_id} (max_instances {s.max_instances}). They are removed at "
                f"the end, on errors and on Ctrl-C; after a crash: {again}"]

    def provision(self, env: EnvSpec, count: int = 1, role: str = "main") -> list[Instance]:
        s = self.settings(env)
        with self._lock:
            self._targets.add(s.target)
            live = sum(1 for t in self._instances.values() if t == s.target)
            if live + count > s.max_instances:
                raise UserError(f"environment {env.name}: starting {count} more cloud instance(s) beside {live} "
                                f"would exceed max_instances = {s.max_instances}",
                                "raise max_instances in the environment, or ask for fewer instances")
            names = [f"{env.name}-{role}-{next(self._names)}" for _ in range(count)]
        made: list[CloudInstance | None] = [None] * count
        errors: list[Exception | None] = [None] * count

        def start(k: int) -> None:
            try:
                made[k] = self._start(s, env, names[k], role, k)
            except Exception as exc:  # noqa: BLE001 - collected below
                errors[k] = exc

        try:
            procs.fan_out(start, count)
        except BaseException:
            self._undo([m for m in made if m])
            self.close()  # and whatever starts still in flight made
            raise
        failed = [e for e in errors if e is not None]
        if failed:
            self._undo([m for m in made if m])
            if count == 1:
                raise failed[0]
            raise UserError(f"cannot start {len(failed)} of {count} cloud instance(s) of {env.name}:\n  "
                            + "\n  ".join(str(e).splitlines()[0] for e in failed))
        return [m for m in made if m]

    def _undo(self, made: list[CloudInstance]) -> None:
        with procs.interrupts_held():
            for inst in made:
                with contextlib.suppress(Exception):
                    inst.teardown()

    def close(self) -> None:
        """Remove everything of this run on every API this driver used (Ctrl-C: starts still in
        flight are found by their tags), and make starts still in flight give up."""
        self._closing = True
        with self._lock:
            targets = set(self._targets)
        for target in targets:
            with contextlib.suppress(Exception):
                ec2 = api.client(target)
                cleanup.remove(ec2, cleanup.find(ec2, run_id=self.context.run_id))
        with self._lock:
            self._instances.clear()
            self._snapshots.clear()

    # -- one start -----------------------------------------------------------------------------
    def _poller(self, s: Settings) -> StatePoller:
        with self._lock:
            if s.target not in self._pollers:
                self._pollers[s.target] = StatePoller(api.client(s.target), s.poll_interval)
            return self._pollers[s.target]

    def tags(self, name: str) -> dict[str, str]:
        return {api.TAG_RUN: self.context.run_id, api.TAG_OWNER: api.owner(),
                "Name": f"virtbench-{self.context.run_id}-{name}"}

    def _run_instance(self, s: Settings, name: str) -> dict[str, Any]:
        tags = self.tags(name)
        kw: dict[str, Any] = {
            "ImageId": s.image, "InstanceType": s.instance_type, "MinCount": 1, "MaxCount": 1,
            # A RunInstances that botocore retries (timeout, 5xx) must not start a second instance.
            "ClientToken": f"vb-{self.context.run_id}-{name}-{secrets.token_hex(4)}"[:64],
            "TagSpecifications": api.tag_spec("instance", tags) + api.tag_spec("volume", tags)}
        if s.key_name:
            kw["KeyName"] = s.key_name
        if s.security_group:
            kw["SecurityGroupIds" if s.security_group.startswith("sg-") else "SecurityGroups"] = [s.security_group]
        if s.subnet:
            kw["SubnetId"] = s.subnet
        return api.client(s.target)("run_instances", **kw)["Instances"][0]

    def _start(self, s: Settings, env: EnvSpec, name: str, role: str, k: int) -> CloudInstance:
        lc: dict[str, float] = {"requested": time.time()}
        try:
            desc = self._run_instance(s, name)
        except CloudApiError as exc:
            raise StartFailed(str(exc), lc) from None
        lc["created"] = time.time()
        iid = desc["InstanceId"]
        with self._lock:
            self._instances[iid] = s.target
        machine, shared, spec = None, False, None
        try:
            if self._closing:
                raise StartFailed(f"{iid}: the run is ending", lc)
            state, seen, window = self._poller(s).wait(iid, ("running",), s.running_timeout,
                                                       desc["State"]["Name"], give_up=FAILED)
            if state != "running":
                raise StartFailed(f"instance {iid} went to {state} before it was running (last state: {state})", lc)
            lc["running"] = seen
            if self._closing:
                raise StartFailed(f"{iid}: the run is ending", lc)
            deadline = time.monotonic() + s.ready_timeout
            desc = self._describe(s, iid)
            machine, shared, spec = self._machine(s, desc, deadline)
            self._wait_ssh(machine, iid, deadline, s.ready_timeout)
            lc["ssh_ready"] = time.time()
            shipped, scratch = open_scratch(machine, self.context.run_id, name)
            lc["ready"] = time.time()
            if self._closing:
                raise StartFailed(f"{iid}: the run is ending", lc)
        except BaseException as exc:
            lc["teardown_start"] = time.time()
            with procs.interrupts_held():
                with contextlib.suppress(Exception):
                    self._terminate_ids(s, [iid])
                if machine is not None and not shared:
                    machine.close()
            lc["teardown_end"] = time.time()
            if isinstance(exc, StartFailed):
                exc.lifecycle = lc
                raise
            if isinstance(exc, StateTimeout):
                raise StartFailed(f"{exc}; it was terminated", lc) from None
            if isinstance(exc, Exception):
                raise StartFailed(f"instance {iid}: {str(exc).splitlines()[0]}; it was terminated", lc) from None
            raise
        info = {"backend": self.backend(s), "provider": s.target.provider, "region": s.target.region,
                "instance_id": iid, "instance_type": s.instance_type, "image": s.image,
                "availability_zone": desc.get("Placement", {}).get("AvailabilityZone"),
                "poll_resolution_s": s.poll_interval, "running_window_s": round(window, 4)}
        if shared:
            info["ssh_host"] = spec.name
            info["backend_note"] = ("the cloud API's instance starts no machine here; SSH, workloads and the "
                                    "ssh_ready/ready phases ran on a stand-in host of the inventory")
        inst = CloudInstance(name, env, role, k, machine, scratch, shipped,
                             machine.address if shared else desc.get("PrivateIpAddress"),
                             driver=self, settings=s, instance_id=iid, info=info, shared_host=shared)
        for phase, t in lc.items():
            inst.mark(phase, t)
        return inst

    def _describe(self, s: Settings, iid: str) -> dict[str, Any]:
        res = api.client(s.target)("describe_instances", InstanceIds=[iid])["Reservations"]
        return res[0]["Instances"][0]

    def _machine(self, s: Settings, desc: dict[str, Any], deadline: float) -> tuple[Machine, bool, HostSpec]:
        """(the executor that reaches the instance, whether it is a shared stand-in, its host spec)."""
        pool = self.context.machines
        if s.ssh_override:
            hosts = pool.select(s.ssh_override)
            spec = hosts[next(self._hosts) % len(hosts)]
            return pool.get(spec.name), True, spec
        iid = desc["InstanceId"]
        address = desc.get("PublicIpAddress") if s.address == "public" else desc.get("PrivateIpAddress")
        if not address:
            raise UserError(f"instance {iid} has no {s.address} address",
                            "use a subnet that assigns public addresses, or address = \"private\" from inside the VPC")
        host_key = self._console_key(s, iid, deadline) if s.host_keys == "console" else None
        spec = HostSpec(iid, address, None, s.ssh_user or None, s.key_file or None, host_key, s.known_hosts or None)
        return machine_for(spec), False, spec

    def _console_key(self, s: Settings, iid: str, deadline: float) -> str:
        """The host key cloud-init printed to the console: SSH then checks it (never trust on first use)."""
        ec2 = api.client(s.target)
        while True:
            try:
                out = ec2("get_console_output", InstanceId=iid, Latest=True).get("Output") or ""
            except CloudApiError:
                out = ec2("get_console_output", InstanceId=iid).get("Output") or ""  # no Latest on this cloud
            keys = parse_console_keys(out)
            if keys:
                return keys[0]
            if time.monotonic() > deadline:
                raise UserError(f"instance {iid} printed no SSH host key to its console",
                                "use an image with cloud-init, or host_keys = \"known_hosts\" with a known_hosts "
                                "file that has the image's keys")
            time.sleep(2)

    def _wait_ssh(self, machine: Machine, iid: str, deadline: float, timeout: float) -> None:
        last = ""
        while True:
            try:
                machine.connect()
                res = machine.run(["true"], timeout=30)
                if res.ok:
                    return
                last = res.describe_failure()
            except MachineUnreachable as exc:
                last = exc.reason
            if time.monotonic() > deadline:
                raise UserError(f"instance {iid} did not answer over SSH within {timeout:g} s: {last}")
            time.sleep(0.25)

    # -- teardown, volumes, snapshots ----------------------------------------------------------
    def _terminate_ids(self, s: Settings, ids: list[str]) -> None:
        cleanup.terminate(api.client(s.target), ids, wait=False)
        for iid in ids:
            self._poller(s).wait(iid, ("terminated",), 900, "shutting-down")
            with self._lock:
                self._instances.pop(iid, None)

    def terminate(self, inst: CloudInstance) -> None:
        try:
            cleanup.delete_volumes(api.client(inst.settings.target), list(inst.volumes))
            inst.volumes.clear()
        finally:
            try:
                self._terminate_ids(inst.settings, [inst.instance_id])
            finally:
                if not inst.shared_host:
                    inst.machine.close()

    def attach_volume(self, inst: CloudInstance, size: int | None,
                      snapshot: str | None = None) -> tuple[str, dict[str, Any], Callable[[], None]]:
        ec2 = api.client(inst.settings.target)
        gib = max(1, math.ceil(size / (1 << 30))) if size else 1
        kw: dict[str, Any] = {"AvailabilityZone": inst.info["availability_zone"], "Size": gib,
                              "TagSpecifications": api.tag_spec("volume", self.tags(inst.name))}
        if snapshot:
            kw["SnapshotId"] = snapshot
        vid = ec2("create_volume", **kw)["VolumeId"]
        inst.volumes.append(vid)
        directory = f"{inst.scratch_dir()}/volume-{vid}"
        device = None
        cleanup.wait_for(ec2, "volume_available", delay=1, VolumeIds=[vid])
        before = {} if inst.shared_host else volumes.block_devices(inst)
        ec2("attach_volume", VolumeId=vid, InstanceId=inst.instance_id, Device=inst.next_device())
        cleanup.wait_for(ec2, "volume_in_use", delay=1, VolumeIds=[vid])
        if inst.shared_host:
            res = inst.exec(["mkdir", "-p", directory], timeout=60)
            if not res.ok:
                raise UserError(f"cannot make {directory}: {res.describe_failure()}")
        else:
            device = volumes.find_device(inst, vid, before)
            volumes.mount(inst, device, directory, fresh=snapshot is None)
        meta = {**volumes.describe(device), "volume_id": vid, "volume_gib": gib}
        if snapshot:
            meta["volume_snapshot"] = snapshot

        def undo() -> None:
            try:
                if device:
                    volumes.unmount(inst, directory)
                inst.exec(["rm", "-rf", "--", directory], timeout=300)
            finally:
                cleanup.delete_volumes(ec2, [vid])
                with contextlib.suppress(ValueError):
                    inst.volumes.remove(vid)
        return directory, meta, undo

    def snapshot(self, inst: CloudInstance, volume_id: str) -> tuple[str, Callable[[], None]]:
        """Snapshot a volume (tagged), wait until it completed: (snapshot id, delete it)."""
        ec2 = api.client(inst.settings.target)
        sid = ec2("create_snapshot", VolumeId=volume_id,
                  TagSpecifications=api.tag_spec("snapshot", self.tags(inst.name)))["SnapshotId"]
        with self._lock:
            self._snapshots[sid] = inst.settings.target
        cleanup.wait_for(ec2, "snapshot_completed", delay=2, attempts=450, SnapshotIds=[sid])

        def delete() -> None:
            cleanup.delete_snapshots(ec2, [sid])
            with self._lock:
                self._snapshots.pop(sid, None)
        return sid, delete

    def reboot(self, instances: list[CloudInstance]) -> None:
        by_target: dict[Target, list[str]] = {}
        for inst in instances:
            by_target.setdefault(inst.settings.target, []).append(inst.instance_id)
        for target, ids in by_target.items():
            api.client(target)("reboot_instances", InstanceIds=ids)


__all__ = ["CloudDriver", "CloudInstance", "StartFailed", "parse_console_keys"]
