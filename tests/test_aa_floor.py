"""bench/aa_busy.py's noise floor: the per-test figures and the half-width the stop rule can reach,
and the --floor mode outside virtbench (real processes, a real compiled register loop)."""

import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

import aa_busy  # noqa: E402


def test_noise_figures_of_known_pairs():
    rng = np.random.default_rng(1)
    shared = rng.normal(0, 0.05, 200)  # what hits both sides of a round
    a = 100 * np.exp(shared + rng.normal(0, 0.02, 200))
    b = 100 * np.exp(shared + rng.normal(0, 0.02, 200))
    f = aa_busy.noise(list(zip(a, b)))
    assert f["n"] == 200
    assert f["sd_log_ratio"] == pytest.approx(0.02 * math.sqrt(2), rel=0.15)
    assert f["cv_a"] == pytest.approx(math.sqrt(0.05**2 + 0.02**2), rel=0.15)
    assert f["corr"] == pytest.approx(0.05**2 / (0.05**2 + 0.02**2), abs=0.08)  # the shared part's share
    assert aa_busy.noise([(1.0, 1.0), (2.0, 2.0)]) == {"n": 2}


def test_floor_halfwidth_grows_with_the_rounds_sd_and_shrinks_with_rounds():
    lo, hi = aa_busy.floor_halfwidth(0.01, sims=300), aa_busy.floor_halfwidth(0.04, sims=300)
    assert 0 < lo < hi and hi == pytest.approx(4 * lo, rel=0.15)  # linear in sd
    assert aa_busy.floor_halfwidth(0.04, n=40, sims=300) < hi
    # below the rounds the table's level needs, no interval: the stop rule cannot stop at all
    assert aa_busy.floor_halfwidth(0.01, n=7, sims=50) == math.inf
    # 2 % at 20 rounds needs a round sd of about 3 % (the docstring's rule of thumb)
    assert aa_busy.floor_halfwidth(0.03, sims=300) == pytest.approx(0.02, abs=0.003)


def test_floor_mode_runs_real_processes_and_the_register_loop(tmp_path):
    out = tmp_path / "floor.json"
    res = subprocess.run([sys.executable, str(ROOT / "bench" / "aa_busy.py"), "--floor", "--procs", "6",
                          "--json", str(out)], capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-2000:]
    floor = json.loads(out.read_text())["floor"]
    assert set(floor["tests"]) == {*aa_busy.TESTS, "register loop"}
    for test, t in floor["tests"].items():
        assert t["n"] == 3 and len(t["pairs"]) == 3 and all(x > 0 for p in t["pairs"] for x in p), test
        assert t["sd_log_ratio"] >= 0 and t["floor_halfwidth"] > 0
        assert t["others_cores"] is not None and 0 <= t["steal"] <= 1
    assert "register loop" in res.stdout and "floor" in res.stdout
