"""What the disk workloads share: the target directory (checked, sized, always removed), sizes,
and the dd statistics line."""

from __future__ import annotations

import re
from typing import Any

from .. import sizes
from ..drivers.base import Instance
from ..errors import WorkloadFailed
from .base import RunContext

# The plan's model of a disk workload (run/estimates.py; history replaces it after one run): the local
# disk of the 2-core development machine, measured with dd (1 MiB blocks: 386 MB/s written with
# fdatasync, 414 MB/s read with O_DIRECT) and fio (4 KiB random reads, psync: 10,700 IOPS).
MODEL_BYTES_PER_S = 300e6
MODEL_IOPS = 10_000


def model_seconds(nbytes: float, block: int) -> float:
    """Seconds to move `nbytes` in blocks of `block` bytes at the model's rate (whichever limit binds)."""
    return nbytes / min(MODEL_BYTES_PER_S, MODEL_IOPS * max(block, 1))


# Room left beside the test files: file-system metadata, journals, bonnie's small files.
MARGIN_FRACTION = 0.05
MARGIN_MIN = 16 << 20

# Runs inside the instance as `sh -c CHECK sh DIR NAME`: the directory comes in as "$1", never
# spliced into the script. mktemp is the real writability test (root passes `test -w` on a
# read-only mount).
_CHECK = r'''
d="$1"
if [ ! -e "$d" ]; then echo "VBERR the target directory $d does not exist"; exit 3; fi
if [ ! -d "$d" ]; then echo "VBERR the target $d is not a directory"; exit 3; fi
w=$(mktemp -d "$d/vb-$2-XXXXXX" 2>/dev/null) || { echo "VBERR the target directory $d is not writable"; exit 3; }
echo "VBDIR $w"
echo "VBAVAIL $(df -P -k "$w" | awk 'NR==2 {print $4}')"
echo "VBFS $(stat -f -c %T "$w")"
'''


def parse_size(text: Any) -> int:
    """'64k', '1m', '4g', 4096 -> bytes (binary units; whole numbers, as fio and dd read them)."""
    try:
        value = sizes.parse_suffixed(text, sizes.BINARY, ignore_case=True, ib=True)
    except ValueError:
        raise ValueError(f"{text!r} is not a size such as 4k, 1m or 2g") from None
    if value <= 0:
        raise ValueError(f"{text!r} is not a positive size")
    return value


def size_param(text: Any) -> str:
    """Param type for sizes: validated, kept as written (fio and dd read the same syntax)."""
    parse_size(text)
    return str(text).strip().lower()


human = sizes.human


def scaled(nbytes: float, scale: float, multiple: int) -> int:
    """A size times the suite's scale factor, rounded to whole `multiple`s, at least one."""
    return max(multiple, int(nbytes * scale) // multiple * multiple)


class TargetDir:
    """A fresh directory for one repetition under the storage target (or `dir`), sized first.

        with TargetDir(inst, ctx, "fio", params["dir"], need_bytes) as work: ...
    The directory and everything in it is removed afterwards, also when the workload fails or
    is interrupted; `rm --one-file-system` never reaches into another mount."""

    def __init__(self, inst: Instance, ctx: RunContext, name: str, override: str, need: int):
        self.inst, self.ctx, self.name, self.override, self.need = inst, ctx, name, override, need
        self.path: str | None = None
        self.fs = ""
        self.free = 0

    def __enter__(self) -> TargetDir:
        where = self.override or self.ctx.storage_dir(self.inst)
        res = self.inst.exec(["sh", "-c", _CHECK, "sh", where, self.name], timeout=60)
        fields = dict(line.split(" ", 1) for line in res.stdout.splitlines() if line.startswith("VB") and " " in line)
        if "VBERR" in fields:
            raise WorkloadFailed(fields["VBERR"])
        if not res.ok or "VBDIR" not in fields:
            raise WorkloadFailed(f"cannot prepare a directory under {where}: {res.describe_failure()}")
        self.path = fields["VBDIR"].strip()
        self.fs = fields.get("VBFS", "").strip()
        try:
            self.free = int(fields.get("VBAVAIL", "0").strip()) * 1024
        except ValueError:
            self.free = 0
        margin = max(MARGIN_MIN, int(self.need * MARGIN_FRACTION))
        if self.need + margin > self.free:
            self._remove()
            raise WorkloadFailed(f"{human(self.need)} of test files do not fit in {where}: "
                                 f"{human(self.free)} free ({self.fs or 'unknown'} file system)")
        return self

    def _remove(self) -> None:
        if self.path:
            self.inst.exec(["rm", "-rf", "--one-file-system", self.path], timeout=600)
            self.path = None

    def __exit__(self, *exc) -> None:
        self._remove()


_DD_STATS = re.compile(r"^(\d+) bytes \(.*?\) copied, ([0-9.eE+-]+) s, ", re.M)


def parse_dd(text: str) -> tuple[int, float]:
    """GNU dd's last statistics line -> (bytes, seconds)."""
    found = _DD_STATS.findall(text)
    if not found:
        raise ValueError("no dd statistics line ('N bytes (...) copied, S s, ...') in the output")
    nbytes, seconds = found[-1]
    return int(nbytes), float(seconds)


def run_checked(inst: Instance, argv: list[str], timeout: float) -> str:
    res = inst.exec(argv, timeout=timeout)
    if not res.ok:
        raise WorkloadFailed(res.describe_failure(), (res.stdout[-4000:] + res.stderr[-4000:]))
    return res.stdout
