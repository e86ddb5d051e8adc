"""Hosts to run on: Ansible-style inventories (YAML, INI); host names from ~/.ssh/config are in
sshconfig.py.

`load(path)` reads what Ansible's `yaml` and `ini` inventory plugins read, as far as virtbench needs
it: groups, nested groups (`children`, a host in several groups), group and `all` variables
inherited by hosts, host ranges (`node[01:04]`, `[a:c]`, `[1:9:2]`), `host:port`, comments. The
format is found from the content: a YAML mapping of groups is YAML, anything else is INI.

Variables merge as Ansible merges them: `all`, then the other groups ordered by depth (a child group
overrides its parents) and, at equal depth, by name; the host's own variables win. Where Ansible
silently keeps the last of two different values given to the same variable of the same host or
group, virtbench refuses the file: a benchmark host that is not the one you meant costs a run.

Host variables read here: ansible_host, ansible_port, ansible_user, ansible_ssh_private_key_file
(or ansible_private_key_file), virtbench_host_key, virtbench_known_hosts, virtbench_dir; all other
variables stay in `HostSpec.vars`.

One module of about 580 lines on purpose: it has one job, reading an inventory, and its parts (the
builder that refuses conflicting values, host patterns, the YAML and the INI syntax) all go through
the one builder; apart, the syntaxes and the builder would import each other.
"""

from __future__ import annotations

import ast
import os
import re
import shlex
import string
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import UserError


@dataclass(frozen=True)
class HostSpec:
    """One remote machine as an inventory describes it. Never stored with results as a whole:
    `public()` is what results may record."""

    name: str                      # inventory name (also the ssh destination when no address)
    address: str | None = None     # ansible_host
    port: int | None = None        # ansible_port (None: ssh's own default or ~/.ssh/config)
    user: str | None = None        # ansible_user
    key_file: str | None = None    # ansible_ssh_private_key_file
    host_key: str | None = None    # virtbench_host_key: a pinned public key line or SHA256:... fingerprint
    known_hosts: str | None = None  # virtbench_known_hosts: a known_hosts file to check against
    remote_dir: str | None = None  # virtbench_dir: virtbench's cache and scratch there (default ~/.cache/virtbench)
    groups: tuple[str, ...] = ()
    vars: dict[str, Any] = field(default_factory=dict, hash=False, compare=False)

    @property
    def destination(self) -> str:
        return self.address or self.name

    def public(self) -> dict[str, Any]:
        """What results may record: the name, address and groups; no user, key or paths."""
        return {"name": self.name, "address": self.destination, "groups": list(self.groups)}


@dataclass
class Inventory:
    path: str | None
    hosts: dict[str, HostSpec] = field(default_factory=dict)      # inventory order
    groups: dict[str, list[str]] = field(default_factory=dict)    # group -> every member host (children too)
    children: dict[str, list[str]] = field(default_factory=dict)  # group -> its direct child groups

    def select(self, pattern: str | None = None) -> list[HostSpec]:
        """Hosts of `pattern`: `all`, a group, a host, or a comma list of those; inventory order."""
        pattern = "all" if pattern is None else pattern
        names = [p.strip() for p in pattern.split(",") if p.strip()]
        if not names:
            raise UserError(f"empty host pattern {pattern!r}", self._choices())
        chosen: set[str] = set()
        for name in names:
            if name == "all":
                chosen.update(self.hosts)
            elif name in self.groups:
                chosen.update(self.groups[name])
            elif name in self.hosts:
                chosen.add(name)
            else:
                where = f" in {self.path}" if self.path else ""
                raise UserError(f"'{name}' is neither a group nor a host{where}", self._choices())
        return [spec for host, spec in self.hosts.items() if host in chosen]

    def _choices(self) -> str:
        groups = ["all", *(g for g in self.groups if g != "all")]
        return f"groups: {', '.join(groups)}; hosts: {', '.join(self.hosts) or '(none)'}"


# -- loading -----------------------------------------------------------------------------------------

KNOWN_VARS = {"ansible_host", "ansible_port", "ansible_user", "ansible_ssh_private_key_file",
              "ansible_private_key_file", "virtbench_host_key", "virtbench_known_hosts", "virtbench_dir"}
_UNSET = object()


