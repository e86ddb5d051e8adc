"""`virtbench doctor`: what this machine can run, and how to fix what it cannot."""

from __future__ import annotations

import re
import shlex
import shutil
import tempfile
from pathlib import Path
from typing import Any

from .. import drivers, kernels, paths
from ..drivers.base import DriverContext

# Programs the set-up needs, with the Debian package that brings each.
TOOLS = {
    "cc": ("build-essential", "compiles virtbench's native kernels"),
    "make": ("make", "builds the native kernels"),
    "mmdebstrap": ("mmdebstrap", "builds the guest image"),
    "podman": ("podman runc", "runs the container environment"),
    "mpicc": ("libopenmpi-dev openmpi-bin", "builds the MPI kernels"),
    "mpirun": ("openmpi-bin", "runs MPI workloads"),
    "qemu-system-x86_64": ("qemu-system-x86", "runs the vm environment"),
    "qemu-img": ("qemu-utils", "makes the vm environment's instance disks"),
    "ssh": ("openssh-client", "runs commands in VMs"),
}


def checks() -> list[dict[str, Any]]:
    out = []
    for tool, (package, why) in TOOLS.items():
        where = shutil.which(tool)
        out.append({"name": f"tool {tool}", "ok": bool(where), "detail": where or f"missing ({why})",
                    "fix": f"apt-get install {package}"})
    out.append(kernels_check())
    out.append(_image_check())
    out.append(_db_check())
    with tempfile.TemporaryDirectory(prefix="virtbench-doctor-") as tmp:
        ctx = DriverContext("doctor", Path(tmp))
        for name in drivers.implementations():  # pods' two drivers each
            try:
                problems = drivers.make(name, ctx).check()
            except Exception as exc:  # a broken driver must not hide the others
                problems = [drivers.base.Problem(f"{type(exc).__name__}: {exc}", "report this as a bug")]
            out.append({"name": f"driver {name}", "ok": not problems,
                        "detail": "; ".join(p.what for p in problems) or "ready",
                        "fix": "; ".join(p.fix for p in problems)})
    out += runtime_checks()
    out += _condition_checks()
    out.append(cluster_check())
    out.append(_podman_netns_check())
    return out


# OCI runtimes doctor looks for, and Kata's binaries: found ones are listed, Kata's without a claim.
RUNTIMES = ("runc", "crun", "runsc")
KATA = ("kata-runtime", "containerd-shim-kata-v2")


def runtime_checks() -> list[dict[str, Any]]:
    """One row per OCI runtime installed here: a container really started with it through podman
    (gVisor with its default platform and network), or why not and what to do."""
    from .. import image
    from ..drivers.container import ociruntime
    from ..drivers.container.engine import pick_engine, probe
    from ..errors import UserError

    found = [r for r in RUNTIMES if shutil.which(r)]
    rows = [{"name": f"runtime {k}", "ok": True, "fix": "",
             "detail": f"found ({shutil.which(k)}), not tried: Kata runs each container in a KVM guest, "
                       "which virtbench does not drive; nothing is claimed for it"} for k in KATA if shutil.which(k)]
    if not found:
        return [{"name": "runtime runc", "ok": False, "detail": "no OCI runtime installed (runc, crun, runsc)",
                 "fix": "apt-get install runc"}] + rows
    try:
        cmd = pick_engine("podman")
        info = image.require()
    except UserError as exc:
        return [{"name": f"runtime {r}", "ok": False, "detail": f"not tried: {exc.message}",
                 "fix": exc.hint or ""} for r in found] + rows
    for rt in found:
        try:
            eng = probe(cmd, info.tag, rt)
        except UserError as exc:
            why = exc.message.splitlines()[-1].strip().split(": ", 1)[-1]  # the runtime's words, not our settings
            rows.append({"name": f"runtime {rt}", "ok": False, "detail": f"does not start a container: {why}",
                         "fix": exc.hint or ""})
            continue
        note = f" ({eng.runtime_note})" if eng.runtime_note else ""
        rows.append({"name": f"runtime {rt}", "ok": True, "fix": "",
                     "detail": f"works: {ociruntime.label(eng.runtime, eng.options)}, version "
                               f"{eng.runtime_version or 'unknown'} ({eng.runtime_path}){note}",
                     "runtime": eng.runtime, "version": eng.runtime_version, "options": eng.options})
    return rows


