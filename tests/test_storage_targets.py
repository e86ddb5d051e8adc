"""Storage targets for real on the host: tmpfs, a podman volume, NBD and iSCSI targets created and
removed (server link namespace, server, initiator, FUSE, loop device, mount), remote throughput under
delay, skips with reasons, bad input, Ctrl-C during a run. Each test checks nothing is left behind."""

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from virtbench import analysis, conditions, suite
from virtbench.conditions import ConditionUnavailable, storage
from virtbench.conditions import hostnet, targets
from virtbench.machines import nfsclient
from virtbench.drivers.base import DriverContext
from virtbench.drivers.host.driver import HostDriver
from virtbench.errors import UserError
from virtbench.model import EnvSpec, Shape
from virtbench.run.runner import Runner
from virtbench.store import Store
from virtbench.workloads import RunContext, get
from delaykit import assert_condition_delay
from vbleftovers import cmdline, descendants, runs_helper, assert_clean, snapshot
from waitkit import until

AVAILABLE = targets.availability() if os.geteuid() == 0 else {}
pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="storage targets need root (mounts, loops, namespaces)")


def need(kind):
    ok, why = AVAILABLE.get(kind, (False, "not root"))
    if not ok:
        pytest.skip(f"storage={kind} is not available here: {why}")


@pytest.fixture
def host(tmp_path):
    env = EnvSpec("host", "host", Shape("native"), {"scratch": str(tmp_path)})
    (inst,) = HostDriver(DriverContext("t", tmp_path)).provision(env)
    yield {"main": [inst]}
    inst.teardown()
    assert_clean()


def _write_read(applied, inst, nbytes=1 << 20):
    d = applied.storage_dir(inst)
    data = os.urandom(nbytes)
    Path(d, "probe").write_bytes(data)
    assert Path(d, "probe").read_bytes() == data
    os.unlink(Path(d, "probe"))
    return d


def test_coerce_values():
    s = conditions.get("storage")
    assert s.coerce("NBD:8G") == "nbd:8g" and s.coerce("local") == "local" and s.is_noop("local")
    assert s.coerce("nbd://127.0.0.1:10809/disk") == "nbd://127.0.0.1:10809/disk"
    for bad in ("ceph", "local:4g", "nbd:lots", "nbd://:12/x"):
        with pytest.raises(ValueError):
            s.coerce(bad)


def test_tmpfs(host):
    need("tmpfs")
    (inst,) = host["main"]
    applied = conditions.apply_all({"storage": "tmpfs:64m"}, host)
    try:
        d = _write_read(applied, inst)
        assert applied.metadata["storage_fs"] == "tmpfs" and d != inst.scratch_dir()
        assert shutil.disk_usage(d).total == 64 << 20
    finally:
        assert applied.close() == []


@pytest.mark.parametrize("kind", ["nbd", "iscsi"])
def test_remote_block_target_made_and_removed(host, kind):
    need(kind)
    (inst,) = host["main"]
    applied = conditions.apply_all({"storage": f"{kind}:256m"}, host)
    try:
        during = snapshot()
        assert len(during["netns"]) == 1 and len(during["loops"]) == 1 and len(during["mounts"]) >= 2
        helpers = " ".join(during["helpers"])
        assert "nbdfuse" in helpers and ("nbdkit" in helpers if kind == "nbd" else "tgtd" in helpers)
        _write_read(applied, inst, 4 << 20)
        assert applied.metadata["storage_fs"] == "ext4"
        assert kind in ("nbd", "iscsi") and ("tgt" in applied.metadata["storage_mechanism"]) == (kind == "iscsi")
    finally:
        assert applied.close() == []
    assert_clean()


