"""Container engines (podman, or docker where a Docker engine answers) on a machine: which one
answers, the settings a container can start with there, and the guest image in its store. Below
the drivers: the container driver and the pods' kube-play backend both use it.

What works differs between machines (crun vs runc, cgroup v1 vs v2, which ulimits the runtime may
set), so the first use probes a tiny `run --rm ... true` with candidate settings, keeps the first
that works for the life of the process, and records it in every instance's metadata. Every engine
call goes through the executor of the machine the engine runs on, so probing, the image import and
the caches are per machine. On a remote machine the guest image tarball is shipped once into its
content-addressed blob cache (machines/ship.py) and imported there.
"""

from __future__ import annotations

import functools
import json
import os
import shlex
import shutil
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ... import image
from . import ociruntime
from ...errors import ConditionUnavailable, MissingTool, UserError
from ...machines import Machine, MachineUnreachable, Process, local, ship
from ...machines.base import KILL_GROUP, SPAWN
from ...model import ExecResult

CLI_TIMEOUT = 120.0
# Rootful podman hands conmon RLIMIT_NPROC 32768 on these machines, so a container cannot be given
# more even when our own hard limit is higher; the last resort is the 1024 that always worked.
NPROC_CAP = 32768

_lock = threading.RLock()
_engines: dict[tuple, Engine] = {}  # (machine name, cmd, tag, runtime choice, cgroup manager) -> Engine
# (machine name, cmd, tag) of images the engine has (mark_imported: what boot.py and run/checks.py commit).
_imported: set[tuple] = set()


@dataclass(frozen=True)
class Engine:
    """One probed, working way of running containers."""

    cmd: str  # podman | docker
    version: str
    runtime: str
    cgroup_manager: str
    cgroup_version: str
    ulimits: tuple[str, ...]
    init: bool
    forced_runtime: bool = False
    # The runtime's binary (podman runs it by this path), its version, its options (gVisor's platform
    # and network, as (key, value) pairs) and why an option's first choice was not taken.
    runtime_path: str = ""
    runtime_version: str = ""
    runtime_options: tuple[tuple[str, str], ...] = ()
    runtime_note: str = ""

    @property
    def options(self) -> dict[str, str]:
        return dict(self.runtime_options)

    def network(self) -> str:
        """The engine network a container joins: none where gVisor's network is off, else the bridge."""
        return "none" if self.options.get("network") == "none" else "bridge"

    def cli(self) -> list[str]:
        # podman takes runtime, its flags and the cgroup manager as global flags; pass them on every
        # call so create, exec and rm all agree.
        if self.cmd == "podman":
            return ["podman", *ociruntime.engine_flags(self.runtime_path or self.runtime, self.options),
                    "--cgroup-manager", self.cgroup_manager]
        return ["docker"]

    def run_flags(self) -> list[str]:
        flags = [f for u in self.ulimits for f in ("--ulimit", u)]
        if self.init:
            flags.append("--init")
        if self.cmd == "docker" and self.forced_runtime:
            flags += ["--runtime", self.runtime]
        return flags

    def describe(self) -> dict[str, Any]:
        return {"engine": self.cmd, "engine_version": self.version, "runtime": self.runtime,
                "runtime_path": self.runtime_path, "runtime_version": self.runtime_version,
                "runtime_options": self.options, "runtime_label": ociruntime.label(self.runtime, self.options),
                **({"runtime_note": self.runtime_note} if self.runtime_note else {}),
                "cgroup_manager": self.cgroup_manager, "cgroup_version": self.cgroup_version,
                "ulimits": list(self.ulimits), "init": self.init}


def _run(machine: Machine, argv: Sequence[str], timeout: float | None = CLI_TIMEOUT,
         stdin: bytes | None = None) -> ExecResult:
    return machine.run(argv, timeout=timeout, stdin=stdin, cwd=cwd_for(machine))


def cwd_for(machine: Machine) -> str | None:
    """Where engine commands run on `machine`: on this one, a private directory of this user's; on an SSH
    host, `engine` under its virtbench_dir. conmon (podman's container monitor) inherits the engine's
    working directory, and Debian 12's creates its `oom` marker file there when a container is
    OOM-killed: not in the user's current directory (or home). Every call that starts a container
    (run, start, restart, kube play) goes through here."""
    return machine.private_workdir()


