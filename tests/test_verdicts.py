"""Verdicts across one table (issue 14): Benjamini-Hochberg across its comparisons, each ratio CI at
the matching Benjamini-Yekutieli level, so the marker and the interval printed beside it never
contradict each other; 'n too small' where the repetitions cannot reach that level."""

import numpy as np

from virtbench import analysis, stats
from virtbench.render import mark


def _table(rng: np.random.Generator, tests: int = 12, envs: int = 2):
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
    analysis._verdicts(rows, values, lambda r: "one table",
                       lambda r: ((r["cell_key"], r["environment"]), (r["cell_key"], "base")))
    return rows


def test_marker_and_interval_never_contradict_over_many_tables():
    rng = np.random.default_rng(2024)
    seen = set()
    false, discoveries = 0, 0
    for _ in range(150):
        rows = _table(rng)
        threshold = rows[0]["p_threshold"]
        reachable = [r for r in rows if r["verdict"] != "n too small"]
        for r in rows:
            seen.add(r["verdict"])
            excludes = r["ratio_ci_low"] > 1 or r["ratio_ci_high"] < 1
            if r["verdict"] == "n too small":
                assert not r["significant"] and mark(r) == "n too small"
                assert r["ratio_ci_level"] < 1 - threshold + 1e-12  # its level is printed, and it is lower
                assert stats.mw_min_p(*r["sizes"]) > threshold
            else:
                assert r["significant"] == excludes  # '*' exactly when the printed CI excludes 1
                assert mark(r) == ("*" if excludes else "~")
                assert r["ratio_ci_level"] >= 1 - threshold - 1e-12
        # without ties, the interval's verdict is the Benjamini-Hochberg selection
        bh = {id(r) for r in reachable if r["p_value"] <= threshold + 1e-12}
        assert bh == {id(r) for r in rows if r["significant"]}
        discoveries += sum(r["significant"] for r in rows)
        false += sum(r["significant"] and r["factor"] == 1.0 for r in rows)
    assert seen == {"significant", "not significant", "n too small"}
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
                         "_min_p": r.min_p, "_seed": 0, "_paired": (list(cand), list(base)), "n": n})
        analysis._verdicts(rows, values, lambda r: "one table", lambda r: (None, None))
        for r in rows:
            seen.add(r["verdict"])
            assert r["ratio_ci_method"] == "signed-rank (paired rounds)"
            excludes = r["ratio_ci_low"] > 1 or r["ratio_ci_high"] < 1
            if r["verdict"] == "n too small":
                assert stats.signed_rank_min_p(r["n"]) > r["p_threshold"] and not r["significant"]
            else:
                assert r["significant"] == excludes and mark(r) == ("*" if excludes else "~")
    assert seen == {"significant", "not significant", "n too small"}
