"""Study 004's pod on NFS: the pods driver's manifests bind a group's claim to an NFS
PersistentVolume (the node's kernel client mounts it when the pod starts)."""

import pytest
import yaml

from virtbench.pods import manifests


def test_nfs_persistent_volume_and_bound_claim():
    docs = manifests.group("g1", 2, "localhost/vb:x", {"virtbench.run": "r"}, vcpus=1, memory_mb=512,
                           claim_size="2Gi", nfs=("10.200.0.2", "/vb"))
    pv, pvc, dep = docs
    assert [d["kind"] for d in docs] == ["PersistentVolume", "PersistentVolumeClaim", "Deployment"]
    assert pv["spec"]["nfs"] == {"server": "10.200.0.2", "path": "/vb"}
    assert pv["spec"]["capacity"] == {"storage": "2Gi"} and "nfsvers=4.1" in pv["spec"]["mountOptions"]
    assert pv["spec"]["storageClassName"] == "" and pv["spec"]["persistentVolumeReclaimPolicy"] == "Retain"
    # bound by name, no class (a default class would otherwise provision another volume)
    assert pvc["spec"]["volumeName"] == pv["metadata"]["name"] and pvc["spec"]["storageClassName"] == ""
    assert pvc["spec"]["accessModes"] == pv["spec"]["accessModes"] == ["ReadWriteMany"]
    assert pvc["spec"]["resources"]["requests"]["storage"] == "2Gi"
    vol = dep["spec"]["template"]["spec"]["volumes"][0]
    assert vol["persistentVolumeClaim"]["claimName"] == pvc["metadata"]["name"]
    mount = dep["spec"]["template"]["spec"]["containers"][0]["volumeMounts"][0]
    assert mount["mountPath"] == manifests.CLAIM_DIR
    assert list(yaml.safe_load_all(manifests.to_yaml(docs))) == docs


def test_single_pod_on_nfs_is_still_read_write_many():
    pv, pvc, _ = manifests.group("g", 1, "img", {}, claim_size="1Gi", nfs=("h", "/vb"))
    assert pvc["spec"]["accessModes"] == ["ReadWriteMany"]


def test_nfs_needs_a_size():
    with pytest.raises(ValueError, match="claim size"):
        manifests.group("g", 1, "img", {}, nfs=("h", "/vb"))


def test_class_claims_unchanged():
    pvc, _ = manifests.group("g", 1, "img", {}, claim_size="1Gi", storage_class="fast")
    assert pvc["spec"]["storageClassName"] == "fast" and "volumeName" not in pvc["spec"]
    assert pvc["spec"]["accessModes"] == ["ReadWriteOnce"]
