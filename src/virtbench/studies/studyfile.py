"""Study files (TOML) -> a validated model.Study, with every problem named by file, line and key, all
of them at once (as suite files are checked).

A study file holds one study: `[study]` (id, title, source), its `[[experiments]]` (a suite file named
relative to the study file, the cells and environments of it that bear on the findings, and its tiers:
the scales `virtbench reproduce` fits to a budget) and its `[[findings]]` (the study's words, where it
says them, its own numbers, the quantity we compute, the tolerance and its derivation, the rule of
score.py with its selectors, how the finding could fail, and its revisions). The format is
documented in docs/study-files.md; the five built-in studies are studies/000.toml ... 004.toml.
"""

from __future__ import annotations

import hashlib
import re
import tomllib
from pathlib import Path
from typing import Any

from .. import paths
from ..errors import SuiteError, UserError
from ..tomlpos import key_lines, line_of
from .model import Experiment, Finding, Published, PublishedGroup, Revision, Study, Tier

# What an experiment or finding may need of the machine; score.REASONS and reproduce say why it is missing.
NEEDS = {
    "kvm": "hardware virtualization: emulated (TCG) VMs never count",
    "cluster": "a Kubernetes cluster (--kubeconfig)",
    "nfs": "a kernel NFS client on this host (bare metal and pods mount the export)",
    "cloud": "a cloud's settings (--cloud)",
}
KINDS = ("host", "container", "vm", "pods", "ssh", "cloud")
UNSET = "(unset)"   # in a cell filter: the cell does not set this key
TOLERANCES = ("above", "below", "within", "at_most", "at_least")
# The built-in studies must fill every field of a finding (and name the section, table or figure);
# a user's file the fields the scorecard cannot do without.
BUILTIN_COMPLETE = True

STUDY_KEYS = {"id", "title", "source"}
EXPERIMENT_KEYS = {"id", "title", "suite", "envs", "workload", "where", "condition_where", "tiers", "needs",
                   "kvm_envs", "boot", "same", "note", "remote_like", "remote_hosts", "priority"}
TIER_KEYS = {"label", "repeat", "estimate_s", "params", "select", "conditions", "boot", "extra"}
FINDING_KEYS = {"id", "finding", "quote", "quote_en", "cite", "quantity", "tolerance", "derivation",
                "could_fail", "rule", "args", "needs", "unmeasurable", "published", "revised"}
# Fields every finding has; a built-in one has all of FINDING_TEXT once BUILTIN_COMPLETE.
REQUIRED_TEXT = ("finding", "quote", "cite", "quantity", "tolerance")
FINDING_TEXT = REQUIRED_TEXT + ("quote_en", "derivation", "could_fail")
SELECTOR_KEYS = {"experiment", "workload", "metric", "kind", "env", "params", "condition", "prefer"}

# Each rule's arguments: selectors (one measured group each), lists of selectors, and plain values
# (name -> the Python types allowed, and whether it is required).
RULE_ARGS: dict[str, dict[str, Any]] = {
    "ratio": {"selectors": ("num", "den"), "tolerance": True, "values": {"published_at": (dict, False)}},
    "efficiency": {"selectors": ("one", "many"), "tolerance": False,
                   "values": {"factor": (int, True), "within": (list, True)}},
    "order": {"chains": ("chain",), "tolerance": False, "values": {}},
    # an order whose steps are measured apart (each pair like with like, e.g. the same file size)
    "steps": {"pairs": ("steps",), "tolerance": False, "values": {}},
    "slope": {"selectors": ("select",), "tolerance": False,
              "values": {"x": (str, True), "min_r2": ((int, float), True)}},
    "level": {"selectors": ("select",), "tolerance": True, "values": {}},
    "peak": {"selectors": ("select",), "tolerance": False,
             "values": {"x": (str, True), "published_at": ((int, float), False)}},
    # a network peak summed over the machines that carried it (each side a list of >= 1 selectors)
    "peak_sum": {"sums": ("num", "den"), "tolerance": True, "values": {}},
    # the peak memory used over the memory the instances had
    "memory_share": {"selectors": ("select",), "tolerance": True, "values": {}},
    "penalty": {"tolerance": False, "values": {
        "fine": (dict, True), "coarse": (dict, True), "experiment": (str, True), "metric": (str, True),
        "kind": (list, True), "prefer": (list, False), "coarse_max": ((int, float), True)}},
    "none": {"tolerance": False, "values": {}},
}


