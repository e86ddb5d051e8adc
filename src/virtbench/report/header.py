"""The run header: what ran, where, when, for how long, the environments' facts, and warnings."""

from __future__ import annotations

import json
import re
from collections import Counter, defaultdict

from ..stats import ratio_methods
from ..run.outcomes import reason_line
from . import fmt, kubefacts
from .data import RunData
from .model import Facts, Note, Section, Table
from .sections.common import describe, slug

# Environment facts shown as columns, in this order: (label, fact keys tried in turn).
FACT_COLUMNS = [
    ("machines", ("machines",)), ("CPU", ("cpu_model",)), ("cores", ("online_cpus", "cores")), ("memory", ("memory_kb",)),
    ("kernel", ("kernel",)), ("OS", ("os",)), ("virtualization", ("virtualization",)),
    ("accelerator", ("accelerator",)), ("runtime", ("runtime_version_label",)), ("image hash", ("image_hash",)),
]


def build(data: RunData) -> Section:
    run = data.run
    took = (run["finished_at"] - run["created_at"]) if run["finished_at"] else None
    counts = data.attempt_counts()
    section = Section(slug(data.id, "header"), "What ran, where and when")
    section.blocks.append(Facts([
        ("suite", f"{run['suite_name'] or '-'}" + (f" ({run['suite_path']})" if run["suite_path"] else "")),
        ("status", run["status"] + (f": {run['note']}" if run["note"] else "")),
        ("started", fmt.when(run["created_at"])),
        ("finished", fmt.when(run["finished_at"])),
        ("took", fmt.seconds(took) if took is not None else "not finished"),
        ("baseline", data.baseline or "-"),
        ("workloads", ", ".join(dict.fromkeys(c["workload"] for c in run["spec"].get("cells", []))) or "-"),
        ("repetitions", f"{counts.get('ok', 0)} ok, {counts.get('failed', 0)} failed, "
                        f"{counts.get('skipped', 0)} skipped; {data.sample_count} samples"),
        ("command", run["command"] or "-"),
        *([("history", _history(data))] if _history(data) else []),
        ("virtbench", run["virtbench_version"] or "-"),
    ]))
    section.blocks.append(_environments(data))
    section.blocks += [Note(w, "warn") for w in warnings(data)]
    section.blocks += _result_warnings(data)
    section.blocks.append(Note(methods(data.results["results"])))
    return section


def _history(data: RunData) -> str:
    what = {"resumed": "interrupted, resumed", "retry-failed": "failed cells retried"}
    return "; ".join(f"{what[e['kind']]} at {fmt.when(e['at'])}" for e in data.events if e["kind"] in what)


def methods(rows: list[dict]) -> str:
    """The methods note: which interval and which test, at the n this run has, with which correction."""
    ns = sorted({r["n"] for r in rows if r["n"] and r["metric"] != "index"})
    n_text = (f"n = {ns[0]}" if len(ns) == 1 else f"n = {ns[0]} to {ns[-1]}") if ns else "no samples"
    low = sorted({round(r["ci_level"] * 100, 1) for r in rows if r.get("ci_level") and r["ci_level"] < 0.95})
    compared = [r for r in rows if r.get("verdict") and r["metric"] != "index"]
    tables = {(r["comparisons"], r["p_threshold"]) for r in compared if r.get("p_threshold") is not None}
    levels = sorted({round((1 - t) * 100, 2) for _, t in tables})
    small = sum(1 for r in compared if r.get("verdict_reason") == "n too small")
    margins = sorted({r["margin"] for r in compared if r.get("margin")})
    text = (f"Methods ({n_text} repetitions per result). Median: its 95 % confidence interval is the distribution-"
            "free order-statistic interval [x(j), x(n+1-j)] (binomial level; needs n >= 6 for 95 %"
            + (f"; here some are [min, max] at {', '.join(f'{v:g} %' for v in low)}" if low else "") + "). "
            + _ratio_methods(rows) + " So the interval excludes 1 exactly when the test rejects. "
            "Correction: Benjamini-Hochberg "
            "across the comparisons of each table (false discovery rate 5 %), comparisons whose n cannot reach "
            "p <= 0.05 left out; each ratio CI is printed at the matching Benjamini-Yekutieli level 1 - R x 0.05 / m "
            "(R significant of m tested)"
            + (f", here {', '.join(f'{v:g} %' for v in levels)}" if levels else "") + ". Verdicts, from that "
            "interval: equivalent when it lies wholly within the equivalence margin"
            + (f" (here ±{', '.join(f'{m * 100:g}' for m in margins)} %)" if margins else "")
            + ", i.e. two one-sided tests at half the interval's error rate each; otherwise faster or slower when it "
            "excludes 1; otherwise inconclusive, with the smallest difference the run could have seen, read "
            "from the interval's farther bound as max(1/low, high) - 1.")
    if small:
        text += (f" {small} comparison(s) are 'inconclusive (n too small)': their repetitions cannot reach the "
                 f"table's level; run more repetitions ({ratio_methods.smallest_p_text(rows)}; "
                 f"{ratio_methods.minimum_text()}).")
    return text + (" Overall index: geometric mean of the tests' indexes; its CI is the geometric mean of the tests' "
                   "order-statistic bounds (conservative; level: its weakest test's), and the ratio of two indexes "
                   "has a percentile-bootstrap 95 % CI (2000 resamples; no level claimed below 4 repetitions a side), "
                   "read into the same verdicts.")


