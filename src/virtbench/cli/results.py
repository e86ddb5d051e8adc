"""The commands that read stored runs: runs, show, compare, report, export."""

from __future__ import annotations

from pathlib import Path

import click

from rich.markup import escape

from .. import analysis, render
from .common import DB_HELP, MARGIN_HELP, MARGIN_TYPE, emit_json, open_store, err, out
from ..store import Store


def show_run(store: Store, run_id: str, as_json: bool, margin: float | None = None) -> None:
    if store.run(run_id)["spec"].get("kind") == "reproduce":  # its scorecard and plan
        from .reproduce import show as show_reproduce

        show_reproduce(store, run_id, as_json)
        return
    if store.run(run_id)["spec"].get("kind") == "boot":  # a `virtbench boot` run: its own table
        from ..run import boot_results

        data = boot_results.results(store, run_id)
        if as_json:
            emit_json(data)
        else:
            boot_results.render(out, data)
            _removals(store, run_id)
        return
    data = analysis.results(store, run_id, margin=margin)
    if as_json:
        emit_json(data)
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
    from ..report import kubefacts

    instances = None
    for env in store.environments(data["run_id"]):  # a VM's accelerator: KVM, or TCG emulation
        if kubefacts.is_cluster(env["facts"]):  # pods on a cluster: its nodes, not the client's machine
            instances = store.instances(data["run_id"]) if instances is None else instances
            nodes = kubefacts.nodes(env["name"], env["facts"], instances)
            out.print(escape(f"{env['name']}: {kubefacts.layer(env['facts'])}; pods on {', '.join(nodes) or '?'} "
                             f"(API server {env['facts'].get('kubeconfig_server') or '?'})"
                             + ("; a testbed on one machine: the nodes share its kernel and CPUs"
                                if env["facts"].get("cluster_testbed") else "")), highlight=False)
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
    _removals(store, data["run_id"])
    if not data["results"]:
        out.print("[yellow]this run has no results yet[/yellow]")
        render.failed_cells(out, data, store.db_option)
        return
    render.results_tables(out, data, store.db_option)


def _removals(store: Store, run_id: str) -> None:
    """What the run's sweeps removed (machines/ledger.py), one line each."""
    for e in analysis.removals(store, store.run(run_id)["id"]):
        out.print(f"removed a leftover of an earlier run: {e['what']}", highlight=False, soft_wrap=True)


@click.command()
@click.option("--db", help=DB_HELP)
@click.option("--json", "as_json", is_flag=True, help="print the runs as a JSON list")
def runs(db, as_json) -> None:
    """List stored runs, newest first."""
    rows = open_store(db, reading=True).runs()
    if as_json:
        emit_json(rows)
    elif not rows:
        out.print("no runs stored yet; start one with: virtbench run suites/quick.toml")
    else:
        render.runs_table(out, rows)


@click.command()
@click.argument("run_id")
@click.option("--db", help=DB_HELP)
@click.option("--json", "as_json", is_flag=True, help="print it as JSON, as the command that made the run does")
@click.option("--margin", type=MARGIN_TYPE, help=MARGIN_HELP)
def show(run_id, db, as_json, margin) -> None:
    """Show a stored run: a run's tables (--json: the object of `run --json`), a boot run's phases (as
    `boot --json`), a reproduce run's plan and scorecard (as `reproduce --json`).

    Each environment's ratio to the baseline comes from the run's lockstep rounds: the Hodges-Lehmann
    estimate of the rounds' ratios, its CI the exact signed-rank test inverted (runs stored without
    rounds: ratio of medians, Mann-Whitney); the legend under the tables says which. Each ratio's
    verdict: equivalent (its whole CI within --margin of 1), faster or slower (the CI excludes 1),
    else inconclusive with the smallest difference the run could have seen."""
    show_run(open_store(db, reading=True), run_id, as_json, margin)


@click.command()
@click.argument("run_a")
@click.argument("run_b")
@click.option("--db", help=DB_HELP)
@click.option("--json", "as_json", is_flag=True, help="print the comparison as one JSON object")
@click.option("--html", "html_file", type=click.Path(dir_okay=False),
              help="also write the comparison as an HTML file")
@click.option("--margin", type=MARGIN_TYPE, help=MARGIN_HELP)
def compare(run_a, run_b, db, as_json, html_file, margin) -> None:
    """Compare RUN_B against RUN_A, matching workload, parameters, metric and environment.

    B / A is RUN_B's median over RUN_A's, its CI the exact Mann-Whitney test on log values, inverted
    (two runs' repetitions are not paired), with a Benjamini-Hochberg correction across each table,
    and the verdicts of `show` (equivalent within --margin, faster, slower, inconclusive)."""
    data = analysis.compare(open_store(db, reading=True), run_a, run_b, margin=margin)
    if html_file:
        from .. import report

        report.write_compare(open_store(db, reading=True), run_a, run_b, html_file, margin=margin)
        err.print(f"wrote {html_file}", highlight=False)
    if as_json:
        emit_json(data)
    elif not data["results"]:
        out.print("the two runs have no (workload, params, metric, environment) in common")
    else:
        render.compare_table(out, data)


@click.command("report")
@click.argument("run_ids", nargs=-1, required=True)
@click.option("--output", "-o", type=click.Path(dir_okay=False),
              help="file to write [default: virtbench-report-RUN_ID.html; Markdown goes to stdout]")
@click.option("--format", "fmt", type=click.Choice(["html", "md"]), default="html", show_default=True)
@click.option("--figures", "figures_dir", type=click.Path(file_okay=False),
              help="also write each chart as SVG and PNG here")
@click.option("--db", help=DB_HELP)
@click.option("--margin", type=MARGIN_TYPE, help=MARGIN_HELP)
def report_cmd(run_ids, output, fmt, figures_dir, db, margin) -> None:
    """Write one self-contained report (HTML, or Markdown tables) of one or more stored runs."""
    from .. import report

    if output is None and fmt == "html":
        output = f"virtbench-report-{run_ids[0]}.html"
    text = report.write(open_store(db, reading=True), list(run_ids), output, fmt=fmt, figures_dir=figures_dir,
                        margin=margin)
    if output is None:
        click.echo(text, nl=False)
    else:
        err.print(f"wrote {output}" + (f" and the figures in {figures_dir}" if figures_dir else ""), highlight=False)


@click.command()
@click.argument("run_id")
@click.option("--format", "fmt", type=click.Choice(["csv", "json"]), default="csv", show_default=True)
@click.option("--output", "-o", type=click.Path(dir_okay=False, writable=True), help="file [default: stdout]")
@click.option("--timeseries", is_flag=True,
              help="the monitor's series: CSV of the series instead of the samples, or added to the JSON")
@click.option("--db", help=DB_HELP)
def export(run_id, fmt, output, timeseries, db) -> None:
    """Export a run: CSV (one row per sample) or JSON (everything stored)."""
    from .. import export as export_mod

    store = open_store(db, reading=True)
    text = export_mod.to_csv(store, run_id, timeseries=timeseries) if fmt == "csv" else \
        export_mod.to_json(store, run_id, timeseries=timeseries)
    if output:
        Path(output).write_text(text)
        err.print(f"wrote {output}")
    else:
        click.echo(text, nl=False)
