"""Web serving: nginx (the image's Debian package) serving one small static file, loaded by wrk on
the host (study 004 item 4: a 600-byte file, pods scaled 1-64 against one VM with 8 workers).

Topology of one repetition:

    wrk (host) ──> [lb: nginx reverse proxy, own instance] ──> server 0 .. server N-1 (nginx)
                   (balancer = "none": wrk talks to the single server directly)

- `replicas` server instances (role "server"), each nginx with `workers` worker processes serving
  `file_size` bytes from the page cache (open_file_cache, sendfile, no access log).
- The load balancer is nginx too, in its own instance of the environment under test (role
  "lb"): the same bytes as the servers (no extra package in the image), its CPU accounted apart
  from the servers' by the monitor and by process accounting, and inside the platform being
  compared, as an ingress is. It is used for every replica count, 1 included, so the scaling
  curve has no step where the balancer appears; `balancer = "none"` (one replica only) is the
  scale-up case: one server with more workers, as the study's VM.
- wrk runs on the host for `duration` seconds over `connections` keep-alive connections. A Lua
  `done()` hook prints wrk's own statistics as JSON, so percentiles are exact rather than read
  back from rounded text. wrk has no request-count mode (a Lua hook can stop its threads after N
  responses, but wrk still waits out the duration and divides by it: tried, 10,000 requests
  with -d 10s were reported as 1,000 req/s), so the load is timed: the study's 100,000 requests took
  5 s at its 20,000 req/s, and `duration = 10` gives at least as many at that rate.

wrk is closed-loop: each connection sends its next request only when the previous answer came
back, so a slow response delays the requests behind it instead of being measured by them
(coordinated omission). Its percentiles are service times under saturation, not the latency an
open-loop client at a fixed rate would see; every sample records this (`latency_model`). Compare
them across platforms at equal connections, never as an SLA figure.

Connections go only to loopback (host instances, each server on its own free port, bound to
127.0.0.1; VMs, through a port QEMU forwards from 127.0.0.1 to the guest's nginx) or to the bridge
addresses of the instances this run started. A balancer VM reaches its server VMs over the private
segment the VM driver gives clusters.
"""

from __future__ import annotations

import json
import math
import os
import re
import secrets
import signal
import subprocess
import tempfile
import threading
import time
from typing import Any

from .. import fanout, kernel_identity
from ..conditions.hostnet import free_port
from ..drivers import traits_for, traits_of
from ..drivers.base import Instance, PortForwarding, ServiceBalancing
from ..errors import MissingTool, WorkloadFailed
from ..model import EnvSpec, Sample
from .base import MetricSpec, Param, RunContext, Workload
from . import mpijob, netutil, nginx

PORT = 8080  # inside an instance with its own network namespace
# Measured: one nginx container with one worker uses 5.7 MB in its memory cgroup, plus 2 MB for
# conmon on the host and the kernel's share (network namespace, veth); 16 MB is a safe floor.
REPLICA_MEMORY_MB = 16
LATENCY_MODEL = "closed-loop (wrk 4): service time per request; subject to coordinated omission"
WRK_TIMEOUT_S = 5  # a request slower than this counts as a timeout error
BRIDGE_PORTS = 1024  # the Linux bridge's port limit (BR_MAX_PORTS): every container's veth is one

# wrk's done() hook: its statistics as one JSON line (latencies in microseconds).
LUA_DONE = r"""
done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    'VBWRK {"requests":%d,"duration_us":%d,"bytes":%d,' ..
    '"errors":{"connect":%d,"read":%d,"write":%d,"status":%d,"timeout":%d},' ..
    '"latency_us":{"min":%d,"max":%d,"mean":%.3f,"stdev":%.3f,' ..
    '"p50":%d,"p75":%d,"p90":%d,"p99":%d,"p999":%d}}\n',
    summary.requests, summary.duration, summary.bytes,
    e.connect, e.read, e.write, e.status, e.timeout,
    latency.min, latency.max, latency.mean, latency.stdev,
    latency:percentile(50), latency:percentile(75), latency:percentile(90),
    latency:percentile(99), latency:percentile(99.9)))
end
"""

