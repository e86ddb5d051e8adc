"""`virtbench reproduce`: the five studies' experiments in one command, fitted to a time budget.

The plan is data over the shipped suite files: each experiment names a suite, the environments and
cells of it that bear on the studies' findings, and a few *tiers* (scales) from the smallest useful
one up to the suite's own, each with an estimate. The planner keeps what this machine can reach
(KVM or only TCG, a cluster, a kernel NFS client, SSH hosts of an inventory, a cloud), drops what
the budget cannot hold (last in priority first), then raises experiments to larger tiers while the
budget allows. Every choice is said in the plan ("scaled", "left out: why").

One reproduce run is a run in the store (spec kind "reproduce") whose attempts are its experiments:
each names the child run (an ordinary workload or boot run) that holds the measurements, with the
estimate and the time it really took. `--resume` continues the interrupted child and the
experiments not yet done. The scorecard (studies/) is computed from the children's samples.

Estimates (reproduce/times.py): the median of a tier's recorded times on this machine, else the plan
of the child run it would start plus that run's start-up, else the tier's prior (measured on this
2-core machine while four other developers worked on it, load 8-15); at run time they follow how far
the experiments so far ran over or under theirs.

The experiments themselves are data in reproduce/experiments.py, the machine's facts (and the CPU
probe) in reproduce/facts.py, the child runs' matrices and boot grids in reproduce/matrix.py; this
module plans and runs them.
"""

from __future__ import annotations

import json
import math
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..errors import UserError
from .experiments import CLOUD_ENV, EXPERIMENTS, LEFT_OUT_ALWAYS, REMOTE_ENV, in_priority
from ..studies import chosen, codeversion, studyfile
from ..studies.model import Experiment, Study, Tier
from .facts import cpu_probe, load_1m
from .matrix import boot_grid, matrix_for
from .testbed import registered
from .times import Estimator, estimate, load_history, record_history, timing_key
from ..store import Store

STUDY_IDS = ("000", "001", "002", "003", "004")
RESERVE = 0.08          # of the budget, kept for planning, teardown between children and the report
MIN_RESERVE_S = 60.0
BOOT_TIMEOUT = 300.0  # seconds one instance may take to be ready (boot's own default: 600)


# -- the plan ------------------------------------------------------------------------------------------

@dataclass
class Step:
    exp: Experiment
    tier: int | None            # index into exp.tiers; None: left out
    estimate_s: float = 0.0
    why: str = ""               # left out: why; else what was scaled
    envs: tuple[str, ...] = ()
    platforms: str = ""         # where beyond this machine it runs (SSH hosts, a cloud), or why not

    def as_dict(self) -> dict[str, Any]:
        t = self.exp.tiers[self.tier] if self.tier is not None else None
        return {"id": self.exp.id, "study": self.exp.study, "title": self.exp.title, "suite": self.exp.suite,
                "kind": "boot" if self.exp.boot else "run", "environments": list(self.envs),
                "tier": self.tier, "tiers": len(self.exp.tiers), "scale": t.label if t else None,
                "estimate_s": round(self.estimate_s, 1) if t else None, "left_out": None if t else self.why,
                "platforms": self.platforms, "note": self.exp.note}


def plan(budget_s: float, facts: dict[str, Any], *, studies: list[str] | None = None,
         history: dict | None = None, store=None, own: list[Study] | None = None) -> list[Step]:
    """Fit the chosen studies' experiments into the budget (pure when facts and history are given;
    `store`: where the child plans read earlier samples, None: the workloads' models only; `own`:
    study files a user wrote, planned instead of the built-in studies)."""
    est = Estimator(load_history() if history is None else history, facts.get("probe_s"), store)
    steps: list[Step] = []
    for exp in (in_priority(own) if own else EXPERIMENTS):
        if studies and exp.study not in studies:
            continue
        step = Step(exp, 0, envs=envs_for(exp, facts), platforms=_platform_note(exp, facts))
        missing = _missing(exp, facts)
        if missing:
            step.tier, step.why = None, missing
        else:
            step.estimate_s = est(exp, 0, step.envs)
        steps.append(step)
    room = budget_s - max(budget_s * RESERVE, MIN_RESERVE_S)

    def used() -> float:
        return sum(s.estimate_s for s in steps if s.tier is not None)

    # Too much even at the smallest scale: leave out from the end of the priority order.
    for s in reversed(steps):
        if used() <= room:
            break
        if s.tier is not None:
            s.why = (f"the budget ({budget_s / 60:.0f} min) cannot hold it: about {s.estimate_s:.0f} s at its "
                     f"smallest scale; give a larger --budget")
            s.tier, s.estimate_s = None, 0.0
    # Room left: raise experiments to their next scale, in priority order, while it fits; once every
    # kept one is at its largest scale, to their extra tiers (more repetitions) the same way.
    for extra in (False, True):
        kept = [s for s in steps if s.tier is not None]
        if extra and any(s.tier < s.exp.top for s in kept):
            break
        raised = True
        while raised:
            raised = False
            for s in kept:
                if s.tier + 1 >= (len(s.exp.tiers) if extra else s.exp.top + 1):
                    continue
                nxt = est(s.exp, s.tier + 1, s.envs)
                if used() - s.estimate_s + nxt <= room:
                    s.tier, s.estimate_s, raised = s.tier + 1, nxt, True
    return steps


