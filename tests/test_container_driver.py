"""Container driver against a real podman: limits, exec, copies, timeouts, kills, teardown, leftovers."""

import os
import shutil
import subprocess
import time
import uuid

import pytest

from virtbench.drivers.container import engine
from virtbench import procs
from virtbench.drivers.container import driver as container
from virtbench.drivers.base import DriverContext
from virtbench.errors import MissingTool, UserError
from virtbench.machines import ledger, local
from virtbench.model import EnvSpec, Shape

from instkit import ours

pytestmark = pytest.mark.podman

if not shutil.which("podman"):
    pytest.skip("podman is not installed (apt-get install podman runc)", allow_module_level=True)
if not procs.run(["podman", "info"], timeout=60).ok:
    pytest.skip("podman is installed but 'podman info' fails", allow_module_level=True)

SMALL = EnvSpec("ctr", "container", Shape("t", vcpus=1, memory_mb=256))


@pytest.fixture(scope="module")
def pair(guest_image, tmp_path_factory):
    d = container.ContainerDriver(DriverContext(f"t{uuid.uuid4().hex[:10]}", tmp_path_factory.mktemp("w"),
                                                guest_image))
    insts = d.provision(SMALL, count=2, role="node")
    yield insts
    for inst in insts:
        inst.teardown()


def test_provisioned_pair(pair, guest_image):
    a, b = pair
    assert a.name != b.name and a.name.endswith("-ctr-node-0")
    for inst in pair:
        lc = inst.lifecycle
        assert lc["requested"] <= lc["created"] <= lc["running"] <= lc["ready"]
        assert lc["requested"] - 1 <= lc["init"] <= lc["ready"]
        assert inst.address and inst.address.count(".") == 3
        meta = inst.metadata()
        assert meta["engine"] == "podman" and meta["image_hash"] == guest_image.hash
        assert meta["runtime"] and meta["cgroup_manager"] and meta["container_id"]
        assert meta["cpus"] == 1 and meta["memory_mb"] == 256
        assert inst.alive()


def test_the_machine_inside_a_container(pair, tmp_path):
    """The container's own Machine (engine exec and cp through its host's): the file conveniences,
    a working directory, and a background process stopped by its group."""
    m = pair[0].inside
    assert isinstance(m, engine.ContainerMachine) and m.host is pair[0].machine
    d = m.scratch_dir("seam")
    m.write_text(f"{d}/a b", "inside\n", mode=0o600)
    assert m.read_text(f"{d}/a b") == "inside\n" and m.exists(f"{d}/a b") and m.file_size(f"{d}/a b") == 7
    assert m.run(["pwd"], cwd=d, timeout=30).stdout.strip() == d
    assert m.which("sh") and m.missing_programs(["sh", "vb-none"]) == ["vb-none"]
    src = tmp_path / "src"
    src.write_text("payload")
    m.put(src, f"{d}/copied")
    m.get(f"{d}/copied", tmp_path / "back")
    assert (tmp_path / "back").read_text() == "payload"
    proc = m.spawn(["sleep", "300"], f"{d}/sleep.log")
    assert proc.alive()
    proc.stop(grace=0.5)
    assert not proc.alive()
    m.rmtree(d)
    assert not m.exists(d)


def test_exec_output_env_and_stdin(pair):
    a = pair[0]
    res = a.exec(["echo", "hello", "two words"])
    assert res.ok and res.stdout == "hello two words\n"
    res = a.exec(["sh", "-c", 'echo "$VB_X"'], env={"VB_X": "a b;c"}, timeout=30)
    assert res.stdout == "a b;c\n"
    res = a.exec(["wc", "-c"], stdin=b"12345", timeout=30)
    assert res.stdout.strip() == "5"
    res = a.exec(["sh", "-c", "exit 3"], timeout=30)
    assert res.returncode == 3 and not res.timed_out and not res.ok
    assert a.exec(["test", "-x", a.bin("vb-system")]).ok
    assert a.exec(["test", "-d", a.scratch_dir()]).ok


def _read_first(inst, paths_):
    for p in paths_:
        res = inst.exec(["cat", p], timeout=30)
        if res.ok:
            return res.stdout.split()
    raise AssertionError(f"none of {paths_} readable")


