#!/usr/bin/env python3
"""A/A on a busy machine (issue 24, item 4): do verdicts stay honest when other programs load it?

Two identical environments (`a`, the baseline, and `b`: both `host`, or both `container` with
--driver container) run six system tests (dhrystone, whetstone, pipe, syscall, execl, spawn;
duration 0.3 s, 1 copy) under the runner's own rules: lockstep rounds, min 6 and max 20 rounds,
ci_target 0.02 on the ratio's interval. Each mode runs --runs times:

- busy: with stress-ng holding one core at about 50 % (`--cpu 1 --cpu-load 50`, started before
  and stopped after each run by this script; it is not virtbench's child, so the run's `cpu_given`
  counts it as another program's);
- quiet: without it. Other developers may load the machine at the same time: each run records the
  CPU other programs took (`machine_load`: `others_cores`, PSI) and the load average, printed
  beside the figures, so a "quiet" run that was not quiet says so.

Figures per run: rows flagged significant (of 6; the goal: at most 1, i.e. at most 5 % of rows
over the runs), the median of the rows' ratio CI half-widths (goal: within 2 %), whether every cell
has equal counts in both environments (no environment ran rounds alone), rounds per cell and wall
time.

A known difference must be found: `--replay N` (default 20) replays N runs from the rounds just
measured in each mode, with `b` slowed by 5 % (each of its values x 0.95): per test, rounds are
drawn with replacement from that mode's measured (a, b) pairs, the runner's stopping rule
(Runner._targets_met's: the paired ratio at the table's level, min 6, max 20 rounds) decides when
it stops, and the table's verdicts come from stats/verdicts.py:apply_verdicts (Benjamini-Hochberg over the 6
rows). Detected = significant with ratio < 1. This is a replay, not 20 live runs: it keeps the
measured noise of a round but not the order of rounds in time (drift within a run is not
replayed). The same replay without the slowdown is printed too (flags it should not raise).

The noise floor, per mode and test: each environment's per-repetition coefficient of variation,
the sd of the rounds' log ratios (b / a), the correlation of a and b within a round (of their logs:
what pairing can cancel), and the smallest ratio CI half-width the stop rule can reach at 20 rounds
given that sd (the median, over 2000 normal samples of 20 log ratios with that sd, of the exact
signed-rank interval at the table's level) beside the measured half-width. With a round sd of s the
floor is about s / 1.5 at 20 rounds and 99.2 %: a 2 % half-width needs s <= 3 %.

`--floor` measures the same outside virtbench: --procs processes of `vb-system TEST --duration 0.3`
back to back per test, taken in pairs as rounds (labels a and b alternate which runs first, as the
runner rotates), and a register-only reference loop (a tiny C program built in a temporary
directory: integer arithmetic in registers, no memory traffic, timed the same way) that shows what
is left when neither cache nor memory is involved. It records the machine's steal time and other
programs' CPU (cpugiven) over each test's processes.

A real difference of known size (issue 32, item 4): `--kinds aa,ab --driver container` runs, beside
the A/A pair (two containers with `cpus = 1.0`), an A/B pair whose `b` has `cpus = 0.9` (a CFS
quota of 0.9 cores: a single-threaded test in it gets about 90 % of the CPU time, so its rate is
about 10 % lower), under the same background load, and prints per mode how often each kind's rows
come out `slower` or `faster` (the four verdicts of `show --json`): the detection rate of a real
~10 % difference beside the A/A false-flag rate, with the verdict counts and the machine's load.
Whether the quota really cut b's CPU is checked per test on what the quota governs, the CPU the
containers' cgroups used in each repetition (`cpu_given.containers_cores` x its window), as the
median over rounds of b / a (`quota_shares`), not on `own_cores`: that also holds podman's exec
machinery and virtbench's own process (no quota on them), and it counted the test twice in the
repetitions where the exec session's conmon outlived `podman exec` (fixed in run/cpugiven.py), so
it read b at 0.98 of a in runs whose rows all came out ~7 % slower. A warning says the machine
could not give a its quota (b's containers got > 0.97 of a's CPU): no 10 % difference to find.

    python bench/aa_busy.py [--runs 3] [--modes busy,quiet] [--driver host] [--replay 20]
                            [--load 50] [--json FILE]
    python bench/aa_busy.py --driver container --kinds aa,ab [--runs 5] [--modes quiet,busy] [--replay 0]
    python bench/aa_busy.py --floor [--procs 40] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from virtbench import analysis, monitor, stats
from virtbench.stats import verdicts as table_verdicts  # noqa: E402
from virtbench.run import cpugiven  # noqa: E402
from virtbench.store import Store  # noqa: E402

TESTS = ["dhrystone", "whetstone", "pipe", "syscall", "execl", "spawn"]
MIN_N, MAX_N, TARGET, DURATION = 6, 20, 0.02, 0.3
SLOWDOWN = 0.95
AB_CPUS = (1.0, 0.9)  # --kinds ab: a's and b's CFS quota in cores (a real ~10 % difference)

SUITE = """\
[suite]
name = "aa-{driver}"
description = "A/A: two identical {driver} environments (issue 24, bench/aa_busy.py)"
baseline = "a"
warmup = "auto"
min_repetitions = {min_n}
max_repetitions = {max_n}
ci_target = {target}
timeout = 120

