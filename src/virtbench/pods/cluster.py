"""The kubernetes backend: the official `kubernetes` client with the user's kubeconfig and context
creates, watches and deletes; commands in pods run through `kubectl exec` (see drivers/pods.py).

Objects go in as plain dicts (the generator's), and pods come back as the API's camelCase JSON
(`sanitize_for_serialization`), so phases.py reads recorded and live pods alike.
"""

from __future__ import annotations

import time
from typing import Any

from .. import paths
from ..errors import UserError
from . import phases

POLL = 0.1  # seconds between pod lists while waiting; finer than the API's 1 s timestamps


class NotReady(UserError):
    """Pods that did not become Ready in time; the message carries the reason from their events."""


def _client():
    try:
        from kubernetes import client, config
    except ImportError:
        raise UserError("the pods driver's kubernetes backend needs the kubernetes Python client",
                        hint=paths.pip_advice("pods")) from None
    return client, config


class Cluster:
    def __init__(self, context: str = "", namespace: str = "default"):
        client, config = _client()
        try:
            self.api = config.new_client_from_config(context=context or None)
        except Exception as exc:  # no kubeconfig, unknown context, unreadable file
            raise UserError(f"cannot load the kubeconfig{f' context {context}' if context else ''}: {exc}",
                            hint="set KUBECONFIG to your cluster's kubeconfig, or name its context") from None
        self.namespace = namespace
        self.core = client.CoreV1Api(self.api)
        self.apps = client.AppsV1Api(self.api)
        self.storage = client.StorageV1Api(self.api)
        self.ApiException = client.exceptions.ApiException

    def json(self, obj: Any) -> Any:
        return self.api.sanitize_for_serialization(obj)

    def version(self) -> str:
        from kubernetes import client
        return client.VersionApi(self.api).get_code().git_version

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
            if time.monotonic() > deadline:
                late = next((p for p in pods if p not in ready), None)
                why = phases.not_running_reason(late, self.events(late["metadata"]["name"])) if late else \
                    "no pod was created (see the Deployment's ReplicaSet events)"
                name = late["metadata"]["name"] if late else group
                raise NotReady(f"{len(ready)} of {count} pods of {group} Ready after {timeout:g} s; {name}: {why}")
            time.sleep(POLL)

    def label_pod(self, pod: str, labels: dict[str, str]) -> None:
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
