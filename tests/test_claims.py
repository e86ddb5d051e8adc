"""Each published finding (the built-in study files, studies/NNN.toml) pinned on synthetic results that
hold and that differ (studies/score.py), and the rules that keep a verdict honest: TCG never counts for a
hardware-virtualization finding, no cluster means not measured, a missing experiment says why."""

import math

import pytest

from virtbench.studies import score
from virtbench.studies.studyfile import builtin_findings
from virtbench.studies.score import DIFFERS, HOLDS, NOT_MEASURED, Evidence, Group

CLAIMS = builtin_findings()


def by_id(fid: str):
    return next(f for f in CLAIMS if f.id == fid)


def for_studies(studies):
    return builtin_findings(studies)


KVM = {"accelerator": "kvm", "cluster": True, "nfs": True, "cloud": True}
BASE = [100.0, 101.0, 99.0, 100.5, 99.5, 100.2]
LOWER_IS_BETTER = ("time", "lat_max", "running", "index_time")
SPREAD = (0.99, 1.0, 1.01, 1.005, 0.995, 1.002)  # a tight group's values about its median


def _concrete(values: dict, fill: dict) -> dict:
    return {k: (fill.get(k, 1) if v in ("max", "min", "best") else v) for k, v in values.items()}


def _exp(s: dict) -> str:
    """The experiment a synthetic group comes from: the selector's last (its own platforms')."""
    return s["experiment"][-1]


def _group(s: dict, values: list[float], *, fill: dict | None = None, accel: str | None = None) -> Group:
    kind = s["kind"][0]
    meta = {"accelerator": accel or "kvm"} if kind == "vm" else {}
    env = (s.get("env") or [kind])[0]  # a selector naming its environment: a group of that one
    return Group(_exp(s), s["workload"], _concrete(s["params"], fill or {}),
                 _concrete(s["condition"], fill or {}), env, kind, s["metric"], "u",
                 s["metric"] not in LOWER_IS_BETTER, list(values), meta)


def _ratio_target(args: dict, holds: bool) -> float:
    if "above" in args:
        return args["above"] * (1.5 if holds else 0.7)
    if "below" in args:
        return args["below"] * (0.6 if holds else 1.4)
    if "within" in args:
        lo, hi = args["within"]
        return (lo + hi) / 2 if holds else hi * 1.3
    if "at_most" in args:
        return args["at_most"] * (0.8 if holds else 1.3)
    return args["at_least"] * (1.2 if holds else 0.8)


def synthetic(claim, holds: bool, *, accel: str = "kvm") -> list[Group]:
    """Groups for this claim's selectors whose values make it hold (or differ)."""
    a = claim.args
    if claim.rule == "ratio":
        r = _ratio_target(a, holds)
        num_fill = {"concurrency": 4, "delay_ms": 50, "bytes": 1 << 26, "file_size_kb": 1 << 20,
                    "file_size_mb": 1024, "transactions": 400000, "replicas": 1}
        den_fill = {**num_fill, "replicas": 4}
        for k, v in a["den"]["params"].items():  # "max" against "min" of one key: the den's is smaller
            if v == "min" and a["num"]["params"].get(k) == "max":
                den_fill[k] = num_fill[k] // 4
        den = _group(a["den"], BASE, fill=den_fill, accel=accel)
        num = _group(a["num"], [v * r for v in BASE[::-1]], fill=num_fill, accel=accel)
        out = [num, den]
        if a["den"]["params"].get("replicas") == "best":  # the pods' best: worse replica counts either side
            out.append(_group(a["den"], [v * 0.5 for v in BASE], fill={"replicas": 1}, accel=accel))
            out.append(_group(a["den"], [v * 0.8 for v in BASE], fill={"replicas": 8}, accel=accel))
            out[1].params["replicas"] = 4
        if a["num"]["params"].get("concurrency") == "max" or a["num"]["condition"].get("delay_ms") == "max":
            # a smaller value of the "max" key must not be picked
            key = "concurrency" if "concurrency" in a["num"]["params"] else "delay_ms"
            g = _group(a["num"], [v * 100 for v in BASE], fill={**num_fill, key: 2 if key == "concurrency" else 10},
                       accel=accel)
            out.append(g)
        return out
    if claim.rule == "slope":
        s, key = a["select"], a["x"]
        per = (lambda x: 20 + 50 * x) if holds else (lambda x: 60.0 - x)
        along = {"image_size": lambda x: f"{x}G"}.get(key, lambda x: x)
        in_params = key in s["params"] or key == "image_size"
        return [Group(_exp(s), s["workload"], {**_concrete(s["params"], {}), **({key: along(x)} if in_params else {})},
                      {**_concrete(s["condition"], {}), **({} if in_params else {key: along(x)})},
                      s["kind"][0], s["kind"][0], s["metric"], "s", False,
                      [per(x) + d for d in (-0.5, -0.3, -0.1, 0.0, 0.1, 0.2, 0.3, 0.5)],  # 8: the line check's
                      {"accelerator": accel}) for x in (1, 2, 4)]
    if claim.rule == "efficiency":
        t1, t2 = (10.0, 5.0) if holds else (10.0, 8.0)
        return [_group(a["one"], [t1 * f for f in (0.99, 1.0, 1.01, 1.005)], accel=accel),
                _group(a["many"], [t2 * f for f in (0.99, 1.0, 1.01, 1.005)], accel=accel)]
    if claim.rule == "order":
        meds = (300.0, 150.0, 20.0) if holds else (300.0, 320.0, 20.0)
        return [_group(s, [m * f for f in (0.99, 1.0, 1.01, 0.995, 1.005, 1.0)], accel=accel)
                for s, m in zip(a["chain"], meds)]
    if claim.rule == "steps":
        out = []
        for i, (frm, to) in enumerate(a["steps"]):
            m = 300.0 / (i + 1)
            out += [_group(frm, [m * f for f in (0.99, 1.0, 1.01, 0.995, 1.005, 1.0)], accel=accel),
                    _group(to, [m * (0.5 if holds else 1.3) * f for f in (0.99, 1.0, 1.01, 0.995, 1.005, 1.0)],
                           accel=accel)]
        return out
    if claim.rule == "level":
        v = _ratio_target(a, holds)  # inside the tolerance, or clearly outside it
        return [_group(a["select"], [v * f for f in (1.0, 0.99, 1.005, 0.995, 1.002, 0.998)],
                       fill={"transactions": 400000}, accel=accel)]
    if claim.rule == "peak":
        # differs: still rising at 64, past the study's peak at 32 (a range that stopped at 8 would not decide);
        # 6 values a point: 7 points compared pairwise at once need them (4 points: 5)
        curve = {1: 100, 2: 150, 4: 200, 8: 180} if holds else {1: 100, 2: 150, 4: 200, 8: 260, 16: 300, 32: 320,
                                                                 64: 340}
        return [Group(_exp(a["select"]), "web", {"workers": 1, "replicas": x}, {}, "pods", "pods",
                      a["select"]["metric"], "req/s", True, [v * f for f in SPREAD]) for x, v in curve.items()]
    if claim.rule == "penalty":
        out = []
        p = {"fine": 1.5, "coarse": 1.0} if holds else {"fine": 1.0, "coarse": 1.3}
        for name in ("fine", "coarse"):
            for kind in ("host", a["kind"][0]):
                for inst in (1, 2):
                    t = 10.0 * (p[name] if (kind != "host" and inst == 2) else 1.0)
                    out.append(Group(a["experiment"], a[name]["workload"], {**a[name]["params"], "instances": inst},
                                     {}, kind, kind, a["metric"], "s", False, [t * f for f in SPREAD[:5]]))
        return out
    if claim.rule == "memory_share":
        share = _ratio_target(a, holds)  # of a 1000 MiB instance
        g = _group(a["select"], [1000 * share * f for f in (1.0, 0.99, 1.005, 0.995, 1.002, 0.998)],
                   fill={"transactions": 400000}, accel=accel)
        g.meta["mem_limit_mib"] = [1000.0] * len(g.values)
        return [g]
    if claim.rule == "peak_sum":
        return _peak_sides(claim, {"num": (45.0, 24.0) if holds else (20.0, 15.0), "den": (60.0,)}, accel=accel)
    raise AssertionError(f"no synthetic data for rule {claim.rule}")


