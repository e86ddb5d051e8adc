"""The `virtbench` command."""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path

import click
from rich.console import Console
from rich.markup import escape
from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn,
                           TimeRemainingColumn)

from . import __version__, analysis, paths, render, workloads
from .errors import UserError
from .kubetestbed import commands as k8s_testbed
from .runner import Events, Runner
from .store import Store

err = Console(stderr=True)
# Piped output is read by people too: do not squeeze tables into 80 columns there.
out = Console(width=None if sys.stdout.isatty() else 200)

DB_HELP = "results database: a SQLite file path or a postgresql:// URL [default: the user's data directory]"


def _store(db: str | None) -> Store:
    return Store(db or paths.default_db())


def _emit_json(data) -> None:
    click.echo(json.dumps(data, indent=2, default=str))


class _ProgressEvents(Events):
    """Shows a progress bar on stderr while the runner works."""

    def __init__(self, progress: Progress, total: int | None = None):
        self.progress = progress
        self.task = progress.add_task("starting", total=total)
        self.total = total  # the plan's count (a retry runs only some cells): kept over the runner's
        self.done = 0

    def planned(self, total: int) -> None:
        self.progress.update(self.task, total=self.total or total)

    def provisioning(self, env: str, role: str, count: int) -> None:
        self.progress.update(self.task, description=f"starting {count} {env} instance(s)")

    def attempt(self, cell, env, repetition, warmup, status, reason) -> None:
        self.done += 1
        total = self.progress.tasks[0].total or 0
        if self.done > total:
            self.progress.update(self.task, total=self.done + 1)
        params = " ".join(f"{k}={v}" for k, v in cell["params"].items() if k != "duration")
        what = "warm-up" if warmup else f"rep {repetition + 1}"
        self.progress.update(self.task, advance=1, description=f"{cell['workload']} {params} @ {env} {what}")
        if status != "ok":
            label = "[yellow]skipped[/yellow]" if status == "skipped" else "[red]failed[/red]"
            self.progress.console.print(f"{label} {cell['workload']} {params} @ {env} {what}: {reason}",
                                        highlight=False)

    def note(self, message: str) -> None:
        self.progress.console.print(f"[yellow]{message}[/yellow]", highlight=False)


def _print_version(ctx: click.Context, _param, value: bool) -> None:
    if value and not ctx.resilient_parsing:
        click.echo(f"virtbench {__version__} ({paths.install_description()})")
        ctx.exit()


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.option("--version", is_flag=True, expose_value=False, is_eager=True, callback=_print_version,
              help="Show the version and the git revision (clone) or package version, and exit.")
def cli() -> None:
    """Measure what a platform (bare host, container, VM, remote machine) costs a workload.

    Runs the same workloads from the same binaries on each environment, repeats them until the
    numbers are stable, stores every sample, and reports each environment as a ratio to a
    baseline with a 95 % confidence interval.
    """


@cli.command()
@click.option("--json", "as_json", is_flag=True, help="print the checks as JSON")
@click.option("--inventory", "-i", "inventory", type=click.Path(dir_okay=False),
              help="Ansible-style inventory (YAML or INI) of SSH hosts: ssh environments and machine=HOST use it")
@click.option("--fix", is_flag=True, help="first build the native kernels if they are not built")
def doctor(as_json: bool, inventory: str | None, fix: bool) -> None:
    """Check what this machine can run, and say how to fix what it cannot; with --inventory, also
    whether each host of the inventory answers over SSH and what it has."""
    from .doctor import checks, host_checks

    if fix:
        try:
            _ensure_kernels()
        except UserError as exc:  # the checks below say what is missing
            err.print(f"[red]cannot build the native kernels:[/red] {escape(exc.message)}", highlight=False)
    results = checks()
    if inventory:
        results += host_checks(_inventory_path(inventory))
    if as_json:
        _emit_json(results)
        return
    for c in results:
        mark = "[green]ok[/green]  " if c["ok"] else "[red]FAIL[/red]"
        out.print(f"{mark} {c['name']}: {c['detail']}", highlight=False)
        if not c["ok"] and c.get("fix"):
            out.print(f"       fix: {c['fix']}", highlight=False)


def _ensure_kernels() -> None:
    """Build the native kernels on first use (installed package) or when missing (clone)."""
    from . import kernels

    kernels.ensure(log=_log_line)