def load(path: str | os.PathLike) -> Inventory:
    """Read an Ansible inventory file (YAML or INI, found from the content)."""
    p = Path(path).expanduser()
    if not p.exists():
        raise UserError(f"inventory file {path} does not exist",
                        "give the path of an Ansible inventory (YAML or INI), e.g. --inventory hosts.yml")
    if p.is_dir():
        raise UserError(f"inventory {path} is a directory", "give one inventory file (YAML or INI)")
    try:
        text = p.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise UserError(f"cannot read inventory {path}: {exc}") from None
    b = _Builder(str(path), p.resolve().parent)
    if _looks_like_yaml(text, p):
        _parse_yaml(text, b)
    else:
        _parse_ini(text, b)
    return b.finish()


def loads(text: str, path: str = "<inventory>", base_dir: str | os.PathLike = ".") -> Inventory:
    """Like `load`, from text; relative key paths are taken relative to `base_dir`."""
    b = _Builder(path, Path(base_dir).resolve())
    if _looks_like_yaml(text, Path(path)):
        _parse_yaml(text, b)
    else:
        _parse_ini(text, b)
    return b.finish()


def resolve(spec: str | None, suite_dir: str | os.PathLike | None = None) -> Inventory | None:
    """An inventory named by a suite or an option: a file path (relative to `suite_dir` when given)."""
    if spec is None or not str(spec).strip():
        return None
    p = Path(str(spec).strip()).expanduser()
    if not p.is_absolute() and suite_dir is not None:
        p = Path(suite_dir) / p
    return load(p)


def _looks_like_yaml(text: str, path: Path) -> bool:
    """YAML if it parses as a mapping (a YAML inventory is a mapping of groups); a .yml/.yaml/.json
    file is YAML even when it does not parse, so that its error is reported as a YAML error."""
    import yaml

    if path.suffix.lower() in (".yml", ".yaml", ".json"):
        return True
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError:
        # Broken YAML still looks like YAML: its first line is '---', '{' or a top-level 'name:'.
        first = next((ln for ln in text.splitlines() if ln.strip() and not ln.lstrip().startswith(("#", ";"))), "")
        return first.startswith(("---", "{")) or bool(re.match(r"^[\w.-]+:\s*(#.*)?$", first))
    return isinstance(data, dict)


@dataclass
class _Group:
    name: str
    line: int | None = None
    hosts: list[str] = field(default_factory=list)
    children: list[str] = field(default_factory=list)
    vars: dict[str, tuple[Any, int | None]] = field(default_factory=dict)
    defined: bool = False  # has a [name] section / YAML entry (not only [name:vars])


@dataclass
class _Host:
    name: str
    line: int | None
    vars: dict[str, tuple[Any, int | None]] = field(default_factory=dict)


