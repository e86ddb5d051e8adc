"""Hints a user copies must work as printed: they keep the --db that located the run, name the real
host in doctor's ssh command, and `runs` does not call a run without results complete."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from click.testing import CliRunner

from virtbench.cli import doctor
from virtbench.run import outcomes
from virtbench import render, suite
from virtbench.cli import cli
from virtbench.errors import UserError
from virtbench.model import Sample
from virtbench.store import Store


def vb(*args):
    return subprocess.run([sys.executable, "-m", "virtbench.cli", *args], capture_output=True, text=True, timeout=120)


@pytest.fixture
def interrupted(tmp_path):
    """A stored run of two cells, interrupted after the first's one repetition."""
    db = tmp_path / "r.sqlite"
    store = Store(db)
    m = suite.adhoc("system", {"test": "dhrystone,pipe", "copies": "1", "duration": "0.1"}, ["host"], repeat=2)
    rid = store.create_run(m.to_spec(), suite_name=m.name, suite_path=None, baseline="host", command="test")
    first = m.cells[0]
    store.record_attempt(rid, first, "host", 0, warmup=False, status="ok", started=1.0, ended=2.0,
                         samples_=[Sample(first["params"]["test"], 1.0e6, "lps", True, {})])
    named = Store(db, named=str(db))  # as the runner's store: the user gave --db
    with pytest.raises(KeyboardInterrupt), named.recording_status(rid, f"virtbench run --resume {rid}{named.db_option}"):
        raise KeyboardInterrupt
    return db, rid


def test_an_unknown_run_id_hint_keeps_the_db(interrupted):
    db, _ = interrupted
    res = vb("show", "nosuchrun", "--db", str(db))
    assert res.returncode == 2 and f"virtbench runs --db {db}" in res.stderr, res.stderr


def test_the_resume_hints_of_an_interrupted_run_keep_the_db(interrupted):
    db, rid = interrupted
    res = vb("show", rid, "--db", str(db))
    (line,) = [ln for ln in res.stdout.splitlines() if "not reached" in ln]
    assert f"virtbench run --resume {rid} --db {db}" in line
    res = vb("run", "--resume", rid, "--retry-failed", "--db", str(db))
    assert res.returncode == 2 and f"virtbench run --resume {rid} --db {db}" in res.stderr, res.stderr
    (row,) = json.loads(vb("runs", "--db", str(db), "--json").stdout)
    assert row["status"] == "interrupted" and row["note"].endswith(f"virtbench run --resume {rid} --db {db}")


def test_a_relative_db_is_repeated_as_an_absolute_path(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert Store("r.sqlite", named="r.sqlite").db_option == f" --db {tmp_path / 'r.sqlite'}"
    assert Store(tmp_path / "d.sqlite").db_option == ""  # the default database: nothing to repeat


def test_runs_says_what_a_completed_run_lacks(tmp_path):
    outcome = {"cells": 3, "with_results": 0, "skipped": 1, "failed": [{}, {}], "not_run": []}
    assert outcomes.shortfall(outcome) == "no cell has results"
    assert outcomes.shortfall({**outcome, "with_results": 1, "failed": [{}]}) == "1 of 2 cells have no results"
    assert outcomes.shortfall({**outcome, "with_results": 2, "failed": []}) is None
    assert render.run_status({"status": "completed", "note": "no cell has results"}) == \
        "completed: no cell has results"
    assert render.run_status({"status": "interrupted", "note": "interrupted; resume with: ..."}) == "interrupted"


def test_doctor_exits_1_for_a_host_that_does_not_answer_and_names_its_ssh_command(tmp_path, monkeypatch):
    inv = tmp_path / "inv.yml"
    inv.write_text("all:\n  hosts:\n    ghost:\n      ansible_host: no-such-host.invalid\n      ansible_port: 2222\n"
                   "      ansible_user: bench\n")
    monkeypatch.setattr(doctor, "checks", lambda: [])  # this machine's own checks: not what is tested here
    res = CliRunner().invoke(cli, ["doctor", "-i", str(inv)])
    assert res.exit_code == 1, res.output
    assert "FAIL host ghost" in res.output
    assert "fix: check it with: ssh -o BatchMode=yes -p 2222 -l bench no-such-host.invalid true" in res.output
    assert "HOST" not in res.output


def test_the_testbed_name_rule_is_in_the_help_and_the_error_gives_a_valid_one():
    from virtbench.machines import testbed

    res = CliRunner().invoke(cli, ["testbed", "up", "--help"], terminal_width=400)
    assert f"testbed name, {testbed.NAME_RULE}" in res.output
    with pytest.raises(UserError) as info:
        testbed.up(1, "/nonexistent/inv.yml", prefix="Bad_Name")
    assert testbed.NAME_RULE in info.value.message and f"--name {testbed.default_name()}" in info.value.hint


def test_show_json_lists_the_removals_show_prints(interrupted):
    db, rid = interrupted
    Store(db).add_event(rid, "removed", "container virtbench-x-1 (its run is gone)")
    data = json.loads(vb("show", rid, "--db", str(db), "--json").stdout)
    assert [r["what"] for r in data["removals"]] == ["container virtbench-x-1 (its run is gone)"]
    assert "removed a leftover of an earlier run: container virtbench-x-1" in vb("show", rid, "--db", str(db)).stdout
