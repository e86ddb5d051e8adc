"""Tests of vb-npb's LU pseudo-application (native/npb/lu.c): class S must verify against
the published NPB 3.4 values (RMS norms of the residual and of the error, surface integral;
epsilon 1e-8) on 1 rank, on 2 and 3 ranks (j-row slabs with the SSOR sweeps pipelined
along k; any count with >= 2 grid rows per rank), with 2 OpenMP threads and with 2 ranks x
2 threads; the decomposition must not change the result beyond rounding; --perturb must
fail verification; a rank count the grid cannot split must exit 2 with a message naming
the allowed counts; LU-MZ class S (the same solver as npb_zone_lu) must verify.  Class W
is marked slow; class A is measured by bench/npb_pseudo_apps.py.  Needs Open MPI.
"""

from pathlib import Path

import npbkit
import pytest

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "native" / "npb"
CHECKS = [f"xcr{m}" for m in range(1, 6)] + [f"xce{m}" for m in range(1, 6)] + ["xci"]


@pytest.fixture(scope="module")
def vb_npb(tmp_path_factory):
    return npbkit.build(tmp_path_factory, SRC, "vb-npb")


def run(binary, np, *args, timeout=120):
    return npbkit.mpirun(np, binary, *args, timeout=timeout)


record = npbkit.record


def assert_verified(rec, cls, np, threads=1, iterations=50, size="12x12x12"):
    npbkit.assert_verified(rec, "lu", cls, np, threads, iterations, size, CHECKS)


values = npbkit.values


@pytest.mark.parametrize("np", [1, 2, 3])
def test_class_s_verifies(vb_npb, np):
    assert_verified(record(run(vb_npb, np, "lu", "S")), "S", np)


def test_class_s_two_threads(vb_npb):
    assert_verified(record(run(vb_npb, 1, "lu", "S", "--threads", "2")), "S", 1, threads=2)


def test_class_s_two_ranks_two_threads(vb_npb):
    """Hybrid: the master thread carries the pipeline's messages while the others compute."""
    assert_verified(record(run(vb_npb, 2, "lu", "S", "--threads", "2")), "S", 2, threads=2)


def test_decomposition_changes_only_rounding(vb_npb):
    one = values(record(run(vb_npb, 1, "lu", "S")))
    for np, threads in ((3, 1), (1, 3)):
        other = values(record(run(vb_npb, np, "lu", "S", "--threads", threads)))
        for name in CHECKS:
            assert other[name] == pytest.approx(one[name], rel=1e-12, abs=0), (np, threads, name)


def test_published_reference_values(vb_npb):
    refs = {c["check"]: c["reference"] for c in record(run(vb_npb, 1, "lu", "S"))["checks"]}
    assert refs["xcr1"] == 1.6196343210976702e-02  # NPB 3.4 lu/verify.f, class S
    assert refs["xce5"] == 1.3103347914111294e-03
    assert refs["xci"] == 7.8418928865937083e+00


def test_perturbed_input_fails_verification(vb_npb):
    rec = record(run(vb_npb, 2, "lu", "S", "--perturb"))
    assert rec["verified"] is False
    assert rec["verify"]["passed"] is False
    assert rec["verify"]["rel_err"] > rec["verify"]["epsilon"]


def test_too_many_ranks_exits_2(vb_npb):
    r = run(vb_npb, 7, "lu", "S")
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert r.stdout == ""
    assert ("vb-npb: lu class S can use 1 to 6 ranks (every rank needs at least 2 of the 12 grid "
            "rows), got 7; use fewer ranks or a bigger class") in r.stderr


def test_lu_mz_class_s_verifies(vb_npb):
    """npb_zone_lu (the same SSOR code on one zone, no MPI inside) under the LU-MZ driver."""
    rec = record(run(vb_npb, 1, "lu-mz", "S"))
    assert rec["kernel"] == "lu-mz"
    assert rec["verified"] is True, rec["verify"]


@pytest.mark.slow
@pytest.mark.parametrize("np", [1, 2])
def test_class_w_verifies(vb_npb, np):
    rec = record(run(vb_npb, np, "lu", "W", timeout=600))
    assert_verified(rec, "W", np, iterations=300, size="33x33x33")
