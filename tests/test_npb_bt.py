"""Tests of vb-npb's BT pseudo-application (native/npb/bt.c + cfd.c): class S must verify
against the published NPB 3.4 norms on 1 rank, on 2 and 3 ranks (z-slabs with a halo
exchange and a transpose for the z solves; any count with >= 2 z planes per rank), and with
2 OpenMP threads; --perturb must fail verification; a rank count the grid cannot split must
exit 2 with a message naming the allowed counts; the BT zone solver (npb_zone_bt) must make
BT-MZ class S verify.  Class W (seconds per run) is marked slow; class A is measured by
bench/npb_pseudo_apps.py.  The tests shared with SP are npbkit.CfdAppTests.  Needs
Open MPI; skipped without it.
"""

from pathlib import Path

import npbkit
import pytest

SRC = Path(__file__).resolve().parents[1] / "native" / "npb"


@pytest.fixture(scope="module")
def vb_npb(tmp_path_factory):
    return npbkit.build(tmp_path_factory, SRC, "vb-npb")


class TestBT(npbkit.CfdAppTests):
    KERNEL = "bt"
    ITERATIONS = {"S": (60, "12x12x12"), "W": (200, "24x24x24")}
    # NPB 3.4 bt/verify.f, class S
    REFERENCES = {"xcr_rho": 1.7034283709541311e-01, "xce_energy": 8.9269630987491446e-04}


@pytest.mark.parametrize("np,threads", [(1, 2), (2, 1)])
def test_bt_zone_solver_makes_bt_mz_verify(vb_npb, np, threads):
    """BT-MZ class S (2x2 zones of 6 and 18 points wide) runs BT's own step per zone."""
    rec = npbkit.record(npbkit.mpirun(np, vb_npb, "bt-mz", "S", "--threads", threads))
    assert rec["kernel"] == "bt-mz" and rec["ranks"] == np and rec["threads"] == threads
    assert rec["verified"] is True, rec["verify"]
    assert len(rec["checks"]) == 10
    assert all(c["rel_err"] <= c["epsilon"] == 1e-8 for c in rec["checks"])
