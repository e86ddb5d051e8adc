"""The mpi workload: size parameters, the parser on captured outputs, one result row per message size
(series identity in analysis and compare), a real small-range run on the host, and bad input."""

import shutil
from pathlib import Path

import pytest

from virtbench import analysis, suite, workloads
from virtbench.errors import UserError
from virtbench.run.runner import Runner
from virtbench.store import Store
from virtbench.workloads import mpi

DATA = Path(__file__).parent / "data" / "mpiwl"
NATIVE_DATA = Path(__file__).parent / "data" / "mpibench"  # vb-mpibench's own output, no harness line
PARAMS = {"op": "pingpong", "min_bytes": 1, "max_bytes": 1 << 20, "ranks": 2, "instances": 1, "map_by": "node",
          "time_budget": 0.05, "iterations": 0}

needs_mpi = pytest.mark.skipif(not shutil.which("mpirun"), reason="Open MPI (mpirun) not installed")


@pytest.mark.parametrize("raw, value", [(0, 0), ("4096", 4096), ("64K", 65536), ("4M", 4 << 20), ("1G", 1 << 30),
                                        ("2kib", 2048), (1024, 1024)])
def test_sizes_accept_binary_suffixes(raw, value):
    assert workloads.get("mpi").param("max_bytes").coerce(raw) == value


@pytest.mark.parametrize("raw", ["2G", "-1", "4X", "1.5M", True])
def test_bad_sizes(raw):
    with pytest.raises(ValueError):
        workloads.get("mpi").param("max_bytes").coerce(raw)


def test_sizes_follow_vb_mpibench():
    assert mpi.sizes("pingpong", 1, 16) == [0, 1, 2, 4, 8, 16]
    assert mpi.sizes("allreduce", 1, 16) == [0, 4, 8, 16]
    assert mpi.sizes("bcast", 100, 1024) == [0, 128, 256, 512, 1024]
    assert mpi.sizes("alltoall", 1, 4) == [0, 1, 2, 4]
    assert mpi.sizes("barrier", 1, 1 << 20) == [0]  # no message


@pytest.mark.parametrize("op, factor", [("sendrecv", 2), ("exchange", 4), ("allgather", None), ("alltoall", None),
                                        ("gather", None), ("scatter", None)])
def test_parse_new_ops_imb_throughput(op, factor):
    """Captured vb-mpibench outputs (2 ranks, up to 1 MiB): MB/s only where IMB defines it, with its factor."""
    wl = workloads.get("mpi")
    params = {**PARAMS, "op": op}
    samples = wl.parse((NATIVE_DATA / f"{op}_np2_1m.jsonl").read_text(), params)
    times = [s for s in samples if s.metric == "time_us"]
    bws = [s for s in samples if s.metric == "bandwidth_mbps"]
    assert [s.metadata["bytes"] for s in times] == mpi.sizes(op, 1, 1 << 20)
    for s in times:
        assert s.metadata["t_min_us"] <= s.value <= s.metadata["t_max_us"] and s.metadata["code_version"] == 2
    if factor is None:
        assert bws == []
    else:
        assert [b.metadata["bytes"] for b in bws] == mpi.sizes(op, 1, 1 << 20)[1:]
        for b in bws:
            t = next(s for s in times if s.metadata["bytes"] == b.metadata["bytes"])
            assert b.value == pytest.approx(factor * b.metadata["bytes"] / t.value)


def test_parse_barrier_one_size_no_bandwidth():
    wl = workloads.get("mpi")
    samples = wl.parse((NATIVE_DATA / "barrier_np3.jsonl").read_text(), {**PARAMS, "op": "barrier", "ranks": 3})
    assert [(s.metric, s.metadata["bytes"]) for s in samples] == [("time_us", 0)]
    with pytest.raises(ValueError, match="ranks"):
        wl.parse((NATIVE_DATA / "barrier_np3.jsonl").read_text(), {**PARAMS, "op": "barrier"})


def test_memory_estimate_counts_one_message_per_rank():
    wl = workloads.get("mpi")
    per = {op: wl._per_rank({"op": op, "ranks": 4, "max_bytes": 1 << 20}) - mpi.mpijob.MPI_RUNTIME_PER_RANK
           for op in mpi.OPS}
    assert per["pingpong"] == 2 << 20 and per["exchange"] == 3 << 20 and per["bcast"] == 1 << 20
    assert per["alltoall"] == 8 << 20 and per["gather"] == per["scatter"] == 5 << 20 and per["barrier"] == 0


