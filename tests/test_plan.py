"""The plan a run prints before it starts, the question before a long one, and the warnings' and
notes' wording (grouped places, numbers that agree)."""

import io
import os
import pty
import select
import subprocess
import sys
import time

import pytest
from rich.console import Console

from virtbench.run import plan
from virtbench import render, suite
from virtbench.drivers import traits_of
from virtbench.run.runner import Events, Runner
from virtbench.store import Store


def test_plan_counts_cells_environments_repetitions_and_time():
    m = suite.adhoc("system", {"test": "dhrystone,pipe", "copies": "1", "duration": "0.5"}, ["host", "container"])
    m.policy.min_repetitions, m.policy.max_repetitions, m.policy.warmup = 3, 10, 1
    p = plan.make(m)
    # min 3 is raised to the 6 a verdict needs, as the runner does
    assert (p.cells, p.environments, p.runs, p.min_repetitions, p.max_repetitions) == (2, 2, 4, 6, 10)
    # a table of 2 comparisons is read at 97.5 %: the signed-rank interval reaches that from 7 rounds
    # (1 - 2 / 2^7), so the ratio stop rule cannot stop these cells at 6
    assert p.repetitions == (4 * 8, 4 * 11) and p.stop_floor == (7, 2)
    each = 2 * 0.5 + traits_of("host").repetition_overhead_s + traits_of("container").repetition_overhead_s  # per cell, both envs
    assert p.seconds == pytest.approx((2 * 8 * each, 2 * 11 * each))
    assert p.text().startswith("plan: 2 cell(s) x 2 environment(s) (4 in all) x 6-10 repetitions (adaptive; a "
                               "table of 2 comparisons cannot stop before 7 rounds) + 1 warm-up = 32-44 runs; "
                               "estimated")
    assert "\n  system: 0.5 s per repetition, model" in p.text()
    fixed = suite.adhoc("system", {"test": "dhrystone", "duration": "2"}, ["host"], repeat=10000)
    p = plan.make(fixed)
    assert not p.adaptive and p.longest() > plan.ASK_ABOVE_SECONDS and "h " in p.text()


def test_a_long_run_on_a_terminal_asks_and_yes_does_not(tmp_path):
    argv = [sys.executable, "-m", "virtbench.cli", "run", "--workload", "system", "--param", "test=dhrystone",
            "--param", "copies=1", "--duration", "2", "--envs", "host", "--repeat", "10000",
            "--db", str(tmp_path / "r.sqlite")]
    primary, secondary = pty.openpty()
    proc = subprocess.Popen(argv, stdin=secondary, stdout=subprocess.PIPE, stderr=secondary)
    os.close(secondary)
    seen, deadline = b"", time.time() + 120
    while b"start it?" not in seen and time.time() < deadline:
        if select.select([primary], [], [], 1)[0]:
            seen += os.read(primary, 4096)
    assert b"plan: 1 cell(s) x 1 environment(s)" in seen and b"start it?" in seen
    os.write(primary, b"n\n")
    out, _ = proc.communicate(timeout=60)
    os.close(primary)
    assert proc.returncode == 1 and out == b""  # not started: a script must not read it as success
    assert Store(tmp_path / "r.sqlite").runs() == []  # nothing was started
    # Not a terminal (a script): the run is not held up by a question, and a line says it was not
    # asked; stopped here (SIGTERM) once it has said so, instead of running 10000 repetitions.
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    line = ""
    while "not asked" not in line and proc.poll() is None:
        line = proc.stderr.readline()
    proc.terminate()
    proc.communicate(timeout=120)
    assert "not asked (no terminal), so it starts" in line and "start it?" not in line
    # --yes does not ask on a terminal and says nothing about it. Checked with --repeat 1.
    res = subprocess.run([*argv[:-4], "--repeat", "1", "--yes", "--db", str(tmp_path / "r.sqlite")],
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0 and "plan: 1 cell(s)" in res.stderr and "start it?" not in res.stderr
    assert "not asked" not in res.stderr


def test_warnings_group_cells_and_show_only_what_differs():
    m = suite.load("suites/vcluster-hpa.toml")
    rows = []
    for c in m.cells:
        for env in ("host", "vm"):
            rows.append({"workload": c["workload"], "params": c["params"], "metric": "seconds",
                         "environment": env, "warnings": ["noisy: coefficient of variation 7.5% ..."]})
    buf = io.StringIO()
    render.print_warnings(Console(file=buf, width=400), {"results": rows})
    text = buf.getvalue()
    (line,) = [ln for ln in text.splitlines() if "noisy" in ln]
    assert "avg_size" not in text and "confidence" not in text and "total_vcpus" not in text
    assert line == "  - noisy: coefficient of variation above 5 %; close other programs, pin the CPU frequency, or add " \
                   "repetitions — every result (8), cv 7.5%"  # not six of them "and 2 more"
    for r, cv in zip(rows, (3.0, 7.5, 12.0, 9.1, 4.0, 6.2, 8.0, 2.0)):
        r["warnings"] = [f"noisy: coefficient of variation {cv}% ..."] if cv > 5 else []
    buf = io.StringIO()
    render.print_warnings(Console(file=buf, width=400), {"results": rows})
    (line,) = [ln for ln in buf.getvalue().splitlines() if "noisy" in ln]
    assert line.count("seconds@") == 5 and "seconds@vm (transactions=50000) cv 7.5%" in line and "every" not in line


def test_a_warned_result_is_named_by_what_tells_it_from_the_runs_other_results():
    """Only the copies=1 rows are noisy, but the run has a copies=vcpus table too: the warning names
    copies=1."""
    rows = [{"workload": "system", "params": {"test": t, "copies": c, "duration": 2}, "metric": t,
             "environment": "host", "n": 6, "metadata": {},
             "warnings": ["noisy: coefficient of variation 9.0% ..."] if c == "1" else []}
            for c in ("1", "vcpus") for t in ("dhrystone", "pipe")]
    buf = io.StringIO()
    render.print_warnings(Console(file=buf, width=400), {"results": rows})
    (line,) = [ln for ln in buf.getvalue().splitlines() if "noisy" in ln]
    assert line.endswith("— dhrystone@host (copies=1) cv 9.0%; pipe@host (copies=1) cv 9.0%")


class _Notes(Events):
    def __init__(self):
        self.notes = []

    def note(self, message):
        self.notes.append(message)


def test_raised_minimum_says_numbers_that_agree(tmp_path):
    m = suite.load("suites/aist-mpi.toml")
    events = _Notes()
    Runner(Store(tmp_path / "r.sqlite"), m, events=events)._verdict_minimum(m.policy)
    (note,) = events.notes
    assert note.startswith("min_repetitions raised from 3 to 5: as many as max_repetitions allows")
    assert "needs 6" in note and "93.8 %" in note and m.policy.min_repetitions == 5
