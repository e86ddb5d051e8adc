"""The Kubernetes testbed and the pods driver's kubernetes backend, live: a real 2-node cluster
(`virtbench testbed k8s up`), built once per content hash into the user's cache, then pods,
exec through the API server, Services, faults and a clean `down`. Nothing here is mocked.

The first session on a machine builds the cluster's binaries (minutes of CPU at nice 19); later
sessions and clean clones on the same machine reuse them."""

from __future__ import annotations

import datetime as dt
import fcntl
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from virtbench.errors import UserError
from virtbench.drivers.pods.testbed import up_down as cluster, configs, pki
from virtbench.drivers.pods.testbed.configs import Layout

ROOT = Path(__file__).resolve().parents[1]
NAME = "vbk8stest"  # the tests' own cluster: a test session never touches a user's (the default vbk8s)
LAY = Layout(NAME)
N1, N2 = LAY.node_name(1), LAY.node_name(2)
CLI = [sys.executable, "-m", "virtbench.cli"]


@pytest.fixture(scope="module")
def k8s(guest_image):
    """The tests' testbed cluster, 2 nodes, for this module; removed at its end. One per machine: a
    second session waits for the first; a user's cluster (another name) holds the machine's fixed
    ports, so the module does not run beside it."""
    lock = open("/run/virtbench-k8s-testbed.lock", "w")
    fcntl.flock(lock, fcntl.LOCK_EX)
    try:
        cluster.down(NAME)  # whatever a killed session left
        if others := [n for n in cluster.clusters_here() if n != NAME]:
            pytest.skip(f"testbed cluster {', '.join(others)} is up on this machine ({cluster.whose(Layout(others[0]))}): "
                        "one cluster per machine, and it is not the tests' to remove")
        t0 = time.monotonic()
        lay = cluster.up(2, name=NAME, log=lambda line: print(line, file=sys.stderr))
        print(f"k8s testbed up in {time.monotonic() - t0:.0f} s", file=sys.stderr)
        old = os.environ.get("KUBECONFIG")
        os.environ["KUBECONFIG"] = str(lay.kubeconfig)
        try:
            yield lay
        finally:
            if old is None:
                os.environ.pop("KUBECONFIG", None)
            else:
                os.environ["KUBECONFIG"] = old
            cluster.down(NAME, force=True)
    finally:
        lock.close()


def _driver(tmp_path, image, run_id="k8stest"):
    from virtbench.drivers.base import DriverContext
    from virtbench.drivers.pods.kubernetes_driver import KubernetesDriver

    return KubernetesDriver(DriverContext(run_id, tmp_path, image))


def _env(name="pods", shape=None, **opts):
    from virtbench.model import EnvSpec, Shape

    return EnvSpec(name, "pods", shape or Shape("native"), {"backend": "kubernetes", **opts})


def _virtbench_pods(lay):
    from virtbench.drivers.pods.kubernetes_backend import Cluster

    return [p["metadata"]["name"] for p in Cluster().core.list_namespaced_pod("default", label_selector="virtbench=1").to_dict()["items"]]


def _gone_within(seconds: float) -> None:
    """Every object virtbench labels is gone from the cluster within `seconds`."""
    from virtbench.drivers.pods.kubernetes_backend import Cluster

    deadline = time.monotonic() + seconds
    while (left := Cluster().labelled("virtbench=1")) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert left == []


def test_up_gives_two_ready_nodes_an_api_on_loopback_and_private_keys(k8s):
    from virtbench.drivers.pods.testbed.status import describe

    d = describe(k8s.kubeconfig)
    assert d["server_version"] == "v1.34.4"
    assert sorted(n["name"] for n in d["nodes"]) == [N1, N2]
    assert all(n["ready"] for n in d["nodes"])
    assert {n["address"] for n in d["nodes"]} == {"10.232.0.1", "10.232.0.2"}
    listening = subprocess.run(["ss", "-Htln"], capture_output=True, text=True).stdout.split("\n")
    api = [line.split()[3] for line in listening if line.split() and line.split()[3].endswith(":6443")]
    reg = [line.split()[3] for line in listening if line.split() and line.split()[3].endswith(":5000")]
    assert api == ["127.0.0.1:6443"] and reg == ["127.0.0.1:5000"]
    secret = [k8s.kubeconfig, *k8s.pki.glob("*.key"), *k8s.state.glob("n*/*.kubeconfig")]
    assert len(secret) >= 10
    for f in secret:
        assert f.stat().st_mode & 0o077 == 0, f
    assert json.loads(k8s.registry_file.read_text())["registry"] == "127.0.0.1:5000"


