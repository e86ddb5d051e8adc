"""The kube-play driver (suite: driver = "pods", backend = "kube-play", the default): the pod
manifests run with `podman kube play` on this machine or an inventory host (option `machine`);
commands in a pod run through `podman exec`, as in the container driver. kube play cannot scale, so
each provision is a group of its own. Option `pvc` is a podman named volume; `nfs_share` a podman
volume of type nfs that the machine's kernel mounts at pod start (without an NFS client there the
volume is left out and storage = "nfs" is skipped with that reason)."""

from __future__ import annotations

import time
from typing import Any

from ... import image
from ...errors import UserError
from ...machines import ledger
from ...model import EnvSpec
from . import manifests
from .common import PodRecord, PodsDriverBase, scratch_path
from .groups import Group
from .kubeplay_backend import KubePlay, container_name
from .kubeplay_backend import leftovers as kubeplay_leftovers
from ..container import driver as container
from ..container.engine import Engine
from ..base import Instance, Problem, Traits


class PlayPod(PodRecord, container.ContainerInstance):
    """A pod of `podman kube play`: its main container is run like the container driver's."""

    backend_name = "kube-play"

    def __init__(self, pod: str, env: EnvSpec, role: str, index: int, engine: Engine,
                 info: image.ImageInfo, group: Group, driver: KubePlayDriver):
        super().__init__(container_name(pod), env, role, index, engine, info, group.backend.machine)
        self.pod, self.group, self.driver = pod, group, driver
        self.pod_phases: dict[str, float] = {}
        self.image_id: str | None = None
        self.image_ref = ""

    def start_observed(self, requested: float) -> None:
        got = self.group.backend.describe(self.pod)
        self.pod_phases, self.address, self.image_id = got["phases"], got["address"], got["image_id"]
        self.mark_phases(requested)
        self._wait_ready()
        if self.group.scratch_claim:
            res = self.exec(["mkdir", "-p", self.scratch_dir()], timeout=30)
            if not res.ok:
                raise UserError(f"cannot make {self.scratch_dir()} on the claim in {self.pod}: "
                                f"{res.describe_failure()}")

    def scratch_dir(self) -> str:
        return scratch_path(self.pod, bool(self.group.scratch_claim))

    def metadata(self) -> dict[str, Any]:
        meta = {**super().metadata(), **self.pod_metadata(), "image": self.image_ref, "image_id": self.image_id,
                "infra_image": self.group.backend.pause_tag}
        meta.pop("container_id", None)
        meta.pop("started_at", None)
        if self.image_ref != self.image.tag:  # another image than the guest's: its hash is not ours
            meta["image_hash"] = None
        return meta

    def _destroy(self) -> None:
        self.driver.release(self)


class KubePlayDriver(PodsDriverBase):
    name = "kube-play"
    # kube play's pods run here: this kernel, a port of podman's bridge, their start per repetition
    traits = Traits(repetition_overhead_s=1.0, shares_kernel=True, bridge_port=True, monitor_scope="cgroup")
    description = "Kubernetes pods from the guest image, run by podman kube play (driver pods, backend kube-play)"
    leftovers = (ledger.Finder("kube-play pods and volumes", kubeplay_leftovers),)  # on each machine of the run

    def check(self, env: EnvSpec | None = None) -> list[Problem]:
        return container.ContainerDriver(self.context).check()  # kube play runs on podman here

    def check_env(self, env: EnvSpec) -> list[Problem]:
        opts = self.opts(env)
        return super().check_env(env) + [Problem(f"option {k} is for the kubernetes backend",
                                                 "remove it or set backend = \"kubernetes\"")
                                         for k in ("context", "storage_class", "runtime_class") if opts[k]]

    def provision(self, env: EnvSpec, count: int = 1, role: str = "main") -> list[Instance]:
        from ...machines.nfsclient import kube_play_nfs_refusal

        opts = self.opts(env)
        info = self.guest_image()
        ref = (opts["image"] or info.tag).replace("{hash}", info.hash)
        name = self.group_name(env, role)
        share = self.share(opts)
        # The podman machine's kernel mounts the share: without an NFS client there the pods are made
        # without it (their other cells run) and storage = "nfs" is skipped with the reason.
        refusal = kube_play_nfs_refusal(opts["nfs_share"], self.context.machines.get(opts["machine"] or None)) \
            if share else None
        docs = manifests.group(name, count, ref, self.labels(env, role), vcpus=env.shape.vcpus,
                               memory_mb=env.shape.memory_mb, claim_size=opts["pvc"], storage_class="",
                               nfs=share if share and not refusal else None, namespace="")
        made: list[Instance] = []
        group: Group | None = None

        def undo() -> None:
            if group is not None:
                self.remove_group(group)

        with self.all_or_none(env, count, role, made, undo):
            machine = self.context.machines.get(opts["machine"] or None)
            engine = container.ContainerDriver(self.context).engine_for(
                {"engine": "podman", "machine": opts["machine"], "runtime": opts["runtime"],
                 "cgroup_manager": opts["cgroup_manager"]})
            play = KubePlay(machine, engine, info)
            group = self.groups[name] = Group(name, play, docs, nfs_share=opts["nfs_share"],
                                              nfs_refusal=refusal)
            requested = time.time()
            play.play(docs)
            pods = play.pods(name)
            if len(pods) != count:
                raise UserError(f"podman kube play made {len(pods)} pods of {name}, not {count}")
            for i, pod in enumerate(pods):
                inst = PlayPod(pod, env, role, i, engine, info, group, self)
                inst.image_ref = ref
                group.live.add(pod)
                made.append(inst)
                inst.start_observed(requested)
        return made

    def release_one(self, inst: PlayPod) -> None:
        inst.group.backend.remove_pod(inst.pod)
