"""The local testbed: real sshd hosts in network namespaces (no mocks). Prefix "vbtt" and subnet
10.215.0.0/24 keep these tests apart from a user's testbed and from the `testbed2` fixture."""

import json
import os
import signal
import subprocess
import sys

import pytest
import yaml

from virtbench.conditions import hostnet
from virtbench.errors import UserError
from virtbench.machines import testbed

pytestmark = pytest.mark.slow

PREFIX, SUBNET = "vbtt", "10.215.0.0/24"
ADDRS = ["10.215.0.11", "10.215.0.12"]


@pytest.fixture(scope="module")
def bed(tmp_path_factory):
    if blocking := [p for p in testbed.check() if p.startswith("not root") or "refuses network" in p]:
        pytest.skip("; ".join(blocking))
    testbed.down(PREFIX)
    inv = testbed.up(2, tmp_path_factory.mktemp("tb") / "inv.yml", prefix=PREFIX, subnet=SUBNET)
    yield inv
    testbed.down(PREFIX)


def ssh(addr, command, known_hosts=None):
    argv = testbed.ssh_argv(testbed.state_dir(PREFIX), addr)
    if known_hosts:
        argv = [a.replace(str(testbed.state_dir(PREFIX) / "known_hosts"), str(known_hosts)) for a in argv]
    return subprocess.run([*argv, command], capture_output=True, text=True, timeout=30)


def test_inventory_and_ssh_with_pinned_key(bed):
    text = bed.read_text()
    assert text.startswith("# virtbench testbed") and "share one kernel and CPU" in text
    inv = yaml.safe_load(text)
    assert inv["all"]["vars"] == {"virtbench_testbed": PREFIX, "virtbench_testbed_delay_ms": 0,
                                  "virtbench_testbed_rate_mbit": 0}
    hosts = inv["all"]["children"]["testbed"]["hosts"]
    assert list(hosts) == ["vbtth1", "vbtth2"]
    known = (testbed.state_dir(PREFIX) / "known_hosts").read_text().splitlines()
    for (name, h), addr, line in zip(hosts.items(), ADDRS, known):
        assert h["ansible_host"] == addr and h["ansible_port"] == 22 and h["ansible_user"] == "root"
        assert h["virtbench_host_key"].startswith("ssh-ed25519 AAAA") and line == f"{addr} {h['virtbench_host_key']}"
        assert h["virtbench_netns"] == f"{PREFIX}-{name[-1]}"
        # the pinned key is the host's: ssh with StrictHostKeyChecking=yes gets in, in the right namespace
        res = ssh(addr, "ip -o -4 addr show dev eth0")
        assert res.returncode == 0, res.stderr
        assert addr in res.stdout
    assert testbed.status(PREFIX)["hosts"][1]["answers"] is True


def test_hosts_have_their_own_dirs(bed):
    res = ssh(ADDRS[0], "echo one > /var/lib/virtbench-host/mark && echo one > /tmp/mark && cat /tmp/mark")
    assert res.returncode == 0 and res.stdout.strip() == "one", res.stderr
    res = ssh(ADDRS[1], "test ! -e /tmp/mark && test ! -e /var/lib/virtbench-host/mark")
    assert res.returncode == 0, res.stdout + res.stderr
    assert not os.path.exists("/var/lib/virtbench-host/mark")  # nor on this machine's own fs
    assert (testbed.state_dir(PREFIX) / "hosts/h1/data/mark").read_text() == "one\n"


def test_hosts_reach_each_other(bed):
    res = ssh(ADDRS[0], f"exec 3<>/dev/tcp/{ADDRS[1]}/22 && head -c 7 <&3")
    assert res.returncode == 0 and res.stdout == "SSH-2.0", res.stderr


def test_wrong_pinned_key_is_refused(bed, tmp_path):
    other = tmp_path / "other"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(other)], check=True)
    kh = tmp_path / "known_hosts"
    kh.write_text(f"{ADDRS[0]} {' '.join(other.with_suffix('.pub').read_text().split()[:2])}\n")
    res = ssh(ADDRS[0], "true", known_hosts=kh)
    assert res.returncode == 255 and "HOST IDENTIFICATION HAS CHANGED" in res.stderr


def test_rate_cap_is_tbf_on_both_sides(bed, tmp_path):
    # a second testbed next to the first: its own name and subnet
    inv = testbed.up(1, tmp_path / "inv.yml", prefix="vbtr", subnet="10.218.0.0/24", rate_mbit=20)
    try:
        inside = subprocess.run(["ip", "netns", "exec", "vbtr-1", "tc", "qdisc", "show", "dev", "eth0"],
                                capture_output=True, text=True).stdout
        outside = subprocess.run(["tc", "qdisc", "show", "dev", "vbtr-h1"], capture_output=True, text=True).stdout
        assert "tbf" in inside and "20Mbit" in inside, inside
        assert "tbf" in outside and "20Mbit" in outside, outside
        assert yaml.safe_load(inv.read_text())["all"]["vars"]["virtbench_testbed_rate_mbit"] == 20
    finally:
        testbed.down("vbtr")
    assert testbed.leftovers("vbtr") == []


def test_delay_without_netem_is_a_clear_error(tmp_path):
    if hostnet.tc_supports("netem")[0]:
        pytest.skip("this kernel has netem")
    with pytest.raises(UserError, match="no netem") as info:
        testbed.up(1, tmp_path / "inv.yml", prefix="vbtd", subnet="10.219.0.0/24", delay_ms=5)
    assert "delay_ms" in str(info.value)
    assert testbed.leftovers("vbtd") == [] and not (tmp_path / "inv.yml").exists()


