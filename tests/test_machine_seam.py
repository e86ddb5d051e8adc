"""The one seam: Machine's conveniences, written once as commands, give the same answers through
the primitives alone (what a remote machine gets) as on LocalMachine (its read_text fast path, its
process directory, its files used in place), on real files here; the abilities only some kinds
declare; the recording fake; the factory of machines from inventory hosts; and code that counts CPUs
on the instance's machine, not this one."""

import os
import shutil
import stat
from pathlib import Path

import pytest

from virtbench.workloads import mpicluster as cluster
from virtbench import drivers
from virtbench.errors import UserError
from virtbench.drivers.base import Instance, Traits
from virtbench.machines import HostSpec, LocalMachine, Machine, machine_for
from virtbench.machines.fake import RecordingMachine, result
from virtbench.machines.ssh import SshMachine
from virtbench.model import EnvSpec, Shape
from virtbench.workloads.web import Web


class ShellOnly(Machine):
    """This machine through the five primitives only: every convenience is Machine's sh -c version,
    the one an SSH host runs."""

    kind = "shell"

    def __init__(self):
        super().__init__("shell-only")
        self.inner = LocalMachine("inner")

    def run(self, argv, timeout=None, stdin=None, env=None, cwd=None):
        return self.inner.run(argv, timeout=timeout, stdin=stdin, env=env, cwd=cwd)

    def put(self, src, dest, mode=None):
        self.inner.put(src, dest, mode)

    def get(self, src, dest):
        self.inner.get(src, dest)

    def spawn(self, argv, log, env=None, cwd=None):
        return self.inner.spawn(argv, log, env, cwd)

    def kill_group(self, pgid, grace=2.0):
        self.inner.kill_group(pgid, grace)


@pytest.fixture(params=["local", "shell"])
def machine(request):
    return LocalMachine() if request.param == "local" else ShellOnly()


def test_files_both_ways(machine, tmp_path):
    f = tmp_path / "a b.txt"  # a space: the sh versions must quote
    machine.write_text(f, "one\ntwo\n", mode=0o640)
    assert f.read_text() == "one\ntwo\n" and stat.S_IMODE(f.stat().st_mode) == 0o640
    assert machine.read_text(f) == "one\ntwo\n" and machine.file_size(f) == 8
    assert machine.exists(f) and not machine.exists(tmp_path / "none")
    assert machine.read_text(tmp_path / "none") == ""
    machine.fsync(f)
    (tmp_path / "g").write_text("g")
    machine.remove(f, tmp_path / "g")
    machine.remove(f)  # a missing file is no error
    assert not f.exists() and not (tmp_path / "g").exists()
    d = tmp_path / "x" / "y"
    machine.makedirs(d)
    (d / "z").write_text("z")
    (tmp_path / "x.owner").write_text("{}")
    machine.rmtree(tmp_path / "x", tmp_path / "x.owner")
    assert not (tmp_path / "x").exists() and not (tmp_path / "x.owner").exists()


def test_programs_root_and_cpus(machine):
    assert machine.which("sh") and not machine.which("vb-no-such-program")
    assert machine.missing_programs(["sh", "vb-no-such-program"]) == ["vb-no-such-program"]
    assert machine.is_root() == (os.geteuid() == 0)
    assert machine.allowed_cpus() == sorted(os.sched_getaffinity(0))
    assert machine.cpu_count() >= 1


def test_cores_are_the_cpus_a_process_may_use_whatever_openmp_is_told(machine, monkeypatch):
    """nproc also obeys OMP_NUM_THREADS: a user's OpenMP setting must not shrink the machine's cores."""
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    assert machine.cpu_count() == machine.facts()["cores"] == len(os.sched_getaffinity(0))


def test_scratch_and_staging(machine, tmp_path):
    d = machine.scratch_dir("seamtest")
    f = machine.scratch_file("seamtest")
    try:
        assert Path(d).is_dir() and "seamtest" in d and "seamtest" in f
        src = tmp_path / "src"
        src.write_text("payload")
        with machine.staged(src) as there:
            assert Path(there).read_text() == "payload"
        dest = tmp_path / "dest"
        with machine.fetched(dest) as there:
            Path(there).write_text("back")
        assert dest.read_text() == "back"
        if isinstance(machine, ShellOnly):  # here a command writes to dest itself
            with pytest.raises(RuntimeError), machine.fetched(tmp_path / "never") as there:
                Path(there).write_text("x")
                raise RuntimeError("the command failed")
            assert not (tmp_path / "never").exists()  # nothing is fetched after a failure
    finally:
        shutil.rmtree(d, ignore_errors=True)
        Path(f).unlink(missing_ok=True)


