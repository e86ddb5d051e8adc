"""Suite files: expansion, overrides, and errors that name file, line, key and the valid choices."""

import json
import textwrap

import pytest

from virtbench import suite
from virtbench.errors import SuiteError, UserError

GOOD = """\
[suite]
name = "t"
baseline = "host"
min_repetitions = 2
max_repetitions = 4

[shapes.tiny]
vcpus = 1
memory_mb = 256

[environments.host]
driver = "host"

[environments.small]
driver = "container"
shape = "tiny"

[[workloads]]
name = "system"
params = { duration = 0.5, test = ["dhrystone", "pipe"], copies = ["1", "vcpus"] }
"""


def write(tmp_path, text):
    path = tmp_path / "s.toml"
    path.write_text(textwrap.dedent(text))
    return path


def test_good_suite_expands_the_matrix(tmp_path):
    m = suite.load(write(tmp_path, GOOD))
    assert m.baseline == "host"
    assert [e.name for e in m.environments] == ["host", "small"]
    assert m.environments[1].shape.vcpus == 1 and m.environments[1].shape.memory_mb == 256
    assert len(m.cells) == 4  # 2 tests x 2 copies
    assert {(c["params"]["test"], c["params"]["copies"]) for c in m.cells} == {
        ("dhrystone", "1"), ("dhrystone", "vcpus"), ("pipe", "1"), ("pipe", "vcpus")}
    assert all(c["params"]["duration"] == 0.5 for c in m.cells)
    assert len({c["key"] for c in m.cells}) == 4
    assert (m.policy.min_repetitions, m.policy.max_repetitions) == (2, 4)


def test_overrides_and_round_trip(tmp_path):
    m = suite.load(write(tmp_path, GOOD), envs=["host", "container:m1.small"], repeat=2, duration=0.1)
    assert [e.name for e in m.environments] == ["host", "container:m1.small"]
    assert m.environments[1].shape.memory_mb == 128
    assert m.policy.min_repetitions == m.policy.max_repetitions == 2
    assert all(c["params"]["duration"] == 0.1 for c in m.cells)
    again = suite.Matrix.from_spec(m.to_spec())
    assert again.to_spec() == m.to_spec()


def test_shipped_quick_suite_is_valid():
    m = suite.load(suite.Path(__file__).resolve().parents[1] / "suites" / "quick.toml")
    assert m.baseline == "host" and len(m.cells) == 24


@pytest.mark.parametrize("old,new,line,key,choice", [
    ('driver = "container"', 'driver = "lxd"', 15, "environments.small.driver", "container"),
    ('shape = "tiny"', 'shape = "huge"', 16, "environments.small.shape", "m1.small"),
    ('name = "system"', 'name = "unixbench"', 19, "workloads.name", "system"),
    ('max_repetitions = 4', 'max_repetitons = 4', 5, "suite.max_repetitons", "max_repetitions"),
    ('baseline = "host"', 'baseline = "vm"', 3, "suite.baseline", "host"),
    ('vcpus = 1', 'vcpus = 0', 8, "shapes.tiny.vcpus", None),
])
def test_errors_name_file_line_key_and_choices(tmp_path, old, new, line, key, choice):
    path = write(tmp_path, GOOD.replace(old, new))
    with pytest.raises(SuiteError) as info:
        suite.load(path)
    err = info.value
    assert err.path == str(path) and err.line == line and err.key == key
    assert f"{path}:{line}" in str(err)
    if choice:
        assert choice in err.hint


def test_unknown_and_invalid_params(tmp_path):
    with pytest.raises(SuiteError) as info:
        suite.load(write(tmp_path, GOOD.replace("duration = 0.5", "durration = 0.5")))
    assert info.value.key == "workloads.params.durration" and info.value.line == 20
    assert "duration" in info.value.hint
    with pytest.raises(SuiteError) as info:
        suite.load(write(tmp_path, GOOD.replace('"pipe"', '"pipes"')))
    assert info.value.key == "workloads.params.test" and "syscall" in info.value.hint
    with pytest.raises(SuiteError, match="below the minimum"):
        suite.load(write(tmp_path, GOOD.replace("duration = 0.5", "duration = 0")))


