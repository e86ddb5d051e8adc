"""Resources that conditions make on a machine: helper processes, work directories, mounts, loop
devices. Every command goes through the executor of the machine it acts on (`machine.run`,
`machine.spawn`); only what reads this machine's own state (/proc, statvfs) stays local.

On this machine, everything a condition makes lives under one directory per virtbench process
(hostdirs.base_dir) or carries that pid in its name (network namespaces `vb-<pid>-<n>`, podman
volumes labelled `virtbench.pid`), and helper processes get SIGKILL when virtbench dies
(`setpriv --pdeathsig`). So if a run is killed outright, the next one can tell what was left behind
and whose it was, and remove it (`leftovers`, the ledger's finder of this kind: machines/ledger.py):
mounts are detached, loop devices released, namespaces deleted; nothing belonging to a live process
is touched. On a remote machine there is no
parent process to tie helpers to: Applied.close() stops them, and a run killed outright leaves them.
So there every directory, helper log and record of a root qdisc put on one of the machine's own
interfaces (rate or delay between machines) a condition makes (`$TMPDIR/virtbench-cond-<kind>.XXXXXX`)
gets the owner record beside it (`<path>.owner`, machines/owners.py), and every helper carries its
log's path in its environment (`VIRTBENCH_COND`): the ledger's finder of that kind
(`remote_leftovers`) takes a gone owner's qdiscs off, kills its helpers, detaches what is mounted in
its directories and removes them, when the next run from this controller uses that machine. Here the
qdisc records lie in the process's directory and `leftovers` takes them off.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from .. import hostdirs, sizes
from ..errors import ConditionUnavailable
from ..hostdirs import PREFIX
from ..machines import Machine, MachineUnreachable, ledger, local, owners

MARK = "VIRTBENCH_COND"  # a helper's environment: its log's path (what marks it for the ledger elsewhere)


class HostCommandFailed(RuntimeError):
    pass


def base_dir() -> Path:
    """This process's directory for condition files on this machine (created on first use)."""
    return hostdirs.base_dir()


def new_dir(kind: str) -> Path:
    """A fresh subdirectory of base_dir() on this machine, for one target or helper."""
    return Path(local().scratch_dir(kind))


def machine_dir(machine: Machine, kind: str) -> str:
    """A fresh directory on `machine` for one condition's files, with its owner record; the caller
    removes it (remove_tree)."""
    try:
        d = machine.scratch_dir(kind)
    except OSError as exc:
        raise HostCommandFailed(str(exc)) from None
    _claim(machine, d)
    return d


def _claim(machine: Machine, path: str) -> None:
    """The owner record beside a condition's path (what the ledger reads on other machines; here the
    process's directory names the owner too); removed with the path (`remove_tree`, Helper.stop)."""
    try:
        owners.claim(machine, path)
    except MachineUnreachable as exc:
        raise HostCommandFailed(f"{path}{machine.on}: {exc.reason}") from None


def next_id() -> int:
    return hostdirs.next_id()


def run(machine: Machine, argv: Sequence[str], timeout: float = 60.0, check: bool = True,
        stdin: bytes | None = None) -> str:
    """Run a command on `machine`; HostCommandFailed with its stderr when it fails and check is set."""
    res = machine.run(list(argv), timeout=timeout, stdin=stdin)
    if check and not res.ok:
        raise HostCommandFailed(f"{' '.join(map(str, argv))}{machine.on}: {res.describe_failure()}")
    return res.stdout


def is_root(machine: Machine) -> bool:
    return machine.is_root()


def require_root(machine: Machine, what: str) -> None:
    if not is_root(machine):
        raise ConditionUnavailable(f"{what} needs root on {machine.place} (mounts, loop devices, namespaces)")


def require_tools(machine: Machine, what: str, tools: dict[str, str]) -> None:
    """tools: program -> Debian package. ConditionUnavailable naming what is missing."""
    missing = {t: tools[t] for t in machine.missing_programs(list(tools))}
    if missing:
        pkgs = " ".join(sorted(set(missing.values())))
        raise ConditionUnavailable(f"{what} needs {', '.join(sorted(missing))}{machine.on} (apt-get install {pkgs})")


