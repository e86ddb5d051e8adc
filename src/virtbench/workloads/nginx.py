"""The server side of the web workload: nginx in an instance, as a static file server or as the
round-robin balancer in front of the servers; started from a prefix directory with its own
configuration, stopped with the CPU times of its processes, and waited for until it serves the file."""

from __future__ import annotations

import http.client
import os
import threading
import time

from ..errors import MissingTool, WorkloadFailed
from ..drivers.base import Instance

READY_TIMEOUT = 15.0

# $1 = prefix directory, $2 = file size in bytes; nginx.conf on stdin. nginx daemonizes once its
# sockets listen, so the exec returns with the server up.
START = r"""
set -e
mkdir -p "$1/www" "$1/logs"
head -c "$2" /dev/zero | tr '\0' x > "$1/www/index.html"
cat > "$1/nginx.conf"
nginx -e "$1/logs/startup.log" -c "$1/nginx.conf" -p "$1/" -g "pid $1/nginx.pid;"
"""

# $1 = prefix. Prints the /proc/PID/stat lines of the master and its workers (their CPU times),
# the clock tick, then stops nginx and waits until it is gone (SIGKILL after 5 s).
STATS_AND_STOP = r"""
pidfile="$1/nginx.pid"
[ -s "$pidfile" ] || { echo "no nginx running"; rm -rf "$1"; exit 0; }
master=$(cat "$pidfile")
echo "CLK_TCK $(getconf CLK_TCK)"
for p in $master $(pgrep -P "$master"); do cat "/proc/$p/stat" 2>/dev/null || true; done
kill -TERM "$master" 2>/dev/null || true
i=0
while kill -0 "$master" 2>/dev/null && [ $i -lt 50 ]; do sleep 0.1; i=$((i+1)); done
if kill -0 "$master" 2>/dev/null; then
  for p in $(pgrep -P "$master") $master; do kill -KILL "$p" 2>/dev/null || true; done
  echo "KILLED"
fi
rm -rf "$1"
"""


def which(tool: str) -> str:
    """A tool's path on PATH or in /usr/bin, /usr/sbin (where Debian puts nginx), else MissingTool
    naming its package (the load generator wrk is looked up here too)."""
    for d in os.environ.get("PATH", "").split(os.pathsep) + ["/usr/bin", "/usr/sbin"]:
        path = os.path.join(d, tool)
        if os.access(path, os.X_OK):
            return path
    raise MissingTool(tool, {"wrk": "wrk", "nginx": "nginx-light"}.get(tool, tool), "the web workload needs it")


def server_conf(workers: int, listen: str, prefix: str) -> str:
    return f"""# virtbench web server
user root;
worker_processes {workers};
error_log {prefix}/logs/error.log warn;
events {{ worker_connections 4096; }}
http {{
    access_log off;
    sendfile on;
    tcp_nopush on;
    tcp_nodelay on;
    keepalive_timeout 65;
    keepalive_requests 100000000;
    open_file_cache max=16 inactive=300s;
    open_file_cache_valid 300s;
    client_body_temp_path {prefix}/tmp_body;
    proxy_temp_path {prefix}/tmp_proxy;
    default_type application/octet-stream;
    server {{
        listen {listen} backlog=4096;
        root {prefix}/www;
        location / {{ }}
    }}
}}
"""


def lb_conf(workers: int, listen: str, prefix: str, upstreams: list[str]) -> str:
    servers = "\n".join(f"        server {u};" for u in upstreams)
    return f"""# virtbench web balancer: round robin over keep-alive upstream connections
user root;
worker_processes {workers or "auto"};
error_log {prefix}/logs/error.log warn;
events {{ worker_connections 8192; }}
http {{
    access_log off;
    tcp_nodelay on;
    keepalive_timeout 65;
    keepalive_requests 100000000;
    client_body_temp_path {prefix}/tmp_body;
    proxy_temp_path {prefix}/tmp_proxy;
    upstream servers {{
{servers}
        keepalive {max(32, 4 * len(upstreams))};
        keepalive_requests 100000000;
    }}
    server {{
        listen {listen} backlog=4096;
        location / {{
            proxy_pass http://servers;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_buffering off;
        }}
    }}
}}
"""


def start(inst: Instance, prefix: str, conf: str, size: int, lock: threading.Lock, started: list) -> None:
    if inst.traits.host_process:
        which("nginx")
    with lock:
        started.append((inst, prefix))  # before the exec: a half-started nginx is stopped too
    res = inst.exec(["sh", "-c", START, "sh", prefix, str(size)], timeout=60, stdin=conf.encode())
    if not res.ok:
        raise WorkloadFailed(f"nginx did not start in {inst.name}: {res.describe_failure()}",
                             res.stdout[-2000:] + res.stderr[-2000:])


def stop(inst: Instance, prefix: str) -> str:
    res = inst.exec(["sh", "-c", STATS_AND_STOP, "sh", prefix], timeout=60)
    return res.stdout


def wait_ready(host: str, port: int, size: int) -> None:
    """GET the file until it comes back whole (nginx listens before its workers run)."""
    deadline = time.monotonic() + READY_TIMEOUT
    last = ""
    while time.monotonic() < deadline:
        conn = http.client.HTTPConnection(host, port, timeout=2)
        try:
            conn.request("GET", "/index.html")
            resp = conn.getresponse()
            body = resp.read()
            if resp.status == 200 and len(body) == size:
                return
            last = f"HTTP {resp.status}, {len(body)} bytes"
        except OSError as exc:
            last = str(exc)
        finally:
            conn.close()
        time.sleep(0.05)
    raise WorkloadFailed(f"http://{host}:{port}/index.html did not answer within {READY_TIMEOUT:g} s: {last}")