def _log_line(line: str) -> None:
    err.print(line, highlight=False, markup=False, soft_wrap=True)


@cli.command("build")
@click.option("--force", is_flag=True, help="build again even if built for these sources and compilers")
def build_cmd(force: bool) -> None:
    """Build virtbench's native kernels: in a clone with make -C native, in an installed package
    into a directory named by the hash of sources, compilers and flags (also done on first use)."""
    from . import kernels

    # A clone always runs make (incremental); a package builds when its hash directory is missing.
    bindir = kernels.ensure(log=_log_line, force=force or paths.is_clone())
    names = sorted(p.name for p in bindir.glob("vb-*"))
    out.print(f"native kernels in {bindir}: {', '.join(names) or 'none'}", highlight=False)


@cli.group()
def image() -> None:
    """The guest image: one Debian root filesystem with the tools and virtbench's kernels."""


@image.command("build")
@click.option("--force", is_flag=True, help="rebuild even if an image for these inputs exists")
def image_build(force: bool) -> None:
    """Build (or find, cached by content hash) the guest image."""
    from . import image as image_mod

    _ensure_kernels()
    info = image_mod.build(force=force, log=lambda line: err.print(line, highlight=False, markup=False))
    out.print(f"guest image {info.hash}: {info.tarball}")


@image.command("info")
@click.option("--json", "as_json", is_flag=True)
def image_info(as_json: bool) -> None:
    """Show the image for the current inputs, if built."""
    from . import image as image_mod

    info = image_mod.find()
    if info is None:
        raise UserError("no guest image is built for the current kernels and package list",
                        "run: virtbench image build")
    if as_json:
        _emit_json({"hash": info.hash, "tarball": str(info.tarball), "manifest": info.manifest})
    else:
        out.print(f"{info.hash}  {info.tarball}")


def _parse_params(items: tuple[str, ...]) -> dict[str, str]:
    params = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise UserError(f"--param {item!r} is not KEY=VALUE", "for example: --param duration=2")
        params[key.strip()] = value.strip()
    return params


@cli.command()
@click.argument("suite", required=False)
@click.option("--workload", "-w", help="run one workload without a suite file (see: virtbench workloads)")
@click.option("--param", "-p", "params", multiple=True, metavar="KEY=VALUE",
              help="workload parameter; a comma list (size=1,2,4) is swept. Repeatable.")
@click.option("--envs", "-e", help="comma list of environments: names from the suite, or DRIVER[:SHAPE] "
              "such as host, container, container:m1.small")
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
def run(suite, workload, params, envs, baseline, repeat, duration, db, resume_id, retry_failed, yes, inventory,
        as_json) -> None:
    """Run a SUITE file (e.g. suites/quick.toml), or one --workload, and print the comparison.

    Before the first repetition it prints the plan (cells x environments x repetitions) and an
    estimate of the time; over an hour, on a terminal, it asks first (--yes does not ask).

    \b
    Exit status:
      0    every cell has results (cells skipped for a condition this machine lacks aside)
      3    some cells failed: the others have results; rerun the failed ones with
           virtbench run --resume RUN_ID --retry-failed
      4    nothing succeeded: no cell has results
      2    a usage or set-up error (nothing was run, or the run stopped; the message says why)
      130  interrupted (Ctrl-C or SIGTERM); everything was torn down, --resume continues
    """
    from . import plan as plan_mod
    from . import suite as suite_mod

    _ensure_kernels()
    store = _store(db)
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
            matrix = suite_mod.adhoc(workload, _parse_params(params), env_list or ["host"],
                                     repeat=repeat, duration=duration, baseline=baseline)
        if inventory:
            matrix.inventory = _inventory_path(inventory)
        plan = plan_mod.make(matrix, store=store)
        _confirm_plan(plan, yes)
    elif suite or workload or inventory:
        raise UserError("--resume continues a stored run; do not also give a suite, --workload "
                        "or --inventory (the run keeps the inventory it started with)")
    elif (retry_failed and store.run(resume_id)["status"] in ("completed", "failed")
          and (retry := _retry_plan(store, resume_id)).cells):  # otherwise resume() says why not
        plan = retry
        _confirm_plan(plan, yes)
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  TextColumn("eta"), TimeRemainingColumn(), console=err, transient=True) as progress:
        events = _ProgressEvents(progress, plan.repetitions[0] if plan else None)
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
                      + (f" --db {db}" if db else ""), soft_wrap=True, highlight=False)
            sys.exit(130)
    _show(store, run_id, as_json)
    _end(store, run_id, db)


