"""`virtbench run`: the plan, the progress bar, the runner, and the run's exit status."""

from __future__ import annotations

import shlex
import sys
import time

import click
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from .common import DB_HELP, MARGIN_HELP, MARGIN_TYPE, ensure_kernels, inventory_path, parse_params, open_store, err
from .results import show_run
from ..errors import UserError
from ..run.progress import Eta, Outlook, hms
from ..run.runner import Events, Runner
from ..store import Store


class ProgressEvents(Events):
    """Shows a progress bar on stderr while the runner works. The bar's unit is the estimated seconds
    of the attempts (progress.Outlook), so its ETA weighs a VM's attempt as more than a host's; the
    count beside it is attempts done / expected, both growing as the run learns what it will do."""

    def __init__(self, progress: Progress, clock=time.monotonic):
        self.progress = progress
        self.task = progress.add_task("starting", total=None, count="", eta=hms(None))
        self.outlook: Outlook | None = None
        self.clock = clock
        self.eta = Eta()

    def planned(self, outlook: Outlook) -> None:
        self.outlook = outlook
        self._show()

    def _show(self, **fields) -> None:
        o = self.outlook
        if o is None:
            return
        self.eta.add(self.clock(), o.done_seconds)
        self.progress.update(self.task, total=max(o.total_seconds, o.done_seconds), completed=o.done_seconds,
                             count=f"{o.done}/{o.total}", eta=hms(self.eta.left(o.total_seconds)),
                             **fields)

    def provisioning(self, env: str, role: str, count: int) -> None:
        self.progress.update(self.task, description=f"starting {count} {env} instance(s)")

    def attempt(self, cell, env, repetition, warmup, status, reason) -> None:
        params = " ".join(f"{k}={v}" for k, v in cell["params"].items() if k != "duration")
        what = "warm-up" if warmup else f"rep {repetition + 1}"
        self._show(description=f"{cell['workload']} {params} @ {env} {what}")
        if status != "ok":
            label = "[yellow]skipped[/yellow]" if status == "skipped" else "[red]failed[/red]"
            self.progress.console.print(f"{label} {cell['workload']} {params} @ {env} {what}: {reason}",
                                        highlight=False)

    def note(self, message: str) -> None:
        self.progress.console.print(f"[yellow]{message}[/yellow]", highlight=False)


@click.command()
@click.argument("suite", required=False)
@click.option("--workload", "-w", help="run one workload without a suite file (see: virtbench workloads)")
@click.option("--param", "-p", "params", multiple=True, metavar="KEY=VALUE",
              help="workload parameter; a comma list (size=1,2,4) is swept. Repeatable.")
@click.option("--envs", "-e", help="comma list of environments: names from the suite, or DRIVER[:SHAPE][@HOST] "
              "such as host, container:m1.small, container@kvm1 (on an inventory host), ssh (all the "
              "inventory's hosts) or ssh@node01,node02")
@click.option("--baseline", help="environment the others are compared with [default: the suite's, or the first]")
@click.option("--repeat", "-r", type=click.IntRange(1, 10000),
              help="exactly this many repetitions (turns adaptive stopping off)")
@click.option("--duration", "-d", type=click.FloatRange(0.05, 3600), help="seconds per kernel run")
@click.option("--db", help=DB_HELP)
@click.option("--resume", "resume_id", metavar="RUN_ID", help="continue an interrupted run")
@click.option("--retry-failed", is_flag=True,
              help="with --resume: run again only the cells without results of a finished run, in the same run")
@click.option("--yes", "-y", is_flag=True, help="do not ask before a run estimated to take over an hour")
@click.option("--inventory", "-i", "inventory", type=click.Path(dir_okay=False),
              help="Ansible-style inventory (YAML or INI) of SSH hosts: ssh environments and machine=HOST use it")
