"""Conditions between machines, for real: instances of the ssh driver on two testbed hosts (sshd in
network namespaces vbts-1 and vbts-2 on this machine). rate_mbit is tbf on each host's interface
towards the other, delay_ms the delay proxy on the server's host (this kernel has no netem), both
applied through the hosts' executors; afterwards nothing of them is left on either host."""

import json
import subprocess
import time
import uuid

import pytest

from virtbench import conditions, machines, suite
from virtbench.conditions import ConditionUnavailable
from virtbench.drivers.base import DriverContext
from virtbench.drivers.ssh.driver import SshDriver
from virtbench.machines import testbed
from virtbench.model import EnvSpec, Shape
from virtbench.run.runner import Runner
from virtbench.store import Store

from delaykit import ABOVE_MS, assert_condition_delay

pytestmark = pytest.mark.slow
NETNS = ("vbts-1", "vbts-2")
HELPERS = ("vb-delayproxy", "iperf3", "sockperf", "vb-monitor")


def _pids(ns):
    out = subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True).stdout
    return {int(p) for p in out.split()}


def _cmd(pid):
    try:
        return open(f"/proc/{pid}/cmdline", "rb").read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def _qdiscs(ns):
    return subprocess.run(["ip", "netns", "exec", ns, "tc", "qdisc", "show", "dev", "eth0"],
                          capture_output=True, text=True).stdout


def _tmp_files(k):
    return list((testbed.state_dir("vbts") / "hosts" / f"h{k}" / "tmp").glob("virtbench-cond-*"))


@pytest.fixture
def hosts_clean(testbed2):
    """The hosts' processes before the test; after it, only those (the sshd listeners) may remain."""
    before = {ns: _pids(ns) for ns in NETNS}
    yield testbed2
    deadline = time.monotonic() + 10  # sessions of the closed master connections exit a moment later
    while time.monotonic() < deadline and any(_pids(ns) - before[ns] for ns in NETNS):
        time.sleep(0.2)
    for ns in NETNS:
        left = [f"{p} {_cmd(p)}" for p in _pids(ns) - before[ns]]
        assert not left, f"left running in {ns}: {left}"
        assert "tbf" not in _qdiscs(ns) and "netem" not in _qdiscs(ns), _qdiscs(ns)
    assert not _tmp_files(1) and not _tmp_files(2)


def _run(tmp_path, inventory, workload, params):
    m = suite.adhoc(workload, params, ["ssh"], repeat=1)
    m.inventory = str(inventory)
    m.policy.warmup = 0
    store = Store(tmp_path / "x.sqlite")
    run_id = Runner(store, m).start()
    rows = {}
    for s in store.samples(run_id):
        cond = json.loads(s["condition_json"])
        rows.setdefault(json.dumps(cond, sort_keys=True), {})[s["metric"]] = (s["value"], json.loads(s["metadata_json"]))
    failed = [a["reason"] for a in store.attempts(run_id) if a["status"] != "ok"]
    assert not failed, failed
    return {json.loads(k).get("delay_ms", json.loads(k).get("rate_mbit")): v for k, v in rows.items()}


def test_rate_between_two_machines(tmp_path, hosts_clean):
    got = _run(tmp_path, hosts_clean, "iperf", {"duration": "2", "rate_mbit": "0,100"})
    free, capped = got[0]["throughput"][0], got[100]["throughput"]
    assert capped[1]["condition"]["rate_mechanism"] == "tbf"
    assert 85 < capped[0] < 105, capped[0]
    assert free > 300, free  # the cap, not the path, made it ~100
    assert sorted(capped[1]["machines"]) == ["vbtsh1", "vbtsh2"]  # server and client on two hosts


def test_delay_between_two_machines(tmp_path, hosts_clean):
    got = _run(tmp_path, hosts_clean, "netrr", {"duration": "2", "delay_ms": "0,5"})
    base, slow = got[0]["rtt_p50"][0], got[5]["rtt_p50"]
    meta = slow[1]["condition"]
    assert meta["delay_mechanism"] == "proxy"  # no netem on this kernel
    assert_condition_delay(meta, 5)
    # netrr's own median round trip: at least 2 x 5 ms (never early), and above the base by no more
    # than a busy machine's wake-ups add (delaykit)
    assert 10_000 <= slow[0] and slow[0] - base < 2_000 * (5 + ABOVE_MS), (base, slow[0])


def test_storage_on_a_remote_machine(testbed2, tmp_path):
    """tmpfs is mounted on the remote host through its executor; targets with a server link are
    skipped there with the reason, never a crash."""
    pool = machines.pool_for(str(testbed2))
    try:
        driver = SshDriver(DriverContext(f"t{uuid.uuid4().hex[:8]}", tmp_path, machines=pool))
        (inst,) = driver.provision(EnvSpec("ssh", "ssh", Shape("native"), {"hosts": "vbtsh1"}))
        try:
            applied = conditions.apply_all({"storage": "tmpfs:16m"}, {"main": [inst]})
            try:
                d = applied.storage_dir(inst)
                assert inst.exec(["stat", "-f", "-c", "%T", d], timeout=30).stdout.strip() == "tmpfs"
                assert applied.metadata["storage_mechanism"] == "tmpfs mounted by vbtsh1"
                assert inst.exec(["sh", "-c", 'echo x > "$1/probe"', "sh", d], timeout=30).ok
            finally:
                assert applied.close() == []
            assert not inst.exec(["test", "-e", d], timeout=30).ok
            assert d not in inst.exec(["cat", "/proc/self/mounts"], timeout=30).stdout
            for kind in ("nbd", "iscsi", "nfs"):
                with pytest.raises(ConditionUnavailable, match="on vbtsh1: .* this machine only"):
                    conditions.apply_all({"storage": kind}, {"main": [inst]})
        finally:
            inst.teardown()
    finally:
        pool.close()
    assert not _tmp_files(1)
