"""Networking for conditions, on any machine: server links, tc shaping, the user-space delay proxy,
probes. Commands run through the executor of the machine they act on.

A *link* is a network namespace of our own joined to its machine by a veth pair (a /30 from
10.231.0.0/16). Remote storage servers run inside it, so they are reached over a real interface
like another host, and delay or rate can be put on that interface with tc where the kernel has
the qdisc. Where it does not (no netem on these machines), `vb-delayproxy` relays the traffic in
user space. `measure_delay` is the ping-pong that tells what was really added.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import re
import socket
import threading
from dataclasses import dataclass, field

from .. import kernels
from ..errors import ConditionUnavailable
from ..machines import Machine, local
from ..hostdirs import owner_tag
from .hostres import Helper, HostCommandFailed, drop_record, is_root, next_id, record_qdisc, require_root, run

LINK_NET = ipaddress.ip_network("10.231.0.0/16")
PROXY_BIN = "vb-delayproxy"
# The proxy and echo server exit at once on SIGTERM; a short grace, since a remote machine whose
# init reaps slowly keeps the exited group visible until the grace is over.
STOP_GRACE = 1.0
_lock = threading.Lock()


def proxy_bin(machine: Machine) -> str:
    """vb-delayproxy on `machine`: the built one here, the shipped copy on a remote machine."""
    from ..machines import ship

    path = f"{ship.ensure_native(machine).bin_dir}/{PROXY_BIN}"
    if not machine.exists(path):
        raise ConditionUnavailable(f"{PROXY_BIN} is not built in {kernels.native_bin_dir()} (run: {kernels.advice()})")
    return path


# -- links -------------------------------------------------------------------------------------------

def _used_networks(machine: Machine) -> list[ipaddress.IPv4Network]:
    return [ipaddress.ip_interface(a).network for a in _addresses(machine)]


def _addresses(machine: Machine) -> list[str]:
    """The machine's IPv4 addresses with prefix length (10.0.0.1/24)."""
    out = machine.run(["ip", "-o", "-4", "addr", "show"], timeout=30).stdout
    return re.findall(r"inet (\S+)", out)


@dataclass
class Link:
    """A namespace `netns` on `machine`, reached over veth `host_if` (host_addr) <-> `ns_if` (ns_addr)."""

    machine: Machine
    netns: str
    host_if: str
    ns_if: str
    host_addr: str
    ns_addr: str
    shaped: dict = field(default_factory=dict)

    @classmethod
    def create(cls, machine: Machine) -> Link:
        require_root(machine, "a server link (network namespace + veth)")
        n = next_id()
        pid = owner_tag().split("-")[0]
        netns = f"vb-{owner_tag()}-{n}"
        host_if, ns_if = f"vb{pid}h{n}"[-15:], f"vb{pid}n{n}"[-15:]
        with _lock:
            used = _used_networks(machine)
            subnet = next((s for s in LINK_NET.subnets(new_prefix=30)
                           if not any(s.overlaps(u) for u in used)), None)
            if subnet is None:
                raise ConditionUnavailable(f"no free /30 left in {LINK_NET} for a server link")
            host_addr, ns_addr = (str(a) for a in list(subnet.hosts())[:2])
            link = cls(machine, netns, host_if, ns_if, host_addr, ns_addr)
            try:
                for argv in (["ip", "netns", "add", netns],
                             ["ip", "link", "add", host_if, "type", "veth", "peer", "name", ns_if],
                             ["ip", "link", "set", ns_if, "netns", netns],
                             ["ip", "addr", "add", f"{host_addr}/30", "dev", host_if],
                             ["ip", "link", "set", host_if, "up"],
                             ["ip", "-n", netns, "addr", "add", f"{ns_addr}/30", "dev", ns_if],
                             ["ip", "-n", netns, "link", "set", ns_if, "up"],
                             ["ip", "-n", netns, "link", "set", "lo", "up"]):
                    run(machine, argv)
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
        pids = self.machine.run(["ip", "netns", "pids", self.netns], timeout=30).stdout.split()
        if pids:
            self.machine.run(["kill", "-KILL", *pids], timeout=30)
        self.machine.run(["ip", "netns", "del", self.netns], timeout=30)
        self.machine.run(["ip", "link", "del", self.host_if], timeout=30)  # gone with the namespace, normally


