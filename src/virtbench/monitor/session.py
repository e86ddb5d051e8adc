"""Samplers around one repetition: one vb-monitor on this machine, one on each remote machine that
holds containers or VMs, and one inside each instance.

Every sampler is started with one plain command (`vb-monitor --daemon` detaches once its first line
is written) and stopped with another (`vb-monitor --stop ... --print ... --remove` signals it, waits
until it is gone and prints what it recorded), through the executor of the machine it samples or the
instance's exec. So every driver that can exec, and every machine, can be monitored: no streaming
exec is needed, and nothing flows while the workload runs.

A sampler that cannot start is a note, never a failed repetition: the workload's own numbers
matter more than its monitoring. Samplers cannot outlive virtbench for long: each has a lifetime
(the repetition's timeout plus a margin), this machine's also watches virtbench's pid, and an
instance's goes away with the instance.
"""

from __future__ import annotations

import os
import secrets
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .. import fanout, kernels, procs
from ..drivers.base import HostSideMonitoring, Instance
from ..machines import Machine, local, owners
from ..model import Sample
from . import hostside, series

BIN = "vb-monitor"
HOST = "host"  # name and role of the host's own series
MACHINE = "machine"  # role of a remote machine's series (its name is the inventory name)
START_TIMEOUT = 30.0
STOP_WAIT = 5.0
LIFETIME_MARGIN = 120.0


class MonitorUnavailable(Exception):
    """A sampler could not be started or read; becomes a note."""


def scope_for(inst: Instance) -> str | None:
    """vb-monitor's --scope for an instance, or None when the instance is the host itself (its
    series would repeat the host's): its traits say, unless the instance sets `monitor_scope`."""
    return inst.monitor_scope or inst.traits.monitor_scope


def host_binary() -> Path:
    return kernels.native_bin_dir() / BIN


@dataclass
class Result:
    traces: list[series.Trace] = field(default_factory=list)
    rows: list[dict[str, Any]] = field(default_factory=list)
    samples: list[Sample] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


class _Sampler:
    """One `vb-monitor --daemon` on a machine or in an instance, started and stopped with two plain
    commands through `run` (an instance's exec, or a machine's executor)."""

    def __init__(self, run, name: str, role: str, exe: str, base: str, scope: str, interval: float,
                 lifetime: float, token: str, extra: tuple[str, ...] = (), copy_in=None, host_side: str = ""):
        self.run, self.name, self.role, self.bin = run, name, role, exe
        self.host_side = host_side  # why this instance's CPU and memory are read on its machine ('' : inside)
        self.cleanup: list[str] = []  # a directory of links to remove once stopped
        self.out, self.pidfile = f"{base}/vb-monitor-{token}.jsonl", f"{base}/vb-monitor-{token}.pid"
        self.copied = False
        argv = ["--daemon", "--scope", scope, "--interval", f"{interval:g}", "--out", self.out,
                "--pidfile", self.pidfile, "--lifetime", f"{lifetime:.0f}", *extra]
        res = run([self.bin, *argv], timeout=START_TIMEOUT)
        if res.returncode in (126, 127) and copy_in and host_binary().exists():
            # A guest image built before vb-monitor existed: bring the host's build in (same
            # Debian release, so the same libc); recorded in the series' source.
            dest = f"{base}/vb-monitor"
            try:
                copy_in(host_binary(), dest)
            except OSError as exc:
                raise MonitorUnavailable(f"{name}: no {BIN} in the instance and copying it in failed: "
                                         f"{exc}") from None
            self.bin, self.copied = dest, True
            res = run([self.bin, *argv], timeout=START_TIMEOUT)
        if not res.ok:
            raise MonitorUnavailable(f"{name}: {BIN} did not start: {res.describe_failure()}")

    def stop(self) -> str:
        res = self.run([self.bin, "--stop", self.pidfile, "--print", self.out, "--remove",
                        "--wait", f"{STOP_WAIT:g}"], timeout=START_TIMEOUT + STOP_WAIT)
        for path in self.cleanup:  # links only: rm does not follow them into the cgroup
            self.run(["rm", "-rf", path], timeout=START_TIMEOUT)
        if not res.stdout.strip():
            raise MonitorUnavailable(f"{self.name}: reading its samples failed: {res.describe_failure()}")
        return res.stdout


