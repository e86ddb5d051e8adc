"""`virtbench check --driver vm|container`: lifecycle checks, the first study's functional checks of
its cloud's API redone for our drivers. Each check passes or fails with a reason (or is skipped
when the driver cannot do that thing at all, saying why).

1. start N at once: all N become ready (Eucalyptus 1.6.2 lost 1-3 of 8);
2. reboot several instances in one call: each really rebooted (boot identity changed), not just the
   first (Eucalyptus 2.0 rebooted only the first);
3. attach a second disk to a running instance: the guest sees it and can write and read it;
4. snapshot a running instance's disk and boot a new instance from it: it boots and holds the data
   written before the snapshot (an image bundled from a running Eucalyptus instance did not boot).
"""

from __future__ import annotations

import contextlib
import secrets
import shutil
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import drivers, image, procs, shapes
from . import machines as machines_mod
from .drivers.base import DriverContext, Instance
from .errors import UserError
from .model import EnvSpec

# The guest's boot id and the start time of its PID 1: a VM's boot id changes when it reboots; a
# container shares the host's, but its PID 1 is a new process after a restart.
IDENTITY = ["sh", "-c", "cat /proc/sys/kernel/random/boot_id; cut -d' ' -f22 /proc/1/stat"]
DEFAULT_COUNT = 4
REBOOT_COUNT = 3


@dataclass
class CheckResult:
    name: str
    passed: bool | None
    detail: str
    seconds: float = 0.0
    skipped: str | None = None
    data: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        out = {"name": self.name, "passed": self.passed, "detail": self.detail, "seconds": round(self.seconds, 3)}
        if self.skipped:
            out["skipped"] = self.skipped
        if self.data:
            out["data"] = self.data
        return out


def identity(inst: Instance) -> str:
    res = inst.exec(IDENTITY, timeout=60)
    if not res.ok:
        raise UserError(f"{inst.name}: cannot read its boot identity: {res.describe_failure()}")
    return ":".join(res.stdout.split())


def _start_each(driver, env: EnvSpec, count: int) -> tuple[list[Instance], list[str]]:
    """Start `count` instances at once, each on its own (not all-or-none): (started, failures)."""
    barrier = threading.Barrier(count)
    got: list[Instance | None] = [None] * count
    errors: list[str | None] = [None] * count

    def one(k: int) -> None:
        with contextlib.suppress(threading.BrokenBarrierError):
            barrier.wait(timeout=120)
        try:
            (got[k],) = driver.provision(env, 1, "check")
        except Exception as exc:  # noqa: BLE001 - reported
            errors[k] = str(exc).splitlines()[0]

    try:
        procs.fan_out(one, count)
    except BaseException:
        for inst in got:
            if inst is not None:
                with contextlib.suppress(Exception):
                    inst.teardown()
        raise
    return [i for i in got if i is not None], [e for e in errors if e]


class _Ops:
    """What the checks need from a driver beyond the Driver interface."""

    def __init__(self, driver, env: EnvSpec):
        self.driver = driver
        self.env = env

    def reboot(self, instances: list[Instance]) -> list[dict]:
        raise NotImplementedError

    def attach_disk(self, inst: Instance) -> tuple[bool | None, str, dict]:
        raise NotImplementedError

    def boot_from_snapshot(self, inst: Instance, tmp: Path) -> tuple[Instance | None, str, Callable[[], None]]:
        raise NotImplementedError

    def api_only(self, instances: list[Instance]) -> str | None:
        """Why what happens inside these instances cannot be seen (then a check verifies the API path
        only, and says so); None when it can."""
        return None


class _VmOps(_Ops):
    def reboot(self, instances):
        return self.driver.reboot(instances)

    def attach_disk(self, inst):
        info = inst.attach_disk(64 << 20)
        dev = info["guest_device"]
        if not dev:
            return False, f"QEMU attached {info['id']} but the guest saw no new block device within " \
                          f"{info['seconds']:.0f} s", info
        token = secrets.token_hex(8)
        res = inst.exec(["sh", "-c", f"echo {token} | dd of={dev} bs=512 conv=sync,fsync 2>/dev/null && "
                                     f"dd if={dev} bs=512 count=1 2>/dev/null | head -c 16"], timeout=60)
        if not res.ok or token not in res.stdout:
            return False, f"the guest sees {dev} but writing and reading it failed: {res.describe_failure()}", info
        return True, f"hot-plugged a 64 MiB virtio disk; the guest saw {dev} after {info['seconds']:.2f} s " \
                     "and wrote and read it", info

    def boot_from_snapshot(self, inst, tmp):
        snap = tmp / "snapshot.raw"
        paused = inst.snapshot_disk(snap)
        new = self.driver.provision_from_disk(self.env, snap, "snapshot")
        return new, f"snapshot while running (paused {paused:.2f} s), booted a new VM from it", \
            lambda: snap.unlink(missing_ok=True)


