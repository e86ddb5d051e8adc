"""Lockstep rounds and paired ratios (issue 24, items 1-3): a cell's environments run round by round
together, every sample carries its round, the ratio comes from the rounds' paired ratios, holes are
left out and counted, old runs without rounds fall back to unpaired groups, and the cell stops on
the ratio's interval."""

import json
import math

import numpy as np
import pytest

from virtbench import analysis, monitor, stats, suite
from virtbench.model import Sample
from virtbench.run.rounds import Tally
from virtbench.run.runner import Runner
from virtbench.store import Store

AA_SUITE = """\
[suite]
name = "aa"
baseline = "a"
warmup = 0
monitor = false
min_repetitions = 6
max_repetitions = {max}
ci_target = {target}

[environments.a]
driver = "host"

[environments.b]
driver = "host"

[[workloads]]
name = "system"
params = {{ duration = 0.05, test = "dhrystone", copies = "1" }}
"""


def _suite(tmp_path, target=1e-9, max_=8):
    path = tmp_path / "aa.toml"
    path.write_text(AA_SUITE.format(target=target, max=max_))
    return suite.load(path)


def _measured(samples):
    return [s for s in samples if not monitor.is_monitor_sample(s["metadata_json"])]


def test_environments_run_in_rounds_with_rotating_order_and_equal_counts(tmp_path):
    store = Store(tmp_path / "r.sqlite")
    rid = Runner(store, _suite(tmp_path)).start()  # a target never met: to the maximum, 8 rounds
    order = [(a["repetition"], a["environment"]) for a in sorted(store.attempts(rid), key=lambda a: a["id"])]
    assert order == [(r, e) for r in range(8) for e in (("a", "b") if r % 2 == 0 else ("b", "a"))]
    rounds = {(s["environment"], json.loads(s["metadata_json"])["round"]) for s in _measured(store.samples(rid))}
    assert rounds == {(e, r) for e in "ab" for r in range(8)}
    given = [json.loads(s["metadata_json"])["cpu_given"] for s in _measured(store.samples(rid))]
    assert all(g["window_s"] >= 0.05 and g["own_cores"] > 0 and g["others_cores"] >= 0 for g in given)
    b_row = _b_row(store, rid)
    assert b_row["pairs"] == 8 and b_row["holes"] == 0 and b_row["ratio_ci_method"] == "signed-rank (paired rounds)"
    assert not any("unpaired" in w or "round(s)" in w for w in b_row["warnings"])


def test_a_cell_stops_when_its_ratio_is_within_target(tmp_path):
    store = Store(tmp_path / "r.sqlite")
    rid = Runner(store, _suite(tmp_path, target=10.0, max_=12)).start()  # any ratio CI is within 1000 %
    counts = {e: sum(a["environment"] == e for a in store.attempts(rid)) for e in "ab"}
    assert counts == {"a": 6, "b": 6}  # the minimum, the same in both


def _tally(rounds: dict[int, float]) -> Tally:
    t = Tally()
    for i, v in rounds.items():
        t.values["dhrystone"][i].append(v)
    t.ok = len(rounds)
    return t


def test_the_stopping_rule_reads_the_ratio_not_the_medians(tmp_path):
    """Load that moves whole rounds widens each median's interval but cancels in the rounds' ratios:
    the rule stops there, and goes on where one side is noisy round by round."""
    m = _suite(tmp_path, target=0.02)
    runner = Runner(Store(tmp_path / "r.sqlite"), m)
    cell = m.cells[0]
    rng = np.random.default_rng(3)
    load = rng.uniform(0.5, 1.0, 12)  # 50-100 % of the machine, round by round
    base = dict(enumerate(100 * load))
    same = dict(enumerate(100 * load * np.exp(rng.normal(0, 0.002, 12))))
    assert stats.relative_ci_halfwidth(list(base.values())) > 0.1  # the old rule would go on
    assert runner._targets_met(cell, {"a": _tally(base), "b": _tally(same)})
    noisy = dict(enumerate(100 * load * np.exp(rng.normal(0, 0.1, 12))))
    assert not runner._targets_met(cell, {"a": _tally(base), "b": _tally(noisy)})
    # 6 rounds cannot reach the table's level (one comparison: 95 %) ... 8 can, with 1 hole left out
    few = {i: v for i, v in same.items() if i < 5}
    assert not runner._targets_met(cell, {"a": _tally(base), "b": _tally(few)})
    holed = {i: v for i, v in same.items() if i != 3}
    assert runner._targets_met(cell, {"a": _tally(base), "b": _tally(holed)})


