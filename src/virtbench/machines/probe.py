"""What a host offers virtbench (`virtbench hosts`): one fixed shell script, one round trip.

`probe_host(machine)` runs PROBE_SCRIPT there as `sh -c SCRIPT` and `parse_probe` turns its
key=value lines into a dict (pure, tested on captured output). Nothing of the user's identity is
kept: no user names, home directories or key paths, also not inside ssh's error messages.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from .base import Machine, MachineUnreachable

# Fixed text: no parameters are ever put into it. Every value is one line (head -n1) so that the
# output stays key=value lines; a tool that is missing prints nothing for its key.
PROBE_SCRIPT = r"""
echo "probe=1"
echo "arch=$(uname -m)"
echo "kernel=$(uname -r)"
echo "hostname=$(uname -n)"
echo "cores=$(nproc 2>/dev/null || getconf _NPROCESSORS_ONLN 2>/dev/null || echo 0)"
m=$(grep -m1 '^model name' /proc/cpuinfo 2>/dev/null | cut -d: -f2- | sed 's/^ *//')
echo "cpu_model=$m"
echo "memory_kb=$(awk '/^MemTotal:/ {print $2}' /proc/meminfo 2>/dev/null)"
if [ -e /dev/kvm ]; then
  if [ -r /dev/kvm ] && [ -w /dev/kvm ]; then echo "kvm=rw"; else echo "kvm=denied"; fi
else
  echo "kvm=absent"
fi
t=""
if command -v timeout >/dev/null 2>&1; then t="timeout 15"; fi
if command -v podman >/dev/null 2>&1; then echo "podman=$($t podman --version 2>/dev/null | head -n1)"; fi
if command -v docker >/dev/null 2>&1; then
  if $t docker info >/dev/null 2>&1; then echo "docker=$($t docker --version 2>/dev/null | head -n1)";
  else echo "docker_unavailable=1"; fi
