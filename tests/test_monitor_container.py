"""The monitor inside a real container: cgroup sources, busy vs idle, nothing left behind; and the
runner storing a container's series beside the host's."""

import shutil

import pytest

from virtbench import monitor, procs, suite
from virtbench.drivers import make
from virtbench.drivers.base import DriverContext
from virtbench.model import EnvSpec, Shape
from virtbench.run.runner import Runner
from virtbench.store import Store

pytestmark = pytest.mark.skipif(not shutil.which("podman"), reason="needs podman")


@pytest.fixture(scope="module")
def box(guest_image, tmp_path_factory):
    drv = make("container", DriverContext("montest-0001", tmp_path_factory.mktemp("w"), guest_image))
    env = EnvSpec("container", "container", Shape("one", 1, 256),
                  {"engine": "auto", "runtime": "auto", "cgroup_manager": "auto"})
    (inst,) = drv.provision(env, 1, "main")
    yield inst
    inst.teardown()


def _processes(inst) -> str:
    """stat and command line of every process in the instance (a zombie's stat starts with Z)."""
    res = inst.exec(["ps", "-eo", "stat=,args="], timeout=30)
    assert res.ok, res.stderr
    return res.stdout


def test_container_series_from_its_cgroup_busy_beats_idle(box):
    idle = monitor.Session.start({"main": [box]}, environment="container", interval=0.25, host=False)
    box.exec(["sleep", "1"], timeout=30)
    idle_res = idle.stop()
    assert not idle_res.notes, idle_res.notes

    busy = monitor.Session.start({"main": [box]}, environment="container", interval=0.25)
    # Dhrystone for 1.5 s; the shell then prints its own stat line, whose cutime/cstime are the CPU
    # time dhrystone really got (on a shared machine, maybe a small part of its one CPU).
    res = box.exec(["sh", "-c", '"$0" dhrystone --duration 1.5 --copies 1 --dir /tmp >/dev/null; cat /proc/$$/stat',
                    box.bin("vb-system")], timeout=60)
    assert res.ok, res.stderr
    fields = res.stdout.rpartition(")")[2].split()
    dhrystone_cpu_s = (int(fields[13]) + int(fields[14])) / 100
    result = busy.stop()
    assert not result.notes, result.notes
    traces = {t.name: t for t in result.traces}
    assert set(traces) == {"host", box.name}
    tr = traces[box.name]
    assert tr.role == "main" and tr.scope == "cgroup" and tr.capacity == pytest.approx(1.0)  # --cpus 1
    assert tr.sources["cpu"].startswith("cgroup") and tr.sources["memory"].startswith("cgroup")
    assert "network namespace" in tr.sources["network"]
    assert tr.mem_limit == 256 * 2**20
    assert len(tr.ticks) >= 5
    gaps = [b["t"] - a["t"] for a, b in zip(tr.ticks, tr.ticks[1:])]
    assert all(0.1 < g < 0.6 for g in gaps[:-1]), gaps
    # Idle has short spikes (each `podman exec` runs runc's init inside the container's cgroup).
    idle_util = sorted(k["cpu_util"] for k in idle_res.traces[0].ticks)
    assert idle_util[len(idle_util) // 2] < 0.1
    # The cgroup's CPU seconds over the session account for dhrystone's own CPU time (plus a little:
    # the exec around it and the sampler), whatever share of the CPU the machine gave it.
    seen_cpu_s = sum(k["cpu_cores"] * k["dt"] for k in tr.ticks)
    assert dhrystone_cpu_s > 0.05
    assert 0.8 * dhrystone_cpu_s <= seen_cpu_s <= dhrystone_cpu_s + 0.6, (seen_cpu_s, dhrystone_cpu_s)
    assert max(k["cpu_util"] for k in tr.ticks) > 3 * idle_util[len(idle_util) // 2]
    assert all(0 < k["mem_used"] < 256 * 2**20 for k in tr.ticks)
    rows = monitor.rows(tr, "container")
    assert {r["instance"] for r in rows} == {box.name}
    assert {"main.cpu_util_mean", "main.cpu_util_peak", "host.cpu_util_mean"} <= {s.metric for s in result.samples}
    # Nothing left in the container: no sampler process (not even a zombie), no files.
    assert not [line for line in _processes(box).splitlines() if "vb-monitor" in line and not line.startswith("Z")]
    res = box.exec(["sh", "-c", f"ls {box.scratch_dir()} | grep -c vb-monitor || true"], timeout=30)
    assert res.stdout.strip() == "0"


def test_sampler_missing_from_the_image_is_copied_in(box, monkeypatch):
    """An instance whose image lacks vb-monitor gets the host's build (same Debian release)."""
    monkeypatch.setattr(type(box), "bin", lambda self, name: f"/nonexistent/{name}")
    s = monitor.Session.start({"main": [box]}, environment="container", interval=0.2, host=False)
    box.exec(["sleep", "0.5"], timeout=30)
    result = s.stop()
    assert not result.notes, result.notes
    assert result.traces[0].ticks
    box.exec(["rm", "-f", f"{box.scratch_dir()}/vb-monitor"], timeout=30)


def test_runner_stores_container_and_host_series(tmp_path, guest_image):
    store = Store(tmp_path / "r.sqlite")
    m = suite.adhoc("system", {"test": "dhrystone", "copies": "1", "duration": "1"}, ["container:m1.small"],
                    repeat=1)
    m.policy.warmup, m.policy.monitor_interval = 0, 0.25
    rid = Runner(store, m).start()
    assert store.run(rid)["status"] == "completed"
    rows = store.timeseries(rid)
    (inst,) = store.instances(rid)
    assert {r["instance"] for r in rows} == {"host", inst["name"]}
    assert {r["role"] for r in rows} == {"host", "main"}
    assert all(r["environment"] == "container:m1.small" for r in rows)
    sources = {r["source"] for r in rows if r["instance"] == inst["name"] and r["metric"] == "cpu_util"}
    assert len(sources) == 1 and sources.pop().startswith("cgroup: cgroup")
    metrics = {s["metric"] for s in store.samples(rid)}
    assert {"dhrystone", "main.cpu_util_mean", "host.cpu_util_mean"} <= metrics
    # The container is gone with the run; no sampler of ours is left on the host.
    res = procs.run(["podman", "ps", "-a", "--filter", f"name={inst['name']}", "--format", "{{.Names}}"], timeout=60)
    assert inst["name"] not in res.stdout
