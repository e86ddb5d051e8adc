"""What `virtbench check` does with containers: the container driver's LifecycleOps."""

from __future__ import annotations

import secrets
import time

from ... import image
from .engine import mark_imported
from ..checks_base import LifecycleOps
from ..base import DriverContext


class ContainerLifecycle(LifecycleOps):
    """Restart through the engine, no disk attach (mounts are fixed), commit as a snapshot."""

    def reboot(self, instances):
        # through the instance's engine call: on its host, from the engine's private directory (the
        # restarted containers' conmons drop their `oom` marker there)
        res = instances[0].engine_cli("restart", "-t", "0", *[i.name for i in instances], timeout=300)
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
        base = self.driver.context.image
        snap = image.ImageInfo(f"{base.hash}-snap{secrets.token_hex(3)}", base.tarball, base.manifest)
        res = inst.engine_cli("commit", "-q", inst.name, snap.tag, timeout=600)
        if not res.ok:
            return None, f"{inst.engine.cmd} commit of the running container failed: {res.describe_failure()}", \
                lambda: None
        # The committed image is known to the engine; tell the driver so it does not try to import it.
        mark_imported(inst.engine.cmd, snap.tag, inst.machine)
        # A driver of the same kind on the snapshot (its class from the instance: the driver module imports us).
        other = type(self.driver)(DriverContext(self.driver.context.run_id, self.driver.context.workdir, snap,
                                                self.driver.context.machines))

        def cleanup() -> None:
            inst.engine_cli("rmi", "-f", snap.tag, timeout=120)

        try:
            (new,) = other.provision(self.env, 1, "snapshot")
        except Exception:
            cleanup()
            raise
        return new, f"committed the running container as {snap.tag} and started a new one from it", cleanup
