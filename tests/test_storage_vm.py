"""Remote storage for a VM, for real: QEMU's own NBD client and iSCSI initiator hot-plug a virtio disk
from a target on a server link (behind the delay proxy), the guest mounts it, fio runs on it, and
everything (guest mount, disk, block node, target, proxy) goes away with the condition."""


import pytest

from virtbench import conditions
from virtbench.conditions import ConditionUnavailable, storage
from virtbench.conditions import targets
from virtbench.workloads import RunContext, get
from delaykit import assert_condition_delay
from vbleftovers import assert_clean
from vmkit import one_vm, require_vm_storage

pytestmark = pytest.mark.slow
require_vm_storage()


@pytest.fixture(scope="module")
def vm(guest_image, tmp_path_factory):
    yield from one_vm(guest_image, tmp_path_factory, 256)


def _blocks(inst):
    return inst.exec(["ls", "/sys/block"], timeout=60).stdout.split()


def test_remote_disk_in_a_vm(vm):
    """NBD behind 5 ms (iSCSI takes the same path through QEMU's libiscsi; a TCG boot is too slow to
    repeat it here)."""
    cond = {"storage": "nbd:128m", "delay_ms": 5}
    if not targets.availability()["nbd"][0]:
        pytest.skip(targets.availability()["nbd"][1])
    before = _blocks(vm)
    dd = get("dd")
    p = {"file_size_mb": 2, "block_mb": 1, "scale": 1.0, "dir": ""}
    applied = conditions.apply_all(cond, {"main": [vm]})
    try:
        assert len(_blocks(vm)) == len(before) + 1
        assert "QEMU" in applied.metadata["storage_mechanism"] and applied.metadata["storage_fs"] == "ext4"
        if "delay_ms" in cond:
            assert_condition_delay(applied.metadata, cond["delay_ms"])
        raw = dd.execute({"main": [vm]}, p, RunContext(timeout=300, applied=applied))
        assert {s.metric: s.value for s in dd.parse(raw, p)}["write"] > 0
    finally:
        assert applied.close() == []
    assert _blocks(vm) == before  # unplugged
    assert "/var/tmp/vb-" not in vm.exec(["cat", "/proc/mounts"], timeout=60).stdout
    assert_clean()


def test_what_a_vm_cannot_have(vm):
    with pytest.raises(ConditionUnavailable, match="own disk"):
        conditions.apply_all({"storage": "volume"}, {"main": [vm]})
    # storage=nfs and nfs-datastore work in a VM: tests/test_nfs_vm.py
