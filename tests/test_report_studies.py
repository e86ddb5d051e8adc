"""The study sections of the report (boot grid, MPI, web replicas, HPA) from real short runs: the numbers
in their HTML tables equal the stored statistics, the published figures stand beside ours, and each
report opens in headless Chromium with no console error and no network request."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from virtbench import analysis
from virtbench.studies import published
from virtbench.report import fmt
from virtbench.store import Store
from virtbench.workloads import web as web_workload

from test_report import html_rows

BOOT_SUITE = """
[boot]
name = "mini-nii-boot"
driver = "container"
scale = 0.1                  # 2 GB -> 205M (below the container image: skipped, with the reason), 5 GB -> 512M
published_sizes_gb = [2, 5]
concurrency = [1, 2]
repeat = 2
"""


def vb(*args, check=True):
    res = subprocess.run([sys.executable, "-m", "virtbench.cli", *args], capture_output=True, text=True,
                         timeout=900, env=dict(os.environ))
    if check:
        assert res.returncode == 0, res.stderr
    return res


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """Real short runs on the host (mpi, hpa, web) and a container boot grid, in one store."""
    tmp = tmp_path_factory.mktemp("studies")
    db = str(tmp / "s.sqlite")
    run = ["--envs", "host", "--db", db, "--json"]
    ids = {
        "mpi": vb("run", "--workload", "mpi", "--param", "op=pingpong,allreduce,sendrecv", "--param", "max_bytes=4K",
                  "--param", "time_budget=0.005", "--repeat", "3", *run).stdout,
        "hpa": vb("run", "--workload", "hpa", "--param", "transactions=2000,4000,8000", "--repeat", "3", *run).stdout,
        "npb": vb("run", "--workload", "npb", "--param", "kernel=sp-mz,bt-mz", "--param", "class=S",
                  "--param", "threads=1,2", "--repeat", "2", *run).stdout,
        "eigen": vb("run", "--workload", "eigen", "--param", "class=S", "--param", "ranks=1,2", "--repeat", "2",
                    *run).stdout,
        "web": vb("run", "--workload", "web", "--param", "replicas=1,2", "--param", "duration=1", "--param",
                  "connections=8", "--repeat", "2", *run).stdout,
    }
    ids = {k: json.loads(v)["run_id"] for k, v in ids.items()}
    suite = tmp / "boot.toml"
    suite.write_text(BOOT_SUITE)
    boot = vb("boot", "--suite", str(suite), "--db", db, "--json", check=False)
    ids["boot"] = json.loads(boot.stdout)["run_id"] if boot.returncode == 0 else None
    reports = {}
    for name, rid in ids.items():
        if rid:
            reports[name] = tmp / f"{name}.html"
            vb("report", rid, "-o", str(reports[name]), "--db", db)
    return {"db": db, "ids": ids, "reports": reports, "boot_error": boot.stderr}


def _report(store, name):
    if store["ids"].get(name) is None:
        # Only a machine without a working podman may skip; a boot grid that fails there is a regression.
        if not shutil.which("podman") or subprocess.run(["podman", "info"], capture_output=True, timeout=60).returncode:
            pytest.skip("podman is not working here: no container boot grid")
        pytest.fail(f"virtbench boot failed: {store['boot_error'][-600:]}")
    stored = analysis.results(Store(store["db"]), store["ids"][name])["results"]
    return store["reports"][name], stored


def check_numbers(path, stored, workload):
    """Every keyed row of the workload's tables shows the stored median and CI of its result."""
    by_key = {(r["cell_key"], r["metric"], r["environment"]): r for r in stored}
    seen, checked = set(), 0
    for attrs, cells, caption in html_rows(path):
        key = (attrs.get("data-cell"), attrs.get("data-metric"), attrs.get("data-env"))
        if key not in by_key:
            continue
        r = by_key[key]
        seen.add(key)
        if not r["n"]:
            continue
        triple = [fmt.value(r["median"]), fmt.value(r["ci_low"]), fmt.value(r["ci_high"])]
        if "what the monitor measured" in caption:
            assert triple[0] in cells, (caption, cells, r)
        elif caption.startswith("Published beside ours"):  # means, as the study published
            assert fmt.value(r["mean"]) in cells, (caption, cells, r)
        elif caption.startswith("HPA: each mining pass"):  # per-pass medians: test_hpa_section checks them
            pass
        else:
            assert any(cells[i:i + 3] == triple for i in range(len(cells))), (caption, cells, triple)
        checked += 1
    assert seen == {k for k, r in by_key.items() if r["workload"] == workload}, "a stored result is missing"
    return checked