def _peak_sides(claim, medians: dict, *, accel: str = "kvm", instances: int = 4) -> list[Group]:
    """A peak_sum finding's groups: each side's selectors with these medians, every series one per
    instance (each guest on a machine of its own)."""
    out = []
    for side, meds in medians.items():
        for s, m in zip(claim.args[side], meds):
            g = _group(s, [m * f for f in (1.0, 0.99, 1.01, 0.995, 1.005, 1.0)], accel=accel)
            g.meta["monitor_instances"] = instances
            out.append(g)
    return out


MEASURABLE = [c for c in CLAIMS if not c.unmeasurable]


@pytest.mark.parametrize("claim", MEASURABLE, ids=lambda c: c.id)
def test_claim_holds_on_results_that_hold(claim):
    v = score.score(claim, Evidence(synthetic(claim, True), KVM))
    assert v.verdict == HOLDS, (v.measured, v.reason)
    assert v.measured and v.environments


@pytest.mark.parametrize("claim", MEASURABLE, ids=lambda c: c.id)
def test_claim_differs_on_results_that_differ(claim):
    v = score.score(claim, Evidence(synthetic(claim, False), KVM))
    assert v.verdict == DIFFERS, (v.measured, v.reason)
    assert v.measured  # a "differs" always says what was measured


@pytest.mark.parametrize("claim", [c for c in CLAIMS if "kvm" in c.needs], ids=lambda c: c.id)
def test_tcg_never_counts_for_a_hardware_virtualization_claim(claim):
    for holds in (True, False):
        # the machine has only TCG: not measured, whatever the data says
        v = score.score(claim, Evidence(synthetic(claim, holds, accel="tcg"), {**KVM, "accelerator": "tcg"}))
        assert v.verdict == NOT_MEASURED and v.reason.startswith("TCG instead of KVM")
        # KVM here, but these groups came from TCG VMs: they are left out, so nothing is measured
        v = score.score(claim, Evidence(synthetic(claim, holds, accel="tcg"), KVM))
        if any(g.kind == "vm" for g in synthetic(claim, holds)):
            assert v.verdict == NOT_MEASURED and "no results" in v.reason


def test_unmeasurable_claims_say_why_on_any_machine():
    for c in [c for c in CLAIMS if c.unmeasurable]:
        v = score.score(c, Evidence([], KVM))
        assert v.verdict == NOT_MEASURED and v.reason == c.unmeasurable


def test_no_cluster_means_not_measured_with_that_reason():
    c = by_id("004-web-pods-peak")
    v = score.score(c, Evidence(synthetic(c, True), {**KVM, "cluster": False}))
    assert v.verdict == NOT_MEASURED and v.reason.startswith("no cluster")


def test_missing_experiment_gives_its_reason():
    c = by_id("003-bonnie-delay-drop")
    why = "experiment 003-bonnie left out: the budget (5 min) cannot hold it"
    v = score.score(c, Evidence([], {"accelerator": "tcg"}, {"003-bonnie": why}))
    assert v.verdict == NOT_MEASURED and why in v.reason