def _positive_or_auto(value: Any) -> int:
    """0 means 'decide for me' (wrk threads)."""
    n = int(value)
    if n < 0 or (isinstance(value, float) and not value.is_integer()):
        raise ValueError
    return n


_positive_or_auto.__name__ = "int"


def _mem_available_mb() -> float:
    """This machine's available memory in MB (infinite when unknown: nothing is refused for it)."""
    avail = mpijob.mem_available()
    return math.inf if avail is None else avail / mpijob.MB


def _shares_host_kernel(inst: Instance) -> bool:
    """Does the instance draw on its machine's CPUs (Traits.shares_kernel; pods on a cluster do not)?"""
    return inst.traits.shares_kernel


def _is_loopback(inst: Instance) -> bool:
    return inst.address in (None, "127.0.0.1", "localhost", "::1") and inst.traits.host_process


def _endpoint(inst: Instance, port: int) -> tuple[str, int]:
    """Where wrk on the host reaches `port` of an instance: a port on 127.0.0.1 that the driver
    forwards (VMs behind QEMU's user-mode network), else the instance's own address."""
    if isinstance(inst, PortForwarding) and not _is_loopback(inst):
        return inst.forward_port(port)
    return inst.address or "127.0.0.1", port


# -- pure parsers -------------------------------------------------------------------------------

_UNIT_MS = {"us": 1e-3, "ms": 1.0, "s": 1e3, "m": 60e3, "h": 3600e3}


def _ms(text: str) -> float:
    m = re.fullmatch(r"([\d.]+)(us|ms|s|m|h)", text.strip())
    if not m:
        raise ValueError(f"unreadable wrk time {text!r}")
    return float(m.group(1)) * _UNIT_MS[m.group(2)]


def parse_wrk(text: str) -> dict[str, Any]:
    """wrk's output -> requests, seconds, rps, latency percentiles (ms), errors.

    Prefers the JSON line of virtbench's done() hook (exact, microseconds); falls back to wrk's
    text (`--latency`: 50/75/90/99 % rounded to two decimals; p90 is there too)."""
    for line in text.splitlines():
        if line.startswith("VBWRK "):
            rec = json.loads(line[6:])
            lat, err = rec["latency_us"], rec["errors"]
            seconds = rec["duration_us"] / 1e6
            if seconds <= 0:
                raise ValueError("wrk reported a zero duration")
            return {"requests": rec["requests"], "seconds": seconds, "rps": rec["requests"] / seconds,
                    "bytes": rec["bytes"], "p50_ms": lat["p50"] / 1e3, "p75_ms": lat["p75"] / 1e3,
                    "p90_ms": lat["p90"] / 1e3, "p99_ms": lat["p99"] / 1e3, "p999_ms": lat["p999"] / 1e3,
                    "mean_ms": lat["mean"] / 1e3, "max_ms": lat["max"] / 1e3,
                    "socket_errors": err["connect"] + err["read"] + err["write"] + err["timeout"],
                    "status_errors": err["status"], "errors_detail": err, "source": "wrk lua done()"}
    m = re.search(r"^\s*(\d+) requests in ([\d.]+\w+), ([\d.]+\w+) read", text, re.M)
    rps = re.search(r"^Requests/sec:\s+([\d.]+)", text, re.M)
    if not m or not rps:
        raise ValueError("no 'N requests in T' and 'Requests/sec' lines in wrk's output")
    pct = {int(p): _ms(v) for p, v in re.findall(r"^\s+(50|75|90|99)%\s+(\S+)\s*$", text, re.M)}
    if set(pct) != {50, 75, 90, 99}:
        raise ValueError("wrk's output lacks the --latency distribution (50/75/90/99 %)")
    sock = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", text)
    status = re.search(r"Non-2xx or 3xx responses: (\d+)", text)
    detail = dict(zip(("connect", "read", "write", "timeout"), map(int, sock.groups()))) if sock else \
        {"connect": 0, "read": 0, "write": 0, "timeout": 0}
    detail["status"] = int(status.group(1)) if status else 0
    lat = re.search(r"^\s+Latency\s+(\S+)\s+(\S+)\s+(\S+)", text, re.M)
    return {"requests": int(m.group(1)), "seconds": _ms(m.group(2)) / 1e3, "rps": float(rps.group(1)),
            "bytes": None, "p50_ms": pct[50], "p75_ms": pct[75], "p90_ms": pct[90], "p99_ms": pct[99],
            "p999_ms": None, "mean_ms": _ms(lat.group(1)) if lat else None,
            "max_ms": _ms(lat.group(3)) if lat else None,
            "socket_errors": detail["connect"] + detail["read"] + detail["write"] + detail["timeout"],
            "status_errors": detail["status"], "errors_detail": detail, "source": "wrk text"}


