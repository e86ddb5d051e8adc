"""What this machine has and runs with: doctor, build, image, workloads."""

from __future__ import annotations

import sys

import click
from rich.markup import escape

from .. import paths, workloads
from .common import emit_json, ensure_kernels, inventory_path, log_line, err, out
from ..errors import UserError


@click.command()
@click.option("--json", "as_json", is_flag=True, help="print the checks as JSON")
@click.option("--inventory", "-i", "inventory", type=click.Path(dir_okay=False),
              help="Ansible-style inventory (YAML or INI) of SSH hosts: ssh environments and machine=HOST use it")
@click.option("--fix", is_flag=True, help="first build the native kernels if they are not built")
def doctor(as_json: bool, inventory: str | None, fix: bool) -> None:
    """Check what this machine can run, and say how to fix what it cannot; with --inventory, also
    whether each host of the inventory answers over SSH and what it has. Exits 1 when a host of the
    inventory does not answer, as `hosts` does; this machine's own FAIL lines (many only limit what
    runs here: those cells are skipped with the reason) leave the exit status 0."""
    from .doctor import checks, host_checks

    if fix:
        try:
            ensure_kernels()
        except UserError as exc:  # the checks below say what is missing
            err.print(f"[red]cannot build the native kernels:[/red] {escape(exc.message)}", highlight=False)
    results = checks()
    hosts = host_checks(inventory_path(inventory)) if inventory else []
    results += hosts
    if as_json:
        emit_json(results)
    for c in [] if as_json else results:
        mark = "[green]ok[/green]  " if c["ok"] else "[red]FAIL[/red]"
        out.print(f"{mark} {c['name']}: {c['detail']}", highlight=False)
        if not c["ok"] and c.get("fix"):
            out.print(f"       fix: {c['fix']}", highlight=False)
    if not all(h["ok"] for h in hosts):
        sys.exit(1)


@click.command("build")
@click.option("--force", is_flag=True, help="build again even if built for these sources and compilers")
def build_cmd(force: bool) -> None:
    """Build virtbench's native kernels: in a clone with make -C native, in an installed package
    into a directory named by the hash of sources, compilers and flags (also done on first use)."""
    from .. import kernels

    # A clone always runs make (incremental); a package builds when its hash directory is missing.
    bindir = kernels.ensure(log=log_line, force=force or paths.is_clone())
    names = sorted(p.name for p in bindir.glob("vb-*"))
    out.print(f"native kernels in {bindir}: {', '.join(names) or 'none'}", highlight=False)


@click.group()
def image() -> None:
    """The guest image: one Debian root filesystem with the tools and virtbench's kernels."""


@image.command("build")
@click.option("--force", is_flag=True, help="rebuild even if an image for these inputs exists")
def image_build(force: bool) -> None:
    """Build (or find, cached by content hash) the guest image."""
    from .. import image as image_mod

    ensure_kernels()
    info = image_mod.build(force=force, log=lambda line: err.print(line, highlight=False, markup=False))
    out.print(f"guest image {info.hash}: {info.tarball}")


@image.command("info")
@click.option("--json", "as_json", is_flag=True, help="print hash, tarball and manifest as JSON")
def image_info(as_json: bool) -> None:
    """Show the image for the current inputs, if built."""
    from .. import image as image_mod

    info = image_mod.find()
    if info is None:
        raise UserError("no guest image is built for the current kernels and package list",
                        "run: virtbench image build")
    if as_json:
        emit_json({"hash": info.hash, "tarball": str(info.tarball), "manifest": info.manifest})
    else:
        out.print(f"{info.hash}  {info.tarball}")


@click.command("workloads")
@click.option("--json", "as_json", is_flag=True, help="print the workloads as a JSON list")
def list_workloads(as_json) -> None:
    """List every workload with its parameters, defaults and metrics."""
    items = [workloads.get(n).describe() for n in workloads.names()]
    if as_json:
        emit_json(items)
        return
    for w in items:
        out.print(f"[bold]{w['name']}[/bold]: {w['description']}")
        for p in w["params"]:
            choices = f" (one of: {', '.join(map(str, p['choices']))})" if p["choices"] else ""
            out.print(f"  --param {p['name']}=...  {p['help']}; default {p['default']}{choices}", highlight=False)
        out.print("  metrics: " + ", ".join(f"{m['name']} ({m['unit']})" for m in w["metrics"]), highlight=False,
                  markup=False)