class _ContainerOps(_Ops):
    def _cli(self, inst) -> list[str]:
        return inst.engine.cli()

    def reboot(self, instances):
        cli = self._cli(instances[0])
        res = procs.run([*cli, "restart", "-t", "0", *[i.name for i in instances]], timeout=300)
        out = []
        for inst in instances:
            if not res.ok:
                out.append({"instance": inst.name, "ok": False, "error": res.describe_failure()})
                continue
            deadline = time.monotonic() + 60
            while True:
                r = inst.exec(["true"], timeout=30)
                if r.ok:
                    out.append({"instance": inst.name, "ok": True, "ready": time.time()})
                    break
                if time.monotonic() > deadline:
                    out.append({"instance": inst.name, "ok": False, "error": r.describe_failure()})
                    break
                time.sleep(0.05)
        return out

    def attach_disk(self, inst):
        return None, f"{inst.engine.cmd} cannot attach a volume or block device to a running container " \
                     "(mounts are fixed at create time)", {}

    def boot_from_snapshot(self, inst, tmp):
        cli = self._cli(inst)
        base = self.driver.context.image
        snap = image.ImageInfo(f"{base.hash}-snap{secrets.token_hex(3)}", base.tarball, base.manifest)
        res = procs.run([*cli, "commit", "-q", inst.name, snap.tag], timeout=600)
        if not res.ok:
            return None, f"{inst.engine.cmd} commit of the running container failed: {res.describe_failure()}", \
                lambda: None
        from .drivers import container

        # The committed image is known to the engine; tell the driver so it does not try to import it.
        container._imported.add((inst.engine.cmd, snap.tag))
        other = drivers.make("container", DriverContext(self.driver.context.run_id, self.driver.context.workdir,
                                                        snap))

        def cleanup() -> None:
            procs.run([*cli, "rmi", "-f", snap.tag], timeout=120)

        try:
            (new,) = other.provision(self.env, 1, "snapshot")
        except Exception:
            cleanup()
            raise
        return new, f"committed the running container as {snap.tag} and started a new one from it", cleanup


