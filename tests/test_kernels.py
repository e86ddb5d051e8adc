"""Where the native kernels live and what builds them, per install kind (clone or package)."""

import json
import subprocess

import pytest

from virtbench.cli import doctor
from virtbench import kernels, paths


@pytest.fixture
def as_package(tmp_path, monkeypatch):
    """This process as an installed package: its sources are the clone's native/, its data dir empty."""
    monkeypatch.delenv("VIRTBENCH_BIN", raising=False)
    monkeypatch.setenv("VIRTBENCH_DATA", str(tmp_path / "data"))
    monkeypatch.setattr(paths, "is_clone", lambda: False)
    monkeypatch.setattr(paths, "native_src_dir", lambda: paths.PROJECT_ROOT / "native")
    kernels.build_key.cache_clear()
    kernels.toolchain.cache_clear()
    yield tmp_path / "data"
    kernels.build_key.cache_clear()
    kernels.toolchain.cache_clear()


def test_clone_keeps_native_build_bin(monkeypatch):
    monkeypatch.delenv("VIRTBENCH_BIN", raising=False)
    assert paths.is_clone()
    assert kernels.native_bin_dir() == paths.PROJECT_ROOT / "native" / "build" / "bin"
    assert paths.suites_dir() == paths.PROJECT_ROOT / "suites"
    assert kernels.advice() == "make -C native"


def test_package_dir_is_content_addressed(as_package, monkeypatch):
    bindir = kernels.native_bin_dir()
    assert bindir == as_package / "native" / kernels.build_key() / "bin"
    assert kernels.advice() == "virtbench build"
    assert "Makefile" in kernels.source_files() and "system/main.c" in kernels.source_files()
    # Other flags are other binaries: another directory.
    monkeypatch.setenv("CFLAGS", "-O1")
    kernels.build_key.cache_clear()
    kernels.toolchain.cache_clear()
    assert kernels.native_bin_dir() != bindir


def test_package_build_once_then_reused(as_package):
    lines = []
    bindir = kernels.ensure(log=lines.append)
    assert bindir == kernels.native_bin_dir() and (bindir / "vb-system").is_file()
    assert any("building virtbench's native kernels" in line for line in lines)
    record = json.loads((bindir.parent / "build.json").read_text())
    assert record["key"] == bindir.parent.name and "vb-system" in record["files"]
    assert record["sources"] == kernels.sources_hash(kernels.source_files())
    assert subprocess.run([bindir / "vb-system", "list"], capture_output=True).returncode == 0
    assert [p.name for p in bindir.parent.parent.iterdir() if p.name.startswith(".build-")] == []
    again = []
    assert kernels.ensure(log=again.append) == bindir and again == []


def test_doctor_advice_per_install_kind(as_package, monkeypatch):
    check = doctor.kernels_check()
    assert not check["ok"] and "installed package" in check["detail"]
    assert check["fix"].endswith("virtbench build")
    monkeypatch.setattr(kernels.shutil, "which", lambda name: None)  # no compiler, no MPI
    fix = doctor.kernels_check()["fix"]
    assert fix == "apt-get install build-essential libopenmpi-dev openmpi-bin && virtbench build"
    monkeypatch.setattr(paths, "is_clone", lambda: True)
    assert doctor.kernels_check()["fix"].endswith("&& make -C native")


def test_version_names_the_install():
    from click.testing import CliRunner

    from virtbench.cli import cli

    res = CliRunner().invoke(cli, ["--version"])
    assert res.exit_code == 0 and res.output.startswith("virtbench 0.1.0 (git ")


def test_shipped_suite_found_from_anywhere(tmp_path, monkeypatch):
    from virtbench import suite

    monkeypatch.chdir(tmp_path)  # no suites/ here: the shipped one (clone or package) is used
    assert suite.load("suites/quick.toml").environments
    with pytest.raises(Exception, match="does not exist"):
        suite.load("elsewhere/quick.toml")


def test_missing_lapack_is_named(tmp_path, monkeypatch):
    """vb-eigen needs LAPACK's static library: a compiler that cannot find liblapack.a (it prints the bare
    name back) makes the build advice name liblapack-dev. The stand-in compiler answers only that question,
    because a machine without the package cannot be made here."""
    from virtbench import kernels

    assert kernels.LAPACK_PACKAGE not in kernels.missing_packages()  # this machine has it (setup.sh installs it)
    fake = tmp_path / "mpicc"
    fake.write_text('#!/bin/sh\ncase "$1" in -print-file-name=*) echo "${1#-print-file-name=}";; esac\n')
    fake.chmod(0o755)
    monkeypatch.setenv("MPICC", str(fake))
    assert kernels.missing_packages() == [kernels.LAPACK_PACKAGE]
