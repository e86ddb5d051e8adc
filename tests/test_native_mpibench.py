"""Tests of native/mpibench (vb-mpibench): PingPong, Bcast, Reduce and Allreduce on
2 ranks with messages up to 64 KiB, the JSON records, bad input, and the captured
outputs in tests/data/mpibench that parser tests rely on.

Needs Open MPI (mpicc, mpirun); skipped without it.  Runs use --time-budget 0.01,
so the file takes a few seconds.
"""

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "native" / "mpibench"
PREBUILT = ROOT / "native" / "build" / "bin" / "vb-mpibench"
DATA = ROOT / "tests" / "data" / "mpibench"

KEYS = ["op", "bytes", "ranks", "iterations", "t_min_us", "t_avg_us", "t_max_us", "mbps", "version"]
OPS = ["pingpong", "bcast", "reduce", "allreduce"]
MPIRUN = ["mpirun", "--allow-run-as-root", "--oversubscribe"]


@pytest.fixture(scope="module")
def vb_mpibench(tmp_path_factory):
    if not shutil.which("mpirun"):
        pytest.skip("Open MPI (mpirun) not installed")
    if shutil.which("make") and shutil.which(os.environ.get("MPICC", "mpicc")):
        bindir = tmp_path_factory.mktemp("bin")
        build = subprocess.run(["make", "-s", "-C", str(SRC), f"BINDIR={bindir}"],
                               capture_output=True, text=True, timeout=120)
        assert build.returncode == 0, f"build failed:\n{build.stderr}"
        assert "warning" not in build.stderr, f"build warnings:\n{build.stderr}"
        return bindir / "vb-mpibench"
    if PREBUILT.exists():
        return PREBUILT
    pytest.skip("no mpicc and no prebuilt native/build/bin/vb-mpibench")


def mpirun(np, binary, *args, timeout=60):
    return subprocess.run([*MPIRUN, "-np", str(np), str(binary), *map(str, args)],
                          capture_output=True, text=True, timeout=timeout)


def expected_sizes(op, min_bytes, max_bytes):
    unit = 4 if op in ("reduce", "allreduce") else 1
    size = 1
    while size < max(min_bytes, unit):
        size *= 2
    sizes = [0]
    while size <= max_bytes:
        sizes.append(size)
        size *= 2
    return sizes


def check_records(stdout, op, ranks, sizes, iterations=None):
    recs = [json.loads(line) for line in stdout.splitlines()]
    assert [r["bytes"] for r in recs] == sizes
    for r in recs:
        assert list(r) == KEYS
        assert r["op"] == op and r["ranks"] == ranks and r["version"] == 1
        if iterations is None:
            assert 2 <= r["iterations"] <= 1000
        else:
            assert r["iterations"] == iterations
        assert 0 <= r["t_min_us"] <= r["t_avg_us"] <= r["t_max_us"]
        if r["bytes"] == 0:
            assert r["mbps"] is None
        else:
            assert r["t_avg_us"] > 0
            # MB/s with 1 MB = 10^6 bytes: bytes per microsecond (t is printed to 1 ns)
            rel = max(2e-3, 6e-4 / r["t_avg_us"])
            assert r["mbps"] == pytest.approx(r["bytes"] / r["t_avg_us"], rel=rel, abs=2e-3)
    return recs


@pytest.mark.parametrize("op", OPS)
def test_two_ranks_up_to_64k(vb_mpibench, op):
    proc = mpirun(2, vb_mpibench, op, "--max-bytes", "64K", "--time-budget", "0.01")
    assert proc.returncode == 0, proc.stderr
    check_records(proc.stdout, op, 2, expected_sizes(op, 1, 65536))


def test_fixed_iterations_and_min_bytes(vb_mpibench):
    proc = mpirun(2, vb_mpibench, "allreduce", "--min-bytes", "3", "--max-bytes", "1KiB",
                  "--iterations", "5", "--warmup", "0")
    assert proc.returncode == 0, proc.stderr
    # 0, then powers of two from 4 (reductions work on whole floats)
    check_records(proc.stdout, "allreduce", 2, [0, 4, 8, 16, 32, 64, 128, 256, 512, 1024], 5)


def test_pingpong_with_idle_ranks(vb_mpibench):
    proc = mpirun(3, vb_mpibench, "pingpong", "--min-bytes", "1K", "--max-bytes", "4K",
                  "--iterations", "20")
    assert proc.returncode == 0, proc.stderr
    check_records(proc.stdout, "pingpong", 3, [0, 1024, 2048, 4096], 20)


def test_single_rank_collective_without_mpirun(vb_mpibench):
    proc = subprocess.run([str(vb_mpibench), "bcast", "--max-bytes", "16", "--iterations", "3"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    check_records(proc.stdout, "bcast", 1, [0, 1, 2, 4, 8, 16], 3)


@pytest.mark.parametrize("args,np,needle", [
    (["pingpong"], 1, "at least 2 ranks"),
    (["scatter"], 2, "unknown operation 'scatter'"),
    (["bcast", "--min-bytes", "8K", "--max-bytes", "4K"], 1, "larger than --max-bytes"),
    (["bcast", "--max-bytes", "2G"], 1, "above 1G"),
    (["bcast", "--max-bytes", "12Q"], 1, "bad --max-bytes"),
    (["reduce", "--iterations", "0"], 1, "bad --iterations"),
    (["reduce", "--time-budget", "-1"], 1, "bad --time-budget"),
    (["reduce", "--frobnicate", "1"], 1, "unknown option"),
    ([], 1, "missing operation"),
])
def test_bad_input_exits_2(vb_mpibench, args, np, needle):
    if np == 1:  # a singleton needs no mpirun, which keeps stderr to our one line
        proc = subprocess.run([str(vb_mpibench), *args], capture_output=True, text=True,
                              timeout=60)
        lines = proc.stderr.splitlines()
        assert len(lines) == 1
    else:
        proc = mpirun(np, vb_mpibench, *args)
        lines = [line for line in proc.stderr.splitlines() if line.startswith("vb-mpibench:")]
        assert len(lines) == 1  # rank 0 only
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert lines[0].startswith("vb-mpibench: ") and needle in lines[0]


def test_unallocatable_buffers_exit_3(vb_mpibench):
    # 2 x 1 GiB of reduce buffers under a 700 MB address-space limit
    proc = subprocess.run(["bash", "-c", f"ulimit -v 700000; exec {vb_mpibench} reduce "
                           "--max-bytes 1G"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 3, proc.stderr
    assert proc.stdout == ""
    assert "cannot allocate" in proc.stderr and "--max-bytes" in proc.stderr


@pytest.mark.parametrize("path", sorted(DATA.glob("*.jsonl")), ids=lambda p: p.name)
def test_captured_outputs_are_well_formed(path):
    text = path.read_text()
    first = json.loads(text.splitlines()[0])
    op, ranks = first["op"], first["ranks"]
    recs = check_records(text, op, ranks, [json.loads(l)["bytes"] for l in text.splitlines()],
                         iterations=None)
    sizes = [r["bytes"] for r in recs]
    assert sizes[0] == 0 and sizes == sorted(sizes) and len(set(sizes)) == len(sizes)
