"""Verdicts across one table (issues 14, 32): Benjamini-Hochberg across its comparisons, each ratio
CI at the matching Benjamini-Yekutieli level, so the verdict and the interval printed beside it never
contradict each other: equivalent exactly when the whole interval lies within the margin, faster or
slower exactly when otherwise it excludes 1 (a BH discovery), inconclusive with the difference it
could have seen, or 'n too small' where the repetitions cannot reach that level."""

import json

import numpy as np
import pytest

from virtbench import analysis, stats
from virtbench.stats import verdicts
from virtbench.render import mark


def _check_row(r: dict, margin: float, threshold: float, n_floor_p: float) -> None:
    """One row's verdict against the interval printed beside it."""
    lo, hi = r["ratio_ci_low"], r["ratio_ci_high"]
    excludes = lo > 1 or hi < 1
    inside = 1 / (1 + margin) <= lo and hi <= 1 + margin
    assert r["margin"] == margin
    if n_floor_p > threshold + 1e-12:  # these n cannot reach the table's level
        assert (r["verdict"], r["verdict_reason"], r["detectable"]) == ("inconclusive", "n too small", None)
        assert not r["significant"] and mark(r) == "inconclusive (n too small)"
        assert r["ratio_ci_level"] < 1 - threshold + 1e-12  # its level is printed, and it is lower
        return
    assert r["ratio_ci_level"] >= 1 - threshold - 1e-12
    assert r["significant"] == excludes  # a BH discovery exactly when the printed CI excludes 1
    assert r["detectable"] == pytest.approx(max(1 / lo, hi) - 1)
    if inside:
        assert r["verdict"] == "equivalent" and mark(r) == "equivalent"
    elif excludes:
        assert r["verdict"] == ("slower" if hi < 1 else "faster")  # throughput rows: below 1 is slower
    else:
        assert r["verdict"] == "inconclusive" and r["verdict_reason"] is None
        assert mark(r).startswith("inconclusive (could not see < ")


def _table(rng: np.random.Generator, tests: int = 12, envs: int = 2, margin: float = 0.05):
    """One simulated table: `tests` rows x `envs` candidate environments against a baseline."""
    rows, values = [], {}
    for t in range(tests):
        nb = int(rng.integers(3, 11))
        values[(t, "base")] = 100 * np.exp(rng.normal(0, 0.03, nb))
        for e in range(envs):
            n = int(rng.integers(3, 11))
            factor = rng.choice([1.0, 1.0, 0.99, 0.95, 0.7])
            values[(t, e)] = factor * 100 * np.exp(rng.normal(0, 0.03, n))
            r = stats.ratio(values[(t, e)], values[(t, "base")])
            rows.append({"cell_key": t, "environment": e, "factor": factor, "ratio": r.ratio, "sizes": (n, nb),
                         "p_value": r.p_value, "significant": r.significant, "_compared": True,
                         "_min_p": r.min_p, "_seed": 0})
    verdicts.apply_verdicts(rows, values, lambda r: "one table",
                       lambda r: ((r["cell_key"], r["environment"]), (r["cell_key"], "base")), margin)
    return rows


def test_marker_and_interval_never_contradict_over_many_tables():
    rng = np.random.default_rng(2024)
    seen = set()
    false, discoveries = 0, 0
    for _ in range(150):
        rows = _table(rng)
        threshold = rows[0]["p_threshold"]
        reachable = [r for r in rows if r["verdict_reason"] != "n too small"]
        for r in rows:
            seen.add(r["verdict_reason"] or r["verdict"])
            _check_row(r, 0.05, threshold, stats.mw_min_p(*r["sizes"]))
        # without ties, the interval's verdict is the Benjamini-Hochberg selection
        bh = {id(r) for r in reachable if r["p_value"] <= threshold + 1e-12}
        assert bh == {id(r) for r in rows if r["significant"]}
        discoveries += sum(r["significant"] for r in rows)
        false += sum(r["significant"] and r["factor"] == 1.0 for r in rows)
    assert seen == {"faster", "slower", "equivalent", "inconclusive", "n too small"}
    assert false / max(discoveries, 1) < 0.05  # the false discovery rate holds