def test_host_cannot_take_a_shape(tmp_path):
    text = GOOD.replace('[environments.host]\ndriver = "host"', '[environments.host]\ndriver = "host"\nshape = "m1.small"')
    with pytest.raises(SuiteError, match="cannot limit resources"):
        suite.load(write(tmp_path, text))


def test_syntax_error_and_missing_file(tmp_path):
    with pytest.raises(UserError, match="not valid TOML.*line 2"):
        suite.load(write(tmp_path, "[suite]\nname = \n"))
    with pytest.raises(UserError, match="does not exist"):
        suite.load(tmp_path / "nope.toml")


def test_unknown_environment_lists_choices(tmp_path):
    with pytest.raises(UserError) as info:
        suite.load(write(tmp_path, GOOD), envs=["bare"])
    assert "unknown environment 'bare'" in str(info.value) and "small" in info.value.hint
    with pytest.raises(UserError, match="unknown shape"):
        suite.load(write(tmp_path, GOOD), envs=["container:m9.huge"])


def test_adhoc_sweeps_comma_lists():
    m = suite.adhoc("system", {"test": "dhrystone,pipe", "copies": "1"}, ["host"], repeat=3)
    assert [c["params"]["test"] for c in m.cells] == ["dhrystone", "pipe"]
    assert m.policy.max_repetitions == 3
    with pytest.raises(UserError, match="unknown workload"):
        suite.adhoc("nope", {}, ["host"])
    with pytest.raises(SuiteError, match="copies"):
        suite.adhoc("system", {"copies": "many"}, ["host"])


def test_envs_keeps_a_comma_list_of_hosts_after_driver_at(tmp_path):
    """`--envs host,ssh@node01,node02` (README) arrives split at every comma: the hosts after `@` stay
    one environment, and whatever names an environment starts the next one."""
    m = suite.adhoc("system", {"test": "dhrystone", "copies": "1"},
                    ["host", "ssh@node01", "node02", "container:m1.small", "container@kvm1", "vm"])
    assert [e.name for e in m.environments] == ["host", "ssh@node01,node02", "container:m1.small",
                                                "container@kvm1", "vm"]
    assert m.environments[1].options["hosts"] == "node01,node02"
    assert m.environments[3].options["machine"] == "kvm1"
    narrowed = suite.load(write(tmp_path, GOOD), envs=["host", "ssh@a", "b", "small"])
    assert [e.name for e in narrowed.environments] == ["host", "ssh@a,b", "small"]
    with pytest.raises(UserError, match="--envs: unknown environment 'bare'"):
        suite.adhoc("system", {"test": "dhrystone"}, ["host", "bare"])


# -- a workload entry's own environments ---------------------------------------------------------

PER_ENTRY = GOOD.replace('copies = ["1", "vcpus"] }', 'copies = ["1", "vcpus"] }\nenvironments = ["small"]') + """
[[workloads]]
name = "system"
params = { duration = 0.5, test = "dhrystone", copies = "1" }
"""


def test_entry_environments_restrict_cells_and_merge(tmp_path):
    m = suite.load(write(tmp_path, PER_ENTRY))
    envs = [e.name for e in m.environments]
    by_key = {(c["params"]["test"], c["params"]["copies"]): c for c in m.cells}
    assert len(m.cells) == 4  # the second entry's cell is also in the first: run once
    # ... on the union of both entries' environments (the second entry has no key: everywhere)
    assert suite.cell_environments(by_key[("dhrystone", "1")], envs) == ["host", "small"]
    assert suite.cell_environments(by_key[("pipe", "vcpus")], envs) == ["small"]
    assert by_key[("pipe", "vcpus")]["environments"] == ["small"]
    again = suite.Matrix.from_spec(json.loads(json.dumps(m.to_spec())))
    assert again.cells == m.cells  # stored as JSON, so --resume sees the same restriction