class StudyFileError(SuiteError):
    """A study file is wrong: file, line and key."""


class StudyFileErrors(UserError):
    def __init__(self, path: str, errors: list[UserError]):
        super().__init__(f"{len(errors)} problems in the study file {path}:\n  " + "\n  ".join(
            e.message + (f" ({e.hint})" if e.hint else "") for e in errors), "fix each of them; they are in file order")
        self.errors = errors


class _Where:
    def __init__(self, path: str, text: str):
        self.path, self.lines, self.errors = path, key_lines(text), []

    def add(self, keypath: tuple, problem: str, choices=None) -> None:
        key = ".".join(str(k) for k in keypath if not isinstance(k, int)) or "(top)"
        self.errors.append(StudyFileError(self.path, line_of(self.lines, keypath), key, problem, choices))

    def raise_all(self) -> None:
        if len(self.errors) == 1:
            raise self.errors[0]
        if self.errors:
            found = sorted(self.errors, key=lambda e: e.line or 0)
            raise StudyFileErrors(self.path, list({e.message: e for e in found}.values()))


def builtin_dir() -> Path:
    """The built-in study files: studies/ in a clone, virtbench/study_files in an installed package
    (setup.py copies them there; virtbench/studies is this Python package)."""
    return paths.PROJECT_ROOT / "studies" if paths.is_clone() else paths.PACKAGE_DIR / "study_files"


def builtin_paths() -> list[Path]:
    return sorted(builtin_dir().glob("[0-9][0-9][0-9].toml"))


_BUILTIN: list[Study] | None = None


def builtin() -> list[Study]:
    """The five built-in studies, loaded once (validated, complete once BUILTIN_COMPLETE)."""
    global _BUILTIN
    if _BUILTIN is None:
        _BUILTIN = [load(p, builtin=True) for p in builtin_paths()]
    return _BUILTIN


def load(path: str | Path, *, builtin: bool = False) -> Study:
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise UserError(f"cannot read the study file {path}: {exc.strerror or exc}",
                        "give the path of a study file (TOML); see docs/study-files.md") from None
    return parse(data, str(path), path.resolve().parent, builtin=builtin)


def builtin_findings(studies: list[str] | None = None) -> list[Finding]:
    """The built-in studies' findings (of the studies named; None: all)."""
    return [f for s in builtin() for f in s.findings if not studies or s.id in studies]


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def parse(data: bytes, label: str, base: Path, *, builtin: bool = False, stored: bool = False) -> Study:
    """A study file's bytes -> Study. `label` names it in errors, `base` is the directory its suite
    paths are relative to. `stored`: the text a run recorded, read again to score that run: its
    suite files are not checked (they may have moved since)."""
    text = data.decode("utf-8", errors="replace")
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        m = re.search(r"line (\d+)", str(exc))
        raise StudyFileError(label, int(m.group(1)) if m else None, "(syntax)", str(exc)) from None
    w = _Where(label, text)
    _unknown(w, (), doc, {"study", "experiments", "findings", "left_out"})
    head = doc.get("study")
    if not isinstance(head, dict):
        w.add(("study",), "missing: a [study] table with id and title")
        w.raise_all()
    _unknown(w, ("study",), head, STUDY_KEYS)
    sid = _text(w, ("study", "id"), head.get("id"), required=True)
    if sid and not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", sid):
        w.add(("study", "id"), "must be letters, digits, '.', '_' or '-' (it prefixes experiment and finding ids)")
    title = _text(w, ("study", "title"), head.get("title"), required=True)
    left_out = {}
    for i, item in enumerate(_tables(w, ("left_out",), doc.get("left_out", []))):
        _unknown(w, ("left_out", i), item, {"id", "why"})
        left_out[_text(w, ("left_out", i, "id"), item.get("id"), required=True)] = \
            _text(w, ("left_out", i, "why"), item.get("why"), required=True)
    exps = tuple(e for i, item in enumerate(_tables(w, ("experiments",), doc.get("experiments", [])))
                 if (e := _experiment(w, ("experiments", i), item, sid, base, stored)) is not None)
    _unique(w, "experiments", [e.id for e in exps])
    exp_ids = {e.id for e in exps}
    finds = tuple(f for i, item in enumerate(_tables(w, ("findings",), doc.get("findings", [])))
                  if (f := _finding(w, ("findings", i), item, sid, exp_ids, builtin and not stored)) is not None)
    if not finds and "findings" not in doc:
        w.add(("findings",), "missing: at least one [[findings]] entry")
    _unique(w, "findings", [f.id for f in finds])
    w.raise_all()
    return Study(sid, title, label, sha256(data), exps, finds, left_out, str(head.get("source", "")), builtin)


