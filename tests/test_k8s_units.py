"""The Kubernetes testbed's pure parts: names and addresses, component configuration, keys, the
build key, and the one-line errors for a cluster that cannot be used (against a real closed port)."""

from __future__ import annotations

import datetime as dt
import ipaddress
import json
import os
import shutil

import pytest
import yaml
from cryptography import x509

from virtbench.errors import UserError
from virtbench.drivers.pods.testbed import build, configs, pki
from virtbench.drivers.pods.testbed.configs import Layout


def test_layout_names_and_addresses():
    lay = Layout("tb", 3)
    assert [lay.netns(i) for i in (1, 2, 3)] == [None, "tb-n2", "tb-n3"]
    assert [lay.node_ip(i) for i in (1, 2, 3)] == ["10.232.0.1", "10.232.0.2", "10.232.0.3"]
    assert [lay.pod_cidr(i) for i in (1, 2, 3)] == ["10.244.0.0/24", "10.244.1.0/24", "10.244.2.0/24"]
    assert lay.kubeconfig.parent == lay.registry_file.parent  # the backend finds the registry beside it
    assert len(str(lay.containerd_sock(3)) + ".ttrpc") < 108  # a unix socket path's limit


def test_component_configuration_carries_the_settings_this_machine_needs():
    lay = Layout("tb", 2)
    kubelet = yaml.safe_load(configs.kubelet_yaml(lay, 2))
    assert kubelet["address"] == "10.232.0.2" and kubelet["cgroupDriver"] == "cgroupfs"
    assert kubelet["failCgroupV1"] is False and kubelet["cgroupsPerQOS"] is False
    assert kubelet["authentication"]["anonymous"]["enabled"] is False
    assert kubelet["containerRuntimeEndpoint"] == f"unix://{lay.containerd_sock(2)}"
    toml = configs.containerd_toml(lay, 2)
    assert "restrict_oom_score_adj = true" in toml and f'sandbox_image = "{configs.PAUSE_REF}"' in toml
    assert f'conf_dir = "{lay.node_dir(2)}/cni"' in toml
    cni = json.loads(configs.cni_conflist(lay, 2))
    assert cni["plugins"][0]["ipam"]["ranges"] == [[{"subnet": "10.244.1.0/24"}]]
    assert cni["plugins"][0]["bridge"] == lay.cni_bridge and cni["plugins"][0]["ipMasq"] is False
    api = configs.apiserver_args(lay)
    assert "--bind-address=127.0.0.1" in api and "--authorization-mode=Node,RBAC" in api
    proxy = yaml.safe_load(configs.kube_proxy_yaml(lay, 2, lay.node_dir(2) / "kp.kubeconfig"))
    assert proxy["conntrack"] == {"maxPerCore": 0, "min": 0} and proxy["hostnameOverride"] == "tb-n2"
    assert "--listen-client-urls=http://127.0.0.1:2379" in configs.etcd_args(lay)
    assert yaml.safe_load(configs.registry_yaml(lay))["http"]["addr"] == "127.0.0.1:5000"


def test_keys_are_private_and_certificates_say_who_and_where(tmp_path):
    old = os.umask(0)  # even a permissive umask gives 0600
    try:
        ca = pki.CA.new("test CA")
        ca.write(tmp_path)
        pki.write_pair(tmp_path, "api", ca.issue("kube-apiserver", server=True, ips=("127.0.0.1", "10.96.0.1"),
                                                 dns=("kubernetes",)))
        pki.write_sa_keys(tmp_path)
    finally:
        os.umask(old)
    for f in tmp_path.iterdir():
        assert f.stat().st_mode & 0o777 == 0o600, f
    cert = x509.load_pem_x509_certificate((tmp_path / "api.crt").read_bytes())
    sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert sans.get_values_for_type(x509.IPAddress) == [ipaddress.ip_address("127.0.0.1"),
                                                        ipaddress.ip_address("10.96.0.1")]
    assert cert.issuer == ca.cert.subject
    crt, _ = ca.issue("node", "system:nodes", client=True,
                      not_after=dt.datetime.now(dt.timezone.utc) - dt.timedelta(hours=1))
    expired = x509.load_pem_x509_certificate(crt)
    assert expired.not_valid_after_utc < dt.datetime.now(dt.timezone.utc)
    assert expired.subject.rfc4514_string() == "O=system:nodes,CN=node"


def test_build_key_follows_the_module_files(tmp_path, monkeypatch):
    src = tmp_path / "k8s"
    shutil.copytree(build.source_dir(), src)
    monkeypatch.setattr(build, "source_dir", lambda: src)
    first = build.build_key("go1.26")
    assert build.build_key("go1.26") == first
    assert build.build_key("go1.27") != first
    (src / "cluster" / "go.sum").write_text((src / "cluster" / "go.sum").read_text() + "\n")
    assert build.build_key("go1.26") != first
    assert set(build.MODULES) == {p.name for p in src.iterdir() if (p / "go.mod").is_file()}


def test_every_pinned_component_has_a_main():
    for module, names in build.MODULES.items():
        for name in names:
            assert (build.source_dir() / module / "cmd" / name / "main.go").is_file()
    gomod = (build.source_dir() / "cluster" / "go.mod").read_text()
    assert "k8s.io/kubernetes v1.34.4" in gomod and gomod.count("=> k8s.io/") == 31


def test_an_api_server_that_does_not_answer_is_one_line(tmp_path, monkeypatch):
    """A real refused connection (nothing listens on port 1)."""
    from virtbench.drivers.pods.kubernetes import Cluster

    ca = pki.CA.new("x")
    crt, key = ca.issue("u", client=True)
    from cryptography.hazmat.primitives import serialization

    kc = tmp_path / "kubeconfig"
    kc.write_text(configs.kubeconfig("https://127.0.0.1:1", "u", ca.cert.public_bytes(serialization.Encoding.PEM),
                                     crt, key, "c"))
    monkeypatch.setenv("KUBECONFIG", str(kc))
    with pytest.raises(UserError) as exc:
        Cluster().probe()
    assert exc.value.message == f"the API server https://127.0.0.1:1 (kubeconfig {kc}) does not answer: connection refused"
    assert "\n" not in exc.value.message
