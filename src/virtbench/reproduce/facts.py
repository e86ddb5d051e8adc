"""The facts of this machine that decide which experiments of `virtbench reproduce` can run: the
accelerator QEMU has, a cluster, an NFS client, an inventory's hosts, a cloud, and how busy the CPU is
(cpu_probe, also what reproduce.py's estimates scale recorded times by)."""

from __future__ import annotations

import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from collections.abc import Callable
from typing import Any

from . import testbed as reproduce_testbed
from ..errors import UserError
from ..machines import Machine, local
from ..machines.nfsclient import kernel_nfs_client

# told of each check as it starts (label, None) and as it ends (label, what it found)
Progress = Callable[[str, "str | None"], None]


def machine_facts(kubeconfig: str | None, inventory: str | None = None, hosts: str = "all",
                  cloud: dict[str, Any] | None = None, progress: Progress | None = None,
                  testbed: bool = False, testbed_name: str | None = None) -> dict[str, Any]:
    """What decides which experiments can run: the accelerator QEMU has, a cluster (--kubeconfig's;
    with `testbed` this machine's testbed cluster `testbed_name` (None: the one up here, whatever its
    name), up or to be started; without, whether one is up
    here, for the plan's advice), an NFS client, the inventory's hosts (by name; whether they answer
    is found when they are used, as in `run`), the cloud of the --cloud settings (what answers its
    API). `progress` hears of each check."""
    say = progress or (lambda label, found: None)

    def check(label: str, fn: Callable[[], Any], found: Callable[[Any], str]) -> Any:
        say(label, None)
        t0 = time.monotonic()
        value = fn()
        say(label, f"{found(value)} ({time.monotonic() - t0:.1f} s)")
        return value

    facts: dict[str, Any] = {"cores": os.cpu_count() or 1, "load_1m": load_1m(),
                             "cluster": bool(kubeconfig) or testbed, "testbed": testbed}
    facts["probe_s"] = check("CPU probe", cpu_probe, lambda s: f"{s * 1000:.0f} ms of fixed work, load "
                             f"{facts['load_1m'] or 0:.2f} on {facts['cores']} cores")
    if not kubeconfig:
        facts["testbed_up"] = check("Kubernetes testbed", lambda: reproduce_testbed.running(testbed_name), lambda kc: (
            f"up ({kc})" if kc else "to be started for the run, stopped after" if testbed
            else "none up (--testbed starts one for the run)"))
    if facts["cluster"]:
        # --testbed with the testbed up: that cluster, described as any other
        facts["cluster_detail"] = check("cluster", lambda: cluster_detail(kubeconfig or facts.get("testbed_up"),
                                                                          testbed), lambda d: d)
    facts["nfs"], facts["nfs_detail"] = check("NFS client", nfs_client, lambda found: found[1])
    facts["hosts"] = check("inventory hosts", lambda: inventory_hosts(inventory, hosts),
                           lambda names: ", ".join(names)) if inventory else []
    facts["cloud"] = check("cloud API", lambda: cloud_facts(cloud, inventory),
                           lambda c: f"{c['backend']} ({c['region']})") if cloud else None
    accel = check("QEMU's accelerator", _accelerator, _accelerator_found)
    facts["accelerator"], facts["accelerator_detail"] = accel[0], accel[1]
    facts["accelerator_probed_at"] = accel[2]
    return facts


def _accelerator_found(accel: tuple[str | None, str, float | None]) -> str:
    name, _, probed_at = accel
    when = (f"probed {time.strftime('%H:%M', time.localtime(probed_at))}, kept for this boot"
            if probed_at else "not kept: probed again next time")
    return f"{name or 'none'} ({when})"


def cloud_options(pairs: list[str] | tuple[str, ...]) -> dict[str, Any]:
    """--cloud KEY=VALUE ... -> the cloud driver's options (checked: a mistake stops the command now)."""
    from ..run.boot import coerce_options

    raw = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise UserError(f"--cloud {pair!r} is not KEY=VALUE",
                            "e.g. --cloud endpoint=https://ec2.example.org:8773/ --cloud image=ami-...")
        raw[key.strip()] = value.strip()
    opts = coerce_options("cloud", raw)
    if not opts.get("image") and not opts.get("images"):
        raise UserError("--cloud needs an image: image=ID, or images=SIZE=ID,... (one image per size)",
                        "an image id of the region (ami-..., emi-...)")
    return opts


def cloud_facts(opts: dict[str, Any], inventory: str | None = None) -> dict[str, Any]:
    """What answers the cloud's API (moto's server is named "moto": it starts no machine) and whether
    SSH goes to stand-in hosts, as the cloud driver labels every result."""
    from ..drivers.cloud import ec2 as api
    from ..machines import inventory as inventory_mod

    target = api.Target.from_options(opts)
    backend = api.backend(target)
    if opts.get("ssh_override"):
        if not inventory:
            raise UserError("--cloud ssh_override needs --inventory (the hosts SSH reaches instead)")
        specs = inventory_mod.load(inventory).select(opts["ssh_override"])
        backend += "+testbed" if specs and all(h.vars.get("virtbench_testbed") for h in specs) else "+ssh_override"
    return {"backend": backend, "region": target.region, "endpoint": target.endpoint_host,
            "emulated": backend.startswith("moto")}