def cluster_check() -> dict[str, Any]:
    """The Kubernetes cluster the pods driver's kubernetes backend would use: KUBECONFIG's, else the
    testbed cluster up on this machine, whatever its name (`virtbench testbed k8s up [--name X]`):
    which one, server version, nodes and whether each is Ready."""
    from ..drivers.pods.testbed.status import describe, which_cluster
    from ..drivers.pods.kubernetes_backend import explain_failure

    kc, what = which_cluster()
    if kc is None:
        return {"name": "kubernetes cluster", "ok": True, "detail": f"none configured ({what})",
                "fix": "virtbench testbed k8s up starts one on this machine"}
    try:
        d = describe(kc)
    except Exception as exc:
        e = explain_failure(exc, "of the kubeconfig", kc)
        return {"name": "kubernetes cluster", "ok": False, "detail": f"{what}: {e.message}", "fix": e.hint or ""}
    nodes = ", ".join(f"{n['name']} ({'Ready' if n['ready'] else 'NotReady'})" for n in d["nodes"]) or "no nodes"
    ok = bool(d["nodes"]) and all(n["ready"] for n in d["nodes"])
    return {"name": "kubernetes cluster", "ok": ok, "detail": f"{what}: {d['server']} {d['server_version']} "
            f"(kubeconfig {kc}): {nodes}", "fix": "" if ok else "kubectl describe node NAME says why"}


def host_checks(inventory_path: str) -> list[dict[str, Any]]:
    """One check per inventory host: reachable over SSH, and what it has (virtbench hosts' probe)."""
    from ..machines import inventory, probe
    from ..machines import machine_for

    inv = inventory.load(inventory_path)
    out = []
    for row in probe.probe_hosts(list(inv.hosts.values()), machine_for):
        if row["reachable"]:
            detail = (f"{row['address']}: {row['kernel']}, {row['cores']} cores, {row['cpu_model']}; "
                      f"mpi {row['mpi'] or 'none'}, podman {row['podman'] or 'none'}, kvm {row['kvm']}")
        else:
            detail = f"{row['address']}: unreachable: {row['reason']}"
        out.append({"name": f"host {row['name']}", "ok": bool(row["reachable"]), "detail": detail,
                    "fix": f"check it with: {ssh_check_command(inv.hosts[row['name']])}"})
    return out


def ssh_check_command(host) -> str:
    """The ssh command line that tries what virtbench tries: the inventory's address, port, user,
    key and known_hosts file, run `true` there."""
    argv = ["ssh", "-o", "BatchMode=yes"]
    if host.port:
        argv += ["-p", str(host.port)]
    if host.user:
        argv += ["-l", host.user]
    if host.key_file:
        argv += ["-i", host.key_file]
    if host.known_hosts:
        argv += ["-o", f"UserKnownHostsFile={host.known_hosts}"]
    return shlex.join(argv + [host.destination, "true"])


def _condition_checks() -> list[dict[str, Any]]:
    """Storage targets and network conditions: which work here, and why not where they do not."""
    out = []
    try:
        from ..conditions import hostnet, targets

        for kind, (ok, why) in targets.availability().items():
            out.append({"name": f"storage {kind}", "ok": ok, "detail": "ready" if ok else why,
                        "fix": "" if ok else "cells with this target are skipped with this reason"})
        proxy = (kernels.native_bin_dir() / hostnet.PROXY_BIN).exists()
        for key, kind in (("delay_ms", "netem"), ("rate_mbit", "tbf")):
            ok, why = hostnet.tc_supports(kind)
            if ok:
                detail, fix = f"tc {kind}", ""
            elif proxy:
                detail, fix = f"user-space proxy ({why})", ""
            else:
                detail, fix = f"neither tc {kind} ({why}) nor the proxy", kernels.advice()
            out.append({"name": f"condition {key}", "ok": ok or proxy, "detail": detail, "fix": fix})
    except Exception as exc:  # a broken check must not hide the others
        out.append({"name": "conditions", "ok": False, "detail": f"{type(exc).__name__}: {exc}",
                    "fix": "report this as a bug"})
    return out