def _retry_plan(store: Store, run_id: str):
    """The plan of --retry-failed: each cell with a failed environment, on all its environments."""
    from . import outcomes
    from . import plan as plan_mod
    from .suite import Matrix, cell_environments

    matrix = Matrix.from_spec(store.run(run_id)["spec"])
    cells = {key for key, _ in outcomes.failed_keys(outcomes.cell_outcomes(store, run_id))}
    names = [e.name for e in matrix.environments]
    return plan_mod.make(matrix, only={(c["key"], e) for c in matrix.cells if c["key"] in cells
                                       for e in cell_environments(c, names)}, store=store)


def _confirm_plan(plan, yes: bool) -> None:
    """Print the plan; a long one on a terminal asks first."""
    from . import plan as plan_mod

    err.print(plan.text(), highlight=False, soft_wrap=True)
    if plan.longest() > plan_mod.ASK_ABOVE_SECONDS and not yes and sys.stdin.isatty() and sys.stderr.isatty():
        if not click.confirm(f"this run may take {plan_mod.human(plan.longest())}; start it?", default=False,
                             err=True):
            err.print("not started (fewer repetitions: --repeat N or a suite's max_repetitions; "
                      "--yes skips this question)", highlight=False)
            sys.exit(0)


def _end(store: Store, run_id: str, db: str | None) -> None:
    """The run's last words on stderr and its exit status: 0 every cell has results, 3 some failed,
    4 none succeeded (outcomes.EXIT_*)."""
    from . import outcomes

    outcome = outcomes.cell_outcomes(store, run_id)
    code = outcomes.exit_code(outcome)
    if code == outcomes.EXIT_OK:
        return
    missing = len(outcome["failed"]) + len(outcome["not_run"])
    total = outcome["cells"] - outcome["skipped"]
    what = "no cell has results" if code == outcomes.EXIT_NONE_SUCCEEDED else f"{missing} of {total} cells have no results"
    err.print(f"[red]run {run_id} finished with failures: {what}[/red] (listed above). After fixing the cause, rerun "
              f"only those in the same run: virtbench run --resume {run_id} --retry-failed"
              + (f" --db {db}" if db else ""), highlight=False, soft_wrap=True)
    sys.exit(code)


def _inventory_path(path: str) -> str:
    """An inventory file's absolute path, read once now so a mistake stops the command at once."""
    from .machines import inventory as inventory_mod

    full = str(Path(path).expanduser().resolve())
    inventory_mod.load(full)
    return full


def _show(store: Store, run_id: str, as_json: bool) -> None:
    if store.run(run_id)["spec"].get("kind") == "reproduce":  # its scorecard and plan
        from .cli_reproduce import show as show_reproduce

        show_reproduce(store, run_id, as_json)
        return
    if store.run(run_id)["spec"].get("kind") == "boot":  # a `virtbench boot` run: its own table
        from . import boot as boot_mod

        data = boot_mod.results(store, run_id)
        if as_json:
            _emit_json(data)
        else:
            boot_mod.render(out, data)
        return
    data = analysis.results(store, run_id)
    if as_json:
        _emit_json(data)
        return
    outcome = data.get("outcome") or {}
    missing = len(outcome.get("failed", [])) + len(outcome.get("not_run", []))
    status = data["status"] + (f"; {missing} of {outcome['cells'] - outcome['skipped']} cells have no results"
                               if missing else "")
    kinds = [e["kind"] for e in store.events(data["run_id"])]
    if "resumed" in kinds:  # repetitions from more than one session
        status += f"; interrupted and resumed {kinds.count('resumed')} time(s)"
    if "retry-failed" in kinds:
        status += f"; failed cells retried {kinds.count('retry-failed')} time(s)"
    out.print(f"run [bold]{data['run_id']}[/bold] ({status}), suite {data['suite']}, "
              f"baseline [bold]{data['baseline']}[/bold]")
    for env in store.environments(data["run_id"]):  # a VM's accelerator: KVM, or TCG emulation
        on = [m for m in env["facts"].get("machines") or [] if m != "localhost"]
        if on:
            mf = env["facts"].get("machine_facts") or {}
            testbed = any(mf.get(m, {}).get("testbed") for m in on)
            out.print(f"{env['name']}: on {', '.join(on)}" + (" (testbed hosts: one machine's kernel and CPU; "
                      "the figures measure the network path and the remote machinery)" if testbed else ""),
                      highlight=False)
        if env["facts"].get("accelerator"):
            note = env["facts"].get("accelerator_note") or "hardware virtualization"
            out.print(f"{env['name']}: QEMU accelerator [bold]{env['facts']['accelerator']}[/bold] ({note})",
                      highlight=False)
    if not data["results"]:
        out.print("[yellow]this run has no results yet[/yellow]")
        render.failed_cells(out, data)
        return
    render.results_tables(out, data)


