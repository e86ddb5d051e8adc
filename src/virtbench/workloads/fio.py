"""fio: sequential write/read/rewrite and random 4 KiB IOPS with latency percentiles, from fio's JSON.

The file lives in a fresh directory under the storage target (sized against free space first, removed
afterwards). `rewrite` lays the file out in a first job and measures a second pass over it. A raw
block device is written only when the user names it (`device`) and passes `allow_destroy=true`;
reading one needs just the name.
"""

from __future__ import annotations

import json
from typing import Any

from ..drivers.base import Instance
from ..errors import WorkloadFailed
from ..model import Sample
from .base import MetricSpec, Param, RunContext, Workload
from .diskutil import TargetDir, model_seconds, parse_size, run_checked, scaled, size_param

MODES = {  # mode -> (fio rw, direction read/write in the JSON)
    "write": ("write", "write"), "read": ("read", "read"), "rewrite": ("write", "write"),
    "randread": ("randread", "read"), "randwrite": ("randwrite", "write"),
}
ENGINES = ("auto", "psync", "sync", "libaio", "io_uring")
PERCENTILES = {"lat_p50": "50.000000", "lat_p99": "99.000000", "lat_p999": "99.900000"}


class Fio(Workload):
    name = "fio"
    description = "fio: sequential or random I/O on the storage target, throughput, IOPS and latency (fio JSON)"
    params = (
        Param("rw", str, "write", "write, read, rewrite (second pass over a laid-out file), randread, randwrite",
              choices=tuple(MODES)),
        Param("bs", size_param, "1m", "block size, e.g. 4k, 1m, 64m"),
        Param("size_mb", float, 256.0, "file size in MiB (before scale)", min=0.0001, max=1 << 24),
        Param("scale", float, 1.0, "factor applied to size_mb, to fit a study's sizes to a small machine",
              min=1e-6, max=1e6),
        Param("iodepth", int, 1, "I/Os in flight (needs an async engine: libaio or io_uring)", min=1, max=4096),
        Param("numjobs", int, 1, "parallel jobs, each on its own file", min=1, max=256),
        Param("direct", bool, True, "O_DIRECT (bypass the page cache)"),
        Param("ioengine", str, "auto", "fio engine; auto = libaio when iodepth > 1, else psync", choices=ENGINES),
        Param("runtime", float, 0.0, "seconds to run time-based (0: one pass over the file)", min=0, max=86400),
        Param("end_fsync", bool, True, "writes: include an fsync at the end in the time (like iozone -e)"),
        Param("dir", str, "", "directory to write in (default: the storage target's directory)"),
        Param("device", str, "", "a raw block device to use instead of a file (writing needs allow_destroy)"),
        Param("allow_destroy", bool, False, "permit writing to `device`, destroying its contents"),
    )
    metrics = (
        MetricSpec("throughput", "MB/s", True, "bytes moved per second (10^6)"),
        MetricSpec("iops", "IO/s", True, "I/O operations per second"),
        MetricSpec("lat_mean", "us", False, "mean total latency per I/O"),
        MetricSpec("lat_max", "us", False, "maximum total latency per I/O"),
        MetricSpec("lat_p50", "us", False, "median completion latency"),
        MetricSpec("lat_p99", "us", False, "99th percentile completion latency"),
        MetricSpec("lat_p999", "us", False, "99.9th percentile completion latency"),
        MetricSpec("cpu_usr", "%", False, "user CPU of the fio job"),
        MetricSpec("cpu_sys", "%", False, "system CPU of the fio job"),
    )

    def validate(self, params: dict[str, Any]) -> None:
        if params["device"]:
            if not params["device"].startswith("/dev/"):
                raise ValueError(f"device {params['device']!r} must be a path under /dev")
            writes = MODES[params["rw"]][1] == "write"
            if writes and not params["allow_destroy"]:
                raise ValueError(f"rw={params['rw']} on device {params['device']} destroys its contents: "
                                 "pass allow_destroy=true if that is what you want")
            if params["dir"]:
                raise ValueError("give either dir or device, not both")
        if params["iodepth"] > 1 and params["ioengine"] in ("psync", "sync"):
            raise ValueError(f"iodepth={params['iodepth']} needs an async ioengine (libaio, io_uring), "
                             f"not {params['ioengine']}")
        if self._bytes(params) < parse_size(params["bs"]):
            raise ValueError(f"the file ({self._bytes(params)} bytes after scale) is smaller than bs={params['bs']}")

    @staticmethod
    def _bytes(params: dict[str, Any]) -> int:
        return int(params["size_mb"] * params["scale"] * (1 << 20))

    def _size(self, params: dict[str, Any]) -> int:
        return scaled(params["size_mb"] * (1 << 20), params["scale"], parse_size(params["bs"]))

    def timeout(self, params: dict[str, Any]) -> float:
        # one pass at >= 2 MB/s per job (remote storage behind 50 ms of delay), plus start-up
        passes = 2 if params["rw"] in ("rewrite", "read", "randread") else 1
        return 120 + params["runtime"] + passes * params["numjobs"] * self._size(params) / 2e6

    def expected_seconds(self, params: dict[str, Any]) -> float | None:
        # the plan's model: time-based, or the passes over each job's file at the local disk's rate
        if params["runtime"]:
            return params["runtime"] + 1.0
        passes = 2 if params["rw"] in ("rewrite", "read", "randread") else 1
        return 1.0 + passes * params["numjobs"] * model_seconds(self._size(params), parse_size(params["bs"]))

    def fio_args(self, params: dict[str, Any], where: str, is_device: bool) -> list[str]:
        rw, _ = MODES[params["rw"]]
        engine = params["ioengine"]
        if engine == "auto":
            engine = "libaio" if params["iodepth"] > 1 else "psync"
        common = [f"--rw={rw}", f"--bs={params['bs']}", f"--size={self._size(params)}", f"--ioengine={engine}",
                  f"--iodepth={params['iodepth']}", f"--direct={int(params['direct'])}",
                  f"--numjobs={params['numjobs']}", "--group_reporting"]
        if is_device:
            common.append(f"--filename={where}")
        else:
            common += [f"--directory={where}", "--filename_format=vb-fio.$jobnum"]
        if rw in ("write", "randwrite") and params["end_fsync"]:
            common.append("--end_fsync=1")
        timed = [f"--runtime={params['runtime']:g}", "--time_based"] if params["runtime"] else []
        argv = ["fio", "--output-format=json"]
        if params["rw"] == "rewrite":
            argv += ["--name=layout", *common, "--name=rewrite", "--stonewall", *common, *timed]
        else:
            argv += [f"--name={params['rw']}", *common, *timed]
        return argv

    def execute(self, instances: dict[str, list[Instance]], params: dict[str, Any], ctx: RunContext) -> str:
        inst = instances["main"][0]
        if params["device"]:
            dev = params["device"]
            if not inst.exec(["test", "-b", dev], timeout=30).ok:
                raise WorkloadFailed(f"device {dev} is not a block device in {inst.name}")
            return run_checked(inst, self.fio_args(params, dev, True), ctx.timeout)
        need = self._size(params) * params["numjobs"]
        with TargetDir(inst, ctx, "fio", params["dir"], need) as work:
            return run_checked(inst, self.fio_args(params, work.path, False), ctx.timeout)

    def parse(self, raw: str, params: dict[str, Any]) -> list[Sample]:
        return parse_fio(raw, params["rw"])


