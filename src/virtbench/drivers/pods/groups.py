"""The pods driver's groups: one Deployment (kube-play: one `podman kube play`) with its claims,
volumes and Services, how a group is removed, and which groups killed runs left on a cluster.

The drivers (kubeplay_driver.py, kubernetes_driver.py) provision the groups' pods; common.py releases them one by one.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any

from ...machines import ledger
from . import manifests


@dataclass
class Group:
    """One Deployment (and its claim, and Services made later) with the pods still in use."""

    name: str
    backend: Any  # KubePlay or Cluster
    docs: list[dict[str, Any]]
    key: tuple[str, str] = ("", "")  # (environment, role)
    live: set[str] = field(default_factory=set)
    services: dict[str, list[str]] = field(default_factory=dict)  # pod -> its Services
    nfs_share: str = ""  # the environment's option, as given
    nfs_refusal: str | None = None  # why the share is not mounted in the pods (kube-play: no NFS client)

    @property
    def claims(self) -> list[str]:
        """Every claim of the group (removed with it)."""
        return [d["metadata"]["name"] for d in self.docs if d["kind"] == "PersistentVolumeClaim"]

    @property
    def scratch_claim(self) -> str | None:
        """The claim of option pvc, where the scratch directory goes (not the NFS share's)."""
        return next((c for c in self.claims if c == f"{self.name}-data"), None)

    @property
    def volumes(self) -> list[str]:
        return [d["metadata"]["name"] for d in self.docs if d["kind"] == "PersistentVolume"]

    @property
    def manifest_sha256(self) -> str:
        return hashlib.sha256(manifests.to_yaml(self.docs).encode()).hexdigest()


def leftover_cluster_objects(cluster) -> list[str]:
    """A cluster's Deployments, Services, claims and volumes whose owner (by their labels) is gone."""
    return [f"{name} on {cluster.server}"
            for name in cluster.sweep_stale(lambda labels: ledger.gone(labels, manifests.label_value))]


def remove_group(group: Group) -> None:
    """The group's Deployment (kube-play: its pods), Services, claims and volumes."""
    if hasattr(group.backend, "remove_group"):  # kube-play
        group.backend.remove_group(group.name, group.claims)
    else:
        for svc in [s for names in group.services.values() for s in names]:
            group.backend.delete("Service", svc)
        group.backend.delete("Deployment", group.name)
        # The run ends with its pods gone, not still terminating, so the next run (or user) finds
        # the cluster as it was; one still there after 90 s is the next run's sweep's.
        group.backend.wait_pods_gone(group.name)
        for name in group.claims:
            group.backend.delete("PersistentVolumeClaim", name)
        for name in group.volumes:
            group.backend.delete("PersistentVolume", name)
