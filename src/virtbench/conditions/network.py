"""Network conditions: one-way delay (`delay_ms`) and a bandwidth cap (`rate_mbit`) on the path
between a client and its storage server or its peer.

`delay_ms = D` adds D milliseconds in each direction (a round trip grows by 2 D), like a Dummynet
pipe or netem on both ends of a link. Mechanisms, best first:
- kernel: netem (delay) and tbf (rate) on the path to the server, through the executor of the
  machine each device is on: both ends of the veth of a remote storage target's link, a
  container's eth0 and its peer, or, between two machines, the interface of each that leads to
  the other (a qdisc already there is never replaced: the cell is skipped instead);
- user space: `vb-delayproxy` in the path, on the machine of the server it stands in front of
  (always for traffic over loopback, and for delay on kernels without netem, such as these).
Every sample records which mechanism did it (`delay_mechanism`, `rate_mechanism`) and the delay
really added: half the rise of the median TCP round trip to an echo server placed where the
server is, measured from where its clients are, through the same mechanism (`delay_measured_ms`).

A cell asking for delay or rate must have a network path: a remote storage target (storage =
nbd, iscsi, nfs, nfs-datastore) or a workload with a server role (iperf, netrr). Otherwise it is skipped.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..machines import Machine, local
from . import hostnet
from ..errors import ConditionUnavailable
from .base import Applied, Condition, Instance
from .hostres import Helper, HostCommandFailed

NET_KEYS = ("delay_ms", "rate_mbit")
REMOTE_STORAGE = ("nbd", "iscsi", "nfs", "nfs-datastore")
PROBE_COUNT = 30

_STATE: dict[int, _Path] = {}

Devices = list[tuple[Machine, list[str], str]]  # (machine, command prefix, device) tc can shape


@dataclass
class _Place:
    """Where the path to one destination can be impaired."""

    machine: Machine      # where a proxy in front of the destination runs
    listen: str           # the address that proxy listens on (one the clients reach)
    origin: Machine       # where the clients are: round trips are measured from there
    devs: Devices | None  # what tc can shape on the way; None: only a proxy can sit in this path
    own: bool             # the devices are ours (a link's, a container's), not a machine's interface
    echo: dict            # where an echo server stands in for the destination: host, netns or pid


class _Path:
    """What the network conditions of one applied cell do; shared by delay_ms and rate_mbit."""

    def __init__(self, applied: Applied, condition: dict[str, Any]):
        self.applied = applied
        self.keys = [k for k in NET_KEYS if k in condition]
        self.values: dict[str, float] = {}
        self.routes: dict[tuple[str, int], tuple[str, int]] = {}
        self.prepared: dict[str, tuple[_Place, bool, bool]] = {}  # host -> (place, delay by tc, rate by tc)
        self.peers: dict[str, Instance] = {}
        self.clients: list[Instance] = []
        self.measured = False

    @property
    def delay(self) -> float:
        return self.values.get("delay_ms", 0.0)

    @property
    def rate(self) -> float:
        return self.values.get("rate_mbit", 0.0)

    def set(self, key: str, value: float, instances: dict[str, list[Instance]], condition: dict[str, Any]) -> None:
        self.values[key] = value
        if all(k in self.values for k in self.keys):
            self._finish(instances, condition)

    def _finish(self, instances: dict[str, list[Instance]], condition: dict[str, Any]) -> None:
        meta = self.applied.metadata
        if "delay_ms" in self.keys and not self.delay:
            meta["delay_mechanism"] = "none"
        if "rate_mbit" in self.keys and not self.rate:
            meta["rate_mechanism"] = "none"
        if not (self.delay or self.rate):
            return
        servers = instances.get("server", [])
        storage = str(condition.get("storage", "local")).split(":")[0]
        if not servers and storage not in REMOTE_STORAGE:
            asked = ", ".join(f"{k}={self.values[k]:g}" for k in self.keys if self.values[k])
            raise ConditionUnavailable(
                f"{asked} needs a network path, and this cell has none: storage '{storage}' is not remote "
                f"(use {', '.join(REMOTE_STORAGE)}) and the workload has no server role")
        self.clients = [i for role, pool in instances.items() if role != "server" for i in pool]
        self.applied.add_router(self.route)
        for inst in servers:
            if not inst.address:
                raise ConditionUnavailable(f"{inst.name} has no network address to put a delay in front of")
            self.peers[inst.address] = inst
            self._prepare(inst.address)  # now, so the measurement is recorded with every sample

    # -- routing -------------------------------------------------------------------------------
    def route(self, host: str, port: int, same_port: bool = False) -> tuple[str, int]:
        key = (host, port)
        if key in self.routes:
            return self.routes[key]
        place, delay_tc, rate_tc = self._prepare(host)
        delay, rate = (0.0 if delay_tc else self.delay), (0.0 if rate_tc else self.rate)
        if delay or rate:
            if same_port:
                proxy: hostnet.Proxy = _SamePortProxy(place.machine, place.listen, key, delay, rate)
            else:
                proxy = hostnet.Proxy(place.machine, place.listen, key, delay, rate)
            self.applied.defer(proxy.stop)
            self.routes[key] = proxy.address
        else:
            self.routes[key] = key
        return self.routes[key]

    def _location(self, host: str) -> _Place:
        link = hostnet.link_for(host)
        if link is not None:
            m, enter = link.machine, ["nsenter", f"--net=/run/netns/{link.netns}", "--"]
            return _Place(m, link.host_addr, m, [(m, [], link.host_if), (m, enter, link.ns_if)], True,
                          {"host": host, "netns": link.netns})
        inst = self.peers.get(host)
        if inst is not None and inst.traits.engine_container:
            m = inst.machine
            pid, devs = hostnet.container_links(inst)
            return _Place(m, hostnet.host_address_towards(m, host), m, [(m, *d) for d in devs], True,
                          {"host": host, "pid": pid})
        if inst is not None and not inst.machine.is_local:
            return self._between_machines(inst, host)
        if hostnet.is_loopback(host) or inst is None or inst.traits.host_process:
            here = local()  # only a proxy can sit in this path
            return _Place(here, hostnet.host_address_towards(here, host), here, None, True,
                          {"host": host if hostnet.is_loopback(host) else "127.0.0.1"})
        raise ConditionUnavailable(f"cannot place a network condition in front of {inst.name} ({host}): "
                                   f"the {inst.env.driver} driver is not supported yet")

    def _between_machines(self, server: Instance, host: str) -> _Place:
        """A server on a machine of its own: the proxy runs there, tc goes on the interface of each
        machine that leads to the other, and round trips are measured from a client's machine."""
        here = server.machine
        clients = {c.machine.name: c for c in self.clients if c.machine.name != here.name}
        if any(c.machine.name == here.name for c in self.clients) or not clients:
            return _Place(here, host, here, None, False, {"host": host})  # over loopback: a proxy only
        devs: dict[tuple[str, str], tuple[Machine, list[str], str]] = {}  # one qdisc per device
        for c in clients.values():
            if not c.address:
                raise ConditionUnavailable(f"{c.name} has no network address to shape the path to {server.name} on")
            for m, dest in ((here, c.address), (c.machine, host)):
                dev = hostnet.device_towards(m, dest)
                devs[(m.name, dev)] = (m, [], dev)
        origin = next(iter(clients.values())).machine
        return _Place(here, host, origin, list(devs.values()), False, {"host": host})

    def _prepare(self, host: str) -> tuple[_Place, bool, bool]:
        """Install tc on the path to `host` where the kernels can, and measure the delay once."""
        if host in self.prepared:
            return self.prepared[host]
        place = self._location(host)
        devs = place.devs
        machines = {m.name: m for m, _, _ in devs or []}.values()

        def by_tc(kind: str, wanted: float) -> bool:
            return bool(wanted) and devs is not None and all(hostnet.tc_supports(kind, m)[0] for m in machines)
        delay_tc, rate_tc = by_tc("netem", self.delay), by_tc("tbf", self.rate)
        meta = self.applied.metadata
        if self.delay:
            meta["delay_mechanism"] = "netem" if delay_tc else "proxy"
        if self.rate:
            meta["rate_mechanism"] = "tbf" if rate_tc else "proxy"

        def install() -> None:
            if delay_tc or rate_tc:
                for m in machines:
                    mine = [(prefix, dev) for dm, prefix, dev in devs if dm.name == m.name]
                    hostnet.shape(m, mine, self.delay if delay_tc else 0.0, self.rate if rate_tc else 0.0,
                                  own=place.own)
                    self.applied.defer(lambda m=m, mine=mine: hostnet.unshape(m, mine))

        residual = (0.0 if delay_tc else self.delay, 0.0 if rate_tc else self.rate)

        def impaired(echo_addr: tuple[str, int]):
            install()
            if any(residual):
                probe = hostnet.Proxy(place.machine, hostnet.host_address_towards(place.machine, echo_addr[0]),
                                      echo_addr, *residual)
                return probe.address, probe.stop
            return echo_addr, lambda: None

        if self.delay and not self.measured:
            echo = dict(place.echo)
            meta.update(hostnet.measure_delay(place.origin, echo.pop("host"), impaired, echo_machine=place.machine,
                                              count=PROBE_COUNT, **echo))
            self.measured = True
        else:
            install()
        self.prepared[host] = (place, delay_tc, rate_tc)
        return self.prepared[host]


