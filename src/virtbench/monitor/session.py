"""Samplers around one repetition: one vb-monitor on the host, and one inside each instance.

The host's sampler is a child process of virtbench. An instance's sampler is started with one
plain `Instance.exec` (`vb-monitor --daemon` detaches once its first line is written) and stopped
with another (`vb-monitor --stop ... --print ... --remove` signals it, waits until it is gone and
prints what it recorded), so every driver that can exec can be monitored: no streaming exec is
needed, and nothing flows while the workload runs (no `podman exec` client kept busy per instance).

A sampler that cannot start is a note, never a failed repetition: the workload's own numbers
matter more than its monitoring. Samplers cannot outlive virtbench for long: each has a lifetime
(the repetition's timeout plus a margin), the host's also watches virtbench's pid, and an
instance's goes away with the instance.
"""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import subprocess
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .. import paths
from ..drivers.base import Instance
from ..model import Sample
from . import series

BIN = "vb-monitor"
HOST = "host"  # name and role of the host's own series
START_TIMEOUT = 30.0
STOP_WAIT = 5.0
LIFETIME_MARGIN = 120.0
# Drivers whose instances share the host's kernel but not its accounting: sample their cgroup.
CGROUP_DRIVERS = ("container", "k8s")


class MonitorUnavailable(Exception):
    """A sampler could not be started or read; becomes a note."""


def scope_for(inst: Instance) -> str | None:
    """vb-monitor's --scope for an instance, or None when the instance is the host itself (its
    series would repeat the host's). A driver may set `monitor_scope` on its instances."""
    override = getattr(inst, "monitor_scope", None)
    if override:
        return override
    if inst.env.driver == "host":
        return None
    return "cgroup" if inst.env.driver in CGROUP_DRIVERS else "host"


def host_binary() -> Path:
    return paths.native_bin_dir() / BIN


@dataclass
class Result:
    traces: list[series.Trace] = field(default_factory=list)
    rows: list[dict[str, Any]] = field(default_factory=list)
    samples: list[Sample] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


class _HostSampler:
    def __init__(self, directory: Path, interval: float, lifetime: float):
        exe = host_binary()
        if not exe.exists():
            raise MonitorUnavailable(f"{exe} is not built (run: make native)")
        self.out = directory / "host.jsonl"
        self.name, self.role = HOST, HOST
        with open(directory / "host.err", "wb") as err:
            self.proc = subprocess.Popen(
                [str(exe), "--scope", "host", "--interval", f"{interval:g}", "--out", str(self.out),
                 "--lifetime", f"{lifetime:.0f}", "--watch-pid", str(os.getpid())],
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err, start_new_session=True)
        # The first line is written after the baseline read: wait for it, so the repetition's
        # first interval is measured from before the workload starts.
        deadline = time.monotonic() + START_TIMEOUT
        while not (self.out.exists() and self.out.stat().st_size > 0):
            if self.proc.poll() is not None:
                raise MonitorUnavailable(f"host sampler exited at once: "
                                         f"{(directory / 'host.err').read_text(errors='replace').strip()}")
            if time.monotonic() > deadline:
                self._kill()
                raise MonitorUnavailable("host sampler did not start")
            time.sleep(0.002)

    def _kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(STOP_WAIT)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

    def stop(self) -> str:
        self._kill()
        return self.out.read_text(errors="replace") if self.out.exists() else ""


