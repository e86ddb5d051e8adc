"""Tests of native/hpa: vb-questgen (IBM Quest-style transactions) and vb-hpa (Hash
Partitioned Apriori over MPI).

vb-hpa on 1, 2 and 3 ranks must find exactly the frequent itemsets (and rules) of
the plain reference miner in tests/hpa_reference.py; the generator must be
reproducible; bad input must be refused.  Also checks the captured outputs in
tests/data/hpa that parser tests rely on.

Needs Open MPI (mpicc, mpirun); skipped without it.  About 20 s in all, most of it
the Python reference miner.
"""

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "native" / "hpa"
DATA = ROOT / "tests" / "data" / "hpa"
sys.path.insert(0, str(ROOT / "tests"))

import hpa_reference  # noqa: E402
import npbkit  # noqa: E402

MPIRUN = ["mpirun", "--allow-run-as-root", "--oversubscribe"]
D, N, SEED = 2000, 100, 7
SUPPORTS = ["0.01", "0.02", "0.05"]
PASS_KEYS_V1 = ["pass", "candidates", "frequent", "time_s", "bytes_sent"]
PASS_KEYS = [*PASS_KEYS_V1, "gen_s", "count_s", "exchange_s", "gather_s", "subsets", "imbalance"]
SUMMARY_KEYS = ["summary", "transactions", "items", "support", "confidence", "min_count", "ranks",
                "frequent_itemsets", "rules", "time_s", "read_time_s", "bytes_exchanged",
                "passes", "version"]


@pytest.fixture(scope="module")
def bins(tmp_path_factory):
    # the vb-hpa and vb-questgen of one build: their directory
    return npbkit.build(tmp_path_factory, SRC, "vb-hpa").parent