class _SamePortProxy(hostnet.Proxy):
    """A delay proxy listening on the port number of its target: for clients that dial the ports a
    server names (NFSv3 asks the portmapper for the MOUNT and NFS ports, then dials them on the
    address it used), every relay of one server must keep the server's ports."""

    def __init__(self, machine: Machine, listen_host: str, target: tuple[str, int], delay_ms: float,
                 rate_mbit: float):
        argv = [hostnet.proxy_bin(machine), "relay", "--listen", hostnet.fmt_addr(listen_host, target[1]),
                "--target", hostnet.fmt_addr(*target), "--delay-ms", f"{delay_ms:g}"]
        argv += hostnet.exit_with_parent(machine)
        if rate_mbit:
            argv += ["--rate-mbit", f"{rate_mbit:g}"]
        self.machine = machine
        self.delay_ms, self.rate_mbit, self.target = delay_ms, rate_mbit, target
        self.helper = Helper(machine, argv, name=f"delay proxy to {hostnet.fmt_addr(*target)}")
        try:
            listening = self.helper.read_json_line("listening")["listening"]
        except HostCommandFailed as exc:
            self.helper.stop()
            raise ConditionUnavailable(f"a delay proxy cannot listen on {hostnet.fmt_addr(listen_host, target[1])} "
                                       f"(the port the client dials; taken by a server of this machine?): {exc}") \
                from None
        host, _, lport = listening.rpartition(":")
        self.address = (host.strip("[]"), int(lport))


