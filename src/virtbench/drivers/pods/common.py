"""What the two pods drivers share (kubeplay_driver.py: podman kube play here; kubernetes_driver.py:
a cluster): their options, the record every pod keeps, group names and owner labels, and starting a
group all or none. A suite names both as driver = "pods" with option backend (drivers/__init__.py)."""

from __future__ import annotations

import contextlib
import re
import threading
from collections.abc import Callable, Iterator
from typing import Any

from ... import image, procs
from ...errors import UserError
from ...machines import ledger
from ...model import EnvSpec
from . import BACKENDS, manifests
from .groups import Group, remove_group
from .phases import LIFECYCLE, RESOLUTION
from ..container import driver as container
from ..base import Driver, Instance, OptionSpec, Problem

READY_TIMEOUT = 120.0
lock = threading.RLock()  # the drivers' groups, serial numbers and a pod's Services
_serial = [0]


def scratch_path(pod: str, claim: bool) -> str:
    # One claim serves the whole group: each pod writes under a directory of its own on it.
    return f"{manifests.CLAIM_DIR}/{pod}" if claim else container.SCRATCH


class PodRecord:
    """What both drivers' pods record."""

    group: Group
    pod: str
    pod_phases: dict[str, float]
    backend_name: str

    @property
    def nfs_share(self) -> str:
        return self.group.nfs_share

    @property
    def nfs_refusal(self) -> str | None:
        return self.group.nfs_refusal

    def nfs_dir(self) -> str:
        """Where storage = "nfs" writes in this pod: a directory of its own on the share."""
        return f"{manifests.NFS_DIR}/{self.pod}"

    def pod_metadata(self) -> dict[str, Any]:
        return {"backend": self.backend_name, "pod": self.pod, "deployment": self.group.name,
                "manifest_sha256": self.group.manifest_sha256, "pod_phases": self.pod_phases,
                "pod_phase_resolution_s": RESOLUTION[self.backend_name],
                "pvc": self.group.scratch_claim, "nfs_share": self.group.nfs_share or None,
                "nfs_mounted": bool(self.group.nfs_share) and not self.group.nfs_refusal}

    def mark_phases(self, requested: float) -> None:
        self.mark("requested", requested)
        for phase, pod_phase in LIFECYCLE.items():
            if pod_phase in self.pod_phases:
                self.mark(phase, self.pod_phases[pod_phase])


class PodsDriverBase(Driver):
    """The pods drivers' common part; each says how its groups start and how one pod goes."""

    needs_image = True
    # One option set for both: a suite switches backend and keeps its other keys, and an option of
    # the other backend is a check_env problem that says so.
    options = {
        "backend": OptionSpec(str, "kube-play", "kube-play: podman runs the pod manifests; kubernetes: a "
                                                "cluster through your kubeconfig", BACKENDS),
        "machine": OptionSpec(str, "", "kube-play: inventory host podman runs on (default: this machine)"),
        "context": OptionSpec(str, "", "kubernetes: kubeconfig context (default: the current one)"),
        "namespace": OptionSpec(str, "default", "kubernetes: namespace of the pods"),
        "image": OptionSpec(str, "", "image reference; {hash} = the guest image's hash (kubernetes: e.g. "
                                     "registry.example.org/bench/virtbench-guest:{hash}; default on a `virtbench "
                                     "testbed k8s` cluster: its registry, pushed there; kube-play: the local "
                                     "guest image)"),
        "pvc": OptionSpec(str, "", "size of a PersistentVolumeClaim for the pods' scratch directory (e.g. 2Gi)"),
        "storage_class": OptionSpec(str, "", "kubernetes: storage class of the claim (default: the cluster's)"),
        "runtime_class": OptionSpec(str, "", "kubernetes: RuntimeClass of the pods (a `virtbench testbed k8s` "
                                             "cluster offers gvisor: gVisor's runsc; default: the nodes' default "
                                             "runtime, runc on the testbed)"),
        "nfs_share": OptionSpec(str, "", "an existing NFS export SERVER:/EXPORT mounted at /vb-nfs in every pod "
                                         "(a PersistentVolume + claim; kube-play: a podman NFS volume); "
                                         "storage = \"nfs\" writes there"),
        "ready_timeout": OptionSpec(float, READY_TIMEOUT, "seconds a group of pods may take to become ready"),
        # the container driver's engine settings, for kube-play
        "runtime": OptionSpec(str, "auto", "kube-play: OCI runtime; auto = probe what works"),
        "cgroup_manager": OptionSpec(str, "auto", "kube-play: podman cgroup manager; auto = probe what works",
                                     ("auto", "cgroupfs", "systemd")),
    }

    def __init__(self, context):
        super().__init__(context)
        self.groups: dict[str, Group] = {}

    def opts(self, env: EnvSpec) -> dict[str, Any]:
        return {k: (env.options or {}).get(k, spec.default) for k, spec in self.options.items()}

    def guest_image(self) -> image.ImageInfo:
        return self.context.image or image.require()

    def check_env(self, env: EnvSpec) -> list[Problem]:
        opts = self.opts(env)
        if opts["nfs_share"]:
            try:
                manifests.parse_share(opts["nfs_share"])
            except ValueError as exc:
                return [Problem(f"option nfs_share: {exc}", "set nfs_share = \"SERVER:/EXPORT\"")]
        return []

    def share(self, opts: dict[str, Any]) -> tuple[str, str] | None:
        """(server, export) of option nfs_share, None without one."""
        if not opts["nfs_share"]:
            return None
        try:
            return manifests.parse_share(opts["nfs_share"])
        except ValueError as exc:
            raise UserError(f"option nfs_share: {exc}") from None

    def group_name(self, env: EnvSpec, role: str) -> str:
        short = re.sub(r"[^a-z0-9]", "", self.context.run_id.lower())[-8:] or "run"
        with lock:
            _serial[0] += 1
            n = _serial[0]
        return manifests.dns_name(f"vb-{short}-{env.name}-{role}", 44) + f"-g{n}"

    def labels(self, env: EnvSpec, role: str) -> dict[str, str]:
        # The owner record as labels (machines/ledger.py), valid Kubernetes label values.
        return {"virtbench": "1", "virtbench.env": manifests.label_value(env.name),
                "virtbench.role": manifests.label_value(role),
                **ledger.labels(self.context.run_id, manifests.label_value)}

    @contextlib.contextmanager
    def all_or_none(self, env: EnvSpec, count: int, role: str, made: list[Instance],
                    undo: Callable[[], None]) -> Iterator[None]:
        """Starting a group: whatever stops it (a second Ctrl-C must not cut the removal short), the
        pods made so far are marked gone and `undo` removes what was made."""
        try:
            yield
        except BaseException as exc:
            with procs.interrupts_held():
                for inst in made:
                    inst.mark_gone()
                with contextlib.suppress(Exception):
                    undo()
            if isinstance(exc, Exception):
                raise UserError(f"could not start {count} pod(s) for {env.name}/{role} "
                                f"({self.opts(env)['backend']}): {exc}") from exc
            raise

    # -- teardown ----------------------------------------------------------------------------------
    def release(self, inst: PodRecord) -> None:
        """One instance's pod goes; the group's Deployment, claim and Services with the last one."""
        group = inst.group
        with lock:
            group.live.discard(inst.pod)
            last = not group.live
        if last:
            self.remove_group(group)
        else:
            self.release_one(inst)

    def release_one(self, inst: PodRecord) -> None:
        """One pod of a group that keeps others goes."""
        raise NotImplementedError

    def remove_group(self, group: Group) -> None:
        remove_group(group)
        self.groups.pop(group.name, None)