def test_published_fio_latencies_hold_the_container_claim():
    # Table 4.3 of study 004 itself, five runs around its means: the claim must hold on its own data
    c = by_id("004-fio-container-latency")
    bare = [25018.4 * f for f in (0.98, 0.99, 1.0, 1.01, 1.02)]
    cont = [30014.3 * f for f in (0.98, 0.99, 1.0, 1.01, 1.02)]
    ev = Evidence([_group(c.args["num"], cont), _group(c.args["den"], bare)], {"accelerator": "tcg", "nfs": True})
    v = score.score(c, ev)
    assert v.verdict == HOLDS and math.isclose(v.value, 30014.3 / 25018.4, rel_tol=1e-6)


NINE = (0.99, 0.995, 0.997, 0.999, 1.0, 1.001, 1.003, 1.005, 1.01)


def test_published_boot_table_holds_both_boot_claims():
    # Table 7 (Eucalyptus 2.0): 2/5/10/20 GB at 1 instance, and 2 GB at 1 and 8 instances
    size, conc = by_id("000-boot-size"), by_id("000-boot-concurrency")
    rows = {2: 131, 5: 264, 10: 518, 20: 1008}
    groups = [Group("000-boot-size", "boot", {"image_mode": "copy", "concurrency": 1, "image_size": f"{gb}G"}, {},
                    "vm", "vm", "running", "s", False, [t * f for f in NINE], {"accelerator": "tcg"})
              for gb, t in rows.items()]  # 9 a size: 4 sizes' medians together at 97.5 %
    groups += [Group("000-boot-concurrency", "boot", {"image_mode": "copy", "concurrency": n, "image_size": "2G"}, {},
                     "vm", "vm", "running", "s", False, [t * 0.99, t, t * 1.01, t * 1.005, t * 0.995], {})
               for n, t in ((1, 131), (4, 126), (8, 242))]
    ev = Evidence(groups, {"accelerator": "tcg"})
    v = score.score(size, ev)
    assert v.verdict == HOLDS and 45 < v.value < 55  # "about 50 s per GB"
    v = score.score(conc, ev)
    assert v.verdict == HOLDS and math.isclose(v.value, 242 / 131, rel_tol=1e-6)  # 8 vs 1: the largest


def test_scorecard_covers_all_five_studies_with_at_least_12_findings():
    assert len(CLAIMS) >= 12 and {c.study for c in CLAIMS} == {"000", "001", "002", "003", "004"}
    assert len({c.id for c in CLAIMS}) == len(CLAIMS)
    assert all(c.cite and c.tolerance and c.quantity for c in CLAIMS)
    assert [c.study for c in for_studies(["002"])] == ["002"] * len(for_studies(["002"]))
    cards = score.scorecard(Evidence([], {"accelerator": "tcg"}), CLAIMS)
    assert all(v.verdict == NOT_MEASURED and v.reason for v in cards)


def test_machines_of_their_own_are_taken_first_and_a_local_ec2_stand_in_never():
    """EP measured in 1-vCPU containers and on SSH hosts: the hosts' figures are scored (the study's
    instances were machines of their own); a cloud's from moto count for nothing, and say so."""
    c = by_id("000-npb-ep-scaling")
    a = c.args

    def ep(kind, env, t1, t2, meta=None):
        return [Group("000-npb-ep", "npb", {"kernel": "ep", "instances": n}, {}, env, kind, "time", "s", False,
                      [t * f for f in (0.99, 1.0, 1.01, 1.005)], dict(meta or {})) for n, t in ((1, t1), (2, t2))]

    containers = ep("container", "c-small", 10.0, 10.0)  # efficiency 0.5: differs
    hosts = ep("ssh", "hosts", 10.0, 5.0)                # efficiency 1.0: holds
    v = score.score(c, Evidence(containers + hosts, KVM))
    assert v.verdict == HOLDS and v.environments == ["hosts"]
    assert score.score(c, Evidence(containers, KVM)).environments == ["c-small"]  # without hosts: as before
    moto = ep("cloud", "cloud", 10.0, 5.0, {"backend": "moto+testbed"})
    v = score.score(c, Evidence(containers + moto, KVM))
    assert v.verdict == DIFFERS and v.environments == ["c-small"]  # the stand-in's figures were not taken
    v = score.score(c, Evidence(moto, KVM))
    assert v.verdict == NOT_MEASURED and "moto" in v.reason and "moto+testbed" in v.reason
    real = ep("cloud", "cloud", 10.0, 5.0, {"backend": "ec2.us-east-1.amazonaws.com"})
    v = score.score(c, Evidence(containers + hosts + real, KVM))
    assert v.verdict == HOLDS and v.environments == ["cloud"]  # a real cloud first
    assert a["one"]["prefer"] == ("cloud", "ssh")


# -- one rule for every tolerance with an interval: inside holds, outside differs, across is open ------

@pytest.mark.parametrize("args, lo, hi, expected", [
    ({"above": 1.0}, 1.1, 1.5, True), ({"above": 1.0}, 0.5, 0.9, False), ({"above": 1.0}, 0.8, 4.3, None),
    ({"below": 0.5}, 0.2, 0.4, True), ({"below": 0.5}, 0.6, 0.9, False), ({"below": 0.5}, 0.3, 0.7, None),
    ({"within": [0.9, 1.1]}, 0.95, 1.05, True), ({"within": [0.9, 1.1]}, 1.2, 3.1, False),
    ({"within": [0.9, 1.1]}, 0.383, 1.09, None), ({"within": [0.9, 1.1]}, 1.06, 3.11, None),
    ({"at_most": 1.25}, 0.6, 1.2, True), ({"at_most": 1.25}, 1.3, 2.0, False), ({"at_most": 1.25}, 0.6, 1.35, None),
    ({"at_least": 0.9}, 0.95, 1.0, True), ({"at_least": 0.9}, 0.5, 0.8, False), ({"at_least": 0.9}, 0.85, 0.99, None),
])
def test_decide_inside_outside_across(args, lo, hi, expected):
    assert score.decide((lo + hi) / 2, lo, hi, args) is expected
    if expected is None:  # without an interval the point decides (and the text says there was none)
        assert score.decide((lo + hi) / 2, math.nan, math.nan, args) in (True, False)