def test_paired_rows_marker_and_interval_agree_too():
    """Rows from paired rounds (signed-rank) in the same correction: '*' exactly when the printed
    interval excludes 1, and 'n too small' where 2 / 2^rounds cannot reach the table's level."""
    rng = np.random.default_rng(24)
    seen = set()
    for _ in range(100):
        rows, values = [], {}
        for t in range(8):
            n = int(rng.integers(4, 16))
            load = rng.uniform(0.6, 1.0, n)
            factor = rng.choice([1.0, 1.0, 0.98, 0.9])
            base = 100 * load * np.exp(rng.normal(0, 0.01, n))
            cand = factor * 100 * load * np.exp(rng.normal(0, 0.01, n))
            r = stats.paired_ratio(cand, base)
            rows.append({"cell_key": t, "environment": "c", "p_value": r.p_value, "_compared": True,
                         "_min_p": r.min_p, "_seed": 0, "_paired": (list(cand), list(base)), "n": n,
                         "higher_is_better": False})  # a time: below 1 is faster
        verdicts.apply_verdicts(rows, values, lambda r: "one table", lambda r: (None, None), 0.02)
        for r in rows:
            seen.add(r["verdict_reason"] or r["verdict"])
            assert r["ratio_ci_method"] == "signed-rank (paired rounds)"
            _check_row({**r, "higher_is_better": True, "verdict": {"faster": "slower", "slower": "faster"}.get(
                r["verdict"], r["verdict"])}, 0.02, r["p_threshold"], stats.signed_rank_min_p(r["n"]))
    assert seen == {"faster", "slower", "equivalent", "inconclusive", "n too small"}


# -- a stored run, made by hand: the verdict fields of `show --json`, the tables' words --------------

RUN_SUITE = """\
[suite]
name = "verdicts"
baseline = "a"
warmup = 0
monitor = false
min_repetitions = {least}
max_repetitions = {rounds}
ci_target = 0.02
{margin}

[environments.a]
driver = "host"

[environments.b]
driver = "host"

[[workloads]]
name = "system"
params = {{ duration = 0.05, test = ["dhrystone", "whetstone", "pipe"], copies = "1" }}
"""

# test -> (b's factor, round-to-round noise of each side's log value)
CASES = {"dhrystone": (1.0, 0.002), "whetstone": (0.9, 0.002), "pipe": (1.0, 0.06)}


def _stored(tmp_path, rounds=20, margin="", store=None):
    from virtbench import suite
    from virtbench.model import Sample
    from virtbench.store import Store

    path = tmp_path / "v.toml"
    path.write_text(RUN_SUITE.format(least=min(6, rounds), rounds=rounds, margin=margin))
    m = suite.load(path)
    store = store or Store(tmp_path / "v.sqlite")
    rid = store.create_run(m.to_spec(), suite_name=m.name, suite_path=None, baseline="a", command="t")
    rng = np.random.default_rng(32)
    for cell in m.cells:
        test = cell["params"]["test"]
        factor, noise = CASES[test]
        for r in range(rounds):
            load = rng.uniform(0.7, 1.0)  # hits both sides of a round: cancels in its ratio
            for env, f in (("a", 1.0), ("b", factor)):
                value = f * 1e6 * load * np.exp(rng.normal(0, noise))
                store.record_attempt(rid, cell, env, r, warmup=False, status="ok", started=0, ended=1,
                                     samples_=[Sample(test, value, "lps", True, {})],
                                     sample_metadata={"repetition": r, "round": r})
    store.set_status(rid, "completed")
    return store, rid


