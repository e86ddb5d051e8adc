"""The runner: expand -> provision -> warm up -> lockstep rounds -> adaptive stop -> teardown.

A cell's environments run in rounds (A B C, then B C A, ...): every environment still in the cell
takes one repetition per round, none runs rounds alone, and the round index is stored with each
attempt (its `repetition`) and sample (metadata `round`) so the analysis pairs each environment
with the baseline of the same round. A failed attempt leaves a hole in its round. The cell stops
when the ratio to the baseline of every other environment is within `ci_target`, or at the limits.
The rounds' bookkeeping (Tally, the counts rebuilt on resume or retry) and that stop rule are in
run/rounds.py (Runner's base, Rounds); this module runs the rounds.

Every attempt (ok or failed) and its samples are committed as soon as they exist. Teardown always
happens: on success, on errors, on Ctrl-C and on SIGTERM. An interrupted run resumes by id.
"""

from __future__ import annotations

import json
import os
import re
import time
import traceback
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .. import conditions, drivers, machines, monitor, procs, sysinfo, workloads
from . import cpugiven, estimates, outcomes
from ..conditions import Applied
from ..drivers.base import Instance
from ..errors import ConditionUnavailable, UserError, WorkloadFailed
from ..model import EnvSpec
from .progress import Outlook, attempt_seconds
from .rounds import GIVE_UP_AFTER, Rounds, Tally
from .session import Session
from ..store import Store
from ..suite import Matrix, cell_environments
from ..workloads.base import RunContext

# warmup = "auto": warm-up runs go on until two in a row agree within WARMUP_STEADY on every value
# (caches, page cache, CPU frequency and the container's or VM's first-touch costs have settled),
# at most WARMUP_MAX: a calibration of how much warm-up this cell needs instead of a guess.
WARMUP_STEADY = 0.05
WARMUP_MAX = 5


def steady(before: dict, now: dict, tolerance: float = WARMUP_STEADY) -> bool:
    """Two runs' values (by metric and series point) agree within `tolerance` of the earlier one."""
    return before.keys() == now.keys() and all(
        abs(now[k] - before[k]) <= tolerance * abs(before[k]) for k in now)


class Events:
    """Progress callbacks; the CLI shows them as a progress bar. Default: silent."""

    def planned(self, outlook: Outlook) -> None: ...  # the runner keeps it up to date (run/progress.py)
    def provisioning(self, env: str, role: str, count: int) -> None: ...
    def attempt(self, cell: dict, env: str, repetition: int, warmup: bool, status: str, reason: str | None) -> None: ...
    def note(self, message: str) -> None: ...


@dataclass
class _EnvState:
    env: EnvSpec
    driver: drivers.Driver
    pool: dict[str, list[Instance]] = field(default_factory=lambda: defaultdict(list))
    instance_rows: dict[str, int] = field(default_factory=dict)
    facts_saved: bool = False
    # The conditions in force, kept across repetitions of one cell: (key, Applied).
    applied_key: str | None = None
    applied: Applied | None = None


