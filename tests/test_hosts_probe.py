"""`virtbench hosts`: the probe script's parser on captured output, the probe through LocalMachine,
unreachable hosts and what their rows may say, and the command on real SSH hosts (testbed)."""

import json
import os
import platform
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from virtbench.machines import inventory
from virtbench.machines.base import MachineUnreachable
from virtbench.machines.inventory import HostSpec
from virtbench.machines.local import LocalMachine
from virtbench.machines.probe import (KVM_ABSENT, KVM_DENIED, KVM_PRESENT, PROBE_SCRIPT, parse_probe, probe_host,
                                      probe_hosts, scrub)
from virtbench.model import ExecResult

DATA = Path(__file__).parent / "data"


def vb(*args):
    res = subprocess.run([sys.executable, "-m", "virtbench.cli", *args], capture_output=True, text=True,
                         timeout=300)
    res.stderr = " ".join(res.stderr.split())  # the error console wraps long lines
    return res


# -- the parser ------------------------------------------------------------------------------------------------

def test_parse_captured_output():
    # tests/data/hosts_probe.txt: PROBE_SCRIPT run with `sh -c` on a Debian 12 machine with /dev/kvm,
    # podman, Open MPI and an installed docker whose daemon was not running.
    got = parse_probe((DATA / "hosts_probe.txt").read_text())
    assert got["reachable"] is True and got["reason"] is None
    assert got["arch"] == "x86_64" and got["kernel"] == "6.18.44-fc-v669"
    assert got["cpu_model"] == "Intel(R) Xeon(R) Processor"
    assert got["cores"] == 2 and got["memory_mb"] == 24684084 // 1024
    assert got["kvm"] == KVM_PRESENT and "boot not tried" in got["kvm"]  # never a plain "yes"
    assert got["podman"] == "4.3.1" and got["mpi"] == "4.1.4" and got["python3"] == "3.11.7"
    assert got["docker"] is None and any("docker info" in n for n in got["notes"])


def test_parse_variants():
    # Hand-written variants of the same lines: a minimal host, and a host with other tools.
    bare = parse_probe("probe=1\narch=aarch64\nkernel=6.1.0-18-arm64\nhostname=h\ncores=0\ncpu_model=\n"
                       "memory_kb=\nkvm=absent\nprobe_end=1\n")
    assert bare["reachable"] and bare["kvm"] == KVM_ABSENT and bare["kvm"] == "no /dev/kvm"
    assert bare["cores"] is None and bare["memory_mb"] is None and bare["cpu_model"] is None
    assert bare["podman"] is bare["docker"] is bare["mpi"] is bare["python3"] is None and bare["notes"] == []

    other = parse_probe("probe=1\nkvm=denied\ndocker=Docker version 24.0.5, build ced0996\n"
                        "mpirun=HYDRA build details:\npodman=podman version 5.0.0-rc1\n")
    assert other["kvm"] == KVM_DENIED and "not writable" in other["kvm"]
    assert other["docker"] == "24.0.5" and other["podman"] == "5.0.0-rc1"
    assert other["mpi"] is None and any("not Open MPI" in n for n in other["notes"])
    assert any("cut short" in n for n in other["notes"])  # no probe_end line

    assert parse_probe("")["reachable"] is False
    assert parse_probe("Welcome to the bastion!\n")["reachable"] is False


def test_script_is_fixed_text():
    # One script, no parameters: nothing of an inventory or of the user is ever put into it.
    assert "{" not in PROBE_SCRIPT.replace("{print $2}", "")
    assert "$1" not in PROBE_SCRIPT and "HOME" not in PROBE_SCRIPT


# -- probing through a Machine -------------------------------------------------------------------------------------

def test_probe_local_machine():
    m = LocalMachine()
    got = probe_host(m)
    facts = m.facts()
    assert got["reachable"] is True
    assert got["kernel"] == platform.release() == facts["kernel"]
    assert got["arch"] == facts["arch"] and got["cores"] == facts["cores"]
    assert got["memory_mb"] == facts["memory_mb"]
    if not os.path.exists("/dev/kvm"):
        assert got["kvm"] == KVM_ABSENT
    elif os.access("/dev/kvm", os.R_OK | os.W_OK):
        assert got["kvm"] == KVM_PRESENT
    else:
        assert got["kvm"] == KVM_DENIED
    assert (got["podman"] is not None) == (shutil.which("podman") is not None)
    assert got["python3"] is not None


class FakeMachine:
    """Stands for an SshMachine that fails: ssh's messages as SshMachine.run passes them on."""

    def __init__(self, spec, stderr="", returncode=255, raises=None):
        self.spec, self.name = spec, spec.name
        self.stderr, self.returncode, self.raises = stderr, returncode, raises
        self.closed = False

    def run(self, argv, timeout=None, **kw):
        if self.raises:
            raise self.raises
        return ExecResult(list(argv), self.returncode, "", self.stderr, 0.0, 1.0)

    def close(self):
        self.closed = True


SECRET = HostSpec("w1", address="10.0.0.5", port=2222, user="alice", key_file="/home/alice/.ssh/lab_key")


