"""bench/aa_busy.py's A/B check of the CPU a `cpus` quota took from b (`quota_shares`: the CPU of
the containers' cgroups, round by round), on a captured real run (tests/data/aa_busy: the samples'
test, environment, round, value and cpu_given of a live A/B run) and on the rule itself."""

import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data" / "aa_busy"
sys.path.insert(0, str(ROOT / "bench"))

import aa_busy  # noqa: E402


def _run(name):
    samples = json.loads((DATA / name).read_text())["samples"]
    rows = [(s["test"], s["environment"], s["round"], s["cpu_given"]) for s in samples]
    values: dict[tuple, dict] = {}
    for s in samples:
        values.setdefault((s["test"], s["round"]), {})[s["environment"]] = s["value"]
    ratios = {t: statistics.median(v["b"] / v["a"] for (tt, _), v in values.items() if tt == t and {"a", "b"} <= set(v))
              for t in {s["test"] for s in samples}}
    return rows, ratios


def test_a_machine_that_cannot_give_the_quota_is_warned_of():
    """Other programs took most of the CPU: neither container reached its quota, b got ~a's CPU, and
    the rows found no ~10 % difference: the check says so."""
    rows, ratios = _run("ab_machine_full.json")
    shares = aa_busy.quota_shares(rows)
    assert set(shares) == set(aa_busy.TESTS) | {"median"}
    assert shares["median"] > 0.97
    assert statistics.median(ratios.values()) > 0.97
    warning = aa_busy.quota_warning(shares)
    assert warning.startswith(f"b's containers got {shares['median']:.2f} of a's CPU")


def test_no_containers_figure_no_check():
    """A host run, or one stored before `containers_cores`: nothing to check, no warning."""
    old = [("dhrystone", e, 1, {"own_cores": 0.9, "window_s": 0.6}) for e in "ab"]
    assert aa_busy.quota_shares(old) == {}
    assert aa_busy.quota_warning({}) is None
    bound = aa_busy.quota_shares([("pipe", e, 1, {"containers_cores": c, "window_s": w})
                                  for e, c, w in (("a", 0.5, 0.6), ("b", 0.5, 0.54))])
    assert bound == {"pipe": 0.9, "median": 0.9}
    assert aa_busy.quota_warning(bound) is None  # the quota cut b's CPU: a difference to find
