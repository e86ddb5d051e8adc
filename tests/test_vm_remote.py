"""The vm driver with `machine` = a testbed host: the image is shipped and its disk built there, QEMU
runs in that host's network namespace, and this machine reaches the guest's SSH, QMP and console
through forwards on the host's SSH connection; teardown leaves no QEMU and no forward behind."""

import os
import shutil
import socket
import subprocess
import uuid

import pytest

from virtbench import machines
from virtbench.drivers.base import DriverContext
from virtbench.drivers.vm import VmDriver
from virtbench.model import EnvSpec, Shape
from virtbench.vm import disk

pytestmark = pytest.mark.slow

if not shutil.which("qemu-system-x86_64") or not shutil.which("qemu-img"):
    pytest.skip("QEMU is not installed (apt-get install qemu-system-x86 qemu-utils)", allow_module_level=True)

HOST = "vbtsh1"


def _netns_of(pid: int) -> str:
    return subprocess.run(["ip", "netns", "identify", str(pid)], capture_output=True, text=True,
                          timeout=30).stdout.strip()


def _alive(pid: int) -> bool:
    try:
        state = open(f"/proc/{pid}/stat").read().rpartition(")")[2].split()[0]
    except OSError:
        return False
    return state != "Z"


def test_vm_on_a_testbed_host(guest_image, testbed2, tmp_path):
    if os.geteuid() != 0 and not (disk.artifacts_dir(guest_image.hash) / "boot.json").exists():
        pytest.skip("building the VM boot files needs root the first time")
    pool = machines.pool_for(str(testbed2))
    driver = VmDriver(DriverContext(f"t{uuid.uuid4().hex[:8]}", tmp_path, guest_image, pool))
    env = EnvSpec("vm", "vm", Shape("t", vcpus=1, memory_mb=256), {"machine": HOST, "ready_timeout": 240.0})
    try:
        (inst,) = driver.provision(env)
        machine = inst.machine
        assert machine.name == HOST and not machine.is_local
        pid = inst.proc.pgid  # the testbed shares this machine's PID namespace
        assert _netns_of(pid) == "vbts-1"
        res = inst.exec(["uname", "-r"], timeout=60)
        assert res.ok, res.describe_failure()
        assert res.stdout.strip() == inst.bootfiles.kernel_version
        meta = inst.metadata()
        assert meta["machine"] == HOST and meta["accelerator"] in ("kvm", "tcg")
        assert HOST in meta["network"]
        # The guest's SSH port is on the host's loopback; this machine uses a forward of it.
        ssh_here = inst.channel.port
        reach = list(inst._reach)
        assert ("127.0.0.1", ssh_here) in reach and len(machine._forwards) == len(reach)
        remote_dir = str(inst.mdir)
        assert machine.run(["test", "-S", f"{remote_dir}/qmp.sock"], timeout=30).ok
    finally:
        driver.close()
    try:
        assert not _alive(pid), "QEMU outlived teardown"
        assert not machine._forwards
        with pytest.raises(OSError):
            socket.create_connection(("127.0.0.1", ssh_here), timeout=5).close()
        assert not any(os.path.exists(r) for r in reach if isinstance(r, str))
        assert not machine.run(["test", "-e", remote_dir], timeout=30).ok
        assert not driver._live and driver._run_dir is None
    finally:
        pool.close()