class _CloudOps(_Ops):
    """Cloud instances: reboot, volumes and snapshots through the API, checked inside over SSH."""

    def api_only(self, instances):
        if any(getattr(i, "shared_host", False) for i in instances):
            return (f"backend {instances[0].metadata().get('backend')}: SSH reaches a stand-in host, not the "
                    "API's instance, so effects inside the instance cannot be seen (API path only)")
        return None

    def reboot(self, instances):
        stand_in = self.api_only(instances)
        before = {} if stand_in else {i.name: identity(i) for i in instances}
        self.driver.reboot(instances)
        deadline = time.monotonic() + float(self.env.options.get("ready_timeout") or 600)
        out = []
        for inst in instances:
            while True:
                try:  # real instances: back once the boot identity changed; stand-ins: answering
                    back = inst.exec(["true"], timeout=30).ok if stand_in else identity(inst) != before[inst.name]
                except UserError:
                    back = False
                if back:
                    out.append({"instance": inst.name, "ok": True, "ready": time.time()})
                    break
                if time.monotonic() > deadline:
                    out.append({"instance": inst.name, "ok": False, "error": "not back from the reboot in time"})
                    break
                time.sleep(1)
        return out

    def attach_disk(self, inst):
        import shlex

        path, meta, undo = inst.attach_volume(None)
        try:
            f = shlex.quote(f"{path}/vb-check")
            # A disk workload on the volume: dd writes 32 MiB (synced) and reads it back.
            res = inst.exec(["sh", "-c", f"dd if=/dev/zero of={f} bs=1M count=32 conv=fsync 2>&1 | tail -n1 && "
                                         f"dd if={f} of=/dev/null bs=1M 2>&1 | tail -n1 && rm -f {f}"], timeout=600)
            data = {**meta, "dd": res.stdout.strip().splitlines()}
            if not res.ok:
                return False, f"attached {meta['volume_id']}, but dd on it failed: {res.describe_failure()}", data
            how = f"created and attached {meta['volume_id']} ({meta['volume_gib']} GiB) through the API, " \
                  f"{meta['storage_fs']} at {path}; dd wrote and read 32 MiB"
            why = self.api_only([inst])
            return True, how + (f"; {why}: the disk workload ran on a stand-in directory" if why else ""), data
        finally:
            undo()

    def check_snapshot(self, insts, log) -> "CheckResult":
        """Snapshot a volume that holds a marker, make a new volume from the snapshot, attach it."""
        t0 = time.monotonic()
        if not insts:
            return CheckResult("snapshot_boot", False, "no ready instance to snapshot")
        inst = insts[0]
        log("snapshotting a volume and attaching a new volume made from the snapshot")
        token = secrets.token_hex(8)
        undo: list[Callable[[], None]] = []
        try:
            path, meta, gone = inst.attach_volume(None)
            undo.append(gone)
            res = inst.exec(["sh", "-c", f"echo {token} > {path}/marker && sync"], timeout=60)
            if not res.ok:
                return CheckResult("snapshot_boot", False, f"cannot write to the volume: {res.describe_failure()}")
            sid, gone = self.driver.snapshot(inst, meta["volume_id"])
            undo.append(gone)
            path2, meta2, gone = self.driver.attach_volume(inst, None, snapshot=sid)
            undo.append(gone)
            how = f"snapshot {sid} of {meta['volume_id']} completed; {meta2['volume_id']} made from it and attached"
            why = self.api_only([inst])
            if why:
                return CheckResult("snapshot_boot", True, f"{how}; {why}: moto's volumes hold no data, so the "
                                   "marker cannot be read back", time.monotonic() - t0, data={"verified": "api"})
            got = inst.exec(["cat", f"{path2}/marker"], timeout=60)
            passed = got.ok and got.stdout.strip() == token
            return CheckResult("snapshot_boot", passed, how + ("; it holds the data written before the snapshot"
                               if passed else "; the data written before the snapshot is missing"),
                               time.monotonic() - t0, data={"verified": "guest"})
        except Exception as exc:  # noqa: BLE001 - a failure is the result
            return CheckResult("snapshot_boot", False, f"{type(exc).__name__}: {str(exc).splitlines()[0]}",
                               time.monotonic() - t0)
        finally:
            for fn in reversed(undo):
                with contextlib.suppress(Exception):
                    fn()


def _check_terminate(insts: list[Instance], log) -> CheckResult:
    """Terminate one instance through the API and see it gone there, with its volumes."""
    t0 = time.monotonic()
    if not insts:
        return CheckResult("terminate", False, "no ready instance to terminate")
    inst = insts[-1]
    log(f"terminating {inst.name}")
    try:
        from .cloud import api

        inst.teardown()
        ec2 = api.client(inst.settings.target)
        desc = ec2("describe_instances", InstanceIds=[inst.instance_id])["Reservations"][0]["Instances"][0]
        state = desc["State"]["Name"]
        left = ec2("describe_volumes", Filters=api.filters(run=inst.driver.context.run_id) +
                   [{"Name": "attachment.instance-id", "Values": [inst.instance_id]}])["Volumes"]
        took = inst.lifecycle["teardown_end"] - inst.lifecycle["teardown_start"]
        passed = state == "terminated" and not left
        return CheckResult("terminate", passed, f"{inst.instance_id} is {state} {took:.2f} s after the request"
                           + (f"; volumes left: {', '.join(v['VolumeId'] for v in left)}" if left else
                              ", no volume of it left"), time.monotonic() - t0)
    except Exception as exc:  # noqa: BLE001 - a failure is the result
        return CheckResult("terminate", False, f"{type(exc).__name__}: {str(exc).splitlines()[0]}",
                           time.monotonic() - t0)


def _ops(driver_name: str, driver, env: EnvSpec) -> _Ops:
    if driver_name == "vm":
        return _VmOps(driver, env)
    if driver_name == "container":
        return _ContainerOps(driver, env)
    if driver_name == "cloud":
        return _CloudOps(driver, env)
    raise UserError(f"lifecycle checks are written for the vm and container drivers, not '{driver_name}'")


