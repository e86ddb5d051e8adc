"""What `virtbench check` does with cloud instances: the cloud driver's LifecycleOps (reboot,
volumes and snapshots through the API, checked inside over SSH; terminate as a check of its own)."""

from __future__ import annotations

import contextlib
import secrets
import time
from collections.abc import Callable

from ...errors import UserError
from ..base import Instance
from ..checks_base import CheckResult, LifecycleOps, identity
from . import ec2 as api


class CloudLifecycle(LifecycleOps):
    """Cloud instances: reboot, volumes and snapshots through the API, checked inside over SSH."""

    def extra_checks(self):
        return {"terminate": check_terminate}

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

    def check_snapshot(self, insts, log) -> CheckResult:
        """Snapshot a volume that holds a marker, make a new volume from the snapshot, attach it."""
        t0 = time.monotonic()
        inst = insts[0]  # run_checks has one ready
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


def check_terminate(insts: list[Instance], log) -> CheckResult:
    """Terminate one instance through the API and see it gone there, with its volumes."""
    t0 = time.monotonic()
    if not insts:
        return CheckResult("terminate", False, "no ready instance to terminate")
    inst = insts[-1]
    log(f"terminating {inst.name}")
    try:
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