def _missing(exp: Experiment, facts: dict[str, Any]) -> str | None:
    for need in exp.needs:
        if need == "kvm" and facts.get("accelerator") != "kvm":
            acc = facts.get("accelerator")
            return ("needs hardware virtualization: QEMU has only TCG (emulation) here" if acc == "tcg" else
                    f"needs hardware virtualization: no VM can start here ({facts.get('accelerator_detail')})")
        if need == "cluster" and not facts.get("cluster"):
            if facts.get("testbed_up"):
                return (f"no cluster given, but the testbed cluster is up here: add --kubeconfig "
                        f"{facts['testbed_up']} or --testbed")
            return ("no cluster: give --kubeconfig of a Kubernetes cluster, or --testbed to start the testbed "
                    "cluster on this machine for the run (virtbench testbed k8s up)")
        if need == "nfs" and not facts.get("nfs"):
            return ("no NFS client here: the host and pod NFS ways cannot mount the export"
                    + (f" ({facts['nfs_detail']})" if facts.get("nfs_detail") else ""))
        if need == "cloud" and not facts.get("cloud"):
            return "needs a cloud's settings: give --cloud KEY=VALUE (endpoint, image or images, ...)"
    return None




def envs_for(exp: Experiment, facts: dict[str, Any]) -> tuple[str, ...]:
    if exp.boot:
        return exp.envs or ("vm",)
    envs = exp.envs + (exp.kvm_envs if facts.get("accelerator") == "kvm" else ())
    if exp.remote_like and _remote_missing(exp, facts) is None:
        envs += (REMOTE_ENV,)
    if exp.remote_like and facts.get("cloud"):
        envs += (CLOUD_ENV,)
    return envs


def _remote_missing(exp: Experiment, facts: dict[str, Any]) -> str | None:
    """Why an experiment that would also run on SSH hosts does not (None: it does)."""
    hosts = facts.get("hosts") or []
    if not hosts:
        return "not on SSH hosts: no --inventory"
    if len(hosts) < exp.remote_hosts:
        return (f"not on SSH hosts: it needs {exp.remote_hosts} hosts (one instance each), the inventory gives "
                f"{len(hosts)} ({', '.join(hosts)})")
    return None


def _platform_note(exp: Experiment, facts: dict[str, Any]) -> str:
    """Where the experiment runs beyond this machine, or why not: said in the plan."""
    cloud = facts.get("cloud")
    on_cloud = (f"{CLOUD_ENV} = instances of {cloud['backend']} ({cloud['region']})"
                + (": a local EC2-compatible server, not a cloud" if cloud.get("emulated") else "")) if cloud else ""
    if exp.boot and CLOUD_ENV in exp.envs:
        return on_cloud
    if not exp.remote_like:
        return ""
    hosts = _remote_missing(exp, facts) or f"{REMOTE_ENV} = SSH hosts {', '.join(facts['hosts'])}"
    return "; ".join(x for x in (hosts, on_cloud or "not on a cloud: no --cloud") if x)


