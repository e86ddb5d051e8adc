"""Scaling analysis: parallel efficiency E(p) = T1 / (p x Tp) with CIs, the constant-total-cores shape
comparison (pure), and cells whose shape an environment does not make being skipped there (real)."""

import shutil

import pytest

from virtbench import analysis, suite
from virtbench.stats import scaling
from virtbench.run.runner import Runner
from virtbench.store import Store


def _row(key, env, ranks, median, instances=1, threads=1, total=0, metric="time", **extra):
    params = {"kernel": "ep", "class": "S", "ranks": ranks, "instances": instances, "threads": threads,
              "total_vcpus": total}
    return {"cell_key": key, "workload": "npb", "params": params, "condition": {}, "metric": metric,
            "environment": env, "n": 3, "median": median, "ci_low": median * 0.9, "ci_high": median * 1.1, **extra}


def test_efficiency_against_the_one_rank_time():
    rows = [_row("a", "host", 1, 8.0), _row("b", "host", 2, 5.0), _row("c", "host", 4, 4.0),
            _row("d", "host", 2, 4.0, threads=2), _row("a", "host", 1, 80.0, metric="mops")]
    values = {("a", "time", "host"): [7.9, 8.0, 8.1], ("b", "time", "host"): [4.9, 5.0, 5.1],
              ("c", "time", "host"): [3.9, 4.0, 4.1], ("d", "time", "host"): [4.0, 4.0, 4.0]}
    eff = {(e["ranks"], e["threads"]): e for e in scaling.efficiency(rows, values)}
    assert set(eff) == {(1, 1), (2, 1), (4, 1), (2, 2)}
    assert eff[(1, 1)]["efficiency"] == 1.0 and eff[(1, 1)]["speedup_ci_low"] == 1.0
    assert eff[(2, 1)]["speedup"] == pytest.approx(8 / 5) and eff[(2, 1)]["efficiency"] == pytest.approx(0.8)
    assert eff[(4, 1)]["efficiency"] == pytest.approx(0.5) and eff[(4, 1)]["cores"] == 4
    assert eff[(2, 2)]["cores"] == 4 and eff[(2, 2)]["efficiency"] == pytest.approx(0.5)
    e = eff[(2, 1)]
    assert e["efficiency_ci_low"] <= e["efficiency"] <= e["efficiency_ci_high"]
    assert e["params"] == {"kernel": "ep", "class": "S"}


def test_no_efficiency_without_a_one_rank_run():
    rows = [_row("b", "host", 2, 5.0), _row("c", "host", 4, 4.0)]
    assert scaling.efficiency(rows, {}) == []


def test_shapes_compare_arrangements_of_the_same_cores():
    rows = [_row("x", "c-2x1", 2, 6.0, instances=2, total=2), _row("y", "c-1x2", 2, 4.0, instances=1, total=2)]
    values = {("x", "time", "c-2x1"): [6.0, 6.1, 5.9], ("y", "time", "c-1x2"): [4.0, 4.1, 3.9]}
    out = scaling.shapes(rows, values, baseline="c-1x2")
    by = {s["shape"]: s for s in out}
    assert set(by) == {"2 x 1", "1 x 2"}
    assert by["1 x 2"]["ratio"] == 1.0 and by["2 x 1"]["ratio"] == pytest.approx(1.5)
    assert by["2 x 1"]["reference"] == "c-1x2" and by["2 x 1"]["vcpus_per_instance"] == 1
    assert scaling.efficiency(rows, values) == []  # no 1-rank time: no efficiency
    assert scaling.shapes(rows[:1], values, baseline="c-1x2") == []  # one arrangement: nothing to compare


@pytest.mark.skipif(not shutil.which("mpirun"), reason="Open MPI (mpirun) not installed")
def test_a_cell_runs_only_where_the_environment_makes_its_shape(tmp_path):
    """host instances have 2 vCPUs each here: total_vcpus=N runs 1 instance, skips 2 (4 vCPUs)."""
    from virtbench.workloads import mpijob
    cores = mpijob.machine_cores()
    store = Store(tmp_path / "r.sqlite")
    m = suite.adhoc("npb", {"kernel": "ep", "class": "S", "ranks": "2", "instances": "1,2",
                            "total_vcpus": str(cores)}, ["host"], repeat=1)
    m.policy.warmup = 0
    run_id = Runner(store, m).start()
    data = analysis.results(store, run_id)
    ran = [r for r in data["results"] if r["metric"] == "time"]
    skipped = [r for r in data["results"] if r.get("skipped")]
    assert [r["params"]["instances"] for r in ran] == [1]
    assert len(skipped) == 1 and "cluster shape 2 x" in skipped[0]["skipped"]
    assert "shapes" not in data.get("scaling", {})  # one arrangement ran: nothing to compare


def test_small_groups_say_the_level_their_intervals_have():
    """3 and 3 times: the Mann-Whitney interval of T1 / Tp reaches 90 %, not 95 %: the rows say so."""
    rows = [_row("a", "host", 1, 8.0, ci_level=0.75), _row("b", "host", 2, 5.0, ci_level=0.75)]
    values = {("a", "time", "host"): [7.9, 8.0, 8.1], ("b", "time", "host"): [4.9, 5.0, 5.1]}
    eff = {e["ranks"]: e for e in scaling.efficiency(rows, values)}
    assert eff[2]["ci_level"] == pytest.approx(0.9) and eff[1]["ci_level"] is None
    rows = [_row("x", "c-2x1", 2, 6.0, instances=2, total=2, ci_level=0.75),
            _row("y", "c-1x2", 2, 4.0, instances=1, total=2, ci_level=0.75)]
    values = {("x", "time", "c-2x1"): [6.0, 6.1, 5.9], ("y", "time", "c-1x2"): [4.0, 4.1, 3.9]}
    by = {s["shape"]: s for s in scaling.shapes(rows, values, baseline="c-1x2")}
    assert by["2 x 1"]["ratio_ci_level"] == pytest.approx(0.9) and by["2 x 1"]["time_ci_level"] == 0.75
