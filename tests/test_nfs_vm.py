"""NFS for a VM, for real, with one TCG boot for the module: nfs-ganesha on a server link, and
- storage=nfs: the guest kernel mounts the export over QEMU's user-mode network (guestfwd relay);
  dd writes and reads there, and the file is in the server's export directory;
- storage=nfs-datastore: QEMU's NFS client (libnfs, NFSv3 through rpcbind) opens a disk image on
  the export with no mount anywhere; the image is in the export directory and grows as the guest
  writes;
- a delay on the server link slows both (the datastore's NFSv3 client dials the ports its
  portmapper names, so its delay proxies keep the server's port numbers).
Everything (guest mount, relay target, disk, server, rpcbind, link) goes away with the condition."""

import shutil
import time
from pathlib import Path

import pytest

from virtbench import conditions
from virtbench.conditions import storage
from virtbench.conditions import targets
from virtbench.conditions.hostres import base_dir
from virtbench.workloads import RunContext, get
from delaykit import assert_condition_delay
from vbleftovers import assert_clean
from vmkit import one_vm, require_vm_storage

pytestmark = pytest.mark.slow
require_vm_storage()
if not shutil.which("ganesha.nfsd") or not shutil.which("socat"):
    pytest.skip("no NFS server or relay (apt-get install nfs-ganesha nfs-ganesha-vfs socat)", allow_module_level=True)

DD = {"file_size_mb": 8, "block_mb": 1, "scale": 1.0, "dir": ""}


@pytest.fixture(scope="module")
def vm(guest_image, tmp_path_factory):
    yield from one_vm(guest_image, tmp_path_factory, 384)


def _exports() -> list[Path]:
    """The export directories of the NFS servers this process runs now."""
    return sorted(base_dir().glob("nfs-*/export"))


def _dd(vm, applied) -> dict:
    dd = get("dd")
    raw = dd.execute({"main": [vm]}, DD, RunContext(timeout=300, applied=applied))
    return {s.metric: s.value for s in dd.parse(raw, DD)}


def _guest(vm, script, *args, timeout=120):
    res = vm.exec(["sh", "-c", script, "sh", *args], timeout=timeout)
    assert res.ok, res.describe_failure()
    return res.stdout


def test_guest_mounted_nfs(vm):
    applied = conditions.apply_all({"storage": "nfs"}, {"main": [vm]})
    try:
        meta = applied.metadata
        assert meta["storage_mounted_by"] == "guest" and meta["storage_fs"] == "nfs4"
        assert "guest kernel" in meta["storage_mechanism"] and "guestfwd" in meta["storage_mechanism"]
        d = applied.storage_dir(vm)
        assert f" {d} nfs4 " in _guest(vm, "cat /proc/mounts")
        got = _dd(vm, applied)
        assert got["write"] > 0 and got["read"] > 0
        (export,) = _exports()
        _guest(vm, 'echo from-the-guest > "$1/probe" && sync', d)
        assert (export / "probe").read_text() == "from-the-guest\n"  # on the server, not a guest cache
        (export / "from-server").write_text("hello\n")
        assert _guest(vm, 'cat "$1/from-server"', d) == "hello\n"
    finally:
        assert applied.close() == []
    assert "/var/tmp/vb-" not in _guest(vm, "cat /proc/mounts")
    assert not (Path(vm.mdir) / "relay-2049").exists()  # the guest's relay points nowhere again
    assert_clean()


def test_datastore_image_on_the_export(vm):
    if not targets.availability()["nfs-datastore"][0]:
        pytest.skip(targets.availability()["nfs-datastore"][1])
    before = set(vm.exec(["ls", "/sys/block"], timeout=60).stdout.split())
    applied = conditions.apply_all({"storage": "nfs-datastore:256m"}, {"main": [vm]})
    try:
        meta = applied.metadata
        assert meta["storage_mounted_by"] == "hypervisor" and meta["storage_fs"] == "ext4"
        assert "libnfs" in meta["storage_mechanism"]
        assert len(set(vm.exec(["ls", "/sys/block"], timeout=60).stdout.split()) - before) == 1
        (export,) = _exports()
        img = export / "disk.img"
        assert img.stat().st_size == 256 << 20
        used = img.stat().st_blocks * 512
        d = applied.storage_dir(vm)
        _guest(vm, 'dd if=/dev/urandom of="$1/f" bs=1M count=16 2>/dev/null && sync', d, timeout=300)
        assert img.stat().st_blocks * 512 >= used + (16 << 20)  # the guest's blocks landed in the image
        assert _dd(vm, applied)["write"] > 0
        # No NFS mount anywhere: QEMU's own client.
        assert not _nfs_mounts(Path("/proc/mounts").read_text())
        assert not _nfs_mounts(_guest(vm, "cat /proc/mounts"))
    finally:
        assert applied.close() == []
    assert set(vm.exec(["ls", "/sys/block"], timeout=60).stdout.split()) == before
    assert_clean()


def _nfs_mounts(text: str) -> list[str]:
    return [ln for ln in text.splitlines() if len(ln.split()) > 2 and ln.split()[2] in ("nfs", "nfs4")]


def _small_files(vm, d: str, n: int = 15) -> float:
    """Seconds to create n files synchronously: each costs NFS round trips."""
    t0 = time.monotonic()
    _guest(vm, 'i=0; while [ $i -lt "$2" ]; do echo x > "$1/s$i"; sync "$1/s$i"; i=$((i+1)); done; rm -f "$1"/s*',
           d, str(n), timeout=300)
    return time.monotonic() - t0


def test_delay_slows_the_guest_mount(vm):
    times = {}
    for delay in (0, 20):
        applied = conditions.apply_all({"storage": "nfs", "delay_ms": delay}, {"main": [vm]})
        try:
            if delay:
                assert_condition_delay(applied.metadata, delay)
            times[delay] = _small_files(vm, applied.storage_dir(vm))
        finally:
            assert applied.close() == []
    # 15 files x at least 2 round trips x 40 ms: >= 1.2 s more than without the delay.
    assert times[20] > times[0] + 1.0, times
    assert_clean()


def test_delay_slows_the_datastore(vm):
    """NFSv3 dials the ports the portmapper names: the delay proxies keep the server's port numbers."""
    if not targets.availability()["nfs-datastore"][0]:
        pytest.skip(targets.availability()["nfs-datastore"][1])
    got = {}
    for delay in (0, 20):
        applied = conditions.apply_all({"storage": "nfs-datastore:64m", "delay_ms": delay}, {"main": [vm]})
        try:
            if delay:
                assert_condition_delay(applied.metadata, delay)
                assert applied.metadata["delay_mechanism"] in ("netem", "proxy")
            got[delay] = _dd(vm, applied)
        finally:
            assert applied.close() == []
    # each 1 MiB direct read waits at least one 40 ms round trip: <= 25 MB/s
    assert got[20]["read"] < 0.5 * got[0]["read"], got
    assert_clean()