def experiments_of(spec: dict[str, Any]) -> tuple[Experiment, ...]:
    """The experiments a stored reproduce run was planned with: those of the study files it recorded
    (so a resumed run keeps the tiers its plan's indexes point at, whatever the files say now), and
    the built-in ones for a run stored before files were recorded."""
    current = {s.id: s.sha256 for s in studyfile.builtin()}
    changed = [f for f in spec.get("study_files") or []
               if not (f["builtin"] and current.get(f["id"]) == f["sha256"])]
    if not changed:  # the built-in files as they are now: the experiments planned with
        return EXPERIMENTS
    recorded = in_priority(chosen.from_spec({**spec, "study_files": changed}))
    ids = {e.id for e in recorded}
    return recorded + tuple(e for e in EXPERIMENTS if e.id not in ids)


def left_out_always(studies: list[str] | None, own: list[Study] | None = None) -> dict[str, str]:
    if own:
        return {k: v for s in own for k, v in s.left_out.items()}
    return {k: v for k, v in LEFT_OUT_ALWAYS.items() if not studies or k[:3] in studies}


# -- running -------------------------------------------------------------------------------------------

class Events:
    """Progress callbacks; the CLI prints them. Default: silent."""

    def step(self, index: int, total: int, step: Step, message: str) -> None: ...
    def runner_events(self):  # events for the child runner (a runner.Events), or None
        return None


def spec_for(steps: list[Step], budget_s: float, facts: dict[str, Any], studies: list[str] | None,
             kubeconfig: str | None, pods_image: str, *, inventory: str | None = None,
             hosts: str = "all", cloud: dict[str, Any] | None = None, own: list[Study] | None = None) -> dict[str, Any]:
    """The reproduce run as stored: its plan, the study files it plans and scores with (their texts
    and hashes: what the scorecard was pre-registered as) and the version of the scoring code."""
    files = own or [s for s in studyfile.builtin() if not studies or s.id in studies]
    return {"kind": "reproduce", "name": "reproduce", "path": None, "baseline": "host", "environments": [],
            "cells": [], "policy": {}, "budget_s": budget_s,
            "studies": [s.id for s in own] if own else studies or list(STUDY_IDS), "study_files": chosen.record(files),
            "scoring": codeversion.current(),
            "facts": facts, "plan": [s.as_dict() for s in steps], "left_out": left_out_always(studies, own),
            "kubeconfig": kubeconfig, "pods_image": pods_image, "inventory": inventory, "hosts": hosts,
            "cloud": cloud}


def experiments_done(store: Store, run_id: str) -> dict[str, dict[str, Any]]:
    """The latest record of each experiment of a reproduce run: status, child run, estimate, actual."""
    out: dict[str, dict[str, Any]] = {}
    for a in store.attempts(run_id):
        if a["workload"] != "reproduce":
            continue
        try:
            raw = json.loads(a["raw_output"] or "{}")
        except ValueError:
            raw = {}
        out[a["cell_key"]] = {"status": a["status"], "reason": a["reason"], "started": a["started_at"],
                              "ended": a["ended_at"], **raw}
    return out


def shortfall(done: dict[str, dict[str, Any]]) -> str | None:
    """What a finished reproduce run lacks, in words ("2 of 9 experiments failed"), or None: an
    experiment failed, or ran with cells that failed; skipped ones do not count (as exit_code)."""
    ran = [d for d in done.values() if d["status"] in ("ok", "failed")]
    failed = [d for d in ran if d["status"] == "failed" or d.get("reason")]
    if not failed:
        return None
    if len(failed) == len(ran) and not any(d["status"] == "ok" for d in ran):
        return "no experiment succeeded"
    return f"{len(failed)} of {len(ran)} experiments failed"


