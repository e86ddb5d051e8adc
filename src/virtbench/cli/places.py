"""The places to run and what they leave: hosts (probe an inventory or a cluster), testbed (SSH
hosts and a Kubernetes cluster on this machine), cleanup (a killed run's cloud resources)."""

from __future__ import annotations

import sys

import click

from .. import render
from .common import DB_HELP, emit_json, open_store, err, out
from ..errors import UserError
from ..drivers.pods.testbed import commands as k8s_testbed
from ..machines.testbed import NAME_RULE


@click.command("hosts")
@click.option("--inventory", "-i", "inventory", type=click.Path(dir_okay=False),
              help="an Ansible inventory file (YAML or INI); required unless --kubernetes")
@click.option("--group", "-g", "pattern", default="all", show_default=True,
              help="a group, a host, or a comma list of them")
@click.option("--boot-probe", is_flag=True,
              help="boot a guest on each host (the vm driver's probe: KVM, else TCG) to say whether KVM really works")
@click.option("--kubernetes", "k8s", is_flag=True,
              help="list the nodes of the Kubernetes cluster (KUBECONFIG's, else the testbed cluster up here) instead")
@click.option("--name", "testbed_name", metavar="NAME",
              help="with --kubernetes: the nodes of testbed cluster NAME (virtbench testbed k8s up --name NAME)")
@click.option("--json", "as_json", is_flag=True, help="print one JSON object per host, as a list")
def hosts_cmd(inventory, pattern, boot_probe, k8s, testbed_name, as_json) -> None:
    """Probe an inventory's hosts over SSH: reachable or why not, kernel, CPU, memory, /dev/kvm,
    podman, docker, Open MPI and python3; with --boot-probe, whether KVM really boots a guest
    there. With --kubernetes, the cluster's nodes: server version, address, Ready; which cluster
    it is goes to stderr. Exits 1 when a host is unreachable (or a node not Ready)."""
    if testbed_name and not k8s:
        raise UserError("--name names a testbed cluster, whose nodes only --kubernetes lists",
                        f"virtbench hosts --kubernetes --name {testbed_name}")
    if k8s:
        from ..drivers.pods.testbed.status import cluster_rows

        what, rows = cluster_rows(testbed_name)
        err.print(f"nodes of {what}", highlight=False, soft_wrap=True)
        if as_json:
            emit_json(rows)
        for r in [] if as_json else rows:
            out.print(f"{'[green]Ready[/green]   ' if r['ready'] else '[red]NotReady[/red]'} {r['name']}  "
                      f"{r['address']}  kubelet {r['kubelet']}  (server {r['server']} {r['server_version']})",
                      highlight=False)
        if not rows or not all(r["ready"] for r in rows):
            sys.exit(1)
        return
    if not inventory:
        import os

        kc = os.environ.get("KUBECONFIG")
        raise UserError("hosts needs --inventory FILE (SSH hosts) or --kubernetes (a cluster's nodes)",
                        f"KUBECONFIG is set ({kc}): virtbench hosts --kubernetes lists its nodes" if kc else
                        "virtbench hosts --kubernetes lists the nodes of the testbed cluster (virtbench testbed k8s up)")
    from ..machines import inventory as inventory_mod
    from ..machines.probe import probe_hosts
    from ..machines.sshconfig import ssh_config_address
    from ..machines import machine_for
    from ..drivers.vm.site import kvm_column

    boot = kvm_column if boot_probe else None

    specs = inventory_mod.load(inventory).select(pattern)
    if as_json:
        rows = probe_hosts(specs, machine_for, resolve=ssh_config_address, boot=boot)
        emit_json(rows)
    else:
        with err.status(f"probing {len(specs)} host(s)"):
            rows = probe_hosts(specs, machine_for, resolve=ssh_config_address, boot=boot)
        render.hosts_table(out, rows)
    if not all(r["reachable"] for r in rows):
        sys.exit(1)


@click.command("cleanup")
@click.option("--run", "run_id", metavar="RUN_ID", help="remove the cloud resources tagged with this run id")
@click.option("--all-of-mine", is_flag=True, help="remove every cloud resource tagged as made by this user on this host")
@click.option("--suite", help="a suite file whose cloud environment names the API [default: the stored run's]")
@click.option("--provider", help="cloud API (ec2)")
@click.option("--region", help="region, e.g. us-east-1")
@click.option("--endpoint", help="EC2 API URL of an EC2-compatible cloud (or moto)")
@click.option("--profile", help="profile of ~/.aws/credentials")
@click.option("--dry-run", is_flag=True, help="list what would be removed, remove nothing")
@click.option("--db", help=DB_HELP)
@click.option("--json", "as_json", is_flag=True, help="print what was found and removed as JSON")
def cleanup_cmd(run_id, all_of_mine, suite, provider, region, endpoint, profile, dry_run, db, as_json) -> None:
    """Remove cloud instances, volumes and snapshots that a killed run left behind (found by the
    virtbench:run and virtbench:owner tags every resource carries from its creation)."""
    from ..drivers.cloud import cleanup as cleanup_mod

    if bool(run_id) == bool(all_of_mine):
        raise UserError("give --run RUN_ID or --all-of-mine")
    stored = []
    if run_id and not suite:
        try:
            rec = open_store(db).run(run_id)
            run_id, stored = rec["id"], rec["spec"].get("environments", [])
        except UserError:
            pass  # not in this store (another machine's run): flags name the API
    flags = {"provider": provider, "region": region, "endpoint": endpoint, "profile": profile}
    results = [cleanup_mod.cleanup(t, run_id, all_of_mine, dry_run)
               for t in cleanup_mod.targets(flags, suite, stored)]
    if as_json:
        emit_json(results)
        return
    for r in results:
        where = f"{r['backend']} ({r['region']})"
        if dry_run:
            found = [f"{kind[:-1]} {i}" for kind, ids in r["found"].items() for i in ids]
            out.print(f"{where}: would remove {len(found)}: " + (", ".join(found) or "nothing"), highlight=False)
        else:
            out.print(f"{where}: removed {len(r['removed'])}" + "".join(f"\n  {x}" for x in r["removed"]),
                      highlight=False)


