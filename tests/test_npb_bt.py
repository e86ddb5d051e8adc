"""Tests of vb-npb's BT pseudo-application (native/npb/bt.c + cfd.c): class S must verify
against the published NPB 3.4 norms on 1 rank, on 2 and 3 ranks (z-slabs with a halo
exchange and a transpose for the z solves; any count with >= 2 z planes per rank), and with
2 OpenMP threads; --perturb must fail verification; a rank count the grid cannot split must
exit 2 with a message naming the allowed counts; the BT zone solver (npb_zone_bt) must make
BT-MZ class S verify.  Class W (seconds per run) is marked slow; class A is measured by
bench/npb_pseudo_apps.py.  Needs Open MPI; skipped without it.
"""

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "native" / "npb"
MPIRUN = ["mpirun", "--allow-run-as-root", "--oversubscribe", "--bind-to", "none"]
NORMS = ["rho", "rho_u", "rho_v", "rho_w", "energy"]
CHECKS = [f"xcr_{n}" for n in NORMS] + [f"xce_{n}" for n in NORMS]


@pytest.fixture(scope="module")
def vb_npb(tmp_path_factory):
    if not shutil.which("mpirun") or not shutil.which(os.environ.get("MPICC", "mpicc")):
        pytest.skip("Open MPI (mpirun, mpicc) not installed")
    bindir = tmp_path_factory.mktemp("bin")
    build = subprocess.run(["make", "-s", "-C", str(SRC), f"BINDIR={bindir}"],
                           capture_output=True, text=True, timeout=300)
    assert build.returncode == 0, f"build failed:\n{build.stderr}"
    assert "warning" not in build.stderr, f"build warnings:\n{build.stderr}"
    return bindir / "vb-npb"


def run(binary, np, *args, timeout=120):
    # idle OpenMP threads sleep instead of spinning: on a shared, loaded machine spinning
    # threads steal the cores the working ones need (class S gets ~30x slower)
    env = {**os.environ, "OMP_WAIT_POLICY": "passive"}
    return subprocess.run([*MPIRUN, "-np", str(np), str(binary), *map(str, args)],
                          capture_output=True, text=True, timeout=timeout, env=env)


def record(r):
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert len(lines) == 1, r.stdout
    return json.loads(lines[0])


def assert_verified(rec, cls, np, threads=1, iterations=60, size="12x12x12"):
    assert rec["kernel"] == "bt" and rec["class"] == cls
    assert rec["ranks"] == np and rec["threads"] == threads
    assert rec["iterations"] == iterations and rec["size"] == size
    assert [c["check"] for c in rec["checks"]] == CHECKS
    for c in rec["checks"]:
        assert c["epsilon"] == 1e-8
        assert c["passed"] and c["rel_err"] <= 1e-8, c
    assert rec["verified"] is True
    assert rec["time_s"] > 0 and rec["mops"] > 0


@pytest.mark.parametrize("np", [1, 2, 3])
def test_class_s_verifies(vb_npb, np):
    assert_verified(record(run(vb_npb, np, "bt", "S")), "S", np)


def test_class_s_two_threads(vb_npb):
    assert_verified(record(run(vb_npb, 1, "bt", "S", "--threads", "2")), "S", 1, threads=2)


def test_ranks_agree_with_one_rank(vb_npb):
    """The decomposition changes no arithmetic: 1 and 2 ranks give the same norms."""
    one = {c["check"]: c["value"] for c in record(run(vb_npb, 1, "bt", "S"))["checks"]}
    two = {c["check"]: c["value"] for c in record(run(vb_npb, 2, "bt", "S"))["checks"]}
    for name in CHECKS:
        assert two[name] == pytest.approx(one[name], rel=1e-13, abs=0)


def test_published_reference_values(vb_npb):
    rec = record(run(vb_npb, 1, "bt", "S"))
    refs = {c["check"]: c["reference"] for c in rec["checks"]}
    assert refs["xcr_rho"] == 1.7034283709541311e-01     # NPB 3.4 bt/verify.f, class S
    assert refs["xce_energy"] == 8.9269630987491446e-04


def test_perturbed_input_fails_verification(vb_npb):
    rec = record(run(vb_npb, 1, "bt", "S", "--perturb"))
    assert rec["verified"] is False
    assert rec["verify"]["passed"] is False
    assert rec["verify"]["rel_err"] > rec["verify"]["epsilon"]


def test_too_many_ranks_exits_2(vb_npb):
    r = run(vb_npb, 7, "bt", "S")
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert r.stdout == ""
    assert "vb-npb: bt class S can run on 1 to 6 ranks (at least 2 of the 12 z planes per rank), got 7" \
        in r.stderr


@pytest.mark.parametrize("np,threads", [(1, 2), (2, 1)])
def test_bt_zone_solver_makes_bt_mz_verify(vb_npb, np, threads):
    """BT-MZ class S (2x2 zones of 6 and 18 points wide) runs BT's own step per zone."""
    rec = record(run(vb_npb, np, "bt-mz", "S", "--threads", threads))
    assert rec["kernel"] == "bt-mz" and rec["ranks"] == np and rec["threads"] == threads
    assert rec["verified"] is True, rec["verify"]
    assert len(rec["checks"]) == 10
    assert all(c["rel_err"] <= c["epsilon"] == 1e-8 for c in rec["checks"])


@pytest.mark.slow
@pytest.mark.parametrize("np", [1, 2])
def test_class_w_verifies(vb_npb, np):
    rec = record(run(vb_npb, np, "bt", "W", timeout=600))
    assert_verified(rec, "W", np, iterations=200, size="24x24x24")
