"""The Kubernetes testbed's pure parts: names and addresses, component configuration, keys, the
build key, and the one-line errors for a cluster that cannot be used (against a real closed port)."""

from __future__ import annotations

import datetime as dt
import ipaddress
import json
import os
import shutil
import subprocess
import time

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
    from virtbench.drivers.pods.kubernetes_backend import Cluster

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


def test_gvisor_is_a_second_runtime_of_containerd_through_the_runc_shim(tmp_path):
    import tomllib

    lay = Layout("tb", 2)
    wrapper = lay.node_dir(2) / "runsc-ptrace"
    cri = tomllib.loads(configs.containerd_toml(lay, 2, wrapper))["plugins"]["io.containerd.grpc.v1.cri"]
    runsc = cri["containerd"]["runtimes"][configs.GVISOR_HANDLER]
    assert runsc["runtime_type"] == "io.containerd.runc.v2"
    assert runsc["options"] == {"BinaryName": str(wrapper), "Root": f"{lay.node_dir(2)}/runsc-root"}
    assert cri["containerd"]["default_runtime_name"] == "runc"
    assert configs.GVISOR_HANDLER not in configs.containerd_toml(lay, 2)  # no runsc here: runc only
    script = tmp_path / "w"
    script.write_text(configs.runsc_wrapper("/bin/echo"))
    script.chmod(0o700)
    out = subprocess.run([str(script), "--root", "/r", "delete", "a b"], capture_output=True, text=True).stdout
    assert out == "--platform=ptrace --network=host --root /r delete a b\n"  # the shim's arguments kept whole
    assert configs.runtime_class() == {"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass",
                                       "metadata": {"name": "gvisor"}, "handler": "runsc"}


def test_a_testbeds_kubeconfig_names_its_state_directory(tmp_path):
    state = tmp_path / "mine"
    state.mkdir()
    (state / "kubeconfig").write_text("x")
    assert configs.testbed_of_kubeconfig(state / "kubeconfig") is None  # no registry record: not a testbed's
    (state / "registry.json").write_text(json.dumps({"testbed": "mine"}))
    assert configs.testbed_of_kubeconfig(state / "kubeconfig") == state
    (tmp_path / "link").symlink_to(state / "kubeconfig")
    assert configs.testbed_of_kubeconfig(tmp_path / "link") == state
    assert configs.testbed_of_kubeconfig(tmp_path / "nothing") is None


def test_the_clusters_processes_are_those_up_started_not_those_naming_its_files(tmp_path):
    """down's rule: recorded pid and start time, and descendants; a `kubectl --kubeconfig STATE/...`
    or a pid recorded for a process that has ended (and maybe been reused) is not the cluster's."""
    from virtbench.drivers.pods.testbed import up_down as cluster

    lay = Layout("tb", 1, tmp_path)
    lay.state.mkdir()
    ours = cluster.spawn(lay, "comp", ["sh", "-c", "sleep 60 & wait"])
    decoy = subprocess.Popen(["sleep", "60"])  # a process of the user's
    naming = subprocess.Popen(["sh", "-c", "sleep 60", "kubectl", "--kubeconfig", str(lay.kubeconfig)])
    (lay.state / "pids" / "stale.pid").write_text(f"{decoy.pid} 1")  # right pid, wrong start time
    try:
        deadline = time.monotonic() + 10
        while len(found := cluster.own_processes(lay)) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)  # the component's child
        assert ours in found and len(found) == 2
        assert decoy.pid not in found and naming.pid not in found
    finally:
        os.killpg(ours, 9)
        for p in (decoy, naming):
            p.kill()
            p.wait()


def test_down_refuses_while_a_live_run_uses_the_cluster_and_names_it(tmp_path):
    from virtbench.drivers.pods.testbed import up_down as cluster
    from virtbench.machines import testbed_owner

    lay = Layout("tb", 1, tmp_path)
    lay.state.mkdir()
    testbed_owner.write_owner(lay.state)
    with testbed_owner.used_in([lay.state], "run-42"):
        with pytest.raises(UserError) as exc:
            cluster.down("tb", root=tmp_path)
        assert "in use by run run-42 (user " in exc.value.message and "made by " in exc.value.message
        assert "--name tb --force" in exc.value.hint
    assert cluster.live_runs(lay) == []
    with pytest.raises(UserError, match="1-10 lowercase"):
        cluster.down("Bad-Name", root=tmp_path)


