"""Tests of the NPB multi-zone driver in native/npb (mz.c, mz_geom.c, mz_exch.c): SP-MZ,
BT-MZ and LU-MZ.

- Zone geometry and the zone -> rank map (printed by the hidden hook
  VB_NPB_MZ_PRINT_ZONES=1) against an independent Python rendering of NPB-MZ's
  zone_setup (equal zones; BT-MZ's geometric widths) and map_zones (bin packing).
- The boundary exchange (exch_qbc) through the hidden self-test VB_NPB_MZ_SELFTEST=exchange,
  which fills every zone with a function of its interior-grid coordinates and counts the
  boundary points that did not receive the neighbour's value, on 1, 2 and 3 ranks.
- Rank counts above the number of zones exit 2 with a message.
- Class S verification against the NPB-MZ reference values on 1 rank x 2 threads and
  2 ranks x 1 thread, and --perturb failing it: a build without one of the zone solvers
  (npb_zone_sp / npb_zone_bt / npb_zone_lu) fails them, naming it.  Class W on 3 ranks is
  marked slow.
- The captured outputs tests/data/npb/{sp,bt,lu}-mz_* (real runs; their format is also
  checked by test_native_npb.py) say what they claim.

Needs Open MPI (mpicc, mpirun); skipped without it.
"""

import json
import math
import os
from pathlib import Path

import npbkit
import pytest

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data" / "npb"
# VB_NPB_SRC: build another copy of native/npb (e.g. a snapshot while solvers are being edited)
SRC = Path(os.environ.get("VB_NPB_SRC") or ROOT / "native" / "npb")

BENCHES = ["sp-mz", "bt-mz", "lu-mz"]
SOLVER = {"sp-mz": "npb_zone_sp (SP)", "bt-mz": "npb_zone_bt (BT)", "lu-mz": "npb_zone_lu (LU)"}

# NPB-MZ sys/setparams.c: global grid, zones, BT-MZ's width ratio
GRID = {"S": (24, 24, 6), "W": (64, 64, 8), "A": (128, 128, 16), "B": (304, 208, 17),
        "C": (480, 320, 28)}
ZONES = {"S": 2, "W": 4, "A": 4, "B": 8, "C": 16}  # per axis, SP-MZ and BT-MZ
RATIO = {"S": 3.0, "W": 4.5, "A": 4.5, "B": 4.5, "C": 4.5}  # BT-MZ
# class S: iterations and number of checks (xcr1-5, xce1-5; LU-MZ also xci)
CLASS_S_ITER = {"sp-mz": 100, "bt-mz": 60, "lu-mz": 50}
CLASS_S_CHECKS = {"sp-mz": 10, "bt-mz": 10, "lu-mz": 11}
# spot checks of the table against the NPB-MZ verify.f files (class S)
PUBLISHED_S = {
    "sp-mz": {"xcr1": 0.7698876173566e+01, "xce5": 0.7776038881521e+01},
    "bt-mz": {"xcr1": 0.1047687395830e+04, "xce5": 0.1965566269675e+03},
    "lu-mz": {"xcr1": 0.3778579699366e+01, "xce5": 0.1639045777714e+02,
              "xci": 0.4964435445706e+02},
}


@pytest.fixture(scope="module")
def vb_npb(tmp_path_factory):
    return npbkit.build(tmp_path_factory, SRC, "vb-npb")


mpirun = npbkit.mpirun
record = npbkit.one_record


def zone_table(stderr):
    tables = [json.loads(line.split(" ", 1)[1]) for line in stderr.splitlines()
              if line.startswith("vb-npb-mz-zones ")]
    assert len(tables) == 1, stderr
    return tables[0]


# ---- an independent rendering of NPB-MZ's zone_setup and map_zones ----------------------

