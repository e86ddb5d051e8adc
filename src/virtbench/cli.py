"""The `virtbench` command."""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path

import click
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from . import __version__, analysis, paths, render, workloads
from .errors import UserError
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

    def __init__(self, progress: Progress):
        self.progress = progress
        self.task = progress.add_task("starting", total=None)
        self.done = 0

    def planned(self, total: int) -> None:
        self.progress.update(self.task, total=total)

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
            self.progress.console.print(f"[red]failed[/red] {cell['workload']} {params} @ {env} {what}: {reason}",
                                        highlight=False)

    def note(self, message: str) -> None:
        self.progress.console.print(f"[yellow]{message}[/yellow]", highlight=False)


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, prog_name="virtbench")
def cli() -> None:
    """Measure what a platform (bare host, container, VM) costs a workload.

    Runs the same workloads from the same binaries on each environment, repeats them until the
    numbers are stable, stores every sample, and reports each environment as a ratio to a
    baseline with a 95 % confidence interval.
    """


@cli.command()
@click.option("--json", "as_json", is_flag=True, help="print the checks as JSON")
def doctor(as_json: bool) -> None:
    """Check what this machine can run, and say how to fix what it cannot."""
    from .doctor import checks

    results = checks()
    if as_json:
        _emit_json(results)
        return
    for c in results:
        mark = "[green]ok[/green]  " if c["ok"] else "[red]FAIL[/red]"
        out.print(f"{mark} {c['name']}: {c['detail']}", highlight=False)
        if not c["ok"] and c.get("fix"):
            out.print(f"       fix: {c['fix']}", highlight=False)


@cli.group()
def image() -> None:
    """The guest image: one Debian root filesystem with the tools and virtbench's kernels."""


@image.command("build")
@click.option("--force", is_flag=True, help="rebuild even if an image for these inputs exists")
def image_build(force: bool) -> None:
    """Build (or find, cached by content hash) the guest image."""
    from . import image as image_mod

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
@click.option("--json", "as_json", is_flag=True, help="print the results as one JSON object on stdout")
def run(suite, workload, params, envs, baseline, repeat, duration, db, resume_id, as_json) -> None:
    """Run a SUITE file (e.g. suites/quick.toml), or one --workload, and print the comparison."""
    from . import suite as suite_mod

    store = _store(db)
    env_list = [e.strip() for e in envs.split(",") if e.strip()] if envs else None
    command = "virtbench " + " ".join(shlex.quote(a) for a in sys.argv[1:])
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=err, transient=True) as progress:
        events = _ProgressEvents(progress)
        runner = None
        try:
            if resume_id:
                if suite or workload:
                    raise UserError("--resume continues a stored run; do not also give a suite or --workload")
                runner = Runner(store, None, events=events, command=command)
                run_id = runner.resume(resume_id)
            else:
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
                runner = Runner(store, matrix, events=events, command=command)
                run_id = runner.start()
        except KeyboardInterrupt:
            progress.stop()
            rid = runner.run_id if runner and runner.run_id else resume_id
            err.print(f"\ninterrupted; everything was torn down. Resume with: virtbench run --resume {rid}"
                      + (f" --db {db}" if db else ""), soft_wrap=True, highlight=False)
            sys.exit(130)
    _show(store, run_id, as_json)


def _show(store: Store, run_id: str, as_json: bool) -> None:
    data = analysis.results(store, run_id)
    if as_json:
        _emit_json(data)
        return
    out.print(f"run [bold]{data['run_id']}[/bold] ({data['status']}), suite {data['suite']}, "
              f"baseline [bold]{data['baseline']}[/bold]")
    if not data["results"]:
        out.print("[yellow]this run has no results yet[/yellow]")
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
def compare(run_a, run_b, db, as_json) -> None:
    """Compare RUN_B against RUN_A, matching workload, parameters, metric and environment."""
    data = analysis.compare(_store(db), run_a, run_b)
    if as_json:
        _emit_json(data)
    elif not data["results"]:
        out.print("the two runs have no (workload, params, metric, environment) in common")
    else:
        render.compare_table(out, data)


@cli.command()
@click.argument("run_id")
@click.option("--format", "fmt", type=click.Choice(["csv", "json"]), default="csv", show_default=True)
@click.option("--output", "-o", type=click.Path(dir_okay=False, writable=True), help="file [default: stdout]")
@click.option("--db", help=DB_HELP)
def export(run_id, fmt, output, db) -> None:
    """Export a run: CSV (one row per sample) or JSON (everything stored)."""
    from . import export as export_mod

    store = _store(db)
    text = export_mod.to_csv(store, run_id) if fmt == "csv" else export_mod.to_json(store, run_id)
    if output:
        Path(output).write_text(text)
        err.print(f"wrote {output}")
    else:
        click.echo(text, nl=False)


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
        out.print("  metrics: " + ", ".join(f"{m['name']} [{m['unit']}]" for m in w["metrics"]), highlight=False)


def main() -> None:
    try:
        cli.main(standalone_mode=False)
    except UserError as exc:
        err.print(f"[red]error:[/red] {exc.message}", highlight=False)
        if exc.hint:
            err.print(f"  {exc.hint}", highlight=False)
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
