"""Suite files (TOML) and ad hoc runs -> one validated matrix the runner executes.

The matrix is plain JSON-able data (stored with the run, so `--resume` needs no suite file).
"""

from __future__ import annotations

import hashlib
import itertools
import tomllib
from collections.abc import Iterable
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import conditions, drivers, paths, shapes, workloads
from .errors import SuiteError, SuiteErrors, UserError
from .model import EnvSpec, Shape
from .store import canonical
from .tomlpos import key_lines, line_of

SUITE_KEYS = {
    "name": "suite name shown in listings",
    "description": "what the suite reproduces",
    "baseline": "environment every other one is compared with",
    "environments": "which of the defined environments to run (default: all)",
    "warmup": "unrecorded repetitions per environment before measuring: a number, or \"auto\" (repeat until two "
              "in a row agree within 5 %, at most 5)",
    "min_repetitions": "repetitions always taken",
    "max_repetitions": "repetitions at most",
    "ci_target": "stop a cell when every ratio to the baseline has a CI half-width within this fraction of the ratio",
    "margin": "equivalence margin of the verdicts, a fraction of the baseline: a ratio whose whole CI lies within "
              "it of 1 is 'equivalent' (default 0.02, i.e. ±2 %)",
    "time_budget": "seconds for the adaptive repetitions: past its minimum a cell stops once its share is spent",
    "timeout": "seconds one repetition may take (default: the workload's own estimate)",
    "monitor": "sample CPU, memory, network and disk of the host and every instance while repetitions run "
               "(true/false, default true)",
    "monitor_interval": "seconds between the monitor's samples (default 1)",
    "inventory": "an Ansible-style inventory file (relative to the suite file) with the SSH hosts that ssh "
                 "environments and machine options name; --inventory overrides it",
}
SHAPE_KEYS = ("vcpus", "memory_mb", "disk_gb")
WORKLOAD_KEYS = ("name", "params", "condition", "environments")


@dataclass
class Policy:
    warmup: int | str = 1  # a count, or "auto": until steady (runner.WARMUP_STEADY)
    min_repetitions: int = 3
    max_repetitions: int = 10
    ci_target: float = 0.02
    margin: float = 0.02  # stats.interval_verdict.DEFAULT_MARGIN: the equivalence margin of the verdicts
    time_budget: float | None = None
    timeout: float | None = None
    monitor: bool = True
    monitor_interval: float = 1.0


@dataclass
class Matrix:
    name: str
    path: str | None
    baseline: str
    environments: list[EnvSpec]
    cells: list[dict[str, Any]]
    policy: Policy = field(default_factory=Policy)
    description: str = ""
    inventory: str | None = None  # absolute path of the inventory file, when the run uses one

    def to_spec(self) -> dict[str, Any]:
        return {"name": self.name, "path": self.path, "description": self.description, "baseline": self.baseline,
                "environments": [e.as_dict() for e in self.environments], "cells": self.cells,
                "policy": vars(self.policy), "inventory": self.inventory}

    @classmethod
    def from_spec(cls, spec: dict[str, Any]) -> Matrix:
        envs = [EnvSpec(e["name"], e["driver"], Shape(**e["shape"]), e["options"]) for e in spec["environments"]]
        return cls(spec["name"], spec["path"], spec["baseline"], envs, spec["cells"], Policy(**spec["policy"]),
                   spec.get("description", ""), spec.get("inventory"))


def cell(workload: str, params: dict[str, Any], condition: dict[str, Any] | None = None) -> dict[str, Any]:
    condition = condition or {}
    key = hashlib.sha1(canonical([workload, params, condition]).encode()).hexdigest()[:16]
    return {"key": key, "workload": workload, "params": params, "condition": condition}


