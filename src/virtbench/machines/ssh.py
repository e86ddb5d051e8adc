"""A remote machine over the system OpenSSH client.

Why OpenSSH and not a Python SSH library: it is what users already configure (~/.ssh/config,
ProxyJump, agents, certificates, hardware keys), and one multiplexed master connection per host
(ControlMaster) makes a command over it cost about as much as a local fork (bench/remote_exec.py).

Host keys are always checked: against a key or SHA256 fingerprint pinned in the inventory, a
known_hosts file the inventory names, or the user's own known_hosts; never StrictHostKeyChecking=no.
Commands are argument lists quoted once for the remote shell (shlex.join) and run under coreutils
`timeout` there, which puts them in a process group of their own: a timeout or Ctrl-C kills that
whole group on the remote machine, not only the local ssh client.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import hashlib
import os
import secrets
import shlex
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from ..errors import MissingTool, UserError
from ..model import ExecResult
from .base import KILL_GROUP as _KILL, SPAWN as _SPAWN, KILL_MATCHING, Machine, MachineUnreachable, Process
from .inventory import HostSpec

CONNECT_TIMEOUT = 10
PERSIST = 600  # seconds the master outlives its last use if virtbench dies without closing it

# Runs every command with builtins only (each exec costs the remote ~1 ms): change directory, export
# the caller's variables and a token naming this command, then exec it, under coreutils `timeout`
# when it has one. On Ctrl-C (or a local timeout) the processes carrying the token are killed there
# (KILL_MATCHING), so nothing of an interrupted command goes on running on the remote machine.
_WRAPPER = ('d=$1; t=$2; export VIRTBENCH_EXEC="$3"; n=$4; shift 4; '
            'while [ "$n" -gt 0 ]; do export "$1"; shift; n=$((n - 1)); done; '
            'if [ -n "$d" ]; then cd "$d" || exit 126; fi; '
            'if [ "$t" = 0 ]; then exec "$@"; fi; exec timeout -k 5 "$t" "$@"')


@functools.lru_cache(maxsize=None)
def _ssh_binary(name: str = "ssh") -> str:
    path = shutil.which(name)
    if not path:
        raise MissingTool(name, "openssh-client", "remote machines are reached over SSH")
    return path


class SshMachine(Machine):
    kind = "ssh"

    def __init__(self, spec: HostSpec, *, control_dir: Path | None = None):
        super().__init__(spec.name, spec.address or spec.name)
        self.spec = spec
        self._own_dir = control_dir is None
        self._dir = Path(control_dir or tempfile.mkdtemp(prefix="vb-ssh-", dir="/tmp"))
        os.chmod(self._dir, 0o700)
        self._lock = threading.Lock()
        self._master = False
        self._options: list[str] | None = None
        self._closed = False
        self._forwards: dict[tuple[str, int] | str, str] = {}  # local end -> its -L spec
        self._connect_wait = CONNECT_TIMEOUT + 20.0  # seconds the master may take to come up
        self._workdir: str | None = None  # private_workdir, once made

    @property
    def virtbench_dir(self) -> str | None:
        return self.spec.remote_dir

    @property
    def reached_via(self) -> str | None:
        return f"the SSH connection to {self.name}"

    def private_workdir(self) -> str | None:
        """`engine` under virtbench's directory there, made once: what a tool drops in its working
        directory (conmon's `oom` marker) lands there, not in the login user's home. None (the home)
        while the host cannot be reached: the command itself then says why."""
        if self._workdir is None:
            from .ship import remote_dir  # late: ship is built on this package's base

            try:
                path = f"{remote_dir(self)}/engine"
            except (MachineUnreachable, OSError):
                return None
            if self.run(["mkdir", "-p", "-m", "700", path], timeout=60).ok:
                self._workdir = path
        return self._workdir

    def describe(self) -> dict:
        out = super().describe()
        if self.spec.vars.get("virtbench_testbed"):
            out["testbed"] = str(self.spec.vars["virtbench_testbed"])
        return out

    # -- options -------------------------------------------------------------------------------
    def _control_path(self) -> str:
        # Short and unique per host (socket paths are limited to ~100 bytes).
        return str(self._dir / hashlib.sha1(self.name.encode()).hexdigest()[:16])

    def options(self) -> list[str]:
        """ssh options for this host (without the destination); host key pinning resolved once."""
        if self._options is None:
            spec = self.spec
            opts = [*self._first_options(), "-o", "BatchMode=yes", "-o", f"ConnectTimeout={CONNECT_TIMEOUT}",
                    "-o", "ServerAliveInterval=5", "-o", "ServerAliveCountMax=3",
                    "-o", f"ControlPath={self._control_path()}"]
            if spec.port:
                opts += ["-p", str(spec.port)]
            if spec.user:
                opts += ["-l", spec.user]
            if spec.key_file:
                opts += ["-i", spec.key_file, "-o", "IdentitiesOnly=yes"]
            opts += self._host_key_options()
            self._options = opts
        return self._options

    def _first_options(self) -> list[str]:
        """Options that come before the defaults (ssh keeps the first value it is given)."""
        return []

    def _host_key_options(self) -> list[str]:
        spec = self.spec
        if spec.host_key:
            key_line = self._pinned_key_line(spec.host_key)
            alias = f"virtbench-{spec.name}"
            known = self._dir / f"known_hosts-{hashlib.sha1(spec.name.encode()).hexdigest()[:8]}"
            known.write_text(f"{alias} {key_line}\n")
            # HostKeyAlias: the pinned key belongs to this inventory name, whatever address it has.
            return ["-o", f"HostKeyAlias={alias}", "-o", f"UserKnownHostsFile={known}",
                    "-o", "GlobalKnownHostsFile=/dev/null", "-o", "StrictHostKeyChecking=yes"]
        if spec.known_hosts:
            return ["-o", f"UserKnownHostsFile={os.path.expanduser(spec.known_hosts)}",
                    "-o", "StrictHostKeyChecking=yes"]
        return []  # the user's own known_hosts and StrictHostKeyChecking setting

    def _pinned_key_line(self, pinned: str) -> str:
        pinned = pinned.strip()
        if not pinned.startswith("SHA256:"):
            parts = pinned.split()
            if len(parts) < 2:
                raise MachineUnreachable(self.name, f"virtbench_host_key '{pinned[:40]}' is neither a public key "
                                                    "line ('ssh-ed25519 AAAA...') nor a SHA256: fingerprint")
            return f"{parts[0]} {parts[1]}"
        # A fingerprint: fetch the host's keys and keep the one whose fingerprint matches.
        argv = [_ssh_binary("ssh-keyscan"), "-T", "5"]
        if self.spec.port:
            argv += ["-p", str(self.spec.port)]
        res = _run(argv + [self.spec.destination], timeout=30)
        for line in res.stdout.splitlines():
            parts = line.split()
            if len(parts) >= 3 and not line.startswith("#"):
                fp = _run([_ssh_binary("ssh-keygen"), "-lf", "-"], stdin=f"x {parts[1]} {parts[2]}\n".encode(),
                          timeout=30)
                if pinned in fp.stdout.split():
                    return f"{parts[1]} {parts[2]}"
        raise MachineUnreachable(self.name, f"no host key of {self.spec.destination} has the pinned fingerprint "
                                            f"{pinned}: the host changed or it is not the machine you meant; "
                                            "check the key on the host (ssh-keygen -lf /etc/ssh/ssh_host_*_key.pub)")

    def ssh_argv(self, *, master: bool = False) -> list[str]:
        """`ssh` plus options for one command over the master connection."""
        mode = ["-o", "ControlMaster=yes", "-o", f"ControlPersist={PERSIST}", "-f", "-N"] if master \
            else ["-o", "ControlMaster=no"]
        return [_ssh_binary(), *self.options(), *mode, "-T", self.spec.destination]

    # -- connection ------------------------------------------------------------------------------
    def connect(self) -> None:
        """Open (or re-open) the multiplexed master connection; raises MachineUnreachable."""
        with self._lock:
            if self._closed:
                raise MachineUnreachable(self.name, "connection closed")
            # The socket exists while the master lives (ssh removes it when the master exits); no
            # `ssh -O check` round trip per command.
            if self._master and os.path.exists(self._control_path()):
                return
            res = _run(self.ssh_argv(master=True), timeout=self._connect_wait)
            if not res.ok:
                self._master = False
                raise MachineUnreachable(self.name, _ssh_error(res))
            self._master = True

    def _check_master(self) -> bool:
        res = _run([_ssh_binary(), "-o", f"ControlPath={self._control_path()}", "-O", "check",
                    self.spec.destination], timeout=10)
        return res.ok

    def _exit_master(self, timeout: float) -> None:
        """Tell the master connection to end (its socket goes with it)."""
        _run([_ssh_binary(), "-o", f"ControlPath={self._control_path()}", "-O", "exit", self.spec.destination],
             timeout=timeout)

    def close(self) -> None:
        with self._lock:
            if self._master:
                self._exit_master(10)
            self._master = False
            self._closed = True
            if self._own_dir:
                shutil.rmtree(self._dir, ignore_errors=True)

    # -- the executor interface ------------------------------------------------------------------------
    def run(self, argv: Sequence[str], timeout: float | None = None, stdin: bytes | None = None,
            env: Mapping[str, str] | None = None, cwd: str | None = None) -> ExecResult:
        argv = [str(a) for a in argv]
        started = time.time()
        try:
            self.connect()
        except MachineUnreachable as exc:
            return ExecResult(argv, 255, "", f"ssh: cannot reach {self.name}: {exc.reason}", started, time.time())
        token = secrets.token_hex(8)
        remote = remote_command(argv, token, timeout=timeout, env=env, cwd=cwd)
        res = self._call(remote, stdin=stdin, timeout=None if timeout is None else timeout + 15, token=token)
        res.argv = argv
        res.started = started
        # timeout(1) exits 124 when the command timed out (137 after the follow-up SIGKILL).
        if timeout is not None and res.returncode in (124, 137) and res.seconds >= timeout:
            res.timed_out = True
        return res

    def _call(self, remote: str, *, stdin: bytes | None = None, stdin_file=None, stdout_file=None,
              timeout: float | None = None, token: str | None = None) -> ExecResult:
        """One command string over the master. On a local timeout or an interruption the remote
        processes carrying `token` are killed first: a multiplexed client hands its pipes to the
        master, so they stay open (and the command runs on) until the remote side ends."""
        argv = [*self.ssh_argv(), remote]
        started = time.time()
        proc = subprocess.Popen(argv, stdin=stdin_file if stdin_file is not None else
                                (subprocess.PIPE if stdin is not None else subprocess.DEVNULL),
                                stdout=stdout_file if stdout_file is not None else subprocess.PIPE,
                                stderr=subprocess.PIPE, start_new_session=True)
        timed_out = False
        try:
            out, err = proc.communicate(stdin, timeout=timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
            self._abort(proc, token)
            try:
                out, err = proc.communicate(timeout=5)
            except subprocess.TimeoutExpired:
                out, err = b"", b""
        except BaseException:
            self._abort(proc, token)
            raise
        return ExecResult(argv, proc.returncode if proc.returncode is not None else -9,
                          (out or b"").decode(errors="replace"), (err or b"").decode(errors="replace"),
                          started, time.time(), timed_out)

    def _abort(self, proc: subprocess.Popen, token: str | None) -> None:
        """Kill the remote command (by its token), then the local client."""
        if token:
            with contextlib.suppress(Exception):  # the connection itself may be what failed
                self.kill_matching([f"VIRTBENCH_EXEC={token}"])
        for sig in (signal.SIGTERM, signal.SIGKILL):
            try:
                os.killpg(proc.pid, sig)
            except ProcessLookupError:
                break
            try:
                proc.wait(timeout=3)
                break
            except subprocess.TimeoutExpired:
                continue
        for stream in (proc.stdout, proc.stderr, proc.stdin):
            if stream:
                with contextlib.suppress(OSError):
                    stream.close()

    def put(self, src: Path, dest: str, mode: int | None = None) -> None:
        script = 'cat > "$1"' + (' && chmod "$2" "$1"' if mode is not None else "")
        remote = shlex.join(["sh", "-c", script, "vb", dest, *([f"{mode:o}"] if mode is not None else [])])
        self.connect()
        with open(src, "rb") as fh:
            res = self._call(remote, stdin_file=fh, timeout=3600)
        if not res.ok:
            raise OSError(f"copying {src} to {self.name}:{dest} failed: {_ssh_error(res)}")

    def get(self, src: str, dest: Path) -> None:
        self.connect()
        with open(dest, "wb") as fh:
            res = self._call(shlex.join(["cat", "--", src]), stdout_file=fh, timeout=3600)
        if not res.ok:
            raise OSError(f"copying {self.name}:{src} failed: {_ssh_error(res)}")

    def spawn(self, argv: Sequence[str], log: str, env: Mapping[str, str] | None = None,
              cwd: str | None = None) -> Process:
        argv = [str(a) for a in argv]
        self.connect()
        remote = shlex.join(["sh", "-c", _SPAWN, "vb", cwd or "", log,
                             *(f"{k}={v}" for k, v in (env or {}).items()), *argv])
        res = self._call(remote, timeout=60)
        pid = res.stdout.strip()
        if not res.ok or not pid.isdigit():
            raise OSError(f"starting {argv[0]} on {self.name} failed: {_ssh_error(res)}")
        return Process(self, int(pid), log, argv)

    def kill_matching(self, patterns: list[str]) -> None:
        """Kill every process there whose environment or command line contains one of `patterns`:
        what one command, or one instance, started, daemons included."""
        self._call(shlex.join(["sh", "-c", KILL_MATCHING]), stdin="\n".join(patterns).encode(), timeout=20)

    def kill_group(self, pgid: int, grace: float = 2.0) -> None:
        self._call(shlex.join(["sh", "-c", _KILL, "vb", str(pgid), str(max(1, int(grace * 10)))]),
                   timeout=grace + 30)


    # -- forwards over the master ------------------------------------------------------------------
    @property
    def forwards(self) -> SshMachine:
        """The machine's ability to forward (Machine.forwards): itself, over its master connection."""
        return self

    def forward(self, remote_host: str, remote_port: int) -> tuple[str, int]:
        """(127.0.0.1, local port) reaching remote_host:remote_port as the machine sees it: a forward
        added to the running master (ssh -O forward), until cancel_forward or close."""
        last = ""
        for _ in range(5):  # a free local port may be taken before ssh binds it
            port = _free_local_port()
            res = self._mux("forward", f"127.0.0.1:{port}:{remote_host}:{remote_port}")
            if res.ok:
                self._forwards[("127.0.0.1", port)] = f"127.0.0.1:{port}:{remote_host}:{remote_port}"
                return "127.0.0.1", port
            last = _ssh_error(res)
        raise MachineUnreachable(self.name, f"cannot forward a local port to {remote_host}:{remote_port}: {last}")

    def forward_unix(self, remote_path: str) -> str:
        """A local UNIX socket path reaching the machine's socket `remote_path` (which need not exist
        yet: each connection is passed on when it is made)."""
        local = str(self._dir / f"fwd-{secrets.token_hex(6)}.sock")
        res = self._mux("forward", f"{local}:{remote_path}")
        if not res.ok:
            raise MachineUnreachable(self.name, f"cannot forward a local socket to {remote_path}: {_ssh_error(res)}")
        self._forwards[local] = f"{local}:{remote_path}"
        return local

    def cancel_forward(self, local: tuple[str, int] | str) -> None:
        """Remove a forward made by forward() (its address) or forward_unix() (its path)."""
        key = local if isinstance(local, str) else (local[0], int(local[1]))
        spec = self._forwards.pop(key, None)
        if spec and self._master:
            self._mux("cancel", spec)
        if isinstance(key, str):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(key)

    def _mux(self, op: str, spec: str) -> ExecResult:
        try:
            self.connect()
        except MachineUnreachable as exc:
            return ExecResult([], 255, "", exc.reason, time.time(), time.time())
        return _run([_ssh_binary(), *self.options(), "-O", op, "-L", spec, self.spec.destination], timeout=30)


def _free_local_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def remote_command(argv: Sequence[str], token: str, *, timeout: float | None = None,
                   env: Mapping[str, str] | None = None, cwd: str | None = None) -> str:
    """The one string ssh hands the remote login shell: the fixed wrapper and every argument
    quoted once (shlex.join), so each arrives unchanged."""
    limit = "0" if timeout is None else f"{timeout:.3f}".rstrip("0").rstrip(".")
    pairs = [f"{k}={v}" for k, v in (env or {}).items()]
    return shlex.join(["sh", "-c", _WRAPPER, "vb", cwd or "", limit, token, str(len(pairs)), *pairs,
                       *[str(a) for a in argv]])


SSH_ERROR = 255  # ssh's own exit status when it could not run the command


@dataclasses.dataclass(frozen=True)
class KeyPair:
    private: Path
    public_line: str

    @property
    def public_b64(self) -> str:
        """The base64 blob of an ed25519 public key (what goes on a kernel command line)."""
        return self.public_line.split()[1]


def make_keypair(directory: Path, comment: str = "virtbench", name: str = "id_ed25519") -> KeyPair:
    """A new ed25519 key pair without a passphrase in `directory` (a run's own key, or a host key)."""
    key = directory / name
    res = _run([_ssh_binary("ssh-keygen"), "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(key)],
               timeout=60)
    if not res.ok:
        raise UserError(f"ssh-keygen failed: {res.describe_failure()}")
    return KeyPair(key, Path(f"{key}.pub").read_text().strip())


def pinned_argv(destination: str, key_file: Path, known_hosts: Path, connect_timeout: int = 3) -> list[str]:
    """A plain `ssh` to a host this controller made (a testbed host): one key, only the pinned host
    keys, no user configuration, agent or master connection, never a prompt."""
    return [_ssh_binary(), "-F", "/dev/null", "-i", str(key_file), "-o", "IdentitiesOnly=yes",
            "-o", "IdentityAgent=none", "-o", f"UserKnownHostsFile={known_hosts}",
            "-o", "GlobalKnownHostsFile=/dev/null", "-o", "StrictHostKeyChecking=yes", "-o", "BatchMode=yes",
            "-o", f"ConnectTimeout={connect_timeout}", destination]


def answers(destination: str, key_file: Path, known_hosts: Path, timeout: float = 10) -> ExecResult:
    """Whether such a host runs `true` over ssh now (its result, with ssh's complaint when not)."""
    return _run([*pinned_argv(destination, key_file, known_hosts), "true"], timeout=timeout)


def _run(argv: list[str], timeout: float, stdin: bytes | None = None) -> ExecResult:
    from .. import procs  # late: procs is the local process runner this module is built beside

    return procs.run(argv, timeout=timeout, stdin=stdin)


def _ssh_error(res: ExecResult) -> str:
    """ssh's own complaint, with what to do for the common ones."""
    text = " | ".join(ln for ln in res.stderr.strip().splitlines()[-3:] if ln) or res.describe_failure()
    low = text.lower()
    if "host key verification failed" in low or "remote host identification has changed" in low:
        return text + " (the host key is not the pinned or known one: check the host, then its " \
                      "virtbench_host_key or known_hosts entry)"
    if "permission denied" in low:
        return text + " (the key was refused: check ansible_user and ansible_ssh_private_key_file)"
    if "connection refused" in low or "timed out" in low or "no route" in low:
        return text + " (is sshd running there, and the address and port right?)"
    return text