def tail(res: ExecResult, lines: int = 3) -> str:
    text = (res.stderr.strip() or res.stdout.strip()).splitlines()[-lines:]
    return " | ".join(text) or res.describe_failure()


_picked: dict[tuple, str] = {}


def pick_engine(choice: str = "auto", machine: Machine | None = None) -> str:
    """podman if installed and answering, else docker if its engine answers. A working answer is
    kept per machine for the process: `podman info` costs about a second, and every provision asks."""
    machine = machine or local()
    try:  # an unreachable host says so, rather than "podman is not installed"
        machine.connect()
    except MachineUnreachable as exc:
        raise UserError(f"cannot reach {machine.name} to run containers there: {exc.reason}",
                        "check the host with: virtbench hosts --inventory FILE") from None
    key = (machine.name, choice, machine.which("podman"), machine.which("docker"))  # a changed PATH asks again
    if key not in _picked:
        _picked[key] = _pick_engine(choice, machine)
    return _picked[key]


def _pick_engine(choice: str, machine: Machine) -> str:
    if choice not in ("auto", "podman", "docker"):
        raise UserError(f"unknown container engine '{choice}'", hint="use auto, podman or docker")
    on = machine.on
    podman_err = None
    if choice in ("auto", "podman") and machine.which("podman"):
        res = _run(machine, ["podman", "info", "--format", "json"], timeout=60)
        if res.ok:
            return "podman"
        podman_err = tail(res)
    if choice in ("auto", "docker") and machine.which("docker"):
        if _run(machine, ["docker", "info"], timeout=60).ok:
            return "docker"
        if choice == "docker":
            raise UserError(f"the docker client is installed{on} but no Docker engine answers ('docker info' failed)",
                            hint="start the Docker daemon, or use engine = \"podman\"")
    if podman_err:
        raise UserError(f"podman is installed{on} but 'podman info' fails: {podman_err}")
    if choice == "docker":
        raise MissingTool("docker", "docker.io", on.strip())
    raise MissingTool("podman", "podman runc", f"the container driver runs containers with it{on}")


def _facts(cmd: str, machine: Machine) -> dict[str, str]:
    """Version, default runtime, cgroup manager and version, as the engine reports them."""
    if cmd == "podman":
        host = json.loads(_run(machine, ["podman", "info", "--format", "json"]).stdout)["host"]
        ver = _run(machine, ["podman", "version", "--format", "{{.Client.Version}}"]).stdout.strip()
        return {"version": ver, "runtime": host.get("ociRuntime", {}).get("name", ""),
                "cgroup_manager": host.get("cgroupManager", ""), "cgroup_version": host.get("cgroupVersion", "")}
    info = json.loads(_run(machine, ["docker", "info", "--format", "{{json .}}"]).stdout)
    return {"version": info.get("ServerVersion", ""), "runtime": info.get("DefaultRuntime", ""),
            "cgroup_manager": info.get("CgroupDriver", ""), "cgroup_version": str(info.get("CgroupVersion", "")),
            "init": "1" if info.get("InitBinary") else ""}


_NOFILE_INF, _NPROC_INF = 1 << 20, 1 << 22  # what "unlimited" becomes in a --ulimit value
# Soft and hard limits of open files and processes (bash: ulimit -u, dash: -p) of a shell there.
_LIMITS = "ulimit -Sn; ulimit -Hn; { ulimit -Su || ulimit -Sp; } 2>/dev/null; { ulimit -Hu || ulimit -Hp; } 2>/dev/null"


def _limits(machine: Machine) -> tuple[tuple[int, int], tuple[int, int]]:
    """(nofile, nproc) as (soft, hard) of a process on the machine where the engine runs."""
    res = machine.run(["sh", "-c", _LIMITS], timeout=60)
    words = res.stdout.split()
    if not res.ok or len(words) != 4 or not all(w.isdigit() or w == "unlimited" for w in words):
        return (1024, 1024), (1024, 1024)  # unknown: the candidates end with these anyway
    n = [inf if w == "unlimited" else int(w) for w, inf in zip(words, (_NOFILE_INF,) * 2 + (_NPROC_INF,) * 2)]
    return (n[0], n[1]), (n[2], n[3])


