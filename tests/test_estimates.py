"""Per-repetition estimates for the plan: this machine's earlier samples first, the workload's
model otherwise; every workload has one, and the plan says which it used."""

import json
import subprocess
import sys

import numpy as np
import pytest

from virtbench.run import estimates, plan
from virtbench import suite, workloads
from virtbench.store import Store
from virtbench.workloads import mpijob

SUITES = ["suites/quick.toml", "suites/nii-npb.toml", "suites/aist-mpi.toml", "suites/vcluster-hpa.toml",
          "suites/nfs-dd.toml", "suites/iozone-like.toml", "suites/ipsan.toml", "suites/remote-storage-delay.toml",
          "suites/container-vs-vm.toml", "suites/k8s-web.toml", "suites/remote-cluster.toml"]


def _facts_here() -> dict:
    model, cores = estimates.this_machine()
    return {"machine_facts": {"localhost": {"kind": "local", "cpu_model": model, "cores": cores}}}


def record_walls(store: Store, matrix, walls: dict[str, list[float]], facts: dict | None = None) -> str:
    """A stored run of `matrix`'s first cell with the given wall times per environment (as the runner
    records them: start and end of each attempt), so the history is read from a real store."""
    run_id = store.create_run(matrix.to_spec(), suite_name="t", suite_path=None, baseline=matrix.baseline,
                              command="test")
    cell = matrix.cells[0]
    for env in matrix.environments:
        store.save_environment(run_id, env.name, env.driver, {}, facts if facts is not None else _facts_here())
        t = 1000.0
        for i, wall in enumerate(walls.get(env.name, [])):
            store.record_attempt(run_id, cell, env.name, i, warmup=False, status="ok", started=t, ended=t + wall)
            t += wall + 1
        # a warm-up and a failure are not history
        store.record_attempt(run_id, cell, env.name, -1, warmup=True, status="ok", started=t, ended=t + 99)
        store.record_attempt(run_id, cell, env.name, 9, warmup=False, status="failed", started=t, ended=t + 99)
    return run_id


def test_every_shipped_workload_has_a_model():
    for path in SUITES:
        for cell in suite.load(path).cells:
            est = estimates.per_repetition(cell, "host")
            assert est.source == "model" and est.seconds > 0, (path, cell)
    text = plan.make(suite.load("suites/aist-mpi.toml")).text()
    assert "no estimate" not in text and "not counting" not in text
    assert "\n  npb: " in text and "model" in text


def test_npb_model_grows_with_class_and_shrinks_with_cores():
    npb = workloads.get("npb")
    base = {"kernel": "cg", "ranks": 1, "threads": 1, "instances": 1, "total_vcpus": 0}
    s, w, a, b = (npb.expected_seconds({**base, "class": c}) for c in "SWAB")
    assert s < w < a < b
    # the work is the operation count at a per-kernel rate: S is mostly mpirun's start
    assert s == pytest.approx(mpijob.MODEL_START_S, abs=0.5)
    two = npb.expected_seconds({**base, "class": "A", "ranks": 2})
    if mpijob.machine_cores() >= 2:
        assert two - mpijob.MODEL_START_S == pytest.approx((a - mpijob.MODEL_START_S) / 2)
    # more ranks than cores take turns: no faster than all cores
    many = npb.expected_seconds({**base, "class": "A", "ranks": 64})
    assert many == pytest.approx(mpijob.MODEL_START_S + (a - mpijob.MODEL_START_S) / mpijob.machine_cores())


def test_models_follow_their_parameters():
    mpi = workloads.get("mpi")
    p = {"op": "pingpong", "min_bytes": 1, "max_bytes": 1 << 20, "ranks": 2, "instances": 1, "map_by": "node",
         "time_budget": 0.1, "iterations": 0, "threads": 1}
    assert mpi.expected_seconds({**p, "max_bytes": 1 << 22}) > mpi.expected_seconds(p)
    assert mpi.expected_seconds({**p, "time_budget": 0.5}) > mpi.expected_seconds(p)
    assert mpi.expected_seconds({**p, "op": "barrier"}) < mpi.expected_seconds(p)
    hpa = workloads.get("hpa")
    h = {"transactions": 100_000, "items": 1000, "support": 0.007, "avg_size": 10.0, "ranks": 1, "instances": 1}
    assert hpa.expected_seconds({**h, "transactions": 400_000}) > hpa.expected_seconds(h)
    eigen = workloads.get("eigen")
    e = {"class": "S", "ranks": 1, "threads": 1, "instances": 1, "points": 0, "allreduce_bytes": 0}
    assert eigen.expected_seconds({**e, "class": "W"}) > eigen.expected_seconds(e)
    assert eigen.expected_seconds({**e, "points": 64}) > eigen.expected_seconds(e)
    fio = workloads.get("fio")
    f = {"rw": "write", "bs": "1m", "size_mb": 256.0, "scale": 1.0, "numjobs": 1, "runtime": 0.0}
    assert fio.expected_seconds({**f, "size_mb": 1024.0}) > fio.expected_seconds(f)
    assert fio.expected_seconds({**f, "bs": "4k"}) > fio.expected_seconds(f)  # IOPS bound
    assert fio.expected_seconds({**f, "runtime": 30.0}) == pytest.approx(31.0)