def test_mountinfo_names_the_root_mount(machine):
    assert any(line.split()[4] == "/" for line in machine.mountinfo().splitlines())


def test_abilities_are_declared_where_they_mean_something(tmp_path):
    """This machine: its process directory (scratch root, ledger, container mount dirs) and ports
    reachable as they are; an SSH host forwards over its connection; the others have neither."""
    here, shell, ssh = LocalMachine(), ShellOnly(), SshMachine(HostSpec("h1"), control_dir=tmp_path)
    assert here.is_local and here.on == "" and here.place == "the host"
    assert here.forwards.forward("127.0.0.1", 8080) == ("127.0.0.1", 8080)
    assert here.forwards.forward_unix("/run/x.sock") == "/run/x.sock"
    assert ssh.forwards is ssh and not ssh.is_local and ssh.process_dir is None
    assert shell.forwards is None and shell.process_dir is None and RecordingMachine().forwards is None
    assert shell.on == " on shell-only" and shell.place == "shell-only"
    own = here.process_dir
    d = here.scratch_dir("seamtest")
    try:
        assert Path(d).parent == Path(here.scratch_file("x")).parent  # both under the process's directory
        own.remember("seam-ledger", "a")
        own.remember("seam-ledger", "b")
        own.forget("seam-ledger", "a")
        assert own.remembered("seam-ledger") == ["b"]
    finally:
        own.forget("seam-ledger", "b")
        shutil.rmtree(d, ignore_errors=True)
    assert own.remembered("seam-ledger") == []


def test_recording_machine_answers_and_records():
    m = RecordingMachine("box").answer(("id", "-u"), "0\n").answer(lambda argv: argv[:2] == ["cat", "--"], "text")
    assert m.is_root() and m.read_text("/etc/x") == "text"
    m.put(Path("/tmp/a"), "/b")
    assert m.commands() == [["id", "-u"], ["cat", "--", "/etc/x"]] and m.calls[-1] == ("put", "/tmp/a", "/b")
    assert m.on == " on box" and m.place == "box"
    assert m.which("x")  # unanswered commands succeed


def test_factory_honours_ansible_connection():
    assert isinstance(machine_for(HostSpec("h1")), SshMachine)
    here = machine_for(HostSpec("ctl", vars={"ansible_connection": "local"}))
    assert isinstance(here, LocalMachine) and here.name == "ctl"
    with pytest.raises(UserError, match="ansible_connection=winrm"):
        machine_for(HostSpec("w", vars={"ansible_connection": "winrm"}))


class Box(Instance):
    """A container-like instance on a given machine."""

    def __init__(self, name, machine, vcpus=0):
        super().__init__(name, EnvSpec("c", "container", Shape("s", vcpus, 0)), "node", 0)
        self.machine = machine

    def exec(self, argv, timeout=None, stdin=None, env=None):
        return result(argv, "1\n")

    def bin(self, name): return name
    def scratch_dir(self): return "/tmp"
    def _destroy(self): ...


def _cpus(n):
    return RecordingMachine("far").answer(("cat", "--", "/proc/self/status"), f"Cpus_allowed_list:\t0-{n - 1}\n")


def test_machine_busy_counts_the_instances_machine():
    """Containers placed on another machine: its cores count, not the controller's."""
    big = cluster.Cluster([Box("a", _cpus(64))], "local", None, [64])
    assert big.machine_busy(8, 1) is None
    small = cluster.Cluster([Box("a", _cpus(2))], "local", None, [2])
    assert small.machine_busy(8, 1) == (8, 2)
    two = cluster.Cluster([Box("a", _cpus(4)), Box("b", _cpus(4))], "ssh", None, [2, 2])
    assert two.machine_busy(8, 1) is None  # 4 ranks on each machine's 4 CPUs


def test_web_entitlement_is_the_instances_machine():
    far = RecordingMachine("far", facts={"cores": 48})
    assert Web.cpu_entitlement(Box("a", far)) == 48.0
    assert Web.cpu_entitlement(Box("b", far, vcpus=2)) == 2.0


def test_every_driver_declares_its_traits():
    for name in drivers.names() + drivers.implementations():  # pods and its two drivers
        assert isinstance(drivers.traits_of(name), Traits)
    assert drivers.traits_of("host").host_process and drivers.traits_of("host").monitor_scope is None
    assert drivers.traits_of("container").engine_container and not drivers.traits_of("vm").shares_kernel
    assert drivers.traits_of("no-such-driver") == Traits()
