"""bonnie++ (the Debian package): sequential per-char and block write, rewrite, per-char and block
read, random seeks, and sequential/random create, stat and delete, each with its CPU %, from the
CSV line `bonnie++ -q` prints (format 1.98, bonnie++ 1.98 to 2.00).

bonnie++ insists on a file twice the RAM size so the page cache cannot hold it; on a small machine
`scale` shrinks the file and `ram_mb` (default: half the file) tells bonnie++ the matching RAM. Tests
that finish too fast to time come out as '+++++' in the CSV and are left out (noted in the
metadata), not reported as zero.

`direct` (-D) covers the block write only: bonnie++ 2.00 creates the file with O_DIRECT but reopens
it without for rewrite, read and seeks (seen with strace), so the page cache can serve those; their
samples carry a warning saying so. For a direct read use fio (rw=read) or dd (iflag=direct).
"""

from __future__ import annotations

import re
from typing import Any

from ..drivers.base import Instance
from ..model import Sample
from .base import MetricSpec, Param, RunContext, Workload
from .diskutil import TargetDir, model_seconds, run_checked

# CSV columns (bonnie++ 1.98 format) -> index.
FIELDS = (
    "format_version", "bonnie_version", "name", "concurrency", "seed", "file_size", "chunk_size", "seeks",
    "seek_proc_count", "putc", "putc_cpu", "put_block", "put_block_cpu", "rewrite", "rewrite_cpu", "getc",
    "getc_cpu", "get_block", "get_block_cpu", "seeks_s", "seeks_cpu", "num_files", "max_size", "min_size",
    "num_dirs", "file_chunk_size", "seq_create", "seq_create_cpu", "seq_stat", "seq_stat_cpu", "seq_del",
    "seq_del_cpu", "ran_create", "ran_create_cpu", "ran_stat", "ran_stat_cpu", "ran_del", "ran_del_cpu",
    "putc_latency", "put_block_latency", "rewrite_latency", "getc_latency", "get_block_latency",
    "seeks_latency", "seq_create_latency", "seq_stat_latency", "seq_del_latency", "ran_create_latency",
    "ran_stat_latency", "ran_del_latency",
)
# metric -> (CSV column, unit, conversion of bonnie's value, title)
KIB_TO_MB = 1024 / 1e6
TESTS = {
    "write_char": ("putc", "MB/s", KIB_TO_MB, "sequential output, per character"),
    "write_block": ("put_block", "MB/s", KIB_TO_MB, "sequential output, block"),
    "rewrite": ("rewrite", "MB/s", KIB_TO_MB, "sequential rewrite"),
    "read_char": ("getc", "MB/s", KIB_TO_MB, "sequential input, per character"),
    "read_block": ("get_block", "MB/s", KIB_TO_MB, "sequential input, block"),
    "seeks": ("seeks_s", "seeks/s", 1.0, "random seeks"),
    "seq_create": ("seq_create", "files/s", 1.0, "sequential file create"),
    "seq_stat": ("seq_stat", "files/s", 1.0, "sequential file stat"),
    "seq_delete": ("seq_del", "files/s", 1.0, "sequential file delete"),
    "random_create": ("ran_create", "files/s", 1.0, "random file create"),
    "random_stat": ("ran_stat", "files/s", 1.0, "random file stat"),
    "random_delete": ("ran_del", "files/s", 1.0, "random file delete"),
}
_CPU_COLUMN = {"seeks_s": "seeks_cpu"}
_LAT_COLUMN = {"seeks_s": "seeks_latency", "seq_del": "seq_del_latency"}


def _latency_us(text: str) -> float | None:
    m = re.fullmatch(r"(\d+(?:\.\d+)?)(us|ms|s)", text.strip())
    if not m:
        return None
    return float(m.group(1)) * {"us": 1.0, "ms": 1e3, "s": 1e6}[m.group(2)]


def parse_csv(raw: str) -> list[Sample]:
    """The CSV line(s) of `bonnie++ -q` -> samples (value, <test>_cpu, <test>_latency)."""
    lines = [ln for ln in raw.splitlines() if re.match(r"^1\.9\d,", ln.strip())]
    if not lines:
        raise ValueError("no bonnie++ CSV line (format 1.9x) in the output")
    out: list[Sample] = []
    for line in lines:
        cols = line.strip().split(",")
        if len(cols) < len(FIELDS):
            raise ValueError(f"bonnie++ CSV line has {len(cols)} fields, expected {len(FIELDS)}")
        row = dict(zip(FIELDS, cols))
        skipped, too_fast = [], []
        meta = {"bonnie_version": row["bonnie_version"], "file_size": row["file_size"],
                "num_files_k": row["num_files"], "seed": row["seed"]}
        for metric, (col, unit, factor, _) in TESTS.items():
            value = row[col].strip()
            if not value or value.startswith("+"):
                skipped.append(metric)
                if value:
                    too_fast.append(metric)
                continue
            try:
                number = float(value)
            except ValueError:
                raise ValueError(f"bonnie++ column {col}: {value!r} is not a number") from None
            out.append(Sample(metric, number * factor, unit, True, meta))
            cpu = row[_CPU_COLUMN.get(col, col + "_cpu")].strip()
            if cpu and not cpu.startswith("+"):
                out.append(Sample(f"{metric}_cpu", float(cpu), "%", False, meta))
            lat = _latency_us(row[_LAT_COLUMN.get(col, col + "_latency")])
            if lat is not None:
                out.append(Sample(f"{metric}_latency", lat, "us", False, meta))
        if skipped:
            for s in out:
                s.metadata = {**s.metadata, "too_fast_to_time": skipped}
        if too_fast:  # says why a metric is missing here while other environments have it
            note = (f"bonnie++ printed '+++++' for {', '.join(too_fast)}: finished too fast to time at this "
                    "size, left out (a larger size_mb or files times them)")
            for s in out:
                s.metadata = {**s.metadata, "warnings": [*s.metadata.get("warnings", []), note]}
    if not out:
        raise ValueError("every bonnie++ test finished too fast to time ('+++++'): use a larger size_mb")
    return out