# -- parts -------------------------------------------------------------------------------------------------

def _unknown(w: _Where, at: tuple, table: dict, known: set[str]) -> None:
    for k in table:
        if k not in known:
            w.add(at + (k,), "unknown key", sorted(known))


def _unique(w: _Where, what: str, ids: list[str]) -> None:
    for i, x in enumerate(ids):
        if x in ids[:i]:
            w.add((what, i, "id"), f"{x!r} is given twice")


def _tables(w: _Where, at: tuple, v: Any) -> list[dict]:
    if not isinstance(v, list) or not all(isinstance(x, dict) for x in v):
        w.add(at, f"must be an array of tables ([[{'.'.join(map(str, at))}]])")
        return []
    return v


def _text(w: _Where, at: tuple, v: Any, *, required: bool = False) -> str:
    if v is None:
        if required:
            w.add(at, "missing")
        return ""
    if not isinstance(v, str) or (required and not v.strip()):
        w.add(at, "must be a non-empty string" if required else "must be a string")
        return ""
    return v


def _strings(w: _Where, at: tuple, v: Any, choices=None) -> tuple[str, ...]:
    if v is None:
        return ()
    if isinstance(v, str):
        v = [v]
    if not isinstance(v, list) or not all(isinstance(x, str) for x in v):
        w.add(at, "must be a string or a list of strings")
        return ()
    for x in v:
        if choices is not None and x not in choices:
            w.add(at, f"{x!r} is not one of them", sorted(choices))
    return tuple(v)


def _number(w: _Where, at: tuple, v: Any, *, minimum: float = 0, integer: bool = False) -> float:
    ok = isinstance(v, int) if integer else isinstance(v, (int, float))
    if isinstance(v, bool) or not ok or v < minimum:
        w.add(at, f"must be a {'whole ' if integer else ''}number >= {minimum:g}" + ("" if v is None else f", got {v!r}"))
        return minimum
    return v


def _filter(w: _Where, at: tuple, v: Any) -> dict[str, Any]:
    """A cell filter: key -> allowed values; "(unset)" stands for a cell without the key."""
    if v is None:
        return {}
    if not isinstance(v, dict) or not all(isinstance(x, list) for x in v.values()):
        w.add(at, "must be a table of lists, such as { kernel = [\"ep\"], class = [\"W\"] }")
        return {}
    return {k: [None if x == UNSET else x for x in xs] for k, xs in v.items()}


def _table(w: _Where, at: tuple, v: Any) -> dict[str, Any]:
    if v is None:
        return {}
    if not isinstance(v, dict):
        w.add(at, "must be a table")
        return {}
    return dict(v)


def _suite_names(path: Path) -> tuple[set[str], set[str]] | None:
    """The environments and workload names a suite file defines (None: not a TOML file)."""
    try:
        doc = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError):
        return None
    envs = set(doc.get("environments", {})) if isinstance(doc.get("environments"), dict) else set()
    wls = {x.get("name") for x in doc.get("workloads", []) if isinstance(x, dict)}
    return envs, wls


