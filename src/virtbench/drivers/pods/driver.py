"""Kubernetes pods: one pod per instance, the runner's instances of one role being one Deployment.

Backends (option `backend`, recorded in every result): `kube-play` (default) runs the manifests with
`podman kube play` on this machine or an inventory host (option `machine`); `kubernetes` sends the
same manifests to a cluster through the official client and the user's kubeconfig (options
`context`, `namespace`, `image`: a registry reference, `{hash}` standing for the guest image's
hash; on a `virtbench testbed k8s` cluster none is needed: the guest image goes to its registry).
Commands in a pod run through `podman exec` (kube-play, the container driver's code) or the API
server's exec (kubernetes: the pod is a Machine, drivers/pods/machine.py).

Option `pvc` (a size, e.g. "2Gi") gives every pod of a group a PersistentVolumeClaim mounted at
/vb-pvc (a podman named volume under kube-play; `storage_class` picks the cluster's class) and puts
the instance's scratch directory, where disk workloads write with storage = "local", on it.

Option `nfs_share` ("SERVER:/EXPORT", an existing export) mounts that share at /vb-nfs in every pod,
as an NFS PersistentVolume and a claim bound to it by name (kube-play: the claim's podman volume of
type nfs, which this machine's kernel client mounts at pod start; where it has none the volume is
left out and storage = "nfs" is skipped with that reason). storage = "nfs" then writes under
/vb-nfs/<pod> (conditions/targets.py); without nfs_share storage = "nfs" on pods is skipped.
"""

from __future__ import annotations

import contextlib
import re
import shutil
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ... import image, procs
from ...errors import UserError
from ...machines import ledger
from ...model import EnvSpec, ExecResult
from . import BACKENDS, CONTAINER, manifests
from .groups import Group, leftover_cluster_objects, remove_group
from .kubeplay import leftovers as kubeplay_leftovers
from .phases import LIFECYCLE, RESOLUTION, from_pod_object
from ..container import driver as container
from ..base import GuestImageInstance
from ..base import Driver, Instance, OptionSpec, Problem, Traits

READY_TIMEOUT = 120.0
SERVICE_SETTLE_S = 2.0
_lock = threading.RLock()
_serial = [0]


def _scratch(pod: str, claim: bool) -> str:
    # One claim serves the whole group: each pod writes under a directory of its own on it.
    return f"{manifests.CLAIM_DIR}/{pod}" if claim else container.SCRATCH


class _PodMixin:
    """What both backends' instances record."""

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

    def _pod_metadata(self) -> dict[str, Any]:
        return {"backend": self.backend_name, "pod": self.pod, "deployment": self.group.name,
                "manifest_sha256": self.group.manifest_sha256, "pod_phases": self.pod_phases,
                "pod_phase_resolution_s": RESOLUTION[self.backend_name],
                "pvc": self.group.scratch_claim, "nfs_share": self.group.nfs_share or None,
                "nfs_mounted": bool(self.group.nfs_share) and not self.group.nfs_refusal}

    def _mark_phases(self, requested: float) -> None:
        self.mark("requested", requested)
        for phase, pod_phase in LIFECYCLE.items():
            if pod_phase in self.pod_phases:
                self.mark(phase, self.pod_phases[pod_phase])


