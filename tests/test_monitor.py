"""The monitor: vb-monitor's output parsed and summarized (captured output), the sampler for real on
the host, the runner storing series and summaries, schema migration, suite keys."""

import json
import os
import sqlite3
import time
from pathlib import Path

import pytest

from virtbench import kernels, monitor, paths, procs, suite
from virtbench.errors import SuiteError
from virtbench.monitor import hostside, series
from virtbench.run.runner import Runner
from virtbench.store import SCHEMA_VERSION, Store
from waitkit import until

DATA = Path(__file__).parent / "data" / "monitor"


def _bin() -> Path:
    exe = kernels.native_bin_dir() / monitor.BIN
    if not exe.exists():
        procs.run(["make", "-s", "-C", str(paths.PROJECT_ROOT / "native" / "monitor")], timeout=300)
    return exe


# -- pure: captured output ----------------------------------------------------------------------

def test_parse_captured_host_output():
    tr = series.parse((DATA / "host.jsonl").read_text(), "host", "host")
    assert tr.scope == "host" and tr.capacity == 2 and tr.interval == 0.5 and tr.end_reason == "signal"
    assert tr.sources["cpu"] == "/proc/stat" and "meminfo" in tr.sources["memory"]
    assert len(tr.ticks) == 5 and tr.mem_limit > 0
    for k in tr.ticks:
        parts = k["cpu_user"] + k["cpu_system"] + k["cpu_iowait"] + k["cpu_steal"] + k["cpu_idle"]
        assert parts == pytest.approx(1.0, abs=2e-3)
        assert k["cpu_util"] == pytest.approx(k["cpu_user"] + k["cpu_system"], abs=2e-5)
        assert 0 <= k["cpu_cores"] <= 2.05 and k["mem_used"] > 0


def test_parse_captured_cgroup_output():
    tr = series.parse((DATA / "cgroup.jsonl").read_text(), "c", "server")
    assert tr.scope == "cgroup" and tr.capacity == 1
    assert tr.sources["cpu"].startswith("cgroup") and "network namespace" in tr.sources["network"]
    assert "cpu_iowait" not in tr.ticks[0]  # a cgroup has no iowait or steal: not made up
    # The capture: 0.6 s idle, dhrystone for 1 s (on a shared, busy machine: ~0.3 of its CPU), idle.
    utils = [k["cpu_util"] for k in tr.ticks]
    assert max(utils) > 0.2 and min(utils) < 0.05


def test_rows_units_and_sources():
    tr = series.parse((DATA / "host.jsonl").read_text(), "host", "host")
    rows = series.rows(tr, "container")
    metrics = {r["metric"] for r in rows}
    assert {"cpu_util", "cpu_user", "cpu_system", "cpu_iowait", "cpu_steal", "cpu_idle", "mem_used", "mem_cache",
            "swap_used", "net_rx_bytes", "net_tx_bytes", "net_rx_packets", "net_tx_packets", "disk_read_bytes",
            "disk_write_bytes", "disk_read_ops", "disk_write_ops"} <= metrics
    mem = [r for r in rows if r["metric"] == "mem_used"]
    assert mem[0]["unit"] == "MiB" and mem[0]["value"] == pytest.approx(tr.ticks[0]["mem_used"] / 2**20)
    assert all(r["environment"] == "container" and r["instance"] == "host" for r in rows)
    assert [r for r in rows if r["metric"] == "cpu_util"][0]["source"] == "host: /proc/stat"
    assert len(rows) == len(tr.ticks) * len(metrics)


def test_parse_tolerates_a_cut_line_and_refuses_nothing():
    text = (DATA / "host.jsonl").read_text()
    cut = text[: text.rindex('{"type":"tick"') + 40]  # SIGKILL mid-line
    tr = series.parse(cut, "h", "host")
    assert len(tr.ticks) == 4 and tr.end_reason is None
    with pytest.raises(ValueError):
        series.parse("", "h", "host")


def _trace(role, name, utils, t0=1000.0, dt=1.0, mem=2**20, net=0.0):
    tr = series.Trace(name, role, scope="cgroup", capacity=1.0, interval=dt, mem_limit=2**30)
    tr.ticks = [{"t": t0 + (i + 1) * dt, "dt": dt, "cpu_util": u, "mem_used": mem * (i + 1),
                 "net_rx_bytes": net, "net_tx_bytes": net, "disk_read_bytes": 0.0, "disk_write_bytes": 1e6}
                for i, u in enumerate(utils)]
    return tr


