"""`virtbench reproduce`: plan, run and score the five studies within a time budget."""

from __future__ import annotations

import contextlib
import shlex
import sys
from pathlib import Path

import click
from rich.markup import escape
from rich.table import Table

from .. import paths
from ..errors import UserError
from ..store import Store
from ..studies import codeversion

DB_HELP = "results database: a SQLite file path or a postgresql:// URL [default: the user's data directory]"


class _PrintEvents:
    def __init__(self, console):
        self.console = console

    def step(self, index, total, step, message) -> None:
        where = ", ".join(step.envs)
        self.console.print(f"[{index + 1}/{total}] {step.exp.id} ({where}): {escape(message)}", highlight=False)

    def runner_events(self):
        return None


def _plan_table(plan: list[dict], left_out: dict[str, str], done: dict | None = None) -> Table:
    t = Table(title="plan", title_justify="left")
    for col in ("experiment", "study", "where", "scale", "estimate"):
        t.add_column(col, justify="right" if col == "estimate" else "left")
    if done is not None:
        t.add_column("actual", justify="right")
        t.add_column("status")
    for p in plan:
        where = ", ".join(p["environments"]) + (f" ({p['platforms']})" if p.get("platforms") else "")
        row = [p["id"], p["study"], where,
               p["scale"] or f"left out: {p['left_out']}",
               f"{p['estimate_s']:.0f} s" if p["estimate_s"] is not None else "-"]
        if done is not None:
            d = done.get(p["id"], {})
            row += [f"{d['actual_s']:.0f} s" if d.get("actual_s") is not None else "-",
                    (d.get("status") or ("not run" if p["scale"] else "left out"))
                    + (f": {d['reason']}" if d.get("reason") else "")]
        t.add_row(*[escape(str(x)) for x in row])
    for key, why in left_out.items():
        t.add_row(*[escape(x) for x in (key, key[:3], "-", f"left out: {why}", "-")],
                  *(["-", "left out"] if done is not None else []))
    return t


def scorecard_table(cards: list[dict]) -> Table:
    t = Table(title="scorecard: the studies' findings on this machine", title_justify="left")
    for col in ("finding", "study", "verdict", "measured / why not"):
        t.add_column(col)
    colour = {"holds": "green", "differs": "red", "not measured": "yellow"}
    for c in cards:
        revised = "".join(f"\n(revised {r['date']}: {r['change']})" for r in c.get("revised") or [])
        t.add_row(escape(c["finding"]), c["study"], f"[{colour[c['verdict']]}]{c['verdict']}[/]" + escape(revised),
                  escape(c["measured"] + (f"; interval at {c['level']:.1%}" if c.get("level") else "")
                         if c["verdict"] != "not measured" else c["reason"]))
    return t


def _check_line(label: str, found: str | None) -> None:
    """One line per check of the machine: its name as it starts (a slow probe is seen waiting), what
    it found and how long it took as it ends."""
    from .common import err

    if found is None:
        err.print(f"  {label} ...", end="", highlight=False)
    else:
        err.print(f" {found}", highlight=False, soft_wrap=True)


@click.command("reproduce")
@click.argument("studies", nargs=-1, metavar="[STUDIES | STUDY_FILE.toml ...]")
@click.option("--budget", default="30m", show_default=True,
              help="time the whole reproduction may take: 30m, 1h, 1h30m ...; scales are fitted to it")
@click.option("--kubeconfig", type=click.Path(exists=True, dir_okay=False),
              help="a Kubernetes cluster's kubeconfig: the pods experiments run there (backend kubernetes)")
@click.option("--testbed", is_flag=True,
              help="the pods experiments run on this machine's Kubernetes testbed cluster (`virtbench testbed "
                   "k8s`): one that is up (whatever its name) is used and left up, else one is started for the "
                   "run and stopped after; the run is registered with it until it ends, so `testbed k8s down` waits")
