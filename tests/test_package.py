"""The package, not the clone: build the sdist and the wheel (from the sdist, as pip would), install
the wheel into a fresh virtual environment outside the checkout and use it from there, so a file
missing from the package fails here."""

import json
import os
import site
import subprocess
import sys
import tarfile
import zipfile

import pytest

from virtbench import paths

pytestmark = pytest.mark.slow


def sh(argv, **kw):
    res = subprocess.run([str(a) for a in argv], capture_output=True, text=True, timeout=600, **kw)
    assert res.returncode == 0, f"{argv}: {res.stdout}\n{res.stderr}"
    return res


def test_wheel_works_outside_the_checkout(tmp_path):
    dist = tmp_path / "dist"
    # Offline: the build backend comes from this venv (requirements.lock pins build and wheel).
    sh([sys.executable, "-m", "build", "--no-isolation", "--outdir", dist, paths.PROJECT_ROOT])
    (wheel,) = dist.glob("virtbench-*.whl")
    (sdist,) = dist.glob("virtbench-*.tar.gz")
    in_wheel = set(zipfile.ZipFile(wheel).namelist())
    assert {"virtbench/native/Makefile", "virtbench/native/system/main.c", "virtbench/suites/quick.toml",
            "virtbench/study_files/000.toml", "virtbench/study_files/004.toml"} <= in_wheel
    assert not any("/build/" in n or n.endswith(".o") for n in in_wheel)
    in_sdist = {n.split("/", 1)[1] for n in tarfile.open(sdist).getnames() if "/" in n}
    assert {"native/Makefile", "native/npb/npb.h", "suites/quick.toml", "studies/001.toml", "setup.py"} <= in_sdist

    # A fresh venv; its dependencies come from this one (a .pth line), so no index is needed.
    venv = tmp_path / "venv"
    sh([sys.executable, "-m", "venv", "--without-pip", venv])
    (target,) = (venv / "lib").glob("python3*/site-packages")
    (target / "_virtbench_deps.pth").write_text(site.getsitepackages()[0] + "\n")
    sh([sys.executable, "-m", "pip", "--python", venv / "bin" / "python", "install", "-q", "--no-deps",
        "--no-index", "--disable-pip-version-check", wheel])

    env = {k: v for k, v in os.environ.items() if k not in ("VIRTBENCH_BIN", "PYTHONPATH")}
    env["VIRTBENCH_DATA"] = str(tmp_path / "data")  # no kernels built yet: the first use builds them
    work = tmp_path / "work"
    work.mkdir()

    def vb(*args):
        return sh([venv / "bin" / "virtbench", *args], cwd=work, env=env)

    assert "(package 0.1.0 at " in vb("--version").stdout
    where = json.loads(sh([venv / "bin" / "python", "-c", (
        "import json; from virtbench import image, kernels, paths; "
        "print(json.dumps([paths.__file__, str(kernels.native_bin_dir()), str(paths.suites_dir()), "
        "sorted(kernels.source_files())]))")], cwd=work, env=env).stdout)
    assert where[0].startswith(str(venv)) and where[1].startswith(str(tmp_path / "data" / "native"))
    assert where[2].startswith(str(venv)) and "system/main.c" in where[3]
    # the built-in study files, and the suites they name relative to themselves, load from the package
    studies = json.loads(sh([venv / "bin" / "python", "-c", (
        "import json; from virtbench.reproduce import EXPERIMENTS; "
        "print(json.dumps(sorted({e.suite_path for e in EXPERIMENTS})))")], cwd=work, env=env).stdout)
    assert studies and all(p.startswith(str(venv)) and "/virtbench/suites/" in p for p in studies)

    run = vb("run", "--workload", "system", "--param", "test=dhrystone", "--param", "duration=0.2",
             "--envs", "host", "--repeat", "1", "--db", tmp_path / "r.sqlite", "--json")
    assert "building virtbench's native kernels" in run.stderr
    rows = [r for r in json.loads(run.stdout)["results"] if r["metric"] == "dhrystone"]
    assert rows and all(r["n"] == 1 and r["median"] > 0 for r in rows)

    checks = {c["name"]: c for c in json.loads(vb("doctor", "--json").stdout)}
    assert checks["native kernels"]["ok"], checks["native kernels"]
    assert checks["driver host"]["ok"], checks["driver host"]
    assert "building" not in vb("build").stderr  # built once, reused
    # requirements.lock exists only in a clone: an installed package's advice names its extras
    assert not any("requirements.lock" in (c.get("fix") or "") for c in checks.values())
    advice = sh([venv / "bin" / "python", "-c", "from virtbench import paths; print(paths.pip_advice('cloud'))"],
                cwd=work, env=env).stdout
    assert advice.startswith("pip install 'virtbench[cloud]'")
