"""`virtbench reproduce`: the plan fitted to a budget (pure), each experiment's matrix from the real
suite files, estimates from recorded times, and a real end-to-end run (host only, tiny) with resume
and the report's scorecard first."""

import json

import pytest

from virtbench.run import plan as plan_mod
from virtbench import reproduce as rp
from virtbench.reproduce import facts as rfacts
from virtbench.reproduce import times as rt
from virtbench.errors import UserError
from virtbench.report import build as report_build
from virtbench.report import markdown
from virtbench.store import Store
from virtbench.studies.model import Experiment, Tier

TCG = {"accelerator": "tcg", "cluster": False, "nfs": False, "cores": 2, "probe_s": None}
KVM = {**TCG, "accelerator": "kvm", "cluster": True, "nfs": True}
CLOUD = {"endpoint": "http://127.0.0.1:1", "image": "ami-1"}


def _total(steps):
    return sum(s.estimate_s for s in steps if s.tier is not None)


@pytest.mark.parametrize("minutes", [10, 30, 60, 240])
def test_plan_fits_the_budget_and_says_what_it_left_out(minutes):
    budget = minutes * 60
    steps = rp.plan(budget, TCG, history={})
    assert _total(steps) <= budget - max(budget * rp.RESERVE, rp.MIN_RESERVE_S)
    for s in steps:
        if s.tier is None:
            assert s.why  # every left-out experiment says why
    kept = [s for s in steps if s.tier is not None]
    assert kept, "the smallest scales of the first experiments fit any budget above 10 minutes"


def test_a_larger_budget_raises_scales_and_keeps_more():
    small, large = rp.plan(15 * 60, TCG, history={}), rp.plan(4 * 3600, TCG, history={})
    assert sum(s.tier is not None for s in large) >= sum(s.tier is not None for s in small)
    assert sum(s.tier or 0 for s in large) > sum(s.tier or 0 for s in small)
    assert all(s.tier == len(s.exp.tiers) - 1 for s in large if s.tier is not None)


def _without_extras(monkeypatch):
    from dataclasses import replace

    monkeypatch.setattr(rp, "EXPERIMENTS", tuple(replace(e, tiers=tuple(t for t in e.tiers if not t.extra))
                                                 for e in rp.EXPERIMENTS))


# recorded times as the 60-minute run of 27 Nov left them (seconds per tier label), for plans
_RECORDED = {"003-hpa": [130, 150, 451], "004-fio": [50, 62], "003-bonnie": [120, 144], "002-link": [117, 360],
             "000-npb-ep": [60, 80, 175], "001-network": [103, 680], "000-boot-size": [160, 248],
             "000-boot-concurrency": [200, 253]}


def _history() -> dict:
    return {f"{e.id}|{t.label}": [{"seconds": float(_RECORDED[e.id][i]), "prior": t.estimate_s}]
            for e in rp.EXPERIMENTS if e.id in _RECORDED for i, t in enumerate(e.tiers) if not t.extra}


def test_extra_repetitions_come_only_after_every_experiment_is_at_its_largest_scale(monkeypatch):
    """The extra tiers (more repetitions where an interval was open) let a 60-minute budget be used;
    the 30-minute plan, where 003-hpa and 001-network are not at their largest scale, is the plan
    without them."""
    extras = {e.id for e in rp.EXPERIMENTS if any(t.extra for t in e.tiers)}
    # 003-hpa's tiers all take 6 repetitions (its CPU finding reads a median's 95 % interval), so its
    # extra tier of 6 is no longer more
    assert extras == {"004-fio", "002-link", "000-npb-ep"}
    for e in rp.EXPERIMENTS:  # extra tiers come last, and repeat more than the largest ordinary one
        assert all(t.extra for t in e.tiers[e.top + 1:])
        assert all(t.repeat > e.tiers[e.top].repeat and t.label != e.tiers[e.top].label for t in e.tiers[e.top + 1:])
    hist = _history()
    with_extras = {b: rp.plan(b * 60, TCG, history=hist) for b in (30, 60)}
    _without_extras(monkeypatch)
    without = {b: rp.plan(b * 60, TCG, history=hist) for b in (30, 60)}

    def tiers(steps):
        return [(s.exp.id, s.tier, round(s.estimate_s)) for s in steps]

    assert tiers(with_extras[30]) == tiers(without[30])  # the default plan did not change
    assert any(s.tier is not None and s.tier < s.exp.top for s in with_extras[30])
    sixty = with_extras[60]
    assert all(s.tier >= s.exp.top for s in sixty if s.tier is not None)
    kept = {s.exp.id for s in sixty if s.tier is not None}  # 004-fio needs an NFS client: left out here
    assert {s.exp.id for s in sixty if s.tier is not None and s.exp.tiers[s.tier].extra} == extras & kept
    room = 3600 - max(3600 * rp.RESERVE, rp.MIN_RESERVE_S)
    # an extra tier is estimated at no less than its recorded scale's time (equal where only that is known)
    assert _total(without[60]) <= _total(sixty) <= room
    # more repetitions of a recorded scale are estimated at no less than that recorded time
    top = {s.exp.id: s.estimate_s for s in without[60]}
    assert all(s.estimate_s >= top[s.exp.id] for s in sixty if s.exp.id in extras)