class _Builder:
    """The format-independent model both parsers fill; `finish()` merges it into an Inventory."""

    def __init__(self, path: str, base_dir: Path):
        self.path = path
        self.base_dir = base_dir
        self.hosts: dict[str, _Host] = {}
        self.groups: dict[str, _Group] = {"all": _Group("all", defined=True), "ungrouped": _Group("ungrouped")}
        self.vars_sections: dict[str, int | None] = {}  # INI [g:vars] -> line, checked at the end

    def error(self, line: int | None, problem: str, hint: str | None = None) -> UserError:
        where = f"{self.path}:{line}" if line else self.path
        return UserError(f"{where}: {problem}", hint)

    def group(self, name: str, line: int | None) -> _Group:
        name = str(name)
        if not name or any(c.isspace() for c in name):
            raise self.error(line, f"group name {name!r} is not valid", "group names are one word, e.g. web_servers")
        g = self.groups.get(name)
        if g is None:
            g = self.groups[name] = _Group(name, line)
        elif g.line is None:
            g.line = line
        return g

    def add_host(self, name: str, group: str, line: int | None, hostvars: dict[str, tuple[Any, int | None]]) -> None:
        h = self.hosts.get(name)
        if h is None:
            h = self.hosts[name] = _Host(name, line)
        for key, (value, vline) in hostvars.items():
            self._set(h.vars, key, value, vline, f"host '{name}'")
        g = self.group(group, line)
        if name not in g.hosts:
            g.hosts.append(name)

    def add_child(self, parent: str, child: str, line: int | None) -> None:
        if child == "all":
            raise self.error(line, "group 'all' cannot be a child of another group",
                             "every group is already inside 'all'; remove this entry")
        if child == parent:
            raise self.error(line, f"group '{parent}' lists itself as a child")
        p = self.group(parent, line)
        self.group(child, line)
        if child not in p.children:
            p.children.append(child)

    def set_group_var(self, group: str, key: str, value: Any, line: int | None) -> None:
        self._set(self.group(group, line).vars, key, value, line, f"group '{group}'")

    def _set(self, scope: dict, key: str, value: Any, line: int | None, what: str) -> None:
        key = str(key)
        old = scope.get(key, (_UNSET, None))
        if old[0] is not _UNSET and old[0] != value:
            first = f" (line {old[1]})" if old[1] else ""
            raise self.error(line, f"{what}: variable '{key}' is set to {value!r} here and to {old[0]!r} "
                             f"before{first}", "set it once, or in a group the host belongs to")
        if old[0] is _UNSET:
            scope[key] = (value, line)

    # -- merging --------------------------------------------------------------------------------------
    def finish(self) -> Inventory:
        for name, line in self.vars_sections.items():
            if not self.groups[name].defined and not self.groups[name].children and name not in self._child_names():
                raise self.error(line, f"[{name}:vars] sets variables of group '{name}', which has no hosts "
                                 "or children anywhere in the file", f"add a [{name}] section or fix the name")
        clash = [n for n in self.hosts if n in self.groups and n not in ("all", "ungrouped")]
        if clash:
            g = self.groups[clash[0]]
            raise self.error(self.hosts[clash[0]].line or g.line,
                             f"'{clash[0]}' is both a group and a host",
                             "rename one of them: a host pattern must say which it means")
        if not self.hosts:
            raise self.error(None, "the inventory has no hosts",
                             "list hosts under a group, e.g. YAML 'all: {hosts: {node1: {ansible_host: "
                             "10.0.0.1}}}' or an INI line 'node1 ansible_host=10.0.0.1'")
        # Every group without a parent is a child of all; ungrouped: hosts in no group but all/ungrouped.
        has_parent = self._child_names()
        all_g = self.groups["all"]
        for name in self.groups:
            if name not in ("all", "ungrouped") and name not in has_parent and name not in all_g.children:
                all_g.children.append(name)
        if "ungrouped" not in has_parent and "ungrouped" not in all_g.children:
            all_g.children.append("ungrouped")
        # As Ansible reconciles it: a host in some group is not in 'ungrouped', whatever the file says.
        grouped = {h for g in self.groups.values() if g.name not in ("all", "ungrouped") for h in g.hosts}
        ungrouped = self.groups["ungrouped"]
        ungrouped.hosts = [h for h in [*ungrouped.hosts, *all_g.hosts] if h not in grouped]
        ungrouped.hosts = list(dict.fromkeys(ungrouped.hosts))
        all_g.hosts = []
        depth = self._depths()
        order = {name: i for i, name in enumerate(self.hosts)}
        members: dict[str, list[str]] = {}
        for name in self.groups:
            found = self._members(name, set())
            members[name] = sorted(found, key=order.__getitem__)
        host_groups: dict[str, list[str]] = {h: [] for h in self.hosts}
        for name in self.groups:
            for h in members[name]:
                host_groups[h].append(name)
        specs = {}
        for name, h in self.hosts.items():
            chain = sorted(host_groups[name], key=lambda g: (depth[g], g))
            merged: dict[str, tuple[Any, int | None]] = {}
            for g in chain:
                merged.update(self.groups[g].vars)
            merged.update(h.vars)
            groups = tuple(g for g in host_groups[name] if g != "all")
            specs[name] = self._spec(name, h, groups, merged)
        groups_out = {n: members[n] for n in self.groups if members[n] or self.groups[n].defined
                      or self.groups[n].children}
        groups_out.setdefault("all", list(self.hosts))
        if not groups_out.get("ungrouped"):
            groups_out.pop("ungrouped", None)
        children = {n: [c for c in g.children if c in groups_out] for n, g in self.groups.items() if g.children}
        return Inventory(self.path, specs, groups_out, children)

    def _child_names(self) -> set[str]:
        return {c for g in self.groups.values() for c in g.children}

    def _depths(self) -> dict[str, int]:
        depth: dict[str, int] = {}

        def visit(name: str, d: int, path: tuple[str, ...]) -> None:
            if name in path:
                cycle = " -> ".join((*path[path.index(name):], name))
                raise self.error(self.groups[name].line, f"groups contain each other: {cycle}",
                                 "children must form a tree (a group may have several parents, but no loops)")
            if depth.get(name, -1) >= d:
                return
            depth[name] = d
            for child in self.groups[name].children:
                visit(child, d + 1, (*path, name))

        visit("all", 0, ())
        for name in self.groups:  # groups only reachable from each other: a loop, reported by visit
            if name not in depth:
                visit(name, 1, ())
        return depth

    def _members(self, name: str, seen: set[str]) -> set[str]:
        if name in seen:
            return set()
        seen.add(name)
        g = self.groups[name]
        out = set(g.hosts)
        for child in g.children:
            out |= self._members(child, seen)
        return out

    def _spec(self, name: str, h: _Host, groups: tuple[str, ...], merged: dict) -> HostSpec:
        def get(key: str) -> tuple[Any, int | None]:
            return merged.get(key, (None, None))

        def text(key: str) -> str | None:
            value, line = get(key)
            if value is None:
                return None
            if isinstance(value, (dict, list, bool)):
                raise self.error(line, f"host '{name}': {key} must be a string, not {value!r}")
            return str(value)

        port, pline = get("ansible_port")
        if port is not None:
            ok = isinstance(port, int) and not isinstance(port, bool) or (isinstance(port, str) and port.isdigit())
            if not ok or not 1 <= int(port) <= 65535:
                raise self.error(pline or h.line, f"host '{name}': ansible_port {port!r} is not a TCP port",
                                 "give a number from 1 to 65535, e.g. ansible_port=2222")
            port = int(port)
        key_file = text("ansible_ssh_private_key_file") or text("ansible_private_key_file")
        known_hosts = text("virtbench_known_hosts")
        host_key = text("virtbench_host_key")
        if host_key is not None:
            host_key = host_key.strip()
            parts = host_key.split()
            if not (host_key.startswith("SHA256:") and len(parts) == 1) and not (
                    len(parts) >= 2 and re.match(r"^(ssh-|ecdsa-|sk-)", parts[0])):
                raise self.error(get("virtbench_host_key")[1] or h.line,
                                 f"host '{name}': virtbench_host_key {host_key[:40]!r} is neither a public key "
                                 "line nor a SHA256 fingerprint",
                                 "give the host's public key ('ssh-ed25519 AAAA...', from "
                                 "/etc/ssh/ssh_host_ed25519_key.pub) or its fingerprint ('SHA256:...', from "
                                 "ssh-keygen -lf that file)")
        return HostSpec(name=name, address=text("ansible_host"), port=port, user=text("ansible_user"),
                        key_file=self._local_path(key_file), host_key=host_key,
                        known_hosts=self._local_path(known_hosts), remote_dir=text("virtbench_dir"),
                        groups=groups,
                        vars={k: v for k, (v, _) in merged.items() if k not in KNOWN_VARS})

    def _local_path(self, value: str | None) -> str | None:
        """A file on this machine: ~ expanded, relative paths taken from the inventory's directory."""
        if value is None:
            return None
        p = Path(value).expanduser()
        return str(p if p.is_absolute() else self.base_dir / p)