def test_disk_size_gives_a_small_host_dir(tmp_path):
    testbed.up(1, tmp_path / "inv.yml", prefix="vbtk", subnet="10.219.0.0/24", disk_size="8M")
    try:
        res = subprocess.run([*testbed.ssh_argv(testbed.state_dir("vbtk"), "10.219.0.11"),
                              "dd if=/dev/zero of=/var/lib/virtbench-host/fill bs=1M count=16"],
                             capture_output=True, text=True, timeout=30)
        assert res.returncode != 0 and "No space left on device" in res.stderr
    finally:
        testbed.down("vbtk")


def test_down_is_clean_and_idempotent(tmp_path):
    testbed.up(2, tmp_path / "inv.yml", prefix="vbtc", subnet="10.219.0.0/24")
    assert any(x.startswith("process") for x in testbed.leftovers("vbtc"))
    removed = testbed.down("vbtc")
    assert "netns vbtc-1" in removed and "link vbtc0" in removed
    assert testbed.leftovers("vbtc") == []
    assert testbed.down("vbtc") == []


def test_down_after_killed_up(tmp_path):
    """An `up` killed half way leaves namespaces, links, a stray process and its state dir: down
    finds them all by name."""
    testbed.up(2, tmp_path / "inv.yml", prefix="vbtc", subnet="10.219.0.0/24")
    for pid in testbed.testbed_pids("vbtc"):
        os.kill(pid, signal.SIGKILL)  # the sshds die with the killed run ...
    testbed.sshd_children.pop("vbtc", None)  # ... and the process that started them is gone
    # ... while another process still runs inside host 2's namespace
    stray = subprocess.Popen(["ip", "netns", "exec", "vbtc-2", "sleep", "300"], start_new_session=True)
    try:
        left = testbed.leftovers("vbtc")
        assert "netns vbtc-1" in left and "link vbtc0" in left
        assert any(x.startswith(f"process {stray.pid} ") for x in left)
        testbed.down("vbtc")
        assert stray.wait(timeout=10) == -signal.SIGTERM
        assert testbed.leftovers("vbtc") == []
    finally:
        if stray.poll() is None:
            stray.kill()
        testbed.down("vbtc")


def test_orphaned_sshd_is_found_and_ssh_clients_are_not(tmp_path):
    """An sshd whose namespace name was deleted (ip netns del only drops the name) is still found by
    its command line; an ssh client on this machine using the testbed's key is left alone."""
    testbed.up(1, tmp_path / "inv.yml", prefix="vbtc", subnet="10.219.0.0/24")
    client = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)",
                               str(testbed.state_dir("vbtc") / "id_ed25519")])
    try:
        sshd = testbed.testbed_pids("vbtc")
        assert client.pid not in sshd and len(sshd) == 1
        subprocess.run(["ip", "netns", "del", "vbtc-1"], check=True)
        assert testbed.testbed_pids("vbtc") == sshd
        testbed.down("vbtc")
        assert testbed.leftovers("vbtc") == [] and client.poll() is None
    finally:
        client.kill()
        testbed.down("vbtc")


def test_fixture_testbed2(testbed2):
    hosts = yaml.safe_load(testbed2.read_text())["all"]["children"]["testbed"]["hosts"]
    assert [h["ansible_host"] for h in hosts.values()] == ["10.216.0.11", "10.216.0.12"]
    assert all(h["answers"] for h in testbed.status("vbts")["hosts"])


def test_cli(tmp_path):
    def vb(*args):
        return subprocess.run([sys.executable, "-m", "virtbench.cli", "testbed", *args], capture_output=True,
                              text=True, timeout=120)

    res = vb("up", "1", "--inventory", str(tmp_path / "i.yml"), "--name", "vbtc", "--subnet", "10.219.0.0/24")
    try:
        assert res.returncode == 0, res.stderr
        assert "vbtch1  10.219.0.11" in res.stdout and str(tmp_path / "i.yml") in res.stdout
        assert "share one kernel and CPU" in res.stdout
        res = vb("up", "1", "--inventory", str(tmp_path / "i.yml"), "--name", "vbtc", "--subnet", "10.219.0.0/24")
        assert res.returncode == 2 and "already exists" in res.stderr and "Traceback" not in res.stderr
        assert vb("status", "--name", "vbtc").stdout.startswith("up")
    finally:
        res = vb("down", "--name", "vbtc")
    assert res.returncode == 0 and "removed netns vbtc-1" in res.stdout
    assert "nothing to remove" in vb("down", "--name", "vbtc").stdout
    res = vb("status", "--name", "vbtc")
    assert res.returncode == 1 and res.stdout.startswith("testbed vbtc is not up")
    res = vb("status", "--name", "vbtc", "--json")
    assert res.returncode == 0 and json.loads(res.stdout)["hosts"] == []


def test_sshd_that_does_not_start_is_reported_and_cleaned(tmp_path, monkeypatch):
    monkeypatch.setattr(testbed, "SSHD", "/bin/false")
    with pytest.raises(UserError, match="did not answer over ssh"):
        testbed.up(1, tmp_path / "inv.yml", prefix="vbtc", subnet="10.219.0.0/24")
    assert testbed.leftovers("vbtc") == []