def _ratio_methods(rows: list[dict]) -> str:
    """The ratio's part of the methods note, for the methods these rows' ratios used."""
    used = ratio_methods.kinds(rows) or [ratio_methods.PAIRED]
    text = {
        ratio_methods.PAIRED: (
            "Ratio: the environments ran in lockstep rounds, so each round gives a ratio of the environment to "
            "the baseline measured at the same time; the ratio is exp of the Hodges-Lehmann estimate of the "
            "rounds' log ratios and its CI inverts the exact two-sided Wilcoxon signed-rank test on them (exact "
            "when a round's ratio is as likely above the true one as below; rounds with a value on one side only "
            "are left out)."),
        ratio_methods.SIGN: (
            "Ratio (very many rounds): the median of the rounds' ratios, its CI the sign test's interval."),
        ratio_methods.UNPAIRED: (
            "Ratio (runs stored without rounds): environment median / baseline median; its CI inverts the exact "
            "two-sided Mann-Whitney test on log values (Hodges-Lehmann interval of the ratio; exact when an "
            "environment scales every result alike)."),
        ratio_methods.BOOTSTRAP: (
            "Ratio (values not positive): environment median / baseline median with a percentile-bootstrap CI."),
    }
    return " ".join(text[k] for k in used)


def _fact(facts: dict, keys: tuple[str, ...]) -> str:
    for k in keys:
        v = facts.get(k)
        if v not in (None, ""):
            if k == "memory_kb" and isinstance(v, int):
                return f"{v / 1048576:.1f} GiB"
            if k == "image_hash":
                return str(v)[:16]
            if isinstance(v, list):
                return ", ".join(map(str, v))
            return str(v)
    return "-"


def _environments(data: RunData) -> Table:
    """One column per environment, one row per fact: a dozen facts side by side as columns ran off
    the page's right edge (the image hash, last, was never seen without scrolling)."""
    names, columns = [], []
    planned = {e["name"]: e for e in data.run["spec"].get("environments", [])}
    for name in data.env_order:
        env = data.env(name)
        if env.get("driver", "?") == "?" and name in planned:  # never started: what the run asked for
            env = {**env, "driver": planned[name]["driver"], "spec": planned[name]}
        shape = (env.get("spec") or {}).get("shape") or {}
        shape_text = shape.get("name") or "-"
        if shape.get("vcpus"):
            shape_text += f" ({shape['vcpus']} vCPU, {shape.get('memory_mb')} MB)"
        driver = env.get("driver", "?")
        facts = env.get("facts") or {}
        if facts.get("backend"):  # pods: which backend ran them
            driver += " (podman pods)" if facts["backend"] == "kube-play" else \
                f" ({kubefacts.cluster(facts)})" if kubefacts.is_cluster(facts) else f" ({facts['backend']})"
        if facts.get("runtime_label"):  # a container's OCI runtime: "container (gVisor runsc, ptrace, network host)"
            driver += f" ({facts['runtime_label']})"
            facts = {**facts, "runtime_version_label": " ".join(
                str(w) for w in (facts.get("runtime"), facts.get("runtime_version")) if w)}
        if kubefacts.is_cluster(facts):  # the pods' nodes and layer, not the client's machine and the probe's
            facts = {**facts, "machines": kubefacts.nodes(name, facts, data.instances),
                     "virtualization": kubefacts.layer(facts)}
        names.append(name + (" (baseline)" if name == data.baseline else ""))
        columns.append([driver, shape_text, *(_fact(facts, keys) for _, keys in FACT_COLUMNS),
                        env.get("problem") or ""])
    labels = ["driver", "shape", *(c for c, _ in FACT_COLUMNS), "problem"]
    rows = [[label, *(col[i] for col in columns)] for i, label in enumerate(labels)
            if label != "problem" or any(col[i] for col in columns)]
    return Table("Environments", ["", *names], rows,
                 note="Facts were collected inside the first instance of each environment.")


def _cell_text(a: dict) -> str:
    where = describe(json.loads(a["params_json"]), json.loads(a["condition_json"]), hide=("duration",))
    return f"{a['workload']} {where}".strip()