def _store_run(tmp_path, rounds_a, rounds_b, *, with_round=True, factor=1.0, name="h"):
    """A stored A/A run made by hand: a value per listed round in each environment."""
    m = _suite(tmp_path)
    store = Store(tmp_path / f"{name}.sqlite")
    rid = store.create_run(m.to_spec(), suite_name=m.name, suite_path=None, baseline=m.baseline, command="t")
    cell = m.cells[0]
    rng = np.random.default_rng(7)
    load = rng.uniform(0.6, 1.0, 40)
    for env, rounds, f in (("a", rounds_a, 1.0), ("b", rounds_b, factor)):
        for r in rounds:
            value = f * 1e6 * load[r] * math.exp(rng.normal(0, 0.003))
            meta = {"repetition": r, **({"round": r} if with_round else {})}
            store.record_attempt(rid, cell, env, r, warmup=False, status="ok", started=0, ended=1,
                                 samples_=[Sample("dhrystone", value, "lps", True, {})], sample_metadata=meta)
    for r in sorted(set(range(max(rounds_a + rounds_b) + 1)) - set(rounds_b)):
        store.record_attempt(rid, cell, "b", r, warmup=False, status="failed", started=0, ended=1, reason="boom")
    store.set_status(rid, "completed")
    return store, rid


def _b_row(store, rid):
    (row,) = [r for r in analysis.results(store, rid)["results"] if r["environment"] == "b"
              and r["metric"] == "dhrystone"]
    return row


def test_holes_are_left_out_of_the_ratio_and_said(tmp_path):
    store, rid = _store_run(tmp_path, list(range(12)), [r for r in range(12) if r not in (4, 9)], factor=0.95)
    row = _b_row(store, rid)
    assert row["pairs"] == 10 and row["holes"] == 2 and row["n"] == 10
    assert any("2 round(s) with a value on one side only" in w and "10 round(s) with both" in w
               for w in row["warnings"])
    # round-to-round load (0.6-1.0) cancels in the pairs: the 5 % slowdown is found, tightly
    assert row["ratio"] == pytest.approx(0.95, rel=0.01) and row["ratio_ci_high"] < 0.96
    assert row["verdict"] == "slower" and row["significant"]  # dhrystone: a throughput, 0.95 is slower


def test_an_old_run_without_rounds_falls_back_to_unpaired_groups_and_says_so(tmp_path):
    store, rid = _store_run(tmp_path, list(range(12)), list(range(12)), with_round=False, factor=0.95)
    row = _b_row(store, rid)
    assert row["pairs"] == 0 and row["ratio_ci_method"] == "mann-whitney"
    assert any(w.startswith("unpaired ratio") for w in row["warnings"])
    # the same values with their rounds: the load that moves whole rounds no longer widens the interval
    paired = _b_row(*_store_run(tmp_path, list(range(12)), list(range(12)), factor=0.95, name="p"))
    assert paired["ratio_ci_method"] == "signed-rank (paired rounds)"
    assert row["ratio_ci_high"] - row["ratio_ci_low"] > 5 * (paired["ratio_ci_high"] - paired["ratio_ci_low"])