def _ulimit_candidates(machine: Machine) -> list[tuple[str, ...]]:
    """The machine's own limits first (a container should get what a host process gets), then capped ones."""
    nofile, nproc = _limits(machine)
    capped = tuple(min(v, NPROC_CAP) for v in nproc)
    out = []
    for nf, npr in ((nofile, nproc), (nofile, capped), ((1024, 1024), (1024, 1024))):
        cand = (f"nofile={nf[0]}:{nf[1]}", f"nproc={npr[0]}:{npr[1]}")
        if cand not in out:
            out.append(cand)
    return out


_CATATONIT = ("/usr/libexec/podman/catatonit", "/usr/lib/podman/catatonit")


def _has_catatonit(machine: Machine) -> bool:
    script = " || ".join(f"test -e {shlex.quote(p)}" for p in _CATATONIT) + " || command -v catatonit"
    return machine.run(["sh", "-c", script], timeout=60).ok


def probe(cmd: str, tag: str, runtime: str = "auto", cgroup_manager: str = "auto",
          machine: Machine | None = None, platform: str = "", network: str = "") -> Engine:
    """First working (runtime, cgroup manager, ulimits) for `cmd` on `machine`, cached for the process.
    An explicit runtime (and its options) is the only one tried: when it does not start a container,
    that is the error, with the runtime's own words and what to do."""
    machine = machine or local()
    choice = ociruntime.Choice(runtime, platform, network)
    key = (machine.name, cmd, tag, choice, cgroup_manager)
    with _lock:
        if key in _engines:
            return _engines[key]
        facts = _facts(cmd, machine)
        if cmd == "podman":
            managers = [cgroup_manager] if cgroup_manager != "auto" else list(dict.fromkeys(
                m for m in (facts["cgroup_manager"], "cgroupfs") if m))
            init = _has_catatonit(machine)
        else:
            if cgroup_manager != "auto":
                raise UserError("docker sets its cgroup driver in the daemon, not per container",
                                hint="remove cgroup_manager from this environment")
            if choice.platform or choice.network:
                raise UserError("docker takes gVisor's flags from the runtime's entry in its daemon configuration, "
                                "not per container", hint="remove platform/network from this environment and "
                                "register runsc with them (runsc install --runtime NAME -- --platform=...)")
            managers = [facts["cgroup_manager"]]
            init = bool(facts.get("init"))
        if runtime == "auto":
            runtimes = [facts["runtime"]] if cmd != "podman" else list(dict.fromkeys(
                r for r in (facts["runtime"], "runc", "crun") if r and (r == facts["runtime"] or machine.which(r))))
            eng = _first_working(cmd, tag, machine, facts, runtimes, managers, init, choice, explicit=False)
        else:
            eng = _explicit(cmd, tag, machine, facts, managers, init, choice)
        _engines[key] = eng
        return eng


def _explicit(cmd: str, tag: str, machine: Machine, facts: dict, managers: list[str], init: bool,
              choice: ociruntime.Choice) -> Engine:
    """The runtime the environment named, or a UserError with its reason: never another one."""
    if cmd == "podman":
        ociruntime.resolve(machine, choice.runtime)  # missing: MissingTool with its package
    if choice.gvisor and choice.platform == "kvm":
        _require_kvm(machine)
    return _first_working(cmd, tag, machine, facts, [choice.runtime], managers, init, choice, explicit=True)


def _require_kvm(machine: Machine) -> None:
    """gVisor's kvm platform needs KVM that really runs guests; the vm driver's probe boot knows."""
    from ..vm.site import accelerator_of

    try:
        got = accelerator_of(machine)
    except Exception as exc:  # no QEMU or no image: KVM cannot be shown to work
        raise UserError(f"gVisor's kvm platform needs KVM that runs guests, and it could not be tried{machine.on}: "
                        f"{str(exc).splitlines()[0]}", "use platform = \"ptrace\"") from None
    if got.get("accel") != "kvm":
        raise UserError(f"gVisor's kvm platform needs KVM that runs guests, and KVM does not{machine.on}: "
                        f"{got.get('kvm_problem') or 'a probe guest did not boot with KVM'}",
                        "use platform = \"ptrace\" (no KVM needed)")