# podman's (root) network namespaces: /run/netns/netns-<uuid>.
PODMAN_NETNS = re.compile(r"netns-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


def orphan_podman_netns(netns_dir: Path = Path("/run/netns")) -> list[str]:
    """podman's network namespaces here that no container refers to (`NetworkSettings.SandboxKey`
    of every container, running or not) and no process is in: what a conmon killed with its container
    can leave. They are podman's, so doctor names them with the command; it never deletes them.
    RuntimeError when podman cannot say which containers refer to which."""
    from .. import procs

    names = sorted(p.name for p in netns_dir.glob("netns-*") if PODMAN_NETNS.fullmatch(p.name)) \
        if netns_dir.is_dir() else []
    if not names:
        return []
    ids = procs.run(["podman", "ps", "-a", "--format", "{{.ID}}"], timeout=60)
    if not ids.ok:
        raise RuntimeError(f"podman ps -a failed: {ids.stderr.strip()[-300:]}")
    used: set[str] = set()
    if ids.stdout.split():
        keys = procs.run(["podman", "inspect", "--format", "{{.NetworkSettings.SandboxKey}}", *ids.stdout.split()],
                         timeout=60)
        if not keys.ok and not keys.stdout.strip():  # a container removed meanwhile fails only its own line
            raise RuntimeError(f"podman inspect failed: {keys.stderr.strip()[-300:]}")
        used = {Path(k.strip()).name for k in keys.stdout.splitlines() if k.strip()}
    orphans = []
    for name in names:
        if name in used or not (netns_dir / name).exists():
            continue
        pids = procs.run(["ip", "netns", "pids", name], timeout=30)
        if pids.ok and not pids.stdout.split():
            orphans.append(name)
    return orphans


def _podman_netns_check() -> dict[str, Any]:
    name = "podman network namespaces"
    if not shutil.which("podman") or not shutil.which("ip"):
        return {"name": name, "ok": True, "detail": "podman or ip not installed", "fix": ""}
    try:
        orphans = orphan_podman_netns()
    except (RuntimeError, OSError) as exc:
        return {"name": name, "ok": True, "detail": f"not checked: {exc}", "fix": ""}
    if not orphans:
        return {"name": name, "ok": True, "detail": "no orphan in /run/netns", "fix": ""}
    return {"name": name, "ok": False,
            "detail": f"{len(orphans)} orphan(s) in /run/netns, no container refers to them and no process "
                      f"is in them (left by a killed conmon?): {', '.join(orphans)}",
            "fix": "; ".join(f"ip netns delete {n}" for n in orphans)}


def kernels_check() -> dict[str, Any]:
    """Built or not, and what builds them for the way virtbench was installed (clone or package)."""
    bin_dir = kernels.native_bin_dir()
    built = sorted(p.name for p in bin_dir.glob("vb-*")) if bin_dir.exists() else []
    kind = "clone" if paths.is_clone() else "installed package"
    detail = f"{bin_dir} ({kind}): {', '.join(built) or 'none built'}"
    packages = kernels.missing_packages()
    fix = (f"apt-get install {' '.join(packages)} && " if packages else "") + kernels.advice()
    lacking = [k for k in kernels.MPI_KERNELS if k not in built]
    if "vb-system" in built and lacking:  # ok for the other workloads; say what the MPI ones need
        detail += f"; no {', '.join(lacking)} (MPI workloads): {fix}"
    return {"name": "native kernels", "ok": "vb-system" in built, "detail": detail, "fix": fix}


def _image_check() -> dict[str, Any]:
    try:
        from .. import image

        info = image.find()
    except Exception as exc:
        return {"name": "guest image", "ok": False, "detail": getattr(exc, "message", str(exc)),
                "fix": f"{kernels.advice()} && virtbench image build"}
    if info is None:
        return {"name": "guest image", "ok": False, "detail": "not built for the current kernels and packages",
                "fix": "virtbench image build"}
    return {"name": "guest image", "ok": True, "detail": f"{info.hash} ({info.tarball})", "fix": ""}


def _db_check() -> dict[str, Any]:
    db = paths.default_db()
    try:
        from ..store import Store

        Store(db)
        return {"name": "results database", "ok": True, "detail": str(db), "fix": ""}
    except Exception as exc:
        return {"name": "results database", "ok": False, "detail": f"{db}: {exc}",
                "fix": "check permissions of the data directory or set VIRTBENCH_DATA"}
