"""iperf3: TCP stream throughput between two instances (study 002 item 1, the 1:1 socket throughput),
with the CPU use of both ends, from iperf3's JSON. The client dials through the conditions' route,
so delay_ms and rate_mbit act on the path."""

from __future__ import annotations

import json
from typing import Any

from ..drivers.base import Instance
from ..errors import WorkloadFailed
from ..model import Sample
from .base import MetricSpec, Param, RunContext
from .netutil import PeerWorkload, bind_address, server_port

PORT = 5201


class Iperf(PeerWorkload):
    name = "iperf"
    description = "iperf3 TCP stream throughput between a client and a server instance, CPU of both ends"
    params = (
        Param("duration", float, 10.0, "seconds of traffic", min=0.5, max=3600),
        Param("parallel", int, 1, "parallel TCP streams (-P)", min=1, max=128),
        Param("reverse", bool, False, "server sends, client receives (-R)"),
        Param("window", str, "", "socket buffer size (-w), e.g. 4M; empty = the kernel's autotuning"),
    )
    metrics = (
        MetricSpec("throughput", "Mbit/s", True, "received bits per second"),
        MetricSpec("retransmits", "count", False, "TCP retransmissions of the sender"),
        MetricSpec("cpu_client", "%", False, "CPU of the client end (iperf3's own measure)"),
        MetricSpec("cpu_server", "%", False, "CPU of the server end (iperf3's own measure)"),
    )

    def execute(self, instances: dict[str, list[Instance]], params: dict[str, Any], ctx: RunContext) -> str:
        server, client = instances["server"][0], instances["client"][0]
        port = server_port(server, PORT)
        srv, host, dport = self.serve(ctx, server, client,
                                      ["iperf3", "-s", "-1", "-B", bind_address(server), "-p", str(port)], port)
        try:
            argv = ["iperf3", "-c", host, "-p", str(dport), "-t", f"{params['duration']:g}", "-P",
                    str(params["parallel"]), "-J"]
            if params["reverse"]:
                argv.append("-R")
            if params["window"]:
                argv += ["-w", params["window"]]
            res = client.exec(argv, timeout=params["duration"] + 60)
        finally:
            srv.finish(wait=10)
        if not res.ok:
            err = ""
            try:
                err = json.loads(res.stdout).get("error", "")
            except ValueError:
                pass
            raise WorkloadFailed(f"iperf3 client: {err or res.describe_failure()}",
                                 res.stdout[-4000:] + res.stderr[-4000:])
        return res.stdout

    def parse(self, raw: str, params: dict[str, Any]) -> list[Sample]:
        return parse_iperf3(raw)


def parse_iperf3(raw: str) -> list[Sample]:
    """iperf3 -J (client side) -> throughput, retransmits, CPU of both ends."""
    start = raw.find("{")
    if start < 0:
        raise ValueError("no JSON object in iperf3's output")
    doc = json.loads(raw[start:])
    if doc.get("error"):
        raise ValueError(f"iperf3 reported an error: {doc['error']}")
    end = doc.get("end") or {}
    recv, sent = end.get("sum_received"), end.get("sum_sent")
    if not recv or not sent:
        raise ValueError("iperf3 JSON has no end.sum_received/sum_sent (was it a TCP test that finished?)")
    start_info = doc.get("start") or {}
    meta = {"iperf_version": start_info.get("version"), "seconds": recv.get("seconds"),
            "bytes": recv.get("bytes"), "streams": len(end.get("streams") or []),
            "reverse": bool((start_info.get("test_start") or {}).get("reverse")),
            "congestion": end.get("sender_tcp_congestion")}
    cpu = end.get("cpu_utilization_percent") or {}
    out = [Sample("throughput", recv["bits_per_second"] / 1e6, "Mbit/s", True, meta)]
    if "retransmits" in sent:
        out.append(Sample("retransmits", sent["retransmits"], "count", False, meta))
    if "host_total" in cpu:
        out.append(Sample("cpu_client", cpu["host_total"], "%", False, meta))
    if "remote_total" in cpu:
        out.append(Sample("cpu_server", cpu["remote_total"], "%", False, meta))
    return out
