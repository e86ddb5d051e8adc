"""Inventories: Ansible YAML and INI files, host ranges, variable inheritance, clear errors,
host selection, and host names from an ssh_config file."""

from pathlib import Path

import pytest

from virtbench.errors import UserError
from virtbench.machines import inventory as inv
from virtbench.machines import sshconfig
from virtbench.machines.inventory import HostSpec, Inventory, expand_hosts

DATA = Path(__file__).parent / "data" / "inventories"


def error_of(name: str) -> str:
    with pytest.raises(UserError) as exc:
        inv.load(DATA / name)
    return str(exc.value)


# -- the same inventory written in both formats -------------------------------------------------------

@pytest.mark.parametrize("name", ["lab.yml", "lab.ini"])
def test_lab_inventory(name):
    lab = inv.load(DATA / name)
    assert list(lab.hosts) == ["jump", "node01", "node02", "node03", "node04", "nas1"]
    assert lab.groups["compute"] == ["node01", "node02", "node03", "node04"]
    assert lab.groups["gpu"] == ["node03"]
    assert lab.groups["storage"] == ["node04", "nas1"]
    assert lab.groups["ungrouped"] == ["jump"]
    assert lab.groups["all"] == list(lab.hosts)
    assert lab.children["compute"] == ["gpu"]

    jump = lab.hosts["jump"]
    assert (jump.address, jump.port, jump.user, jump.remote_dir) == ("192.0.2.10", 22, "bench", "/scratch/virtbench")
    assert jump.groups == ("ungrouped",) and jump.vars == {}

    n1 = lab.hosts["node01"]  # compute's port overrides all's; all's user is inherited
    assert (n1.address, n1.destination, n1.port, n1.user) == (None, "node01", 2222, "bench")
    assert n1.vars == {"rack": "r1", "tier": "slow"} and n1.groups == ("compute",)

    n3 = lab.hosts["node03"]  # gpu is compute's child: its rack wins
    assert n3.groups == ("compute", "gpu") and n3.vars == {"rack": "r2", "tier": "slow", "accel": "a100"}

    n4 = lab.hosts["node04"]  # compute and storage at the same depth: the later name (storage) wins
    assert n4.groups == ("compute", "storage") and n4.vars["tier"] == "fast"

    nas = lab.hosts["nas1"]  # host variables beat every group's
    assert (nas.address, nas.port) == ("192.0.2.20", 22)
    assert nas.key_file == str(DATA / "keys" / "nas_ed25519")  # relative to the inventory's directory
    assert nas.host_key.startswith("ssh-ed25519 AAAAC3")
    assert "ansible_user" not in nas.vars and "ansible_ssh_private_key_file" not in nas.vars


def test_yaml_and_ini_forms_agree():
    a, b = inv.load(DATA / "lab.yml"), inv.load(DATA / "lab.ini")
    assert a.hosts == b.hosts and a.groups == b.groups
    assert [h.vars for h in a.hosts.values()] == [h.vars for h in b.hosts.values()]


def test_ini_without_extension(monkeypatch):
    monkeypatch.setenv("HOME", "/home/tester")
    hosts = inv.load(DATA / "hosts")
    assert list(hosts.hosts) == ["bastion.example.org", "weba.example.org", "webb.example.org",
                                 "webc.example.org", "db-1", "db-4", "db-7", "edge01"]
    assert hosts.hosts["bastion.example.org"].port == 2200  # host:port
    assert hosts.hosts["bastion.example.org"].groups == ("ungrouped",)
    assert hosts.hosts["webb.example.org"].user == "www"
    # inline values are Python literals where they parse as one, as in Ansible
    assert hosts.hosts["db-4"].vars == {"max_conn": 200, "ssd": True, "note": "primary db"}
    edge = hosts.hosts["edge01"]
    assert edge.groups == ("web", "edge") and edge.address == "198.51.100.7"
    assert edge.host_key == "SHA256:nThbg6kXUpJWGl7E1IGOCspRomTxdCARLviKw6E5SY8"
    assert edge.known_hosts == "/home/tester/.ssh/lab_known_hosts"
    assert hosts.groups["web"][-1] == "edge01"  # members of child groups belong to the parent