def inventory_hosts(inventory: str, pattern: str = "all") -> list[str]:
    """The names of the inventory's hosts that `pattern` selects (a mistake stops the command now)."""
    from ..machines import inventory as inventory_mod

    specs = inventory_mod.load(inventory).select(pattern)
    if not specs:
        raise UserError(f"--hosts {pattern!r} selects no host of {inventory}", "name a group or hosts of it")
    return [h.name for h in specs]


def load_1m() -> float | None:
    try:
        return os.getloadavg()[0]
    except OSError:
        return None


def describe_nodes(nodes: list[tuple[str, str | None]]) -> str:
    """What a cluster is, from its nodes' (name, boot id): nodes with one boot id run on one kernel,
    so on one machine playing several nodes (pure)."""
    if not nodes:
        return "no nodes"
    boots = {b for _, b in nodes if b}
    names = ", ".join(n for n, _ in nodes)
    if len(nodes) == 1:
        return f"1 node ({names})"
    if len(boots) == 1:
        return f"{len(nodes)} nodes ({names}) on one machine (one boot id): one machine playing a cluster"
    if len(boots) == len(nodes):
        return f"{len(nodes)} nodes ({names}) on {len(nodes)} separate machines (a boot id each)"
    return f"{len(nodes)} nodes ({names}) on {len(boots)} machines (boot ids)" if boots else \
        f"{len(nodes)} nodes ({names}); their machines unknown (no boot ids reported)"


def cluster_detail(kubeconfig: str | None, testbed: bool) -> str:
    """The cluster the pods experiments would use, described as what it is (describe_nodes)."""
    if not kubeconfig:
        return ("the testbed (virtbench testbed k8s), started for the run: its nodes are network namespaces "
                "of this one machine, one machine playing a cluster")
    old = os.environ.get("KUBECONFIG")
    os.environ["KUBECONFIG"] = kubeconfig
    try:
        from ..drivers.pods.kubernetes_backend import PROBE_TIMEOUT, Cluster

        c = Cluster()
        items = c.core.list_node(_request_timeout=PROBE_TIMEOUT).items
        return describe_nodes([(n.metadata.name, getattr(n.status.node_info, "boot_id", None)
                                if n.status and n.status.node_info else None) for n in items])
    except Exception as exc:  # no client library, no answer: said, the run finds out when it starts pods
        return f"not described ({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''})"
    finally:
        if old is None:
            os.environ.pop("KUBECONFIG", None)
        else:
            os.environ["KUBECONFIG"] = old


def nfs_client(machine: Machine | None = None) -> tuple[bool, str]:
    """Can this machine mount NFS the way storage=nfs does on a host or a pod (conditions/nfs.py):
    a kernel NFS client, loaded on demand ('modprobe nfs', nfsclient.kernel_nfs_client), and
    mount.nfs4 (nfs-common)? (whether, and what was found or why not)"""
    m = machine or local()
    ok, why = kernel_nfs_client(m)
    if not ok:
        return False, why
    if not m.which("mount.nfs4"):
        return False, "the kernel has an NFS client, but mount.nfs4 is not installed (apt-get install nfs-common)"
    return True, "the kernel's NFS client (loaded) and mount.nfs4"


def _accelerator() -> tuple[str | None, str, float | None]:
    """KVM only if a real probe boot works, else TCG; the detail, and when the answer was probed
    (None: not kept). The vm driver keeps it per machine boot, QEMU and guest kernel (drivers/vm/accel_probe.py)."""
    from .. import drivers, image, machines
    from ..drivers.base import DriverContext

    workdir = Path(tempfile.mkdtemp(prefix="virtbench-reproduce-probe-"))
    pool = machines.pool_for(None)
    try:
        ctx = DriverContext("reproduce-probe", workdir, image.require(), pool)
        got = drivers.make("vm", ctx).accelerator("auto")
        return got["accel"], got.get("kvm_problem") or "", got.get("probed_at")
    except UserError as exc:
        return None, str(exc), None
    finally:
        pool.close()
        shutil.rmtree(workdir, ignore_errors=True)


def cpu_probe(work: int = 200_000, rounds: int = 5) -> float:
    """Seconds a fixed piece of CPU work takes now (median of a few rounds): how busy the machine is for
    us. Load averages overstate it (niced builds, processes waiting on I/O); this measures it."""
    times = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        acc = 0
        for i in range(work):
            acc ^= i * 2654435761 % 4294967291
        times.append(time.perf_counter() - t0)
    return statistics.median(times)