class PlayPod(_PodMixin, container.ContainerInstance):
    """A pod of `podman kube play`: its main container is run like the container driver's."""

    backend_name = "kube-play"

    def __init__(self, pod: str, env: EnvSpec, role: str, index: int, engine: container.Engine,
                 info: image.ImageInfo, group: Group, driver: PodsDriver):
        from .kubeplay import container_name

        super().__init__(container_name(pod), env, role, index, engine, info, group.backend.machine)
        self.pod, self.group, self.driver = pod, group, driver
        self.pod_phases: dict[str, float] = {}
        self.image_id: str | None = None
        self.image_ref = ""

    def start_observed(self, requested: float) -> None:
        got = self.group.backend.describe(self.pod)
        self.pod_phases, self.address, self.image_id = got["phases"], got["address"], got["image_id"]
        self._mark_phases(requested)
        self._wait_ready()
        if self.group.scratch_claim:
            res = self.exec(["mkdir", "-p", self.scratch_dir()], timeout=30)
            if not res.ok:
                raise UserError(f"cannot make {self.scratch_dir()} on the claim in {self.pod}: "
                                f"{res.describe_failure()}")

    def scratch_dir(self) -> str:
        return _scratch(self.pod, bool(self.group.scratch_claim))

    def metadata(self) -> dict[str, Any]:
        meta = {**super().metadata(), **self._pod_metadata(), "image": self.image_ref, "image_id": self.image_id,
                "infra_image": self.group.backend.pause_tag}
        meta.pop("container_id", None)
        meta.pop("started_at", None)
        if self.image_ref != self.image.tag:  # another image than the guest's: its hash is not ours
            meta["image_hash"] = None
        return meta

    def _destroy(self) -> None:
        self.driver.release(self)


