"""Tests of native/eigen (vb-eigen): the block Sakurai-Sugiura eigensolver must find every eigenvalue of
class S's interval, and nothing else, against the closed form of the 2-D Laplacian, on 1 rank, 2 ranks and
1 rank x 2 threads; --perturb must fail verification; bad input must exit 2 with a clear message before any
computation; a node without enough memory must exit 3; --allreduce-bytes must pad the reduced buffer; the
captured outputs in tests/data/eigen that parser tests rely on must keep the documented format.

Needs Open MPI (mpicc, mpirun) and LAPACK (liblapack-dev); skipped without them. Class S takes about a second.
"""

import json
import math
import shutil
import subprocess
import time
from pathlib import Path

import npbkit
import pytest

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "native" / "eigen"
DATA = ROOT / "tests" / "data" / "eigen"

KEYS = ["kernel", "class", "ranks", "threads", "time_s", "mops", "solves_per_s", "verified", "verify", "checks",
        "iterations", "size", "n", "points", "systems", "block", "moments", "subspace", "thread_mode", "interval",
        "expected",
        "found", "rejected", "max_multiplicity", "eigenvalues", "max_ritz_residual", "max_solve_residual",
        "allreduce_bytes", "moments_bytes", "allreduce_s", "wait_s", "solve_s", "dense_s", "duplicated_s",
        "setup_s", "solve_imbalance", "duplicated_fraction", "ideal_efficiency", "version"]
CHECK_KEYS = ["check", "value", "reference", "rel_err", "epsilon", "passed"]
EPSILON = 1e-8
CLASS_S = {"size": "48x48", "n": 2304, "points": 32, "systems": 16, "block": 4, "moments": 8,
           "moments_bytes": 2304 * 4 * 8 * 8}


def laplacian_eigenvalues(g):
    """The closed form, computed here independently of vb-eigen."""
    mu = [4 * math.sin(math.pi * k / (2 * (g + 1))) ** 2 for k in range(1, g + 1)]
    return sorted(a + b for a in mu for b in mu)


@pytest.fixture(scope="module")
def vb_eigen(tmp_path_factory):
    return npbkit.build(tmp_path_factory, SRC, "vb-eigen")


mpirun = npbkit.mpirun
parse = npbkit.one_record


