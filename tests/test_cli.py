"""The CLI as a user meets it: JSON contracts, listings, export, compare, and clear errors."""

import csv
import io
import json
import subprocess
import sys

import pytest

from virtbench.monitor import is_monitor_metric


def vb(*args, check=True):
    res = subprocess.run([sys.executable, "-m", "virtbench.cli", *args], capture_output=True, text=True,
                         timeout=300)
    if check:
        assert res.returncode == 0, res.stderr
    return res


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory):
    db = str(tmp_path_factory.mktemp("cli") / "r.sqlite")
    ids = []
    for _ in range(2):
        res = vb("run", "--workload", "system", "--param", "test=dhrystone,pipe", "--param", "copies=1",
                 "--duration", "0.1", "--envs", "host", "--repeat", "3", "--db", db, "--json")
        ids.append(json.loads(res.stdout)["run_id"])
    return db, ids


def test_run_json_contract(two_runs):
    db, (a, _) = two_runs
    data = json.loads(vb("show", a, "--db", db, "--json").stdout)
    assert data["run_id"] == a and data["baseline"] == "host"
    # Besides the workload's rows, the monitor's summaries (host.cpu_util_mean ...) may appear.
    measured = [r for r in data["results"] if not is_monitor_metric(r["metric"])]
    assert {r["metric"] for r in measured} == {"dhrystone", "pipe", "index"}
    assert all(r["metadata"].get("monitor") for r in data["results"] if is_monitor_metric(r["metric"]))
    for r in measured:
        assert r["n"] == 3 and r["ci_low"] <= r["median"] <= r["ci_high"]
        assert r["condition"] == {} and r["failures"] == 0 and isinstance(r["metadata"], dict)


def test_runs_listing_and_prefix(two_runs):
    db, ids = two_runs
    rows = json.loads(vb("runs", "--db", db, "--json").stdout)
    assert [r["id"] for r in rows][:2] == ids[::-1] and all(r["samples"] == 6 for r in rows)
    text = vb("runs", "--db", db).stdout
    assert ids[0] in text and "completed" in text
    assert ids[0] in vb("show", ids[0][:-2] if ids[0][:-2] != ids[1][:-2] else ids[0], "--db", db).stdout


def test_compare_matches_cells(two_runs):
    db, (a, b) = two_runs
    data = json.loads(vb("compare", a, b, "--db", db, "--json").stdout)
    measured = [r for r in data["results"] if not is_monitor_metric(r["metric"])]
    assert {r["metric"] for r in measured} == {"dhrystone", "pipe"}
    for r in measured:
        assert r["n_a"] == r["n_b"] == 3 and r["ratio"] > 0
        assert r["ratio"] == pytest.approx(r["median_b"] / r["median_a"])
    assert "against" in vb("compare", a, b, "--db", db).stdout


def test_export_csv_and_json(two_runs, tmp_path):
    db, (a, _) = two_runs
    rows = [r for r in csv.DictReader(io.StringIO(vb("export", a, "--db", db).stdout))
            if not is_monitor_metric(r["metric"])]
    assert len(rows) == 6 and {r["metric"] for r in rows} == {"dhrystone", "pipe"}
    assert all(float(r["value"]) > 0 for r in rows)
    out = tmp_path / "run.json"
    vb("export", a, "--format", "json", "-o", str(out), "--db", db)
    doc = json.loads(out.read_text())
    assert doc["format"] == "virtbench-run/1"
    assert len([s for s in doc["samples"] if not is_monitor_metric(s["metric"])]) == 6
    assert doc["environments"][0]["facts"]["kernel"]


