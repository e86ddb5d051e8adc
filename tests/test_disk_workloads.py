"""bonnie++, the dd sweep and the iozone-like sweep: parsers on captured real outputs, and short real
runs on the host."""

import shutil
from pathlib import Path

import pytest

from virtbench.errors import WorkloadFailed
from virtbench.workloads import RunContext, get
from virtbench.workloads.bonnie import parse_csv
from virtbench.workloads.ddsweep import parse_phases
from virtbench.workloads.diskutil import parse_dd, scaled

DATA = Path(__file__).parent / "data"


def _defaults(name, **over):
    p = {x.name: x.default for x in get(name).params}
    p.update(over)
    return p


# -- bonnie++ ------------------------------------------------------------------------------------

def test_bonnie_csv_full():
    got = {s.metric: s for s in parse_csv((DATA / "bonnie" / "bonnie_1g_n4.csv").read_text())}
    # 1.98,2.00a,vbhost,1,...,1G,,8192,5,351,40,297948,28,434776,32,586,39,+++++,+++,11392,41,4,...
    assert got["write_char"].value == pytest.approx(351 * 1024 / 1e6)
    assert got["write_block"].value == pytest.approx(297948 * 1024 / 1e6) and got["write_block"].unit == "MB/s"
    assert got["write_block_cpu"].value == 28 and not got["write_block_cpu"].higher_is_better
    assert got["rewrite"].value == pytest.approx(434776 * 1024 / 1e6)
    assert got["read_char"].value == pytest.approx(586 * 1024 / 1e6)
    assert got["seeks"].value == 11392 and got["seeks_cpu"].value == 41 and got["seeks"].unit == "seeks/s"
    assert got["seq_create"].value == 3275 and got["seq_create"].unit == "files/s"
    assert got["write_char_latency"].value == 265000 and got["rewrite_latency"].value == 47845
    assert "read_block" not in got  # '+++++': too fast to time, left out rather than zero
    assert "read_block" in got["seeks"].metadata["too_fast_to_time"]
    (note,) = got["seeks"].metadata["warnings"]  # says why a metric other environments have is missing
    assert note.startswith("bonnie++ printed '+++++' for read_block, seq_stat,") and "write_char" not in note
    assert got["seeks"].metadata["bonnie_version"] == "2.00a" and got["seeks"].metadata["file_size"] == "1G"


def test_bonnie_direct_warns_where_it_does_not_apply():
    raw = (DATA / "bonnie" / "bonnie_1g_n4.csv").read_text()
    wl = get("bonnie")
    got = {s.metric: s for s in wl.parse(raw, _defaults("bonnie", direct=True))}
    assert any("covers the block write only" in w for w in got["rewrite"].metadata["warnings"])
    assert not any("block write only" in w for w in got["write_block"].metadata["warnings"])
    plain = {s.metric: s for s in wl.parse(raw, _defaults("bonnie"))}
    assert not any("block write only" in w for w in plain["rewrite"].metadata.get("warnings", []))


def test_bonnie_csv_mostly_too_fast_and_bad():
    got = {s.metric for s in parse_csv((DATA / "bonnie" / "bonnie_256m_n1_quick.csv").read_text())}
    assert got >= {"write_char", "read_char"} and "write_block" not in got
    with pytest.raises(ValueError, match="no bonnie"):
        parse_csv((DATA / "bonnie" / "bonnie_256m_n1_quick.stderr").read_text())  # the human table
    with pytest.raises(ValueError, match="fields"):
        parse_csv("1.98,2.00a,vb,1,2,64M")
    line = ",".join(["1.98", "2.00a", "vb", "1", "1", "64M"] + ["+++++"] * 44)
    with pytest.raises(ValueError, match="too fast"):
        parse_csv(line)


def test_bonnie_params():
    wl = get("bonnie")
    with pytest.raises(ValueError, match="twice ram_mb"):
        wl.validate(_defaults("bonnie", size_mb=100, ram_mb=64))
    wl.validate(_defaults("bonnie", size_mb=128, ram_mb=64))


# -- dd --------------------------------------------------------------------------------------------

def test_dd_stats_line():
    assert parse_dd((DATA / "dd" / "dd_write_128m_direct.err").read_text()) == (134217728, 0.252546)
    assert parse_dd((DATA / "dd" / "dd_read_128m_direct.err").read_text()) == (134217728, 0.310444)
    # a short write still prints what it copied; the sweep script turns the exit status into a failure
    assert parse_dd((DATA / "dd" / "dd_write_enospc.err").read_text()) == (104857600, 0.400938)
    with pytest.raises(ValueError):
        parse_dd("dd: failed to open 'x': Permission denied")