# -- host patterns --------------------------------------------------------------------------------------

def expand_hosts(pattern: str) -> list[str]:
    """Ansible's host ranges: `node[01:04]` (zero padded), `[a:c]`, `[1:9:2]`, several per name.
    Raises ValueError saying what is wrong."""
    start = pattern.find("[")
    if start < 0:
        return [pattern]
    end = pattern.find("]", start)
    if end < 0:
        raise ValueError(f"'[' without ']' in {pattern!r}")
    head, body, tail = pattern[:start], pattern[start + 1:end], pattern[end + 1:]
    if ":" not in body:
        raise ValueError(f"[{body}] is not a range")
    bounds = body.split(":")
    if len(bounds) not in (2, 3):
        raise ValueError(f"range [{body}] must be [begin:end] or [begin:end:step]")
    beg, last = bounds[0] or "0", bounds[1]
    if not last:
        raise ValueError(f"range [{body}] has no end value")
    step_text = bounds[2] if len(bounds) == 3 else "1"
    if not step_text.isdigit() or int(step_text) < 1:
        raise ValueError(f"range [{body}]: step {step_text!r} must be a positive integer")
    step = int(step_text)
    if beg.isdigit() and last.isdigit():
        if beg[0] == "0" and len(beg) > 1 and len(beg) != len(last):
            raise ValueError(f"range [{body}]: a zero-padded begin and the end must have the same length "
                             f"(e.g. [{beg}:{last.zfill(len(beg))}])")
        width = len(beg) if beg[0] == "0" and len(beg) > 1 else 0
        if int(beg) > int(last):
            raise ValueError(f"range [{body}] is empty: begin is after end")
        values = [str(i).zfill(width) for i in range(int(beg), int(last) + 1, step)]
    elif len(beg) == 1 and len(last) == 1 and beg in string.ascii_letters and last in string.ascii_letters:
        i, j = string.ascii_letters.index(beg), string.ascii_letters.index(last)
        if i > j:
            raise ValueError(f"range [{body}] is empty: begin is after end")
        values = list(string.ascii_letters[i:j + 1:step])
    else:
        raise ValueError(f"range [{body}] must be numbers ([01:10]) or single letters ([a:f])")
    out = []
    for v in values:
        out.extend(expand_hosts(head + v + tail))
    return out


