"""Reports in a real browser: Debian's chromium, headless, driven by Playwright (no downloaded browser).

A real run of the quick suite (host; plus the container when `virtbench doctor` says the driver is
ready) becomes a report that must load with no console errors and no network request other than
the file itself, with every chart drawn. The screenshot is kept in out/report-screenshot.png.
"""

import contextlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from virtbench import paths

CHROMIUM = "/usr/bin/chromium"
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"]
SHOT_DIR = Path(os.environ.get("VIRTBENCH_SCREENSHOT_DIR", paths.PROJECT_ROOT / "out"))

pytestmark = pytest.mark.skipif(not Path(CHROMIUM).exists(),
                                reason="Debian's chromium is not installed (apt-get install -y chromium)")


def vb(*args):
    res = subprocess.run([sys.executable, "-m", "virtbench.cli", *args], capture_output=True, text=True,
                         timeout=900)
    assert res.returncode == 0, res.stderr
    return res


def container_ready() -> bool:
    checks = json.loads(vb("doctor", "--json").stdout)
    return any(c["name"] == "driver container" and c["ok"] for c in checks)


@contextlib.contextmanager
def chromium(profile: Path):
    """Debian's chromium, headless, driven by Playwright; skips the test where either is missing."""
    if not Path(CHROMIUM).exists():
        pytest.skip("Debian's chromium is not installed (apt-get install -y chromium)")
    sync_api = pytest.importorskip("playwright.sync_api", reason="pip install playwright (no browser download)")
    with sync_api.sync_playwright() as p:
        ctx = p.chromium.launch_persistent_context(str(profile), executable_path=CHROMIUM, headless=True,
                                                   args=FLAGS, viewport={"width": 1200, "height": 900})
        try:
            yield ctx
        finally:
            ctx.close()


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    with chromium(tmp_path_factory.mktemp("chromium-profile")) as ctx:
        yield ctx


def open_report(browser, path: Path, screenshot: Path | None = None) -> list[dict]:
    """Load the file; assert a clean console and no requests; return each chart's drawn size and shapes."""
    page = browser.new_page()
    console, errors, requests = [], [], []
    page.on("console", lambda m: console.append(f"{m.type}: {m.text}"))
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.on("request", lambda r: requests.append(r.url))
    page.goto(path.resolve().as_uri(), wait_until="load")
    charts = page.evaluate("""() => Array.from(document.querySelectorAll('figure.chart svg')).map(s => {
        const box = s.getBoundingClientRect();
        return {width: box.width, height: box.height, shapes: s.querySelectorAll('rect, polyline').length,
                table: s.closest('figure').nextElementSibling.querySelector('table') !== null};
    })""")
    if screenshot is not None:
        screenshot.parent.mkdir(parents=True, exist_ok=True)
        height = min(page.evaluate("document.documentElement.scrollHeight"), 6000)  # the top: header and charts
        page.screenshot(path=str(screenshot), full_page=True, clip={"x": 0, "y": 0, "width": 1200, "height": height})
    page.close()
    assert console == [] and errors == [], console + errors
    assert requests == [path.resolve().as_uri()], requests
    return charts


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory):
    db = str(tmp_path_factory.mktemp("quick") / "q.sqlite")
    envs = "host,container" if container_ready() else "host"
    data = json.loads(vb("run", str(paths.suites_dir() / "quick.toml"), "--envs", envs, "--duration", "0.1",
                         "--repeat", "3", "--db", db, "--json").stdout)
    return db, data


@pytest.mark.slow
def test_quick_suite_report_in_chromium(browser, quick_run, tmp_path):
    db, data = quick_run
    out = tmp_path / "quick.html"
    vb("report", data["run_id"], "-o", str(out), "--db", db)
    charts = open_report(browser, out, SHOT_DIR / "report-screenshot.png")
    per_panel = 2 if len(data["environments"]) > 1 else 1  # ratio chart only with a second environment
    assert len(charts) >= 2 * per_panel
    for c in charts:
        assert c["width"] > 300 and c["height"] > 100 and c["shapes"] > 3 and c["table"], c
    assert (SHOT_DIR / "report-screenshot.png").stat().st_size > 20000
    if len(data["environments"]) == 1:
        pytest.skip("container part not covered: `virtbench doctor` says the container driver is not ready "
                    "(run `virtbench image build`); the host part passed")


def test_compare_and_markdown_neighbours_in_chromium(browser, quick_run, tmp_path):
    db, data = quick_run
    second = json.loads(vb("run", "--workload", "system", "--param", "test=dhrystone,pipe", "--param", "copies=1",
                           "--duration", "0.1", "--envs", "host", "--repeat", "3", "--db", db, "--json").stdout)
    out = tmp_path / "cmp.html"
    vb("compare", data["run_id"], second["run_id"], "--html", str(out), "--db", db)
    charts = open_report(browser, out)
    assert len(charts) == 1 and charts[0]["shapes"] >= 2
    both = tmp_path / "both.html"
    vb("report", data["run_id"], second["run_id"], "-o", str(both), "--db", db)
    assert len(open_report(browser, both)) > len(charts)


def test_generic_and_sweep_sections_in_chromium(browser, tmp_path):
    """A workload without a section of its own (here: a copies sweep rendered as a curve) in the browser."""
    db = str(tmp_path / "g.sqlite")
    data = json.loads(vb("run", "--workload", "system", "--param", "test=pipe", "--param", "copies=1,2,4",
                         "--duration", "0.1", "--envs", "host", "--repeat", "3", "--db", db, "--json").stdout)
    from virtbench.report import build, emit, sections
    from virtbench.store import Store

    saved = sections.WORKLOAD_SECTIONS.pop("system")
    try:  # the generic section, as any workload without a module gets it
        out = tmp_path / "generic.html"
        emit(build.document(Store(db), [data["run_id"]]), out)
    finally:
        sections.WORKLOAD_SECTIONS["system"] = saved
    text = out.read_text()
    assert "Workload: system" in text and "pipe against copies" in text
    charts = open_report(browser, out)
    assert charts and all(c["shapes"] >= 1 and c["table"] for c in charts)


@pytest.mark.skipif(shutil.which("rsvg-convert") is None, reason="rsvg-convert (librsvg2-bin) not installed")
def test_png_figures_match_svg_count(quick_run, tmp_path):
    db, data = quick_run
    vb("report", data["run_id"], "-o", str(tmp_path / "q.html"), "--figures", str(tmp_path / "f"), "--db", db)
    assert len(list((tmp_path / "f").glob("*.png"))) == len(list((tmp_path / "f").glob("*.svg"))) > 0