def _boundary(args: dict) -> float:
    for k in ("above", "below", "at_most", "at_least"):
        if k in args:
            return args[k]
    return args["within"][1]


RATIO_CLAIMS = [c for c in MEASURABLE if c.rule == "ratio"]


@pytest.mark.parametrize("claim", RATIO_CLAIMS, ids=lambda c: c.id)
def test_ratio_claim_is_not_measured_when_its_interval_reaches_both_sides(claim):
    groups = synthetic(claim, True)
    num, den = groups[0], groups[1]
    edge = _boundary(claim.args) * den.median
    num.values = [edge * f for f in (0.55, 1.5, 0.75, 1.3, 1.0, 0.9)]  # around the edge, widely spread
    v = score.score(claim, Evidence(groups, KVM))
    assert v.verdict == NOT_MEASURED, (v.measured, v.reason)
    assert "reaches both sides of the tolerance" in v.reason and "more repetitions needed" in v.reason
    assert v.measured and v.ci and v.ci[0] < _boundary(claim.args) < v.ci[1]


def test_ep_efficiency_whose_interval_reaches_the_band_is_not_a_difference():
    """The 30-minute run's row: efficiency 0.47 [0.383, 1.09] was scored "differs"; its interval
    reaches into 0.9-1.1, so it is open, while a tight 0.5 differs and a tight 1.0 holds."""
    c = by_id("000-npb-ep-scaling")

    def ev(t1, t2):
        return Evidence([Group("000-npb-ep", "npb", {"kernel": "ep", "instances": n}, {}, "c-small", "container",
                               "time", "s", False, list(t)) for n, t in ((1, t1), (2, t2))], KVM)

    wide = score.score(c, ev([6.4, 5.2, 9.5, 6.0, 7.9], [6.8, 3.3, 7.4, 6.9, 4.4]))
    assert wide.verdict == NOT_MEASURED and wide.ci[0] < 0.9 < wide.ci[1], wide.measured
    assert "reaches both sides" in wide.reason and wide.measured.startswith("efficiency")
    assert score.score(c, ev([6.4, 6.41, 6.39, 6.4, 6.42], [6.4, 6.41, 6.39, 6.4, 6.42])).verdict == DIFFERS
    assert score.score(c, ev([6.4, 6.41, 6.39, 6.4, 6.42], [3.2, 3.21, 3.19, 3.2, 3.18])).verdict == HOLDS


def test_order_level_and_slope_follow_the_same_rule():
    order = by_id("003-bonnie-dom0-order")  # rule steps: each step a like-for-like pair
    (a0, a1), (b0, b1) = order.args["steps"]
    tight = (0.99, 1.0, 1.01, 0.995, 1.005, 1.0)
    wide = [150.0 * f for f in (0.5, 1.6, 0.8, 1.3, 1.0, 0.7)]
    groups = [_group(a0, [300.0 * f for f in tight]), _group(a1, [100.0 * f for f in tight]),
              _group(b0, [140.0 * f for f in tight]), _group(b1, wide)]
    v = score.score(order, Evidence(groups, KVM))  # the second step's interval reaches above 1
    assert v.verdict == NOT_MEASURED and "reaches both sides" in v.reason
    groups[3].values = [400.0 * f for f in tight]  # a step wholly up: differs
    assert score.score(order, Evidence(groups, KVM)).verdict == DIFFERS
    groups[3].values = [40.0 * f for f in tight]  # both down: holds
    assert score.score(order, Evidence(groups, KVM)).verdict == HOLDS

    level = by_id("003-hpa-cpu-bound")
    g = _group(level.args["select"], [0.80, 0.99, 0.85, 0.97, 0.95, 0.88, 0.99], fill={"transactions": 400000})
    v = score.score(level, Evidence([g], KVM))
    assert v.verdict == NOT_MEASURED and "reaches both sides" in v.reason

    size = by_id("000-boot-size")
    s = size.args["select"]
    noisy = {1: (20, 80, 50), 2: (30, 75, 60), 4: (25, 95, 70)}  # medians rise in a line, the spread swamps it
    groups = [Group(_exp(s), "boot", {"concurrency": 1, "image_size": f"{x}G"}, {}, "vm", "vm", "running", "s", False,
                    list(map(float, vals)), {}) for x, vals in noisy.items()]
    v = score.score(size, Evidence(groups, KVM))
    assert v.verdict == NOT_MEASURED and v.ci[0] < 0 < v.ci[1], v.measured


# -- a slope's straight-line check: the medians' R^2 read over their intervals together, never as a point ---

def _sizes(per_size: dict[int, list[float]]) -> Evidence:
    s = by_id("000-boot-size").args["select"]
    return Evidence([Group(_exp(s), "boot", {"concurrency": 1, "image_size": f"{x}G"}, {}, "vm", "vm", "running", "s",
                           False, list(map(float, vals)), {}) for x, vals in per_size.items()], KVM)


