"""Pods driver, kube-play backend, for real: the manifests of 1, 2 and 8 replicas under `podman
kube play`, a claim as a podman named volume, an image that cannot be pulled, the system and web
workloads through `virtbench run`, the report's label, Ctrl-C and a killed run's leftovers, and
storage = "nfs" on pods with nfs_share (skipped with the kernel's reason where it has no NFS client)."""

import json
import signal
import subprocess
import sys
import time
import uuid

import pytest

from virtbench import procs
from virtbench.drivers.base import DriverContext
from virtbench.drivers.pods.kubeplay_driver import KubePlayDriver
from virtbench.errors import UserError
from virtbench.machines import ledger, local
from virtbench.model import EnvSpec, Shape

pytestmark = [pytest.mark.podman]

if not procs.run(["podman", "info"], timeout=60).ok:
    pytest.skip("podman does not work here (apt-get install podman runc)", allow_module_level=True)

SMALL = Shape("m1.small", vcpus=1, memory_mb=128)
VB = [sys.executable, "-m", "virtbench.cli"]


def ours(label, kind="pod"):
    """Names of pods (or volumes) carrying a label."""
    sub = ["volume", "ls"] if kind == "volume" else ["pod", "ps"]
    res = procs.run(["podman", *sub, "--filter", f"label={label}", "--format", "{{.Name}}"], timeout=60)
    return res.stdout.split()


@pytest.fixture
def driver(guest_image, tmp_path):
    d = KubePlayDriver(DriverContext(f"t{uuid.uuid4().hex[:10]}", tmp_path, guest_image))
    yield d
    run = f"virtbench.run={d.context.run_id}"
    for pod in ours(run):  # whatever a failing test left behind
        procs.run(["podman", "pod", "rm", "-f", "-t", "0", pod], timeout=60)
    for vol in ours(run, "volume"):
        procs.run(["podman", "volume", "rm", "-f", vol], timeout=60)


@pytest.mark.parametrize("replicas", [1, 2, 8])
def test_replicas_run_under_kube_play(driver, guest_image, replicas):
    insts = driver.provision(EnvSpec("pods", "pods", SMALL), replicas, "server")
    assert len(insts) == replicas and len(ours(f"virtbench.run={driver.context.run_id}")) == replicas
    assert len({i.address for i in insts}) == replicas and all(i.address for i in insts)
    for inst in insts:
        lc = inst.lifecycle
        assert lc["requested"] <= lc["created"] <= lc["running"] <= lc["ready"]
        meta = inst.metadata()
        assert meta["backend"] == "kube-play" and meta["image_hash"] == guest_image.hash
        assert meta["deployment"] == insts[0].group.name and len(meta["manifest_sha256"]) == 64
        assert {"created", "sandbox_started", "container_started"} <= set(meta["pod_phases"])
        # the shape's limits, as the pod's cgroup has them (v1 or v2)
        res = inst.exec(["sh", "-c", "cat /sys/fs/cgroup/memory.max 2>/dev/null || "
                                     "cat /sys/fs/cgroup/memory/memory.limit_in_bytes"], timeout=30)
        assert res.ok and res.stdout.strip() == str(128 << 20)
    ran = insts[-1].exec([insts[-1].bin("vb-system"), "--help"], timeout=30)
    assert ran.returncode == 0 and ran.stdout.startswith("usage: vb-system"), ran.describe_failure()
    for inst in insts[:-1]:  # all but the last: their pods go one by one
        inst.teardown()
        assert inst.pod not in ours(f"virtbench.run={driver.context.run_id}")
    insts[-1].teardown()
    assert ours(f"virtbench.run={driver.context.run_id}") == []


def test_claim_is_a_named_volume(driver):
    insts = driver.provision(EnvSpec("pods", "pods", SMALL, {"pvc": "32Mi"}), 2, "main")
    run = f"virtbench.run={driver.context.run_id}"
    (vol,) = ours(run, "volume")
    assert vol == insts[0].metadata()["pvc"]
    a, b = insts
    assert a.scratch_dir().startswith("/vb-pvc/") and a.scratch_dir() != b.scratch_dir()
    assert a.exec(["sh", "-c", f"echo hi > {a.scratch_dir()}/f"], timeout=30).ok
    assert b.exec(["cat", f"{a.scratch_dir()}/f"], timeout=30).stdout.strip() == "hi"  # one claim, shared
    for inst in insts:
        inst.teardown()
    assert ours(run) == [] and ours(run, "volume") == []


def test_image_pull_failure_leaves_nothing(driver):
    env = EnvSpec("pods", "pods", Shape("native"), {"image": "localhost/virtbench-missing:{hash}", "pvc": "16Mi"})
    with pytest.raises(UserError) as err:
        driver.provision(env, 2, "main")
    assert "image pull failed" in err.value.message and "virtbench-missing" in err.value.message
    run = f"virtbench.run={driver.context.run_id}"
    assert ours(run) == [] and ours(run, "volume") == []