def warnings(data: RunData) -> list[str]:
    """Everything a reader should know before trusting the numbers, most serious first."""
    out: list[str] = []
    run = data.run
    if run["status"] != "completed":
        out.append(f"The run is {run['status']}, not completed" + (f": {run['note']}" if run["note"] else "")
                   + ". Results cover only what was measured.")
    resumed = [e for e in data.events if e["kind"] == "resumed"]
    if resumed:
        out.append(f"The run was interrupted and resumed ({len(resumed)} time(s), last at "
                   f"{fmt.when(resumed[-1]['at'])}): its repetitions come from separate sessions, each with fresh "
                   "instances and warm-ups, under whatever load the machine had then.")
    if data.sample_count == 0:
        counts = data.attempt_counts()
        what = (f"{counts.get('failed', 0)} repetition(s) failed and {counts.get('skipped', 0)} were skipped"
                if data.attempts else "no repetition was attempted")
        out.append(f"This run has no samples: nothing was measured ({what}). There are no figures to show.")
    for env in data.environments:
        facts = env.get("facts") or {}
        if env.get("problem"):
            out.append(f"Environment {env['name']} could not run: {env['problem']}")
        if str(facts.get("accelerator", "")).lower() == "tcg":
            out.append(f"Environment {env['name']} is an emulated VM (accelerator=tcg, no KVM): its numbers "
                       "measure a CPU emulator, not virtualization overhead.")
        testbed = sorted(n for n, f in (facts.get("machine_facts") or {}).items() if f.get("testbed"))
        if testbed:
            out.append(f"Environment {env['name']} ran on testbed hosts ({', '.join(testbed)}): SSH hosts in network "
                       "namespaces of one machine, sharing its kernel and CPU; their figures measure the network "
                       "path and the remote machinery, not separate machines.")
        if facts.get("backend") == "kube-play":
            out.append(f"Environment {env['name']} ran as podman pods (podman kube play of the pods driver's "
                       "manifests), not on a Kubernetes cluster: no scheduler, kubelet or cluster network; its "
                       "figures are podman's pods on this machine.")
        if facts.get("backend") == "kubernetes" and facts.get("cluster_testbed"):
            out.append(f"Environment {env['name']} ran as pods of a Kubernetes testbed on one machine "
                       f"({facts.get('server_version')}, nodes {', '.join(facts.get('cluster_nodes') or [])}): a "
                       "real scheduler, kubelets, CNI network and kube-proxy, but every node shares this machine's "
                       "kernel and CPUs; its figures measure Kubernetes' machinery and network path, not a "
                       "cluster of machines.")
        if facts.get("error"):
            out.append(f"Facts of environment {env['name']} could not be collected: {facts['error']}")
    load = data.results.get("machine_load") or {}
    if load.get("busy"):
        out.append(load["note"][0].upper() + load["note"][1:] + ".")
    failed: dict[tuple[str, str], Counter] = defaultdict(Counter)
    for a in data.attempts:
        if a["status"] == "skipped":
            out.append(f"Skipped {_cell_text(a)} on {a['environment']}: {a['reason'] or 'no reason recorded'}")
        elif a["status"] != "ok" and not a["warmup"]:
            failed[(_cell_text(a), a["environment"])][reason_line(a["reason"])] += a["count"]
    for (cell, env), reasons in failed.items():
        total = sum(reasons.values())
        top = "; ".join(f"{r} (x{n})" for r, n in reasons.most_common(3))
        out.append(f"{total} failed repetition(s) of {cell} on {env}: {top}")
    return list(dict.fromkeys(out))


_FAILED = re.compile(r"^\d+ failed repetition\(s\): ")


def _result_warnings(data: RunData) -> list:
    """Noise and outlier warnings of single results: one summary line, then a table of them."""
    cells = []
    for r in data.results["results"]:
        if r["n"]:
            # failed repetitions are in the header's warnings already, per cell, with their reasons
            for w in [w for w in r.get("warnings") or [] if not _FAILED.match(w)]:
                where = describe(r["params"], r["condition"], hide=("duration",))
                cells.append([f"{r['workload']} {r['metric']}", where, r["environment"], w])
    if not cells:
        return []
    noisy = sum(1 for c in cells if c[3].startswith("noisy"))
    total = sum(1 for r in data.results["results"] if r["n"])
    summary = (f"{len({tuple(c[:3]) for c in cells})} of {total} results carry warnings"
               + (f" ({noisy} noisy: coefficient of variation above 5 %)" if noisy else "")
               + "; they are listed below and beside each result. Treat small differences there with care.")
    return [Note(summary, "warn"), Table("Result warnings", ["result", "parameters", "environment", "warning"],
                                         cells, collapsed=len(cells) > 8)]
