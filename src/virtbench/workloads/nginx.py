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

# $1 = prefix directory, $2 = file size in bytes, $3 = "cork" to probe TCP_CORK first with the Python
# program $4 (CORK_PROBE); nginx.conf on
# stdin. nginx daemonizes once its sockets listen, so the exec returns with the server up.
START = r"""
set -e
if [ "$3" = cork ]; then
  if command -v python3 >/dev/null 2>&1; then
    python3 -c "$4" || true
  else
    echo "VBCORK unknown: no python3 to probe with"
  fi
fi
mkdir -p "$1/www" "$1/logs"
head -c "$2" /dev/zero | tr '\0' x > "$1/www/index.html"
cat > "$1/nginx.conf"
nginx -e "$1/logs/startup.log" -c "$1/nginx.conf" -p "$1/" -g "pid $1/nginx.pid;"
"""

# Does TCP_CORK (what nginx's tcp_nopush sets around sendfile) hold data here? A corked write of
# 100 bytes on a loopback connection must not arrive within 0.1 s (Linux holds it up to 0.2 s).
# gVisor's runsc 20221219 with network = host accepts the setsockopt but does not pass it on (and
# refuses to read it back): nginx then sends a keep-alive response's header alone and Nagle holds
# the body until the client's delayed ACK (~40 ms).
CORK_PROBE = """
import select, socket
l = socket.socket()
l.bind(("127.0.0.1", 0))
l.listen(1)
c = socket.create_connection(l.getsockname())
a = l.accept()[0]
try:
    a.setsockopt(socket.IPPROTO_TCP, socket.TCP_CORK, 1)
except OSError as e:
    print("VBCORK refused:", e)
    raise SystemExit
a.send(b"x" * 100)
if select.select([c], [], [], 0.1)[0]:
    print("VBCORK refused: setsockopt(TCP_CORK) succeeded but a corked write was sent at once")
else:
    print("VBCORK ok")
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


def server_conf(workers: int, listen: str, prefix: str, tcp_nopush: bool = True) -> str:
    return f"""# virtbench web server
user root;
worker_processes {workers};
error_log {prefix}/logs/error.log warn;
events {{ worker_connections 4096; }}
http {{
    access_log off;
    sendfile on;
    tcp_nopush {"on" if tcp_nopush else "off"};
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


def start(inst: Instance, prefix: str, conf: str, size: int, lock: threading.Lock, started: list,
          probe_cork: bool = False) -> str:
    """Start nginx; with `probe_cork`, first say whether TCP_CORK works there (parse_cork of the result)."""
    if inst.traits.host_process:
        which("nginx")
    with lock:
        started.append((inst, prefix))  # before the exec: a half-started nginx is stopped too
    res = inst.exec(["sh", "-c", START, "sh", prefix, str(size), "cork" if probe_cork else "", CORK_PROBE],
                    timeout=60, stdin=conf.encode())
    if not res.ok:
        raise WorkloadFailed(f"nginx did not start in {inst.name}: {res.describe_failure()}",
                             res.stdout[-2000:] + res.stderr[-2000:])
    return parse_cork(res.stdout)


def parse_cork(text: str) -> str:
    """START's probe line -> 'ok', 'refused: <the error>', 'unknown: <why>' or '' (not probed)."""
    for line in text.splitlines():
        if line.startswith("VBCORK "):
            return line[len("VBCORK "):].strip()
    return ""


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