def _experiment(w: _Where, at: tuple, t: dict, sid: str, base: Path, stored: bool) -> Experiment | None:
    _unknown(w, at, t, EXPERIMENT_KEYS)
    eid = _text(w, at + ("id",), t.get("id"), required=True)
    suite = _text(w, at + ("suite",), t.get("suite"), required=True)
    suite_path = (base / suite).resolve() if suite else None
    boot = t.get("boot", False)
    if not isinstance(boot, bool):
        w.add(at + ("boot",), "must be true or false")
        boot = False
    envs = _strings(w, at + ("envs",), t.get("envs"))
    kvm_envs = _strings(w, at + ("kvm_envs",), t.get("kvm_envs"))
    workload = _text(w, at + ("workload",), t.get("workload"))
    remote_like = _text(w, at + ("remote_like",), t.get("remote_like"))
    if suite_path is not None and not stored:
        names = _suite_names(suite_path) if suite_path.is_file() else None
        if not suite_path.is_file():
            w.add(at + ("suite",), f"no such file: {suite_path} (a suite file, relative to the study file)")
        elif names is None:
            w.add(at + ("suite",), f"{suite} is not a TOML suite file")
        elif not boot:
            envs_known, wls = names
            for key, got in (("envs", envs), ("kvm_envs", kvm_envs), ("remote_like", (remote_like,) if remote_like else ())):
                for e in got:
                    if e not in envs_known:
                        w.add(at + (key,), f"{suite} defines no environment {e!r}", sorted(envs_known))
            if workload and workload not in wls:
                w.add(at + ("workload",), f"{suite} has no workload {workload!r}", sorted(x for x in wls if x))
    tiers = tuple(x for i, item in enumerate(_tables(w, at + ("tiers",), t.get("tiers", [])))
                  if (x := _tier(w, at + ("tiers", i), item, boot)) is not None)
    if not tiers:
        w.add(at + ("tiers",), "missing: at least one [[experiments.tiers]] entry")
    elif any(a.extra and not b.extra for a, b in zip(tiers, tiers[1:])):
        w.add(at + ("tiers",), "extra tiers (more repetitions of the largest scale) must come after the ordinary ones")
    elif all(x.extra for x in tiers):
        w.add(at + ("tiers",), "needs at least one tier that is not extra")
    if not tiers or all(x.extra for x in tiers):
        return None
    return Experiment(
        eid, sid, _text(w, at + ("title",), t.get("title"), required=True), suite, envs, workload,
        _filter(w, at + ("where",), t.get("where")), _filter(w, at + ("condition_where",), t.get("condition_where")),
        tiers, _strings(w, at + ("needs",), t.get("needs"), NEEDS), kvm_envs, boot,
        _strings(w, at + ("same",), t.get("same")), _text(w, at + ("note",), t.get("note")), remote_like,
        int(_number(w, at + ("remote_hosts",), t.get("remote_hosts", 0), integer=True)),
        str(suite_path) if suite_path else "",
        int(_number(w, at + ("priority",), t.get("priority", 100), integer=True)))


def _tier(w: _Where, at: tuple, t: dict, boot: bool) -> Tier | None:
    _unknown(w, at, t, TIER_KEYS)
    conds = t.get("conditions", [])
    if not isinstance(conds, list) or not all(isinstance(c, dict) for c in conds):
        w.add(at + ("conditions",), "must be a list of tables, such as [{ storage = \"local\" }]")
        conds = []
    bootgrid = _table(w, at + ("boot",), t.get("boot"))
    if boot and bootgrid and "concurrency" not in bootgrid:
        w.add(at + ("boot",), "a boot tier names its concurrency (and sizes_gb and scale for a VM grid)")
    extra = t.get("extra", False)
    if not isinstance(extra, bool):
        w.add(at + ("extra",), "must be true or false")
        extra = False
    return Tier(_text(w, at + ("label",), t.get("label"), required=True),
                int(_number(w, at + ("repeat",), t.get("repeat"), minimum=1, integer=True)),
                float(_number(w, at + ("estimate_s",), t.get("estimate_s"), minimum=1)),
                _table(w, at + ("params",), t.get("params")), _filter(w, at + ("select",), t.get("select")),
                tuple(conds), bootgrid, extra)