[environments.a]
driver = "{driver}"
{options_a}
[environments.b]
driver = "{driver}"
{options_b}

[[workloads]]
name = "system"
params = {{ duration = {duration}, copies = "1", test = {tests} }}
"""


def _virtbench() -> str:
    exe = Path(sys.executable).with_name("virtbench")
    return str(exe) if exe.exists() else "virtbench"


def one_run(suite_path: Path, db: Path, busy_load: int | None) -> dict:
    """One live A/A run (stress-ng around it when busy_load is set): the run's figures."""
    stress = None
    if busy_load is not None:
        stress = subprocess.Popen(["stress-ng", "--cpu", "1", "--cpu-load", str(busy_load), "--timeout", "3600",
                                   "-q"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(2)  # let it settle into its duty cycle
    load_before = os.getloadavg()[0]
    t0 = time.time()
    try:
        res = subprocess.run([_virtbench(), "run", str(suite_path), "--db", str(db), "--json"],
                             capture_output=True, text=True)
    finally:
        if stress is not None:
            stress.send_signal(signal.SIGTERM)
            try:
                stress.wait(timeout=20)
            except subprocess.TimeoutExpired:
                stress.kill()
                stress.wait()
    wall = time.time() - t0
    if res.returncode != 0:
        raise SystemExit(f"virtbench run failed ({res.returncode}):\n{res.stderr[-3000:]}")
    run_id = json.loads(res.stdout)["run_id"]
    return figures(Store(db), run_id, wall=wall, load_before=load_before, stress=busy_load)


def figures(store: Store, run_id: str, **extra) -> dict:
    data = analysis.results(store, run_id)
    rows = [r for r in data["results"] if r["environment"] == "b" and r["metric"] in TESTS]
    counts: dict[tuple, int] = {}
    for a in store.attempts(run_id):
        if not a["warmup"]:
            counts[(a["cell_key"], a["environment"])] = counts.get((a["cell_key"], a["environment"]), 0) + 1
    cells = {k[0] for k in counts}
    equal = all(counts.get((c, "a")) == counts.get((c, "b")) for c in cells)
    half = [(r["ratio_ci_high"] - r["ratio_ci_low"]) / 2 / r["ratio"] for r in rows
            if r["ratio_ci_low"] is not None and r["ratio_ci_high"] is not None]
    pairs = pairs_of(store, run_id)
    # the same rounds as two unpaired groups (what the ratio was before issue 24), at 95 %
    unpaired = [stats.ratio([b for _, b in v], [a for a, _ in v]) for v in pairs.values() if len(v) >= 2]
    unpaired_hw = [(u.ci_high - u.ci_low) / 2 / u.ratio for u in unpaired if math.isfinite(u.ci_low)]
    paired95 = [stats.ratio_halfwidth(stats.paired_ratio([b for _, b in v], [a for a, _ in v]), 0.0)
                for v in pairs.values() if len(v) >= 2]
    # and the sign test's interval of the rounds' median ratio (no symmetry needed), for contrast
    sign95 = []
    for v in pairs.values():
        d = np.log([b / a for a, b in v])
        lo, hi, _ = stats.median_ci(d)
        if math.isfinite(lo):
            sign95.append((math.exp(hi) - math.exp(lo)) / 2 / math.exp(float(np.median(d))))
    verdicts = [r["verdict"] for r in rows]
    given: dict[str, list[float]] = {}  # CPU each environment's repetitions got (cpu_given.own_cores)
    given_rows = []  # (test, environment, round, cpu_given) of every measured sample
    for smp in store.samples(run_id):
        meta = json.loads(smp["metadata_json"])
        g = meta.get("cpu_given") or {}
        if smp["metric"] in TESTS and isinstance(g.get("own_cores"), (int, float)):
            given.setdefault(smp["environment"], []).append(g["own_cores"])
        if smp["metric"] in TESTS and "round" in meta and g:
            given_rows.append((smp["metric"], smp["environment"], meta["round"], g))
    return {"run_id": run_id, **extra, "flagged": sum(v in ("faster", "slower") for v in verdicts),
            "slower": verdicts.count("slower"), "faster": verdicts.count("faster"),
            "verdict_counts": {v: verdicts.count(v) for v in sorted(set(map(str, verdicts)))}, "rows": len(rows),
            "own_cores": {e: statistics.median(v) for e, v in sorted(given.items())},
            "quota_shares": quota_shares(given_rows),
            "median_halfwidth": statistics.median(half) if half else math.nan,
            "halfwidths": {r["metric"]: (r["ratio_ci_high"] - r["ratio_ci_low"]) / 2 / r["ratio"] for r in rows
                           if r["ratio_ci_low"] is not None},
            "ratios": {r["metric"]: r["ratio"] for r in rows},
            "verdicts": {r["metric"]: r["verdict"] for r in rows},
            "equal_counts": equal, "rounds": {k[0]: v for k, v in counts.items() if k[1] == "a"},
            "machine_load": data.get("machine_load"), "pairs": pairs,
            "median_halfwidth_95_paired": statistics.median(paired95) if paired95 else math.nan,
            "median_halfwidth_95_unpaired": statistics.median(unpaired_hw) if unpaired_hw else math.nan,
            "median_halfwidth_95_sign": statistics.median(sign95) if sign95 else math.nan}


def quota_shares(given_rows: list[tuple[str, str, int, dict]]) -> dict[str, float]:
    """test -> the median over rounds of the CPU b's containers got / a's in that round (CPU seconds:
    `containers_cores` x `window_s` of each repetition), plus "median" over the tests: what a `cpus`
    quota governs. Empty when the samples have no containers' figure (a host run, an older run)."""
    cpu: dict[tuple[str, int], dict[str, float]] = {}
    for test, env, rnd, g in given_rows:
        if isinstance(g.get("containers_cores"), (int, float)) and g.get("window_s"):
            cpu.setdefault((test, rnd), {})[env] = g["containers_cores"] * g["window_s"]
    ratios: dict[str, list[float]] = {}
    for (test, _), by_env in cpu.items():
        if by_env.get("a", 0) > 0 and "b" in by_env:
            ratios.setdefault(test, []).append(by_env["b"] / by_env["a"])
    out = {t: round(statistics.median(v), 3) for t, v in sorted(ratios.items())}
    return {**out, "median": round(statistics.median(out.values()), 3)} if out else {}


def quota_warning(shares: dict[str, float], expected: float = AB_CPUS[1] / AB_CPUS[0]) -> str | None:
    """The A/B check: a warning when b's containers got about as much CPU as a's (> 0.97 of it), so
    the run had no ~10 % difference to find; None when the quota cut b's CPU (or nothing was measured)."""
    got = shares.get("median")
    if got is None or got <= 0.97:
        return None
    return (f"b's containers got {got:.2f} of a's CPU (median over tests of the rounds' b / a), not about "
            f"{expected:.2f}: the machine could not give a its full quota, so this run had no 10 % difference to find")


def pairs_of(store: Store, run_id: str) -> dict[str, list[tuple[float, float]]]:
    """test -> the run's (a, b) values round by round, where both have one."""
    by: dict[tuple[str, int], dict[str, float]] = {}
    for s in store.samples(run_id):
        if monitor.is_monitor_sample(s["metadata_json"]) or s["metric"] not in TESTS:
            continue
        rnd = json.loads(s["metadata_json"]).get("round")
        by.setdefault((s["metric"], rnd), {})[s["environment"]] = s["value"]
    out: dict[str, list] = {}
    for (test, _), v in sorted(by.items(), key=lambda kv: (kv[0][0], kv[0][1])):
        if "a" in v and "b" in v:
            out.setdefault(test, []).append((v["a"], v["b"]))
    return out


def replay(pool: dict[str, list[tuple[float, float]]], factor: float, runs: int, seed: int) -> list[dict]:
    """Simulated runs from measured round pairs: b x factor, the runner's stopping rule, the
    table's verdicts. Each test's pool is first centred on ratio 1 (b divided by the pool's own
    Hodges-Lehmann ratio): a finite pool of A/A rounds has a centre of its own, a little off 1, and
    resampling it would otherwise replay that offset as if it were a real difference."""
    rng = np.random.default_rng(seed)
    centred = {}
    for test, pairs in pool.items():
        centre = stats.paired_ratio([b for _, b in pairs], [a for a, _ in pairs]).ratio
        centred[test] = [(a, b / centre) for a, b in pairs]
    pool = centred
    level = 1.0 - 0.05 / len(TESTS)  # Runner._targets_met: one comparison per test, one metric each
    out = []
    for _ in range(runs):
        rows = []
        for test in TESTS:
            pairs = pool[test]
            a, b = [], []
            while True:
                i = int(rng.integers(len(pairs)))
                a.append(pairs[i][0])
                b.append(pairs[i][1] * factor)
                if len(a) >= MAX_N:
                    break
                if len(a) >= MIN_N:
                    r = stats.paired_ratio(b, a, confidence=level)
                    if stats.ratio_halfwidth(r, level) <= TARGET:
                        break
            r = stats.paired_ratio(b, a)
            rows.append({"metric": test, "p_value": r.p_value, "_compared": True, "_min_p": r.min_p, "_seed": 0,
                         "_paired": (b, a), "n": len(a), "ratio": r.ratio})
        table_verdicts.apply_verdicts(rows, {}, lambda r: "table", lambda r: (None, None))
        out.append({"detected": sum(r["verdict"] == "slower" for r in rows),
                    "flagged": sum(r["verdict"] in ("faster", "slower") for r in rows),
                    "rounds": [r["n"] for r in rows],
                    "halfwidth": statistics.median((r["ratio_ci_high"] - r["ratio_ci_low"]) / 2 / r["ratio"]
                                                   for r in rows)})
    return out


LEVEL = 1.0 - 0.05 / len(TESTS)  # the table's level with nothing significant (Runner._targets_met)


def floor_halfwidth(sd: float, n: int = MAX_N, level: float = LEVEL, sims: int = 2000, seed: int = 5) -> float:
    """The median ratio CI half-width of the exact signed-rank interval at `level` on n normal log
    ratios of sd `sd`: the narrowest the stop rule can get at its maximum rounds with that noise."""
    if not math.isfinite(sd):
        return math.nan
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(sims):
        est, lo, hi, reached, _ = stats.walsh_ci(rng.normal(0.0, sd, n), level)
        out.append((math.exp(hi) - math.exp(lo)) / 2 / math.exp(est) if reached >= level - 1e-12 else math.inf)
    return float(np.median(out))


def noise(pairs: list[tuple[float, float]]) -> dict:
    """Per test: each side's per-repetition CV, the rounds' log-ratio sd, the within-round correlation
    of the two sides (logs), and the floor half-width at MAX_N rounds for that sd."""
    a = np.array([p[0] for p in pairs], dtype=float)
    b = np.array([p[1] for p in pairs], dtype=float)
    if a.size < 3:
        return {"n": int(a.size)}
    d = np.log(b / a)
    sd = float(np.std(d, ddof=1))
    la, lb = np.log(a), np.log(b)
    corr = float(np.corrcoef(la, lb)[0, 1]) if np.std(la) > 0 and np.std(lb) > 0 else math.nan
    return {"n": int(a.size), "cv_a": float(np.std(a, ddof=1) / np.mean(a)), "cv_b": float(np.std(b, ddof=1) / np.mean(b)),
            "sd_log_ratio": sd, "corr": corr, "floor_halfwidth": floor_halfwidth(sd)}


def print_noise(title: str, table: dict[str, dict], measured: dict[str, float] | None = None) -> None:
    print(f"{title}: per test, CV per repetition of a / b, sd of the rounds' log ratios, correlation of a and b "
          f"within a round, the floor half-width at {MAX_N} rounds ({LEVEL * 100:.1f} %)"
          + (", the measured half-width (median over runs)" if measured else ""))
    for test, f in table.items():
        if "sd_log_ratio" not in f:
            print(f"  {test:13} too few rounds ({f['n']})")
            continue
        print(f"  {test:13} cv {f['cv_a'] * 100:5.2f} / {f['cv_b'] * 100:5.2f} %  sd {f['sd_log_ratio'] * 100:5.2f} %  "
              f"corr {f['corr']:+.2f}  floor {f['floor_halfwidth'] * 100:5.2f} %"
              + (f"  measured {measured[test] * 100:5.2f} %" if measured and test in measured else "")
              + f"  ({f['n']} rounds)")


# -- the floor outside virtbench --------------------------------------------------------------------

REGISTER_LOOP = r"""
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
/* Integer arithmetic in registers only (no loads or stores in the loop), timed like vb-system:
   iterations in batches until the duration has passed; prints iterations per second. */
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec / 1e9; }
int main(int argc, char **argv) {
    double dur = argc > 1 ? atof(argv[1]) : 0.3, t0 = now(), t;
    uint64_t x = 88172645463325252ULL, n = 0;
    do {
        for (int i = 0; i < 65536; i++) { x ^= x << 13; x ^= x >> 7; x ^= x << 17; __asm__ volatile("" : "+r"(x)); }
        n += 65536;
    } while ((t = now()) - t0 < dur);
    printf("%.3f %llu\n", n / (t - t0), (unsigned long long)(x & 1));
    return 0;
}
"""


def build_register_loop(work: Path) -> Path:
    src, exe = work / "regloop.c", work / "regloop"
    src.write_text(REGISTER_LOOP)
    cc = shutil.which("cc") or shutil.which("gcc")
    if not cc:
        raise SystemExit("--floor needs a C compiler (cc) for the register-only reference loop")
    subprocess.run([cc, "-O2", "-o", str(exe), str(src)], check=True)
    return exe


def _rate(argv: list[str]) -> float:
    out = subprocess.run(argv, capture_output=True, text=True, check=True).stdout.strip()
    if out.startswith("{"):
        return float(json.loads(out)["rate"])
    return float(out.split()[0])


def floor_mode(procs: int, work: Path) -> dict:
    """Back-to-back processes outside virtbench, per test, in pairs; with steal and others' CPU."""
    system = ROOT / "native" / "build" / "bin" / "vb-system"
    if not system.exists():
        raise SystemExit(f"{system} is missing: make -C native")
    loop = build_register_loop(work)
    commands = {t: [str(system), t, "--duration", str(DURATION), "--copies", "1", "--dir", str(work)] for t in TESTS}
    commands["register loop"] = [str(loop), str(DURATION)]
    out: dict = {"procs": procs, "load_before": os.getloadavg()[0], "tests": {}}
    for test, argv in commands.items():
        before = cpugiven.snapshot()
        pairs = []
        for i in range(procs // 2):
            first, second = _rate(argv), _rate(argv)
            pairs.append((first, second) if i % 2 == 0 else (second, first))  # a runs first in even rounds
        given = cpugiven.between(before, cpugiven.snapshot()) or {}
        out["tests"][test] = {**noise(pairs), "others_cores": given.get("others_cores"), "steal": given.get("steal"),
                              "psi_some": given.get("psi_some"), "pairs": pairs}
    out["load_after"] = os.getloadavg()[0]
    return out


def print_floor(f: dict) -> None:
    print_noise(f"floor outside virtbench ({f['procs']} processes per test, back to back, load average "
                f"{f['load_before']:.1f} before, {f['load_after']:.1f} after)", f["tests"])
    for test, t in f["tests"].items():
        print(f"  {test:13} over its processes: other programs {t['others_cores']} cores, steal "
              f"{(t['steal'] or 0) * 100:.2f} %, CPU pressure {t['psi_some']}")


def _fmt_load(f: dict) -> str:
    ml = f.get("machine_load") or {}
    others = ml.get("others_cores_median")
    psi = ml.get("psi_some_median")
    return (f"others {others:.2f} cores" if others is not None else "others ?") + \
        (f", PSI {psi * 100:.0f} %" if psi is not None else "") + f", load avg before {f['load_before']:.1f}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--modes", default="busy,quiet")
    ap.add_argument("--driver", default="host", choices=["host", "container"])
    ap.add_argument("--replay", type=int, default=20)
    ap.add_argument("--load", type=int, default=50, help="stress-ng --cpu-load percent of one core (busy mode)")
    ap.add_argument("--json")
    ap.add_argument("--floor", action="store_true", help="only the noise floor outside virtbench: back-to-back "
                    "processes of each test and a register-only loop")
    ap.add_argument("--procs", type=int, default=40, help="processes per test in --floor (pairs = rounds)")
    ap.add_argument("--kinds", default="aa", help="aa (two identical environments) and/or ab (b with cpus = "
                    f"{AB_CPUS[1]}, a real ~10 %% difference; needs --driver container), run in turn")
    args = ap.parse_args()
    kinds = [k for k in args.kinds.split(",") if k]
    if set(kinds) - {"aa", "ab"} or not kinds:
        raise SystemExit(f"--kinds takes aa and/or ab, got {args.kinds!r}")
    if "ab" in kinds and args.driver != "container":
        raise SystemExit("--kinds ab limits b's CPU time (cpus = 0.9): it needs --driver container")
    if args.floor:
        work = Path(tempfile.mkdtemp(prefix="vb-floor-"))
        try:
            f = floor_mode(args.procs, work)
        finally:
            shutil.rmtree(work, ignore_errors=True)
        print_floor(f)
        if args.json:
            Path(args.json).write_text(json.dumps({"floor": f}, indent=1, default=str))
        return 0
    if "busy" in args.modes and not shutil.which("stress-ng"):
        raise SystemExit("stress-ng is not installed: apt-get install stress-ng (or run --modes quiet)")
    work = Path(tempfile.mkdtemp(prefix="vb-aa-"))
    suites = {}
    for kind in kinds:
        cpus = (AB_CPUS if kind == "ab" else (AB_CPUS[0], AB_CPUS[0])) if args.driver == "container" else (None, None)
        suites[kind] = work / f"{kind}.toml"
        suites[kind].write_text(SUITE.format(driver=args.driver, min_n=MIN_N, max_n=MAX_N, target=TARGET,
                                             duration=DURATION, tests=json.dumps(TESTS),
                                             **{f"options_{e}": f"cpus = {c}" if c else "" for e, c in zip("ab", cpus)}))
    report: dict = {"driver": args.driver, "cores": os.cpu_count(), "modes": {}}
    try:
        for mode in [m for m in args.modes.split(",") if m]:
            runs, known = [], []
            for k in range(args.runs):
                if "ab" in kinds:  # in turn with the A/A runs, so the same load hits both kinds
                    f = one_run(suites["ab"], work / f"{mode}-ab.sqlite", args.load if mode == "busy" else None)
                    known.append(f)
                    print(f"{mode} A/B run {k + 1} (b: cpus {AB_CPUS[1]}): {f['slower']} of {f['rows']} rows slower, "
                          f"{f['faster']} faster; verdicts {f['verdict_counts']}; ratios "
                          f"{ {t: round(v, 3) for t, v in f['ratios'].items()} }; CPU b's containers got / a's "
                          f"(rounds' median) {f['quota_shares']}: a quota binds only where the machine has the core "
                          f"to give; rounds {sorted(f['rounds'].values())}, "
                          f"{f['wall']:.0f} s; {_fmt_load(f)}", flush=True)
                    if warning := quota_warning(f["quota_shares"]):
                        print(f"  warning: {warning}", flush=True)
                if "aa" not in kinds:
                    continue
                f = one_run(suites["aa"], work / f"{mode}.sqlite", args.load if mode == "busy" else None)
                runs.append(f)
                print(f"{mode} run {k + 1}: {f['flagged']} of {f['rows']} flagged (verdicts {f['verdict_counts']}), "
                      "median ratio CI half-width "
                      f"{f['median_halfwidth'] * 100:.2f} % (at 95 %: paired {f['median_halfwidth_95_paired'] * 100:.2f} "
                      f"%, the same rounds unpaired {f['median_halfwidth_95_unpaired'] * 100:.2f} %, sign test "
                      f"{f['median_halfwidth_95_sign'] * 100:.2f} %), equal counts {f['equal_counts']}, rounds "
                      f"{sorted(f['rounds'].values())}, {f['wall']:.0f} s; {_fmt_load(f)}", flush=True)
            report["modes"][mode] = {}
            if known:
                rows = sum(f["rows"] for f in known)
                report["modes"][mode]["ab"] = {"runs": known, "rows": rows, "slower": sum(f["slower"] for f in known),
                                               "faster": sum(f["faster"] for f in known)}
                aa = (f"; A/A beside it: {sum(f['flagged'] for f in runs)} of {sum(f['rows'] for f in runs)} rows "
                      "flagged slower or faster") if runs else ""
                print(f"{mode}: a real ~10 % difference (cpus {AB_CPUS[1]} against {AB_CPUS[0]}) reported slower in "
                      f"{report['modes'][mode]['ab']['slower']} of {rows} rows "
                      f"({report['modes'][mode]['ab']['faster']} faster){aa}", flush=True)
            if not runs:
                continue
            pool: dict[str, list] = {}
            for f in runs:
                for test, pairs in f["pairs"].items():
                    pool.setdefault(test, []).extend(pairs)
            slowed = replay(pool, SLOWDOWN, args.replay, seed=1)
            same = replay(pool, 1.0, args.replay, seed=2)
            total_rows = sum(f["rows"] for f in runs)
            summary = {
                "flagged_rows": sum(f["flagged"] for f in runs), "rows": total_rows,
                "median_halfwidth": statistics.median(h for f in runs for h in f["halfwidths"].values()),
                "equal_counts_runs": sum(f["equal_counts"] for f in runs), "runs": len(runs),
                "replay_5pct_all_detected_runs": sum(r["detected"] == len(TESTS) for r in slowed),
                "replay_5pct_rows_detected": sum(r["detected"] for r in slowed),
                "replay_rows": len(TESTS) * len(slowed),
                "replay_aa_flagged_rows": sum(r["flagged"] for r in same),
                "replay_5pct_median_rounds": statistics.median([n for r in slowed for n in r["rounds"]] or [math.nan]),
            }
            measured = {t: statistics.median(f["halfwidths"][t] for f in runs if t in f["halfwidths"])
                        for t in TESTS if any(t in f["halfwidths"] for f in runs)}
            floor = {t: noise(pool.get(t, [])) for t in TESTS}
            report["modes"][mode].update({"runs": runs, "summary": summary, "noise": floor,
                                          "measured_halfwidth": measured})
            print(f"{mode}: {summary['flagged_rows']} of {total_rows} rows flagged; median ratio CI half-width "
                  f"{summary['median_halfwidth'] * 100:.2f} %; equal counts in {summary['equal_counts_runs']} of "
                  f"{len(runs)} runs")
            if args.replay:
                print(f"{mode} replay ({args.replay} runs from the measured rounds): b slowed 5 %: all 6 rows detected in "
                      f"{summary['replay_5pct_all_detected_runs']} of {args.replay} runs, "
                      f"{summary['replay_5pct_rows_detected']} of {summary['replay_rows']} rows (median "
                      f"{summary['replay_5pct_median_rounds']:.0f} rounds); unchanged: "
                      f"{summary['replay_aa_flagged_rows']} of {summary['replay_rows']} rows flagged", flush=True)
            print_noise(f"{mode} noise floor (the {len(runs)} runs' rounds pooled)", floor, measured)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
