"""Pure pieces of the NFS ways: the VM's guestfwd rule on QEMU's command line, the storage kinds."""

import pytest

from virtbench.conditions import network, storage
from virtbench.vm import instance, qemu


def _netdev(m: qemu.Machine) -> str:
    argv = m.argv("/q.sock", "/c.sock")
    return argv[argv.index("-netdev") + 1]


def test_guestfwd_rules_go_on_the_user_netdev_escaped():
    m = qemu.Machine("v", "tcg", "pc", 1, 256, "/k", "/i", "", "/d.raw", ssh_port=2222,
                     guestfwd=["tcp:10.0.2.100:2049-cmd:socat - TCP:h:1,nodelay"])
    net = _netdev(m)
    assert net.startswith("user,id=net0,restrict=on,hostfwd=tcp:127.0.0.1:2222-:22,")
    # a comma inside the rule is doubled, or QEMU would read it as the next option
    assert net.endswith(",guestfwd=tcp:10.0.2.100:2049-cmd:socat - TCP:h:1,,nodelay")


def test_no_guestfwd_by_default():
    m = qemu.Machine("v", "tcg", "pc", 1, 256, "/k", "/i", "", "/d.raw", ssh_port=2222)
    assert "guestfwd" not in _netdev(m)


def test_the_relayed_guest_address_is_nfs():
    assert instance.RELAY_PORTS == (2049,) and instance.RELAY_ADDR.startswith("10.0.2.")


@pytest.mark.parametrize("value", ["nfs", "nfs-datastore", "nfs-datastore:2g"])
def test_nfs_kinds_are_remote_storage(value):
    s = storage.Storage()
    assert s.coerce(value) == value
    assert storage.split(value)[0] in network.REMOTE_STORAGE


def test_pod_refusal_points_to_the_persistent_volume():
    """The pods driver's reason (pure: it reads the instance's driver name and this kernel)."""
    from types import SimpleNamespace

    from virtbench.conditions import targets
    from virtbench.model import EnvSpec, Shape

    pod = SimpleNamespace(env=EnvSpec("p", "pods", Shape("native"), {}), name="p-0")
    why = targets._host_mount_refusal(pod)
    assert "PersistentVolume" in why and "storage_class" in why
    if not targets.kernel_nfs_client()[0]:
        assert "no NFS client" in why