def _instance_sampler(inst: Instance, scope: str, interval: float, lifetime: float, token: str) -> _Sampler:
    return _Sampler(inst.exec, inst.name, inst.role, inst.bin(BIN), inst.scratch_dir().rstrip("/"), scope,
                    interval, lifetime, token, copy_in=inst.inside.put)


# $1 = directory to make, then pairs (link name, target): the --cgroup-root of a v1 cgroup.
_LINKS = 'd=$1; shift; mkdir -p "$d"; while [ $# -ge 2 ]; do ln -sfn "$2" "$d/$1"; shift 2; done'


def _host_side_sampler(inst: Instance, how, directory: Path, interval: float, lifetime: float,
                       token: str) -> _Sampler:
    """vb-monitor on the instance's machine over the sandbox's cgroup (HostSideMonitoring)."""
    machine = inst.machine
    got = machine.run(["cat", f"/proc/{how.pid}/cgroup"], timeout=START_TIMEOUT)
    if not got.ok:
        raise MonitorUnavailable(f"{inst.name}: the sandbox's cgroup{machine.on}: {got.describe_failure()}")
    try:
        version, links = hostside.cgroup_root(got.stdout)
    except ValueError as exc:
        raise MonitorUnavailable(f"{inst.name}: {exc}") from None
    if machine.is_local:
        exe, base = host_binary(), f"{directory}/host-side-{inst.name}"
        if not exe.exists():
            raise MonitorUnavailable(f"{exe} is not built (run: {kernels.advice()})")
    else:
        from ..machines import ship

        exe, base = f"{ship.ensure_native(machine).bin_dir}/{BIN}", f"{ship.remote_dir(machine)}/monitor/hs-{token}-{inst.name}"
    root = f"{base}/cgroup"
    pairs = [x for name, target in links for x in (name, target)]
    made = machine.run(["sh", "-c", _LINKS, "vb", root, *pairs] if version == "v1" else ["mkdir", "-p", base],
                       timeout=START_TIMEOUT)
    if not made.ok:
        raise MonitorUnavailable(f"{inst.name}: cannot make {root}{machine.on}: {made.describe_failure()}")
    sampler = _Sampler(machine.run, inst.name, inst.role, str(exe), base, "cgroup", interval, lifetime, token,
                       extra=("--cgroup-root", root if version == "v1" else links[0][1]), host_side=how.why)
    sampler.cleanup.append(base)
    return sampler


def machine_sampler(machine: Machine, as_host: bool, directory: Path, interval: float, lifetime: float,
                    token: str) -> _Sampler:
    """The whole machine's series: this machine's (`as_host`: name and role `host`, watching
    virtbench's pid so it cannot outlive us), or another machine's that runs containers or VMs (its
    own name, role `machine`)."""
    if as_host:
        exe = host_binary()
        if not exe.exists():
            raise MonitorUnavailable(f"{exe} is not built (run: {kernels.advice()})")
        return _Sampler(machine.run, HOST, HOST, str(exe), str(directory), "host", interval, lifetime, token,
                        extra=("--watch-pid", str(os.getpid())))
    from ..machines import ship

    base = f"{ship.remote_dir(machine)}/monitor"
    if not machine.run(["mkdir", "-p", base], timeout=START_TIMEOUT).ok:
        raise MonitorUnavailable(f"{machine.name}: cannot make {base}")
    return _Sampler(machine.run, machine.name, MACHINE, f"{ship.ensure_native(machine).bin_dir}/{BIN}", base,
                    "host", interval, lifetime, token)


