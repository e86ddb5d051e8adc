"""The npb workload: every kernel at class S on 2 ranks through the runner on the host (verified),
the hybrid mode, the parser on captured outputs (a failed verification stays a result, with a
warning), and bad input refused before anything starts."""

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from virtbench import analysis, suite, workloads
from virtbench.kernels import native_bin_dir
from virtbench.errors import SuiteError, UserError
from virtbench.model import EnvSpec, Shape
from virtbench.run.runner import Runner
from virtbench.store import Store
from virtbench.workloads import mpijob, npb

DATA = Path(__file__).parent / "data" / "mpiwl"
KERNELS = ["ep", "cg", "mg", "ft", "is", "lu", "sp", "bt", "sp-mz", "bt-mz", "lu-mz"]

needs_mpi = pytest.mark.skipif(not shutil.which("mpirun"), reason="Open MPI (mpirun) not installed")


def _rows(store, run_id, metrics=("mops", "time")):
    return [r for r in analysis.results(store, run_id)["results"] if r["metric"] in metrics]


@needs_mpi
def test_every_kernel_class_S_on_2_ranks_verifies_on_host(tmp_path):
    store = Store(tmp_path / "r.sqlite")
    m = suite.adhoc("npb", {"kernel": ",".join(KERNELS), "class": "S", "ranks": "2"}, ["host"], repeat=1)
    m.policy.warmup = 0
    run_id = Runner(store, m).start()
    rows = _rows(store, run_id)
    assert {(r["params"]["kernel"], r["metric"]) for r in rows} == {(k, m) for k in KERNELS for m in ("mops", "time")}
    for r in rows:
        assert r["n"] == 1 and r["median"] > 0, r
        assert r["metadata"]["verified"] is True, r
        assert r["metadata"]["placement"] == [{"instance": "host-node-0", "address": "127.0.0.1", "ranks": [0, 1]}]
        assert r["metadata"]["cluster_mode"] == "local" and r["metadata"]["memory_pressure"] is False
        assert not any("FAILED" in w for w in r["warnings"])
    assert {r["unit"] for r in rows} == {"Mop/s", "s"}


@needs_mpi
def test_hybrid_mpi_openmp_threads_verify(tmp_path):
    store = Store(tmp_path / "r.sqlite")
    m = suite.adhoc("npb", {"kernel": "mg", "class": "S", "ranks": "1", "threads": "2"}, ["host"], repeat=1)
    m.policy.warmup = 0
    rows = _rows(store, Runner(store, m).start())
    assert rows and all(r["metadata"]["verified"] is True and r["metadata"]["threads_per_rank"] == 2 for r in rows)
    assert "OMP_NUM_THREADS=2" in rows[0]["metadata"]["mpirun"]


def test_parse_captured_verified_run():
    wl = workloads.get("npb")
    raw = (DATA / "npb_cg_S_np2_host.raw").read_text()
    params = {"kernel": "cg", "class": "S", "ranks": 2, "instances": 1, "threads": 1, "total_vcpus": 0}
    mops, time_ = wl.parse(raw, params)
    assert (mops.metric, mops.unit, mops.higher_is_better) == ("mops", "Mop/s", True)
    assert (time_.metric, time_.unit, time_.higher_is_better) == ("time", "s", False)
    assert mops.metadata["verified"] is True and mops.metadata["verify"]["check"] == "zeta"
    assert mops.metadata["placement"][0]["ranks"] == [0, 1] and mops.metadata["warnings"] == []
    with pytest.raises(ValueError, match="expected"):
        wl.parse(raw, {**params, "kernel": "mg"})
    with pytest.raises(ValueError, match="one JSON record"):
        wl.parse(raw.splitlines()[-1], params)


def test_parse_failed_verification_is_a_result_with_a_warning():
    wl = workloads.get("npb")
    raw = (DATA / "npb_ep_S_np2_2inst_perturbed.raw").read_text()
    params = {"kernel": "ep", "class": "S", "ranks": 2, "instances": 2, "threads": 1, "total_vcpus": 0}
    samples = wl.parse(raw, params)
    assert [s.metric for s in samples] == ["mops", "time"] and all(s.value > 0 for s in samples)
    for s in samples:
        assert s.metadata["verified"] is False
        (warning,) = s.metadata["warnings"]
        assert "verification FAILED" in warning and "sx" in warning and "reference" in warning
    assert samples[0].metadata["placement"] == [{"instance": "host-node-0", "address": "127.0.0.1", "ranks": [0]},
                                                {"instance": "host-node-1", "address": "127.0.0.1", "ranks": [1]}]


