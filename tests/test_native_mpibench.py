"""Tests of native/mpibench (vb-mpibench): every operation of the IMB-MPI1 set on 2 and
3 ranks, the JSON records, the data check (a test-only flag corrupts a received byte, which
must fail the run), bad input, and the captured outputs in tests/data/mpibench that parser
tests rely on.

Needs Open MPI (mpicc, mpirun); skipped without it.  Runs use --time-budget 0.01,
so the file takes a few seconds.
"""

import json
import subprocess
from pathlib import Path

import pytest

import npbkit

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "native" / "mpibench"
DATA = ROOT / "tests" / "data" / "mpibench"

KEYS = ["op", "bytes", "ranks", "iterations", "t_min_us", "t_avg_us", "t_max_us", "mbps", "version"]
OPS = ["pingpong", "sendrecv", "exchange", "bcast", "reduce", "allreduce", "allgather", "alltoall",
       "gather", "scatter", "barrier"]
MB_FACTOR = {"pingpong": 1, "sendrecv": 2, "exchange": 4, "bcast": 1, "reduce": 1, "allreduce": 1}
MPIRUN = ["mpirun", "--allow-run-as-root", "--oversubscribe"]


@pytest.fixture(scope="module")
def vb_mpibench(tmp_path_factory):
    return npbkit.build(tmp_path_factory, SRC, "vb-mpibench")


def mpirun(np, binary, *args, timeout=60):
    return subprocess.run([*MPIRUN, "-np", str(np), str(binary), *map(str, args)],
                          capture_output=True, text=True, timeout=timeout)


def expected_sizes(op, min_bytes, max_bytes):
    if op == "barrier":
        return [0]
    unit = 4 if op in ("reduce", "allreduce") else 1
    size = 1
    while size < max(min_bytes, unit):
        size *= 2
    sizes = [0]
    while size <= max_bytes:
        sizes.append(size)
        size *= 2
    return sizes


def check_records(stdout, op, ranks, sizes, iterations=None, version=2):
    recs = [json.loads(line) for line in stdout.splitlines()]
    assert [r["bytes"] for r in recs] == sizes
    for r in recs:
        assert list(r) == KEYS
        assert r["op"] == op and r["ranks"] == ranks and r["version"] == version
        if iterations is None:
            # IMB's rule: 1000 calls, at most 40 MiB per size (version 1: 1000), never fewer than 2
            cap = 1000 if version == 1 else max(2, min(1000, (40 << 20) // max(r["bytes"], 1)))
            assert 2 <= r["iterations"] <= cap
        else:
            assert r["iterations"] == iterations
        # t over the ranks taking part (printed to 1 ns)
        assert 0 <= r["t_min_us"] <= r["t_avg_us"] + 1e-3 and r["t_avg_us"] <= r["t_max_us"] + 1e-3
        factor = MB_FACTOR.get(op, 0) if version > 1 else 1
        if r["bytes"] == 0 or not factor:
            assert r["mbps"] is None
        else:
            assert r["t_avg_us"] > 0
            # MB/s with 1 MB = 10^6 bytes: bytes per microsecond (t is printed to 1 ns)
            rel = max(2e-3, 6e-4 / r["t_avg_us"])
            assert r["mbps"] == pytest.approx(factor * r["bytes"] / r["t_avg_us"], rel=rel, abs=2e-3)
    return recs


@pytest.mark.parametrize("op", OPS)
def test_two_ranks_up_to_64k(vb_mpibench, op):
    proc = mpirun(2, vb_mpibench, op, "--max-bytes", "64K", "--time-budget", "0.01")
    assert proc.returncode == 0, proc.stderr
    check_records(proc.stdout, op, 2, expected_sizes(op, 1, 65536))


@pytest.mark.parametrize("op", OPS)
def test_three_ranks_check_their_data(vb_mpibench, op):
    # odd rank counts: neighbours differ left and right, roots rotate over 3, PingPong's rank 2 waits
    proc = mpirun(3, vb_mpibench, op, "--min-bytes", "512", "--max-bytes", "4K", "--iterations", "5")
    assert proc.returncode == 0, proc.stderr
    check_records(proc.stdout, op, 3, expected_sizes(op, 512, 4096), 5)


@pytest.mark.parametrize("op", [op for op in OPS if op != "barrier"])  # a barrier carries no data
@pytest.mark.parametrize("np", [2, 3])
def test_corrupted_data_fails_the_check(vb_mpibench, op, np):
    proc = mpirun(np, vb_mpibench, op, "--max-bytes", "64", "--iterations", "2", "--test-corrupt")
    assert proc.returncode == 4, proc.stderr
    first = 4 if op in ("reduce", "allreduce") else 1
    assert f"vb-mpibench: data check failed: {op} at {first} bytes" in proc.stderr
    assert [json.loads(line)["bytes"] for line in proc.stdout.splitlines()] == [0]  # nothing after


def test_barrier_has_no_message_sizes(vb_mpibench):
    proc = mpirun(2, vb_mpibench, "barrier", "--max-bytes", "1M", "--iterations", "10", "--test-corrupt")
    assert proc.returncode == 0, proc.stderr
    check_records(proc.stdout, "barrier", 2, [0], 10)


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
    (["scatterv"], 2, "unknown operation 'scatterv'"),
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


@pytest.mark.parametrize("op,need", [("reduce", 2 << 30), ("scatter", 2 << 29), ("bcast", 1 << 30)])
def test_unallocatable_buffers_exit_3(vb_mpibench, op, need):
    # send + receive buffers at --max-bytes under a 700 MB address-space limit
    size = "1G" if op != "scatter" else "512M"
    proc = subprocess.run(["bash", "-c", f"ulimit -v 700000; exec {vb_mpibench} {op} "
                           f"--max-bytes {size}"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 3, proc.stderr
    assert proc.stdout == ""
    assert f"cannot allocate {need} bytes" in proc.stderr and "--max-bytes" in proc.stderr


@pytest.mark.parametrize("path", sorted(DATA.glob("*.jsonl")), ids=lambda p: p.name)
def test_captured_outputs_are_well_formed(path):
    text = path.read_text()
    first = json.loads(text.splitlines()[0])
    op, ranks = first["op"], first["ranks"]
    recs = check_records(text, op, ranks, [json.loads(l)["bytes"] for l in text.splitlines()],
                         iterations=None, version=first["version"])
    sizes = [r["bytes"] for r in recs]
    assert sizes[0] == 0 and sizes == sorted(sizes) and len(set(sizes)) == len(sizes)