def test_summaries_per_role_and_window():
    traces = [_trace("server", "s0", [0.2, 0.8, 0.6]), _trace("server", "s1", [0.4, 0.4, 1.0]),
              _trace("lb", "lb", [0.1, 0.1, 0.1], net=5e5)]
    out = {s.metric: s for s in series.summarize(traces)}
    assert out["server.cpu_util_mean"].value == pytest.approx((1.6 / 3 + 1.8 / 3) / 2)
    assert out["server.cpu_util_peak"].value == 1.0
    assert out["server.mem_used_peak"].value == pytest.approx(6.0)  # 3 MiB peak each, summed
    assert out["lb.net_peak"].value == pytest.approx(1.0)  # rx + tx, MB/s
    assert out["server.disk_peak"].value == pytest.approx(2.0)
    for s in out.values():
        assert s.metadata["monitor"] is True and series.is_monitor_sample(s.metadata)
    assert out["server.cpu_util_mean"].metadata["instances"] == 2
    assert out["server.cpu_util_mean"].metadata["role"] == "server"
    # Only the workload's window: ticks whose interval's middle lies in [1001, 1002] (the second).
    win = {s.metric: s for s in series.summarize(traces, (1001.0, 1002.0))}
    assert win["server.cpu_util_mean"].value == pytest.approx((0.8 + 0.4) / 2)
    assert win["server.cpu_util_mean"].metadata["window"] == "workload"
    assert series.is_monitor_sample(json.dumps({"monitor": True})) and not series.is_monitor_sample("{}")


# -- the sampler for real -----------------------------------------------------------------------

# -- a gVisor sandbox: CPU and memory from its cgroup on the host, network and disk inside ---------------

def test_cgroup_root_of_a_sandbox_process():
    # /proc/PID/cgroup of a runsc-sandbox under podman (cgroupfs), this machine's hybrid cgroups
    version, links = hostside.cgroup_root((DATA / "proc_cgroup_runsc_sandbox_hybrid.txt").read_text())
    assert version == "v1"
    got = dict(links)
    cg = "/libpod_parent/libpod-8884a731d88887e9c2ad62a20d6179e9cd939256ea1266cca6e7cc0d4767e7ed"
    assert got["cpuacct"] == f"/sys/fs/cgroup/cpuacct{cg}" and got["memory"] == f"/sys/fs/cgroup/memory{cg}"
    assert "name=systemd" not in got and "" not in got
    # co-mounted controllers: a link under each name and under the mount's own
    _, co = hostside.cgroup_root("4:cpu,cpuacct:/a/b\n3:memory:/a/b\n0::/\n")
    assert dict(co)["cpu,cpuacct"] == dict(co)["cpuacct"] == "/sys/fs/cgroup/cpu,cpuacct/a/b"
    # a machine with the unified hierarchy only (constructed: none here): the cgroup's own directory
    assert hostside.cgroup_root("0::/machine.slice/libpod-x.scope\n") == \
        ("v2", [("", "/sys/fs/cgroup/machine.slice/libpod-x.scope")])
    with pytest.raises(ValueError, match="no cpuacct or memory cgroup"):
        hostside.cgroup_root("1:name=systemd:/\n")


def test_host_side_and_inside_merge_into_one_labelled_trace():
    host = series.parse((DATA / "runsc_host_side.jsonl").read_text(), "c1", "server")
    inside = series.parse((DATA / "runsc_inside.jsonl").read_text(), "c1", "server")
    assert inside.sources["cpu"] == "unavailable" and not any("cpu_util" in t for t in inside.ticks)
    merged = hostside.merge(host, inside, "no counters inside")
    assert merged.scope == hostside.SCOPE
    assert merged.sources["cpu"].startswith("host side, cgroup v1 cpuacct") and "no counters inside" in merged.sources["cpu"]
    assert merged.sources["network"].startswith("inside, /proc/net/dev")
    # the host side's network and disk are the machine's (136 MB/s of reads here): never taken
    assert max(t.get("disk_read_bytes", 0) for t in merged.ticks) == 0
    summary = {s.metric: s for s in series.summarize([merged])}
    assert summary["server.cpu_util_mean"].value > 0.05 and summary["server.mem_used_peak"].value > 10
    assert summary["server.cpu_util_mean"].metadata["scope"] == hostside.SCOPE
    assert {"server.net_peak", "server.disk_peak"} <= set(summary)
    rows = series.rows(merged, "runsc")
    assert {r["source"].split(": ", 1)[1].split(",")[0] for r in rows} == {"host side", "inside"}
    # the sampler inside did not run: CPU and memory still, the rest said unavailable
    alone = hostside.merge(host, None, "why")
    assert alone.sources["disk"].startswith("unavailable") and all("disk_read_bytes" not in t for t in alone.ticks)


