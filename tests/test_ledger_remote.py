"""Leftovers of conditions on another machine, for real on an SSH host of this module's own testbed
("vblo", so no other test's testbed is touched): a process applies a tmpfs storage target, starts
two helpers there (an echo server and a delay proxy in front of it) and caps the rate of that host's
interface and of this machine's end of its link with tbf (as rate_mbit between machines does), and
is killed outright (SIGKILL). The next run from this machine that hands that host out removes them
(the ledger's finder of condition helpers and files: conditions/hostres.py) and names each in its
notes, even
when it hands the host out after its last provision: the run's final drain puts the names in the
store, and `virtbench show RUN` lists them (a `virtbench boot` run as well). A live owner's
directory and another controller's are never touched."""

import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from click.testing import CliRunner
from testbedkit import own_testbed

from virtbench import suite
from virtbench.cli import cli
from virtbench.conditions import hostres
from virtbench.machines import inventory, local, owners
from virtbench.machines.ssh import SshMachine
from virtbench.run.runner import Events, Runner
from virtbench.store import Store

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[1]
PREFIX = "vblo"
HOST = f"{PREFIX}h1"

# The killed process: real condition code on the testbed host, then it waits to be killed.
CHILD = r"""
import json, sys, time
from pathlib import Path
from types import SimpleNamespace
from virtbench.conditions import Applied, hostnet, targets
from virtbench.drivers.base import Traits
from virtbench.machines import inventory, local, owners
from virtbench.machines.ssh import SshMachine

m = SshMachine(inventory.load(sys.argv[1]).hosts[sys.argv[2]], control_dir=Path(sys.argv[3]))
inst = SimpleNamespace(name="killed-0", machine=m, traits=Traits(is_machine=True), env=None, address=None)
with owners.running("killed-run"):
    mount, _ = targets.tmpfs(inst, 16 << 20, Applied())
    echo = hostnet.Echo(m, "127.0.0.1")
    proxy = hostnet.Proxy(m, "127.0.0.1", echo.address, 5, 0)
    hostnet.shape(m, [([], "eth0")], 0, 100, own=False)
    hostnet.shape(local(), [([], sys.argv[4])], 0, 100, own=False)
print(json.dumps({"mount": mount, "logs": [echo.helper.log, proxy.helper.log],
                  "pids": [echo.helper.pid, proxy.helper.pid], "records": dict(map(reversed, hostnet._records.items()))}),
      flush=True)
time.sleep(600)
"""


@pytest.fixture(scope="module")
def testbed_lo(tmp_path_factory):
    """One SSH host of this module's own testbed; removed at the end."""
    with own_testbed(1, tmp_path_factory.mktemp("tb") / "inventory.yml", PREFIX) as path:
        yield str(path)


class _LateSweep(Events):
    """Hands the testbed host out after the run's last provision (at its last repetition), as a
    machine used late in a run is; keeps the notes in order with the attempts."""

    def __init__(self):
        self.runner: Runner | None = None
        self.log: list[str] = []

    def attempt(self, cell, env, repetition, warmup, status, reason) -> None:
        self.log.append(f"attempt {status} {reason or ''}")
        self.runner.machines.get(HOST)

    def note(self, message: str) -> None:
        self.log.append(message)


def _late_runner(store: Store, inventory: str, events: "_LateSweep") -> Runner:
    """One dhrystone repetition on the host, no warm-up; `events` hands the testbed host out late."""
    matrix = suite.adhoc("system", {"test": "dhrystone", "duration": "0.2", "copies": "1"}, ["host"], repeat=1)
    matrix.policy.warmup = 0
    matrix.inventory = inventory
    events.runner = Runner(store, matrix, events=events)
    return events.runner


def _tbf(m, dev: str) -> bool:
    return m.run(["tc", "qdisc", "show", "dev", dev, "root"], timeout=30).stdout.startswith("qdisc tbf 1: root")


def _alive(m, pid: int) -> bool:
    """The process runs there (a zombie waiting for its reaper does not)."""
    res = m.run(["ps", "-o", "stat=", "-p", str(pid)], timeout=30)
    return res.ok and not res.stdout.strip().startswith("Z")


