"""What `status`, `doctor` and `hosts` say about a cluster: server version, nodes, Ready."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .configs import DEFAULT_NAME, Layout


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


def chosen(name: str | None = None) -> Layout:
    """The testbed cluster `name`; without one, the cluster that is up on this machine (one at a time:
    its ports are fixed) whatever its name (`up --name`), else the default, where `up` writes it."""
    from . import up_down as cluster

    if name:
        cluster.check_name(name)
        return Layout(name, 0)
    here = [Layout(n, 0) for n in cluster.clusters_here()]
    with_config = [lay for lay in here if lay.kubeconfig.is_file()]
    # A killed `up` can leave a state directory, even its kubeconfig: the one whose processes run wins.
    running = [lay for lay in with_config if cluster.own_processes(lay)]
    return (running or with_config or [Layout(DEFAULT_NAME, 0)])[0]


def status(name: str = DEFAULT_NAME) -> dict[str, Any]:
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


def which_cluster(name: str | None = None) -> tuple[Path | None, str]:
    """(kubeconfig, what it is) of the cluster `doctor` and `hosts --kubernetes` look at: testbed
    cluster `name` if given, else KUBECONFIG's, else the testbed cluster up here (`chosen`); a None
    kubeconfig when there is none of these."""
    import os

    from ..kubernetes_backend import kubeconfig_path

    if os.environ.get("KUBECONFIG") and not name:
        return kubeconfig_path(), "KUBECONFIG's cluster"
    lay = chosen(name)
    if lay.kubeconfig.is_file():
        return lay.kubeconfig, f"testbed cluster {lay.name}"
    return None, f"testbed cluster {lay.name}" if name else "no KUBECONFIG, no testbed cluster up"


def cluster_rows(name: str | None = None) -> tuple[str, list[dict[str, Any]]]:
    """`virtbench hosts --kubernetes`: which cluster (`which_cluster`: 'testbed cluster vbk8s
    (kubeconfig PATH)') and one row per node of it."""
    from ....errors import UserError
    from ..kubernetes_backend import explain_failure

    kc, what = which_cluster(name)
    if kc is None or not kc.is_file():
        raise UserError(f"{what} is not up" if name else f"no cluster: {what}" if kc is None else f"no kubeconfig at {kc}",
                        f"start it: virtbench testbed k8s up --name {name}" if name else
                        "set KUBECONFIG, or start the testbed: virtbench testbed k8s up")
    try:
        d = describe(kc)
    except Exception as exc:
        raise explain_failure(exc, "of the kubeconfig", kc) from None
    return f"{what} (kubeconfig {kc})", [{**n, "server": d["server"], "server_version": d["server_version"]}
                                         for n in d["nodes"]]
