"""The kubernetes backend: the official `kubernetes` client with the user's kubeconfig and context
creates, watches and deletes; commands in pods run through `kubectl exec` (see drivers/pods/kubernetes_driver.py).

Objects go in as plain dicts (the generator's), and pods come back as the API's camelCase JSON
(`sanitize_for_serialization`), so phases.py reads recorded and live pods alike.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from pathlib import Path
from typing import Any

from ... import paths
from ...errors import UserError
from . import phases

POLL = 0.1  # seconds between pod lists while waiting; finer than the API's 1 s timestamps


UNPULLABLE = ("ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull")  # a container's waiting reasons


class NotReady(UserError):
    """Pods that did not become Ready in time; the message carries the reason from their events."""


def _client():
    try:
        from kubernetes import client, config
    except ImportError:
        raise UserError("the pods driver's kubernetes backend needs the kubernetes Python client",
                        hint=paths.pip_advice("pods")) from None
    return client, config


PROBE_TIMEOUT = 10.0


def kubeconfig_path() -> Path:
    """The kubeconfig the client loads: KUBECONFIG's first file, else ~/.kube/config."""
    env = os.environ.get("KUBECONFIG", "")
    first = next((p for p in env.split(os.pathsep) if p), "")
    return Path(first).expanduser() if first else Path("~/.kube/config").expanduser()


def explain_failure(exc: BaseException, server: str, kubeconfig: Path) -> UserError:
    """One line for an API server that cannot be used: not answering, TLS refused, credentials refused."""
    text = str(exc)
    status = getattr(exc, "status", None)
    if status in (401, 403):
        return UserError(f"the API server {server} (kubeconfig {kubeconfig}) refused our credentials: "
                         f"{status} {getattr(exc, 'reason', '')}".rstrip(),
                         "the client certificate or token is wrong or expired: get a fresh kubeconfig "
                         "(testbed: virtbench testbed k8s down, then up)")
    low = text.lower()
    if "certificate" in low or "ssl" in low:
        why = "certificate has expired" if "expired" in low else \
              "certificate verify failed" if "verify failed" in low else "TLS handshake failed"
        return UserError(f"TLS with the API server {server} (kubeconfig {kubeconfig}) failed: {why}",
                         "the kubeconfig's certificate-authority or client certificate does not match this "
                         "server, or has expired: get a fresh kubeconfig")
    why = "connection refused" if "refused" in low else "timed out" if "timed out" in low or "timeout" in low \
        else text.splitlines()[-1][:160] if text else type(exc).__name__
    return UserError(f"the API server {server} (kubeconfig {kubeconfig}) does not answer: {why}",
                     "is the cluster up? (testbed: virtbench testbed k8s status)")