def _split_port(pattern: str) -> tuple[str, int | None]:
    """`host:2222` -> (host, 2222); colons inside a range or an IPv6 address are not a port."""
    m = re.fullmatch(r"(.+):(\d+)", pattern)
    if m and ":" not in re.sub(r"\[[^\]]*\]", "", m.group(1)):
        return m.group(1), int(m.group(2))
    return pattern, None


def _host_pattern(b: _Builder, pattern: str, line: int | None) -> tuple[list[str], int | None]:
    base, port = _split_port(pattern.strip())
    try:
        names = expand_hosts(base)
    except ValueError as exc:
        raise b.error(line, f"host pattern {pattern!r}: {exc}",
                      "Ansible ranges look like node[01:04], node[a:d] or node[1:10:2]") from None
    if port is not None and not 1 <= port <= 65535:
        raise b.error(line, f"host {pattern!r}: port {port} is not a TCP port", "give a number from 1 to 65535")
    return names, port


# -- YAML -------------------------------------------------------------------------------------------------

def _parse_yaml(text: str, b: _Builder) -> None:
    import yaml

    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        problem = getattr(exc, "problem", None) or str(exc)
        raise b.error(mark.line + 1 if mark else None, f"not valid YAML: {problem}",
                      "fix the indentation or quoting there (or write the inventory in INI form)") from None
    if root is None:
        raise b.error(None, "the inventory is empty", "list hosts under a group, e.g. 'all: {hosts: {node1: {}}}'")
    constructor = yaml.SafeLoader("")

    def value(node) -> Any:
        return constructor.construct_object(node, deep=True)

    def line(node) -> int:
        return node.start_mark.line + 1

    def mapping(node, what: str, hint: str) -> list[tuple[str, Any, int]]:
        """A mapping node's (key, value node, line) in order; null -> empty; duplicates refused."""
        if isinstance(node, yaml.ScalarNode) and node.tag == "tag:yaml.org,2002:null":
            return []
        if not isinstance(node, yaml.MappingNode):
            raise b.error(line(node), f"{what} must be a mapping, not {_yaml_kind(node)}", hint)
        seen: dict[str, int] = {}
        out = []
        for knode, vnode in node.value:
            key = value(knode)
            if not isinstance(key, (str, int, float)) or isinstance(key, bool):
                raise b.error(line(knode), f"{what}: key {key!r} is not a name", hint)
            key = str(key)
            if key in seen:
                raise b.error(line(knode), f"{what}: '{key}' appears twice (first on line {seen[key]})",
                              "YAML keeps only the last one; merge the two entries")
            seen[key] = line(knode)
            out.append((key, vnode, line(knode)))
        return out

    group_hint = "a group is a mapping with 'hosts', 'vars' and 'children', e.g. 'web: {hosts: {web1: {}}}'"

    def group(name: str, node, gline: int) -> None:
        g = b.group(name, gline)
        g.defined = True
        for key, vnode, kline in mapping(node, f"group '{name}'", group_hint):
            if key == "hosts":
                for host, hnode, hline in mapping(vnode, f"hosts of group '{name}'",
                                                  "hosts is a mapping of names, each followed by ':' "
                                                  "and its variables (or nothing), e.g. 'hosts: {web1: {}}'"):
                    hostvars = {k: (value(n), ln) for k, n, ln in
                                mapping(hnode, f"host '{host}'", "a host's value is a mapping of its variables, "
                                        f"e.g. '{host}: {{ansible_host: 10.0.0.1}}'")}
                    names, port = _host_pattern(b, host, hline)
                    if port is not None:
                        hostvars.setdefault("ansible_port", (port, hline))
                    for n in names:
                        b.add_host(n, name, hline, hostvars)
            elif key == "vars":
                for k, n, ln in mapping(vnode, f"vars of group '{name}'", "vars is a mapping 'key: value'"):
                    b.set_group_var(name, k, value(n), ln)
            elif key == "children":
                for child, cnode, cline in mapping(vnode, f"children of group '{name}'",
                                                   "children is a mapping of group names, e.g. "
                                                   "'children: {web: {hosts: {web1: {}}}}'"):
                    b.add_child(name, child, cline)
                    group(child, cnode, cline)
            else:
                raise b.error(kline, f"group '{name}': unknown key '{key}'",
                              "a group has only 'hosts', 'vars' and 'children' (is the indentation right?)")

    for name, node, gline in mapping(root, "the inventory", group_hint):
        group(name, node, gline)


