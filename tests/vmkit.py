"""What the tests that attach storage to one real VM share: the module-level skips (QEMU, the vm
driver, root) and booting that VM once per module."""

import os
import shutil
import uuid

import pytest

from virtbench.drivers.base import DriverContext
from virtbench.model import EnvSpec, Shape


def require_vm_storage():
    """Skip the calling module unless a VM can be booted and storage targets made here; the vm
    driver module otherwise. Call at module level."""
    if not shutil.which("qemu-system-x86_64"):
        pytest.skip("QEMU is not installed", allow_module_level=True)
    try:
        from virtbench.drivers.vm import driver as vmdrv
    except ImportError:
        pytest.skip("no vm driver in this tree", allow_module_level=True)
    if os.geteuid() != 0:
        pytest.skip("storage targets need root", allow_module_level=True)
    return vmdrv


def one_vm(guest_image, tmp_path_factory, memory_mb: int):
    """Generator for a module-scoped fixture: one VM (1 vCPU), torn down after the module."""
    from virtbench.drivers.vm import driver as vmdrv

    d = vmdrv.VmDriver(DriverContext(f"t{uuid.uuid4().hex[:8]}", tmp_path_factory.mktemp("vm"), guest_image))
    (inst,) = d.provision(EnvSpec("vm", "vm", Shape("t", vcpus=1, memory_mb=memory_mb), {"ready_timeout": 240.0}))
    yield inst
    inst.teardown()
