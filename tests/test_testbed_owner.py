"""Testbeds that belong to someone, for real (sshd hosts in network namespaces): the owner record,
runs registered while they use a testbed, `down` refusing under a live run, default names and
subnets that do not collide, and `down` returning only once its processes are reaped."""

import ipaddress
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from virtbench.errors import UserError
from virtbench.machines import testbed, testbed_owner

pytestmark = pytest.mark.slow

# Per process, so two test sessions on one machine (two developers) never take down each other's testbed.
PREFIX = f"vbto{os.getpid() % 100000}"


def vb(*args, timeout=300):
    return subprocess.run([sys.executable, "-m", "virtbench.cli", *args], capture_output=True, text=True,
                          timeout=timeout)


@pytest.fixture
def bed(tmp_path):
    if blocking := [p for p in testbed.check() if p.startswith("not root") or "refuses network" in p]:
        pytest.skip("; ".join(blocking))
    testbed.down(PREFIX, force=True)
    # `up` in a process of its own, as a user runs it: its sshds outlive it, reparented; the subnet
    # is the first free one (the default)
    res = vb("testbed", "up", "1", "--inventory", str(tmp_path / "inv.yml"), "--name", PREFIX)
    assert res.returncode == 0, res.stderr
    yield tmp_path / "inv.yml"
    testbed.down(PREFIX, force=True)


def test_default_name_has_the_user_and_the_subnet_is_free(bed):
    import yaml

    assert testbed.default_name() == "tb" + "".join(c for c in testbed.user().lower() if c.isalnum())[:8]
    taken = yaml.safe_load(bed.read_text())["all"]["children"]["testbed"]["hosts"]
    (addr,) = [h["ansible_host"] for h in taken.values()]
    net = testbed.free_subnet()
    assert net.startswith("10.214.") and net.endswith(".0/24")
    assert ipaddress.ip_address(addr) not in ipaddress.ip_network(net)  # the fixture's subnet is taken


def test_owner_is_recorded_and_up_on_a_taken_name_says_whose(bed, tmp_path):
    rec = testbed.owner(PREFIX)
    assert rec["user"] == testbed.user() and rec["created"] <= time.time()
    with pytest.raises(UserError) as info:
        testbed.up(1, tmp_path / "again.yml", prefix=PREFIX, subnet="10.224.0.0/24")
    assert f"made by {testbed.user()}" in info.value.message and "--name" in info.value.hint + "testbed down"
    assert testbed.status(PREFIX, probe=False)["owner"]["user"] == testbed.user()


def test_down_refuses_under_a_live_run_and_names_it(bed, tmp_path):
    db = tmp_path / "r.sqlite"
    run = subprocess.Popen([sys.executable, "-m", "virtbench.cli", "run", "--workload", "system", "--param",
                            "test=dhrystone", "--param", "copies=1", "--duration", "1.5", "--envs", "ssh",
                            "-i", str(bed), "--repeat", "3", "--db", str(db), "--json"],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.time() + 120
        while not testbed.live_runs(PREFIX) and time.time() < deadline and run.poll() is None:
            time.sleep(0.1)
        (live,) = testbed.live_runs(PREFIX)
        assert live["pid"] == run.pid
        res = vb("testbed", "down", "--name", PREFIX)
        assert res.returncode == 2 and live["run_id"] in res.stderr and "--force" in res.stderr
        assert testbed.leftovers(PREFIX)  # nothing was removed
        out, err = run.communicate(timeout=300)
        assert run.returncode == 0, err  # the run was not disturbed
        assert json.loads(out)["run_id"] == live["run_id"]
    finally:
        if run.poll() is None:
            run.kill()
    assert testbed.live_runs(PREFIX) == []  # the run deregistered itself
    # A record left by a run that died (its pid no longer that process) does not block `down`.
    stale = testbed.state_dir(PREFIX) / "runs" / "dead.json"
    stale.write_text(json.dumps({"run_id": "dead", "pid": 999999999, "start_time": "1", "boot_id": "x"}))
    assert testbed.live_runs(PREFIX) == []


def test_force_and_no_zombie_after_down(bed):
    sshd = [p for p in testbed.testbed_pids(PREFIX)]
    assert sshd
    with testbed_owner.used_by([PREFIX], "test-run"):
        with pytest.raises(UserError, match="in use by run test-run"):
            testbed.down(PREFIX)
        res = vb("testbed", "down", "--name", PREFIX, "--force")
        assert res.returncode == 0, res.stderr
        # what down killed is gone from the process table when it returns (not a zombie waiting for init)
        assert [p for p in sshd if Path(f"/proc/{p}").exists()] == []
    assert testbed.leftovers(PREFIX) == []
