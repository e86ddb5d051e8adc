"""QEMU processes: command lines, a QMP client, the serial console reader, and spawning on a machine.

Every QEMU is started through the executor of its machine (`Machine.spawn`), in a process group of
its own, paused (-S), with QMP and the serial console on UNIX sockets in its directory there (a
forwarded path when the machine is remote). The QMP greeting marks the moment the process is set
up, `cont` the moment the vCPUs run, and the console reader timestamps each line as it arrives;
end of file on the console means QEMU is gone.

On this machine a QEMU also dies with virtbench, even on SIGKILL (LocalMachine.spawn_tethered).
A remote QEMU is stopped by teardown.
"""

from __future__ import annotations

import collections
import contextlib
import json
import re
import socket
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

from ... import machines

QEMU = "qemu-system-x86_64"
# The vm driver's devices option -> (disk model, NIC model); NIC model -> QEMU device.
DEVICE_MODELS = {
    "paravirt": ("virtio", "virtio"),
    "emulated-disk": ("ide", "virtio"),
    "emulated": ("ide", "e1000"),
}
NIC_DEVICES = {"virtio": "virtio-net-pci", "e1000": "e1000", "rtl8139": "rtl8139"}
PANIC_RE = re.compile(r"Kernel panic - not syncing|end Kernel panic")


# -- spawning -----------------------------------------------------------------------------------

def spawn(machine: machines.Machine, argv: Sequence[str], log: str) -> machines.Process:
    """Start argv in the background on `machine`, output to `log` there; tied to this process when
    it is a child of it (Machine.spawn_tethered)."""
    return machine.spawn_tethered(argv, log)


# -- QMP ----------------------------------------------------------------------------------------

class QmpError(Exception):
    pass


class Qmp:
    """A minimal synchronous QMP client on a connected socket; events are kept with arrival times."""

    def __init__(self, sock: socket.socket):
        self.sock = sock
        self.file = sock.makefile("rwb", buffering=0)
        self.events: list[tuple[float, dict]] = []
        self.greeting: dict | None = None
        self.greeted_at: float | None = None
        self._lock = threading.Lock()

    def _read(self, timeout: float | None) -> dict:
        self.sock.settimeout(timeout)
        line = self.file.readline()
        if not line:
            raise QmpError("QEMU closed the QMP connection")
        return json.loads(line)

    def handshake(self, timeout: float = 60.0) -> float:
        """Wait for the greeting (QEMU is up); returns when it arrived."""
        self.greeting = self._read(timeout)
        self.greeted_at = time.time()
        self.execute("qmp_capabilities", timeout=timeout)
        return self.greeted_at

    def execute(self, command: str, arguments: dict | None = None, timeout: float = 30.0) -> Any:
        msg = {"execute": command, **({"arguments": arguments} if arguments else {})}
        with self._lock:
            self.sock.settimeout(timeout)
            self.file.write(json.dumps(msg).encode() + b"\n")
            deadline = time.monotonic() + timeout
            while True:
                reply = self._read(max(0.01, deadline - time.monotonic()))
                if "event" in reply:
                    self.events.append((time.time(), reply))
                    continue
                if "error" in reply:
                    raise QmpError(f"{command}: {reply['error'].get('desc', reply['error'])}")
                if "return" in reply:
                    return reply["return"]

    def event_time(self, name: str) -> float | None:
        """QEMU's own timestamp of the last event `name` (host clock, microseconds)."""
        for _, ev in reversed(self.events):
            if ev.get("event") == name:
                ts = ev.get("timestamp") or {}
                return ts.get("seconds", 0) + ts.get("microseconds", 0) / 1e6
        return None

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.file.close()
        with contextlib.suppress(OSError):
            self.sock.close()


# -- console ------------------------------------------------------------------------------------

@dataclass
class ConsoleLine:
    t: float
    text: str