@click.option("--testbed-name", metavar="NAME",
              help="with --testbed: testbed cluster NAME (`testbed k8s up --name NAME`) is the one used or started "
                   "(default: the one up here, else vbk8s); implies --testbed")
@click.option("--inventory", "-i", "inventory", type=click.Path(dir_okay=False),
              help="Ansible-style inventory (YAML or INI) of SSH hosts: the experiments whose instances are "
                   "separate machines in the study (NPB EP, SP-MZ and the eigensolver over 1 and 2 instances) "
                   "also run there, one instance per host")
@click.option("--hosts", "hosts", default="all", show_default=True,
              help="which of the inventory's hosts: a group, a host or a comma list")
@click.option("--cloud", "cloud", multiple=True, metavar="KEY=VALUE",
              help="a cloud through its EC2 API (the cloud driver's options, as `virtbench boot -o`: endpoint, "
                   "region, image or images=SIZE=ID,..., ssh_user, key_name, key_file, security_group ...): study "
                   "000's cloud boot grid runs there, and its instances join NPB EP, SP-MZ and the eigensolver")
@click.option("--pods-image", default="",
              help="the guest image as the cluster's nodes know it ({hash}: the image's hash), e.g. "
                   "REGISTRY/virtbench-guest:{hash}; not needed on a `virtbench testbed k8s` cluster, whose "
                   "registry the guest image is pushed to")
@click.option("--plan", "plan_only", is_flag=True, help="print the plan (what runs where, at what scale, "
              "estimated time, what is left out and why) and stop")
@click.option("--published", "published", is_flag=True,
              help="score each finding on its study's own printed numbers instead of measuring (a finding they "
                   "do not pass has a wrong tolerance or reading); exit 1 if any does not hold")
