"""A user's own study file, end to end and for real: `virtbench reproduce path/to/study.toml` plans its
experiment (its suite named relative to the file), runs it on the host and in a container, scores its
finding with the same rules, records the file's hash, and keeps scoring with the text it recorded
when the file changes afterwards."""

import hashlib
import json

import pytest
from click.testing import CliRunner

from virtbench.cli import cli

pytestmark = pytest.mark.podman

SUITE = '''
[suite]
name = "mine"
description = "dhrystone on the host and in a container"
baseline = "host"

[environments.host]
driver = "host"

[environments.container]
driver = "container"

[[workloads]]
name = "system"
params = { test = "dhrystone", duration = 0.2, copies = "1" }
'''

STUDY = '''
[study]
id = "mypaper"
title = "Containers cost a CPU-bound program nothing"
source = "A. Author, My Paper, 2026"

[[experiments]]
id = "mypaper-cpu"
title = "dhrystone, host vs container"
suite = "suites/mine.toml"
envs = ["host", "container"]
workload = "system"

[[experiments.tiers]]
label = "0.2 s of dhrystone, 6 repetitions"
repeat = 6
estimate_s = 30

[[findings]]
id = "mypaper-cpu-alike"
finding = "A container runs a CPU-bound program at the host's speed"
quote = "dhrystone ran at the same speed in the container"
cite = "section 4, Table 2"
quantity = "dhrystone loops/s in a container / on the host"
tolerance = "holds if the ratio's 95 % interval lies within 0.5-2"
derivation = "Table 2: 0.99x; the band is wide because short runs on a shared machine are noisy"
could_fail = "a platform that slows CPU-bound code (emulation, a CPU quota) gives a ratio below 0.5"
rule = "ratio"

[findings.args]
within = [0.5, 2.0]
num = { experiment = "mypaper-cpu", workload = "system", metric = "dhrystone", kind = "container" }
den = { experiment = "mypaper-cpu", workload = "system", metric = "dhrystone", kind = "host" }

[findings.published]
source = "Table 2"
groups = [{ of = "num", values = [0.99] }, { of = "den", values = [1.0] }]
'''


def test_a_users_study_is_planned_run_and_scored_with_its_hash(tmp_path, guest_image, monkeypatch):
    from virtbench.reproduce import times

    monkeypatch.setattr(times, "history_path", lambda: tmp_path / "times.json")  # not the user's record
    (tmp_path / "suites").mkdir()
    (tmp_path / "suites" / "mine.toml").write_text(SUITE)
    study = tmp_path / "study.toml"
    study.write_text(STUDY)
    db = str(tmp_path / "r.sqlite")
    res = CliRunner().invoke(cli, ["reproduce", str(study), "--budget", "5m", "--db", db, "--json"])
    assert res.exit_code == 0, res.output
    data = json.loads(res.output[res.output.index("{"):])
    assert data["studies"] == ["mypaper"]
    assert data["study_files"] == [{"id": "mypaper", "path": str(study),
                                    "sha256": hashlib.sha256(study.read_bytes()).hexdigest()}]
    (step,) = data["plan"]
    assert step["id"] == "mypaper-cpu" and step["status"] == "ok" and step["environments"] == ["host", "container"]
    (card,) = data["scorecard"]
    assert card["id"] == "mypaper-cpu-alike" and card["cite"] == "section 4, Table 2"
    # a container runs dhrystone at the host's speed: never "differs" against 0.5-2; 6 a side reach 95 %
    assert card["verdict"] != "differs" and card["level"] >= 0.95, card
    # one cell, host and container in lockstep rounds: compared round by round
    assert "container" in card["measured"] and "(n = 6 / 6, paired rounds)" in card["measured"]

    # Changed after the results were seen: the stored run keeps its pre-registered text and hash.
    study.write_text(STUDY.replace("within = [0.5, 2.0]", "within = [1.05, 1.2]"))
    shown = CliRunner().invoke(cli, ["show", data["run_id"], "--db", db, "--json"])
    assert shown.exit_code == 0, shown.output
    again = json.loads(shown.output)
    assert again["study_files"] == data["study_files"] and again["scorecard"] == data["scorecard"]

    # The study's own numbers pass its finding.
    pub = CliRunner().invoke(cli, ["reproduce", "--published", str(study)])
    assert pub.exit_code == 1 and "1 differ" in pub.output  # the changed band: 0.99 / 1.0 lies below it
    study.write_text(STUDY)
    assert CliRunner().invoke(cli, ["reproduce", "--published", str(study)]).exit_code == 0
