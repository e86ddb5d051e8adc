"""Pods driver, pure parts: manifest generation and pod phases on recorded objects (tests/data/pods,
see its README for where each came from). The kubernetes backend against a real cluster (the
testbed's) is in test_k8s_testbed.py."""

import json
import re
from pathlib import Path

import pytest
import yaml

from virtbench.drivers.pods import manifests, phases

DATA = Path(__file__).parent / "data" / "pods"
LABELS = {"virtbench": "1", "virtbench.run": "20261125-105802-ab12cd34", "virtbench.env": "pods"}
DNS = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


def load(name):
    return json.loads((DATA / name).read_text())


@pytest.mark.parametrize("replicas", [1, 2, 8])
def test_group_manifests(replicas):
    docs = manifests.group("vb-ab12cd34-pods-server-g1", replicas, "img:1", LABELS, vcpus=1, memory_mb=128,
                           claim_size="1Gi", storage_class="nfs-client")
    claim, dep = docs  # the claim before the pods that name it
    assert claim["kind"] == "PersistentVolumeClaim" and dep["kind"] == "Deployment"
    assert claim["spec"]["accessModes"] == ["ReadWriteOnce" if replicas == 1 else "ReadWriteMany"]
    assert claim["spec"]["storageClassName"] == "nfs-client"
    assert dep["spec"]["replicas"] == replicas
    tmpl = dep["spec"]["template"]
    sel = dep["spec"]["selector"]["matchLabels"]
    assert all(tmpl["metadata"]["labels"][k] == v for k, v in sel.items())  # the selector picks its pods
    (ctr,) = tmpl["spec"]["containers"]
    assert ctr["resources"] == {"requests": {"cpu": "1", "memory": "128Mi"}, "limits": {"cpu": "1", "memory": "128Mi"}}
    assert ctr["command"] == ["sleep", "infinity"] and ctr["image"] == "img:1"
    assert ctr["volumeMounts"][0]["mountPath"] == manifests.CLAIM_DIR
    assert tmpl["spec"]["volumes"][0]["persistentVolumeClaim"]["claimName"] == claim["metadata"]["name"]
    assert list(yaml.safe_load_all(manifests.to_yaml(docs))) == docs  # what kube play and a cluster get


def test_no_limits_and_no_claim():
    (dep,) = manifests.group("g", 1, "img", LABELS)
    ctr = dep["spec"]["template"]["spec"]["containers"][0]
    assert "resources" not in ctr and "volumeMounts" not in ctr and "volumes" not in dep["spec"]["template"]["spec"]
    assert "storageClassName" not in manifests.claim("c", "1Gi", LABELS)["spec"]  # the cluster's default


def test_names_and_labels_are_valid():
    assert DNS.match(manifests.dns_name("vb-AB12_cd-Web Servers-lb"))
    assert len(manifests.dns_name("x" * 100)) <= 52
    for raw in ("20261125-105802-ab12", "host.example.org", "we!rd--", "a" * 80, ""):
        v = manifests.label_value(raw)
        assert len(v) <= 63 and re.fullmatch(r"([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?", v)


def test_node_port_service():
    svc = manifests.node_port_service("s", "pod-1", 8080, LABELS)
    assert svc["spec"]["type"] == "NodePort" and svc["spec"]["selector"] == {"virtbench.pod": "pod-1"}


def test_phases_from_conditions():
    got = phases.from_pod_object(load("k8s-running.json"))
    assert list(got) == ["created", "scheduled", "initialized", "container_started", "containers_ready", "ready"]
    assert got["ready"] - got["created"] == 3.0
    assert phases.RESOLUTION["kubernetes"] == 1.0  # the API's timestamps are whole seconds


def test_phases_from_the_clients_serialization():
    # sanitize_for_serialization writes datetimes as isoformat(): an offset instead of Z
    pod = load("k8s-running.json")
    pod["metadata"]["creationTimestamp"] = "2026-11-25T10:58:02+00:00"
    assert phases.from_pod_object(pod)["created"] == phases.timestamp("2026-11-25T10:58:02Z")


def test_pending_reason_from_events():
    rec = load("k8s-unschedulable.json")
    assert "scheduled" not in phases.from_pod_object(rec["pod"])
    why = phases.not_running_reason(rec["pod"], rec["events"])
    assert why.startswith("phase Pending") and "Unschedulable" in why and "Insufficient cpu" in why
    assert "event FailedScheduling" in why


def test_image_pull_reason():
    rec = load("k8s-image-pull.json")
    why = phases.not_running_reason(rec["pod"], rec["events"])
    assert "container ImagePullBackOff" in why and "not found" in why and "ErrImagePull" in why
    assert "Scheduled" not in why  # normal events stay out when there are warnings


def test_phases_from_podman_inspect():
    got = phases.from_podman(load("podman-pod-inspect.json"), load("podman-infra-inspect.json"),
                             load("podman-main-inspect.json"))
    assert list(got) == ["created", "container_created", "sandbox_started", "container_started"]
    assert 0 < got["container_started"] - got["created"] < 5
    assert got["created"] % 1 != 0  # nanoseconds, not whole seconds


def test_timestamp_formats():
    assert phases.timestamp("2026-11-25T10:58:02.000000001Z") == pytest.approx(phases.timestamp("2026-11-25T10:58:02Z"))
    assert phases.timestamp("2026-11-25T12:58:02+02:00") == phases.timestamp("2026-11-25T10:58:02Z")
    with pytest.raises(ValueError):
        phases.timestamp("yesterday")


