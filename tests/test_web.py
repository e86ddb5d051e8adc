"""The web workload: wrk parsers on captured output, the peak finder, bad input, and a real run on
the host (scale-up: one nginx with 1 and 2 workers, loaded directly)."""

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from waitkit import Watcher

from virtbench import analysis, suite
from virtbench.errors import SuiteError, UserError
from virtbench.model import EnvSpec, Shape
from virtbench.run.runner import Runner
from virtbench.store import Store
from virtbench.workloads import get
from virtbench.workloads import nginx
from virtbench.workloads.web import cork_refused, parse_proc_stats, parse_wrk, peak

DATA = Path(__file__).parent / "data" / "wrk"


# -- parsers --------------------------------------------------------------------------------------

def test_wrk_lua_json_is_exact():
    w = parse_wrk((DATA / "latency_lua.txt").read_text())
    assert w["source"] == "wrk lua done()"
    assert w["requests"] == 19409 and w["seconds"] == pytest.approx(2.07061)
    assert w["rps"] == pytest.approx(19409 / 2.07061)
    assert (w["p50_ms"], w["p90_ms"], w["p99_ms"]) == (4.646, 9.928, 95.786)
    assert w["socket_errors"] == 0 and w["status_errors"] == 0
    # The same run's text, rounded by wrk, agrees.
    assert w["p50_ms"] == pytest.approx(4.65, abs=0.005) and w["p99_ms"] == pytest.approx(95.79, abs=0.005)


def test_wrk_text_fallback():
    w = parse_wrk((DATA / "latency_text.txt").read_text())
    assert w["source"] == "wrk text"
    assert w["requests"] == 16218 and w["seconds"] == pytest.approx(2.03) and w["rps"] == 7982.78
    assert (w["p50_ms"], w["p75_ms"], w["p90_ms"], w["p99_ms"]) == (5.26, 8.19, 33.81, 121.59)
    assert w["mean_ms"] == 12.88 and w["max_ms"] == 146.70


@pytest.mark.parametrize("name", ["latency_lua.txt", "latency_text.txt", "status_errors_text.txt"])
def test_percentiles_ordered(name):
    w = parse_wrk((DATA / name).read_text())
    assert 0 < w["p50_ms"] <= w["p75_ms"] <= w["p90_ms"] <= w["p99_ms"]


def test_wrk_status_errors_and_microseconds():
    w = parse_wrk((DATA / "status_errors_text.txt").read_text())
    assert w["status_errors"] == 23120 == w["requests"]  # every answer was a 404
    assert w["p50_ms"] == pytest.approx(0.357) and w["p99_ms"] == pytest.approx(2.59)


def test_wrk_that_could_not_connect_is_unreadable():
    with pytest.raises(ValueError, match="requests in"):
        parse_wrk((DATA / "connect_errors_lua.txt").read_text())


def test_proc_stats():
    text = ("CLK_TCK 100\n"
            "41 (nginx) S 1 41 41 0 -1 4194624 80 0 0 0 3 2 0 0 20 0 1 0 100 10000 300 18446744073709551615\n"
            "42 (nginx) R 41 41 41 0 -1 4194624 900 0 0 0 150 75 0 0 20 0 1 0 101 10000 500 18446744073709551615\n")
    assert parse_proc_stats(text) == (pytest.approx(2.30), 2)
    assert parse_proc_stats("no nginx running\n") == (0.0, 0)


def test_parse_whole_report():
    wl = get("web")
    params = {p.name: p.default_values()[0] for p in wl.params}
    raw = json.dumps({"format": 1, "client": {"stdout": (DATA / "latency_lua.txt").read_text(), "cpu_s": 1.0,
                                              "wall_s": 2.0, "host_cpus": 2, "threads": 2},
                      "servers": [{"instance": "s0", "driver": "container", "cpu_s": 1.2, "processes": 2, "vcpus": 2},
                                  {"instance": "s1", "driver": "container", "cpu_s": 0.8, "processes": 2, "vcpus": 2}],
                      "lb": {"instance": "lb", "driver": "container", "cpu_s": 0.5, "processes": 3, "vcpus": 2}})
    got = {s.metric: s for s in wl.parse(raw, params)}
    assert got["requests_per_second"].value == pytest.approx(19409 / 2.07061)
    assert got["server_cpu_cores"].value == pytest.approx(1.0)
    assert got["server_cpu_util"].value == pytest.approx(0.5)  # 4 vCPUs of containers capped at 2 host CPUs
    assert got["lb_cpu_cores"].value == pytest.approx(0.25)
    assert got["client_cpu_util"].value == pytest.approx(0.25)
    assert "coordinated omission" in got["latency_p99_ms"].metadata["latency_model"]
    assert {m.name for m in wl.metrics} == set(got)