def test_tcg_no_cluster_no_nfs_leave_out_with_the_reason():
    why = {s.exp.id: s.why for s in rp.plan(4 * 3600, TCG, history={}) if s.tier is None}
    assert "only TCG" in why["001-mpi"] and "only TCG" in why["003-hpa-vm"]
    assert why["004-web"].startswith("no cluster")
    assert why["004-nfs"].startswith("no NFS client here")
    steps = {s.exp.id: s for s in rp.plan(4 * 3600, KVM, history={})}
    assert steps["001-mpi"].tier is not None and "vm" in steps["004-fio"].envs  # KVM: the VMs come in


def test_studies_narrow_the_plan():
    steps = rp.plan(3600, TCG, studies=["002"], history={})
    assert {s.exp.study for s in steps} == {"002"}
    assert set(rp.left_out_always(["004"])) == set()


def test_estimates_follow_what_was_measured(tmp_path):
    exp = next(e for e in rp.EXPERIMENTS if e.id == "003-bonnie")
    tier = exp.tiers[0]
    path = tmp_path / "times.json"
    assert rp.estimate(exp.id, tier, rp.load_history(path), None) == tier.estimate_s  # no history: the prior
    rp.record_history(exp.id, tier, 300.0, 1.0, 0.05, path)
    rp.record_history(exp.id, tier, 310.0, 1.0, 0.05, path)
    hist = rp.load_history(path)
    assert rp.estimate(exp.id, tier, hist, 0.05) == pytest.approx(305.0)
    assert rp.estimate(exp.id, tier, hist, 0.10) == pytest.approx(610.0)  # twice as busy now
    assert rp.estimate(exp.id, tier, hist, 0.02) == pytest.approx(305.0)  # never assumed faster than measured
    other = next(e for e in rp.EXPERIMENTS if e.id == "004-fio").tiers[0]
    # another experiment: its prior times how the recorded ones compared with theirs
    assert rp.estimate("004-fio", other, hist, 0.05) == pytest.approx(other.estimate_s * 305.0 / tier.estimate_s)


def _hpa():
    return next(e for e in rp.EXPERIMENTS if e.id == "003-hpa")


def test_without_a_recorded_time_the_estimate_is_the_child_runs_plan_plus_its_start_up(tmp_path):
    """One estimate path: an experiment not yet recorded is estimated as the run plan of its child
    (the same plan.make `virtbench run` prints) plus the start-up that plan leaves out; a recorded
    time, where there is one, wins; a boot grid, which has no run plan, keeps its prior."""
    exp = _hpa()
    m = rp.matrix_for(exp, exp.tiers[0], ("host",))
    child = plan_mod.make(m).seconds[1]
    # HPA's 4 ranks on the host start no instance; its 3 storage conditions each set up
    assert rt.startup_s(m) == rt.RUN_START_S + 3 * rt.CONDITION_SETUP_S
    est = rt.Estimator({}, None)
    assert est(exp, 0, ("host",)) == pytest.approx(child + rt.startup_s(m))
    assert est(exp, 0, ("host",)) != exp.tiers[0].estimate_s  # not the hand-written prior
    # a larger tier's child plan is larger (more delays, more repetitions)
    ests = [est(exp, i, ("host",)) for i in range(len(exp.tiers))]
    assert len(ests) >= 2 and all(a < b for a, b in zip(ests, ests[1:]))
    path = tmp_path / "times.json"
    slow = est(exp, 1, ("host",)) + 100  # a recorded time above the next scale's plan
    rt.record_history(exp.id, exp.tiers[0], slow, None, None, path)
    recorded = rt.Estimator(rt.load_history(path), None)
    assert recorded(exp, 0, ("host",)) == pytest.approx(slow)
    # the next scale's plan is less than that recorded time: a larger scale is no quicker
    assert recorded(exp, 1, ("host",)) == pytest.approx(slow)

    ep = next(e for e in rp.EXPERIMENTS if e.id == "000-npb-ep")
    m = rp.matrix_for(ep, ep.tiers[0], ("c-small",))
    # 1-vCPU containers: as many started as the largest cell holds at once (2 instances)
    assert rt.startup_s(m) == rt.RUN_START_S + 2 * rt.INSTANCE_START_S["container"]
    # with SSH hosts beside them: the local child's estimate times the platforms' share, as before
    assert est(ep, 0, ("c-small", rp.REMOTE_ENV)) == pytest.approx(2 * est(ep, 0, ("c-small",)))

    boot = next(e for e in rp.EXPERIMENTS if e.id == "000-boot-size")
    assert rt.child_seconds(boot, boot.tiers[0], ("vm",), None) is None
    assert est(boot, 0, ("vm",)) == boot.tiers[0].estimate_s


def test_the_child_plan_reads_this_machines_earlier_samples(tmp_path):
    """With a store, the child plan takes the earlier attempts of the same cell from it (run/estimates.py)
    instead of the model: the reproduce estimate follows."""
    from test_estimates import record_walls

    exp = _hpa()
    m = rp.matrix_for(exp, exp.tiers[0], ("host",))
    store = Store(tmp_path / "h.sqlite")
    model_only = rt.Estimator({}, None, store)(exp, 0, ("host",))
    one = rp.matrix_for(exp, exp.tiers[0], ("host",))
    one.cells = one.cells[:1]
    runs = exp.tiers[0].repeat + 1  # 1 warm-up + the tier's repetitions per cell
    per_rep = plan_mod.make(one).seconds[1] / runs  # the model's figure for that one cell
    record_walls(store, one, {"host": [40.0, 42.0, 41.0]})  # the first cell measured at 41 s a repetition
    measured = rt.Estimator({}, None, store)(exp, 0, ("host",))
    assert measured == pytest.approx(model_only + runs * (41.0 - per_rep))


