"""The runner, for real on the host: a short run end to end, adaptive stopping, failures as data,
interruption and resume."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from virtbench import analysis, monitor, suite
from virtbench.run.runner import Events, Runner
from virtbench.store import Store
from vbleftovers import run_events

def _measured(samples):
    """The workload's own samples: without the monitor's summaries (metadata monitor=true)."""
    return [s for s in samples if not monitor.is_monitor_sample(s["metadata_json"])]


CONTRACT_KEYS = {"workload", "params", "condition", "metric", "unit", "environment", "n", "median", "ci_low",
                 "ci_high", "ratio", "ratio_ci_low", "ratio_ci_high", "higher_is_better", "failures", "metadata"}


def test_short_real_run_end_to_end(tmp_path):
    store = Store(tmp_path / "r.sqlite")
    m = suite.adhoc("system", {"test": "dhrystone,syscall", "copies": "1,vcpus", "duration": "0.1"},
                    ["host"], repeat=2)
    run_id = Runner(store, m).start()
    assert store.run(run_id)["status"] == "completed"
    attempts = store.attempts(run_id)
    assert sum(a["warmup"] for a in attempts) == 4  # one warm-up per cell
    assert all(a["status"] == "ok" for a in attempts)
    assert len(_measured(store.samples(run_id))) == 8  # 4 cells x 2 repetitions
    (env,) = store.environments(run_id)
    assert env["facts"]["cores"] >= 1 and env["facts"]["kernel"] and env["facts"]["driver"] == "host"

    data = analysis.results(store, run_id)
    assert data["run_id"] == run_id and data["baseline"] == "host"
    rows = data["results"]
    assert all(CONTRACT_KEYS <= set(r) for r in rows)
    dhry = [r for r in rows if r["metric"] == "dhrystone" and r["params"]["copies"] == "1"][0]
    values = [s["value"] for s in _measured(store.samples(run_id)) if s["cell_key"] == dhry["cell_key"]]
    assert dhry["n"] == 2 and dhry["median"] == pytest.approx(sorted(values)[0] / 2 + sorted(values)[1] / 2)
    assert dhry["ratio"] == 1.0 and dhry["metadata"]["index"] > 0
    index_rows = [r for r in rows if r["metric"] == "index"]
    assert {r["params"]["copies"] for r in index_rows} == {"1", "vcpus"}

    df = store.dataframe(run_id)
    df = df[~df["metadata"].map(lambda m: bool(m.get("monitor")))]
    assert len(df) == 8 and set(df["metric"]) == {"dhrystone", "syscall"}


def test_adaptive_stop_and_max(tmp_path):
    store = Store(tmp_path / "r.sqlite")
    m = suite.adhoc("system", {"test": "dhrystone", "copies": "1", "duration": "0.05"}, ["host"])
    m.policy.warmup, m.policy.min_repetitions, m.policy.max_repetitions = 0, 6, 8
    m.policy.ci_target = 10.0  # any CI is tight enough: stop at the minimum
    rid = Runner(store, m).start()
    assert len(_measured(store.samples(rid))) == 6
    m.policy.ci_target = 1e-9  # never tight enough: run to the maximum
    rid = Runner(store, m).start()
    assert len(_measured(store.samples(rid))) == 8


def test_adaptive_run_takes_what_a_verdict_needs(tmp_path):
    """min_repetitions below what a 95 % median CI needs (6) is raised, and the runner says so;
    a fixed count (--repeat) is kept."""
    store = Store(tmp_path / "r.sqlite")
    notes = []

    class Ev(Events):
        def note(self, message):
            notes.append(message)

    m = suite.adhoc("system", {"test": "dhrystone", "copies": "1", "duration": "0.05"}, ["host"])
    m.policy.warmup, m.policy.min_repetitions, m.policy.max_repetitions, m.policy.ci_target = 0, 3, 10, 10.0
    rid = Runner(store, m, events=Ev()).start()
    assert len(_measured(store.samples(rid))) == 6
    assert any("min_repetitions raised from 3 to 6" in n for n in notes)
    fixed = suite.adhoc("system", {"test": "dhrystone", "copies": "1", "duration": "0.05"}, ["host"], repeat=3)
    fixed.policy.warmup = 0
    rid = Runner(store, fixed).start()
    assert len(_measured(store.samples(rid))) == 3
    meta = json.loads(store.samples(rid)[0]["metadata_json"])
    assert isinstance(meta["load_1m"], float) and meta["cores_here"] >= 1


def _root_can_mount():
    return os.geteuid() == 0 and subprocess.run(["which", "mount"], capture_output=True).returncode == 0


@pytest.mark.skipif(not _root_can_mount(), reason="needs root to mount a tiny tmpfs")
def test_full_disk_is_a_recorded_failure_and_other_samples_survive(tmp_path):
    full = tmp_path / "full"
    full.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(full)]).returncode != 0:
        pytest.skip("cannot mount tmpfs here")
    try:
        store = Store(tmp_path / "r.sqlite")
        m = suite.adhoc("system", {"test": "dhrystone,fcopy4096", "copies": "1", "duration": "0.2"},
                        ["host"], repeat=2)
        m.environments[0].options["scratch"] = str(full)
        rid = Runner(store, m).start()
    finally:
        subprocess.run(["umount", str(full)])
    assert store.run(rid)["status"] == "completed"
    failed = [a for a in store.attempts(rid) if a["status"] == "failed"]
    assert failed and all(json.loads(a["params_json"])["test"] == "fcopy4096" for a in failed)
    assert any("space" in (a["reason"] or "").lower() for a in failed), failed[0]["reason"]
    assert len([s for s in store.samples(rid) if s["metric"] == "dhrystone"]) == 2
    rows = analysis.results(store, rid)["results"]
    fcopy = [r for r in rows if r["params"].get("test") == "fcopy4096"]
    assert fcopy and fcopy[0]["n"] == 0 and fcopy[0]["failures"] >= 2
    assert "failed" in " ".join(fcopy[0]["warnings"])


def _wait_for_samples(db, count, timeout=60):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if db.exists():
            try:
                store = Store(db)
                runs = store.runs()
                if runs and len(_measured(store.samples(runs[0]["id"]))) >= count:
                    return runs[0]["id"]
            except Exception:
                pass
        time.sleep(0.1)
    raise AssertionError("no samples appeared")


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_interrupt_then_resume_loses_nothing(tmp_path, sig):
    db = tmp_path / "r.sqlite"
    cmd = [sys.executable, "-m", "virtbench.cli", "run", "--workload", "system", "--param",
           "test=dhrystone,pipe,syscall", "--param", "copies=1", "--duration", "0.2", "--envs", "host",
           "--repeat", "3", "--db", str(db)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    run_id = _wait_for_samples(db, 2)
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert f"virtbench run --resume {run_id}" in err
    store = Store(db)
    assert store.run(run_id)["status"] == "interrupted"
    before = {s["id"]: s["value"] for s in store.samples(run_id)}
    assert 2 <= len(_measured(store.samples(run_id))) < 9
    import tempfile
    from pathlib import Path

    assert not list(Path(tempfile.gettempdir()).glob(f"virtbench-{run_id}-*"))  # work dir removed

    res = subprocess.run([sys.executable, "-m", "virtbench.cli", "run", "--resume", run_id, "--db", str(db),
                          "--json"], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    after = {s["id"]: s["value"] for s in store.samples(run_id)}
    assert all(after[i] == v for i, v in before.items())  # every earlier sample kept as it was
    ok = [a for a in store.attempts(run_id) if a["status"] == "ok" and not a["warmup"]]
    assert len(ok) == 9 and len(_measured(store.samples(run_id))) == 9
    assert store.run(run_id)["status"] == "completed"
    assert json.loads(res.stdout)["run_id"] == run_id
    # The report says so; the resume's sweep removed nothing of this run's (its interrupt did).
    assert run_events(store, run_id) == ["resumed"]


PER_ENTRY_SUITE = """\
[suite]
name = "per-entry"
baseline = "host"
warmup = 0
monitor = false