def test_resume_goes_on_with_the_next_round_and_keeps_a_cut_rounds_hole(tmp_path):
    m = _suite(tmp_path, target=1e-9, max_=6)
    store = Store(tmp_path / "r.sqlite")
    rid = store.create_run(m.to_spec(), suite_name=m.name, suite_path=None, baseline=m.baseline, command="t")
    cell = m.cells[0]
    for r, env in [(0, "a"), (0, "b"), (1, "b"), (1, "a"), (2, "a")]:  # interrupted inside round 2
        store.record_attempt(rid, cell, env, r, warmup=False, status="ok", started=0, ended=1,
                             samples_=[Sample("dhrystone", 1e6 + r, "lps", True, {})],
                             sample_metadata={"repetition": r, "round": r})
    store.set_status(rid, "interrupted")
    Runner(store, None).resume(rid)
    later = [(a["repetition"], a["environment"]) for a in sorted(store.attempts(rid), key=lambda a: a["id"])][5:]
    assert later == [(3, "b"), (3, "a"), (4, "a"), (4, "b"), (5, "b"), (5, "a")]  # rounds 3-5, rotation kept
    row = _b_row(store, rid)
    assert row["pairs"] == 5 and row["holes"] == 1  # round 2 has a only


def test_resume_does_not_warm_up_again_a_cell_whose_rounds_were_all_taken(tmp_path):
    """Two cells, the first with all its 6 rounds stored, the second cut in round 2: the resume warms up
    and finishes the second only (a fresh warm-up of the first would start its instances for nothing)."""
    path = tmp_path / "aa.toml"
    path.write_text(AA_SUITE.format(target=1e-9, max=6).replace("warmup = 0", "warmup = 1").replace(
        'test = "dhrystone"', 'test = ["dhrystone", "syscall"]'))
    m = suite.load(path)
    store = Store(tmp_path / "r.sqlite")
    rid = store.create_run(m.to_spec(), suite_name=m.name, suite_path=None, baseline=m.baseline, command="t")
    done, cut = m.cells
    rounds = [(done, r, env) for r in range(6) for env in "ab"] + [(cut, 0, "a"), (cut, 0, "b"), (cut, 1, "a")]
    for cell, r, env in rounds:
        metric = cell["params"]["test"]
        store.record_attempt(rid, cell, env, r, warmup=False, status="ok", started=0, ended=1,
                             samples_=[Sample(metric, 1e6 + r, "lps", True, {})],
                             sample_metadata={"repetition": r, "round": r})
    store.set_status(rid, "interrupted")
    Runner(store, None).resume(rid)
    later = [a for a in sorted(store.attempts(rid), key=lambda a: a["id"])][len(rounds):]
    assert {a["cell_key"] for a in later} == {cut["key"]}
    assert sum(a["warmup"] for a in later) == 2  # one per environment of the cut cell
    assert sorted((a["repetition"], a["environment"]) for a in later if not a["warmup"]) == \
        [(r, e) for r in range(2, 6) for e in "ab"]
    assert store.run(rid)["status"] == "completed"


def test_paired_ratio_basics():
    r = stats.paired_ratio([2.1, 4.0, 6.3, 8.1, 9.9, 12.4], [1.0, 2.0, 3.0, 4.0, 5.0, 6.0])
    assert r.pairs == 6 and r.min_p == pytest.approx(2 / 64) and r.ci_level == pytest.approx(1 - 2 / 64)
    assert r.ratio == pytest.approx(2.04, rel=0.02) and r.significant and r.p_value == pytest.approx(2 / 64)
    assert r.ci_low == pytest.approx(1.98) and r.ci_high == pytest.approx(2.1)  # min and max of the ratios
    hole = stats.paired_ratio([2.0, math.nan, 6.0], [1.0, 2.0, math.nan])
    assert hole.pairs == 1 and hole.ratio == pytest.approx(2.0) and math.isnan(hole.ci_low)
    with pytest.raises(ValueError, match="as many candidate as baseline"):
        stats.paired_ratio([1.0, 2.0], [1.0])
    assert stats.ratio_halfwidth(stats.paired_ratio([1.0] * 5, [1.0] * 5)) == math.inf  # 5 rounds: 93.75 %


def test_signed_rank_p_and_interval_agree_with_scipy_and_each_other():
    from scipy import stats as sps

    rng = np.random.default_rng(11)
    for n in (6, 9, 15, 25):
        for _ in range(20):
            d = rng.normal(0.02, 0.03, n)
            assert stats.signed_rank_p(d) == pytest.approx(sps.wilcoxon(d, method="exact").pvalue)
            r = stats.paired_ratio(np.exp(d), np.ones(n))
            excludes = r.ci_low > 1 or r.ci_high < 1
            assert excludes == (r.p_value <= 0.05)  # the test inverted


