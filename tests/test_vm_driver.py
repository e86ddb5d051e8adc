"""The vm driver against a real QEMU: one VM booted for the module (TCG here, KVM where it works).

Boots, runs commands, times out inside the guest, copies files, attaches a disk, reboots, tears
down leaving nothing; a guest with a bad kernel argument becomes a failure with its console tail;
Ctrl-C and SIGKILL of virtbench leave no QEMU behind.
"""

import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
import uuid

import pytest

from virtbench import paths
from virtbench.drivers.vm import driver as vmdrv
from virtbench.drivers.base import DriverContext
from virtbench.machines import ledger, local
from virtbench.model import EnvSpec, Shape
from virtbench.drivers.vm import disk, site
from virtbench.drivers.vm.instance import BootFailure

pytestmark = pytest.mark.slow

if not shutil.which("qemu-system-x86_64") or not shutil.which("qemu-img"):
    pytest.skip("QEMU is not installed (apt-get install qemu-system-x86 qemu-utils)", allow_module_level=True)
if not shutil.which("ssh"):
    pytest.skip("no ssh client (apt-get install openssh-client)", allow_module_level=True)

# Pinned to the last CPU (the cpuset option): test_qemu_runs_on_its_cpuset reads it back.
PIN = str(sorted(os.sched_getaffinity(0))[-1])
SMALL = EnvSpec("vm", "vm", Shape("t", vcpus=1, memory_mb=256), {"ready_timeout": 240.0, "cpuset": PIN,
                                                                   "swap": "64M"})


def _driver(guest_image, tmp_path):
    if os.geteuid() != 0 and not (disk.artifacts_dir(guest_image.hash) / "boot.json").exists():
        pytest.skip("building the VM disk needs root the first time")
    return vmdrv.VmDriver(DriverContext(f"t{uuid.uuid4().hex[:8]}", tmp_path, guest_image))


def _qemu_alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.fixture(scope="module")
def booted(guest_image, tmp_path_factory):
    driver = _driver(guest_image, tmp_path_factory.mktemp("vm"))
    (inst,) = driver.provision(SMALL)
    yield driver, inst
    inst.teardown()


def test_lifecycle_from_events(booted):
    _, inst = booted
    lc = inst.lifecycle
    assert lc["requested"] <= lc["created"] <= lc["running"] <= lc["init"] <= lc["ready"]
    # Events, not polling: marks carry sub-second parts that differ (not a 1-2 s poll grid).
    fractions = {round(v % 1, 3) for k, v in lc.items()}
    assert len(fractions) >= 4
    meta = inst.metadata()
    assert meta["accelerator"] == site.accelerator_of(inst.machine)["accel"]  # what a real probe boot found here
    if meta["accelerator"] == "tcg":
        assert "not hardware virtualization" in meta["accelerator_note"]
        assert meta["virtualization"] == "emulation (TCG)"
    assert meta["disk_model"] == "virtio" and meta["nic_model"] == "virtio" and meta["image_mode"] == "overlay"
    assert meta["guest_uptime_at_init"] > 0
    markers = [m.text.split()[0] for m in inst.console.markers]
    assert markers[:3] == ["VIRTBENCH-INITRD", "VIRTBENCH-INIT", "VIRTBENCH-SSHD"]
    assert inst.alive()


def test_qemu_runs_on_its_cpuset(booted):
    _, inst = booted
    pid = int((inst.mdir / "qemu.pid").read_text())
    status = open(f"/proc/{pid}/status").read()
    assert f"Cpus_allowed_list:\t{PIN}\n" in status
    for tid in os.listdir(f"/proc/{pid}/task"):  # vCPU and I/O threads alike
        assert f"Cpus_allowed_list:\t{PIN}\n" in open(f"/proc/{pid}/task/{tid}/status").read()
    assert inst.metadata()["cpuset"] == PIN


