"""Runs that say when they failed, for real: an SSH host that does not resolve, the exit status,
the end summary with the whole first line of the reason, and --retry-failed in the same run."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from virtbench import analysis
from virtbench.run import outcomes
from virtbench.store import Store
from vbleftovers import run_events

GHOST = "all:\n  hosts:\n    ghost:\n      ansible_host: no-such-host.invalid\n"


def vb(*args):
    return subprocess.run([sys.executable, "-m", "virtbench.cli", *args], capture_output=True, text=True,
                          timeout=600)


@pytest.fixture
def ghost(tmp_path):
    inv = tmp_path / "inv.yml"
    inv.write_text(GHOST)
    return inv


def _suite(tmp_path: Path) -> Path:
    """dhrystone on the host only, pipe on the host and the ssh hosts."""
    path = tmp_path / "s.toml"
    path.write_text("""
[suite]
name = "failures"
warmup = 0

[environments.host]
driver = "host"

[environments.ssh]
driver = "ssh"

[[workloads]]
name = "system"
params = { test = "dhrystone", copies = "1", duration = 0.1 }
environments = ["host"]

[[workloads]]
name = "system"
params = { test = "pipe", copies = "1", duration = 0.1 }
""")
    return path


def test_unresolvable_ssh_host_exits_non_zero_and_says_why(ghost, tmp_path):
    db = str(tmp_path / "r.sqlite")
    res = vb("run", "--workload", "system", "--param", "test=dhrystone", "--param", "copies=1", "--duration", "0.1",
             "--envs", "ssh", "-i", str(ghost), "--repeat", "2", "--db", db)
    assert res.returncode == outcomes.EXIT_NONE_SUCCEEDED, res.stderr
    # The summary keeps what follows the colon of "cannot start ssh on its hosts:".
    summary = res.stdout[res.stdout.index("have no results"):]
    assert "ssh" in summary and "Could not resolve hostname no-such-host.invalid" in summary
    # the host is named once: "ghost: ssh: Could not resolve ...", not "ghost: ghost: ssh: ..."
    assert "ghost: ssh: Could not resolve hostname" in summary
    assert "ghost: ghost" not in res.stdout + res.stderr
    assert f"--retry-failed --db {db}" in res.stderr and "no cell has results" in res.stderr
    # `runs` does not call it plainly completed
    (row,) = json.loads(vb("runs", "--db", db, "--json").stdout)
    assert (row["status"], row["note"]) == ("completed", "no cell has results")
    assert "completed: no cell has results" in vb("runs", "--db", db).stdout
    assert res.stdout.startswith("run ")  # the plan and the live failures go to stderr
    assert "plan: 1 cell(s) x 1 environment(s)" in res.stderr


def test_some_cells_failed_exit_3_json_and_retry_only_those(ghost, tmp_path):
    db = str(tmp_path / "r.sqlite")
    res = vb("run", str(_suite(tmp_path)), "-i", str(ghost), "--repeat", "2", "--db", db, "--json")
    assert res.returncode == outcomes.EXIT_SOME_FAILED, res.stderr
    data = json.loads(res.stdout)
    out = data["outcome"]
    assert out["cells"] == 3 and out["with_results"] == 2 and len(out["failed"]) == 1
    (failed,) = out["failed"]
    assert failed["environment"] == "ssh" and failed["params"]["test"] == "pipe"
    assert "Could not resolve hostname" in failed["reason"] and failed["failures"] == 2
    # The failure is listed once, on the workload's own row, never on the monitor's series.
    warned = [(r["metric"], r["environment"]) for r in data["results"]
              if any("failed" in w for w in r["warnings"])]
    assert warned == [("pipe", "ssh")]

    store = Store(db)
    rid = data["run_id"]
    before = store.attempt_counts(rid)
    res = vb("run", "--resume", rid, "--retry-failed", "--db", db)
    assert res.returncode == outcomes.EXIT_SOME_FAILED, res.stderr  # the host still does not resolve
    assert "plan: 1 cell(s) x 2 environment(s)" in res.stderr
    after = store.attempt_counts(rid)
    cells = {c["params"]["test"]: c["key"] for c in store.run(rid)["spec"]["cells"]}

    def count(rows, test, env):
        return sum(r["count"] for r in rows if r["cell_key"] == cells[test] and r["environment"] == env)

    assert count(after, "dhrystone", "host") == count(before, "dhrystone", "host")  # had results: not rerun
    assert count(after, "pipe", "ssh") == count(before, "pipe", "ssh") + 2
    # The retried cell ran on all its environments, in new rounds numbered after the stored ones.
    assert count(after, "pipe", "host") == count(before, "pipe", "host") + 2
    reps = sorted(a["repetition"] for a in store.attempts(rid) if a["environment"] == "host"
                  and a["cell_key"] == cells["pipe"] and not a["warmup"])
    assert reps == [0, 1, 2, 3]
    assert run_events(store, rid) == ["retry-failed"]  # and no leftover of its own swept
    assert "failed cells retried 1 time(s)" in res.stdout.splitlines()[0]
    assert store.run(rid)["status"] == "completed"
    res = vb("run", "--resume", rid, "--db", db)
    assert res.returncode == 2 and "--retry-failed" in res.stderr


def test_no_verdict_from_one_repetition(tmp_path):
    """A ratio from n = 1 has no test behind it: 'inconclusive (n too small)', never equivalent."""
    from virtbench import suite
    from virtbench.run.runner import Runner

    store = Store(tmp_path / "r.sqlite")
    m = suite.adhoc("system", {"test": "dhrystone", "copies": "1", "duration": "0.05"}, ["host", "container"],
                    repeat=1)
    m.environments[1] = m.environments[0].__class__("host2", "host", m.environments[0].shape, {})
    m.policy.warmup = 0
    rid = Runner(store, m).start()
    rows = [r for r in analysis.results(store, rid)["results"] if r["environment"] == "host2"]
    assert rows and all((r["verdict"], r["verdict_reason"], r["detectable"]) == ("inconclusive", "n too small", None)
                        for r in rows if r["ratio"] is not None)


@pytest.mark.slow
def test_retry_after_the_host_is_fixed_completes_the_run(ghost, tmp_path):
    """The cause fixed (the inventory now names a real SSH host of a local testbed), --retry-failed
    fills the failed cells in the same run and the run exits 0."""
    from virtbench.machines import testbed

    if blocking := [p for p in testbed.check() if p.startswith("not root") or "refuses network" in p]:
        pytest.skip("; ".join(blocking))
    db = str(tmp_path / "r.sqlite")
    res = vb("run", str(_suite(tmp_path)), "-i", str(ghost), "--repeat", "2", "--db", db, "--json")
    assert res.returncode == outcomes.EXIT_SOME_FAILED, res.stderr
    rid = json.loads(res.stdout)["run_id"]
    prefix = f"vbfr{os.getpid() % 100000}"  # per process: concurrent sessions never share it
    testbed.down(prefix, force=True)
    fixed = testbed.up(1, tmp_path / "tb.yml", prefix=prefix, subnet=None)
    try:
        ghost.write_text(fixed.read_text())  # the run keeps its inventory's path
        res = vb("run", "--resume", rid, "--retry-failed", "--db", db, "--json")
        assert res.returncode == outcomes.EXIT_OK, res.stderr
        out = json.loads(res.stdout)["outcome"]
        assert out["with_results"] == 3 and out["failed"] == []
        pipe = [r for r in json.loads(res.stdout)["results"] if r["metric"] == "pipe" and r["environment"] == "ssh"]
        assert pipe[0]["n"] == 2 and pipe[0]["failures"] == 2  # the earlier failures stay as data
    finally:
        testbed.down(prefix, force=True)


def test_some_repetitions_failed_are_said_once_with_the_whole_reason(tmp_path):
    """A kernel that crashes on every other call (a stand-in wrapper around the real vb-system): the
    failure is said once per cell, on the workload's row, with the line after the colon, in the
    terminal, the JSON and the report alike."""
    from virtbench.kernels import native_bin_dir

    fake = tmp_path / "bin"
    fake.mkdir()
    for f in native_bin_dir().iterdir():
        if f.name != "vb-system":
            (fake / f.name).symlink_to(f)
    (fake / "vb-system").write_text(
        "#!/bin/sh\nn=$(cat %s 2>/dev/null || echo 0); n=$((n+1)); echo $n > %s\n"
        "if [ $((n %% 2)) -eq 0 ]; then echo 'vb-system: the kernel stopped:' >&2; echo '  out of cheese' >&2; "
        "exit 3; fi\nexec %s \"$@\"\n" % (tmp_path / "n", tmp_path / "n", native_bin_dir() / "vb-system"))
    (fake / "vb-system").chmod(0o755)
    db = str(tmp_path / "r.sqlite")
    env = {**os.environ, "VIRTBENCH_BIN": str(fake)}
    args = [sys.executable, "-m", "virtbench.cli", "run", "--workload", "system", "--param", "test=dhrystone",
            "--param", "copies=1", "--duration", "0.05", "--envs", "host", "--repeat", "4", "--db", db]
    res = subprocess.run(args, capture_output=True, text=True, timeout=600, env=env)
    assert res.returncode == outcomes.EXIT_OK, res.stderr  # every cell has results
    (line,) = [ln for ln in res.stdout.splitlines() if "failed repetitions" in ln]
    assert "out of cheese" in line and "dhrystone@host x2" in line
    rid = res.stdout.split()[1]
    data = analysis.results(Store(db), rid)
    warned = [r for r in data["results"] if any("failed repetition" in w for w in r["warnings"])]
    assert [(r["metric"], r["environment"]) for r in warned] == [("dhrystone", "host")]
    md = subprocess.run([sys.executable, "-m", "virtbench.cli", "report", rid, "--format", "md", "--db", db],
                        capture_output=True, text=True, timeout=300).stdout
    # once in the header's warnings, with the reason; not again in its table of result warnings
    assert md.count("failed repetition(s) of system") == 1 and "out of cheese" in md
    table = md[md.index("**Result warnings**"):md.index("> Methods")]
    assert "only 2 samples" in table and "failed repetition" not in table


def test_show_of_an_interrupted_run_says_which_cells_were_not_reached(tmp_path):
    from virtbench import suite
    from virtbench.model import Sample

    store = Store(tmp_path / "r.sqlite")
    m = suite.adhoc("system", {"test": "dhrystone,pipe", "copies": "1", "duration": "0.1"}, ["host"], repeat=2)
    rid = store.create_run(m.to_spec(), suite_name=m.name, suite_path=None, baseline="host", command="test")
    first = m.cells[0]
    store.record_attempt(rid, first, "host", 0, warmup=False, status="ok", started=1.0, ended=2.0,
                         samples_=[Sample(first["params"]["test"], 1.0e6, "lps", True, {})])
    store.set_status(rid, "interrupted")
    res = vb("show", rid, "--db", str(tmp_path / "r.sqlite"))
    assert res.returncode == 0, res.stderr
    (line,) = [ln for ln in res.stdout.splitlines() if "not reached" in ln]
    assert "test=pipe" in line and f"virtbench run --resume {rid}" in line
    assert "1 of 2 cells have no results" in res.stdout.splitlines()[0]
    res = vb("run", "--resume", rid, "--retry-failed", "--db", str(tmp_path / "r.sqlite"))
    assert res.returncode == 2 and "was interrupted: finish it first" in res.stderr and "plan:" not in res.stderr


def test_a_cell_whose_only_ok_attempt_was_its_warm_up_has_no_results(tmp_path):
    """A warm-up is not in the statistics: a cell that passed its warm-up and then failed every round
    (a kubelet killed between them, say) is failed, so --retry-failed runs it again."""
    from virtbench import suite
    from virtbench.model import Sample

    store = Store(tmp_path / "r.sqlite")
    m = suite.adhoc("system", {"test": "dhrystone", "copies": "1", "duration": "0.1"}, ["host"], repeat=2)
    rid = store.create_run(m.to_spec(), suite_name=m.name, suite_path=None, baseline="host", command="test")
    cell = m.cells[0]
    store.record_attempt(rid, cell, "host", 0, warmup=True, status="ok", started=1.0, ended=2.0,
                         samples_=[Sample("dhrystone", 1.0e6, "lps", True, {})])
    for rep in (0, 1):
        store.record_attempt(rid, cell, "host", rep, warmup=False, status="failed", started=3.0, ended=4.0,
                             reason="exec failed: connection refused")
    store.set_status(rid, "completed")
    out = outcomes.cell_outcomes(store, rid)
    assert out["with_results"] == 0 and [e["reason"] for e in out["failed"]] == ["exec failed: connection refused"]
    assert outcomes.failed_keys(out) == {(cell["key"], "host")}
    assert outcomes.exit_code(out) == outcomes.EXIT_NONE_SUCCEEDED


def test_cells_without_results_have_a_row_each_counted_as_the_summary_counts(tmp_path):
    """Two tests that fail every time (a wrapper around the real vb-system that refuses pipe and
    execl): a row each, named by its test, and the table's count of failed attempts (warm-up
    included) is the end summary's."""
    from virtbench.kernels import native_bin_dir

    fake = tmp_path / "bin"
    fake.mkdir()
    for f in native_bin_dir().iterdir():
        if f.name != "vb-system":
            (fake / f.name).symlink_to(f)
    (fake / "vb-system").write_text(
        "#!/bin/sh\ncase \"$*\" in *pipe*|*execl*) echo 'vb-system: out of cheese' >&2; exit 3;; esac\n"
        f"exec {native_bin_dir() / 'vb-system'} \"$@\"\n")
    (fake / "vb-system").chmod(0o755)
    db = str(tmp_path / "r.sqlite")
    res = subprocess.run([sys.executable, "-m", "virtbench.cli", "run", "--workload", "system", "--param",
                          "test=dhrystone,pipe,execl", "--param", "copies=1", "--duration", "0.05", "--envs", "host",
                          "--repeat", "2", "--db", db], capture_output=True, text=True, timeout=600,
                         env={**os.environ, "VIRTBENCH_BIN": str(fake), "COLUMNS": "200"})
    assert res.returncode == outcomes.EXIT_SOME_FAILED, res.stderr
    rows = {ln.split("│")[1].strip(): ln for ln in res.stdout.splitlines() if ln.startswith("│") and "no result" in ln}
    assert set(rows) == {"pipe (no result)", "execl (no result)"}
    for test in ("pipe", "execl"):
        (summary,) = [ln for ln in res.stdout.splitlines() if f"test={test} @ host (" in ln]
        failed = summary.split("@ host (", 1)[1].split(" failed)", 1)[0]
        assert f"failed ({failed})" in rows[f"{test} (no result)"]