def read_file(machine: Machine, path: str | Path) -> str:
    return machine.read_text(path)


# -- helper processes ------------------------------------------------------------------------------

class Helper:
    """A long-running helper process (server, proxy, FUSE client) started on a machine; we stop it.
    Its stdout and stderr go to `log` there (a file of its own when not given, removed on stop)."""

    def __init__(self, machine: Machine, argv: Sequence[str], *, name: str, netns: str | None = None,
                 log: Path | str | None = None):
        self.machine, self.name = machine, name
        argv = [str(a) for a in argv]
        if netns:
            argv = ["nsenter", f"--net=/run/netns/{netns}", "--", *argv]
        self._own_log = log is None
        try:
            if log is None:
                log = machine.scratch_file("helper")
                _claim(machine, str(log))
            self.log = str(log)
            self.argv = argv
            self._output: str | None = None
            # Here it dies with virtbench, even on SIGKILL; elsewhere its log's path marks it for the ledger.
            self.process = machine.spawn_tethered(argv, self.log, env={MARK: self.log})
        except OSError as exc:
            raise HostCommandFailed(f"{name}: {exc}") from None

    @property
    def pid(self) -> int:
        return self.process.pgid

    def alive(self) -> bool:
        if self._output is not None:
            return False
        return not self.machine.exited(self.pid)

    def output(self) -> str:
        return read_file(self.machine, self.log)

    def log_tail(self, lines: int = 5) -> str:
        text = (self._output if self._output is not None else self.output()).strip().splitlines()
        return " | ".join(text[-lines:])

    def read_json_line(self, key: str, timeout: float = 10.0) -> dict:
        """The first JSON line with `key` the helper prints (e.g. {"listening": "127.0.0.1:4242"})."""
        deadline = time.monotonic() + timeout
        interval = self.machine.poll_interval
        while True:
            for line in self.output().splitlines():
                with contextlib.suppress(ValueError):
                    doc = json.loads(line)
                    if isinstance(doc, dict) and key in doc:
                        return doc
            if time.monotonic() > deadline or not self.alive():
                break
            time.sleep(interval)
        self.stop()
        raise HostCommandFailed(f"{self.name} did not start: {self.log_tail() or 'no output'}")

    def stop(self, grace: float = 3.0) -> str:
        """SIGTERM its process group, then SIGKILL after `grace`; returns all it printed. Safe to repeat."""
        if self._output is None:
            self.process.stop(grace)
            self._output = self.output()
            if self._own_log:
                self.machine.remove(self.log, self.log + owners.OWNER)
        return self._output


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

def mounts_under(machine: Machine, root: Path | str) -> list[str]:
    """Mount points at or below root on `machine` (its sessions' mount namespace), deepest first."""
    return hostdirs.parse_mounts(machine.mountinfo(), root)


def is_mounted(machine: Machine, path: Path | str) -> bool:
    return str(path).rstrip("/") in mounts_under(machine, path)


def umount(machine: Machine, path: Path | str) -> None:
    """Unmount; if busy (e.g. a copy held in another mount namespace), detach lazily."""
    if not is_mounted(machine, path):
        return
    res = machine.run(["umount", str(path)], timeout=120)
    if not res.ok and is_mounted(machine, path):
        run(machine, ["umount", "-l", str(path)], timeout=60)


LOOP_LEDGER = "loop-devices"  # in base_dir(): loop devices attached here and not yet detached


_ledger = hostdirs.ledger


def loop_attach(machine: Machine, backing: Path, direct_io: bool = True) -> str:
    argv = ["losetup", "--find", "--show"]
    if direct_io:
        argv.append("--direct-io=on")
    dev = run(machine, [*argv, str(backing)], timeout=60).strip()
    # Once its FUSE backing is gone a loop device shows just '/<name>' as its file: the ledger is
    # how a later run still finds it if this one is killed.
    if machine.process_dir is not None:  # elsewhere the owner file beside the backing's directory tells
        machine.process_dir.remember(LOOP_LEDGER, f"{dev}:{backing.name}")
    return dev


