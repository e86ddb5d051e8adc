"""Study files (studies/NNN.toml, a user's own): the loader reads the five built-in studies, resolves
suites relative to the file, and names every problem of a wrong file by file, line and key at once."""

import pytest

from virtbench.studies import studyfile
from virtbench.studies.studyfile import StudyFileError, StudyFileErrors

GOOD = '''
[study]
id = "mine"
title = "my paper"

[[experiments]]
id = "mine-cpu"
title = "dhrystone, host vs container"
suite = "suites/s.toml"
envs = ["host", "container"]
workload = "system"

[[experiments.tiers]]
label = "once"
repeat = 4
estimate_s = 10

[[findings]]
id = "mine-alike"
finding = "a container runs dhrystone as fast as the host"
quote = "containers cost nothing"
cite = "section 3, Table 1"
quantity = "dhrystone score, container / host"
tolerance = "holds if the ratio is within 0.9-1.1"
rule = "ratio"

[findings.args]
within = [0.9, 1.1]

[findings.args.num]
experiment = "mine-cpu"
workload = "system"
metric = "dhrystone"
kind = "container"

[findings.args.den]
experiment = "mine-cpu"
workload = "system"
metric = "dhrystone"
kind = "host"
'''
SUITE = '''
[suite]
name = "s"
[environments.host]
driver = "host"
[environments.container]
driver = "container"
[[workloads]]
name = "system"
'''


@pytest.fixture
def study_dir(tmp_path):
    (tmp_path / "suites").mkdir()
    (tmp_path / "suites" / "s.toml").write_text(SUITE)
    return tmp_path


def test_the_five_builtin_studies_load_with_their_experiments_and_findings():
    studies = studyfile.builtin()
    assert [s.id for s in studies] == ["000", "001", "002", "003", "004"]
    for s in studies:
        assert s.experiments and s.findings and len(s.sha256) == 64
        assert all(e.suite_file().is_file() for e in s.experiments)
        assert all(f.quote and f.cite and f.rule for f in s.findings)


def test_a_users_study_resolves_its_suite_relative_to_the_file(study_dir):
    (study_dir / "study.toml").write_text(GOOD)
    s = studyfile.load(study_dir / "study.toml")
    (e,) = s.experiments
    assert e.suite_file() == study_dir / "suites" / "s.toml" and e.study == "mine"
    (f,) = s.findings
    assert f.args["num"]["kind"] == ("container",) and f.args["within"] == [0.9, 1.1]
    assert f.quote_en == "" and not s.builtin


def test_every_problem_is_named_by_file_line_and_key(study_dir):
    bad = (GOOD.replace('kind = "container"', 'kind = "jail"')
               .replace('rule = "ratio"', 'rule = "ratio"\nneeds = ["gpu"]')
               .replace('envs = ["host", "container"]', 'envs = ["host", "vm"]')
               .replace('experiment = "mine-cpu"\nworkload = "system"\nmetric = "dhrystone"\nkind = "host"',
                        'experiment = "theirs"\nworkload = "system"\nmetric = "dhrystone"\nkind = "host"'))
    path = study_dir / "study.toml"
    path.write_text(bad)
    with pytest.raises(StudyFileErrors) as exc:
        studyfile.load(path)
    text = str(exc.value)
    lines = bad.splitlines()
    for key, needle in (("experiments.envs", 'envs = ["host", "vm"]'), ("findings.needs", 'needs = ["gpu"]'),
                        ("findings.args.num.kind", 'kind = "jail"'),
                        ("findings.args.den.experiment", 'experiment = "theirs"')):
        line = lines.index(needle) + 1
        assert f"{path}:{line}: key '{key}'" in text, (key, text)


def test_a_missing_tolerance_and_an_unknown_rule_are_errors(study_dir):
    path = study_dir / "study.toml"
    path.write_text(GOOD.replace("within = [0.9, 1.1]\n", ""))
    with pytest.raises(StudyFileError, match=r"study.toml:\d+: key 'findings.args': rule ratio needs exactly one tolerance"):
        studyfile.load(path)
    path.write_text(GOOD.replace('rule = "ratio"', 'rule = "vibes"'))
    with pytest.raises(StudyFileError, match="unknown rule 'vibes'"):
        studyfile.load(path)
    path.write_text(GOOD.replace('suite = "suites/s.toml"', 'suite = "s.toml"'))
    with pytest.raises(StudyFileError, match=r"no such file: .*s.toml \(a suite file, relative to the study file\)"):
        studyfile.load(path)


