"""The `cpuset` environment option of host, container and vm: pin an environment's instances to a set of CPUs (issue 14:
"optional CPU pinning of instances where the platform allows"). On a small noisy machine, pinning the
measured instances away from the CPU that runs the harness, the monitor or other programs narrows the
intervals; pinning two environments to the same CPUs makes them compete alike.

The syntax is the kernel's CPU list (as in taskset -c, cgroup cpuset.cpus, podman --cpuset-cpus):
"0", "0-1", "0,2-3".
"""

from __future__ import annotations

import os
import re

from .base import OptionSpec, Problem

_ITEM = re.compile(r"^(\d+)(?:-(\d+))?$")

OPTION = OptionSpec(str, "", "CPUs the instances may run on, a CPU list such as 0, 0-1 or 0,2-3 "
                             "(default: all; pinning narrows intervals on a noisy machine)")


def parse(text: str) -> list[int]:
    """The CPUs of a CPU list; ValueError says what is wrong with it."""
    cpus: set[int] = set()
    for item in text.replace(" ", "").split(","):
        m = _ITEM.match(item)
        if not m:
            raise ValueError(f"cpuset {text!r}: {item!r} is not a CPU number or a range like 0-3")
        lo, hi = int(m.group(1)), int(m.group(2) or m.group(1))
        if hi < lo:
            raise ValueError(f"cpuset {text!r}: range {item!r} runs backwards")
        cpus.update(range(lo, hi + 1))
    return sorted(cpus)


def problems(text: str, driver: str, allowed: list[int] | None = None, place: str = "this machine") -> list[Problem]:
    """What is wrong with an environment's cpuset on the machine that offers `allowed` (default: this
    process's CPUs); empty: fine or not set."""
    if not text:
        return []
    try:
        cpus = parse(text)
    except ValueError as exc:
        return [Problem(str(exc), "write a CPU list such as 0, 0-1 or 0,2-3")]
    allowed = sorted(os.sched_getaffinity(0) if allowed is None else allowed)
    missing = [c for c in cpus if c not in allowed]
    if missing:
        where = "this machine" if place == "the host" else place
        return [Problem(f"{driver} cpuset {text!r} names CPU(s) {', '.join(map(str, missing))}, which {where} "
                        f"does not offer (it has {compact(allowed)})",
                        f"choose CPUs among {compact(allowed)}")]
    return []


def compact(cpus: list[int]) -> str:
    """[0, 1, 2, 5] -> '0-2,5'."""
    out: list[str] = []
    for c in sorted(cpus):
        if out and out[-1].split("-")[-1] == str(c - 1):
            out[-1] = f"{out[-1].split('-')[0]}-{c}"
        else:
            out.append(str(c))
    return ",".join(out)
