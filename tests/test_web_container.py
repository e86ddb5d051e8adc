"""The web workload for real in containers: 1 and 2 nginx replicas behind the nginx balancer,
loaded by wrk on the host, with the monitor's series for every instance."""

import json
import os
import shutil
from pathlib import Path

import pytest

from virtbench import analysis, suite
from virtbench.run.runner import Runner
from virtbench.store import Store
from virtbench.workloads.web import peak

pytestmark = pytest.mark.skipif(not (shutil.which("podman") and shutil.which("wrk")),
                                reason="needs podman and wrk (setup.sh installs them)")


def test_replicas_in_containers(tmp_path, guest_image):
    store = Store(tmp_path / "r.sqlite")
    m = suite.adhoc("web", {"replicas": "1,2", "duration": "2", "connections": "32"}, ["container"], repeat=1)
    m.policy.warmup = 0
    rid = Runner(store, m).start()
    attempts = store.attempts(rid)
    assert [a["status"] for a in attempts] == ["ok", "ok"], [a["reason"] for a in attempts]
    rows = analysis.results(store, rid)["results"]
    by = {(r["params"]["replicas"], r["metric"]): r["median"] for r in rows}
    for n in (1, 2):
        assert by[(n, "requests_per_second")] > 100
        assert 0 < by[(n, "latency_p50_ms")] <= by[(n, "latency_p90_ms")] <= by[(n, "latency_p99_ms")]
        assert by[(n, "errors")] == 0
        assert by[(n, "server_cpu_cores")] > 0 and by[(n, "lb_cpu_cores")] > 0 and by[(n, "client_cpu_cores")] > 0
        # The monitor, from inside the containers' cgroups, over wrk's window.
        assert by[(n, "server.cpu_util_mean")] > 0 and by[(n, "lb.cpu_util_mean")] > 0
        assert by[(n, "server.net_peak")] > 0 and by[(n, "host.cpu_util_mean")] > 0
    # the peak is the replica count with the higher median (which one is the machine's load; with 1
    # and 2 replicas "1 or 2" could not fail)
    rps = {n: by[(n, "requests_per_second")] for n in (1, 2)}
    assert peak(rows) == (max(rps, key=lambda n: (rps[n], -n)), max(rps.values()))
    # Series for the host and every instance used: 2 servers and the balancer.
    instances = {i["name"]: i["role"] for i in store.instances(rid)}
    assert sorted(instances.values()) == ["lb", "server", "server"]
    series = store.timeseries(rid)
    assert {r["instance"] for r in series} == {"host", *instances}
    second = attempts[1]["id"]
    assert {r["instance"] for r in series if r["attempt_id"] == second} == {"host", *instances}
    rx = [r["value"] for r in series if r["role"] == "lb" and r["metric"] == "net_rx_packets"]
    assert max(rx) > 100  # the balancer's own network namespace saw the load
    # Each container read its kernel inside: this machine's (boot id and CPUs), so the 2 servers,
    # each entitled to the host's CPUs, share those CPUs once in server_cpu_util's capacity.
    boot, cpus = Path("/proc/sys/kernel/random/boot_id").read_text().strip(), os.cpu_count()
    servers = [s for a in attempts for s in json.loads(a["raw_output"])["servers"]]
    assert [(s["boot_id"], s["kernel_cpus"]) for s in servers] == [(boot, cpus)] * 3
    util = {json.loads(r["params_json"])["replicas"]: json.loads(r["metadata_json"])
            for r in store.samples(rid) if r["metric"] == "server_cpu_util"}
    assert {n: m["server_capacity"] for n, m in util.items()} == {1: cpus, 2: cpus}
    assert util[2]["server_kernels"] == [{"boot_id": boot, "kernel_cpus": cpus, "servers": 2,
                                          "entitled": 2.0 * cpus, "capacity": cpus}]
