"""The facts of this machine that decide which experiments of `virtbench reproduce` can run: the
accelerator QEMU has, a cluster, an NFS client, an inventory's hosts, a cloud, and how busy the CPU is
(cpu_probe, also what reproduce.py's estimates scale recorded times by)."""

from __future__ import annotations

import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from .errors import UserError


def machine_facts(kubeconfig: str | None, inventory: str | None = None, hosts: str = "all",
                  cloud: dict[str, Any] | None = None) -> dict[str, Any]:
    """What decides which experiments can run: the accelerator QEMU has, a cluster, an NFS client,
    the inventory's hosts (by name; whether they answer is found when they are used, as in `run`),
    the cloud of the --cloud settings (what answers its API)."""
    facts: dict[str, Any] = {"cores": os.cpu_count() or 1, "load_1m": _load(), "probe_s": cpu_probe(),
                             "cluster": bool(kubeconfig), "nfs": _has_nfs_client(),
                             "hosts": inventory_hosts(inventory, hosts) if inventory else [],
                             "cloud": cloud_facts(cloud, inventory) if cloud else None}
    facts["accelerator"], facts["accelerator_detail"] = _accelerator()
    return facts


def cloud_options(pairs: list[str] | tuple[str, ...]) -> dict[str, Any]:
    """--cloud KEY=VALUE ... -> the cloud driver's options (checked: a mistake stops the command now)."""
    from .boot import _coerce_options

    raw = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise UserError(f"--cloud {pair!r} is not KEY=VALUE",
                            "e.g. --cloud endpoint=https://ec2.example.org:8773/ --cloud image=ami-...")
        raw[key.strip()] = value.strip()
    opts = _coerce_options("cloud", raw)
    if not opts.get("image") and not opts.get("images"):
        raise UserError("--cloud needs an image: image=ID, or images=SIZE=ID,... (one image per size)",
                        "an image id of the region (ami-..., emi-...)")
    return opts


def cloud_facts(opts: dict[str, Any], inventory: str | None = None) -> dict[str, Any]:
    """What answers the cloud's API (moto's server is named "moto": it starts no machine) and whether
    SSH goes to stand-in hosts, as the cloud driver labels every result."""
    from .cloud import api
    from .machines import inventory as inventory_mod

    target = api.Target.from_options(opts)
    backend = api.backend(target)
    if opts.get("ssh_override"):
        if not inventory:
            raise UserError("--cloud ssh_override needs --inventory (the hosts SSH reaches instead)")
        specs = inventory_mod.load(inventory).select(opts["ssh_override"])
        backend += "+testbed" if specs and all(h.vars.get("virtbench_testbed") for h in specs) else "+ssh_override"
    return {"backend": backend, "region": target.region, "endpoint": target.endpoint_host,
            "emulated": backend.startswith("moto")}


def inventory_hosts(inventory: str, pattern: str = "all") -> list[str]:
    """The names of the inventory's hosts that `pattern` selects (a mistake stops the command now)."""
    from .machines import inventory as inventory_mod

    specs = inventory_mod.load(inventory).select(pattern)
    if not specs:
        raise UserError(f"--hosts {pattern!r} selects no host of {inventory}", "name a group or hosts of it")
    return [h.name for h in specs]


def _load() -> float | None:
    try:
        return os.getloadavg()[0]
    except OSError:
        return None


def _has_nfs_client() -> bool:
    try:
        text = Path("/proc/filesystems").read_text()
    except OSError:
        return False
    return any(line.split()[-1] in ("nfs", "nfs4") for line in text.splitlines() if line.strip())


def _accelerator() -> tuple[str | None, str]:
    """KVM only if a real probe boot works (cached by the vm driver); else TCG."""
    from . import drivers, image, machines
    from .drivers.base import DriverContext

    workdir = Path(tempfile.mkdtemp(prefix="virtbench-reproduce-probe-"))
    pool = machines.pool_for(None)
    try:
        ctx = DriverContext("reproduce-probe", workdir, image.require(), pool)
        got = drivers.make("vm", ctx).accelerator("auto")
        return got["accel"], got.get("kvm_problem") or ""
    except UserError as exc:
        return None, str(exc)
    finally:
        pool.close()
        shutil.rmtree(workdir, ignore_errors=True)


def cpu_probe(work: int = 200_000, rounds: int = 5) -> float:
    """Seconds a fixed piece of CPU work takes now (median of a few rounds): how busy the machine is for
    us. Load averages overstate it (niced builds, processes waiting on I/O); this measures it."""
    times = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        acc = 0
        for i in range(work):
            acc ^= i * 2654435761 % 4294967291
        times.append(time.perf_counter() - t0)
    return statistics.median(times)