def test_every_experiment_builds_from_its_suite_file():
    for exp in rp.EXPERIMENTS:
        for tier in exp.tiers:
            if exp.boot:
                g = rp.boot_grid(exp, tier, CLOUD)
                # the study's copy from the node's cache unless the tier says (a start timed without a copy)
                mode = "overlay" if g.driver == "cloud" else tier.boot.get("image_mode", "copy")
                assert g.image_modes == [mode] and g.repeat == tier.repeat
                if "sizes_gb" not in tier.boot and g.driver != "cloud":
                    assert g.image_sizes == ["auto"]  # the suite's own: the image as it is
                continue
            m = rp.matrix_for(exp, tier, rp.envs_for(exp, KVM))
            assert m.cells and m.policy.min_repetitions == m.policy.max_repetitions == tier.repeat
            assert all(c["workload"] == exp.workload for c in m.cells if exp.workload)


def test_web_on_a_cluster_puts_the_pods_behind_a_service_with_the_testbeds_own_image():
    """Study 004's pods behind a ClusterIP Service (its claim's quantity), on the kubeconfig's cluster; without
    --pods-image no image option, so on a testbed the backend pushes the guest image to its registry."""
    from click.testing import CliRunner

    from virtbench.cli.reproduce import reproduce

    (exp,) = [e for e in rp.EXPERIMENTS if e.id == "004-web"]
    default = next(p.default for p in reproduce.params if p.name == "pods_image")
    assert default == ""
    assert "testbed" in CliRunner().invoke(reproduce, ["--help"]).output
    m = rp.matrix_for(exp, exp.tiers[0], rp.envs_for(exp, KVM), kubeconfig="/k/kubeconfig", pods_image=default)
    pods = [c for c in m.cells if "pods" in c.get("environments", ["pods"])]
    assert sorted(c["params"]["replicas"] for c in pods) == [1, 2, 4, 8]
    assert {c["params"]["balancer"] for c in pods} == {"service"}
    (env,) = [e for e in m.environments if e.name == "pods"]
    assert env.options["backend"] == "kubernetes" and not env.options.get("image")


def test_bonnie_delay_experiment_compares_pairs_of_one_file_size():
    """Each step of study 003's order writes the same file on both sides: local and iSCSI at 1 GiB,
    iSCSI with and without 10 ms at 256 MiB."""
    exp = next(e for e in rp.EXPERIMENTS if e.id == "003-bonnie")
    m = rp.matrix_for(exp, exp.tiers[0], ("host",))
    got = sorted((c["condition"].get("storage"), c["condition"].get("delay_ms"), c["params"]["scale"]) for c in m.cells)
    assert got == [("iscsi", 0.0, 0.125), ("iscsi", 0.0, 0.5), ("iscsi", 10.0, 0.125), ("local", None, 0.5)]


# -- SSH hosts of an inventory and a cloud as platforms of the plan ---------------------------------

INV = """all:
  children:
    testbed:
      hosts:
        h1: {ansible_host: 10.9.0.11, virtbench_testbed: tb}
        h2: {ansible_host: 10.9.0.12, virtbench_testbed: tb}
"""


def test_inventory_hosts_join_the_experiments_whose_instances_are_machines(tmp_path):
    steps = {s.exp.id: s for s in rp.plan(4 * 3600, {**TCG, "hosts": ["h1", "h2"]}, history={})}
    for eid in ("000-npb-ep", "001-network"):
        assert rp.REMOTE_ENV in steps[eid].envs and "SSH hosts h1, h2" in steps[eid].platforms
    assert rp.REMOTE_ENV not in steps["003-hpa"].envs and not steps["003-hpa"].platforms
    without = {s.exp.id: s for s in rp.plan(4 * 3600, TCG, history={})}
    assert rp.REMOTE_ENV not in without["000-npb-ep"].envs
    assert "not on SSH hosts: no --inventory" in without["000-npb-ep"].platforms
    one = {s.exp.id: s for s in rp.plan(4 * 3600, {**TCG, "hosts": ["h1"]}, history={})}
    assert "needs 2 hosts" in one["000-npb-ep"].platforms and rp.REMOTE_ENV not in one["000-npb-ep"].envs
    # the hosts' share of the time is in the estimate (EP ran on c-small alone: twice the cells), and
    # their times are recorded apart
    assert without["000-npb-ep"].envs == ("c-small",)
    assert steps["000-npb-ep"].estimate_s == pytest.approx(without["000-npb-ep"].estimate_s * 2)
    assert rp.timing_key(steps["000-npb-ep"].exp, steps["000-npb-ep"].envs)[0] == "000-npb-ep+hosts"

    inv = tmp_path / "inv.yml"
    inv.write_text(INV)
    assert rfacts.inventory_hosts(str(inv), "testbed") == ["h1", "h2"]
    with pytest.raises(UserError):
        rfacts.inventory_hosts(str(inv), "nosuchgroup")
    exp = steps["000-npb-ep"].exp
    m = rp.matrix_for(exp, exp.tiers[0], steps["000-npb-ep"].envs, inventory=str(inv), hosts="testbed")
    hosts_env = next(e for e in m.environments if e.name == rp.REMOTE_ENV)
    assert (hosts_env.driver, hosts_env.options, m.inventory) == ("ssh", {"hosts": "testbed"}, str(inv))
    assert sorted(c["params"]["instances"] for c in m.cells if rp.REMOTE_ENV in c["environments"]) == [1, 2]
    with pytest.raises(UserError, match="inventory"):
        rp.matrix_for(exp, exp.tiers[0], steps["000-npb-ep"].envs)


