#!/usr/bin/env python3
"""How fast can the load generator go on this machine? wrk (the web workload's client, with the
same Lua done() hook) against a trivial local nginx returning a tiny file, so a report can say when
the client, not the server under test, is the limit.

Two figures:
- the ceiling: the highest requests/s reached here (client and server share the machine's CPUs,
  as they do in the web workload on one machine);
- the client's cost: wrk's CPU microseconds per request (from wait4's rusage), i.e. the requests/s
  one core of client can drive. A web result whose client_cpu_cores approaches the cores the
  client can have, or whose requests/s approaches the ceiling, is client-bound.

    python bench/loadgen_ceiling.py [--duration 5] [--size 1] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from virtbench.conditions.hostnet import free_port  # noqa: E402
from virtbench.workloads import nginx, web  # noqa: E402


def start_nginx(tmp: Path, workers: int, size: int) -> tuple[int, Path]:
    port = free_port()
    (tmp / "www").mkdir(exist_ok=True)
    (tmp / "logs").mkdir(exist_ok=True)
    (tmp / "www" / "index.html").write_bytes(b"x" * size)
    conf = nginx.server_conf(workers, f"127.0.0.1:{port}", str(tmp))
    (tmp / "nginx.conf").write_text(conf)
    subprocess.run(["nginx", "-e", str(tmp / "logs/startup.log"), "-c", str(tmp / "nginx.conf"), "-p", f"{tmp}/",
                    "-g", f"pid {tmp}/nginx.pid;"], check=True)
    nginx.wait_ready("127.0.0.1", port, size)
    return port, tmp / "nginx.pid"


def nginx_cpu_s(pidfile: Path) -> float:
    master = int(pidfile.read_text())
    kids = subprocess.run(["pgrep", "-P", str(master)], capture_output=True, text=True).stdout.split()
    text = "CLK_TCK " + str(os.sysconf("SC_CLK_TCK")) + "\n"
    for pid in [str(master), *kids]:
        try:
            text += Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            pass
    return web.parse_proc_stats(text)[0]


def stop_nginx(pidfile: Path) -> None:
    master = int(pidfile.read_text())
    os.kill(master, 15)
    for _ in range(100):
        if not Path(f"/proc/{master}").exists():
            return
        time.sleep(0.05)


def run_wrk(port: int, threads: int, connections: int, duration: float, script: str) -> dict:
    argv = [shutil.which("wrk"), "-t", str(threads), "-c", str(connections), "-d", f"{duration:g}s", "--latency",
            "-s", script, f"http://127.0.0.1:{port}/index.html"]
    run = web.run_measured(argv, timeout=duration + 30)
    w = web.parse_wrk(run["stdout"])
    return {"threads": threads, "connections": connections, "rps": w["rps"], "p50_ms": w["p50_ms"],
            "p99_ms": w["p99_ms"], "errors": w["socket_errors"] + w["status_errors"],
            "client_cpu_cores": run["cpu_s"] / run["wall_s"],
            "client_us_per_request": 1e6 * run["cpu_s"] / max(w["requests"], 1)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--duration", type=float, default=5.0)
    ap.add_argument("--size", type=int, default=1, help="bytes of the file nginx returns")
    ap.add_argument("--json", help="also write the results here")
    args = ap.parse_args()
    if not (shutil.which("wrk") and shutil.which("nginx")):
        raise SystemExit("needs wrk and nginx: apt-get install wrk nginx-light")
    cpus = os.cpu_count() or 1
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        script = Path(tmp) / "done.lua"
        script.write_text(web.LUA_DONE)
        for workers in sorted({1, cpus}):
            srv = Path(tmp) / f"nginx-{workers}"
            srv.mkdir()
            port, pidfile = start_nginx(srv, workers, args.size)
            try:
                for threads in sorted({1, cpus}):
                    for conns in (16, 64, 256):
                        before = nginx_cpu_s(pidfile)
                        r = run_wrk(port, threads, conns, args.duration, str(script))
                        r["server_workers"] = workers
                        r["server_cpu_cores"] = (nginx_cpu_s(pidfile) - before) / args.duration
                        rows.append(r)
                        print(f"nginx workers {workers}  wrk threads {threads}  connections {conns:4d}: "
                              f"{r['rps']:9.0f} req/s  p50 {r['p50_ms']:6.2f} ms  p99 {r['p99_ms']:7.2f} ms  "
                              f"client {r['client_cpu_cores']:.2f} cores ({r['client_us_per_request']:.1f} us/req)  "
                              f"server {r['server_cpu_cores']:.2f} cores  errors {r['errors']}", flush=True)
            finally:
                stop_nginx(pidfile)
    best = max(rows, key=lambda r: r["rps"])
    cost = sorted(r["client_us_per_request"] for r in rows)[len(rows) // 2]
    summary = {"cpus": cpus, "file_bytes": args.size, "ceiling_rps": best["rps"], "ceiling_at": {
        k: best[k] for k in ("threads", "connections", "server_workers")},
        "client_us_per_request_median": cost, "client_rps_per_core": 1e6 / cost}
    print(f"\nceiling on this machine ({cpus} CPUs, client and server sharing them): {best['rps']:.0f} req/s "
          f"(wrk -t{best['threads']} -c{best['connections']}, nginx {best['server_workers']} worker(s))")
    print(f"client cost: {cost:.1f} us of CPU per request (median) -> one core of wrk drives about "
          f"{1e6 / cost:.0f} req/s")
    if args.json:
        Path(args.json).write_text(json.dumps({"summary": summary, "runs": rows}, indent=2))


if __name__ == "__main__":
    main()
