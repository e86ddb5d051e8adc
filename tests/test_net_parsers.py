"""Network workload parsers on captured real outputs: iperf3 3.12 JSON and sockperf 3.7 ping-pong
text, with the shell's wall-clock and `times` trailer."""

import json
from pathlib import Path

import pytest

from virtbench.workloads import get
from virtbench.workloads.iperf import parse_iperf3
from virtbench.workloads.netrr import parse_netrr, parse_sockperf
from virtbench.workloads.netutil import parse_wrap

DATA = Path(__file__).parent / "data"


def test_iperf3_client_json():
    raw = (DATA / "iperf3" / "iperf3_client_tcp_t2.json").read_text()
    doc = json.loads(raw)
    got = {s.metric: s for s in parse_iperf3(raw)}
    assert got["throughput"].value == pytest.approx(doc["end"]["sum_received"]["bits_per_second"] / 1e6)
    assert got["throughput"].unit == "Mbit/s" and got["throughput"].higher_is_better
    assert got["retransmits"].value == 8 and not got["retransmits"].higher_is_better
    assert got["cpu_client"].value == pytest.approx(27.677414463689153)
    assert got["cpu_server"].value == pytest.approx(42.54347665359153)
    assert got["throughput"].metadata["iperf_version"] == "iperf 3.12"
    assert got["throughput"].metadata["streams"] == 1 and not got["throughput"].metadata["reverse"]


def test_iperf3_parallel_reverse():
    got = {s.metric: s for s in parse_iperf3((DATA / "iperf3" / "iperf3_client_p2_reverse.json").read_text())}
    assert got["throughput"].metadata["streams"] == 2 and got["throughput"].metadata["reverse"]
    assert got["throughput"].value > 0


def test_iperf3_errors():
    with pytest.raises(ValueError, match="Connection refused"):
        parse_iperf3((DATA / "iperf3" / "iperf3_client_refused.json").read_text())
    with pytest.raises(ValueError, match="no JSON"):
        parse_iperf3("iperf3: error - unable to connect to server")
    with pytest.raises(ValueError, match="sum_received"):
        parse_iperf3('{"start": {}, "end": {}}')


def test_sockperf_and_times():
    client = (DATA / "sockperf" / "sockperf_client_wrapper.out").read_text()
    server = (DATA / "sockperf" / "sockperf_server_wrapper.out").read_text()
    got = parse_sockperf(client)
    # [Valid Duration] RunTime=1.550 sec; SentMessages=45007; ReceivedMessages=45007
    assert got["tps"] == pytest.approx(45007 / 1.550)
    assert got["rtt_mean"] == 34.379 and got["rtt_p50"] == 22.141 and got["rtt_p99"] == 105.125
    assert got["rtt_p999"] == 3741.998 and got["rtt_max"] == 6219.595
    wall, cpu = parse_wrap(client)
    assert wall == pytest.approx(1795322761.077899960 - 1795322756.788094215)
    assert cpu == pytest.approx(0.76)  # children: 0m0.040000s user + 0m0.720000s system
    samples = {s.metric: s for s in parse_netrr(client, server)}
    assert samples["cpu_client"].value == pytest.approx(0.76 / wall * 100)
    assert samples["cpu_server"].value == pytest.approx(0.73 / wall * 100)  # over the client's run
    assert samples["tps"].higher_is_better and not samples["rtt_p99"].higher_is_better


def test_sockperf_failures():
    with pytest.raises(ValueError, match="no replies"):
        parse_sockperf("sockperf: Test ended\nsockperf: No messages were received from the server. Is the server down?")
    with pytest.raises(ValueError, match="Valid Duration"):
        parse_sockperf("sockperf: connect: Connection refused")
    with pytest.raises(ValueError, match="VBTIME"):
        parse_wrap("0m0.000000s 0m0.000000s\n0m0.1s 0m0.2s\n")
    # a server killed hard loses its trailer: the client's figures stand
    client = (DATA / "sockperf" / "sockperf_client_wrapper.out").read_text()
    assert "cpu_server" not in {s.metric for s in parse_netrr(client, "Killed")}
    raw = json.dumps({"client": client, "server": ""})
    assert {s.metric for s in get("netrr").parse(raw, {"msg_size": 64, "duration": 2.0})} >= {"tps", "rtt_p50"}