def _selector(w: _Where, at: tuple, v: Any, exp_ids: set[str]) -> dict[str, Any] | None:
    """A selector of measured groups (score.select): experiment(s), workload, metric, kind(s), params,
    condition, prefer."""
    if not isinstance(v, dict):
        w.add(at, "must be a table: experiment, workload, metric, kind, and optionally params, condition, prefer")
        return None
    _unknown(w, at, v, SELECTOR_KEYS)
    exps = _strings(w, at + ("experiment",), v.get("experiment"))
    if not exps:
        w.add(at + ("experiment",), "missing: the experiment (or a list of them) the groups come from")
    for e in exps:
        if e not in exp_ids:
            w.add(at + ("experiment",), f"no experiment {e!r} in this study file", sorted(exp_ids))
    kinds = _strings(w, at + ("kind",), v.get("kind"), KINDS)
    if not kinds:
        w.add(at + ("kind",), "missing: the environment kind(s) the groups come from", KINDS)
    return {"experiment": exps, "workload": _text(w, at + ("workload",), v.get("workload"), required=True),
            "metric": _text(w, at + ("metric",), v.get("metric"), required=True), "kind": kinds,
            "params": _table(w, at + ("params",), v.get("params")),
            "condition": _table(w, at + ("condition",), v.get("condition")),
            "prefer": _strings(w, at + ("prefer",), v.get("prefer"), KINDS),
            "env": _strings(w, at + ("env",), v.get("env"))}


def roles(rule: str, args: dict[str, Any]) -> list[str]:
    """The names a published group's `of` may take: the rule's selectors (chain.0 ...; fine, coarse)."""
    spec = RULE_ARGS.get(rule, {})
    out = list(spec.get("selectors", ()))
    for name in spec.get("chains", ()):
        out += [f"{name}.{i}" for i in range(len(args.get(name) or []))]
    for name in spec.get("pairs", ()):
        out += [f"{name}.{i}.{j}" for i in range(len(args.get(name) or [])) for j in (0, 1)]
    for name in spec.get("sums", ()):
        out += [f"{name}.{i}" for i in range(len(args.get(name) or []))]
    if rule == "penalty":
        out += ["fine", "coarse"]
    return out


def _args(w: _Where, at: tuple, rule: str, v: Any, exp_ids: set[str]) -> dict[str, Any]:
    v = _table(w, at, v)
    spec = RULE_ARGS[rule]
    known = (set(spec.get("selectors", ())) | set(spec.get("chains", ())) | set(spec.get("pairs", ()))
             | set(spec.get("sums", ())) | set(spec["values"]))
    if spec["tolerance"]:
        known |= set(TOLERANCES)
    _unknown(w, at, v, known)
    out: dict[str, Any] = {}
    for name in spec.get("selectors", ()):
        if name not in v:
            w.add(at + (name,), f"missing: rule {rule} reads a selector {name}")
        elif (s := _selector(w, at + (name,), v[name], exp_ids)) is not None:
            out[name] = s
    for name in spec.get("chains", ()):
        items = v.get(name)
        if not isinstance(items, list) or len(items) < 2:
            w.add(at + (name,), f"must be a list of at least 2 selectors (rule {rule})")
            continue
        out[name] = [s for i, item in enumerate(items) if (s := _selector(w, at + (name, i), item, exp_ids))]
    for name in spec.get("sums", ()):
        items = v.get(name)
        if not isinstance(items, list) or not items:
            w.add(at + (name,), f"must be a list of selectors whose groups add up (rule {rule})")
            continue
        out[name] = [s for i, item in enumerate(items) if (s := _selector(w, at + (name, i), item, exp_ids))]
    for name in spec.get("pairs", ()):
        items = v.get(name)
        if not isinstance(items, list) or not items or not all(isinstance(x, list) and len(x) == 2 for x in items):
            w.add(at + (name,), f"must be a list of [from, to] selector pairs, each step going down (rule {rule})")
            continue
        pairs = [[_selector(w, at + (name, i, j), x, exp_ids) for j, x in enumerate(item)] for i, item in enumerate(items)]
        out[name] = [p for p in pairs if all(p)]
    for name, (types, required) in spec["values"].items():
        if name not in v:
            if required:
                w.add(at + (name,), f"missing: rule {rule} needs {name}")
            continue
        if isinstance(v[name], bool) or not isinstance(v[name], types):
            w.add(at + (name,), f"has the wrong type for rule {rule}")
            continue
        out[name] = v[name]
    if rule == "penalty":
        for part in ("fine", "coarse"):
            if isinstance(out.get(part), dict):
                _unknown(w, at + (part,), out[part], {"workload", "params"})
        for e in [out.get("experiment")] if out.get("experiment") else []:
            if e not in exp_ids:
                w.add(at + ("experiment",), f"no experiment {e!r} in this study file", sorted(exp_ids))
        out["kind"], out["prefer"] = tuple(out.get("kind", ())), tuple(out.get("prefer", ()))
    tol = [k for k in TOLERANCES if k in v] if spec["tolerance"] else []
    if spec["tolerance"]:
        if len(tol) != 1:
            w.add(at, f"rule {rule} needs exactly one tolerance of {', '.join(TOLERANCES)}" + (
                f" (has {', '.join(tol)})" if tol else ""))
        for k in tol:
            ok = (isinstance(v[k], list) and len(v[k]) == 2 and all(isinstance(x, (int, float)) for x in v[k])
                  and v[k][0] < v[k][1]) if k == "within" else isinstance(v[k], (int, float)) and not isinstance(v[k], bool)
            if not ok:
                w.add(at + (k,), "must be [low, high] with low < high" if k == "within" else "must be a number")
            out[k] = v[k]
    if "within" in out and rule == "efficiency":
        b = out["within"]
        if not (len(b) == 2 and all(isinstance(x, (int, float)) for x in b) and b[0] < b[1]):
            w.add(at + ("within",), "must be [low, high] with low < high")
    return out