def test_entry_environments_narrowed_by_envs(tmp_path):
    m = suite.load(write(tmp_path, PER_ENTRY), envs=["host"])
    assert [e.name for e in m.environments] == ["host"]
    assert [(c["params"]["test"], c["params"]["copies"]) for c in m.cells] == [("dhrystone", "1")]
    only_small = GOOD.replace('copies = ["1", "vcpus"] }', 'copies = ["1", "vcpus"] }\nenvironments = ["small"]')
    with pytest.raises(UserError, match="no workload of the suite runs on host"):
        suite.load(write(tmp_path, only_small), envs=["host"])
    # An environment no cell uses is left out (never provisioned), unless it is the baseline.
    no_host = suite.load(write(tmp_path, only_small))
    assert [e.name for e in no_host.environments] == ["host", "small"] and no_host.baseline == "host"
    base_small = only_small.replace('baseline = "host"', 'baseline = "small"')
    assert [e.name for e in suite.load(write(tmp_path, base_small)).environments] == ["small"]


@pytest.mark.parametrize("value,problem", [
    ('["host", "vm"]', "unknown environment 'vm'"),
    ('["container"]', "unknown environment 'container'"),  # a driver name, not one of the suite's
    ('"host"', None),  # one name alone is accepted
    ('[]', "must be a list of environment names"),
    ('[1]', "must be a list of environment names"),
    ('["host", "host"]', "listed twice"),
])
def test_entry_environments_errors(tmp_path, value, problem):
    text = GOOD.replace('copies = ["1", "vcpus"] }', f'copies = ["1", "vcpus"] }}\nenvironments = {value}')
    path = write(tmp_path, text)
    if problem is None:
        assert all(c["environments"] == ["host"] for c in suite.load(path).cells)
        return
    with pytest.raises(SuiteError) as info:
        suite.load(path)
    err = info.value
    assert problem in str(err)
    assert err.key == "workloads.environments" and err.line == 21 and f"{path}:21" in str(err)
    assert err.hint and "host" in err.hint and "small" in err.hint


def test_every_error_of_a_file_is_reported_with_its_line(tmp_path):
    path = tmp_path / "bad.toml"
    path.write_text("""[suite]
min_repetitions = 0
colour = "red"

[environments.host]
driver = "host"

[environments.small]
driver = "container"
shape = "m9.huge"

[[workloads]]
name = "system"
params = { test = "dhrystone", copies = "seven", durations = 2 }
environments = ["small"]

[[workloads]]
name = "nosuch"
""")
    with pytest.raises(SuiteError) as info:
        suite.load(path)
    lines = info.value.message.splitlines()
    assert lines[0] == "6 problems in the suite file:"
    found = [ln.strip().split(": key ", 1)[0] for ln in lines[1:]]
    assert found == [f"{path}:{n}" for n in (2, 3, 10, 14, 14, 18)]
    # 'small' is broken, so the entry naming it is not blamed for an unknown environment
    assert "unknown environment" not in info.value.message
    assert info.value.line == 2 and info.value.key == "suite.min_repetitions"


def test_a_misspelt_baseline_shape_and_every_key_come_in_the_same_pass(tmp_path):
    """What used to surface only after the other errors were fixed: the baseline when environments
    are broken, an option beside an unknown shape, the [suite] list's ad hoc shapes, each policy key
    and each condition."""
    path = tmp_path / "bad.toml"
    path.write_text("""[suite]
environments = ["box", "vm:m1.tiny"]
baseline = "hots"
warmup = -1
timeout = "x"

[environments.box]
driver = "container"
shape = "m1.huge"
engine = "dockr"

[[workloads]]
name = "system"
params = { test = "dhrystone" }
condition = { delay_ms = "abc", nosuchcond = 1 }
""")
    with pytest.raises(SuiteError) as info:
        suite.load(path)
    lines = info.value.message.splitlines()
    assert lines[0] == "8 problems in the suite file:"
    found = [tuple(ln.strip().split(": ", 2)[:2]) for ln in lines[1:]]
    assert found == [(f"{path}:{n}", f"key '{k}'") for n, k in (
        (2, "suite.environments"), (3, "suite.baseline"), (4, "suite.warmup"), (5, "suite.timeout"),
        (9, "environments.box.shape"), (10, "environments.box.engine"),
        (15, "workloads.condition.delay_ms"), (15, "workloads.condition.nosuchcond"))]
    assert "unknown shape 'm1.tiny'" in lines[1] and "'hots' is not one of" in lines[2]
