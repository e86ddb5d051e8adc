"""The VM driver's pieces that need no VM: quoting, sizes, initramfs, QEMU argv, disks, stale cleanup."""

import json
import os
import shutil
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from virtbench.errors import UserError
from virtbench.errors import ConditionUnavailable
from virtbench.drivers.vm import driver as vmdrv
from virtbench.drivers.base import DriverContext
from virtbench.machines import Pool
from virtbench.machines.ssh import remote_command
from virtbench.drivers.vm import disk, guest, initrd, guest_kernels as kernels, accel_probe as probe, qemu
from virtbench.hostdirs import start_ticks


# -- the remote command string (the guest's and every SSH host's) ----------------------------------

NASTY = ["a b", "$(touch /tmp/vb-pwned)", "'quoted'", '"dq"', ";rm -rf /", "tab\there", "new\nline", "*", "~",
         "`id`", "", "back\\slash", "ümlaut"]


@pytest.mark.parametrize("shell", ["sh", "bash"])
def test_remote_command_round_trips_every_argument(shell, tmp_path):
    # What sshd does with the string: `<login shell> -c STRING`. Each argument must arrive unchanged.
    if not shutil.which(shell):
        pytest.skip(f"no {shell}")
    cmd = remote_command([sys.executable, "-c", "import json,sys; print(json.dumps(sys.argv[1:]))", *NASTY], "t1")
    out = subprocess.run([shell, "-c", cmd], capture_output=True, text=True, cwd=tmp_path, check=True).stdout
    assert json.loads(out) == NASTY
    assert not Path("/tmp/vb-pwned").exists()


def test_remote_command_env_cwd_and_timeout(tmp_path):
    cmd = remote_command(["sh", "-c", 'printf "%s|%s|%s" "$X" "$VIRTBENCH_EXEC" "$PWD"'], "t2",
                         env={"X": "a b;$(id)"}, timeout=2.5, cwd=str(tmp_path))
    out = subprocess.run(["sh", "-c", cmd], capture_output=True, text=True).stdout
    assert out == f"a b;$(id)|t2|{tmp_path}"
    slow = subprocess.run(["sh", "-c", remote_command(["sleep", "5"], "t3", timeout=0.2)], capture_output=True)
    assert slow.returncode == 124  # coreutils timeout stopped it


# -- sizes ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("text,expected", [("2G", 2 << 30), ("512M", 512 << 20), ("1.5G", 3 << 29), ("auto", None),
                                           ("", None), ("4096", 4096), ("1GiB", 1 << 30), (None, None)])
def test_parse_size(text, expected):
    assert disk.parse_size(text) == expected


@pytest.mark.parametrize("text", ["2X", "G", "-1G", "1.5"])
def test_parse_size_rejects(text):
    with pytest.raises(ValueError):
        disk.parse_size(text)


def test_format_size():
    assert disk.format_size(2 << 30) == "2G"
    assert disk.format_size(1536 << 20) == "1.5G"
    assert disk.format_size(None) == "auto"



def test_auto_disks_are_cached_by_their_free_space():
    # free_space (the VM's local storage) names its own base disk; the default keeps the old name
    assert disk.disk_name(None) == disk.disk_name(None, disk.AUTO_FREE) == "disk-auto.raw"
    assert disk.disk_name(None, 2 << 30) == f"disk-auto-free{2 << 30}.raw"
    assert disk.disk_name(1 << 30, 2 << 30) == f"disk-{1 << 30}.raw"  # padded disks ignore it
    assert vmdrv.VmDriver.options["free_space"].default == "512M"

# -- initramfs --------------------------------------------------------------------------------------

def _read_newc(data: bytes) -> dict[str, tuple[int, bytes]]:
    out, pos = {}, 0
    while True:
        assert data[pos:pos + 6] == b"070701"
        fields = [int(data[pos + 6 + 8 * i:pos + 14 + 8 * i], 16) for i in range(13)]
        mode, size, namesize = fields[1], fields[6], fields[11]
        pos += 110
        name = data[pos:pos + namesize - 1].decode()
        pos += namesize
        pos += -pos % 4
        body = data[pos:pos + size]
        pos += size
        pos += -pos % 4
        if name == "TRAILER!!!":
            return out
        out[name] = (mode, body)


