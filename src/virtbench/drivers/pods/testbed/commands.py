"""`virtbench testbed k8s up|down|status|heal|build` (registered under the `testbed` group in cli/)."""

from __future__ import annotations

import json
import sys
import time

import click

from ....errors import UserError


def _say(line: str) -> None:
    click.echo(line, err=True)


def _name_option(f):
    return click.option("--name", default="vbk8s", show_default=True, metavar="NAME",
                        help="the cluster's name: 1-10 lowercase letters and digits, starting with a letter "
                             "(names its nodes, namespaces, links and state directory; one cluster runs on a "
                             "machine at a time)")(f)


@click.group("k8s")
def k8s() -> None:
    """A real Kubernetes cluster on this machine, for the pods driver's kubernetes backend.

    etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kube-proxy and a kubelet +
    containerd per node, built from pinned upstream sources (testbed/k8s) on first use. Node 1 is
    this machine, nodes 2..N are network namespaces; the API server and the image registry listen
    on 127.0.0.1 only. The nodes share this machine's kernel and CPU: their figures measure
    Kubernetes' machinery and network path, not separate machines. Needs root.

    The cluster records who made it, and runs whose kubeconfig is its own register while they run:
    `down` refuses to remove it under a live run (--force overrides). Containerd on every node has
    gVisor (runsc, ptrace platform) as a second runtime, offered as RuntimeClass `gvisor`.
    """


@k8s.command("up")
@_name_option
@click.option("--nodes", type=click.IntRange(1, 20), default=2, show_default=True, help="nodes (1 = this machine only)")
@click.option("--version", "version", default=None, help="Kubernetes version; this virtbench pins v1.34.4 "
              "(testbed/k8s/cluster/go.mod) and refuses others")
@click.option("--no-push", is_flag=True, help="do not push the guest image to the testbed's registry now "
              "(the kubernetes backend pushes it on first use)")
def up(name, nodes, version, no_push) -> None:
    """Build (once) and start the cluster; print the KUBECONFIG line to use it."""
    from . import KUBERNETES_VERSION, up_down as cluster

    if version and version.lstrip("v") != KUBERNETES_VERSION.lstrip("v"):
        raise UserError(f"this virtbench builds Kubernetes {KUBERNETES_VERSION} only, not {version}",
                        "change the pins in testbed/k8s/cluster/go.mod (and KUBERNETES_VERSION) to build another")
    lay = cluster.up(nodes, name=name, log=_say, push_image=not no_push)
    took = json.loads((lay.state / "up.json").read_text())["seconds"]
    _say(f"cluster {lay.name} up: {nodes} node(s) Ready, Kubernetes {KUBERNETES_VERSION}, in {took:.0f} s "
         f"(after the build); registry 127.0.0.1:5000; remove with: virtbench testbed k8s down"
         + ("" if name == "vbk8s" else f" --name {name}"))
    click.echo(f"export KUBECONFIG={lay.kubeconfig}")


@k8s.command("build")
def build_cmd() -> None:
    """Build the cluster's binaries (once per pin, into the user's cache); up does it when needed."""
    from . import build

    t0 = time.monotonic()
    where = build.ensure(log=_say)
    _say(f"testbed binaries: {where} (took {time.monotonic() - t0:.0f} s; 0 s means cached)")


@k8s.command("down")
@_name_option
@click.option("--force", is_flag=True, help="remove it even while a run uses it (that run's pods cells then fail)")
def down(name, force) -> None:
    """Stop the cluster and remove every process, namespace, link, mount, iptables chain and file
    it made (also after an interrupted up). Safe to repeat. Refuses while a live run uses the
    cluster, and names the run. Stops only the processes up started and their descendants."""
    from . import up_down as cluster
    from .configs import Layout

    removed = cluster.down(name, log=_say, force=force)
    for item in removed:
        click.echo(f"removed {item}")
    if not removed:
        click.echo("testbed cluster: nothing to remove")
    if left := cluster.leftovers(Layout(name)):
        raise UserError(f"could not remove: {', '.join(left)}", "see `ip netns`, `findmnt` and `iptables -S`")


@k8s.command("heal")
@_name_option
def heal(name) -> None:
    """Start again whatever of the cluster's processes died (a node's kubelet or containerd, say),
    as `up` started them, and wait until every node is Ready. The cluster keeps its certificates,
    objects and name, so a run whose pods failed meanwhile can go on: virtbench run --resume RUN_ID
    --retry-failed."""
    from . import up_down as cluster

    restarted = cluster.heal(name, log=_say)
    click.echo(f"started again: {', '.join(restarted)}" if restarted else "every process of the cluster runs")


@k8s.command("status")
@_name_option
@click.option("--json", "as_json", is_flag=True, help="print the status (up, server, version, nodes and "
              "whether each is Ready, leftovers) as one JSON object (exit 0 whatever it says)")
def status(name, as_json) -> None:
    """Whether the testbed cluster is up, its nodes and whether they are Ready, who made it and which
    runs use it. Exits 1 when it is not up."""
    from ....machines import testbed_owner
    from . import status as st

    data = st.status(name)
    if as_json:
        click.echo(json.dumps(data, indent=2))
        return
    if not data["up"]:
        click.echo(f"testbed cluster {name} is not up" + (f"; leftovers: {', '.join(data['leftovers'])}"
                                                          if data["leftovers"] else "")
                   + "".join(f"; cluster {o} is (virtbench testbed k8s status --name {o})" for o in data["others"]))
        sys.exit(1)
    click.echo(f"server {data['server']} ({data['server_version']}), kubeconfig {data['kubeconfig']}")
    for n in data["nodes"]:
        click.echo(f"  {n['name']}  {n['address']}  {'Ready' if n['ready'] else 'NotReady'}")
    click.echo(f"made {testbed_owner.owner_text(data['owner'])}")
    for r in data["runs"]:
        click.echo(f"in use by run {r['run_id']} (user {r['user']}, pid {r['pid']})")