class Cluster:
    def __init__(self, context: str = "", namespace: str = "default"):
        client, config = _client()
        self.kubeconfig = kubeconfig_path()
        try:
            # KUBECONFIG as it is now (the client reads it once, at import)
            self.api = config.new_client_from_config(os.environ.get("KUBECONFIG") or str(self.kubeconfig),
                                                     context=context or None)
        except Exception as exc:  # no kubeconfig, unknown context, unreadable file
            raise UserError(f"cannot load the kubeconfig {self.kubeconfig}"
                            f"{f' context {context}' if context else ''}: {exc}",
                            hint="set KUBECONFIG to your cluster's kubeconfig, or name its context") from None
        self.server = self.api.configuration.host
        self.namespace = namespace
        self._nodes: dict[str, str | None] | None = None  # name -> container runtime
        self._version: str | None = None
        self._handlers: dict[str, str | None] = {}  # RuntimeClass -> handler
        self.core = client.CoreV1Api(self.api)
        self.apps = client.AppsV1Api(self.api)
        self.storage = client.StorageV1Api(self.api)
        self.ApiException = client.exceptions.ApiException

    def json(self, obj: Any) -> Any:
        return self.api.sanitize_for_serialization(obj)

    def version(self) -> str:
        if self._version is None:
            from kubernetes import client
            self._version = client.VersionApi(self.api).get_code(_request_timeout=PROBE_TIMEOUT).git_version
        return self._version

    def probe(self) -> str:
        """The server version, or a UserError in one line naming the kubeconfig's server and why."""
        try:
            return self.version()
        except Exception as exc:
            raise explain_failure(exc, self.server, self.kubeconfig) from None

    def require_answer(self) -> None:
        """A UserError in one line unless the API server answers now (not the version remembered
        from before): a cluster that went away mid-run."""
        from kubernetes import client

        try:
            client.VersionApi(self.api).get_code(_request_timeout=PROBE_TIMEOUT)
        except Exception as exc:
            raise explain_failure(exc, self.server, self.kubeconfig) from None

    def answers(self) -> bool:
        try:
            self.require_answer()
            return True
        except UserError:
            return False

    def node_names(self) -> list[str]:
        """The cluster's nodes (recorded with every pod), Ready or not."""
        return sorted(self._node_runtimes())

    def node_runtime(self, node: str | None) -> str | None:
        """The container runtime a node reports ('containerd://1.6.20'), recorded with its pods."""
        return self._node_runtimes().get(node or "")

    def _node_runtimes(self) -> dict[str, str | None]:
        if self._nodes is None:
            self._nodes = {n.metadata.name: getattr(n.status.node_info, "container_runtime_version", None)
                           if n.status and n.status.node_info else None
                           for n in self.core.list_node(_request_timeout=PROBE_TIMEOUT).items}
        return self._nodes

    def testbed(self) -> dict[str, Any] | None:
        """What `virtbench testbed k8s up` wrote beside the kubeconfig (its registry), if it did."""
        path = self.kubeconfig.parent / "registry.json"
        with contextlib.suppress(OSError, ValueError):
            return json.loads(path.read_text())
        return None

    def runtime_handler(self, runtime_class: str) -> str | None:
        """The handler (containerd's runtime name) of a RuntimeClass, None when the cluster has none of that name."""
        from kubernetes import client

        if runtime_class not in self._handlers:
            try:
                self._handlers[runtime_class] = client.NodeV1Api(self.api).read_runtime_class(
                    runtime_class, _request_timeout=PROBE_TIMEOUT).handler
            except self.ApiException as exc:
                if exc.status != 404:
                    raise
                self._handlers[runtime_class] = None
        return self._handlers[runtime_class]

    def runtime_facts(self, runtime_class: str | None) -> dict[str, Any]:
        """What a sample records of the OCI runtime under a pod (`runtime`, `runtime_version`,
        `runtime_options`): a testbed's own record of its runtimes, else the RuntimeClass's handler
        (the node's default runtime when None: unknown from outside a cluster not ours)."""
        runtimes = (self.testbed() or {}).get("runtimes") or {}
        handler = (self.runtime_handler(runtime_class) if runtime_class else None) or \
            ("runc" if runtimes and not runtime_class else None)
        return {"runtime": handler, "runtime_path": None, "runtime_version": None, "runtime_options": None,
                "runtime_label": handler, **runtimes.get(handler or "", {})}

    def sweep_stale(self, is_stale) -> list[str]:
        """Delete virtbench's objects whose creating process is gone (`is_stale(labels)`): a killed
        run's Deployments, Services, claims and volumes. Returns what went, as "Kind/name"."""
        removed = []
        found = [("Service", o) for o in self.core.list_namespaced_service(self.namespace, label_selector="virtbench=1").items]
        found += [("Deployment", o) for o in self.apps.list_namespaced_deployment(self.namespace,
                                                                                 label_selector="virtbench=1").items]
        found += [("PersistentVolumeClaim", o) for o in self.core.list_namespaced_persistent_volume_claim(
            self.namespace, label_selector="virtbench=1").items]
        found += [("PersistentVolume", o) for o in self.core.list_persistent_volume(label_selector="virtbench=1").items]
        for kind, obj in found:
            if is_stale(obj.metadata.labels or {}):
                self.delete(kind, obj.metadata.name)
                removed.append(f"{kind}/{obj.metadata.name} (run {(obj.metadata.labels or {}).get('virtbench.run')})")
        return removed

    def has_storage_class(self, name: str) -> bool:
        try:
            self.storage.read_storage_class(name)
            return True
        except self.ApiException as exc:
            if exc.status == 404:
                return False
            raise

    def create(self, docs: list[dict[str, Any]]) -> None:
        ns = self.namespace
        for doc in docs:
            kind = doc["kind"]
            if kind == "Deployment":
                self.apps.create_namespaced_deployment(ns, doc)
            elif kind == "PersistentVolumeClaim":
                self.core.create_namespaced_persistent_volume_claim(ns, doc)
            elif kind == "PersistentVolume":  # cluster-scoped (an NFS share, nfs_share)
                self.core.create_persistent_volume(doc)
            elif kind == "Service":
                self.core.create_namespaced_service(ns, doc)
            else:
                raise ValueError(f"no creator for kind {kind}")

    def pods(self, group: str) -> list[dict[str, Any]]:
        got = self.core.list_namespaced_pod(self.namespace, label_selector=f"virtbench.group={group}")
        return [self.json(p) for p in got.items if not p.metadata.deletion_timestamp]

    def wait_pods_gone(self, group: str, timeout: float = 90.0) -> list[str]:
        """Until no pod of the group exists, terminating ones included (a Deployment's deletion only
        starts theirs); the names still there at the timeout."""
        deadline = time.monotonic() + timeout
        while True:
            left = [p.metadata.name for p in self.core.list_namespaced_pod(
                self.namespace, label_selector=f"virtbench.group={group}").items]
            if not left or time.monotonic() > deadline:
                return left
            time.sleep(0.5)

    def pod(self, name: str) -> dict[str, Any] | None:
        try:
            return self.json(self.core.read_namespaced_pod(name, self.namespace))
        except self.ApiException as exc:
            if exc.status == 404:
                return None
            raise

    def events(self, pod: str) -> list[dict[str, Any]]:
        got = self.core.list_namespaced_event(self.namespace, field_selector=f"involvedObject.name={pod}")
        out = [self.json(e) for e in got.items]
        return sorted(out, key=lambda e: e.get("lastTimestamp") or e.get("eventTime") or "")

    def wait_ready(self, group: str, count: int, timeout: float) -> list[dict[str, Any]]:
        """The group's pods once `count` of them are Ready; else NotReady with the reason of one that
        is not (its conditions, container state and warning events)."""
        deadline = time.monotonic() + timeout
        while True:
            pods = self.pods(group)
            ready = [p for p in pods if "ready" in phases.from_pod_object(p)]
            if len(ready) >= count:
                return sorted(ready, key=lambda p: p["metadata"]["name"])[:count]
            # an image the nodes cannot pull: the kubelet has tried and backs off; waiting out the
            # timeout (for every repetition) would not change it
            unpullable = next((p for p in pods if p not in ready and phases.waiting_reason(p) in UNPULLABLE), None)
            if unpullable is not None:
                raise NotReady(f"pods of {group} cannot start: {unpullable['metadata']['name']}: "
                               f"{phases.not_running_reason(unpullable, self.events(unpullable['metadata']['name']))}",
                               "check the image reference (the suite's or --pods-image) and that the cluster's "
                               "nodes can reach its registry")
            if time.monotonic() > deadline:
                late = next((p for p in pods if p not in ready), None)
                why = phases.not_running_reason(late, self.events(late["metadata"]["name"])) if late else \
                    "no pod was created (see the Deployment's ReplicaSet events)"
                name = late["metadata"]["name"] if late else group
                raise NotReady(f"{len(ready)} of {count} pods of {group} Ready after {timeout:g} s; {name}: {why}")
            time.sleep(POLL)

    def ready_endpoints(self, service: str) -> set[str]:
        """Pod names behind a Service that its EndpointSlices list as ready."""
        from kubernetes import client

        got = client.DiscoveryV1Api(self.api).list_namespaced_endpoint_slice(
            self.namespace, label_selector=f"kubernetes.io/service-name={service}")
        return {e.target_ref.name for sl in got.items for e in sl.endpoints or []
                if e.target_ref and (e.conditions is None or e.conditions.ready is not False)}

    def label_pod(self, pod: str, labels: dict[str, str | None]) -> None:
        self.core.patch_namespaced_pod(pod, self.namespace, {"metadata": {"labels": labels}})

    def scale(self, deployment: str, replicas: int, cheap: list[str] = ()) -> None:
        """Set a Deployment's replicas; the pods in `cheap` are made the first to go when it shrinks
        (deleting a pod alone would have its ReplicaSet replace it)."""
        for pod in cheap:
            self.core.patch_namespaced_pod(pod, self.namespace, {"metadata": {"annotations": {
                "controller.kubernetes.io/pod-deletion-cost": "-1000000"}}})
        self.apps.patch_namespaced_deployment_scale(deployment, self.namespace,
                                                    {"spec": {"replicas": max(0, replicas)}})

    def replicas(self, deployment: str) -> int:
        return self.apps.read_namespaced_deployment_scale(deployment, self.namespace).spec.replicas

    def scale_down_one(self, deployment: str, pod: str) -> None:
        """Remove one pod of a Deployment for good."""
        self.scale(deployment, self.replicas(deployment) - 1, [pod])

    def delete(self, kind: str, name: str) -> None:
        """Delete one object; one that is gone already is fine."""
        ns = self.namespace
        if kind == "PersistentVolume":  # cluster-scoped; Retain: the data on the share stays
            try:
                self.core.delete_persistent_volume(name, grace_period_seconds=1)
            except self.ApiException as exc:
                if exc.status != 404:
                    raise
            return
        call = {"Deployment": self.apps.delete_namespaced_deployment,
                "PersistentVolumeClaim": self.core.delete_namespaced_persistent_volume_claim,
                "Service": self.core.delete_namespaced_service}[kind]
        try:
            # Foreground: the call's objects (ReplicaSet, pods) go with it, not later by the GC.
            call(name, ns, propagation_policy="Foreground", grace_period_seconds=1)
        except self.ApiException as exc:
            if exc.status != 404:
                raise

    def labelled(self, selector: str) -> list[tuple[str, str]]:
        """(kind, name) of virtbench's objects in the namespace matching a label selector."""
        out = [("Service", s.metadata.name) for s in self.core.list_namespaced_service(
            self.namespace, label_selector=selector).items]
        out += [("Deployment", d.metadata.name) for d in self.apps.list_namespaced_deployment(
            self.namespace, label_selector=selector).items]
        out += [("PersistentVolumeClaim", c.metadata.name) for c in self.core.list_namespaced_persistent_volume_claim(
            self.namespace, label_selector=selector).items]
        out += [("PersistentVolume", v.metadata.name) for v in self.core.list_persistent_volume(
            label_selector=selector).items]
        return out