def test_cpio_newc_entries():
    c = initrd.Cpio()
    c.file("/a/b/init", b"#!/bin/sh\n", 0o755)
    c.symlink("/bin/sh", "busybox")
    c.chardev("/dev/console", 5, 1)
    data = c.getvalue()
    assert len(data) % 512 == 0
    entries = _read_newc(data)
    assert stat.S_ISDIR(entries["a"][0]) and stat.S_ISDIR(entries["a/b"][0])
    assert entries["a/b/init"] == (stat.S_IFREG | 0o755, b"#!/bin/sh\n")
    assert stat.S_ISLNK(entries["bin/sh"][0]) and entries["bin/sh"][1] == b"busybox"
    assert stat.S_ISCHR(entries["dev/console"][0])


def test_cpio_rebuild_swaps_the_modules_only(tmp_path):
    base = initrd.Cpio()
    base.file("/bin/busybox", b"BB", 0o755)
    base.chardev("/dev/console", 5, 1)
    base.file("/modules/old.ko", b"old")
    base.file("/modules.list", b"old\n")
    base.file("/init", b"#!/bin/busybox sh\n", 0o755)
    (tmp_path / "kernel/net").mkdir(parents=True)
    (tmp_path / "kernel/net/e1000.ko").write_bytes(b"E1000")
    (tmp_path / "kernel/net/dep.ko").write_bytes(b"DEP")
    (tmp_path / "modules.dep").write_text("kernel/net/dep.ko:\nkernel/net/e1000.ko: kernel/net/dep.ko\n")
    data, order, deps = initrd.rebuild(base.getvalue(), tmp_path, ("e1000", "virtio_net"))
    assert order == ["dep", "e1000"] and deps["e1000"] == ["dep"]
    entries = _read_newc(data)  # the test's own reader, not the module's
    assert entries["bin/busybox"] == (stat.S_IFREG | 0o755, b"BB") and stat.S_ISCHR(entries["dev/console"][0])
    assert entries["init"][1].startswith(b"#!") and entries["modules.list"][1] == b"dep\ne1000\n"
    assert entries["modules/e1000.ko"][1] == b"E1000" and "modules/old.ko" not in entries
    assert {e[0] for e in initrd.read_entries(data)} == set(entries)


def test_generic_kernel_version_from_the_cloud_one():
    assert kernels.generic_version("6.1.0-56-cloud-amd64") == "6.1.0-56-amd64"
    with pytest.raises(UserError, match="not a Debian cloud kernel"):
        kernels.generic_version("6.1.0-56-amd64")


def test_elf_info_of_a_host_binary():
    interp, needed = initrd.elf_info(Path(shutil.which("ls")).resolve())
    assert interp and "ld-linux" in interp
    assert "libc.so.6" in needed


def test_resolve_in_root_follows_absolute_links_inside(tmp_path):
    (tmp_path / "usr/lib").mkdir(parents=True)
    (tmp_path / "usr/lib/libx.so.1").write_text("x")
    (tmp_path / "lib").symlink_to("usr/lib")
    (tmp_path / "usr/lib/libx.so").symlink_to("/lib/libx.so.1")  # absolute: must stay inside the root
    assert initrd.resolve_in_root(tmp_path, "/lib/libx.so").read_text() == "x"


def test_module_order_and_load_list(tmp_path):
    (tmp_path / "modules.dep").write_text(
        "kernel/drivers/virtio/virtio_ring.ko:\n"
        "kernel/drivers/virtio/virtio.ko: kernel/drivers/virtio/virtio_ring.ko\n"
        "kernel/drivers/block/virtio_blk.ko: kernel/drivers/virtio/virtio.ko kernel/drivers/virtio/virtio_ring.ko\n"
        "kernel/drivers/char/hw_random/virtio-rng.ko: kernel/drivers/virtio/virtio.ko\n"
        "kernel/drivers/ata/libata.ko:\n"
        "kernel/drivers/ata/ata_piix.ko: kernel/drivers/ata/libata.ko\n")
    order, deps = initrd.module_order(tmp_path, ("virtio_blk", "virtio_rng", "ata_piix", "e1000"))
    stems = [Path(m).name.removesuffix(".ko") for m in order]
    assert stems.index("virtio_ring") < stems.index("virtio") < stems.index("virtio_blk")
    assert "e1000" not in stems  # not in this kernel: left out
    assert initrd.load_list(stems, deps, ["virtio-rng"]) == ["virtio_ring", "virtio", "virtio-rng"]
    assert initrd.load_list(stems, deps, ["ata_piix"]) == ["libata", "ata_piix"]