def parse_proc_stats(text: str) -> tuple[float, int]:
    """nginx.STATS_AND_STOP's output -> (CPU seconds of nginx's master and workers, processes)."""
    hz, ticks, procs = 100.0, 0, 0
    for line in text.splitlines():
        if line.startswith("CLK_TCK "):
            hz = float(line.split()[1])
        elif ")" in line and line[:1].isdigit():
            fields = line.rpartition(")")[2].split()
            # after the command: state ppid pgrp session tty tpgid flags minflt cminflt majflt
            # cmajflt utime stime (fields 3.. of proc(5), so utime/stime are [11] and [12])
            ticks += int(fields[11]) + int(fields[12])
            procs += 1
    return ticks / hz, procs


# -- the workload -------------------------------------------------------------------------------

class Web(Workload):
    name = "web"
    description = ("nginx serving a small static file to wrk on the host: replicas behind an nginx "
                   "balancer (scale-out) or workers in one server (scale-up)")
    params = (
        Param("replicas", int, 1, "server instances (nginx each); more than 1 needs the balancer", min=1, max=1024),
        Param("workers", int, 1, "nginx worker processes per server", min=1, max=256),
        Param("balancer", str, "nginx", "nginx: a reverse proxy in its own instance in front of the servers; "
                                        "none: wrk talks to the single server; service: the platform's own "
                                        "(a Kubernetes ClusterIP Service, kube-proxy balancing; pods with "
                                        "backend = \"kubernetes\" only)", choices=("nginx", "none", "service")),
        Param("lb_workers", _positive_or_auto, 0, "balancer worker processes (0: one per CPU it sees)"),
        Param("file_size", int, 600, "bytes of the static file", min=1, max=1 << 30),
        Param("tcp_nopush", bool, True, "the servers' nginx tcp_nopush (TCP_CORK around sendfile), on as Debian's "
                                        "nginx.conf ships it; where the platform refuses TCP_CORK (gVisor runsc "
                                        "20221219, network host) keep-alive responses wait ~40 ms for the client's "
                                        "delayed ACK: docs/runtimes.md"),
        Param("connections", int, 100, "wrk keep-alive connections", min=1, max=100000),
        Param("threads", _positive_or_auto, 0, "wrk threads (0: one per host CPU, at most connections)"),
        Param("duration", float, 10.0, "seconds of load", min=1.0, max=3600.0),
        Param("replica_memory_mb", int, REPLICA_MEMORY_MB, "memory one replica needs at least, for the "
              "capacity check (a shape's memory limit counts when larger)", min=1, max=1 << 20),
    )
    metrics = (
        MetricSpec("requests_per_second", "req/s", True, "completed requests per second (wrk)"),
        MetricSpec("latency_p50_ms", "ms", False, "median request latency (closed loop, see latency_model)"),
        MetricSpec("latency_p90_ms", "ms", False, "90th percentile latency"),
        MetricSpec("latency_p99_ms", "ms", False, "99th percentile latency"),
        MetricSpec("errors", "count", False, "socket errors, timeouts and non-2xx/3xx responses"),
        MetricSpec("server_cpu_cores", "cores", False, "CPU seconds per second of every server's nginx"),
        MetricSpec("server_cpu_util", "fraction", False, "server_cpu_cores over the CPUs the servers may use "
                   "(per kernel they run on: its CPUs or their entitlements, the lesser)"),
        MetricSpec("lb_cpu_cores", "cores", False, "CPU seconds per second of the balancer's nginx"),
        MetricSpec("client_cpu_cores", "cores", False, "CPU seconds per second of wrk"),
        MetricSpec("client_cpu_util", "fraction", False, "client_cpu_cores over the host's CPUs"),
    )

    # -- checks before anything starts ----------------------------------------------------------
    def validate(self, params: dict[str, Any]) -> None:
        if params["balancer"] == "none" and params["replicas"] != 1:
            raise ValueError(f"replicas={params['replicas']} needs a balancer: use balancer = \"nginx\", "
                             f"or replicas = 1 to load one server directly")
        if params["threads"] and params["threads"] > params["connections"]:
            raise ValueError(f"threads={params['threads']} is more than connections={params['connections']} "
                             f"(wrk needs at least one connection per thread)")
        need = self._instances_count(params) * params["replica_memory_mb"]
        avail = _mem_available_mb()
        if need > avail:
            raise ValueError(f"replicas={params['replicas']} need about {need:.0f} MB "
                             f"({params['replica_memory_mb']} MB each) but this machine has {avail:.0f} MB "
                             f"available: use fewer replicas")

    def check_capacity(self, params: dict[str, Any], env: EnvSpec) -> list[str]:
        """Before the run starts: the tools on the host, and a shape's memory limit per instance
        against the host's available memory."""
        problems = []
        kind = traits_for(env)  # with its options: pods on a cluster are not kube play's
        on_host = kind.host_process  # nginx runs here, not from the guest image
        for tool, package in (("wrk", "wrk"), *((("nginx", "nginx-light"),) if on_host else ())):
            try:
                nginx.which(tool)
            except MissingTool:
                problems.append(f"{tool} is not installed on the host (apt-get install {package})")
        default_mb = mpijob.instance_memory_mb(env) or 0  # a VM without a memory shape still takes its default
        per = max(params["replica_memory_mb"], env.shape.memory_mb or default_mb)
        count = self._instances_count(params)
        avail = _mem_available_mb()
        if kind.bridge_port and count > BRIDGE_PORTS - 1:
            problems.append(f"{count} containers on one network bridge: Linux gives a bridge at most "
                            f"{BRIDGE_PORTS} ports (use at most {BRIDGE_PORTS - 2} replicas)")
        # only instances on a machine's cores draw on its memory (a cluster's pods, ssh hosts: their own)
        here = kind.host_process or kind.shares_kernel or kind.machine_cores
        if here and count * per > avail:
            what = f"shape {env.shape.name}: {env.shape.memory_mb} MB" if env.shape.memory_mb else \
                (f"{per} MB (a VM's default)" if default_mb else f"{per} MB")
            parts = f"{params['replicas']} replicas" + (" + balancer" if params["balancer"] == "nginx" else "")
            problems.append(f"{count} instances ({parts}) x {what} each = {count * per:.0f} MB, more than the "
                            f"{avail:.0f} MB this machine has available")
        return problems

    @staticmethod
    def _instances_count(params: dict[str, Any]) -> int:
        return params["replicas"] + (1 if params["balancer"] == "nginx" else 0)

    def roles(self, params: dict[str, Any]) -> dict[str, int]:
        roles = {"server": params["replicas"]}
        if params["balancer"] == "nginx":
            roles["lb"] = 1
        return roles

    def timeout(self, params: dict[str, Any]) -> float:
        return params["duration"] + 60 + 2 * self._instances_count(params)

    # -- one repetition -----------------------------------------------------------------------
    def execute(self, instances: dict[str, list[Instance]], params: dict[str, Any], ctx: RunContext) -> str:
        wrk = nginx.which("wrk")
        servers = instances["server"]
        lb = instances["lb"][0] if params["balancer"] == "nginx" else None
        token = secrets.token_hex(4)
        host_cpus = os.cpu_count() or 1
        started: list[tuple[Instance, str]] = []  # (instance, prefix) with nginx running
        kernels: dict[int, dict[str, Any]] = {}  # id(server) -> the kernel it runs on (for the capacity)
        corks: dict[int, str] = {}  # id(server) -> does TCP_CORK work there (nginx.parse_cork)
        lock = threading.Lock()
        report: dict[str, Any] = {"format": 1, "params": params, "servers": [], "lb": None}
        try:
            # Servers (in parallel: a container exec takes 0.1-0.5 s).
            if lb is not None:
                netutil.connect_peers([lb, *servers], "use balancer = \"none\" with replicas = 1 in this "
                                                      "environment")

            def start_server(item):
                i, inst = item
                if not _is_loopback(inst) and not inst.address and not isinstance(inst, PortForwarding):
                    raise WorkloadFailed(f"{inst.name} has no network address for the load generator to reach")
                port = free_port() if _is_loopback(inst) else PORT
                kernels[id(inst)] = kernel_identity.read(inst) or {}
                prefix = f"{inst.scratch_dir().rstrip('/')}/vb-web-{token}-s{i}"
                listen = f"127.0.0.1:{port}" if _is_loopback(inst) else str(port)
                corks[id(inst)] = nginx.start(inst, prefix, nginx.server_conf(params["workers"], listen, prefix,
                                                                            params["tcp_nopush"]),
                                              params["file_size"], lock, started, probe_cork=params["tcp_nopush"])
                return inst, port

            backends = fanout.all_of(start_server, list(enumerate(servers)))
            for inst, port in backends:
                nginx.wait_ready(*ctx.applied.route(*_endpoint(inst, port)), params["file_size"])
            target = ctx.applied.route(*_endpoint(*backends[0]))
            if params["balancer"] == "service":
                # The platform's balancer in front of the servers, wrk outside it (study 004's Service).
                if not isinstance(servers[0], ServiceBalancing):
                    raise WorkloadFailed(f"balancer = \"service\" needs a platform with Services ({servers[0].env.driver} "
                                         f"has none): use pods with backend = \"kubernetes\", or balancer = \"nginx\"")
                address, port, report["balancer"] = servers[0].service_endpoint(servers, PORT)
                target = ctx.applied.route(address, port)
                nginx.wait_ready(*target, params["file_size"])
            if lb is not None:
                port = free_port() if _is_loopback(lb) else PORT
                listen = f"127.0.0.1:{port}" if _is_loopback(lb) else str(port)
                upstreams = [f"{inst.address}:{p}" for inst, p in backends]
                prefix = f"{lb.scratch_dir().rstrip('/')}/vb-web-{token}-lb"
                nginx.start(lb, prefix, nginx.lb_conf(params["lb_workers"], listen, prefix, upstreams), 1, lock,
                             started)
                target = ctx.applied.route(*_endpoint(lb, port))
                nginx.wait_ready(*target, params["file_size"])

            # Load.
            threads = params["threads"] or min(params["connections"], host_cpus)
            with tempfile.NamedTemporaryFile("w", suffix=".lua", prefix="vb-wrk-", delete=False) as script:
                script.write(LUA_DONE)
            argv = [wrk, "-t", str(threads), "-c", str(params["connections"]), "-d", f"{params['duration']:g}s",
                    "--timeout", f"{WRK_TIMEOUT_S}s", "--latency", "-s", script.name,
                    f"http://{target[0]}:{target[1]}/index.html"]
            try:
                run = run_measured(argv, timeout=params["duration"] + 30)
            finally:
                os.unlink(script.name)
            ctx.measure_window = (run["t0"], run["t1"])  # the monitor's summaries cover the load only
            report["client"] = {"argv": argv, "returncode": run["returncode"], "stdout": run["stdout"][-20000:],
                                "stderr": run["stderr"][-4000:], "cpu_s": run["cpu_s"], "wall_s": run["wall_s"],
                                "host_cpus": host_cpus, "threads": threads, "target": list(target)}
            if run["returncode"] != 0:
                raise WorkloadFailed(f"wrk exited with status {run['returncode']}: {run['stderr'].strip()[-300:]}",
                                     run["stdout"][-4000:] + run["stderr"][-4000:])
        finally:
            # Stop every nginx we started, whatever happened; their CPU times come with it.
            stats = {id(inst): text for (inst, _), text, exc in
                     fanout.each(lambda it: nginx.stop(*it), list(started))}
            for inst, prefix in started:
                text = stats.get(id(inst)) or ""
                cpu_s, procs = parse_proc_stats(text) if text else (math.nan, 0)
                entry = {"instance": inst.name, "driver": inst.env.driver, "cpu_s": cpu_s, "processes": procs,
                         "killed": "KILLED" in text, "vcpus": self.cpu_entitlement(inst),
                         "host_kernel": _shares_host_kernel(inst)}
                if inst.role == "lb":
                    report["lb"] = entry
                else:
                    report["servers"].append({**entry, **kernels.get(id(inst), {}),
                                              **({"tcp_cork": corks[id(inst)]} if corks.get(id(inst)) else {})})
        return json.dumps(report)

    @staticmethod
    def cpu_entitlement(inst: Instance) -> float:
        """CPUs one instance may use: its shape's, else its machine's (not this one's) on that
        machine's kernel, else what it reports (Instance.cpus_available)."""
        return float(inst.cpus_available())

    # -- parsing (pure) -------------------------------------------------------------------------
    def parse(self, raw: str, params: dict[str, Any]) -> list[Sample]:
        report = json.loads(raw)
        client = report.get("client")
        if not client:
            raise ValueError("no load-generator result in the raw output")
        w = parse_wrk(client["stdout"])
        if w["requests"] <= 0:
            raise ValueError("wrk completed no request")
        wall = client["wall_s"] or w["seconds"]
        meta = {"latency_model": LATENCY_MODEL, "wrk_requests": w["requests"], "wrk_seconds": w["seconds"],
                **({"service": report["balancer"]} if report.get("balancer") else {}),
                "wrk_threads": client["threads"], "errors_detail": w["errors_detail"], "parsed_from": w["source"]}
        servers = report.get("servers") or []
        refused = cork_refused(servers) if params.get("tcp_nopush", True) else ""
        if refused:
            meta = {**meta, "tcp_cork": refused}
        # the warning goes with the figures the wait sets (analysis carries it into their rows)
        timed = {**meta, "warnings": [NO_CORK_WARNING.format(refused=refused)]} if refused else meta
        out = [
            Sample("requests_per_second", w["rps"], "req/s", True, timed),
            Sample("latency_p50_ms", w["p50_ms"], "ms", False, timed),
            Sample("latency_p90_ms", w["p90_ms"], "ms", False, timed),
            Sample("latency_p99_ms", w["p99_ms"], "ms", False, timed),
            Sample("errors", w["socket_errors"] + w["status_errors"], "count", False, meta),
            Sample("client_cpu_cores", client["cpu_s"] / wall, "cores", False, meta),
            Sample("client_cpu_util", client["cpu_s"] / wall / client["host_cpus"], "fraction", False, meta),
        ]
        if servers and all(math.isfinite(s["cpu_s"]) for s in servers):
            cores = sum(s["cpu_s"] for s in servers) / wall
            capacity, kernels, rule = server_capacity(servers, client["host_cpus"])
            smeta = {**meta, "server_processes": sum(s["processes"] for s in servers), "server_capacity": capacity,
                     "server_kernels": kernels, "server_capacity_rule": rule}
            out.append(Sample("server_cpu_cores", cores, "cores", False, smeta))
            out.append(Sample("server_cpu_util", cores / capacity, "fraction", False, smeta))
        lb = report.get("lb")
        if lb and math.isfinite(lb["cpu_s"]):
            out.append(Sample("lb_cpu_cores", lb["cpu_s"] / wall, "cores", False, meta))
        return out


