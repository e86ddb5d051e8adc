"""The eigen workload: the parser on captured real outputs (verified on 2 ranks, hybrid 1 x 2 threads, and a
perturbed run on 2 instances with a padded allreduce that stays a result with a warning), bad input refused
before anything starts, and one real `virtbench run --workload eigen --param class=S --envs host -r 1`."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from virtbench import suite, workloads
from virtbench.errors import UserError
from virtbench.model import EnvSpec, Shape
from virtbench.workloads import eigen, mpijob

DATA = Path(__file__).parent / "data" / "eigen"
PARAMS = {"class": "S", "ranks": 2, "instances": 1, "threads": 1, "allreduce_bytes": 0, "points": 0,
          "total_vcpus": 0}
METRICS = ["time", "solves_per_s", "mops", "allreduce_time"]

needs_mpi = pytest.mark.skipif(not shutil.which("mpirun"), reason="Open MPI (mpirun) not installed")


def test_parse_captured_verified_run():
    wl = workloads.get("eigen")
    samples = wl.parse((DATA / "eigen_S_np2_host.raw").read_text(), PARAMS)
    assert [(s.metric, s.unit, s.higher_is_better) for s in samples] == [
        ("time", "s", False), ("solves_per_s", "solves/s", True), ("mops", "Mop/s", True),
        ("allreduce_time", "s", False)]
    assert all(s.value > 0 for s in samples)
    meta = samples[0].metadata
    assert meta["verified"] is True and meta["verify"]["check"] == "eigenvalues" and meta["warnings"] == []
    assert 0 < meta["duplicated_fraction"] < 1
    f = meta["duplicated_fraction"]
    assert meta["ideal_efficiency"] == pytest.approx(1 / (2 * f + 1 - f))
    assert meta["allreduce_bytes"] == meta["moments_bytes"] == eigen.moments_bytes("S") == 589824
    assert meta["found"] == meta["expected"] == 9 and meta["systems"] == 16 and meta["block"] == 4
    assert meta["placement"][0]["ranks"] == [0, 1] and meta["cluster_mode"] == "local"
    assert samples[3].value == meta["allreduce_s"]
    with pytest.raises(ValueError, match="expected"):
        wl.parse((DATA / "eigen_S_np2_host.raw").read_text(), {**PARAMS, "ranks": 4})
    with pytest.raises(ValueError, match="one JSON record"):
        wl.parse((DATA / "eigen_S_np2_host.raw").read_text().splitlines()[-1], PARAMS)


def test_parse_hybrid_run_has_no_allreduce_metric_on_one_rank():
    wl = workloads.get("eigen")
    samples = wl.parse((DATA / "eigen_S_np1_t2_host.raw").read_text(), {**PARAMS, "ranks": 1, "threads": 2})
    assert [s.metric for s in samples] == METRICS[:3]
    meta = samples[0].metadata
    assert meta["verified"] is True and meta["threads_per_rank"] == 2 and meta["ideal_efficiency"] == 1.0
    assert meta["thread_mode"] == "systems"  # 16 systems, 2 threads: each thread owns whole solves
    assert "OMP_NUM_THREADS=2" in meta["mpirun"]


def test_parse_failed_verification_is_a_result_with_a_warning():
    """Captured with the real vb-eigen behind a wrapper adding the hidden --perturb (tests/data/eigen/README.md)."""
    wl = workloads.get("eigen")
    raw = (DATA / "eigen_S_np2_2inst_4M_perturbed.raw").read_text()
    params = {**PARAMS, "instances": 2, "allreduce_bytes": 4 * 1024 * 1024}
    samples = wl.parse(raw, params)
    assert [s.metric for s in samples] == METRICS and all(s.value > 0 for s in samples)
    for s in samples:
        assert s.metadata["verified"] is False
        (warning,) = s.metadata["warnings"]
        assert "verification FAILED" in warning and "eigenvalues = " in warning and "reference" in warning
        assert s.metadata["allreduce_bytes"] == 4 * 1024 * 1024 > s.metadata["moments_bytes"]
    assert [p["ranks"] for p in samples[0].metadata["placement"]] == [[0], [1]]
    with pytest.raises(ValueError, match="allreduce_bytes"):  # the run must be the one asked for
        wl.parse(raw, {**params, "allreduce_bytes": 0})


def test_byte_counts_and_padding():
    assert eigen.byte_count("1G") == 1024**3 and eigen.byte_count("256M") == 256 * 1024**2 and eigen.byte_count(4096) == 4096
    for bad in ("1.5G", "12Q", "-1", True):
        with pytest.raises(ValueError):
            eigen.byte_count(bad)
    assert eigen.reduced_bytes({"class": "S", "allreduce_bytes": 0}) == 589824
    assert eigen.reduced_bytes({"class": "S", "allreduce_bytes": 1_000_001}) == 1_000_008  # whole doubles
    assert eigen.mem_per_rank({"class": "B", "allreduce_bytes": 1024**3}) > 1024**3
    # threads that own whole solves each hold the solver's blocks; threads sharing rows do not
    one = eigen.mem_per_rank({"class": "W", "ranks": 1, "threads": 1})
    assert eigen.mem_per_rank({"class": "W", "ranks": 1, "threads": 2}) > one
    assert eigen.mem_per_rank({"class": "W", "ranks": 16, "threads": 2}) == one


@pytest.mark.parametrize("params, message", [
    ({"class": "X"}, "not one of S, W, A, B"),
    ({"ranks": "17"}, "run on at most 16 ranks"),
    ({"ranks": "3", "points": "4"}, "run on at most 2 ranks"),
    ({"points": "7"}, "points must be even"),
    ({"allreduce_bytes": "1000"}, "smaller than class S's moments (589824 bytes)"),
    ({"allreduce_bytes": "12Q"}, "not a valid byte count"),
    ({"ranks": "3", "instances": "2"}, "multiple of instances"),
])
def test_bad_input_is_refused_with_a_clear_message(params, message):
    with pytest.raises(UserError) as err:
        suite.adhoc("eigen", params, ["host"])
    assert message in str(err.value)


def test_not_enough_memory_on_the_machine_or_the_shape(monkeypatch):
    monkeypatch.setattr(mpijob, "mem_available", lambda: 512 * mpijob.MB)
    with pytest.raises(UserError, match=r"eigen class S on 2 rank\(s\) needs about .* only 512 MiB available"):
        suite.adhoc("eigen", {"ranks": "2", "allreduce_bytes": "1G"}, ["host"])
    problems = eigen.Eigen().check_capacity({**PARAMS, "allreduce_bytes": 1024**3},
                                            EnvSpec("ctr", "container", Shape("small", 1, 1024)))
    assert any("eigen class S needs about" in p and "gives 1024 MB" in p for p in problems)


@needs_mpi
def test_virtbench_run_end_to_end(tmp_path):
    """The real command: vb-eigen on the host through the runner, stored and analysed."""
    res = subprocess.run([sys.executable, "-m", "virtbench.cli", "run", "--workload", "eigen", "--param", "class=S",
                          "--envs", "host", "-r", "1", "--db", str(tmp_path / "r.sqlite"), "--json"],
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    data = json.loads(res.stdout)
    rows = {r["metric"]: r for r in data["results"] if r["workload"] == "eigen" and "." not in r["metric"]}
    assert set(rows) == {"time", "solves_per_s", "mops"}  # one rank: no allreduce time
    for r in rows.values():
        assert r["n"] == 1 and r["median"] > 0 and r["environment"] == "host"
        assert r["metadata"]["verified"] is True, r
        assert 0 < r["metadata"]["duplicated_fraction"] < 1 and r["metadata"]["ideal_efficiency"] == 1.0
        assert not any("FAILED" in w for w in r["warnings"])
    assert rows["time"]["unit"] == "s" and rows["solves_per_s"]["unit"] == "solves/s"


def test_describe_is_json():
    d = json.loads(json.dumps(workloads.get("eigen").describe()))
    assert d["name"] == "eigen"
    assert {p["name"] for p in d["params"]} >= {"class", "ranks", "instances", "threads", "allreduce_bytes", "points"}
