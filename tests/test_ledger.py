"""The ledger of leftovers (machines/ledger.py) and the pool's sweep, with recording fake machines:
each machine a run's pool hands out is swept once per kind of leftover, whoever asks and however
often; owner labels say who made an object; the owner-file finder kills and removes only what a
gone owner of this controller left."""

import json
import subprocess
import threading
from pathlib import Path

from virtbench import drivers
from virtbench.drivers.base import DriverContext
from virtbench.machines import MachineUnreachable, Pool, ledger, owners
from virtbench.machines.fake import RecordingMachine
from virtbench.machines.inventory import HostSpec, Inventory
from virtbench.drivers.pods import manifests


def _dead_pid() -> int:
    p = subprocess.Popen(["true"])
    p.wait()
    return p.pid


class _Finder:
    """A finder that records where it ran and removes one named thing each time."""

    def __init__(self, kind: str):
        self.calls: list[str] = []
        self.lock = threading.Lock()
        self.finder = ledger.Finder(kind, self.find)

    def find(self, machine) -> list[str]:
        with self.lock:
            self.calls.append(machine.name)
        return [f"thing of {self.finder.kind}"]


def _pool() -> tuple[Pool, dict[str, RecordingMachine]]:
    made: dict[str, RecordingMachine] = {}

    def make(spec):
        made[spec.name] = RecordingMachine(spec.name)
        return made[spec.name]

    return Pool(Inventory("fake.ini", {n: HostSpec(n) for n in ("h1", "h2")}), make=make), made


def test_each_machine_is_swept_once_per_run_whoever_asks():
    pool, made = _pool()
    a = _Finder("things")
    pool.enlist([a.finder])
    threads = [threading.Thread(target=pool.get, args=(n,)) for n in ("h1", "h2", "h1", "h2", "h1") * 4]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for _ in range(3):
        pool.get("h1")
    assert sorted(a.calls) == ["h1", "h2"]
    assert sorted(pool.removed) == ["thing of things on h1", "thing of things on h2"]
    assert set(made) == {"h1", "h2"}

    # A kind a driver enlists later is swept at the machine's next hand-out, once; the first kind not again.
    b = _Finder("others")
    pool.enlist([b.finder])
    assert a.calls.count("h1") == 1 and b.calls == []
    pool.get("h1")
    pool.get("h1")
    assert b.calls == ["h1"] and a.calls.count("h1") == 1
    assert "thing of others on h1" in pool.removed

    # The next run has its own pool: it sweeps again.
    pool2, _ = _pool()
    pool2.enlist([a.finder])
    pool2.get("h1")
    assert a.calls.count("h1") == 2


def test_a_driver_enlists_the_kinds_it_declares():
    pool, _ = _pool()
    driver = drivers.make("container", DriverContext("r1", None, None, pool))
    assert [f.kind for f in pool._finders.values()] == ["containers"]
    assert driver.stale_removed is pool.removed  # one list for the run's notes
    drivers.make("ssh", DriverContext("r1", None, None, pool))
    drivers.make("vm", DriverContext("r1", None, None, pool))
    assert sorted(pool._finders) == ["QEMU run directories", "containers", "scratch directories"]


def test_here_only_finders_skip_other_machines_and_an_unreachable_one_ends_its_sweep():
    here = _Finder("here only")
    here_only = ledger.Finder("here only", here.find, here_only=True)
    pool, made = _pool()

    def unreachable(machine):
        raise MachineUnreachable(machine.name, "connection refused")

    broken = ledger.Finder("broken", lambda m: 1 / 0)  # a failing finder is left out
    after = _Finder("after")
    pool.enlist([broken, here_only, ledger.Finder("cut", unreachable), after.finder])
    assert pool.get("h1") is made["h1"]
    assert here.calls == [] and after.calls == [] and pool.removed == []


def test_owner_labels_round_trip():
    mine = ledger.labels("run-1")
    assert set(mine) == {"virtbench.host", "virtbench.boot", "virtbench.pid", "virtbench.pidstart", "virtbench.run"}
    assert not ledger.gone(mine)  # this process
    assert ledger.gone({**mine, "virtbench.pid": str(_dead_pid())})
    assert ledger.gone({**mine, "virtbench.pidstart": "1"})  # the pid was reused
    assert ledger.gone({**mine, "virtbench.boot": "00000000-0000-0000-0000-000000000000"})  # rebooted since
    assert not ledger.gone({**mine, "virtbench.pid": str(_dead_pid()), "virtbench.host": "another-controller"})
    # Kubernetes label values: the host as label_value made it is still this host.
    kube = ledger.labels("run 1", manifests.label_value)
    assert kube["virtbench.run"] == "run-1"
    assert not ledger.gone(kube, manifests.label_value)
    assert ledger.gone({**kube, "virtbench.pid": str(_dead_pid())}, manifests.label_value)
    # No pid at all (a half-made object of a killed run): gone when it is this controller's.
    assert ledger.gone({"virtbench": "1"}) and not ledger.gone({"virtbench.host": "another-controller"})