def test_unreachable_rows_name_no_user_or_key():
    msg = ("Warning: Identity file /home/alice/.ssh/lab_key not accessible: No such file or directory.\n"
           "alice@10.0.0.5: Permission denied (publickey).")
    row = probe_host(FakeMachine(SECRET, stderr=msg))
    assert row["reachable"] is False and "Permission denied" in row["reason"]
    assert "alice" not in row["reason"] and "lab_key" not in row["reason"]

    row = probe_host(FakeMachine(SECRET, raises=MachineUnreachable("w1", "alice@10.0.0.5: Connection refused")))
    assert row["reachable"] is False and row["reason"] == "<user>@10.0.0.5: Connection refused"

    # A login shell that prints a banner and fails: not our probe, so not reachable for virtbench.
    row = probe_host(FakeMachine(SECRET, stderr="This account is currently not available.", returncode=1))
    assert row["reachable"] is False and row["reason"].startswith("exit status 1")


def test_scrub():
    assert scrub("Offending key in /home/bob/.ssh/known_hosts:3") == "Offending key in ~/.ssh/known_hosts:3"
    assert scrub("bob@host: denied") == "<user>@host: denied"
    assert scrub("/root/.ssh/id_rsa: bad permissions") == "~/.ssh/id_rsa: bad permissions"
    assert scrub("no route to host 10.0.0.5") == "no route to host 10.0.0.5"


def test_probe_hosts_in_parallel_keeps_order_and_closes():
    specs = [HostSpec(f"h{k}", address="127.0.0.1") for k in range(5)]
    made = []

    def connect(spec):
        m = LocalMachine(spec.name) if spec.name != "h2" else FakeMachine(spec, stderr="ssh: connect to host "
                                                                          "127.0.0.1 port 22: Connection refused")
        made.append(m)
        return m

    rows = probe_hosts(specs, connect, workers=3)
    assert [r["name"] for r in rows] == ["h0", "h1", "h2", "h3", "h4"]
    assert [r["reachable"] for r in rows] == [True, True, False, True, True]
    assert rows[2]["reason"].endswith("Connection refused") and rows[0]["address"] == "127.0.0.1"
    assert all(m.closed for m in made if isinstance(m, FakeMachine))
    assert set(rows[0]) == set(rows[2])  # the same keys either way (the --json contract)

    def refuse(spec):
        raise MachineUnreachable(spec.name, "bad host key")

    assert probe_hosts(specs[:1], refuse)[0]["reason"] == "bad host key"


# -- the command ---------------------------------------------------------------------------------------------------

def test_hosts_command_errors(tmp_path):
    res = vb("hosts", "--inventory", str(tmp_path / "missing.yml"))
    assert res.returncode == 2 and "does not exist" in res.stderr and "Traceback" not in res.stderr
    inv = tmp_path / "inv.ini"
    inv.write_text("[web]\nw1 ansible_host=127.0.0.1\n")
    res = vb("hosts", "--inventory", str(inv), "--group", "db")
    assert res.returncode == 2 and "'db'" in res.stderr and "web" in res.stderr


@pytest.mark.skipif(not shutil.which("ssh"), reason="no ssh client")
def test_hosts_command_unreachable(tmp_path):
    inv = tmp_path / "inv.ini"
    key = tmp_path / "secret_key_name"
    inv.write_text(f"[lab]\nclosed ansible_host=127.0.0.1 ansible_port=1 ansible_user=zed_user "
                   f"ansible_ssh_private_key_file={key}\n")
    res = vb("hosts", "--inventory", str(inv), "--json")
    assert res.returncode == 1, res.stderr
    (row,) = json.loads(res.stdout)
    assert row["name"] == "closed" and row["address"] == "127.0.0.1:1" and row["reachable"] is False
    assert "refused" in row["reason"].lower()
    text = vb("hosts", "--inventory", str(inv)).stdout
    assert "closed" in text and "no" in text
    for out in (res.stdout, res.stderr, text):
        assert "zed_user" not in out and "secret_key_name" not in out


def test_hosts_command_on_testbed(testbed2):
    spec = inventory.load(testbed2)
    res = vb("hosts", "--inventory", str(testbed2), "--json")
    assert res.returncode == 0, res.stderr
    rows = json.loads(res.stdout)
    assert [r["name"] for r in rows] == list(spec.hosts)
    assert len(rows) == 2
    for r in rows:
        assert r["reachable"] is True, r
        host = spec.hosts[r["name"]]
        assert r["address"].startswith(host.destination)
        # The testbed's hosts are namespaces of this machine: the same kernel and CPU.
        assert r["kernel"] == platform.release() and r["cores"] == LocalMachine().facts()["cores"]
        assert r["kvm"] in (KVM_PRESENT, KVM_DENIED, KVM_ABSENT)
    first = next(iter(spec.hosts.values()))
    assert first.key_file not in res.stdout
    text = vb("hosts", "--inventory", str(testbed2), "--group", first.name)
    assert text.returncode == 0 and first.name in text.stdout and first.key_file not in text.stdout


def test_address_from_ssh_config_for_hosts_without_one():
    specs = [HostSpec("alias1"), HostSpec("alias2", port=2200), HostSpec("h3", address="10.0.0.3")]
    where = {"alias1": ("10.9.0.1", 22), "alias2": ("10.9.0.2", 2222)}
    rows = probe_hosts(specs, lambda spec: FakeMachine(spec, stderr="refused"), resolve=where.get)
    assert [r["address"] for r in rows] == ["10.9.0.1", "10.9.0.2:2200", "10.0.0.3"]  # the inventory's port wins