class Reproducer:
    def __init__(self, store: Store, *, events: Events | None = None, command: str = "",
                 clock: Callable[[], float] = time.time):
        self.store = store
        self.events = events or Events()
        self.command = command
        self.clock = clock
        self.run_id: str | None = None

    def start(self, budget_s: float, studies: list[str] | None, facts: dict[str, Any], *,
              kubeconfig: str | None = None, pods_image: str = "", inventory: str | None = None,
              hosts: str = "all", cloud: dict[str, Any] | None = None, own: list[Study] | None = None) -> str:
        steps = plan(budget_s, facts, studies=studies, store=self.store, own=own)
        spec = spec_for(steps, budget_s, facts, studies, kubeconfig, pods_image, inventory=inventory, hosts=hosts,
                        cloud=cloud, own=own)
        self.run_id = self.store.create_run(spec, suite_name="reproduce", suite_path=None, baseline="host",
                                            command=self.command)
        self._execute(spec, self.clock())
        return self.run_id

    def resume(self, run_id: str) -> str:
        run = self.store.run(run_id)
        if run["spec"].get("kind") != "reproduce":
            raise UserError(f"run {run['id']} is not a reproduce run", f"resume it with: virtbench run --resume {run['id']}{self.store.db_option}")
        done = experiments_done(self.store, run["id"])
        # A completed run is resumed only to run its failed experiments again (skipped ones stay skipped).
        if run["status"] == "completed" and not any(d["status"] == "failed" for d in done.values()):
            raise UserError(f"reproduce run {run['id']} already completed and none of its experiments failed",
                            "start a new one")
        self.run_id = run["id"]
        self.store.set_status(self.run_id, "running")
        # The budget restarts from what the finished experiments used.
        used = sum((d["ended"] or 0) - (d["started"] or 0) for d in done.values() if d["status"] == "ok")
        self._execute(run["spec"], self.clock() - used)
        return self.run_id

    def _execute(self, spec: dict[str, Any], started: float) -> None:
        # --testbed: the cluster this run started is stopped when it ends, so resuming starts it again
        testbed = " --testbed" if (spec.get("facts") or {}).get("testbed") else ""
        with self.store.recording_status(self.run_id, f"virtbench reproduce --resume {self.run_id}"
                                                      f"{self.store.db_option}{testbed}"), \
                registered(spec.get("kubeconfig"), self.run_id, str(self.store.url)):
            self._steps(spec, started + spec["budget_s"] - MIN_RESERVE_S / 2)
        # completed, and what it lacks (`virtbench runs`), as `run` notes its cells without results
        self.store.set_status(self.run_id, "completed", shortfall(experiments_done(self.store, self.run_id)))

    def _steps(self, spec: dict[str, Any], deadline: float) -> None:
        by_id = {e.id: e for e in experiments_of(spec)}
        steps = [p for p in spec["plan"] if p["tier"] is not None]
        done = experiments_done(self.store, self.run_id)
        slowdown = 1.0  # actual / estimated of the experiments run so far: the estimates of the rest follow it
        # extra tiers (more repetitions) only where the plan had every experiment at its largest scale
        extras = all(p["tier"] >= by_id[p["id"]].top for p in steps)
        for i, p in enumerate(steps):
            exp = by_id[p["id"]]
            prev = done.get(exp.id, {})
            if prev.get("status") in ("ok", "skipped"):
                continue
            times = Estimator(load_history(), cpu_probe(), self.store)
            envs = tuple(p["environments"])

            def est_of(t: int) -> float:
                return times(exp, t, envs) * slowdown

            left = deadline - self.clock()
            later = sum(q["estimate_s"] for q in steps[i + 1:]
                        if done.get(q["id"], {}).get("status") not in ("ok", "skipped")) * slowdown
            tier_i = p["tier"]
            # Ahead of the plan: a larger scale while the rest still fits; behind it: a smaller one.
            while tier_i + 1 < (len(exp.tiers) if extras else exp.top + 1) and est_of(tier_i + 1) + later <= left:
                tier_i += 1
            while est_of(tier_i) + later > left and tier_i > 0:
                tier_i -= 1
            est = est_of(tier_i)
            step = Step(exp, tier_i, est, envs=envs)
            if est > left:
                why = (f"left out at run time: {max(left, 0):.0f} s of the budget were left, it needs about "
                       f"{est:.0f} s")
                self._record(exp, tier_i, "skipped", self.clock(), self.clock(), why, {"estimate_s": round(est, 1)})
                self.events.step(i, len(steps), step, f"skipped: {why}")
                continue
            self.events.step(i, len(steps), step, f"about {est:.0f} s: {exp.tiers[tier_i].label}")
            t0 = self.clock()
            child, status, reason = self._run_child(exp, exp.tiers[tier_i], step.envs, spec, prev)
            t1 = self.clock()
            self._record(exp, tier_i, status, t0, t1, reason, {"child": child, "estimate_s": round(est, 1),
                                                              "actual_s": round(t1 - t0, 1), "load_1m": load_1m()})
            if status == "ok":
                key, prior_scale = timing_key(exp, envs)
                record_history(key, exp.tiers[tier_i], t1 - t0, load_1m(), cpu_probe(), prior_scale=prior_scale)
                ratio = (t1 - t0) / max(est / slowdown, 1.0)
                slowdown = min(3.0, max(0.5, (slowdown + ratio) / 2))
            self.events.step(i, len(steps), step, f"{status} in {t1 - t0:.0f} s" + (f": {reason}" if reason else ""))

    def _run_child(self, exp: Experiment, tier: Tier, envs: tuple[str, ...], spec: dict[str, Any],
                   prev: dict[str, Any]) -> tuple[str | None, str, str | None]:
        """Run (or resume) one experiment's child run; a failure is data: (child id, status, reason)."""
        from ..run.boot import BootRunner
        from ..run.runner import Runner

        command = f"virtbench reproduce (run {self.run_id}, experiment {exp.id})"
        runner = None
        try:
            if exp.boot:
                runner = BootRunner(self.store, boot_grid(exp, tier, spec.get("cloud")), command=command,
                                    timeout=BOOT_TIMEOUT, inventory=spec.get("inventory"))
                return runner.run(), "ok", None
            kube = spec.get("kubeconfig")
            if kube:
                os.environ["KUBECONFIG"] = kube
            child_prev = prev.get("child")
            if child_prev and self.store.run(child_prev)["status"] != "completed":
                runner = Runner(self.store, None, events=self.events.runner_events(), command=command)
                return self._outcome(runner.resume(child_prev))
            matrix = matrix_for(exp, tier, envs, kubeconfig=kube, pods_image=spec.get("pods_image", ""),
                                inventory=spec.get("inventory"), hosts=spec.get("hosts") or "all",
                                cloud=spec.get("cloud"))
            runner = Runner(self.store, matrix, events=self.events.runner_events(), command=command)
            return self._outcome(runner.start())
        except KeyboardInterrupt:
            child = getattr(runner, "run_id", None)
            self._record(exp, exp.tiers.index(tier), "failed", self.clock(), self.clock(), "interrupted",
                         {"child": child})
            raise
        except Exception as exc:  # recorded as data; the other experiments go on
            child = getattr(runner, "run_id", None)
            text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            return child, "failed", f"{type(exc).__name__}: {text}"

    def _outcome(self, child: str) -> tuple[str, str, str | None]:
        """A child run that ended is "ok" when every cell has results; "failed" when none has (as
        `run`'s exit 4), naming the first cell's reason; "ok" with the failed cells named otherwise."""
        from ..run.outcomes import cell_outcomes

        out = cell_outcomes(self.store, child)
        missing = out["failed"] + out["not_run"]
        if not missing:
            return child, "ok", None
        first = f"{missing[0]['workload']} on {missing[0]['environment']}: {missing[0]['reason']}"
        if out["with_results"] == 0:
            return child, "failed", f"no cell has results ({first})"
        return child, "ok", f"{len(missing)} of {out['cells'] - out['skipped']} cells failed ({first})"

    def _record(self, exp: Experiment, tier_i: int, status: str, t0: float, t1: float, reason: str | None,
                raw: dict[str, Any]) -> None:
        cell = {"key": exp.id, "workload": "reproduce", "params": {"tier": tier_i, "scale": exp.tiers[tier_i].label},
                "condition": {}}
        self.store.record_attempt(self.run_id, cell, "reproduce", 0, warmup=False, status=status, started=t0,
                                  ended=t1, reason=reason, raw=json.dumps({"tier": tier_i, **raw}))


def parse_budget(text: str) -> float:
    """'30m', '1h', '90s', '1h30m' or a number of minutes -> seconds."""
    import re

    t = text.strip().lower()
    if re.fullmatch(r"[0-9.]+", t):
        return float(t) * 60
    parts = re.findall(r"([0-9.]+)\s*(h|m|min|s)", t)
    if not parts or "".join(a + b for a, b in parts) != t.replace(" ", ""):
        raise UserError(f"--budget {text!r} is not a duration", "use e.g. 30m, 1h, 1h30m or 90s")
    secs = sum(float(n) * {"h": 3600, "m": 60, "min": 60, "s": 1}[u] for n, u in parts)
    if not math.isfinite(secs) or secs <= 0:
        raise UserError(f"--budget {text!r} must be positive")
    return secs