_LINKS: dict[str, Link] = {}  # by namespace-side address: routes are asked for by address alone


def link_for(addr: str) -> Link | None:
    with _lock:
        return _LINKS.get(addr)


# -- tc ----------------------------------------------------------------------------------------------

_PROBE_ARGS = {"netem": ["netem", "delay", "1ms"],
               "tbf": ["tbf", "rate", "100mbit", "burst", "64kb", "latency", "50ms"]}
_supported: dict[tuple[str, str], tuple[bool, str]] = {}


def tc_supports(kind: str, machine: Machine | None = None) -> tuple[bool, str]:
    """Does the machine's kernel have qdisc `kind` (netem, tbf)? Tried for real on a veth pair of
    its own (in a scratch namespace here; in the machine's namespace elsewhere), once per machine."""
    machine = machine or local()
    key = (machine.name, kind)
    with _lock:
        if key in _supported:
            return _supported[key]
    found = _tc_probe(machine, kind)
    with _lock:
        _supported[key] = found
    return found


def _tc_probe(machine: Machine, kind: str) -> tuple[bool, str]:
    missing = machine.run(["sh", "-c", "command -v tc && command -v ip"], timeout=30)
    if missing.stdout.count("\n") < 2:
        return False, "tc/ip not installed (apt-get install iproute2)"
    if not is_root(machine):
        return False, f"tc needs root on {machine.place}"
    n = next_id()
    a, b = f"vbprb{n}a"[-15:], f"vbprb{n}b"[-15:]
    if machine.is_local:
        ns = f"vb-{owner_tag()}-{n}"
        if not machine.run(["ip", "netns", "add", ns], timeout=30).ok:
            return False, "cannot create a network namespace"
        ip, tc, undo = ["ip", "-n", ns], ["tc", "-n", ns], ["ip", "netns", "del", ns]
    else:
        # No namespace there: it could touch the host's own /run/netns; a veth pair is enough.
        ip, tc, undo = ["ip"], ["tc"], ["ip", "link", "del", a]
    try:
        if not machine.run([*ip, "link", "add", a, "type", "veth", "peer", "name", b], timeout=30).ok:
            return False, "cannot create a veth pair to try the qdisc on"
        res = machine.run([*tc, "qdisc", "add", "dev", a, "root", *_PROBE_ARGS[kind]], timeout=30)
        if res.ok:
            return True, ""
        err = (res.stderr.strip().splitlines() or ["failed"])[-1]
        return False, f"the kernel has no {kind} qdisc ({err})"
    finally:
        machine.run(undo, timeout=30)


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


def shape(machine: Machine, devs: list[tuple[list[str], str]], delay_ms: float, rate_mbit: float,
          own: bool = True) -> None:
    """Put delay/rate on the egress of each (command prefix, device) of `machine`: prefix [] or an
    nsenter argv. `own`: the devices are ours (a link's, a container's veth), so a qdisc already on
    them is replaced; otherwise (a machine's own interface) one already there is an error, never
    lost, and a record of each (hostres.record_qdisc) lets the ledger take it off if this process is
    killed first. On failure, what this call added is removed again."""
    done: list[tuple[list[str], str]] = []
    try:
        for prefix, dev in devs:
            if own:
                machine.run([*prefix, "tc", "qdisc", "del", "dev", dev, "root"], timeout=30)
            # Recorded before it exists: a kill in between leaves a record of nothing, never a qdisc unrecorded.
            record = None if own else record_qdisc(machine, dev)
            for i, args in enumerate(_tc_args(delay_ms, rate_mbit)):
                res = machine.run([*prefix, "tc", "qdisc", "add", "dev", dev, *args], timeout=30)
                if res.ok:
                    if i == 0:
                        done.append((prefix, dev))
                        if record:
                            with _lock:
                                _records[(machine.name, dev)] = record
                    continue
                if record and i == 0:
                    drop_record(machine, record)  # nothing of ours went on (what is there is not ours)
                if "Exclusivity flag" in res.stderr:
                    raise ConditionUnavailable(f"{dev} on {machine.name} already has a root qdisc "
                                               f"({_root_qdisc(machine, prefix, dev)}); virtbench does not replace it")
                raise HostCommandFailed(f"tc qdisc add dev {dev} on {machine.name}: {res.describe_failure()}")
    except BaseException:
        unshape(machine, done)
        raise


