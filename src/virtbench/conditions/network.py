"""Network conditions: one-way delay (`delay_ms`) and a bandwidth cap (`rate_mbit`) on the path
between a client and its storage server or its peer.

`delay_ms = D` adds D milliseconds in each direction (a round trip grows by 2 D), like a Dummynet
pipe or netem on both ends of a link. Mechanisms, best first:
- kernel: netem (delay) and tbf (rate) on both ends of the veth that leads to the server: the
  link namespace of a remote storage target, or a container's eth0 and its host-side peer;
- user space: `vb-delayproxy` in the path (always for host-to-host loopback traffic, and for
  delay on kernels without netem, such as these machines).
Every sample records which mechanism did it (`delay_mechanism`, `rate_mechanism`) and the delay
really added: half the rise of the median TCP round trip to an echo server placed where the
server is, measured through the same mechanism (`delay_measured_ms`).

A cell asking for delay or rate must have a network path: a remote storage target (storage =
nbd, iscsi, nfs) or a workload with a server role (iperf, netrr). Otherwise it is skipped.
"""

from __future__ import annotations

from typing import Any

from ..drivers.base import Instance
from . import hostnet
from .base import Applied, Condition, ConditionUnavailable
from .hostres import base_dir, next_id

NET_KEYS = ("delay_ms", "rate_mbit")
REMOTE_STORAGE = ("nbd", "iscsi", "nfs")
PROBE_COUNT = 30

_STATE: dict[int, _Path] = {}


class _Path:
    """What the network conditions of one applied cell do; shared by delay_ms and rate_mbit."""

    def __init__(self, applied: Applied, condition: dict[str, Any]):
        self.applied = applied
        self.keys = [k for k in NET_KEYS if k in condition]
        self.values: dict[str, float] = {}
        self.routes: dict[tuple[str, int], tuple[str, int]] = {}
        self.prepared: dict[str, tuple[bool, bool]] = {}  # destination host -> (delay by tc, rate by tc)
        self.peers: dict[str, Instance] = {}
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
        self.applied.add_router(self.route)
        for inst in servers:
            if not inst.address:
                raise ConditionUnavailable(f"{inst.name} has no network address to put a delay in front of")
            self.peers[inst.address] = inst
            self._prepare(inst.address)  # now, so the measurement is recorded with every sample

    # -- routing -------------------------------------------------------------------------------
    def route(self, host: str, port: int) -> tuple[str, int]:
        key = (host, port)
        if key in self.routes:
            return self.routes[key]
        delay_tc, rate_tc = self._prepare(host)
        delay, rate = (0.0 if delay_tc else self.delay), (0.0 if rate_tc else self.rate)
        if delay or rate:
            proxy = hostnet.Proxy(hostnet.host_address_towards(host), key, delay, rate,
                                  log=base_dir() / f"proxy-{next_id()}.log")
            self.applied.defer(proxy.stop)
            self.routes[key] = proxy.address
        else:
            self.routes[key] = key
        return self.routes[key]

    def _location(self, host: str) -> tuple[list | None, dict]:
        """(devices tc can shape on the way to host, where an echo server stands in for it)."""
        link = hostnet.link_for(host)
        if link is not None:
            enter = ["nsenter", f"--net=/run/netns/{link.netns}", "--"]
            return [([], link.host_if), (enter, link.ns_if)], {"netns": link.netns}
        inst = self.peers.get(host)
        if inst is not None and inst.env.driver == "container":
            pid, devs = hostnet.container_links(inst)
            return devs, {"pid": pid}
        if hostnet.is_loopback(host) or inst is None or inst.env.driver == "host":
            return None, {}  # only a proxy can sit in this path
        raise ConditionUnavailable(f"cannot place a network condition in front of {inst.name} ({host}): "
                                   f"the {inst.env.driver} driver is not supported yet")

    def _prepare(self, host: str) -> tuple[bool, bool]:
        """Install tc on the path to `host` where the kernel can, and measure the delay once."""
        if host in self.prepared:
            return self.prepared[host]
        devs, where = self._location(host)
        delay_tc = bool(self.delay) and devs is not None and hostnet.tc_supports("netem")[0]
        rate_tc = bool(self.rate) and devs is not None and hostnet.tc_supports("tbf")[0]
        meta = self.applied.metadata
        if self.delay:
            meta["delay_mechanism"] = "netem" if delay_tc else "proxy"
        if self.rate:
            meta["rate_mechanism"] = "tbf" if rate_tc else "proxy"

        def install() -> None:
            if delay_tc or rate_tc:
                self.applied.defer(lambda: hostnet.unshape(devs))
                hostnet.shape(devs, self.delay if delay_tc else 0.0, self.rate if rate_tc else 0.0)

        residual = (0.0 if delay_tc else self.delay, 0.0 if rate_tc else self.rate)

        def impaired(echo_addr: tuple[str, int]):
            install()
            if any(residual):
                probe = hostnet.Proxy(hostnet.host_address_towards(echo_addr[0]), echo_addr, *residual)
                return probe.address, probe.stop
            return echo_addr, lambda: None

        if self.delay and not self.measured:
            echo_host = host if devs is not None or hostnet.is_loopback(host) else "127.0.0.1"
            meta.update(hostnet.measure_delay(echo_host, impaired, count=PROBE_COUNT, **where))
            self.measured = True
        else:
            install()
        self.prepared[host] = (delay_tc, rate_tc)
        return self.prepared[host]


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