def test_history_is_the_median_of_this_machines_samples_of_the_same_cell_and_driver(tmp_path):
    store = Store(tmp_path / "h.sqlite")
    m = suite.adhoc("npb", {"kernel": "ep", "class": "S"}, ["host", "container"])
    record_walls(store, m, {"host": [2.0, 3.0, 10.0], "container": [5.0]})
    hist = estimates.History(store, ["npb"])
    cell = m.cells[0]
    assert estimates.per_repetition(cell, "host", hist) == estimates.Estimate(3.0, "history", 3)
    assert estimates.per_repetition(cell, "container", hist) == estimates.Estimate(5.0, "history", 1)
    # another kind of environment, other parameters: the model
    assert estimates.per_repetition(cell, "vm", hist).source == "model"
    other = suite.adhoc("npb", {"kernel": "ep", "class": "W"}, ["host"]).cells[0]
    assert estimates.per_repetition(other, "host", hist).source == "model"
    p = plan.make(m, store=store)
    assert "npb: 3-5 s per repetition, from 4 earlier samples" in p.text()
    # the plan adds no per-repetition overhead to a measured wall time: (3 + 5) x (rounds + warm-up)
    assert p.seconds[0] == pytest.approx(8.0 * (p.min_repetitions + p.warmup[0]))


def test_history_from_another_machine_is_not_used(tmp_path):
    store = Store(tmp_path / "h.sqlite")
    m = suite.adhoc("npb", {"kernel": "ep", "class": "S"}, ["host"])
    record_walls(store, m, {"host": [2.0]},
            facts={"machine_facts": {"localhost": {"kind": "local", "cpu_model": "Some Other CPU", "cores": 64}}})
    assert estimates.per_repetition(m.cells[0], "host", estimates.History(store, ["npb"])).source == "model"


def test_plan_mixes_history_and_model_and_says_so(tmp_path):
    store = Store(tmp_path / "h.sqlite")
    m = suite.adhoc("npb", {"kernel": "ep,cg", "class": "S"}, ["host"])
    record_walls(store, m, {"host": [4.0, 4.0]})
    line = next(ln for ln in plan.make(m, store=store).text().splitlines() if ln.startswith("  npb:"))
    assert "from 2 earlier samples (1 of 2 cell/environment pairs)" in line and "model (1 of 2)" in line


def test_a_real_npb_run_becomes_the_next_plans_estimate(tmp_path):
    """A tiny NPB run (EP class S, host, 2 repetitions), then the plan of the same run from that
    database: the estimate is the measured wall times' median, and the plan line says so."""
    db = tmp_path / "r.sqlite"
    argv = [sys.executable, "-m", "virtbench.cli", "run", "--workload", "npb", "--param", "kernel=ep",
            "--param", "class=S", "--envs", "host", "--repeat", "2", "--yes", "--db", str(db), "--json"]
    first = subprocess.run(argv, capture_output=True, text=True, timeout=600)
    assert first.returncode == 0, first.stderr[-2000:]
    assert "npb: " in first.stderr and "model" in first.stderr  # nothing earlier in this database
    store = Store(db)
    run_id = json.loads(first.stdout)["run_id"]
    walls = sorted(a["ended_at"] - a["started_at"] for a in store.attempts(run_id) if not a["warmup"])
    assert len(walls) == 2
    m = suite.adhoc("npb", {"kernel": "ep", "class": "S"}, ["host"], repeat=2)
    est = estimates.per_repetition(m.cells[0], "host", estimates.History(store, ["npb"]))
    assert est.source == "history" and est.samples == 2 and est.seconds == pytest.approx(sum(walls) / 2)
    second = subprocess.run([*argv[:-3], "--repeat", "1", "--db", str(db)], capture_output=True, text=True,
                            timeout=600)
    assert second.returncode == 0, second.stderr[-2000:]
    assert "npb: " in second.stderr and "from 2 earlier samples" in " ".join(second.stderr.split())


def test_rounds_for_level_is_where_the_stop_rules_interval_first_reaches_the_tables_level():
    """The plan's earliest stop is the round at which Runner._targets_met's check (stats.paired_ratio
    at 1 - 0.05 / m, stats.ratio_halfwidth) can first be met: never before, even on identical rounds."""
    from virtbench import stats

    rng = np.random.default_rng(3)
    a = list(100 * np.exp(rng.normal(0, 0.001, 30)))
    b = list(100 * np.exp(rng.normal(0, 0.001, 30)))
    for m, expect in ((1, 6), (2, 7), (6, 8), (24, 10)):
        level = 1 - 0.05 / m
        n = stats.rounds_for_level(level)
        assert n == expect
        assert stats.ratio_halfwidth(stats.paired_ratio(b[:n], a[:n], confidence=level), level) < 0.01
        assert stats.ratio_halfwidth(stats.paired_ratio(b[:n - 1], a[:n - 1], confidence=level), level) == float("inf")


def test_the_quick_suites_minimum_is_where_its_tables_can_stop():
    """suites/quick.toml: 12 tests x container and VM = tables of 24 comparisons, which the ratio stop
    rule cannot stop before 10 rounds; its minimum says so rather than promising 6."""
    m = suite.load("suites/quick.toml")
    p = plan.make(m)
    assert p.min_repetitions == 10 and p.stop_floor == (10, 24)
    assert "cannot stop before" not in p.text()