def test_oom_marker_stays_out_of_the_users_directory(driver, tmp_path, monkeypatch):
    """conmon creates an `oom` file in its working directory when a container is OOM-killed: kube play
    (which starts the pods' conmons) runs from the engine's private directory, not the user's."""
    from pathlib import Path

    from virtbench.drivers.container import engine
    from virtbench.machines import local

    here = tmp_path / "checkout"
    here.mkdir()
    monkeypatch.chdir(here)
    marker = Path(engine.cwd_for(local())) / "oom"
    marker.unlink(missing_ok=True)
    (inst,) = driver.provision(EnvSpec("pods", "pods", Shape("tiny", vcpus=1, memory_mb=64)), 1, "main")
    try:
        res = inst.exec(["sh", "-c", "head -c 300M /dev/zero | tail > /dev/null; echo rc=$?"], timeout=120)
        assert "rc=137" in res.stdout  # the kernel's OOM killer stopped `tail` in the 64 MB pod
        deadline = time.time() + 10
        while not marker.exists() and time.time() < deadline:
            time.sleep(0.1)
        assert list(here.iterdir()) == []
        assert marker.exists()
    finally:
        inst.teardown()


def _run(args, db, timeout=600):
    res = subprocess.run([*VB, *args, "--db", str(db)], capture_output=True, text=True, timeout=timeout)
    assert res.returncode == 0, res.stderr[-3000:]
    return res


@pytest.mark.slow
def test_system_and_web_sweep_in_pods_and_report(guest_image, tmp_path):
    db = tmp_path / "vb.sqlite"
    res = _run(["run", "--workload", "system", "--param", "test=dhrystone", "--param", "copies=1",
                "--param", "duration=0.3", "--envs", "pods:m1.small", "--repeat", "1", "--json"], db)
    out = json.loads(res.stdout)
    (row,) = [r for r in out["results"] if r["metric"] == "dhrystone"]
    assert row["n"] == 1 and row["median"] > 0
    res = _run(["run", "--workload", "web", "--param", "replicas=1,2,4", "--param", "duration=1",
                "--param", "connections=8", "--envs", "pods", "--repeat", "1", "--json"], db)
    out = json.loads(res.stdout)
    rps = {r["params"]["replicas"]: r for r in out["results"] if r["metric"] == "requests_per_second"}
    assert sorted(rps) == [1, 2, 4] and all(r["n"] == 1 and r["median"] > 0 for r in rps.values())
    report = tmp_path / "r.md"
    _run(["report", out["run_id"], "--format", "md", "-o", str(report)], db)
    text = report.read_text()
    assert "pods (podman pods)" in text and "ran as podman pods" in text and "not on a Kubernetes cluster" in text
    assert ours(f"virtbench.run={out['run_id']}") == []


def _wait_for_pods(label, n, proc, timeout=120):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None:
        if len(ours(label)) >= n:
            return
        time.sleep(0.2)
    raise AssertionError(f"no {n} pods with {label} (exit {proc.poll()})")


