"""The accelerator probe's cache (drivers/vm/accel_probe.py) keeps only what holds for the machine's whole boot,
with real QEMU boots of the image's kernel: an attempt whose QEMU another process killed leaves the
result uncached (the cache is shared by every checkout of the user: one checkout's kill must not
decide for the others), and no detail names the pid of the process that signalled QEMU."""

import os
import shutil
import signal
import time
from pathlib import Path

import pytest
from waitkit import Watcher

from virtbench.machines import local
from virtbench.drivers.vm import disk, accel_probe as probe

pytestmark = pytest.mark.skipif(not shutil.which("qemu-system-x86_64"), reason="QEMU is not installed")


@pytest.fixture(scope="module")
def boot(guest_image):
    return disk.ensure_boot(guest_image)


def _ancestors(pid: int) -> set[int]:
    out = set()
    while pid > 1:
        try:
            pid = int(Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[1])
        except (OSError, ValueError, IndexError):
            break
        out.add(pid)
    return out


class _Killer(Watcher):
    """Kills (SIGTERM) the first probe QEMU of this process that has run for `after` seconds, as
    another process ending it would."""

    interval = 0.02

    def __init__(self, after: float = 0.3):
        super().__init__()
        self.after, self.killed = after, None
        self._seen: dict[int, float] = {}

    def tick(self) -> bool:
        for d in os.listdir("/proc"):
            if not d.isdigit():
                continue
            try:
                cmd = Path(f"/proc/{d}/cmdline").read_bytes()
            except OSError:
                continue
            if b"root=/dev/virtbench-probe-none" not in cmd or os.getpid() not in _ancestors(int(d)):
                continue
            first = self._seen.setdefault(int(d), time.monotonic())
            if time.monotonic() - first >= self.after:
                os.kill(int(d), signal.SIGTERM)
                self.killed = int(d)
                return True
        return False


def test_a_timed_out_attempt_names_no_pid(boot):
    ok, detail, seconds = probe.try_boot(local(), "tcg", None, str(boot.kernel), timeout=1)
    assert not ok and detail.startswith("guest kernel did not finish booting within 1 s"), detail
    assert "terminating on signal" in detail and "from pid" not in detail  # QEMU said who; we drop it
    assert not detail.startswith(probe.PASSING)


def test_an_attempt_killed_by_another_process_is_not_cached(boot, tmp_path, monkeypatch):
    cache = tmp_path / "accel.json"
    # Two TCG attempts: the first is killed from outside, the second boots.
    monkeypatch.setattr(probe, "CANDIDATES", (("tcg", None), ("tcg", None)))
    with _Killer() as killer:
        got = probe.detect(local(), str(boot.kernel), boot.kernel_version, cache)
    assert killer.killed is not None
    first, second = got["tried"]
    assert not first["ok"] and first["detail"].startswith(
        f"{probe.PASSING}QEMU was killed by signal 15 from another process"), first
    assert second["ok"] and got["accel"] == "tcg"
    assert not cache.exists()  # a passing failure: the next process probes again

    # Without a passing failure the answer is kept for the machine's boot, and read back.
    monkeypatch.setattr(probe, "CANDIDATES", (("tcg", None),))
    again = probe.detect(local(), str(boot.kernel), boot.kernel_version, cache)
    assert again["accel"] == "tcg" and cache.exists()
    monkeypatch.setattr(probe, "try_boot", lambda *a, **k: pytest.fail("the cached answer was not used"))
    assert probe.detect(local(), str(boot.kernel), boot.kernel_version, cache)["accel"] == "tcg"


def test_a_cached_detail_from_an_older_version_shows_no_pid():
    data = {"accel": "tcg", "tried": [
        {"accel": "kvm", "cpu": None, "ok": False, "detail": "guest kernel did not finish booting within 20 s "
         "(qemu-system-x86_64: terminating on signal 15 from pid 20035 (/work/wt/other/.venv/bin/python3))"},
        {"accel": "tcg", "cpu": None, "ok": True, "detail": "kernel reached user-space hand-off in 4.51 s"}]}
    why = probe.answer_for(data, "auto")["kvm_problem"]
    assert why.endswith("terminating on signal 15)") and "20035" not in why and "/work/wt/other" not in why
