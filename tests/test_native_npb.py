"""Tests of native/npb (vb-npb): the NAS Parallel Benchmark kernels EP, CG, MG, FT and IS
at class S on 2 ranks must verify against the published values; bad input (kernel, class,
options, rank count) must exit 2 with a clear message before any computation; a node
without enough memory must exit 3; the captured outputs in tests/data/npb that parser
tests rely on must keep the documented format.

Needs Open MPI (mpicc, mpirun); skipped without it.  Class S is small: the whole file
takes well under a minute on 2 cores.
"""

import json
import math
import time
from pathlib import Path

import npbkit
import pytest

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "native" / "npb"
DATA = ROOT / "tests" / "data" / "npb"

KERNELS = ["ep", "cg", "mg", "ft", "is"]
KEYS = ["kernel", "class", "ranks", "threads", "time_s", "mops", "verified", "verify", "checks",
        "iterations", "size", "version"]
CHECK_KEYS = ["check", "value", "reference", "rel_err", "epsilon", "passed"]
# what class S means for each kernel: (iterations, size, number of checks, epsilon)
CLASS_S = {
    "ep": (0, "33554432", 2, 1e-8),
    "cg": (15, "1400", 1, 1e-10),
    "mg": (4, "32x32x32", 1, 1e-8),
    "ft": (6, "64x64x64", 6, 1e-12),
    "is": (10, "65536", 2, 0.0),
}


@pytest.fixture(scope="module")
def vb_npb(tmp_path_factory):
    return npbkit.build(tmp_path_factory, SRC, "vb-npb")


mpirun = npbkit.mpirun
parse = npbkit.one_record


def check_record(rec, kernel, cls, ranks, threads=1):
    """Structure and internal consistency of one vb-npb record."""
    assert list(rec) == KEYS
    assert rec["kernel"] == kernel and rec["class"] == cls
    assert rec["ranks"] == ranks and rec["threads"] == threads and rec["version"] == 1
    assert rec["time_s"] > 0 and rec["mops"] > 0
    checks = rec["checks"]
    assert checks, "no verification checks"
    for c in checks:
        assert list(c)[:3] == CHECK_KEYS[:3] and set(CHECK_KEYS) <= set(c)
        if "value_im" in c:  # complex checks (FT): imaginary parts beside the real ones
            assert "reference_im" in c
        if c["epsilon"] > 0:
            assert c["passed"] == (c["rel_err"] <= c["epsilon"])
        else:
            assert c["passed"] == (c["value"] == c["reference"])
    verify = rec["verify"]
    assert verify["checks"] == len(checks)
    assert verify["failed"] == sum(not c["passed"] for c in checks)
    assert rec["verified"] == (verify["failed"] == 0)
    # "verify" is the worst check: a failed one if there is any
    assert verify["passed"] == rec["verified"]
    stripped = {k: v for k, v in verify.items() if k not in ("checks", "failed")}
    assert stripped in checks
    return rec


@pytest.mark.parametrize("kernel", KERNELS)
def test_class_s_two_ranks_verifies(vb_npb, kernel):
    r = mpirun(2, vb_npb, kernel, "S")
    assert r.returncode == 0, r.stderr
    rec = check_record(parse(r.stdout), kernel, "S", 2)
    iterations, size, nchecks, eps = CLASS_S[kernel]
    assert rec["verified"] is True, rec["verify"]
    assert rec["iterations"] == iterations and rec["size"] == size
    assert len(rec["checks"]) == nchecks
    assert all(c["epsilon"] == eps for c in rec["checks"])
    assert rec["verify"]["rel_err"] <= max(eps, 0.0)


def test_published_reference_values(vb_npb):
    """The table carries the published values (spot checks against RNR-94-007 / NPB 2)."""
    refs = {}
    for kernel in ("cg", "mg", "ep"):
        r = mpirun(1, vb_npb, kernel, "S")
        assert r.returncode == 0, r.stderr
        refs[kernel] = {c["check"]: c["reference"] for c in parse(r.stdout)["checks"]}
    assert refs["cg"]["zeta"] == 8.5971775078648
    assert refs["mg"]["rnm2"] == 0.5307707005734e-04
    assert refs["ep"] == {"sx": -3.247834652034740e+3, "sy": -6.958407078382297e+3}


def test_ep_hybrid_threads(vb_npb):
    r = mpirun(1, vb_npb, "ep", "S", "--threads", "2", extra=["--bind-to", "none"])
    assert r.returncode == 0, r.stderr
    rec = check_record(parse(r.stdout), "ep", "S", 1, threads=2)
    assert rec["verified"] is True