@click.option("--resume", "resume_id", metavar="RUN_ID", help="continue an interrupted reproduce run, or run a completed one's failed experiments again")
@click.option("--db", help=DB_HELP)
@click.option("--json", "as_json", is_flag=True, help="print the scorecard and the plan as one JSON object")
def reproduce(studies, budget, kubeconfig, testbed, testbed_name, inventory, hosts, cloud, pods_image, plan_only, published,
              resume_id, db, as_json) -> None:
    """Run the five studies' experiments (or those of the STUDIES named: 000 ... 004), or those of
    study files you wrote (STUDY_FILE.toml: your own paper's experiments and findings, see the README),
    on the platforms this machine reaches, within --budget, and score each finding against the
    results: holds, differs, or not measured (with why). The scorecard names the hash of every study
    file it was scored with and the scoring code's version (said when it is not the run's own)."""
    from ..reproduce import testbed as reproduce_testbed
    from .common import emit_json, ensure_kernels, inventory_path, log_line, err, out
    from ..reproduce import Reproducer, experiments_done, left_out_always, parse_budget, plan, spec_for
    from ..reproduce.facts import cloud_options, machine_facts

    chosen, own = _chosen(studies)
    if published:
        if resume_id or plan_only:
            raise UserError("--published scores the study files' own numbers; give no --resume or --plan")
        sys.exit(_published(chosen, own, as_json))
    store = Store(db or paths.default_db(), named=db)
    budget_s = parse_budget(budget)
    command = "virtbench " + " ".join(shlex.quote(a) for a in sys.argv[1:])
    events = _PrintEvents(err)
    rep = Reproducer(store, events=events, command=command)
    testbed = testbed or bool(testbed_name)
    if kubeconfig and testbed:
        raise UserError("--kubeconfig and --testbed both name a cluster", "give one of them")
    needs_cluster = testbed  # --resume: the stored plan decides; a run without pods does not start one
    if resume_id:
        if studies or kubeconfig or inventory or cloud or plan_only or testbed_name:
            raise UserError("--resume continues a stored reproduce run with its own plan; give no STUDIES, "
                            "--kubeconfig, --testbed-name, --inventory, --cloud or --plan")
        # the cluster its plan names (the child runs' kubeconfig), not whichever is up now
        testbed_name = reproduce_testbed.name_of(store.run(resume_id)["spec"].get("kubeconfig"))
    else:
        err.print("checking this machine:", highlight=False)
        inventory = inventory_path(inventory) if inventory else None
        cloud = cloud_options(cloud) if cloud else None
        facts = machine_facts(kubeconfig, inventory, hosts, cloud, progress=_check_line, testbed=testbed,
                              testbed_name=testbed_name)
        if testbed:  # where `up` writes it, known before it runs: the plan's child runs name it
            kubeconfig = str(reproduce_testbed.kubeconfig(testbed_name))
            testbed_name = reproduce_testbed.name_of(kubeconfig)
        steps = plan(budget_s, facts, studies=chosen, store=store, own=own)
        needs_cluster = testbed and any(s.tier is not None and "cluster" in s.exp.needs for s in steps)
        spec = spec_for(steps, budget_s, facts, chosen, kubeconfig, pods_image, inventory=inventory, hosts=hosts,
                        cloud=cloud, own=own)
        err.print(_plan_table(spec["plan"], spec["left_out"]))
        for f in spec["study_files"]:  # what the scorecard will be scored with (pre-registration)
            err.print(f"study {f['id']}: {f['path']} sha256 {f['sha256']}", highlight=False)
        err.print(f"scoring code: {codeversion.describe(spec['scoring'])}", highlight=False)
        total = sum(p["estimate_s"] or 0 for p in spec["plan"])
        err.print(f"estimated {total / 60:.1f} min of a {budget_s / 60:.0f} min budget; accelerator "
                  f"{facts['accelerator']}, load {facts['load_1m']:.2f} on {facts['cores']} cores", highlight=False)
        if needs_cluster and not facts.get("testbed_up"):
            err.print(reproduce_testbed.start_note(), highlight=False)
        if plan_only:
            if as_json:
                emit_json({"plan": spec["plan"], "left_out": left_out_always(chosen, own), "facts": facts,
                            "budget_s": budget_s, "study_files": [{k: f[k] for k in ("id", "path", "sha256")}
                                                                  for f in spec["study_files"]],
                        "scoring": spec["scoring"]})
            return
    ensure_kernels()
    try:
        with reproduce_testbed.cluster_for_run(log_line, name=testbed_name) if needs_cluster else contextlib.nullcontext():
            run_id = rep.resume(resume_id) if resume_id else rep.start(budget_s, chosen, facts, kubeconfig=kubeconfig,
                                                                        pods_image=pods_image, inventory=inventory,
                                                                        hosts=hosts, cloud=cloud, own=own)
    except KeyboardInterrupt:
        rid = rep.run_id or resume_id
        err.print(f"\ninterrupted; everything was torn down. Resume with: virtbench reproduce --resume {rid}"
                  f"{store.db_option}{' --testbed' if needs_cluster else ''}", highlight=False)
        sys.exit(130)
    show(store, run_id, as_json)
    code = exit_code(store, run_id)
    if code:
        at = store.db_option
        again = at + (" --testbed" if needs_cluster else "")  # the cluster it started is stopped again
        done = experiments_done(store, run_id)
        if any(d["status"] == "failed" for d in done.values()):
            err.print(f"experiments failed (their reasons are in the plan above); run them again with: "
                      f"virtbench reproduce --resume {run_id}{again}", highlight=False)
        for eid, d in done.items():
            if d["status"] == "ok" and d.get("reason") and d.get("child"):
                err.print(f"{eid}: {d['reason']}; run its failed cells again with: virtbench run --resume "
                          f"{d['child']} --retry-failed{at}", highlight=False)
        sys.exit(code)


