"""Pure pieces of the NFS ways: the VM's guestfwd rule on QEMU's command line, the storage kinds."""

import pytest

from virtbench.conditions import network, storage
from virtbench.drivers.vm import instance, qemu


def _netdev(m: qemu.QemuConfig) -> str:
    argv = m.argv("/q.sock", "/c.sock")
    return argv[argv.index("-netdev") + 1]


def test_guestfwd_rules_go_on_the_user_netdev_escaped():
    m = qemu.QemuConfig("v", "tcg", "pc", 1, 256, "/k", "/i", "", "/d.raw", ssh_port=2222,
                     guestfwd=["tcp:10.0.2.100:2049-cmd:socat - TCP:h:1,nodelay"])
    net = _netdev(m)
    assert net.startswith("user,id=net0,restrict=on,hostfwd=tcp:127.0.0.1:2222-:22,")
    # a comma inside the rule is doubled, or QEMU would read it as the next option
    assert net.endswith(",guestfwd=tcp:10.0.2.100:2049-cmd:socat - TCP:h:1,,nodelay")


def test_no_guestfwd_by_default():
    m = qemu.QemuConfig("v", "tcg", "pc", 1, 256, "/k", "/i", "", "/d.raw", ssh_port=2222)
    assert "guestfwd" not in _netdev(m)


def test_the_relayed_guest_address_is_nfs():
    assert instance.RELAY_PORTS == (2049,) and instance.RELAY_ADDR.startswith("10.0.2.")


@pytest.mark.parametrize("value", ["nfs", "nfs-datastore", "nfs-datastore:2g"])
def test_nfs_kinds_are_remote_storage(value):
    s = storage.Storage()
    assert s.coerce(value) == value
    assert storage.split(value)[0] in network.REMOTE_STORAGE


def test_pods_without_nfs_share_are_told_to_set_it():
    from virtbench.conditions import nfs, targets

    for backend in ("kubernetes", "kube-play"):
        with pytest.raises(targets.ConditionUnavailable, match='set nfs_share = "SERVER:/EXPORT"'):
            nfs.pod_nfs_choice(backend, "", None, False)


def test_pods_with_nfs_share_use_its_mount():
    from virtbench.conditions import nfs

    k8s = nfs.pod_nfs_choice("kubernetes", "nfs.example.org:/bench", None, False)
    assert k8s["storage_mounted_by"] == "kubelet (PersistentVolume)" and k8s["storage_fs"] == "nfs4"
    assert "nfs.example.org:/bench" in k8s["storage_mechanism"] and k8s["storage_nfs_share"] == "nfs.example.org:/bench"
    play = nfs.pod_nfs_choice("kube-play", "10.0.0.5:/x", None, False)
    assert play["storage_mounted_by"] == "podman (kube play volume)"
    assert "podman NFS volume" in play["storage_mechanism"]


def test_pod_share_refusal_and_network_conditions():
    from virtbench.conditions import nfs, targets

    with pytest.raises(targets.ConditionUnavailable, match="^why not$"):
        nfs.pod_nfs_choice("kube-play", "h:/x", "why not", False)
    with pytest.raises(targets.ConditionUnavailable, match="delay_ms/rate_mbit cannot be put in the path"):
        nfs.pod_nfs_choice("kubernetes", "h:/x", None, True)


def test_kube_play_refusal_matches_the_containers_on_this_kernel():
    """Real: this machine's kernel. Where it has no NFS client (these machines) the kube-play pods'
    share is refused with the same kernel reason as the container way."""
    from types import SimpleNamespace

    from virtbench.conditions import nfs, targets
    from virtbench.drivers import traits_of
    from virtbench.machines import local, nfsclient
    from virtbench.model import EnvSpec, Shape

    ok, why = nfsclient.kernel_nfs_client()
    got = nfsclient.kube_play_nfs_refusal("10.0.0.5:/vb", local())
    if ok:
        assert got is None
        return
    ctr = nfs.host_mount_refusal(SimpleNamespace(env=EnvSpec("c", "container", Shape("native"), {}), name="c",
                                                      traits=traits_of("container")))
    assert got.startswith("storage=nfs in a kube-play pod: nfs_share 10.0.0.5:/vb is a podman NFS volume")
    assert got.endswith(why) and ctr.endswith(why) and "no NFS client" in why


class _FakeClusterPod:
    """Stands in for a kubernetes-backend pod because no cluster can be reached here: it records the
    commands the condition runs in the pod (the kube-play pod of tests/test_pods_kubeplay.py is real)."""

    backend_name, nfs_share, nfs_refusal, name = "kubernetes", "nfs.example.org:/bench", None, "p-0"

    def __init__(self):
        from virtbench.model import EnvSpec, Shape

        self.env = EnvSpec("k", "pods", Shape("native"), {"backend": "kubernetes"})
        self.ran = []

    def nfs_dir(self):
        return "/vb-nfs/vb-run-k-main-g1-abc"

    def exec(self, argv, timeout=None):
        from virtbench.model import ExecResult

        self.ran.append(list(argv))
        return ExecResult(list(argv), 0, "", "", 0.0, 0.0, False)


def test_storage_nfs_on_a_cluster_pod_is_its_share_directory():
    from virtbench.conditions import base, nfs

    pod, applied = _FakeClusterPod(), base.Applied()
    path, meta = nfs.nfs(pod, None, applied)
    assert path == pod.nfs_dir() and pod.ran == [["mkdir", "-p", path]]
    assert meta["storage_mounted_by"] == "kubelet (PersistentVolume)"
    assert applied.close() == [] and pod.ran[-1] == ["rm", "-rf", path]  # nothing left on the user's share
