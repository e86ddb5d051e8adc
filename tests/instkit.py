"""Fixtures the driver and workload tests share: a container driver that removes whatever a failing
test left behind, and one bare-host instance with its scratch directory in the test's tmp_path.
conftest.py loads this module as a plugin, so a test asks for them by their fixture names, `driver`
and `host` (a module's own fixture of the same name still wins)."""

import uuid

import pytest

from virtbench import procs
from virtbench.drivers.base import DriverContext
from virtbench.model import EnvSpec, Shape


def ours(run_id):
    """The ids of the containers (running or not) labelled with this run."""
    res = procs.run(["podman", "ps", "-a", "-q", "--filter", f"label=virtbench.run={run_id}"], timeout=60)
    return res.stdout.split()


@pytest.fixture(name="driver")
def container_driver(guest_image, tmp_path):
    from virtbench.drivers.container import driver as container

    d = container.ContainerDriver(DriverContext(f"t{uuid.uuid4().hex[:10]}", tmp_path, guest_image))
    yield d
    for cid in ours(d.context.run_id):  # whatever a failing test left behind
        procs.run(["podman", "rm", "-f", "-t", "0", cid], timeout=60)


@pytest.fixture(name="host")
def host_instance(tmp_path):
    from virtbench.drivers.host.driver import HostDriver

    env = EnvSpec("host", "host", Shape("native"), {"scratch": str(tmp_path)})
    (inst,) = HostDriver(DriverContext("t", tmp_path)).provision(env)
    yield inst
    inst.teardown()
