"""`virtbench doctor` names podman's orphan network namespaces (/run/netns/netns-<uuid> that no
container refers to and no process is in) with the command that removes them, and never deletes
them itself. Real namespaces made with podman's name pattern, and a real running container whose
namespace must not be named."""

import json
import os
import shutil
import subprocess
import time
import uuid

import pytest
from click.testing import CliRunner

from virtbench.cli import doctor
from virtbench import procs
from virtbench.cli import cli

pytestmark = pytest.mark.podman
if not (shutil.which("podman") and shutil.which("ip")):
    pytest.skip("podman or ip is not installed (apt-get install podman runc iproute2)", allow_module_level=True)
if os.geteuid() != 0:
    pytest.skip("network namespaces in /run/netns need root", allow_module_level=True)

PODMAN = ["podman", "--runtime", "runc", "--cgroup-manager", "cgroupfs"]


def _netns() -> str:
    name = f"netns-{uuid.uuid4()}"
    assert procs.run(["ip", "netns", "add", name], timeout=30).ok
    return name


def test_doctor_names_orphans_only(guest_image):
    orphan, busy = _netns(), _netns()
    holder = subprocess.Popen(["ip", "netns", "exec", busy, "sleep", "120"])  # a process in it: not orphan
    name = f"vb-doctor-netns-{uuid.uuid4().hex[:8]}"
    try:
        res = procs.run([*PODMAN, "run", "-d", "--name", name, "--ulimit", "nofile=1024:1024", "--ulimit",
                         "nproc=1024:1024", guest_image.tag, "sleep", "120"], timeout=120)
        assert res.ok, res.stderr
        key = procs.run(["podman", "inspect", "--format", "{{.NetworkSettings.SandboxKey}}", name], timeout=60)
        container_ns = os.path.basename(key.stdout.strip())
        assert doctor.PODMAN_NETNS.fullmatch(container_ns), key.stdout  # a real podman namespace
        for _ in range(50):  # ip netns exec has entered it
            if procs.run(["ip", "netns", "pids", busy], timeout=30).stdout.split():
                break
            assert holder.poll() is None
            time.sleep(0.1)
        found = doctor.orphan_podman_netns()
        assert orphan in found
        assert container_ns not in found and busy not in found

        out = CliRunner().invoke(cli, ["doctor", "--json"])
        assert out.exit_code == 0, out.output
        row = next(c for c in json.loads(out.output) if c["name"] == "podman network namespaces")
        assert not row["ok"] and orphan in row["detail"] and f"ip netns delete {orphan}" in row["fix"]
        assert container_ns not in row["detail"] + row["fix"] and busy not in row["detail"] + row["fix"]
        assert os.path.exists(f"/run/netns/{orphan}")  # named, never deleted
    finally:
        holder.kill()
        holder.wait()
        procs.run([*PODMAN, "rm", "-f", "-t", "0", name], timeout=120)
        for ns in (orphan, busy):
            procs.run(["ip", "netns", "delete", ns], timeout=30)
    assert orphan not in doctor.orphan_podman_netns()
