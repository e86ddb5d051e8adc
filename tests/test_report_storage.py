"""The storage section (bonnie, iozone-like, dd, fio) from real short runs: throughput against file size
and against the measured delay, numbers in the HTML equal to the stored statistics, monitor summaries
kept out of every ratio chart and curve, long ratio charts split, and the reports clean in Chromium."""

import json
from pathlib import Path

import pytest

from virtbench import analysis
from virtbench.report import build, emit, fmt, sections
from virtbench.report.data import load
from virtbench.report.sections import ratios
from virtbench.store import Store

from test_report import html_rows
from test_report_studies import check_numbers, vb

TWO_HOSTS_IOZONE = """
[suite]
name = "mini-iozone"
baseline = "host"
warmup = 0
monitor = true
monitor_interval = 0.05
[environments.host]
driver = "host"
[environments.host-b]
driver = "host"
[[workloads]]
name = "iozone-like"
params = { file_size_kb = [64, 256, 1024] }
"""

DELAY_DD = """
[suite]
name = "mini-delay"
baseline = "host"
environments = ["host"]
warmup = 0
monitor = true
monitor_interval = 0.05
[environments.host]
driver = "host"
[[workloads]]
name = "dd"
params = { file_size_mb = [4, 8], block_mb = 1 }
condition = { storage = "iscsi", delay_ms = [0, 2] }
"""


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("storage")
    db = str(tmp / "s.sqlite")
    ids, reports = {}, {}
    for name, text in (("iozone", TWO_HOSTS_IOZONE), ("dd", DELAY_DD)):
        (tmp / f"{name}.toml").write_text(text)
        res = vb("run", str(tmp / f"{name}.toml"), "--repeat", "2", "--db", db, "--json", check=False)
        ids[name] = json.loads(res.stdout)["run_id"] if res.returncode == 0 else res.stderr
        if res.returncode == 0:
            reports[name] = tmp / f"{name}.html"
            vb("report", ids[name], "-o", str(reports[name]), "--db", db)
    return {"db": db, "ids": ids, "reports": reports, "tmp": tmp}


def _monitor(stored):
    return {m for _, m in ratios.monitor_metrics(stored)}


def _charted(path):
    """Rows of the tables beneath curves and ratio charts."""
    return [(a, c, cap) for a, c, cap in html_rows(path) if " against " in cap or "ratio to" in cap]


def test_iozone_against_file_size(runs):
    path = runs["reports"]["iozone"]
    stored = analysis.results(Store(runs["db"]), runs["ids"]["iozone"])["results"]
    check_numbers(path, stored, "iozone-like")
    text = path.read_text()
    assert "Storage: iozone-like" in text and "iozone-like: write against file size" in text
    rows = [(a, c) for a, c, cap in html_rows(path) if cap == "iozone-like: read against file size"]
    assert {c[0] for a, c in rows} == {"0.0625", "0.25", "1"}  # MiB written (scale 1)
    assert {a["data-env"] for a, c in rows} == {"host", "host-b"}
    mon = _monitor(stored)
    assert mon and not any(a["data-metric"] in mon for a, c, cap in _charted(path))
    assert "resource use while running (monitor summaries)" in text  # still in the file, folded
    assert "study 001, iozone write/read throughput against file size" in text


def test_dd_against_measured_delay(runs):
    # setup.sh installs the iSCSI target and initiator tools, so a failed run is a failure, not a skip.
    assert "dd" in runs["reports"], f"the iSCSI delay run failed: {runs['ids']['dd'][-300:]}"
    path = runs["reports"]["dd"]
    stored = analysis.results(Store(runs["db"]), runs["ids"]["dd"])["results"]
    check_numbers(path, stored, "dd")
    rows = [(a, c) for a, c, cap in html_rows(path) if cap == "dd: write against one-way delay"]
    assert rows
    by = {(r["cell_key"], r["metric"], r["environment"]): r for r in stored}
    for a, c in rows:
        r = by[(a["data-cell"], a["data-metric"], a["data-env"])]
        measured = r["condition"].get("delay_measured_ms")
        # x = the measured delay (the requested one where none was measured), requested delay beside it
        assert c[0] == fmt.value(measured if measured is not None else r["condition"]["delay_ms"])
        assert c[1] == fmt.value(r["condition"]["delay_ms"])
    assert any(c[0] != c[1] for a, c in rows)  # a measured delay is not the requested one
    assert "dd: write against file size (delay 2 ms)" in path.read_text()
    assert not any(a["data-metric"] in _monitor(stored) for a, c, cap in _charted(path))


def test_generic_ratio_charts_leave_out_monitor_rows_and_split(runs, monkeypatch):
    data = load(Store(runs["db"]), runs["ids"]["iozone"])
    rows = data.results["results"]
    mon = _monitor(rows)
    monkeypatch.setitem(sections.WORKLOAD_SECTIONS, "iozone-like", sections.GENERIC)
    out = runs["tmp"] / "generic.html"
    emit(build.document(Store(runs["db"]), [data.id]), out)
    charted = _charted(out)
    assert charted and not any(a["data-metric"] in mon for a, c, cap in charted)
    # More than MAX_ROWS bar groups: one figure per metric, each with its own table.
    monkeypatch.setattr(ratios, "MAX_ROWS", 2)
    charts = ratios.ratio_charts(data, "x", "iozone-like", rows, lambda r: [r["metric"], str(r["params"]["file_size_kb"])],
                                 ["metric", "size"])
    assert sorted(c.title for c in charts) == sorted(f"iozone-like: ratio to host ({m}, part {k} of 2)"
                                                     for m in ("write", "read") for k in (1, 2))
    assert all(not {k["metric"] for k in c.table.keys} & mon for c in charts)
    assert all(c.draw("u").count("no data") == 0 for c in charts)


def test_storage_reports_in_chromium(runs, tmp_path):
    browser_mod = pytest.importorskip("test_report_browser")
    with browser_mod.chromium(tmp_path / "profile") as ctx:
        for name, path in runs["reports"].items():
            charts = browser_mod.open_report(ctx, path)
            assert charts, name
            for c in charts:
                assert c["width"] > 300 and c["height"] > 50 and c["shapes"] >= 2 and c["table"], (name, c)