_probe_seq = 0


def _try(machine: Machine, eng: Engine, tag: str) -> ExecResult:
    """One `run --rm ... true` under a name of ours, removed again if it did not finish (a runtime that
    hangs, e.g. gVisor's kvm platform without working KVM, must not leave a sandbox behind)."""
    global _probe_seq
    _probe_seq += 1
    name = f"vb-probe-{os.getpid()}-{_probe_seq}"
    res = _run(machine, [*eng.cli(), "run", "--rm", "--name", name, "--pull=never", *eng.run_flags(),
                         "--network", eng.network(), tag, "true"], timeout=PROBE_TIMEOUT)
    if not res.ok:
        try:
            remove(machine, eng.cli(), eng.cmd, name, tries=2)
        except UserError:
            pass  # the failure below says what happened; the leftovers sweep finds it by name later
    return res


PROBE_TIMEOUT = 60.0


def _first_working(cmd: str, tag: str, machine: Machine, facts: dict, runtimes: list[str], managers: list[str],
                   init: bool, choice: ociruntime.Choice, explicit: bool) -> Engine:
    tried, notes = [], []
    for rt in runtimes:
        path = ociruntime.resolve(machine, rt) if cmd == "podman" and (explicit or rt.startswith("/")) else ""
        ver = ociruntime.version(machine, path or rt) if machine.which(path or rt) else ""
        name = ociruntime.kind(rt) or rt.rsplit("/", 1)[-1]
        for net in choice.networks():
            opts = tuple(sorted(ociruntime.Choice(rt, choice.platform, choice.network).options(net).items()))
            for mgr in managers:
                for ul in _ulimit_candidates(machine):
                    eng = Engine(cmd, facts["version"], name, mgr, facts["cgroup_version"], ul, init,
                                 forced_runtime=explicit, runtime_path=path, runtime_version=ver,
                                 runtime_options=opts, runtime_note="; ".join(notes))
                    res = _try(machine, eng, tag)
                    if res.ok:
                        return eng
                    why = tail(res, 2) if not res.timed_out else f"timed out after {PROBE_TIMEOUT:g} s"
                    shown = " ".join(f"{k}={v}" for k, v in opts)
                    tried.append(f"runtime={rt} {shown + ' ' if shown else ''}cgroup_manager={mgr} {' '.join(ul)}: {why}")
                    if "rlimit" not in res.stderr.lower():
                        break  # not a ulimit problem: lower limits will not help
            if net:
                notes.append(f"network {net} did not start: {why}")
    if explicit:
        raise UserError(f"{cmd} cannot start a container with runtime {choice.runtime}"
                        f"{' (' + ver + ')' if ver else ''}{machine.on}; tried:\n  " + "\n  ".join(tried),
                        ociruntime.hint(choice.runtime, " ".join(tried), ver))
    hint = "set runtime/cgroup_manager for this environment, or apt-get install runc"
    if any("no cgroup mount found" in t for t in tried):
        # Seen where podman runs under `ip netns exec`, which mounts a fresh /sys without cgroups.
        hint = (f"the OCI runtime finds no cgroup filesystem{machine.on}: /sys/fs/cgroup is not mounted in "
                "the mount namespace podman runs in (e.g. a shell started by `ip netns exec`, which "
                "remounts /sys); mount the cgroup hierarchies there, or enter the network namespace "
                "with `nsenter --net=/run/netns/NAME`, which keeps /sys")
    raise UserError(f"{cmd} cannot start a container{machine.on}; tried:\n  " + "\n  ".join(tried), hint)


def ensure_image(cmd: str, info: image.ImageInfo, machine: Machine | None = None) -> None:
    """Import the guest image tarball under its tag unless the engine already has it (once per
    process and machine). A remote machine gets the tarball through its blob cache first."""
    machine = machine or local()
    with _lock:
        if (machine.name, cmd, info.tag) in _imported:
            return
        # Elsewhere always through the blob cache (one `test -f` once it is there): that verified copy
        # is what an import there reads, now or after the engine's images were pruned.
        source = ship.ensure_blob(machine, info.tarball, ship.file_sha256(info.tarball), info.tarball.name)
        if not _run(machine, [cmd, "image", "inspect", info.tag], timeout=60).ok:
            res = _run(machine, [cmd, "import", "--change", 'CMD ["/bin/sh"]', source, info.tag], timeout=1800)
            if not res.ok:
                raise UserError(f"{cmd} import of the guest image{machine.on} failed: {tail(res)}")
        if machine.is_local:  # a remote engine may hold images of other virtbench installations
            remove_pruned_images(cmd)
        _imported.add((machine.name, cmd, info.tag))


