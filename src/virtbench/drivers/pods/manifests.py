"""Kubernetes manifests for a group of pods (pure: dicts in, dicts and YAML out).

A group is one Deployment of `replicas` pods (the runner's instances of one role), all from one
template: the guest image running `sleep infinity`, requests = limits from the shape (Guaranteed
QoS, as a VM's fixed size), optionally a PersistentVolumeClaim from a storage class mounted at
CLAIM_DIR (the scratch directory), and optionally an existing NFS export (`nfs=`, the pods
driver's `nfs_share`: study 004's pods on NFS) as a PersistentVolume plus a claim bound to it by
name, mounted at NFS_DIR. The same documents go to a cluster and to `podman kube play` (which makes
N pods of a Deployment, named `<name>-pod-<i>`, and a named volume for each claim; it ignores the
PersistentVolume and makes the NFS claim's volume from the claim's `volume.podman.io/*`
annotations: the local driver with type nfs, mounted by the host's kernel client at pod start).
"""

from __future__ import annotations

import re
from typing import Any

import yaml

from . import CONTAINER

CLAIM_DIR = "/vb-pvc"
NFS_DIR = "/vb-nfs"  # where every container of a group with an NFS share sees it
NFS_CAPACITY = "1Gi"  # a PersistentVolume needs one; NFS does not enforce it
NFS_OPTIONS = ("nfsvers=4.1", "proto=tcp", "hard")
_SHARE = re.compile(r"^(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9_.-]+):(/[^\s,]*)$")
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


def parse_share(text: str) -> tuple[str, str]:
    """'SERVER:/EXPORT' (an IPv6 server in brackets) -> (server without brackets, exported path)."""
    m = _SHARE.match(str(text).strip())
    if not m:
        raise ValueError(f"{text!r} is not an NFS share; write SERVER:/EXPORT, e.g. nfs.example.org:/srv/bench "
                         "or 10.0.0.5:/export (an address the cluster's nodes reach)")
    return m.group(1).strip("[]"), m.group(2)


def nfs_volume(name: str, server: str, path: str, size: str, labels: dict[str, str],
               access: str = "ReadWriteMany", claim: tuple[str, str] | None = None) -> dict[str, Any]:
    """A PersistentVolume on an NFS export (server, exported path), with no class so that only a
    claim naming it binds it; claim = (namespace, name) reserves it for that claim alone. The
    node's kernel NFS client mounts it for the pod: NFSv4.1 over TCP, hard."""
    spec: dict[str, Any] = {"capacity": {"storage": size}, "accessModes": [access],
                            "persistentVolumeReclaimPolicy": "Retain", "storageClassName": "",
                            "mountOptions": list(NFS_OPTIONS), "nfs": {"server": server, "path": path}}
    if claim:
        spec["claimRef"] = {"namespace": claim[0], "name": claim[1]}
    return {"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": name, "labels": dict(labels)},
            "spec": spec}


def nfs_claim(name: str, volume: str, server: str, path: str, size: str, labels: dict[str, str],
              access: str = "ReadWriteMany") -> dict[str, Any]:
    """The claim bound by name to `volume` (no class: a default class would provision another
    volume). Its annotations are for `podman kube play`, which has no PersistentVolumes: they make
    the claim's podman volume an NFS mount of the same export (a cluster ignores them)."""
    pvc = claim(name, size, labels, "", access)
    pvc["spec"].update({"storageClassName": "", "volumeName": volume})
    device = f"[{server}]:{path}" if ":" in server else f"{server}:{path}"
    pvc["metadata"]["annotations"] = {
        "volume.podman.io/driver": "local", "volume.podman.io/type": "nfs",
        "volume.podman.io/device": device,
        "volume.podman.io/mount-options": ",".join(o.replace("nfsvers=", "vers=") for o in NFS_OPTIONS)}
    return pvc


