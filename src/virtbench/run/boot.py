"""`virtbench boot`: how long a platform takes to give you a usable instance.

A grid of shape x image size x image mode x concurrency, repeated. One *round* of a cell starts
`concurrency` instances at the same moment (threads released by a barrier), waits until each is
ready or has failed, tears them all down, and records every instance's phase timestamps. Rounds
are interleaved across cells (rep 1 of every cell, then rep 2 ...), so drift hits all cells alike.

Phases are seconds from the instance's `requested` mark: created, running, init, ready (see
drivers/base.py PHASES), plus teardown (its own duration). Timestamps come from events the driver
observes (QMP greeting and RESUME event, console marker lines, the first successful command), so
they have millisecond resolution, unlike tools that poll every 1-2 s.

Storage: a boot run is an ordinary run in the results store (suite name "boot", spec kind "boot").
Each grid cell is a cell of workload "boot" with params {concurrency, image_size, image_mode,
shape}; each instance start is one attempt (repetition = round x concurrency + slot), ok or failed
with its reason; its phases are samples (metric = phase, unit s, lower is better) whose metadata
holds the instance's metadata (accelerator ...) and absolute timestamps; the instance row keeps
the whole lifecycle. So `virtbench runs/show/export` and the Python API see boot runs like any
other, and a failed start is data, as in the first study.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import threading
import time
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .. import drivers, procs, shapes
from .boot_results import METRICS, relative
from .session import Session
from ..drivers.base import DriverContext, Instance
from ..errors import ConditionUnavailable, UserError
from ..model import EnvSpec, Sample
from ..store import Store, canonical
from ..workloads.base import MetricSpec, Param, Workload

DEFAULT_SHAPE = "m1.small"
BOOT_TIMEOUT = 600.0


@dataclass
class Grid:
    driver: str
    concurrency: list[int] = field(default_factory=lambda: [1, 4, 8])
    image_sizes: list[str] = field(default_factory=lambda: ["auto"])
    image_modes: list[str] = field(default_factory=lambda: ["overlay"])
    shapes: list[str] = field(default_factory=lambda: [DEFAULT_SHAPE])
    repeat: int = 5
    options: dict[str, Any] = field(default_factory=dict)
    name: str = "boot"
    published: dict[str, Any] = field(default_factory=dict)  # from a suite file, for the report
    size_notes: dict[str, str] = field(default_factory=dict)  # our size -> what it stands for

    def cells(self) -> list[dict[str, Any]]:
        out = []
        for shape, size, mode, conc in itertools.product(self.shapes, self.image_sizes, self.image_modes,
                                                          self.concurrency):
            params = {"concurrency": conc, "image_size": size, "image_mode": mode, "shape": shape}
            key = hashlib.sha1(canonical(["boot", self.driver, params, self.options]).encode()).hexdigest()[:16]
            out.append({"key": key, "workload": "boot", "params": params, "condition": {}})
        return out


# -- the grid from CLI flags or a suite file ------------------------------------------------------

def _ints(text: str) -> list[int]:
    try:
        values = [int(x) for x in str(text).split(",") if x.strip()]
    except ValueError:
        raise UserError(f"--concurrency {text!r}: give whole numbers such as 1,4,8") from None
    if not values or any(v < 1 or v > 256 for v in values):
        raise UserError(f"--concurrency {text!r}: each value must be 1 to 256")
    return values


def _list(text: str | list | None) -> list[str]:
    if text is None:
        return []
    if isinstance(text, list):
        return [str(x) for x in text]
    return [x.strip() for x in str(text).split(",") if x.strip()]


def grid_from_args(driver: str, concurrency: str | None, image_size: str | None, image_mode: str | None,
                   shape: str | None, repeat: int | None, options: dict[str, str]) -> Grid:
    if driver not in drivers.names():
        raise UserError(f"unknown driver '{driver}'", "valid drivers: " + ", ".join(drivers.names()))
    g = Grid(driver)
    if concurrency:
        g.concurrency = _ints(concurrency)
    if image_size:
        g.image_sizes = _list(image_size)
    if image_mode:
        g.image_modes = _list(image_mode)
    if shape:
        g.shapes = _list(shape)
    if repeat:
        g.repeat = repeat
    g.options = coerce_options(driver, options)
    _validate(g)
    return g


def coerce_options(driver: str, raw: dict[str, Any]) -> dict[str, Any]:
    spec = drivers.driver_class(driver).options
    out = {}
    for key, value in raw.items():
        if key not in spec:
            raise UserError(f"the {driver} driver has no option '{key}'",
                            "its options: " + (", ".join(sorted(spec)) or "none"))
        if key in ("image_mode", "image_size"):
            raise UserError(f"set {key} with --{key.replace('_', '-')}, not as an option")
        opt = spec[key]
        try:
            value = opt.type(value) if not isinstance(value, opt.type) else value
        except (TypeError, ValueError):
            raise UserError(f"option {key}={value!r} is not a valid {opt.type.__name__}") from None
        if opt.choices and value not in opt.choices:
            raise UserError(f"option {key}={value!r} is not one of {', '.join(map(str, opt.choices))}")
        out[key] = value
    return out


def _validate(g: Grid) -> None:
    from ..drivers.vm import disk

    for mode in g.image_modes:
        if mode not in disk.MODES:
            raise UserError(f"image mode '{mode}' is unknown", "use: " + ", ".join(disk.MODES))
    for size in g.image_sizes:
        try:
            disk.parse_size(size)
        except ValueError as exc:
            raise UserError(f"image size: {exc}") from None
    for s in g.shapes:
        try:
            shapes.resolve(s)
        except KeyError:
            raise UserError(f"unknown shape '{s}'", "valid shapes: " + ", ".join(shapes.names())) from None
    if g.repeat < 1:
        raise UserError("--repeat must be at least 1")


def load_suite(path: str | Path) -> Grid:
    """A boot suite file: [boot] with the grid, optional [boot.options], [published] tables."""
    path = Path(path)
    if not path.exists():
        candidate = Path(__file__).resolve().parents[2] / "suites" / f"{path.name}.toml"
        if path.suffix == "" and candidate.exists():
            path = candidate
        else:
            raise UserError(f"suite file {path} does not exist", "e.g. suites/nii-boot.toml")
    try:
        doc = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as exc:
        raise UserError(f"{path}: not valid TOML: {exc}") from None
    b = doc.get("boot")
    if not isinstance(b, dict):
        raise UserError(f"{path}: no [boot] table; this is not a boot suite",
                        "run workload suites with: virtbench run FILE")
    allowed = {"name", "description", "driver", "concurrency", "image_size", "image_mode", "shape", "repeat",
               "options", "scale", "published_sizes_gb"}
    unknown = set(b) - allowed
    if unknown:
        raise UserError(f"{path}: unknown key(s) in [boot]: {', '.join(sorted(unknown))}",
                        "valid keys: " + ", ".join(sorted(allowed)))
    g = Grid(str(b.get("driver", "vm")), name=str(b.get("name", path.stem)))
    if g.driver not in drivers.names():
        raise UserError(f"{path}: unknown driver {g.driver!r}", "valid drivers: " + ", ".join(drivers.names()))
    if "concurrency" in b:
        g.concurrency = _ints(",".join(map(str, b["concurrency"])) if isinstance(b["concurrency"], list)
                              else str(b["concurrency"]))
    if "published_sizes_gb" in b:
        g.image_sizes, g.size_notes = scaled_sizes(g, b["published_sizes_gb"], float(b.get("scale", 1.0)))
    elif "image_size" in b:
        g.image_sizes = _list(b["image_size"])
    if "image_mode" in b:
        g.image_modes = _list(b["image_mode"])
    if "shape" in b:
        g.shapes = _list(b["shape"])
    if "repeat" in b:
        g.repeat = int(b["repeat"])
    g.options = coerce_options(g.driver, b.get("options", {}))
    g.published = doc.get("published", {})
    _validate(g)
    return g


def scaled_sizes(g: Grid, published: list, scale: float) -> tuple[list[str], dict[str, str]]:
    """Published sizes (GB) x scale, as sizes in MiB; sizes below the smallest image are raised to it."""
    from ..drivers.vm import disk

    smallest = drivers.driver_class(g.driver, g.options).smallest_image()
    sizes, notes = [], {}
    for gb in published:
        want = int(float(gb) * scale * (1 << 30))
        got = max(want, smallest or 0)
        mib = -(-got // (1 << 20))
        text = f"{mib // 1024}G" if mib % 1024 == 0 else f"{mib}M"
        note = f"published {gb:g} GB x {scale:g}"
        if smallest and want < smallest:
            note += f" = {disk.format_size(want)}, raised to the smallest image"
        if text in notes:
            notes[text] += f"; {note}"
        else:
            sizes.append(text)
            notes[text] = note
    return sizes, notes


# -- running the grid -------------------------------------------------------------------------------

class BootEvents:
    def planned(self, rounds: int) -> None: ...
    def round(self, cell: dict, rep: int, results: list[dict]) -> None: ...
    def note(self, message: str) -> None: ...


def env_for(g: Grid, params: dict, driver) -> EnvSpec:
    opts = {k: o.default for k, o in drivers.driver_class(g.driver, g.options).options.items()}
    opts.update(g.options)
    if "image_mode" in opts:
        opts["image_mode"] = params["image_mode"]
    if "image_size" in opts:
        opts["image_size"] = params["image_size"]
    shape = shapes.resolve(params["shape"])
    return EnvSpec(g.driver, g.driver, shape, opts)


class BootRunner:
    def __init__(self, store: Store, grid: Grid, *, events: BootEvents | None = None, command: str = "",
                 timeout: float = BOOT_TIMEOUT, inventory: str | None = None):
        self.store = store
        self.grid = grid
        self.inventory = inventory  # an inventory file: `machine` options name its hosts
        self.events = events or BootEvents()
        self.command = command
        self.timeout = timeout
        self.run_id: str | None = None
        self.context: DriverContext | None = None
        self.driver = None
        self.extra: dict[str, Any] = {}

    def spec(self) -> dict[str, Any]:
        g = self.grid
        envs = [{"name": g.driver, "driver": g.driver, "shape": shapes.resolve(g.shapes[0]).as_dict(),
                 "options": g.options}]
        return {"kind": "boot", "name": g.name, "path": None, "description": f"boot times, {g.driver} driver",
                "baseline": g.driver, "environments": envs, "cells": g.cells(),
                "policy": {"warmup": 0, "min_repetitions": g.repeat, "max_repetitions": g.repeat,
                           "ci_target": 1.0, "time_budget": None, "timeout": self.timeout},
                "boot": {"driver": g.driver, "concurrency": g.concurrency, "image_sizes": g.image_sizes,
                         "image_modes": g.image_modes, "shapes": g.shapes, "repeat": g.repeat,
                         "options": g.options, "published": g.published, "size_notes": g.size_notes}}

    def run(self) -> str:
        g = self.grid
        self.run_id = self.store.create_run(self.spec(), suite_name="boot", suite_path=None, baseline=g.driver,
                                            command=self.command)
        with Session(self.run_id, inventory=self.inventory, store=self.store, note=self.events.note) as session:
            self._run(session)
        return self.run_id

    def _run(self, session: Session) -> None:
        g = self.grid
        try:
            self.context = session.context
            self.driver = session.driver(g.driver, g.options)
            session.sweep()  # this machine (machines/ledger.py)
            env = env_for(g, g.cells()[0]["params"], self.driver)
            problems = self.driver.check(env)
            if not problems:  # e.g. a cloud's credentials, endpoint, image ids: before any start
                problems = self.driver.check_env(env)
            if problems:
                raise UserError("the {} driver cannot run here:\n  ".format(g.driver)
                                + "\n  ".join(f"{p.what} (fix: {p.fix})" for p in problems))
            for line in self.driver.plan(env_for(g, g.cells()[0]["params"], self.driver), max(g.concurrency)):
                self.events.note(line)  # what it will create, before it does (a cloud's cost guard)
            cells = g.cells()
            skipped = self._prepare(cells)
            self.events.planned(len([c for c in cells if c["key"] not in skipped]) * g.repeat)
            facts_saved = False
            for rep in range(g.repeat):
                for cell in cells:
                    if cell["key"] in skipped:
                        continue
                    results = self._round(cell, rep)
                    session.sweep()  # and what sweeps of the cell's machines removed
                    if not facts_saved and any(r["status"] == "ok" for r in results):
                        self._save_facts(results)
                        facts_saved = True
                    self.events.round(cell, rep, results)
            self.store.set_status(self.run_id, "completed")
        except KeyboardInterrupt:
            self.store.set_status(self.run_id, "interrupted", "interrupted; instances were torn down")
            raise
        except BaseException as exc:
            self.store.set_status(self.run_id, "failed", f"{type(exc).__name__}: {exc}")
            raise

    def _prepare(self, cells: list[dict]) -> dict[str, str]:
        """Build what every cell needs before timing anything (base disks: 'cached on the node');
        cells that cannot run here are recorded as skipped, with the reason."""
        skipped: dict[str, str] = {}
        for cell in cells:
            p = cell["params"]
            reason, facts = self.driver.prepare_boot_cell(env_for(self.grid, p, self.driver), p,
                                                          lambda m: self.events.note(m))
            for k, v in facts.items():
                self.extra.setdefault(k, v)
            if reason:
                skipped[cell["key"]] = reason
                self.store.record_attempt(self.run_id, cell, self.grid.driver, 0, warmup=False, status="skipped",
                                          started=time.time(), ended=time.time(), reason=reason)
                self.events.note(f"skipped {_cell_label(cell)}: {reason}")
        return skipped

    def _save_facts(self, results: list[dict]) -> None:
        meta = next(r["metadata"] for r in results if r["status"] == "ok")
        env = self.spec()["environments"][0]
        self.store.save_environment(self.run_id, self.grid.driver, self.grid.driver, env, meta)

    def _round(self, cell: dict, rep: int) -> list[dict]:
        p = cell["params"]
        conc = p["concurrency"]
        env = env_for(self.grid, p, self.driver)
        driver = self.driver.boot_cell_driver(p)
        barrier = threading.Barrier(conc)
        slots: list[dict] = [{} for _ in range(conc)]
        instances: list[Instance | None] = [None] * conc

        def start(k: int) -> None:
            out = slots[k]
            try:
                barrier.wait(timeout=300)
            except threading.BrokenBarrierError:
                out.update(status="failed", reason="another start of this round failed before it began")
                return
            t0 = time.time()
            out["t0"] = t0
            try:
                (inst,) = driver.provision(env, 1, "boot")
                instances[k] = inst
                out.update(status="ok", lifecycle=dict(inst.lifecycle), metadata=inst.metadata(), name=inst.name)
            except ConditionUnavailable as exc:
                out.update(status="skipped", reason=str(exc))
            except Exception as exc:  # noqa: BLE001 - a failed start is data
                lc = getattr(exc, "lifecycle", None) or {"requested": t0}
                out.update(status="failed", reason=str(exc), lifecycle=dict(lc), failed_after=time.time() - t0)

        def give_up() -> None:
            # Ctrl-C: starts not yet begun do not begin; instances still booting belong to no slot
            # yet, so a driver that can stops them all (a VM's QEMU, a cloud's starts in flight).
            barrier.abort()
            driver.close()

        try:
            procs.fan_out(start, conc, on_interrupt=give_up)
        finally:
            # Tear everything down (also on Ctrl-C), timing each teardown; an interrupt that comes
            # meanwhile waits until all of the round is gone.
            with procs.interrupts_deferred():
                for k in range(conc):
                    inst = instances[k]
                    if inst is not None:
                        try:
                            inst.teardown()
                        except Exception as exc:  # noqa: BLE001
                            self.events.note(f"teardown of {inst.name} failed: {exc}")
                        slots[k]["lifecycle"] = dict(inst.lifecycle)
        results = []
        for k, out in enumerate(slots):
            results.append(self._record(cell, rep, k, conc, out))
        return results

    def _record(self, cell: dict, rep: int, slot: int, conc: int, out: dict) -> dict:
        lc = out.get("lifecycle") or {}
        status = out.get("status", "failed")
        rel = relative(lc)
        meta = dict(out.get("metadata") or {})
        meta.update({"round": rep, "slot": slot, "concurrency": conc, "timestamps": lc})
        found = []
        if status == "ok":
            found = [Sample(m, v, "s", False) for m, v in rel.items() if m in METRICS]
        reason = out.get("reason")
        if status == "failed" and reason:
            reason = reason.strip()
        started = lc.get("requested", out.get("t0", time.time()))
        # The raw observation of a start is its lifecycle: kept for failed starts too (how far it got).
        raw = json.dumps({"instance": out.get("name"), "round": rep, "slot": slot, "lifecycle": lc,
                          "accelerator": meta.get("accelerator"), "backend": meta.get("backend")}, sort_keys=True)
        self.store.record_attempt(self.run_id, cell, self.grid.driver, rep * conc + slot, warmup=False,
                                  status=status, started=started, ended=time.time(),
                                  reason=reason.splitlines()[0][:500] if reason else None,
                                  detail=reason, raw=raw, samples_=found, sample_metadata=meta)
        if lc:
            self.store.save_instance(self.run_id, self.grid.driver, out.get("name") or f"round{rep}-slot{slot}",
                                     "boot", lc, meta)
        return {"status": status, "reason": reason, "seconds": rel, "timestamps": lc, "metadata": meta,
                "name": out.get("name"), "round": rep, "slot": slot}


def _cell_label(cell: dict) -> str:
    p = cell["params"]
    return f"concurrency {p['concurrency']}, size {p['image_size']}, mode {p['image_mode']}, shape {p['shape']}"


# -- as a workload, for the registry -----------------------------------------------------------------

class BootWorkload(Workload):
    """Describes boot runs' samples to analysis and reports (for `workloads.REGISTRY["boot"]`).
    It never runs inside an instance: `virtbench boot` starts the instances it times."""

    name = "boot"
    description = "time from an instance request to each lifecycle phase (virtbench boot)"
    suite_runnable = False  # `virtbench boot` runs it; a suite or --workload cannot
    params = (Param("concurrency", int, 1, "instances started at once", min=1),
              Param("image_size", str, "auto", "disk image size"),
              Param("image_mode", str, "overlay", "copy, overlay or reflink"),
              Param("shape", str, DEFAULT_SHAPE, "instance shape"))
    metrics = tuple(MetricSpec(m, "s", False, "seconds the teardown took" if m == "teardown"
                               else f"seconds from request to {m}") for m in METRICS)

    def execute(self, instances, params, ctx):
        raise NotImplementedError("boot times come from `virtbench boot`, not from a workload suite")

    def parse(self, raw, params):
        return []


__all__ = ["Grid", "BootRunner", "BootEvents", "grid_from_args", "load_suite"]