NO_CORK_WARNING = (
    "measures the client's delayed ACK (~40 ms a response), not the platform's CPU: TCP_CORK refused in the "
    "servers ({refused}), so nginx's tcp_nopush sent each keep-alive response's header alone and Nagle held "
    "its body until the client ACKed; tcp_nopush = false measures without it (docs/runtimes.md)")


def cork_refused(servers: list[dict[str, Any]]) -> str:
    """'N of M: <error>' when some servers refused TCP_CORK (nginx.parse_cork), else '' (pure)."""
    bad = [s["tcp_cork"] for s in servers if str(s.get("tcp_cork", "")).startswith("refused")]
    if not bad:
        return ""
    return f"{len(bad)} of {len(servers)}: {bad[0].partition(':')[2].strip()}"


def server_capacity(servers: list[dict[str, Any]], host_cpus: int) -> tuple[float, list[dict[str, Any]], str]:
    """The CPUs the servers could use together: (capacity, its kernels, the rule used) (pure).

    Servers on one kernel share its CPUs: per kernel (boot id), the lesser of what its servers are
    entitled to and the CPUs it has, summed over kernels. Reports from before servers recorded
    their kernel: every server's entitlement, capped at the host's CPUs when all share the host's
    kernel (which over-counts servers on one kernel that is not the host's, e.g. pods on a cluster)."""
    if all(s.get("boot_id") and s.get("kernel_cpus") for s in servers):
        groups: dict[str, dict[str, Any]] = {}
        for s in servers:
            g = groups.setdefault(s["boot_id"], {"boot_id": s["boot_id"], "kernel_cpus": s["kernel_cpus"],
                                                 "servers": 0, "entitled": 0.0})
            g["servers"] += 1
            g["entitled"] += s["vcpus"]
            g["kernel_cpus"] = max(g["kernel_cpus"], s["kernel_cpus"])
        for g in groups.values():
            g["capacity"] = min(g["entitled"], g["kernel_cpus"])
        return sum(g["capacity"] for g in groups.values()), list(groups.values()), "per kernel"
    capacity = sum(s["vcpus"] for s in servers)
    if all(s.get("host_kernel", traits_of(s["driver"]).shares_kernel) for s in servers):
        return min(capacity, host_cpus), [], "no kernel recorded: entitlements, capped at the host's CPUs"
    return capacity, [], "no kernel recorded: sum of entitlements"