class _Where:
    """Turns a key path into a SuiteError with file and line, and gathers a file's errors so all of
    them are reported at once, not only the first."""

    def __init__(self, path: str, text: str):
        self.path = path
        self.lines = key_lines(text)
        self.errors: list[UserError] = []

    def error(self, keypath: tuple, problem: str, choices=None) -> SuiteError:
        key = ".".join(str(k) for k in keypath if not isinstance(k, int)) or "(top)"
        return SuiteError(self.path, line_of(self.lines, keypath), key, problem, choices)

    @contextmanager
    def collect(self):
        """Record an error raised in the block and go on with the next part of the file."""
        try:
            yield
        except UserError as exc:
            self.errors.append(exc)

    def raise_all(self) -> None:
        if len(self.errors) == 1:
            raise self.errors[0]
        if self.errors:
            found = sorted(self.errors, key=lambda e: getattr(e, "line", None) or 0)
            raise SuiteErrors(list({e.message: e for e in found}.values()))


def load(path: str | Path, *, envs: list[str] | None = None, repeat: int | None = None,
         duration: float | None = None) -> Matrix:
    """Read and validate a suite file; the overrides are the CLI's quick-try flags."""
    path = Path(path)
    if not path.exists():
        # A shipped suite by name (quick) or as the README writes it (suites/quick.toml), also
        # from an installed package outside a clone.
        candidate = paths.suites_dir() / (path.name if path.suffix else f"{path.name}.toml")
        if (path.suffix == "" or path.parent == Path("suites")) and candidate.exists():
            path = candidate
        else:
            raise UserError(f"suite file {path} does not exist", "pass a path such as suites/quick.toml")
    text = path.read_text()
    where = _Where(str(path), text)
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise UserError(f"{path}: not valid TOML: {exc}", "fix the syntax at that line") from None
    if isinstance(doc.get("boot"), dict):  # a `virtbench boot` grid, not a matrix of workloads
        raise UserError(f"{path} is a boot suite (it has a [boot] table)", f"run it with: virtbench boot --suite {path}")
    # Each part is checked on its own, so one run of `virtbench run` names every problem of the file.
    _check_keys(where, doc, (), ("suite", "shapes", "environments", "workloads"))
    meta = doc.get("suite", {})
    with where.collect():
        _check_keys(where, meta, ("suite",), tuple(SUITE_KEYS))
    if not isinstance(meta, dict):
        meta = {}
    custom_shapes = _shapes(where, doc.get("shapes", {}))
    raw_envs = doc.get("environments", {})
    defined = _environments(where, raw_envs, custom_shapes)
    file_envs = list(raw_envs) if isinstance(raw_envs, dict) else []
    broken = {n for n in file_envs if n not in defined}
    if not defined and not broken:
        with where.collect():
            raise where.error(("environments",), "no environments defined", drivers.names())

    selected = join_host_lists(envs, defined) if envs else meta.get("environments") or list(defined)
    env_list = []
    for name in selected:
        if name not in broken:
            with where.collect():
                env_list.append(_pick_env(where, name, defined, custom_shapes,
                                          None if envs else ("suite", "environments")))
            if not env_list or env_list[-1].name != name:  # its error is recorded: no baseline error too
                broken.add(name)
    names = [e.name for e in env_list]
    baseline = meta.get("baseline", names[0] if names else "")
    # checked against the broken environments' names too: a broken one has its own errors, and a
    # misspelt baseline is named in the same pass, not after those are fixed
    if baseline not in names and baseline not in broken and (names or "baseline" in meta):
        if envs:  # the CLI narrowed the environments: fall back to the first one
            baseline = names[0] if names else baseline
        else:
            with where.collect():
                raise where.error(("suite", "baseline"), f"'{baseline}' is not one of the run's environments",
                                  names + [n for n in selected if n in broken and n in file_envs])

    wl_entries = doc.get("workloads", [])
    cells = []
    if not isinstance(wl_entries, list) or not wl_entries:
        with where.collect():
            raise where.error(("workloads",), "no [[workloads]] entries", workloads.names())
    else:
        for i, entry in enumerate(wl_entries):
            with where.collect():
                cells.extend(_workload_cells(where, i, entry, duration, defined, broken))
    with where.collect():
        policy = _policy(where, meta, repeat)
    with where.collect():
        inventory = _inventory(where, meta, path)
    where.raise_all()
    cells, env_list = _narrow(path, _merge_cells(cells), env_list, baseline)
    return Matrix(meta.get("name", path.stem), str(path), baseline, env_list, cells, policy,
                  meta.get("description", ""), inventory)