def _published(w: _Where, at: tuple, v: Any, rule: str, args: dict[str, Any]) -> Published | None:
    if v is None:
        return None
    v = _table(w, at, v)
    _unknown(w, at, v, {"source", "repetitions", "groups", "higher_is_better"})
    better = v.get("higher_is_better", True)
    if not isinstance(better, bool):
        w.add(at + ("higher_is_better",), "must be true or false")
        better = True
    allowed = roles(rule, args)
    groups = []
    for i, g in enumerate(_tables(w, at + ("groups",), v.get("groups", []))):
        gat = at + ("groups", i)
        _unknown(w, gat, g, {"of", "values", "params", "condition", "kind"})
        of = _text(w, gat + ("of",), g.get("of"), required=True)
        if of and of not in allowed:
            w.add(gat + ("of",), f"rule {rule} reads no group {of!r}", allowed)
        vals = g.get("values")
        if not isinstance(vals, list) or not vals or not all(
                isinstance(x, (int, float)) and not isinstance(x, bool) for x in vals):
            w.add(gat + ("values",), "must be a non-empty list of the study's numbers")
            vals = []
        kind = _text(w, gat + ("kind",), g.get("kind"))
        if kind and kind not in KINDS:
            w.add(gat + ("kind",), f"{kind!r} is not an environment kind", KINDS)
        groups.append(PublishedGroup(of, tuple(float(x) for x in vals), _table(w, gat + ("params",), g.get("params")),
                                     _table(w, gat + ("condition",), g.get("condition")), kind))
    if not groups:
        w.add(at + ("groups",), "missing: the study's numbers as [[...published.groups]] (of, values)")
    reps = v.get("repetitions")
    if reps is not None:
        reps = int(_number(w, at + ("repetitions",), reps, minimum=1, integer=True))
    return Published(_text(w, at + ("source",), v.get("source"), required=True), tuple(groups), reps, better)


def _sides(args: dict[str, Any]) -> list[dict[str, Any]]:
    """The selectors of a finding's comparison (its rule's groups)."""
    out = []
    for v in args.values():
        for s in (v if isinstance(v, list) else [v]):
            for x in (s if isinstance(s, list) else [s]):  # steps: pairs of selectors
                if isinstance(x, dict) and "metric" in x and "kind" in x:
                    out.append(x)
    if isinstance(args.get("kind"), tuple) and args.get("metric"):  # the penalty: host against these kinds
        out.append({"kind": ("host",) + args["kind"], "condition": {}})
    return out


