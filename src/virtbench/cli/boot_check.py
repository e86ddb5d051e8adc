"""The lifecycle commands: boot (provisioning times) and check (start, reboot, attach, snapshot)."""

from __future__ import annotations

import shlex
import sys

import click
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from .common import DB_HELP, emit_json, inventory_path, parse_options, open_store, err, out
from .results import show_run


@click.command("boot")
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
    from ..run import boot as boot_mod

    opts = parse_options(options)
    if suite:
        grid = boot_mod.load_suite(suite)
        if repeat:
            grid.repeat = repeat
    else:
        grid = boot_mod.grid_from_args(driver, concurrency, image_size, image_mode, shape, repeat, opts)
    from .. import drivers as drivers_mod

    if "ready_timeout" in drivers_mod.driver_class(grid.driver).options:  # vm, cloud
        grid.options.setdefault("ready_timeout", timeout)
    store = open_store(db)
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
                                     inventory=inventory_path(inventory) if inventory else None)
        try:
            run_id = runner.run()
        except KeyboardInterrupt:
            progress.stop()
            err.print("\ninterrupted; every instance was torn down", highlight=False)
            sys.exit(130)
    show_run(store, run_id, as_json)


@click.command("check")
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
    instance, snapshot a running instance and boot from the snapshot. Exits 1 when a check fails
    (a check the driver cannot do is skipped, not failed)."""
    from ..run import checks

    log = (lambda m: None) if as_json else (lambda m: err.print(f"[dim]{m}[/dim]", highlight=False))
    data = checks.run_checks(driver, count=count, shape=shape, options=parse_options(options), log=log,
                             inventory=inventory_path(inventory) if inventory else None)
    if as_json:
        emit_json(data)
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
