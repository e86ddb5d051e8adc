"""Reports from real short stored runs: HTML tables equal the stored statistics, Markdown and figures,
compare --html, escaping, and bad input (unknown id, empty run, a run with only failures)."""

import html
import json
import os
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from html.parser import HTMLParser
from pathlib import Path

import pytest

from virtbench import analysis
from virtbench.studies import published
from virtbench.report import fmt, svg
from virtbench.report.sections.common import describe
from virtbench.store import Store
from virtbench.workloads.system import TESTS

TWO_HOSTS = """
[suite]
name = "two-hosts"
baseline = "host"
warmup = 1
min_repetitions = 4
max_repetitions = 4

[environments.host]
driver = "host"

[environments.host-b]
driver = "host"

[[workloads]]
name = "system"
params = { duration = 0.1, copies = ["1", "vcpus"], test = ["dhrystone", "pipe", "syscall"] }
"""


def vb(*args, check=True, env=None):
    res = subprocess.run([sys.executable, "-m", "virtbench.cli", *args], capture_output=True, text=True,
                         timeout=600, env={**os.environ, **(env or {})})
    if check:
        assert res.returncode == 0, res.stderr
    return res


class Tables(HTMLParser):
    """Every <tr data-...> of the page: (attributes, cell texts, caption of its table)."""

    def __init__(self):
        super().__init__()
        self.rows, self._row, self._cell, self._caption, self._in_caption = [], None, None, "", False

    def handle_starttag(self, tag, attrs):
        if tag == "caption":
            self._in_caption, self._caption = True, ""
        elif tag == "tr":
            self._row = (dict(attrs), [], self._caption)
        elif tag in ("td", "th") and self._row is not None:
            self._cell = ""

    def handle_endtag(self, tag):
        if tag == "caption":
            self._in_caption = False
        elif tag in ("td", "th") and self._row is not None and self._cell is not None:
            self._row[1].append(self._cell)
            self._cell = None
        elif tag == "tr" and self._row is not None:
            if any(k.startswith("data-") for k in self._row[0]):
                self.rows.append(self._row)
            self._row = None

    def handle_data(self, data):
        if self._in_caption:
            self._caption += data
        if self._cell is not None:
            self._cell += data


