"""The container driver on a remote machine: podman through the SSH executor of a testbed host.

Testbed hosts share this machine's filesystem (except /tmp, /root and /var/lib/virtbench-host), so
podman there sees the same images and containers; what is remote is the executor (every engine call
goes over ssh), the blob cache (per host) and the network namespace the containers start in.
"""

import shutil
import subprocess
import uuid
from pathlib import Path

import pytest

from virtbench import procs
from virtbench.drivers.container import driver as container
from virtbench.drivers.base import DriverContext
from virtbench.machines import Pool, inventory, ship
from virtbench.model import EnvSpec, Shape

pytestmark = [pytest.mark.slow, pytest.mark.podman]

if not shutil.which("podman") or not procs.run(["podman", "info"], timeout=60).ok:
    pytest.skip("no working podman (apt-get install podman runc)", allow_module_level=True)

HOST, OTHER = "vbtsh1", "vbtsh2"  # testbed2's hosts, in namespaces vbts-1 and vbts-2
SHAPE = Shape("t", vcpus=1, memory_mb=256)


@pytest.fixture(scope="module")
def pool(testbed2):
    p = Pool(inventory.load(testbed2))
    yield p
    p.close()


def test_testbed_hosts_see_the_cgroup_hierarchies(pool):
    """Container runtimes need them; a testbed host's sshd is started with nsenter, not `ip netns
    exec` (which mounts a fresh /sys without them: runc then fails with "no cgroup mount found")."""
    assert pool.get(OTHER).run(["grep", "-q", " - cgroup", "/proc/self/mountinfo"], timeout=30).ok


@pytest.fixture(scope="module")
def remote(pool, guest_image, tmp_path_factory):
    """One container on HOST, its image shipped through an emptied blob cache."""
    m = pool.get(HOST)
    m.run(["rm", "-rf", f"{ship.remote_dir(m)}/blobs"], timeout=60)
    d = container.ContainerDriver(DriverContext(f"t{uuid.uuid4().hex[:10]}", tmp_path_factory.mktemp("w"),
                                                guest_image, pool))
    env = EnvSpec("rctr", "container", SHAPE, {"machine": HOST, "runtime": "runc", "cgroup_manager": "cgroupfs"})
    (inst,) = d.provision(env)
    yield d, inst, m
    inst.teardown()


def test_image_shipped_through_the_blob_cache(remote, guest_image):
    _, inst, m = remote
    sha = ship.file_sha256(guest_image.tarball)
    assert Path(f"{guest_image.tarball}.sha256").read_text().split()[0] == sha
    blob = f"{ship.remote_dir(m)}/blobs/{sha}/rootfs.tar"
    res = m.run(["sha256sum", blob], timeout=120)
    assert res.ok and res.stdout.split()[0] == sha, res.describe_failure()
    assert not Path(blob).exists()  # on the host's own /var/lib/virtbench-host, not this machine's
    left = m.run(["sh", "-c", f"ls -A {ship.remote_dir(m)}/blobs/{sha}"], timeout=30).stdout.split()
    assert left == ["rootfs.tar"]  # no partial transfer left behind
    assert ship.ensure_blob(m, guest_image.tarball, sha, "rootfs.tar") == blob  # cached: no second transfer
    meta = inst.metadata()
    assert meta["machine"] == HOST and meta["image_shipped"] is True and meta["image_hash"] == guest_image.hash


def test_runs_in_the_hosts_network_namespace(remote):
    _, inst, m = remote
    assert inst.machine.name == HOST and inst.address
    conmon = m.run(["podman", "inspect", "-f", "{{.State.ConmonPid}}", inst.name], timeout=60).stdout.strip()
    ns = subprocess.run(["ip", "netns", "identify", conmon], capture_output=True, text=True).stdout.strip()
    assert ns == "vbts-1"
    # Its address is reached from that host (the host's own podman bridge), through a server inside.
    assert inst.exec(["sh", "-c", f"echo remote-ok > {inst.scratch_dir()}/f"]).ok
    assert inst.exec(["busybox", "httpd", "-p", "8080", "-h", inst.scratch_dir()], timeout=30).ok
    res = m.run(["curl", "-sS", "--max-time", "10", f"http://{inst.address}:8080/f"], timeout=30)
    assert res.stdout == "remote-ok\n", res.describe_failure()


