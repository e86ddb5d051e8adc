"""`virtbench reproduce --published`: every built-in finding that prints its study's own numbers must
hold on them (a tolerance the study itself fails is a wrong tolerance or reading), and a wrong one
is caught: the old NPB-MZ band 1.05-1.15 against the study's own SP-MZ ratios 1.159 and 1.167."""

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from virtbench.cli import cli
from virtbench.studies import ownnumbers, studyfile

WITH_NUMBERS = [f for f in studyfile.builtin_findings() if f.published]


def test_some_builtin_findings_print_their_studys_numbers():
    assert len(WITH_NUMBERS) >= 5 and {f.study for f in WITH_NUMBERS} >= {"000"}


@pytest.mark.parametrize("finding", WITH_NUMBERS, ids=lambda f: f.id)
def test_the_study_passes_its_own_finding(finding):
    v = ownnumbers.verdict(finding)
    assert v.verdict == "holds", (v.measured, v.reason)
    assert v.measured.startswith(f"published ({finding.published.source}")


STUDY = '''
[study]
id = "npbmz"
title = "a test of the published scoring"

[[experiments]]
id = "npbmz-run"
title = "SP-MZ host vs VM"
suite = "{suite}"
envs = ["host", "vm"]
workload = "npb"

[[experiments.tiers]]
label = "once"
repeat = 4
estimate_s = 10

[[findings]]
id = "npbmz-overhead"
finding = "Virtualization costs 5-15 % of single-node compute time"
quote = "仮想化のオーバーヘッドはアプリケーションに依存して 5~15% 程度"
cite = "section 4.3, Table 3"
quantity = "SP-MZ time in a VM / on the host"
tolerance = "holds if the ratio is within {band}"
rule = "ratio"
needs = ["kvm"]

[findings.args]
within = {band}
num = {{ experiment = "npbmz-run", workload = "npb", metric = "time", kind = "vm", params = {{ kernel = "sp-mz" }} }}
den = {{ experiment = "npbmz-run", workload = "npb", metric = "time", kind = "host", params = {{ kernel = "sp-mz" }} }}

[findings.published]
source = "Table 3, SP-MZ: BMM 86.63 s, PVM 100.44 s, HVM 101.08 s"
groups = [
  {{ of = "num", values = [100.44, 101.08] }},
  {{ of = "den", values = [86.63] }},
]
'''


def _study(tmp_path: Path, band: str):
    suite = Path(studyfile.builtin_dir(), "..", "suites", "aist-mpi.toml").resolve()
    path = tmp_path / f"npbmz-{band.count('.')}.toml"
    path.write_text(STUDY.format(suite=suite, band=band))
    return path


def test_a_tolerance_the_study_itself_fails_is_caught(tmp_path):
    (f,) = studyfile.load(_study(tmp_path, "[1.05, 1.15]")).findings
    v = ownnumbers.verdict(f)
    assert v.verdict == "differs" and "1.16x" in v.measured and "1.17x" in v.measured, v.measured
    assert "2 sets of points" in v.measured
    (f,) = studyfile.load(_study(tmp_path, "[1.05, 1.2]")).findings
    assert ownnumbers.verdict(f).verdict == "holds"


def test_reproduce_published_json_and_exit_code(tmp_path):
    res = CliRunner().invoke(cli, ["reproduce", "--published", "--json"])
    assert res.exit_code == 0, res.output
    data = json.loads(res.output)
    assert data["published"] is True and [s["id"] for s in data["study_files"]] == ["000", "001", "002", "003", "004"]
    assert len(data["scorecard"]) == len(WITH_NUMBERS) and data["counts"]["holds"] == len(WITH_NUMBERS)
    assert all(len(s["sha256"]) == 64 for s in data["study_files"])
    bad = _study(tmp_path, "[1.05, 1.15]")
    res = CliRunner().invoke(cli, ["reproduce", "--published", str(bad)])
    assert res.exit_code == 1 and "1 differ" in res.output, res.output


def _with_numbers(fid: str, groups: list[tuple[str, float, dict, str]]):
    """A built-in finding given printed single values (made up for the test, not a study's)."""
    from dataclasses import replace

    from virtbench.studies.model import Published, PublishedGroup

    f = next(f for f in studyfile.builtin_findings() if f.id == fid)
    return replace(f, published=Published("a test table", tuple(PublishedGroup(of, (v,), params, kind=kind)
                                                                for of, v, params, kind in groups)))


@pytest.mark.parametrize("curve, expected", [({1: 100, 2: 300, 4: 250, 8: 200}, "holds"),
                                             ({1: 400, 2: 300, 4: 200, 8: 100}, "differs")])
def test_a_peak_on_printed_single_values_is_decided_by_the_points(curve, expected):
    """One printed value per x gives no interval: the points decide (the set of possible peaks is the
    best point), said as points; measurements of one value each would be 'too few repetitions'."""
    f = _with_numbers("004-web-pods-peak", [("select", v, {"workers": 1, "replicas": x}, "")
                                            for x, v in curve.items()])
    v = ownnumbers.verdict(f)
    assert v.verdict == expected, (v.measured, v.reason)
    assert v.measured.startswith("published (a test table; points, each must pass)") and "the peak lies at" in v.measured


def test_the_network_penalty_on_printed_single_values_is_decided_by_the_points():
    def groups(p_fine: float, p_coarse: float):
        out = []
        for name, p in (("fine", p_fine), ("coarse", p_coarse)):
            for kind in ("host", "container"):
                for inst in (1, 2):
                    out.append((name, 10.0 * (p if kind != "host" and inst == 2 else 1.0), {"instances": inst}, kind))
        return out

    v = ownnumbers.verdict(_with_numbers("001-coarse-copes", groups(1.5, 1.05)))
    assert v.verdict == "holds" and "P(fine-grained) 1.5, P(coarse-grained) 1.05" in v.measured, (v.measured, v.reason)
    assert ownnumbers.verdict(_with_numbers("001-coarse-copes", groups(1.5, 1.3))).verdict == "differs"