def test_remote_throughput_falls_with_delay(host):
    need("nbd")
    fio = get("fio")
    p = {x.name: x.default for x in fio.params}
    p.update(rw="write", size_mb=8, bs="1m", direct=True)
    got = {}
    for delay in (0, 20):
        applied = conditions.apply_all({"storage": "nbd:128m", "delay_ms": delay}, host)
        try:
            raw = fio.execute(host, p, RunContext(timeout=120, applied=applied))
            got[delay] = ({s.metric: s.value for s in fio.parse(raw, p)}["throughput"], dict(applied.metadata))
        finally:
            applied.close()
    assert got[20][0] < got[0][0] / 2
    # netem where this kernel has it (tried for real on a veth pair), else the user-space proxy
    expected = "netem" if hostnet.tc_supports("netem")[0] else "proxy"
    assert got[20][1]["delay_mechanism"] == expected and got[0][1]["delay_mechanism"] == "none"
    assert_condition_delay(got[20][1], 20)


def test_volume_on_the_host(host):
    need("volume")
    (inst,) = host["main"]
    applied = conditions.apply_all({"storage": "volume"}, host)
    try:
        d = _write_read(applied, inst)
        assert "/volumes/" in d and applied.metadata["storage_mechanism"].endswith("volume (local driver)")
    finally:
        assert applied.close() == []


def test_nfs_skipped_with_reason_without_a_kernel_client(host):
    ok, why = nfsclient.kernel_nfs_client()
    if ok:
        pytest.skip("this kernel has an NFS client")
    with pytest.raises(ConditionUnavailable, match="no NFS client"):
        conditions.apply_all({"storage": "nfs"}, host)


def test_nfs_datastore_needs_a_vm(host):
    with pytest.raises(ConditionUnavailable, match="no hypervisor"):
        conditions.apply_all({"storage": "nfs-datastore"}, host)
    assert conditions.get("storage").coerce("NFS-Datastore:2G") == "nfs-datastore:2g"


def test_ganesha_serves_nfsv3_to_qemus_client(host):
    """The datastore's server side without a VM: nfs-ganesha (v3 + v4) and rpcbind on a server
    link; qemu-img makes and reads an image on the export through QEMU's NFS driver (libnfs)."""
    need("nfs-datastore")
    from virtbench.conditions import nfs

    (inst,) = host["main"]
    applied = conditions.Applied()
    try:
        srv = nfs.Ganesha(inst, applied, "storage=nfs-datastore", v3=True)
        url = f"nfs://{srv.link.ns_addr}{nfs.NFS_PSEUDO}/t.img"
        res = subprocess.run(["qemu-img", "create", "-q", "-f", "raw", url, "8M"], capture_output=True,
                             text=True, timeout=60)
        assert res.returncode == 0, res.stderr
        assert (srv.export / "t.img").stat().st_size == 8 << 20
        res = subprocess.run(["qemu-img", "info", "--output=json", url], capture_output=True, text=True,
                             timeout=60)
        assert res.returncode == 0 and '"virtual-size": 8388608' in res.stdout, res.stderr
    finally:
        assert applied.close() == []
    assert_clean()


def test_unreachable_remote_target_is_a_clear_error(host):
    port = __import__("virtbench.conditions.hostnet", fromlist=["x"]).free_port()
    with pytest.raises(UserError, match=f"cannot reach the NBD server 127.0.0.1:{port}"):
        conditions.apply_all({"storage": f"nbd://127.0.0.1:{port}"}, host)


def test_run_records_condition_and_skips(tmp_path):
    need("nbd")
    store = Store(tmp_path / "r.sqlite")
    m = suite.adhoc("fio", {"rw": "write", "size_mb": "4", "storage": "nbd:128m,nfs", "delay_ms": "0,5"},
                    ["host"], repeat=1)
    run_id = Runner(store, m).start()
    rows = [r for r in analysis.results(store, run_id)["results"] if r["metric"] in ("throughput", "(none)")]
    by = {(r["condition"]["storage"], r["condition"]["delay_ms"]): r for r in rows}
    assert by[("nbd:128m", 0)]["condition"]["delay_mechanism"] == "none"
    five = by[("nbd:128m", 5)]["condition"]
    assert five["delay_mechanism"] == "proxy"
    assert_condition_delay(five, 5)
    assert five["storage_fs"] == "ext4" and by[("nbd:128m", 5)]["n"] == 1
    if not nfsclient.kernel_nfs_client()[0]:
        skipped = [a for a in store.attempts(run_id) if a["status"] == "skipped"]
        assert skipped and all("NFS client" in a["reason"] for a in skipped)
    assert_clean()