class Runner(Rounds):
    def __init__(self, store: Store, matrix: Matrix | None, *, events: Events | None = None, command: str = "",
                 clock: Callable[[], float] = time.monotonic):
        self.store = store
        self.matrix = matrix
        self.events = events or Events()
        self.command = command
        self.clock = clock
        self.run_id: str | None = None
        self.session: Session | None = None  # while it executes: its machines, drivers, sweeps
        # cell key -> what its rounds add to make their stored repetition number (a retry's rounds
        # come after the stored ones)
        self._round_offset: dict[str, int] = {}
        self._monitor_notes: set[str] = set()  # each monitoring problem is reported once per run
        self.outlook = Outlook()  # attempts done and still to come, for the progress bar (run/progress.py)

    # -- entry points ------------------------------------------------------------------------
    def start(self) -> str:
        self._check_capacity()
        self.run_id = self.store.create_run(self.matrix.to_spec(), suite_name=self.matrix.name,
                                            suite_path=self.matrix.path, baseline=self.matrix.baseline,
                                            command=self.command)
        self._execute({})
        return self.run_id

    def resume(self, run_id: str, *, retry_failed: bool = False) -> str:
        """Continue a stored run: its matrix comes from the store, its counts from its attempts.
        retry_failed: run again, in the same run, only the cells without results of a finished run."""
        run = self.store.run(run_id)
        self.matrix = Matrix.from_spec(run["spec"])
        self.run_id = run["id"]
        if retry_failed:
            if run["status"] == "running":
                raise UserError(f"run {run['id']} is still running (or was killed without a trace)",
                                f"wait for it to end; a killed run: virtbench run --resume RUN_ID{self.store.db_option}")
            if run["status"] == "interrupted":  # its unfinished cells would stay unfinished
                raise UserError(f"run {run['id']} was interrupted: finish it first",
                                f"virtbench run --resume {run['id']}{self.store.db_option}, then --retry-failed "
                                "for what still failed")
            failed = outcomes.failed_keys(outcomes.cell_outcomes(self.store, self.run_id))
            if not failed:
                raise UserError(f"run {run['id']} has no failed cells: every cell has results (or was skipped)",
                                "nothing to retry")
            tallies, next_round = self._retry_tallies(failed)
            what = f"retrying {len(failed)} failed cell(s)"
        else:
            if run["status"] == "completed":
                raise UserError(f"run {run['id']} already completed", "start a new run instead, or rerun its "
                                f"failed cells with: virtbench run --resume {run['id']} --retry-failed"
                                f"{self.store.db_option}")
            tallies, next_round = self._tallies_from_store()
            # An environment that gave up (its host went away, say) gets a new chance: its cell runs
            # again with all its environments in fresh rounds, as --retry-failed does, since a
            # resumed cell's round limit may already be spent by the environments that went on.
            gave_up = {cell for (cell, _), t in tallies.items() if t.stop_reason.startswith("gave up")}
            self._fresh_rounds(tallies, next_round, gave_up)
            what = "resumed" + (f"; {len(gave_up)} cell(s) whose environment gave up run again" if gave_up else "")
        self.store.add_event(self.run_id, "retry-failed" if retry_failed else "resumed", what)
        self.store.set_status(self.run_id, "running")
        self._execute(tallies, next_round)
        return self.run_id

    def _check_capacity(self) -> None:
        """Cells that cannot fit an environment (shape or machine) are refused before anything starts.
        Workloads that know their needs override check_capacity(params, env) -> [problem, ...]."""
        problems: list[str] = []
        for cell in self.matrix.cells:
            check = workloads.get(cell["workload"]).check_capacity
            here = cell_environments(cell, [e.name for e in self.matrix.environments])
            for env in [e for e in self.matrix.environments if e.name in here]:
                where = ", ".join(f"{k}={v}" for k, v in cell["params"].items())
                problems += [f"{cell['workload']} ({where}) on {env.name}: {p}" for p in check(cell["params"], env)]
        if problems:
            raise UserError("the run does not fit this machine:\n  " + "\n  ".join(dict.fromkeys(problems)),
                            "use fewer ranks or instances, a smaller class or dataset, or a bigger shape")

    # -- the loop ----------------------------------------------------------------------------
    def _execute(self, tallies: dict[tuple[str, str], Tally], next_round: dict[str, int] | None = None) -> None:
        states: dict[str, _EnvState] = {}
        with Session(self.run_id, inventory=self.matrix.inventory, store=self.store, note=self.events.note,
                     environments=self.matrix.environments) as session:
            self.session, self.machines = session, session.machines
            try:
                with self.store.recording_status(self.run_id,
                                                 f"virtbench run --resume {self.run_id}{self.store.db_option}"), \
                        procs.sigterm_as_interrupt():
                    states = self._prepare_envs(session)
                    self._loop(states, tallies, next_round)
                # completed, and what it lacks: `virtbench runs` must not call a run without results complete
                self.store.set_status(self.run_id, "completed",
                                      outcomes.shortfall(outcomes.cell_outcomes(self.store, self.run_id)))
            finally:
                self._teardown(states)

    def _prepare_envs(self, session: Session) -> dict[str, _EnvState]:
        states, problems, made = {}, [], {}
        for env in self.matrix.environments:
            name = drivers.resolve(env.driver, env.options)  # pods: kube-play or kubernetes
            if name not in made:
                made[name] = session.driver(env.driver, env.options)
                problems += [f"{env.name}: {p.what} (fix: {p.fix})" for p in made[name].check(env)]
            problems += [f"{env.name}: {p.what} (fix: {p.fix})" for p in made[name].check_env(env)]
            states[env.name] = _EnvState(env, made[name])
        session.sweep()  # this machine; the others when first used (machines/ledger.py)
        if problems:
            raise UserError("cannot run these environments:\n  " + "\n  ".join(problems),
                            "fix the problems above, or leave those environments out with --envs")
        for env in self.matrix.environments:  # what each will create, before anything is (cost guard)
            for line in states[env.name].driver.plan(env, self._peak_instances(env.name)):
                self.events.note(line)
        return states

    def _peak_instances(self, env: str) -> int:
        """Most instances an environment can hold at once: per role, the most any cell asks for
        (pools are kept across cells)."""
        peak: dict[str, int] = defaultdict(int)
        all_envs = [e.name for e in self.matrix.environments]
        for c in self.matrix.cells:
            if env in cell_environments(c, all_envs):
                for role, count in workloads.get(c["workload"]).roles(c["params"]).items():
                    peak[role] = max(peak[role], count)
        return sum(peak.values())

    def _loop(self, states: dict[str, _EnvState], tallies: dict[tuple[str, str], Tally],
              next_round: dict[str, int] | None = None) -> None:
        policy = self.matrix.policy
        all_envs = [e.name for e in self.matrix.environments]
        cells = self.matrix.cells
        next_round = next_round or {}
        self._verdict_minimum(policy)
        self._load_before = _load()
        if self._load_before is not None and self._load_before >= 0.5 * (os.cpu_count() or 1):
            self.events.note(f"busy machine: load average {self._load_before:.2f} on {os.cpu_count()} cores before "
                             "the run; other programs compete for the CPU (the results say so)")
        self.outlook = self._outlook(tallies, next_round)
        self.events.planned(self.outlook)
        started = self.clock()
        for index, cell in enumerate(cells):
            wl = workloads.get(cell["workload"])
            timeout = policy.timeout or wl.timeout(cell["params"])
            envs = cell_environments(cell, all_envs)  # a suite entry may name its environments
            for env in envs:
                tallies.setdefault((cell["key"], env), Tally())
            rnd = next_round.get(cell["key"], 0)
            # A resumed cell that its stop rule already ends (all its rounds were taken before the
            # interruption) stops here: warming it up again would start its instances for nothing.
            if not rnd or not self._stopped(cell, envs, tallies, rnd, started, index, len(cells)):
                for env in envs:  # warm-up: unrecorded in statistics, but the attempt is logged
                    tally = tallies[(cell["key"], env)]
                    if not tally.warmed_up and not tally.finished:
                        self._warm_up(states[env], wl, cell, tally, timeout, policy.warmup)
                    tally.warmed_up = True
            while True:
                if self._stopped(cell, envs, tallies, rnd, started, index, len(cells)):
                    break
                active = [env for env in envs if not tallies[(cell["key"], env)].finished]
                # Lockstep: every environment still in the cell takes this round, A B C starting one
                # further each round, so drift and load hit all alike.
                order = active[rnd % len(active):] + active[:rnd % len(active)]
                for env in order:
                    tally = tallies[(cell["key"], env)]
                    self._attempt(states[env], wl, cell, tally, timeout, warmup=False, round_=rnd)
                    if tally.consecutive_failures >= GIVE_UP_AFTER:  # leaves the rounds; a hole from now on
                        tally.finished, tally.stop_reason = True, f"gave up after {GIVE_UP_AFTER} failures in a row"
                        self.outlook.stopped(cell["key"], env)
                rnd += 1
            self._drop_unneeded(states, cells[index + 1:], envs, all_envs)

    def _stopped(self, cell: dict, envs: list[str], tallies: dict[tuple[str, str], Tally], rnd: int,
                 started: float, index: int, cells: int) -> bool:
        """Whether the cell is over before round `rnd`: no environment still in it, or the stop rule
        ends it (then every environment still in it is marked finished, with the reason)."""
        active = [env for env in envs if not tallies[(cell["key"], env)].finished]
        if not active:
            return True
        reason = self._cell_stop(cell, active, tallies, rnd, self._cell_budget(started, index, cells))
        for env in active if reason else []:
            tallies[(cell["key"], env)].finished = True
            tallies[(cell["key"], env)].stop_reason = reason
            self.outlook.stopped(cell["key"], env)
        return bool(reason)

    def _outlook(self, tallies: dict[tuple[str, str], Tally], next_round: dict[str, int]) -> Outlook:
        """What this invocation is sure to do, per (cell, environment) not yet finished: the warm-ups
        (warmup = "auto": the two that can agree at the earliest) and the rounds up to the first at which
        the cell's stop rule can stop it (plan.earliest_stop), each weighted by its estimated seconds."""
        from . import plan as plan_mod

        policy = self.matrix.policy
        all_envs = [e.name for e in self.matrix.environments]
        specs = {e.name: e for e in self.matrix.environments}
        history = estimates.History(self.store, {c["workload"] for c in self.matrix.cells})
        warm = plan_mod.AUTO_WARMUP[0] if policy.warmup == "auto" else int(policy.warmup)
        out = Outlook()
        for cell in self.matrix.cells:
            first, _ = plan_mod.earliest_stop(self.matrix, cell, policy.min_repetitions, policy.max_repetitions)
            start = next_round.get(cell["key"], 0)
            for env in cell_environments(cell, all_envs):
                tally = tallies.get((cell["key"], env)) or Tally()
                if tally.finished:
                    continue
                rounds = min(policy.max_repetitions - start, max(first - start, policy.min_repetitions - tally.ok))
                out.expect(cell["key"], env, 0 if tally.warmed_up else warm, rounds,
                           attempt_seconds(cell, specs[env], history))
        return out

    def _warm_up(self, state: _EnvState, wl: workloads.Workload, cell: dict, tally: Tally, timeout: float,
                 warmup: int | str) -> None:
        if warmup != "auto":
            for _ in range(int(warmup)):
                self._attempt(state, wl, cell, tally, timeout, warmup=True)
            return
        last: dict | None = None
        for _ in range(WARMUP_MAX):
            found = self._attempt(state, wl, cell, tally, timeout, warmup=True)
            if tally.finished or not found:  # skipped, or failed: the measured repetitions will say why
                return
            now = {(s.metric, json.dumps(s.metadata.get(wl.series_key), sort_keys=True)): s.value for s in found}
            if last is not None and steady(last, now):
                return
            last = now

    def _drop_unneeded(self, states: dict[str, _EnvState], later_cells: list[dict], envs: list[str],
                       all_envs: list[str]) -> None:
        """Tear down the instances of a role no later cell needs in that environment (all of them once
        no later cell runs there): idle instances, a VM under TCG above all, would otherwise share
        the machine with the cells still to come."""
        needed: dict[str, set[str]] = defaultdict(set)
        for c in later_cells:
            roles = workloads.get(c["workload"]).roles(c["params"])
            for env in cell_environments(c, all_envs):
                needed[env].update(roles)
        for env in envs:
            idle = [role for role, pool in states[env].pool.items() if pool and role not in needed[env]]
            if idle:
                self._teardown({env: states[env]}, roles=idle)

    def _attempt(self, state: _EnvState, wl: workloads.Workload, cell: dict, tally: Tally, timeout: float,
                 *, warmup: bool, round_: int = -1) -> list:
        """One run of the cell in one environment, stored; returns its samples (empty if it failed).
        A measured attempt's repetition is its round (warm-ups: -1)."""
        repetition = -1 if warmup else round_ + self._round_offset.get(cell["key"], 0)
        if warmup:
            tally.warmups += 1
        started = time.time()
        raw, found, reason, detail, meta = None, [], None, None, {}
        status_override = None
        watched = None  # the monitor's series and summary samples for this repetition
        try:
            instances = self._instances(state, wl.roles(cell["params"]))
            main = next(iter(instances.values()))[0]
            applied = self._conditions(state, cell, instances)
            meta = {**main.metadata(), "repetition": repetition, **self._machines_meta(instances),
                    **({} if warmup else {"round": repetition}),  # the stored round: analysis pairs by it
                    "load_1m": _load(), "load_before_run": getattr(self, "_load_before", None),
                    "cores_here": os.cpu_count(),  # this machine's load: busy-machine detection
                    "warmups": tally.warmups}
            if applied.metadata:
                meta["condition"] = dict(applied.metadata)
            ctx = RunContext(timeout=timeout, condition=cell["condition"], repetition=repetition, applied=applied)
            session = None
            try:  # whatever is interrupted after the samplers start, they are stopped (and their directory removed)
                session = self._monitor_start(state, instances, timeout)
                given = _cpu_snapshot(self._own_markers())
                try:
                    raw = wl.execute(instances, cell["params"], ctx)
                finally:
                    meta["cpu_given"] = cpugiven.between(given, _cpu_snapshot(self._own_markers()))
            finally:
                watched = self._monitor_stop(session, ctx)
            found = wl.parse(raw, cell["params"])
            if not found:
                raise ValueError("the workload produced no samples")
        except KeyboardInterrupt:
            raise
        except WorkloadFailed as exc:
            reason, detail = exc.reason, exc.detail
        except ConditionUnavailable as exc:
            status_override, reason = "skipped", f"condition not available here: {exc}"
        except UserError as exc:
            reason = str(exc)
        except ValueError as exc:
            reason = f"could not read the workload's output: {exc}"
        except Exception as exc:  # a bug or an unexpected fault: data, not a crash
            reason, detail = f"{type(exc).__name__}: {exc}", traceback.format_exc()
        status = status_override or ("failed" if reason else "ok")
        self.store.record_attempt(self.run_id, cell, state.env.name, repetition, warmup=warmup, status=status,
                                  started=started, ended=time.time(), reason=reason, detail=detail, raw=raw,
                                  samples_=found + (watched.samples if watched and status == "ok" else []),
                                  sample_metadata=meta, timeseries_=watched.rows if watched else None)
        self.outlook.attempt(cell["key"], state.env.name, warmup)
        if status == "skipped":  # a skip is final, also when the warm-up finds it
            tally.finished, tally.stop_reason = True, reason
            self.outlook.stopped(cell["key"], state.env.name)
        elif not warmup:
            tally.attempts += 1
            if status == "ok":
                tally.ok += 1
                tally.consecutive_failures = 0
                series = wl.series_key  # one CI per series point (e.g. message size)
                for s in found:
                    tally.values[(s.metric, s.metadata.get(series)) if series else s.metric][round_].append(s.value)
            else:
                tally.consecutive_failures += 1
        self.events.attempt(cell, state.env.name, repetition, warmup, status, reason)
        if status != "ok":
            self._drop_dead(state)
        return found if status == "ok" else []

    def _own_markers(self) -> tuple[str, ...]:
        """Command-line strings that mark a process as this run's (cpugiven): the run id (work
        directories, VM run directories) and the container driver's name prefix, whose conmon is
        not our child (drivers/container/driver.py _name)."""
        short = re.sub(r"[^a-zA-Z0-9]", "", self.run_id or "")[-8:] or "run"
        return (self.run_id or "", f"vb-{short}-")

    def _machines_meta(self, instances: dict[str, list[Instance]]) -> dict[str, Any]:
        """`machines`: the names of the machines the instances ran on, with kernel and CPU of each."""
        seen: dict[str, Any] = {}
        for pool in instances.values():
            for inst in pool:
                if inst.machine.name not in seen:
                    seen[inst.machine.name] = inst.machine
        out: dict[str, Any] = {"machines": list(seen)}
        # pods on a cluster ran on its nodes; their Machine is the one that drives them (drivers/pods/kubernetes_driver.py)
        nodes = sorted({n for pool in instances.values() for inst in pool if (n := inst.node)})
        if nodes:
            out["pod_nodes"] = nodes
        try:
            out["machine_facts"] = {n: {k: v for k, v in m.describe().items() if k != "name"}
                                    for n, m in seen.items()}
        except Exception as exc:  # facts are a record, never a reason to fail a repetition
            out["machine_facts_error"] = str(exc)
        return out

    # -- monitoring --------------------------------------------------------------------------
    # Summary samples carry metadata monitor=true and never enter tally.values: the stopping rule
    # looks at the workload's own metrics only.
    def _monitor_start(self, state: _EnvState, instances: dict[str, list[Instance]],
                       timeout: float) -> monitor.Session | None:
        policy = self.matrix.policy
        if not getattr(policy, "monitor", True):
            return None
        try:
            return monitor.Session.start(instances, environment=state.env.name,
                                         interval=getattr(policy, "monitor_interval", 1.0), lifetime=timeout)
        except Exception as exc:  # monitoring never fails a repetition
            self.events.note(f"monitor: not started: {type(exc).__name__}: {exc}")
            return None

    def _monitor_stop(self, session: monitor.Session | None, ctx: RunContext) -> monitor.Result | None:
        if session is None:
            return None
        try:
            # A workload may set ctx.measure_window = (t0, t1): summaries then cover only that part.
            result = session.stop(getattr(ctx, "measure_window", None))
        except Exception as exc:  # monitoring never fails a repetition
            result = monitor.Result(notes=[f"monitor: {type(exc).__name__}: {exc}"])
        for note in result.notes:
            if note not in self._monitor_notes:
                self._monitor_notes.add(note)
                self.events.note(note)
        return result

    # -- instances ---------------------------------------------------------------------------
    def _instances(self, state: _EnvState, roles: dict[str, int]) -> dict[str, list[Instance]]:
        out = {}
        for role, count in roles.items():
            pool = state.pool[role]
            missing = count - len(pool)
            if missing > 0:
                self.events.provisioning(state.env.name, role, missing)
                for inst in state.driver.provision(state.env, missing, role):
                    pool.append(inst)
                    state.instance_rows[inst.name] = self.store.save_instance(
                        self.run_id, state.env.name, inst.name, role, inst.lifecycle, inst.metadata())
                self.session.report_removed(self.machines.take())
            out[role] = pool[:count]
        if not state.facts_saved:
            first = next(iter(out.values()))[0]
            facts = {**sysinfo.collect(first), **first.metadata(), **self._machines_meta(out)}
            self.store.save_environment(self.run_id, state.env.name, state.env.driver, state.env.as_dict(), facts)
            state.facts_saved = True
        return out

    def _conditions(self, state: _EnvState, cell: dict, instances: dict[str, list[Instance]]) -> Applied:
        """Apply the cell's conditions once and keep them while the cell and its instances stay."""
        names = sorted(i.name for pool in instances.values() for i in pool)
        key = json.dumps([cell["condition"], names], sort_keys=True)
        if state.applied_key != key:
            self._release_conditions(state)
            state.applied = conditions.apply_all(cell["condition"], instances)
            state.applied_key = key
        return state.applied

    def _release_conditions(self, state: _EnvState) -> None:
        if state.applied is not None:
            for problem in state.applied.close():
                self.events.note(f"undoing a condition in {state.env.name} failed: {problem}")
        state.applied, state.applied_key = None, None

    def _drop_dead(self, state: _EnvState) -> None:
        """After a failure, replace instances that died (killed container, crashed VM)."""
        for role, pool in state.pool.items():
            for inst in list(pool):
                if not inst.alive():
                    self.events.note(f"{inst.name} is gone; a new instance will replace it")
                    self._teardown_one(state, inst)
                    pool.remove(inst)

    def _teardown_one(self, state: _EnvState, inst: Instance) -> None:
        try:
            inst.teardown()
        finally:
            row = state.instance_rows.get(inst.name)
            if row is not None:
                self.store.update_instance(row, inst.lifecycle)

    def _teardown(self, states: dict[str, _EnvState], roles: list[str] | None = None) -> None:
        # Ctrl-C during teardown must not leave half of it undone.
        with procs.interrupts_held():
            for state in states.values():
                self._release_conditions(state)
                for role, pool in state.pool.items():
                    if roles is not None and role not in roles:
                        continue
                    for inst in pool:
                        try:
                            self._teardown_one(state, inst)
                        except Exception as exc:
                            self.events.note(f"teardown of {inst.name} failed: {exc}")
                    pool.clear()


def _cpu_snapshot(markers: tuple[str, ...]) -> cpugiven.Snapshot | None:
    try:
        return cpugiven.snapshot(markers)
    except Exception:  # a record, never a reason to fail a repetition
        return None


def _load() -> float | None:
    """This machine's 1-minute load average (runnable tasks), None where the OS has none."""
    try:
        return round(os.getloadavg()[0], 2)
    except OSError:
        return None