def widths(g, n, ratio):
    if abs(ratio - 1.0) > 1e-10:
        r = math.exp(math.log(ratio) / (n - 1))
        smallest = g * (r - 1.0) / (r ** n - 1.0)
        ends = [int(smallest * (r ** i - 1.0) / (r - 1.0) + 0.45) for i in range(1, n + 1)]
    else:
        ends = [i * g // n for i in range(1, n + 1)]
    starts = [1] + [e + 1 for e in ends[:-1]]
    return [e - s + 1 for s, e in zip(starts, ends)]


def expected_zones(bench, cls):
    gx, gy, gz = GRID[cls]
    n = 4 if bench == "lu-mz" else ZONES[cls]
    ratio = RATIO[cls] if bench == "bt-mz" else 1.0
    return widths(gx, n, ratio), widths(gy, n, ratio), gz


def bin_pack(zones, nranks):
    """map_zones of NPB-MZ 3.3: largest zones first to the least loaded rank, preferring,
    among zones at most 5% smaller, the one sharing most boundary with that rank."""
    size = [z["nx"] * z["ny"] * z["nz"] for z in zones]
    order = list(range(len(zones)))
    for a in range(len(order) - 1):  # NPB's selection sort (ties: first found)
        best = a
        for b in range(a + 1, len(order)):
            if size[order[best]] < size[order[b]]:
                best = b
        order[a], order[best] = order[best], order[a]
    owner = [-1] * len(zones)
    load = [0] * nranks

    def comm(z, p):
        g = zones[z]
        return ((owner[g["west"]] == p) * g["ny"] + (owner[g["east"]] == p) * g["ny"]
                + (owner[g["south"]] == p) * g["nx"] + (owner[g["north"]] == p) * g["nx"])

    iz = 0
    while iz < len(zones):
        p = min(range(nranks), key=lambda q: (load[q], q))
        pick, best = order[iz], comm(order[iz], p)
        for z in order[iz + 1:]:
            if (size[order[iz]] - size[z]) / size[order[iz]] > 0.05:
                break
            if owner[z] < 0 and comm(z, p) > best:
                pick, best = z, comm(z, p)
        owner[pick] = p
        load[p] += size[pick]
        while iz < len(zones) and owner[order[iz]] >= 0:
            iz += 1
    return owner


def selftest(vb_npb, np, bench, cls, print_zones=False):
    env = {"VB_NPB_MZ_SELFTEST": "exchange"}
    if print_zones:
        env["VB_NPB_MZ_PRINT_ZONES"] = "1"
    r = mpirun(np, vb_npb, bench, cls, env=env)
    assert r.returncode == 0, r.stderr
    return r


# ---- geometry ----------------------------------------------------------------------------

@pytest.mark.parametrize("bench", BENCHES)
@pytest.mark.parametrize("cls", ["S", "W", "A", "B", "C"])
def test_zone_geometry_and_map(vb_npb, bench, cls):
    nranks = 3
    r = selftest(vb_npb, nranks, bench, cls, print_zones=True)
    t = zone_table(r.stderr)
    xw, yw, gz = expected_zones(bench, cls)
    gx, gy, _ = GRID[cls]
    assert (t["x_zones"], t["y_zones"]) == (len(xw), len(yw))
    zones = t["zones"]
    assert len(zones) == len(xw) * len(yw)
    assert sum(xw) == gx and sum(yw) == gy
    for z in zones:
        i, j = z["ix"], z["iy"]
        nxz, nyz = len(xw), len(yw)
        assert z["id"] == i + j * nxz
        assert (z["nx"], z["ny"], z["nz"]) == (xw[i], yw[j], gz)
        assert (z["x0"], z["y0"]) == (sum(xw[:i]), sum(yw[:j]))
        assert z["west"] == (i - 1) % nxz + j * nxz and z["east"] == (i + 1) % nxz + j * nxz
        assert z["south"] == i + ((j - 1) % nyz) * nxz and z["north"] == i + ((j + 1) % nyz) * nxz
    if bench == "bt-mz":  # geometric widths: growing, ratio about as prescribed
        assert xw == sorted(xw) and xw[0] < xw[-1]
        assert abs(xw[-1] / xw[0] - RATIO[cls]) < 0.35 * RATIO[cls]
    else:
        assert max(xw) - min(xw) <= 1 and max(yw) - min(yw) <= 1
    owners = [z["rank"] for z in zones]
    assert owners == bin_pack(zones, nranks)
    assert set(owners) == set(range(nranks)), "every rank owns a zone"
    assert json.loads(r.stdout)["verified"] is True


def test_bt_mz_class_s_zone_widths(vb_npb):
    """BT-MZ class S: 24 points in 2 zones with ratio 3 -> widths 6 and 18."""
    t = zone_table(selftest(vb_npb, 1, "bt-mz", "S", print_zones=True).stderr)
    assert sorted({(z["nx"], z["ny"]) for z in t["zones"]}) == [(6, 6), (6, 18), (18, 6), (18, 18)]
    assert {z["rank"] for z in t["zones"]} == {0}


# ---- exchange ------------------------------------------------------------------------------

@pytest.mark.parametrize("np", [1, 2, 3])
@pytest.mark.parametrize("bench,cls", [("sp-mz", "S"), ("bt-mz", "S"), ("lu-mz", "S"),
                                       ("bt-mz", "W")])
def test_exchange_fills_every_boundary_point(vb_npb, np, bench, cls):
    rec = record(selftest(vb_npb, np, bench, cls).stdout)
    assert rec["ranks"] == np and rec["kernel"] == bench
    assert rec["checks"] == [{"check": "exchange_errors", "value": 0, "reference": 0,
                              "rel_err": 0, "epsilon": 0, "passed": True}]
    assert rec["verified"] is True


def test_exchange_with_threads(vb_npb):
    r = mpirun(2, vb_npb, "bt-mz", "W", "--threads", "2",
               env={"VB_NPB_MZ_SELFTEST": "exchange"})
    assert r.returncode == 0, r.stderr
    rec = record(r.stdout)
    assert rec["threads"] == 2 and rec["verified"] is True


# ---- arguments -----------------------------------------------------------------------------

@pytest.mark.parametrize("bench,nzones", [("sp-mz", 4), ("bt-mz", 4), ("lu-mz", 16)])
def test_more_ranks_than_zones_is_refused(vb_npb, bench, nzones):
    r = mpirun(nzones + 1, vb_npb, bench, "S", env={"VB_NPB_MZ_SELFTEST": "exchange"})
    assert r.returncode == 2
    assert r.stdout == ""
    assert f"{bench} class S has {nzones} zones" in r.stderr
    assert f"run it on 1 to {nzones} ranks (got {nzones + 1})" in r.stderr


def test_as_many_ranks_as_zones_is_accepted(vb_npb):
    rec = record(selftest(vb_npb, 4, "sp-mz", "S").stdout)
    assert rec["ranks"] == 4 and rec["verified"] is True


# ---- verification (needs the zone solvers) -----------------------------------------------

def has_solver(vb_npb, bench):
    """False when the build lacks the zone solver: vb-npb refuses before anything else
    (with 1 byte of memory allowed, a build that has it stops at the memory check)."""
    probe = mpirun(1, vb_npb, bench, "S", env={"VB_NPB_MEM_AVAILABLE": "1"})
    return not (probe.returncode == 2 and "does not include yet" in probe.stderr)


def run_class_s(vb_npb, bench, np, threads, *extra):
    assert has_solver(vb_npb, bench), f"{bench}: the build lacks zone solver {SOLVER[bench]}"
    # passive OpenMP waiting: on a loaded (oversubscribed) machine spinning threads slow
    # the tiny class S zones down 30-fold; correctness does not depend on it
    r = mpirun(np, vb_npb, bench, "S", "--threads", threads, *extra, timeout=300,
               env={"OMP_WAIT_POLICY": "passive"})
    assert r.returncode == 0, r.stderr
    rec = record(r.stdout)
    assert rec["kernel"] == bench and rec["class"] == "S"
    assert rec["ranks"] == np and rec["threads"] == threads
    assert rec["iterations"] == CLASS_S_ITER[bench] and rec["size"] == "24x24x6"
    assert len(rec["checks"]) == CLASS_S_CHECKS[bench]
    assert all(c["epsilon"] == 1e-8 for c in rec["checks"])
    assert rec["time_s"] > 0 and rec["mops"] > 0
    return rec


@pytest.mark.parametrize("bench", BENCHES)
@pytest.mark.parametrize("np,threads", [(1, 2), (2, 1)])
def test_class_s_verifies(vb_npb, bench, np, threads):
    rec = run_class_s(vb_npb, bench, np, threads)
    assert rec["verified"] is True, rec["verify"]


@pytest.mark.parametrize("bench", BENCHES)
def test_perturb_fails_verification(vb_npb, bench):
    rec = run_class_s(vb_npb, bench, 2, 1, "--perturb")
    assert rec["verified"] is False
    assert rec["verify"]["passed"] is False


@pytest.mark.slow
@pytest.mark.parametrize("bench", BENCHES)
def test_class_w_verifies_on_three_ranks(vb_npb, bench):
    """Class W (16 zones; BT-MZ's uneven ones) on 3 ranks: the bin packing leaves the
    ranks unequal zone counts and every rank exchanges with both others."""
    assert has_solver(vb_npb, bench), f"{bench}: the build lacks zone solver {SOLVER[bench]}"
    r = mpirun(3, vb_npb, bench, "W", timeout=900)
    assert r.returncode == 0, r.stderr
    rec = record(r.stdout)
    assert rec["size"] == "64x64x8"
    assert rec["verified"] is True, rec["verify"]


# ---- captured outputs (tests/data/npb, real runs of this driver) ---------------------------

@pytest.mark.parametrize("bench", BENCHES)
def test_captured_outputs(bench):
    for name, ranks, threads in ((f"{bench}_S_np1.json", 1, 2), (f"{bench}_S_np2.json", 2, 1)):
        rec = json.loads((DATA / name).read_text())
        assert (rec["kernel"], rec["class"], rec["ranks"], rec["threads"]) == (bench, "S", ranks,
                                                                              threads)
        assert rec["verified"] is True and len(rec["checks"]) == CLASS_S_CHECKS[bench]
        assert rec["iterations"] == CLASS_S_ITER[bench] and rec["size"] == "24x24x6"
        refs = {c["check"]: c["reference"] for c in rec["checks"]}
        assert {k: refs[k] for k in PUBLISHED_S[bench]} == PUBLISHED_S[bench]


def test_captured_refusals():
    perturbed = json.loads((DATA / "sp-mz_S_np2_perturb.json").read_text())
    assert perturbed["verified"] is False
    for name, text in (("sp-mz_S_np5.stderr", "run it on 1 to 4 ranks (got 5)"),
                       ("lu-mz_S_np17.stderr", "run it on 1 to 16 ranks (got 17)")):
        first = (DATA / name).read_text().splitlines()[0]
        assert first.startswith("vb-npb: ") and text in first