def test_hosts_and_doctor_report_the_cluster_of_the_kubeconfig(k8s):
    """What a user with KUBECONFIG set sees: the server version, the node names, Ready."""
    env = {**os.environ, "KUBECONFIG": str(k8s.kubeconfig)}
    hosts = subprocess.run([sys.executable, "-m", "virtbench.cli", "hosts", "--kubernetes", "--json"],
                           capture_output=True, text=True, timeout=120, env=env)
    assert hosts.returncode == 0, hosts.stderr
    rows = json.loads(hosts.stdout)
    assert [(r["name"], r["ready"], r["server_version"]) for r in rows] == \
        [(N1, True, "v1.34.4"), (N2, True, "v1.34.4")]
    bare = subprocess.run([sys.executable, "-m", "virtbench.cli", "hosts"], capture_output=True, text=True,
                          timeout=120, env=env)
    assert bare.returncode == 2 and "--kubernetes" in bare.stderr and str(k8s.kubeconfig) in bare.stderr
    doctor = subprocess.run([sys.executable, "-m", "virtbench.cli", "doctor", "--json"], capture_output=True,
                            text=True, timeout=300, env=env)
    (check,) = [c for c in json.loads(doctor.stdout) if c["name"] == "kubernetes cluster"]
    assert check["ok"] and "v1.34.4" in check["detail"] and str(k8s.kubeconfig) in check["detail"]
    assert f"{N1} (Ready), {N2} (Ready)" in check["detail"]


def test_hosts_doctor_and_reproduce_find_the_testbed_cluster_up_whatever_its_name(k8s, tmp_path):
    """No KUBECONFIG, and the cluster up is not the default vbk8s (`up --name`): hosts, doctor and
    reproduce --testbed find it and say which cluster they used; --name picks one, and a name that
    is not up is said so."""
    from virtbench.reproduce import testbed as reproduce_testbed

    env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
    hosts = subprocess.run([*CLI, "hosts", "--kubernetes", "--json"], capture_output=True, text=True, timeout=120,
                           env=env)
    assert hosts.returncode == 0, hosts.stderr
    assert [r["name"] for r in json.loads(hosts.stdout)] == [N1, N2]
    assert f"nodes of testbed cluster {NAME} (kubeconfig {k8s.kubeconfig})" in hosts.stderr
    named = subprocess.run([*CLI, "hosts", "--kubernetes", "--name", NAME], capture_output=True, text=True,
                           timeout=120, env=env)
    assert named.returncode == 0 and N1 in named.stdout, named.stderr
    other = subprocess.run([*CLI, "hosts", "--kubernetes", "--name", "vbnotup"], capture_output=True, text=True,
                           timeout=120, env=env)
    assert other.returncode != 0 and "testbed cluster vbnotup is not up" in other.stderr, other.stderr
    assert "virtbench testbed k8s up --name vbnotup" in other.stderr
    doctor = subprocess.run([*CLI, "doctor", "--json"], capture_output=True, text=True, timeout=300, env=env)
    (check,) = [c for c in json.loads(doctor.stdout) if c["name"] == "kubernetes cluster"]
    assert check["ok"] and check["detail"].startswith(f"testbed cluster {NAME}: "), check
    assert str(k8s.kubeconfig) in check["detail"]
    # reproduce --testbed (and the plan's child runs) take the cluster that is up
    lines = []
    with reproduce_testbed.cluster_for_run(lines.append) as kc:
        assert kc == str(k8s.kubeconfig)
    assert lines == [f"using testbed cluster {NAME}, which is up ({k8s.kubeconfig}); it stays up afterwards"]
    assert reproduce_testbed.kubeconfig() == k8s.kubeconfig and reproduce_testbed.name_of(kc) == NAME
    assert reproduce_testbed.running("vbnotup") is None
    plan = subprocess.run([*CLI, "reproduce", "004", "--testbed", "--plan", "--budget", "10m",
                           "--db", str(tmp_path / "p.sqlite")], capture_output=True, text=True, timeout=300, env=env)
    assert plan.returncode == 0, plan.stderr[-2000:]
    assert f"up ({k8s.kubeconfig})" in plan.stderr, plan.stderr[-2000:]


