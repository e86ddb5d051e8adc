"""`virtbench check`: lifecycle checks against real containers, and the pass/fail logic."""

import json
import shutil
import time

import pytest
from click.testing import CliRunner

from virtbench.run import checks
from virtbench import procs
from virtbench.cli import cli
from virtbench.drivers.base import Instance
from virtbench.drivers.checks_base import LifecycleOps, identity
from virtbench.model import EnvSpec, ExecResult, Shape


class Box(Instance):
    """An instance whose boot identity is whatever the test says."""

    def __init__(self, name, ident):
        super().__init__(name, EnvSpec("x", "x", Shape("n")))
        self.ident = ident

    def exec(self, argv, timeout=None, stdin=None, env=None):
        return ExecResult(list(argv), 0, self.ident.replace(":", "\n") + "\n", "", time.time(), time.time())

    def bin(self, name): return name
    def scratch_dir(self): return "/tmp"
    def _destroy(self): ...


class OnlyFirst(LifecycleOps):
    """The Eucalyptus 2.0 bug: reboot-instances with several ids rebooted only the first."""

    def reboot(self, instances):
        instances[0].ident = "new-boot:1"
        return [{"instance": i.name, "ok": True} for i in instances]


def test_reboot_check_catches_only_first_rebooted():
    boxes = [Box(f"i{k}", f"boot-{k}:100") for k in range(3)]
    result = checks.check_reboot(OnlyFirst(None, None), boxes, lambda m: None)
    assert result.passed is False
    assert "1 of 3 rebooted" in result.detail and "NOT rebooted: i1, i2" in result.detail


def test_identity_joins_boot_id_and_pid1_start():
    assert identity(Box("a", "abc:42")) == "abc:42"


@pytest.mark.podman
def test_container_checks_cli(guest_image):
    if not shutil.which("podman") or not procs.run(["podman", "info"], timeout=60).ok:
        pytest.skip("podman is not working here")
    res = CliRunner().invoke(cli, ["check", "--driver", "container", "--count", "2", "--json"])
    data = json.loads(res.output[res.output.index("{"):])
    by = {c["name"]: c for c in data["checks"]}
    assert list(by) == ["start_many", "reboot_many", "attach_disk", "snapshot_boot"]
    for c in data["checks"]:
        assert {"name", "passed", "detail"} <= set(c)
    assert by["start_many"]["passed"] is True and "2 of 2" in by["start_many"]["detail"]
    assert by["reboot_many"]["passed"] is True and "2 of 2 rebooted" in by["reboot_many"]["detail"]
    assert by["attach_disk"]["passed"] is None and by["attach_disk"]["skipped"]
    assert by["snapshot_boot"]["passed"] is True, by["snapshot_boot"]
    assert data["passed"] is True and res.exit_code == 0