def test_a_samples_round_is_its_stored_repetition_also_after_earlier_rounds(tmp_path):
    """--retry-failed stores a cell's new rounds after the ones it has (Runner._round_offset): the
    round the analysis pairs by is that stored number, so new rounds never pair with old ones."""
    m = _suite(tmp_path, target=10.0)
    runner = Runner(Store(tmp_path / "r.sqlite"), m)
    runner._round_offset = {m.cells[0]["key"]: 6}
    rid = runner.start()
    got = {(s["repetition"], json.loads(s["metadata_json"])["round"]) for s in _measured(runner.store.samples(rid))}
    assert got == {(r, r) for r in range(6, 12)}


def _vb(*args):
    import subprocess
    import sys

    res = subprocess.run([sys.executable, "-m", "virtbench.cli", *args], capture_output=True, text=True, timeout=300,
                         env={**__import__("os").environ, "COLUMNS": "400"})
    assert res.returncode == 0, res.stderr
    return res.stdout


def test_legends_and_methods_note_name_the_test_the_ratios_used(tmp_path):
    """A run's ratios come from its rounds (signed-rank / Hodges-Lehmann): its terminal legend, report
    notes and methods note say so and name no Mann-Whitney; a run stored without rounds, and compare of
    two runs, say Mann-Whitney."""
    _, paired = _store_run(tmp_path, list(range(8)), list(range(8)), factor=0.95, name="p")
    _, old = _store_run(tmp_path, list(range(8)), list(range(8)), with_round=False, factor=0.95, name="o")
    dbp, dbo = str(tmp_path / "p.sqlite"), str(tmp_path / "o.sqlite")

    shown = " ".join(_vb("show", paired, "--db", dbp).split())  # the legend wraps: compare its words
    assert "ratio to a = the Hodges-Lehmann estimate of the lockstep rounds' environment / a ratios" in shown
    assert "signed-rank" in shown and "Mann-Whitney" not in shown
    md = _vb("report", paired, "--format", "md", "--db", dbp)
    assert "Wilcoxon signed-rank test" in md and "Mann-Whitney" not in md and "median / a median" not in md
    assert "environment median / baseline median" not in md

    shown = " ".join(_vb("show", old, "--db", dbo).split())
    assert "ratio to a = environment median / a median, its CI the exact Mann-Whitney test" in shown
    assert "signed-rank" not in shown
    md = _vb("report", old, "--format", "md", "--db", dbo)
    assert "Ratio (runs stored without rounds): environment median / baseline median" in md
    assert "signed-rank" not in md

    # compare: two runs' repetitions are not paired, whatever each run's rounds
    _, other = _store_run(tmp_path, list(range(8)), list(range(8)), name="p")  # a second run in p.sqlite
    shown = " ".join(_vb("compare", paired, other, "--db", dbp).split())
    assert "B / A = B's median / A's median (two runs' repetitions are not paired), its CI the exact " \
           "Mann-Whitney test" in shown and "signed-rank" not in shown


def test_the_terminal_legend_reads_only_the_rows_its_tables_show(tmp_path):
    """The monitor's rows (often zeros: a bootstrap ratio) are not in the terminal tables, so the
    legend under them does not describe their method."""
    from rich.console import Console

    from virtbench import render

    store, rid = _store_run(tmp_path, list(range(8)), list(range(8)), factor=0.95, name="m")
    data = analysis.results(store, rid)
    monitor_row = {**data["results"][0], "metric": "host.cpu_util_mean", "ratio_ci_method":
                   "bootstrap (unpaired: values not positive)", "metadata": {"monitor": True}}
    data["results"].append(monitor_row)
    console = Console(record=True, width=400)
    render.results_tables(console, data)
    text = console.export_text()
    assert "signed-rank" in text and "percentile bootstrap" not in text
