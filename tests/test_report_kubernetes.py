"""What a report and `virtbench show` say about pods on a Kubernetes cluster, from a real run's stored
facts and instance rows (tests/data/pods/k8s-web-run.json, recorded on the testbed): the nodes, not
the machine that drove them; the layer as Kubernetes pods, not the probe's "vm"; labels with one
bracket; pod start phases at the API's 1 s resolution. The live run is in test_k8s_testbed.py."""

from __future__ import annotations

import copy
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from virtbench.drivers.pods import phases
from virtbench.report import kubefacts
from virtbench.store import Store

DATA = Path(__file__).parent / "data" / "pods"
RUN = json.loads((DATA / "k8s-web-run.json").read_text())
LAYER = "Kubernetes pods (containerd/runc) on testbed nodes, v1.34.4"


def vb(*args):
    res = subprocess.run([sys.executable, "-m", "virtbench.cli", *args], capture_output=True, text=True,
                         timeout=300, env=dict(os.environ))
    assert res.returncode == 0, res.stderr
    return res.stdout


def _store_run(db: str, run: dict, extra_instances: list[dict] = ()) -> str:
    """The recorded run's environments and pods as a stored run (no samples: the header and the
    instance sections read environments and instances)."""
    store = Store(db)
    envs = run["environments"]
    spec = {"name": "k8s-web", "cells": [], "baseline": "host",
            "environments": [{"name": e["name"], "driver": e["driver"], "options": {}, "shape": {}} for e in envs]}
    run_id = store.create_run(spec, suite_name="k8s-web", suite_path="suites/k8s-web.toml", baseline="host",
                              command="virtbench run suites/k8s-web.toml --repeat 2 --duration 3")
    for e in envs:
        store.save_environment(run_id, e["name"], e["driver"], e["spec"], e["facts"])
    for i in [*run["pod_instances"], *extra_instances]:
        store.save_instance(run_id, i["environment"], i["name"], i["role"], i["lifecycle"], i["metadata"])
    store.set_status(run_id, "completed")
    return run_id


