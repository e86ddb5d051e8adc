"""Clusters: placement and mpirun options (pure), memory-pressure detection (pure and for real: an OOM
kill inside a memory-limited container), and a real 2-container cluster brought up, used for
PingPong and an NPB kernel across the bridge, and torn down with nothing left behind."""

import os
import shutil

import pytest

from virtbench import analysis, procs, suite, workloads
from virtbench.workloads import mpicluster as cluster
from virtbench.drivers.base import DriverContext, Instance
from virtbench.model import EnvSpec, ExecResult, Shape
from virtbench.run.runner import Runner
from virtbench.store import Store
from virtbench.workloads import mpi
from virtbench.workloads.base import RunContext

from instkit import ours

HAVE_PODMAN = bool(shutil.which("podman")) and procs.run(["podman", "info"], timeout=60).ok
podman = pytest.mark.skipif(not HAVE_PODMAN, reason="podman is not installed or 'podman info' fails")


class FakeInstance(Instance):
    """Records commands; answers like a container whose address is 10.88.0.x."""

    def __init__(self, name, driver="container", address="10.88.0.2"):
        super().__init__(name, EnvSpec("c", driver, Shape("s", 2, 512)), "node", 0)
        self.address = address
        self.commands = []

    def exec(self, argv, timeout=None, stdin=None, env=None):
        self.commands.append(list(argv))
        return ExecResult(list(argv), 0, "", "", 0.0, 0.0)

    def bin(self, name): return f"/opt/virtbench/bin/{name}"
    def scratch_dir(self): return "/tmp/vb-scratch"
    def _destroy(self): ...


def test_placement_block_and_round_robin():
    c = cluster.Cluster([FakeInstance("a"), FakeInstance("b")], "ssh", "10.88.0.0/16", [2, 2])
    assert [p["ranks"] for p in c.placement(4, "slot")] == [[0, 1], [2, 3]]
    assert [p["ranks"] for p in c.placement(4, "node")] == [[0, 2], [1, 3]]
    assert [p["instance"] for p in c.placement(2)] == ["a", "b"]
    with pytest.raises(ValueError, match="evenly"):
        c.placement(3)
    assert c.oversubscribed(4, 1) is False and c.oversubscribed(4, 2) is True


def test_passive_openmp_wait_only_when_threads_share_cores():
    """Threads per rank > 1 on instances with fewer vCPUs than busy threads: OMP_WAIT_POLICY=passive (spinning
    waiters would take the cores the other threads need); one thread per rank, or room for all: unchanged."""
    # two SSH hosts of 2 vCPUs each (their own machines)
    a, b = FakeInstance("a", "ssh", "10.88.0.2"), FakeInstance("b", "ssh", "10.88.0.3")
    c = cluster.Cluster([a, b], "ssh", "10.88.0.0/16", [2, 2])
    for ranks, threads, passive in ((4, 2, True), (2, 2, False), (4, 1, False), (8, 1, False)):
        run = c.run(["x"], ranks, threads=threads)
        assert ("OMP_WAIT_POLICY=passive" in run.argv) is passive, (ranks, threads)
        assert ("OMP_WAIT_POLICY=passive" in c.metadata(run, threads)["mpirun"]) is passive
    # two containers of 2 vCPUs on this machine: 2 x 2 threads are more than its cores (if it has fewer than 4)
    local = cluster.Cluster([FakeInstance("a"), FakeInstance("b", address="10.88.0.3")], "ssh", "10.88.0.0/16", [2, 2])
    run = local.run(["x"], 2, threads=2)
    assert ("OMP_WAIT_POLICY=passive" in run.argv) is (len(os.sched_getaffinity(0)) < 4)


