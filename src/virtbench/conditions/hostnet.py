"""Host networking for conditions: server links, tc shaping, the user-space delay proxy, probes.

A *link* is a network namespace of our own joined to the host by a veth pair (a /30 from
10.231.0.0/16). Remote storage servers run inside it, so they are reached over a real interface
like another host, and delay or rate can be put on that interface with tc where the kernel has
the qdisc. Where it does not (no netem on these machines), `vb-delayproxy` relays the traffic in
user space. `measure_delay` is the ping-pong that tells what was really added.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import os
import re
import shutil
import signal
import socket
import threading
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from .. import paths, procs
from .base import ConditionUnavailable
from .hostres import Helper, HostCommandFailed, next_id, owner_tag, require_root, run

LINK_NET = ipaddress.ip_network("10.231.0.0/16")
PROXY_BIN = "vb-delayproxy"
_lock = threading.Lock()


def proxy_bin() -> str:
    path = paths.native_bin_dir() / PROXY_BIN
    if not path.exists():
        raise ConditionUnavailable(f"{PROXY_BIN} is not built in {path.parent} (run: make -C native)")
    return str(path)


# -- links -------------------------------------------------------------------------------------------

def _used_networks() -> list[ipaddress.IPv4Network]:
    out = []
    for line in procs.run(["ip", "-o", "-4", "addr", "show"], timeout=30).stdout.splitlines():
        m = re.search(r"inet (\S+)", line)
        if m:
            out.append(ipaddress.ip_interface(m.group(1)).network)
    return out


@dataclass
class Link:
    """A namespace `netns` reached from the host over veth `host_if` (host_addr) <-> `ns_if` (ns_addr)."""

    netns: str
    host_if: str
    ns_if: str
    host_addr: str
    ns_addr: str
    shaped: dict = field(default_factory=dict)

    @classmethod
    def create(cls) -> Link:
        require_root("a server link (network namespace + veth)")
        n = next_id()
        pid = owner_tag().split("-")[0]
        netns = f"vb-{owner_tag()}-{n}"
        host_if, ns_if = f"vb{pid}h{n}"[-15:], f"vb{pid}n{n}"[-15:]
        with _lock:
            used = _used_networks()
            subnet = next((s for s in LINK_NET.subnets(new_prefix=30)
                           if not any(s.overlaps(u) for u in used)), None)
            if subnet is None:
                raise ConditionUnavailable(f"no free /30 left in {LINK_NET} for a server link")
            host_addr, ns_addr = (str(a) for a in list(subnet.hosts())[:2])
            link = cls(netns, host_if, ns_if, host_addr, ns_addr)
            try:
                run(["ip", "netns", "add", netns])
                run(["ip", "link", "add", host_if, "type", "veth", "peer", "name", ns_if])
                run(["ip", "link", "set", ns_if, "netns", netns])
                run(["ip", "addr", "add", f"{host_addr}/30", "dev", host_if])
                run(["ip", "link", "set", host_if, "up"])
                run(["ip", "-n", netns, "addr", "add", f"{ns_addr}/30", "dev", ns_if])
                run(["ip", "-n", netns, "link", "set", ns_if, "up"])
                run(["ip", "-n", netns, "link", "set", "lo", "up"])
            except BaseException:
                link.destroy()
                raise
        with _lock:
            _LINKS[ns_addr] = link
        return link

    def destroy(self) -> None:
        """Kill what still runs inside, then delete the namespace (which deletes the veth pair)."""
        with _lock:
            _LINKS.pop(self.ns_addr, None)
        res = procs.run(["ip", "netns", "pids", self.netns], timeout=30)
        for pid in res.stdout.split() if res.ok else []:
            with contextlib.suppress(ProcessLookupError, ValueError, PermissionError):
                os.kill(int(pid), signal.SIGKILL)
        procs.run(["ip", "netns", "del", self.netns], timeout=30)
        procs.run(["ip", "link", "del", self.host_if], timeout=30)  # gone with the namespace, normally


_LINKS: dict[str, Link] = {}


def link_for(addr: str) -> Link | None:
    with _lock:
        return _LINKS.get(addr)


# -- tc ----------------------------------------------------------------------------------------------

@lru_cache(maxsize=None)
def tc_supports(kind: str) -> tuple[bool, str]:
    """Does this kernel have qdisc `kind` (netem, tbf)? Tried for real on a veth in a scratch namespace."""
    if not shutil.which("tc") or not shutil.which("ip"):
        return False, "tc/ip not installed (apt-get install iproute2)"
    try:
        require_root("tc")
    except ConditionUnavailable as exc:
        return False, str(exc)
    ns = f"vb-{owner_tag()}-{next_id()}"
    args = {"netem": ["netem", "delay", "1ms"], "tbf": ["tbf", "rate", "100mbit", "burst", "64kb", "latency", "50ms"]}
    try:
        if not procs.run(["ip", "netns", "add", ns], timeout=30).ok:
            return False, "cannot create a network namespace"
        procs.run(["ip", "-n", ns, "link", "add", "vbprobe0", "type", "veth", "peer", "name", "vbprobe1"],
                  timeout=30)
        res = procs.run(["tc", "-n", ns, "qdisc", "add", "dev", "vbprobe0", "root", *args[kind]], timeout=30)
        if res.ok:
            return True, ""
        err = (res.stderr.strip().splitlines() or ["failed"])[-1]
        return False, f"the kernel has no {kind} qdisc ({err})"
    finally:
        procs.run(["ip", "netns", "del", ns], timeout=30)


def _tc_args(delay_ms: float, rate_mbit: float) -> list[list[str]]:
    """qdisc commands (after 'tc qdisc add dev X') for one direction."""
    cmds = []
    if rate_mbit:
        burst = max(64 * 1024, int(rate_mbit * 1e6 / 8 / 100))  # >= one GSO packet, >= 10 ms of rate
        cmds.append(["root", "handle", "1:", "tbf", "rate", f"{rate_mbit}mbit", "burst", str(burst),
                     "latency", "200ms"])
    if delay_ms:
        parent = ["parent", "1:1", "handle", "10:"] if rate_mbit else ["root", "handle", "1:"]
        cmds.append([*parent, "netem", "delay", f"{delay_ms}ms", "limit", "100000"])
    return cmds


def shape(devs: list[tuple[list[str], str]], delay_ms: float, rate_mbit: float) -> None:
    """Put delay/rate on the egress of each (tc prefix, device): [] or ['-n', ns] or nsenter argv."""
    for prefix, dev in devs:
        procs.run([*prefix, "tc", "qdisc", "del", "dev", dev, "root"], timeout=30)
        for args in _tc_args(delay_ms, rate_mbit):
            run([*prefix, "tc", "qdisc", "add", "dev", dev, *args])


def unshape(devs: list[tuple[list[str], str]]) -> None:
    for prefix, dev in devs:
        procs.run([*prefix, "tc", "qdisc", "del", "dev", dev, "root"], timeout=30)


# -- addresses ---------------------------------------------------------------------------------------

def is_loopback(host: str) -> bool:
    with contextlib.suppress(ValueError):
        return ipaddress.ip_address(host).is_loopback
    return host == "localhost"


def host_address_towards(dest: str) -> str:
    """The host's own address on the network that holds `dest` (e.g. the podman bridge gateway)."""
    if is_loopback(dest):
        return "127.0.0.1"
    ip = ipaddress.ip_address(dest)
    for line in procs.run(["ip", "-o", "-4", "addr", "show"], timeout=30).stdout.splitlines():
        m = re.search(r"inet (\S+)", line)
        if m and ip in ipaddress.ip_interface(m.group(1)).network:
            return str(ipaddress.ip_interface(m.group(1)).ip)
    return "127.0.0.1"  # a server elsewhere: the client dialling it is on this host


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def can_connect(host: str, port: int, timeout: float = 0.5) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


