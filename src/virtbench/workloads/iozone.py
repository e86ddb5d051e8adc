"""iozone-style sweep (study 001 item 1: `iozone -a -g 1g -e`, plotted at 64 KiB records): write
throughput with the flush included, then read throughput straight after, against file size.

iozone is not in Debian, so GNU dd does the I/O: `dd bs=64k conv=fsync` times the write with its
fsync (iozone -e), then a buffered `dd` read follows at once, through the page cache as iozone's
read pass does. One file size per cell; `scale` shrinks the sizes while results keep the original
size as their parameter.
"""

from __future__ import annotations

from typing import Any

from .base import Param
from .ddsweep import DdBase


class IozoneLike(DdBase):
    name = "iozone-like"
    description = "iozone-style write (fsync included) and read throughput against file size, 64 KiB records"
    size_param, size_unit, mode = "file_size_kb", 1 << 10, "buffered"
    params = (
        Param("file_size_kb", int, [64 << i for i in range(15)],
              "file size in KiB (before scale), 64 KiB to 1 GiB like iozone -a -g 1g; a list sweeps",
              min=1, max=1 << 32),
        Param("record_kb", int, 64, "record (dd block) size in KiB", min=4, max=1 << 20),
        Param("scale", float, 1.0, "factor applied to the file size, to fit a small machine", min=1e-6, max=1e6),
        Param("dir", str, "", "directory to write in (default: the storage target's directory)"),
    )

    def _block(self, params: dict[str, Any]) -> int:
        return params["record_kb"] << 10
