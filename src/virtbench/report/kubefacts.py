"""What a pods environment of the kubernetes backend ran on, read from what it stored: the nodes its
pods ran on, the cluster's server version and nodes, the pods' runtime. The report's header and
`virtbench show` say it the same way.

The runner's `machines` fact names where the instances' client side ran (this machine: the API
client, wrk, the monitor), not the nodes; each pod's instance row records its `node`.
"""

from __future__ import annotations

from typing import Any

# What `virtbench testbed k8s up` runs (drivers/pods/testbed/configs.py): Debian's containerd, runc as its runtime.
TESTBED_RUNTIME = "containerd/runc"


def is_cluster(facts: dict[str, Any]) -> bool:
    return facts.get("backend") == "kubernetes"


def nodes(env_name: str, facts: dict[str, Any], instances: list[dict[str, Any]]) -> list[str]:
    """The nodes this environment's pods ran on: each instance row records its node (and the runner
    the first cell's, as pod_nodes); the cluster's nodes when nothing says."""
    ran = {(i.get("metadata") or {}).get("node") for i in instances if i.get("environment") == env_name}
    ran.update(facts.get("pod_nodes") or [facts.get("node")])
    ran.discard(None)
    return sorted(ran) if ran else list(facts.get("cluster_nodes") or [])


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def runtime(facts: dict[str, Any]) -> str:
    """'containerd/runc' (the testbed's, known from its configuration; its OCI runtime as recorded,
    'containerd 1.6.20/runsc --platform=ptrace ...' for a gVisor RuntimeClass), else the node's own
    report (nodeInfo.containerRuntimeVersion, 'containerd://1.7.2' -> 'containerd 1.7.2') when recorded."""
    recorded = str(facts.get("container_runtime") or "").replace("://", " ")
    if facts.get("cluster_testbed"):
        base = TESTBED_RUNTIME.replace("containerd", recorded, 1) if recorded.startswith("containerd") \
            else TESTBED_RUNTIME
        if facts.get("runtime") and facts["runtime"] != "runc":
            base = base.replace("/runc", f"/{facts.get('runtime_label') or facts['runtime']}", 1)
        return base
    return recorded or "runtime not recorded"


def layer(facts: dict[str, Any]) -> str:
    """The virtualization row of a kubernetes environment: what the workload ran in, on what, which
    Kubernetes. (sysinfo's own probe, from inside the pod, sees only the machine under it.)"""
    where = "testbed nodes" if facts.get("cluster_testbed") else "cluster nodes"
    return f"Kubernetes pods ({runtime(facts)}) on {where}, {facts.get('server_version') or 'server version unknown'}"


def cluster(facts: dict[str, Any]) -> str:
    """The driver row's words for the cluster: a testbed on one machine or a cluster, version, size."""
    what = "Kubernetes testbed on one machine" if facts.get("cluster_testbed") else "Kubernetes cluster"
    count = len(facts.get("cluster_nodes") or [])
    return f"{what}, {facts.get('server_version') or 'version unknown'}, " + \
        (_plural(count, "node") if count else "nodes not recorded")