def _b_rows(store, rid, **kw):
    return {r["metric"]: r for r in analysis.results(store, rid, **kw)["results"] if r["environment"] == "b"}


def test_a_stored_run_gets_the_four_verdicts_from_its_intervals(tmp_path):
    store, rid = _stored(tmp_path)
    rows = _b_rows(store, rid)
    same, slow, noisy, index = rows["dhrystone"], rows["whetstone"], rows["pipe"], rows["index"]
    assert same["verdict"] == "equivalent" and same["margin"] == 0.02 and same["detectable"] < 0.02
    assert 1 / 1.02 <= same["ratio_ci_low"] and same["ratio_ci_high"] <= 1.02
    assert slow["verdict"] == "slower" and slow["ratio_ci_high"] < 0.92  # a throughput down 10 %
    assert noisy["verdict"] == "inconclusive" and noisy["verdict_reason"] is None
    assert noisy["detectable"] == pytest.approx(max(1 / noisy["ratio_ci_low"], noisy["ratio_ci_high"]) - 1)
    assert noisy["detectable"] > 0.02 and noisy["ci_target_met"] is False and same["ci_target_met"] is True
    assert any(w.startswith("ci_target ±2 % not reached in 20 rounds") for w in noisy["warnings"])
    assert all(r["ratio_ci_level"] >= 1 - 0.05 / 3 - 1e-9 for r in (same, slow, noisy))  # the table's level
    assert index["verdict"] in ("slower", "inconclusive") and index["ratio_ci_level"] == 0.95
    every = analysis.results(store, rid)["results"]
    assert all(set(r) == set(every[0]) for r in every)  # one shape of row, index rows included
    base = [r for r in every if r["environment"] == "a"]
    assert base and all(r["verdict"] is None and r["detectable"] is None for r in base)


def test_the_margin_comes_from_the_suite_and_the_command_line(tmp_path):
    store, rid = _stored(tmp_path, margin="margin = 0.5")
    rows = _b_rows(store, rid)
    assert rows["pipe"]["verdict"] == "equivalent" and rows["pipe"]["margin"] == 0.5
    assert rows["whetstone"]["verdict"] == "equivalent"  # 10 % is inside ±50 %
    rows = _b_rows(store, rid, margin=0.001)  # --margin overrides the suite's
    assert rows["dhrystone"]["verdict"] == "inconclusive" and rows["whetstone"]["verdict"] == "slower"
    import subprocess
    import sys

    res = subprocess.run([sys.executable, "-m", "virtbench.cli", "show", rid, "--db", str(tmp_path / "v.sqlite"),
                          "--json", "--margin", "0.001"], capture_output=True, text=True, timeout=120)
    data = json.loads(res.stdout)
    assert data["margin"] == 0.001 and {r["verdict"] for r in data["results"] if r["environment"] == "b"} \
        == {"inconclusive", "slower"}
    res = subprocess.run([sys.executable, "-m", "virtbench.cli", "show", rid, "--db", str(tmp_path / "v.sqlite"),
                          "--margin", "2"], capture_output=True, text=True, timeout=120)
    assert res.returncode == 2 and "--margin" in res.stderr


def test_too_few_rounds_print_their_own_level_never_the_nominal_one(tmp_path):
    from rich.console import Console

    from virtbench import render

    store, rid = _stored(tmp_path, rounds=3)  # 3 rounds: the widest signed-rank interval is 75 %
    data = analysis.results(store, rid)
    rows = {r["metric"]: r for r in data["results"] if r["environment"] == "b"}
    for metric in CASES:
        r = rows[metric]
        assert (r["verdict"], r["verdict_reason"], r["detectable"]) == ("inconclusive", "n too small", None)
        assert r["ratio_ci_level"] == pytest.approx(0.75)
        assert r["ci_level"] == pytest.approx(0.75)  # the median's [min, max] of 3
    assert rows["index"]["ratio_ci_level"] is None and rows["index"]["verdict_reason"] == "n too small"
    console = Console(record=True, width=400)
    render.results_tables(console, data)
    text = console.export_text()
    line = next(ln for ln in text.splitlines() if "│ dhrystone" in ln)
    assert line.count(" 75%") == 3  # both medians and the ratio say their level
    assert "inconclusive (n too small)" in line
    assert "(no level) inconclusive (n too small)" in next(ln for ln in text.splitlines() if "│ index" in ln)