def test_limits_visible_inside(pair):
    a = pair[0]
    cpu = _read_first(a, ["/sys/fs/cgroup/cpu.max", "/sys/fs/cgroup/cpu/cpu.cfs_quota_us"])
    if len(cpu) == 2:  # cgroup v2: "quota period"
        assert int(cpu[0]) / int(cpu[1]) == 1
    else:
        period = _read_first(a, ["/sys/fs/cgroup/cpu/cpu.cfs_period_us"])
        assert int(cpu[0]) / int(period[0]) == 1
    mem = _read_first(a, ["/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"])
    assert int(mem[0]) == 256 * 1024 * 1024


def test_a_fractional_cpu_quota_is_the_containers_limit(driver):
    """cpus = 0.9 (issue 32's known difference): the CFS quota inside is 0.9 of a period, and says so."""
    (inst,) = driver.provision(EnvSpec("frac", "container", Shape("native"), {"cpus": 0.9}))
    try:
        cpu = _read_first(inst, ["/sys/fs/cgroup/cpu.max", "/sys/fs/cgroup/cpu/cpu.cfs_quota_us"])
        period = cpu[1:] or _read_first(inst, ["/sys/fs/cgroup/cpu/cpu.cfs_period_us"])
        assert int(cpu[0]) / int(period[0]) == pytest.approx(0.9) and inst.metadata()["cpus"] == 0.9
    finally:
        inst.teardown()
    with pytest.raises(UserError, match="cpus must be a positive number of cores"):
        driver.provision(EnvSpec("bad", "container", Shape("native"), {"cpus": "lots"}))


def test_peers_reach_each_other(pair):
    # TCP, not ping: containers lack CAP_NET_RAW. busybox httpd daemonizes, so exec returns.
    a, b = pair
    assert b.exec(["sh", "-c", f"echo peer-ok > {b.scratch_dir()}/f"]).ok
    assert b.exec(["busybox", "httpd", "-p", "8080", "-h", b.scratch_dir()], timeout=30).ok
    res = a.exec(["busybox", "wget", "-q", "-O", "-", f"http://{b.address}:8080/f"], timeout=30)
    assert res.stdout == "peer-ok\n", res.describe_failure()


def test_copy_in_and_out(pair, tmp_path):
    a = pair[0]
    src = tmp_path / "in.txt"
    src.write_text("payload\n")
    dest = f"{a.scratch_dir()}/in.txt"
    a.inside.put(src, dest)
    assert a.exec(["cat", dest]).stdout == "payload\n"
    assert a.exec(["sh", "-c", f"echo result > {a.scratch_dir()}/out.txt"]).ok
    a.inside.get(f"{a.scratch_dir()}/out.txt", tmp_path / "out.txt")
    assert (tmp_path / "out.txt").read_text() == "result\n"
    with pytest.raises(OSError):
        a.inside.get("/no/such/file", tmp_path / "x")


def test_timeout_kills_inside(pair):
    a = pair[1]
    t0 = time.monotonic()
    res = a.exec(["sleep", "30"], timeout=1)
    assert time.monotonic() - t0 < 8
    assert res.timed_out and not res.ok
    assert "timed out" in res.describe_failure()
    procs_inside = a.exec(["ps", "-eo", "args"]).stdout.splitlines()
    assert not any(line.strip() == "sleep 30" for line in procs_inside), procs_inside


def test_killed_from_outside(driver):
    (inst,) = driver.provision(SMALL)
    procs.run(["podman", "kill", inst.name], timeout=60)
    assert not inst.alive()
    res = inst.exec(["true"], timeout=10)
    assert not res.ok and not res.timed_out
    assert "not running" in res.describe_failure()
    inst.teardown()
    inst.teardown()  # idempotent
    assert ours(driver.context.run_id) == []


def test_teardown_leaves_nothing(driver):
    insts = driver.provision(SMALL, count=2)
    assert len(ours(driver.context.run_id)) == 2
    for inst in insts:
        inst.teardown()
    assert ours(driver.context.run_id) == []
    assert not insts[0].alive() and not insts[0].exec(["true"]).ok


def test_all_or_none(driver, monkeypatch):
    real_start = container.ContainerInstance.start

    def start(self, run_id):
        if self.index == 2:
            raise UserError("injected failure")
        real_start(self, run_id)

    monkeypatch.setattr(container.ContainerInstance, "start", start)
    with pytest.raises(UserError, match="injected failure"):
        driver.provision(SMALL, count=3)
    assert ours(driver.context.run_id) == []