def check_record(rec, ranks, threads=1):
    """Structure and internal consistency of one vb-eigen record (class S)."""
    assert list(rec) == KEYS
    assert rec["kernel"] == "eigen" and rec["class"] == "S" and rec["version"] == 1
    assert rec["ranks"] == ranks and rec["threads"] == threads
    assert {k: rec[k] for k in CLASS_S} == CLASS_S
    assert rec["time_s"] > 0 and rec["mops"] > 0 and rec["iterations"] > 0
    assert rec["solves_per_s"] == pytest.approx(rec["systems"] * rec["block"] / rec["time_s"], rel=1e-3)
    checks = rec["checks"]
    assert [c["check"] for c in checks] == ["count", "eigenvalues"]
    for c in checks:
        assert list(c) == CHECK_KEYS
    assert checks[0]["passed"] == (checks[0]["value"] == checks[0]["reference"])
    assert checks[1]["epsilon"] == EPSILON
    verify = rec["verify"]
    assert verify["checks"] == 2 and verify["failed"] == sum(not c["passed"] for c in checks)
    assert rec["verified"] == (verify["failed"] == 0) == verify["passed"]
    assert {k: v for k, v in verify.items() if k not in ("checks", "failed")} in checks
    # the interval and its count are the closed form's
    lo, hi = rec["interval"]
    exact = [e for e in laplacian_eigenvalues(48) if lo < e < hi]
    assert rec["expected"] == len(exact) == checks[0]["reference"]
    assert rec["found"] == len(rec["eigenvalues"]) == checks[0]["value"]
    assert rec["eigenvalues"] == sorted(rec["eigenvalues"])
    assert rec["max_multiplicity"] == 2 <= rec["block"]  # mu_k + mu_l = mu_l + mu_k
    # the work every rank repeats, and the ideal efficiency it allows
    f = rec["duplicated_fraction"]
    assert 0 < f < 1
    assert rec["ideal_efficiency"] == pytest.approx(1 / (ranks * f + 1 - f))
    assert rec["allreduce_bytes"] >= rec["moments_bytes"]
    assert rec["solve_imbalance"] >= 1.0
    # threads own whole systems when the rank has at least as many systems as threads
    assert rec["thread_mode"] == ("systems" if threads > 1 and rec["systems"] // ranks >= threads else "rows")
    return rec, exact


def assert_found_all(rec, exact):
    assert rec["verified"] is True, rec["verify"]
    assert rec["found"] == rec["expected"] and rec["rejected"] == 0
    for got, want in zip(rec["eigenvalues"], exact):
        assert abs(got - want) <= EPSILON * want


@pytest.mark.parametrize("np, threads", [(1, 1), (2, 1), (1, 2)], ids=["1rank", "2ranks", "1rank-2threads"])
def test_class_s_verifies(vb_eigen, np, threads):
    r = mpirun(np, vb_eigen, "S", "--threads", threads)
    assert r.returncode == 0, r.stderr
    rec, exact = check_record(parse(r.stdout), np, threads)
    assert_found_all(rec, exact)
    if np == 1:
        assert rec["ideal_efficiency"] == 1.0


def test_threads_share_the_rows_when_a_rank_has_fewer_systems_than_threads(vb_eigen):
    """--points 4: 2 systems on one rank with 3 threads; COCG's rows are split over the threads."""
    r = mpirun(1, vb_eigen, "S", "--points", 4, "--threads", 3)
    assert r.returncode == 0, r.stderr
    rec = parse(r.stdout)
    assert rec["thread_mode"] == "rows" and rec["systems"] == 2 and rec["threads"] == 3
    assert rec["found"] + rec["rejected"] > 0  # 4 points filter poorly: verification is not the point here


def test_allreduce_is_padded_to_the_requested_size(vb_eigen):
    r = mpirun(2, vb_eigen, "S", "--allreduce-bytes", "8M")
    assert r.returncode == 0, r.stderr
    rec, exact = check_record(parse(r.stdout), 2)
    assert rec["allreduce_bytes"] == 8 * 1024 * 1024 > rec["moments_bytes"]
    assert rec["allreduce_s"] > 0
    assert_found_all(rec, exact)


def test_perturbed_matrix_fails_verification(vb_eigen):
    """--perturb moves the diagonal by 1e-6 relative: every eigenvalue is off by ~2e-5 relative."""
    r = mpirun(1, vb_eigen, "S", "--perturb")
    assert r.returncode == 0, r.stderr
    rec, _ = check_record(parse(r.stdout), 1)
    assert rec["verified"] is False
    assert rec["verify"]["check"] == "eigenvalues" and rec["verify"]["rel_err"] > 1e-6


BAD_INPUT = [
    (2, ["Q"], "vb-eigen: class 'Q' is not one of S, W, A, B"),
    (2, [], "vb-eigen: need a CLASS"),
    (2, ["S", "--threads", "0"], "vb-eigen: --threads needs a whole number from 1 to 1024, got '0'"),
    (2, ["S", "--points", "7"], "vb-eigen: --points needs an even whole number from 4 to 1024, got '7'"),
    (2, ["S", "--allreduce-bytes", "12Q"], "vb-eigen: --allreduce-bytes needs a byte count"),
    (2, ["S", "--allreduce-bytes", "1000"], "is smaller than class S's moments (589824 bytes)"),
    (2, ["S", "--frobnicate"], "vb-eigen: unknown option '--frobnicate'"),
    (3, ["S", "--points", "4"], "has 2 shifted systems to share; run on at most 2 ranks (or raise --points), got 3"),
]


@pytest.mark.parametrize("np,args,message", BAD_INPUT, ids=[" ".join(a) + f" np{n}" for n, a, _ in BAD_INPUT])
def test_bad_input_exits_2_before_computing(vb_eigen, np, args, message):
    start = time.monotonic()
    r = mpirun(np, vb_eigen, *args)
    npbkit.assert_refused(r, "vb-eigen", message)
    assert time.monotonic() - start < 30


def test_not_enough_memory_exits_3(vb_eigen):
    r = mpirun(2, vb_eigen, "S", "--allreduce-bytes", "1G", env={"VB_EIGEN_MEM_AVAILABLE": "100000000"})
    assert r.returncode == 3, (r.stdout, r.stderr)
    assert r.stdout == ""
    assert "vb-eigen: class S needs about 2." in r.stderr and "GiB" in r.stderr and "not starting" in r.stderr


def test_help(vb_eigen):
    r = mpirun(1, vb_eigen, "--help")
    assert r.returncode == 0
    assert r.stdout.startswith("usage: mpirun -np R vb-eigen CLASS")


def test_lapack_is_linked_statically(vb_eigen):
    """The guest image has Open MPI but no LAPACK or libgfortran: the kernel must not need them."""
    ldd = shutil.which("ldd")
    if not ldd:
        pytest.skip("no ldd")
    out = subprocess.run([ldd, str(vb_eigen)], capture_output=True, text=True).stdout
    assert "libmpi" in out
    assert "lapack" not in out and "blas" not in out and "gfortran" not in out


# ---- captured outputs --------------------------------------------------------------------

def captured():
    return sorted(DATA.glob("*.json"))


def test_captured_outputs_exist():
    names = {p.name for p in captured()}
    assert {"S_np1.json", "S_np2.json", "S_np1_t2.json", "S_np2_perturb.json"} <= names


@pytest.mark.parametrize("path", captured(), ids=lambda p: p.name)
def test_captured_output_format(path):
    text = path.read_text()
    assert text.endswith("\n") and text.count("\n") == 1
    rec = json.loads(text)
    np = int(path.stem.split("_")[1].removeprefix("np"))
    rec, exact = check_record(rec, np, threads=rec["threads"])
    if "perturb" in path.stem:
        assert rec["verified"] is False
    else:
        assert_found_all(rec, exact)


@pytest.mark.parametrize("name, status, message", [
    ("Q_np2.stderr", 2, "vb-eigen: class 'Q' is not one of S, W, A, B"),
    ("S_np3_points4.stderr", 2, "run on at most 2 ranks"),
    ("S_np2_nomem.stderr", 3, "not starting"),
])
def test_captured_errors(name, status, message):
    text = (DATA / name).read_text()
    assert text.splitlines()[0].startswith("vb-eigen: ") and message in text.splitlines()[0]
    assert f"Exit code:    {status}" in text
