"""`virtbench boot`: the grid, failures as data, the JSON contract, storage, and real container/VM grids."""

import json
import shutil
import threading
import time

import pytest
from click.testing import CliRunner

from virtbench.run import boot, boot_results
from virtbench import drivers, paths, procs
from virtbench.cli import cli
from virtbench.drivers.base import Driver, Instance
from virtbench.drivers.vm import site
from virtbench.errors import UserError
from virtbench.machines import local
from virtbench.model import ExecResult
from virtbench.store import Store


class FakeInstance(Instance):
    def exec(self, argv, timeout=None, stdin=None, env=None):
        return ExecResult(list(argv), 0, "", "", time.time(), time.time())

    def bin(self, name): return name
    def scratch_dir(self): return "/tmp"
    def metadata(self): return {**super().metadata(), "accelerator": "fake"}
    def _destroy(self): time.sleep(0.002)


class FakeDriver(Driver):
    """Starts in a few ms; every third start fails, as 1-3 of 8 Eucalyptus starts did."""

    name = "fake"
    calls = 0
    lock = threading.Lock()

    def check(self, env=None):
        return []

    def provision(self, env, count=1, role="main"):
        with FakeDriver.lock:
            FakeDriver.calls += 1
            n = FakeDriver.calls
        inst = FakeInstance(f"fake-{n}", env, role, 0)
        inst.mark("requested")
        for phase in ("created", "running", "init"):
            time.sleep(0.003)
            inst.mark(phase)
        if n % 3 == 0:
            raise UserError(f"fake start {n} failed: no capacity")
        time.sleep(0.003)
        inst.mark("ready")
        return [inst]


@pytest.fixture
def fake(monkeypatch):
    monkeypatch.setitem(drivers.REGISTRY, "fake", "test_boot:FakeDriver")
    FakeDriver.calls = 0


def test_grid_from_args_and_validation(fake):
    g = boot.grid_from_args("fake", "1,4,8", None, None, None, 2, {})
    assert [c["params"]["concurrency"] for c in g.cells()] == [1, 4, 8]
    assert len({c["key"] for c in g.cells()}) == 3
    g = boot.grid_from_args("vm", "1", "auto,2G", "copy,overlay", "m1.small,m1.large", 1, {})
    assert len(g.cells()) == 8
    for bad in (dict(concurrency="0"), dict(concurrency="x"), dict(image_mode="teleport"), dict(image_size="2X"),
                dict(shape="huge")):
        args = {"concurrency": "1", "image_size": None, "image_mode": None, "shape": None, **bad}
        with pytest.raises(UserError):
            boot.grid_from_args("vm", args["concurrency"], args["image_size"], args["image_mode"], args["shape"], 1, {})
    with pytest.raises(UserError, match="no option"):
        boot.grid_from_args("vm", "1", None, None, None, 1, {"colour": "red"})
    with pytest.raises(UserError, match="unknown driver"):
        boot.grid_from_args("xen", "1", None, None, None, 1, {})


def test_nii_suite_file():
    g = boot.load_suite(paths.suites_dir() / "nii-boot.toml")
    assert g.driver == "vm" and g.concurrency == [1, 4, 8] and g.image_modes == ["copy", "overlay"]
    assert len(g.image_sizes) == 4 and len(g.cells()) == 24
    assert g.published["tables"]["1.6.2"]["20"] == [990, "fail", "fail"]
    assert all("published" in g.size_notes[s] for s in g.image_sizes)


def test_summarize_percentiles():
    s = boot_results.summarize([1.0, 2.0, 3.0, 4.0, 10.0])
    assert s["min"] == 1 and s["median"] == 3 and s["max"] == 10 and s["mean"] == 4 and s["n"] == 5
    assert 4 < s["p90"] < s["p95"] < 10
    assert boot_results.summarize([])["median"] is None
    rel = boot_results.relative({"requested": 10.0, "created": 10.25, "ready": 11.5, "teardown_start": 12, "teardown_end": 12.5})
    assert rel == {"created": 0.25, "ready": 1.5, "teardown": 0.5}