def mark_imported(cmd: str, tag: str, machine: Machine | None = None) -> None:
    """An image the engine on `machine` (default: this one) already holds under `tag` (a commit
    made there): neither import it nor prune it."""
    with _lock:
        _imported.add(((machine or local()).name, cmd, tag))


def cli_for(machine: Machine, cmd: str) -> list[str]:
    """The engine's command line as probed on `machine` (its global flags), or just `cmd`."""
    return next((e.cli() for k, e in _engines.items() if k[0] == machine.name and e.cmd == cmd), [cmd])


def remove_pruned_images(cmd: str) -> list[str]:
    """Drop this engine's copies of guest images (and their padded variants, `<hash>-pad<n>`) whose
    tarball this data directory pruned (image.pruned: never one a live process uses, never one of
    another data directory); one in a container stays too (no force). The references removed."""
    res = _run(local(), [cmd, "images", "--format", "{{.Repository}}:{{.Tag}}"], timeout=60)
    removed = []
    for ref in res.stdout.split():
        repo, _, tag = ref.rpartition(":")
        if repo == image.TAG_PREFIX and image.pruned(tag.partition("-pad")[0]):
            if _run(local(), [cmd, "rmi", ref], timeout=120).ok:
                removed.append(ref)
    return removed


def remove(machine: Machine, cli: list[str], cmd: str, name: str, tries: int = 4) -> None:
    """Remove a container in whatever state. A start cut short (Ctrl-C, SIGTERM) can leave its mounts
    busy for a moment ("device or resource busy"), so a failed removal is tried again."""
    for attempt in range(tries):
        res = _run(machine, [*cli, "rm", "-f", *(["-t", "0"] if cmd == "podman" else []), name], timeout=CLI_TIMEOUT)
        if res.ok or "no such container" in (res.stderr + res.stdout).lower():
            return
        if attempt < tries - 1:
            time.sleep(1.0 + attempt)
    raise UserError(f"{cmd} rm {name} failed: {tail(res)}")


@functools.lru_cache(maxsize=4)
def engine_storage(engine: str) -> tuple[str | None, int | None]:
    """(where the container engine here keeps containers' files, bytes free there); (None, None) if
    unknown. Kept for the process: `podman info` takes about a second."""
    try:
        cmd = pick_engine(engine)
        fmt = "{{.DockerRootDir}}" if cmd == "docker" else "{{.Store.GraphRoot}}"
        res = _run(local(), [cmd, "info", "--format", fmt], timeout=60)
        root = res.stdout.strip()
        return (root, shutil.disk_usage(root).free) if res.ok and os.path.isdir(root) else (None, None)
    except Exception:  # no engine: the driver's own check says so with its fix
        return None, None


def padded_image(engine: Engine, info: image.ImageInfo, size: str, log: Callable[[str], None]) -> image.ImageInfo:
    """The guest image plus a layer of `size` random bytes, committed under its own tag (cached)."""
    from ..vm import disk

    nbytes = disk.parse_size(size)
    tarball_bytes = info.tarball.stat().st_size
    pad = nbytes - tarball_bytes
    if pad <= 0:
        raise ConditionUnavailable(f"image size {size} is smaller than the container image "
                                   f"({disk.format_size(tarball_bytes)})")
    padded = image.ImageInfo(f"{info.hash}-pad{nbytes}", info.tarball, info.manifest)
    cli = engine.cli()
    here = local()
    # Known to the engine already: tell the container driver so it neither imports nor prunes it.
    known = (engine.cmd, padded.tag)
    if _run(here, [*cli, "image", "inspect", padded.tag], timeout=60).ok:
        mark_imported(*known)
        return padded
    log(f"building a {size} container image (padding with {disk.format_size(pad)} of random data)")
    name = f"vb-pad-{os.getpid()}-{nbytes}"
    # head -c from /dev/urandom inside the container: incompressible bytes in a new layer.
    script = (f"mkdir -p {shlex.quote(os.path.dirname(disk.PAD_PATH))} && "
              f"head -c {pad} /dev/urandom > {shlex.quote(disk.PAD_PATH)}")
    res = _run(here, [*cli, "run", "--name", name, *engine.run_flags(), "--pull=never", info.tag, "sh", "-c",
                      script], timeout=3600)
    try:
        if not res.ok:
            raise UserError(f"padding the container image failed: {res.describe_failure()}")
        res = _run(here, [*cli, "commit", "-q", name, padded.tag], timeout=3600)
        if not res.ok:
            raise UserError(f"podman commit of the padded image failed: {res.describe_failure()}")
    finally:
        _run(here, [*cli, "rm", "-f", name], timeout=120)
    mark_imported(*known)
    return padded