def test_hybrid_capture_parses():
    wl = workloads.get("npb")
    raw = (DATA / "npb_mg_S_np1_t2_host.raw").read_text()
    (mops, _) = wl.parse(raw, {"kernel": "mg", "class": "S", "ranks": 1, "instances": 1, "threads": 2,
                               "total_vcpus": 0})
    assert mops.metadata["verified"] is True and mops.metadata["threads_per_rank"] == 2


def test_analysis_row_is_unverified_when_any_sample_failed(tmp_path):
    """Row-level `verified` is false as soon as one repetition failed its check, with the warning counted."""
    wl = workloads.get("npb")
    store = Store(tmp_path / "r.sqlite")
    m = suite.adhoc("npb", {"kernel": "ep", "class": "S", "ranks": "2", "instances": "2"}, ["host"], repeat=2)
    run_id = store.create_run(m.to_spec(), suite_name=m.name, suite_path=None, baseline="host", command="test")
    (cell,) = m.cells
    good = (DATA / "npb_ep_S_np2_2inst_perturbed.raw").read_text().replace('"verified":false', '"verified":true')
    good = good.replace('"passed":false', '"passed":true')
    for rep, raw in enumerate([good, (DATA / "npb_ep_S_np2_2inst_perturbed.raw").read_text()]):
        store.record_attempt(run_id, cell, "host", rep, warmup=False, status="ok", started=0, ended=1, raw=raw,
                             samples_=wl.parse(raw, cell["params"]), sample_metadata={"driver": "host"})
    rows = [r for r in analysis.results(store, run_id)["results"] if r["metric"] == "mops"]
    (row,) = rows
    assert row["n"] == 2 and row["metadata"]["verified"] is False
    assert any("verification FAILED" in w and "(1 of 2 samples)" in w for w in row["warnings"])


# -- bad input, before anything starts ----------------------------------------------------------

@pytest.mark.parametrize("params, message", [
    ({"class": "X"}, "not one of S, W, A, B"),
    ({"kernel": "xx"}, "not one of ep, cg, mg, ft, is, lu, sp, bt, sp-mz, bt-mz, lu-mz"),
    ({"kernel": "lu", "ranks": "7"}, "lu class S can use at most 6 ranks"),
    ({"kernel": "bt", "class": "W", "ranks": "13"}, "bt class W can use at most 12 ranks"),
    ({"kernel": "sp-mz", "ranks": "5"}, "sp-mz class S can use at most 4 ranks"),
    ({"kernel": "cg", "ranks": "3"}, "power-of-two"),
    ({"kernel": "is", "ranks": "6"}, "power-of-two"),
    ({"kernel": "mg", "ranks": "32"}, "at most 16 ranks"),
    ({"kernel": "ep", "ranks": "300"}, "at most 256 ranks"),
    ({"kernel": "is", "threads": "2"}, "threads must be 1"),
    ({"kernel": "ep", "ranks": "3", "instances": "2"}, "multiple of instances"),
    ({"kernel": "ep", "class": "W", "ranks": "256"}, "far above this machine"),
])
def test_bad_input_is_refused_with_a_clear_message(params, message):
    with pytest.raises(UserError) as err:
        suite.adhoc("npb", {"kernel": "ep", **params}, ["host"])
    assert message in str(err.value)


def test_not_enough_memory_on_the_machine(monkeypatch):
    monkeypatch.setattr(mpijob, "mem_available", lambda: 512 * mpijob.MB)
    with pytest.raises(UserError, match=r"ft class B on 2 rank\(s\) needs about .* only 512 MiB available"):
        suite.adhoc("npb", {"kernel": "ft", "class": "B", "ranks": "2"}, ["host"])