@cli.command()
@click.option("--db", help=DB_HELP)
@click.option("--json", "as_json", is_flag=True)
def runs(db, as_json) -> None:
    """List stored runs, newest first."""
    rows = _store(db).runs()
    if as_json:
        _emit_json(rows)
    elif not rows:
        out.print("no runs stored yet; start one with: virtbench run suites/quick.toml")
    else:
        render.runs_table(out, rows)


@cli.command()
@click.argument("run_id")
@click.option("--db", help=DB_HELP)
@click.option("--json", "as_json", is_flag=True)
def show(run_id, db, as_json) -> None:
    """Show a stored run's results (same shape as `run --json`)."""
    _show(_store(db), run_id, as_json)


@cli.command()
@click.argument("run_a")
@click.argument("run_b")
@click.option("--db", help=DB_HELP)
@click.option("--json", "as_json", is_flag=True)
@click.option("--html", "html_file", type=click.Path(dir_okay=False),
              help="also write the comparison as an HTML file")
def compare(run_a, run_b, db, as_json, html_file) -> None:
    """Compare RUN_B against RUN_A, matching workload, parameters, metric and environment."""
    data = analysis.compare(_store(db), run_a, run_b)
    if html_file:
        from . import report

        report.write_compare(_store(db), run_a, run_b, html_file)
        err.print(f"wrote {html_file}", highlight=False)
    if as_json:
        _emit_json(data)
    elif not data["results"]:
        out.print("the two runs have no (workload, params, metric, environment) in common")
    else:
        render.compare_table(out, data)


@cli.command("report")
@click.argument("run_ids", nargs=-1, required=True)
@click.option("--output", "-o", type=click.Path(dir_okay=False),
              help="file to write [default: virtbench-report-RUN_ID.html; Markdown goes to stdout]")
@click.option("--format", "fmt", type=click.Choice(["html", "md"]), default="html", show_default=True)
@click.option("--figures", "figures_dir", type=click.Path(file_okay=False),
              help="also write each chart as SVG and PNG here")
@click.option("--db", help=DB_HELP)
def report_cmd(run_ids, output, fmt, figures_dir, db) -> None:
    """Write one self-contained report (HTML, or Markdown tables) of one or more stored runs."""
    from . import report

    if output is None and fmt == "html":
        output = f"virtbench-report-{run_ids[0]}.html"
    text = report.write(_store(db), list(run_ids), output, fmt=fmt, figures_dir=figures_dir)
    if output is None:
        click.echo(text, nl=False)
    else:
        err.print(f"wrote {output}" + (f" and the figures in {figures_dir}" if figures_dir else ""), highlight=False)


@cli.command()
@click.argument("run_id")
@click.option("--format", "fmt", type=click.Choice(["csv", "json"]), default="csv", show_default=True)
@click.option("--output", "-o", type=click.Path(dir_okay=False, writable=True), help="file [default: stdout]")
@click.option("--timeseries", is_flag=True,
              help="the monitor's series: CSV of the series instead of the samples, or added to the JSON")
@click.option("--db", help=DB_HELP)
def export(run_id, fmt, output, timeseries, db) -> None:
    """Export a run: CSV (one row per sample) or JSON (everything stored)."""
    from . import export as export_mod

    store = _store(db)
    text = export_mod.to_csv(store, run_id, timeseries=timeseries) if fmt == "csv" else \
        export_mod.to_json(store, run_id, timeseries=timeseries)
    if output:
        Path(output).write_text(text)
        err.print(f"wrote {output}")
    else:
        click.echo(text, nl=False)


