"""What every command that starts instances shares (`run`, `boot`, `check`): the run id, a work
directory of this process, the pool of the run's machines, the drivers (one each, with the guest
image when it needs it), the sweep of what killed runs left, the run's registration with the local
testbeds its inventory names and as the owner of what it makes, and, however the command ends, the
final drain of the sweeps' reports and the teardown of the pool and the work directory.

Instances are the command's own: it tears them down (with its conditions) before the session ends.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

from .. import drivers, machines, procs
from ..drivers.base import Driver, DriverContext
from ..errors import UserError
from ..machines import owners
from ..model import EnvSpec
from ..store import Store


class Session:
    def __init__(self, run_id: str, *, inventory: str | None = None, store: Store | None = None,
                 note: Callable[[str], None] | None = None, environments: Sequence[EnvSpec] = ()):
        self.run_id = run_id
        self.inventory = inventory  # an inventory file: its hosts, and the local testbeds it names
        self.environments = list(environments)  # and the testbeds these run on (a `testbed k8s` cluster)
        self.store = store  # where the leftovers the sweeps removed are recorded (`virtbench show`)
        self.note = note or (lambda message: None)
        self.workdir: Path | None = None
        self.machines: machines.Pool | None = None
        self.context: DriverContext | None = None
        self._drivers: dict[str, Driver] = {}
        self._stack = contextlib.ExitStack()

    def __enter__(self) -> Session:
        try:
            with procs.interrupts_deferred():  # a signal waits until the path is kept for _end
                self.workdir = owners.local_workdir(f"virtbench-{self.run_id}-", self.run_id)
            self.machines = machines.pool_for(self.inventory)
            self.context = DriverContext(self.run_id, self.workdir, None, self.machines)
            self._stack.enter_context(self._testbeds_used())
            self._stack.enter_context(owners.running(self.run_id))
        except BaseException:
            self._end()
            raise
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self._end()

    def driver(self, kind: str, options: Mapping[str, Any] | None = None) -> Driver:
        """The session's driver of kind `kind` with `options` (pods: its backend picks the driver), made
        on first use (the guest image found then if it needs it)."""
        name = drivers.resolve(kind, options)
        if name not in self._drivers:
            if drivers.driver_class(name).needs_image and self.context.image is None:
                from .. import image

                self.context.image = image.require()
            self._drivers[name] = drivers.make(name, self.context)
        return self._drivers[name]

    def sweep(self, machine: str | None = None) -> None:
        """Sweep a machine of the run (None: this one) and report what the run's sweeps removed."""
        self.report_removed(self.machines.sweep(machine))

    def report_removed(self, names: list[str]) -> None:
        """Name each leftover the run's sweeps removed in its notes, and in the store when it has one."""
        for name in names:
            self.note(f"removed a leftover of an earlier run: {name}")
            if self.store is not None:
                self.store.add_event(self.run_id, "removed", name)

    def _end(self) -> None:
        # Ctrl-C now must not leave half of it undone.
        with procs.interrupts_held():
            if self.machines is not None:
                try:  # the run's last report: sweeps still going, machines handed out late
                    self.report_removed(self.machines.drain())
                except Exception as exc:  # noqa: BLE001 - the command's own outcome must not be hidden
                    self.note(f"could not record the leftovers removed: {type(exc).__name__}: {exc}")
                self.machines.close()
            self._stack.close()
            if self.workdir is not None:
                owners.remove_local(self.workdir)

    def _testbeds_used(self) -> contextlib.AbstractContextManager:
        """While it runs, the run is registered with the local testbeds its inventory names and those
        its environments run on (a `testbed k8s` cluster: Driver.testbeds_used), so their `down` will
        not remove them under it."""
        from ..machines import inventory as inventory_mod
        from ..machines import testbed_owner

        names: list[str] = []
        if self.inventory:
            try:
                hosts = inventory_mod.load(self.inventory).hosts.values()
                names = sorted({str(h.vars["virtbench_testbed"]) for h in hosts if h.vars.get("virtbench_testbed")})
            except (UserError, OSError):
                pass  # the drivers report an unreadable inventory
        states = [testbed_owner.state_dir(n) for n in names if re.fullmatch(r"[a-z][a-z0-9]{0,9}", n)]
        for env in self.environments:
            with contextlib.suppress(UserError, OSError):  # unknown driver, unreadable kubeconfig: said later
                states += drivers.class_for(env).testbeds_used(env)
        return testbed_owner.used_in(list(dict.fromkeys(states)), self.run_id, str(self.store.url) if self.store else "")