def test_slope_curved_medians_with_tight_spread_differ():
    size = by_id("000-boot-size")
    tight = (0.995, 0.997, 0.998, 0.999, 1.0, 1.001, 1.002, 1.005)  # 8 a size: 3 sizes' medians at 99.2 % each
    curved = {1: 10.0, 2: 100.0, 4: 105.0}  # rises, then flattens: a line through them has R^2 0.62
    v = score.score(size, _sizes({x: [m * f for f in tight] for x, m in curved.items()}))
    assert v.verdict == DIFFERS and v.ci[0] > 0, v.measured  # the slope rises; the medians are no line
    assert "R^2 of a line through the medians [0.6" in v.measured and v.level >= 0.95, v.measured
    line = {1: 70.0, 2: 120.0, 4: 220.0}
    assert score.score(size, _sizes({x: [m * f for f in tight] for x, m in line.items()})).verdict == HOLDS


def test_slope_straight_line_with_noise_never_differs():
    """Medians of a true line scattered by noise: a point R^2 of the medians falls below 0.9 in some of
    these trials (the old rule's 'differs'); the interval of R^2 never lies wholly below it."""
    import numpy as np
    from scipy import stats as sps

    size = by_id("000-boot-size")
    rng = np.random.default_rng(7)
    point_below, verdicts = 0, []
    for _ in range(40):
        data = {x: list(20.0 + 50.0 * x + rng.normal(0.0, 40.0, 8)) for x in (1, 2, 4)}
        meds = [float(np.median(data[x])) for x in (1, 2, 4)]
        point_below += sps.linregress([1, 2, 4], meds).rvalue ** 2 < 0.9
        verdicts.append(score.score(size, _sizes(data)).verdict)
    assert point_below > 0 and DIFFERS not in verdicts, (point_below, verdicts)
    quieter = [score.score(size, _sizes({x: list(20.0 + 50.0 * x + rng.normal(0.0, 10.0, 8)) for x in (1, 2, 4)}))
               for _ in range(10)]
    assert sum(v.verdict == HOLDS for v in quieter) >= 8, [v.measured for v in quieter]


def test_slope_line_check_with_too_few_repetitions_says_what_it_needs():
    size = by_id("000-boot-size")
    curved = {1: 10.0, 2: 100.0, 4: 105.0}
    v = score.score(size, _sizes({x: [m * f for f in (0.99, 1.0, 1.01)] for x, m in curved.items()}))
    assert v.verdict == NOT_MEASURED and "too few repetitions" in v.reason, v.reason
    assert "it needs 8 per image_size for 3 values' medians at 99.2% each" in v.reason, v.reason
    four = {x: [10.0 * x * f for f in (0.99, 0.995, 1.0, 1.005, 1.01, 1.0, 1.002, 0.998)] for x in (1, 2, 4, 8)}
    v = score.score(size, _sizes(four))  # 8 a size is short for 4 sizes
    assert v.verdict == NOT_MEASURED and "it needs 9 per image_size for 4 values' medians" in v.reason, v.reason
    assert score.repetitions_for_level("slope", points=3) == 8 and score.repetitions_for_level("slope", points=4) == 9
    assert score.repetitions_for_level("slope") == 1  # the slope alone (min_r2 = 0) reads every value at once


# -- a range that stops short of the published extreme decides nothing about it --------------------------

def _pods(curve: dict[int, float], spread: tuple[float, ...] = SPREAD) -> list[Group]:
    return [Group("004-web", "web", {"workers": 1, "replicas": x}, {}, "pods", "pods", "requests_per_second",
                  "req/s", True, [v * f for f in spread]) for x, v in curve.items()]


def test_a_peak_measured_on_a_range_that_stops_below_the_published_peak_is_not_measured():
    """The tier stops at 8 replicas, the study peaked at 32 of 1-64: still rising at 8 says nothing
    about a peak at 32; rising to 64, past it, is a difference; a peak inside 1-8 holds."""
    c = by_id("004-web-pods-peak")
    assert c.args["published_at"] == 32
    v = score.score(c, Evidence(_pods({1: 100, 2: 180, 4: 300, 8: 420}), KVM))
    assert v.verdict == NOT_MEASURED, (v.measured, v.reason)
    assert "our best replicas (8) is at the end of the measured range 1-8" in v.reason
    assert "stops at 8, below the published peak at 32" in v.reason and "larger tier or cluster needed" in v.reason
    assert v.measured.startswith("best at replicas = 8") and v.environments == ["pods"]
    v = score.score(c, Evidence(_pods({1: 100, 4: 300, 8: 420, 16: 500}), KVM))  # 16 is still below 32
    assert v.verdict == NOT_MEASURED and "stops at 16, below the published peak at 32" in v.reason
    rising = {1: 100, 2: 180, 4: 300, 8: 420, 16: 500, 32: 520, 64: 560}
    v = score.score(c, Evidence(_pods(rising), KVM))
    assert v.verdict == DIFFERS and v.value == 64  # the range reached past 32 and it never turned
    falling = {1: 400, 2: 300, 4: 200, 8: 100}  # best at the low end; the published 32 is not below it
    assert score.score(c, Evidence(_pods(falling), KVM)).verdict == DIFFERS
    assert score.score(c, Evidence(_pods({1: 100, 2: 300, 4: 250, 8: 200}), KVM)).verdict == HOLDS


def test_short_of_sees_either_end():
    assert score.short_of(8, [1, 2, 4, 8], 32, "replicas", "peak")
    assert score.short_of(4, [4, 8, 16], 1, "replicas", "peak").endswith(
        "which starts at 4, above the published peak at 1: a larger tier or cluster needed")
    assert score.short_of(4, [1, 2, 4, 8], 32, "replicas", "peak") is None  # an inside extreme is measured
    assert score.short_of(64, [1, 8, 64], 32, "replicas", "peak") is None  # the range reached it
    assert score.short_of(8, [1, 2, 4, 8], None, "replicas", "peak") is None  # no published location


