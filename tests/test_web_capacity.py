"""The web workload's server capacity (the denominator of server_cpu_util) on raw reports captured
from real runs: 8 pods behind nginx on the two-node Kubernetes testbed and one QEMU VM, both from a
run before servers recorded their kernel, and the same reports with kernels added as a run records
them now. Plus the kernel facts read inside a real instance (the host)."""

import copy
import json
import os
from pathlib import Path

import pytest

from virtbench import kernel_identity
from virtbench.workloads import get

DATA = Path(__file__).parent / "data" / "web"
BOOT_A = "6e88d76f-3b8d-4457-a6b1-0dbe12eaef29"
BOOT_B = "0b1c2d3e-4f50-4a61-8b72-9c83d4e5f607"


def _report(name):
    return json.loads((DATA / name).read_text())


def _samples(report):
    wl = get("web")
    return {s.metric: s for s in wl.parse(json.dumps(report), report["params"])}


def _cores(report):
    return sum(s["cpu_s"] for s in report["servers"]) / report["client"]["wall_s"]


def _on_kernels(report, kernels):
    """The report with server i on kernels[i] = (boot id, that kernel's CPUs)."""
    out = copy.deepcopy(report)
    for s, (boot, cpus) in zip(out["servers"], kernels, strict=True):
        s["boot_id"], s["kernel_cpus"] = boot, cpus
    return out


def test_old_pod_report_keeps_todays_rule():
    # 8 pods without a CPU limit, each entitled to its node's 2 CPUs, on a cluster (not the host's
    # kernel as far as the old report knows): 16 CPUs, the 2 % the issue was about.
    old = _report("pods8_two_nodes_v1.json")
    got = _samples(old)["server_cpu_util"]
    assert got.metadata["server_capacity"] == 16
    assert got.metadata["server_kernels"] == [] and got.metadata["server_capacity_rule"].startswith("no kernel")
    assert got.value == pytest.approx(_cores(old) / 16)


def test_eight_unlimited_pods_on_two_nodes_of_one_kernel():
    # The testbed's two nodes are network namespaces of one machine: one boot id, its 2 CPUs.
    rep = _on_kernels(_report("pods8_two_nodes_v1.json"), [(BOOT_A, 2)] * 8)
    got = _samples(rep)
    util = got["server_cpu_util"]
    assert util.metadata["server_capacity"] == 2
    assert util.metadata["server_kernels"] == [{"boot_id": BOOT_A, "kernel_cpus": 2, "servers": 8,
                                                "entitled": 16.0, "capacity": 2}]
    assert util.metadata["server_capacity_rule"] == "per kernel"
    assert util.value == pytest.approx(_cores(rep) / 2) == pytest.approx(1.65 / 5.07916522026062 / 2)
    assert got["server_cpu_cores"].value == pytest.approx(_cores(rep))  # the numerator is unchanged


def test_pods_with_limits_below_the_kernels_cpus():
    # 8 pods limited to 0.125 CPU each on a 2-CPU kernel: their limits (1 CPU) are the capacity.
    rep = _on_kernels(_report("pods8_two_nodes_v1.json"), [(BOOT_A, 2)] * 8)
    for s in rep["servers"]:
        s["vcpus"] = 0.125
    util = _samples(rep)["server_cpu_util"]
    assert util.metadata["server_capacity"] == 1.0
    assert util.value == pytest.approx(_cores(rep) / 1.0)


def test_servers_on_two_kernels():
    # Two machines of 2 and 4 CPUs, 4 unlimited pods on each: min(8, 2) + min(16, 4) = 6.
    rep = _on_kernels(_report("pods8_two_nodes_v1.json"), [(BOOT_A, 2)] * 4 + [(BOOT_B, 4)] * 4)
    for s in rep["servers"][4:]:
        s["vcpus"] = 4.0
    util = _samples(rep)["server_cpu_util"]
    assert util.metadata["server_capacity"] == 6
    assert {k["boot_id"]: (k["servers"], k["entitled"], k["capacity"]) for k in util.metadata["server_kernels"]} == \
        {BOOT_A: (4, 8.0, 2), BOOT_B: (4, 16.0, 4)}
    assert util.value == pytest.approx(_cores(rep) / 6)


def test_a_vm_is_its_own_kernel():
    old = _report("vm_workers2_v1.json")  # one VM of 2 vCPUs serving, 7.83 CPU s in its guest
    before = _samples(old)["server_cpu_util"]
    assert before.metadata["server_capacity"] == 2 and before.metadata["server_capacity_rule"].startswith("no kernel")
    rep = _on_kernels(old, [(BOOT_B, 2)])  # its guest's boot id, its 2 vCPUs
    util = _samples(rep)["server_cpu_util"]
    assert util.metadata["server_capacity"] == 2 and util.metadata["server_capacity_rule"] == "per kernel"
    assert util.value == pytest.approx(before.value) == pytest.approx(7.83 / old["client"]["wall_s"] / 2)


def test_a_report_missing_one_servers_kernel_falls_back_whole():
    # A server whose kernel could not be read: the old rule for all (never a partial per-kernel sum).
    rep = _on_kernels(_report("pods8_two_nodes_v1.json"), [(BOOT_A, 2)] * 8)
    del rep["servers"][3]["boot_id"]
    util = _samples(rep)["server_cpu_util"]
    assert util.metadata["server_capacity"] == 16 and util.metadata["server_kernels"] == []


def test_kernel_facts_parsed():
    assert kernel_identity.parse(f"{BOOT_A}\n0-1\n") == {"boot_id": BOOT_A, "kernel_cpus": 2}
    assert kernel_identity.parse(f"{BOOT_A}\n0-3,8-11\n") == {"boot_id": BOOT_A, "kernel_cpus": 8}
    assert kernel_identity.parse(f"{BOOT_A}\n") is None  # no CPU list (the file was unreadable)
    assert kernel_identity.parse("cat: /proc/sys/kernel/random/boot_id: No such file\n0-1\n") is None


def test_kernel_read_inside_the_host(tmp_path):
    from virtbench.drivers.host.driver import HostInstance
    from virtbench.model import EnvSpec, Shape

    inst = HostInstance("h", EnvSpec(name="host", driver="host", shape=Shape("native")), tmp_path, "server", 0)
    assert kernel_identity.read(inst) == {"boot_id": Path("/proc/sys/kernel/random/boot_id").read_text().strip(),
                                          "kernel_cpus": os.cpu_count()}
