#!/usr/bin/env python3
"""What does virtbench add to the start of a container and of a VM? Time to ready through the
driver (from the `provision()` call to its "ready" mark, i.e. everything virtbench does before the
instance answers: host mount, labels, the readiness probe) against the same thing started by hand
with the same settings, interleaved (hand, virtbench, virtbench, hand, ...). The whole provision
call is printed too: after ready the driver reads the start time and address (one `podman inspect`),
which is not on the path to ready.

By hand means what a careful script would do:
  container: podman create + start with the same flags, then `podman exec NAME mkdir -p ...`
             retried until it succeeds;
  vm:        qemu-img create the overlay, start QEMU with the same devices and kernel command line
             (no QMP, no -S), then `ssh ... mkdir -p ...` retried every 0.1 s until it succeeds.
Target (issue 3): virtbench within 5 % or 20 ms of by hand, whichever is larger.

    python bench/start_overhead.py [--driver vm|container|both] [--rounds 5]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from virtbench import image, procs, stats  # noqa: E402
from virtbench.drivers.container import driver as ctr  # noqa: E402
from virtbench.drivers.base import DriverContext  # noqa: E402
from virtbench.drivers.container.engine import Engine  # noqa: E402
from virtbench.drivers.vm.driver import VmDriver  # noqa: E402
from virtbench.drivers.vm.instance import SCRATCH  # noqa: E402
from virtbench.machines import local  # noqa: E402
from virtbench.model import EnvSpec, Shape  # noqa: E402
from virtbench.drivers.vm import disk, qemu  # noqa: E402

SHAPE = Shape("bench", vcpus=1, memory_mb=256)


# -- container -----------------------------------------------------------------------------------

def container_virtbench(driver: ctr.ContainerDriver, env: EnvSpec) -> tuple[float, float]:
    """(call to ready, whole provision call): what a user waits for the instance to answer, and for
    the driver to hand it back (after ready it reads the start time and address: podman inspect)."""
    t0 = time.time()
    (inst,) = driver.provision(env, 1, "bench")
    wall = time.time() - t0
    to_ready = inst.lifecycle["ready"] - t0
    inst.teardown()
    return to_ready, wall


def container_by_hand(engine: Engine, info: image.ImageInfo) -> float:
    name = f"vb-hand-{uuid.uuid4().hex[:8]}"
    cli = engine.cli()
    t0 = time.monotonic()
    try:
        res = procs.run([*cli, "create", "--name", name, "--pull=never", *engine.run_flags(), "--cpus", "1",
                         "--memory", "256m", "--memory-swap", "256m", "--network", "bridge", info.tag, "sleep",
                         "infinity"], timeout=120)
        assert res.ok, res.stderr
        assert procs.run([*cli, "start", name], timeout=120).ok
        while not procs.run([*cli, "exec", name, "mkdir", "-p", "/tmp/vb-scratch"], timeout=60).ok:
            time.sleep(0.02)
        return time.monotonic() - t0
    finally:
        procs.run([*cli, "rm", "-f", "-t", "0", name], timeout=120)


# -- vm --------------------------------------------------------------------------------------------

VM_PHASES: list[dict[str, float]] = []


def vm_virtbench(driver: VmDriver, env: EnvSpec) -> tuple[float, float]:
    """(call to ready, whole provision call), as for containers; the phase split goes to VM_PHASES."""
    t0 = time.time()
    (inst,) = driver.provision(env, 1, "bench")
    wall = time.time() - t0
    lc = inst.lifecycle
    to_ready = lc["ready"] - t0
    uptime = inst.guest_uptime_at_init or 0.0  # the guest kernel's clock when our initramfs ran
    VM_PHASES.append({
        "disk + QEMU start (call -> created)": lc["created"] - t0,
        "QMP cont (created -> running)": lc["running"] - lc["created"],
        "firmware + kernel load (running -> guest clock 0)": lc["init"] - lc["running"] - uptime,
        "kernel + initramfs to root init (guest uptime)": uptime,
        "root init -> sshd -> a command over SSH (init -> ready)": lc["ready"] - lc["init"],
    })
    inst.teardown()
    return to_ready, wall


def print_vm_phases(accel: str) -> None:
    """Where a VM's time to ready goes (medians), and the fastest start seen."""
    if not VM_PHASES:
        return
    print(f"\n  vm phases ({accel}), medians over {len(VM_PHASES)} starts through virtbench:")
    for key in VM_PHASES[0]:
        print(f"    {key:58s} {statistics.median(p[key] for p in VM_PHASES):7.3f} s")


