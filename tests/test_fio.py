"""fio workload: the parser on captured real fio 3.33 JSON, parameter checks (raw devices), the command
it builds, and short real runs on the host (target checks, free space, clean-up)."""

import json
import os
import shutil
import subprocess
import uuid
from pathlib import Path

import pytest

from virtbench.errors import WorkloadFailed
from virtbench.workloads import RunContext, get
from virtbench.workloads.fio import parse_fio

DATA = Path(__file__).parent / "data" / "fio"


def _defaults(**over):
    wl = get("fio")
    p = {x.name: x.default for x in wl.params}
    p.update(over)
    return p


@pytest.mark.parametrize("name,mode,part", [
    ("fio_seqwrite_direct.json", "write", "write"),
    ("fio_seqread_64m.json", "read", "read"),
    ("fio_randread_qd16.json", "randread", "read"),
    ("fio_randwrite_qd4.json", "randwrite", "write"),
    ("fio_rewrite_buffered.json", "rewrite", "write"),
])
def test_parse_captured(name, mode, part):
    raw = (DATA / name).read_text()
    doc = json.loads(raw)
    job = doc["jobs"][-1]
    got = {s.metric: s for s in parse_fio(raw, mode)}
    assert got["throughput"].value == pytest.approx(job[part]["bw_bytes"] / 1e6)
    assert got["throughput"].unit == "MB/s" and got["throughput"].higher_is_better
    assert got["iops"].value == pytest.approx(job[part]["iops"])
    assert got["lat_max"].value == pytest.approx(job[part]["lat_ns"]["max"] / 1e3)
    assert not got["lat_max"].higher_is_better
    assert got["lat_p99"].value == pytest.approx(job[part]["clat_ns"]["percentile"]["99.000000"] / 1e3)
    assert got["cpu_sys"].value == pytest.approx(job["sys_cpu"])
    assert got["throughput"].metadata["fio_version"] == "fio-3.33"


def test_rewrite_reports_the_second_pass():
    raw = (DATA / "fio_rewrite_buffered.json").read_text()
    jobs = json.loads(raw)["jobs"]
    assert [j["jobname"] for j in jobs] == ["layout", "rewrite"]
    (tp,) = [s for s in parse_fio(raw, "rewrite") if s.metric == "throughput"]
    assert tp.metadata["job"] == "rewrite" and tp.value == pytest.approx(jobs[1]["write"]["bw_bytes"] / 1e6)


def test_parse_rejects_bad_output():
    doc = json.loads((DATA / "fio_seqwrite_direct.json").read_text())
    doc["jobs"][0]["error"] = 28
    with pytest.raises(ValueError, match="error 28"):
        parse_fio(json.dumps(doc), "write")
    with pytest.raises(ValueError, match="no JSON"):
        parse_fio("fio: file:filesetup.c:240, func=fstat, error=No such file", "write")
    with pytest.raises(ValueError, match="no jobs"):
        parse_fio('{"jobs": []}', "write")


def test_raw_device_needs_allow_destroy():
    wl = get("fio")
    with pytest.raises(ValueError, match="allow_destroy"):
        wl.validate(_defaults(device="/dev/loop7", rw="write"))
    wl.validate(_defaults(device="/dev/loop7", rw="write", allow_destroy=True))
    wl.validate(_defaults(device="/dev/loop7", rw="randread"))  # reading destroys nothing
    with pytest.raises(ValueError, match="under /dev"):
        wl.validate(_defaults(device="/tmp/disk.img", rw="read"))
    with pytest.raises(ValueError, match="async ioengine"):
        wl.validate(_defaults(iodepth=8, ioengine="psync"))
    with pytest.raises(ValueError, match="smaller than bs"):
        wl.validate(_defaults(size_mb=1, bs="4m"))


def test_fio_command():
    wl = get("fio")
    argv = wl.fio_args(_defaults(rw="rewrite", size_mb=8, scale=0.5, direct=False), "/x", False)
    assert argv.count("--stonewall") == 1 and argv.count("--name=layout") == 1 and "--name=rewrite" in argv
    assert "--size=4194304" in argv and "--direct=0" in argv and "--end_fsync=1" in argv
    assert "--directory=/x" in argv and "--filename_format=vb-fio.$jobnum" in argv
    argv = wl.fio_args(_defaults(rw="randread", bs="4k", iodepth=16, runtime=2), "/dev/loop7", True)
    assert "--ioengine=libaio" in argv and "--time_based" in argv and "--filename=/dev/loop7" in argv
    assert not any(a.startswith("--end_fsync") for a in argv)


def _run(host, **over):
    wl = get("fio")
    p = _defaults(**over)
    wl.validate(p)
    raw = wl.execute({"main": [host]}, p, RunContext(timeout=120))
    return {s.metric: s.value for s in wl.parse(raw, p)}


@pytest.mark.skipif(not shutil.which("fio"), reason="fio is not installed")
def test_real_runs_and_cleanup(host, tmp_path):
    got = _run(host, rw="write", size_mb=4, bs="256k")
    assert got["throughput"] > 0 and got["iops"] > 0
    got = _run(host, rw="randread", size_mb=4, bs="4k", iodepth=4, runtime=0.3)
    assert got["iops"] > 0 and got["lat_p99"] >= got["lat_p50"] > 0
    assert not list(Path(host.scratch_dir()).iterdir())  # every test file removed


@pytest.mark.skipif(not shutil.which("fio"), reason="fio is not installed")
def test_bad_targets_are_clear_failures(host, tmp_path):
    with pytest.raises(WorkloadFailed, match="does not exist"):
        _run(host, size_mb=1, dir=str(tmp_path / "nope"))
    (tmp_path / "file").write_text("x")
    with pytest.raises(WorkloadFailed, match="not a directory"):
        _run(host, size_mb=1, dir=str(tmp_path / "file"))
    with pytest.raises(WorkloadFailed, match=r"do not fit in .*free"):
        _run(host, size_mb=1 << 30, scale=1.0)  # 1 PiB
    assert not list(Path(host.scratch_dir()).iterdir())


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to mount")
def test_read_only_target(host, tmp_path):
    ro = tmp_path / "ro"
    ro.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=1m", f"vbtest-{uuid.uuid4().hex[:6]}", str(ro)], check=True)
    try:
        with pytest.raises(WorkloadFailed, match="not writable"):
            _run(host, size_mb=1, dir=str(ro))
    finally:
        subprocess.run(["umount", str(ro)], check=True)


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("fio"), reason="needs root and fio")
def test_raw_device_written_only_when_named_and_allowed(host, tmp_path):
    backing = tmp_path / "dev.img"
    backing.write_bytes(b"\xab" * (8 << 20))
    dev = subprocess.run(["losetup", "--find", "--show", str(backing)], capture_output=True, text=True,
                         check=True).stdout.strip()
    try:
        got = _run(host, rw="read", device=dev, size_mb=4, bs="1m")  # reading needs no permission
        assert got["throughput"] > 0
        assert backing.read_bytes()[:4] == b"\xab" * 4
        got = _run(host, rw="write", device=dev, allow_destroy=True, size_mb=4, bs="1m", direct=False)
        assert got["throughput"] > 0
    finally:
        subprocess.run(["losetup", "-d", dev], check=True)
    assert backing.read_bytes()[:4] != b"\xab" * 4  # fio wrote it