def test_kubernetes_environment_checked_before_the_run(monkeypatch, tmp_path):
    from virtbench.drivers.base import DriverContext
    from virtbench.drivers.pods.kubeplay_driver import KubePlayDriver
    from virtbench.drivers.pods.kubernetes_driver import KubernetesDriver
    from virtbench.model import EnvSpec, Shape

    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "missing"))
    d = KubernetesDriver(DriverContext("u", tmp_path))
    what = " | ".join(p.what for p in d.check_env(EnvSpec("k", "pods", Shape("native"), {"backend": "kubernetes"})))
    assert f"cannot load the kubeconfig {tmp_path / 'missing'}" in what
    assert d.check() == []  # nothing of podman here is needed for a cluster
    play = EnvSpec("p", "pods", Shape("native"), {"storage_class": "fast"})
    assert [p.what for p in KubePlayDriver(DriverContext("u", tmp_path)).check_env(play)] == [
        "option storage_class is for the kubernetes backend"]


def test_nfs_share_checked_before_the_run(tmp_path):
    from virtbench.drivers.base import DriverContext
    from virtbench.drivers.pods.kubeplay_driver import KubePlayDriver
    from virtbench.model import EnvSpec, Shape

    d = KubePlayDriver(DriverContext("u", tmp_path))
    bad = EnvSpec("p", "pods", Shape("native"), {"nfs_share": "nfs.example.org/export"})
    (problem,) = d.check_env(bad)
    assert problem.what.startswith("option nfs_share: 'nfs.example.org/export' is not an NFS share")
    assert "SERVER:/EXPORT" in problem.fix
    assert d.check_env(EnvSpec("p", "pods", Shape("native"), {"nfs_share": "10.0.0.5:/export"})) == []


def _pods_env(backend):
    from virtbench.model import EnvSpec, Shape

    return EnvSpec("pods", "pods", Shape("native"), {"backend": backend})


def test_a_cluster_s_pods_have_their_own_traits_not_kube_play_s():
    """traits_for(env): kube play's pods run here (this kernel, a port of podman's bridge, a start per
    repetition); pods on a real cluster are its nodes', so none of that limits or costs them."""
    from virtbench.drivers import traits_for, traits_of
    from virtbench.drivers.base import Traits

    play, cluster = traits_for(_pods_env("kube-play")), traits_for(_pods_env("kubernetes"))
    assert play == traits_of("pods") and play.bridge_port and play.shares_kernel
    assert not (cluster.bridge_port or cluster.shares_kernel or cluster.machine_cores)
    assert cluster.repetition_overhead_s == Traits().repetition_overhead_s < play.repetition_overhead_s


def test_web_capacity_check_applies_the_bridge_and_memory_limits_to_kube_play_only(monkeypatch):
    from virtbench.workloads import get, mpijob, web

    monkeypatch.setattr(mpijob, "mem_available", lambda: 1000 * mpijob.MB)  # this machine: 1 GB free
    wl = get("web")
    params = {p.name: p.default for p in wl.params}
    params.update(replicas=web.BRIDGE_PORTS, balancer="nginx", replica_memory_mb=64)
    play = " ".join(wl.check_capacity(params, _pods_env("kube-play")))
    assert "network bridge" in play and "this machine has available" in play
    cluster = [p for p in wl.check_capacity(params, _pods_env("kubernetes")) if "is not installed" not in p]
    assert cluster == []


def test_check_of_a_cluster_environment_does_not_ask_for_podman(tmp_path, monkeypatch):
    from virtbench.drivers import make
    from virtbench.drivers.base import DriverContext
    from virtbench.drivers.container import driver as container

    asked = []
    monkeypatch.setattr(container.ContainerDriver, "check", lambda self, env=None: asked.append(env) or [])
    cluster = _pods_env("kubernetes")
    assert make("pods", DriverContext("test-pods-check", tmp_path), cluster.options).check(cluster) == [] and asked == []
    play = make("pods", DriverContext("test-pods-check", tmp_path))  # the default backend: kube play
    play.check(_pods_env("kube-play"))
    play.check()  # doctor: the default environment, kube play
    assert len(asked) == 2


def test_pods_with_a_backend_is_one_of_two_drivers_and_stays_pods_in_what_is_stored(tmp_path):
    """driver = "pods" is the kind suites, stored runs and studies name; its option backend picks the
    kube-play or the Kubernetes driver (drivers.ALIASES), and the loaded environment stays "pods"."""
    from virtbench import drivers, suite
    from virtbench.drivers.pods.kubeplay_driver import KubePlayDriver
    from virtbench.drivers.pods.kubernetes_driver import KubernetesDriver
    from virtbench.errors import UserError

    assert "pods" in drivers.names() and not {"kube-play", "kubernetes"} & set(drivers.names())
    assert {"kube-play", "kubernetes"} <= set(drivers.implementations())
    assert drivers.class_for(_pods_env("kube-play")) is KubePlayDriver
    assert drivers.class_for(_pods_env("kubernetes")) is KubernetesDriver
    assert drivers.driver_class("pods") is KubePlayDriver  # no backend: kube play, as before
    f = tmp_path / "s.toml"
    f.write_text('[suite]\nname = "s"\n\n[environments.k]\ndriver = "pods"\nbackend = "kubernetes"\n'
                 '\n[environments.bad]\ndriver = "pods"\nbackend = "kind"\n\n[[workloads]]\nname = "system"\n')
    with pytest.raises(UserError) as err:
        suite.load(f)
    assert "s.toml:10: key 'environments.bad.backend': invalid value 'kind'" in err.value.message
    assert err.value.hint == "valid choices: kube-play, kubernetes"
    f.write_text(f.read_text().replace('backend = "kind"', 'backend = "kube-play"'))
    envs = {e.name: e for e in suite.load(f).environments}
    assert envs["k"].driver == envs["bad"].driver == "pods" and envs["k"].options["backend"] == "kubernetes"