def test_the_paired_legend_says_why_it_can_disagree_with_the_medians():
    """3 rounds: b's median is 3 % above a's, the rounds' own ratios put b 3 % below (the Hodges-
    Lehmann estimate): the legend says why both can be right."""
    from virtbench.stats import ratio_methods

    a, b = [9.3, 11.2, 9.2], [9.8, 8.5, 9.6]
    assert np.median(b) > np.median(a)
    assert stats.paired_ratio(b, a).ratio < 1.0
    text = ratio_methods.ratio_phrase([{"ratio_ci_method": "signed-rank (paired rounds)"}], baseline="a")
    assert "with few rounds it can point the other way from the two medians" in text


def test_compare_of_small_runs_prints_the_level_it_has(tmp_path):
    """Two runs of 2 and 3 repetitions: B / A is unpaired (Mann-Whitney), whose widest interval is
    80 %; the row says so and gives no verdict from it."""
    from rich.console import Console

    from virtbench import render

    from virtbench.store import Store

    store = Store(tmp_path / "both.sqlite")
    for side in "ab":
        (tmp_path / side).mkdir()
    _, run_a = _stored(tmp_path / "a", rounds=2, store=store)
    _, run_b = _stored(tmp_path / "b", rounds=3, store=store)
    data = analysis.compare(store, run_a, run_b)
    row = next(r for r in data["results"] if r["metric"] == "dhrystone" and r["environment"] == "a")
    assert row["ratio_ci_level"] == pytest.approx(0.8) and row["verdict_reason"] == "n too small"
    assert row["ci_level_a"] == pytest.approx(0.5) and row["ci_level_b"] == pytest.approx(0.75)  # [min, max] of 2, 3
    console = Console(record=True, width=400)
    render.compare_table(console, data)
    line = next(ln for ln in console.export_text().splitlines() if "dhrystone" in ln and "│ a " in ln)
    assert " 80%" in line and "inconclusive (n too small)" in line


def test_the_pandas_api_has_the_same_verdicts(tmp_path):
    from virtbench.api import open_store

    store, rid = _stored(tmp_path)
    df = open_store(tmp_path / "v.sqlite").results(rid, margin=0.5)
    b = df[df["environment"] == "b"].set_index("metric")
    assert b.loc["whetstone", "verdict"] == "equivalent" and b.loc["whetstone", "margin"] == 0.5
    assert list(b.columns).count("detectable") == 1 and "ratio_ci_level" in b.columns
    cmp = open_store(tmp_path / "v.sqlite").compare(rid, rid)
    # a run against itself: never faster or slower; unpaired, its rounds' load (0.7-1.0) makes most rows inconclusive
    assert "inconclusive" in set(cmp["verdict"]) and not {"faster", "slower"} & set(cmp["verdict"])
    assert (cmp["ratio"] == 1.0).all()


@pytest.mark.parametrize("bad", ["2", "0", "-0.1", "true", '"2 %"'])
def test_a_suite_margin_outside_0_to_1_names_its_line(tmp_path, bad):
    from virtbench import suite
    from virtbench.errors import UserError

    path = tmp_path / "v.toml"
    path.write_text(RUN_SUITE.format(least=6, rounds=20, margin=f"margin = {bad}"))
    with pytest.raises(UserError) as e:
        suite.load(path)
    assert "v.toml:9" in str(e.value) and "suite.margin" in str(e.value) and "between 0 and 1" in str(e.value)