def _inventory(where: _Where, meta: dict, path: Path) -> str | None:
    """[suite] inventory: a file relative to the suite's directory, which must exist."""
    raw = meta.get("inventory")
    if raw is None:
        return None
    if not isinstance(raw, str) or not raw:
        raise where.error(("suite", "inventory"), "must be the path of an inventory file")
    inv = (path.parent / Path(raw).expanduser()).resolve()
    if not inv.is_file():
        raise where.error(("suite", "inventory"), f"{inv} does not exist",
                          ["a file made by 'virtbench testbed up N --inventory FILE'", "your own Ansible inventory"])
    return str(inv)


def cell_environments(cell: dict[str, Any], matrix_envs: list[str]) -> list[str]:
    """The environments one cell runs on, in the matrix's order (a cell without the key: all)."""
    only = cell.get("environments")
    return [e for e in matrix_envs if not only or e in only]


def adhoc(workload: str, raw_params: dict[str, str], envs: list[str], *, repeat: int | None = None,
          duration: float | None = None, baseline: str | None = None) -> Matrix:
    """`virtbench run --workload NAME --param K=V ... --envs a,b` without a suite file."""
    where = _Where("--param", "")
    try:
        wl = workloads.get(workload)
    except KeyError:
        raise UserError(f"unknown workload '{workload}'", "valid workloads: " + ", ".join(workloads.names())) from None
    if not wl.suite_runnable:
        raise UserError(f"workload '{workload}' is not run this way", f"use: virtbench {workload} --help")
    params = {k: [p.strip() for p in v.split(",")] if isinstance(v, str) and "," in v else v
              for k, v in raw_params.items()}
    wl_keys = {p.name for p in wl.params}
    cond = {k: params.pop(k) for k in list(params) if k not in wl_keys and k in conditions.REGISTRY}
    cells = _expand(where, ("workloads", 0), wl, params, duration, cond)
    where.raise_all()
    env_list = [_pick_env(_Where("--envs", ""), name, {}, {}) for name in join_host_lists(envs or ["host"], ())]
    names = [e.name for e in env_list]
    base = baseline or names[0]
    if base not in names:
        raise UserError(f"baseline '{base}' is not one of the environments", "choose one of: " + ", ".join(names))
    policy = Policy()
    if repeat:
        policy.min_repetitions = policy.max_repetitions = repeat
    return Matrix(f"adhoc-{workload}", None, base, env_list, cells, policy)


# -- pieces -------------------------------------------------------------------------------------

def _check_keys(where: _Where, table: Any, at: tuple, allowed) -> None:
    """Not a table: raised. Unknown keys: each recorded (the rest of the table is still checked)."""
    if not isinstance(table, dict):
        raise where.error(at, "must be a table")
    for key in table:
        if key not in allowed:
            where.errors.append(where.error(at + (key,), "unknown key", sorted(allowed)))


def _shapes(where: _Where, table: dict) -> dict[str, Shape]:
    out = {}
    for name, spec in table.items():
        with where.collect():
            _check_keys(where, spec, ("shapes", name), SHAPE_KEYS)
            bad = [where.error(("shapes", name, key), f"must be a positive whole number, got {value!r}")
                   for key, value in spec.items() if not isinstance(value, int) or value <= 0]
            where.errors += bad
            if not bad:
                out[name] = Shape(name, spec.get("vcpus"), spec.get("memory_mb"), spec.get("disk_gb"))
    return out


def _environments(where: _Where, table: dict, custom: dict[str, Shape]) -> dict[str, EnvSpec]:
    """The valid environments; each broken one's errors are recorded in `where`."""
    if not isinstance(table, dict):
        with where.collect():
            raise where.error(("environments",), "must be a table of [environments.NAME] tables")
        return {}
    out = {}
    for name, spec in table.items():
        with where.collect():
            env = _environment(where, name, spec, custom)
            if env is not None:
                out[name] = env
    return out