@pytest.fixture(scope="module")
def stored(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("k8sreport")
    db = str(tmp / "r.sqlite")
    run_id = _store_run(db, RUN)
    html = tmp / "r.html"
    vb("report", run_id, "-o", str(html), "--db", db)
    return {"db": db, "id": run_id, "md": vb("report", run_id, "--format", "md", "--db", db),
            "html": html.read_text(), "show": vb("show", run_id, "--db", db)}


def _env_rows(md: str) -> dict[str, list[str]]:
    table = md[md.index("**Environments**"):].split("\n\n")[1]
    return {cells[0]: cells[1:] for cells in ([c.strip() for c in line.strip("|").split("|")]
                                              for line in table.splitlines()[2:])}


def test_header_names_the_nodes_and_the_layer_of_kubernetes_pods(stored):
    rows = _env_rows(stored["md"])
    assert rows["machines"] == ["localhost", "vbk8s-n1, vbk8s-n2"]  # host; the pods' nodes, not localhost
    assert rows["virtualization"][1] == LAYER  # not the in-pod probe's "vm"
    assert rows["virtualization"][0] == RUN["environments"][0]["facts"]["virtualization"]  # the host's own
    assert rows["driver"][1] == "pods (Kubernetes testbed on one machine, v1.34.4, 2 nodes)"


def test_no_label_is_wrapped_twice_in_markdown_html_or_the_terminal(stored):
    for name in ("md", "html", "show"):
        text = stored[name]
        assert not re.search(r"\(\(|\)\)|\[\[|\]\]", text), (name, re.findall(r".{60}(?:\)\)|\(\(|\]\]|\[\[).{20}", text))
        # and no bracket holds another within one label (the old "2 node(s))")
        assert not re.search(r"\([^()\n|<]*\([^()\n|<]*\)[^()\n|<]*\)", text), name
    assert LAYER in stored["html"] and "vbk8s-n1, vbk8s-n2" in stored["html"]


def test_show_says_where_the_pods_ran(stored):
    line = next(x for x in stored["show"].splitlines() if x.startswith("pods:"))
    assert LAYER in line and "pods on vbk8s-n1, vbk8s-n2" in line and "https://127.0.0.1:6443" in line
    assert "testbed on one machine" in line


def test_start_phases_of_api_timestamps_are_whole_seconds(stored):
    md = stored["md"]
    life = md[md.index("**Instance start-up phases"):].split("\n\n")[1].splitlines()[2:]
    rows = {r.split("|")[1].strip().split(" ")[0]: [c.strip() for c in r.strip("|").split("|")] for r in life}
    pod = "vb-07168ac0-pods-server-g1-58dcd5d5cf-mn8zz"
    inst = next(i for i in RUN["pod_instances"] if i["name"] == pod)
    lc = inst["lifecycle"]
    # created/running from the API (1 s, truncated): the nearest second to the middle of [t, t + 1)
    created, running, ready = rows[pod][2], rows[pod][3], rows[pod][5]
    assert created == str(round(lc["created"] - lc["requested"] + 0.5)) == "1"
    assert running == str(round(lc["running"] - lc["requested"] + 0.5)) == "21"
    assert ready == f"{lc['ready'] - lc['requested']:.3f}"  # this machine's clock: milliseconds
    assert all("." not in r[2] and "." not in r[3] for r in rows.values())
    assert "1 s resolution" in md


def test_pod_conditions_are_shown_with_their_resolution(stored):
    md = stored["md"]
    lines = md[md.index("**Pod start-up phases"):].split("\n\n")[1].splitlines()
    head = [c.strip() for c in lines[0].strip("|").split("|")]
    assert head[:5] == ["pod", "environment", "node", "backend", "resolution"]
    assert [h for h in head if h in ("PodScheduled", "Initialized", "ContainersReady", "Ready")] == \
        ["PodScheduled", "Initialized", "ContainersReady", "Ready"]
    rows = {c[0]: dict(zip(head, c)) for c in ([x.strip() for x in r.strip("|").split("|")] for r in lines[2:])}
    for inst in RUN["pod_instances"]:
        row, got = rows[inst["name"]], inst["metadata"]["pod_phases"]
        assert row["resolution"] == "1 s" and row["node"] == inst["metadata"]["node"]
        for ctype, phase in phases.CONDITIONS:
            assert row[ctype] == f"{got[phase] - got['created']:.0f}"
        assert "Scheduled" in row["events (seconds after creation)"]
        assert not re.search(r"\d\.\d", " ".join(v for k, v in row.items() if k != "pod"))  # nothing sub-second
    # the scheduler's microsecond eventTime cut to the second like the rest; ties in start order
    assert rows["vb-07168ac0-pods-server-g1-58dcd5d5cf-mn8zz"]["events (seconds after creation)"].startswith(
        "Scheduled 0, Pulling 1, Pulled 20, Created 20, Started 20")
    assert "whole seconds" in md


def test_kube_play_pods_keep_their_finer_stamps(tmp_path):
    """podman's pods (nanosecond stamps, from the recorded inspect output) stay at milliseconds."""
    got = phases.from_podman(*(json.loads((DATA / f"podman-{k}-inspect.json").read_text())
                               for k in ("pod", "infra", "main")))
    run = copy.deepcopy(RUN)
    play = {"environment": "pods", "name": "vb-play-0", "role": "main",
            "lifecycle": {"requested": got["created"] - 0.25, "created": got["created"],
                          "running": got["container_started"], "ready": got["container_started"] + 0.5},
            "metadata": {"backend": "kube-play", "pod_phases": got, "pod_phase_resolution_s": 1e-9,
                         "machine": "localhost"}}
    db = str(tmp_path / "p.sqlite")
    md = vb("report", _store_run(db, run, [play]), "--format", "md", "--db", db)
    row = next(r for r in md.splitlines() if r.startswith("| vb-play-0 |"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[3:5] == ["kube-play", "1 ns"]
    started = f"{got['container_started'] - got['created']:.3f}"
    assert started in cells
    life = next(r for r in md.splitlines() if r.startswith("| vb-play-0 (pods) |"))
    assert "| 0.250 |" in life  # created: podman's own stamp, to the millisecond


def test_runtime_and_layer_of_other_clusters():
    assert kubefacts.runtime({"container_runtime": "containerd://1.7.2"}) == "containerd 1.7.2"
    assert kubefacts.runtime({"container_runtime": "containerd://1.6.20", "cluster_testbed": "vbk8s"}) == \
        "containerd 1.6.20/runc"
    assert kubefacts.runtime({"container_runtime": "containerd://1.6.20", "cluster_testbed": "vbk8s",
                              "runtime_class": "gvisor", "runtime": "runsc",
                              "runtime_label": "gVisor runsc, ptrace, network host"}) == \
        "containerd 1.6.20/gVisor runsc, ptrace, network host"
    assert kubefacts.runtime({}) == "runtime not recorded"
    assert kubefacts.layer({"backend": "kubernetes", "server_version": "v1.30.1",
                            "container_runtime": "cri-o://1.30.0"}) == \
        "Kubernetes pods (cri-o 1.30.0) on cluster nodes, v1.30.1"
    assert kubefacts.cluster({"cluster_nodes": ["a"], "server_version": "v1.30.1"}) == \
        "Kubernetes cluster, v1.30.1, 1 node"
    # pod_nodes (what the runner records for a cell) count even without instance rows
    assert kubefacts.nodes("pods", {"pod_nodes": ["b", "a"], "cluster_nodes": ["a", "b", "c"]}, []) == ["a", "b"]
    assert kubefacts.nodes("pods", {"cluster_nodes": ["a", "b", "c"]}, []) == ["a", "b", "c"]