def _needs_match(w: _Where, at: tuple, needs: tuple[str, ...], args: dict[str, Any], rule: str) -> None:
    """A finding needs exactly what its comparison needs: KVM only where a side is a VM (and a side that
    can only be a VM needs it: a TCG VM measures emulation), a cluster where a side is pods, a kernel
    NFS client where a side is on NFS, a cloud where a side is a cloud's instances."""
    if rule == "none":
        return
    sides = _sides(args)
    kinds = [set(s.get("kind") or ()) for s in sides]
    storage = {str(s.get("condition", {}).get("storage")) for s in sides}
    have = {"kvm": any("vm" in k for k in kinds), "cluster": any("pods" in k for k in kinds),
            "nfs": bool(storage & {"nfs"}), "cloud": any("cloud" in k for k in kinds)}
    what = {"kvm": "a VM", "cluster": "pods", "nfs": "on NFS (condition storage = \"nfs\")", "cloud": "a cloud's instances"}
    for need in needs:
        if need in have and not have[need]:
            w.add(at + ("needs",), f"needs {need}, but no side of its comparison is {what[need]}: a machine "
                                   f"without {need} would be told so for a comparison that does not use it")
    if any(k == {"vm"} for k in kinds) and "kvm" not in needs:
        w.add(at + ("needs",), "a side of its comparison can only be a VM: add \"kvm\" (a VM under TCG measures "
                               "emulation, never a hypervisor)")


def _finding(w: _Where, at: tuple, t: dict, sid: str, exp_ids: set[str], builtin: bool) -> Finding | None:
    from .score import RULES

    _unknown(w, at, t, FINDING_KEYS)
    fid = _text(w, at + ("id",), t.get("id"), required=True)
    required = FINDING_TEXT if builtin and BUILTIN_COMPLETE else REQUIRED_TEXT
    texts = {k: _text(w, at + (k,), t.get(k), required=k in required) for k in FINDING_TEXT}
    unmeasurable = _text(w, at + ("unmeasurable",), t.get("unmeasurable"))
    if builtin and BUILTIN_COMPLETE and texts["cite"] and not re.search(r"section|table|figure|§", texts["cite"], re.I):
        w.add(at + ("cite",), "must name the section, table or figure")
    rule = _text(w, at + ("rule",), t.get("rule"), required=True)
    rules = sorted(RULES) + ["none"]
    if rule and rule not in rules:
        w.add(at + ("rule",), f"unknown rule {rule!r}", rules)
        return None
    if rule == "none" and not unmeasurable:
        w.add(at + ("unmeasurable",), "rule \"none\" needs the reason it cannot be measured on any machine")
    if not rule:
        return None
    args = _args(w, at + ("args",), rule, t.get("args"), exp_ids)
    revised = []
    for i, r in enumerate(_tables(w, at + ("revised",), t.get("revised", []))):
        rat = at + ("revised", i)
        _unknown(w, rat, r, {"date", "change", "why"})
        date = r.get("date")
        date = date.isoformat() if hasattr(date, "isoformat") else date
        if not isinstance(date, str) or not re.fullmatch(r"\d{4}-\d\d-\d\d", date):
            w.add(rat + ("date",), "must be a date, YYYY-MM-DD")
            date = ""
        revised.append(Revision(date, _text(w, rat + ("change",), r.get("change"), required=True),
                                _text(w, rat + ("why",), r.get("why"), required=True)))
    needs = _strings(w, at + ("needs",), t.get("needs"), NEEDS)
    _needs_match(w, at, needs, args, rule)
    return Finding(fid, sid, texts["finding"], texts["quote"], texts["quote_en"] or "", texts["cite"],
                   texts["quantity"], texts["tolerance"], texts["derivation"], texts["could_fail"], rule, args,
                   needs, unmeasurable,
                   _published(w, at + ("published",), t.get("published"), rule, args), tuple(revised))