def _environment(where: _Where, name: str, spec: Any, custom: dict[str, Shape]) -> EnvSpec | None:
    """One [environments.NAME] table; None when it has errors (recorded in `where`, or raised)."""
    at = ("environments", name)
    if not isinstance(spec, dict):
        raise where.error(at, "must be a table with at least driver = \"...\"")
    driver = spec.get("driver")
    if driver not in drivers.names():
        raise where.error(at + ("driver",), f"unknown driver {driver!r}", drivers.names())
    if driver in drivers.ALIASES:  # pods: its option backend picks the driver
        key, choices, default = drivers.ALIASES[driver]
        value = spec.get(key, default)
        if not isinstance(value, str) or value not in choices:
            raise where.error(at + (key,), f"invalid value {spec.get(key)!r}", sorted(choices))
    cls = drivers.driver_class(driver, spec)
    options_spec = cls.options
    before = len(where.errors)
    _check_keys(where, spec, at, ("driver", "shape", *options_spec))
    shape = None
    with where.collect():  # recorded: the options below are checked too
        shape = _shape(where, at + ("shape",), spec.get("shape", "native"), custom)
        if shape.name != "native" and not cls.supports_shapes:
            raise where.error(at + ("shape",), f"the {driver} driver cannot limit resources; remove the shape",
                              ["native"])
    options = {}
    for key, opt in options_spec.items():
        value = spec.get(key, opt.default)
        if opt.choices and value not in opt.choices:
            where.errors.append(where.error(at + (key,), f"invalid value {value!r}", opt.choices))
        options[key] = value
    for key, problem, choices in cls.option_problems(options):
        where.errors.append(where.error(at + (key,), problem, choices))
    return EnvSpec(name, driver, shape, options) if len(where.errors) == before and shape else None


def _shape(where: _Where, at: tuple, name: Any, custom: dict[str, Shape]) -> Shape:
    try:
        return shapes.resolve(str(name), custom)
    except KeyError:
        raise where.error(at, f"unknown shape {name!r}", shapes.names(custom)) from None


def join_host_lists(names: list[str], defined: Iterable[str]) -> list[str]:
    """`--envs host,ssh@node01,node02` arrives split at every comma; after a DRIVER@HOST item, a name
    that is no environment (neither the suite's nor DRIVER[:SHAPE][@HOST]) is one more host of it."""
    out: list[str] = []
    for name in names:
        driver = name.partition("@")[0].partition(":")[0]
        if out and "@" in out[-1] and name not in defined and driver not in drivers.names():
            out[-1] += "," + name
        else:
            out.append(name)
    return out


def _pick_env(where: _Where, name: str, defined: dict[str, EnvSpec], custom: dict[str, Shape],
              at: tuple | None = None) -> EnvSpec:
    """A suite-defined environment, or an ad hoc 'driver[:shape][@machine]' one. `@` names where it
    runs: an inventory host for container and vm (option machine), hosts or a group for ssh.
    at: the file's key that names it ([suite] environments), for the error's line; None: --envs."""
    def error(problem: str, hint: str, choices: list[str]) -> UserError:
        if at is None:
            return UserError(f"{where.path}: {problem}", hint)
        return where.error(at, problem, choices)

    if name in defined:
        return defined[name]
    head, _, where_at = name.partition("@")
    driver, _, shape_name = head.partition(":")
    if driver in drivers.names():
        options_spec = drivers.driver_class(driver).options
        options = {k: o.default for k, o in options_spec.items()}
        if where_at:
            key = "hosts" if "hosts" in options_spec else "machine" if "machine" in options_spec else None
            if key is None:
                raise error(f"environment '{name}': the {driver} driver runs on this machine only",
                            f"use {head} without @{where_at}", [head])
            options[key] = where_at
        shape = _shape(where, at or ("environments", name), shape_name or "native", custom)
        return EnvSpec(name, driver, shape, options)
    choices = sorted(defined) + [f"{d}[:SHAPE][@HOST]" for d in drivers.names()]
    raise error(f"unknown environment '{name}'", "valid choices: " + ", ".join(choices), choices)