def test_exec_and_copies(remote, tmp_path):
    _, inst, _ = remote
    assert inst.exec(["echo", "a", "two words"]).stdout == "a two words\n"
    assert inst.exec(["sh", "-c", 'echo "$VB_X"'], env={"VB_X": "a b;c"}, timeout=30).stdout == "a b;c\n"
    assert inst.exec(["wc", "-c"], stdin=b"12345", timeout=30).stdout.strip() == "5"
    res = inst.exec(["sleep", "30"], timeout=1)
    assert res.timed_out and not res.ok
    src = tmp_path / "in.txt"
    src.write_text("payload\n")
    inst.inside.put(src, f"{inst.scratch_dir()}/in.txt")
    assert inst.exec(["cat", f"{inst.scratch_dir()}/in.txt"]).stdout == "payload\n"
    inst.inside.get(f"{inst.scratch_dir()}/in.txt", tmp_path / "out.txt")
    assert (tmp_path / "out.txt").read_text() == "payload\n"
    with pytest.raises(OSError):
        inst.inside.get("/no/such/file", tmp_path / "x")
    assert inst.host_mount_dir is None  # storage conditions stay local for now


def test_stale_sweep_on_remote_machine(remote, testbed2, guest_image, tmp_path):
    d, inst, m = remote
    dead = subprocess.Popen(["true"])
    dead.wait()
    ours, foreign = f"vb-stale-{uuid.uuid4().hex[:8]}", f"vb-stale-{uuid.uuid4().hex[:8]}"
    import socket

    for name, host in ((ours, socket.gethostname()), (foreign, "another-controller")):
        res = m.run(["podman", "create", "--name", name, "--label", "virtbench=1", "--label", "virtbench.run=old",
                     "--label", f"virtbench.pid={dead.pid}", "--label", f"virtbench.host={host}",
                     guest_image.tag, "true"], timeout=60)
        assert res.ok, res.describe_failure()
    # The next run: its own pool sweeps the host when its driver first gets it.
    next_pool = Pool(inventory.load(testbed2))
    d2 = container.ContainerDriver(DriverContext(f"t{uuid.uuid4().hex[:10]}", tmp_path, guest_image, next_pool))
    (other,) = d2.provision(EnvSpec("rctr2", "container", SHAPE, {"machine": HOST}))
    try:
        assert f"container {ours} (run old) on {HOST}" in d2.stale_removed, d2.stale_removed
        assert not any(foreign in r or inst.name in r for r in d2.stale_removed) and inst.alive()
        assert other.machine.name == HOST
    finally:
        other.teardown()
        next_pool.close()
        m.run(["podman", "rm", "-f", foreign], timeout=60)
    assert not m.run(["podman", "container", "exists", other.name], timeout=60).ok  # teardown went through ssh


def test_oom_marker_lands_in_the_hosts_virtbench_dir_not_its_home(remote):
    """conmon creates an `oom` file in its working directory when a container is OOM-killed: on an SSH
    host, engine commands start in `engine` under its virtbench_dir, not in the login user's home."""
    _, inst, m = remote
    marker = f"{ship.remote_dir(m)}/engine/oom"
    m.run(["rm", "-f", marker, f"{m.facts()['home']}/oom"], timeout=30)
    res = inst.exec(["sh", "-c", "head -c 600M /dev/zero | tail > /dev/null; echo rc=$?"], timeout=120)
    assert "rc=137" in res.stdout  # the kernel's OOM killer stopped `tail` in the 256 MB container
    res = m.run(["sh", "-c", f"for i in $(seq 100); do [ -e {marker} ] && break; sleep 0.1; done; "
                             f"ls -A {marker} ~/oom 2>/dev/null"], timeout=60)
    assert res.stdout.split() == [marker]  # there, and not in the home
