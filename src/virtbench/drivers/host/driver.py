"""The bare host: commands run as local processes, with the same native binaries the image holds."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path

from .. import cpuset
from ... import kernels
from ...model import EnvSpec, ExecResult
from ...errors import UserError
from ..base import Driver, Instance, OptionSpec, Problem, ScratchSpace, Traits


class HostInstance(Instance):
    def __init__(self, name: str, env: EnvSpec, workdir: Path, role: str, index: int):
        super().__init__(name, env, role, index)
        parent = env.options.get("scratch") or workdir
        try:
            self._scratch = Path(tempfile.mkdtemp(prefix=f"{name}-", dir=parent))
        except OSError as exc:
            raise UserError(f"cannot make a scratch directory under {parent}: {exc.strerror}",
                            "set the environment's scratch option to an existing, writable directory") from None
        self.address = "127.0.0.1"
        self.cpuset = env.options.get("cpuset") or ""

    def exec(self, argv: Sequence[str], timeout: float | None = None, stdin: bytes | None = None,
             env: Mapping[str, str] | None = None) -> ExecResult:
        if (gone := self._gone(argv)) is not None:
            return gone
        # Pinned: the command and everything it starts stay on the cpuset (util-linux taskset).
        pin = ["taskset", "-c", self.cpuset] if self.cpuset else []
        return self.machine.run([*pin, *argv], timeout=timeout, stdin=stdin, env=env)  # this machine

    def metadata(self) -> dict:
        return {**super().metadata(), **({"cpuset": self.cpuset} if self.cpuset else {})}

    def bin(self, name: str) -> str:
        return str(kernels.native_bin_dir() / name)

    def scratch_dir(self) -> str:
        return str(self._scratch)

    def _destroy(self) -> None:
        shutil.rmtree(self._scratch, ignore_errors=True)


class HostDriver(Driver):
    name = "host"
    traits = Traits(repetition_overhead_s=0.1, host_process=True, is_machine=True, real_machine=True, shares_kernel=True, machine_cores=True,
                    monitor_scope=None)
    description = "the local machine, no isolation (the usual baseline)"
    supports_shapes = False
    options = {"scratch": OptionSpec(str, "", "directory for the workloads' temporary files "
                                             "(default: a private directory under $TMPDIR)"),
               "cpuset": cpuset.OPTION}

    @classmethod
    def scratch_space(cls, env: EnvSpec) -> ScratchSpace | None:
        where = env.options.get("scratch") or tempfile.gettempdir()
        if not os.path.isdir(where):
            return None
        return ScratchSpace(f"in the free space of {where}", shutil.disk_usage(where).free, shared=True)

    def check_env(self, env: EnvSpec) -> list[Problem]:
        return cpuset.problems(env.options.get("cpuset") or "", self.name)

    def check(self, env: EnvSpec | None = None) -> list[Problem]:
        problems = []
        if not (kernels.native_bin_dir() / "vb-system").exists():
            problems.append(Problem(f"native kernels not built in {kernels.native_bin_dir()}",
                                    f"run: {kernels.advice()}"))
        return problems

    def provision(self, env: EnvSpec, count: int = 1, role: str = "main") -> list[Instance]:
        out = []
        for i in range(count):
            inst = HostInstance(f"{env.name}-{role}-{i}", env, self.context.workdir, role, i)
            # Nothing to start: every phase happens at once.
            for phase in ("requested", "created", "running", "init", "ready"):
                inst.mark(phase)
            out.append(inst)
        return out