def test_ranges():
    assert expand_hosts("node[01:04]") == ["node01", "node02", "node03", "node04"]
    assert expand_hosts("node[8:11]") == ["node8", "node9", "node10", "node11"]
    assert expand_hosts("db-[a:c].lab") == ["db-a.lab", "db-b.lab", "db-c.lab"]
    assert expand_hosts("n[1:9:4]") == ["n1", "n5", "n9"]
    assert expand_hosts("r[1:2]-n[1:2]") == ["r1-n1", "r1-n2", "r2-n1", "r2-n2"]
    assert expand_hosts("plain.example.org") == ["plain.example.org"]
    for bad, why in [("n[01:9]", "same length"), ("n[5:1]", "empty"), ("n[1:]", "no end"),
                     ("n[1:3:0]", "positive"), ("n[x:3]", "numbers"), ("n[1:3", "without"), ("n[1-3]", "not a range")]:
        with pytest.raises(ValueError, match=why):
            expand_hosts(bad)


def test_yaml_ranges_and_ports():
    text = "all:\n  hosts:\n    web[1:3]:\n      ansible_host: 10.0.0.9\n    db.lab:2022:\n"
    got = inv.loads(text, "mem.yml")
    assert list(got.hosts) == ["web1", "web2", "web3", "db.lab"]
    assert got.hosts["db.lab"].port == 2022 and got.hosts["web2"].address == "10.0.0.9"


def test_top_level_groups_without_all():
    text = "web:\n  hosts:\n    w1:\ndb:\n  hosts:\n    d1:\n  vars:\n    ansible_port: '2200'\n"
    got = inv.loads(text, "mem.yml")
    assert got.groups == {"all": ["w1", "d1"], "web": ["w1"], "db": ["d1"]}
    assert got.hosts["d1"].port == 2200 and got.hosts["w1"].port is None


def test_broken_yaml_without_extension_is_reported_as_yaml():
    with pytest.raises(UserError, match=r"^inventory:4: not valid YAML"):
        inv.loads("all:\n  hosts:\n    a:\n   b: [\n", "inventory")


def test_same_host_twice_with_the_same_values_is_fine():
    text = "[a]\nh1 ansible_host=10.0.0.1\n[b]\nh1 ansible_host=10.0.0.1\n[a:vars]\nx=1\n[a:vars]\nx=1\n"
    got = inv.loads(text, "mem.ini")
    assert got.hosts["h1"].groups == ("a", "b") and got.hosts["h1"].vars == {"x": "1"}


def test_ungrouped_host_listed_in_a_group_too():
    got = inv.loads("h1\nh2\n[web]\nh1\n", "mem.ini")
    assert got.groups["ungrouped"] == ["h2"] and got.hosts["h1"].groups == ("web",)


# -- errors name the file, the line, what is wrong and what to do -------------------------------------------

@pytest.mark.parametrize("name, line, words", [
    ("bad_port.ini", 3, ["host 'w2'", "ansible_port 'ssh'", "1 to 65535"]),
    ("bad_port.yml", 6, ["ansible_port 70000", "1 to 65535"]),
    ("bad_range.ini", 2, ["node[01:9]", "same length", "[01:09]"]),
    ("bad_range.yml", 4, ["node[x:1]", "numbers", "node[01:04]"]),
    ("conflict.ini", 5, ["host 'h1'", "'10.0.0.2'", "'10.0.0.1'", "line 2"]),
    ("bad_indent.yml", 5, ["not valid YAML", "indentation"]),
    ("typo.yml", 4, ["unknown key 'host'", "'hosts'"]),
    ("cycle.ini", 1, ["a -> b -> a"]),
    ("duplicate_key.yml", 5, ["'a' appears twice", "line 3"]),
    ("novars.ini", 4, ["[wbe:vars]", "wbe"]),
])
def test_errors_name_file_and_line(name, line, words):
    text = error_of(name)
    assert text.startswith(f"{DATA / name}:{line}: "), text
    for w in words:
        assert w in text, text


def test_empty_and_missing_files(tmp_path):
    assert "no hosts" in error_of("empty.yml")
    (tmp_path / "blank").write_text("# only a comment\n\n")
    with pytest.raises(UserError, match="no hosts"):
        inv.load(tmp_path / "blank")
    with pytest.raises(UserError, match="does not exist"):
        inv.load(tmp_path / "nope.yml")
    with pytest.raises(UserError, match="directory"):
        inv.load(tmp_path)