def test_interrupt_tears_the_target_down(tmp_path):
    """Ctrl-C while a remote target with a delay proxy is in use: everything goes."""
    need("nbd")
    env = dict(os.environ, VIRTBENCH_DATA=str(tmp_path), PYTHONUNBUFFERED="1")
    cmd = [sys.executable, "-m", "virtbench.cli", "run", "--workload", "fio", "--param", "rw=write",
           "--param", "size_mb=64", "--param", "runtime=60", "--param", "storage=nbd:128m",
           "--param", "delay_ms=5", "--envs", "host", "--repeat", "1", "--db", str(tmp_path / "r.sqlite")]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            s = snapshot(proc.pid)
            fio_running = any(cmdline(p).startswith("fio ") for p in descendants(proc.pid))
            if s["mounts"] and any("vb-delayproxy" in h for h in s["helpers"]) and fio_running:
                break
            time.sleep(0.2)
        else:
            pytest.fail(f"the run never got its target up: {proc.stderr.read() if proc.poll() is not None else ''}")
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode != 0
    left = {k: v for k, v in snapshot(proc.pid).items() if v}
    assert not left, f"left behind after Ctrl-C: {left}"
    assert not list(Path("/tmp").glob(f"virtbench-cond-{proc.pid}-*"))


CHILD = r"""
import sys, tempfile
from pathlib import Path
from virtbench import conditions
from virtbench.drivers.base import DriverContext
from virtbench.drivers.host.driver import HostDriver
from virtbench.model import EnvSpec, Shape
tmp = Path(tempfile.mkdtemp())
(inst,) = HostDriver(DriverContext("t", tmp)).provision(EnvSpec("host", "host", Shape("native"), {}))
applied = conditions.apply_all({"storage": "nbd:128m", "delay_ms": 1}, {"main": [inst]})
print("ready", flush=True)
sys.stdin.read()
"""


def _alive(pid: int) -> bool:
    """Running (a zombie has exited; an orphan's may wait for its reaper)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0] != "Z"
    except OSError:
        return False


def test_leftovers_of_a_killed_run_are_removed_by_the_next(tmp_path):
    """SIGKILL leaves mounts, a loop device and a namespace; the next virtbench process removes them."""
    need("nbd")
    proc = subprocess.Popen([sys.executable, "-c", CHILD], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "ready"
        assert snapshot(proc.pid)["loops"] and snapshot(proc.pid)["netns"]
        helpers = [p for p in descendants(proc.pid) if runs_helper(p)]
        assert helpers, "the condition started no helper process"
    finally:
        proc.kill()
        proc.wait()
    # helpers die with their parent (PR_SET_PDEATHSIG): a busy machine can take longer than a fixed
    # sleep to deliver that; one that lives on still fails here
    assert until(lambda: not [p for p in helpers if _alive(p)]), [cmdline(p) for p in helpers if _alive(p)]
    # The next run's pool sweeps this machine; conditions register their finder (machines/ledger.py).
    res = subprocess.run([sys.executable, "-c", "import virtbench.conditions; from virtbench.machines import Pool; "
                          "print('\\n'.join(Pool().sweep()))"], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    assert "loop device" in res.stdout and "network namespace" in res.stdout
    left = {k: v for k, v in snapshot(proc.pid).items() if v}
    assert not left, f"left behind after the stale clean-up: {left}"
    assert not list(Path("/tmp").glob(f"virtbench-cond-{proc.pid}-*"))