class Console:
    """Reads the guest's serial console from a pipe; timestamps each line when it arrives."""

    def __init__(self, stream: BinaryIO, log_path: Path, tail: int = 400):
        self.stream = stream
        self.log_path = log_path
        self.lines: collections.deque[ConsoleLine] = collections.deque(maxlen=tail)
        self.markers: list[ConsoleLine] = []  # every VIRTBENCH-* line and kernel panic, whole run
        self.cond = threading.Condition()
        self.closed = False
        self._thread = threading.Thread(target=self._run, name=f"console-{log_path.parent.name}", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            with open(self.log_path, "ab") as log:
                for raw in iter(self.stream.readline, b""):
                    now = time.time()
                    text = raw.decode(errors="replace").rstrip("\r\n").replace("\r", "")
                    log.write(f"{now:.6f} {text}\n".encode())
                    log.flush()
                    with self.cond:
                        item = ConsoleLine(now, text)
                        self.lines.append(item)
                        if "VIRTBENCH-" in text or PANIC_RE.search(text):
                            self.markers.append(item)
                        self.cond.notify_all()
        except (OSError, ValueError):
            pass
        finally:
            with self.cond:
                self.closed = True
                self.cond.notify_all()

    def wait_for(self, predicate: Callable[[], Any], timeout: float) -> Any:
        """Wait until predicate() (called under the lock) returns something truthy, or timeout."""
        deadline = time.monotonic() + timeout
        with self.cond:
            while True:
                got = predicate()
                if got:
                    return got
                left = deadline - time.monotonic()
                if left <= 0 or self.closed:
                    return predicate()
                self.cond.wait(min(left, 0.5))

    def find(self, prefix: str, after: int = 0) -> ConsoleLine | None:
        """The first marker line starting with `prefix` (e.g. VIRTBENCH-INIT) at index >= after."""
        for m in self.markers[after:]:
            if m.text.startswith(prefix + " ") or m.text == prefix:
                return m
        return None

    def failure(self, after: int = 0) -> ConsoleLine | None:
        for m in self.markers[after:]:
            if m.text.startswith("VIRTBENCH-FAIL") or PANIC_RE.search(m.text):
                return m
        return None

    def tail(self, n: int = 15) -> str:
        with self.cond:
            items = list(self.lines)[-n:]
        return "\n".join(i.text for i in items)

    def join(self, timeout: float = 5.0) -> None:
        self._thread.join(timeout)


# -- command line -------------------------------------------------------------------------------

@dataclass
class QemuConfig:
    """Everything that decides a QEMU command line."""

    name: str
    accel: str  # kvm | tcg
    machine: str  # pc | q35
    vcpus: int
    memory_mb: int
    kernel: str  # paths on the VM's machine
    initrd: str
    append: str
    disk: str | None
    disk_format: str = "raw"
    disk_model: str = "virtio"  # virtio | ide
    disk_cache: str = "none"
    nic_model: str = "virtio"  # virtio | e1000 | none
    ssh_port: int | None = None
    cpu: str | None = None
    rng: bool = True
    guestfwd: list[str] = field(default_factory=list)  # user-mode guestfwd rules (tcp:ADDR:PORT-DEV)
    extra: list[str] = field(default_factory=list)

    def argv(self, qmp: str, console: str, pidfile: str | None = None) -> list[str]:
        """QMP and the serial console listen on the UNIX socket paths `qmp` and `console`; output
        before a client connects to the console is lost, so connect before `cont`."""
        argv = [QEMU, "-name", f"{self.name},debug-threads=on", "-machine", self.machine, "-accel", self.accel,
                "-smp", str(self.vcpus), "-m", str(self.memory_mb), "-nodefaults", "-no-user-config",
                "-display", "none", "-S",
                "-chardev", f"socket,id=qmp,path={_escape(qmp)},server=on,wait=off",
                "-mon", "chardev=qmp,mode=control",
                "-chardev", f"socket,id=con,path={_escape(console)},server=on,wait=off", "-serial", "chardev:con",
                "-kernel", str(self.kernel), "-initrd", str(self.initrd), "-append", self.append]
        if self.cpu:
            argv += ["-cpu", self.cpu]
        if pidfile:
            argv += ["-pidfile", str(pidfile)]
        if self.disk is not None:
            argv += ["-drive", f"file={_escape(str(self.disk))},format={self.disk_format},if=none,id=root,"
                               f"cache={self.disk_cache},discard=unmap"]
            if self.disk_model == "virtio":
                argv += ["-device", "virtio-blk-pci,drive=root"]
            elif self.disk_model == "ide":
                argv += ["-device", "ide-hd,drive=root,bus=ide.0"]
            else:
                raise ValueError(f"unknown disk model {self.disk_model}")
        if self.nic_model != "none":
            fwd = f",hostfwd=tcp:127.0.0.1:{self.ssh_port}-:22" if self.ssh_port else ""
            # guestfwd (allowed with restrict=on) opens exactly one guest address:port to the outside.
            fwd += "".join(f",guestfwd={_escape(rule)}" for rule in self.guestfwd)
            # restrict=on: the guest reaches nothing outside; only the forwarded ports are open.
            argv += ["-netdev", f"user,id=net0,restrict=on{fwd}"]
            if self.nic_model == "virtio":
                argv += ["-device", "virtio-net-pci,netdev=net0"]
            else:
                argv += ["-device", f"{self.nic_model},netdev=net0"]
        if self.rng:
            argv += ["-device", "virtio-rng-pci"]
        return argv + list(self.extra)


def _escape(value: str) -> str:
    """QEMU option values double a comma to mean a literal comma."""
    return value.replace(",", ",,")


def free_port(machine: machines.Machine) -> int:
    """A TCP port on the machine's 127.0.0.1 for QEMU to listen on; the caller retries when QEMU
    cannot bind it (Machine.free_port)."""
    return machine.free_port()


def unix_connect(path: str) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(path)
    except OSError:
        sock.close()
        raise
    return sock


def await_qmp(path: str, gone: Callable[[], bool], timeout: float) -> Qmp:
    """Connect to QMP at `path` once QEMU listens there, and read its greeting. Retried every few
    ms: before QEMU is up the socket is missing, or (forwarded) the connection closes at once.
    `gone()` says QEMU exited (checked now and then: it may cost a command)."""
    deadline = time.monotonic() + timeout
    next_check = time.monotonic() + 0.5
    while True:
        try:
            qmp = Qmp(unix_connect(path))
            try:
                qmp.handshake(timeout=max(1.0, deadline - time.monotonic()))
                return qmp
            except (QmpError, OSError, ValueError):
                qmp.close()
        except OSError:
            pass
        now = time.monotonic()
        if now > deadline:
            raise QmpError(f"QMP did not answer within {timeout:.0f} s")
        if now > next_check:
            if gone():
                raise QmpError("QEMU exited before it was up")
            next_check = now + 0.5
        time.sleep(0.003)


def version(machine: machines.Machine) -> str:
    res = machine.run([QEMU, "--version"], timeout=30)
    if not res.ok:
        return ""
    m = re.search(r"version (\S+)", res.stdout)
    return m.group(1) if m else res.stdout.strip().splitlines()[0] if res.stdout.strip() else ""