class Bonnie(Workload):
    name = "bonnie"
    description = "bonnie++: per-char/block write, rewrite, read, seeks, file create/stat/delete, with CPU %"
    params = (
        Param("size_mb", int, 1024, "file size in MiB (before scale)", min=1, max=1 << 24),
        Param("scale", float, 1.0, "factor applied to size_mb, to fit a small machine", min=1e-6, max=1e6),
        Param("ram_mb", int, 0, "RAM size bonnie++ assumes (-r); 0 = half the file, so the 2x rule holds",
              min=0, max=1 << 24),
        Param("chunk_kb", int, 0, "block size of the block tests in KiB (-s SIZE:CHUNK); 0 = bonnie++'s 8 KiB",
              min=0, max=1024),
        Param("files", int, 4, "files for the create/stat/delete tests, in units of 1024 (-n); 0 skips them",
              min=0, max=1024),
        Param("fast", bool, False, "skip the per-character tests (-f)"),
        Param("direct", bool, False, "O_DIRECT for the block write (-D; bonnie++ reopens the file without it "
              "for rewrite, read and seeks)"),
        Param("sync", bool, False, "fsync after every write (-b)"),
        Param("dir", str, "", "directory to write in (default: the storage target's directory)"),
    )
    metrics = tuple(
        m for name, (_, unit, _, title) in TESTS.items()
        for m in (MetricSpec(name, unit, True, title), MetricSpec(f"{name}_cpu", "%", False, f"CPU during {title}"),
                  MetricSpec(f"{name}_latency", "us", False, f"worst latency during {title}"))
    )

    @staticmethod
    def _size_mb(params: dict[str, Any]) -> int:
        return max(1, int(params["size_mb"] * params["scale"]))

    def validate(self, params: dict[str, Any]) -> None:
        ram = params["ram_mb"]
        if ram and self._size_mb(params) < 2 * ram:
            raise ValueError(f"bonnie++ needs a file of at least twice ram_mb: {self._size_mb(params)} MiB "
                             f"after scale < 2 x {ram} MiB")

    def timeout(self, params: dict[str, Any]) -> float:
        # 5 passes over the file at >= 2 MB/s, plus the small-file tests
        return 300 + 5 * self._size_mb(params) * (1 << 20) / 2e6 + params["files"] * 60

    def expected_seconds(self, params: dict[str, Any]) -> float | None:
        # the plan's model: about 5 passes over the file (per-character ones slower, 3 without them) and
        # the small-file tests (1024 x files created, stat'ed, deleted; about 2 s per 1024 here)
        size = self._size_mb(params) << 20
        passes = 3 if params["fast"] else 6
        return 1.0 + passes * model_seconds(size, (params["chunk_kb"] or 8) << 10) + 2.0 * params["files"]

    def execute(self, instances: dict[str, list[Instance]], params: dict[str, Any], ctx: RunContext) -> str:
        inst = instances["main"][0]
        size = self._size_mb(params)
        ram = params["ram_mb"] or max(1, size // 2)
        need = size << 20
        with TargetDir(inst, ctx, "bonnie", params["dir"], need) as work:
            flags = ["-f"] * params["fast"] + ["-D"] * params["direct"] + ["-b"] * params["sync"]
            size_arg = f"{size}:{params['chunk_kb'] << 10}" if params["chunk_kb"] else str(size)
            argv = ["-d", work.path, "-s", size_arg, "-r", str(ram), "-n", str(params["files"]), "-m", "vb", "-q",
                    *flags]
            # bonnie++ refuses to run as root without -u; pass the caller's own ids.
            script = 'exec bonnie++ "$@" -u "$(id -u):$(id -g)"'
            return run_checked(inst, ["sh", "-c", script, "sh", *argv], ctx.timeout)

    def parse(self, raw: str, params: dict[str, Any]) -> list[Sample]:
        out = parse_csv(raw)
        if params.get("direct"):
            for s in out:
                if s.metric in BUFFERED_UNDER_DIRECT:
                    s.metadata = {**s.metadata, "warnings": [*s.metadata.get("warnings", []), DIRECT_NOTE]}
        return out


# What -D does not cover (bonnie++ 2.00 reopens the file without O_DIRECT after writing it).
BUFFERED_UNDER_DIRECT = ("rewrite", "read_block", "seeks")
DIRECT_NOTE = ("bonnie++ -D (direct=true) covers the block write only: rewrite, read and seeks reopen the file "
               "without O_DIRECT, so the page cache can serve them (use fio rw=read or dd for a direct read)")