def questgen(bins, out, parts=1, seed=SEED, transactions=D, items=N):
    proc = subprocess.run([str(bins / "vb-questgen"), "--transactions", str(transactions),
                           "--items", str(items), "--seed", str(seed), "--parts", str(parts),
                           "--out", str(out)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def hpa(bins, np, *args, timeout=120):
    return subprocess.run([*MPIRUN, "-np", str(np), str(bins / "vb-hpa"), *map(str, args)],
                          capture_output=True, text=True, timeout=timeout)


def check_output(stdout, ranks):
    """Pass lines then one summary line, all well-formed; returns (passes, summary)."""
    recs = [json.loads(line) for line in stdout.splitlines()]
    passes, summary = recs[:-1], recs[-1]
    assert passes, "no pass line"
    version = summary["version"]
    for i, p in enumerate(passes, start=1):
        assert list(p) == (PASS_KEYS_V1 if version == 1 else PASS_KEYS)
        assert p["pass"] == i
        assert 0 <= p["frequent"] <= p["candidates"]
        assert p["time_s"] >= 0 and p["bytes_sent"] >= 0
        if ranks == 1:
            assert p["bytes_sent"] == 0
        if version >= 2:  # the phases are parts of the pass; imbalance = busiest rank / mean
            phases = p["gen_s"] + p["count_s"] + p["exchange_s"] + p["gather_s"]
            assert min(p["gen_s"], p["count_s"], p["exchange_s"], p["gather_s"]) >= 0
            assert phases <= p["time_s"] * 1.001 + 1e-5
            assert p["subsets"] >= 0
            assert 1.0 <= p["imbalance"] <= ranks + 1e-3
            if ranks == 1:
                assert p["imbalance"] == 1.0
    # schedstat (captured outputs before it have none): each rank's share on a CPU or in a run queue
    busy = ["cpu_busy_mean", "cpu_busy_min"] if "cpu_busy_mean" in summary else []
    assert list(summary) == SUMMARY_KEYS + busy
    if busy:
        assert 0 < summary["cpu_busy_min"] <= summary["cpu_busy_mean"] <= 1.1  # ms-long runs: clock granularity
    assert summary["summary"] is True and version in (1, 2)
    assert summary["ranks"] == ranks
    assert summary["passes"] == len(passes)
    assert summary["frequent_itemsets"] == sum(p["frequent"] for p in passes)
    assert summary["bytes_exchanged"] == sum(p["bytes_sent"] for p in passes)
    assert summary["time_s"] >= summary["read_time_s"] >= 0
    return passes, summary


@pytest.fixture(scope="module")
def dataset(bins, tmp_path_factory):
    """The same transactions split for 1, 2 and 3 ranks."""
    d = tmp_path_factory.mktemp("quest")
    for parts in (1, 2, 3):
        questgen(bins, d / f"p{parts}", parts=parts)
    return d


@pytest.fixture(scope="module")
def reference(dataset):
    transactions = hpa_reference.read_transactions(str(dataset / "p1"))
    assert len(transactions) == D
    result = {}
    for s in SUPPORTS:
        min_count = hpa_reference.min_count_for(float(s), D)
        frequent = hpa_reference.apriori(transactions, min_count)
        result[s] = (min_count, frequent)
    return result


@pytest.mark.parametrize("support", SUPPORTS)
@pytest.mark.parametrize("ranks", [1, 2, 3])
def test_itemsets_match_reference(bins, dataset, reference, tmp_path, ranks, support):
    out = tmp_path / "itemsets"
    proc = hpa(bins, ranks, "--input", dataset / f"p{ranks}", "--support", support,
               "--itemsets-out", out, "--batch", 1000)
    assert proc.returncode == 0, proc.stderr
    passes, summary = check_output(proc.stdout, ranks)
    min_count, frequent = reference[support]
    assert out.read_text().splitlines() == hpa_reference.itemset_lines(frequent)
    assert summary["transactions"] == D
    assert summary["items"] == N
    assert summary["support"] == float(support)
    assert summary["min_count"] == min_count
    assert summary["frequent_itemsets"] == len(frequent)
    assert passes[0]["candidates"] == N
    if ranks > 1:
        assert summary["bytes_exchanged"] > 0


def test_rules_match_reference(bins, dataset, reference, tmp_path):
    support, confidence = "0.05", "0.8"
    rules = tmp_path / "rules"
    proc = hpa(bins, 2, "--input", dataset / "p2", "--support", support,
               "--confidence", confidence, "--rules-out", rules)
    assert proc.returncode == 0, proc.stderr
    _, summary = check_output(proc.stdout, 2)
    expected = hpa_reference.rule_lines(reference[support][1], float(confidence))
    assert rules.read_text().splitlines() == expected
    assert summary["rules"] == len(expected) > 0
    assert summary["confidence"] == 0.8


@pytest.mark.parametrize("batch", [None, 50])
def test_rank_counts_and_shipping_modes_agree(bins, dataset, reference, tmp_path, batch):
    """1, 2 and 3 ranks, both --ship modes: the same itemsets (the reference's), the same
    candidates, frequent sets and subsets counted per pass; per-pass bytes add up to the
    summary's; prefix-compressed shipping moves fewer bytes than one record per subset."""
    support = "0.02"
    runs = {}
    for ship in ("prefix", "subsets"):
        for ranks in (1, 2, 3):
            out = tmp_path / f"{ship}{ranks}"
            extra = ["--batch", batch] if batch else []
            proc = hpa(bins, ranks, "--input", dataset / f"p{ranks}", "--support", support,
                       "--ship", ship, "--itemsets-out", out, *extra)
            assert proc.returncode == 0, proc.stderr
            passes, summary = check_output(proc.stdout, ranks)
            assert summary["version"] == 2 and summary["passes"] == len(passes) >= 3
            assert summary["bytes_exchanged"] == sum(p["bytes_sent"] for p in passes)
            if ranks > 1 and ship == "prefix":
                # pass 2: first-item ranges cut for equal work from the pass-1 counts
                # (1.09 / 1.08 on this data)
                assert passes[1]["imbalance"] < 1.2, passes[1]
            if ranks > 1:
                assert all(p["bytes_sent"] > 0 for p in passes[1:-1])
            assert passes[0]["subsets"] == sum(len(t) for t in
                                               hpa_reference.read_transactions(str(dataset / "p1")))
            assert out.read_text().splitlines() == hpa_reference.itemset_lines(reference[support][1])
            runs[ship, ranks] = passes, summary
    shape = {key: [(p["candidates"], p["frequent"], p["subsets"]) for p in passes]
             for key, (passes, _) in runs.items()}
    assert len(set(map(tuple, shape.values()))) == 1, shape
    for ranks in (2, 3):
        assert runs["prefix", ranks][1]["bytes_exchanged"] < runs["subsets", ranks][1]["bytes_exchanged"]


def test_tiny_batches_and_max_k(bins, dataset, reference, tmp_path):
    """--batch 1 forces an exchange per subset; --max-k 3 stops after pass 3."""
    out = tmp_path / "itemsets"
    proc = hpa(bins, 3, "--input", dataset / "p3", "--support", "0.05", "--batch", 1,
               "--max-k", 3, "--itemsets-out", out)
    assert proc.returncode == 0, proc.stderr
    passes, _ = check_output(proc.stdout, 3)
    assert len(passes) == 3
    frequent = {s: c for s, c in reference["0.05"][1].items() if len(s) <= 3}
    assert out.read_text().splitlines() == hpa_reference.itemset_lines(frequent)


def test_unsorted_input_and_blank_lines(bins, tmp_path):
    # duplicates, unsorted items, a blank line (an empty transaction), CRLF, no final newline
    (tmp_path / "u.0").write_bytes(b"3 1 2 2\n\n 1  3\r\n2 1\n1 2 3")
    out = tmp_path / "itemsets"
    proc = subprocess.run([str(bins / "vb-hpa"), "--input", str(tmp_path / "u"),
                           "--support", "0.6", "--itemsets-out", str(out)],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    _, summary = check_output(proc.stdout, 1)
    assert summary["transactions"] == 5 and summary["min_count"] == 3
    assert out.read_text() == "4: 1\n3: 2\n3: 3\n3: 1 2\n3: 1 3\n"
    frequent = hpa_reference.apriori(hpa_reference.read_transactions(str(tmp_path / "u")), 3)
    assert out.read_text().splitlines() == hpa_reference.itemset_lines(frequent)


# ---------------------------------------------------------------- generator

def test_generator_is_reproducible(bins, dataset, tmp_path):
    questgen(bins, tmp_path / "again", parts=1)
    assert (tmp_path / "again.0").read_bytes() == (dataset / "p1.0").read_bytes()
    questgen(bins, tmp_path / "other", parts=1, seed=SEED + 1)
    assert (tmp_path / "other.0").read_bytes() != (dataset / "p1.0").read_bytes()


@pytest.mark.parametrize("parts", [2, 3])
def test_parts_are_contiguous_blocks(dataset, parts):
    whole = (dataset / "p1.0").read_bytes()
    chunks = [(dataset / f"p{parts}.{i}").read_bytes() for i in range(parts)]
    assert b"".join(chunks) == whole
    counts = [c.count(b"\n") for c in chunks]
    assert sum(counts) == D and max(counts) - min(counts) <= 1


def test_generator_format_and_summary(bins, tmp_path):
    summary = questgen(bins, tmp_path / "q", transactions=3000, items=50)
    lines = (tmp_path / "q.0").read_text().splitlines()
    assert len(lines) == 3000
    sizes = []
    for line in lines:
        items = [int(tok) for tok in line.split(" ")]
        assert items == sorted(set(items)) and all(0 <= i < 50 for i in items)
        sizes.append(len(items))
    assert summary["transactions"] == 3000 and summary["items"] == 50
    assert summary["patterns"] == 100  # min(2000, 2N) when N is small
    assert summary["mean_items"] == pytest.approx(sum(sizes) / len(sizes), abs=1e-4)
    assert 7 < summary["mean_items"] < 13  # Poisson mean T = 10
    assert summary["bytes"] == (tmp_path / "q.0").stat().st_size


@pytest.mark.parametrize("args,needle", [
    (["--out", "x"], "required"),
    (["--transactions", "10"], "required"),
    (["--transactions", "-5", "--out", "x"], "bad --transactions"),
    (["--transactions", "10", "--items", "0", "--out", "x"], "bad --items"),
    (["--transactions", "10", "--avg-size", "zero", "--out", "x"], "bad --avg-size"),
    (["--transactions", "10", "--frobnicate", "1", "--out", "x"], "unknown option"),
])
def test_generator_bad_input(bins, tmp_path, args, needle):
    proc = subprocess.run([str(bins / "vb-questgen"), *args], capture_output=True, text=True,
                          cwd=tmp_path, timeout=60)
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert needle in proc.stderr and len(proc.stderr.splitlines()) == 1
    assert list(tmp_path.iterdir()) == []


# ---------------------------------------------------------------- bad input

@pytest.mark.parametrize("args,needle", [
    (["--support", "0"], "fraction in (0, 1]"),
    (["--support", "-0.1"], "fraction in (0, 1]"),
    (["--support", "1.5"], "fraction in (0, 1]"),
    (["--support", "abc"], "fraction in (0, 1]"),
    ([], "--support S is required"),
    (["--support", "0.1", "--confidence", "2"], "--confidence"),
    (["--support", "0.1", "--max-k", "0"], "--max-k"),
    (["--support", "0.1", "--frobnicate", "1"], "unknown option"),
    (["--support", "0.1", "--ship", "pairs"], "--ship must be 'prefix' or 'subsets'"),
])
def test_hpa_bad_arguments_exit_2(bins, dataset, args, needle):
    proc = subprocess.run([str(bins / "vb-hpa"), "--input", str(dataset / "p1"), *args],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert needle in proc.stderr and len(proc.stderr.splitlines()) == 1


def test_hpa_missing_part_names_the_path(bins, dataset):
    # p1 has only p1.0: rank 1 cannot find p1.1
    proc = hpa(bins, 2, "--input", dataset / "p1", "--support", "0.1")
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert f"{dataset / 'p1'}.1" in proc.stderr


def test_hpa_garbage_input(bins, tmp_path):
    (tmp_path / "g.0").write_text("1 2 3\n4 five 6\n")
    proc = subprocess.run([str(bins / "vb-hpa"), "--input", str(tmp_path / "g"),
                           "--support", "0.5"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert f"{tmp_path / 'g'}.0:2:" in proc.stderr


# ---------------------------------------------------------------- captured outputs

@pytest.mark.parametrize("path", sorted(DATA.glob("hpa_*.jsonl")), ids=lambda p: p.name)
def test_captured_hpa_outputs_are_well_formed(path):
    summary = json.loads(path.read_text().splitlines()[-1])
    check_output(path.read_text(), summary["ranks"])


@pytest.mark.parametrize("path", sorted(DATA.glob("questgen_*.json")), ids=lambda p: p.name)
def test_captured_questgen_outputs_are_well_formed(path):
    rec = json.loads(path.read_text())
    assert rec["generator"] == "quest" and rec["version"] == 1
    assert rec["transactions"] > 0 and rec["bytes"] > 0
