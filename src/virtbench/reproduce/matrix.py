"""From a plan step of `virtbench reproduce` to what the runner runs: the suite's matrix narrowed to
an experiment's cells at a tier's scale (with the inventory's SSH hosts and a cloud's instances
where the experiment's instances are machines of their own), or its boot grid."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from .. import shapes, workloads
from .. import suite as suite_mod
from ..errors import UserError
from ..model import EnvSpec
from .experiments import CLOUD_ENV, CLOUD_SHAPE, PLATFORM_ENVS, REMOTE_ENV
from ..studies.model import Experiment, Tier

def _allowed(value: Any, allowed: list) -> bool:
    return any(value == a or (a is None and value is None) for a in allowed)


def matrix_for(exp: Experiment, tier: Tier, envs: tuple[str, ...], *, kubeconfig: str | None = None,
               pods_image: str = "", inventory: str | None = None, hosts: str = "all",
               cloud: dict[str, Any] | None = None) -> suite_mod.Matrix:
    """The suite's matrix narrowed to this experiment's cells at this tier's scale; with REMOTE_ENV
    (CLOUD_ENV) in `envs`, the inventory's SSH hosts (the cloud's instances) also run the cells of the
    experiment's `remote_like`."""
    extra = [e for e in envs if e in PLATFORM_ENVS]
    if REMOTE_ENV in extra and not inventory:
        raise UserError(f"experiment {exp.id}: SSH hosts without an inventory", "give --inventory FILE")
    if CLOUD_ENV in extra and not cloud:
        raise UserError(f"experiment {exp.id}: a cloud without its settings", "give --cloud KEY=VALUE ...")
    m = suite_mod.load(exp.suite_file(), envs=[e for e in envs if e not in PLATFORM_ENVS])
    where = {**exp.where, **tier.select}
    cells: dict[str, dict] = {}
    for c in m.cells:
        if exp.workload and c["workload"] != exp.workload:
            continue
        if any(not _allowed(c["params"].get(k), v) for k, v in where.items()):
            continue
        if any(not _allowed(c["condition"].get(k), v) for k, v in exp.condition_where.items()):
            continue
        if len({c["params"].get(k) for k in exp.same}) > 1:
            continue
        wl = workloads.get(c["workload"])
        params = dict(c["params"])
        known = {p.name: p for p in wl.params}
        for k, v in tier.params.items():
            if k in known:
                params[k] = known[k].coerce(v)
        wl.validate(params)
        for cond in tier.conditions or (c["condition"],):
            cond = _coerce_condition(cond)
            new = suite_mod.cell(c["workload"], params, cond)
            if "environments" in c:
                new["environments"] = c["environments"]
                if extra and exp.remote_like in c["environments"]:
                    if params.get("total_vcpus"):
                        # A fixed core count arranged as instances x vCPUs is this machine's scaling of the
                        # study's nodes; machines of their own run the cell with the cores they have.
                        own = suite_mod.cell(c["workload"], {**params, "total_vcpus": 0}, cond)
                        cells.setdefault(own["key"], {**own, "environments": list(extra)})
                    else:
                        new["environments"] = new["environments"] + extra
            prev = cells.setdefault(new["key"], new)
            if prev is not new:  # two suite entries became one cell: it runs where either ran
                if "environments" in prev and "environments" in new:
                    prev["environments"] = prev["environments"] + [e for e in new["environments"]
                                                                   if e not in prev["environments"]]
                else:
                    prev.pop("environments", None)
    if not cells:
        raise UserError(f"experiment {exp.id}: no cell of {exp.suite} matches its selection",
                        "the suite file changed; update the experiment's where, condition_where and tiers in its study file")
    m.cells = list(cells.values())
    if REMOTE_ENV in extra:
        m.environments.append(EnvSpec(REMOTE_ENV, "ssh", shapes.resolve("native"), {"hosts": hosts}))
    if CLOUD_ENV in extra:
        m.environments.append(EnvSpec(CLOUD_ENV, "cloud", shapes.resolve(CLOUD_SHAPE), _cloud_env_options(cloud)))
    if inventory:  # SSH hosts, and the stand-in hosts of a cloud's ssh_override
        m.inventory = inventory
    names = {e for c in m.cells for e in suite_mod.cell_environments(c, [x.name for x in m.environments])}
    m.environments = [e for e in m.environments if e.name in names or e.name == m.baseline]
    if kubeconfig:
        m.environments = [_kubernetes(e, pods_image) if _has_backends(e.driver) else e for e in m.environments]
    p = m.policy
    p.min_repetitions = p.max_repetitions = tier.repeat
    if p.warmup == "auto" or (isinstance(p.warmup, int) and p.warmup > 1):
        p.warmup = 1
    m.name = f"{m.name} (reproduce {exp.id})"
    return m


def _has_backends(driver: str) -> bool:
    """A driver that can run its instances on a Kubernetes cluster declares a `backend` option."""
    from .. import drivers

    return driver in drivers.names() and "backend" in drivers.driver_class(driver).options


def _kubernetes(env: EnvSpec, image_ref: str) -> EnvSpec:
    opts = {**env.options, "backend": "kubernetes"}
    if image_ref:
        opts["image"] = image_ref
    return replace(env, options=opts)


def _coerce_condition(cond: dict[str, Any]) -> dict[str, Any]:
    from .. import conditions

    return {k: conditions.get(k).coerce(v) for k, v in cond.items()}


def _cloud_env_options(cloud: dict[str, Any]) -> dict[str, Any]:
    from .. import drivers

    opts = {k: o.default for k, o in drivers.driver_class("cloud").options.items()}
    opts.update({k: v for k, v in cloud.items() if k != "images"})
    return opts


def boot_grid(exp: Experiment, tier: Tier, cloud: dict[str, Any] | None = None):
    from ..run import boot as boot_mod

    g = boot_mod.load_suite(exp.suite_file())
    g.concurrency = list(tier.boot["concurrency"])
    g.repeat = tier.repeat
    if "cloud" in exp.needs:  # the experiment's declared need, not its driver's name
        if not cloud:
            raise UserError(f"experiment {exp.id}: a cloud without its settings", "give --cloud KEY=VALUE ...")
        # The suite's options (region, ssh_user, cost guard) under the --cloud settings; its image
        # placeholders give way to the images given: one per size, or the one image.
        g.options = {**{k: v for k, v in g.options.items() if k != "images"}, **cloud}
        sizes = [k.strip() for k in str(cloud.get("images") or "").split(",") if "=" in k]
        g.image_sizes = [k.split("=", 1)[0].strip() for k in sizes] or ["auto"]
        g.size_notes = {}
        g.name = f"{g.name} (reproduce {exp.id})"
        return g
    g.image_modes = [tier.boot.get("image_mode", "copy")]  # the study's copy from the node's cache, unless said
    if "sizes_gb" in tier.boot:  # else the suite's own sizes (auto: the image as it is)
        g.image_sizes, g.size_notes = boot_mod.scaled_sizes(g, tier.boot["sizes_gb"], tier.boot["scale"])
    g.name = f"{g.name} (reproduce {exp.id})"
    return g