class ContainerMachine(Machine):
    """The inside of one container: commands by the engine's exec, files by its cp, every engine call
    through the Machine of the host the engine runs on (so a container on an SSH host is the same)."""

    kind = "container"

    def __init__(self, name: str, host: Machine, engine: Engine):
        super().__init__(name, None)
        self.host, self.engine = host, engine

    @property
    def on(self) -> str:
        return f" in {self.name}"

    def _cli(self, *args: str, timeout: float | None = CLI_TIMEOUT, stdin: bytes | None = None) -> ExecResult:
        return self.host.run([*self.engine.cli(), *args], timeout=timeout, stdin=stdin, cwd=cwd_for(self.host))

    def run(self, argv: Sequence[str], timeout: float | None = None, stdin: bytes | None = None,
            env: Mapping[str, str] | None = None, cwd: str | None = None) -> ExecResult:
        argv = [str(a) for a in argv]
        cmd = ["exec", *(["-i"] if stdin is not None else [])]
        for k, v in (env or {}).items():
            cmd += ["--env", f"{k}={v}"]
        if cwd:
            cmd += ["--workdir", cwd]
        cmd.append(self.name)
        if timeout is not None:
            # coreutils timeout inside the container, so the timed-out process dies in there too;
            # the outer timeout only guards against a hung engine.
            cmd += ["timeout", "-k", "5", f"{timeout:.3f}".rstrip("0").rstrip(".")]  # never 1e+06
        res = self._cli(*cmd, *argv, timeout=None if timeout is None else timeout + 15, stdin=stdin)
        timed_out = res.timed_out or (timeout is not None and res.seconds >= timeout
                                      and res.returncode in (124, 137))
        return ExecResult(argv, res.returncode, res.stdout, res.stderr, res.started, res.ended, timed_out)

    def put(self, src: Path, dest: str, mode: int | None = None) -> None:
        with self.host.staged(src) as there:  # the engine copies from a file on its machine
            res = self._cli("cp", there, f"{self.name}:{dest}", timeout=600)
        if not res.ok:
            raise OSError(f"copy of {src} into {self.name}:{dest} failed: {tail(res)}")
        if mode is not None:
            self.run(["chmod", f"{mode:o}", dest], timeout=60)

    def get(self, src: str, dest: Path) -> None:
        with self.host.fetched(dest) as there:  # the engine copies to a file on its machine
            res = self._cli("cp", f"{self.name}:{src}", there, timeout=600)
            if not res.ok:
                raise OSError(f"copy of {self.name}:{src} to {dest} failed: {tail(res)}")

    def spawn(self, argv: Sequence[str], log: str, env: Mapping[str, str] | None = None,
              cwd: str | None = None) -> Process:
        argv = [str(a) for a in argv]
        res = self.run(["sh", "-c", SPAWN, "vb", cwd or "", log, *(f"{k}={v}" for k, v in (env or {}).items()),
                        *argv], timeout=60)
        pid = res.stdout.strip()
        if not res.ok or not pid.isdigit():
            raise OSError(f"starting {argv[0]} in {self.name} failed: {tail(res)}")
        return Process(self, int(pid), log, argv)

    def kill_group(self, pgid: int, grace: float = 2.0) -> None:
        self.run(["sh", "-c", KILL_GROUP, "vb", str(pgid), str(max(1, int(grace * 10)))], timeout=grace + 30)
