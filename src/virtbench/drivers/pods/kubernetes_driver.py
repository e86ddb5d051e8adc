"""The Kubernetes driver (suite: driver = "pods", backend = "kubernetes"): the pod manifests go to a
cluster through the official client and the user's kubeconfig (options `context`, `namespace`,
`image`: a registry reference, `{hash}` standing for the guest image's hash; on a `virtbench testbed
k8s` cluster none is needed: the guest image goes to its registry). Commands in a pod run through the
API server's exec: the pod is a Machine (drivers/pods/machine.py). The instances of one role are one
Deployment, scaled up when the role asks for more pods. Option `pvc` is a PersistentVolumeClaim
(`storage_class` picks the cluster's class); `nfs_share` an NFS PersistentVolume and a claim bound
to it by name; `runtime_class` the pods' RuntimeClass (gvisor on the testbed)."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ... import image
from ...errors import UserError
from ...machines import ledger
from ...model import EnvSpec, ExecResult
from . import CONTAINER, manifests
from .common import READY_TIMEOUT, PodRecord, PodsDriverBase, lock, scratch_path
from .groups import Group, leftover_cluster_objects
from .machine import KubePodMachine
from .phases import RESOLUTION, from_pod_object
from ..base import GuestImageInstance
from ..base import HostSideScope, Instance, Problem, Traits
from ..container import ociruntime

SERVICE_SETTLE_S = 2.0


class ClusterPod(PodRecord, GuestImageInstance):
    """A pod on a Kubernetes cluster; commands, copies and background processes through the API
    server's exec (drivers/pods/machine.py), so the pod is one more Machine."""

    backend_name = "kubernetes"

    def __init__(self, pod: dict[str, Any], env: EnvSpec, role: str, index: int, group: Group,
                 driver: KubernetesDriver, image_hash: str | None, server: str):
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
        # "containerd://<id>": the id the node's runtime knows the pod's container by
        self.container_id = ((statuses[0].get("containerID") or "") if statuses else "").rpartition("://")[2]

    @property
    def node(self) -> str | None:
        """The cluster node the pod runs on (the runner records it as `pod_nodes`)."""
        return self.facts.get("node")

    def start_observed(self, requested: float) -> None:
        self.mark_phases(requested)
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
        return scratch_path(self.pod, bool(self.group.scratch_claim))

    def host_side_scope(self) -> HostSideScope | None:
        """HostSideMonitoring: a gVisor pod of this machine's testbed cluster (its nodes run here) is
        read from its sandbox's cgroup, which holds gVisor's sentry and every gofer of the pod; found
        through the gofer of the pod's container, whose arguments name the container's id. None on
        another cluster (its nodes' cgroups are not reachable from here) or under another runtime."""
        if ociruntime.kind(str(self.facts.get("runtime") or "")) != "runsc" or not self.facts.get("cluster_testbed") \
                or not self.container_id or not self.machine.is_local:
            return None
        res = self.machine.run(["ps", "-ww", "-eo", "pid=,args="], timeout=30)  # -ww: whole arguments, any width
        for line in res.stdout.splitlines() if res.ok else []:
            pid, _, args = line.strip().partition(" ")
            if args.startswith("runsc-gofer") and self.container_id in args and pid.isdigit():
                return HostSideScope(int(pid), ociruntime.NO_COUNTERS_INSIDE)
        return None

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
        with lock:
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
        with lock:
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
        return {**super().metadata(), **self.pod_metadata(), **self.facts, "pod_events": self.events,
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


class KubernetesDriver(PodsDriverBase):
    name = "kubernetes"
    # On a cluster's nodes: neither this machine's kernel (the load generator's CPUs are not the pods')
    # nor a port of a bridge here, nor kube play's start per repetition.
    traits = Traits(monitor_scope="cgroup")
    description = "Kubernetes pods from the guest image on a cluster, through your kubeconfig (driver pods, " \
                  "backend kubernetes)"
    cluster_leftovers = (ledger.Finder("kubernetes objects", leftover_cluster_objects),)  # at a cluster's first use

    def __init__(self, context):
        super().__init__(context)
        self._clusters: dict[tuple[str, str], Any] = {}

    def _cluster(self, opts: dict[str, Any]):
        from .kubernetes_backend import Cluster

        key = (opts["context"], opts["namespace"])
        if key not in self._clusters:
            self._clusters[key] = Cluster(opts["context"], opts["namespace"])
        return self._clusters[key]

    # -- checks -----------------------------------------------------------------------------------
    def check(self, env: EnvSpec | None = None) -> list[Problem]:
        return []  # the cluster's own check is check_env's: nothing of podman here is needed

    def check_env(self, env: EnvSpec) -> list[Problem]:
        opts = self.opts(env)
        problems = super().check_env(env)
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
        """A `virtbench testbed k8s` cluster, when the kubeconfig the driver loads is its."""
        from .testbed.configs import testbed_of_kubeconfig
        from .kubernetes_backend import kubeconfig_path

        state = testbed_of_kubeconfig(kubeconfig_path())
        return [state] if state else []


    # -- provisioning ------------------------------------------------------------------------------
    def _cluster_image(self, cluster, info: image.ImageInfo) -> str:
        """No image option against a testbed cluster: its registry, the guest image pushed there once."""
        from .testbed.images import push_guest

        if cluster.testbed() is None:
            raise UserError(f"option image is needed: {cluster.server} is not a virtbench testbed")
        with lock:
            return push_guest(info, log=lambda line: None)

    def _sweep(self, cluster) -> None:
        """Once per cluster and run: what killed runs of this machine left there goes (the ledger's
        sweep, through the pool: the names reach the run's notes)."""
        self.context.machines.sweep_place(
            f"kubernetes {cluster.server} {cluster.namespace}", cluster, self.cluster_leftovers)

    def provision(self, env: EnvSpec, count: int = 1, role: str = "main") -> list[Instance]:
        opts = self.opts(env)
        info = self.guest_image()
        cluster = self._cluster(opts)
        cluster.require_answer()  # one line when the cluster went away since the last pods
        self._sweep(cluster)
        ref = (opts["image"] or self._cluster_image(cluster, info)).replace("{hash}", info.hash)
        name = self.group_name(env, role)
        share = self.share(opts)  # the nodes mount it: one they cannot leaves the pods Pending, wait_ready says why
        docs = manifests.group(name, count, ref, self.labels(env, role), vcpus=env.shape.vcpus,
                               memory_mb=env.shape.memory_mb, claim_size=opts["pvc"],
                               storage_class=opts["storage_class"], nfs=share, namespace=opts["namespace"])
        manifests.spread_over_nodes(docs[-1])
        if opts["runtime_class"]:
            manifests.set_runtime_class(docs[-1], opts["runtime_class"])
        made: list[Instance] = []
        group: Group | None = None
        grown: Group | None = None
        old: set[str] = set()

        def undo() -> None:
            if grown is not None:  # back to the pods it had: the new ones go first
                new = [p["metadata"]["name"] for p in grown.backend.pods(grown.name)
                       if p["metadata"]["name"] not in old]
                grown.live -= set(new)
                grown.backend.scale(grown.name, len(grown.live), new)
            elif group is not None:
                self.remove_group(group)

        with self.all_or_none(env, count, role, made, undo):
            # The role's Deployment is scaled up when it has pods already (study 004's replica sweep
            # scales one Deployment).
            grown = next((g for g in self.groups.values() if g.key == (env.name, role) and g.live
                          and g.backend is cluster), None)
            requested = time.time()
            if grown is None:
                group = self.groups[name] = Group(name, cluster, docs, key=(env.name, role),
                                                  nfs_share=opts["nfs_share"], nfs_refusal=None)
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
                inst = ClusterPod(pod, env, role, i, group, self, info.hash if info.hash in ref else None, server)
                group.live.add(pname)
                made.append(inst)
                inst.start_observed(requested)
        return made

    def release_one(self, inst: ClusterPod) -> None:
        group = inst.group
        group.backend.scale_down_one(group.name, inst.pod)
        for svc in group.services.pop(inst.pod, []):
            group.backend.delete("Service", svc)