[environments.host]
driver = "host"

[environments.other]
driver = "host"

[[workloads]]
name = "system"
params = { duration = 0.05, test = "dhrystone", copies = "1" }
environments = ["other"]

[[workloads]]
name = "system"
params = { duration = 0.05, test = "syscall", copies = "1" }
"""


def test_entry_environments_run_where_named_and_resume_from_the_stored_matrix(tmp_path):
    path = tmp_path / "s.toml"
    path.write_text(PER_ENTRY_SUITE)
    store = Store(tmp_path / "r.sqlite")
    m = suite.load(path, repeat=2)
    # Resume path: the run's matrix is read back from the store (JSON), nothing from the suite file.
    rid = store.create_run(m.to_spec(), suite_name=m.name, suite_path=None, baseline=m.baseline, command="t")
    store.set_status(rid, "interrupted")
    Runner(store, None).resume(rid)
    assert store.run(rid)["status"] == "completed"
    ran = {(a["params_json"], a["environment"]) for a in store.attempts(rid)}
    dhry = [p for p, _ in ran if "dhrystone" in p][0]
    sysc = [p for p, _ in ran if "syscall" in p][0]
    assert ran == {(dhry, "other"), (sysc, "host"), (sysc, "other")}
    assert len(store.attempts(rid)) == 6  # 3 (cell, environment) pairs x 2 repetitions

    rows = {(r["metric"], r["environment"]): r for r in analysis.results(store, rid)["results"]}
    assert ("dhrystone", "host") not in rows  # no row where the cell was never meant to run
    lone = rows[("dhrystone", "other")]  # absolute figures without a ratio: its baseline did not run it
    assert lone["n"] == 2 and lone["median"] > 0 and lone["ratio"] is None
    assert any("does not run on the baseline" in w for w in lone["warnings"])
    assert rows[("syscall", "host")]["ratio"] == 1.0 and rows[("syscall", "other")]["ratio"] > 0


def test_an_environment_no_later_cell_needs_is_torn_down_before_the_next_cell(tmp_path):
    path = tmp_path / "s.toml"
    path.write_text(PER_ENTRY_SUITE.replace('test = "syscall", copies = "1" }',
                                            'test = "syscall", copies = "1" }\nenvironments = ["host"]'))
    store = Store(tmp_path / "r.sqlite")
    rid = Runner(store, suite.load(path, repeat=1)).start()
    (other,) = [i for i in store.instances(rid) if i["environment"] == "other"]
    syscall = [a for a in store.attempts(rid) if "syscall" in a["params_json"]]
    assert syscall and all(a["environment"] == "host" for a in syscall)
    # 'other' ran only the first cell: gone before the second cell started, not at the end of the run
    assert other["lifecycle"]["teardown_end"] <= min(a["started_at"] for a in syscall)
    (host,) = [i for i in store.instances(rid) if i["environment"] == "host"]
    assert host["lifecycle"]["teardown_start"] >= max(a["ended_at"] for a in syscall)


def test_a_cell_the_warm_up_finds_unavailable_is_skipped_once(tmp_path):
    """NPB's constant-total-cores cell (total_vcpus=1) cannot be arranged on this machine's host: the
    warm-up finds out, and no measured repetition repeats the same refusal."""
    if (os.cpu_count() or 1) < 2:
        pytest.skip("needs a host with 2 or more CPUs (total_vcpus=1 must not match)")
    store = Store(tmp_path / "s.sqlite")
    m = suite.adhoc("npb", {"kernel": "ep", "class": "S", "ranks": "1", "instances": "1", "total_vcpus": "1"},
                    ["host"], repeat=3)
    run_id = Runner(store, m).start()
    attempts = store.attempts(run_id)
    assert [(a["status"], a["warmup"]) for a in attempts] == [("skipped", True)]
    assert "compares arrangements of 1" in attempts[0]["reason"]
    rows = analysis.results(store, run_id)["results"]
    assert rows and all("compares arrangements of 1" in r["skipped"] for r in rows)


def test_steady_rule_of_the_auto_warmup():
    from virtbench.run.runner import WARMUP_STEADY, steady

    assert WARMUP_STEADY == 0.05
    assert steady({"a": 100.0, "b": 2.0}, {"a": 104.9, "b": 1.95})
    assert not steady({"a": 100.0, "b": 2.0}, {"a": 106.0, "b": 2.0})  # one value still moving
    assert not steady({"a": 100.0}, {"a": 100.0, "b": 1.0})  # a value appeared: not the same run shape
    assert not steady({"a": 0.0}, {"a": 1e-9})  # zero is steady only at zero
    assert steady({"a": 0.0}, {"a": 0.0})


def test_auto_warmup_runs_until_steady(tmp_path):
    """warmup = "auto" (suite file): warm-up runs until two in a row agree within 5 %, at most 5; the count
    is in every measured sample's metadata and matches the stored warm-up attempts."""
    from virtbench.run.runner import WARMUP_MAX

    path = tmp_path / "s.toml"
    path.write_text('[suite]\nname = "w"\nwarmup = "auto"\nmin_repetitions = 2\nmax_repetitions = 2\n'
                    '[environments.host]\ndriver = "host"\n'
                    '[[workloads]]\nname = "system"\nparams = { test = "dhrystone", copies = "1", duration = 0.1 }\n')
    m = suite.load(str(path))
    assert m.policy.warmup == "auto"
    store = Store(tmp_path / "r.sqlite")
    rid = Runner(store, m).start()
    warm = [a for a in store.attempts(rid) if a["warmup"]]
    assert 2 <= len(warm) <= WARMUP_MAX and all(a["status"] == "ok" for a in warm)
    measured = _measured(store.samples(rid))
    assert len(measured) == 2
    assert {json.loads(s["metadata_json"])["warmups"] for s in measured} == {len(warm)}


@pytest.mark.parametrize("value", ['"some"', "-1", "1.5", "true"])
def test_bad_warmup_names_file_and_key(tmp_path, value):
    path = tmp_path / "s.toml"
    path.write_text(f'[suite]\nname = "w"\nwarmup = {value}\n[environments.host]\ndriver = "host"\n'
                    '[[workloads]]\nname = "system"\n')
    with pytest.raises(Exception) as exc:
        suite.load(str(path))
    assert "s.toml" in str(exc.value) and "warmup" in str(exc.value) and '"auto"' in str(exc.value)
