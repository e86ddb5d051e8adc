#!/usr/bin/env python3
"""What the remote machinery costs, measured on a local testbed of SSH hosts (network namespaces on
this machine: same kernel and CPU, so these figures measure the path, not other machines).

1. One command (`true`) over the open multiplexed connection against the same command run locally,
   interleaved: the time SSH adds per command (goal: at most 10 ms); beside it the raw floor, the
   same multiplexed `ssh ... true` with virtbench's own argv started directly, and virtbench's share
   (its per-command time minus that floor).
2. Set-up of 8 testbed hosts against 1 (connect, ship the native kernels into an empty cache,
   verify their hashes, make the scratch directory: the ssh driver's provision to ready), each
   from a cold start (new connections, emptied remote caches), interleaved (goal: under 2x).
3. NPB class A CG and MG on 2 ranks across 2 testbed hosts (MPI over TCP through veths and a
   bridge) against 2 ranks on this machine (shared memory): the ratio is what the network path costs.

    python bench/remote_exec.py [--rounds 30] [--setup-rounds 5] [--npb-rounds 3] [--parts 1,2,3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from virtbench import analysis, stats, suite  # noqa: E402
from virtbench.drivers.base import DriverContext  # noqa: E402
from virtbench.drivers.ssh.driver import SshDriver  # noqa: E402
from virtbench.machines import inventory, local, pool_for, ship, testbed  # noqa: E402
from virtbench.model import EnvSpec, Shape  # noqa: E402
from virtbench.run.runner import Runner  # noqa: E402
from virtbench.store import Store  # noqa: E402

PREFIX, SUBNET = "vbbn", "10.220.0.0/24"


def show(label: str, cand: list[float], base: list[float], unit: str, higher_is_better: bool = False) -> None:
    r = stats.ratio(cand, base, higher_is_better=higher_is_better)
    mc, mb = statistics.median(cand), statistics.median(base)
    print(f"{label}: {mc:.4g} {unit} vs {mb:.4g} {unit} (medians, n={len(cand)}/{len(base)}); "
          f"ratio {r.ratio:.3f} [{r.ci_low:.3f}, {r.ci_high:.3f}] p={r.p_value:.3g}", flush=True)


def per_command(inv: Path, rounds: int) -> None:
    """`true` three ways, interleaved in rounds: through virtbench's SshMachine.run over the open
    master connection, the same multiplexed `ssh ... true` with virtbench's own argv
    (SshMachine.ssh_argv) started directly (the raw floor: what OpenSSH's client and the remote
    login cost, which virtbench cannot go below), and virtbench's local run. virtbench's share is
    its per-command time minus the raw floor: the wrapper, the token, the remote `sh -c`."""
    pool = pool_for(str(inv))
    remote, here = pool.get(testbed.host_name(PREFIX, 1)), local()
    remote.run(["true"])  # open the master connection first: the goal is per command over it
    raw_argv = [*remote.ssh_argv(), "true"]
    r_times, raw_times, l_times = [], [], []

    def raw() -> None:
        res = subprocess.run(raw_argv, stdin=subprocess.DEVNULL, capture_output=True)
        assert res.returncode == 0, res.stderr

    def through(m) -> None:
        res = m.run(["true"])
        assert res.ok, res.stderr

    steps = [(lambda: through(remote), r_times), (raw, raw_times), (lambda: through(here), l_times)]
    for k in range(rounds):
        for fn, out in steps[k % 3:] + steps[:k % 3]:  # rotate the order: drift hits all three alike
            t = time.perf_counter()
            fn()
            out.append((time.perf_counter() - t) * 1000)
    pool.close()
    show("1. `true` over SSH vs locally", r_times, l_times, "ms")
    added = [a - b for a, b in zip(r_times, l_times)]
    print(f"   added per command: median {statistics.median(added):.2f} ms (goal <= 10 ms)", flush=True)
    show("   raw floor: the same multiplexed `ssh ... true` (virtbench's argv) run directly, vs locally",
         raw_times, l_times, "ms")
    share = [a - b for a, b in zip(r_times, raw_times)]
    print(f"   virtbench's own share (its per-command time minus the raw floor): median "
          f"{statistics.median(r_times) - statistics.median(raw_times):.2f} ms of {statistics.median(r_times):.2f} ms "
          f"(per round: median {statistics.median(share):.2f} ms, quartiles "
          f"{statistics.quantiles(share, n=4)[0]:.2f} to {statistics.quantiles(share, n=4)[2]:.2f} ms)", flush=True)


def setup_time(inv: Path, hosts: int) -> float:
    """Seconds for the ssh driver to bring `hosts` instances to ready from cold (new connections,
    no kernels in the remote caches)."""
    pool = pool_for(str(inv))
    names = [testbed.host_name(PREFIX, k) for k in range(1, hosts + 1)]
    for n in names:  # empty the caches through a connection that is then closed
        m = pool.get(n)
        m.run(["rm", "-rf", f"{ship.remote_dir(m)}/native"])
    pool.close()
    ship.reset_cache()
    pool = pool_for(str(inv))
    with tempfile.TemporaryDirectory() as tmp:
        driver = SshDriver(DriverContext("bench", Path(tmp), None, pool))
        env = EnvSpec("ssh", "ssh", Shape("native"), {"hosts": ",".join(names)})
        t = time.perf_counter()
        made = driver.provision(env, hosts)
        took = time.perf_counter() - t
        for inst in made:
            inst.teardown()
    pool.close()
    return took


def npb(inv: Path, kernel: str, rounds: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        store = Store(Path(tmp) / "b.sqlite")
        m = suite.adhoc("npb", {"kernel": kernel, "class": "A", "ranks": "2", "instances": "2"},
                        ["host", f"ssh@{testbed.host_name(PREFIX, 1)},{testbed.host_name(PREFIX, 2)}"],
                        repeat=rounds)
        m.inventory = str(inv)
        m.policy.warmup = 1
        rid = Runner(store, m).start()
        rows = [r for r in analysis.results(store, rid)["results"] if r["metric"] == "mops"]
        for r in rows:
            if r["median"] is None:
                print(f"3. NPB {kernel.upper()} class A, {r['environment']}: no result", flush=True)
                continue
            ratio = f"{r['ratio']:.3f} [{r['ratio_ci_low']:.3f}, {r['ratio_ci_high']:.3f}]" if r["ratio"] else "-"
            ci = f"[{r['ci_low']:.0f}, {r['ci_high']:.0f}]" if r["ci_low"] is not None else "[no CI]"
            print(f"3. NPB {kernel.upper()} class A, 2 ranks, {r['environment']}: {r['median']:.0f} Mop/s {ci} "
                  f"n={r['n']} verified={r['metadata'].get('verified')}; ratio to host {ratio}", flush=True)
        for a in store.attempts(rid):
            if a["status"] != "ok":
                print(f"   {a['environment']}: {a['status']}: {a['reason']}", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=30)
    ap.add_argument("--setup-rounds", type=int, default=5)
    ap.add_argument("--npb-rounds", type=int, default=3)
    ap.add_argument("--parts", default="1,2,3", help="which measurements, by number (default: all three)")
    args = ap.parse_args()
    parts = {p.strip() for p in args.parts.split(",")}
    print("load average at start (1/5/15 min): %.2f %.2f %.2f" % os.getloadavg(), flush=True)
    testbed.down(PREFIX)
    with tempfile.TemporaryDirectory() as tmp:
        hosts = 8 if "2" in parts else 2  # set-up compares 8 hosts with 1; NPB spans 2; `true` needs 1
        inv = testbed.up(hosts, Path(tmp) / "inv.yml", prefix=PREFIX, subnet=SUBNET)
        try:
            inventory.load(inv)
            if "1" in parts:
                per_command(inv, args.rounds)
            if "2" in parts:
                one, eight = [], []
                for _ in range(args.setup_rounds):
                    one.append(setup_time(inv, 1))
                    eight.append(setup_time(inv, 8))
                show("2. set-up of 8 hosts vs 1 (connect, ship, verify, ready)", eight, one, "s")
                print("   goal: ratio under 2", flush=True)
            if "3" in parts:
                for kernel in ("cg", "mg"):
                    npb(inv, kernel, args.npb_rounds)
        finally:
            testbed.down(PREFIX)
    print("load average at end (1/5/15 min): %.2f %.2f %.2f" % os.getloadavg(), flush=True)


if __name__ == "__main__":
    main()