def test_exec_arguments_env_stdin_exit(booted):
    _, inst = booted
    nasty = ["a b", "$(id)", "'q'", ";ls", "*", ""]
    res = inst.exec(["printf", "%s|", *nasty])
    assert res.ok and res.stdout == "|".join(nasty) + "|"
    res = inst.exec(["sh", "-c", 'echo "$VB_X"'], env={"VB_X": "a b;c"}, timeout=60)
    assert res.stdout == "a b;c\n"
    res = inst.exec(["wc", "-c"], stdin=b"12345", timeout=60)
    assert res.stdout.strip() == "5"
    res = inst.exec(["sh", "-c", "exit 3"], timeout=60)
    assert res.returncode == 3 and not res.timed_out
    assert inst.exec(["test", "-x", inst.bin("vb-system")]).ok
    assert inst.exec(["test", "-d", inst.scratch_dir()]).ok
    assert inst.vcpus == 1


def test_timeout_kills_inside(booted):
    _, inst = booted
    t0 = time.monotonic()
    res = inst.exec(["sleep", "30"], timeout=1)
    assert time.monotonic() - t0 < 20
    assert res.timed_out and not res.ok and "timed out" in res.describe_failure()
    left = inst.exec(["ps", "-eo", "args"], timeout=60).stdout.splitlines()
    assert not any(line.strip() == "sleep 30" for line in left), left


def test_copy_in_and_out_binary(booted, tmp_path):
    _, inst = booted
    blob = os.urandom(300_000) + b"\x00\xff\n\r"
    src = tmp_path / "in.bin"
    src.write_bytes(blob)
    inst.inside.put(src, f"{inst.scratch_dir()}/in.bin")
    inst.inside.get(f"{inst.scratch_dir()}/in.bin", tmp_path / "out.bin")
    assert (tmp_path / "out.bin").read_bytes() == blob
    with pytest.raises(OSError):
        inst.inside.get("/no/such/file", tmp_path / "x")


def test_attach_disk(booted):
    _, inst = booted
    info = inst.attach_disk(32 << 20)
    dev = info["guest_device"]
    assert dev and dev.startswith("/dev/vd"), info
    res = inst.exec(["sh", "-c", f"echo hello | dd of={dev} bs=512 conv=sync 2>/dev/null && "
                                 f"dd if={dev} bs=512 count=1 2>/dev/null | head -c 5"], timeout=60)
    assert res.stdout == "hello", res.describe_failure()


def test_reboot_changes_boot_id(booted):
    driver, inst = booted
    before = inst.boot_id()
    (result,) = driver.reboot([inst])
    assert result["ok"], result
    assert inst.boot_id() != before
    assert result["init"] < result["ready"]
    assert [m.text.split()[0] for m in inst.console.markers].count("VIRTBENCH-INIT") == 2
    assert inst.exec(["test", "-d", inst.scratch_dir()]).ok  # the disk kept its contents
    assert "/vb-swapfile" in inst.exec(["cat", "/proc/swaps"]).stdout  # switched on again


def test_swap_option_gives_the_guest_a_swap_file(booted):
    _, inst = booted
    swaps = inst.exec(["cat", "/proc/swaps"]).stdout.splitlines()
    assert [line.split()[:3] for line in swaps[1:]] == [["/vb-swapfile", "file", str(64 * 1024 - 4)]]
    assert inst.metadata()["swap_bytes"] == 64 << 20


def test_teardown_leaves_nothing(booted):
    driver, inst = booted
    pid, workdir, run_dir = inst.proc.pgid, inst.dir, driver._run_dir
    inst.teardown()
    inst.teardown()  # idempotent
    assert not _qemu_alive(pid)
    assert not workdir.exists() and not run_dir.exists()
    assert not inst.alive()
    res = inst.exec(["true"])
    assert res.returncode == 125 and "torn down" in res.stderr
    lc = inst.lifecycle
    assert lc["teardown_start"] <= lc["teardown_end"]