@pytest.mark.slow
def test_ctrl_c_leaves_no_pod(guest_image, tmp_path):
    proc = subprocess.Popen([*VB, "run", "--workload", "web", "--param", "replicas=2", "--param", "duration=60",
                             "--envs", "pods", "--repeat", "1", "--db", str(tmp_path / "vb.sqlite")],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    label = f"virtbench.pid={proc.pid}"
    try:
        _wait_for_pods(label, 3, proc)  # 2 servers and the balancer
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert ours(label) == []


_KILLED = """
import sys, pathlib, time
from virtbench import image
from virtbench.drivers.base import DriverContext
from virtbench.drivers.pods.kubeplay_driver import KubePlayDriver
from virtbench.model import EnvSpec, Shape
d = KubePlayDriver(DriverContext(sys.argv[1], pathlib.Path(sys.argv[2]), image.require()))
d.provision(EnvSpec("pods", "pods", Shape("native"), {"pvc": "16Mi"}), 2, "main")
print("up", flush=True)
time.sleep(600)
"""


@pytest.mark.slow
def test_killed_runs_pods_are_cleaned_up(guest_image, tmp_path):
    run_id = f"t{uuid.uuid4().hex[:10]}"
    proc = subprocess.Popen([sys.executable, "-c", _KILLED, run_id, str(tmp_path)], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "up"
    finally:
        proc.kill()  # SIGKILL: no teardown ran
        proc.wait()
    label = f"virtbench.run={run_id}"
    assert len(ours(label)) == 2 and len(ours(label, "volume")) == 1
    removed = ledger.sweep(local(), KubePlayDriver.leftovers)  # what the next run's pool does here
    assert len([r for r in removed if f"(run {run_id})" in r]) == 3, removed
    assert ours(label) == [] and ours(label, "volume") == []


def test_nfs_share_in_kube_play_pods(driver, tmp_path):
    """storage = "nfs" on pods with nfs_share, for real. Without a kernel NFS client (these machines)
    the pods are made without the share, their other cells run, and storage = "nfs" is skipped with
    the same kernel reason as the container way. With one, nfs-ganesha on a server link is the
    share, and each pod writes in a directory of its own on it."""
    from virtbench import conditions
    from virtbench.conditions import base, nfs
    from virtbench.machines import nfsclient
    from virtbench.machines import local

    ok, why = nfsclient.kernel_nfs_client()
    applied = base.Applied()
    try:
        share = "127.0.0.1:/vb"
        if ok:  # a real server for the real mount
            srv = nfs.Ganesha(type("I", (), {"machine": local()})(), applied, "test")
            share = f"{srv.link.ns_addr}:{nfs.NFS_PSEUDO}"
        insts = driver.provision(EnvSpec("pods", "pods", SMALL, {"nfs_share": share}), 2, "main")
        run = f"virtbench.run={driver.context.run_id}"
        meta = insts[0].metadata()
        assert meta["nfs_share"] == share and meta["nfs_mounted"] is ok and meta["pvc"] is None
        if not ok:
            assert ours(run, "volume") == []  # no NFS volume made that no pod could mount
            with pytest.raises(conditions.ConditionUnavailable) as err:
                conditions.apply_all({"storage": "nfs"}, {"main": insts})
            assert str(err.value).startswith(f"storage=nfs in a kube-play pod: nfs_share {share} is a podman NFS")
            assert str(err.value).endswith(why)
            local_cell = conditions.apply_all({"storage": "local"}, {"main": insts})  # the pods still serve
            assert local_cell.storage_dir(insts[0]) == insts[0].scratch_dir() and local_cell.close() == []
        else:
            (vol,) = ours(run, "volume")
            cell = conditions.apply_all({"storage": "nfs"}, {"main": insts})
            try:
                a, b = (cell.storage_dir(i) for i in insts)
                assert a == insts[0].nfs_dir() and a != b and a.startswith("/vb-nfs/")
                assert cell.metadata["storage_mounted_by"] == "podman (kube play volume)"
                assert insts[0].exec(["stat", "-f", "-c", "%T", a], timeout=30).stdout.strip() == "nfs"
                assert insts[0].exec(["sh", "-c", f"echo hi > {a}/f"], timeout=30).ok
                assert (srv.export / insts[0].pod / "f").read_text() == "hi\n"  # on the server's export
            finally:
                assert cell.close() == []
            assert not (srv.export / insts[0].pod).exists()  # the cell left nothing on the share
        for inst in insts:
            inst.teardown()
        assert ours(run) == [] and ours(run, "volume") == []
    finally:
        assert applied.close() == []


@pytest.mark.slow
def test_storage_nfs_on_pods_through_virtbench_run(guest_image, tmp_path):
    """A real run: dd on a pods environment with nfs_share, storage = nfs and local. On a kernel
    without an NFS client the nfs cell is skipped with the kube-play reason and the local one runs."""
    from virtbench.machines import nfsclient

    ok, _ = nfsclient.kernel_nfs_client()
    if ok:
        pytest.skip("this kernel has an NFS client: test_nfs_share_in_kube_play_pods mounts a real share")
    suite = tmp_path / "pods-nfs.toml"
    suite.write_text('[suite]\nname = "pods-nfs"\n\n[environments.pod]\ndriver = "pods"\nshape = "m1.small"\n'
                     'nfs_share = "127.0.0.1:/vb"\n\n[[workloads]]\nname = "dd"\n'
                     'params = { file_size_mb = 64, block_mb = 1, scale = 0.0625 }\n'
                     'condition = { storage = ["nfs", "local"] }\n')
    db = tmp_path / "vb.sqlite"
    out = json.loads(_run(["run", str(suite), "--repeat", "1", "--json"], db).stdout)
    rows = [r for r in out["results"] if r["environment"] == "pod"]
    (nfs,) = [r for r in rows if r["condition"]["storage"] == "nfs"]
    assert nfs["n"] == 0 and "kube-play pod: nfs_share 127.0.0.1:/vb" in nfs["skipped"]
    assert "no NFS client" in nfs["skipped"]
    ran = {r["metric"]: r for r in rows if r["condition"]["storage"] == "local"}
    assert ran["write"]["n"] == ran["read"]["n"] == 1 and not ran["write"].get("skipped")
    assert ours(f"virtbench.run={out['run_id']}") == []