fi
if command -v mpirun >/dev/null 2>&1; then echo "mpirun=$($t mpirun --version 2>&1 | head -n1)"; fi
if command -v python3 >/dev/null 2>&1; then echo "python3=$(python3 --version 2>&1 | head -n1)"; fi
echo "probe_end=1"
"""

KVM_PRESENT = "device present (boot not tried)"
KVM_DENIED = "device present, not writable by this user (boot not tried)"
KVM_ABSENT = "no /dev/kvm"

FIELDS = ("reachable", "reason", "kernel", "cpu_model", "cores", "memory_mb", "arch", "kvm", "podman",
          "docker", "mpi", "python3")  # plus "notes": a list of remarks (always present)

_VERSION = re.compile(r"(\d+(?:\.\d+)+\S*)")


def _version(text: str | None) -> str | None:
    if not text:
        return None
    m = _VERSION.search(text)
    return m.group(1).rstrip(",") if m else None


def parse_probe(text: str) -> dict[str, Any]:
    """PROBE_SCRIPT's output -> reachable=True plus kernel, cpu_model, cores, memory_mb, arch, kvm,
    podman, docker, mpi (Open MPI version), python3 (versions, or None where missing). Pure.

    `kvm` says only what the device node allows: whether KVM really boots a guest on the host is
    known once a guest boots there, which the remote VM driver's own probe will do; until then the
    field says "device present (boot not tried)", never "yes"."""
    raw: dict[str, str] = {}
    for line in text.splitlines():
        k, sep, v = line.partition("=")
        if sep and k.strip():
            raw[k.strip()] = v.strip()
    if raw.get("probe") != "1":
        return _unreachable("the probe printed nothing it knows")
    cores = raw.get("cores", "")
    kb = raw.get("memory_kb", "")
    kvm = {"rw": KVM_PRESENT, "denied": KVM_DENIED, "absent": KVM_ABSENT}.get(raw.get("kvm", ""), "unknown")
    mpirun = raw.get("mpirun") or ""
    out: dict[str, Any] = {
        "reachable": True,
        "reason": None,
        "kernel": raw.get("kernel") or None,
        "cpu_model": raw.get("cpu_model") or None,
        "cores": int(cores) if cores.isdigit() and int(cores) > 0 else None,
        "memory_mb": int(kb) // 1024 if kb.isdigit() else None,
        "arch": raw.get("arch") or None,
        "kvm": kvm,
        "podman": _version(raw.get("podman")),
        "docker": _version(raw.get("docker")),
        "mpi": _version(mpirun) if "open mpi" in mpirun.lower() else None,
        "python3": _version(raw.get("python3")),
    }
    notes = []
    if mpirun and out["mpi"] is None:
        notes.append(f"mpirun is not Open MPI: {mpirun[:80]}")
    if "docker_unavailable" in raw:
        notes.append("docker is installed but `docker info` does not answer (daemon down or no access)")
    if raw.get("probe_end") != "1":
        notes.append("the probe's output was cut short")
    out["notes"] = notes
    return out


def probe_host(machine: Machine, timeout: float = 90) -> dict[str, Any]:
    """Run the probe on `machine`; an unreachable machine is a row with reachable=False and why."""
    try:
        res = machine.run(["sh", "-c", PROBE_SCRIPT], timeout=timeout)
    except MachineUnreachable as exc:
        return _unreachable(scrub(exc.reason, machine))
    except OSError as exc:
        return _unreachable(scrub(str(exc), machine))
    if "probe=1" not in res.stdout.splitlines():
        # ssh exits 255 when it could not connect: its own message says why.
        tail = " | ".join(ln for ln in res.stderr.strip().splitlines()[-3:] if ln)
        why = tail if res.returncode == 255 and tail and not res.timed_out else res.describe_failure()
        return _unreachable(scrub(why, machine))
    data = parse_probe(res.stdout)
    if not res.ok:
        data["notes"].append("probe script failed: " + scrub(res.describe_failure(), machine))
    return data


def probe_hosts(specs: Sequence, connect: Callable[[Any], Machine], workers: int = 8,
                resolve: Callable[[str], tuple[str, int] | None] | None = None,
                boot: Callable[[Machine], str] | None = None) -> list[dict[str, Any]]:
    """Probe every host in parallel (at most `workers` at once); rows in the order of `specs`,
    each with the host's `name` and `address` (never its user or key). `resolve(name)` gives
    (host, port) for hosts without an address (ssh's own config: `sshconfig.ssh_config_address`)."""
    def one(spec) -> dict[str, Any]:
        row = {"name": spec.name, "address": _address(spec, resolve)}
        machine = None
        try:
            machine = connect(spec)
            row.update(probe_host(machine))
            if boot and row.get("reachable"):
                row["kvm"] = boot(machine)
        except MachineUnreachable as exc:
            row.update(_unreachable(scrub(exc.reason, machine, spec)))
        except OSError as exc:
            row.update(_unreachable(scrub(str(exc), machine, spec)))
        finally:
            if machine is not None:
                try:
                    machine.close()
                except Exception:  # closing a dead connection must not hide the probe's result
                    pass
        return row

    if not specs:
        return []
    with ThreadPoolExecutor(max_workers=max(1, min(workers, len(specs)))) as pool:
        return list(pool.map(one, specs))


def _address(spec, resolve=None) -> str:
    dest, port = spec.destination, spec.port
    if spec.address is None and resolve is not None:
        found = resolve(spec.name)
        if found:
            dest, port = found[0], port or (found[1] if found[1] != 22 else None)
    return f"{dest}:{port}" if port else dest


def _unreachable(reason: str) -> dict[str, Any]:
    return {**{f: None for f in FIELDS}, "reachable": False, "reason": reason or "unreachable", "notes": []}


def scrub(text: str, machine: Machine | None = None, spec=None) -> str:
    """An error message without user names, home directories or key paths (ssh puts them there)."""
    spec = spec or getattr(machine, "spec", None)
    secrets = []
    for value in (getattr(spec, "key_file", None), getattr(spec, "known_hosts", None)):
        if value:
            secrets.append((value, "<key file>" if value == getattr(spec, "key_file", None) else "<known_hosts>"))
    for value, label in secrets:
        text = text.replace(value, label)
    text = re.sub(r"(?<![\w/])/(?:home|Users)/[^/\s:]+", "~", text)
    text = re.sub(r"(?<![\w/])/root(?=/)", "~", text)
    text = re.sub(r"[\w.+-]+@(?=[\w.:\[\]-]+)", "<user>@", text)
    user = getattr(spec, "user", None)
    if user:
        text = re.sub(rf"(?<![\w-]){re.escape(user)}(?![\w-])", "<user>", text)
    return text
