"""dd-style sweep (study 004 item 2): write then read one file with GNU dd, block size 64 MiB,
direct I/O (oflag=direct / iflag=direct, the client cache bypassed), file sizes 64 MiB to 8 GiB.

Each file size is one cell (a list parameter sweeps); `scale` shrinks the study's sizes for a small
machine while the results keep the study's size as their parameter. The file is sized against free
space first and always removed. iozone-like.py runs the same script buffered with fsync.
"""

from __future__ import annotations

from typing import Any

from ..drivers.base import Instance
from ..errors import WorkloadFailed
from ..model import Sample
from .base import MetricSpec, Param, RunContext, Workload
from .diskutil import TargetDir, model_seconds, parse_dd, scaled

# `sh -c SCRIPT sh DIR BS COUNT MODE`: arguments arrive as positional parameters, never spliced in.
# direct: O_DIRECT both ways. buffered: the write includes an fsync (conv=fsync, like iozone -e) and
# the read comes through the page cache straight after (like iozone's read pass).
SCRIPT = r'''
w="$1"; bs="$2"; n="$3"
if [ "$4" = direct ]; then wflag=oflag=direct; rflag=iflag=direct; else wflag=conv=fsync; rflag=; fi
err=$(dd if=/dev/zero of="$w/data" bs="$bs" count="$n" $wflag 2>&1 >/dev/null); rc=$?
echo "VBPHASE write $rc"; printf '%s\n' "$err"
if [ $rc -ne 0 ]; then exit 1; fi
err=$(dd if="$w/data" of=/dev/null bs="$bs" $rflag 2>&1 >/dev/null); rc=$?
echo "VBPHASE read $rc"; printf '%s\n' "$err"
rm -f "$w/data"
exit $rc
'''


def parse_phases(raw: str) -> dict[str, tuple[int, int, float]]:
    """The script's output -> {phase: (exit status, bytes, seconds)}."""
    phases: dict[str, list[str]] = {}
    current = None
    for line in raw.splitlines():
        if line.startswith("VBPHASE "):
            _, name, rc = line.split()
            current = name
            phases[name] = [rc]
        elif current:
            phases[current].append(line)
    out = {}
    for name, (rc, *lines) in phases.items():
        text = "\n".join(lines)
        if rc != "0":
            problem = next((ln for ln in lines if ln.startswith("dd:")), text.strip()[-300:] or "failed")
            raise ValueError(f"dd {name} failed (exit {rc}): {problem}")
        nbytes, seconds = parse_dd(text)
        out[name] = (0, nbytes, seconds)
    if not out:
        raise ValueError("no VBPHASE lines: not the output of the dd sweep script")
    return out


class DdBase(Workload):
    """Write-then-read of one file per cell with dd; subclasses fix the sizes and the mode."""

    size_param: str
    size_unit: int
    mode: str
    metrics = (
        MetricSpec("write", "MB/s", True, "write throughput (10^6 bytes/s)"),
        MetricSpec("read", "MB/s", True, "read throughput (10^6 bytes/s)"),
    )

    def _block(self, params: dict[str, Any]) -> int:
        raise NotImplementedError

    def _size(self, params: dict[str, Any]) -> int:
        return scaled(params[self.size_param] * self.size_unit, params["scale"], self._block(params))

    def timeout(self, params: dict[str, Any]) -> float:
        return 120 + 2 * self._size(params) / 2e6  # both passes at >= 2 MB/s

    def expected_seconds(self, params: dict[str, Any]) -> float | None:
        # the plan's model: the write pass (with its sync) and the read pass at the local disk's rate
        return 0.5 + 2 * model_seconds(self._size(params), self._block(params))

    def execute(self, instances: dict[str, list[Instance]], params: dict[str, Any], ctx: RunContext) -> str:
        inst = instances["main"][0]
        size, block = self._size(params), self._block(params)
        with TargetDir(inst, ctx, self.name, params["dir"], size) as work:
            res = inst.exec(["sh", "-c", SCRIPT, "sh", work.path, str(block), str(size // block), self.mode],
                            timeout=ctx.timeout)
            if not res.ok:
                try:
                    parse_phases(res.stdout)
                except ValueError as exc:
                    raise WorkloadFailed(str(exc), res.stdout[-4000:] + res.stderr[-4000:]) from None
                raise WorkloadFailed(res.describe_failure(), res.stdout[-4000:] + res.stderr[-4000:])
            return res.stdout

    def parse(self, raw: str, params: dict[str, Any]) -> list[Sample]:
        phases = parse_phases(raw)
        meta = {"file_bytes": self._size(params), "block_bytes": self._block(params), "mode": self.mode}
        out = []
        for name in ("write", "read"):
            if name in phases:
                _, nbytes, seconds = phases[name]
                if seconds <= 0:
                    raise ValueError(f"dd {name} reported {seconds} s")
                out.append(Sample(name, nbytes / seconds / 1e6, "MB/s", True,
                                  {**meta, "bytes": nbytes, "seconds": seconds}))
        return out


class DdSweep(DdBase):
    name = "dd"
    description = "dd write/read with direct I/O, 64 MiB blocks, one file size per cell (study 004)"
    size_param, size_unit, mode = "file_size_mb", 1 << 20, "direct"
    params = (
        Param("file_size_mb", int, [64, 128, 256, 512, 1024, 2048, 4096, 8192],
              "file size in MiB (before scale); a list sweeps", min=1, max=1 << 24),
        Param("block_mb", int, 64, "dd block size in MiB", min=1, max=4096),
        Param("scale", float, 1.0, "factor applied to the file size, to fit a small machine", min=1e-6, max=1e6),
        Param("dir", str, "", "directory to write in (default: the storage target's directory)"),
    )

    def _block(self, params: dict[str, Any]) -> int:
        return params["block_mb"] << 20