# nginx's start, probing TCP_CORK first (captured: gVisor runsc 20221219 with network host; runc)
RUNSC_START = (DATA.parent / "web" / "start_runsc_20221219_network_host.txt").read_text()
RUNC_START = (DATA.parent / "web" / "start_runc.txt").read_text()


def test_cork_probe_lines():
    assert nginx.parse_cork(RUNC_START) == "ok"
    assert nginx.parse_cork(RUNSC_START).startswith("refused: setsockopt(TCP_CORK) succeeded but")
    assert nginx.parse_cork("") == ""  # not probed
    assert cork_refused([{"tcp_cork": "ok"}, {"tcp_cork": nginx.parse_cork(RUNSC_START)}]) == \
        "1 of 2: setsockopt(TCP_CORK) succeeded but a corked write was sent at once"
    assert cork_refused([{"tcp_cork": "ok"}, {}]) == ""


def test_cork_probe_says_ok_on_this_kernel():
    # the probe itself, here (Linux holds a corked partial segment): it must not call Linux broken
    res = subprocess.run(["python3", "-c", nginx.CORK_PROBE], capture_output=True, text=True, timeout=30)
    assert nginx.parse_cork(res.stdout) == "ok", res.stdout + res.stderr


@pytest.mark.parametrize("nopush", [True, False])
def test_a_server_that_cannot_cork_warns_beside_the_timed_figures(nopush):
    wl = get("web")
    params = {**{p.name: p.default_values()[0] for p in wl.params}, "tcp_nopush": nopush}
    raw = json.dumps({"format": 1, "client": {"stdout": (DATA / "latency_lua.txt").read_text(), "cpu_s": 1.0,
                                              "wall_s": 2.0, "host_cpus": 2, "threads": 2},
                      "servers": [{"instance": "s0", "driver": "container", "cpu_s": 1.2, "processes": 2, "vcpus": 2,
                                   "tcp_cork": nginx.parse_cork(RUNSC_START)}], "lb": None})
    got = {s.metric: s for s in wl.parse(raw, params)}
    timed = ("requests_per_second", "latency_p50_ms", "latency_p90_ms", "latency_p99_ms")
    for metric, sample in got.items():
        warns = sample.metadata.get("warnings", [])
        if nopush and metric in timed:
            assert len(warns) == 1 and warns[0].startswith("measures the client's delayed ACK (~40 ms a response)")
            assert "TCP_CORK refused in the servers (1 of 1: " in warns[0] and "tcp_nopush = false" in warns[0]
        else:
            assert warns == [], metric  # tcp_nopush off: nothing to cork, nothing held
    assert ("tcp_cork" in got["requests_per_second"].metadata) == nopush


def test_server_conf_follows_tcp_nopush():
    assert "tcp_nopush on;" in nginx.server_conf(1, "8080", "/p")
    assert "tcp_nopush off;" in nginx.server_conf(1, "8080", "/p", tcp_nopush=False)


# -- peak ------------------------------------------------------------------------------------------

def _row(replicas, rps, env="container", metric="requests_per_second"):
    return {"params": {"replicas": replicas, "workers": 1}, "metric": metric, "environment": env, "median": rps}


def test_peak_of_a_sweep():
    rows = [_row(1, 5000), _row(2, 9000), _row(4, 9800), _row(8, 9100), _row(4, 0.9, metric="host.cpu_util_mean")]
    assert peak(rows) == (4, 9800)
    assert peak({"results": rows}) == (4, 9800)
    assert peak([(1, 10.0), (2, 30.0), (4, 30.0)]) == (2, 30.0)  # a tie: the cheaper count
    both = rows + [_row(1, 7000, env="host"), _row(2, 6000, env="host")]
    assert peak(both, environment="host") == (1, 7000)
    with pytest.raises(ValueError, match="name one"):
        peak(both)
    with pytest.raises(ValueError, match="no requests_per_second"):
        peak([])
    with pytest.raises(ValueError, match="two results"):
        peak([_row(1, 5), _row(1, 6)])
    assert peak([{"params": {"replicas": 1, "workers": w}, "metric": "requests_per_second", "environment": "vm",
                  "median": w * 100.0} for w in (1, 2, 4, 8)], by="workers") == (8, 800.0)