def test_suite_file_error_names_file_line_and_key(tmp_path):
    path = tmp_path / "bad.toml"
    path.write_text('[environments.host]\ndriver = "host"\n\n[[workloads]]\nname = "npb"\n'
                    'params = { kernel = "cg", class = "S", ranks = 6 }\n')
    with pytest.raises(SuiteError) as err:
        suite.load(path)
    assert f"{path}:" in str(err.value) and "power-of-two" in str(err.value) and "params" in err.value.key


def test_cluster_larger_than_a_shape_or_the_machine_fails_before_the_run_starts(tmp_path, monkeypatch):
    store = Store(tmp_path / "r.sqlite")
    path = tmp_path / "fit.toml"
    path.write_text('[shapes.tiny]\nvcpus = 1\nmemory_mb = 128\n\n'
                    '[environments.ctr]\ndriver = "container"\nshape = "tiny"\n\n'
                    '[[workloads]]\nname = "npb"\nparams = { kernel = "mg", class = "W", ranks = 2, instances = 1 }\n')
    m = suite.load(path)
    with pytest.raises(UserError) as err:
        Runner(store, m).start()
    assert "mg class W needs about" in str(err.value) and "shape tiny gives 128 MB" in str(err.value)
    assert store.runs() == []  # nothing started, nothing recorded

    # 8 instances x 128 MB on a machine with 512 MB available
    monkeypatch.setattr(mpijob, "mem_available", lambda: 512 * mpijob.MB)
    problems = npb.NPB().check_capacity({"kernel": "ep", "class": "S", "ranks": 8, "instances": 8, "threads": 1},
                                        EnvSpec("ctr", "container", Shape("tiny", 1, 128)))
    assert any("8 instances x 128 MB" in p for p in problems)
    # ranks far above a shape's vCPUs
    problems = npb.NPB().check_capacity({"kernel": "ep", "class": "S", "ranks": 8, "instances": 1, "threads": 1},
                                        EnvSpec("ctr", "container", Shape("one", 1, None)))
    assert any("far above the shape's 1 vCPU" in p for p in problems)


def test_a_vm_with_swap_may_outgrow_its_memory_but_not_memory_and_swap():
    """Study 000's m1.small: MG class W (about 140 MB) on a 128 MB VM refused without swap, run with a
    swap file that holds the rest, refused again when even memory + swap cannot hold it."""
    mg = {"kernel": "mg", "class": "W", "ranks": 1, "instances": 1, "threads": 1}

    def vm(**opts):
        return EnvSpec("vm-m1small", "vm", Shape("m1.small", 1, 128), opts)
    assert any("shape m1.small gives 128 MB" in p for p in npb.NPB().check_capacity(mg, vm()))
    assert not any("MB" in p for p in npb.NPB().check_capacity(mg, vm(swap="1G")))
    problems = npb.NPB().check_capacity({**mg, "class": "A"}, vm(swap="64M"))
    assert any("gives 128 MB and 64 MiB of swap" in p for p in problems), problems


@needs_mpi
@pytest.mark.parametrize("kernel", ["lu", "sp", "bt", "sp-mz", "bt-mz", "lu-mz"])
def test_pseudo_app_rank_limits_are_the_binarys(kernel):
    """One rank above the Python limit, vb-npb itself refuses (exit 2, before computing)."""
    top = npb.max_ranks(kernel, "S")
    assert npb.rank_problem(kernel, "S", top) is None and npb.rank_problem(kernel, "S", top + 1)
    binary = native_bin_dir() / "vb-npb"
    res = subprocess.run(["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", str(top + 1), str(binary),
                          kernel, "S"], capture_output=True, text=True, timeout=120)
    assert res.returncode == 2 and res.stdout == "" and kernel in res.stderr, res.stderr


def test_rank_rules_match_the_kernel_binary():
    """The Python rank rules are the kernels' own (native/npb/*.c check functions)."""
    assert npb.rank_problem("ep", "S", 3) is None
    assert npb.max_ranks("cg", "S") == 700 and npb.max_ranks("ft", "A") == 128 and npb.max_ranks("mg", "S") == 16
    assert npb.mem_per_rank("ft", "A", 1) > npb.mem_per_rank("ft", "A", 2) > npb.mem_per_rank("ft", "S", 2)
    assert json.loads(json.dumps(workloads.get("npb").describe()))["name"] == "npb"