def test_a_vm_against_the_pods_best_of_a_short_range_counts_only_when_it_differs():
    """One VM against the pods' best: where the pods were still rising at the top of a range that stops
    below 32, a VM above them is not measured (more pods could overtake it); a VM below them
    differs whatever a longer range would show."""
    c = by_id("004-web-vm-vs-pods")
    assert c.args["published_at"] == {"replicas": 32}

    def vm(rps: float) -> Group:
        return Group("004-web", "web", {"workers": 8, "replicas": 1}, {}, "vm", "vm", "requests_per_second",
                     "req/s", True, [rps * f for f in (0.99, 1.0, 1.01, 1.005)], {"accelerator": "kvm"})

    rising = _pods({1: 100, 2: 180, 4: 300, 8: 420})
    v = score.score(c, Evidence(rising + [vm(600)], KVM))
    assert v.verdict == NOT_MEASURED, (v.measured, v.reason)
    assert "stops at 8, below the published best replicas at 32" in v.reason and v.measured.startswith("1.43x")
    assert score.score(c, Evidence(rising + [vm(300)], KVM)).verdict == DIFFERS
    peaked = _pods({1: 100, 2: 180, 4: 450, 8: 420})  # the pods' best inside the range
    assert score.score(c, Evidence(peaked + [vm(600)], KVM)).verdict == HOLDS
    # the pods' best is not the count whose median is highest but whichever truly is: a count whose spread
    # reaches above the VM leaves it open, though the VM is clearly above the best median's count
    open_ = _pods({1: 100, 2: 180, 4: 450}) + _pods({8: 420}, (0.6, 1.0, 1.4, 0.8, 1.2, 0.9))
    v = score.score(c, Evidence(open_ + [vm(500)], KVM))
    assert v.verdict == NOT_MEASURED and "reaches both sides" in v.reason, (v.measured, v.reason)
    assert "against the best of 4 replicas values (their ratio intervals together at" in v.measured
    assert score.score(c, Evidence(_pods({1: 100, 2: 180, 4: 450, 8: 420}) + [vm(500)], KVM)).verdict == HOLDS
    assert score.repetitions_for_level("ratio", points=4) == 5


# -- every interval a verdict is read from is at 95 % or more ---------------------------------------------

def test_fewer_repetitions_than_a_95_percent_interval_needs_are_not_measured_with_their_level():
    """3 vs 3 values give a two-sample interval of 90 % at best, one value none: neither decides, and
    the reason says n and the level; 4 vs 4 reach 97.1 % and decide, the level carried."""
    c = by_id("004-fio-container-latency")
    assert score.repetitions_for_level("ratio") == 4 and score.repetitions_for_level("level") == 6
    assert score.repetitions_for_level("peak") == 5 and score.repetitions_for_level("peak", points=7) == 6
    assert score.repetitions_for_level("penalty") == 5
    # a boot grid's 4 instances at once give 4 values a repetition: 8 against 2 reach 95.6 %
    assert score.repetitions_for_level("ratio", (4, 1)) == 2

    def ev(n):
        f = (0.98, 0.99, 1.0, 1.01, 1.02, 1.0)[:n]
        return Evidence([_group(c.args["num"], [30014.3 * x for x in f]), _group(c.args["den"], [25018.4 * x for x in f])],
                        {"accelerator": "tcg", "nfs": True})

    v = score.score(c, ev(3))
    assert v.verdict == NOT_MEASURED and v.level == pytest.approx(0.9)
    assert v.reason.startswith("too few repetitions for a 95 % interval (n = 3 / 3: the widest interval they give is at 90.0%)")
    v = score.score(c, ev(1))
    assert v.verdict == NOT_MEASURED and v.level is None and "(n = 1 / 1: no interval)" in v.reason
    v = score.score(c, ev(4))
    assert v.verdict == HOLDS and v.level >= 0.95
    # the study's own printed means, one each: as points they decide (reproduce --published)
    assert score.score(c, ev(1), points=True).verdict == HOLDS


def test_every_decided_verdict_of_the_synthetic_data_carries_a_level_of_at_least_95_percent():
    for c in MEASURABLE:
        for holds in (True, False):
            v = score.score(c, Evidence(synthetic(c, holds), KVM))
            if v.verdict != NOT_MEASURED:
                assert v.level is not None and v.level >= 0.95, (c.id, v.level)


def test_a_selector_naming_its_environment_takes_only_that_one():
    """Two environments of one kind (VMs with virtio and with e1000 NICs): `env` tells them apart."""
    emu = by_id("001-mpi-emu-worse")
    fast, slow = [900.0, 910.0, 905.0, 895.0], [300.0, 310.0, 305.0, 295.0]
    groups = [_group(emu.args["num"], slow), _group(emu.args["den"], fast)]
    assert [g.env for g in groups] == ["vm-emu", "vm"]
    assert score.score(emu, Evidence(groups, KVM)).verdict == HOLDS
    groups[0].values, groups[1].values = fast, slow  # the e1000 VMs faster: differs, not a mix of both
    assert score.score(emu, Evidence(groups, KVM)).verdict == DIFFERS
    assert [g.env for g in score.select(Evidence(groups, KVM), emu.args["num"])] == ["vm-emu"]


def test_a_pods_verdict_names_the_cluster_and_the_rule_that_it_counts():
    c = by_id("004-web-pods-peak")
    facts = {**KVM, "cluster_detail": "2 nodes (n1, n2) on one machine (one boot id): one machine playing a cluster"}
    v = score.score(c, Evidence(_pods({1: 100, 2: 300, 4: 250, 8: 200}), facts))
    assert v.verdict == HOLDS
    assert v.measured.endswith("; cluster: 2 nodes (n1, n2) on one machine (one boot id): one machine playing a "
                               "cluster (a cluster counts whatever its nodes are: study 004 measured its pods on one "
                               "node of its cluster (section 6))")


