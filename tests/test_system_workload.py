"""The system workload's parser, on captured real vb-system output."""

import json
from pathlib import Path

import pytest

from virtbench import workloads
from virtbench.workloads.system import EXTRA_TESTS, TESTS

DATA = Path(__file__).parent / "data" / "system"


def records(name):
    return [line for line in (DATA / name).read_text().splitlines() if line.strip()]


@pytest.mark.parametrize("capture,copies", [("all_1copy.jsonl", 1), ("all_2copies.jsonl", 2)])
def test_parses_every_captured_test(capture, copies):
    wl = workloads.get("system")
    lines = records(capture)
    assert {json.loads(l)["test"] for l in lines} == set(TESTS)
    for line in lines:
        rec = json.loads(line)
        params = {"test": rec["test"], "copies": str(copies), "duration": 1.0}
        (sample,) = wl.parse(line + "\n", params)
        assert sample.metric == rec["test"] and sample.value == pytest.approx(rec["rate"])
        assert sample.unit == TESTS[rec["test"]][1] and sample.higher_is_better
        assert sample.metadata["copies_actual"] == copies
        assert sample.metadata["index"] == pytest.approx(rec["rate"] / TESTS[rec["test"]][0] * 10)


def test_fileopen_is_parsed_outside_the_index():
    wl = workloads.get("system")
    assert "fileopen" not in wl.index_baselines and "fileopen" not in wl.param("test").default
    for line in records("fileopen.jsonl"):
        rec = json.loads(line)
        (sample,) = wl.parse(line + "\n", {"test": "fileopen", "copies": str(rec["copies"]), "duration": 1.0})
        assert sample.metric == "fileopen" and sample.value == pytest.approx(rec["rate"])
        assert sample.unit == EXTRA_TESTS["fileopen"][0] and "index" not in sample.metadata


def test_rejects_output_it_cannot_trust():
    wl = workloads.get("system")
    line = records("all_1copy.jsonl")[0]
    with pytest.raises(ValueError, match="expected 'pipe'"):
        wl.parse(line, {"test": "pipe", "copies": "1", "duration": 1.0})
    with pytest.raises(ValueError, match="one JSON record"):
        wl.parse((DATA / "fail_dir_not_writable.stdout").read_text(), {"test": "fcopy256"})
    with pytest.raises(ValueError):
        wl.parse('{"test": "dhrystone", "unit": "lps"}', {"test": "dhrystone"})


def test_failure_output_names_the_problem():
    # What the runner stores as a failure's reason comes from vb-system's stderr.
    assert (DATA / "fail_dir_not_writable.exit").read_text().strip() != "0"
    assert "--dir" in (DATA / "fail_dir_not_writable.stderr").read_text()


def test_published_baselines_match_the_study():
    # seeds/SUMMARY.md, study 000 item 3.
    assert TESTS["dhrystone"][0] == 116700 and TESTS["whetstone"][0] == 55
    assert TESTS["shell8"][0] == 6 and TESTS["syscall"][0] == 15000
    assert len(TESTS) == 12
