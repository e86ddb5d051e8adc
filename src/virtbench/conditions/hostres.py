"""Host-side resources that conditions create: helper processes, mounts, loop devices, namespaces.

Everything a condition makes on the host lives under one directory per virtbench process
(`$TMPDIR/virtbench-cond-<pid>-<start>`) or carries that pid in its name (network namespaces
`vb-<pid>-<n>`, podman volumes labelled `virtbench.pid`). Helper processes get SIGKILL when
virtbench dies (PR_SET_PDEATHSIG). So if a run is killed outright, the next one can tell what was
left behind and whose it was, and remove it (`cleanup_stale`): mounts are detached, loop devices
released, namespaces deleted; nothing belonging to a live process is touched.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import json
import os
import re
import select
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path

from .. import procs
from .base import ConditionUnavailable

PREFIX = "virtbench-cond-"
_lock = threading.RLock()
_base: Path | None = None
_counter = 0
_stale_checked = False

try:
    _libc = ctypes.CDLL(None, use_errno=True)
except OSError:  # pragma: no cover - every Linux libc loads
    _libc = None


class HostCommandFailed(RuntimeError):
    pass


def _start_ticks(pid: int) -> str | None:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[19]
    except (OSError, IndexError):
        return None


def base_dir() -> Path:
    """This process's directory for condition files (created on first use)."""
    global _base
    with _lock:
        if _base is None or not _base.exists():
            cleanup_stale()
            pid = os.getpid()
            _base = Path(tempfile.gettempdir()) / f"{PREFIX}{pid}-{_start_ticks(pid) or 0}"
            _base.mkdir(mode=0o755, exist_ok=True)
            atexit.register(_remove_base)
        return _base


def _remove_base() -> None:
    """At exit: this process's directory goes, unless something is still mounted in it."""
    if _base is not None and _base.exists() and not mounts_under(_base):
        shutil.rmtree(_base, ignore_errors=True)


def new_dir(kind: str) -> Path:
    """A fresh subdirectory of base_dir() for one target or helper."""
    global _counter
    with _lock:
        _counter += 1
        d = base_dir() / f"{kind}-{_counter}"
    d.mkdir(mode=0o755)
    return d


def owner_tag() -> str:
    """'<pid>-<start ticks>': names with it can be told apart from those of a dead process."""
    pid = os.getpid()
    return f"{pid}-{_start_ticks(pid) or 0}"


def next_id() -> int:
    global _counter
    with _lock:
        _counter += 1
        return _counter


def run(argv: Sequence[str], timeout: float = 60.0, check: bool = True, stdin: bytes | None = None) -> str:
    """Run a host command; HostCommandFailed with its stderr when it fails and check is set."""
    res = procs.run(list(argv), timeout=timeout, stdin=stdin)
    if check and not res.ok:
        raise HostCommandFailed(f"{' '.join(map(str, argv))}: {res.describe_failure()}")
    return res.stdout


def is_root() -> bool:
    return os.geteuid() == 0


def require_root(what: str) -> None:
    if not is_root():
        raise ConditionUnavailable(f"{what} needs root on the host (mounts, loop devices, namespaces)")


def require_tools(what: str, tools: dict[str, str]) -> None:
    """tools: program -> Debian package. ConditionUnavailable naming what is missing."""
    missing = {t: p for t, p in tools.items() if not shutil.which(t)}
    if missing:
        pkgs = " ".join(sorted(set(missing.values())))
        raise ConditionUnavailable(f"{what} needs {', '.join(sorted(missing))} (apt-get install {pkgs})")


# -- helper processes ------------------------------------------------------------------------------

def _die_with_parent() -> None:  # runs in the child between fork and exec
    if _libc is not None:
        _libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


