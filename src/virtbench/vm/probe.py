"""Which accelerator works here: KVM only if a real guest kernel actually boots with it.

`/dev/kvm` existing (or even KVM_CREATE_VM succeeding) proves nothing: on nested machines a guest
can hang in early boot, and `-cpu host` can abort QEMU. So the probe boots the image's kernel
without a root filesystem and waits for the kernel's own "VFS ... unable to mount root" panic on
the serial console: a kernel that gets there ran its whole early boot. The result is cached per
(host boot, QEMU version, kernel), so one process per host boot pays for it.
"""

from __future__ import annotations

import json
import os
import subprocess
import threading
import time
from pathlib import Path

from . import qemu

KVM_TIMEOUT = 20.0  # a working KVM reaches the panic in well under a second
TCG_TIMEOUT = 90.0
# (accelerator, -cpu) in order of preference.
CANDIDATES = (("kvm", "host"), ("kvm", None), ("tcg", None))

_lock = threading.Lock()


def _host_boot_id() -> str:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return "unknown"


def try_boot(accel: str, cpu: str | None, kernel: Path, timeout: float) -> tuple[bool, str, float]:
    """(reached the kernel's root-mount panic, what happened, seconds)."""
    argv = [qemu.QEMU, "-machine", "pc", "-accel", accel, "-m", "256", "-smp", "1", "-nodefaults",
            "-no-user-config", "-display", "none", "-no-reboot", "-serial", "stdio", "-kernel", str(kernel),
            "-append", "console=ttyS0 quiet panic=-1 root=/dev/virtbench-probe-none"]
    if cpu:
        argv += ["-cpu", cpu]
    t0 = time.monotonic()
    try:
        proc = qemu.spawn(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    except OSError as exc:
        return False, f"cannot start QEMU: {exc}", 0.0
    seen: list[str] = []
    found = threading.Event()

    def read() -> None:
        assert proc.stdout is not None
        for raw in iter(proc.stdout.readline, b""):
            line = raw.decode(errors="replace").strip()
            seen.append(line)
            if qemu.PANIC_RE.search(line) or "Unable to mount root" in line or "Cannot open root" in line:
                found.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    deadline = t0 + timeout
    ok = False
    while time.monotonic() < deadline:
        if found.wait(0.05):
            ok = True
            break
        if proc.poll() is not None:  # QEMU gave up (e.g. aborted on an MSR): no need to wait
            reader.join(2)
            ok = found.is_set()
            break
    seconds = time.monotonic() - t0
    qemu.kill_group(proc, grace=0.5)
    reader.join(2)
    if ok:
        return True, f"kernel reached user-space hand-off in {seconds:.2f} s", seconds
    tail = " | ".join(x for x in seen[-3:] if x)
    if proc.returncode not in (None, 0, -9, -15) and seconds < timeout:
        return False, f"QEMU exited with status {proc.returncode}: {tail}", seconds
    return False, f"guest kernel did not finish booting within {timeout:.0f} s" + (f" ({tail})" if tail else ""), seconds


def detect(kernel: Path, kernel_version: str, cache_dir: Path, want: str = "auto") -> dict:
    """{'accel': 'kvm'|'tcg', 'cpu': ..., 'tried': [...], 'note': ...}; cached per host boot."""
    key = {"boot_id": _host_boot_id(), "qemu": qemu.version(), "kernel": kernel_version}
    cache = cache_dir / "accel.json"
    with _lock:
        try:
            data = json.loads(cache.read_text())
            if data.get("key") == key:
                return _for(data, want)
        except (OSError, ValueError):
            pass
        tried = []
        result = None
        kvm_usable = os.access("/dev/kvm", os.R_OK | os.W_OK)
        for accel, cpu in CANDIDATES:
            if accel == "kvm" and not kvm_usable:
                tried.append({"accel": "kvm", "cpu": cpu, "ok": False, "detail": "/dev/kvm missing or not writable"})
                continue
            ok, detail, seconds = try_boot(accel, cpu, kernel, KVM_TIMEOUT if accel == "kvm" else TCG_TIMEOUT)
            tried.append({"accel": accel, "cpu": cpu, "ok": ok, "detail": detail, "seconds": round(seconds, 3)})
            if ok:
                result = {"accel": accel, "cpu": cpu}
                break
        data = {"key": key, "tried": tried, **(result or {"accel": None, "cpu": None}), "at": time.time()}
        if result:
            tmp = cache.with_name(f"accel.json.partial-{os.getpid()}")
            tmp.write_text(json.dumps(data, indent=1))
            os.replace(tmp, cache)
        return _for(data, want)


def _for(data: dict, want: str) -> dict:
    """The probe's result as asked for: auto = the best that works; tcg always possible."""
    kvm = next((t for t in data.get("tried", []) if t["accel"] == "kvm" and t["ok"]), None)
    kvm_why = "; ".join(f"kvm{'/-cpu ' + t['cpu'] if t.get('cpu') else ''}: {t['detail']}"
                        for t in data.get("tried", []) if t["accel"] == "kvm" and not t["ok"])
    if want == "tcg" or (want == "auto" and data.get("accel") == "tcg"):
        return {"accel": "tcg", "cpu": None, "kvm_problem": kvm_why if not kvm else "", "tried": data.get("tried", [])}
    if want in ("auto", "kvm") and kvm:
        return {"accel": "kvm", "cpu": kvm.get("cpu"), "kvm_problem": "", "tried": data.get("tried", [])}
    return {"accel": None, "cpu": None, "kvm_problem": kvm_why or "no accelerator booted a guest",
            "tried": data.get("tried", [])}
