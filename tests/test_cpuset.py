"""The `cpuset` environment option (issue 14: optional CPU pinning of instances): the CPU-list parser,
its errors, and real pinning of a host instance (taskset) and of a podman container (--cpuset-cpus),
read back from /proc/self/status inside."""

import os
import shutil
import uuid

import pytest

from virtbench.drivers import cpuset
from virtbench import procs, suite
from virtbench.drivers.container import driver as container
from virtbench.drivers.host import driver as host
from virtbench.drivers.base import DriverContext
from virtbench.model import EnvSpec, Shape

CPUS = sorted(os.sched_getaffinity(0))


def test_parse_and_compact():
    assert cpuset.parse("0") == [0]
    assert cpuset.parse("0,2-3") == [0, 2, 3]
    assert cpuset.parse("3, 1-2") == [1, 2, 3]
    assert cpuset.compact([0, 1, 2, 5, 7, 8]) == "0-2,5,7-8"
    for bad, why in (("x", "'x' is not a CPU number"), ("3-1", "runs backwards"), ("0,,1", "'' is not")):
        with pytest.raises(ValueError, match=why):
            cpuset.parse(bad)


def test_problems_name_what_is_wrong():
    assert cpuset.problems("", "host") == []
    assert cpuset.problems(str(CPUS[0]), "host") == []
    (p,) = cpuset.problems(f"{CPUS[-1] + 1}", "container")
    assert f"names CPU(s) {CPUS[-1] + 1}" in p.what and cpuset.compact(CPUS) in p.fix
    (p,) = cpuset.problems("0-a", "host")
    assert "0-a" in p.what and "CPU list" in p.fix


def test_bad_cpuset_in_a_suite_stops_before_running(tmp_path):
    path = tmp_path / "s.toml"
    path.write_text(f'[suite]\nname = "c"\n[environments.host]\ndriver = "host"\ncpuset = "{CPUS[-1] + 4}"\n'
                    '[[workloads]]\nname = "system"\nparams = { test = "syscall", duration = 0.1 }\n')
    m = suite.load(str(path))
    problems = host.HostDriver(DriverContext("t", tmp_path)).check_env(m.environments[0])
    assert problems and "does not offer" in problems[0].what


def _allowed(inst) -> str:
    res = inst.exec(["grep", "Cpus_allowed_list", "/proc/self/status"], timeout=60)
    assert res.ok, res.stderr
    return res.stdout.split()[-1]


def test_host_instance_runs_on_its_cpuset(tmp_path):
    want = str(CPUS[-1])
    env = EnvSpec("h", "host", Shape("native", None, None, None), {"cpuset": want})
    (inst,) = host.HostDriver(DriverContext("t", tmp_path)).provision(env)
    try:
        assert _allowed(inst) == want
        assert inst.metadata()["cpuset"] == want
    finally:
        inst.teardown()
    (free,) = host.HostDriver(DriverContext("t", tmp_path)).provision(EnvSpec("h", "host", Shape("native", None, None, None)))
    try:
        assert _allowed(free) == cpuset.compact(CPUS) and "cpuset" not in free.metadata()
    finally:
        free.teardown()


@pytest.mark.podman
def test_container_runs_on_its_cpuset(guest_image, tmp_path):
    if not shutil.which("podman") or not procs.run(["podman", "info"], timeout=60).ok:
        pytest.skip("podman not working here (apt-get install podman runc)")
    want = str(CPUS[-1])
    d = container.ContainerDriver(DriverContext(f"t{uuid.uuid4().hex[:10]}", tmp_path, guest_image))
    env = EnvSpec("ctr", "container", Shape("t", vcpus=1, memory_mb=256), {"cpuset": want})
    assert d.check_env(env) == []
    (inst,) = d.provision(env)
    try:
        assert _allowed(inst) == want
        assert inst.metadata()["cpuset"] == want
    finally:
        inst.teardown()