def deployment(name: str, replicas: int, image: str, labels: dict[str, str], *, vcpus: int | None = None,
               memory_mb: int | None = None, claim_name: str = "", nfs_claim_name: str = "",
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
    mounts: list[dict[str, Any]] = []
    volumes: list[dict[str, Any]] = []
    for vol, claim_of, path in (("data", claim_name, CLAIM_DIR), ("nfs", nfs_claim_name, NFS_DIR)):
        if claim_of:
            mounts.append({"name": vol, "mountPath": path})
            volumes.append({"name": vol, "persistentVolumeClaim": {"claimName": claim_of}})
    if volumes:
        container["volumeMounts"] = mounts
        pod_spec["volumes"] = volumes
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


def spread_over_nodes(deployment: dict[str, Any]) -> None:
    """A group's pods on as many nodes as can take them (an MPI cluster's ranks cross nodes, as a
    study's pods did): a soft topology spread over hostnames, so a full node still takes a pod."""
    group = deployment["metadata"]["labels"]["virtbench.group"]
    deployment["spec"]["template"]["spec"]["topologySpreadConstraints"] = [{
        "maxSkew": 1, "topologyKey": "kubernetes.io/hostname", "whenUnsatisfiable": "ScheduleAnyway",
        "labelSelector": {"matchLabels": {"virtbench.group": group}}}]


def cluster_ip_service(name: str, port: int, labels: dict[str, str]) -> dict[str, Any]:
    """A ClusterIP Service over the pods labelled `virtbench.svc: <name>` (kube-proxy balances)."""
    return {"apiVersion": "v1", "kind": "Service", "metadata": {"name": name, "labels": dict(labels)},
            "spec": {"type": "ClusterIP", "selector": {"virtbench.svc": name},
                     "ports": [{"port": port, "targetPort": port, "protocol": "TCP"}]}}


def group(name: str, replicas: int, image: str, labels: dict[str, str], *, vcpus: int | None = None,
          memory_mb: int | None = None, claim_size: str = "", storage_class: str = "",
          nfs: tuple[str, str] | None = None, namespace: str = "") -> list[dict[str, Any]]:
    """The documents of one group: volumes and claims first (a pod that names one needs it), then
    the Deployment. One claim serves every pod of the group: ReadWriteMany when there are several
    (study 004's pods shared NFS volumes), and each pod writes under a directory of its own.
    nfs = (server, exported path): an NFS PersistentVolume `<name>-nfs` and the claim `<name>-nfs`
    bound to it (reserved for it when `namespace` is given), mounted at NFS_DIR in every pod."""
    labels = {**labels, "virtbench.group": name}
    docs = []
    claim_name = nfs_claim_name = ""
    if nfs:
        nfs_claim_name = f"{name}-nfs"
        docs.append(nfs_volume(nfs_claim_name, nfs[0], nfs[1], NFS_CAPACITY, labels,
                               claim=(namespace, nfs_claim_name) if namespace else None))
        docs.append(nfs_claim(nfs_claim_name, nfs_claim_name, nfs[0], nfs[1], NFS_CAPACITY, labels))
    if claim_size:
        claim_name = f"{name}-data"
        access = "ReadWriteOnce" if replicas == 1 else "ReadWriteMany"
        docs.append(claim(claim_name, claim_size, labels, storage_class, access))
    docs.append(deployment(name, replicas, image, labels, vcpus=vcpus, memory_mb=memory_mb, claim_name=claim_name,
                           nfs_claim_name=nfs_claim_name))
    return docs


def set_runtime_class(deployment: dict[str, Any], runtime_class: str) -> None:
    """The Deployment's pods run under RuntimeClass `runtime_class` (gVisor, say), not the node's default."""
    deployment["spec"]["template"]["spec"]["runtimeClassName"] = runtime_class


def to_yaml(docs: list[dict[str, Any]]) -> str:
    return yaml.safe_dump_all(docs, sort_keys=False)
