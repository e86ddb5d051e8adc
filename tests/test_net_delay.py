"""The user-space delay proxy (vb-delayproxy) and the delay_ms / rate_mbit conditions, for real on the
host's loopback: accuracy of the delay, the rate cap, EOF, unreachable targets, clean-up."""

import os
import shutil
import socket
import subprocess
import threading
import time

import pytest

from virtbench import conditions, kernels, paths
from virtbench.conditions import ConditionUnavailable, hostnet
from virtbench.drivers.base import DriverContext
from virtbench.drivers.host.driver import HostDriver
from virtbench.machines import local
from virtbench.model import EnvSpec, Shape
from delaykit import ABOVE_MS, assert_condition_delay, assert_delay
from vbleftovers import assert_clean

PROXY = kernels.native_bin_dir() / "vb-delayproxy"
if not PROXY.exists():
    subprocess.run(["make", "-s", "-C", str(paths.PROJECT_ROOT / "native" / "delayproxy")], check=False)
pytestmark = pytest.mark.skipif(not PROXY.exists(), reason="vb-delayproxy is not built (make -C native)")


@pytest.fixture
def clean():
    yield
    assert_clean()


@pytest.fixture
def echo():
    e = hostnet.Echo(local(), "127.0.0.1")
    yield e.address
    e.stop()


def _proxy(target, delay=0.0, rate=0.0):
    return hostnet.Proxy(local(), "127.0.0.1", target, delay, rate)


@pytest.mark.parametrize("delay", [0, 5, 20])
def test_added_delay_is_never_early_and_close(clean, echo, delay):
    direct = hostnet.ping(local(), echo, count=20)
    p = _proxy(echo, delay)
    try:
        via = hostnet.ping(local(), p.address, count=20)
    finally:
        stats = p.stop()
    added = (via["p50"] - direct["p50"]) / 2 / 1000
    assert_delay(added, delay, direct["p50"] / 1000)
    assert via["min"] / 1000 >= 2 * delay  # never early
    assert stats["connections"] == 1 and stats["bytes_up"] == stats["bytes_down"] == 25 * 64


def test_rate_cap_and_eof(clean):
    """40 Mbit/s: 2.5 MB takes ~0.5 s; the server sees EOF only after the data, then answers."""
    got = {}
    srv = socket.create_server(("127.0.0.1", 0))

    def serve():
        conn, _ = srv.accept()
        n = 0
        while chunk := conn.recv(65536):
            n += len(chunk)
        got["bytes"] = n
        conn.sendall(b"done")
        conn.close()
    t = threading.Thread(target=serve, daemon=True)
    t.start()
    p = _proxy(srv.getsockname(), delay=2, rate=40)
    try:
        with socket.create_connection(p.address) as c:
            t0 = time.monotonic()
            c.sendall(b"x" * 2_500_000)
            c.shutdown(socket.SHUT_WR)
            assert c.recv(16) == b"done"
            took = time.monotonic() - t0
    finally:
        p.stop()
        srv.close()
    t.join(5)
    assert got["bytes"] == 2_500_000
    assert 0.45 < took < 0.8, took  # 2.5e6 * 8 / 40e6 = 0.5 s, plus 2 x 2 ms


def test_unreachable_target_closes_the_client(clean):
    port = hostnet.free_port()  # nobody listens there
    p = _proxy(("127.0.0.1", port))
    try:
        with socket.create_connection(p.address, timeout=5) as c:
            c.sendall(b"hello")
            try:
                assert c.recv(16) == b""
            except ConnectionResetError:
                pass
    finally:
        p.stop()


def test_bad_arguments():
    res = subprocess.run([str(PROXY), "relay", "--listen", "127.0.0.1:0"], capture_output=True, text=True)
    assert res.returncode == 2 and "--target" in res.stderr
    res = subprocess.run([str(PROXY), "relay", "--listen", "127.0.0.1:0", "--target", "nohost",
                          "--delay-ms", "5"], capture_output=True, text=True)
    assert res.returncode == 2 and "HOST:PORT" in res.stderr
    res = subprocess.run([str(PROXY), "relay", "--listen", "127.0.0.1:0", "--target", "127.0.0.1:1",
                          "--delay-ms", "-1"], capture_output=True, text=True)
    assert res.returncode == 2 and "--delay-ms" in res.stderr


# -- the conditions -------------------------------------------------------------------------------------

@pytest.fixture
def pair(tmp_path):
    env = EnvSpec("host", "host", Shape("native"), {"scratch": str(tmp_path)})
    d = HostDriver(DriverContext("t", tmp_path))
    insts = {"server": d.provision(env, 1, "server"), "client": d.provision(env, 1, "client")}
    yield insts
    for pool in insts.values():
        for i in pool:
            i.teardown()


def test_delay_condition_measures_and_routes(clean, pair, echo):
    applied = conditions.apply_all({"delay_ms": 10}, pair)
    try:
        meta = applied.metadata
        assert meta["delay_mechanism"] == "proxy"  # loopback: no link to put netem on
        assert_condition_delay(meta, 10)
        host, port = applied.route(*echo)
        assert (host, port) != echo and applied.route(*echo) == (host, port)  # one proxy per destination
        rtt = hostnet.ping(local(), (host, port), count=5)
        assert 20_000 <= rtt["min"] and rtt["p50"] < 2_000 * (10 + ABOVE_MS)  # through the proxy, both ways
    finally:
        assert applied.close() == []


def test_zero_delay_is_no_proxy(clean, pair, echo):
    applied = conditions.apply_all({"delay_ms": 0, "rate_mbit": 0}, pair)
    assert applied.metadata == {"delay_mechanism": "none", "rate_mechanism": "none"}
    assert applied.route(*echo) == echo
    applied.close()


def test_delay_needs_a_network_path(clean, tmp_path):
    env = EnvSpec("host", "host", Shape("native"), {"scratch": str(tmp_path)})
    (inst,) = HostDriver(DriverContext("t", tmp_path)).provision(env)
    try:
        with pytest.raises(ConditionUnavailable, match="needs a network path"):
            conditions.apply_all({"delay_ms": 20, "storage": "local"}, {"main": [inst]})
    finally:
        inst.teardown()


def test_coerce():
    d = conditions.get("delay_ms")
    assert d.coerce("20") == 20 and d.coerce(2.5) == 2.5 and d.is_noop(0)
    for bad in ("-1", "abc", True, 1e9):
        with pytest.raises(ValueError):
            d.coerce(bad)


@pytest.mark.skipif(not (shutil.which("iperf3") and shutil.which("sockperf")), reason="iperf3/sockperf missing")
def test_network_workloads_under_delay(clean, pair):
    from virtbench.workloads import RunContext, get
    iperf, netrr = get("iperf"), get("netrr")
    pi = {"duration": 1.0, "parallel": 1, "reverse": False, "window": ""}
    pn = {"msg_size": 64, "duration": 1.0}
    fast = {s.metric: s.value for s in iperf.parse(iperf.execute(pair, pi, RunContext(timeout=60)), pi)}
    applied = conditions.apply_all({"delay_ms": 5}, pair)
    try:
        ctx = RunContext(timeout=60, applied=applied)
        slow = {s.metric: s.value for s in iperf.parse(iperf.execute(pair, pi, ctx), pi)}
        rr = {s.metric: s.value for s in netrr.parse(netrr.execute(pair, pn, ctx), pn)}
    finally:
        applied.close()
    assert slow["throughput"] < fast["throughput"]
    assert rr["rtt_p50"] > 10_000 and rr["tps"] < 110 and rr["cpu_client"] >= 0
    assert os.path.exists(pair["server"][0].scratch_dir())