# -- bad input, before anything starts ---------------------------------------------------------------

def test_zero_replicas_is_refused():
    with pytest.raises(SuiteError, match="replicas.*below the minimum 1"):
        suite.adhoc("web", {"replicas": "0"}, ["container"])


def test_replicas_without_balancer_refused():
    with pytest.raises(SuiteError, match="needs a balancer"):
        suite.adhoc("web", {"replicas": "2", "balancer": "none"}, ["host"])


def test_more_replicas_than_memory_refused():
    with pytest.raises(SuiteError, match="replicas=1000 need about .* MB .* available"):
        suite.adhoc("web", {"replicas": "1000", "replica_memory_mb": "1048576"}, ["container"])


def test_shape_memory_times_replicas_refused_before_the_run(tmp_path):
    store = Store(tmp_path / "r.sqlite")
    m = suite.adhoc("web", {"replicas": "64"}, ["container:c1.xlarge"])  # 2048 MB each
    with pytest.raises(UserError, match=r"65 instances .* x shape c1.xlarge: 2048 MB each"):
        Runner(store, m).start()
    assert store.runs() == []  # nothing started, not even a run record
    wl = get("web")
    params = m.cells[0]["params"]
    assert wl.check_capacity({**params, "replicas": 2}, EnvSpec("c", "container", Shape("m1.small", 1, 128))) == []


def test_more_containers_than_a_bridge_holds_refused():
    wl = get("web")
    params = suite.adhoc("web", {}, ["container"]).cells[0]["params"]
    env = EnvSpec("container", "container", Shape("native"), {})
    too_many = wl.check_capacity({**params, "replicas": 1023, "replica_memory_mb": 1}, env)
    assert any("1024 containers on one network bridge" in p and "at most 1022 replicas" in p for p in too_many)
    assert wl.check_capacity({**params, "replicas": 1022, "replica_memory_mb": 1}, env) == []
    host = EnvSpec("host", "host", Shape("native"), {})  # host replicas are processes on loopback ports
    assert not any("bridge" in p for p in wl.check_capacity({**params, "replicas": 1023, "replica_memory_mb": 1}, host))