FAKE_RUNSC = """#!/bin/sh
echo "$@" >> "$(dirname "$0")/calls"
case " $* " in
  *" state "*) n=$(cat "$(dirname "$0")/n" 2>/dev/null || echo 0); echo $((n + 1)) > "$(dirname "$0")/n"
               [ "$n" -lt 2 ] && printf '{\\n  "status": "created"\\n}\\n' || printf '{\\n  "status": "running"\\n}\\n' ;;
  *" wait "*) echo '{"id":"c1","exitStatus":137}' ;;
esac
"""


def test_the_runsc_wrapper_gives_the_shim_a_process_that_ends_with_the_pods_container(tmp_path):
    """What containerd's runc shim sees of a pod's second container under gVisor: the pid in the pid
    file is a process of its own (not the sandbox's), which ends when runsc says the container ended,
    with its status; the shim, a subreaper, reaps it (this test is one too)."""
    import ctypes

    fake = tmp_path / "runsc"
    fake.write_text(FAKE_RUNSC)
    fake.chmod(0o700)
    wrapper = tmp_path / "wrapper"
    wrapper.write_text(configs.runsc_wrapper(str(fake)))
    wrapper.chmod(0o700)
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    (bundle / "config.json").write_text(json.dumps({"annotations": {"io.kubernetes.cri.container-type": "container"}},
                                                   separators=(",", ":")))
    pidfile = tmp_path / "init.pid"
    pidfile.write_text("4242")  # what runsc writes: the sandbox's pid
    assert ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0) == 0  # PR_SET_CHILD_SUBREAPER, as the shim
    try:
        res = subprocess.run([str(wrapper), "--root", "/r", "--log", "/l", "create", "--bundle", str(bundle),
                              "--pid-file", str(pidfile), "c1"], capture_output=True, text=True, timeout=30)
        assert res.returncode == 0, res.stderr
        waiter = int(pidfile.read_text())  # a bare number: the shim parses it with Atoi
        assert pidfile.read_text() == str(waiter)
        assert waiter != 4242
        _, status = os.waitpid(waiter, 0)
        assert os.waitstatus_to_exitcode(status) == 137  # the container's status, as runsc wait gave it
    finally:
        ctypes.CDLL(None).prctl(36, 0, 0, 0, 0)
    calls = (tmp_path / "calls").read_text().splitlines()
    assert calls[0] == "--platform=ptrace --network=host --root /r --log /l create --bundle " \
        f"{bundle} --pid-file {pidfile} c1"
    assert calls[1:] == ["--platform=ptrace --network=host --root /r state c1"] * 3 + \
        ["--platform=ptrace --network=host --root /r wait c1"]
    # the pod's sandbox (pause) container keeps runsc's pid: its process is the sandbox
    (bundle / "config.json").write_text(json.dumps({"annotations": {"io.kubernetes.cri.container-type": "sandbox"}}))
    pidfile.write_text("4242")
    assert subprocess.run([str(wrapper), "--root", "/r", "create", "--bundle", str(bundle), "--pid-file",
                           str(pidfile), "s1"], timeout=30).returncode == 0
    assert pidfile.read_text() == "4242"


def test_the_runsc_wrapper_lets_a_kill_of_a_stopped_container_succeed_and_deletes_one_never_started(tmp_path):
    """runc's kill of a stopped container succeeds, runsc's fails: containerd would never finish
    stopping the pod. A container runsc cannot signal because it never started is deleted."""
    fake = tmp_path / "runsc"
    fake.write_text("""#!/bin/sh
echo "$@" >> "$(dirname "$0")/calls"
case " $* " in
  *" kill "*) echo 'sandbox is not running' >&2; exit 128 ;;
  *" state "*) printf '{\\n  "status": "%s"\\n}\\n' "$(cat "$(dirname "$0")/status")" ;;
esac
""")
    fake.chmod(0o700)
    wrapper = tmp_path / "wrapper"
    wrapper.write_text(configs.runsc_wrapper(str(fake)))
    wrapper.chmod(0o700)
    kill = [str(wrapper), "--root", "/r", "--log", "/l", "kill", "--all", "c1", "9"]
    flags = "--platform=ptrace --network=host"
    for status, rc, then in (("stopped", 0, None), ("running", 1, None),
                             ("created", 0, f"{flags} --root /r delete --force c1")):
        (tmp_path / "status").write_text(status)
        (tmp_path / "calls").unlink(missing_ok=True)
        assert subprocess.run(kill, timeout=30).returncode == rc, status
        calls = (tmp_path / "calls").read_text().splitlines()
        assert calls[:2] == [f"{flags} --root /r --log /l kill --all c1 9", f"{flags} --root /r state c1"]
        assert calls[2:] == ([then] if then else [])