def run_checks(driver_name: str, *, count: int = DEFAULT_COUNT, shape: str = "m1.small",
               options: dict[str, Any] | None = None, log: Callable[[str], None] | None = None,
               only: list[str] | None = None, inventory: str | None = None) -> dict[str, Any]:
    """Run the lifecycle checks; returns {driver, accelerator?, checks: [...]}. With an inventory,
    option `machine` names the host the instances start on."""
    log = log or (lambda msg: None)
    if driver_name not in drivers.REGISTRY:
        raise UserError(f"unknown driver '{driver_name}'", "valid drivers: " + ", ".join(drivers.names()))
    cls = drivers.driver_class(driver_name)
    opts = {k: o.default for k, o in cls.options.items()}
    opts.update(options or {})
    try:
        env = EnvSpec(driver_name, driver_name, shapes.resolve(shape), opts)
    except KeyError:
        raise UserError(f"unknown shape '{shape}'", "valid shapes: " + ", ".join(shapes.names())) from None
    run_id = "check-" + time.strftime("%Y%m%d-%H%M%S") + "-" + secrets.token_hex(2)
    workdir = Path(tempfile.mkdtemp(prefix=f"virtbench-{run_id}-"))
    info = image.require() if cls.needs_image else None
    pool = machines_mod.pool_for(inventory)
    driver = drivers.make(driver_name, DriverContext(run_id, workdir, info, pool))
    for name in driver.cleanup_stale():
        log(f"removed a leftover of an earlier run: {name}")
    problems = driver.check()
    if problems:
        raise UserError(f"the {driver_name} driver cannot run here: "
                        + "; ".join(f"{p.what} (fix: {p.fix})" for p in problems))
    ops = _ops(driver_name, driver, env)
    results: list[CheckResult] = []
    live: list[Instance] = []
    out: dict[str, Any] = {"driver": driver_name, "shape": shape, "count": count}
    wanted = only or ["start_many", "reboot_many", "attach_disk", "snapshot_boot"] + \
        (["terminate"] if driver_name == "cloud" else [])
    try:
        # 1. start N at once
        t0 = time.monotonic()
        log(f"starting {count} instances at once")
        live, failures = _start_each(driver, env, count)
        ready = []
        for inst in live:
            res = inst.exec(["true"], timeout=60)
            if res.ok:
                ready.append(inst)
        passed = len(ready) == count and not failures
        detail = f"{len(ready)} of {count} started at once became ready"
        if failures:
            detail += f"; failures: {' | '.join(sorted(set(failures)))}"
        if ready:
            times = sorted(i.lifecycle.get("ready", 0) - i.lifecycle.get("requested", 0) for i in ready)
            detail += f" (time to ready {times[0]:.2f}-{times[-1]:.2f} s)"
        if "start_many" in wanted:
            results.append(CheckResult("start_many", passed, detail, time.monotonic() - t0))
        if ready:
            meta = ready[0].metadata()
            if meta.get("backend"):
                out["backend"] = meta["backend"]
            if meta.get("accelerator"):
                out["accelerator"] = meta["accelerator"]
                if meta.get("accelerator_note"):
                    out["accelerator_note"] = meta["accelerator_note"]
        # 2. reboot several in one call
        if "reboot_many" in wanted:
            results.append(_check_reboot(ops, ready[:REBOOT_COUNT], log))
        # 3. attach a disk
        if "attach_disk" in wanted:
            results.append(_check_attach(ops, ready[:1], log))
        # 4. snapshot and boot from it
        if "snapshot_boot" in wanted:
            own = getattr(ops, "check_snapshot", None)  # cloud: a volume snapshot, attached as a new volume
            results.append(own(ready[:1], log) if own else _check_snapshot(ops, ready[:1], workdir, log))
        if "terminate" in wanted:
            results.append(_check_terminate(ready, log))
    finally:
        for inst in live:
            with contextlib.suppress(Exception):
                inst.teardown()
        close = getattr(driver, "close", None)  # whatever is still booting after a Ctrl-C
        if close:
            with contextlib.suppress(Exception):
                close()
        pool.close()
        shutil.rmtree(workdir, ignore_errors=True)
    out["checks"] = [r.as_dict() for r in results]
    out["passed"] = all(r.passed is not False for r in results)
    return out


