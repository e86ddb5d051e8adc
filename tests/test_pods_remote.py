"""kube-play pods on a remote machine (a testbed SSH host, podman through its executor) that a run
killed outright left there are swept by the next run's pool when it first uses that host."""

import shutil
import subprocess
import sys
import uuid

import pytest

from virtbench import procs
from virtbench.drivers.base import DriverContext
from virtbench.drivers.pods.kubeplay_driver import KubePlayDriver
from virtbench.machines import Pool, inventory
from virtbench.model import EnvSpec, Shape

pytestmark = [pytest.mark.slow, pytest.mark.podman]

if not shutil.which("podman") or not procs.run(["podman", "info"], timeout=60).ok:
    pytest.skip("no working podman (apt-get install podman runc)", allow_module_level=True)

HOST = "vbtsh1"  # testbed2's first host, in namespace vbts-1
OPTIONS = {"machine": HOST, "runtime": "runc", "cgroup_manager": "cgroupfs"}

_KILLED = """
import sys, pathlib, time
from virtbench import image
from virtbench.drivers.base import DriverContext
from virtbench.drivers.pods.kubeplay_driver import KubePlayDriver
from virtbench.machines import Pool, inventory
from virtbench.model import EnvSpec, Shape
run_id, workdir, inv, host = sys.argv[1:5]
pool = Pool(inventory.load(inv))
d = KubePlayDriver(DriverContext(run_id, pathlib.Path(workdir), image.require(), pool))
opts = {"machine": host, "runtime": "runc", "cgroup_manager": "cgroupfs", "pvc": "16Mi"}
d.provision(EnvSpec("rpods", "pods", Shape("native"), opts), 2, "main")
print("up", flush=True)
time.sleep(600)
"""


def _ours(machine, label: str, kind: str = "pod") -> list[str]:
    sub = ["volume", "ls"] if kind == "volume" else ["pod", "ps"]
    res = machine.run(["podman", *sub, "--filter", f"label={label}", "--format", "{{.Name}}"], timeout=60)
    assert res.ok, res.describe_failure()
    return res.stdout.split()


def test_a_killed_runs_remote_kube_play_pods_are_swept_by_the_next_run(testbed2, guest_image, tmp_path):
    run_id = f"k{uuid.uuid4().hex[:10]}"
    (tmp_path / "killed").mkdir()
    proc = subprocess.Popen([sys.executable, "-c", _KILLED, run_id, str(tmp_path / "killed"), str(testbed2), HOST],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        if proc.stdout.readline().strip() != "up":
            pytest.fail(f"the killed run started no pods: {proc.stderr.read()[-2000:]}")
    finally:
        proc.kill()  # SIGKILL: no teardown ran
        proc.wait()
    label = f"virtbench.run={run_id}"
    pool = Pool(inventory.load(testbed2))  # the next run
    try:
        m = pool.get(HOST)  # no driver enlisted yet: nothing swept, the leftovers are there
        assert len(_ours(m, label)) == 2 and len(_ours(m, label, "volume")) == 1
        d = KubePlayDriver(DriverContext(f"t{uuid.uuid4().hex[:10]}", tmp_path, guest_image, pool))
        (inst,) = d.provision(EnvSpec("rpods2", "pods", Shape("native"), OPTIONS), 1, "main")
        try:
            assert inst.machine.name == HOST and inst.exec(["true"]).ok
            mine = [r for r in d.stale_removed if f"(run {run_id}) on {HOST}" in r]
            assert len(mine) == 3, d.stale_removed  # two pods and the claim's volume, each named
            assert _ours(m, label) == [] and _ours(m, label, "volume") == []
        finally:
            inst.teardown()
    finally:
        pool.close()