def test_owner_file_finder_kills_and_removes_only_gone_owners():
    m = RecordingMachine("h1")
    me = owners.record("old")
    listing = "\n".join([
        f"/vb/scratch/old-a.owner\t{json.dumps({**me, 'pid': _dead_pid()})}",
        f"/vb/scratch/live-b.owner\t{json.dumps(me)}",
        f"/vb/scratch/other-c.owner\t{json.dumps({**me, 'pid': _dead_pid(), 'host': 'another-controller'})}",
        "/vb/scratch/junk.owner\tnot json",
    ]) + "\n"
    m.answer(lambda argv: argv[:2] == ["sh", "-c"] and argv[-2:] == ["/vb/scratch", "*"], stdout=listing)
    removed = owners.sweep_dir(m, "/vb/scratch", "VIRTBENCH_INSTANCE")
    assert removed == ["/vb/scratch/old-a (run old: its processes and directory)"]
    kills = [c for c in m.calls if c[0] == "run" and "-c" in c[1] and c[2] and b"VIRTBENCH_INSTANCE" in c[2]]
    assert [k[2].decode().split("\n") for k in kills] == [["/vb/scratch/old-a", "VIRTBENCH_INSTANCE=old-a"]]
    assert [c[3:] for c in m.commands() if c[:2] == ["sh", "-c"] and "rm -rf" in c[2]] == [
        ["vb", "/vb/scratch/old-a", "/vb/scratch/old-a.owner"]]
    assert not any("live-b" in " ".join(c) or "other-c" in " ".join(c) for c in m.commands()[1:])


def test_cluster_objects_are_judged_by_the_same_owner_labels_once_per_run():
    """The Kubernetes finder hands the cluster's own sweep (drivers/pods/kubernetes_backend.py, tested against a real
    cluster in test_k8s_testbed.py) the ledger's rule; here a stand-in cluster lists label sets."""
    from virtbench.drivers.pods.kubernetes_driver import KubernetesDriver
    from virtbench.model import EnvSpec, Shape

    pool, _ = _pool()
    d = KubernetesDriver(DriverContext("live-run", None, None, pool))
    live = d.labels(EnvSpec("p", "pods", Shape("native"), {}), "main")
    dead = {**live, "virtbench.pid": str(_dead_pid()), "virtbench.run": "killed"}
    foreign = {**dead, "virtbench.host": "another-controller"}

    class Cluster:
        server, namespace, calls = "https://10.0.0.1:6443", "default", 0

        def sweep_stale(self, is_stale):
            Cluster.calls += 1
            return [f"Deployment/{n} (run {labels['virtbench.run']})" for n, labels in
                    (("a", live), ("b", dead), ("c", foreign)) if is_stale(labels)]

    d._sweep(Cluster())
    d._sweep(Cluster())
    assert d.stale_removed == ["Deployment/b (run killed) on https://10.0.0.1:6443"] and Cluster.calls == 1


def test_drain_waits_for_a_sweep_still_going_and_hands_over_the_rest_once():
    """The run's last report (Pool.drain): a machine handed out late, whose sweep is still going in
    another thread when the run ends, still has its removals reported; take() hands each over once."""
    pool, _ = _pool()
    started, release = threading.Event(), threading.Event()

    def slow(machine):
        if machine.name == "h2":  # the late one
            started.set()
            release.wait(10)
        return [f"slow thing of {machine.name}"]

    pool.enlist([ledger.Finder("slow things", slow)])
    pool.get("h1")
    assert pool.take() == ["slow thing of h1 on h1"] and pool.take() == []
    late = threading.Thread(target=pool.get, args=("h2",))
    late.start()
    assert started.wait(10) and pool.take() == []  # still sweeping: nothing yet
    threading.Timer(0.3, release.set).start()
    assert pool.drain(wait=10) == ["slow thing of h2 on h2"]
    late.join()
    assert pool.drain(wait=0) == [] and pool.removed == []


def test_a_killed_processes_local_work_directory_is_swept_and_a_live_ones_kept():
    """A process made its work directory (owners.local_workdir, as run, boot, check and the monitor
    do) and was SIGKILLed: the ledger's "local work directories" finder on this machine removes it
    and names its run; a live owner's directory stays."""
    import sys

    from virtbench.machines import local

    child = subprocess.Popen([sys.executable, "-c", "import time; from virtbench.machines import owners; "
                              "print(owners.local_workdir('virtbench-killed-', 'killedrun'), flush=True); "
                              "time.sleep(120)"], stdout=subprocess.PIPE, text=True)
    killed = Path(child.stdout.readline().strip())
    child.kill()
    child.wait(timeout=30)
    live = owners.local_workdir("virtbench-live-", "liverun")
    try:
        assert killed.is_dir() and Path(f"{killed}.owner").is_file()
        (finder,) = [f for f in ledger.registered() if f.kind == "local work directories"]
        assert finder.here_only
        removed = finder.find(local())
        assert f"{killed} (run killedrun: its local work directory)" in removed
        assert not killed.exists() and not Path(f"{killed}.owner").exists()
        assert live.is_dir() and not any(str(live) in r for r in removed)
    finally:
        owners.remove_local(live)
    assert not live.exists() and not Path(f"{live}.owner").exists()