def _options(items: tuple[str, ...]) -> dict[str, str]:
    opts = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise UserError(f"--option {item!r} is not KEY=VALUE", "for example: --option devices=emulated-disk")
        opts[key.strip()] = value.strip()
    return opts


@cli.command("boot")
@click.option("--driver", "driver", default="vm", show_default=True, help="environment driver: vm, container ...")
@click.option("--concurrency", "-c", help="instances started at once, comma list [default: 1,4,8]")
@click.option("--image-size", "-s", help="comma list of image sizes (2G, 512M, auto) [default: auto]")
@click.option("--image-mode", "-m", help="comma list of copy, overlay, reflink [default: overlay]")
@click.option("--shape", help="comma list of instance shapes [default: m1.small]")
@click.option("--repeat", "-r", type=click.IntRange(1, 1000), help="rounds per cell [default: 5]")
@click.option("--option", "-o", "options", multiple=True, metavar="KEY=VALUE",
              help="driver option, e.g. devices=emulated-disk, accel=tcg. Repeatable.")
@click.option("--suite", help="a boot suite file (e.g. suites/nii-boot.toml) instead of the flags above")
@click.option("--timeout", type=click.FloatRange(1, 7200), default=600, show_default=True,
              help="seconds one instance may take to become ready")
@click.option("--db", help=DB_HELP)
@click.option("--inventory", "-i", "inventory", type=click.Path(dir_okay=False),
              help="Ansible-style inventory (YAML or INI) of SSH hosts: ssh environments and machine=HOST use it")
@click.option("--json", "as_json", is_flag=True, help="print the results (every instance's phases) as JSON")
def boot_cmd(driver, concurrency, image_size, image_mode, shape, repeat, options, suite, timeout, db,
             inventory, as_json) -> None:
    """Provisioning time: start instances (concurrency x image size x mode x shape, repeated) and
    time each phase from request to ready, with millisecond resolution."""
    from . import boot as boot_mod

    opts = _options(options)
    if suite:
        grid = boot_mod.load_suite(suite)
        if repeat:
            grid.repeat = repeat
    else:
        grid = boot_mod.grid_from_args(driver, concurrency, image_size, image_mode, shape, repeat, opts)
    from . import drivers as drivers_mod

    if "ready_timeout" in drivers_mod.driver_class(grid.driver).options:  # vm, cloud
        grid.options.setdefault("ready_timeout", timeout)
    store = _store(db)
    command = "virtbench " + " ".join(shlex.quote(a) for a in sys.argv[1:])

    class Events(boot_mod.BootEvents):
        def __init__(self, progress: Progress):
            self.progress = progress
            self.task = progress.add_task("preparing", total=None)

        def planned(self, rounds: int) -> None:
            self.progress.update(self.task, total=rounds, description="booting")

        def round(self, cell, rep, results) -> None:
            p = cell["params"]
            ok = sum(r["status"] == "ok" for r in results)
            self.progress.update(self.task, advance=1, description=f"x{p['concurrency']} {p['image_size']} "
                                 f"{p['image_mode']} {p['shape']} round {rep + 1}: {ok}/{len(results)} ready")
            for r in results:
                if r["status"] == "failed":
                    self.progress.console.print(f"[red]failed start[/red]: {(r['reason'] or '').splitlines()[0]}",
                                                highlight=False)

        def note(self, message: str) -> None:
            self.progress.console.print(f"[yellow]{message}[/yellow]", highlight=False)

    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=err, transient=True) as progress:
        runner = boot_mod.BootRunner(store, grid, events=Events(progress), command=command, timeout=timeout,
                                     inventory=_inventory_path(inventory) if inventory else None)
        try:
            run_id = runner.run()
        except KeyboardInterrupt:
            progress.stop()
            err.print("\ninterrupted; every instance was torn down", highlight=False)
            sys.exit(130)
    _show(store, run_id, as_json)


@cli.command("check")
@click.option("--driver", "driver", default="vm", show_default=True, help="vm, container or cloud")
@click.option("--count", "-n", type=click.IntRange(2, 64), default=4, show_default=True,
              help="instances started at once in the first check")