def test_vb_monitor_ticks_at_the_interval():
    res = procs.run([str(_bin()), "--scope", "host", "--interval", "0.1", "--count", "5"], timeout=30)
    assert res.ok, res.stderr
    tr = series.parse(res.stdout, "host", "host")
    assert len(tr.ticks) == 5 and tr.end_reason == "count"
    # A starved machine may delay a tick (the next one then comes one interval later, never early).
    gaps = sorted(b["t"] - a["t"] for a, b in zip(tr.ticks, tr.ticks[1:]))
    assert 0.08 < gaps[len(gaps) // 2] < 0.15 and all(0.05 < g < 0.5 for g in gaps), gaps
    assert all(0.05 < k["dt"] < 0.5 for k in tr.ticks)


def test_vb_monitor_bad_arguments():
    res = procs.run([str(_bin()), "--interval", "0"], timeout=10)
    assert res.returncode == 2 and "interval" in res.stderr
    res = procs.run([str(_bin()), "--daemon"], timeout=10)
    assert res.returncode == 2 and "--out" in res.stderr


def test_daemon_start_stop_leaves_nothing(tmp_path):
    out, pid = tmp_path / "m.jsonl", tmp_path / "m.pid"
    res = procs.run([str(_bin()), "--daemon", "--scope", "host", "--interval", "0.1", "--out", out, "--pidfile", pid,
                     "--lifetime", "60"], timeout=10)
    assert res.ok, res.stderr
    daemon = json.loads(res.stdout)["pid"]
    assert int(pid.read_text()) == daemon and _running(daemon)
    # until 3 ticks are written (each is flushed as it is taken; a busy machine can take longer than 0.3 s)
    assert until(lambda: out.exists() and out.read_text().count('"type":"tick"') >= 3)
    res = procs.run([str(_bin()), "--stop", pid, "--print", out, "--remove"], timeout=10)
    assert res.ok, res.stderr
    tr = series.parse(res.stdout, "h", "host")
    assert len(tr.ticks) >= 3 and tr.end_reason == "signal"
    assert not out.exists() and not pid.exists() and not _running(daemon)


def _running(pid: int) -> bool:
    """Alive and not a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rpartition(")")[2].split()[0] != "Z"


def test_host_session_sees_busy_cpu():
    """The host's series while dhrystone runs on both CPUs. The CI machine is shared (other jobs
    may keep it busy): the run must show the CPUs busy, and busier than idle unless idle was
    already saturated."""
    idle = monitor.Session.start({}, environment="host", interval=0.2)
    time.sleep(1.0)
    idle_trace = idle.stop().traces[0]
    s = monitor.Session.start({}, environment="host", interval=0.2)
    sampler_pid = int(Path(s._samplers[0].pidfile).read_text().split()[0])
    res = procs.run([kernels.native_bin_dir() / "vb-system", "dhrystone", "--duration", "1.5", "--copies", "2",
                     "--dir", "/tmp"], timeout=60)
    assert res.ok, res.stderr
    result = s.stop()
    assert not result.notes
    (trace,) = result.traces
    assert trace.name == "host" and trace.role == "host" and trace.scope == "host"
    # 5 Hz as asked, and at least over the kernel's 1.5 s; how long the session stayed open around the
    # kernel (so how many ticks past 1.5 s / 0.2 s) is the machine's load, not the sampler's logic
    ts = [float(k["t"]) for k in trace.ticks]
    gaps = sorted(b - a for a, b in zip(ts, ts[1:]))
    assert len(ts) >= 6 and 0.15 < gaps[len(gaps) // 2] < 0.3, gaps
    assert len(ts) <= (ts[-1] - ts[0]) / 0.2 + 2, ts  # no more ticks than the interval allows
    busy = sum(k["cpu_cores"] for k in trace.ticks) / len(trace.ticks)
    base = sum(k["cpu_cores"] for k in idle_trace.ticks) / len(idle_trace.ticks)
    assert busy > 1.2
    assert busy > base or base > 1.6
    assert not _running(sampler_pid)  # nothing left running
    metrics = {smp.metric for smp in result.samples}
    assert {"host.cpu_util_mean", "host.cpu_util_peak", "host.mem_used_peak"} <= metrics


def test_host_sampler_is_gone_after_stop():
    s = monitor.Session.start({}, environment="host", interval=0.1)
    pid = int(Path(s._samplers[0].pidfile).read_text().split()[0])
    assert _running(pid)
    s.stop()
    assert not _running(pid)


# -- the runner stores series and summaries -----------------------------------------------------

def test_runner_stores_series_and_summaries(tmp_path):
    store = Store(tmp_path / "r.sqlite")
    m = suite.adhoc("system", {"test": "dhrystone", "copies": "1", "duration": "0.6"}, ["host"], repeat=2)
    m.policy.warmup = 0
    m.policy.monitor_interval = 0.2
    rid = Runner(store, m).start()
    attempts = {a["id"]: a for a in store.attempts(rid)}
    rows = store.timeseries(rid)
    assert rows and {r["instance"] for r in rows} == {"host"} and {r["role"] for r in rows} == {"host"}
    assert {r["attempt_id"] for r in rows} == set(attempts)  # every repetition has its series
    for aid, a in attempts.items():
        ts = sorted({r["t"] for r in rows if r["attempt_id"] == aid and r["metric"] == "cpu_util"})
        assert len(ts) >= 2 and a["started_at"] <= ts[0] and ts[-1] <= a["ended_at"] + 0.1
        gaps = sorted(b - a_ for a_, b in zip(ts, ts[1:]))
        assert 0.15 < gaps[len(gaps) // 2] < 0.3 and all(g < 1.0 for g in gaps), gaps  # 5 Hz as asked
    assert all(r["source"] for r in rows) and {r["repetition"] for r in rows} == {0, 1}
    samples = store.samples(rid)
    mon = [s for s in samples if monitor.is_monitor_sample(s["metadata_json"])]
    assert {s["metric"] for s in mon} >= {"host.cpu_util_mean", "host.cpu_util_peak"}
    assert len([s for s in samples if s["metric"] == "dhrystone"]) == 2
    # Resume's recount leaves the monitor's summaries out of the stopping rule.
    tallies = Runner(store, m)
    tallies.run_id, tallies.matrix = rid, m
    assert all(set(t.values) == {"dhrystone"} for t in tallies._tallies_from_store()[0].values())
    # Nothing of the monitor left running: no sampler of ours among the host's processes.
    assert not _our_samplers()


def _our_samplers() -> list[int]:
    me = str(os.getpid())
    out = []
    for p in Path("/proc").iterdir():
        if p.name.isdigit():
            try:
                cmd = (p / "cmdline").read_bytes().split(b"\0")
                stat = (p / "stat").read_text().rpartition(")")[2].split()
            except OSError:
                continue
            if cmd and cmd[0].endswith(b"vb-monitor") and me.encode() in cmd and stat[0] != "Z":
                out.append(int(p.name))
    return out


def _our_monitor_dirs() -> list[str]:
    """This process's virtbench-monitor-* directories (by their owner files) in the temp dir."""
    import tempfile

    out = []
    for owner in Path(tempfile.gettempdir()).glob("virtbench-monitor-*.owner"):
        try:
            if json.loads(owner.read_text()).get("pid") == os.getpid():
                out.append(str(owner))
        except (OSError, ValueError):
            continue
    return out