def _workload_cells(where: _Where, i: int, entry: Any, duration: float | None,
                    defined: dict[str, EnvSpec], broken: set[str] = frozenset()) -> list[dict]:
    at = ("workloads", i)
    _check_keys(where, entry, at, WORKLOAD_KEYS)
    name = entry.get("name")
    try:
        wl = workloads.get(name)
    except KeyError:
        raise where.error(at + ("name",), f"unknown workload {name!r}", workloads.names()) from None
    if not wl.suite_runnable:
        raise where.error(at + ("name",), f"workload {name!r} is run by `virtbench {name}`, not by a suite")
    cells = _expand(where, at, wl, entry.get("params", {}), duration, entry.get("condition", {}))
    if "environments" in entry:
        only = _entry_environments(where, at + ("environments",), entry["environments"], defined, broken)
        cells = [{**c, "environments": only} for c in cells]
    return cells


def _entry_environments(where: _Where, at: tuple, raw: Any, defined: dict[str, EnvSpec],
                        broken: set[str] = frozenset()) -> list[str]:
    """A workload entry's `environments = ["host", "vm"]`: names of the suite's [environments.*]."""
    items = raw if isinstance(raw, list) else [raw]
    if not items or not all(isinstance(x, str) for x in items):
        raise where.error(at, f"must be a list of environment names such as [\"{next(iter(defined))}\"], "
                              f"got {raw!r}", sorted(defined))
    for name in items:
        if name not in defined and name not in broken:  # a broken one has its own error already
            raise where.error(at, f"unknown environment {name!r} (only the suite's own [environments.*] can "
                                  f"be named here)", sorted(defined))
    if len(set(items)) != len(items):
        raise where.error(at, f"an environment is listed twice in {items!r}", sorted(defined))
    return [name for name in defined if name in items]  # the suite's order


def _merge_cells(cells: list[dict]) -> list[dict]:
    """The same cell from two entries runs once, on the union of their environments."""
    out: dict[str, dict] = {}
    for c in cells:
        prev = out.get(c["key"])
        if prev is None:
            out[c["key"]] = c
        elif "environments" in prev and "environments" in c:
            prev["environments"] = prev["environments"] + [e for e in c["environments"]
                                                           if e not in prev["environments"]]
        else:  # one of them runs everywhere
            prev.pop("environments", None)
    return list(out.values())


def _narrow(path: Path, cells: list[dict], env_list: list[EnvSpec], baseline: str) -> tuple[list[dict], list[EnvSpec]]:
    """Restrict each cell's environments to those of this run (`--envs`, [suite] environments); drop
    cells left with none, and environments no cell uses (except the baseline)."""
    names = [e.name for e in env_list]
    kept = []
    for c in cells:
        if "environments" in c:
            c = {**c, "environments": [e for e in c["environments"] if e in names]}
            if not c["environments"]:
                continue
        kept.append(c)
    if not kept:
        raise UserError(f"{path}: no workload of the suite runs on {', '.join(names)}",
                        "check the workloads' `environments` keys, or choose other environments with --envs")
    used = {e for c in kept for e in cell_environments(c, names)}
    return kept, [e for e in env_list if e.name in used or e.name == baseline]