def parse_fio(raw: str, mode: str) -> list[Sample]:
    """fio --output-format=json -> samples of the measured job (for rewrite: the second one)."""
    start = raw.find("{")
    if start < 0:
        raise ValueError("no JSON object in fio's output")
    doc = json.loads(raw[start:])
    jobs = doc.get("jobs") or []
    if not jobs:
        raise ValueError("fio reported no jobs")
    for job in jobs:
        if job.get("error"):
            raise ValueError(f"fio job {job.get('jobname')} failed with error {job['error']}")
    want = "rewrite" if mode == "rewrite" else mode
    job = next((j for j in jobs if j.get("jobname") == want), jobs[-1])
    part = job[MODES[mode][1]]
    if not part.get("io_bytes"):
        raise ValueError(f"fio job {job.get('jobname')} moved no bytes")
    meta = {"fio_version": doc.get("fio version"), "job": job.get("jobname"), "io_bytes": part["io_bytes"],
            "runtime_ms": part.get("runtime"), "total_ios": part.get("total_ios")}
    lat = part.get("lat_ns") or {}
    clat = (part.get("clat_ns") or {}).get("percentile") or {}
    out = [Sample("throughput", part["bw_bytes"] / 1e6, "MB/s", True, meta),
           Sample("iops", part["iops"], "IO/s", True, meta)]
    if lat.get("N"):
        out += [Sample("lat_mean", lat["mean"] / 1e3, "us", False, meta),
                Sample("lat_max", lat["max"] / 1e3, "us", False, meta)]
    for metric, key in PERCENTILES.items():
        if key in clat:
            out.append(Sample(metric, clat[key] / 1e3, "us", False, meta))
    out += [Sample("cpu_usr", job.get("usr_cpu", 0.0), "%", False, meta),
            Sample("cpu_sys", job.get("sys_cpu", 0.0), "%", False, meta)]
    return out