def route_same_port(applied: Applied, host: str, port: int) -> tuple[str, int]:
    """applied.route() for a client that dials the ports its server names: the address to dial,
    with `port` unchanged (a relay there listens on the same port, on another address)."""
    state = _STATE.get(id(applied))
    if state is None or not (state.delay or state.rate):
        return applied.route(host, port)
    return state.route(host, port, same_port=True)


def _path(applied: Applied, condition: dict[str, Any]) -> _Path:
    state = _STATE.get(id(applied))
    if state is None:
        state = _STATE[id(applied)] = _Path(applied, condition)
        applied.defer(lambda: _STATE.pop(id(applied), None))
    return state


class _NetCondition(Condition):
    order = 10  # before storage, which routes its connections through us
    limit: float = 0.0

    def coerce(self, raw: Any) -> float:
        if isinstance(raw, bool):
            raise ValueError(f"{raw!r} is not a number")
        try:
            value = float(raw)
        except (TypeError, ValueError):
            raise ValueError(f"{raw!r} is not a number") from None
        if not 0 <= value <= self.limit:
            raise ValueError(f"{value:g} is outside 0 to {self.limit:g}")
        return int(value) if value.is_integer() else value

    def is_noop(self, value: Any) -> bool:
        return float(value) == 0

    def apply(self, value: Any, instances: dict[str, list[Instance]], applied: Applied,
              condition: dict[str, Any]) -> None:
        _path(applied, condition).set(self.key, float(value), instances, condition)


class Delay(_NetCondition):
    key = "delay_ms"
    help = "one-way delay in milliseconds added in each direction (netem, else a user-space proxy)"
    limit = 10000.0


class Rate(_NetCondition):
    key = "rate_mbit"
    help = "bandwidth cap in Mbit/s in each direction (tbf, else the user-space proxy); 0 = none"
    limit = 1e6