# -- peak of a scaling sweep -------------------------------------------------------------------

def peak(results: Any, *, environment: str | None = None, metric: str = "requests_per_second",
         by: str = "replicas") -> tuple[int, float]:
    """The replica count (or `by` = "workers") with the highest median throughput, and that median.

    `results`: analysis rows (`analysis.results(...)` or its "results" list: dicts with params,
    metric, environment, median), or plain (count, value) pairs. Rows of other metrics are ignored;
    with rows of several environments, name one. A tie goes to the smaller count (cheaper)."""
    if isinstance(results, dict):
        results = results["results"]
    pairs: list[tuple[Any, Any]] = []
    envs = set()
    for row in results:
        if isinstance(row, (tuple, list)):
            pairs.append((row[0], row[1]))
        elif row.get("metric") == metric and row.get("median") is not None and \
                environment in (None, row.get("environment")):
            envs.add(row.get("environment"))
            pairs.append((row["params"][by], row["median"]))
    if len(envs) > 1:
        raise ValueError(f"results of several environments ({', '.join(sorted(map(str, envs)))}): name one")
    points: dict[int, float] = {}
    for count, value in pairs:
        if int(count) in points:
            raise ValueError(f"two results for {by}={count}: pass one environment and one sweep "
                             f"(other parameters fixed)")
        points[int(count)] = float(value)
    if not points:
        raise ValueError(f"no {metric} results to find a peak in")
    best = max(points.values())
    return min(c for c, v in points.items() if v == best), best


