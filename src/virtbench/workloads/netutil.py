"""What the network workloads share: a server process on one instance, reached by the client through
the conditions' route (a delay proxy, when one is in the path), CPU time of both ends."""

from __future__ import annotations

import ipaddress
import re
import secrets
import socket
import threading
import time
from typing import Any

from . import mpicluster as cluster
from ..errors import ConditionUnavailable
from ..drivers.base import Instance
from ..drivers.container import ociruntime
from ..errors import WorkloadFailed
from ..model import ExecResult
from .base import RunContext, Workload

# `sh -c WRAP sh PIDFILE CMD ARGS...`: runs CMD, records its pid for stop(), then prints the wall
# clock around it and `times` (the CPU of the shell's children, CMD included).
WRAP = r'''
p="$1"; shift
t0=$(date +%s.%N)
"$@" &
echo $! > "$p"
wait $!
rc=$?
t1=$(date +%s.%N)
echo "VBTIME $t0 $t1"
times
rm -f "$p"
exit $rc
'''
_TIMES = re.compile(r"(\d+)m([0-9.]+)s\s+(\d+)m([0-9.]+)s")


def parse_wrap(text: str) -> tuple[float, float]:
    """WRAP's trailer -> (wall seconds, CPU seconds of the children)."""
    m = re.search(r"^VBTIME ([0-9.]+) ([0-9.]+)$", text, re.M)
    if not m:
        raise ValueError("no VBTIME line (wall clock) in the output")
    wall = float(m.group(2)) - float(m.group(1))
    lines = _TIMES.findall(text[m.end():])
    if len(lines) < 2:
        raise ValueError("no `times` output (CPU time) after the VBTIME line")
    cu, cs = lines[1][:2], lines[1][2:]
    cpu = int(cu[0]) * 60 + float(cu[1]) + int(cs[0]) * 60 + float(cs[1])
    return wall, cpu


def is_loopback(addr: str | None) -> bool:
    try:
        return bool(addr) and ipaddress.ip_address(addr).is_loopback
    except ValueError:
        return addr == "localhost"


def server_port(server: Instance, default: int) -> int:
    """A fixed port inside an instance of its own; a free one when the 'instance' is this host."""
    if not is_loopback(server.address):
        return default
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def bind_address(server: Instance) -> str:
    """Where the server listens: loopback on the host (nothing reaches outside), all addresses of an
    instance's own network namespace otherwise."""
    return "127.0.0.1" if is_loopback(server.address) else "0.0.0.0"


def connect_peers(instances: list[Instance], hint: str) -> None:
    """Make the instances reach each other. Containers and hosts have addresses already; VMs on
    user-mode networking have none until their driver puts them on a private segment (the one MPI
    clusters use). ConditionUnavailable, with `hint`, where nothing can join them."""
    if all(i.address for i in instances) or cluster.connect(instances) is not None:
        return
    lost = ", ".join(f"{i.name} ({i.env.driver})" for i in instances if not i.address)
    raise ConditionUnavailable(f"{lost} have no network address a peer can reach: {hint}")


class Server:
    """A server command on an instance, running in a thread until stopped (or it exits by itself)."""

    def __init__(self, inst: Instance, argv: list[str], port: int, timeout: float):
        if not inst.address:
            # e.g. a VM on user-mode networking: no peer can reach it, on any try
            raise ConditionUnavailable(f"{inst.name} ({inst.env.driver}) has no network address a peer can reach")
        self.inst, self.port = inst, port
        self.pidfile = f"{inst.scratch_dir()}/vb-server-{secrets.token_hex(4)}.pid"
        self.result: ExecResult | None = None
        self._thread = threading.Thread(target=self._run, args=(argv, timeout), daemon=True)
        self._thread.start()

    def _run(self, argv: list[str], timeout: float) -> None:
        self.result = self.inst.exec(["sh", "-c", WRAP, "sh", self.pidfile, *argv], timeout=timeout)

    def wait_listening(self, timeout: float = 20.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            res = self.inst.exec(["ss", "-Hltn", f"sport = :{self.port}"], timeout=30)
            if res.ok and res.stdout.strip():
                return
            if not self._thread.is_alive():
                r = self.result
                raise WorkloadFailed(f"the server on {self.inst.name} exited before listening: "
                                     f"{r.describe_failure() if r else 'no result'}",
                                     (r.stdout + r.stderr)[-4000:] if r else "")
            time.sleep(0.1)
        raise WorkloadFailed(f"the server on {self.inst.name} is not listening on port {self.port} "
                             f"after {timeout:g} s")

    def stop(self, wait: float = 30.0) -> str:
        """Stop the server (if still running) and return its output."""
        if self._thread.is_alive():
            self.inst.exec(["sh", "-c", '[ -f "$1" ] && kill "$(cat "$1")" 2>/dev/null; true', "sh", self.pidfile],
                           timeout=30)
        self._thread.join(wait)
        r = self.result
        return (r.stdout + r.stderr) if r else ""

    def finish(self, wait: float) -> str:
        """Wait for a server that exits on its own (iperf3 -1), stopping it if it does not."""
        self._thread.join(wait)
        return self.stop()


class PeerWorkload(Workload):
    """A workload between a server and a client instance (both of the cell's environment) that runs
    for params["duration"] seconds."""

    def roles(self, params: dict[str, Any]) -> dict[str, int]:
        return {"server": 1, "client": 1}

    def timeout(self, params: dict[str, Any]) -> float:
        return params["duration"] + 90

    @staticmethod
    def serve(ctx: RunContext, server: Instance, client: Instance, argv: list[str],
              port: int) -> tuple[Server, str, int]:
        """Join the two, start `argv` on the server and wait until it listens on `port`: (the running
        server, the host and port the client dials). The caller stops the server."""
        connect_peers([server, client], "run this workload between containers or hosts, or between VMs "
                                        "of one environment")
        why = ociruntime.cannot_run(server.metadata(), f"{argv[0]} server")
        if why:  # said before it starts: the tool's own error would not name the runtime
            raise WorkloadFailed(f"{server.name}: {why}")
        srv = Server(server, argv, port, timeout=ctx.timeout)
        try:
            srv.wait_listening()
        except BaseException:
            srv.stop(wait=10)
            raise
        return (srv, *dial(ctx, server, port))


def dial(ctx: RunContext, server: Instance, port: int) -> tuple[str, int]:
    """The address the client uses: the server's, or a proxy in front of it (delay_ms, rate_mbit)."""
    return ctx.applied.route(server.address, port)