class ClusterPod(_PodMixin, GuestImageInstance):
    """A pod on a Kubernetes cluster; commands, copies and background processes through the API
    server's exec (drivers/pods/machine.py), so the pod is one more Machine."""

    backend_name = "kubernetes"
    # On a cluster's nodes: neither this machine's kernel (the load generator's CPUs are not the pods')
    # nor a port of a bridge here.
    traits = Traits(monitor_scope="cgroup")

    def __init__(self, pod: dict[str, Any], env: EnvSpec, role: str, index: int, group: Group,
                 driver: PodsDriver, image_hash: str | None, server: str):
        from .machine import KubePodMachine

        super().__init__(pod["metadata"]["name"], env, role, index)
        self.pod, self.group, self.driver = pod["metadata"]["name"], group, driver
        self.pod_phases = from_pod_object(pod)
        status, spec = pod.get("status") or {}, pod.get("spec") or {}
        self.address = status.get("podIP")
        statuses = [s for s in status.get("containerStatuses") or [] if s.get("name") == CONTAINER]
        cluster = group.backend
        # self.machine stays this machine (where the client runs, what the monitor watches); the
        # pod itself is a Machine that commands go to
        self.inside = self.pod_machine = KubePodMachine(cluster.api, cluster.namespace, self.pod, CONTAINER, self.address)
        self.facts = {"node": spec.get("nodeName"), "node_ip": status.get("hostIP"),
                      "qos_class": status.get("qosClass"),
                      "image": (spec.get("containers") or [{}])[0].get("image"),
                      "image_id": statuses[0].get("imageID") if statuses else None, "image_hash": image_hash,
                      "namespace": cluster.namespace, "server_version": server,
                      "cluster_nodes": cluster.node_names(), "kubeconfig_server": cluster.server,
                      "container_runtime": cluster.node_runtime(spec.get("nodeName")),
                      "cluster_testbed": (cluster.testbed() or {}).get("testbed"),
                      # which OCI runtime ran the pod: the RuntimeClass asked for and what it stands for
                      "runtime_class": spec.get("runtimeClassName"),
                      **cluster.runtime_facts(spec.get("runtimeClassName")),
                      "exec_via": "api-server exec (websocket v5.channel.k8s.io)"}
        self.events: list[dict[str, Any]] = []
        self._ports: dict[int, tuple[str, int]] = {}

    @property
    def node(self) -> str | None:
        """The cluster node the pod runs on (the runner records it as `pod_nodes`)."""
        return self.facts.get("node")

    def start_observed(self, requested: float) -> None:
        self._mark_phases(requested)
        # The scheduler's and kubelet's own account of the start (Scheduled, Pulled, Created, Started).
        with contextlib.suppress(Exception):
            self.events = [{"reason": e.get("reason"), "at": e.get("eventTime") or e.get("lastTimestamp")
                            or e.get("firstTimestamp"), "source": (e.get("source") or {}).get("component")
                            or e.get("reportingComponent"), "message": e.get("message")}
                           for e in self.group.backend.events(self.pod)]
        deadline = time.monotonic() + READY_TIMEOUT
        while True:  # the first command that runs is our "ready", as for containers
            res = self.exec(["mkdir", "-p", self.scratch_dir()], timeout=30)
            if res.ok:
                self.mark("ready")
                return
            if time.monotonic() > deadline:
                raise UserError(f"pod {self.pod} never ran a command: {res.describe_failure()}")
            time.sleep(0.1)

    def exec(self, argv: Sequence[str], timeout: float | None = None, stdin: bytes | None = None,
             env: Mapping[str, str] | None = None) -> ExecResult:
        argv = [str(a) for a in argv]
        if gone := self._gone(argv):
            return gone
        return self.pod_machine.run(argv, timeout=timeout, stdin=stdin, env=env)

    def scratch_dir(self) -> str:
        return _scratch(self.pod, bool(self.group.scratch_claim))

    def alive(self) -> bool:
        if self._torn_down:
            return False
        try:
            pod = self.group.backend.pod(self.pod)
        except Exception:
            if self.group.backend.answers():
                raise
            return False  # a cluster that does not answer has no live pod for us: the cell fails with why
        return bool(pod) and (pod.get("status") or {}).get("phase") == "Running" \
            and not (pod.get("metadata") or {}).get("deletionTimestamp")

    def forward_port(self, port: int) -> tuple[str, int]:
        """Where a client outside the cluster reaches `port` of this pod: a NodePort Service made for
        it on first use (deleted with the pod), on the address of the pod's node."""
        with _lock:
            if port not in self._ports:
                name = manifests.dns_name(f"{self.pod}-{port}", 63)
                labels = dict(self.group.docs[-1]["metadata"]["labels"])
                self.group.backend.create([manifests.node_port_service(name, self.pod[-63:], port, labels)])
                self.group.services.setdefault(self.pod, []).append(name)
                svc = self.group.backend.core.read_namespaced_service(name, self.group.backend.namespace)
                self._ports[port] = (self.facts["node_ip"], svc.spec.ports[0].node_port)
            return self._ports[port]

    def service_endpoint(self, peers: Sequence[Instance], port: int) -> tuple[str, int, dict[str, Any]]:
        """A ClusterIP Service in front of `port` of exactly `peers` (pods of this group), kube-proxy
        balancing: (cluster IP, port, what a sample records of it). The client must run on a node of
        the cluster (the testbed: this machine is node 1). The Service goes with the group."""
        cluster = self.group.backend
        name = manifests.dns_name(f"{self.group.name}-svc{port}", 63)
        want = {p.pod for p in peers}
        with _lock:
            for pod in cluster.pods(self.group.name):  # a pod of an earlier, larger cell leaves it
                pname = pod["metadata"]["name"]
                has = (pod["metadata"].get("labels") or {}).get("virtbench.svc") == name
                if has and pname not in want:
                    cluster.label_pod(pname, {"virtbench.svc": None})
                elif not has and pname in want:
                    cluster.label_pod(pname, {"virtbench.svc": name})
            if name not in self.group.services.get("", []):
                labels = dict(self.group.docs[-1]["metadata"]["labels"])
                cluster.create([manifests.cluster_ip_service(name, port, labels)])
                self.group.services.setdefault("", []).append(name)  # "": the group's, not one pod's
        svc = cluster.core.read_namespaced_service(name, cluster.namespace)
        t0 = time.monotonic()
        while cluster.ready_endpoints(name) != want:
            if time.monotonic() - t0 > 60:
                raise UserError(f"Service {name}: endpoints {sorted(cluster.ready_endpoints(name))} never became "
                                f"{sorted(want)}")
            time.sleep(0.2)
        time.sleep(SERVICE_SETTLE_S)  # kube-proxy programs the endpoints at most once a second
        return svc.spec.cluster_ip, port, {"kind": "kubernetes ClusterIP Service (kube-proxy)", "name": name,
                                           "cluster_ip": svc.spec.cluster_ip, "endpoints": len(want)}

    def metadata(self) -> dict[str, Any]:
        return {**super().metadata(), **self._pod_metadata(), **self.facts, "pod_events": self.events,
                "pod_event_resolution_s": RESOLUTION["kubernetes"],
                "cpus": self.env.shape.vcpus, "memory_mb": self.env.shape.memory_mb}

    def _destroy(self) -> None:
        try:
            self.driver.release(self)
        except Exception:
            # A cluster that went away cannot be cleaned now: its objects stay there, for the sweep of
            # the next run that uses it, and the teardown of the other instances goes on.
            if self.group.backend.answers():
                raise