def loop_detach(machine: Machine, dev: str) -> None:
    res = machine.run(["losetup", "-d", dev], timeout=60)
    if not res.ok and "No such device" not in res.stderr:
        raise HostCommandFailed(f"losetup -d {dev}: {res.describe_failure()}")
    if (own := machine.process_dir) is not None:
        for item in own.remembered(LOOP_LEDGER):
            if item.split(":")[0] == dev:
                own.forget(LOOP_LEDGER, item)


def _loop_back_file(dev: str) -> str | None:
    try:
        return Path(f"/sys/block/{Path(dev).name}/loop/backing_file").read_text().strip()
    except OSError:
        return None


def loops_backed_under(root: Path | str) -> list[str]:
    """Loop devices of this machine whose backing file is under root."""
    root = str(root).rstrip("/")
    res = local().run(["losetup", "--list", "--json", "--output", "NAME,BACK-FILE"], timeout=30)
    if not res.ok or not res.stdout.strip():
        return []
    out = []
    for dev in json.loads(res.stdout).get("loopdevices", []):
        back = (dev.get("back-file") or "").replace(" (deleted)", "")
        if back == root or back.startswith(root + "/"):
            out.append(dev["name"])
    return out


def remove_tree(machine: Machine, path: Path | str) -> None:
    """rm -r that never crosses into a mounted file system (a leftover mount keeps its contents);
    the owner record beside it goes too."""
    if mounts := mounts_under(machine, path):
        raise HostCommandFailed(f"{path} still has mounts under it: {', '.join(mounts)}")
    machine.rmtree(path, f"{path}{owners.OWNER}")


# -- sizes -------------------------------------------------------------------------------------------

def free_bytes(path: Path | str) -> int:
    """Free space of a file system of this machine."""
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize


def parse_size(text: str) -> int:
    """'512m', '4g', '1.5g', '100k', '1048576' -> bytes (binary units; a fraction of a byte is dropped)."""
    try:
        value = sizes.parse_suffixed(text, sizes.BINARY, decimals=True, truncate=True, ignore_case=True, ib=True)
    except ValueError:
        raise ValueError(f"{text!r} is not a size such as 512m or 4g") from None
    if value <= 0:
        raise ValueError(f"{text!r} is not a positive size")
    return value


# -- leftovers of killed runs on this machine --------------------------------------------------------

def _owner_alive(pid: int, start: str) -> bool:
    """The owner in a name (`<pid>-<start ticks>`) still runs (machines/owners.py's rule)."""
    return not owners.owner_dead({"pid": pid, "pidstart": start}, here=True)


def leftovers(here: Machine) -> list[str]:
    """Remove what dead virtbench processes left on this machine (`here`): mounts, loops,
    namespaces, volumes, files."""
    removed: list[str] = []
    root = os.geteuid() == 0
    dirs = [(d, _owner_alive(int(m.group(1)), m.group(2))) for d in sorted(Path(tempfile.gettempdir()).glob(f"{PREFIX}*"))
            if (m := re.fullmatch(rf"{PREFIX}(\d+)-(\d+)", d.name))]
    live = {_qdisc_dev(here.read_text(rec)) for d, alive in dirs if alive for rec in d.glob(f"{QDISC}-*.log")}
    for d, alive in dirs:
        if alive or not root:
            continue
        for rec in sorted(d.glob(f"{QDISC}-*.log")):
            dev = _qdisc_dev(here.read_text(rec))
            if dev not in live and (what := _undo_qdisc(here, dev)):
                removed.append(what)
        for mp in hostdirs.mounts_under(d):
            if here.run(["umount", "-l", mp], timeout=60).ok:
                removed.append(f"mount {mp}")
        ledger = [item.split(":", 1) for item in _ledger(d / LOOP_LEDGER)]
        for dev in loops_backed_under(d) + [dev for dev, name in ledger
                                            if (_loop_back_file(dev) or "").endswith(f"/{name}")]:
            if here.run(["losetup", "-d", dev], timeout=60).ok:
                removed.append(f"loop device {dev}")
        if not hostdirs.mounts_under(d):
            shutil.rmtree(d, ignore_errors=True)
            removed.append(str(d))
    if root and shutil.which("ip"):
        for ns in here.run(["ip", "netns", "list"], timeout=30).stdout.split("\n"):
            name = ns.split(" ")[0]
            m = re.fullmatch(r"vb-(\d+)-(\d+)-\d+", name)
            if not m or _owner_alive(int(m.group(1)), m.group(2)):
                continue
            for pid in here.run(["ip", "netns", "pids", name], timeout=30).stdout.split():
                with contextlib.suppress(ProcessLookupError, ValueError):
                    os.kill(int(pid), signal.SIGKILL)
            if here.run(["ip", "netns", "del", name], timeout=30).ok:
                removed.append(f"network namespace {name}")
    for cmd in ("podman", "docker"):
        if not shutil.which(cmd):
            continue
        res = here.run([cmd, "volume", "ls", "--filter", "label=virtbench.cond=1", "--format", "{{.Name}}"],
                       timeout=60)
        for name in res.stdout.split() if res.ok else []:
            m = re.fullmatch(r"vb-vol-(\d+)-(\d+)-\d+", name)
            if m and not _owner_alive(int(m.group(1)), m.group(2)):
                if here.run([cmd, "volume", "rm", "-f", name], timeout=60).ok:
                    removed.append(f"{cmd} volume {name}")
        break
    return removed