def _chosen(args: tuple[str, ...]):
    """STUDIES: built-in study ids (000 ... 004), or paths of study files; (ids or None, studies or None)."""
    from ..reproduce import STUDY_IDS
    from ..studies import studyfile

    if not args:
        return None, None
    files = [a for a in args if a not in STUDY_IDS]
    if not files:
        return list(args), None
    if len(files) != len(args):
        raise UserError("give either built-in study ids (000 ... 004) or study files, not both",
                        "run the built-in studies and your own in two reproduce runs")
    for f in files:
        if not f.endswith(".toml"):
            raise UserError(f"{f!r} is neither a built-in study ({', '.join(STUDY_IDS)}) nor a study file (.toml)",
                            "name a study by its id, or give the path of your study file")
    own = [studyfile.load(f) for f in files]
    ids = [s.id for s in own]
    for i, sid in enumerate(ids):
        if sid in ids[:i]:
            raise UserError(f"two study files have the id {sid!r} ({own[ids.index(sid)].path}, {own[i].path})",
                            "give each study its own [study] id")
    return None, own


def _published(chosen, own, as_json: bool) -> int:
    """`reproduce --published`: each finding with published numbers scored on them; 0 when all hold."""
    from .common import emit_json, out
    from ..studies import ownnumbers, studyfile

    studies = own or [s for s in studyfile.builtin() if not chosen or s.id in chosen]
    data = {"published": True, "study_files": [{"id": s.id, "path": s.path if not s.builtin else Path(s.path).name,
                                                "sha256": s.sha256} for s in studies],
            "scoring": codeversion.current(), **ownnumbers.scorecard([f for s in studies for f in s.findings])}
    if as_json:
        emit_json(data)
    else:
        t = scorecard_table(data["scorecard"])
        t.title = "the studies' own published numbers, scored as measurements"
        out.print(t)
        c = data["counts"]
        out.print(f"{c['holds']} hold, {c['differs']} differ, {c['not measured']} not measured of "
                  f"{len(data['scorecard'])} findings with published numbers; "
                  f"{len(data['without_published'])} have none", highlight=False)
        out.print(f"scoring code: {codeversion.describe(data['scoring'])}", highlight=False)
    return 0 if all(v["verdict"] == "holds" for v in data["scorecard"]) else 1


def exit_code(store: Store, run_id: str) -> int:
    """As `run`'s (outcomes.EXIT_*), per experiment: 0 when none failed (an experiment with some failed
    cells counts as failed), 4 when none succeeded, else 3. Experiments skipped (no time, or this machine cannot run them) and those not planned do not count."""
    from ..run import outcomes
    from ..reproduce import experiments_done

    done = experiments_done(store, run_id).values()
    statuses = [d["status"] for d in done]
    if "failed" not in statuses and not any(d["status"] == "ok" and d.get("reason") for d in done):
        return outcomes.EXIT_OK
    return outcomes.EXIT_SOME_FAILED if "ok" in statuses else outcomes.EXIT_NONE_SUCCEEDED


def show(store: Store, run_id: str, as_json: bool) -> None:
    """A reproduce run's scorecard and plan (also `virtbench show RUN_ID`)."""
    from .common import emit_json, out
    from ..studies import card

    data = card.result(store, run_id)
    if as_json:
        emit_json(data)
        return
    done = {p["id"]: p for p in data["plan"]}
    out.print(_plan_table(data["plan"], data["left_out"], done))
    out.print(scorecard_table(data["scorecard"]))
    for f in data.get("study_files") or []:
        out.print(f"study {f['id']}: {f['path']} sha256 {f['sha256']}", highlight=False)
    out.print(f"scoring code: {codeversion.describe(data['scoring']['recorded'])}", highlight=False)
    if data["scoring"]["note"]:
        out.print(f"note: {data['scoring']['note']}", style="yellow", highlight=False)
    c = data["counts"]
    out.print(f"run {data['run_id']} ({data['status']}): {c['holds']} hold, {c['differs']} differ, "
              f"{c['not measured']} not measured; {data['elapsed_s'] / 60:.1f} min of a "
              f"{data['budget_s'] / 60:.0f} min budget. Report: virtbench report {data['run_id']}{store.db_option}",
              highlight=False, soft_wrap=True)