def test_a_reproduce_run_is_registered_with_the_cluster_between_its_child_runs(k8s, tmp_path, monkeypatch):
    """A reproduce run on the cluster holds it for its whole life, not only while a child run does:
    `down` tried as its second experiment starts (the first child's record gone) refuses, naming
    the reproduce run; after the run, no record is left. Two tiny host experiments, really run."""
    from virtbench import reproduce as rp
    from virtbench.reproduce import times as rt
    from virtbench.store import Store
    from virtbench.studies.model import Experiment, Tier

    def tiny(eid, test):
        return Experiment(eid, "000", f"tiny {test}", "quick.toml", ("host",), "system", {"copies": ["1"]},
                          tiers=(Tier(f"{test}, 1 repetition", 1, 5, params={"duration": 0.05},
                                      select={"test": [test]}),))

    seen = {}

    class DownBetweenChildren(rp.Events):
        def step(self, index, total, step, message):
            if index == 1 and message.startswith("about"):
                seen["runs"] = cluster.live_runs(k8s)
                seen["down"] = subprocess.run([*CLI, "testbed", "k8s", "down", "--name", NAME], capture_output=True,
                                              text=True, timeout=120)

    monkeypatch.setattr(rp, "EXPERIMENTS", (tiny("tiny-a", "dhrystone"), tiny("tiny-b", "syscall")))
    monkeypatch.setattr(rt, "history_path", lambda: tmp_path / "times.json")
    rep = rp.Reproducer(Store(tmp_path / "r.sqlite"), events=DownBetweenChildren())
    facts = {"accelerator": "tcg", "cluster": True, "nfs": False, "cores": 2, "probe_s": None}
    run_id = rep.start(600, None, facts, kubeconfig=str(k8s.kubeconfig))
    assert [r["run_id"] for r in seen["runs"]] == [run_id]  # the parent's own record, no child's
    assert seen["down"].returncode != 0 and f"in use by run {run_id}" in seen["down"].stderr, seen["down"].stderr
    assert rp.experiments_done(rep.store, run_id)["tiny-b"]["status"] == "ok"
    assert cluster.live_runs(k8s) == []


def test_pod_exec_through_the_api_server(k8s, guest_image, tmp_path):
    d = _driver(tmp_path, guest_image)
    assert d.check_env(_env()) == []
    (inst,) = d.provision(_env(), 1, "main")
    try:
        m = inst.pod_machine
        assert m.run(["sh", "-c", "echo out; echo err >&2; exit 3"]).returncode == 3
        res = m.run(["sh", "-c", "echo out; echo err >&2"])
        assert res.ok and res.stdout == "out\n" and res.stderr == "err\n"
        data = os.urandom(300_000)
        assert m.run(["wc", "-c"], stdin=data).stdout.strip() == str(len(data))  # stdin closed: wc ends
        src = tmp_path / "blob"
        src.write_bytes(data)
        m.put(src, "/tmp/blob", mode=0o600)
        m.get("/tmp/blob", tmp_path / "back")
        assert (tmp_path / "back").read_bytes() == data
        slow = m.run(["sleep", "30"], timeout=1)
        assert slow.timed_out and slow.seconds < 15
        assert m.run(["pwd"], cwd="/tmp").stdout.strip() == "/tmp"
        assert m.run(["sh", "-c", 'echo "$X"'], env={"X": "y z"}).stdout == "y z\n"
        proc = m.spawn(["sleep", "300"], "/tmp/sleep.log")
        assert proc.alive()
        proc.stop(grace=1)
        assert not proc.alive()
        meta = inst.metadata()
        assert meta["backend"] == "kubernetes" and meta["server_version"] == "v1.34.4"
        assert meta["cluster_nodes"] == [N1, N2] and meta["node"] in meta["cluster_nodes"]
        assert {"created", "scheduled", "initialized", "containers_ready", "ready"} <= set(meta["pod_phases"])
        assert meta["pod_phase_resolution_s"] == 1.0
        assert "Scheduled" in {e["reason"] for e in meta["pod_events"]}
        assert meta["image"].startswith("127.0.0.1:5000/virtbench/guest:")
    finally:
        inst.teardown()
    deadline = time.monotonic() + 60
    while _virtbench_pods(k8s) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert _virtbench_pods(k8s) == []


def test_claims_of_the_testbeds_storage_class_serve_pods_on_both_nodes(k8s, guest_image, tmp_path):
    from virtbench.drivers.pods.kubernetes_backend import Cluster

    d = _driver(tmp_path, guest_image)
    env = _env(pvc="64Mi")
    assert json.loads(k8s.registry_file.read_text())["storage_class"] == configs.STORAGE_CLASS
    insts = d.provision(env, 2, "main")
    try:
        assert {i.metadata()["node"] for i in insts} <= {N1, N2}
        a, b = insts
        assert a.scratch_dir().startswith("/vb-pvc/")
        assert a.exec(["sh", "-c", f"echo hello > {a.scratch_dir()}/f"]).ok
        # one claim (ReadWriteMany) for the group: the other pod sees the file
        assert b.exec(["cat", f"{a.scratch_dir()}/f"]).stdout == "hello\n"
        claim = Cluster().core.read_namespaced_persistent_volume_claim(a.group.scratch_claim, "default")
        assert claim.status.phase == "Bound" and claim.spec.storage_class_name == configs.STORAGE_CLASS
        volume = claim.spec.volume_name
    finally:
        for i in insts:
            i.teardown()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:  # reclaim policy Delete: the volume and its directory go
        if volume not in {v.metadata.name for v in Cluster().core.list_persistent_volume().items}:
            break
        time.sleep(0.5)
    else:
        raise AssertionError(f"volume {volume} was not deleted with its claim")