def remote_leftovers(machine: Machine) -> list[str]:
    """Remove what conditions of dead virtbench processes of this controller left on another
    machine: root qdiscs on its interfaces (by their records), their helpers (by the path in
    `VIRTBENCH_COND`), mounts in their directories, the directories, helper logs and records (by
    the owner record beside each)."""
    res = machine.run(["sh", "-c", 'printf "%s" "${TMPDIR:-/tmp}"'], timeout=30)
    if not res.ok or not res.stdout.startswith("/"):
        return []
    records = [(owners.owner_dead(owner), _qdisc_dev(machine.read_text(path)), owner)
               for path, owner in owners.listed(machine, res.stdout, f"{PREFIX}{QDISC}.*")]
    live = {dev for dead, dev, _ in records if not dead}  # a live run's (or another controller's) qdisc stays
    removed = [f"{what} (run {owner.get('run_id') or '?'})" for dead, dev, owner in records
               if dead and dev not in live and (what := _undo_qdisc(machine, dev))]
    return removed + [f"condition files {d}" for d in owners.sweep_dir(machine, res.stdout, names=f"{PREFIX}*",
                                                                       what="its helpers, mounts and files")]


# -- root qdiscs on a machine's own interfaces -------------------------------------------------------

QDISC = "qdisc"  # the kind of the record of one (conditions/hostnet.py:shape)
OURS = re.compile(r"qdisc (tbf|netem) 1: root")  # what shape() puts there: a root tbf or netem, handle 1:


def record_qdisc(machine: Machine, dev: str) -> str:
    """A record, with the owner record beside it, of the root qdisc put on `dev`, an interface of the
    machine's own (not one of ours, which goes with its namespace or container): if this process is
    killed before taking it off, the ledger does."""
    path = machine.scratch_file(QDISC)
    machine.write_text(path, json.dumps({"dev": dev}))
    _claim(machine, path)
    return path


def drop_record(machine: Machine, path: str) -> None:
    machine.remove(path, path + owners.OWNER)


def _qdisc_dev(text: str) -> str | None:
    """The interface a qdisc record names (None: not a record)."""
    try:
        dev = json.loads(text)["dev"]
    except (ValueError, KeyError, TypeError):
        return None
    return dev if isinstance(dev, str) and re.fullmatch(r"[\w.@:-]{1,15}", dev) else None


def _undo_qdisc(machine: Machine, dev: str | None) -> str | None:
    """Take off the root qdisc put on `dev`, if what is there still is ours; what was done."""
    if dev is None:
        return None
    shown = machine.run(["tc", "qdisc", "show", "dev", dev, "root"], timeout=30)
    if not (shown.ok and OURS.match(shown.stdout.strip())):
        return None
    if not machine.run(["tc", "qdisc", "del", "dev", dev, "root"], timeout=30).ok:
        return None
    return f"root qdisc {OURS.match(shown.stdout.strip()).group(1)} on {dev}"


ledger.register(ledger.Finder("condition mounts, loop devices, namespaces and volumes", leftovers, here_only=True))
ledger.register(ledger.Finder("condition helpers and files on other machines", remote_leftovers,
                              elsewhere_only=True))