def _check_reboot(ops: _Ops, insts: list[Instance], log) -> CheckResult:
    t0 = time.monotonic()
    if len(insts) < 2:
        return CheckResult("reboot_many", False, f"needs at least 2 ready instances, had {len(insts)}")
    log(f"rebooting {len(insts)} instances in one call")
    try:
        before = {i.name: identity(i) for i in insts}
        outcome = ops.reboot(insts)
        after = {}
        for inst in insts:
            with contextlib.suppress(UserError):
                after[inst.name] = identity(inst)
    except UserError as exc:
        return CheckResult("reboot_many", False, str(exc).splitlines()[0], time.monotonic() - t0)
    rebooted = [n for n in before if n in after and after[n] != before[n]]
    not_rebooted = [n for n in before if n in after and after[n] == before[n]]
    unreachable = [n for n in before if n not in after]
    errors = [o.get("error", "").splitlines()[0] for o in outcome if not o.get("ok") and o.get("error")]
    passed = len(rebooted) == len(insts)
    detail = f"{len(rebooted)} of {len(insts)} rebooted (boot identity changed)"
    why = ops.api_only(insts)
    if why and not unreachable:
        back = [o for o in outcome if o.get("ok")]
        passed = len(back) == len(insts)
        detail = f"the API accepted the reboot of {len(insts)} and {len(back)} answered over SSH afterwards; {why}"
        not_rebooted = []
    if not_rebooted:
        detail += f"; NOT rebooted: {', '.join(not_rebooted)}"
    if unreachable:
        detail += f"; not answering after the reboot: {', '.join(unreachable)}"
    if errors:
        detail += f"; errors: {' | '.join(errors)}"
    return CheckResult("reboot_many", passed, detail, time.monotonic() - t0,
                       data={"before": before, "after": after})


def _check_attach(ops: _Ops, insts: list[Instance], log) -> CheckResult:
    t0 = time.monotonic()
    if not insts:
        return CheckResult("attach_disk", False, "no ready instance to attach a disk to")
    log("attaching a disk to a running instance")
    try:
        passed, detail, data = ops.attach_disk(insts[0])
    except Exception as exc:  # noqa: BLE001 - a failure is the result
        return CheckResult("attach_disk", False, f"{type(exc).__name__}: {str(exc).splitlines()[0]}",
                           time.monotonic() - t0)
    return CheckResult("attach_disk", passed, detail, time.monotonic() - t0,
                       skipped=detail if passed is None else None, data=data)


def _check_snapshot(ops: _Ops, insts: list[Instance], workdir: Path, log) -> CheckResult:
    t0 = time.monotonic()
    if not insts:
        return CheckResult("snapshot_boot", False, "no ready instance to snapshot")
    inst = insts[0]
    log("snapshotting a running instance and booting a new one from it")
    token = secrets.token_hex(8)
    path = "/var/tmp/virtbench-snapshot-check"
    res = inst.exec(["sh", "-c", f"echo {token} > {path} && sync"], timeout=60)
    if not res.ok:
        return CheckResult("snapshot_boot", False, f"could not write the marker file: {res.describe_failure()}")
    new, cleanup = None, (lambda: None)
    try:
        new, how, cleanup = ops.boot_from_snapshot(inst, workdir)
        if new is None:
            return CheckResult("snapshot_boot", False, how, time.monotonic() - t0)
        got = new.exec(["cat", path], timeout=60)
        if not got.ok or got.stdout.strip() != token:
            return CheckResult("snapshot_boot", False, f"{how}, but the data written before the snapshot is "
                               f"missing: {got.describe_failure() if not got.ok else got.stdout.strip()!r}",
                               time.monotonic() - t0)
        ready = new.lifecycle.get("ready", 0) - new.lifecycle.get("requested", 0)
        return CheckResult("snapshot_boot", True, f"{how}; it became ready in {ready:.2f} s and holds the data "
                           "written before the snapshot", time.monotonic() - t0)
    except Exception as exc:  # noqa: BLE001 - a failure is the result
        return CheckResult("snapshot_boot", False, f"{type(exc).__name__}: {str(exc).splitlines()[0]}",
                           time.monotonic() - t0)
    finally:
        if new is not None:
            with contextlib.suppress(Exception):
                new.teardown()
        with contextlib.suppress(Exception):
            cleanup()


__all__ = ["run_checks", "CheckResult", "identity"]
