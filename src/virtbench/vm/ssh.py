"""The command channel into a VM: OpenSSH with a per-run key, over a port QEMU forwards on 127.0.0.1
(of this machine, or of the VM's machine and then forwarded here over its SSH connection).

The ssh client always runs on this machine, through its executor (`machines.local()`). One master
connection per instance (ssh -M -f, in the background once it is up; it ends when the guest's
connection does, e.g. when QEMU is gone) carries every command as a multiplexed session, so a
command costs a session, not a key exchange. The guest's
host key is pinned (known_hosts with a fixed alias), never trusted on first use.

Commands are argument lists. ssh hands the remote side one string for the login shell, so every
argument is quoted with shlex.join; a timeout runs `timeout -k 5 T` inside the guest, so the
command dies there too, not just the local ssh client.
"""

from __future__ import annotations

import contextlib
import re
import shlex
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from .. import procs
from ..errors import MissingTool, UserError
from ..machines import local
from ..model import ExecResult

HOST_ALIAS = "virtbench-guest"
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
SSH_ERROR = 255


@dataclass(frozen=True)
class KeyPair:
    private: Path
    public_line: str

    @property
    def public_b64(self) -> str:
        """The base64 blob of an ed25519 public key (what goes on the kernel command line)."""
        return self.public_line.split()[1]


def make_keypair(directory: Path, comment: str = "virtbench") -> KeyPair:
    if not shutil.which("ssh-keygen"):
        raise MissingTool("ssh-keygen", "openssh-client", "the vm driver makes a key per run with it")
    key = directory / "id_ed25519"
    res = local().run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(key)], timeout=60)
    if not res.ok:
        raise UserError(f"ssh-keygen failed: {res.describe_failure()}")
    return KeyPair(key, Path(f"{key}.pub").read_text().strip())


def remote_command(argv: Sequence[str], env: Mapping[str, str] | None = None,
                   timeout: float | None = None) -> str:
    """The one string ssh sends: each argument quoted, env via env(1), timeout via timeout(1)."""
    argv = [str(a) for a in argv]
    if not argv:
        raise ValueError("empty command")
    words: list[str] = []
    if timeout is not None:
        words += ["timeout", "-k", "5", f"{max(timeout, 0.001):g}"]
    if env:
        bad = [k for k in env if not _ENV_NAME.match(k)]
        if bad:
            raise ValueError(f"invalid environment variable name(s): {', '.join(map(repr, bad))}")
        words += ["env", *(f"{k}={v}" for k, v in env.items())]
    return "exec " + shlex.join(words + argv)


class Channel:
    """SSH to one guest through 127.0.0.1:port of this machine."""

    def __init__(self, port: int, key: KeyPair, host_key_pub: str, workdir: Path):
        if not shutil.which("ssh"):
            raise MissingTool("ssh", "openssh-client", "the vm driver runs commands in guests over SSH")
        self.port = port
        self.key = key
        self.control = workdir / "ssh.sock"
        self.known_hosts = workdir / "known_hosts"
        self.known_hosts.write_text(f"{HOST_ALIAS} {' '.join(host_key_pub.split()[:2])}\n")
        self.opened = False

    def options(self) -> list[str]:
        return ["-F", "/dev/null", "-p", str(self.port), "-i", str(self.key.private),
                "-o", "IdentitiesOnly=yes", "-o", "BatchMode=yes", "-o", f"HostKeyAlias={HOST_ALIAS}",
                "-o", f"UserKnownHostsFile={self.known_hosts}", "-o", "GlobalKnownHostsFile=/dev/null",
                "-o", "StrictHostKeyChecking=yes", "-o", "UpdateHostKeys=no", "-o", "CheckHostIP=no",
                # Plain curve25519: the post-quantum default costs ~0.2 s more per connection under TCG.
                "-o", "KexAlgorithms=curve25519-sha256,curve25519-sha256@libssh.org",
                "-o", "ConnectTimeout=20", "-o", "ServerAliveInterval=10", "-o", "ServerAliveCountMax=6",
                "-o", "LogLevel=ERROR", "-o", f"ControlPath={self.control}"]

    # -- the master connection --------------------------------------------------------------
    def open(self, timeout: float = 30.0) -> str | None:
        """Start the master connection; None when it is up, else why it failed (caller retries)."""
        self.close()
        # -f: ssh returns once the connection is up and the control socket listens (or with the error).
        res = local().run(["ssh", *self.options(), "-M", "-f", "-N", "-T", "-o", "ControlPersist=no",
                           "root@127.0.0.1"], timeout=timeout)
        if res.ok and self.control.exists():
            self.opened = True
            return None
        if res.timed_out:
            return f"no SSH connection within {timeout:.0f} s"
        lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
        return lines[-1] if lines else f"ssh exited with status {res.returncode}"

    def is_open(self) -> bool:
        # The master removes its socket when it ends (the guest's connection closed).
        return self.opened and self.control.exists()

    def close(self) -> None:
        if self.opened and self.control.exists():
            local().run(["ssh", *self.options(), "-O", "exit", "root@127.0.0.1"], timeout=5)
        self.opened = False
        with contextlib.suppress(FileNotFoundError):
            self.control.unlink()

    # -- commands -----------------------------------------------------------------------------
    def _argv(self, command: str) -> list[str]:
        # ControlMaster=no: use the master, never become one (a dead master means a clear error).
        return ["ssh", *self.options(), "-o", "ControlMaster=no", "-T", "root@127.0.0.1", command]

    def exec(self, argv: Sequence[str], timeout: float | None = None, stdin: bytes | None = None,
             env: Mapping[str, str] | None = None) -> ExecResult:
        argv = [str(a) for a in argv]
        cmd = remote_command(argv, env, timeout)
        res = local().run(self._argv(cmd), timeout=None if timeout is None else timeout + 15, stdin=stdin)
        timed_out = res.timed_out or (timeout is not None and res.seconds >= timeout
                                      and res.returncode in (124, 137))
        return ExecResult(argv, res.returncode, res.stdout, res.stderr, res.started, res.ended, timed_out)

    def copy_in(self, src: Path, dest: str, timeout: float = 600) -> None:
        with open(src, "rb") as f:
            self._stream(f"exec cat > {shlex.quote(dest)}", stdin=f, stdout=subprocess.DEVNULL, timeout=timeout,
                         what=f"copy of {src} into the guest at {dest}")

    def copy_out(self, src: str, dest: Path, timeout: float = 600) -> None:
        tmp = dest.with_name(dest.name + ".partial")
        try:
            with open(tmp, "wb") as f:
                self._stream(f"exec cat {shlex.quote(src)}", stdin=subprocess.DEVNULL, stdout=f, timeout=timeout,
                             what=f"copy of the guest's {src} to {dest}")
            tmp.replace(dest)
        finally:
            with contextlib.suppress(FileNotFoundError):
                tmp.unlink()

    def _stream(self, command: str, *, stdin, stdout, timeout: float, what: str) -> None:
        # A pipe to and from files, not Machine.run: that holds output as text, and whole files in memory.
        proc = subprocess.Popen(self._argv(command), stdin=stdin, stdout=stdout, stderr=subprocess.PIPE,
                                start_new_session=True)
        try:
            _, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            procs.kill_group(proc)
            proc.communicate()
            raise OSError(f"{what} took longer than {timeout:.0f} s and was stopped") from None
        except BaseException:
            procs.kill_group(proc)
            proc.communicate()
            raise
        if proc.returncode != 0:
            tail = err.decode(errors="replace").strip().splitlines()[-2:]
            raise OSError(f"{what} failed (exit {proc.returncode}): {' | '.join(tail)}")