def test_one_cells_environments_compare_round_by_round():
    """Groups of one cell's environments, run in lockstep rounds, are compared round by round (the
    signed-rank interval, from 6 rounds at 95 %): load that doubles whole rounds cancels, where two
    groups would give an interval across the tolerance."""
    c = by_id("004-fio-container-latency")
    load = [1.0, 2.0, 1.1, 1.9, 1.0, 2.1]

    def groups(paired: bool, n: int = 6):
        num = _group(c.args["num"], [125.0 * x for x in load[:n]])
        den = _group(c.args["den"], [100.0 * x * f for x, f in zip(load[:n], (1.0, 1.01, 0.99, 1.0, 1.02, 0.98))])
        for g in (num, den):
            g.rounds = list(range(n))
            if paired:
                g.meta["rounds_of"] = "child|cell|{}"
        return [num, den]

    two = score.score(c, Evidence(groups(False), KVM))
    assert two.verdict == NOT_MEASURED and "reaches both sides" in two.reason, two.measured
    paired = score.score(c, Evidence(groups(True), KVM))
    assert paired.verdict == HOLDS and "paired rounds" in paired.measured and paired.level >= 0.95, paired.measured
    assert paired.ci[0] > 1.2
    # 5 rounds cannot reach 95 % paired: the two groups' interval (4 a side suffice) is used instead
    assert "paired rounds" not in score.score(c, Evidence(groups(True, 5), KVM)).measured


def test_memory_share_is_the_peak_over_the_memory_recorded_beside_it():
    c = by_id("003-hpa-domu-memory")
    g = synthetic(c, True)[0]
    v = score.score(c, Evidence([g], KVM))
    assert v.verdict == HOLDS and v.value == pytest.approx(0.72, rel=0.01) and v.level >= 0.95
    assert "of 1,000 MiB" in v.measured
    g.meta["mem_limit_mib"] = [4000.0] * len(g.values)  # the same peaks of a larger instance
    assert score.score(c, Evidence([g], KVM)).value == pytest.approx(0.18, rel=0.01)
    del g.meta["mem_limit_mib"]  # no memory size beside the peak: nothing to relate it to
    v = score.score(c, Evidence([g], KVM))
    assert v.verdict == NOT_MEASURED and "no memory size was recorded" in v.reason


def test_network_peaks_are_not_measured_where_the_ranks_shared_one_machine():
    c = by_id("003-hpa-network-domu")
    holds = _peak_sides(c, {"num": (45.0, 24.0), "den": (60.0,)})
    v = score.score(c, Evidence(holds, KVM))
    assert v.verdict == HOLDS and v.value == pytest.approx(69 / 60, rel=0.01) and v.level >= 0.95
    # the dom0 run's ranks as 4 processes of this machine (no --inventory): only the host's own series
    den = c.args["den"][0]
    on_host = Group(den["experiment"][0], "hpa", dict(den["params"]), dict(den["condition"]), "host", "host",
                    "host.net_peak", "MB/s", False, [5.0] * 6)
    v = score.score(c, Evidence(holds[:2] + [on_host], KVM))
    assert v.verdict == NOT_MEASURED and "processes of this one machine" in v.reason
    # the VMs on one machine: their own series, but no machine of their own beside them
    v = score.score(c, Evidence(holds[1:], KVM))
    assert v.verdict == NOT_MEASURED and "ran on one machine" in v.reason
    # 4 VMs on 2 machines
    v = score.score(c, Evidence(_peak_sides(c, {"num": (45.0,), "den": (60.0,)}, instances=2) + holds[1:], KVM))
    assert v.verdict == NOT_MEASURED and "ran on 2 machine(s)" in v.reason


def test_a_monitor_summary_keeps_the_memory_it_had_and_its_instances_in_the_evidence(tmp_path):
    from virtbench.monitor import series
    from virtbench.store import Store
    from virtbench.studies import evidence

    traces = []
    for name in ("n1", "n2"):
        tr = series.Trace(name, "node", scope="cgroup", mem_limit=1024 * series.MIB)
        tr.ticks = [{"t": t, "mem_used": mib * series.MIB, "net_rx_bytes": 1e6, "net_tx_bytes": 0.0}
                    for t, mib in ((1.0, 100), (2.0, 300))]
        traces.append(tr)
    store = Store(tmp_path / "e.sqlite")
    cell = {"key": "k", "workload": "hpa", "params": {"transactions": 1000}, "condition": {}}
    child = store.create_run({"environments": [{"name": "container", "driver": "container"}], "cells": [cell]},
                             suite_name="s", suite_path=None, baseline="container", command="test")
    for rep in (1, 2):
        store.record_attempt(child, cell, "container", rep, warmup=False, status="ok", started=0.0, ended=1.0,
                             samples_=series.summarize(traces))
    got = {g.metric: g for g in evidence.child_groups(store, "e", child)}
    mem = got["node.mem_used_peak"]
    assert mem.values == [600.0, 600.0] and mem.meta["mem_limit_mib"] == [2048.0, 2048.0]
    assert mem.meta["monitor_instances"] == 2 and got["node.net_peak"].meta["monitor_instances"] == 2
    assert "mem_limit_mib" not in got["node.net_peak"].meta


# -- a peak and the network penalty are decided from intervals that hold together at 95 % ---------------

def test_a_clear_peak_holds_at_95_percent_and_says_where_it_lies():
    c = by_id("004-web-pods-peak")
    v = score.score(c, Evidence(_pods({1: 100, 2: 300, 4: 250, 8: 200}, SPREAD[:5]), KVM))
    assert v.verdict == HOLDS and v.level >= 0.95 and v.value == 2 and v.ci == [2, 2], (v.measured, v.reason)
    assert "the peak lies at replicas in {2} (the 6 pairwise ratio intervals together at" in v.measured
    assert "each at 99.2%" in v.measured and "medians only" not in v.measured