@click.option("--shape", default="m1.small", show_default=True, help="instance shape")
@click.option("--option", "-o", "options", multiple=True, metavar="KEY=VALUE", help="driver option. Repeatable.")
@click.option("--inventory", "-i", "inventory", type=click.Path(dir_okay=False),
              help="Ansible-style inventory (YAML or INI) of SSH hosts: ssh environments and machine=HOST use it")
@click.option("--json", "as_json", is_flag=True, help="print each check's name, passed, detail as JSON")
def check_cmd(driver, count, shape, options, inventory, as_json) -> None:
    """Lifecycle checks: start N at once, reboot several in one call, attach a disk to a running
    instance, snapshot a running instance and boot from the snapshot."""
    from . import checks

    log = (lambda m: None) if as_json else (lambda m: err.print(f"[dim]{m}[/dim]", highlight=False))
    data = checks.run_checks(driver, count=count, shape=shape, options=_options(options), log=log,
                             inventory=_inventory_path(inventory) if inventory else None)
    if as_json:
        _emit_json(data)
    else:
        head = f"lifecycle checks, driver {data['driver']}"
        if data.get("backend"):
            head += f", backend {data['backend']}"
        if data.get("accelerator"):
            head += f", accelerator {data['accelerator']}"
        out.print(head, highlight=False)
        for c in data["checks"]:
            mark = ("[yellow]skip[/yellow]" if c["passed"] is None else
                    "[green]pass[/green]" if c["passed"] else "[red]FAIL[/red]")
            out.print(f"{mark} {c['name']} ({c['seconds']:.1f} s): {c['detail']}", highlight=False)
    if not data["passed"]:
        sys.exit(1)


@cli.command("cleanup")
@click.option("--run", "run_id", metavar="RUN_ID", help="remove the cloud resources tagged with this run id")
@click.option("--all-of-mine", is_flag=True, help="remove every cloud resource tagged as made by this user on this host")
@click.option("--suite", help="a suite file whose cloud environment names the API [default: the stored run's]")
@click.option("--provider", help="cloud API (ec2)")
@click.option("--region", help="region, e.g. us-east-1")
@click.option("--endpoint", help="EC2 API URL of an EC2-compatible cloud (or moto)")
@click.option("--profile", help="profile of ~/.aws/credentials")
@click.option("--dry-run", is_flag=True, help="list what would be removed, remove nothing")
@click.option("--db", help=DB_HELP)
@click.option("--json", "as_json", is_flag=True, help="print what was found and removed as JSON")
def cleanup_cmd(run_id, all_of_mine, suite, provider, region, endpoint, profile, dry_run, db, as_json) -> None:
    """Remove cloud instances, volumes and snapshots that a killed run left behind (found by the
    virtbench:run and virtbench:owner tags every resource carries from its creation)."""
    from .cloud import cleanup as cleanup_mod

    if bool(run_id) == bool(all_of_mine):
        raise UserError("give --run RUN_ID or --all-of-mine")
    stored = []
    if run_id and not suite:
        try:
            rec = _store(db).run(run_id)
            run_id, stored = rec["id"], rec["spec"].get("environments", [])
        except UserError:
            pass  # not in this store (another machine's run): flags name the API
    flags = {"provider": provider, "region": region, "endpoint": endpoint, "profile": profile}
    results = [cleanup_mod.cleanup(t, run_id, all_of_mine, dry_run)
               for t in cleanup_mod.targets(flags, suite, stored)]
    if as_json:
        _emit_json(results)
        return
    for r in results:
        where = f"{r['backend']} ({r['region']})"
        if dry_run:
            found = [f"{kind[:-1]} {i}" for kind, ids in r["found"].items() for i in ids]
            out.print(f"{where}: would remove {len(found)}: " + (", ".join(found) or "nothing"), highlight=False)
        else:
            out.print(f"{where}: removed {len(r['removed'])}" + "".join(f"\n  {x}" for x in r["removed"]),
                      highlight=False)


@cli.command("hosts")
@click.option("--inventory", "-i", "inventory", type=click.Path(dir_okay=False),
              help="an Ansible inventory file (YAML or INI); required unless --kubernetes")
