"""`virtbench check --driver vm|container`: lifecycle checks, the first study's functional checks of
its cloud's API redone for our drivers. Each check passes or fails with a reason (or is skipped
when the driver cannot do that thing at all, saying why).

1. start N at once: all N become ready (Eucalyptus 1.6.2 lost 1-3 of 8);
2. reboot several instances in one call: each really rebooted (boot identity changed), not just the
   first (Eucalyptus 2.0 rebooted only the first);
3. attach a second disk to a running instance: the guest sees it and can write and read it;
4. snapshot a running instance's disk and boot a new instance from it: it boots and holds the data
   written before the snapshot (an image bundled from a running Eucalyptus instance did not boot).
"""

from __future__ import annotations

import contextlib
import secrets
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .. import drivers, procs, shapes
from ..drivers.base import Driver, Instance
from ..drivers.checks_base import CheckResult, LifecycleOps, identity
from ..errors import UserError
from ..model import EnvSpec
from .session import Session

DEFAULT_COUNT = 4
REBOOT_COUNT = 3


def _start_each(driver, env: EnvSpec, count: int) -> tuple[list[Instance], list[str]]:
    """Start `count` instances at once, each on its own (not all-or-none): (started, failures)."""
    barrier = threading.Barrier(count)
    got: list[Instance | None] = [None] * count
    errors: list[str | None] = [None] * count

    def one(k: int) -> None:
        with contextlib.suppress(threading.BrokenBarrierError):
            barrier.wait(timeout=120)
        try:
            (got[k],) = driver.provision(env, 1, "check")
        except Exception as exc:  # noqa: BLE001 - reported
            errors[k] = str(exc).splitlines()[0]

    try:
        procs.fan_out(one, count)
    except BaseException:
        for inst in got:
            if inst is not None:
                with contextlib.suppress(Exception):
                    inst.teardown()
        raise
    return [i for i in got if i is not None], [e for e in errors if e]


def run_checks(driver_name: str, *, count: int = DEFAULT_COUNT, shape: str = "m1.small",
               options: dict[str, Any] | None = None, log: Callable[[str], None] | None = None,
               only: list[str] | None = None, inventory: str | None = None) -> dict[str, Any]:
    """Run the lifecycle checks; returns {driver, accelerator?, checks: [...]}. With an inventory,
    option `machine` names the host the instances start on."""
    log = log or (lambda msg: None)
    if driver_name not in drivers.names():
        raise UserError(f"unknown driver '{driver_name}'", "valid drivers: " + ", ".join(drivers.names()))
    try:
        cls = drivers.driver_class(driver_name, options)
    except KeyError:  # pods with a backend it has not
        key, choices, _ = drivers.ALIASES[driver_name]
        raise UserError(f"invalid {key} {(options or {}).get(key)!r} for the {driver_name} driver",
                        "valid: " + ", ".join(sorted(choices))) from None
    opts = {k: o.default for k, o in cls.options.items()}
    opts.update(options or {})
    try:
        env = EnvSpec(driver_name, driver_name, shapes.resolve(shape), opts)
    except KeyError:
        raise UserError(f"unknown shape '{shape}'", "valid shapes: " + ", ".join(shapes.names())) from None
    run_id = "check-" + time.strftime("%Y%m%d-%H%M%S") + "-" + secrets.token_hex(2)
    with Session(run_id, inventory=inventory, note=log, environments=[env]) as session:  # its end: the final drain, the pool, workdir
        driver = session.driver(driver_name, opts)
        session.sweep()  # this machine (machines/ledger.py)
        out = {"driver": driver_name, "shape": shape, "count": count}
        return _run_checks(session, driver, env, count, only, log, out)


def _run_checks(session: Session, driver: Driver, env: EnvSpec, count: int, only: list[str] | None,
                log: Callable[[str], None], out: dict[str, Any]) -> dict[str, Any]:
    driver_name = env.driver
    workdir = session.workdir
    problems = driver.check(env)
    if problems:
        raise UserError(f"the {driver_name} driver cannot run here: "
                        + "; ".join(f"{p.what} (fix: {p.fix})" for p in problems))
    ops = driver.lifecycle_ops(env)
    if ops is None:
        raise UserError(f"the {driver_name} driver offers no lifecycle checks",
                        "drivers that do: " + ", ".join(n for n in drivers.names()
                                                        if drivers.driver_class(n).lifecycle_ops
                                                        is not Driver.lifecycle_ops))
    results: list[CheckResult] = []
    live: list[Instance] = []
    extra = ops.extra_checks()
    wanted = only or ["start_many", "reboot_many", "attach_disk", "snapshot_boot", *extra]
    try:
        # 1. start N at once
        t0 = time.monotonic()
        log(f"starting {count} instances at once")
        live, failures = _start_each(driver, env, count)
        ready = []
        for inst in live:
            res = inst.exec(["true"], timeout=60)
            if res.ok:
                ready.append(inst)
        passed = len(ready) == count and not failures
        detail = f"{len(ready)} of {count} started at once became ready"
        if failures:
            detail += f"; failures: {' | '.join(sorted(set(failures)))}"
        if ready:
            times = sorted(i.lifecycle.get("ready", 0) - i.lifecycle.get("requested", 0) for i in ready)
            detail += f" (time to ready {times[0]:.2f}-{times[-1]:.2f} s)"
        if "start_many" in wanted:
            results.append(CheckResult("start_many", passed, detail, time.monotonic() - t0))
        if ready:
            meta = ready[0].metadata()
            if meta.get("backend"):
                out["backend"] = meta["backend"]
            if meta.get("accelerator"):
                out["accelerator"] = meta["accelerator"]
                if meta.get("accelerator_note"):
                    out["accelerator_note"] = meta["accelerator_note"]
        # 2. reboot several in one call
        if "reboot_many" in wanted:
            results.append(check_reboot(ops, ready[:REBOOT_COUNT], log))
        # 3. attach a disk
        if "attach_disk" in wanted:
            results.append(_check_attach(ops, ready[:1], log))
        # 4. snapshot and boot from it
        if "snapshot_boot" in wanted:
            own = ops.check_snapshot  # cloud: a volume snapshot, attached as a new volume
            if not ready:
                results.append(CheckResult("snapshot_boot", False, "no ready instance to snapshot"))
            else:
                results.append(own(ready[:1], log) if own else _check_snapshot(ops, ready[:1], workdir, log))
        for name, check in extra.items():
            if name in wanted:
                results.append(check(ready, log))
    finally:
        for inst in live:
            with contextlib.suppress(Exception):
                inst.teardown()
        with contextlib.suppress(Exception):
            driver.close()  # whatever is still booting after a Ctrl-C
    out["checks"] = [r.as_dict() for r in results]
    out["passed"] = all(r.passed is not False for r in results)
    return out