def test_cloud_settings_bring_the_cloud_boot_grid_and_cloud_instances(tmp_path):
    why = {s.exp.id: s.why for s in rp.plan(4 * 3600, TCG, history={}) if s.tier is None}
    assert why["000-boot-cloud"].startswith("needs a cloud's settings")
    facts = {**TCG, "cloud": {"backend": "moto+testbed", "region": "us-east-1", "emulated": True}}
    steps = {s.exp.id: s for s in rp.plan(4 * 3600, facts, history={})}
    boot = steps["000-boot-cloud"]
    assert boot.tier is not None and boot.envs == ("cloud",)
    assert "moto+testbed" in boot.platforms and "not a cloud" in boot.platforms
    assert rp.CLOUD_ENV in steps["000-npb-ep"].envs and "cloud = instances of moto+testbed" in steps["000-npb-ep"].platforms
    g = rp.boot_grid(boot.exp, boot.exp.tiers[0], {**CLOUD, "images": "2G=ami-2,5G=ami-5", "image": ""})
    assert (g.driver, g.image_sizes, g.concurrency, g.image_modes) == ("cloud", ["2G", "5G"], [1, 4], ["overlay"])
    assert g.options["endpoint"] == CLOUD["endpoint"] and g.options["ssh_user"] == "admin"  # the suite's own
    assert rp.boot_grid(boot.exp, boot.exp.tiers[0], CLOUD).image_sizes == ["auto"]  # one image
    exp = steps["000-npb-ep"].exp
    m = rp.matrix_for(exp, exp.tiers[0], steps["000-npb-ep"].envs, cloud=CLOUD)
    cloud_env = next(e for e in m.environments if e.name == rp.CLOUD_ENV)
    assert cloud_env.shape.name == "m1.small" and cloud_env.options["image"] == "ami-1"
    assert rfacts.cloud_options(["endpoint=http://127.0.0.1:5000", "image=ami-3", "max_instances=2"])["max_instances"] == 2
    for bad in (["endpoint"], ["nosuch=1", "image=x"], ["endpoint=http://x"]):
        with pytest.raises(UserError):
            rfacts.cloud_options(bad)


def test_parse_budget():
    assert rp.parse_budget("30m") == 1800 and rp.parse_budget("1h30m") == 5400 and rp.parse_budget("45") == 2700
    for bad in ("soon", "0m", "-5m"):
        with pytest.raises(UserError):
            rp.parse_budget(bad)


# -- a real run: two tiny host-only experiments on the quick suite ---------------------------------------

def _tiny(eid: str, test: str) -> rp.Experiment:
    return Experiment(eid, "000", f"tiny {test}", "quick.toml", ("host",), "system", {"copies": ["1"]},
                         tiers=(Tier(f"{test}, 1 repetition", 1, 5, params={"duration": 0.05},
                                        select={"test": [test]}),))


class _Interrupt(rp.Events):
    """Ctrl-C as the second experiment starts."""

    def step(self, index, total, step, message):
        if index == 1 and message.startswith("about"):
            raise KeyboardInterrupt