class Helper:
    """A long-running helper process (server, proxy, FUSE client) we started and must stop."""

    def __init__(self, argv: Sequence[str], *, name: str, netns: str | None = None, log: Path | None = None):
        self.name = name
        argv = [str(a) for a in argv]
        if netns:
            argv = ["nsenter", f"--net=/run/netns/{netns}", "--", *argv]
        self.argv = argv
        self.log = log
        err = open(log, "ab") if log else subprocess.DEVNULL
        try:
            # own process group, so stop() reaches whatever it forks
            self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=err,
                                         preexec_fn=_die_with_parent, start_new_session=True)
        except FileNotFoundError as exc:
            raise HostCommandFailed(f"{name}: {exc.filename} not found") from None
        finally:
            if log:
                err.close()

    @property
    def pid(self) -> int:
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc.poll() is None

    def log_tail(self, lines: int = 5) -> str:
        if not self.log or not self.log.exists():
            return ""
        text = self.log.read_text(errors="replace").strip().splitlines()
        return " | ".join(text[-lines:])

    def read_json_line(self, timeout: float = 10.0) -> dict:
        """The first JSON line the helper prints (e.g. {"listening": "127.0.0.1:4242"})."""
        deadline = time.monotonic() + timeout
        buf = b""
        fd = self.proc.stdout.fileno()
        while time.monotonic() < deadline:
            ready, _, _ = select.select([fd], [], [], max(0.0, deadline - time.monotonic()))
            if not ready:
                break
            chunk = os.read(fd, 4096)
            if not chunk:
                break
            buf += chunk
            if b"\n" in buf:
                line = buf.split(b"\n", 1)[0]
                return json.loads(line)
        self.stop()
        raise HostCommandFailed(f"{self.name} did not start: {self.log_tail() or 'no output'}")

    def stop(self, grace: float = 3.0) -> str:
        """SIGTERM, then SIGKILL after `grace`; returns what it printed on stdout since."""
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=10)
        out = b""
        with contextlib.suppress(Exception):
            out = self.proc.stdout.read() or b""
            self.proc.stdout.close()
        return out.decode(errors="replace")


def wait_for(check, timeout: float, what: str, helper: Helper | None = None, interval: float = 0.05) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        if helper is not None and not helper.alive():
            raise HostCommandFailed(f"{helper.name} exited: {helper.log_tail() or 'no output'}")
        time.sleep(interval)
    tail = helper.log_tail() if helper else ""
    raise HostCommandFailed(f"timed out after {timeout:g} s waiting for {what}" + (f": {tail}" if tail else ""))


# -- mounts and loop devices -----------------------------------------------------------------------

def _unescape(path: str) -> str:
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), path)


def mounts_under(root: Path | str) -> list[str]:
    """Mount points at or below root in this mount namespace, deepest first."""
    root = str(root).rstrip("/")
    out = []
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/mountinfo").read_text().splitlines():
            mp = _unescape(line.split()[4])
            if mp == root or mp.startswith(root + "/"):
                out.append(mp)
    return sorted(set(out), key=lambda p: -p.count("/"))


def is_mounted(path: Path | str) -> bool:
    return str(path).rstrip("/") in mounts_under(path)


def umount(path: Path | str) -> None:
    """Unmount; if busy (e.g. a copy held in another mount namespace), detach lazily."""
    if not is_mounted(path):
        return
    res = procs.run(["umount", str(path)], timeout=120)
    if not res.ok and is_mounted(path):
        run(["umount", "-l", str(path)], timeout=60)


LOOP_LEDGER = "loop-devices"  # in base_dir(): loop devices attached and not yet detached


def _ledger(path: Path, add: str | None = None, remove: str | None = None) -> list[str]:
    with _lock:
        items = path.read_text().split() if path.exists() else []
        if add and add not in items:
            items.append(add)
        if remove in items:
            items.remove(remove)
        if add or remove:
            path.write_text("".join(f"{i}\n" for i in items))
        return items


def loop_attach(backing: Path, direct_io: bool = True) -> str:
    argv = ["losetup", "--find", "--show"]
    if direct_io:
        argv.append("--direct-io=on")
    dev = run([*argv, str(backing)], timeout=60).strip()
    # Once its FUSE backing is gone a loop device shows just '/<name>' as its file: the ledger is
    # how a later run still finds it if this one is killed.
    _ledger(base_dir() / LOOP_LEDGER, add=f"{dev}:{backing.name}")
    return dev


def loop_detach(dev: str) -> None:
    res = procs.run(["losetup", "-d", dev], timeout=60)
    if not res.ok and "No such device" not in res.stderr and "No such device or address" not in res.stderr:
        raise HostCommandFailed(f"losetup -d {dev}: {res.describe_failure()}")
    for item in _ledger(base_dir() / LOOP_LEDGER):
        if item.split(":")[0] == dev:
            _ledger(base_dir() / LOOP_LEDGER, remove=item)