@click.option("--group", "-g", "pattern", default="all", show_default=True,
              help="a group, a host, or a comma list of them")
@click.option("--boot-probe", is_flag=True,
              help="boot a guest on each host (the vm driver's probe: KVM, else TCG) to say whether KVM really works")
@click.option("--kubernetes", "k8s", is_flag=True,
              help="list the nodes of the Kubernetes cluster (KUBECONFIG, else the testbed's) instead")
@click.option("--json", "as_json", is_flag=True, help="print one JSON object per host, as a list")
def hosts_cmd(inventory, pattern, boot_probe, k8s, as_json) -> None:
    """Probe an inventory's hosts over SSH: reachable or why not, kernel, CPU, memory, /dev/kvm,
    podman, docker, Open MPI and python3; with --boot-probe, whether KVM really boots a guest
    there. With --kubernetes, the cluster's nodes: server version, address, Ready. Exits 1 when a
    host is unreachable (or a node not Ready)."""
    if k8s:
        from .kubetestbed.status import cluster_rows

        rows = cluster_rows()
        if as_json:
            _emit_json(rows)
        for r in [] if as_json else rows:
            out.print(f"{'[green]Ready[/green]   ' if r['ready'] else '[red]NotReady[/red]'} {r['name']}  "
                      f"{r['address']}  kubelet {r['kubelet']}  (server {r['server']} {r['server_version']})",
                      highlight=False)
        if not rows or not all(r["ready"] for r in rows):
            sys.exit(1)
        return
    if not inventory:
        raise UserError("hosts needs --inventory (or --kubernetes for a cluster's nodes)")
    from .machines import inventory as inventory_mod
    from .machines.probe import probe_hosts
    from .machines import machine_for
    from .vm.site import kvm_column

    boot = kvm_column if boot_probe else None

    specs = inventory_mod.load(inventory).select(pattern)
    if as_json:
        rows = probe_hosts(specs, machine_for, resolve=inventory_mod.ssh_config_address, boot=boot)
        _emit_json(rows)
    else:
        with err.status(f"probing {len(specs)} host(s)"):
            rows = probe_hosts(specs, machine_for, resolve=inventory_mod.ssh_config_address, boot=boot)
        render.hosts_table(out, rows)
    if not all(r["reachable"] for r in rows):
        sys.exit(1)


@cli.command("workloads")
@click.option("--json", "as_json", is_flag=True)
def list_workloads(as_json) -> None:
    """List every workload with its parameters, defaults and metrics."""
    items = [workloads.get(n).describe() for n in workloads.names()]
    if as_json:
        _emit_json(items)
        return
    for w in items:
        out.print(f"[bold]{w['name']}[/bold]: {w['description']}")
        for p in w["params"]:
            choices = f" (one of: {', '.join(map(str, p['choices']))})" if p["choices"] else ""
            out.print(f"  --param {p['name']}=...  {p['help']}; default {p['default']}{choices}", highlight=False)
        out.print("  metrics: " + ", ".join(f"{m['name']} ({m['unit']})" for m in w["metrics"]), highlight=False,
                  markup=False)


@cli.group()
def testbed() -> None:
    """A local testbed: real SSH hosts on this machine, each an sshd in its own network namespace.

    For trying remote runs without remote machines. The hosts share this machine's kernel and
    CPU, so their figures measure the network path and the remote machinery, not separate machines.
    Needs root, iproute2 and openssh-server.
    """


testbed.add_command(k8s_testbed.k8s)


@testbed.command("up")
@click.argument("count", type=click.IntRange(1, 200))
@click.option("--inventory", "-i", "inventory", required=True, type=click.Path(dir_okay=False),
              help="inventory file to write (Ansible-style YAML), which run, hosts, boot, check and doctor take as --inventory")
@click.option("--name", "prefix", metavar="NAME",
              help="testbed name: prefix of its namespaces and links; several testbeds can coexist "
                   "[default: tb<user>, e.g. tbalice]")
@click.option("--subnet", help="the testbed's private subnet [default: the first free 10.214.N.0/24]")
@click.option("--delay", "delay_ms", type=click.FloatRange(0, 10000), metavar="MS",
              help="delay in each direction between the hosts and this machine (tc netem; kernels without "
                   "sch_netem refuse it)")