def test_guest_scripts_are_valid_shell():
    for script in (guest.INITRD_INIT, guest.ROOT_INIT):
        res = subprocess.run(["sh", "-n"], input=script, text=True, capture_output=True)
        assert res.returncode == 0, res.stderr
    assert guest.glue_hash() == guest.glue_hash() and len(guest.glue_hash()) == 12


# -- QEMU command line ----------------------------------------------------------------------------

def _machine(**kw):
    base = dict(name="t", accel="tcg", machine="pc", vcpus=2, memory_mb=512, kernel="/k", initrd="/i",
                append="console=ttyS0", disk="/d/a,b.raw", ssh_port=2222)
    return qemu.QemuConfig(**{**base, **kw})


def test_qemu_argv_paravirt():
    argv = _machine().argv("/r/qmp.sock", "/r/con,1.sock", pidfile="/p")
    text = " ".join(argv)
    assert "-S" in argv and "-nodefaults" in argv and "-no-user-config" in argv
    assert "socket,id=qmp,path=/r/qmp.sock,server=on,wait=off" in argv
    assert "socket,id=con,path=/r/con,,1.sock,server=on,wait=off" in argv
    assert "file=/d/a,,b.raw," in text  # a comma in a path is doubled for QEMU
    assert "virtio-blk-pci,drive=root" in argv and "virtio-net-pci,netdev=net0" in argv
    netdev = argv[argv.index("-netdev") + 1]
    assert "restrict=on" in netdev and "hostfwd=tcp:127.0.0.1:2222-:22" in netdev
    assert argv[argv.index("-accel") + 1] == "tcg"


def test_qemu_argv_emulated():
    argv = _machine(disk_model="ide", nic_model="e1000").argv("/q", "/c")
    assert "ide-hd,drive=root,bus=ide.0" in argv and "e1000,netdev=net0" in argv


def test_console_reader_timestamps_lines(tmp_path):
    r, w = os.pipe()
    con = qemu.Console(os.fdopen(r, "rb"), tmp_path / "console.log")
    t0 = time.time()
    os.write(w, b"booting\r\nVIRTBENCH-INIT uptime=1.23\n")
    got = con.wait_for(lambda: con.find(guest.MARK_INIT), 5)
    assert got and got.text == "VIRTBENCH-INIT uptime=1.23" and t0 <= got.t <= time.time()
    os.write(w, b"[ 1.0] Kernel panic - not syncing: VFS\n")
    assert con.wait_for(lambda: con.failure(), 5).text.endswith("VFS")
    os.close(w)
    con.join()
    assert con.closed and "booting" in con.tail()
    assert "VIRTBENCH-INIT" in (tmp_path / "console.log").read_text()


def test_accel_choice_from_probe_record():
    tried = [{"accel": "kvm", "cpu": "host", "ok": False, "detail": "aborted"},
             {"accel": "kvm", "cpu": None, "ok": False, "detail": "hung"},
             {"accel": "tcg", "cpu": None, "ok": True, "detail": "ok"}]
    got = probe.answer_for({"accel": "tcg", "tried": tried}, "auto")
    assert got["accel"] == "tcg" and "hung" in got["kvm_problem"]
    assert probe.answer_for({"accel": "tcg", "tried": tried}, "kvm")["accel"] is None
    ok_kvm = [{"accel": "kvm", "cpu": "host", "ok": True, "detail": "ok"}]
    assert probe.answer_for({"accel": "kvm", "tried": ok_kvm, "at": 1.5e9}, "auto") == {
        "accel": "kvm", "cpu": "host", "kvm_problem": "", "tried": ok_kvm, "probed_at": 1.5e9}
    assert probe.answer_for({"accel": "kvm", "tried": ok_kvm}, "tcg")["accel"] == "tcg"


