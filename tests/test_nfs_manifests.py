"""Study 004's pods on NFS: the pods driver's `nfs_share` becomes an NFS PersistentVolume and a claim
bound to it by name, mounted at /vb-nfs in every container (pure: the manifests a cluster and
`podman kube play` get)."""

import pytest
import yaml

from virtbench.drivers.pods import kubeplay_backend, manifests


def _containers(dep):
    return dep["spec"]["template"]["spec"]["containers"]


def test_nfs_persistent_volume_and_bound_claim():
    docs = manifests.group("g1", 2, "localhost/vb:x", {"virtbench.run": "r"}, vcpus=1, memory_mb=512,
                           nfs=("10.200.0.2", "/srv/vb"), namespace="bench")
    pv, pvc, dep = docs
    assert [d["kind"] for d in docs] == ["PersistentVolume", "PersistentVolumeClaim", "Deployment"]
    assert pv["spec"]["nfs"] == {"server": "10.200.0.2", "path": "/srv/vb"}
    assert pv["spec"]["capacity"] == {"storage": manifests.NFS_CAPACITY} and "nfsvers=4.1" in pv["spec"]["mountOptions"]
    assert pv["spec"]["storageClassName"] == "" and pv["spec"]["persistentVolumeReclaimPolicy"] == "Retain"
    # bound by name both ways, no class (a default class would otherwise provision another volume)
    assert pvc["spec"]["volumeName"] == pv["metadata"]["name"] and pvc["spec"]["storageClassName"] == ""
    assert pv["spec"]["claimRef"] == {"namespace": "bench", "name": pvc["metadata"]["name"]}
    assert pvc["spec"]["accessModes"] == pv["spec"]["accessModes"] == ["ReadWriteMany"]
    assert pv["metadata"]["labels"]["virtbench.group"] == pvc["metadata"]["labels"]["virtbench.group"] == "g1"
    (vol,) = dep["spec"]["template"]["spec"]["volumes"]
    assert vol == {"name": "nfs", "persistentVolumeClaim": {"claimName": pvc["metadata"]["name"]}}
    for c in _containers(dep):
        assert {"name": "nfs", "mountPath": manifests.NFS_DIR} in c["volumeMounts"]
    assert list(yaml.safe_load_all(manifests.to_yaml(docs))) == docs


def test_kube_play_gets_the_same_export_as_a_podman_nfs_volume():
    docs = manifests.group("g", 1, "img", {}, nfs=("nfs.example.org", "/export"))
    pvc = docs[1]
    ann = pvc["metadata"]["annotations"]
    # `podman volume create --opt type=nfs --opt device=SERVER:/EXPORT --opt o=...`: mount.nfs needs
    # the server in the device (with device ":/export" and o=addr=... it cannot resolve the server)
    assert ann["volume.podman.io/type"] == "nfs" and ann["volume.podman.io/device"] == "nfs.example.org:/export"
    assert ann["volume.podman.io/mount-options"] == "vers=4.1,proto=tcp,hard"
    assert "claimRef" not in docs[0]["spec"]  # no namespace: kube play
    assert [d["kind"] for d in kubeplay_backend.playable(docs)] == ["PersistentVolumeClaim", "Deployment"]


def test_ipv6_server_is_bracketed_in_the_podman_device():
    assert manifests.parse_share("[fd00::5]:/vb") == ("fd00::5", "/vb")
    pvc = manifests.group("g", 1, "img", {}, nfs=("fd00::5", "/vb"))[1]
    assert pvc["metadata"]["annotations"]["volume.podman.io/device"] == "[fd00::5]:/vb"


@pytest.mark.parametrize("text", ["nfs:/", "10.0.0.5:/export", "host.example.org:/a/b_c-d.e"])
def test_share_parses(text):
    server, path = manifests.parse_share(text)
    assert f"{server}:{path}" == text


@pytest.mark.parametrize("text", ["", "server", "server:export", ":/export", "a b:/x", "h:/x,y"])
def test_bad_share_says_how_to_write_it(text):
    with pytest.raises(ValueError, match="SERVER:/EXPORT"):
        manifests.parse_share(text)


def test_nfs_share_beside_a_scratch_claim():
    docs = manifests.group("g", 1, "img", {}, claim_size="1Gi", storage_class="fast", nfs=("h", "/vb"))
    assert [d["kind"] for d in docs] == ["PersistentVolume", "PersistentVolumeClaim", "PersistentVolumeClaim",
                                         "Deployment"]
    data = docs[2]
    assert data["metadata"]["name"] == "g-data" and data["spec"]["storageClassName"] == "fast"
    assert "volumeName" not in data["spec"] and data["spec"]["accessModes"] == ["ReadWriteOnce"]
    mounts = _containers(docs[-1])[0]["volumeMounts"]
    assert mounts == [{"name": "data", "mountPath": manifests.CLAIM_DIR},
                      {"name": "nfs", "mountPath": manifests.NFS_DIR}]


def test_no_share_no_nfs_documents():
    docs = manifests.group("g", 2, "img", {})
    assert [d["kind"] for d in docs] == ["Deployment"] and "volumes" not in docs[0]["spec"]["template"]["spec"]