def test_npb_mz_beside_study_001(store):
    """SP-MZ and BT-MZ times in their own keyed rows, beside study 001's single-node table (host = BMM)."""
    path, stored = _report(store, "npb")
    assert check_numbers(path, stored, "npb") >= 4
    beside = [(a, c) for a, c, cap in html_rows(path) if cap.startswith("NPB-MZ times beside study 001")]
    assert {c[0] for a, c in beside} == {"SP-MZ", "BT-MZ"} and len(beside) == 4  # 2 codes x threads 1, 2
    for attrs, cells in beside:
        row = next(r for r in stored if (r["cell_key"], r["metric"], r["environment"])
                   == (attrs["data-cell"], attrs["data-metric"], attrs["data-env"]))
        assert row["metric"] == "time" and row["metadata"]["verified"] is True
        assert cells[1] == f"S · 1 x {row['params']['threads']}" and cells[2] == "host"
        assert cells[7] == "BMM" and cells[8] == {"SP-MZ": "86.63", "BT-MZ": "131.83"}[cells[0]] and cells[9] == "1.000"


def test_eigen_beside_bloss_and_algorithmic_ideal(store):
    """vb-eigen's times beside study 001's Bloss column, and its efficiency curve with the Amdahl ideal from
    the duplicated fraction f its 1-rank run measured (study 001 Fig. 4)."""
    path, stored = _report(store, "eigen")
    assert check_numbers(path, stored, "eigen") >= 2
    beside = [c for a, c, cap in html_rows(path) if cap.startswith("vb-eigen times beside study 001")]
    assert {c[0] for c in beside} == {"Bloss (min)"} and {c[1] for c in beside} == {"S · 1 x 1", "S · 2 x 1"}
    assert all(c[7] == "BMM" and c[8] == "21.06" for c in beside)
    one = next(r for r in stored if r["metric"] == "time" and r["params"]["ranks"] == 1)
    f = one["metadata"]["duplicated_fraction_median"]
    assert 0 < f < 1
    text = path.read_text()
    # the scaling table's last column at 2 cores (its rows carry no keys: found by text)
    assert f"<td>{fmt.value(1 / (2 * f + 1 - f))}</td></tr>" in text.replace("<td class=\"num\">", "<td>")
    assert f"host: algorithmic ideal (f = {f:.3g})" in text


def test_mpi_section(store):
    path, stored = _report(store, "mpi")
    assert check_numbers(path, stored, "mpi") > len(stored)  # the curves and the full table
    text = path.read_text()
    assert "MPI PingPong: time per call against message size" in text
    assert "MPI Allreduce: throughput against message size" in text
    assert "MPI Sendrecv: time per call against message size" in text  # IMB's name, not the op key
    assert "message size [bytes] (log scale)" in text and "time_us [us] (log scale)" in text
    # Our largest size beside study 001's 1 GB table, host matched with BMM, scale factor stated.
    beside = [(a, c) for a, c, cap in html_rows(path) if cap.startswith("MPI throughput at our largest")]
    pp = next(c for a, c in beside if c[0] == "PingPong")
    assert "Sendrecv" not in {c[0] for a, c in beside}  # the study's table has only its four operations
    host = next(r for r in stored if r["metric"] == "bandwidth_mbps" and r["params"]["op"] == "pingpong"
                and r["params"]["bytes"] == 4096)
    pub = published.table("001", "IMB throughput at 1 GB")
    assert pp[7] == "BMM" and pp[8] == "967.3" and pp[10] == fmt.value(host["median"] / pub.value("BMM", "PingPong"))
    assert "Our largest message is 4 KiB, the study&#39;s 1 GiB (1/262144 of it)" in text
    assert "2233.8" in text  # the whole study table too