# -- the proxy and the probes -----------------------------------------------------------------------

def fmt_addr(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _split(addr: str) -> tuple[str, int]:
    host, _, port = addr.rpartition(":")
    return host.strip("[]"), int(port)


class Proxy:
    """One vb-delayproxy relay: listen_host:<free port> -> target, with delay and rate."""

    def __init__(self, listen_host: str, target: tuple[str, int], delay_ms: float, rate_mbit: float,
                 log: Path | None = None):
        argv = [proxy_bin(), "relay", "--listen", fmt_addr(listen_host, 0), "--target", fmt_addr(*target),
                "--delay-ms", f"{delay_ms:g}", "--exit-with-parent"]
        if rate_mbit:
            argv += ["--rate-mbit", f"{rate_mbit:g}"]
        self.delay_ms, self.rate_mbit, self.target = delay_ms, rate_mbit, target
        self.helper = Helper(argv, name=f"delay proxy to {fmt_addr(*target)}", log=log)
        self.address = _split(self.helper.read_json_line()["listening"])

    def stop(self) -> dict:
        out = self.helper.stop()
        for line in out.splitlines():
            with contextlib.suppress(ValueError):
                return json.loads(line)
        return {}


class Echo:
    """An echo server, optionally inside a network namespace (by name, or by a process's pid)."""

    def __init__(self, host: str, *, netns: str | None = None, pid: int | None = None):
        argv = [proxy_bin(), "echo", "--listen", fmt_addr(host, 0), "--exit-with-parent"]
        if pid is not None:
            argv = ["nsenter", "-t", str(pid), "-n", "--", *argv]
        self.helper = Helper(argv, name="echo server", netns=netns)
        self.address = _split(self.helper.read_json_line()["listening"])

    def stop(self) -> None:
        self.helper.stop()


def ping(target: tuple[str, int], count: int = 40, size: int = 64, timeout: float = 120) -> dict:
    """Round trips through TCP to an echo server: {"p50": us, ...}."""
    out = run([proxy_bin(), "ping", "--target", fmt_addr(*target), "--count", str(count), "--warmup", "5",
               "--size", str(size)], timeout=timeout)
    return json.loads(out.strip().splitlines()[-1])["rtt_us"]


def measure_delay(echo_host: str, impaired, *, netns: str | None = None, pid: int | None = None,
                  count: int = 40) -> dict:
    """One-way delay added by a path: half the rise in the median TCP round trip to an echo server.

    impaired(echo_addr) -> the address to dial for the impaired path (a probe proxy, or the same
    address once tc is in place) and a cleanup; called after the direct round trips are taken."""
    echo = Echo(echo_host, netns=netns, pid=pid)
    try:
        direct = ping(echo.address, count=count)
        dial, cleanup = impaired(echo.address)
        try:
            via = ping(dial, count=count)
        finally:
            cleanup()
    finally:
        echo.stop()
    return {"delay_measured_ms": round((via["p50"] - direct["p50"]) / 2 / 1000, 3),
            "delay_rtt_direct_ms": round(direct["p50"] / 1000, 3), "delay_rtt_ms": round(via["p50"] / 1000, 3)}


def container_pid(instance) -> int:
    """Pid of a container instance's init, for entering its network namespace."""
    cli = instance.engine.cli() if hasattr(instance, "engine") else ["podman"]
    out = run([*cli, "inspect", "-f", "{{.State.Pid}}", instance.name], timeout=60).strip()
    if not out.isdigit() or out == "0":
        raise HostCommandFailed(f"{instance.name} has no running process")
    return int(out)


def container_links(instance) -> tuple[int, list[tuple[list[str], str]]]:
    """(pid, [(tc prefix, dev)]): the container's eth0 and its host-side veth peer, for shaping.

    Read through netlink (`ip`), not /sys: nsenter -n keeps the host's sysfs mount, which shows the
    host's devices."""
    pid = container_pid(instance)
    ns = ["nsenter", "-t", str(pid), "-n", "--"]
    inside = run([*ns, "ip", "-o", "link", "show", "dev", "eth0"]).strip()
    m = re.match(r"\d+:\s+eth0@if(\d+):", inside)
    if not m:
        raise HostCommandFailed(f"{instance.name}'s eth0 is not one end of a veth pair: {inside[:120]!r}")
    peer = m.group(1)
    host_dev = None
    for line in run(["ip", "-o", "link", "show"]).splitlines():
        hm = re.match(r"(\d+):\s+([^:@\s]+)(?:@\S+)?:", line)
        if hm and hm.group(1) == peer:
            host_dev = hm.group(2)
    if not host_dev or " veth " not in run(["ip", "-d", "-o", "link", "show", "dev", host_dev]):
        # never shape anything but the container's own veth
        raise HostCommandFailed(f"cannot find the host-side veth (ifindex {peer}) of {instance.name}'s eth0")
    return pid, [(ns, "eth0"), ([], host_dev)]