def _yaml_kind(node) -> str:
    import yaml

    if isinstance(node, yaml.SequenceNode):
        return "a list"
    if isinstance(node, yaml.ScalarNode):
        return f"the value {node.value!r}"
    return "this"


# -- INI ---------------------------------------------------------------------------------------------------

_SECTION = re.compile(r"^\[([^\]:\s]+)(?::(\w+))?\]\s*(?:[#;].*)?$")


def _parse_ini(text: str, b: _Builder) -> None:
    group, kind = "ungrouped", "hosts"
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line[0] in "#;":
            continue
        if line.startswith("["):
            m = _SECTION.match(line)
            if not m:
                raise b.error(number, f"section header {line!r} is not [group], [group:vars] or [group:children]")
            group, kind = m.group(1), m.group(2) or "hosts"
            if kind not in ("hosts", "vars", "children"):
                raise b.error(number, f"section [{group}:{kind}] has unknown type '{kind}'",
                              "the types are [group], [group:vars] and [group:children]")
            g = b.group(group, number)
            if kind == "hosts":
                g.defined = True
            elif kind == "vars":
                b.vars_sections.setdefault(group, number)
            continue
        if kind == "vars":
            key, sep, val = line.partition("=")
            if not sep or not key.strip():
                raise b.error(number, f"expected key=value in [{group}:vars], got {line!r}")
            b.set_group_var(group, key.strip(), val.strip(), number)
        elif kind == "children":
            child = _strip_comment(line)
            if not child or any(c.isspace() for c in child):
                raise b.error(number, f"expected one group name per line in [{group}:children], got {line!r}")
            b.add_child(group, child, number)
        else:
            try:
                tokens = shlex.split(line, comments=True)
            except ValueError as exc:
                raise b.error(number, f"cannot parse host line {line!r}: {exc}", "check the quotes") from None
            if not tokens:
                continue
            hostvars: dict[str, tuple[Any, int | None]] = {}
            for tok in tokens[1:]:
                key, sep, val = tok.partition("=")
                if not sep or not key:
                    raise b.error(number, f"expected key=value after host {tokens[0]!r}, got {tok!r}",
                                  "host lines are 'name key=value key=value'; quote values with spaces")
                hostvars[key] = (_ini_value(val), number)
            names, port = _host_pattern(b, tokens[0], number)
            if port is not None:
                hostvars.setdefault("ansible_port", (port, number))
            for n in names:
                b.add_host(n, group, number, hostvars)


def _strip_comment(line: str) -> str:
    return re.split(r"\s[#;]", line, maxsplit=1)[0].strip()


def _ini_value(text: str) -> Any:
    """Inline host values are Python literals when they parse as one (Ansible's rule), else strings."""
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return text