class PodsDriver(Driver):
    name = "pods"
    traits = Traits(repetition_overhead_s=1.0, shares_kernel=True, bridge_port=True, monitor_scope="cgroup")  # kube play; ClusterPod says otherwise
    description = "Kubernetes pods from the guest image: podman kube play here, or a cluster (backend)"
    needs_image = True
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
    # kube-play pods and volumes on each machine of the run; a cluster's objects at its first use
    leftovers = (ledger.Finder("kube-play pods and volumes", kubeplay_leftovers),)
    cluster_leftovers = (ledger.Finder("kubernetes objects", leftover_cluster_objects),)

    def __init__(self, context):
        super().__init__(context)
        self.groups: dict[str, Group] = {}
        self._clusters: dict[tuple[str, str], Any] = {}

    def _opts(self, env: EnvSpec) -> dict[str, Any]:
        return {k: (env.options or {}).get(k, spec.default) for k, spec in self.options.items()}

    def _image(self) -> image.ImageInfo:
        return self.context.image or image.require()

    def _cluster(self, opts: dict[str, Any]):
        from .kubernetes import Cluster

        key = (opts["context"], opts["namespace"])
        if key not in self._clusters:
            self._clusters[key] = Cluster(opts["context"], opts["namespace"])
        return self._clusters[key]

    @classmethod
    def traits_for(cls, env: EnvSpec) -> Traits:
        """kube play's pods run here (this kernel, a port of podman's bridge, its start per repetition);
        a cluster's pods are its nodes' (ClusterPod's traits)."""
        backend = (env.options or {}).get("backend", cls.options["backend"].default)
        return ClusterPod.traits if backend == "kubernetes" else cls.traits

    # -- checks -----------------------------------------------------------------------------------
    def check(self, env: EnvSpec | None = None) -> list[Problem]:
        if env is not None and self._opts(env)["backend"] == "kubernetes":
            return []  # the cluster's own check is check_env's: nothing of podman here is needed
        return container.ContainerDriver(self.context).check()  # kube play runs on podman here

    def check_env(self, env: EnvSpec) -> list[Problem]:
        opts = self._opts(env)
        problems = []
        if opts["nfs_share"]:
            try:
                manifests.parse_share(opts["nfs_share"])
            except ValueError as exc:
                problems.append(Problem(f"option nfs_share: {exc}", "set nfs_share = \"SERVER:/EXPORT\""))
        if opts["backend"] != "kubernetes":
            return problems + [Problem(f"option {k} is for the kubernetes backend",
                                       "remove it or set backend = \"kubernetes\"")
                               for k in ("context", "storage_class", "runtime_class") if opts[k]]
        if opts["machine"]:
            problems.append(Problem("option machine is for the kube-play backend", "remove it"))
        try:
            cluster = self._cluster(opts)
            cluster.probe()
            if not opts["image"] and not cluster.testbed():
                problems.append(Problem(
                    f"the kubernetes backend needs option image (a registry reference the cluster can pull): "
                    f"{cluster.server} is not a virtbench testbed, whose registry it would use",
                    "push the guest image (see docs/pods.md) and set "
                    "image = \"REGISTRY/virtbench-guest:{hash}\""))
            if opts["storage_class"] and not cluster.has_storage_class(opts["storage_class"]):
                problems.append(Problem(f"the cluster has no storage class {opts['storage_class']}",
                                        "kubectl get storageclass lists those it has"))
            if opts["runtime_class"] and cluster.runtime_handler(opts["runtime_class"]) is None:
                problems.append(Problem(f"option runtime_class: the cluster has no RuntimeClass {opts['runtime_class']}",
                                        "kubectl get runtimeclass lists those it has (a `virtbench testbed k8s` "
                                        "cluster offers gvisor where runsc is installed)"))
        except UserError as exc:
            problems.append(Problem(exc.message, exc.hint or ""))
        except Exception as exc:  # the API answered with an error
            problems.append(Problem(f"the cluster answered with an error: {exc}", "kubectl cluster-info says why"))
        return problems

    @classmethod
    def testbeds_used(cls, env: EnvSpec) -> list[Path]:
        """A `virtbench testbed k8s` cluster, when the kubeconfig the kubernetes backend loads is its."""
        if (env.options or {}).get("backend") != "kubernetes":
            return []
        from .testbed.configs import testbed_of_kubeconfig
        from .kubernetes import kubeconfig_path

        state = testbed_of_kubeconfig(kubeconfig_path())
        return [state] if state else []

    # -- provisioning ------------------------------------------------------------------------------
    def _nfs(self, opts: dict[str, Any]) -> tuple[tuple[str, str] | None, str | None]:
        """(server, export) of option nfs_share, and why it cannot be mounted (None: it can). Under
        kube-play the podman machine's kernel mounts it: without an NFS client there the pods are made
        without it (their other cells run) and storage = "nfs" is skipped with the reason. A cluster's
        nodes are the cluster's business: a share they cannot mount leaves the pods Pending, and
        wait_ready says why."""
        if not opts["nfs_share"]:
            return None, None
        try:
            share = manifests.parse_share(opts["nfs_share"])
        except ValueError as exc:
            raise UserError(f"option nfs_share: {exc}") from None
        if opts["backend"] == "kubernetes":
            return share, None
        from ...machines.nfsclient import kube_play_nfs_refusal

        return share, kube_play_nfs_refusal(opts["nfs_share"], self.context.machines.get(opts["machine"] or None))

    def _group_name(self, env: EnvSpec, role: str) -> str:
        short = re.sub(r"[^a-z0-9]", "", self.context.run_id.lower())[-8:] or "run"
        with _lock:
            _serial[0] += 1
            n = _serial[0]
        return manifests.dns_name(f"vb-{short}-{env.name}-{role}", 44) + f"-g{n}"

    def _labels(self, env: EnvSpec, role: str) -> dict[str, str]:
        # The owner record as labels (machines/ledger.py), valid Kubernetes label values.
        return {"virtbench": "1", "virtbench.env": manifests.label_value(env.name),
                "virtbench.role": manifests.label_value(role),
                **ledger.labels(self.context.run_id, manifests.label_value)}

    def _cluster_image(self, cluster, info: image.ImageInfo) -> str:
        """No image option against a testbed cluster: its registry, the guest image pushed there once."""
        from .testbed.images import push_guest

        if cluster.testbed() is None:
            raise UserError(f"option image is needed: {cluster.server} is not a virtbench testbed")
        with _lock:
            return push_guest(info, log=lambda line: None)

    def _sweep(self, cluster) -> None:
        """Once per cluster and run: what killed runs of this machine left there goes (the ledger's
        sweep, through the pool: the names reach the run's notes)."""
        self.context.machines.sweep_place(
            f"kubernetes {cluster.server} {cluster.namespace}", cluster, self.cluster_leftovers)

    def provision(self, env: EnvSpec, count: int = 1, role: str = "main") -> list[Instance]:
        opts = self._opts(env)
        info = self._image()
        if opts["backend"] == "kubernetes":
            self._cluster(opts).require_answer()  # one line when the cluster went away since the last pods
            self._sweep(self._cluster(opts))
        ref = (opts["image"] or (self._cluster_image(self._cluster(opts), info) if opts["backend"] == "kubernetes"
                                 else info.tag)).replace("{hash}", info.hash)
        name = self._group_name(env, role)
        share, refusal = self._nfs(opts)
        docs = manifests.group(name, count, ref, self._labels(env, role), vcpus=env.shape.vcpus,
                               memory_mb=env.shape.memory_mb, claim_size=opts["pvc"],
                               storage_class=opts["storage_class"] if opts["backend"] == "kubernetes" else "",
                               nfs=share if share and not refusal else None,
                               namespace=opts["namespace"] if opts["backend"] == "kubernetes" else "")
        if opts["backend"] == "kubernetes":
            manifests.spread_over_nodes(docs[-1])
            if opts["runtime_class"]:
                manifests.set_runtime_class(docs[-1], opts["runtime_class"])
        made: list[Instance] = []
        group = grown = None
        old: set[str] = set()
        try:
            if opts["backend"] == "kubernetes":
                cluster = self._cluster(opts)
                # The role's Deployment is scaled up when it has pods already (study 004's replica
                # sweep scales one Deployment); kube play cannot scale, so there each call is a group.
                grown = next((g for g in self.groups.values() if g.key == (env.name, role) and g.live
                              and g.backend is cluster), None)
                requested = time.time()
                if grown is None:
                    group = self.groups[name] = Group(name, cluster, docs, key=(env.name, role),
                                                      nfs_share=opts["nfs_share"], nfs_refusal=refusal)
                    cluster.create(docs)
                else:
                    group, old = grown, set(grown.live)
                    cluster.scale(group.name, len(old) + count)
                pods = [p for p in cluster.wait_ready(group.name, len(group.live) + count, opts["ready_timeout"])
                        if p["metadata"]["name"] not in group.live]
                server = cluster.version()
                for i, pod in enumerate(pods):
                    pname = pod["metadata"]["name"]
                    cluster.label_pod(pname, {"virtbench.pod": pname[-63:]})  # a Service can pick it
                    inst = ClusterPod(pod, env, role, i, group, self, info.hash if info.hash in ref else None,
                                      server)
                    group.live.add(pname)
                    made.append(inst)
                    inst.start_observed(requested)
            else:
                from .kubeplay import KubePlay

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
        except BaseException as exc:
            # All or none, whatever stopped us (a second Ctrl-C must not cut the removal short).
            with procs.interrupts_held():
                for inst in made:
                    inst.mark_gone()
                with contextlib.suppress(Exception):
                    if grown is not None:  # back to the pods it had: the new ones go first
                        new = [p["metadata"]["name"] for p in grown.backend.pods(grown.name)
                               if p["metadata"]["name"] not in old]
                        grown.live -= set(new)
                        grown.backend.scale(grown.name, len(grown.live), new)
                    elif group is not None:
                        self._remove_group(group)
            if isinstance(exc, Exception):
                raise UserError(f"could not start {count} pod(s) for {env.name}/{role} "
                                f"({opts['backend']}): {exc}") from exc
            raise
        return made

    # -- teardown ----------------------------------------------------------------------------------
    def release(self, inst: PlayPod | ClusterPod) -> None:
        """One instance's pod goes; the group's Deployment, claim and Services with the last one."""
        group = inst.group
        with _lock:
            group.live.discard(inst.pod)
            last = not group.live
        if last:
            self._remove_group(group)
        elif isinstance(inst, PlayPod):
            group.backend.remove_pod(inst.pod)
        else:
            group.backend.scale_down_one(group.name, inst.pod)
            for svc in group.services.pop(inst.pod, []):
                group.backend.delete("Service", svc)

    def _remove_group(self, group: Group) -> None:
        remove_group(group)
        self.groups.pop(group.name, None)