def test_export_and_api_timeseries(two_runs, tmp_path):
    """The monitor's series of a real (short, monitored) run: CSV, JSON and the pandas API agree."""
    from virtbench.api import open_store
    from virtbench.store import Store

    db, (a, _) = two_runs
    attempts = {x["id"]: x for x in Store(db).attempts(a)}
    rows = list(csv.DictReader(io.StringIO(vb("export", a, "--timeseries", "--db", db).stdout)))
    assert rows and {int(r["attempt_id"]) for r in rows} == set(attempts)  # every repetition has its series
    assert {r["instance"] for r in rows} == {"host"} and {"cpu_util", "mem_used"} <= {r["metric"] for r in rows}
    assert {r["workload"] for r in rows} == {"system"} and all(json.loads(r["params"])["copies"] == "1" for r in rows)
    for r in rows:
        att = attempts[int(r["attempt_id"])]
        assert att["started_at"] <= float(r["t"]) <= att["ended_at"] + 1
        assert float(r["elapsed_s"]) == pytest.approx(float(r["t"]) - att["started_at"])
        assert r["warmup"] == str(bool(att["warmup"])) and r["source"] and r["unit"]
    util = [float(r["value"]) for r in rows if r["metric"] == "cpu_util"]
    assert all(0 <= v <= 1 for v in util) and max(util) > 0.3  # dhrystone kept a core busy

    out = tmp_path / "run.json"
    vb("export", a, "--format", "json", "--timeseries", "-o", str(out), "--db", db)
    doc = json.loads(out.read_text())
    assert len(doc["timeseries"]) == len(rows) and isinstance(doc["timeseries"][0]["params"], dict)
    vb("export", a, "--format", "json", "-o", str(out), "--db", db)
    assert "timeseries" not in json.loads(out.read_text())  # only when asked: a big sweep has many rows

    df = open_store(db).timeseries(a)
    assert len(df) == len(rows) and set(df["instance"]) == {"host"}
    assert df["params"].map(lambda p: p["test"]).isin(["dhrystone", "pipe"]).all()
    cpu = open_store(db).timeseries(a, metric="cpu_util", instance="host")
    assert set(cpu["metric"]) == {"cpu_util"} and len(cpu) == len(util)
    assert (cpu.groupby("attempt_id")["t"].apply(lambda t: t.is_monotonic_increasing)).all()


def test_workloads_listing():
    items = json.loads(vb("workloads", "--json").stdout)
    system = next(w for w in items if w["name"] == "system")
    assert {p["name"] for p in system["params"]} == {"test", "copies", "duration"}
    # UnixBench's twelve tests, then virtbench's own file open/stat/close test (run on request)
    assert [m["name"] for m in system["metrics"]] == ["dhrystone", "whetstone", "execl", "fcopy1024", "fcopy256",
                                                     "fcopy4096", "pipe", "context", "spawn", "shell1", "shell8",
                                                     "syscall", "fileopen"]


@pytest.mark.parametrize("args,needle,hint", [
    (["show", "nope"], "no results database at", "--db"),
    (["report", "nope"], "no results database at", "--db"),
    (["run", "--workload", "nosuch"], "unknown workload 'nosuch'", "system"),
    (["run", "--workload", "system", "--envs", "bare"], "unknown environment 'bare'", "container"),
    (["run", "--workload", "system", "--param", "copies"], "not KEY=VALUE", "--param"),
    (["run", "--workload", "system", "--param", "tset=pipe"], "key 'workloads.params.tset'", "test"),
    (["run"], "give either a SUITE", "suites/quick.toml"),
    (["run", "missing.toml"], "does not exist", "suites/quick.toml"),
])
def test_bad_input_says_what_and_how(tmp_path, args, needle, hint):
    res = vb(*args, "--db", str(tmp_path / "e.sqlite"), check=False)
    assert res.returncode == 2, res.stderr
    assert needle in res.stderr and hint in res.stderr
    assert "Traceback" not in res.stderr


def test_unknown_run_in_a_database_that_exists(two_runs):
    db, _ = two_runs
    res = vb("show", "nope", "--db", db, check=False)
    assert res.returncode == 2 and "run id 'nope' is not in" in res.stderr and "virtbench runs" in res.stderr


def test_reading_commands_do_not_create_a_database(tmp_path):
    # A mistyped --db must not leave an empty database behind (and then say the run is not in it).
    for args in (["runs"], ["show", "x"], ["export", "x"], ["compare", "x", "y"]):
        res = vb(*args, "--db", str(tmp_path / "typo.sqlite"), check=False)
        assert res.returncode == 2 and "no results database at" in res.stderr, (args, res.stderr)
    assert not (tmp_path / "typo.sqlite").exists()


def test_help_lists_subcommands():
    text = vb("--help").stdout
    for cmd in ("doctor", "image", "run", "runs", "show", "compare", "export", "workloads"):
        assert cmd in text
