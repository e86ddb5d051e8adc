"""What the tests of the MPI programs under native/ (vb-npb, vb-eigen) share: building a
program once per test session, running it under mpirun, reading its one JSON line."""

import json
import os
import shutil
import subprocess

import pytest

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MPIRUN = ["mpirun", "--allow-run-as-root", "--oversubscribe", "--bind-to", "none"]
_built: dict[Path, Path] = {}


def build(tmp_path_factory, src, binary):
    """native/<src>'s `binary`, built warning-free once per session (or the prebuilt one
    under native/build/bin when there is no compiler); skips without Open MPI."""
    if not shutil.which("mpirun"):
        pytest.skip("Open MPI (mpirun) not installed")
    src = Path(src)
    if src in _built:
        return _built[src]
    if shutil.which("make") and shutil.which(os.environ.get("MPICC", "mpicc")):
        bindir = tmp_path_factory.mktemp("bin")
        res = subprocess.run(["make", "-s", "-C", str(src), f"BINDIR={bindir}"],
                             capture_output=True, text=True, timeout=300)
        assert res.returncode == 0, f"build failed:\n{res.stderr}"
        if "skipped" in res.stderr:  # vb-eigen without a static LAPACK
            pytest.skip(res.stderr.strip())
        assert "warning" not in res.stderr, f"build warnings:\n{res.stderr}"
        _built[src] = bindir / binary
        return _built[src]
    prebuilt = ROOT / "native" / "build" / "bin" / binary
    if prebuilt.exists():
        return prebuilt
    pytest.skip(f"no mpicc and no prebuilt native/build/bin/{binary}")


def mpirun(np, binary, *args, env=None, extra=(), timeout=120):
    # idle OpenMP threads sleep instead of spinning: on a shared, loaded machine spinning
    # threads steal the cores the working ones need (class S gets ~30x slower)
    full_env = {**os.environ, "OMP_WAIT_POLICY": "passive", **(env or {})}
    return subprocess.run([*MPIRUN, *extra, "-np", str(np), str(binary), *map(str, args)],
                          capture_output=True, text=True, timeout=timeout, env=full_env)


def one_record(stdout):
    """The single JSON line a run prints on stdout."""
    lines = stdout.splitlines()
    assert len(lines) == 1, f"expected exactly one JSON line, got:\n{stdout}"
    return json.loads(lines[0])


def record(r):
    """The record of a run that must succeed (a CompletedProcess)."""
    assert r.returncode == 0, r.stderr
    return one_record(r.stdout)


def assert_verified(rec, kernel, cls, np, threads, iterations, size, checks, epsilon=1e-8):
    """A successful, verified record of `kernel` with exactly these checks, all within epsilon."""
    assert rec["kernel"] == kernel and rec["class"] == cls
    assert rec["ranks"] == np and rec["threads"] == threads
    assert rec["iterations"] == iterations and rec["size"] == size
    assert [c["check"] for c in rec["checks"]] == checks
    for c in rec["checks"]:
        assert c["epsilon"] == epsilon
        assert c["passed"] and c["rel_err"] <= epsilon, c
    assert rec["verified"] is True
    assert rec["time_s"] > 0 and rec["mops"] > 0


def values(rec):
    return {c["check"]: c["value"] for c in rec["checks"]}


class CfdAppTests:
    """The tests SP and BT share (one driver in native/npb/cfd.c): a subclass named Test* in
    test_npb_sp.py / test_npb_bt.py sets the kernel's class S / W facts; the module gives the
    vb_npb fixture."""
    KERNEL = ""
    ITERATIONS = {}  # class -> (steps, grid size)
    REFERENCES = {}  # class S check -> published NPB 3.4 reference value
    NORMS = ["rho", "rho_u", "rho_v", "rho_w", "energy"]
    CHECKS = [f"xcr_{n}" for n in NORMS] + [f"xce_{n}" for n in NORMS]

    def run(self, binary, np, cls="S", *args, timeout=120):
        return mpirun(np, binary, self.KERNEL, cls, *args, timeout=timeout)

    def check(self, rec, cls, np, threads=1):
        iterations, size = self.ITERATIONS[cls]
        assert_verified(rec, self.KERNEL, cls, np, threads, iterations, size, self.CHECKS)

    @pytest.mark.parametrize("np", [1, 2, 3])
    def test_class_s_verifies(self, vb_npb, np):
        self.check(record(self.run(vb_npb, np)), "S", np)

    def test_class_s_two_threads(self, vb_npb):
        self.check(record(self.run(vb_npb, 1, "S", "--threads", "2")), "S", 1, threads=2)

    def test_ranks_agree_with_one_rank(self, vb_npb):
        """The decomposition changes no arithmetic: 1 and 2 ranks give the same norms."""
        one, two = values(record(self.run(vb_npb, 1))), values(record(self.run(vb_npb, 2)))
        for name in self.CHECKS:
            assert two[name] == pytest.approx(one[name], rel=1e-13, abs=0)

    def test_published_reference_values(self, vb_npb):
        refs = {c["check"]: c["reference"] for c in record(self.run(vb_npb, 1))["checks"]}
        for name, value in self.REFERENCES.items():
            assert refs[name] == value

    def test_perturbed_input_fails_verification(self, vb_npb):
        rec = record(self.run(vb_npb, 1, "S", "--perturb"))
        assert rec["verified"] is False
        assert rec["verify"]["passed"] is False
        assert rec["verify"]["rel_err"] > rec["verify"]["epsilon"]

    def test_too_many_ranks_exits_2(self, vb_npb):
        r = self.run(vb_npb, 7)
        assert r.returncode == 2, (r.stdout, r.stderr)
        assert r.stdout == ""
        assert (f"vb-npb: {self.KERNEL} class S can run on 1 to 6 ranks (at least 2 of the 12 z planes "
                "per rank), got 7") in r.stderr

    @pytest.mark.slow
    @pytest.mark.parametrize("np", [1, 2])
    def test_class_w_verifies(self, vb_npb, np):
        self.check(record(self.run(vb_npb, np, "W", timeout=600)), "W", np)


def assert_refused(r, prog, message, code=2):
    """A run refused with exit `code`: nothing on stdout, `message` on stderr, said once (rank 0)."""
    assert r.returncode == code, (r.stdout, r.stderr)
    assert r.stdout == ""
    assert message in r.stderr
    assert r.stderr.count(f"{prog}:") == 1, "only rank 0 should speak"
