#!/usr/bin/env python3
"""What does the monitor cost? CPU seconds its sampler uses per wall second, on the host and inside
a container, at 1 Hz (target, issue 6: at most 1 % of one core), against a shell loop reading the
same four files; and the wall time the runner spends starting and stopping samplers per repetition.

The samplers run side by side for --seconds (default 60). A process's CPU time comes from
/proc/PID/schedstat (nanoseconds on a CPU; the clock-tick counters of /proc/PID/stat are too coarse
for a process that wakes once a second), read just before it is stopped; the shell loop's from
wait4's rusage, which includes the `cat` and `sleep` children it forks each second.

    python bench/monitor_overhead.py [--seconds 60] [--interval 1] [--no-container] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from virtbench import monitor  # noqa: E402
from virtbench.kernels import native_bin_dir  # noqa: E402

SHELL_LOOP = ("while :; do cat /proc/stat /proc/meminfo /proc/net/dev /proc/diskstats > /dev/null; "
              "sleep {interval}; done")


def schedstat_s(pid: int, proc_root: str = "/proc") -> float:
    return int(Path(f"{proc_root}/{pid}/schedstat").read_text().split()[0]) / 1e9


def host_sampler(seconds: float, interval: float) -> dict:
    exe = native_bin_dir() / monitor.BIN
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "m.jsonl"
        t0 = time.monotonic()
        proc = subprocess.Popen([str(exe), "--scope", "host", "--interval", str(interval), "--out", str(out)],
                                stdout=subprocess.DEVNULL)
        time.sleep(seconds)
        cpu = schedstat_s(proc.pid)
        wall = time.monotonic() - t0
        proc.send_signal(signal.SIGTERM)
        proc.wait()
        ticks = sum(1 for line in out.read_text().splitlines() if '"tick"' in line)
    return {"what": f"vb-monitor on the host, {1 / interval:g} Hz", "cpu_s": cpu, "wall_s": wall, "ticks": ticks}


def shell_loop(seconds: float, interval: float) -> dict:
    t0 = time.monotonic()
    proc = subprocess.Popen(["sh", "-c", SHELL_LOOP.format(interval=interval)], start_new_session=True)
    time.sleep(seconds)
    os.killpg(proc.pid, signal.SIGTERM)
    _, _, usage = os.wait4(proc.pid, 0)
    wall = time.monotonic() - t0
    return {"what": f"shell loop (cat of the same 4 files + sleep), {1 / interval:g} Hz",
            "cpu_s": usage.ru_utime + usage.ru_stime, "wall_s": wall, "ticks": round(wall / interval),
            "note": "rusage: 10 ms resolution, includes the children it reaped"}


def container_sampler(seconds: float, interval: float) -> tuple[dict, dict]:
    from virtbench import image
    from virtbench.drivers import make
    from virtbench.drivers.base import DriverContext
    from virtbench.model import EnvSpec, Shape

    with tempfile.TemporaryDirectory() as tmp:
        drv = make("container", DriverContext(f"monbench-{os.getpid()}", Path(tmp), image.require()))
        env = EnvSpec("container", "container", Shape("native"), {"engine": "auto", "runtime": "auto",
                                                                  "cgroup_manager": "auto"})
        (inst,) = drv.provision(env, 1, "main")
        try:
            # What a repetition pays around the workload: start and stop (wall, not CPU).
            starts, stops = [], []
            for _ in range(5):
                t = time.monotonic()
                s = monitor.Session.start({"main": [inst]}, environment="c", interval=interval, host=False)
                starts.append(time.monotonic() - t)
                t = time.monotonic()
                s.stop()
                stops.append(time.monotonic() - t)
            t0 = time.monotonic()
            s = monitor.Session.start({"main": [inst]}, environment="c", interval=interval, host=False)
            sampler = s._samplers[0]
            time.sleep(seconds)
            res = inst.exec(["sh", "-c", 'cat /proc/$(cat "$1")/schedstat', "sh", sampler.pidfile], timeout=30)
            wall = time.monotonic() - t0
            cpu = int(res.stdout.split()[0]) / 1e9
            result = s.stop()
            ticks = len(result.traces[0].ticks) if result.traces else 0
        finally:
            inst.teardown()
    per_rep = {"what": "runner's wall time per repetition and container (podman exec)",
               "start_s_median": sorted(starts)[2], "stop_s_median": sorted(stops)[2]}
    return {"what": f"vb-monitor in a container (cgroup scope), {1 / interval:g} Hz", "cpu_s": cpu, "wall_s": wall,
            "ticks": ticks}, per_rep


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--interval", type=float, default=1.0)
    ap.add_argument("--no-container", action="store_true")
    ap.add_argument("--json", help="also write the results here")
    args = ap.parse_args()

    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(4) as pool:
        jobs = [pool.submit(host_sampler, args.seconds, args.interval),
                pool.submit(host_sampler, min(args.seconds, 20.0), 0.1),
                pool.submit(shell_loop, args.seconds, args.interval)]
        cont = None if args.no_container else pool.submit(container_sampler, args.seconds, args.interval)
        rows = [j.result() for j in jobs]
        extra = None
        if cont is not None:
            crow, extra = cont.result()
            rows.insert(1, crow)
    print(f"{'sampler':58} {'CPU s':>8} {'wall s':>7} {'ticks':>6} {'% of a core':>11} {'us/tick':>8}")
    for r in rows:
        r["percent_of_core"] = 100 * r["cpu_s"] / r["wall_s"]
        r["us_per_tick"] = 1e6 * r["cpu_s"] / max(r["ticks"], 1)
        print(f"{r['what']:58} {r['cpu_s']:8.4f} {r['wall_s']:7.1f} {r['ticks']:6d} {r['percent_of_core']:10.3f}% "
              f"{r['us_per_tick']:8.0f}")
    if extra:
        print(f"\n{extra['what']}: start {extra['start_s_median']:.2f} s, stop {extra['stop_s_median']:.2f} s "
              f"(medians of 5; instances are started and stopped in parallel)")
    target = rows[0]["percent_of_core"]
    print(f"\ntarget <= 1 % of one core at 1 Hz: host {target:.3f} % -> {'met' if target <= 1 else 'MISSED'}")
    if args.json:
        Path(args.json).write_text(json.dumps({"samplers": rows, "per_repetition": extra}, indent=2))


if __name__ == "__main__":
    main()