def test_failures_are_data_and_json_contract(fake, tmp_path):
    store = Store(tmp_path / "b.sqlite")
    grid = boot.grid_from_args("fake", "1,4", None, None, None, 3, {})
    run_id = boot.BootRunner(store, grid).run()
    data = boot_results.results(store, run_id)
    assert set(data) >= {"run_id", "cells", "driver"} and data["run_id"] == run_id
    assert len(data["cells"]) == 2
    total_ok = total_failed = 0
    for cell in data["cells"]:
        assert {"driver", "concurrency", "image_size", "image_mode", "phases", "succeeded", "failed",
                "failures"} <= set(cell)
        assert cell["succeeded"] + cell["failed"] == 3 * cell["concurrency"]
        for phase in ("created", "running", "init", "ready", "teardown"):
            assert set(cell["phases"][phase]) >= {"min", "median", "p90", "p95", "max", "mean"}
        ph = cell["phases"]
        assert ph["created"]["median"] < ph["running"]["median"] < ph["init"]["median"] < ph["ready"]["median"]
        assert all("no capacity" in f for f in cell["failures"])
        assert len(cell["instances"]) == 3 * cell["concurrency"]
        for i in cell["instances"]:
            assert "requested" in i["timestamps"]
        total_ok += cell["succeeded"]
        total_failed += cell["failed"]
    assert total_failed == 15 // 3 and total_ok == 10
    # Stored like any run: listed, exported, shown through the CLI.
    assert store.runs()[0]["id"] == run_id and store.runs()[0]["failures"] == total_failed
    res = CliRunner().invoke(cli, ["show", run_id, "--db", str(tmp_path / "b.sqlite"), "--json"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.output)["cells"][0]["phases"]["ready"]["n"] >= 1
    res = CliRunner().invoke(cli, ["show", run_id, "--db", str(tmp_path / "b.sqlite")])
    assert res.exit_code == 0 and "ready" in res.output and "no capacity" in res.output


def _podman_ok():
    return shutil.which("podman") and procs.run(["podman", "info"], timeout=60).ok


@pytest.mark.podman
def test_container_grid(guest_image, tmp_path):
    if not _podman_ok():
        pytest.skip("podman is not working here")
    res = CliRunner().invoke(cli, ["boot", "--driver", "container", "--concurrency", "2", "--image-mode",
                                   "overlay,copy", "--repeat", "1", "--db", str(tmp_path / "b.sqlite"), "--json"])
    assert res.exit_code == 0, res.output
    data = json.loads(res.output[res.output.index("{"):])
    assert data["driver"] == "container" and "accelerator" not in data
    by = {(c["concurrency"], c["image_mode"]): c for c in data["cells"]}
    assert by[(2, "overlay")]["succeeded"] == 2 and by[(2, "overlay")]["failed"] == 0
    assert "copy-on-write" in by[(2, "copy")]["skipped"]
    ready = by[(2, "overlay")]["phases"]["ready"]
    assert 0 < ready["min"] <= ready["median"] <= ready["max"] < 60
    assert procs.run(["podman", "ps", "-a", "-q", "--filter", f"label=virtbench.run={data['run_id']}"],
                     timeout=60).stdout.strip() == ""


@pytest.mark.slow
def test_vm_copy_grows_overlay_does_not(guest_image, tmp_path):
    if not shutil.which("qemu-system-x86_64"):
        pytest.skip("QEMU is not installed")
    store = Store(tmp_path / "b.sqlite")
    grid = boot.grid_from_args("vm", "1", "auto", "copy,overlay", None, 1, {"ready_timeout": "300"})
    run_id = boot.BootRunner(store, grid).run()
    data = boot_results.results(store, run_id)
    assert data["accelerator"] == site.accelerator_of(local())["accel"]  # what a real probe boot found here
    if data["accelerator"] == "tcg":
        assert "not hardware virtualization" in data["accelerator_note"]
    by = {c["image_mode"]: c for c in data["cells"]}
    assert by["copy"]["succeeded"] == 1 and by["overlay"]["succeeded"] == 1, data
    # `created` includes making the instance disk: a full copy of ~1.3 GB against a qcow2 header.
    assert by["copy"]["phases"]["created"]["median"] > by["overlay"]["phases"]["created"]["median"]
    meta = store.samples(run_id)[0]["metadata_json"]
    assert '"accelerator"' in meta and '"timestamps"' in meta


def test_sigterm_tears_a_boot_run_down_as_ctrl_c_does(guest_image, tmp_path):
    """`kill` (a cancelled CI job) during `virtbench boot`: exit 130, the run stored as interrupted,
    no container and no work directory of it left."""
    import signal
    import subprocess
    import sys
    import tempfile
    from pathlib import Path

    from waitkit import until

    if not _podman_ok():
        pytest.skip("podman is not working here")
    db = tmp_path / "b.sqlite"
    proc = subprocess.Popen([sys.executable, "-m", "virtbench.cli", "boot", "--driver", "container",
                             "--concurrency", "2", "--repeat", "50", "--db", str(db)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def run_with_samples() -> str | None:
        try:
            runs = Store(db).runs() if db.exists() else []
            return runs[0]["id"] if runs and Store(db).samples(runs[0]["id"]) else None
        except Exception:  # noqa: BLE001 - the database may be mid-creation
            return None

    try:
        run_id = until(run_with_samples, timeout=180, step=0.2)
        assert run_id, "no boot round finished within 180 s"
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err
    assert Store(db).run(run_id)["status"] == "interrupted"
    left = procs.run(["podman", "ps", "-a", "--format", "{{.Names}} {{.Status}}", "--filter",
                      f"label=virtbench.run={run_id}"], timeout=60)
    assert left.stdout.strip() == "", err[-2000:]
    assert not list(Path(tempfile.gettempdir()).glob(f"virtbench-{run_id}-*"))