def test_bad_kernel_argument_is_a_failure_with_console_tail(guest_image, tmp_path):
    driver = _driver(guest_image, tmp_path)
    env = EnvSpec("vm", "vm", Shape("t", 1, 256), {"kernel_args": "root=/dev/vdz", "ready_timeout": 20.0})
    t0 = time.monotonic()
    with pytest.raises(BootFailure) as err:
        driver.provision(env)
    assert time.monotonic() - t0 < 120
    msg = str(err.value)
    assert "did not become ready" in msg and "timed out after 20 s" in msg
    assert "console tail" in msg and "waiting for root device /dev/vdz" in msg
    assert err.value.lifecycle["requested"] <= err.value.lifecycle["running"]
    assert driver._run_dir is None and not driver._live  # nothing of it left on disk


def test_emulated_devices_boot_the_generic_kernel_with_e1000(guest_image, tmp_path):
    """devices=emulated: IDE disk and e1000 NIC, which need Debian's generic kernel (fetched once)."""
    driver = _driver(guest_image, tmp_path)
    env = EnvSpec("vm", "vm", Shape("t", 1, 256), {"devices": "emulated", "ready_timeout": 240.0})
    (inst,) = driver.provision(env)
    try:
        res = inst.exec(["sh", "-c", "uname -r; basename $(readlink -f /sys/class/net/eth0/device/driver); "
                                     "basename $(readlink -f /sys/block/sda/device/driver)"], timeout=60)
        assert res.ok, res.stderr
        release, nic_driver, disk_driver = res.stdout.split()
        assert release.endswith("-amd64") and "cloud" not in release
        assert nic_driver == "e1000" and disk_driver == "sd"
        meta = inst.metadata()
        assert meta["kernel_flavour"] == "generic" and meta["kernel_version"] == release
        assert meta["nic_model"] == "e1000" and meta["disk_model"] == "ide"
    finally:
        inst.teardown()
    assert not driver._live


CHILD = textwrap.dedent("""
    import sys, time, uuid
    from pathlib import Path
    from virtbench import image
    from virtbench.drivers.base import DriverContext
    from virtbench.drivers.vm.driver import VmDriver
    from virtbench.model import EnvSpec, Shape
    info = image.ImageInfo(sys.argv[1], Path(sys.argv[2]), {})
    d = VmDriver(DriverContext("child" + uuid.uuid4().hex[:6], Path(sys.argv[3]), info))
    print(d.run_dir(), flush=True)
    # Never becomes ready (no such root disk): the parent interrupts or kills us while it boots.
    d.provision(EnvSpec("vm", "vm", Shape("t", 1, 256), {"kernel_args": "root=/dev/vdz", "ready_timeout": 300.0}))
""")


@pytest.mark.parametrize("how", [signal.SIGINT, signal.SIGKILL], ids=["ctrl-c", "sigkill"])
def test_interrupted_or_killed_virtbench_leaves_no_qemu(guest_image, tmp_path, how):
    _driver(guest_image, tmp_path)  # skips when the boot files cannot be built
    env = {**os.environ, "PYTHONPATH": str(paths.PROJECT_ROOT / "src")}
    child = subprocess.Popen([sys.executable, "-c", CHILD, guest_image.hash, str(guest_image.tarball), str(tmp_path)],
                             stdout=subprocess.PIPE, text=True, env=env)
    try:
        from pathlib import Path

        run_dir = Path(child.stdout.readline().strip())
        pidfile = run_dir / "i0" / "qemu.pid"
        deadline = time.monotonic() + 120
        while not (pidfile.exists() and pidfile.read_text().strip()):
            assert time.monotonic() < deadline and child.poll() is None, "QEMU never started"
            time.sleep(0.05)
        qemu_pid = int(pidfile.read_text())
        assert _qemu_alive(qemu_pid)
        child.send_signal(how)
        child.wait(timeout=60)
        deadline = time.monotonic() + 15
        while _qemu_alive(qemu_pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _qemu_alive(qemu_pid), "QEMU outlived virtbench"
        if how == signal.SIGINT:
            assert not run_dir.exists()  # torn down on the way out
        else:
            # Killed: its directory stays until the next run cleans up leftovers of dead runs.
            assert run_dir.exists()
            assert any(str(run_dir) in r for r in ledger.sweep(local(), vmdrv.VmDriver.leftovers))
            assert not run_dir.exists()
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
