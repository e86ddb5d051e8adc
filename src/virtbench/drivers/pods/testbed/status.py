"""What `status`, `doctor` and `hosts` say about a cluster: server version, nodes, Ready."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .configs import Layout


def describe(kubeconfig: str | Path | None = None, context: str | None = None, timeout: float = 5.0) -> dict[str, Any]:
    """Server, version and nodes of the cluster a kubeconfig names (KUBECONFIG or ~/.kube/config when
    None). Raises on an unreadable kubeconfig or an API server that does not answer."""
    from kubernetes import client, config

    api = config.new_client_from_config(str(kubeconfig) if kubeconfig else None, context=context or None)
    try:
        version = client.VersionApi(api).get_code(_request_timeout=timeout).git_version
        nodes = []
        for n in client.CoreV1Api(api).list_node(_request_timeout=timeout).items:
            conds = {c.type: c.status for c in n.status.conditions or []}
            addr = next((a.address for a in n.status.addresses or [] if a.type == "InternalIP"), None)
            nodes.append({"name": n.metadata.name, "address": addr, "ready": conds.get("Ready") == "True",
                          "kubelet": n.status.node_info.kubelet_version if n.status.node_info else None})
        return {"server": api.configuration.host, "server_version": version, "nodes": nodes}
    finally:
        api.close()


def status(name: str = "vbk8s") -> dict[str, Any]:
    from ....machines import testbed_owner
    from . import up_down as cluster

    cluster.check_name(name)
    lay = Layout(name, 0)
    whose = {"name": name, "owner": testbed_owner.owner_in(lay.state), "runs": cluster.live_runs(lay),
             "others": [n for n in cluster.clusters_here(lay.root) if n != name]}
    if not lay.kubeconfig.is_file():
        return {"up": False, **whose, "leftovers": cluster.leftovers(lay)}
    try:
        return {"up": True, **whose, "kubeconfig": str(lay.kubeconfig), **describe(lay.kubeconfig)}
    except Exception as exc:  # the API server is not answering
        return {"up": False, **whose, "kubeconfig": str(lay.kubeconfig), "error": str(exc).splitlines()[0],
                "leftovers": cluster.leftovers(lay)}


def cluster_rows() -> list[dict[str, Any]]:
    """`virtbench hosts --kubernetes`: one row per node of KUBECONFIG's cluster, else the testbed's."""
    import os

    from ....errors import UserError
    from ..kubernetes import explain_failure, kubeconfig_path

    kc = kubeconfig_path() if os.environ.get("KUBECONFIG") else Layout().kubeconfig
    if not kc.is_file():
        raise UserError(f"no kubeconfig at {kc}", "set KUBECONFIG, or start the testbed: virtbench testbed k8s up")
    try:
        d = describe(kc)
    except Exception as exc:
        raise explain_failure(exc, "of the kubeconfig", kc) from None
    return [{**n, "server": d["server"], "server_version": d["server_version"]} for n in d["nodes"]]