# -- helpers ------------------------------------------------------------------------------------

def run_measured(argv: list[str], timeout: float) -> dict[str, Any]:
    """Run argv, returning its output, wall time and CPU time (its rusage, from wait4)."""
    t0 = time.time()
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            start_new_session=True)
    chunks: dict[str, bytes] = {}

    def drain(name, stream):
        chunks[name] = stream.read()

    readers = [threading.Thread(target=drain, args=(n, s), daemon=True)
               for n, s in (("out", proc.stdout), ("err", proc.stderr))]
    for r in readers:
        r.start()
    timer = threading.Timer(timeout, lambda: _kill_group(proc.pid))
    timer.start()
    try:
        _, status, usage = os.wait4(proc.pid, 0)
    except BaseException:
        _kill_group(proc.pid)
        proc.wait()
        raise
    finally:
        timer.cancel()
    t1 = time.time()
    proc.returncode = os.waitstatus_to_exitcode(status)
    for r in readers:
        r.join(10)
    return {"returncode": proc.returncode, "stdout": chunks.get("out", b"").decode(errors="replace"),
            "stderr": chunks.get("err", b"").decode(errors="replace"), "t0": t0, "t1": t1, "wall_s": t1 - t0,
            "cpu_s": usage.ru_utime + usage.ru_stime}


def _kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