def test_unschedulable_pod_fails_with_the_schedulers_reason(k8s, guest_image, tmp_path):
    from virtbench.model import Shape

    d = _driver(tmp_path, guest_image)
    env = _env(shape=Shape("huge", vcpus=64, memory_mb=256), ready_timeout=15)
    t0 = time.monotonic()
    with pytest.raises(UserError) as exc:
        d.provision(env, 1, "main")
    assert time.monotonic() - t0 < 60
    assert "Insufficient cpu" in exc.value.message and "0 of 1 pods" in exc.value.message
    from virtbench.drivers.pods.kubernetes_backend import Cluster

    _gone_within(60)  # the Deployment went with the failure (Foreground deletion: its pods first)


def test_an_image_the_nodes_cannot_pull_fails_at_once_with_the_kubelets_reason(k8s, guest_image, tmp_path):
    """Not after the ready timeout: the kubelet's back-off on a pull is the answer."""
    d = _driver(tmp_path, guest_image)
    env = _env(image="127.0.0.1:5000/virtbench/no-such-image:1", ready_timeout=110)
    t0 = time.monotonic()
    with pytest.raises(UserError) as exc:
        d.provision(env, 1, "main")
    assert time.monotonic() - t0 < 90
    assert "cannot start" in exc.value.message and "no-such-image" in exc.value.message, exc.value.message
    _gone_within(60)


def test_api_server_down_is_one_line_naming_the_server(k8s, tmp_path, monkeypatch):
    from virtbench.drivers.pods.kubernetes_backend import Cluster

    kc = yaml.safe_load(k8s.kubeconfig.read_text())
    kc["clusters"][0]["cluster"]["server"] = "https://127.0.0.1:1"
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump(kc))
    monkeypatch.setenv("KUBECONFIG", str(path))
    with pytest.raises(UserError) as exc:
        Cluster().probe()
    assert exc.value.message == (f"the API server https://127.0.0.1:1 (kubeconfig {path}) does not answer: "
                                 "connection refused")


def test_expired_client_certificate_and_wrong_ca_are_clear(k8s, tmp_path, monkeypatch):
    from cryptography import x509
    from cryptography.hazmat.primitives import serialization

    from virtbench.drivers.pods.kubernetes_backend import Cluster

    key = serialization.load_pem_private_key((k8s.pki / "ca.key").read_bytes(), None)
    ca = pki.CA(key, x509.load_pem_x509_certificate((k8s.pki / "ca.crt").read_bytes()))
    past = dt.datetime.now(dt.timezone.utc) - dt.timedelta(days=1)
    crt, k = ca.issue("virtbench-admin", "system:masters", client=True, not_after=past)
    expired = tmp_path / "expired"
    expired.write_text(configs.kubeconfig(configs.API_SERVER, "x", (k8s.pki / "ca.crt").read_bytes(), crt, k, "x"))
    monkeypatch.setenv("KUBECONFIG", str(expired))
    with pytest.raises(UserError) as exc:
        Cluster().probe()
    assert "refused our credentials: 401 Unauthorized" in exc.value.message and "expired" in exc.value.hint

    other = pki.CA.new("someone else")
    crt, k = other.issue("virtbench-admin", "system:masters", client=True)
    wrong = tmp_path / "wrong"
    wrong.write_text(configs.kubeconfig(configs.API_SERVER, "x", other.cert.public_bytes(serialization.Encoding.PEM),
                                        crt, k, "x"))
    monkeypatch.setenv("KUBECONFIG", str(wrong))
    with pytest.raises(UserError) as exc:
        Cluster().probe()
    assert exc.value.message.startswith(f"TLS with the API server {configs.API_SERVER} (kubeconfig {wrong}) failed: "
                                        "certificate verify failed")


def test_a_killed_runs_objects_are_swept_by_the_next_run(k8s, guest_image, tmp_path):
    from virtbench.drivers.pods import manifests
    from virtbench.drivers.pods.kubernetes_backend import Cluster

    dead = subprocess.Popen(["true"])
    dead.wait()
    d = _driver(tmp_path, guest_image, run_id="killedrun")
    labels = {**d.labels(_env(), "main"), "virtbench.pid": str(dead.pid), "virtbench.pidstart": "1"}
    docs = manifests.group("vb-killed-left", 1, "127.0.0.1:5000/virtbench/pause:3.10", labels)
    Cluster().create(docs)
    d2 = _driver(tmp_path, guest_image, run_id="nextrun")
    (inst,) = d2.provision(_env(), 1, "main")
    inst.teardown()
    assert any(r.startswith("Deployment/vb-killed-left (run killedrun)") for r in d2.stale_removed), d2.stale_removed
    _gone_within(60)