def test_a_finding_needs_exactly_what_its_comparison_needs(study_dir):
    """The two 004 NFS findings compared a container with the host yet needed KVM: a machine with an
    NFS client and no KVM was told "TCG instead of KVM". The loader refuses such a need, and a side
    that can only be a VM without it."""
    path = study_dir / "study.toml"
    path.write_text(GOOD.replace('rule = "ratio"', 'rule = "ratio"\nneeds = ["kvm", "nfs"]'))
    with pytest.raises(StudyFileErrors) as exc:
        studyfile.load(path)
    assert "needs kvm, but no side of its comparison is a VM" in str(exc.value)
    assert "needs nfs, but no side of its comparison is on NFS" in str(exc.value)
    path.write_text(GOOD.replace('kind = "container"', 'kind = "vm"'))
    with pytest.raises(StudyFileError, match='can only be a VM: add "kvm"'):
        studyfile.load(path)
    path.write_text(GOOD.replace('kind = "container"', 'kind = "vm"').replace('rule = "ratio"', 'rule = "ratio"\nneeds = ["kvm"]'))
    assert studyfile.load(path).findings[0].needs == ("kvm",)
    nfs = {f.id: f.needs for f in studyfile.builtin_findings(["004"])}
    assert nfs["004-nfs-write"] == ("nfs",) and nfs["004-nfs-read-alike"] == ("nfs",)


def test_a_builtin_study_must_fill_every_field(study_dir):
    """A user's file may leave quote_en, derivation and could_fail out; a built-in one may not, and
    its cite names the section, table or figure."""
    path = study_dir / "study.toml"
    path.write_text(GOOD.replace('cite = "section 3, Table 1"', 'cite = "somewhere"'))
    assert studyfile.load(path).findings[0].cite == "somewhere"
    with pytest.raises(StudyFileErrors) as exc:
        studyfile.load(path, builtin=True)
    text = str(exc.value)
    for key in ("quote_en", "derivation", "could_fail"):
        assert f"key 'findings.{key}': missing" in text, text
    assert "key 'findings.cite': must name the section, table or figure" in text
    for f in studyfile.builtin_findings():
        assert f.quote and f.quote_en and f.derivation and f.could_fail and f.cite, f.id


STEPS = '''rule = "steps"

[findings.args]
steps = [
  [{ experiment = "mine-cpu", workload = "system", metric = "dhrystone", kind = "host" },
   { experiment = "mine-cpu", workload = "system", metric = "dhrystone", kind = "container" }],
]
'''


def test_steps_are_pairs_of_selectors_and_name_their_published_groups(study_dir):
    """Rule steps: an order measured pair by pair; each item must be [from, to]."""
    path = study_dir / "study.toml"
    head = GOOD[:GOOD.index('rule = "ratio"')]
    path.write_text(head + STEPS)
    f = studyfile.load(path).findings[0]
    assert [[s["kind"][0] for s in pair] for pair in f.args["steps"]] == [["host", "container"]]
    assert studyfile.roles("steps", f.args) == ["steps.0.0", "steps.0.1"]
    path.write_text(head + STEPS.replace('kind = "container" }],', 'kind = "container" }, { experiment = "mine-cpu", '
                                                                     'workload = "system", metric = "x", kind = "host" }],'))
    with pytest.raises(StudyFileError, match=r"key 'findings.args.steps': must be a list of \[from, to\] selector pairs"):
        studyfile.load(path)


def test_extra_tiers_come_after_the_ordinary_ones(study_dir):
    path = study_dir / "study.toml"
    extra_first = GOOD.replace('estimate_s = 10\n', 'estimate_s = 10\nextra = true\n\n[[experiments.tiers]]\n'
                                                     'label = "twice"\nrepeat = 8\nestimate_s = 20\n')
    path.write_text(extra_first)
    with pytest.raises(StudyFileError, match="extra tiers .* must come after the ordinary ones"):
        studyfile.load(path)