def html_rows(path):
    parser = Tables()
    parser.feed(Path(path).read_text())
    return parser.rows


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Two real short runs: host only (the CLI example of the issue), and two host environments."""
    tmp = tmp_path_factory.mktemp("report")
    db = str(tmp / "r.sqlite")
    one = json.loads(vb("run", "--workload", "system", "--param", "test=dhrystone,pipe", "--param", "copies=1",
                        "--duration", "0.1", "--envs", "host", "--repeat", "3", "--db", db, "--json").stdout)
    suite = tmp / "two.toml"
    suite.write_text(TWO_HOSTS)
    two = json.loads(vb("run", str(suite), "--db", db, "--json").stdout)
    return {"db": db, "tmp": tmp, "one": one["run_id"], "two": two["run_id"]}


def _expected(row):
    """analysis.results() row -> the cells the report must show (same formatting functions)."""
    return [row["environment"], str(row["n"]), fmt.value(row["median"]), fmt.value(row["ci_low"]),
            fmt.value(row["ci_high"]), row["unit"], fmt.ratio(row["ratio"]), fmt.ratio(row["ratio_ci_low"]),
            fmt.ratio(row["ratio_ci_high"]), fmt.p_value(row["p_value"])]


@pytest.mark.parametrize("which", ["one", "two"])
def test_html_tables_equal_stored_statistics(runs, which):
    run_id, out = runs[which], runs["tmp"] / f"{which}.html"
    vb("report", run_id, "-o", str(out), "--db", runs["db"])
    stored = analysis.results(Store(runs["db"]), run_id)["results"]
    rows = [r for r in html_rows(out) if "medians and ratios" in r[2] or "other metrics" in r[2]]
    found = {(a["data-cell"], a["data-metric"], a["data-env"]): cells for a, cells, _ in rows}
    assert len(found) == len(rows) == len(stored) and stored
    for r in stored:
        cells = found[(r["cell_key"], r["metric"], r["environment"])]
        label = 1 if r["metric"] in TESTS or r["metric"] == "index" else 2  # test (and metric) columns first
        assert cells[label:label + 10] == _expected(r), r
    # The index tables: per-test index and the overall index with its CI.
    index = {(a["data-cell"], a["data-metric"], a["data-env"]): cells for a, cells, cap in html_rows(out)
             if cap.endswith(": index")}
    for r in (r for r in stored if r["metric"] in TESTS or r["metric"] == "index"):
        cells = index[(r["cell_key"], r["metric"], r["environment"])]
        if r["metric"] == "index":
            assert cells[2:5] == [fmt.value(r["median"]), fmt.value(r["ci_low"]), fmt.value(r["ci_high"])]
        else:
            assert cells[2] == fmt.value(r["metadata"]["index"])
            assert cells[5] == fmt.value(TESTS[r["metric"]][0])


def test_two_environments_have_ratio_charts_and_marks(runs):
    out = runs["tmp"] / "two.html"
    vb("report", runs["two"], "-o", str(out), "--db", runs["db"])
    text = out.read_text()
    assert len(re.findall(r'<figure class="chart" id="[^"]*-system-', text)) == 4  # ratio + index, 1 and N copies
    assert "score ratio host-b / host" in text and "overall index" in text
    stored = analysis.results(Store(runs["db"]), runs["two"])["results"]
    marks = {fmt.mark(r, "host") for r in stored}
    assert "=" in marks and {m.split(" (")[0] for m in marks} - {"=", ""} == \
        {r["verdict"] for r in stored if r["environment"] != "host" and r["ratio"] is not None}
    assert all(html.escape(m, quote=False) in text for m in marks - {"="})  # each verdict as the table prints it
    # Published figures beside ours, with the study and table named and the scale convention stated.
    assert "study 004, CPU calibration: UnixBench overall index" in text and "2402.8" in text
    assert "Scale factor s = our index / published index" in text and "study 000" in text


def test_markdown_has_the_same_tables(runs):
    md = vb("report", runs["two"], "--format", "md", "--db", runs["db"]).stdout
    assert md.startswith("# virtbench report")
    for r in analysis.results(Store(runs["db"]), runs["two"])["results"]:
        label = ([r["metric"] if r["metric"] != "index" else "overall index"] if r["metric"] in TESTS
                 or r["metric"] == "index" else [r["params"]["test"], r["metric"]])
        line = "| " + " | ".join([*label, *_expected(r)])
        assert line in md, line
    assert "<svg" not in md


def test_figures_dir_writes_svg_and_png(runs):
    figs = runs["tmp"] / "figs"
    out = runs["tmp"] / "fig.html"
    res = vb("report", runs["two"], "-o", str(out), "--figures", str(figs), "--db", runs["db"])
    assert "figures" in res.stderr
    svgs, pngs = sorted(figs.glob("*.svg")), sorted(figs.glob("*.png"))
    assert len(svgs) == len(pngs) == out.read_text().count("<svg") and len(list(figs.glob("*-system-*.svg"))) == 4
    for f in svgs:
        ET.parse(f)  # well-formed standalone SVG
    for f in pngs:
        assert f.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and f.stat().st_size > 5000


def test_compare_html(runs):
    out = runs["tmp"] / "cmp.html"
    res = vb("compare", runs["one"], runs["two"], "--html", str(out), "--db", runs["db"])
    assert "against" in res.stdout  # the terminal table is still printed
    data = analysis.compare(Store(runs["db"]), runs["one"], runs["two"])
    rows = html_rows(out)
    assert len(rows) == len(data["results"]) and {"dhrystone", "pipe"} <= {r["metric"] for r in data["results"]}
    for attrs, cells, _ in rows:
        r = next(x for x in data["results"] if x["metric"] == attrs["data-metric"] and x["environment"] ==
                 attrs["data-env"] and describe(x["params"], x["condition"]) == attrs["data-params"])
        assert cells[5] == fmt.value(r["median_a"]) and cells[9] == fmt.value(r["median_b"])
        assert cells[12:15] == [fmt.ratio(r["ratio"]), fmt.ratio(r["ratio_ci_low"]), fmt.ratio(r["ratio_ci_high"])]
        assert cells[16] == fmt.mark(r)
        assert r["ratio"] is None or cells[16].split(" (")[0] == r["verdict"]  # the row's own verdict, worded
        assert cells[17] == fmt.levels(r)
    assert "Only in B" in out.read_text()


def test_unknown_run_id_is_a_clear_error(runs):
    res = vb("report", "no-such-run", "-o", str(runs["tmp"] / "x.html"), "--db", runs["db"], check=False)
    assert res.returncode == 2 and "no-such-run" in res.stderr and "virtbench runs" in res.stderr
    assert "Traceback" not in res.stderr and not (runs["tmp"] / "x.html").exists()
    res = vb("compare", runs["one"], "nope", "--html", str(runs["tmp"] / "y.html"), "--db", runs["db"], check=False)
    assert res.returncode == 2 and "Traceback" not in res.stderr


def test_empty_run_says_what_is_missing(runs):
    store = Store(runs["db"])
    spec = {"name": "empty", "cells": [], "baseline": "host",
            "environments": [{"name": "host", "driver": "host", "options": {}, "shape": {}}]}
    run_id = store.create_run(spec, suite_name="empty", suite_path=None, baseline="host", command="test")
    out = runs["tmp"] / "empty.html"
    res = vb("report", run_id, "-o", str(out), "--db", runs["db"])
    text = out.read_text()
    assert "This run has no samples" in text and "no repetition was attempted" in text
    assert "The run is running, not completed" in text and "Traceback" not in res.stderr
    assert "no samples" in vb("report", run_id, "--format", "md", "--db", runs["db"]).stdout


def test_run_with_only_failures(runs, tmp_path):
    """A real run whose kernel always fails (a stand-in vb-system), with markup in its error output."""
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "vb-system").write_text("#!/bin/sh\necho 'vb-system: <b>broken</b> & failing' >&2\nexit 3\n")
    (fake / "vb-system").chmod(0o755)
    res = vb("run", "--workload", "system", "--param", "test=dhrystone", "--param", "copies=1",
             "--duration", "0.1", "--envs", "host", "--repeat", "2", "--db", runs["db"], "--json",
             env={"VIRTBENCH_BIN": str(fake)}, check=False)
    assert res.returncode == 4, res.stderr  # nothing succeeded
    data = json.loads(res.stdout)
    out = tmp_path / "failed.html"
    vb("report", data["run_id"], "-o", str(out), "--db", runs["db"])
    text = out.read_text()
    assert "This run has no samples" in text and "2 failed repetition(s) of system" in text
    assert "<b>broken</b>" not in text and "&lt;b&gt;broken&lt;/b&gt; &amp; failing" in text
    assert "produced no samples" in text


def test_metadata_is_escaped(runs, tmp_path):
    store = Store(runs["db"])
    env = next(e for e in store.environments(runs["one"]) if e["name"] == "host")
    evil = "<script>alert(1)</script>"
    store.save_environment(runs["one"], "host", "host", env["spec"],
                           {**env["facts"], "cpu_model": evil, "kernel": 'x" onmouseover="alert(2)'})
    out = tmp_path / "evil.html"
    vb("report", runs["one"], "-o", str(out), "--db", runs["db"])
    text = out.read_text()
    assert evil not in text and "&lt;script&gt;alert(1)&lt;/script&gt;" in text
    assert 'onmouseover="' not in text
    assert evil not in vb("report", runs["one"], "--format", "md", "--db", runs["db"]).stdout


def test_svg_text_is_escaped():
    bad = '<script>alert(1)</script> & "q"'
    out = svg.bars("t", bad, [bad], [bad, "b"], lambda g, s: (1.0, 0.9, 1.1, "*"), bad, refline=1.0)
    assert "<script>" not in out
    ET.fromstring(out)  # still well-formed
    out = svg.lines("u", bad, [svg.Line(bad, [1, 10, 100], [1, 2, 3])], bad, bad, log_x=True)
    assert "<script>" not in out
    ET.fromstring(out)


def test_published_figures_are_data():
    # The UnixBench baselines the system workload indexes against are study 000's Table 8, but for the
    # two shell tests: Table 8 prints 42 lpm for both, the index uses UnixBench 5.1.2's own 42.4 and 6.0.
    t = published.table("000", "UnixBench 5.1.2 test baselines")
    printed = {k: v[0] for k, v in t.rows.items()}
    indexed = {k: v[0] for k, v in TESTS.items()}
    assert printed.keys() == indexed.keys()
    assert {k for k in printed if printed[k] != indexed[k]} == {"shell1", "shell8"}
    assert printed["shell1"] == printed["shell8"] == 42.0 and (indexed["shell1"], indexed["shell8"]) == (42.4, 6.0)
    assert "42.4" in t.notes and "6.0" in t.notes
    cal = published.table("004", "CPU calibration: UnixBench overall index")
    assert cal.value("VM host", "index") == 2402.8 and cal.value("container host", "index") == 3280.1
    assert published.scale_factor(4920.2, 2460.1) == 2.0
    assert all(t.study in published.STUDIES and t.name and t.notes for t in published.TABLES)


def test_skipped_cells_and_emulated_vms_are_warned_about(runs, tmp_path):
    """A cell skipped with a reason (as conditions do) and an environment whose facts say accelerator=tcg."""
    store = Store(runs["db"])
    cell = {"key": "c1", "workload": "system", "params": {"copies": "1", "duration": 0.1, "test": "pipe"},
            "condition": {"delay_ms": 10}}
    spec = {"name": "skips", "cells": [cell], "baseline": "vm",
            "environments": [{"name": "vm", "driver": "vm", "options": {}, "shape": {}}]}
    run_id = store.create_run(spec, suite_name="skips", suite_path=None, baseline="vm", command="test")
    store.save_environment(run_id, "vm", "vm", spec["environments"][0], {"accelerator": "tcg", "cpu_model": "QEMU"})
    store.record_attempt(run_id, cell, "vm", 0, warmup=False, status="skipped", started=None, ended=None,
                         reason="condition not available here: <i>tc</i> missing")
    store.set_status(run_id, "completed")
    out = tmp_path / "skips.html"
    vb("report", run_id, "-o", str(out), "--db", runs["db"])
    text = out.read_text()
    assert "emulated VM (accelerator=tcg" in text
    assert "Skipped system copies=1 · test=pipe · delay_ms=10 on vm: condition not available here: " \
           "&lt;i&gt;tc&lt;/i&gt; missing" in text


def _end_labels(series) -> tuple[dict[str, float], list[float]]:
    """The y of each line's end label in a drawn chart (the rightmost text with its name; the legend's
    is further left), and the y where each line ends."""
    from virtbench.report.svg.lines import lines

    svg = lines("t", "t", series, "x", "y")
    ends: dict[str, tuple[float, float]] = {}
    for x, y, text in re.findall(r'<text x="([-\d.]+)" y="([-\d.]+)"[^>]*>([^<]*)</text>', svg):
        if text in {s.label for s in series} and float(x) > ends.get(text, (-1.0, 0.0))[0]:
            ends[text] = (float(x), float(y))
    line_ends = [float(p.split()[-1].split(",")[1]) for p in re.findall(r'<polyline points="([^"]*)"', svg)]
    return {k: y for k, (_, y) in ends.items()}, line_ends


def test_line_end_labels_do_not_overlap():
    """Lines that end close together get their labels moved apart, in the lines' order (a line's
    height, 12 px, between them); a stack that would pass the x axis is pushed up above it."""
    from virtbench.report.svg.lines import Line

    ys, _ = _end_labels([Line("a", [1, 2], [5, 100]), Line("b", [1, 2], [5, 101]), Line("c", [1, 2], [5, 40]),
                         Line("d", [1, 2], [5, 99])])
    order = sorted(ys, key=ys.get)
    assert order == ["b", "a", "d", "c"]  # top to bottom, as the lines end
    assert all(ys[q] - ys[p] >= 12 for p, q in zip(order, order[1:]))
    crowded, line_ends = _end_labels([Line(n, [1, 2], [5, 0]) for n in "xyz"])
    axis = max(line_ends)  # all three end on the x axis
    assert sorted(crowded.values()) == [axis - 24, axis - 12, axis]  # pushed up to fit above it


def test_whiskers_of_missing_cis_are_not_drawn():
    """A one-repetition run has no CI: its whisker ends are NaN, which browsers reject in SVG (seen as
    console errors in a real container-vs-vm report with --repeat 1)."""
    from virtbench.report.svg.canvas import Canvas

    c = Canvas("t", 100, 100)
    c.line(1, 2, float("nan"), 2)
    c.line(1, 2, 3, float("inf"))
    c.line(1, 2, 3, 4)
    svg_text = c.render("t")
    assert svg_text.count("<line") == 1 and "nan" not in svg_text and "inf" not in svg_text


def test_header_says_the_run_was_resumed_and_shows_every_fact(runs, tmp_path):
    """Facts are rows (one column per environment), so the image hash is on the page; a resumed
    run says so."""
    store = Store(runs["db"])
    spec = {"name": "resumed", "cells": [], "baseline": "host",
            "environments": [{"name": "host", "driver": "host", "options": {}, "shape": {}}]}
    run_id = store.create_run(spec, suite_name="resumed", suite_path=None, baseline="host", command="test")
    store.add_event(run_id, "resumed", "resumed")
    md = vb("report", run_id, "--format", "md", "--db", runs["db"]).stdout
    assert "interrupted, resumed at" in md and "The run was interrupted and resumed (1 time(s)" in md
    env_table = md[md.index("**Environments**"):].split("\n\n")[1]
    assert env_table.splitlines()[0].startswith("|  | host (baseline)")
    assert any(line.startswith("| image hash |") for line in env_table.splitlines())