@pytest.mark.parametrize("moment", ["samplers starting", "after the workload"])
def test_an_interrupt_mid_repetition_leaves_no_monitor_behind(tmp_path, monkeypatch, moment):
    """Ctrl-C (a real SIGINT to this process) at the two moments where it once left the repetition's
    virtbench-monitor-* directory for the next run's sweep: while the samplers start (the session
    never reached the runner), and between the workload's end and the samplers' stop."""
    import signal

    from virtbench.monitor import session as monitor_session
    from virtbench.run import runner

    def interrupting(real):
        def call(*args, **kwargs):
            out = real(*args, **kwargs)
            os.kill(os.getpid(), signal.SIGINT)  # handled in the main thread, mid-repetition
            return out
        return call

    if moment == "samplers starting":
        monkeypatch.setattr(monitor_session, "machine_sampler", interrupting(monitor_session.machine_sampler))
    else:
        monkeypatch.setattr(runner.cpugiven, "between", interrupting(runner.cpugiven.between))
    store = Store(tmp_path / "r.sqlite")
    m = suite.adhoc("system", {"test": "dhrystone", "copies": "1", "duration": "0.1"}, ["host"], repeat=1)
    m.policy.warmup = 0
    with pytest.raises(KeyboardInterrupt):
        Runner(store, m).start()
    assert store.run(store.runs()[0]["id"])["status"] == "interrupted"
    assert not _our_monitor_dirs() and not _our_samplers()


def test_runner_without_monitor(tmp_path):
    store = Store(tmp_path / "r.sqlite")
    m = suite.adhoc("system", {"test": "dhrystone", "copies": "1", "duration": "0.3"}, ["host"], repeat=1)
    m.policy.warmup, m.policy.monitor = 0, False
    rid = Runner(store, m).start()
    assert store.timeseries(rid) == []
    assert [s["metric"] for s in store.samples(rid)] == ["dhrystone"]