def test_a_killed_process_conditions_on_a_remote_host_are_swept_and_named_in_the_runs_notes(testbed_lo, tmp_path):
    m = SshMachine(inventory.load(testbed_lo).hosts[HOST])
    child_ctl = Path(tempfile.mkdtemp(prefix="vblo-ctl-", dir="/tmp"))  # short: a socket path in it
    link = f"{PREFIX}-h1"  # this machine's end of the testbed host's link
    proc = subprocess.Popen([sys.executable, "-c", CHILD, testbed_lo, HOST, str(child_ctl), link], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    live = foreign = None
    try:
        line = proc.stdout.readline()
        if not line:
            pytest.fail(f"the conditions were not applied: {proc.communicate(timeout=30)[1][-3000:]}")
        made = json.loads(line)
        proc.kill()  # SIGKILL: no Applied.close(), no Helper.stop()
        proc.wait(timeout=30)
        mount_dir = made["mount"].rsplit("/", 1)[0]  # the claimed directory; the tmpfs is on its mnt
        remote_record = next(p for p, (machine, dev) in made["records"].items() if machine == HOST)
        left = [mount_dir, *made["logs"], remote_record]
        assert _tbf(m, "eth0") and _tbf(local(), link)
        (child_dir,) = [str(d) for d in Path(tempfile.gettempdir()).glob(f"virtbench-cond-{proc.pid}-*")]  # its records here
        # The leftovers are real: helpers running there, the tmpfs mounted, each path with its owner record.
        time.sleep(0.5)
        assert all(_alive(m, pid) for pid in made["pids"]), made
        assert hostres.mounts_under(m, mount_dir) == [made["mount"]]
        for path in left:
            assert m.exists(path) and m.exists(path + owners.OWNER), path
            assert json.loads(m.read_text(path + owners.OWNER))["run_id"] == "killed-run"
        # What must stay: a directory of this live process, and one another controller left.
        with owners.running("live-run"):
            live = hostres.machine_dir(m, "live")
        foreign = hostres.machine_dir(m, "foreign")
        m.run(["sh", "-c", 'cat > "$1"', "vb", foreign + owners.OWNER], stdin=json.dumps(
            {"host": "another-controller", "boot": None, "pid": 1, "pidstart": "1", "run_id": "x"}).encode())

        store = Store(tmp_path / "r.sqlite")
        events = _LateSweep()
        rid = _late_runner(store, testbed_lo, events).start()

        named = [f"removed a leftover of an earlier run: condition files {p} (run killed-run: its helpers, mounts "
                 f"and files) on {HOST}" for p in left]
        assert sorted(n for n in events.log if "condition files" in n) == sorted(named), events.log
        assert f"removed a leftover of an earlier run: root qdisc tbf on eth0 (run killed-run) on {HOST}" in events.log
        if f"removed a leftover of an earlier run: {child_dir}" in events.log:  # this run swept it here, at the start
            assert f"removed a leftover of an earlier run: root qdisc tbf on {link}" in events.log
        else:  # any virtbench process on this machine sweeps it: another developer's run or test was first
            assert not os.path.exists(child_dir)
        named.append(f"removed a leftover of an earlier run: root qdisc tbf on eth0 (run killed-run) on {HOST}")
        first_attempt = next(i for i, e in enumerate(events.log) if e.startswith("attempt"))
        assert all(events.log.index(n) > first_attempt for n in named)  # reported by the final drain
        lead = "removed a leftover of an earlier run: "
        assert [e["detail"] for e in store.events(rid) if e["kind"] == "removed"] == \
            [n[len(lead):] for n in events.log if n.startswith(lead)]  # every note stored, in order
        shown = CliRunner().invoke(cli, ["show", rid, "--db", str(tmp_path / "r.sqlite")], terminal_width=400)
        assert shown.exit_code == 0, shown.output
        for n in named:
            assert n in shown.output, shown.output

        # Gone: the helpers, the mount, the files and their owner records; what must stay stayed.
        assert not any(_alive(m, pid) for pid in made["pids"])
        assert hostres.mounts_under(m, mount_dir) == []
        assert not _tbf(m, "eth0") and not _tbf(local(), link)
        assert not any(m.exists(p) or m.exists(p + owners.OWNER) for p in left)
        assert m.exists(live) and m.exists(live + owners.OWNER)
        assert m.exists(foreign) and m.exists(foreign + owners.OWNER)
    finally:
        if proc.poll() is None:
            proc.kill()
        for machine, dev in ((m, "eth0"), (local(), link)):  # a failed sweep must not leave the caps
            if _tbf(machine, dev):
                machine.run(["tc", "qdisc", "del", "dev", dev, "root"], timeout=30)
        for d in (live, foreign):
            if d:
                m.run(["rm", "-rf", "--", d, d + owners.OWNER])
        local().kill_matching([str(child_ctl)])  # the killed process's ssh master
        shutil.rmtree(child_ctl, ignore_errors=True)
        m.close()


# A killed process that left one helper there (an echo server).
CHILD_HELPER = r"""
import json, sys, time
from pathlib import Path
from virtbench.conditions import hostnet
from virtbench.machines import inventory, owners
from virtbench.machines.ssh import SshMachine

m = SshMachine(inventory.load(sys.argv[1]).hosts[sys.argv[2]], control_dir=Path(sys.argv[3]))
with owners.running("killed-helper"):
    echo = hostnet.Echo(m, "127.0.0.1")
print(json.dumps({"log": echo.helper.log, "pid": echo.helper.pid}), flush=True)
time.sleep(600)
"""


class _LateBootSweep:
    """virtbench boot's events: the testbed host is handed out after the last round's sweep."""

    def __init__(self, rounds: int):
        self.runner, self.rounds, self.log = None, rounds, []

    def planned(self, rounds: int) -> None: ...

    def round(self, cell, rep, results) -> None:
        self.rounds -= 1
        self.log.append("round")
        if self.rounds == 0:
            self.runner.context.machines.get(HOST)

    def note(self, message: str) -> None:
        self.log.append(message)


@contextlib.contextmanager
def _killed_helper(testbed: str):
    """An echo server on the testbed host of a process killed outright; yields (machine, what it made)."""
    m = SshMachine(inventory.load(testbed).hosts[HOST])
    child_ctl = Path(tempfile.mkdtemp(prefix="vblo-ctl-", dir="/tmp"))
    proc = subprocess.Popen([sys.executable, "-c", CHILD_HELPER, testbed, HOST, str(child_ctl)], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline()
        if not line:
            pytest.fail(f"the helper did not start: {proc.communicate(timeout=30)[1][-3000:]}")
        made = json.loads(line)
        proc.kill()
        proc.wait(timeout=30)
        assert _alive(m, made["pid"])
        yield m, made
    finally:
        if proc.poll() is None:
            proc.kill()
        local().kill_matching([str(child_ctl)])
        shutil.rmtree(child_ctl, ignore_errors=True)
        m.close()


def _note(made: dict) -> str:
    return (f"removed a leftover of an earlier run: condition files {made['log']} (run killed-helper: its helpers, "
            f"mounts and files) on {HOST}")


def test_a_boot_run_names_a_late_sweeps_removal_too(testbed_lo, tmp_path, monkeypatch):
    from virtbench.run import boot
    from virtbench import drivers

    monkeypatch.setitem(drivers.REGISTRY, "fake", "test_boot:FakeDriver")  # starts in ms; boot times are not the point
    with _killed_helper(testbed_lo) as (m, made):
        store = Store(tmp_path / "b.sqlite")
        grid = boot.grid_from_args("fake", "1", None, None, None, 2, {})
        events = _LateBootSweep(rounds=2)
        runner = events.runner = boot.BootRunner(store, grid, events=events, inventory=testbed_lo)
        rid = runner.run()
        last_round = max(i for i, e in enumerate(events.log) if e == "round")
        assert _note(made) in events.log and events.log.index(_note(made)) > last_round  # by the final drain
        assert [e["detail"] for e in store.events(rid) if e["kind"] == "removed"] == [_note(made).split(": ", 1)[1]]
        shown = CliRunner().invoke(cli, ["show", rid, "--db", str(tmp_path / "b.sqlite")], terminal_width=400)
        assert shown.exit_code == 0 and _note(made) in shown.output, shown.output
        assert not _alive(m, made["pid"]) and not m.exists(made["log"])


class _Interrupted(_LateSweep):
    """Ctrl-C right after the testbed host was handed out late (what SIGINT raises in the main thread)."""

    def attempt(self, cell, env, repetition, warmup, status, reason) -> None:
        super().attempt(cell, env, repetition, warmup, status, reason)
        raise KeyboardInterrupt


def test_an_interrupted_run_still_names_a_late_sweeps_removal(testbed_lo, tmp_path):
    with _killed_helper(testbed_lo) as (m, made):
        store = Store(tmp_path / "r.sqlite")
        events = _Interrupted()
        runner = _late_runner(store, testbed_lo, events)
        with pytest.raises(KeyboardInterrupt):
            runner.start()
        rid = runner.run_id
        assert store.run(rid)["status"] == "interrupted"
        assert _note(made) in events.log
        assert [e["detail"] for e in store.events(rid) if e["kind"] == "removed"] == [_note(made).split(": ", 1)[1]]
        shown = CliRunner().invoke(cli, ["show", rid, "--db", str(tmp_path / "r.sqlite")], terminal_width=400)
        assert shown.exit_code == 0 and _note(made) in shown.output, shown.output
        assert not _alive(m, made["pid"])