@click.group()
def testbed() -> None:
    """A local testbed: real SSH hosts on this machine, each an sshd in its own network namespace.

    For trying remote runs without remote machines. The hosts share this machine's kernel and
    CPU, so their figures measure the network path and the remote machinery, not separate machines.
    Needs root, iproute2 and openssh-server.
    """


testbed.add_command(k8s_testbed.k8s)


@testbed.command("up")
@click.argument("count", type=click.IntRange(1, 200))
@click.option("--inventory", "-i", "inventory", required=True, type=click.Path(dir_okay=False),
              help="inventory file to write (Ansible-style YAML), which run, hosts, boot, check and doctor take as --inventory")
@click.option("--name", "prefix", metavar="NAME",
              help=f"testbed name, {NAME_RULE}: prefix of its namespaces and links; several testbeds "
                   "can coexist [default: tb<user>, e.g. tbalice]")
@click.option("--subnet", help="the testbed's private subnet [default: the first free 10.214.N.0/24]")
@click.option("--delay", "delay_ms", type=click.FloatRange(0, 10000), metavar="MS",
              help="delay in each direction between the hosts and this machine (tc netem; kernels without "
                   "sch_netem refuse it)")
@click.option("--rate", "rate_mbit", type=click.FloatRange(0.01, 100000), metavar="MBIT",
              help="bandwidth cap in each direction (tc tbf)")
@click.option("--disk-size", metavar="SIZE",
              help="give each host a tmpfs of this size (e.g. 64M) as its virtbench dir, to try a full remote disk")
def testbed_up(count, inventory, prefix, subnet, delay_ms, rate_mbit, disk_size) -> None:
    """Start COUNT SSH hosts and write an inventory of them. The testbed records who made it; runs that
    use it register while they run."""
    from ..machines import testbed as tb

    prefix = prefix or tb.default_name()
    path = tb.up(count, inventory, prefix=prefix, subnet=subnet, delay_ms=delay_ms, rate_mbit=rate_mbit,
                 disk_size=disk_size)
    for h in tb.status(prefix, probe=False)["hosts"]:
        out.print(f"{h['name']}  {h['address']}  (netns {h['netns']})", highlight=False)
    out.print(f"inventory: {path}", highlight=False)
    out.print(f"note: {tb.SHARED_NOTE}.", highlight=False)
    out.print(f"remove with: virtbench testbed down --name {prefix}", highlight=False)


@testbed.command("down")
@click.option("--name", "prefix", metavar="NAME", help="testbed name [default: tb<user>]")
@click.option("--force", is_flag=True, help="remove it even while a run uses it (that run's repetitions then fail)")
def testbed_down(prefix, force) -> None:
    """Stop a testbed's hosts and remove everything it made (also after an interrupted up). Refuses
    while a live run uses the testbed, and names the run; returns once the processes are reaped."""
    from ..machines import testbed as tb

    prefix = prefix or tb.default_name()
    removed = tb.down(prefix, force=force)
    for item in removed:
        out.print(f"removed {item}", highlight=False)
    if not removed:
        out.print(f"testbed {prefix}: nothing to remove", highlight=False)
    if left := tb.leftovers(prefix):
        raise UserError(f"testbed {prefix}: could not remove: {', '.join(left)}")


@testbed.command("status")
@click.option("--name", "prefix", metavar="NAME", help="testbed name [default: tb<user>]")
@click.option("--json", "as_json", is_flag=True, help="print the status as one JSON object (exit 0 whatever it says)")
def testbed_status(prefix, as_json) -> None:
    """Show a testbed's hosts and whether each answers over ssh, who made it and which runs use it.
    Exits 1 when the testbed is not up or a host does not answer (as `hosts` and `testbed k8s status`)."""
    from ..machines import testbed as tb

    prefix = prefix or tb.default_name()
    data = tb.status(prefix)
    if as_json:
        emit_json(data)
        return
    if not data["hosts"]:
        out.print(f"testbed {prefix} is not up" + (f"; leftovers: {', '.join(data['leftovers'])}"
                                                   if data["leftovers"] else ""), highlight=False)
        sys.exit(1)
    for h in data["hosts"]:
        mark = "[green]up[/green]  " if h["answers"] else "[red]DOWN[/red]"
        out.print(f"{mark} {h['name']}  {h['address']}  (netns {h['netns']})", highlight=False)
    if data.get("owner"):
        out.print(f"made by {data['owner']['user']} at {render.when(data['owner']['created'])}", highlight=False)
    for r in data.get("runs") or []:
        out.print(f"in use by run {r['run_id']} (user {r['user']}, pid {r['pid']})", highlight=False)
    if not all(h["answers"] for h in data["hosts"]):
        sys.exit(1)