def _expand(where: _Where, at: tuple, wl, given: dict, duration: float | None,
            given_condition: dict | None = None) -> list[dict]:
    """Coerce each parameter and condition, sweep lists (cartesian product), validate each combination."""
    before = len(where.errors)
    cond_axes: list[tuple[str, list]] = []
    with where.collect():
        cond_axes = _condition_axes(where, at, given_condition or {})
    known = {p.name: p for p in wl.params}
    for key in given:
        if key not in known:
            where.errors.append(where.error(at + ("params", key), f"unknown parameter of workload '{wl.name}'",
                                            sorted(known)))
    axes = []
    for p in wl.params:
        if p.name == "duration" and duration is not None:
            raw_values = [duration]
        elif p.name in given:
            raw = given[p.name]
            raw_values = list(raw) if isinstance(raw, list) else [raw]
        else:
            raw_values = p.default_values()
        values = []
        for raw in raw_values:
            try:
                values.append(p.coerce(raw))
            except ValueError as exc:  # recorded: the other parameters are checked too
                where.errors.append(where.error(at + ("params", p.name), str(exc), p.choices))
        axes.append((p.name, values))
    if len(where.errors) > before:
        return []
    cells = []
    for combo in itertools.product(*(values for _, values in axes)):
        params = dict(zip((name for name, _ in axes), combo))
        try:
            wl.validate(params)
        except ValueError as exc:
            # "support must be ...", "replicas=2 needs ...": name the parameter the message starts with
            first = str(exc).split(" ", 1)[0].split("=", 1)[0].split("(", 1)[0]
            raise where.error(at + ("params",) + ((first,) if first in known else ()), str(exc)) from None
        for cond_combo in itertools.product(*(values for _, values in cond_axes)):
            condition = {k: v for (k, _), v in zip(cond_axes, cond_combo)}
            cells.append(cell(wl.name, params, condition))
    return cells


def _condition_axes(where: _Where, at: tuple, given: dict) -> list[tuple[str, list]]:
    if not isinstance(given, dict):
        raise where.error(at + ("condition",), "must be a table such as { delay_ms = [0, 10] }")
    axes = []
    for key, raw in given.items():  # each key's errors recorded: the parameters are checked too
        try:
            cond = conditions.get(key)
        except KeyError:
            where.errors.append(where.error(at + ("condition", key), "unknown condition", conditions.names()))
            continue
        values = []
        for item in raw if isinstance(raw, list) else [raw]:
            try:
                values.append(cond.coerce(item))
            except ValueError as exc:
                where.errors.append(where.error(at + ("condition", key), str(exc)))
        axes.append((key, values))
    return axes


def _policy(where: _Where, meta: dict, repeat: int | None) -> Policy:
    """The [suite] repetition, time and monitor keys; each wrong one recorded, the rest still read."""
    policy = Policy()
    if meta.get("warmup") == "auto":
        policy.warmup = "auto"
    for key in ("warmup", "min_repetitions", "max_repetitions"):
        if key in meta and not (key == "warmup" and meta[key] == "auto"):
            value = meta[key]
            if not isinstance(value, int) or isinstance(value, bool) or value < (0 if key == "warmup" else 1):
                where.errors.append(where.error(("suite", key), 'must be a whole number >= 0 or "auto"'
                                                if key == "warmup" else "must be a whole number >= 1"))
            else:
                setattr(policy, key, value)
    for key in ("ci_target", "time_budget", "timeout"):
        if key in meta:
            value = meta[key]
            if not isinstance(value, (int, float)) or value <= 0:
                where.errors.append(where.error(("suite", key), f"must be a positive number, got {value!r}"))
            else:
                setattr(policy, key, float(value))
    if "margin" in meta:
        value = meta["margin"]
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < 1:
            where.errors.append(where.error(("suite", "margin"), f"must be a fraction between 0 and 1 (0.02 = ±2 %), "
                                                                f"got {value!r}"))
        else:
            policy.margin = float(value)
    if "monitor" in meta:
        if not isinstance(meta["monitor"], bool):
            where.errors.append(where.error(("suite", "monitor"), f"must be true or false, got {meta['monitor']!r}"))
        else:
            policy.monitor = meta["monitor"]
    if "monitor_interval" in meta:
        value = meta["monitor_interval"]
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.05 <= value <= 3600:
            where.errors.append(where.error(("suite", "monitor_interval"),
                                            f"must be a number of seconds from 0.05 to 3600, got {value!r}"))
        else:
            policy.monitor_interval = float(value)
    if policy.max_repetitions < policy.min_repetitions:
        where.errors.append(where.error(("suite", "max_repetitions"), "must be >= min_repetitions"))
    if repeat:
        policy.min_repetitions = policy.max_repetitions = repeat
    return policy
