"""The SSH executor against real sshd hosts of the local testbed (fixture `testbed2`)."""

import os
import signal
import subprocess
import threading
from pathlib import Path

import pytest

from virtbench.errors import UserError
from virtbench.machines import Pool, inventory, ship, testbed
from virtbench.machines.base import MachineUnreachable
from virtbench.machines.inventory import HostSpec
from virtbench.machines.ssh import SshMachine
from vbnetns import commands as ns_commands
from waitkit import until

pytestmark = pytest.mark.slow


@pytest.fixture()
def pool(testbed2):
    p = Pool(inventory.load(testbed2))
    yield p
    p.close()


def test_argument_lists_env_cwd_stdin_and_exit_codes(pool):
    m = pool.get("vbtsh1")
    res = m.run(["printf", "%s|", "a b", "it's", "$HOME", "*", ";true"])
    assert res.ok and res.stdout == "a b|it's|$HOME|*|;true|"  # quoted once, never re-split
    res = m.run(["sh", "-c", 'echo "$FOO"; pwd'], env={"FOO": "x y'z"}, cwd="/tmp")
    assert res.stdout.splitlines() == ["x y'z", "/tmp"]
    assert m.run(["cat"], stdin=b"bytes\x00in").stdout == "bytes\x00in"
    res = m.run(["sh", "-c", "echo oops >&2; exit 3"])
    assert res.returncode == 3 and res.stderr.strip() == "oops"  # our pgid line is not in stderr
    assert m.run(["no-such-command-here"]).returncode == 127


def test_runs_in_the_hosts_own_namespace(pool):
    a, b = pool.get("vbtsh1"), pool.get("vbtsh2")
    assert "10.216.0.11" in a.run(["ip", "-o", "-4", "addr"]).stdout
    assert "10.216.0.12" in b.run(["ip", "-o", "-4", "addr"]).stdout
    f = a.facts()
    assert f["cores"] == os.cpu_count() and f["kernel"] == os.uname().release and f["arch"] == os.uname().machine


def test_timeout_kills_the_whole_remote_process_group(pool):
    m = pool.get("vbtsh1")
    res = m.run(["sh", "-c", "sleep 71 & sleep 72; echo never"], timeout=1)
    assert res.timed_out and "never" not in res.stdout
    assert 1 <= res.seconds < 10
    # the killed sleeps would live 71-72 s: waiting a few seconds for them to go still finds a survivor
    assert until(lambda: not [c for c in ns_commands("vbts-1") if c.startswith("sleep 7")]), ns_commands("vbts-1")


def test_ctrl_c_kills_the_remote_command(pool):
    m = pool.get("vbtsh1")
    timer = threading.Timer(0.8, lambda: os.kill(os.getpid(), signal.SIGINT))
    timer.start()
    with pytest.raises(KeyboardInterrupt):
        m.run(["sh", "-c", "sleep 73 & sleep 74"], timeout=60)
    assert until(lambda: not [c for c in ns_commands("vbts-1") if c.startswith("sleep 7")]), ns_commands("vbts-1")


def test_one_connection_for_many_commands(pool):
    m = pool.get("vbtsh2")
    for _ in range(10):
        assert m.run(["true"]).ok
    ss = subprocess.run(["ip", "netns", "exec", "vbts-2", "ss", "-Htn", "state", "established", "sport", "= :22"],
                        capture_output=True, text=True).stdout
    assert len(ss.splitlines()) == 1, ss


def test_put_get_and_spawn(pool, tmp_path):
    m = pool.get("vbtsh1")
    data = os.urandom(300_000)
    (tmp_path / "a").write_bytes(data)
    m.put(tmp_path / "a", "/tmp/vb-put-test", mode=0o640)
    assert m.run(["stat", "-c", "%a %s", "/tmp/vb-put-test"]).stdout.split() == ["640", "300000"]
    m.get("/tmp/vb-put-test", tmp_path / "b")
    assert (tmp_path / "b").read_bytes() == data
    assert not Path("/tmp/vb-put-test").exists()  # the host's own /tmp, not this machine's
    proc = m.spawn(["sh", "-c", "echo started; sleep 75"], "/tmp/vb-spawn.log")
    assert until(lambda: m.run(["cat", "/tmp/vb-spawn.log"]).stdout == "started\n")  # once the shell has run
    assert proc.alive()
    proc.stop()
    assert not proc.alive()
    assert not [c for c in ns_commands("vbts-1") if "sleep 75" in c]