def check_reboot(ops: LifecycleOps, insts: list[Instance], log) -> CheckResult:
    t0 = time.monotonic()
    if len(insts) < 2:
        return CheckResult("reboot_many", False, f"needs at least 2 ready instances, had {len(insts)}")
    log(f"rebooting {len(insts)} instances in one call")
    try:
        before = {i.name: identity(i) for i in insts}
        outcome = ops.reboot(insts)
        after = {}
        for inst in insts:
            with contextlib.suppress(UserError):
                after[inst.name] = identity(inst)
    except UserError as exc:
        return CheckResult("reboot_many", False, str(exc).splitlines()[0], time.monotonic() - t0)
    rebooted = [n for n in before if n in after and after[n] != before[n]]
    not_rebooted = [n for n in before if n in after and after[n] == before[n]]
    unreachable = [n for n in before if n not in after]
    errors = [o.get("error", "").splitlines()[0] for o in outcome if not o.get("ok") and o.get("error")]
    passed = len(rebooted) == len(insts)
    detail = f"{len(rebooted)} of {len(insts)} rebooted (boot identity changed)"
    why = ops.api_only(insts)
    if why and not unreachable:
        back = [o for o in outcome if o.get("ok")]
        passed = len(back) == len(insts)
        detail = f"the API accepted the reboot of {len(insts)} and {len(back)} answered over SSH afterwards; {why}"
        not_rebooted = []
    if not_rebooted:
        detail += f"; NOT rebooted: {', '.join(not_rebooted)}"
    if unreachable:
        detail += f"; not answering after the reboot: {', '.join(unreachable)}"
    if errors:
        detail += f"; errors: {' | '.join(errors)}"
    return CheckResult("reboot_many", passed, detail, time.monotonic() - t0,
                       data={"before": before, "after": after})


def _check_attach(ops: LifecycleOps, insts: list[Instance], log) -> CheckResult:
    t0 = time.monotonic()
    if not insts:
        return CheckResult("attach_disk", False, "no ready instance to attach a disk to")
    log("attaching a disk to a running instance")
    try:
        passed, detail, data = ops.attach_disk(insts[0])
    except Exception as exc:  # noqa: BLE001 - a failure is the result
        return CheckResult("attach_disk", False, f"{type(exc).__name__}: {str(exc).splitlines()[0]}",
                           time.monotonic() - t0)
    return CheckResult("attach_disk", passed, detail, time.monotonic() - t0,
                       skipped=detail if passed is None else None, data=data)


def _check_snapshot(ops: LifecycleOps, insts: list[Instance], workdir: Path, log) -> CheckResult:
    t0 = time.monotonic()
    inst = insts[0]  # run_checks has one ready
    log("snapshotting a running instance and booting a new one from it")
    token = secrets.token_hex(8)
    path = "/var/tmp/virtbench-snapshot-check"
    res = inst.exec(["sh", "-c", f"echo {token} > {path} && sync"], timeout=60)
    if not res.ok:
        return CheckResult("snapshot_boot", False, f"could not write the marker file: {res.describe_failure()}")
    new, cleanup = None, (lambda: None)
    try:
        new, how, cleanup = ops.boot_from_snapshot(inst, workdir)
        if new is None:
            return CheckResult("snapshot_boot", False, how, time.monotonic() - t0)
        got = new.exec(["cat", path], timeout=60)
        if not got.ok or got.stdout.strip() != token:
            return CheckResult("snapshot_boot", False, f"{how}, but the data written before the snapshot is "
                               f"missing: {got.describe_failure() if not got.ok else got.stdout.strip()!r}",
                               time.monotonic() - t0)
        ready = new.lifecycle.get("ready", 0) - new.lifecycle.get("requested", 0)
        return CheckResult("snapshot_boot", True, f"{how}; it became ready in {ready:.2f} s and holds the data "
                           "written before the snapshot", time.monotonic() - t0)
    except Exception as exc:  # noqa: BLE001 - a failure is the result
        return CheckResult("snapshot_boot", False, f"{type(exc).__name__}: {str(exc).splitlines()[0]}",
                           time.monotonic() - t0)
    finally:
        if new is not None:
            with contextlib.suppress(Exception):
                new.teardown()
        with contextlib.suppress(Exception):
            cleanup()


__all__ = ["run_checks"]