def _root_qdisc(machine: Machine, prefix: list[str], dev: str) -> str:
    out = machine.run([*prefix, "tc", "qdisc", "show", "dev", dev, "root"], timeout=30).stdout.strip()
    return " ".join(out.split()[:3]) or "unknown"


def unshape(machine: Machine, devs: list[tuple[list[str], str]]) -> None:
    for prefix, dev in devs:
        machine.run([*prefix, "tc", "qdisc", "del", "dev", dev, "root"], timeout=30)
        _drop_record(machine, dev)


_records: dict[tuple[str, str], str] = {}  # (machine, device) -> record of the qdisc shape() put on it


def _drop_record(machine: Machine, dev: str) -> None:
    with _lock:
        path = _records.pop((machine.name, dev), None)
    if path:
        drop_record(machine, path)


# -- addresses ---------------------------------------------------------------------------------------

def is_loopback(host: str) -> bool:
    with contextlib.suppress(ValueError):
        return ipaddress.ip_address(host).is_loopback
    return host == "localhost"


def host_address_towards(machine: Machine, dest: str) -> str:
    """The machine's own address on the network that holds `dest` (e.g. the podman bridge gateway)."""
    if is_loopback(dest):
        return "127.0.0.1"
    ip = ipaddress.ip_address(dest)
    for addr in _addresses(machine):
        if ip in ipaddress.ip_interface(addr).network:
            return str(ipaddress.ip_interface(addr).ip)
    return "127.0.0.1"  # a server elsewhere: the client dialling it is on this machine


def device_towards(machine: Machine, dest: str) -> str:
    """The interface of `machine` whose egress leads to `dest` (`ip route get`)."""
    out = run(machine, ["ip", "-o", "route", "get", dest], timeout=30)
    m = re.search(r"\bdev (\S+)", out)
    if not m:
        raise HostCommandFailed(f"no route from {machine.name} to {dest}: {out.strip()[:120]}")
    return m.group(1)


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def can_connect(host: str, port: int, timeout: float = 0.5) -> bool:
    """Does a TCP connection from this process to (host, port) open?"""
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


def exit_with_parent(machine: Machine) -> list[str]:
    # Here the proxy's parent is virtbench; on a remote machine it is a shell that exits at once.
    return ["--exit-with-parent"] if machine.spawns_children else []


class Proxy:
    """One vb-delayproxy relay on `machine`: listen_host:<free port> -> target, with delay and rate."""

    def __init__(self, machine: Machine, listen_host: str, target: tuple[str, int], delay_ms: float,
                 rate_mbit: float, log=None):
        argv = [proxy_bin(machine), "relay", "--listen", fmt_addr(listen_host, 0), "--target", fmt_addr(*target),
                "--delay-ms", f"{delay_ms:g}", *exit_with_parent(machine)]
        if rate_mbit:
            argv += ["--rate-mbit", f"{rate_mbit:g}"]
        self.machine = machine
        self.delay_ms, self.rate_mbit, self.target = delay_ms, rate_mbit, target
        self.helper = Helper(machine, argv, name=f"delay proxy to {fmt_addr(*target)}", log=log)
        self.address = _split(self.helper.read_json_line("listening")["listening"])

    def stop(self) -> dict:
        """Stop it; what it relayed ({"connections": N, "bytes_up": N, "bytes_down": N})."""
        for line in reversed(self.helper.stop(grace=STOP_GRACE).splitlines()):
            with contextlib.suppress(ValueError):
                doc = json.loads(line)
                if isinstance(doc, dict) and "connections" in doc:
                    return doc
        return {}