def test_host_keys_are_checked(testbed2, tmp_path):
    spec = inventory.load(testbed2).hosts["vbtsh1"]
    other = inventory.load(testbed2).hosts["vbtsh2"].host_key  # a real key, but another host's
    bad = SshMachine(HostSpec(**{**spec.__dict__, "host_key": other}))
    res = bad.run(["true"])
    assert res.returncode == 255 and "host key" in res.stderr.lower()
    with pytest.raises(MachineUnreachable):
        bad.connect()
    bad.close()
    fp = subprocess.run(["ssh-keygen", "-lf", "-"], input=f"{spec.host_key}\n", capture_output=True,
                        text=True).stdout.split()[1]
    assert fp.startswith("SHA256:")
    good = SshMachine(HostSpec(**{**spec.__dict__, "host_key": fp}))
    assert good.run(["true"]).ok
    good.close()
    known = tmp_path / "known_hosts"
    known.write_text(f"10.216.0.11 {spec.host_key}\n")
    via_file = SshMachine(HostSpec(**{**spec.__dict__, "host_key": None, "known_hosts": str(known)}))
    assert via_file.run(["true"]).ok
    via_file.close()


def test_unreachable_host_says_which_and_why(tmp_path):
    m = SshMachine(HostSpec("ghost", "127.0.0.1", 1, host_key="ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIH+/bpU198Ds"))
    res = m.run(["true"])
    assert res.returncode == 255 and "ghost" in res.stderr and "refused" in res.stderr.lower()
    m.close()


def test_native_kernels_shipped_once_and_verified(pool):
    m = pool.get("vbtsh2")
    ship.reset_cache()
    base = f"{ship.remote_dir(m)}/native"
    m.run(["rm", "-rf", base])
    first = ship.ensure_native(m)
    assert first.how == "shipped" and first.bin_dir.startswith("/var/lib/virtbench-host/")
    manifest = ship.native_manifest()
    sums = m.run(["sh", "-c", 'cd "$1" && sha256sum vb-*', "sh", first.bin_dir]).stdout
    assert {line.split()[1]: line.split()[0] for line in sums.splitlines()} == manifest
    ship.reset_cache()
    assert ship.ensure_native(m).how == "cached"
    assert m.run([f"{first.bin_dir}/vb-system", "list"]).ok


def test_remote_disk_full_while_shipping_leaves_no_half_copy(tmp_path):
    prefix = "vbtd"
    testbed.down(prefix)
    inv = testbed.up(1, tmp_path / "inv.yml", prefix=prefix, subnet="10.219.0.0/24", disk_size="96k")
    pool = Pool(inventory.load(inv))
    try:
        m = pool.get("vbtdh1")
        ship.reset_cache()
        with pytest.raises(UserError) as err:
            ship.ensure_native(m)
        assert "vbtdh1" in str(err.value) and "full" in str(err.value).lower()
        left = m.run(["sh", "-c", "find /var/lib/virtbench-host -mindepth 2 | head"]).stdout.split()
        assert left == [], left  # no tar, no partial directory, nothing a later run would trust
    finally:
        pool.close()
        testbed.down(prefix)
    assert testbed.leftovers(prefix) == []


def test_kernels_built_there_when_the_shipped_ones_cannot_run(pool):
    """Another architecture or C library cannot be had here, so the fallback itself is exercised:
    the same sources shipped and built on the host, the compiler recorded."""
    m = pool.get("vbtsh2")
    m.run(["rm", "-rf", f"{ship.remote_dir(m)}/native-src"])
    built = ship.build_there(m, "test: shipped binaries taken as unrunnable")
    assert built.how == "built" and built.compiler.startswith(("cc", "gcc"))
    assert built.bin_dir.startswith(f"{ship.remote_dir(m)}/native-src/src-")
    res = m.run([f"{built.bin_dir}/vb-system", "dhrystone", "--duration", "0.2"], timeout=60)
    assert res.ok and "dhrystone" in res.stdout