def test_reproduce_runs_resumes_and_reports_scorecard_first(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(rp, "EXPERIMENTS", (_tiny("tiny-a", "dhrystone"), _tiny("tiny-b", "syscall")))
    monkeypatch.setattr(rt, "history_path", lambda: tmp_path / "times.json")
    store = Store(tmp_path / "r.sqlite")
    rep = rp.Reproducer(store, events=_Interrupt())
    with pytest.raises(KeyboardInterrupt):
        rep.start(600, None, dict(TCG))
    run_id = rep.run_id
    assert store.run(run_id)["status"] == "interrupted"
    # the report of the interrupted run says how to continue it, with the --db that holds it
    named = Store(tmp_path / "r.sqlite", named=tmp_path / "r.sqlite")
    note = markdown.render(report_build.document(named, [run_id]))
    assert f"virtbench reproduce --resume {run_id} --db {tmp_path / 'r.sqlite'}" in note
    done = rp.experiments_done(store, run_id)
    assert done["tiny-a"]["status"] == "ok" and "tiny-b" not in done
    first_child = done["tiny-a"]["child"]

    rp.Reproducer(store).resume(run_id)
    done = rp.experiments_done(store, run_id)
    assert store.run(run_id)["status"] == "completed"
    assert done["tiny-a"]["child"] == first_child  # not run again
    assert done["tiny-b"]["status"] == "ok" and done["tiny-b"]["actual_s"] > 0
    assert store.run(done["tiny-b"]["child"])["status"] == "completed"
    assert len(json.loads((tmp_path / "times.json").read_text())) == 2  # both times recorded
    with pytest.raises(UserError):
        rp.Reproducer(store).resume(run_id)

    from virtbench.studies import card

    data = card.result(store, run_id)
    assert len(data["scorecard"]) >= 12 and all(v["reason"] for v in data["scorecard"]
                                                  if v["verdict"] == "not measured")
    assert [p["status"] for p in data["plan"]] == ["ok", "ok"]
    from virtbench.cli import reproduce as cli_reproduce

    cli_reproduce.show(store, run_id, True)  # `virtbench show RUN_ID --json` of a reproduce run
    shown = json.loads(capsys.readouterr().out)
    assert list(shown)[:3] == ["run_id", "status", "budget_s"] and shown["scorecard"] == data["scorecard"]
    doc = report_build.document(store, [run_id])
    assert doc.parts[0].sections[0].title.startswith("Do the studies' findings hold")
    # pre-registration: the study files' hashes under the scorecard, a revised finding said beside its verdict
    score_table = doc.parts[0].sections[0].blocks[0]
    assert all(f["sha256"][:16] in score_table.note for f in data["study_files"]) and len(data["study_files"]) == 5
    revised = [r for r, k in zip(score_table.rows, score_table.keys) if k["claim"] == "004-web-pods-peak"]
    assert "(finding revised 2026-11-27: published_at = 32 added" in revised[0][2]
    # each finding in the study's own words, beside where it says them
    quoted = [r for r, k in zip(score_table.rows, score_table.keys) if k["claim"] == "004-nfs-write"][0]
    assert quoted[5].startswith("section 4.4") and "\u201c" in quoted[5] and "Pod" in quoted[5]
    assert [p.id for p in doc.parts[1:]] == [done["tiny-a"]["child"], done["tiny-b"]["child"]]
    text = markdown.render(doc)
    assert text.index("Scorecard") < text.index(done["tiny-a"]["child"])
    # the scoring code's version went with the run, and is said wherever the scorecard is
    from virtbench.studies import codeversion

    now = codeversion.current()
    assert store.run(run_id)["spec"]["scoring"] == now and now["version"] and len(now["sha256"]) == 64
    assert shown["scoring"] == {"recorded": now, "scored_with": now, "note": None}
    assert f"scoring sources sha256 {now['sha256'][:16]}, the scoring code the run was recorded with" in score_table.note
    cli_reproduce.show(store, run_id, False)
    said = capsys.readouterr().out
    assert f"scoring code: virtbench {now['version']}, scoring sources sha256 {now['sha256'][:16]}" in said
    assert "note:" not in said
    # scored again by other scoring code: the scorecard says so, in every form
    monkeypatch.setattr(codeversion, "sources_hash", lambda root=None: "f" * 64)
    data = card.result(store, run_id)
    assert data["scoring"]["recorded"] == now and data["scoring"]["scored_with"]["sha256"] == "f" * 64
    assert data["scoring"]["note"].startswith("scored now by virtbench ") and now["sha256"][:16] in data["scoring"]["note"]
    assert "the same samples may give other verdicts" in data["scoring"]["note"]
    cli_reproduce.show(store, run_id, False)
    assert "note: scored now by virtbench" in capsys.readouterr().out
    doc = report_build.document(store, [run_id])
    assert doc.parts[0].sections[0].blocks[0].text.startswith("Scoring code: scored now by virtbench")

    # a peak and the network penalty, read from intervals together at 95 %: their text and level in
    # the --json scorecard, in `show` and in the report (the run's samples stand in for by groups here)
    from virtbench.studies import evidence
    from virtbench.studies.score import Evidence, Group

    spread = (0.99, 1.0, 1.01, 1.005, 0.995)
    groups = [Group("004-web", "web", {"workers": 1, "replicas": x}, {}, "pods", "pods", "requests_per_second",
                    "req/s", True, [v * f for f in spread]) for x, v in {1: 100, 2: 300, 4: 250, 8: 200}.items()]
    for code, workload, params, p in (("fine", "npb", {"kernel": "sp-mz"}, 1.5), ("coarse", "eigen", {}, 1.0)):
        for kind in ("host", "container"):
            for inst in (1, 2):
                t = 10.0 * (p if kind != "host" and inst == 2 else 1.0)
                groups.append(Group("001-network", workload, {**params, "instances": inst}, {}, kind, kind, "time",
                                    "s", False, [t * f for f in spread]))
    monkeypatch.setattr(evidence, "collect", lambda store, run_id: Evidence(groups, {"cluster": True}))
    cli_reproduce.show(store, run_id, True)
    cards = {c["id"]: c for c in json.loads(capsys.readouterr().out)["scorecard"]}
    peak, penalty = cards["004-web-pods-peak"], cards["001-coarse-copes"]
    assert peak["verdict"] == "holds" and peak["level"] >= 0.95 and peak["ci"] == [2, 2], peak
    assert "the peak lies at replicas in {2} (the 6 pairwise ratio intervals together at 95.2%" in peak["measured"]
    assert penalty["verdict"] == "holds" and penalty["level"] >= 0.95 and penalty["ci"][0] > 1, penalty
    assert "medians only" not in peak["measured"] + penalty["measured"]
    cli_reproduce.show(store, run_id, False)
    said = capsys.readouterr().out
    assert "interval at 95.2%" in said and "interval at 96.8%" in said
    table = report_build.document(store, [run_id]).parts[0].sections[0].blocks[1]  # after the scoring note
    rows = {k["claim"]: r for r, k in zip(table.rows, table.keys)}
    assert rows["004-web-pods-peak"][3].endswith("; interval at 95.2%") and "pairwise" in rows["004-web-pods-peak"][3]
    assert rows["001-coarse-copes"][3].endswith("; interval at 96.8%")


def _two_tiers() -> rp.Experiment:
    return Experiment("tiny-t", "000", "tiny, two scales", "quick.toml", ("host",), "system", {"copies": ["1"]},
                         tiers=(Tier("dhrystone once", 1, 5, params={"duration": 0.05}, select={"test": ["dhrystone"]}),
                                Tier("dhrystone twice", 2, 400, params={"duration": 0.05},
                                        select={"test": ["dhrystone"]})))


@pytest.mark.parametrize("budget, expected", [(3600, 1), (300, 0)])
def test_run_time_goes_up_a_scale_only_when_it_still_fits(tmp_path, monkeypatch, budget, expected):
    exp = _two_tiers()
    monkeypatch.setattr(rp, "EXPERIMENTS", (exp,))
    monkeypatch.setattr(rt, "history_path", lambda: tmp_path / "times.json")
    # the larger scale was recorded at 400 s (its child plan alone would say seconds)
    rp.record_history(exp.id, exp.tiers[1], 400.0, None, None, tmp_path / "times.json")
    store = Store(tmp_path / "r.sqlite")
    steps = [rp.Step(exp, 0, 5.0, envs=("host",))]  # planned at the smallest scale
    spec = rp.spec_for(steps, budget, dict(TCG), None, None, "")
    rep = rp.Reproducer(store)
    rep.run_id = store.create_run(spec, suite_name="reproduce", suite_path=None, baseline="host", command="test")
    rep._execute(spec, rep.clock())
    done = rp.experiments_done(store, rep.run_id)["tiny-t"]
    assert done["status"] == "ok" and done["tier"] == expected  # 400 s fits an hour, not 5 minutes


def _with_extra(eid: str) -> rp.Experiment:
    return Experiment(eid, "000", "tiny, one scale and more repetitions", "quick.toml", ("host",), "system",
                         {"copies": ["1"]},
                         tiers=(Tier("dhrystone once", 1, 5, params={"duration": 0.05}, select={"test": ["dhrystone"]}),
                                Tier("dhrystone twice", 2, 6, params={"duration": 0.05},
                                        select={"test": ["dhrystone"]}, extra=True)))


@pytest.mark.parametrize("below_top", [False, True])
def test_run_time_takes_extra_repetitions_only_when_the_plan_had_every_experiment_at_its_largest_scale(
        tmp_path, monkeypatch, below_top):
    extra, other = _with_extra("tiny-x"), _two_tiers()
    monkeypatch.setattr(rp, "EXPERIMENTS", (extra, other))
    monkeypatch.setattr(rt, "history_path", lambda: tmp_path / "times.json")
    rp.record_history(other.id, other.tiers[1], 400.0, None, None, tmp_path / "times.json")
    store = Store(tmp_path / "r.sqlite")
    # tiny-t planned at its smaller scale (its larger one, 400 s, does not fit 300 s): no extras for tiny-x
    steps = [rp.Step(extra, 0, 5.0, envs=("host",)), rp.Step(other, 0 if below_top else 1, 5.0, envs=("host",))]
    if not below_top:
        rp.record_history(other.id, other.tiers[1], 5.0, None, None, tmp_path / "times.json")  # and quick now
    spec = rp.spec_for(steps, 300, dict(TCG), None, None, "")
    rep = rp.Reproducer(store)
    rep.run_id = store.create_run(spec, suite_name="reproduce", suite_path=None, baseline="host", command="test")
    rep._execute(spec, rep.clock())
    done = rp.experiments_done(store, rep.run_id)
    assert done["tiny-x"]["status"] == "ok" and done["tiny-x"]["tier"] == (0 if below_top else 1)


def test_run_time_skips_what_no_longer_fits_and_says_so(tmp_path, monkeypatch):
    exp = _two_tiers()
    monkeypatch.setattr(rp, "EXPERIMENTS", (exp,))
    monkeypatch.setattr(rt, "history_path", lambda: tmp_path / "times.json")
    rp.record_history(exp.id, exp.tiers[0], 500.0, None, None, tmp_path / "times.json")  # measured: 500 s
    store = Store(tmp_path / "r.sqlite")
    spec = rp.spec_for([rp.Step(exp, 0, 5.0, envs=("host",))], 120, dict(TCG), None, None, "")
    rep = rp.Reproducer(store)
    rep.run_id = store.create_run(spec, suite_name="reproduce", suite_path=None, baseline="host", command="test")
    rep._execute(spec, rep.clock())
    done = rp.experiments_done(store, rep.run_id)["tiny-t"]
    assert done["status"] == "skipped" and "left out at run time" in done["reason"] and "500 s" in done["reason"]
    assert store.run(rep.run_id)["status"] == "completed"


def test_failed_experiments_are_recorded_with_their_reasons_and_set_the_exit_status(tmp_path, monkeypatch, capsys):
    """As `run`: 0 when no experiment failed, 3 when some did and others have results, 4 when none has.
    Two ways to fail: a selection that matches no cell (before any child run), and a child run whose
    every cell failed (its kernel exits 1: the one fake here, standing for a broken workload)."""
    from virtbench.cli import reproduce as cli_reproduce
    from virtbench.run import outcomes
    from virtbench.workloads.system import SystemSuite

    real = SystemSuite.command
    monkeypatch.setattr(SystemSuite, "command", lambda self, inst, params, ctx: (
        ["sh", "-c", "echo kernel broke >&2; exit 1"] if params["test"] == "syscall" else real(self, inst, params, ctx)))
    good, broken, unmatched = _tiny("tiny-a", "dhrystone"), _tiny("tiny-b", "syscall"), _tiny("tiny-c", "no-such")
    monkeypatch.setattr(rt, "history_path", lambda: tmp_path / "times.json")
    store = Store(tmp_path / "r.sqlite")
    codes, done, notes = {}, {}, {}
    for name, exps in (("ok", (good,)), ("some", (good, broken)), ("none", (broken, unmatched))):
        monkeypatch.setattr(rp, "EXPERIMENTS", exps)
        run_id = rp.Reproducer(store).start(600, None, dict(TCG))
        done.update(rp.experiments_done(store, run_id))
        codes[name] = cli_reproduce.exit_code(store, run_id)
        notes[name] = (store.run(run_id)["status"], store.run(run_id)["note"])
    assert codes == {"ok": outcomes.EXIT_OK, "some": outcomes.EXIT_SOME_FAILED, "none": outcomes.EXIT_NONE_SUCCEEDED}
    # `virtbench runs` says what a completed reproduce run lacks, as it does for `run`
    assert notes == {"ok": ("completed", None), "some": ("completed", "1 of 2 experiments failed"),
                     "none": ("completed", "no experiment succeeded")}
    # its last line names the report with the --db that holds the run
    capsys.readouterr()
    cli_reproduce.show(Store(tmp_path / "r.sqlite", named=tmp_path / "r.sqlite"), run_id, False)
    assert f"Report: virtbench report {run_id} --db {tmp_path / 'r.sqlite'}" in capsys.readouterr().out
    assert done["tiny-a"]["status"] == "ok" and done["tiny-a"]["reason"] is None
    assert done["tiny-b"]["status"] == "failed" and done["tiny-b"]["child"]
    assert done["tiny-b"]["reason"].startswith("no cell has results (system on host: ")
    assert done["tiny-c"]["status"] == "failed" and "matches its selection" in done["tiny-c"]["reason"]

    # --resume of the completed run takes only its failed experiments again: the kernel works now.
    monkeypatch.setattr(SystemSuite, "command", real)
    rp.Reproducer(store).resume(run_id)
    again = rp.experiments_done(store, run_id)
    assert again["tiny-b"]["status"] == "ok" and again["tiny-b"]["child"] != done["tiny-b"]["child"]
    assert again["tiny-c"]["status"] == "failed" and cli_reproduce.exit_code(store, run_id) == outcomes.EXIT_SOME_FAILED


def test_the_machine_checks_are_told_one_by_one_with_what_they_found():
    """`reproduce --plan` prints each check as it starts and ends (a slow probe is seen waiting);
    the accelerator says when its kept answer was probed (drivers/vm/accel_probe.py keeps it per boot)."""
    from virtbench.reproduce import facts as reproduce_facts

    heard = []
    facts = reproduce_facts.machine_facts(None, progress=lambda label, found: heard.append((label, found)))
    labels = [label for label, _ in heard]
    assert labels == [x for x in ("CPU probe", "Kubernetes testbed", "NFS client", "QEMU's accelerator")
                      for _ in range(2)]
    assert all(found is None for _, found in heard[::2]) and all(found.endswith(" s)") for _, found in heard[1::2])
    found = heard[-1][1]
    assert found.startswith(str(facts["accelerator"] or "none"))
    if facts["accelerator_probed_at"]:
        assert "kept for this boot" in found


def test_no_cluster_points_to_the_testbed_and_testbed_plans_the_pods(tmp_path):
    """Without a cluster the plan says --testbed would start one here; with --testbed the pods
    experiments are planned on the testbed's kubeconfig (nothing is started by --plan)."""
    import subprocess
    import sys

    from virtbench.reproduce import testbed as reproduce_testbed

    why = {s.exp.id: s.why for s in rp.plan(4 * 3600, TCG, history={}) if s.tier is None}
    assert "--testbed" in why["004-web"]
    up = {**TCG, "testbed_up": "/x/kubeconfig"}
    why = {s.exp.id: s.why for s in rp.plan(4 * 3600, up, history={}) if s.tier is None}
    assert "testbed cluster is up here: add --kubeconfig /x/kubeconfig or --testbed" in why["004-web"]

    db = str(tmp_path / "r.sqlite")
    res = subprocess.run([sys.executable, "-m", "virtbench.cli", "reproduce", "004", "--plan", "--testbed", "--json",
                          "--db", db], capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    assert "Kubernetes testbed ..." in res.stderr
    up = reproduce_testbed.running()
    assert ("up (" if up else "to be started for the run, stopped after") in res.stderr
    assert up or f"starting the testbed cluster adds about {reproduce_testbed.START_S} s" in res.stderr
    planned = {p["id"]: p for p in json.loads(res.stdout)["plan"]}
    assert planned["004-web"]["tier"] is not None
    res = subprocess.run([sys.executable, "-m", "virtbench.cli", "reproduce", "004", "--plan", "--testbed",
                          "--kubeconfig", __file__, "--db", db], capture_output=True, text=True, timeout=300)
    assert res.returncode == 2 and "give one of them" in res.stderr


def test_an_nfs_client_is_found_the_way_storage_nfs_mounts():
    """The NFS module is loaded on demand ('modprobe nfs'), as the NFS ways' own check does, and the
    mount needs mount.nfs4: /proc/filesystems alone says no NFS on a machine whose module is not loaded yet."""
    from virtbench.machines.fake import RecordingMachine, result
    from virtbench.reproduce.facts import nfs_client

    def machine(loads: bool, mount_nfs4: bool) -> RecordingMachine:
        m = RecordingMachine("node")
        state = {"loaded": False}

        def modprobe(argv, _stdin):
            state["loaded"] = loads
            return result(argv, returncode=0 if loads else 1)

        m.answer(("cat", "--", "/proc/filesystems"),
                 reply=lambda argv, _s: result(argv, "nodev\tproc\n\text4\n" + ("nodev\tnfs\nnodev\tnfs4\n" if state["loaded"] else "")))
        m.answer(("modprobe",), reply=modprobe)
        m.answer(lambda argv: argv[:2] == ["sh", "-c"] and argv[-1] == "mount.nfs4", returncode=0 if mount_nfs4 else 1)
        return m

    m = machine(loads=True, mount_nfs4=True)
    assert nfs_client(m) == (True, "the kernel's NFS client (loaded) and mount.nfs4")
    assert ["modprobe", "-q", "nfs"] in m.commands()
    ok, why = nfs_client(machine(loads=True, mount_nfs4=False))
    assert not ok and "apt-get install nfs-common" in why
    ok, why = nfs_client(machine(loads=False, mount_nfs4=True))
    assert not ok and "'modprobe nfs' failed" in why


def test_a_cluster_is_described_as_what_it_is():
    from virtbench.reproduce.facts import describe_nodes

    assert describe_nodes([("vbt-n1", "b1"), ("vbt-n2", "b1")]) == (
        "2 nodes (vbt-n1, vbt-n2) on one machine (one boot id): one machine playing a cluster")
    assert describe_nodes([("a", "b1"), ("b", "b2"), ("c", "b3")]) == "3 nodes (a, b, c) on 3 separate machines (a boot id each)"
    assert describe_nodes([("a", "b1")]) == "1 node (a)"


def test_a_stored_run_keeps_the_experiments_of_the_study_files_it_recorded():
    """A study file changed after a run started: its resume and scorecard use the tiers it recorded."""
    import hashlib

    steps = rp.plan(3600, TCG, studies=["002"], history={})
    spec = rp.spec_for(steps, 3600, TCG, ["002"], None, "")
    assert [f["id"] for f in spec["study_files"]] == ["002"] and spec["study_files"][0]["builtin"]
    link = next(e for e in rp.experiments_of(spec) if e.id == "002-link")
    assert link.tiers == next(e for e in rp.EXPERIMENTS if e.id == "002-link").tiers
    # the file as recorded, not as it is now: a tier the recorded text has and the file lost
    text = spec["study_files"][0]["text"]
    recorded = text.replace('label = "1 GiB file (the suite\'s 1/2)', 'label = "as recorded: 1 GiB file (the suite\'s 1/2)')
    assert recorded != text
    spec["study_files"][0]["text"] = recorded
    spec["study_files"][0]["sha256"] = hashlib.sha256(recorded.encode()).hexdigest()
    link = next(e for e in rp.experiments_of(spec) if e.id == "002-link")
    assert any(t.label.startswith("as recorded: ") for t in link.tiers)
    assert rp.experiments_of({**spec, "study_files": []}) == rp.EXPERIMENTS  # a run stored before files were


def test_the_planner_raises_tiers_to_what_their_findings_intervals_need():
    """Every tier at least at the repetitions its findings' 95 % intervals need, its label saying so; a
    boot grid's instances started at once count as values (1 and 4 at once: 2 repetitions suffice)."""
    from virtbench.studies import score, studyfile

    exps = {e.id: e for e in rp.EXPERIMENTS}
    for f in studyfile.builtin_findings():
        for eid in score.experiments_read(f):
            if eid in exps and not exps[eid].boot:
                assert all(t.repeat >= score.repetitions_for_level(f.rule) for t in exps[eid].tiers), (f.id, eid)
    raised = [t for e in rp.EXPERIMENTS for t in e.tiers if "a 95 % interval needs" in t.label]
    assert raised and all(t.label.endswith(f"raised to {t.repeat} repetitions (a 95 % interval needs {t.repeat})")
                          for t in raised)
    conc = exps["000-boot-concurrency"]
    assert conc.tiers[0].boot["concurrency"] == [1, 4] and conc.tiers[0].repeat == 2


def test_the_scoring_version_covers_the_stats_modules_the_rules_use(tmp_path):
    """codeversion.SOURCES holds score.py, evidence.py and every stats module they import (directly or
    through stats), and its hash moves when one of them does."""
    import ast
    import shutil
    from pathlib import Path

    from virtbench.studies import codeversion

    root = Path(codeversion.__file__).resolve().parents[1]
    todo, seen = ["studies/score.py", "studies/evidence.py"], set()
    while todo:
        name = todo.pop()
        seen.add(name)
        pkg = name.rsplit("/", 1)[0]
        for node in ast.walk(ast.parse((root / name).read_text())):
            if not isinstance(node, ast.ImportFrom) or not node.level:
                continue
            base = (pkg.split("/")[: len(pkg.split("/")) - node.level + 1]) + (node.module or "").split(".")
            base = [b for b in base if b]
            for alias in node.names:
                for cand in ("/".join(base + [alias.name]) + ".py", "/".join(base) + "/__init__.py",
                             "/".join(base) + ".py"):
                    if cand.startswith("stats") and (root / cand).exists() and cand not in seen:
                        todo.append(cand)
                        break
    assert seen <= set(codeversion.SOURCES), seen - set(codeversion.SOURCES)
    copy = tmp_path / "virtbench"
    for name in codeversion.SOURCES:
        (copy / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(root / name, copy / name)
    assert codeversion.sources_hash(copy) == codeversion.sources_hash()
    (copy / "stats/exact.py").write_text((copy / "stats/exact.py").read_text() + "\n# changed\n")
    assert codeversion.sources_hash(copy) != codeversion.sources_hash()
    assert codeversion.rescored_note(None).startswith("this run recorded no scoring code version")