def test_mpirun_options_for_an_ssh_cluster():
    a, b = FakeInstance("a", address="10.88.0.2"), FakeInstance("b", address="10.88.0.3")
    c = cluster.Cluster([a, b], "ssh", "10.88.0.0/16", [2, 2])
    argv = c.mpirun_argv(["/opt/virtbench/bin/vb-npb", "ep", "S"], 4, threads=2, map_by="node", oversubscribe=True)
    text = " ".join(argv)
    assert argv[:2] == ["mpirun", "--allow-run-as-root"] and argv[-3:] == ["/opt/virtbench/bin/vb-npb", "ep", "S"]
    for part in ("-np 4", "--map-by node", "--bind-to none", "-x OMP_NUM_THREADS=2", "--oversubscribe",
                 "plm_rsh_no_tree_spawn 1", "oob_tcp_if_include 10.88.0.0/16", "btl_tcp_if_include 10.88.0.0/16",
                 "btl_vader_single_copy_mechanism none"):
        assert part in text, part
    rsh = argv[argv.index("plm_rsh_args") + 1]
    assert rsh.startswith(f"-p {cluster.SSH_PORT} -i /tmp/vb-scratch/vb-mpi/id") and "StrictHostKeyChecking=yes" in rsh
    assert "UserKnownHostsFile=/tmp/vb-scratch/vb-mpi/known_hosts" in rsh
    # the hostfile went to the launcher once: one line per instance with its slots
    (write,) = [cmd for cmd in a.commands if cmd[:2] == ["sh", "-c"]]
    assert write[-1].startswith("/tmp/vb-scratch/vb-mpi/hostfile-")
    c.mpirun_argv(["x"], 4)
    assert len([cmd for cmd in a.commands if cmd[:2] == ["sh", "-c"]]) == 1  # cached


def test_host_clusters_run_locally_without_ssh(tmp_path):
    from virtbench.drivers.host.driver import HostDriver
    insts = HostDriver(DriverContext("t", tmp_path)).provision(EnvSpec("host", "host", Shape("native")), 2, "node")
    try:
        c = cluster.get(insts)
        assert c.mode == "local" and c.subnet is None and cluster.get(insts) is c
        argv = c.mpirun_argv(["true"], 2)
        assert "plm_rsh_args" not in argv and "btl_tcp_if_include" not in argv
        assert "btl" not in argv  # Open MPI's choice: shared memory between the ranks of one machine
        tcp = c.mpirun_argv(["true"], 2, transport="tcp")  # a network path, as between separate machines
        assert tcp[tcp.index("btl") - 1:tcp.index("btl") + 2] == ["--mca", "btl", "self,tcp"]
        assert (tmp_path / insts[0].scratch_dir()).exists()
        hostfile = argv[argv.index("--hostfile") + 1]
        assert open(hostfile).read() == "localhost slots=2\n"
    finally:
        for i in insts:
            i.teardown()


def test_memory_pressure_from_counters():
    before = {"i": cluster.parse_counters("SwapFree_kb=1000\nvmstat_pswpout=5\ncgroup_oom_kill=0\nvmstat_oom_kill=3\n"
                                          "cgroup_max=0\nMemAvailable_kb=100\n")}
    same = cluster.memory_pressure(before, before)
    assert same["memory_pressure"] is False and same["warnings"] == []
    after = {"i": {**before["i"], "SwapFree_kb": 500, "vmstat_pswpout": 105, "cgroup_oom_kill": 1,
                   "vmstat_oom_kill": 4, "cgroup_max": 7}}
    p = cluster.memory_pressure(before, after)
    assert p["memory_pressure"] is True
    assert p["memory"]["i"] == {"swap_used_kb": 500, "swapped_out_pages": 100, "oom_kills_instance": 1,
                                "oom_kills_machine": 1, "limit_hits": 7, "mem_available_kb_after": 100}
    (w,) = p["warnings"]
    assert "1 OOM kill(s) in the instance" in w and "swap use grew" in w and "limit was hit 7" in w
    assert "lack of memory" in w
    assert cluster.memory_pressure({"i": {}}, {"i": {}})["memory_pressure"] is False  # unreadable: no claim


def test_swap_room_counts_swap_only_where_every_instance_has_it():
    a = cluster.parse_counters("MemAvailable_kb=60000\nSwapTotal_kb=1048572\nSwapFree_kb=1000000\n")
    b = {**a, "MemAvailable_kb": 50000, "SwapFree_kb": 900000}
    assert cluster.swap_room({"a": a, "b": b}) == 950000 * 1024  # the smallest instance's
    assert cluster.swap_room({"a": a, "b": {**b, "SwapTotal_kb": 0}}) is None
    assert cluster.swap_room({"a": {}}) is None and cluster.swap_room({}) is None


def test_warnings_of_the_harness_reach_the_samples():
    from virtbench.workloads import mpijob
    meta = mpijob.harness_metadata({"warnings": ["memory pressure on x: ..."], "oversubscribed": True,
                                    "oversubscription": "oversubscribed: 4 rank(s) x 1 thread(s) per instance"})
    assert meta["warnings"][0].startswith("memory pressure") and "oversubscribed: 4 rank(s)" in meta["warnings"][1]
    a, b = FakeInstance("a"), FakeInstance("b")
    c = cluster.Cluster([a, b], "ssh", "10.88.0.0/16", [1, 1])
    run = cluster.Run(None, [], [], c.placement(4), c.oversubscribed(4, 1), None)
    assert "2 rank(s) x 1 thread(s) per instance on 1 vCPU(s)" in c.metadata(run, 1)["oversubscription"]
    run = cluster.Run(None, [], [], c.placement(2), False, (8, 2))
    assert "8 busy threads" in c.metadata(run, 1)["oversubscription"]


