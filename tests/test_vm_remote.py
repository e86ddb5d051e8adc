"""The vm driver with `machine` = a testbed host: the image is shipped and its disk built there, QEMU
runs in that host's network namespace, and this machine reaches the guest's SSH, QMP and console
through forwards on the host's SSH connection; teardown leaves no QEMU and no forward behind."""

import os
import shutil
import socket
import subprocess
import sys
import time
import uuid

import pytest

from virtbench import machines
from virtbench.drivers.base import DriverContext
from virtbench.drivers.vm.driver import VmDriver
from virtbench.model import EnvSpec, Shape
from virtbench.drivers.vm import disk, site, stale

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
        assert meta["machine"] == HOST and meta["accelerator"] == site.accelerator_of(machine)["accel"]
        assert HOST in meta["network"]
        # The guest's SSH port is on the host's loopback; this machine uses a forward of it.
        ssh_here = inst.inside.spec.port  # the guest machine dials that forward
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


# A controller that starts a VM on the testbed host, says QEMU's pid and waits to be killed.
_KILLED_CONTROLLER = """
import sys, time, uuid
from pathlib import Path
from virtbench import image, machines
from virtbench.drivers.base import DriverContext
from virtbench.drivers.vm.driver import VmDriver
from virtbench.model import EnvSpec, Shape
driver = VmDriver(DriverContext("k" + uuid.uuid4().hex[:8], Path(sys.argv[2]), image.require(),
                                machines.pool_for(sys.argv[1])))
env = EnvSpec("vm", "vm", Shape("t", vcpus=1, memory_mb=256), {"machine": sys.argv[3], "ready_timeout": 240.0})
(inst,) = driver.provision(env)
print(inst.proc.pgid, inst.mdir.parent, flush=True)
time.sleep(600)
"""


def test_next_run_removes_a_vm_a_sigkilled_run_left_on_a_host(guest_image, testbed2, tmp_path):
    """A controller killed outright leaves its QEMU running on the host; the next driver that starts
    a VM there kills it, removes its run directory and names what it removed."""
    if os.geteuid() != 0 and not (disk.artifacts_dir(guest_image.hash) / "boot.json").exists():
        pytest.skip("building the VM boot files needs root the first time")
    (tmp_path / "killed").mkdir()
    child = subprocess.Popen([sys.executable, "-c", _KILLED_CONTROLLER, str(testbed2), str(tmp_path / "killed"), HOST],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    pool = machines.pool_for(str(testbed2))
    driver = None
    try:
        line = child.stdout.readline().split()
        if not line:
            pytest.fail(f"the first controller started no VM: {child.stderr.read()[-2000:]}")
        qemu, left_dir = int(line[0]), line[1]
        child.kill()  # SIGKILL: no teardown
        child.wait(timeout=30)
        time.sleep(0.5)
        assert _alive(qemu)  # the leftover is real
        machine = pool.get(HOST)  # no driver enlisted yet: nothing swept
        assert machine.run(["test", "-d", left_dir], timeout=30).ok
        # The next run's driver: the pool sweeps the host with its kinds at the next hand-out.
        driver = VmDriver(DriverContext(f"t{uuid.uuid4().hex[:8]}", tmp_path, guest_image, pool))
        env = EnvSpec("vm", "vm", Shape("t", vcpus=1, memory_mb=256), {"machine": HOST, "ready_timeout": 240.0})
        (inst,) = driver.provision(env)
        assert inst.proc.pgid != qemu and _alive(inst.proc.pgid)
        deadline = time.monotonic() + 10
        while _alive(qemu) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not _alive(qemu), "the killed run's QEMU is still running"
        assert not machine.run(["test", "-e", left_dir], timeout=30).ok
        assert any(left_dir in r and HOST in r for r in driver.stale_removed), driver.stale_removed
    finally:
        if child.poll() is None:
            child.kill()
        if driver is not None:
            driver.close()
        stale.leftovers(machines.local())  # the killed controller's local run directory
        pool.close()

