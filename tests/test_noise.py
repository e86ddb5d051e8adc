"""The noise floor in the plan (issue 32, item 3): the half-width a ratio's rounds can reach at their
spread, and the plan's lines from this machine's stored rounds."""

import math

import numpy as np
import pytest

from virtbench.run import noise, plan
from virtbench.stats import exact as stats_exact
from virtbench import suite
from virtbench.model import Sample
from virtbench.store import Store

LEVEL = 1 - 0.05 / 3  # a table of three comparisons


def test_projected_halfwidth_is_what_random_rounds_give_at_the_median():
    rng = np.random.default_rng(5)
    for n in (8, 20):
        got = []
        for _ in range(300):
            d = rng.normal(0, 0.03, n)
            est, lo, hi, _, _ = stats_exact.walsh_ci(d, LEVEL)
            got.append((math.exp(hi) - math.exp(lo)) / 2 / math.exp(est))
        assert stats_exact.paired_halfwidth(0.03, n, LEVEL) == pytest.approx(np.median(got), rel=0.15)


def test_rounds_for_a_target_are_the_fewest_that_reach_it():
    n = stats_exact.rounds_for_halfwidth(0.04, 0.02, LEVEL)
    assert stats_exact.paired_halfwidth(0.04, n, LEVEL) <= 0.02 < stats_exact.paired_halfwidth(0.04, n - 1, LEVEL)
    assert stats_exact.rounds_for_halfwidth(0.5, 0.001, LEVEL) is None  # beyond any plan
    assert stats_exact.paired_halfwidth(0.03, 5, LEVEL) == math.inf  # 5 rounds cannot reach 98.3 % at all
    assert stats_exact.rounds_for_halfwidth(0.0, 0.02, LEVEL) == stats_exact.rounds_for_level(LEVEL)


SUITE = """\
[suite]
name = "noise"
baseline = "a"
warmup = 0
monitor = false
min_repetitions = 6
max_repetitions = 20
ci_target = 0.02

[environments.a]
driver = "host"

[environments.b]
driver = "host"

[[workloads]]
name = "system"
params = {{ duration = 0.3, test = ["dhrystone", "whetstone", "{third}"], copies = "1" }}
"""

SPREAD = {"dhrystone": 0.01, "whetstone": 0.06}  # round-to-round sd of the log ratio b / a


def _earlier_run(store, m):
    rid = store.create_run(m.to_spec(), suite_name=m.name, suite_path=None, baseline="a", command="t")
    for env in "ab":
        store.save_environment(rid, env, "host", {}, {})
    rng = np.random.default_rng(3)
    for cell in m.cells:
        test = cell["params"]["test"]
        if test not in SPREAD:
            continue
        for r in range(40):
            load = rng.uniform(0.7, 1.0)
            for env in "ab":
                noise_ = rng.normal(0, SPREAD[test]) if env == "b" else 0.0
                store.record_attempt(rid, cell, env, r, warmup=False, status="ok", started=0, ended=1,
                                     samples_=[Sample(test, 1e6 * load * math.exp(noise_), "lps", True, {})],
                                     sample_metadata={"repetition": r, "round": r})
    store.set_status(rid, "completed")


def test_the_plan_says_what_the_target_needs_at_this_machines_noise(tmp_path):
    path = tmp_path / "s.toml"
    path.write_text(SUITE.format(third="pipe"))
    m = suite.load(path)
    store = Store(tmp_path / "r.sqlite")
    _earlier_run(store, m)
    p = plan.make(m, store=store)
    floors = {f.label: f for f in p.floors}
    assert set(floors) == {"dhrystone", "whetstone"} and p.no_history == 1  # pipe never ran here
    quiet, noisy = floors["dhrystone"], floors["whetstone"]
    assert quiet.sd == pytest.approx(0.01, rel=0.3) and noisy.sd == pytest.approx(0.06, rel=0.3)
    assert not quiet.short and quiet.rounds <= 20
    assert noisy.short and noisy.rounds == stats_exact.rounds_for_halfwidth(noisy.sd, 0.02, LEVEL) > 20
    assert noisy.at_max == pytest.approx(stats_exact.paired_halfwidth(noisy.sd, 20, LEVEL))
    text = p.text()
    assert f"whetstone: round-to-round sd {noisy.sd * 100:.2g} % (from 1 earlier run): ~{noisy.rounds} rounds for " \
           f"±2 % at 98.3 %; max_repetitions 20 gives ±{noisy.at_max * 100:.2g} %" in text
    assert "1 ratio(s) reach it within max_repetitions" in text and "raise max_repetitions" in text
    assert "1 ratio(s) have no earlier rounds on this machine" in text
    # a fixed count has no target to plan for
    m.policy.min_repetitions = m.policy.max_repetitions = 10
    assert plan.make(m, store=store).floor_lines() == []


def test_history_is_per_cell_and_driver_pair(tmp_path):
    path = tmp_path / "s.toml"
    path.write_text(SUITE.format(third="pipe"))
    m = suite.load(path)
    store = Store(tmp_path / "r.sqlite")
    _earlier_run(store, m)
    h = noise.NoiseHistory(store, ["system"])
    cell = m.cells[0]
    assert h.sd("system", cell["params"], {}, ("host", "host"))[1] == 1
    assert h.sd("system", cell["params"], {}, ("container", "host")) is None
    assert h.sd("system", {**cell["params"], "duration": 1.0}, {}, ("host", "host")) is None


def test_a_cell_without_history_says_its_floor_once_its_minimum_is_in(tmp_path):
    """A real A/A run with a target no machine meets: after its 6 rounds each cell notes what its
    rounds' spread needs (the plan could not: no earlier rounds here), once."""
    from virtbench.run.runner import Events, Runner

    class Notes(Events):
        def __init__(self):
            self.notes = []

        def note(self, message):
            self.notes.append(message)

    path = tmp_path / "s.toml"
    path.write_text(SUITE.replace("ci_target = 0.02", "ci_target = 0.00001").replace("max_repetitions = 20",
                    "max_repetitions = 7").replace("duration = 0.3", "duration = 0.05").format(third="pipe"))
    m = suite.load(path)
    store = Store(tmp_path / "r.sqlite")
    assert plan.make(m, store=store).no_history == 3
    events = Notes()
    Runner(store, m, events=events).start()
    floors = [n for n in events.notes if n.startswith("noise floor: ")]
    assert len(floors) == 3 and all("(from this run's first 6 rounds): " in n and "max_repetitions 7 gives ±" in n
                                    for n in floors)
    assert {n.split(": ")[1] for n in floors} == {"dhrystone", "whetstone", "pipe"}
    assert len(plan.make(m, store=store).floors) == 3  # the next plan has their history
