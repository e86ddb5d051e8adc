#!/usr/bin/env python3
"""What does the user-space delay proxy cost, and how exact is the delay it adds?

1. At 0 ms: TCP stream throughput (iperf3, 5 s) and request/response latency (sockperf ping-pong,
   64-byte messages) through `vb-delayproxy relay --delay-ms 0` against a direct loopback
   connection, interleaved.
2. Accuracy: the one-way delay actually added at 1, 5, 10, 20 and 50 ms, measured the way the
   delay_ms condition does (half the rise of the median TCP round trip to an echo server), and the
   error against the request (target: within 1 ms).
3. Throughput through the proxy at those delays (one iperf3 stream, 4 MiB relay queue per direction).

    python bench/delay_proxy_cost.py [--rounds 5] [--seconds 5]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from virtbench.conditions import hostnet  # noqa: E402
from virtbench.conditions.hostres import Helper  # noqa: E402
from virtbench.machines import local  # noqa: E402


def iperf(port: int, seconds: float) -> float:
    out = subprocess.run(["iperf3", "-c", "127.0.0.1", "-p", str(port), "-t", str(seconds), "-J"],
                         capture_output=True, text=True, check=True).stdout
    return json.loads(out)["end"]["sum_received"]["bits_per_second"] / 1e6


def sockperf(port: int, seconds: float) -> float:
    out = subprocess.run(["sockperf", "ping-pong", "--tcp", "-i", "127.0.0.1", "-p", str(port), "-m", "64",
                          "-t", str(seconds), "--full-rtt"], capture_output=True, text=True).stdout
    m = re.search(r"percentile 50.000 =\s*([0-9.]+)", re.sub(r"\x1b\[[0-9;]*m", "", out))
    if not m:
        raise SystemExit(f"sockperf printed no median: {out[-500:]}")
    return float(m.group(1))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--seconds", type=float, default=5.0)
    args = ap.parse_args()
    print("load average at start (1/5/15 min): %.2f %.2f %.2f" % os.getloadavg(), flush=True)
    iperf_port, sp_port = hostnet.free_port(), hostnet.free_port()
    servers = [Helper(local(), ["iperf3", "-s", "-B", "127.0.0.1", "-p", str(iperf_port)], name="iperf3 server"),
               Helper(local(), ["sockperf", "server", "--tcp", "-i", "127.0.0.1", "-p", str(sp_port)], name="sockperf server")]
    proxies: list[hostnet.Proxy] = []
    try:
        time.sleep(0.5)
        via_i = hostnet.Proxy(local(), "127.0.0.1", ("127.0.0.1", iperf_port), 0, 0)
        via_s = hostnet.Proxy(local(), "127.0.0.1", ("127.0.0.1", sp_port), 0, 0)
        proxies += [via_i, via_s]
        tput = {"direct": [], "proxy": []}
        lat = {"direct": [], "proxy": []}
        for i in range(args.rounds):
            for which in (("direct", "proxy") if i % 2 == 0 else ("proxy", "direct")):
                tput[which].append(iperf(iperf_port if which == "direct" else via_i.address[1], args.seconds))
                lat[which].append(sockperf(sp_port if which == "direct" else via_s.address[1], args.seconds / 2))
            print(f"round {i + 1}: iperf direct {tput['direct'][-1]:8.0f} proxy {tput['proxy'][-1]:8.0f} Mbit/s; "
                  f"sockperf p50 direct {lat['direct'][-1]:6.1f} proxy {lat['proxy'][-1]:6.1f} us", flush=True)
        md, mp = statistics.median(tput["direct"]), statistics.median(tput["proxy"])
        ld, lp = statistics.median(lat["direct"]), statistics.median(lat["proxy"])
        print("\n== proxy cost at 0 ms (medians) ==")
        print(f"throughput: direct {md:.0f} Mbit/s, proxy {mp:.0f} Mbit/s, proxy/direct {mp / md:.3f}")
        print(f"round trip: direct {ld:.1f} us, proxy {lp:.1f} us, added {lp - ld:.1f} us per round trip")

        print("\n== delay accuracy (one-way, measured as the delay_ms condition does) ==")
        print(f"{'requested ms':>12} {'measured ms':>12} {'error ms':>9} {'iperf Mbit/s':>13}")
        worst = 0.0
        for delay in (1, 5, 10, 20, 50):
            def impaired(echo_addr, delay=delay):
                probe = hostnet.Proxy(local(), "127.0.0.1", echo_addr, delay, 0)
                return probe.address, probe.stop
            got = hostnet.measure_delay(local(), "127.0.0.1", impaired, count=30)["delay_measured_ms"]
            p = hostnet.Proxy(local(), "127.0.0.1", ("127.0.0.1", iperf_port), delay, 0)
            try:
                mbit = iperf(p.address[1], args.seconds)
            finally:
                p.stop()
            worst = max(worst, abs(got - delay))
            print(f"{delay:12} {got:12.3f} {got - delay:+9.3f} {mbit:13.0f}")
        print(f"worst error {worst:.3f} ms: {'within' if worst <= 1 else 'OUTSIDE'} the 1 ms target")
        print("load average at the end (1/5/15 min): %.2f %.2f %.2f" % os.getloadavg())
    finally:
        for p in proxies:
            p.stop()
        for s in servers:
            s.stop()


if __name__ == "__main__":
    main()