def vm_by_hand(driver: VmDriver, env: EnvSpec, workdir: Path) -> float:
    """The same QEMU as the driver's (devices, kernel, append line), started and polled by hand."""
    settings = driver.settings(env)
    base = disk.ensure_base(driver.image, None)
    d = workdir / f"hand-{uuid.uuid4().hex[:6]}"
    d.mkdir()
    proc = None
    t0 = time.monotonic()
    try:
        overlay = d / "disk.qcow2"
        assert procs.run(["qemu-img", "create", "-q", "-f", "qcow2", "-F", "raw", "-b", str(base.path),
                          str(overlay)], timeout=60).ok
        # Borrow the driver's command line: an instance object that is never started.
        inst = driver._new(env, "hand", 0, base, settings)
        inst.disk_path, inst.disk_format, inst.port = overlay, "qcow2", qemu.free_port(local())
        argv = inst.qemu_config().argv(str(d / "qmp.sock"), str(d / "console.sock"))
        driver._live.discard(inst)  # never started: nothing to tear down
        # Drop -S and QMP; the console goes nowhere.
        out, skip = [], 0
        for i, a in enumerate(argv):
            if skip:
                skip -= 1
                continue
            if a == "-S":
                continue
            if a in ("-chardev", "-mon") and ("qmp" in argv[i + 1] or "id=con" in argv[i + 1]):
                skip = 1
                continue
            if a == "-serial":
                out += ["-serial", "null"]
                skip = 1
                continue
            out.append(a)
        proc = subprocess.Popen(out, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                start_new_session=True)
        key = driver.keypair()
        kh = d / "known_hosts"
        alias = "virtbench-guest"
        kh.write_text(f"{alias} {' '.join(driver.boot.host_key_pub.split()[:2])}\n")
        cmd = ["ssh", "-F", "/dev/null", "-p", str(inst.port), "-i", str(key.private), "-o", "BatchMode=yes",
               "-o", "IdentitiesOnly=yes", "-o", f"HostKeyAlias={alias}", "-o", f"UserKnownHostsFile={kh}",
               "-o", "KexAlgorithms=curve25519-sha256", "-o", "ConnectTimeout=5", "-o", "LogLevel=ERROR",
               "root@127.0.0.1", f"mkdir -p {SCRATCH}"]
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline:
            if procs.run(cmd, timeout=30).ok:
                return time.monotonic() - t0
            time.sleep(0.1)
        raise RuntimeError("the hand-started VM never answered")
    finally:
        if proc is not None:
            procs.kill_group(proc)
        shutil.rmtree(d, ignore_errors=True)


# -- main --------------------------------------------------------------------------------------------

def compare(label: str, hand: list[float], tool: list[float], wall: list[float]) -> dict:
    r = stats.ratio(tool, hand, higher_is_better=False)
    mh, mt = statistics.median(hand), statistics.median(tool)
    allowed = max(0.05 * mh, 0.020)
    verdict = "within" if mt - mh <= allowed else "OUTSIDE"
    print(f"\n{label}: {len(hand)} interleaved rounds")
    print(f"  by hand   : median {mh:.3f} s  [min {min(hand):.3f}, max {max(hand):.3f}]")
    print(f"  virtbench : median {mt:.3f} s  [min {min(tool):.3f}, max {max(tool):.3f}]  (call to ready mark)")
    print(f"  virtbench's whole provision call (ready, then inspect for start time and address): median "
          f"{statistics.median(wall):.3f} s")
    print(f"  virtbench - hand = {mt - mh:+.3f} s; ratio {r.ratio:.3f} 95% CI [{r.ci_low:.3f}, {r.ci_high:.3f}]")
    print(f"  target: within max(5 %, 20 ms) = {allowed * 1000:.0f} ms: {verdict}")
    return {"label": label, "hand": hand, "virtbench": tool, "provision_wall": wall, "median_hand": mh,
            "median_virtbench": mt, "difference": mt - mh, "allowed": allowed, "verdict": verdict}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--driver", choices=("vm", "container", "both"), default="both")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--json", help="also write the raw numbers here")
    args = ap.parse_args()
    info = image.require()
    out = []
    with tempfile.TemporaryDirectory(prefix="vb-bench-") as tmp:
        work = Path(tmp)
        if args.driver in ("container", "both"):
            driver = ctr.ContainerDriver(DriverContext(f"bench{uuid.uuid4().hex[:6]}", work, info))
            env = EnvSpec("ctr", "container", SHAPE, {})
            engine = driver.engine_for({})
            container_virtbench(driver, env)  # warm-up: engine probe, image import, page cache
            container_by_hand(engine, info)
            hand, tool, wall = [], [], []
            for i in range(args.rounds):
                for which in ((0, 1) if i % 2 == 0 else (1, 0)):
                    if which == 0:
                        hand.append(container_by_hand(engine, info))
                    else:
                        w, r = container_virtbench(driver, env)
                        tool.append(w)
                        wall.append(r)
            out.append(compare("container (podman)", hand, tool, wall))
        if args.driver in ("vm", "both"):
            driver = VmDriver(DriverContext(f"bench{uuid.uuid4().hex[:6]}", work, info))
            env = EnvSpec("vm", "vm", SHAPE, {"ready_timeout": 600.0})
            accel = driver.settings(env)["accel"]
            vm_virtbench(driver, env)  # warm-up: boot files, base disk, accelerator probe, page cache
            hand, tool, wall = [], [], []
            for i in range(args.rounds):
                for which in ((0, 1) if i % 2 == 0 else (1, 0)):
                    if which == 0:
                        hand.append(vm_by_hand(driver, env, work))
                    else:
                        w, r = vm_virtbench(driver, env)
                        tool.append(w)
                        wall.append(r)
            out.append(compare(f"vm (QEMU {accel}, 1 vCPU, 256 MB, overlay)", hand, tool, wall))
            print(f"  lowest time to ready through virtbench: {min(tool):.3f} s")
            print_vm_phases(accel)
            out[-1]["phases"] = VM_PHASES
    load = os.getloadavg()
    print(f"\nhost load average during the run: {load[0]:.1f} {load[1]:.1f} {load[2]:.1f} on {os.cpu_count()} CPUs")
    if args.json:
        Path(args.json).write_text(json.dumps({"results": out, "loadavg": load}, indent=1))


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        main()
