"""A VM guest as a Machine: the vm driver's machine kind, the same OpenSSH code as remote hosts
(machines/ssh.py) with the settings a guest of this controller needs."""

from __future__ import annotations

import dataclasses
import os

from ...machines import MachineUnreachable
from ...machines.inventory import HostSpec
from ...machines.ssh import KeyPair, SshMachine

GUEST_KEX = "curve25519-sha256,curve25519-sha256@libssh.org"  # cheap under TCG (see GuestMachine)


class GuestMachine(SshMachine):
    """A VM guest, reached by this same code: root with the run's key on a port forwarded to this
    machine's 127.0.0.1, its host key pinned (made with the image), the user's ssh configuration
    left out (it must not apply to 127.0.0.1), and a kex that costs little under TCG (the
    post-quantum default costs ~0.2 s more per connection there)."""

    kind = "guest"

    def __init__(self, name: str, key: KeyPair, host_key_pub: str, port: int = 0):
        super().__init__(HostSpec(name, "127.0.0.1", port or None, "root", str(key.private),
                                  host_key=" ".join(host_key_pub.split()[:2])))

    @property
    def reached_via(self) -> str | None:
        return None

    def set_port(self, port: int) -> None:
        """The forwarded port changed (QEMU started again on another one)."""
        with self._lock:
            self.spec = dataclasses.replace(self.spec, port=port)
            self._options = None

    def _first_options(self) -> list[str]:
        return ["-F", "/dev/null", "-o", "ConnectTimeout=20", "-o", "ServerAliveInterval=10",
                "-o", "ServerAliveCountMax=6", "-o", f"KexAlgorithms={GUEST_KEX}", "-o", "UpdateHostKeys=no",
                "-o", "CheckHostIP=no", "-o", "LogLevel=ERROR"]

    def open(self, timeout: float = 30.0) -> str | None:
        """Bring the master connection up within `timeout`: None when it is up, else why not (the
        caller retries while the guest boots)."""
        self._connect_wait = timeout
        try:
            self.connect()
            return None
        except MachineUnreachable as exc:
            return exc.reason

    def is_open(self) -> bool:
        # The master removes its socket when it ends (the guest's connection closed).
        return self._master and os.path.exists(self._control_path())

    def disconnect(self) -> None:
        """End the master connection (the guest reboots); open() makes a new one."""
        with self._lock:
            if self._master and os.path.exists(self._control_path()):
                self._exit_master(5)
            self._master = False