def test_hpa_section(store):
    path, stored = _report(store, "hpa")
    check_numbers(path, stored, "hpa")
    text = path.read_text()
    assert "HPA: time against transactions" in text and "study 003, HPA datasets" in text
    assert "not the study&#39;s four sizes scaled" in text or "not the study's four sizes scaled" in text
    assert "grows only slowly with 10-50 ms delay" in text  # the published finding
    assert "host.cpu_util_mean" in text  # the monitor's CPU beside the time
    # each mining pass: medians over the samples' per-pass records (pure check below)
    passes = [(a, c) for a, c, cap in html_rows(path) if cap.startswith("HPA: each mining pass")]
    assert passes
    for attrs, cells in passes:
        row = next(r for r in stored if (r["cell_key"], r["metric"], r["environment"])
                   == (attrs["data-cell"], attrs["data-metric"], attrs["data-env"]))
        pm = {p["pass"]: p for p in row["metadata"]["pass_medians"]}[int(cells[4])]
        assert cells[0] == str(row["params"]["transactions"]) and cells[5] == fmt.value(pm["candidates"])
        assert cells[7] == fmt.value(pm["time_s"]) and cells[10] == f"{pm['bytes_sent'] / 1e6:.3g}"
    assert {int(c[4]) for a, c in passes} >= {1, 2}


def test_pass_medians_are_per_pass_medians():
    from virtbench.workloads import hpa

    metas = [{"passes": [{"pass": 1, "candidates": 10, "time_s": t, "bytes_sent": 0},
                         {"pass": 2, "candidates": 45, "time_s": 2 * t, "bytes_sent": 100 * t}]} for t in (1.0, 3.0, 2.0)]
    metas.append({"passes": [{"pass": 1, "candidates": 10, "time_s": 9.0, "bytes_sent": 0}]})  # a run with one pass
    got = hpa.pass_medians(metas)
    assert got[0] == {"pass": 1, "runs": 4, "candidates": 10, "time_s": 2.5, "bytes_sent": 0}
    assert got[1]["runs"] == 3 and got[1]["time_s"] == 4.0 and got[1]["bytes_sent"] == 200.0
    assert hpa.pass_medians([{"warnings": []}]) == []


def test_web_section(store):
    path, stored = _report(store, "web")
    check_numbers(path, stored, "web")
    text = path.read_text()
    assert "Web: requests/s against replicas" in text
    count, best = web_workload.peak(stored, environment="host")
    peak = [c for a, c, cap in html_rows(path) if cap == "Web: peak of each curve"]
    assert peak and peak[0][2] == str(count) and peak[0][3] == fmt.value(best)
    assert "19864.9" in text and "20512.2" in text and "94 %" in text  # study 004 beside ours


def test_boot_section(store):
    path, stored = _report(store, "boot")
    check_numbers(path, stored, "boot")
    text = path.read_text()
    assert "Boot grid, image mode overlay, shape m1.small: seconds to ready" in text
    assert "Boot phases, image mode overlay, shape m1.small" in text and "<svg" in text
    # the study's table with our scaled sizes beside it; the skipped size says why
    assert "Published beside ours: study 000, Instance boot time" in text
    assert "205M (published 2 GB x 0.1)" in text and "skipped: image size 205M is smaller" in text
    ready = next(r for r in stored if r["metric"] == "ready" and r["params"]["image_size"] == "512M"
                 and r["params"]["concurrency"] == 1)
    running = next(r for r in stored if r["metric"] == "running" and r["cell_key"] == ready["cell_key"])
    row = next(c for a, c, cap in html_rows(path) if cap.startswith("Published beside ours") and c[:2] == ["5 GB", "1"])
    assert row[4:8] == ["512M", "overlay", fmt.value(running["mean"]), fmt.value(ready["mean"])]
    assert "no scale factor is stated" in text  # containers are not the study's Xen VMs