def test_omp_num_threads_when_threads_absent(vb_npb):
    """OMP_NUM_THREADS sets the threads per rank when --threads is absent (its first value), --threads
    wins over it, and a one-thread kernel (is) runs with 1 rather than refusing the environment's value."""
    env = {"OMP_NUM_THREADS": "2,1", "OMP_WAIT_POLICY": "passive"}
    r = mpirun(1, vb_npb, "ep", "S", env=env, extra=["--bind-to", "none"])
    assert r.returncode == 0, r.stderr
    assert parse(r.stdout)["threads"] == 2
    r = mpirun(1, vb_npb, "ep", "S", "--threads", "1", env=env)
    assert r.returncode == 0 and parse(r.stdout)["threads"] == 1, r.stderr
    r = mpirun(1, vb_npb, "is", "S", env=env)
    assert r.returncode == 0 and parse(r.stdout)["threads"] == 1, r.stderr


def test_perturbed_input_fails_verification(vb_npb):
    """--perturb changes one input value (CG's diagonal shift): exit 0, verified false."""
    r = mpirun(1, vb_npb, "cg", "S", "--perturb")
    assert r.returncode == 0, r.stderr
    rec = check_record(parse(r.stdout), "cg", "S", 1)
    assert rec["verified"] is False
    assert rec["verify"]["rel_err"] > rec["verify"]["epsilon"]


BAD_INPUT = [
    (2, ["cg", "Q"], "vb-npb: class 'Q' is not one of S, W, A, B, C"),
    (2, ["ua", "S"], "vb-npb: kernel 'ua' is not one of ep, cg, mg, ft, is, lu, sp, bt, sp-mz, bt-mz, lu-mz"),
    (2, ["cg"], "vb-npb: need KERNEL and CLASS"),
    (2, ["ep", "S", "--threads", "0"], "vb-npb: --threads needs a whole number"),
    (2, ["is", "S", "--threads", "2"], "vb-npb: is runs one thread per rank"),
    (2, ["ft", "S", "--frobnicate"], "vb-npb: unknown option '--frobnicate'"),
    (3, ["cg", "S"], "vb-npb: cg needs a power-of-two number of ranks, got 3"),
    (3, ["ft", "S"], "vb-npb: ft needs a power-of-two number of ranks, got 3"),
]


@pytest.mark.parametrize("np,args,message", BAD_INPUT, ids=[" ".join(a) + f" np{n}" for n, a, _ in BAD_INPUT])
def test_bad_input_exits_2_before_computing(vb_npb, np, args, message):
    start = time.monotonic()
    r = mpirun(np, vb_npb, *args)
    npbkit.assert_refused(r, "vb-npb", message)
    assert time.monotonic() - start < 30


def test_not_enough_memory_exits_3(vb_npb):
    r = mpirun(2, vb_npb, "ft", "S", env={"VB_NPB_MEM_AVAILABLE": "1000000"})
    assert r.returncode == 3, (r.stdout, r.stderr)
    assert r.stdout == ""
    assert "vb-npb: ft class S needs about" in r.stderr and "not starting" in r.stderr


def test_help(vb_npb):
    r = mpirun(1, vb_npb, "--help")
    assert r.returncode == 0
    assert r.stdout.startswith("usage: mpirun -np R vb-npb KERNEL CLASS")


# ---- captured outputs --------------------------------------------------------------------

def captured():
    return sorted(DATA.glob("*.json"))


def test_captured_outputs_exist():
    names = {p.name for p in captured()}
    for kernel in KERNELS:
        for np in (1, 2):
            assert f"{kernel}_S_np{np}.json" in names
    assert any("perturb" in n for n in names)


@pytest.mark.parametrize("path", captured(), ids=lambda p: p.name)
def test_captured_output_format(path):
    text = path.read_text()
    assert text.endswith("\n") and text.count("\n") == 1
    rec = json.loads(text)
    kernel, cls, np = path.stem.split("_")[:3]
    check_record(rec, kernel, cls, int(np.removeprefix("np")), threads=rec["threads"])
    perturbed = "perturb" in path.stem
    assert rec["verified"] is (not perturbed)
    for c in rec["checks"]:
        assert math.isfinite(c["value"]) and math.isfinite(c["rel_err"])


@pytest.mark.parametrize("path", sorted(DATA.glob("*.stderr")), ids=lambda p: p.name)
def test_captured_error_messages(path):
    first = path.read_text().splitlines()[0]
    assert first.startswith("vb-npb: ")
