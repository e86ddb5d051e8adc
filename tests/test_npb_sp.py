"""Tests of vb-npb's SP pseudo-application (native/npb/sp.c + cfd.c): class S must verify
against the published NPB 3.4 norms on 1 rank, on 2 and 3 ranks (z-slabs with a halo
exchange and a transpose for the z solves; any count with >= 2 z planes per rank), and with
2 OpenMP threads; --perturb must fail verification; a rank count the grid cannot split must
exit 2 with a message naming the allowed counts.  Class W (a few seconds per run) is marked
slow.  The tests themselves are npbkit.CfdAppTests, shared with BT.  Needs Open MPI; skipped
without it.
"""

from pathlib import Path

import npbkit
import pytest

SRC = Path(__file__).resolve().parents[1] / "native" / "npb"


@pytest.fixture(scope="module")
def vb_npb(tmp_path_factory):
    return npbkit.build(tmp_path_factory, SRC, "vb-npb")


class TestSP(npbkit.CfdAppTests):
    KERNEL = "sp"
    ITERATIONS = {"S": (100, "12x12x12"), "W": (400, "36x36x36")}
    # NPB 3.4 sp/verify.f, class S
    REFERENCES = {"xcr_rho": 2.7470315451339479e-02, "xce_energy": 3.4177666183390531e-05}