# -- instance disks ---------------------------------------------------------------------------------

@pytest.fixture
def fake_base(tmp_path):
    path = tmp_path / "base" / "disk-auto.raw"
    path.parent.mkdir()
    path.write_bytes(os.urandom(4 << 20))
    return disk.BaseDisk(path, 4 << 20, None, 0, 0)


def test_copy_and_overlay_disks(fake_base, tmp_path):
    if not shutil.which("qemu-img"):
        pytest.skip("qemu-img not installed")
    d1, d2 = tmp_path / "c", tmp_path / "o"
    d1.mkdir()
    d2.mkdir()
    path, fmt, secs = disk.make_instance_disk(fake_base, d1, "copy")
    assert fmt == "raw" and path.read_bytes() == fake_base.path.read_bytes() and secs >= 0
    path, fmt, _ = disk.make_instance_disk(fake_base, d2, "overlay")
    info = disk.qemu_img_info(path)
    assert fmt == "qcow2" and info["format"] == "qcow2" and info["backing-filename"] == str(fake_base.path)
    assert path.stat().st_size < 1 << 20  # copy-on-write: no data copied


def test_reflink_mode_works_or_says_why(fake_base, tmp_path):
    problem = disk.reflink_problem(fake_base.path.parent, tmp_path)
    if problem is None:
        path, fmt, _ = disk.make_instance_disk(fake_base, tmp_path, "reflink")
        assert path.read_bytes() == fake_base.path.read_bytes()
    else:
        assert "reflink" in problem
        with pytest.raises(ConditionUnavailable, match="reflink"):
            disk.make_instance_disk(fake_base, tmp_path, "reflink")


# -- leftovers of dead runs -------------------------------------------------------------------------

def test_the_sweep_removes_dead_runs_only(tmp_path, monkeypatch):
    monkeypatch.setenv("VIRTBENCH_DATA", str(tmp_path))
    root = disk.vm_root() / "run"
    root.mkdir(parents=True)
    dead = subprocess.Popen(["true"])
    dead.wait()
    stale = root / "deadbeef"
    (stale / "i0").mkdir(parents=True)
    (stale / "owner.json").write_text(json.dumps({"pid": dead.pid, "pidstart": "1", "run_id": "x"}))
    # A "QEMU" that is really a sleep whose command line names the pidfile: it must be killed.
    pidfile = stale / "i0" / "qemu.pid"
    victim = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", str(pidfile)])
    pidfile.write_text(str(victim.pid))
    other = subprocess.Popen(["sleep", "60"])  # a pidfile naming an unrelated process: left alone
    (stale / "i1").mkdir()
    (stale / "i1" / "qemu.pid").write_text(str(other.pid))
    live = root / "cafecafe"
    live.mkdir()
    (live / "owner.json").write_text(json.dumps({"pid": os.getpid(), "pidstart": start_ticks(os.getpid()),
                                                 "run_id": "y"}))
    try:
        pool = Pool()
        vmdrv.VmDriver(DriverContext("t", tmp_path, machines=pool))  # enlists its kind of leftover
        removed = pool.sweep()
        assert any("deadbeef" in r for r in removed) and not stale.exists()
        assert pool.sweep() == []  # once per machine and run
        assert live.exists()
        assert victim.wait(timeout=10) == -9
        assert other.poll() is None
    finally:
        for p in (victim, other):
            if p.poll() is None:
                p.kill()
                p.wait()


def test_cluster_segment_hands_out_distinct_addresses():
    import ipaddress

    from virtbench.drivers.vm.segment import Segment

    seg = Segment(3, "239.213.1.2", 40000, ipaddress.IPv4Network("10.213.3.0/24"))
    a, b = seg.allocate("a"), seg.allocate("b")
    assert (str(a), str(b)) == ("10.213.3.1/24", "10.213.3.2/24") and seg.allocate("a") == a
    seg.hosts.pop("a")  # a member left: its number is free again
    assert str(seg.allocate("c")) == "10.213.3.1/24"
    assert seg.describe() == {"mechanism": "qemu socket netdev: UDP multicast over 127.0.0.1",
                              "group": "239.213.1.2:40000", "subnet": "10.213.3.0/24"}