def test_a_peak_whose_medians_point_inside_but_whose_spread_overlaps_does_not_hold():
    """The medians peak at 2 of 1-8, but the groups' spreads overlap: 1, 4 and 8 might be as high, so
    the peak may lie at an end and nothing is decided."""
    c = by_id("004-web-pods-peak")
    wide = (0.6, 1.0, 1.4, 0.8, 1.2, 0.9)
    v = score.score(c, Evidence(_pods({1: 200, 2: 240, 4: 220, 8: 210}, wide), KVM))
    assert v.verdict == NOT_MEASURED and v.measured.startswith("best at replicas = 2"), (v.measured, v.reason)
    assert "reaches both sides of the tolerance: more repetitions needed" in v.reason
    assert v.ci == [1, 8] and v.level >= 0.95


def test_a_peak_with_too_few_repetitions_for_its_pairwise_intervals_says_what_it_needs():
    c = by_id("004-web-pods-peak")
    v = score.score(c, Evidence(_pods({1: 100, 2: 300, 4: 250, 8: 200}, SPREAD[:4]), KVM))
    assert v.verdict == NOT_MEASURED and v.level < 0.95, (v.measured, v.reason)
    assert v.reason.startswith("too few repetitions for a 95 % interval (n = 4 / 4 / 4 / 4: the widest interval "
                               "they give is at")
    assert "it needs 5 per replicas value for 6 pairwise intervals at 99.2% each" in v.reason
    assert score.score(c, Evidence(_pods({1: 100, 2: 300, 4: 250, 8: 200}, SPREAD[:4]), KVM), points=True).verdict \
        == HOLDS  # the study's printed numbers decide as points


def test_a_peak_clearly_at_an_end_differs():
    c = by_id("004-web-pods-peak")
    v = score.score(c, Evidence(_pods({1: 400, 2: 300, 4: 200, 8: 100}, SPREAD[:5]), KVM))
    assert v.verdict == DIFFERS and v.ci == [1, 1] and v.level >= 0.95


def _penalty(c, p_fine: float, p_coarse: float, spread: tuple[float, ...]) -> list[Group]:
    a = c.args
    out = []
    for name, p in (("fine", p_fine), ("coarse", p_coarse)):
        for kind in ("host", a["kind"][0]):
            for inst in (1, 2):
                t = 10.0 * (p if (kind != "host" and inst == 2) else 1.0)
                out.append(Group(a["experiment"], a[name]["workload"], {**a[name]["params"], "instances": inst},
                                 {}, kind, kind, a["metric"], "s", False, [t * f for f in spread]))
    return out


def test_the_network_penalty_is_read_from_four_ratio_intervals_together():
    c = by_id("001-coarse-copes")
    v = score.score(c, Evidence(_penalty(c, 1.5, 1.0, SPREAD[:5]), KVM))
    assert v.verdict == HOLDS and v.level >= 0.95 and v.ci[0] > 1.0, (v.measured, v.reason)
    assert "from 4 ratio intervals together at 96.8%, each at 99.2%" in v.measured
    # the medians say fine > coarse and coarse <= 1.1, but the spread overlaps: not decided
    wide = (0.7, 1.0, 1.3, 0.85, 1.15)
    v = score.score(c, Evidence(_penalty(c, 1.2, 1.0, wide), KVM))
    assert v.verdict == NOT_MEASURED and "reaches both sides" in v.reason and v.ci[0] < 1.0 < v.ci[1], v.measured
    # a coarse-grained code that clearly loses 30 %: differs
    assert score.score(c, Evidence(_penalty(c, 1.5, 1.3, SPREAD[:5]), KVM)).verdict == DIFFERS
    # 4 repetitions cannot give 98.75 % a ratio: not measured, saying what it needs
    v = score.score(c, Evidence(_penalty(c, 1.5, 1.0, SPREAD[:4]), KVM))
    assert v.verdict == NOT_MEASURED and v.reason.startswith("too few repetitions for a 95 % interval (n = 4 / 4, ")
    assert "it needs 5 per side for 4 ratio intervals at 98.8% each" in v.reason


def test_an_order_of_many_steps_needs_more_of_each_steps_interval():
    """Each step's interval is equal-tailed: up to 2 steps at 95 % each keep a wrong verdict within 5 %;
    4 steps need 97.5 % each (1 - 0.1 / 4), which 4 values a side (97.1 %) cannot give."""
    from dataclasses import replace

    base = by_id("003-bonnie-dom0-order")
    (a0, a1), (b0, b1) = base.args["steps"]
    four = replace(base, args={**base.args, "steps": [[a0, a1], [b0, b1], [a0, a1], [b0, b1]]})

    def groups(n):
        tight = SPREAD[:n]
        return [_group(a0, [300.0 * f for f in tight]), _group(a1, [100.0 * f for f in tight]),
                _group(b0, [140.0 * f for f in tight]), _group(b1, [40.0 * f for f in tight])]

    assert score.score(base, Evidence(groups(4), KVM)).verdict == HOLDS  # 2 steps: 4 a side
    v = score.score(four, Evidence(groups(4), KVM))
    assert v.verdict == NOT_MEASURED and v.level == pytest.approx(1 - 2 / 70), (v.measured, v.reason)
    assert "it needs 5 per side for 4 steps at 97.5% each" in v.reason
    v = score.score(four, Evidence(groups(5), KVM))
    assert v.verdict == HOLDS and v.level >= 0.975
