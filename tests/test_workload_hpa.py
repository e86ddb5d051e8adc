"""The hpa workload: mining through the runner equals the single-process reference miner
(tests/hpa_reference.py) for 2 supports x 2 rank counts, the data is placed per rank on its
instance's storage and removed afterwards, the parser on a captured output, and bad input."""

import hashlib
import importlib.util
import shutil
import subprocess
from pathlib import Path

import pytest

from virtbench import analysis, shapes, suite, workloads
from virtbench.kernels import native_bin_dir
from virtbench.drivers.container import engine
from virtbench.drivers.base import DriverContext
from virtbench.drivers.host.driver import HostDriver
from virtbench.errors import UserError
from virtbench.model import EnvSpec, Shape
from virtbench.run.runner import Runner
from virtbench.store import Store
from virtbench.workloads import hpa, mpijob
from virtbench.workloads.base import RunContext

HERE = Path(__file__).parent
DATA = HERE / "data" / "mpiwl"
D, N = 10000, 500  # small enough for the reference miner (a second or two per support)

needs_mpi = pytest.mark.skipif(not shutil.which("mpirun"), reason="Open MPI (mpirun) not installed")


def _reference():
    spec = importlib.util.spec_from_file_location("hpa_reference", HERE / "hpa_reference.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _sha(lines):
    return hashlib.sha256("".join(line + "\n" for line in lines).encode()).hexdigest()


@needs_mpi
def test_mining_equals_the_reference_miner(tmp_path):
    ref = _reference()
    gen = tmp_path / "d"
    subprocess.run([str(native_bin_dir() / "vb-questgen"), "--transactions", str(D), "--items", str(N),
                    "--out", str(gen)], check=True, capture_output=True, timeout=60)
    transactions = ref.read_transactions(str(gen))
    expected = {}
    for support in (0.01, 0.02):
        frequent = ref.apriori(transactions, ref.min_count_for(support, len(transactions)))
        expected[support] = (len(frequent), _sha(ref.itemset_lines(frequent)),
                             _sha(ref.rule_lines(frequent, 0.5)))

    store = Store(tmp_path / "r.sqlite")
    m = suite.adhoc("hpa", {"transactions": str(D), "items": str(N), "support": "0.01,0.02", "ranks": "1,2",
                            "instances": "1"}, ["host"], repeat=1)
    m.policy.warmup = 0
    run_id = Runner(store, m).start()
    rows = [r for r in analysis.results(store, run_id)["results"] if r["metric"] in ("time", "frequent_itemsets")]
    assert len(rows) == 8, [r.get("warnings") for r in analysis.results(store, run_id)["results"]]
    for r in rows:
        count, itemsets_sha, rules_sha = expected[r["params"]["support"]]
        assert r["metadata"]["itemsets_sha256"] == itemsets_sha, r["params"]
        assert r["metadata"]["rules_sha256"] == rules_sha, r["params"]
        if r["metric"] == "frequent_itemsets":
            assert r["median"] == count
        else:
            assert r["median"] > 0 and r["unit"] == "s"
        passes = r["metadata"]["passes"]
        assert len(passes) == r["metadata"]["pass_count"] >= 2
        assert sum(p["frequent"] for p in passes) == count
        assert r["metadata"]["bytes_exchanged"] == sum(p["bytes_sent"] for p in passes)
        assert (r["metadata"]["bytes_exchanged"] > 0) == (r["params"]["ranks"] > 1)
    scaling = analysis.results(store, run_id)["scaling"]["efficiency"]
    assert {(e["params"]["support"], e["ranks"]) for e in scaling} == {(s, p) for s in (0.01, 0.02) for p in (1, 2)}


@needs_mpi
def test_each_rank_reads_its_share_from_its_instance_and_nothing_stays(tmp_path):
    """2 instances x 1 rank: rank r's file lives in instance r's storage dir; all removed afterwards."""
    insts = HostDriver(DriverContext("t", tmp_path)).provision(
        EnvSpec("host", "host", shapes.resolve("native"), {"scratch": ""}), 2, "node")
    try:
        wl = workloads.get("hpa")
        params = {"transactions": 2000, "items": 100, "support": 0.02, "confidence": 0.5, "ranks": 2,
                  "instances": 2, "avg_size": 10.0, "pattern_size": 4.0, "seed": 3, "total_vcpus": 0}
        raw = wl.execute({"node": insts}, params, RunContext(timeout=120))
        time_, count, busy = wl.parse(raw, params)
        assert busy.metric == "cpu_busy" and 0 < busy.metadata["cpu_busy_min"] <= busy.value <= 1.1
        dirs = time_.metadata["data_dirs"]
        assert set(dirs) == {i.name for i in insts}
        assert all(dirs[i.name].startswith(i.scratch_dir()) for i in insts)
        assert [p["ranks"] for p in time_.metadata["placement"]] == [[0], [1]]
        assert count.value > 0 and time_.metadata["generator"]["transactions"] == 2000
        for inst in insts:  # data and rank links removed
            assert list(Path(inst.scratch_dir()).glob("vb-hpa-*")) == []
    finally:
        for i in insts:
            i.teardown()


def test_parse_captured_output():
    wl = workloads.get("hpa")
    params = {"transactions": 20000, "items": 1000, "support": 0.01, "confidence": 0.5, "ranks": 2, "instances": 2,
              "avg_size": 10.0, "pattern_size": 4.0, "seed": 1, "total_vcpus": 0}
    time_, count = wl.parse((DATA / "hpa_d20k_s0.01_np2_2inst_host.raw").read_text(), params)
    assert (time_.metric, time_.unit, time_.higher_is_better) == ("time", "s", False)
    assert (count.metric, count.value) == ("frequent_itemsets", 490)
    meta = time_.metadata
    assert meta["pass_count"] == len(meta["passes"]) == 4 and meta["min_count"] == 200
    assert meta["passes"][0] == {"pass": 1, "candidates": 1000, "frequent": meta["passes"][0]["frequent"],
                                 "time_s": meta["passes"][0]["time_s"], "bytes_sent": 0}
    assert len(meta["itemsets_sha256"]) == 64 and meta["rules"] > 0
    with pytest.raises(ValueError, match="expected 20000 on 4"):
        wl.parse((DATA / "hpa_d20k_s0.01_np2_2inst_host.raw").read_text(), {**params, "ranks": 4})


def test_parse_captured_output_with_pass_profile():
    """vb-hpa version 2 prints a profile per pass; the parser carries it into the metadata."""
    wl = workloads.get("hpa")
    params = {"transactions": 20000, "items": 1000, "support": 0.01, "confidence": 0.5, "ranks": 2, "instances": 2,
              "avg_size": 10.0, "pattern_size": 4.0, "seed": 1, "total_vcpus": 0, "ship": "prefix"}
    time_, count = wl.parse((HERE / "data" / "hpa" / "hpa_d20k_s0.01_np2_2inst_host_v2.raw").read_text(), params)
    old, _ = wl.parse((DATA / "hpa_d20k_s0.01_np2_2inst_host.raw").read_text(), params)
    assert count.value == 490 and time_.metadata["code_version"] == 2
    meta = time_.metadata
    assert meta["itemsets_sha256"] == old.metadata["itemsets_sha256"]  # same sets as version 1 found
    assert len(meta["passes"]) == meta["pass_count"] == 4
    assert list(meta["passes"][1]) == [*hpa.PASS_FIELDS, *hpa.PASS_PROFILE_FIELDS]
    assert meta["bytes_exchanged"] == sum(p["bytes_sent"] for p in meta["passes"]) > 0
    assert meta["bytes_exchanged"] < old.metadata["bytes_exchanged"]  # prefix-compressed shipping
    for p in meta["passes"]:
        assert p["gen_s"] + p["count_s"] + p["exchange_s"] + p["gather_s"] <= p["time_s"] * 1.001 + 1e-5
        assert p["subsets"] > 0 and 1 <= p["imbalance"] <= 2
    assert list(old.metadata["passes"][1]) == list(hpa.PASS_FIELDS)  # version 1: no profile keys


def test_parse_cpu_busy_of_the_ranks():
    """The summary's schedstat share becomes a sample; outputs without it (older vb-hpa, kernels without
    schedstat) give none rather than a zero."""
    wl = workloads.get("hpa")
    params = {"transactions": 20000, "items": 1000, "support": 0.01, "confidence": 0.5, "ranks": 2, "instances": 2,
              "avg_size": 10.0, "pattern_size": 4.0, "seed": 1, "total_vcpus": 0, "ship": "prefix"}
    samples = wl.parse((HERE / "data" / "hpa" / "hpa_d20k_s0.01_np2_2inst_host_v3.raw").read_text(), params)
    busy = {s.metric: s for s in samples}["cpu_busy"]
    assert (busy.unit, busy.higher_is_better) == ("fraction", True)
    assert 0.5 < busy.metadata["cpu_busy_min"] <= busy.value <= 1.1
    old = wl.parse((HERE / "data" / "hpa" / "hpa_d20k_s0.01_np2_2inst_host_v2.raw").read_text(), params)
    assert [s.metric for s in old] == ["time", "frequent_itemsets"]


def test_ship_must_be_prefix_or_subsets():
    with pytest.raises(UserError, match="prefix, subsets"):
        suite.adhoc("hpa", {"ship": "pairs"}, ["host"])


@pytest.mark.parametrize("support", ["0", "-0.1", "1.5", "nan"])
def test_support_outside_0_1_is_refused(support):
    with pytest.raises(UserError, match=r"support must be a fraction in \(0, 1\]"):
        suite.adhoc("hpa", {"support": support}, ["host"])


def test_support_of_one_and_counts_with_suffixes_are_fine():
    (cell,) = suite.adhoc("hpa", {"support": "1", "transactions": "20k"}, ["host"]).cells
    assert cell["params"]["support"] == 1.0 and cell["params"]["transactions"] == 20000
    assert workloads.get("hpa").param("transactions").coerce("1M") == 1_000_000


def test_dataset_too_big_for_memory_or_disk(monkeypatch):
    monkeypatch.setattr(mpijob, "mem_available", lambda: 256 * mpijob.MB)
    with pytest.raises(UserError, match="mining 20000000 transactions on 1 rank.* needs about"):
        suite.adhoc("hpa", {"transactions": "20M"}, ["host"])
    problems = hpa.HPA().check_capacity(
        {"transactions": 20_000_000, "items": 1000, "support": 0.007, "confidence": 0.5, "ranks": 4, "instances": 4,
         "avg_size": 10.0, "pattern_size": 4.0, "seed": 1}, EnvSpec("c", "container", Shape("small", 1, 128, 1)))
    assert any("per instance" in p for p in problems)
    monkeypatch.setattr(hpa.shutil, "disk_usage", lambda _: shutil._ntuple_diskusage(1 << 30, 1 << 29, 1 << 20))
    monkeypatch.setattr(mpijob, "mem_available", lambda: 1 << 40)
    with pytest.raises(UserError, match=r"the dataset \(.*\) does not fit"):
        suite.adhoc("hpa", {"transactions": "1M"}, ["host"])


HPA_PARAMS = {"items": 1000, "support": 0.007, "confidence": 0.5, "ranks": 4, "instances": 4, "avg_size": 10.0,
              "pattern_size": 4.0, "seed": 1, "total_vcpus": 0}


def test_dataset_share_against_a_vm_disk_and_memory():
    """A VM without a disk or memory shape: its auto-sized disk's free_space and the driver's default memory."""
    vm = lambda **opts: EnvSpec("vm", "vm", shapes.resolve("native"), {"image_size": "auto", **opts})  # noqa: E731
    big = {**HPA_PARAMS, "transactions": 100_000_000}  # ~0.93 GiB and ~1.2 GiB of memory per instance
    problems = hpa.HPA().check_capacity(big, vm(free_space="512M"))
    assert any("does not fit the 512 MiB free on a VM's disk" in p and "free_space" in p for p in problems)
    assert any("a vm without a memory shape gives 1024 MB" in p for p in problems)
    roomy = EnvSpec("vm", "vm", Shape("big", 1, 2048), {"image_size": "auto", "free_space": "4G"})
    assert hpa.HPA().check_capacity(big, roomy) == []
    small = {**HPA_PARAMS, "transactions": 1_000_000}  # the suite's largest: 10 MB a share
    assert hpa.HPA().check_capacity(small, vm(free_space="512M")) == []


@pytest.mark.skipif(not shutil.which("podman"), reason="podman not installed")
def test_dataset_above_the_container_engines_free_space():
    where, free = engine.engine_storage("auto")
    assert where and free > 0  # asked of the real engine
    tx = int(free / hpa.data_bytes(1, 1000, 10) * 1.5)  # half as much again as the disk holds
    env = EnvSpec("container", "container", shapes.resolve("native"), {"engine": "auto"})
    problems = hpa.HPA().check_capacity({**HPA_PARAMS, "transactions": tx}, env)
    assert any(f"free in the container engine's storage ({where})" in p for p in problems)
    assert hpa.HPA().check_capacity({**HPA_PARAMS, "transactions": 1_000_000}, env) == []


def test_data_size_estimate_is_close_to_the_generator():
    # vb-questgen: 1M transactions, 1000 items, T=10 -> 39,304,413 bytes (measured)
    assert hpa.data_bytes(1_000_000, 1000, 10) == pytest.approx(39_304_413, rel=0.05)


@needs_mpi
def test_a_share_that_does_not_fit_the_storage_fails_before_generating(tmp_path, monkeypatch):
    from virtbench.errors import WorkloadFailed
    insts = HostDriver(DriverContext("t", tmp_path)).provision(
        EnvSpec("host", "host", shapes.resolve("native"), {"scratch": ""}), 1, "node")
    monkeypatch.setattr(hpa, "data_bytes", lambda *a: 1e18)  # an exabyte per instance
    try:
        params = {"transactions": 2000, "items": 100, "support": 0.02, "confidence": 0.5, "ranks": 1,
                  "instances": 1, "avg_size": 10.0, "pattern_size": 4.0, "seed": 3, "total_vcpus": 0}
        with pytest.raises(WorkloadFailed, match="does not fit in the .* kB free"):
            workloads.get("hpa").execute({"node": insts}, params, RunContext(timeout=60))
        assert list(Path(insts[0].scratch_dir()).glob("vb-hpa-*")) == []
    finally:
        insts[0].teardown()


def test_vcluster_suite_runs_the_small_datasets_on_vms_too():
    m = suite.load(Path(__file__).resolve().parents[1] / "suites" / "vcluster-hpa.toml")
    envs = [e.name for e in m.environments]
    assert envs == ["host", "container", "vm"] and m.baseline == "host" and m.policy.monitor
    where = {c["params"]["transactions"]: suite.cell_environments(c, envs) for c in m.cells}
    assert where == {50000: envs, 400000: envs, 500000: ["host", "container"], 1000000: ["host", "container"]}
    assert len(m.cells) == 4  # the VM entry's cells are the first entry's, run once