def test_bar_web_suite_on_two_nodes(k8s, tmp_path):
    """Issue 22's bar: host + pods (backend kubernetes, shape native), web at replicas 1 and 2,
    `virtbench run SUITE --repeat 2 --json`; no pod of the run left afterwards."""
    res = subprocess.run([sys.executable, "-m", "virtbench.cli", "run", str(ROOT / "suites" / "k8s-web.toml"),
                          "--repeat", "2", "--json", "--db", str(tmp_path / "r.sqlite")],
                         capture_output=True, text=True, timeout=1800, env={**os.environ, "KUBECONFIG": str(k8s.kubeconfig)})
    assert res.returncode == 0, res.stderr[-3000:]
    data = json.loads(res.stdout)
    export = subprocess.run([sys.executable, "-m", "virtbench.cli", "export", data["run_id"], "--format", "json",
                             "--db", str(tmp_path / "r.sqlite")], capture_output=True, text=True, timeout=300)
    assert export.returncode == 0, export.stderr
    samples = [s for s in json.loads(export.stdout)["samples"] if s["environment"] == "pods"]
    assert len({(json.dumps(s["params"], sort_keys=True), s["repetition"]) for s in samples}) == 8  # 4 cells x 2
    for s in samples:
        meta = s["metadata"]
        assert meta["backend"] == "kubernetes" and meta["server_version"] == "v1.34.4"
        assert meta["cluster_nodes"] == [N1, N2]
        assert set(meta["pod_nodes"]) <= {N1, N2} and meta["node"] in meta["pod_nodes"]
        assert meta["container_runtime"].startswith("containerd://")
    service = [s for s in samples if s["params"]["balancer"] == "service" and s["metric"] == "requests_per_second"]
    assert {s["metadata"]["service"]["endpoints"] for s in service} == {1, 2}
    # The testbed's nodes are namespaces of this machine: one kernel, so the servers' capacity is its CPUs.
    boot_id = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    util = [s["metadata"] for s in samples if s["metric"] == "server_cpu_util"]
    assert util and all(m["server_capacity_rule"] == "per kernel" for m in util)
    assert all([(k["boot_id"], k["kernel_cpus"]) for k in m["server_kernels"]] == [(boot_id, os.cpu_count())]
               and m["server_capacity"] == os.cpu_count() for m in util)
    assert _virtbench_pods(k8s) == []
    # what the report and `show` make of it: the pods' nodes, Kubernetes pods, the API's whole seconds
    nodes = ", ".join(sorted({i["metadata"]["node"] for i in json.loads(export.stdout)["instances"]
                              if i["environment"] == "pods"}))
    runtime = samples[0]["metadata"]["container_runtime"].replace("://", " ")  # Debian's containerd
    layer = f"Kubernetes pods ({runtime}/runc) on testbed nodes, v1.34.4"
    md = subprocess.run([sys.executable, "-m", "virtbench.cli", "report", data["run_id"], "--format", "md",
                         "--db", str(tmp_path / "r.sqlite")], capture_output=True, text=True, timeout=300).stdout
    assert f"| machines | localhost | {nodes} |" in md and f"| {layer} |" in md
    assert "node(s))" not in md and "**Pod start-up phases" in md and "| kubernetes | 1 s |" in md
    show = subprocess.run([sys.executable, "-m", "virtbench.cli", "show", data["run_id"], "--db",
                           str(tmp_path / "r.sqlite")], capture_output=True, text=True, timeout=300).stdout
    assert f"pods: {layer}; pods on {nodes} " in show


def test_mpi_across_two_pods_on_two_nodes(k8s, tmp_path):
    """NPB CG class S, one rank per pod, the pods on different nodes, verified by NPB itself."""
    suite = tmp_path / "mpi.toml"
    suite.write_text("""
[suite]
name = "k8s-mpi"
baseline = "pods"
[environments.pods]
driver = "pods"
shape = "native"
backend = "kubernetes"
[[workloads]]
name = "npb"
params = { kernel = "cg", class = "S", ranks = 2, instances = 2 }
""")
    db = str(tmp_path / "r.sqlite")
    res = subprocess.run([sys.executable, "-m", "virtbench.cli", "run", str(suite), "--repeat", "1", "--json", "--db", db],
                         capture_output=True, text=True, timeout=1200)
    assert res.returncode == 0, res.stderr[-3000:]
    export = subprocess.run([sys.executable, "-m", "virtbench.cli", "export", json.loads(res.stdout)["run_id"],
                             "--format", "json", "--db", db], capture_output=True, text=True, timeout=300)
    (sample,) = [s for s in json.loads(export.stdout)["samples"] if s["metric"] == "mops"]
    meta = sample["metadata"]
    assert meta["verified"] is True and meta["backend"] == "kubernetes" and sample["value"] > 0
    assert [p["ranks"] for p in meta["placement"]] == [[0], [1]]
    nodes = {i["metadata"]["node"] for i in json.loads(export.stdout)["instances"]}
    assert nodes == {N1, N2}  # the scheduler spread them: traffic crossed the veth
    assert _virtbench_pods(k8s) == []


