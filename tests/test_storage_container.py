"""Storage targets and network conditions with containers (podman): mounts made on the host after the
container started appear under /vb-mnt inside and go away with the condition; tbf on a container's
link caps iperf3; nothing is left behind."""

import os
import shutil
import uuid

import pytest

from virtbench import conditions, procs
from virtbench.conditions import hostnet, storage
from virtbench.conditions import targets
from virtbench.machines import nfsclient
from virtbench.hostdirs import is_mounted
from virtbench.drivers.container import driver as container
from virtbench.drivers.base import DriverContext
from virtbench.model import EnvSpec, Shape
from virtbench.workloads import RunContext, get
from vbleftovers import assert_clean

pytestmark = pytest.mark.podman
if not shutil.which("podman") or not procs.run(["podman", "info"], timeout=60).ok:
    pytest.skip("podman is not usable here", allow_module_level=True)
if os.geteuid() != 0:
    pytest.skip("host mounts for containers need root", allow_module_level=True)


@pytest.fixture(scope="module")
def pair(guest_image, tmp_path_factory):
    d = container.ContainerDriver(DriverContext(f"t{uuid.uuid4().hex[:10]}", tmp_path_factory.mktemp("w"),
                                                guest_image))
    env = EnvSpec("ctr", "container", Shape("t", vcpus=1, memory_mb=512))
    insts = {"server": d.provision(env, 1, "server"), "client": d.provision(env, 1, "client")}
    yield insts
    for pool in insts.values():
        for inst in pool:
            inst.teardown()
    assert not procs.run(["podman", "ps", "-a", "-q", "--filter", f"label=virtbench.run={d.context.run_id}"],
                         timeout=60).stdout.split()
    assert_clean()  # the propagation mounts went with the containers


def _inside(inst, script, *args):
    res = inst.exec(["sh", "-c", script, "sh", *args], timeout=60)
    assert res.ok, res.stderr
    return res.stdout


def test_propagation_mount(pair):
    inst = pair["server"][0]
    assert inst.host_mount_dir and is_mounted(inst.host_mount_dir)  # bound onto itself, shared
    assert _inside(inst, "grep -c ' /vb-mnt ' /proc/mounts").strip() == "1"


@pytest.mark.parametrize("value", ["tmpfs:64m", "volume"])
def test_host_mounts_show_inside(pair, value):
    kind = value.split(":")[0]
    if not targets.availability()[kind][0]:
        pytest.skip(targets.availability()[kind][1])
    inst = pair["server"][0]
    applied = conditions.apply_all({"storage": value}, {"main": [inst]})
    try:
        inside = applied.storage_dir(inst)
        assert inside.startswith("/vb-mnt/")
        _inside(inst, 'echo hello > "$1/x"', inside)
        host_dir = os.path.join(inst.host_mount_dir, os.path.basename(inside))
        with open(os.path.join(host_dir, "x")) as f:
            assert f.read() == "hello\n"
        assert applied.metadata["storage_fs"] == ("tmpfs" if kind == "tmpfs" else "ext2/ext3")
    finally:
        assert applied.close() == []
    assert _inside(inst, 'ls /vb-mnt | wc -l').strip() == "0"  # unmounted inside too
    assert_clean(containers_alive=True)


def test_nbd_target_in_a_container_with_fio(pair):
    if not targets.availability()["nbd"][0]:
        pytest.skip(targets.availability()["nbd"][1])
    inst = pair["client"][0]
    fio = get("fio")
    p = {x.name: x.default for x in fio.params}
    p.update(rw="write", size_mb=4, bs="1m")
    applied = conditions.apply_all({"storage": "nbd:128m"}, {"main": [inst]})
    try:
        assert _inside(inst, 'stat -f -c %T "$1"', applied.storage_dir(inst)).strip() in ("ext2/ext3", "ext4")
        raw = fio.execute({"main": [inst]}, p, RunContext(timeout=120, applied=applied))
        assert {s.metric: s.value for s in fio.parse(raw, p)}["throughput"] > 0
    finally:
        assert applied.close() == []
    assert _inside(inst, 'ls /vb-mnt | wc -l').strip() == "0"
    assert_clean(containers_alive=True)


def test_nfs_in_a_container_is_the_hosts_mount(pair):
    """The pod/PersistentVolume way: the host's kernel mounts, the container sees it at /vb-mnt."""
    inst = pair["client"][0]
    if not nfsclient.kernel_nfs_client()[0]:
        with pytest.raises(conditions.ConditionUnavailable, match="container .*host's kernel NFS client.*no NFS"):
            conditions.apply_all({"storage": "nfs"}, {"main": [inst]})
        assert_clean(containers_alive=True)
        return
    applied = conditions.apply_all({"storage": "nfs"}, {"main": [inst]})
    try:
        assert applied.metadata["storage_mounted_by"] == "container"
        assert applied.storage_dir(inst).startswith("/vb-mnt/")
        assert _inside(inst, 'stat -f -c %T "$1"', applied.storage_dir(inst)).strip() == "nfs"
    finally:
        assert applied.close() == []
    assert_clean(containers_alive=True)


def test_rate_cap_on_a_container_link(pair):
    ok, why = hostnet.tc_supports("tbf")
    if not ok:
        pytest.skip(why)
    iperf = get("iperf")
    p = {"duration": 1.0, "parallel": 1, "reverse": False, "window": ""}
    applied = conditions.apply_all({"rate_mbit": 100}, pair)
    try:
        assert applied.metadata["rate_mechanism"] == "tbf"
        raw = iperf.execute(pair, p, RunContext(timeout=60, applied=applied))
        got = {s.metric: s.value for s in iperf.parse(raw, p)}
        _, devs = hostnet.container_links(pair["server"][0])
    finally:
        assert applied.close() == []
    assert 50 < got["throughput"] < 110
    for prefix, dev in devs:  # the qdiscs went with the condition
        assert "tbf" not in procs.run([*prefix, "tc", "qdisc", "show", "dev", dev], timeout=30).stdout
    assert_clean(containers_alive=True)