class Echo:
    """An echo server on `machine`, optionally inside a network namespace (by name, or a process's pid)."""

    def __init__(self, machine: Machine, host: str, *, netns: str | None = None, pid: int | None = None):
        argv = [proxy_bin(machine), "echo", "--listen", fmt_addr(host, 0), *exit_with_parent(machine)]
        if pid is not None:
            argv = ["nsenter", "-t", str(pid), "-n", "--", *argv]
        self.helper = Helper(machine, argv, name="echo server", netns=netns)
        self.address = _split(self.helper.read_json_line("listening")["listening"])

    def stop(self) -> None:
        self.helper.stop(grace=STOP_GRACE)


def ping(machine: Machine, target: tuple[str, int], count: int = 40, size: int = 64, timeout: float = 120) -> dict:
    """Round trips from `machine` through TCP to an echo server: {"p50": us, ...}."""
    out = run(machine, [proxy_bin(machine), "ping", "--target", fmt_addr(*target), "--count", str(count),
                        "--warmup", "5", "--size", str(size)], timeout=timeout)
    return json.loads(out.strip().splitlines()[-1])["rtt_us"]


def measure_delay(machine: Machine, echo_host: str, impaired, *, echo_machine: Machine | None = None,
                  netns: str | None = None, pid: int | None = None, count: int = 40) -> dict:
    """One-way delay added by a path: half the rise in the median TCP round trip from `machine` to an
    echo server on `echo_machine` (default: the same machine).

    impaired(echo_addr) -> the address to dial for the impaired path (a probe proxy, or the same
    address once tc is in place) and a cleanup; called after the direct round trips are taken."""
    echo = Echo(echo_machine or machine, echo_host, netns=netns, pid=pid)
    try:
        direct = ping(machine, echo.address, count=count)
        dial, cleanup = impaired(echo.address)
        try:
            via = ping(machine, dial, count=count)
        finally:
            cleanup()
    finally:
        echo.stop()
    return {"delay_measured_ms": round((via["p50"] - direct["p50"]) / 2 / 1000, 3),
            "delay_rtt_direct_ms": round(direct["p50"] / 1000, 3), "delay_rtt_ms": round(via["p50"] / 1000, 3)}


def container_pid(instance) -> int:
    """Pid of a container instance's init, for entering its network namespace."""
    cli = instance.engine.cli() if instance.engine is not None else ["podman"]
    out = run(instance.machine, [*cli, "inspect", "-f", "{{.State.Pid}}", instance.name], timeout=60).strip()
    if not out.isdigit() or out == "0":
        raise HostCommandFailed(f"{instance.name} has no running process")
    return int(out)


def container_links(instance) -> tuple[int, list[tuple[list[str], str]]]:
    """(pid, [(tc prefix, dev)]) on the instance's machine: the container's eth0 and its veth peer
    there, for shaping.

    Read through netlink (`ip`), not /sys: nsenter -n keeps the machine's sysfs mount, which shows
    its devices."""
    machine = instance.machine
    pid = container_pid(instance)
    ns = ["nsenter", "-t", str(pid), "-n", "--"]
    inside = run(machine, [*ns, "ip", "-o", "link", "show", "dev", "eth0"]).strip()
    m = re.match(r"\d+:\s+eth0@if(\d+):", inside)
    if not m:
        raise HostCommandFailed(f"{instance.name}'s eth0 is not one end of a veth pair: {inside[:120]!r}")
    peer = m.group(1)
    host_dev = None
    for line in run(machine, ["ip", "-o", "link", "show"]).splitlines():
        hm = re.match(r"(\d+):\s+([^:@\s]+)(?:@\S+)?:", line)
        if hm and hm.group(1) == peer:
            host_dev = hm.group(2)
    if not host_dev or " veth " not in run(machine, ["ip", "-d", "-o", "link", "show", "dev", host_dev]):
        # never shape anything but the container's own veth
        raise HostCommandFailed(f"cannot find the host-side veth (ifindex {peer}) of {instance.name}'s eth0")
    return pid, [(ns, "eth0"), ([], host_dev)]
