"""The UnixBench-style system suite, run by virtbench's own kernels (native/system, `vb-system`).

Each test is one cell (param `test`), so a failing test is recorded alone and noisy tests get more
repetitions. The overall index (geometric mean of score / baseline x 10) is derived in analysis.
"""

from __future__ import annotations

import json
from typing import Any

from ..drivers.base import Instance
from ..model import Sample
from .base import MetricSpec, Param, RunContext, Workload

# UnixBench 5.1.2's baselines (its index.base): test -> (score, unit, title). Study 000's Table 8 prints the
# same ones but 42 lpm for both shell tests (42.4 and 6.0 here, as UnixBench computes its index).
TESTS: dict[str, tuple[float, str, str]] = {
    "dhrystone": (116700.0, "lps", "Dhrystone-like integer and string work"),
    "whetstone": (55.0, "MWIPS", "Whetstone-like floating point"),
    "execl": (43.0, "lps", "execl throughput"),
    "fcopy1024": (3960.0, "KBps", "file copy, 1024-byte buffer"),
    "fcopy256": (1655.0, "KBps", "file copy, 256-byte buffer"),
    "fcopy4096": (5800.0, "KBps", "file copy, 4096-byte buffer"),
    "pipe": (12440.0, "lps", "pipe throughput"),
    "context": (4000.0, "lps", "pipe-based context switching"),
    "spawn": (126.0, "lps", "process creation"),
    "shell1": (42.4, "lpm", "shell scripts, 1 concurrent"),
    "shell8": (6.0, "lpm", "shell scripts, 8 concurrent"),
    "syscall": (15000.0, "lps", "system call overhead"),
}
# virtbench's own tests beyond UnixBench's twelve: no published baseline, so outside the index, and run
# only when asked for (`test = "fileopen"`): test -> (unit, title).
EXTRA_TESTS: dict[str, tuple[str, str]] = {
    "fileopen": ("lps", "file open + fstat + close by path (what a sandbox's file server costs)"),
}


_FS: dict[tuple[str, str], str | None] = {}  # (instance, directory) -> file system type, asked once


def _copies(value: Any) -> str:
    text = str(value).strip()
    if text == "vcpus" or (text.isdigit() and 1 <= int(text) <= 1024):
        return text
    raise ValueError(f"{value!r} is neither 'vcpus' nor a whole number from 1 to 1024")


class SystemSuite(Workload):
    name = "system"
    description = "UnixBench-style system tests (12), one copy and one copy per vCPU, indexed to published baselines"
    params = (
        Param("test", str, list(TESTS), "which tests to run (default: UnixBench's twelve; fileopen on request)",
              choices=(*TESTS, *EXTRA_TESTS)),
        Param("copies", _copies, ["1", "vcpus"], "parallel copies: a number, or 'vcpus' for one per vCPU"),
        # Short by default: repetitions, not long kernels, narrow the intervals (issue 14, bench/time_budget.py).
        Param("duration", float, 0.5, "seconds each test runs", min=0.05, max=3600),
    )
    metrics = (*(MetricSpec(t, unit, True, title) for t, (_, unit, title) in TESTS.items()),
               *(MetricSpec(t, unit, True, title) for t, (unit, title) in EXTRA_TESTS.items()))
    index_baselines = {t: base for t, (base, _, _) in TESTS.items()}
    index_param = "test"

    def timeout(self, params: dict[str, Any]) -> float:
        # Start-up and clean-up are short; allow generous slack on a loaded 2-core machine.
        return params["duration"] * 3 + 60

    def command(self, instance: Instance, params: dict[str, Any], ctx: RunContext) -> list[str]:
        copies = instance.vcpus if params["copies"] == "vcpus" else int(params["copies"])
        return [instance.bin("vb-system"), params["test"], "--duration", str(params["duration"]),
                "--copies", str(copies), "--dir", ctx.storage_dir(instance)]

    def execute(self, instances: dict[str, list[Instance]], params: dict[str, Any], ctx: RunContext) -> str:
        raw = super().execute(instances, params, ctx)
        # Where the file tests wrote (issue 14, item 5: fcopy in a container runs on its overlay root,
        # on the host in $TMPDIR): recorded with every sample as scratch_dir / scratch_fs.
        inst = instances["main"][0]
        where = ctx.storage_dir(inst)
        key = (inst.name, where)
        if key not in _FS:
            res = inst.exec(["stat", "-f", "-c", "%T", where], timeout=30)
            _FS[key] = res.stdout.strip() if res.ok and res.stdout.strip() else None
        return raw.rstrip("\n") + "\n" + json.dumps({"scratch": where, "scratch_fs": _FS[key]}) + "\n"

    def parse(self, raw: str, params: dict[str, Any]) -> list[Sample]:
        records = [json.loads(line) for line in raw.splitlines() if line.strip().startswith("{")]
        scratch = next((r for r in records if "scratch" in r), {})
        records = [r for r in records if "scratch" not in r]
        if len(records) != 1:
            raise ValueError(f"expected one JSON record from vb-system, got {len(records)}")
        rec = records[0]
        missing = {"test", "unit", "copies", "duration_s", "count", "rate"} - set(rec)
        if missing:
            raise ValueError(f"vb-system record lacks {', '.join(sorted(missing))}")
        test = rec["test"]
        if test != params["test"]:
            raise ValueError(f"vb-system reported test {test!r}, expected {params['test']!r}")
        base, unit, _ = TESTS[test] if test in TESTS else (None, *EXTRA_TESTS[test])
        if rec["unit"] != unit:
            raise ValueError(f"vb-system reported unit {rec['unit']!r} for {test}, expected {unit!r}")
        return [Sample(test, rec["rate"], unit, True, {
            "copies_actual": rec["copies"], "measured_seconds": rec["duration_s"], "count": rec["count"],
            **({"index": rec["rate"] / base * 10} if base else {}), "code_version": rec.get("version"),
            **({"scratch_dir": scratch["scratch"], "scratch_fs": scratch.get("scratch_fs")} if scratch else {})})]