def test_dd_sweep_output():
    got = parse_phases((DATA / "dd" / "sweep_16m_bs1m_direct.out").read_text())
    assert got == {"write": (0, 16777216, 0.0204613), "read": (0, 16777216, 0.0275563)}
    samples = get("dd").parse((DATA / "dd" / "sweep_16m_bs1m_direct.out").read_text(),
                              _defaults("dd", file_size_mb=16, block_mb=1))
    assert {s.metric: round(s.value, 1) for s in samples} == {"write": round(16777216 / 0.0204613 / 1e6, 1),
                                                              "read": round(16777216 / 0.0275563 / 1e6, 1)}
    with pytest.raises(ValueError, match="No space left on device"):
        parse_phases((DATA / "dd" / "sweep_16m_enospc.out").read_text())
    with pytest.raises(ValueError, match="VBPHASE"):
        parse_phases("nothing here")


def test_scaling_keeps_whole_blocks():
    assert scaled(8192 << 20, 0.125, 64 << 20) == 1024 << 20
    assert scaled(64 << 20, 0.125, 64 << 20) == 64 << 20  # at least one block
    assert scaled(100 << 10, 1.0, 64 << 10) == 64 << 10


# -- real runs ---------------------------------------------------------------------------------------

def _run(host, name, **over):
    wl = get(name)
    p = _defaults(name, **over)
    wl.validate(p)
    raw = wl.execute({"main": [host]}, p, RunContext(timeout=wl.timeout(p)))
    return {s.metric: s for s in wl.parse(raw, p)}


def test_real_dd_and_iozone_like(host):
    got = _run(host, "dd", file_size_mb=8, block_mb=1)
    assert got["write"].value > 0 and got["read"].value > 0 and got["write"].metadata["mode"] == "direct"
    got = _run(host, "iozone-like", file_size_kb=256, record_kb=64)
    assert got["write"].metadata["file_bytes"] == 256 << 10 and got["read"].metadata["mode"] == "buffered"
    assert not list(Path(host.scratch_dir()).iterdir())


def test_real_dd_full_target_is_a_clear_failure(host):
    with pytest.raises(WorkloadFailed, match="do not fit"):
        _run(host, "dd", file_size_mb=1 << 24, block_mb=64)  # 16 TiB
    assert not list(Path(host.scratch_dir()).iterdir())


@pytest.mark.skipif(not shutil.which("bonnie++"), reason="bonnie++ is not installed")
def test_real_bonnie(host):
    # Small and fast (per-char and file tests take ~20 s here): bonnie++ runs and prints its CSV line,
    # even if every test is too quick to time at this size.
    wl = get("bonnie")
    p = _defaults("bonnie", size_mb=16, files=0, fast=True)
    raw = wl.execute({"main": [host]}, p, RunContext(timeout=wl.timeout(p)))
    (line,) = [ln for ln in raw.splitlines() if ln.startswith("1.98,")]
    assert line.split(",")[5] == "16M" and line.split(",")[9] == ""  # size; per-char skipped (-f)
    assert not list(Path(host.scratch_dir()).iterdir())


# -- how a storage cell shows up where one environment ran and another was skipped ----------------

def test_skip_reason_and_condition_facts_beside_results(tmp_path):
    """The vm skipped (its reason on its rows, 'skipped' in the table), host and container ran with
    different file systems: one table titled by the requested condition, the facts in its caption."""
    import io

    from rich.console import Console

    from virtbench import analysis, render
    from virtbench.model import Sample
    from virtbench.store import Store

    store = Store(tmp_path / "r.sqlite")
    cell = {"key": "c1", "workload": "dd", "params": {"file_size_mb": 64, "block_mb": 64, "scale": 1.0, "dir": ""},
            "condition": {"storage": "nbd"}}
    spec = {"environments": [{"name": n} for n in ("host", "container", "vm")], "cells": [cell]}
    run = store.create_run(spec, suite_name="t", suite_path=None, baseline="host", command="test")
    for rep in range(2):
        for env, fs, value in (("host", "ext4", 100.0 + rep), ("container", "ext4", 90.0 + rep)):
            mech = {"storage_fs": fs, "storage_mechanism": f"nbdfuse on the {env}"}
            store.record_attempt(run, cell, env, rep, warmup=False, status="ok", started=0, ended=1,
                                 samples_=[Sample("write", value, "MB/s", True, {"condition": mech})])
    store.record_attempt(run, cell, "vm", 0, warmup=False, status="skipped", started=0, ended=0,
                         reason="condition not available here: no way in")
    store.set_status(run, "completed")
    data = analysis.results(store, run)
    vm = [r for r in data["results"] if r["environment"] == "vm"]
    assert vm and all(r.get("skipped") == "condition not available here: no way in" for r in vm)
    out = io.StringIO()
    render.results_tables(Console(file=out, width=250), data)
    text = out.getvalue()
    assert text.count("storage=nbd") == 1 and "storage_fs=ext4" in text and "skipped" in text
    assert "host: storage_mechanism=nbdfuse on the host" in text
    assert "container: storage_mechanism=nbdfuse on the container" in text