def test_the_sweep_removes_a_dead_owners_container(driver, guest_image):
    dead = subprocess.Popen(["true"])
    dead.wait()  # its pid now belongs to no process
    name = f"vb-stale-{uuid.uuid4().hex[:8]}"
    res = procs.run(["podman", "create", "--name", name, "--label", "virtbench=1",
                     "--label", f"virtbench.run={driver.context.run_id}", "--label", f"virtbench.pid={dead.pid}",
                     guest_image.tag, "sleep", "infinity"], timeout=60)
    assert res.ok, res.stderr
    (live,) = driver.provision(SMALL)  # the run's pool sweeps this machine when it first hands it out
    try:
        removed = driver.stale_removed
        assert f"container {name} (run {driver.context.run_id})" in removed, removed
        assert not any(live.name in r for r in removed)
        assert procs.run(["podman", "container", "exists", name], timeout=60).returncode == 1
        assert ours(driver.context.run_id) != [] and live.alive()
    finally:
        live.teardown()


def test_missing_engine(driver, tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(MissingTool) as err:
        driver.provision(SMALL)
    assert err.value.tool == "podman" and "podman" in err.value.package and "runc" in err.value.package
    problems = driver.check()
    assert len(problems) == 1 and "apt-get install podman runc" in problems[0].fix
    assert ledger.sweep(local(), container.ContainerDriver.leftovers) == []


def test_check_passes_here(driver):
    assert driver.check() == []


def test_oom_marker_stays_out_of_the_users_directory(driver, tmp_path, monkeypatch):
    """conmon (Debian 12's 2.1.6) creates an `oom` file in its working directory when the container is
    OOM-killed; engine commands run from a private directory, not the user's."""
    from pathlib import Path

    here = tmp_path / "checkout"
    here.mkdir()
    monkeypatch.chdir(here)
    marker = Path(engine.cwd_for(local())) / "oom"
    marker.unlink(missing_ok=True)
    (inst,) = driver.provision(EnvSpec("ctr", "container", Shape("t", vcpus=1, memory_mb=64)), 1, "main")
    try:
        res = inst.exec(["sh", "-c", "head -c 300M /dev/zero | tail > /dev/null; echo rc=$?"], timeout=120)
        assert "rc=137" in res.stdout  # the kernel's OOM killer stopped `tail` in the 64 MB container
        deadline = time.time() + 10
        while not marker.exists() and time.time() < deadline:
            time.sleep(0.1)
        assert marker.exists() and list(here.iterdir()) == []
    finally:
        inst.teardown()


def test_a_run_sweeps_this_machine_first_and_names_each_removal_in_its_notes(guest_image, tmp_path):
    """Through the runner: a killed run's container (its owner's pid gone) is removed before the run
    starts anything, and the run's notes name it; a live owner's container stays."""
    from virtbench import suite
    from virtbench.run.runner import Events, Runner
    from virtbench.store import Store

    dead = subprocess.Popen(["true"])
    dead.wait()
    left, kept = f"vb-left-{uuid.uuid4().hex[:8]}", f"vb-kept-{uuid.uuid4().hex[:8]}"
    for name, pid in ((left, dead.pid), (kept, os.getpid())):
        res = procs.run(["podman", "create", "--name", name, "--label", "virtbench=1", "--label", "virtbench.run=old",
                         "--label", f"virtbench.pid={pid}", guest_image.tag, "true"], timeout=60)
        assert res.ok, res.stderr

    class Notes(Events):
        def __init__(self):
            self.notes: list[str] = []

        def note(self, message: str) -> None:
            self.notes.append(message)

    events = Notes()
    try:
        matrix = suite.adhoc("system", {"test": "dhrystone", "duration": "0.2"}, ["container"], repeat=1)
        Runner(Store(tmp_path / "r.sqlite"), matrix, events=events).start()
        assert f"removed a leftover of an earlier run: container {left} (run old)" in events.notes, events.notes
        assert not any(kept in n for n in events.notes)
        assert procs.run(["podman", "container", "exists", left], timeout=60).returncode == 1
        assert procs.run(["podman", "container", "exists", kept], timeout=60).ok
    finally:
        for name in (left, kept):  # one per call: podman 4.3's rm stops at a name already gone
            procs.run(["podman", "rm", "-f", name], timeout=60)
