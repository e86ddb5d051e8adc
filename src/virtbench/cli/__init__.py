"""The `virtbench` command: the group, one registration line per command (each command lives in
a module of this package), and main(), which turns errors into messages and exit statuses."""

from __future__ import annotations

import sys

import click
from rich.markup import escape

from .. import __version__, paths, procs
from . import boot_check, places, reproduce, results, run, setup
from .common import err
from ..errors import UserError


def _print_version(ctx: click.Context, _param, value: bool) -> None:
    if value and not ctx.resilient_parsing:
        click.echo(f"virtbench {__version__} ({paths.install_description()})")
        ctx.exit()


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.option("--version", is_flag=True, expose_value=False, is_eager=True, callback=_print_version,
              help="Show the version and the git revision (clone) or package version, and exit.")
def cli() -> None:
    """Measure what a platform (bare host, container, VM, remote machine, pod, cloud instance) costs a workload.

    Runs the same workloads from the same binaries on each environment, repeats them until the
    numbers are stable, stores every sample, and reports each environment as a ratio to a
    baseline with a 95 % confidence interval.
    """


cli.add_command(setup.doctor)
cli.add_command(setup.build_cmd)
cli.add_command(setup.image)
cli.add_command(setup.list_workloads)
cli.add_command(run.run)
cli.add_command(results.runs)
cli.add_command(results.show)
cli.add_command(results.compare)
cli.add_command(results.report_cmd)
cli.add_command(results.export)
cli.add_command(boot_check.boot_cmd)
cli.add_command(boot_check.check_cmd)
cli.add_command(places.hosts_cmd)
cli.add_command(places.cleanup_cmd)
cli.add_command(places.testbed)
cli.add_command(reproduce.reproduce)


def main() -> None:
    try:
        with procs.sigterm_as_interrupt():  # every command tears down on `kill` as on Ctrl-C
            cli.main(standalone_mode=False)
    except UserError as exc:
        # soft_wrap: a hint's command (a path in it) is copied whole, never broken at 80 columns
        err.print(f"[red]error:[/red] {escape(exc.message)}", highlight=False, soft_wrap=True)
        if exc.hint:
            err.print(f"  {escape(exc.hint)}", highlight=False, soft_wrap=True)
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