def _loop_back_file(dev: str) -> str | None:
    try:
        return Path(f"/sys/block/{Path(dev).name}/loop/backing_file").read_text().strip()
    except OSError:
        return None


def loops_backed_under(root: Path | str) -> list[str]:
    root = str(root).rstrip("/")
    res = procs.run(["losetup", "--list", "--json", "--output", "NAME,BACK-FILE"], timeout=30)
    if not res.ok or not res.stdout.strip():
        return []
    out = []
    for dev in json.loads(res.stdout).get("loopdevices", []):
        back = (dev.get("back-file") or "").replace(" (deleted)", "")
        if back == root or back.startswith(root + "/"):
            out.append(dev["name"])
    return out


def remove_tree(path: Path | str) -> None:
    """rm -r that never crosses into a mounted file system (a leftover mount keeps its contents)."""
    path = Path(path)
    if not path.exists():
        return
    if mounts_under(path):
        raise HostCommandFailed(f"{path} still has mounts under it: {', '.join(mounts_under(path))}")
    shutil.rmtree(path, ignore_errors=True)


# -- free space --------------------------------------------------------------------------------------

def free_bytes(path: Path | str) -> int:
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize


def parse_size(text: str) -> int:
    """'512m', '4g', '100k', '1048576' -> bytes (binary units)."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([kmgt]?)i?b?\s*", str(text).lower())
    if not m:
        raise ValueError(f"{text!r} is not a size such as 512m or 4g")
    mult = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}[m.group(2)]
    value = int(float(m.group(1)) * mult)
    if value <= 0:
        raise ValueError(f"{text!r} is not a positive size")
    return value


def human(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"


# -- leftovers of killed runs -------------------------------------------------------------------------

def _owner_alive(pid: int, start: str) -> bool:
    now = _start_ticks(pid)
    return now is not None and (start in ("", "0") or now == start)


def cleanup_stale() -> list[str]:
    """Remove what dead virtbench processes left: mounts, loops, namespaces, volumes, files."""
    global _stale_checked
    with _lock:
        if _stale_checked:
            return []
        _stale_checked = True
    removed: list[str] = []
    tmp = Path(tempfile.gettempdir())
    for d in sorted(tmp.glob(f"{PREFIX}*")):
        m = re.fullmatch(rf"{PREFIX}(\d+)-(\d+)", d.name)
        if not m or _owner_alive(int(m.group(1)), m.group(2)):
            continue
        if not is_root():
            continue
        for mp in mounts_under(d):
            if procs.run(["umount", "-l", mp], timeout=60).ok:
                removed.append(f"mount {mp}")
        ledger = [item.split(":", 1) for item in _ledger(d / LOOP_LEDGER)]
        for dev in loops_backed_under(d) + [dev for dev, name in ledger
                                            if (_loop_back_file(dev) or "").endswith(f"/{name}")]:
            if procs.run(["losetup", "-d", dev], timeout=60).ok:
                removed.append(f"loop device {dev}")
        if not mounts_under(d):
            shutil.rmtree(d, ignore_errors=True)
            removed.append(str(d))
    if is_root() and shutil.which("ip"):
        for ns in procs.run(["ip", "netns", "list"], timeout=30).stdout.split("\n"):
            name = ns.split(" ")[0]
            m = re.fullmatch(r"vb-(\d+)-(\d+)-\d+", name)
            if not m or _owner_alive(int(m.group(1)), m.group(2)):
                continue
            for pid in procs.run(["ip", "netns", "pids", name], timeout=30).stdout.split():
                with contextlib.suppress(ProcessLookupError, ValueError):
                    os.kill(int(pid), signal.SIGKILL)
            if procs.run(["ip", "netns", "del", name], timeout=30).ok:
                removed.append(f"network namespace {name}")
    for cmd in ("podman", "docker"):
        if not shutil.which(cmd):
            continue
        res = procs.run([cmd, "volume", "ls", "--filter", "label=virtbench.cond=1", "--format",
                         "{{.Name}}"], timeout=60)
        for name in res.stdout.split() if res.ok else []:
            m = re.fullmatch(r"vb-vol-(\d+)-(\d+)-\d+", name)
            if m and not _owner_alive(int(m.group(1)), m.group(2)):
                if procs.run([cmd, "volume", "rm", "-f", name], timeout=60).ok:
                    removed.append(f"{cmd} volume {name}")
        break
    return removed