def test_summaries_do_not_keep_the_run_going(tmp_path, monkeypatch):
    """A noisy monitor metric must not hold a cell at max_repetitions: only dhrystone counts."""
    real = series.summarize

    def noisy(traces, window=None):
        out = real(traces, window)
        for s in out:
            s.value = s.value * (1 + 10 * (time.time() % 1))  # a CI that never narrows
        return out

    monkeypatch.setattr(series, "summarize", noisy)
    store = Store(tmp_path / "r.sqlite")
    m = suite.adhoc("system", {"test": "dhrystone", "copies": "1", "duration": "0.3"}, ["host"])
    m.policy.warmup, m.policy.min_repetitions, m.policy.max_repetitions = 0, 6, 9
    m.policy.ci_target, m.policy.monitor_interval = 10.0, 0.1
    rid = Runner(store, m).start()
    assert len([s for s in store.samples(rid) if s["metric"] == "dhrystone"]) == 6


# -- store and suite ----------------------------------------------------------------------------

def test_schema_1_database_gets_the_timeseries_table(tmp_path):
    db = tmp_path / "old.sqlite"
    Store(db)
    con = sqlite3.connect(db)
    con.execute("DROP TABLE timeseries")
    con.execute("UPDATE meta SET value = '1' WHERE key = 'schema_version'")
    con.commit()
    con.close()
    store = Store(db)
    con = sqlite3.connect(db)
    assert con.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()[0] == str(SCHEMA_VERSION)
    assert con.execute("SELECT name FROM sqlite_master WHERE name = 'timeseries'").fetchone()
    assert con.execute("SELECT name FROM sqlite_master WHERE name = 'ix_timeseries_run_attempt'").fetchone()
    con.close()
    assert SCHEMA_VERSION >= 2 and store.timeseries("nothing") == []


def _suite(tmp_path, extra: str) -> Path:
    p = tmp_path / "s.toml"
    p.write_text(f"[suite]\n{extra}\n[environments.host]\ndriver = \"host\"\n\n"
                 "[[workloads]]\nname = \"system\"\nparams = { test = \"dhrystone\", copies = \"1\" }\n")
    return p


def test_suite_monitor_keys(tmp_path):
    assert suite.load(_suite(tmp_path, "")).policy.monitor is True
    m = suite.load(_suite(tmp_path, "monitor = false\nmonitor_interval = 0.5"))
    assert m.policy.monitor is False and m.policy.monitor_interval == 0.5
    assert suite.Matrix.from_spec(json.loads(json.dumps(m.to_spec()))).policy.monitor_interval == 0.5
    with pytest.raises(SuiteError, match="monitor.*true or false"):
        suite.load(_suite(tmp_path, 'monitor = "yes"'))
    with pytest.raises(SuiteError, match="monitor_interval"):
        suite.load(_suite(tmp_path, "monitor_interval = 0"))
    # A run stored before these keys existed still resumes (defaults fill in).
    spec = m.to_spec()
    del spec["policy"]["monitor"], spec["policy"]["monitor_interval"]
    assert suite.Matrix.from_spec(spec).policy.monitor is True


def test_scope_for_drivers():
    from virtbench.drivers import traits_of
    from virtbench.model import EnvSpec, Shape

    class Fake:
        monitor_scope = None  # what Instance declares; an instance may set its own

        def __init__(self, driver):
            self.env = EnvSpec("e", driver, Shape("native"))
            self.traits = traits_of(driver)  # what Instance.traits gives

    assert monitor.scope_for(Fake("host")) is None  # the host's own series covers it
    assert monitor.scope_for(Fake("container")) == "cgroup"
    assert monitor.scope_for(Fake("vm")) == "host"  # a guest's /proc is its own
    f = Fake("vm")
    f.monitor_scope = "cgroup"
    assert monitor.scope_for(f) == "cgroup"


def test_new_database_opened_by_many_processes_at_once(tmp_path):
    """A run and a reader creating the same new database race on its tables (more of them since
    schema 2): every opener must succeed."""
    import subprocess
    import sys

    db = tmp_path / "race.sqlite"
    code = f"from virtbench.store import Store; Store({str(db)!r})"
    procs_ = [subprocess.Popen([sys.executable, "-c", code], stderr=subprocess.PIPE, text=True) for _ in range(4)]
    errors = [p.communicate(timeout=120)[1] for p in procs_]
    assert all(p.returncode == 0 for p in procs_), errors
    assert Store(db).runs() == []