class _InstanceSampler:
    def __init__(self, inst: Instance, scope: str, interval: float, lifetime: float, token: str):
        self.inst, self.name, self.role = inst, inst.name, inst.role
        base = inst.scratch_dir().rstrip("/")
        self.out, self.pidfile = f"{base}/vb-monitor-{token}.jsonl", f"{base}/vb-monitor-{token}.pid"
        self.copied = False
        self.bin = inst.bin(BIN)
        argv = ["--daemon", "--scope", scope, "--interval", f"{interval:g}", "--out", self.out,
                "--pidfile", self.pidfile, "--lifetime", f"{lifetime:.0f}"]
        res = inst.exec([self.bin, *argv], timeout=START_TIMEOUT)
        if res.returncode in (126, 127) and host_binary().exists():
            # A guest image built before vb-monitor existed: bring the host's build in (same
            # Debian release, so the same libc); recorded in the series' source.
            dest = f"{base}/vb-monitor"
            try:
                inst.copy_in(host_binary(), dest)
            except OSError as exc:
                raise MonitorUnavailable(f"{inst.name}: no {BIN} in the instance and copying it in failed: "
                                         f"{exc}") from None
            self.bin, self.copied = dest, True
            res = inst.exec([self.bin, *argv], timeout=START_TIMEOUT)
        if not res.ok:
            raise MonitorUnavailable(f"{inst.name}: {BIN} did not start: {res.describe_failure()}")

    def stop(self) -> str:
        res = self.inst.exec([self.bin, "--stop", self.pidfile, "--print", self.out, "--remove",
                              "--wait", f"{STOP_WAIT:g}"], timeout=START_TIMEOUT + STOP_WAIT)
        if not res.stdout.strip():
            raise MonitorUnavailable(f"{self.name}: reading its samples failed: {res.describe_failure()}")
        return res.stdout


def _parallel(fn, items: list) -> list[tuple[Any, Any, Exception | None]]:
    """fn over items in threads (podman exec takes ~0.1-0.5 s each): (item, result, error)."""
    if not items:
        return []

    def call(item):
        try:
            return item, fn(item), None
        except Exception as exc:  # every failure becomes a note
            return item, None, exc

    with ThreadPoolExecutor(max_workers=min(16, len(items))) as pool:
        return list(pool.map(call, items))


class Session:
    """The samplers of one repetition."""

    def __init__(self, environment: str, interval: float):
        self.environment = environment
        self.interval = interval
        self.notes: list[str] = []
        self._dir = Path(tempfile.mkdtemp(prefix="virtbench-monitor-"))
        self._host: _HostSampler | None = None
        self._samplers: list[_InstanceSampler] = []
        self.started = time.time()

    @classmethod
    def start(cls, instances: dict[str, list[Instance]], *, environment: str, interval: float = 1.0,
              lifetime: float = 3600.0, host: bool = True) -> Session:
        """Start the host's sampler and one in each instance; failures become notes."""
        session = cls(environment, interval)
        life = lifetime + LIFETIME_MARGIN
        if host:
            try:
                session._host = _HostSampler(session._dir, interval, life)
            except (MonitorUnavailable, OSError) as exc:
                session.notes.append(f"monitor: host: {exc}")
        seen, targets = set(), []
        for pool in instances.values():
            for inst in pool:
                scope = scope_for(inst)
                if scope and inst.name not in seen:
                    seen.add(inst.name)
                    targets.append((inst, scope))
        token = secrets.token_hex(4)
        for (inst, _), sampler, exc in _parallel(
                lambda t: _InstanceSampler(t[0], t[1], interval, life, token), targets):
            if exc is not None:
                session.notes.append(f"monitor: {exc}")
            else:
                session._samplers.append(sampler)
        return session

    def stop(self, window: tuple[float, float] | None = None) -> Result:
        """Stop every sampler, read what they recorded; summaries over `window` (epoch seconds,
        the workload's measured part) when given, else over the whole repetition."""
        result = Result(notes=list(self.notes))
        outputs: list[tuple[str, str, str]] = []
        try:
            if self._host is not None:
                outputs.append((self._host.name, self._host.role, self._host.stop()))
            for sampler, text, exc in _parallel(lambda s: s.stop(), self._samplers):
                if exc is not None:
                    result.notes.append(f"monitor: {exc}")
                else:
                    outputs.append((sampler.name, sampler.role, text))
        finally:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._host, self._samplers = None, []
        for name, role, text in outputs:
            try:
                trace = series.parse(text, name, role)
            except ValueError as exc:
                result.notes.append(f"monitor: {exc}")
                continue
            result.traces.append(trace)
            result.rows += series.rows(trace, self.environment)
        result.samples = series.summarize(result.traces, window)
        return result
