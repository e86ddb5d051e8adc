"""VM networking for real (TCG here): two VMs of one run joined on a private L2 segment (QEMU socket
netdevs on one multicast group over loopback, NICs hot-plugged over QMP), an MPI PingPong across
it, nginx in a VM loaded by wrk on the host through a forwarded loopback port, and nothing left
behind after teardown. Both VMs are booted once for the module: under TCG a boot costs seconds."""

import ipaddress
import json
import os
import shutil
import subprocess
import uuid
from pathlib import Path

import pytest

from virtbench.workloads import mpicluster as cluster
from virtbench import workloads
from virtbench.drivers.vm import driver as vmdrv
from virtbench.drivers.base import DriverContext
from virtbench.model import EnvSpec, Shape
from virtbench.drivers.vm import disk
from virtbench.workloads import mpi
from virtbench.workloads.base import RunContext
from vbleftovers import snapshot

pytestmark = pytest.mark.slow

if not shutil.which("qemu-system-x86_64") or not shutil.which("qemu-img") or not shutil.which("ssh"):
    pytest.skip("needs QEMU and an ssh client (apt-get install qemu-system-x86 qemu-utils openssh-client)",
                allow_module_level=True)

# One vCPU each (2 VMs on a 2-core machine), names with ':' and '.' as suite environments have them.
ENV = EnvSpec("vm:c1.medium", "vm", Shape("c1.medium", 1, 256), {"ready_timeout": 300.0})


def _qemus(run_id: str) -> list[str]:
    out = subprocess.run(["pgrep", "-af", "qemu-system"], capture_output=True, text=True).stdout
    return [line for line in out.splitlines() if f"vb-{run_id[:15]}" in line]


@pytest.fixture(scope="module")
def vms(guest_image, tmp_path_factory):
    if os.geteuid() != 0 and not (disk.artifacts_dir(guest_image.hash) / "boot.json").exists():
        pytest.skip("building the VM disk needs root the first time")
    driver = vmdrv.VmDriver(DriverContext(f"t{uuid.uuid4().hex[:8]}", tmp_path_factory.mktemp("vmc"), guest_image))
    nodes = driver.provision(ENV, 2, "node")
    state = {"driver": driver, "nodes": nodes}
    yield state
    driver.close()


def test_two_vm_cluster_runs_pingpong_across_the_segment(vms):
    nodes = vms["nodes"]
    assert [n.address for n in nodes] == [None, None]  # user-mode networking only, until clustered
    c = cluster.get(nodes)
    assert c.mode == "ssh" and cluster.get(nodes) is c
    net = ipaddress.ip_network(c.subnet)
    assert str(net).startswith("10.213.") and all(ipaddress.ip_address(n.address) in net for n in nodes)
    assert c.network["mechanism"].startswith("qemu socket netdev") and c.network["group"].startswith("239.")
    # Names from /etc/hosts, and SSH both ways over the segment.
    back = nodes[1].exec(["ssh", "-p", str(cluster.SSH_PORT), "-i", f"{nodes[1].scratch_dir()}/vb-mpi/id",
                          *cluster.ssh_options(nodes[1]), nodes[0].hostname, "hostname"], timeout=60)
    assert back.ok and back.stdout.strip() == nodes[0].hostname, back

    wl = workloads.get("mpi")
    params = {"op": "pingpong", "min_bytes": 1, "max_bytes": 1024, "ranks": 2, "instances": 2, "map_by": "node",
              "time_budget": 0.01, "iterations": 0}
    samples = wl.parse(wl.execute({"node": nodes}, params, RunContext(timeout=300)), params)
    times = [s for s in samples if s.metric == "time_us"]
    assert [s.metadata["bytes"] for s in times] == mpi.sizes("pingpong", 1, 1024)
    assert all(s.value > 0 for s in times)
    meta = times[0].metadata
    assert [(p["instance"], p["address"], p["ranks"]) for p in meta["placement"]] == \
        [(nodes[0].name, nodes[0].address, [0]), (nodes[1].name, nodes[1].address, [1])]
    assert meta["cluster_network"]["subnet"] == c.subnet and f"btl_tcp_if_include {c.subnet}" in meta["mpirun"]
    assert nodes[0].metadata()["cluster_network"]["address"] == nodes[0].address


def test_nginx_in_a_vm_through_a_forwarded_port(vms):
    inst = vms["nodes"][0]
    wl = workloads.get("web")
    params = {p.name: p.default for p in wl.params}
    params.update(replicas=1, balancer="none", workers=1, duration=1.0, connections=4, threads=1)
    raw = wl.execute({"server": [inst]}, params, RunContext(timeout=120))
    by = {s.metric: s for s in wl.parse(raw, params)}
    assert by["requests_per_second"].value > 0 and by["errors"].value == 0
    # The VM is a kernel of its own: its guest's boot id, not this machine's, and its 1 vCPU.
    server = json.loads(raw)["servers"][0]
    assert server["boot_id"] != Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    assert server["kernel_cpus"] == 1 and by["server_cpu_util"].metadata["server_capacity"] == 1
    host, port = inst.forward_port(8080)
    assert host == "127.0.0.1" and inst.forward_port(8080) == (host, port)  # one rule, reused
    assert inst.metadata()["port_forwards"] == {"8080": port}

    # A balancer VM reaches its server VM over the segment; wrk reaches the balancer's forward.
    nodes = vms["nodes"]
    params.update(balancer="nginx")
    samples = wl.parse(wl.execute({"server": [nodes[1]], "lb": [nodes[0]]}, params, RunContext(timeout=120)), params)
    by = {s.metric: s for s in samples}
    assert by["requests_per_second"].value > 0 and by["errors"].value == 0


def test_teardown_leaves_nothing(vms):
    driver, nodes = vms["driver"], vms["nodes"]
    run_dir = driver._run_dir
    for n in nodes:
        n.teardown()
    assert not driver._live and driver._run_dir is None and not run_dir.exists()
    assert _qemus(driver.context.run_id) == []
    # Nothing of this process on the host (tgtd's sockets are machine-wide: other processes' show there).
    left = {k: v for k, v in snapshot().items() if v and k != "tgt_sockets"}
    assert not left, f"left behind: {left}"
