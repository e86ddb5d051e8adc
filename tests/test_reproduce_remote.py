"""`virtbench reproduce` with platforms beyond this machine, for real: the SSH hosts of a local
testbed (network namespaces with their own sshd, named "vbrp" so no other test's testbed is touched)
given as --inventory, and a cloud's EC2 API given as --cloud settings (moto's EC2 server on a
loopback port, a local stand-in that starts no machines: SSH goes to the testbed's hosts, and every
result says backend "moto+testbed"). One study (000), its experiments at a tiny scale."""

import json
from dataclasses import replace

import pytest
from motokit import moto_server
from testbedkit import own_testbed

from virtbench import reproduce as rp
from virtbench.reproduce import facts as rfacts
from virtbench.reproduce import times as rt
from virtbench.store import Store
from virtbench.studies import card
from virtbench.studies.model import Tier

pytestmark = pytest.mark.slow
PREFIX = "vbrp"
TCG = {"accelerator": "tcg", "cluster": False, "nfs": False, "cores": 2, "probe_s": None, "load_1m": None}


@pytest.fixture(scope="module")
def testbed_rp(tmp_path_factory):
    """Two SSH hosts of this module's own testbed; removed at the end."""
    with own_testbed(2, tmp_path_factory.mktemp("tb") / "inventory.yml", PREFIX) as inventory:
        yield str(inventory)


def _tiny_ep() -> rp.Experiment:
    """The plan's own EP experiment (its suite cells, its platforms) at class S, 2 repetitions."""
    ep = next(e for e in rp.EXPERIMENTS if e.id == "000-npb-ep")
    return replace(ep, tiers=(Tier("class S, 2 repetitions", 2, 20, params={"class": "S"}),))


def _run(tmp_path, monkeypatch, experiments, facts, **kw) -> tuple[Store, str]:
    monkeypatch.setattr(rp, "EXPERIMENTS", experiments)
    monkeypatch.setattr(rt, "history_path", lambda: tmp_path / "times.json")
    store = Store(tmp_path / "r.sqlite")
    return store, rp.Reproducer(store).start(1800, ["000"], facts, **kw)


def _samples(store: Store, child: str, env: str) -> list[dict]:
    return [json.loads(s["metadata_json"]) for s in store.samples(child) if s["environment"] == env]


def test_inventory_hosts_run_the_experiment_and_score_its_finding(testbed_rp, tmp_path, monkeypatch):
    hosts = rfacts.inventory_hosts(testbed_rp)
    assert hosts == [f"{PREFIX}h1", f"{PREFIX}h2"]
    store, run_id = _run(tmp_path, monkeypatch, (_tiny_ep(),), {**TCG, "hosts": hosts}, inventory=testbed_rp)
    data = card.result(store, run_id)
    (step,) = data["plan"]
    assert step["status"] == "ok", step["reason"]
    assert step["environments"] == ["c-small", rp.REMOTE_ENV]
    assert f"SSH hosts {PREFIX}h1, {PREFIX}h2" in step["platforms"]
    child = step["child_run"]
    envs = {e["name"]: e for e in store.run(child)["spec"]["environments"]}
    assert envs[rp.REMOTE_ENV]["driver"] == "ssh" and store.run(child)["spec"]["inventory"] == testbed_rp
    on_hosts = _samples(store, child, rp.REMOTE_ENV)
    assert on_hosts and all(m["verified"] is True for m in on_hosts if "verified" in m)
    assert {tuple(sorted(m["machines"])) for m in on_hosts} == {(f"{PREFIX}h1",), (f"{PREFIX}h1", f"{PREFIX}h2")}
    verdict = next(v for v in data["scorecard"] if v["id"] == "000-npb-ep-scaling")
    # Scored from the hosts' own samples. Two repetitions a side give an interval of 66.7 % at best: it
    # is said with its level and decides nothing.
    assert isinstance(verdict["value"], float) and verdict["ci"], verdict["reason"]
    assert verdict["verdict"] == "not measured" and verdict["level"] == pytest.approx(2 / 3)
    assert verdict["reason"].startswith("too few repetitions for a 95 % interval (n = 2 / 2: the widest "
                                        "interval they give is at 66.7%)"), verdict["reason"]
    assert verdict["environments"] == [rp.REMOTE_ENV] and f"on {rp.REMOTE_ENV}" in verdict["measured"]


@pytest.fixture
def moto_url():
    pytest.importorskip("boto3")
    pytest.importorskip("moto.server")
    with moto_server("AKIAVBREPRODUCE00001", "vbReproNeverStored", "us-east-1") as url:
        yield url


def test_cloud_settings_run_the_cloud_boot_grid_labelled_as_moto(testbed_rp, moto_url, tmp_path, monkeypatch):
    import boto3

    image = boto3.client("ec2", region_name="us-east-1", endpoint_url=moto_url).describe_images()["Images"][0]["ImageId"]
    cloud = rfacts.cloud_options([f"endpoint={moto_url}", f"image={image}", "ssh_override=all", "max_instances=2"])
    facts = {**TCG, "cloud": rfacts.cloud_facts(cloud, testbed_rp)}
    assert facts["cloud"]["backend"] == "moto+testbed" and facts["cloud"]["emulated"]
    boot = next(e for e in rp.EXPERIMENTS if e.id == "000-boot-cloud")
    boot = replace(boot, tiers=(Tier("one image, 1 and 2 at once, 1 repetition", 1, 20,
                                        boot={"concurrency": [1, 2]}),))
    store, run_id = _run(tmp_path, monkeypatch, (_tiny_ep(), boot), facts, inventory=testbed_rp, cloud=cloud)
    data = card.result(store, run_id)
    plan = {p["id"]: p for p in data["plan"]}
    assert [p["status"] for p in data["plan"]] == ["ok", "ok"], [p["reason"] for p in data["plan"]]
    assert plan["000-boot-cloud"]["environments"] == ["cloud"]
    assert "a local EC2-compatible server, not a cloud" in plan["000-boot-cloud"]["platforms"]
    assert plan["000-npb-ep"]["environments"] == ["c-small", rp.CLOUD_ENV]

    boot_spec = store.run(plan["000-boot-cloud"]["child_run"])["spec"]
    assert boot_spec["boot"]["driver"] == "cloud" and boot_spec["boot"]["concurrency"] == [1, 2]
    boot_meta = [json.loads(s["metadata_json"]) for s in store.samples(plan["000-boot-cloud"]["child_run"])]
    assert boot_meta and {m["backend"] for m in boot_meta} == {"moto+testbed"}
    ep_cloud = _samples(store, plan["000-npb-ep"]["child_run"], rp.CLOUD_ENV)
    assert ep_cloud and {m["backend"] for m in ep_cloud} == {"moto+testbed"}

    # What a local EC2 stand-in measured counts for nothing, and the scorecard says so.
    cards = {v["id"]: v for v in data["scorecard"]}
    conc = cards["000-boot-concurrency"]
    assert conc["verdict"] == "not measured" and "moto" in conc["reason"] and "starts no machine" in conc["reason"]
    ep = cards["000-npb-ep-scaling"]
    assert ep["environments"] == ["c-small"]  # the containers' figures, not the stand-in's
    dump = (tmp_path / "r.sqlite").read_bytes().decode("latin-1")
    assert "vbReproNeverStored" not in dump and "AKIAVBREPRODUCE00001" not in dump