def test_parse_host_capture_one_sample_per_size_and_metric():
    wl = workloads.get("mpi")
    samples = wl.parse((DATA / "mpi_pingpong_host_1m.raw").read_text(), PARAMS)
    times = [s for s in samples if s.metric == "time_us"]
    bws = [s for s in samples if s.metric == "bandwidth_mbps"]
    assert [s.metadata["bytes"] for s in times] == mpi.sizes("pingpong", 1, 1 << 20)
    assert [s.metadata["bytes"] for s in bws] == mpi.sizes("pingpong", 1, 1 << 20)[1:]  # no bandwidth at 0 bytes
    for s in times:
        assert s.unit == "us" and not s.higher_is_better
        assert s.metadata["t_min_us"] <= s.value <= s.metadata["t_max_us"]
    for b in bws:  # MB/s with 1 MB = 10^6 bytes: bytes per microsecond
        t = next(s for s in times if s.metadata["bytes"] == b.metadata["bytes"])
        assert b.value == pytest.approx(b.metadata["bytes"] / t.value) and b.higher_is_better


def test_parse_container_capture_ranks_on_different_instances():
    wl = workloads.get("mpi")
    samples = wl.parse((DATA / "mpi_pingpong_container_2inst_1m.raw").read_text(), {**PARAMS, "instances": 2})
    meta = samples[0].metadata
    assert meta["cluster_mode"] == "ssh" and [p["ranks"] for p in meta["placement"]] == [[0], [1]]
    assert meta["placement"][0]["address"] != meta["placement"][1]["address"]
    assert "btl_tcp_if_include 10.88.0.0/16" in meta["mpirun"] and "--bind-to none" in meta["mpirun"]


def test_parse_rejects_other_sizes_or_ops():
    wl = workloads.get("mpi")
    raw = (DATA / "mpi_pingpong_host_1m.raw").read_text()
    with pytest.raises(ValueError, match="sizes"):
        wl.parse(raw, {**PARAMS, "max_bytes": 1 << 10})
    with pytest.raises(ValueError, match="expected bcast"):
        wl.parse(raw, {**PARAMS, "op": "bcast", "min_bytes": 1})
    with pytest.raises(ValueError, match="no records"):
        wl.parse("", PARAMS)


@pytest.mark.parametrize("params, message", [
    ({"op": "pingpong", "ranks": "1"}, "at least 2 ranks"),
    ({"min_bytes": "8K", "max_bytes": "4K"}, "above max_bytes"),
    ({"max_bytes": "2G"}, "max_bytes"),
    ({"op": "bcast", "ranks": "3", "instances": "2"}, "multiple of instances"),
    ({"op": "nope"}, "not one of pingpong"),
    ({"op": "scatterv"}, "barrier"),
])
def test_bad_input(params, message):
    with pytest.raises(UserError) as err:
        suite.adhoc("mpi", params, ["host"])
    assert message in str(err.value)


@needs_mpi
def test_small_range_on_host_gives_one_row_per_size(tmp_path):
    store = Store(tmp_path / "r.sqlite")
    ops = ("pingpong", "reduce", "exchange", "alltoall", "barrier")
    m = suite.adhoc("mpi", {"op": ",".join(ops), "max_bytes": "1K", "time_budget": "0.01"}, ["host"], repeat=2)
    m.policy.warmup = 0
    run_id = Runner(store, m).start()
    rows = [r for r in analysis.results(store, run_id)["results"] if r["metric"] in ("time_us", "bandwidth_mbps")]
    for op in ops:
        mine = [r for r in rows if r["params"]["op"] == op]
        times = [r for r in mine if r["metric"] == "time_us"]
        assert [r["params"]["bytes"] for r in times] == mpi.sizes(op, 1, 1024)  # sorted by size
        assert len({r["cell_key"] for r in times}) == len(times)  # each size its own row
        assert all(r["cell_key"].endswith(f"/bytes={r['params']['bytes']}") for r in mine)
        assert all(r["n"] == 2 and r["median"] >= 0 and r["unit"] == "us" for r in times)
        with_mbps = op in mpi.MB_FACTOR  # IMB: alltoall and barrier report time only
        assert len([r for r in mine if r["metric"] == "bandwidth_mbps"]) == (len(times) - 1 if with_mbps else 0)
    # run-vs-run comparison matches the same sizes up
    cmp = [r for r in analysis.compare(store, run_id, run_id)["results"]
           if r["metric"] in ("time_us", "bandwidth_mbps")]
    assert len(cmp) == len(rows) and all(r["ratio"] == pytest.approx(1.0) for r in cmp)
    assert {(r["params"]["op"], r["params"]["bytes"]) for r in cmp} == {(r["params"]["op"], r["params"]["bytes"])
                                                                         for r in rows}