class Session:
    """The samplers of one repetition."""

    def __init__(self, environment: str, interval: float):
        self.environment = environment
        self.interval = interval
        self.notes: list[str] = []
        self._dir = owners.local_workdir("virtbench-monitor-")  # the running run's: swept after a SIGKILL
        self._samplers: list[_Sampler] = []
        self.started = time.time()

    @classmethod
    def start(cls, instances: dict[str, list[Instance]], *, environment: str, interval: float = 1.0,
              lifetime: float = 3600.0, host: bool = True) -> Session:
        """Start the host's sampler, one on each remote machine that holds containers or VMs, and one
        in each instance; failures become notes."""
        session = None
        try:
            # Made whole or not at all: a signal in between would leave a directory nobody removes.
            with procs.interrupts_deferred():
                session = cls(environment, interval)
            session._begin(instances, lifetime + LIFETIME_MARGIN, secrets.token_hex(4), host)
        except BaseException:
            # Ctrl-C or SIGTERM while the samplers start: the caller never gets this session, so
            # it stops what started and removes its directory itself before the interrupt goes on.
            if session is not None:
                session.discard()
            raise
        return session

    def _begin(self, instances: dict[str, list[Instance]], life: float, token: str, host: bool) -> None:
        machines = [(local(), True)] if host else []
        seen, targets = set(), []
        for pool in instances.values():
            for inst in pool:
                m = inst.machine
                # A real machine samples itself already; containers or VMs on a remote machine need
                # that machine's series beside theirs (this one's is the host series, if asked for).
                if not m.is_local and not inst.traits.real_machine and all(m is not x for x, _ in machines):
                    machines.append((m, False))
                scope = scope_for(inst)
                if scope and inst.name not in seen:
                    seen.add(inst.name)
                    targets.append((inst, scope))
        # A sandbox without CPU and memory counters inside is also sampled from its machine.
        host_side = [(inst, how) for inst, _ in targets
                     if isinstance(inst, HostSideMonitoring) and (how := inst.host_side_scope())]
        jobs = [("machine", m) for m in machines] + [("instance", t) for t in targets] + \
            [("host side", h) for h in host_side]

        def begin(job):
            kind, what = job
            sampler = make(kind, what)
            self._samplers.append(sampler)  # as it starts: an interrupt must find it to stop it
            return sampler

        def make(kind, what):
            if kind == "machine":
                return machine_sampler(*what, self._dir, self.interval, life, token)
            if kind == "host side":
                return _host_side_sampler(*what, self._dir, self.interval, life, token)
            return _instance_sampler(what[0], what[1], self.interval, life, token)

        results = fanout.each(begin, jobs)
        for (kind, what), _, exc in results:
            if exc is not None:
                where = "host: " if kind == "machine" and what[1] else ""
                self.notes.append(f"monitor: {where}{exc}")
        self._samplers = [sampler for _, sampler, exc in results if exc is None]  # in the jobs' order

    def discard(self) -> None:
        """Stop every sampler started so far and remove the directory, keeping nothing: for an
        interrupted start, which a second Ctrl-C must not cut short."""
        with procs.interrupts_held():
            try:
                fanout.each(lambda s: s.stop(), list(self._samplers))
            finally:
                owners.remove_local(self._dir)
                self._samplers = []

    def stop(self, window: tuple[float, float] | None = None) -> Result:
        """Stop every sampler, read what they recorded; summaries over `window` (epoch seconds,
        the workload's measured part) when given, else over the whole repetition."""
        result = Result(notes=list(self.notes))
        outputs: list[tuple[_Sampler, str]] = []
        try:
            for sampler, text, exc in fanout.each(lambda s: s.stop(), self._samplers):
                if exc is not None:
                    result.notes.append(f"monitor: {exc}")
                else:
                    outputs.append((sampler, text))
        finally:
            owners.remove_local(self._dir)
            self._samplers = []
        traces: list[series.Trace] = []
        host_side: dict[str, tuple[series.Trace, str]] = {}  # instance name -> its host-side trace, why
        for sampler, text in outputs:
            try:
                trace = series.parse(text, sampler.name, sampler.role)
            except ValueError as exc:
                result.notes.append(f"monitor: {exc}")
                continue
            if sampler.host_side:
                host_side[sampler.name] = (trace, sampler.host_side)
            else:
                traces.append(trace)
        for name, (trace, why) in host_side.items():  # one trace per instance: CPU, memory from outside
            inside = next((t for t in traces if t.name == name), None)
            traces = [t for t in traces if t is not inside] + [hostside.merge(trace, inside, why)]
        for trace in traces:
            result.traces.append(trace)
            result.rows += series.rows(trace, self.environment)
        result.samples = series.summarize(result.traces, window)
        return result