# -- real containers ------------------------------------------------------------------------------

@podman
def test_two_container_cluster_pingpong_and_npb(driver):
    env = EnvSpec("ctr", "container", Shape("native"), {"engine": "auto", "runtime": "auto", "cgroup_manager": "auto"})
    nodes = driver.provision(env, 2, "node")
    try:
        c = cluster.get(nodes)
        assert c.mode == "ssh" and c.subnet and cluster.get(nodes) is c  # set up once, then cached
        # passwordless SSH both ways (the key is on every instance)
        back = nodes[1].exec(["ssh", "-p", str(cluster.SSH_PORT), "-i", "/tmp/vb-scratch/vb-mpi/id",
                              *cluster.ssh_options(nodes[1]), nodes[0].address, "hostname"], timeout=60)
        assert back.ok and back.stdout.strip() == nodes[0].name[:63], back

        wl = workloads.get("mpi")
        params = {"op": "pingpong", "min_bytes": 1, "max_bytes": 4096, "ranks": 2, "instances": 2, "map_by": "node",
                  "time_budget": 0.01, "iterations": 0}
        samples = wl.parse(wl.execute({"node": nodes}, params, RunContext(timeout=180)), params)
        times = [s for s in samples if s.metric == "time_us"]
        assert [s.metadata["bytes"] for s in times] == mpi.sizes("pingpong", 1, 4096)
        placement = times[0].metadata["placement"]
        assert [(p["instance"], p["ranks"]) for p in placement] == [(nodes[0].name, [0]), (nodes[1].name, [1])]
        assert times[0].metadata["memory_pressure"] is False and set(times[0].metadata["memory"]) == set(c.names)

        npb = workloads.get("npb")
        p = {"kernel": "cg", "class": "S", "ranks": 2, "instances": 2, "threads": 1, "total_vcpus": 0}
        mops, _ = npb.parse(npb.execute({"node": nodes}, p, RunContext(timeout=180)), p)
        assert mops.metadata["verified"] is True and mops.metadata["cluster_mode"] == "ssh"
    finally:
        for n in nodes:
            n.teardown()
    assert ours(driver.context.run_id) == []


@podman
def test_oom_kill_inside_a_limited_container_is_detected(driver):
    nodes = driver.provision(EnvSpec("ctr", "container", Shape("m", 1, 96), {"engine": "auto", "runtime": "auto",
                                                                           "cgroup_manager": "auto"}), 1, "node")
    try:
        c = cluster.get(nodes)
        before = c.memory_snapshot()
        assert "cgroup_oom_kill" in before[nodes[0].name] or "cgroup_oom" in before[nodes[0].name]
        # tail keeps the whole (newline-free) input in memory: killed at the 96 MB limit
        res = nodes[0].exec(["sh", "-c", "head -c 400000000 /dev/zero | tail -n 1 > /dev/null"], timeout=120)
        assert not res.ok
        p = cluster.memory_pressure(before, c.memory_snapshot())
        assert p["memory_pressure"] is True and p["memory"][nodes[0].name]["oom_kills_instance"] >= 1
        assert "OOM kill(s) in the instance" in p["warnings"][0]
    finally:
        nodes[0].teardown()


@podman
def test_runner_brings_up_and_tears_down_a_container_cluster(guest_image, tmp_path):
    """Host and a 2-container cluster compared in one run; the containers are gone afterwards."""
    store = Store(tmp_path / "r.sqlite")
    m = suite.adhoc("mpi", {"op": "pingpong", "max_bytes": "64", "time_budget": "0.01", "instances": "2"},
                    ["host", "container"], repeat=1)
    m.policy.warmup = 0
    run_id = Runner(store, m).start()
    assert store.run(run_id)["status"] == "completed"
    rows = [r for r in analysis.results(store, run_id)["results"] if r["metric"] == "time_us"]
    envs = {r["environment"] for r in rows if r["n"] == 1}
    assert envs == {"host", "container"}, [r["warnings"] for r in rows]
    ctr = [r for r in rows if r["environment"] == "container"]
    assert all(r["metadata"]["cluster_mode"] == "ssh" for r in ctr)
    assert all(r["ratio"] is not None for r in ctr)  # compared with the host
    assert ours(run_id) == []
