"""Which accelerator works here: KVM only if a real guest kernel actually boots with it.

`/dev/kvm` existing (or even KVM_CREATE_VM succeeding) proves nothing: on nested machines a guest
can hang in early boot, and `-cpu host` can abort QEMU. So the probe boots the image's kernel
without a root filesystem and waits for the kernel's own "VFS ... unable to mount root" panic on
the serial console: a kernel that gets there ran its whole early boot. The result is cached per
(machine, its boot, QEMU version, kernel), so one process per host boot pays for it. It runs on the
VM's machine through its executor: a remote KVM host gives KVM.

The cache is shared by every virtbench process of the user (checkouts included), so it keeps only
what holds for the whole boot: an attempt that failed for a passing reason (QEMU killed by another
process, KVM busy with another hypervisor) leaves the result uncached, and the details keep no pid
(QEMU names the process that signalled it; that pid means nothing to a later reader).
"""

from __future__ import annotations

import json
import os
import re
import threading
import time
from pathlib import Path

from ...machines import Machine
from . import qemu

KVM_TIMEOUT = 20.0  # a working KVM reaches the panic in well under a second
TCG_TIMEOUT = 90.0
# (accelerator, -cpu) in order of preference.
CANDIDATES = (("kvm", "host"), ("kvm", None), ("tcg", None))
ROOT_PANIC = ("Unable to mount root", "Cannot open root")
# QEMU's line when a signal ends it: "terminating on signal 15 from pid 123 (python3)".
SIGNALLED_RE = re.compile(r"terminating on signal (\d+)(?: from pid \d+(?: \([^)]*\))?)?")
# KVM held by another hypervisor (VirtualBox, another VMM): it may be free again later.
BUSY = "Device or resource busy"

PASSING = "(passing) "  # a failure that may not recur: the probe's result is not cached
_lock = threading.Lock()


def try_boot(machine: Machine, accel: str, cpu: str | None, kernel: str, timeout: float) -> tuple[bool, str, float]:
    """(reached the kernel's root-mount panic, what happened, seconds). With panic=-1 and -no-reboot
    QEMU exits by itself right after the panic; a guest stuck in early boot is killed at `timeout`.
    What happened starts with PASSING when the failure says nothing lasting about the accelerator."""
    argv = [qemu.QEMU, "-machine", "pc", "-accel", accel, "-m", "256", "-smp", "1", "-nodefaults",
            "-no-user-config", "-display", "none", "-no-reboot", "-serial", "stdio", "-kernel", kernel,
            "-append", "console=ttyS0 quiet panic=-1 root=/dev/virtbench-probe-none"]
    if cpu:
        argv += ["-cpu", cpu]
    res = machine.run(argv, timeout=timeout)
    lines = [_no_pid(ln.strip()) for ln in (res.stdout + "\n" + res.stderr).splitlines() if ln.strip()]
    if any(qemu.PANIC_RE.search(ln) or any(p in ln for p in ROOT_PANIC) for ln in lines):
        return True, f"kernel reached user-space hand-off in {res.seconds:.2f} s", res.seconds
    tail = " | ".join(lines[-3:])
    # QEMU ends cleanly on SIGTERM ("terminating on signal 15", status 0); SIGKILL leaves status -9
    # here, 137 through a remote shell. Not our timeout: another process ended it.
    signalled = next((m.group(1) for ln in lines if (m := SIGNALLED_RE.search(ln))), None)
    killed = {-9: "9", -15: "15", 137: "9", 143: "15"}.get(res.returncode)
    if not res.timed_out and (signalled or killed):
        return False, f"{PASSING}QEMU was killed by signal {signalled or killed} from another process " \
            f"after {res.seconds:.1f} s, before the guest's kernel got anywhere", res.seconds
    if not res.timed_out and res.returncode != 0:
        why = f"QEMU exited with status {res.returncode}: {tail}"
        return False, (PASSING + why) if BUSY in tail else why, res.seconds
    return False, f"guest kernel did not finish booting within {timeout:.0f} s" + (f" ({tail})" if tail else ""), \
        res.seconds


def detect(machine: Machine, kernel: str, kernel_version: str, cache: Path, want: str = "auto") -> dict:
    """{'accel': 'kvm'|'tcg', 'cpu': ..., 'tried': [...], 'kvm_problem': ...} for `machine`, booting
    `kernel` (a path there); cached in the local file `cache` per (machine boot, QEMU version, kernel)."""
    boot_id = machine.run(["cat", "/proc/sys/kernel/random/boot_id"], timeout=30).stdout.strip() or "unknown"
    key = {"machine": machine.name, "boot_id": boot_id, "qemu": qemu.version(machine), "kernel": kernel_version}
    with _lock:
        try:
            data = json.loads(cache.read_text())
            if data.get("key") == key:
                return answer_for(data, want)
        except (OSError, ValueError):
            pass
        tried = []
        result = None
        kvm_usable = machine.run(["sh", "-c", "test -r /dev/kvm && test -w /dev/kvm"], timeout=30).ok
        for accel, cpu in CANDIDATES:
            if accel == "kvm" and not kvm_usable:
                tried.append({"accel": "kvm", "cpu": cpu, "ok": False, "detail": "/dev/kvm missing or not writable"})
                continue
            ok, detail, seconds = try_boot(machine, accel, cpu, kernel, KVM_TIMEOUT if accel == "kvm" else TCG_TIMEOUT)
            tried.append({"accel": accel, "cpu": cpu, "ok": ok, "detail": detail, "seconds": round(seconds, 3)})
            if ok:
                result = {"accel": accel, "cpu": cpu}
                break
        data = {"key": key, "tried": tried, **(result or {"accel": None, "cpu": None}), "at": time.time()}
        if result and not any(t["detail"].startswith(PASSING) for t in tried):
            tmp = cache.with_name(f"{cache.name}.partial-{os.getpid()}")
            tmp.write_text(json.dumps(data, indent=1))
            os.replace(tmp, cache)
            return answer_for(data, want)
        return answer_for({**data, "at": None}, want)


def _no_pid(text: str) -> str:
    """QEMU's signal line without the pid and name of the sender (caches older than this kept them)."""
    return SIGNALLED_RE.sub(r"terminating on signal \1", text)


def answer_for(data: dict, want: str) -> dict:
    """The probe's result as asked for: auto = the best that works; tcg always possible. probed_at:
    when the kept answer was probed (None: not kept, probed again next time)."""
    kvm = next((t for t in data.get("tried", []) if t["accel"] == "kvm" and t["ok"]), None)
    kvm_why = "; ".join(f"kvm{'/-cpu ' + t['cpu'] if t.get('cpu') else ''}: {_no_pid(t['detail'])}"
                        for t in data.get("tried", []) if t["accel"] == "kvm" and not t["ok"])
    if want == "tcg" or (want == "auto" and data.get("accel") == "tcg"):
        return {"accel": "tcg", "cpu": None, "kvm_problem": kvm_why if not kvm else "", "tried": data.get("tried", []),
                "probed_at": data.get("at")}
    if want in ("auto", "kvm") and kvm:
        return {"accel": "kvm", "cpu": kvm.get("cpu"), "kvm_problem": "", "tried": data.get("tried", []),
                "probed_at": data.get("at")}
    return {"accel": None, "cpu": None, "kvm_problem": kvm_why or "no accelerator booted a guest",
            "tried": data.get("tried", []), "probed_at": data.get("at")}