def test_vms_without_a_memory_shape_count_at_the_drivers_default():
    from virtbench.workloads.mpijob import MB, mem_available
    wl = get("web")
    params = suite.adhoc("web", {}, ["host"]).cells[0]["params"]
    n = int(mem_available() // (1024 * MB)) + 1  # one more 1 GB VM than fits
    vm = EnvSpec("vm", "vm", Shape("native"), {})
    assert any("1024 MB (a VM's default)" in p for p in wl.check_capacity({**params, "replicas": n}, vm))
    assert not any("MB" in p for p in wl.check_capacity({**params, "replicas": 1, "balancer": "none"}, vm))


def test_threads_more_than_connections_refused():
    with pytest.raises(SuiteError, match="threads=8 is more than connections=4"):
        suite.adhoc("web", {"threads": "8", "connections": "4"}, ["host"])


# -- for real on the host -------------------------------------------------------------------------

needs_tools = pytest.mark.skipif(not (shutil.which("wrk") and shutil.which("nginx")),
                                 reason="needs wrk and nginx on the host (setup.sh installs them)")


class _OwnNginx(Watcher):
    """Watches this test's own nginx while its run goes: masters whose prefix lies under the test's
    scratch directory, and their children (the workers, whose command line names no prefix). Other
    tests' and users' nginx on this machine are never looked at."""

    def __init__(self, scratch: Path):
        super().__init__()
        self.scratch = str(scratch)
        self.seen: dict[int, str] = {}  # pid -> start time (field 22 of /proc/PID/stat)
        self.masters = 0

    def tick(self) -> None:
        self.scan()

    def scan(self) -> None:
        masters = [pid for pid in _pids() if self.scratch in _cmdline(pid)
                   and _cmdline(pid).startswith("nginx: master process")]
        for pid in masters:
            if pid not in self.seen:
                self.masters += 1
            for p in [pid, *_children(pid)]:
                self.seen.setdefault(p, _start(p))

    def alive(self) -> list[str]:
        """What of it still runs: a pid seen with the same start time (not a reused pid), or any
        process whose command line names the scratch directory."""
        self.scan()
        left = [p for p, start in self.seen.items() if start and _start(p) == start]
        left += [p for p in _pids() if self.scratch in _cmdline(p) and p not in left and p != os.getpid()]
        return [f"{p}: {_cmdline(p)}" for p in left]


def _pids() -> list[int]:
    return [int(d) for d in os.listdir("/proc") if d.isdigit()]


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def _start(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[19]
    except (OSError, IndexError):
        return ""


def _children(pid: int) -> list[int]:
    try:
        return [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except (OSError, ValueError):
        return []


@needs_tools
def test_workers_on_the_host(tmp_path):
    store = Store(tmp_path / "r.sqlite")
    m = suite.adhoc("web", {"workers": "1,2", "balancer": "none", "duration": "2", "connections": "32"},
                    ["host"], repeat=1)
    m.policy.warmup = 0
    scratch = tmp_path / "scratch"  # the nginx prefixes lie under it: what names this test's nginx
    scratch.mkdir()
    m.environments[0].options["scratch"] = str(scratch)
    with _OwnNginx(scratch) as own:
        rid = Runner(store, m).start()
    attempts = store.attempts(rid)
    assert [a["status"] for a in attempts] == ["ok", "ok"], [a["reason"] for a in attempts]
    rows = analysis.results(store, rid)["results"]
    by = {(r["params"]["workers"], r["metric"]): r["median"] for r in rows}
    for w in (1, 2):
        assert by[(w, "requests_per_second")] > 100
        assert 0 < by[(w, "latency_p50_ms")] <= by[(w, "latency_p90_ms")] <= by[(w, "latency_p99_ms")]
        assert by[(w, "errors")] == 0
        assert 0 < by[(w, "server_cpu_cores")] and 0 < by[(w, "client_cpu_cores")]
        assert by[(w, "host.cpu_util_mean")] > 0  # the monitor, over wrk's window
    raw = json.loads(attempts[1]["raw_output"])
    assert raw["servers"][0]["processes"] == 3  # master + 2 workers
    # The host's nginx runs on this kernel: its boot id and CPUs are recorded, and are the capacity.
    assert (raw["servers"][0]["boot_id"], raw["servers"][0]["kernel_cpus"]) == \
        (Path("/proc/sys/kernel/random/boot_id").read_text().strip(), os.cpu_count())
    # the worker count of the higher median throughput (a tie: the smaller, cheaper one)
    best = max((1, 2), key=lambda w: (by[(w, "requests_per_second")], -w))
    assert peak(rows, by="workers") == (best, by[(best, "requests_per_second")])
    # Every nginx we started is gone: the watcher saw both masters (1 and 2 workers), and none of
    # their processes outlived the run.
    assert own.masters == 2 and len(own.seen) >= 2 + 3, (own.masters, own.seen)
    assert own.alive() == []


def test_container_vs_vm_suite_loads():
    m = suite.load(Path(__file__).parents[1] / "suites" / "container-vs-vm.toml")
    assert m.baseline == "host" and m.policy.monitor and m.policy.monitor_interval == 1.0
    web_cells = [c["params"] for c in m.cells if c["workload"] == "web"]
    assert sorted(p["replicas"] for p in web_cells if p["balancer"] == "nginx") == [1, 2, 4, 8, 16, 32, 64]
    assert sorted(p["workers"] for p in web_cells if p["balancer"] == "none") == [1, 2, 4, 8]
    assert all(p["file_size"] == 600 for p in web_cells)
    assert {c["params"]["test"] for c in m.cells if c["workload"] == "system"} >= {"dhrystone", "syscall"}
    envs = [e.name for e in m.environments]
    assert envs == ["host", "container", "pods", "vm"]
    where = {(c["params"]["balancer"], c["params"].get("replicas")): suite.cell_environments(c, envs)
             for c in m.cells if c["workload"] == "web"}
    assert all(w == ["host", "container", "pods"] for (b, _), w in where.items() if b == "nginx")  # replica sweep
    assert all(w == ["host", "vm"] for (b, _), w in where.items() if b == "none")  # worker sweep
    assert all(suite.cell_environments(c, envs) == envs for c in m.cells if c["workload"] == "system")
    narrowed = suite.load(Path(__file__).parents[1] / "suites" / "container-vs-vm.toml", envs=["host", "container"])
    assert [e.name for e in narrowed.environments] == ["host", "container"]
    names = ["host", "container"]
    assert all(suite.cell_environments(c, names) == (names if c["params"]["balancer"] == "nginx" else ["host"])
               for c in narrowed.cells if c["workload"] == "web")  # the worker sweep keeps its host half