@click.option("--rate", "rate_mbit", type=click.FloatRange(0.01, 100000), metavar="MBIT",
              help="bandwidth cap in each direction (tc tbf)")
@click.option("--disk-size", metavar="SIZE",
              help="give each host a tmpfs of this size (e.g. 64M) as its virtbench dir, to try a full remote disk")
def testbed_up(count, inventory, prefix, subnet, delay_ms, rate_mbit, disk_size) -> None:
    """Start COUNT SSH hosts and write an inventory of them. The testbed records who made it; runs that
    use it register while they run."""
    from .machines import testbed as tb

    prefix = prefix or tb.default_name()
    path = tb.up(count, inventory, prefix=prefix, subnet=subnet, delay_ms=delay_ms, rate_mbit=rate_mbit,
                 disk_size=disk_size)
    for h in tb.status(prefix, probe=False)["hosts"]:
        out.print(f"{h['name']}  {h['address']}  (netns {h['netns']})", highlight=False)
    out.print(f"inventory: {path}", highlight=False)
    out.print(f"note: {tb.SHARED_NOTE}.", highlight=False)
    out.print(f"remove with: virtbench testbed down --name {prefix}", highlight=False)


@testbed.command("down")
@click.option("--name", "prefix", metavar="NAME", help="testbed name [default: tb<user>]")
@click.option("--force", is_flag=True, help="remove it even while a run uses it (that run's repetitions then fail)")
def testbed_down(prefix, force) -> None:
    """Stop a testbed's hosts and remove everything it made (also after an interrupted up). Refuses
    while a live run uses the testbed, and names the run; returns once the processes are reaped."""
    from .machines import testbed as tb

    prefix = prefix or tb.default_name()
    removed = tb.down(prefix, force=force)
    for item in removed:
        out.print(f"removed {item}", highlight=False)
    if not removed:
        out.print(f"testbed {prefix}: nothing to remove", highlight=False)
    if left := tb.leftovers(prefix):
        raise UserError(f"testbed {prefix}: could not remove: {', '.join(left)}")


@testbed.command("status")
@click.option("--name", "prefix", metavar="NAME", help="testbed name [default: tb<user>]")
@click.option("--json", "as_json", is_flag=True)
def testbed_status(prefix, as_json) -> None:
    """Show a testbed's hosts and whether each answers over ssh, who made it and which runs use it."""
    from .machines import testbed as tb

    prefix = prefix or tb.default_name()
    data = tb.status(prefix)
    if as_json:
        _emit_json(data)
        return
    if not data["hosts"]:
        out.print(f"testbed {prefix} is not up" + (f"; leftovers: {', '.join(data['leftovers'])}"
                                                   if data["leftovers"] else ""), highlight=False)
        return
    for h in data["hosts"]:
        mark = "[green]up[/green]  " if h["answers"] else "[red]DOWN[/red]"
        out.print(f"{mark} {h['name']}  {h['address']}  (netns {h['netns']})", highlight=False)
    if data.get("owner"):
        out.print(f"made by {data['owner']['user']} at {render.when(data['owner']['created'])}", highlight=False)
    for r in data.get("runs") or []:
        out.print(f"in use by run {r['run_id']} (user {r['user']}, pid {r['pid']})", highlight=False)


from .cli_reproduce import reproduce as _reproduce  # noqa: E402

cli.add_command(_reproduce)


def main() -> None:
    try:
        cli.main(standalone_mode=False)
    except UserError as exc:
        err.print(f"[red]error:[/red] {escape(exc.message)}", highlight=False)
        if exc.hint:
            err.print(f"  {escape(exc.hint)}", highlight=False)
        sys.exit(2)
    except click.exceptions.Abort:
        err.print("aborted")
        sys.exit(130)
    except click.ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code)
    except KeyboardInterrupt:
        err.print("interrupted")
        sys.exit(130)
    except Exception as exc:  # a bug: say so briefly, keep the traceback for the report
        import traceback

        path = paths.data_dir() / "last-error.txt"
        path.write_text(traceback.format_exc())
        err.print(f"[red]internal error (a bug in virtbench):[/red] {type(exc).__name__}: {exc}", highlight=False)
        err.print(f"  the traceback is in {path}; please include it in a bug report", highlight=False)
        sys.exit(70)


if __name__ == "__main__":
    main()