@click.option("--json", "as_json", is_flag=True, help="print the results as one JSON object on stdout")
@click.option("--margin", type=MARGIN_TYPE, help=MARGIN_HELP.replace("[default: the suite's", "(stored with the run) [default: the suite's"))
def run(suite, workload, params, envs, baseline, repeat, duration, db, resume_id, retry_failed, yes, inventory,
        as_json, margin) -> None:
    """Run a SUITE file (e.g. suites/quick.toml), or one --workload, and print the comparison.

    Before the first repetition it prints the plan (cells x environments x repetitions) and an
    estimate of the time; over an hour, on a terminal, it asks first (--yes does not ask).

    \b
    Exit status:
      0    every cell has results (cells skipped for a condition this machine lacks aside)
      1    not started: the question before a run of over an hour was answered no
      3    some cells failed: the others have results; rerun the failed ones with
           virtbench run --resume RUN_ID --retry-failed
      4    nothing succeeded: no cell has results
      2    a usage or set-up error (nothing was run, or the run stopped; the message says why)
      130  interrupted (Ctrl-C or SIGTERM); everything was torn down, --resume continues
    """
    from ..run import plan as plan_mod
    from .. import suite as suite_mod

    ensure_kernels()
    store = open_store(db)
    env_list = [e.strip() for e in envs.split(",") if e.strip()] if envs else None
    command = "virtbench " + " ".join(shlex.quote(a) for a in sys.argv[1:])
    if retry_failed and not resume_id:
        raise UserError("--retry-failed goes with --resume RUN_ID", "e.g. virtbench run --resume RUN_ID --retry-failed")
    matrix, plan = None, None
    if not resume_id:
        if bool(suite) == bool(workload):
            raise UserError("give either a SUITE file or --workload NAME",
                            "e.g. virtbench run suites/quick.toml, or "
                            "virtbench run --workload system --param test=dhrystone --envs host")
        if suite:
            if params:
                raise UserError("--param goes with --workload; set a suite's parameters in its file")
            matrix = suite_mod.load(suite, envs=env_list, repeat=repeat, duration=duration)
            if baseline:
                if baseline not in [e.name for e in matrix.environments]:
                    raise UserError(f"--baseline {baseline} is not one of the run's environments")
                matrix.baseline = baseline
        else:
            matrix = suite_mod.adhoc(workload, parse_params(params), env_list or ["host"],
                                     repeat=repeat, duration=duration, baseline=baseline)
        if inventory:
            matrix.inventory = inventory_path(inventory)
        if margin is not None:
            matrix.policy.margin = margin
        plan = plan_mod.make(matrix, store=store)
        _confirm_plan(plan, yes)
    elif suite or workload or inventory:
        raise UserError("--resume continues a stored run; do not also give a suite, --workload "
                        "or --inventory (the run keeps the inventory it started with)")
    elif (retry_failed and store.run(resume_id)["status"] in ("completed", "failed")
          and (retry := _retry_plan(store, resume_id)).cells):  # otherwise resume() says why not
        plan = retry
        _confirm_plan(plan, yes)
    with progress_bar() as progress:
        events = ProgressEvents(progress)
        runner = None
        try:
            if resume_id:
                runner = Runner(store, None, events=events, command=command)
                run_id = runner.resume(resume_id, retry_failed=retry_failed)
            else:
                runner = Runner(store, matrix, events=events, command=command)
                run_id = runner.start()
        except KeyboardInterrupt:
            progress.stop()
            rid = runner.run_id if runner and runner.run_id else resume_id
            err.print(f"\ninterrupted; everything was torn down. Resume with: virtbench run --resume {rid}"
                      f"{store.db_option}", soft_wrap=True, highlight=False)
            sys.exit(130)
    show_run(store, run_id, as_json, margin)
    _end(store, run_id)


def progress_bar(console=None) -> Progress:
    """What it did, the bar, attempts done / expected, elapsed and the ETA (progress.Eta: the pace of
    the last 5 minutes), on stderr; gone at the end."""
    return Progress(TextColumn("{task.description}"), BarColumn(), TextColumn("{task.fields[count]}"),
                    TimeElapsedColumn(), TextColumn("eta {task.fields[eta]}"), console=console or err,
                    transient=True)


def _retry_plan(store: Store, run_id: str):
    """The plan of --retry-failed: each cell with a failed environment, on all its environments."""
    from ..run import outcomes
    from ..run import plan as plan_mod
    from ..suite import Matrix, cell_environments

    matrix = Matrix.from_spec(store.run(run_id)["spec"])
    cells = {key for key, _ in outcomes.failed_keys(outcomes.cell_outcomes(store, run_id))}
    names = [e.name for e in matrix.environments]
    return plan_mod.make(matrix, only={(c["key"], e) for c in matrix.cells if c["key"] in cells
                                       for e in cell_environments(c, names)}, store=store)


EXIT_NOT_STARTED = 1  # the long-run question answered no: nothing ran, which a script must not read as success


def _confirm_plan(plan, yes: bool) -> None:
    """Print the plan; a long one on a terminal asks first."""
    from ..run import plan as plan_mod

    err.print(plan.text(), highlight=False, soft_wrap=True)
    if plan.longest() <= plan_mod.ASK_ABOVE_SECONDS or yes:
        return
    took = plan_mod.human(plan.longest())
    if not (sys.stdin.isatty() and sys.stderr.isatty()):
        err.print(f"this run may take {took}: not asked (no terminal), so it starts; --yes says so without this "
                  "line, Ctrl-C or SIGTERM stops it and --resume continues", highlight=False, soft_wrap=True)
        return
    if not click.confirm(f"this run may take {took}; start it?", default=False, err=True):
        err.print("not started (fewer repetitions: --repeat N or a suite's max_repetitions; "
                  "--yes skips this question)", highlight=False)
        sys.exit(EXIT_NOT_STARTED)


def _end(store: Store, run_id: str) -> None:
    """The run's last words on stderr and its exit status: 0 every cell has results, 3 some failed,
    4 none succeeded (outcomes.EXIT_*)."""
    from ..run import outcomes

    outcome = outcomes.cell_outcomes(store, run_id)
    code = outcomes.exit_code(outcome)
    if code == outcomes.EXIT_OK:
        return
    err.print(f"[red]run {run_id} finished with failures: {outcomes.shortfall(outcome)}[/red] (listed above). After fixing the cause, rerun "
              f"only those in the same run: virtbench run --resume {run_id} --retry-failed{store.db_option}",
              highlight=False, soft_wrap=True)
    sys.exit(code)
