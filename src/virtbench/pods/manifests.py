"""Kubernetes manifests for a group of pods (pure: dicts in, dicts and YAML out).

A group is one Deployment of `replicas` pods (the runner's instances of one role), all from one
template: the guest image running `sleep infinity`, requests = limits from the shape (Guaranteed
QoS, as a VM's fixed size), and optionally a PersistentVolumeClaim mounted at CLAIM_DIR: from a
storage class, or bound to an NFS PersistentVolume (`nfs=`: study 004's pods on NFS, mounted by
the node's kernel NFS client when the pod starts). The same
documents go to a cluster and to `podman kube play` (which makes N pods of a Deployment, named
`<name>-pod-<i>`, and a named volume for each claim).
"""

from __future__ import annotations

import re
from typing import Any

import yaml

from . import CONTAINER

CLAIM_DIR = "/vb-pvc"
# The imported guest image has no ENV: a runtime that adds no default PATH (kube play) needs it.
PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
_LABEL_VALUE = re.compile(r"[^A-Za-z0-9_.-]+")


def dns_name(text: str, limit: int = 52) -> str:
    """A DNS-1123 label (lower case, digits, '-'), short enough for the suffixes pods get."""
    name = re.sub(r"[^a-z0-9-]+", "-", text.lower()).strip("-")
    return name[:limit].rstrip("-") or "x"


def label_value(text: Any) -> str:
    """A valid label value: at most 63 characters of [A-Za-z0-9_.-], alphanumeric at both ends."""
    return _LABEL_VALUE.sub("-", str(text))[:63].strip("-_.")


def resources(vcpus: int | None, memory_mb: int | None) -> dict[str, Any]:
    """requests = limits from the shape; nothing for the `native` shape (no limits)."""
    amounts = {}
    if vcpus:
        amounts["cpu"] = str(vcpus)
    if memory_mb:
        amounts["memory"] = f"{memory_mb}Mi"
    return {"requests": dict(amounts), "limits": dict(amounts)} if amounts else {}


def claim(name: str, size: str, labels: dict[str, str], storage_class: str = "",
          access: str = "ReadWriteOnce") -> dict[str, Any]:
    spec: dict[str, Any] = {"accessModes": [access], "resources": {"requests": {"storage": size}}}
    if storage_class:
        spec["storageClassName"] = storage_class
    return {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
            "metadata": {"name": name, "labels": dict(labels)}, "spec": spec}


def nfs_volume(name: str, server: str, path: str, size: str, labels: dict[str, str],
               access: str = "ReadWriteMany") -> dict[str, Any]:
    """A PersistentVolume on an NFS export (server, exported path), claimable only by name (no
    class): the node's kernel NFS client mounts it for the pod. NFSv4.1 over TCP, hard."""
    return {"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": name, "labels": dict(labels)},
            "spec": {"capacity": {"storage": size}, "accessModes": [access],
                     "persistentVolumeReclaimPolicy": "Retain", "storageClassName": "",
                     "mountOptions": ["nfsvers=4.1", "proto=tcp", "hard"],
                     "nfs": {"server": server, "path": path}}}


def deployment(name: str, replicas: int, image: str, labels: dict[str, str], *, vcpus: int | None = None,
               memory_mb: int | None = None, claim_name: str = "",
               pull_policy: str = "IfNotPresent") -> dict[str, Any]:
    container: dict[str, Any] = {
        "name": CONTAINER, "image": image, "imagePullPolicy": pull_policy,
        "command": ["sleep", "infinity"], "env": [{"name": "PATH", "value": PATH}],
    }
    res = resources(vcpus, memory_mb)
    if res:
        container["resources"] = res
    pod_spec: dict[str, Any] = {
        "containers": [container],
        # sleep as PID 1 ignores SIGTERM: do not wait the default 30 s for it at teardown
        "terminationGracePeriodSeconds": 1,
        "enableServiceLinks": False,  # no environment variables per Service in the namespace
        "automountServiceAccountToken": False,
    }
    if claim_name:
        container["volumeMounts"] = [{"name": "data", "mountPath": CLAIM_DIR}]
        pod_spec["volumes"] = [{"name": "data", "persistentVolumeClaim": {"claimName": claim_name}}]
    return {
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "labels": dict(labels)},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"virtbench.group": labels["virtbench.group"]}},
                 "template": {"metadata": {"labels": dict(labels)}, "spec": pod_spec}},
    }


def node_port_service(name: str, pod_label: str, port: int, labels: dict[str, str]) -> dict[str, Any]:
    """A NodePort Service in front of one pod (selected by its `virtbench.pod` label): how a load
    generator outside the cluster reaches a port of that pod."""
    return {"apiVersion": "v1", "kind": "Service", "metadata": {"name": name, "labels": dict(labels)},
            "spec": {"type": "NodePort", "selector": {"virtbench.pod": pod_label},
                     "ports": [{"port": port, "targetPort": port, "protocol": "TCP"}]}}


def group(name: str, replicas: int, image: str, labels: dict[str, str], *, vcpus: int | None = None,
          memory_mb: int | None = None, claim_size: str = "", storage_class: str = "",
          nfs: tuple[str, str] | None = None) -> list[dict[str, Any]]:
    """The documents of one group: the volume and claim first (a pod that names it needs it), then
    the Deployment. One claim serves every pod of the group: ReadWriteMany when there are several
    (study 004's pods shared NFS volumes), and each pod writes under a directory of its own.
    nfs = (server, exported path): the claim is bound by name to an NFS PersistentVolume instead of
    coming from a storage class."""
    labels = {**labels, "virtbench.group": name}
    docs = []
    claim_name = ""
    if nfs and not claim_size:
        raise ValueError("an NFS PersistentVolume needs a claim size")
    if claim_size:
        claim_name = f"{name}-data"
        access = "ReadWriteOnce" if replicas == 1 and not nfs else "ReadWriteMany"
        if nfs:
            docs.append(nfs_volume(f"{name}-nfs", nfs[0], nfs[1], claim_size, labels))
            pvc = claim(claim_name, claim_size, labels, "", access)
            pvc["spec"].update({"storageClassName": "", "volumeName": f"{name}-nfs"})
            docs.append(pvc)
        else:
            docs.append(claim(claim_name, claim_size, labels, storage_class, access))
    docs.append(deployment(name, replicas, image, labels, vcpus=vcpus, memory_mb=memory_mb, claim_name=claim_name))
    return docs


def to_yaml(docs: list[dict[str, Any]]) -> str:
    return yaml.safe_dump_all(docs, sort_keys=False)