def _pods_results(db: str) -> int:
    """Successful attempts of the pods environment so far in a run's database (while it runs)."""
    import sqlite3

    if not Path(db).is_file():
        return 0
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5)
    try:
        return con.execute("SELECT count(*) FROM attempts WHERE environment = 'pods' AND status = 'ok'").fetchone()[0]
    except sqlite3.OperationalError:  # the tables are not made yet
        return 0
    finally:
        con.close()


def test_a_kubelet_killed_mid_run_fails_its_cells_then_heal_and_retry_complete_the_run(k8s, tmp_path):
    """Kill the kubelet of the node running the run's pod while the run goes on: the pod's cells fail
    with the reason (exec through a dead kubelet), the host's go on, the run ends with exit 3. Then
    what a user does: `virtbench testbed k8s heal` starts the kubelet again (every node Ready), and
    `virtbench run --resume RUN_ID --retry-failed` gives every cell of the run results."""
    from virtbench.drivers.pods.kubernetes_backend import Cluster

    suite = tmp_path / "k.toml"
    suite.write_text("""
[suite]
name = "k8s-kubelet-fault"
baseline = "host"
[environments.host]
driver = "host"
[environments.pods]
driver = "pods"
shape = "native"
backend = "kubernetes"
[[workloads]]
name = "system"
params = { test = ["dhrystone", "pipe", "syscall", "context", "whetstone", "execl"], copies = "1", duration = 2.0 }
""")
    db = str(tmp_path / "r.sqlite")
    cli = [sys.executable, "-m", "virtbench.cli"]

    def export(run_id):
        res = subprocess.run([*cli, "export", run_id, "--format", "json", "--db", db], capture_output=True,
                             text=True, timeout=300)
        assert res.returncode == 0, res.stderr
        return json.loads(res.stdout)

    run = subprocess.Popen([*cli, "run", str(suite), "--repeat", "2", "--json", "--db", db],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    killed = None
    try:
        # mid-run: once the pods have a result (a kill while the pod is being made would only make
        # the runner make another one, maybe on the other node, and the run would not fail)
        deadline = time.monotonic() + 600
        while killed is None and run.poll() is None and time.monotonic() < deadline:
            if _pods_results(db):
                for pod in Cluster().core.list_namespaced_pod("default", label_selector="virtbench=1").items:
                    ready = {c.type: c.status for c in pod.status.conditions or []}.get("Ready") == "True"
                    if ready and pod.spec.node_name and not pod.metadata.deletion_timestamp:
                        killed = int(pod.spec.node_name.rsplit("-n", 1)[1])
                        os.kill(cluster.kubelet_pid(k8s, killed), 9)
                        break
            time.sleep(0.2)
        out, err = run.communicate(timeout=1200)
    finally:
        if run.poll() is None:
            run.kill()
        healed = subprocess.run([*cli, "testbed", "k8s", "heal", "--name", NAME], capture_output=True, text=True,
                                timeout=600)
    assert killed is not None, "the run's pod never became Ready"
    assert run.returncode == 3, err[-2000:]  # some cells failed, the others have results
    data = json.loads(out)
    first = export(data["run_id"])
    failed = [a for a in first["attempts"] if a["status"] != "ok" and a["environment"] == "pods"]
    assert failed, err[-2000:]
    reasons = [a.get("reason") or "" for a in failed]
    # the kubelet's port refused the API server's exec: said in the failure's reason
    assert any("exec in default/" in r and "10250" in r for r in reasons), reasons
    host_ok = {a["cell_key"] for a in first["attempts"] if a["environment"] == "host" and a["status"] == "ok"}
    assert len(host_ok) == 6  # every host cell went on
    pods_ok = {a["cell_key"] for a in first["attempts"] if a["environment"] == "pods" and a["status"] == "ok"}
    assert len(pods_ok) < 6
    # heal started the killed kubelet again (and only what had died), and every node is Ready
    assert healed.returncode == 0, healed.stderr
    assert f"started again: kubelet-n{killed}" in healed.stdout, healed.stdout + healed.stderr
    from virtbench.drivers.pods.testbed.status import describe
    assert all(n["ready"] for n in describe(k8s.kubeconfig)["nodes"])
    _gone_within(120)  # the failed run's objects went (by label)
    # the documented way to finish the run: its failed cells run again, in the same run
    res = subprocess.run([*cli, "run", "--resume", data["run_id"], "--retry-failed", "--json", "--yes", "--db", db],
                         capture_output=True, text=True, timeout=1200)
    assert res.returncode == 0, res.stderr[-3000:]
    after = export(data["run_id"])
    pods_samples = {s["params"]["test"] for s in after["samples"] if s["environment"] == "pods"}
    assert len(pods_samples) == 6  # every cell has pods samples, the previously failed ones too
    failed_cells = {a["cell_key"] for a in failed}
    redone = {a["cell_key"] for a in after["attempts"] if a["environment"] == "pods" and a["status"] == "ok"}
    assert failed_cells <= redone
    assert len(after["attempts"]) > len(first["attempts"])  # the failed attempts stay stored as data
    _gone_within(120)


def test_gvisor_pods_have_gvisors_kernel_and_run_the_system_tests_and_the_web_sweep(k8s, guest_image, tmp_path):
    """Issue 31 item 4: the testbed offers RuntimeClass gvisor (runsc under containerd's runc shim). A
    pod of it runs on gVisor's kernel (uname 4.4.0); a run of runc and gVisor pods, system tests and
    the web sweep, exits 0 and every gVisor sample says what ran it."""
    d = _driver(tmp_path, guest_image)
    assert d.check_env(_env(runtime_class="gvisor")) == []
    (problem,) = d.check_env(_env(runtime_class="nosuch"))
    assert "no RuntimeClass nosuch" in problem.what and "kubectl get runtimeclass" in problem.fix
    (inst,) = d.provision(_env(runtime_class="gvisor"), 1, "main")
    try:
        assert inst.exec(["uname", "-r"]).stdout.strip() == "4.4.0"
        meta = inst.metadata()
        assert (meta["runtime_class"], meta["runtime"], meta["runtime_options"], meta["runtime_label"]) == \
            ("gvisor", "runsc", {"platform": "ptrace", "network": "host"}, "gVisor runsc, ptrace, network host")
        assert meta["runtime_version"] == subprocess.run(["runsc", "--version"], capture_output=True,
                                                         text=True).stdout.split()[2]
    finally:
        inst.teardown()
    suite = tmp_path / "g.toml"
    suite.write_text("""
[suite]
name = "k8s-gvisor-small"
baseline = "pods"
warmup = 0
[environments.pods]
driver = "pods"
shape = "native"
backend = "kubernetes"
[environments.gvisor]
driver = "pods"
shape = "native"
backend = "kubernetes"
runtime_class = "gvisor"
[[workloads]]
name = "system"
params = { test = ["syscall"], copies = "1", duration = 0.3 }
[[workloads]]
name = "web"
params = { replicas = [1, 2], workers = 1, balancer = "service", file_size = 600, connections = 20, duration = 1.0 }
""")
    db = str(tmp_path / "r.sqlite")
    res = subprocess.run([*CLI, "run", str(suite), "--repeat", "1", "--json", "--db", db], capture_output=True,
                         text=True, timeout=900)
    assert res.returncode == 0, res.stderr[-3000:]
    export = subprocess.run([*CLI, "export", json.loads(res.stdout)["run_id"], "--format", "json", "--db", db],
                            capture_output=True, text=True, timeout=300)
    samples = json.loads(export.stdout)["samples"]
    gv = [s for s in samples if s["environment"] == "gvisor"]
    assert {s["workload"] for s in gv} == {"system", "web"}
    assert {s["params"].get("replicas") for s in gv if s["workload"] == "web"} == {1, 2}
    assert all(s["metadata"]["runtime_class"] == "gvisor" and s["metadata"]["runtime"] == "runsc" for s in gv)
    assert all(s["metadata"]["runtime_class"] is None and s["metadata"]["runtime"] == "runc"
               for s in samples if s["environment"] == "pods")
    # the monitor reads gVisor pods' CPU and memory from their sandbox's cgroup on this machine, labelled so
    mon = {(s["environment"], s["metric"]): s for s in samples if s["workload"] == "system"}
    assert mon[("gvisor", "main.cpu_util_mean")]["metadata"]["scope"] == "host side (the sandbox's cgroup) + inside"
    assert mon[("gvisor", "main.mem_used_peak")]["value"] > 10 and mon[("pods", "main.cpu_util_mean")]
    # nginx's tcp_nopush (on by default): gVisor's servers do not cork, and their figures say they wait
    # for wrk's delayed ACK (docs/runtimes.md); runc's do not
    p50 = [s for s in samples if s["workload"] == "web" and s["metric"] == "latency_p50_ms"]
    assert p50 and all(("tcp_cork" in s["metadata"]) == (s["environment"] == "gvisor") for s in p50)
    assert all(any("delayed ACK" in w for w in s["metadata"].get("warnings", [])) for s in p50
               if s["environment"] == "gvisor")
    assert _virtbench_pods(k8s) == []


def _wait_for(what: str, probe, seconds: float, proc: subprocess.Popen) -> None:
    deadline = time.monotonic() + seconds
    while not probe():
        assert proc.poll() is None, f"the run ended before {what}: {proc.communicate()[1][-2000:]}"
        assert time.monotonic() < deadline, f"{what}: not within {seconds} s"
        time.sleep(0.2)


def test_down_refuses_under_a_live_run_then_force_stops_only_the_clusters_processes(k8s, tmp_path):
    """Issue 32's bar, the module's last test (it removes the cluster). With the testbed up and a run
    using it, `down` exits non-zero naming the run, and the run finishes with exit 0. Then, a second
    run going, `down --force` removes the cluster: a process that only names the kubeconfig in its
    arguments survives, and the run's pods cells fail with the reason (exit 3), as when an SSH host
    goes away. Everything is gone afterwards, and `down` again finds nothing."""
    suite = tmp_path / "s.toml"
    suite.write_text("""
[suite]
name = "k8s-owner"
baseline = "host"
[environments.host]
driver = "host"
[environments.pods]
driver = "pods"
shape = "native"
backend = "kubernetes"
[[workloads]]
name = "system"
params = { test = ["syscall", "pipe"], copies = "1", duration = 0.3 }
""")
    db = str(tmp_path / "r.sqlite")
    run = subprocess.Popen([*CLI, "run", str(suite), "--repeat", "2", "--json", "--db", db],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        _wait_for("the run registers with the cluster", lambda: cluster.live_runs(k8s), 120, run)
        (rec,) = cluster.live_runs(k8s)
        refused = subprocess.run([*CLI, "testbed", "k8s", "down", "--name", NAME], capture_output=True, text=True,
                                 timeout=120)
        status = subprocess.run([*CLI, "testbed", "k8s", "status", "--name", NAME], capture_output=True, text=True,
                                timeout=120)
        out, err = run.communicate(timeout=900)
    finally:
        if run.poll() is None:
            run.kill()
    assert refused.returncode != 0
    assert f"in use by run {rec['run_id']}" in refused.stderr and "--force" in refused.stderr, refused.stderr
    assert f"in use by run {rec['run_id']}" in status.stdout and "made by " in status.stdout, status.stdout
    assert run.returncode == 0, err[-2000:]
    assert json.loads(out)["run_id"] == rec["run_id"]
    assert cluster.live_runs(k8s) == []  # the record went with the run

    # up on the taken name says whose the cluster is
    again = subprocess.run([*CLI, "testbed", "k8s", "up", "--name", NAME], capture_output=True, text=True, timeout=120)
    assert again.returncode != 0 and "is up already (made by " in again.stderr, again.stderr

    decoy = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)", "--kubeconfig", str(k8s.kubeconfig)])
    db = str(tmp_path / "r2.sqlite")  # its own: _pods_results counts this run's results only
    run = subprocess.Popen([*CLI, "run", str(suite), "--repeat", "6", "--json", "--db", db],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        _wait_for("results of the pods", lambda: _pods_results(db) >= 2, 600, run)
        forced = subprocess.run([*CLI, "testbed", "k8s", "down", "--name", NAME, "--force"], capture_output=True,
                                text=True, timeout=300)
        out, err = run.communicate(timeout=900)
        assert decoy.poll() is None, "down --force killed a process that only names the kubeconfig"
    finally:
        for p in (run, decoy):
            if p.poll() is None:
                p.kill()
    assert forced.returncode == 0, forced.stderr
    assert run.returncode == 3, err[-3000:]
    assert "internal error" not in err, err[-3000:]
    res = subprocess.run([*CLI, "export", json.loads(out)["run_id"], "--format", "json", "--db", db],
                         capture_output=True, text=True, timeout=300)
    attempts = json.loads(res.stdout)["attempts"]
    reasons = {a["reason"] for a in attempts if a["environment"] == "pods" and a["status"] == "failed"}
    # what the repetition going on when the cluster went saw (an exec refused, or cut), then the
    # provisioning's one line about the server
    assert reasons and all(reasons), reasons
    assert any("https://127.0.0.1:6443" in r and "does not answer: connection refused" in r for r in reasons), reasons
    assert {a["cell_key"] for a in attempts if a["environment"] == "host" and a["status"] == "ok"}  # host went on

    assert cluster.leftovers(LAY) == []
    assert [n for n in subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout.split("\n")
            if n.startswith((NAME, "cni-"))] == []
    assert cluster.down(NAME) == []
