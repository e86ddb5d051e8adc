"""Request/response: small TCP messages ping-ponged between two instances with sockperf (one request in
flight, as netperf's TCP_RR): transactions per second, round-trip percentiles, and the CPU of both
ends (from the shell's `times` around each end)."""

from __future__ import annotations

import json
import re
from typing import Any

from ..drivers.base import Instance
from ..errors import WorkloadFailed
from ..model import Sample
from .base import MetricSpec, Param, RunContext
from .netutil import WRAP, PeerWorkload, bind_address, parse_wrap, server_port

PORT = 11111
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
PCTS = {"rtt_p50": "50.000", "rtt_p90": "90.000", "rtt_p99": "99.000", "rtt_p999": "99.900"}


class NetRR(PeerWorkload):
    name = "netrr"
    description = "TCP request/response (sockperf ping-pong): transactions/s, round-trip percentiles, CPU of both ends"
    params = (
        Param("msg_size", int, 64, "bytes per request and per response", min=14, max=65000),
        Param("duration", float, 10.0, "seconds of ping-pong (sockperf adds a 0.4 s warm-up)", min=1, max=3600),
    )
    metrics = (
        MetricSpec("tps", "1/s", True, "request/response transactions per second"),
        MetricSpec("rtt_mean", "us", False, "mean round trip"),
        MetricSpec("rtt_p50", "us", False, "median round trip"),
        MetricSpec("rtt_p90", "us", False, "90th percentile round trip"),
        MetricSpec("rtt_p99", "us", False, "99th percentile round trip"),
        MetricSpec("rtt_p999", "us", False, "99.9th percentile round trip"),
        MetricSpec("rtt_max", "us", False, "worst round trip"),
        MetricSpec("cpu_client", "%", False, "CPU of the client process over its run"),
        MetricSpec("cpu_server", "%", False, "CPU of the server process over the client's run"),
    )

    def execute(self, instances: dict[str, list[Instance]], params: dict[str, Any], ctx: RunContext) -> str:
        server, client = instances["server"][0], instances["client"][0]
        port = server_port(server, PORT)
        srv, host, dport = self.serve(
            ctx, server, client, ["sockperf", "server", "--tcp", "-i", bind_address(server), "-p", str(port)], port)
        try:
            argv = ["sockperf", "ping-pong", "--tcp", "-i", host, "-p", str(dport), "-m", str(params["msg_size"]),
                    "-t", f"{params['duration']:g}", "--full-rtt"]
            res = client.exec(["sh", "-c", WRAP, "sh", f"{client.scratch_dir()}/vb-client.pid", *argv],
                              timeout=params["duration"] + 60)
        finally:
            server_out = srv.stop()
        if not res.ok:
            raise WorkloadFailed(f"sockperf client: {res.describe_failure()}", res.stdout[-4000:] + res.stderr[-4000:])
        return json.dumps({"client": res.stdout + res.stderr, "server": server_out})

    def parse(self, raw: str, params: dict[str, Any]) -> list[Sample]:
        doc = json.loads(raw)
        return parse_netrr(doc["client"], doc["server"])


def parse_sockperf(text: str) -> dict[str, float]:
    """sockperf ping-pong --full-rtt output -> {tps, rtt_mean, rtt_p50, ..., rtt_max} (microseconds)."""
    text = _ANSI.sub("", text)
    if "No messages were received" in text:
        raise ValueError("sockperf got no replies from the server (the connection stalled or was refused)")
    valid = re.search(r"\[Valid Duration\] RunTime=([0-9.]+) sec; SentMessages=(\d+); ReceivedMessages=(\d+)", text)
    if not valid:
        raise ValueError("no '[Valid Duration]' line in sockperf's output (did the client finish?)")
    runtime, received = float(valid.group(1)), int(valid.group(3))
    if runtime <= 0 or received <= 0:
        raise ValueError(f"sockperf received {received} replies in {runtime} s")
    out = {"tps": received / runtime}
    mean = re.search(r"avg-rtt=([0-9.]+)", text) or re.search(r"avg-latency=([0-9.]+)", text)
    if mean:
        out["rtt_mean"] = float(mean.group(1))
    for metric, pct in PCTS.items():
        m = re.search(rf"percentile {re.escape(pct)} =\s*([0-9.]+)", text)
        if m:
            out[metric] = float(m.group(1))
    m = re.search(r"<MAX> observation =\s*([0-9.]+)", text)
    if m:
        out["rtt_max"] = float(m.group(1))
    if "rtt_p50" not in out:
        raise ValueError("sockperf printed no percentiles")
    return out


def parse_netrr(client: str, server: str) -> list[Sample]:
    values = parse_sockperf(client)
    wall, cpu_client = parse_wrap(_ANSI.sub("", client))
    meta = {"client_wall_s": round(wall, 3)}
    out = [Sample(k, v, "1/s" if k == "tps" else "us", k == "tps", meta) for k, v in values.items()]
    if wall > 0:
        out.append(Sample("cpu_client", cpu_client / wall * 100, "%", False, meta))
        try:
            _, cpu_server = parse_wrap(_ANSI.sub("", server))
            out.append(Sample("cpu_server", cpu_server / wall * 100, "%", False, meta))
        except ValueError:
            pass  # the server's trailer is lost only if it was killed hard; the client's figures stand
    return out