@pytest.mark.parametrize("text, line, words", [
    ("[web]\nw1 ansible_port\n", 2, ["expected key=value", "'ansible_port'"]),
    ("[web:kids]\nw1\n", 1, ["unknown type 'kids'"]),
    ("[web]\nw1 note='unclosed\n", 2, ["check the quotes"]),
    ("[web]\nweb\n", 2, ["both a group and a host"]),
    ("[web]\nw1 virtbench_host_key=AAAA\n", 2, ["neither a public key", "SHA256"]),
    ("all:\n  hosts:\n    - w1\n", 3, ["must be a mapping, not a list"]),
    ("all:\n  hosts:\n    w1: 10.0.0.1\n", 3, ["host 'w1'", "ansible_host: 10.0.0.1"]),
])
def test_inline_errors(text, line, words):
    name = "inline.ini" if text.startswith("[") else "inline.yml"
    with pytest.raises(UserError) as exc:
        inv.loads(text, name)
    assert str(exc.value).startswith(f"{name}:{line}: "), str(exc.value)
    for w in words:
        assert w in str(exc.value), str(exc.value)


# -- select and resolve ---------------------------------------------------------------------------------------

def test_select():
    lab = inv.load(DATA / "lab.yml")
    names = lambda pattern: [h.name for h in lab.select(pattern)]  # noqa: E731
    assert names("all") == names(None) == list(lab.hosts)
    assert names("gpu") == ["node03"]
    assert names("storage,jump") == ["jump", "node04", "nas1"]  # inventory order, no duplicates
    assert names("compute, storage") == ["node01", "node02", "node03", "node04", "nas1"]
    assert names("ungrouped") == ["jump"]
    with pytest.raises(UserError) as exc:
        lab.select("gpus")
    assert "'gpus'" in exc.value.message and "gpu" in exc.value.hint and "nas1" in exc.value.hint
    with pytest.raises(UserError):
        lab.select(" , ")


def test_resolve(tmp_path):
    assert inv.resolve(None) is None
    assert list(inv.resolve("lab.ini", suite_dir=DATA).hosts)[0] == "jump"
    assert inv.resolve(str(DATA / "lab.yml")).path == str(DATA / "lab.yml")
    with pytest.raises(UserError, match="does not exist"):
        inv.resolve("lab.ini", suite_dir=tmp_path)


def test_public_has_no_user_or_key():
    nas = inv.load(DATA / "lab.yml").hosts["nas1"]
    assert nas.public() == {"name": "nas1", "address": "192.0.2.20", "groups": ["storage"]}


# -- ~/.ssh/config ---------------------------------------------------------------------------------------------

SSH_CONFIG = """\
# my machines
Host *
    ServerAliveInterval 30

Host bench1 bench2
    HostName 10.1.0.%h
    User me

Host=gateway   # the jump host
    Port 2200

Host *.internal !bad.internal lab?
    ProxyJump gateway

Match host bench1
    IdentityFile ~/.ssh/bench

Include extra.conf
"""


def test_from_ssh_config(tmp_path):
    (tmp_path / "config").write_text(SSH_CONFIG.replace("Include extra.conf", f"Include {tmp_path}/extra.conf"))
    (tmp_path / "extra.conf").write_text("host gpu-box\n  hostname 10.2.0.1\n")
    path = tmp_path / "config"
    assert sshconfig.ssh_config_hosts(path) == ["bench1", "bench2", "gateway", "gpu-box"]
    every = sshconfig.from_ssh_config(None, path)
    assert list(every.hosts) == ["bench1", "bench2", "gateway", "gpu-box"]
    assert every.hosts["bench1"] == HostSpec("bench1", groups=("ssh_config",))
    assert every.hosts["bench1"].address is None and every.hosts["bench1"].user is None  # ssh resolves the rest
    some = sshconfig.from_ssh_config(["gateway", "other.example.org"], path)
    assert list(some.hosts) == ["gateway", "other.example.org"]  # an unknown name is a plain destination
    assert some.groups == {"all": ["gateway", "other.example.org"], "ssh_config": ["gateway"]}
    assert [h.name for h in some.select("ssh_config")] == ["gateway"]
    with pytest.raises(UserError, match="no concrete Host"):
        sshconfig.from_ssh_config(None, tmp_path / "missing")
    assert isinstance(sshconfig.from_ssh_config(["x"], tmp_path / "missing"), Inventory)


def test_ssh_config_address():
    import shutil

    if not shutil.which("ssh"):
        pytest.skip("no ssh client")
    got = sshconfig.ssh_config_address("192.0.2.44")  # `ssh -G`: HostName and Port only
    assert got is None or (got[0] == "192.0.2.44" and isinstance(got[1], int))