def test_markdown_of_study_sections(store):
    md = vb("report", store["ids"]["mpi"], "--format", "md", "--db", store["db"]).stdout
    assert "**MPI PingPong: time per call against message size**" in md and "<svg" not in md


def test_study_reports_in_chromium(store, tmp_path):
    browser_mod = pytest.importorskip("test_report_browser")
    with browser_mod.chromium(tmp_path / "profile") as ctx:
        for name, path in store["reports"].items():
            shot = browser_mod.SHOT_DIR / f"report-{name}-screenshot.png" if name == "mpi" else None
            charts = browser_mod.open_report(ctx, path, shot)
            assert charts, name
            for c in charts:
                assert c["width"] > 300 and c["height"] > 50 and c["shapes"] >= 2 and c["table"], (name, c)


def test_study_sections_with_only_failures(tmp_path):
    """A real MPI run whose kernel always fails (a stand-in vb-mpibench with markup in its error): the report
    says what is missing, escapes the tool's text, and every study section copes with failure-only rows."""
    from virtbench.kernels import native_bin_dir
    from virtbench.report import build, emit
    from virtbench.report.data import load
    from virtbench.report.model import Document
    from virtbench.report.sections import boot, hpa, mpi, web

    fake = tmp_path / "bin"
    fake.mkdir()
    for f in native_bin_dir().iterdir():
        if f.name != "vb-mpibench":
            (fake / f.name).symlink_to(f)
    (fake / "vb-mpibench").write_text("#!/bin/sh\necho 'vb-mpibench: <b>broken</b> & failing' >&2\nexit 3\n")
    (fake / "vb-mpibench").chmod(0o755)
    db = str(tmp_path / "f.sqlite")
    res = subprocess.run([sys.executable, "-m", "virtbench.cli", "run", "--workload", "mpi", "--param", "op=pingpong",
                          "--param", "max_bytes=1K", "--envs", "host", "--repeat", "2", "--db", db, "--json"],
                         capture_output=True, text=True, timeout=300, env={**os.environ, "VIRTBENCH_BIN": str(fake)})
    assert res.returncode == 4, res.stderr  # nothing succeeded
    run_id = json.loads(res.stdout)["run_id"]
    out = tmp_path / "failed.html"
    vb("report", run_id, "-o", str(out), "--db", db)
    text = out.read_text()
    assert "This run has no samples" in text and "No throughput results in this run" in text
    assert "<b>broken</b>" not in text and "&lt;b&gt;broken&lt;/b&gt; &amp; failing" in text
    data = load(Store(db), run_id)
    rows = data.results["results"]
    assert rows and all(not r["n"] for r in rows)
    sections = [mod.build(data, rows) for mod in (boot, hpa, mpi, web)]
    doc = build.document(Store(db), [run_id])
    doc.parts[0].sections += sections
    assert "Traceback" not in emit(Document(doc.title, doc.generated_at, doc.parts), None)


def test_beside_study_labels_a_kubernetes_testbed_and_an_emulated_vm():
    """The published 32 pods and 1 VM x 8 workers stand beside our pods, labelled as a Kubernetes testbed
    on one machine, and beside our VM, labelled as emulated when QEMU had only TCG."""
    from virtbench.report.data import RunData
    from virtbench.report.sections import web

    envs = [{"name": "pods", "driver": "pods", "facts": {"backend": "kubernetes", "cluster_testbed": True}},
            {"name": "vm", "driver": "vm", "facts": {"accelerator": "tcg"}}]
    data = RunData(run={"id": "r"}, results={"baseline": "host", "environments": ["pods", "vm"]}, environments=envs,
                   instances=[], attempts=[], sample_count=0)
    peaks = [("replicas", "balancer=service", {"environment": "pods", "median": 14670.0, "params": {"replicas": 1}}, {}),
             ("workers", "", {"environment": "vm", "median": 788.6, "params": {"workers": 2}}, {})]
    (table,) = web.beside_study(data, peaks)
    ours = {row[1]: row[5] for row in table.rows}
    assert ours["32 pods"] == "pods (Kubernetes testbed on one machine; balancer=service)"  # one bracket
    assert ours["1 VM, 8 workers"].startswith("vm (emulated: TCG")
