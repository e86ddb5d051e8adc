"""The structure stays seen: no import circle inside src/virtbench, no import against the layers of
docs/architecture.md, no private name imported from another module (nor read through the module in
tests and bench), no import kept only for the linter, issue 30's bar (a small top level, the one-page
map linking the package READMEs), and no circle between the C translation units of one native program.

A static check over the source text (ast for Python), so an import inside a function or under
TYPE_CHECKING counts as much as one at the top: each is a dependency a reader has to follow.
"""

from __future__ import annotations

import ast
import fnmatch
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src"
DOC = ROOT / "docs" / "architecture.md"

# Top to bottom; a module imports from its own layer or below. A module belongs to the layer of the
# longest name here that is it or a package holding it ("virtbench" alone: the package's __init__;
# `cli_*`: the command modules).
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    ("commands", ("cli", "run.runner", "run.rounds", "run.boot", "run.boot_results", "run.checks", "run.session", "report", "reproduce", "reproduce.experiments", "reproduce.facts", "reproduce.matrix", "reproduce.times", "reproduce.testbed", "studies", "cli.doctor", "api", "export", "__main__", "drivers.pods.testbed.commands",)),
    ("results and plans", ("analysis", "run.outcomes", "run.plan", "run.estimates", "run.progress", "suite", "stats.scaling", "render", "stats.ratio_methods", "stats.verdicts", "run.noise", "run",)),
    ("act on instances", ("workloads", "conditions", "workloads.mpicluster", "monitor", "sysinfo", "kernel_identity",)),
    ("make instances", ("drivers", "drivers.vm.checks", "drivers.vm.driver", "drivers.cloud.checks", "drivers.container.checks",)),
    ("below the drivers", ("drivers.vm", "drivers.container.engine", "drivers.container.ociruntime", "drivers.cpuset", "drivers.checks_base", "drivers.base", "machines.nfsclient", "image",)),
    ("the seam", ("machines",)),
    ("foundations", ("procs", "fanout", "hostdirs", "paths", "model", "errors", "sizes", "kernels", "store", "stats", "stats.exact", "stats.bootstrap", "stats.interval_verdict", "shapes", "tomlpos", "studies.published", "run.cpugiven", "aptsources", "virtbench",)),
]


def modules(src: Path = SRC) -> dict[str, tuple[Path, bool]]:
    """Dotted module name -> (file, is a package's __init__)."""
    out = {}
    for path in sorted((src / "virtbench").rglob("*.py")):
        parts = list(path.relative_to(src).with_suffix("").parts)
        is_pkg = parts[-1] == "__init__"
        out[".".join(parts[:-1] if is_pkg else parts)] = (path, is_pkg)
    return out


def imports(src: Path = SRC) -> dict[str, dict[str, int]]:
    """Module -> {module of virtbench it imports: line}. `from pkg import sub` names the submodule;
    the package too when the importer is outside it (its __init__ runs first), not from inside it
    (a submodule's own package is always initialized before it)."""
    mods = modules(src)

    def owner(name: str) -> str:
        while name not in mods and "." in name:
            name = name.rsplit(".", 1)[0]
        return name

    graph: dict[str, dict[str, int]] = {}
    for mod, (path, is_pkg) in mods.items():
        deps: dict[str, int] = {}
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = mod.split(".") if is_pkg else mod.split(".")[:-1]
                    base = base[:len(base) - node.level + 1]
                    target = ".".join(base + ([node.module] if node.module else []))
                else:
                    target = node.module or ""
                subs = [f"{target}.{a.name}" for a in node.names if f"{target}.{a.name}" in mods]
                targets = subs + ([target] if len(subs) < len(node.names) else [])
            for t in targets:
                if t == "virtbench" or t.startswith("virtbench."):
                    dep = owner(t)
                    # From outside a package, importing its submodule runs its __init__ first.
                    parts = dep.split(".")
                    for n in range(2, len(parts) + 1):
                        pkg = ".".join(parts[:n])
                        outside = pkg != mod and not mod.startswith(pkg + ".")
                        if pkg in mods and outside and (pkg == dep or mods[pkg][1]):
                            deps.setdefault(pkg, node.lineno)
        graph[mod] = deps
    return graph


def circles(graph: dict[str, dict[str, int]] | dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one node (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def layer_of(mod: str) -> int | None:
    rel = mod.removeprefix("virtbench.") if mod != "virtbench" else "virtbench"
    best, depth = None, -1
    for i, (_, names) in enumerate(LAYERS):
        for name in names:
            if (fnmatch.fnmatch(rel, name) or rel.startswith(name + ".")) and name.count(".") > depth:
                best, depth = i, name.count(".")
    return best


def against_layers(graph: dict[str, dict[str, int]]) -> list[str]:
    bad = []
    for mod, deps in sorted(graph.items()):
        for dep, line in sorted(deps.items()):
            if None in (layer_of(mod), layer_of(dep)):
                continue  # test_every_module_has_a_layer names it
            if layer_of(dep) < layer_of(mod):
                bad.append(f"{mod} (layer '{LAYERS[layer_of(mod)][0]}', line {line}) imports {dep} "
                           f"(layer '{LAYERS[layer_of(dep)][0]}', above it)")
    return bad


def test_every_module_has_a_layer():
    unplaced = [m for m in modules() if layer_of(m) is None]
    assert not unplaced, f"put these modules into a layer of LAYERS (and docs/architecture.md): {unplaced}"


def test_no_python_import_circle():
    found = circles(imports())
    assert not found, "import circles (give them a one-way dependency):\n" + "\n".join(map(str, found))


def test_no_import_against_the_layers():
    bad = against_layers(imports())
    assert not bad, "imports against the layering:\n" + "\n".join(bad)


PY_FILES = sorted([*(SRC / "virtbench").rglob("*.py"), *(ROOT / "tests").glob("*.py"), *(ROOT / "bench").glob("*.py")])


def test_no_module_imports_a_private_name():
    """Modules, tests and bench scripts use what a module offers: what another module needs is a public
    name (`from virtbench.x import _helper`, `from test_foo import _helper` are neither)."""
    bad = [f"{path.relative_to(ROOT)}:{node.lineno} {a.name}" for path in PY_FILES
           for node in ast.walk(ast.parse(path.read_text()))
           if isinstance(node, ast.ImportFrom) and node.module != "__future__"
           for a in node.names if a.name.startswith("_") and not a.name.startswith("__")]
    assert not bad, "private names imported from another module (make them public, or use the public API):\n" + \
        "\n".join(bad)


def module_names(tree: ast.Module, root: Path = ROOT) -> set[str]:
    """Names a file binds to a virtbench module, to a name imported from one (a class: `Web._helper` is as
    private), or to a tests helper module (`import virtbench.x as y`, `import virtbench.x` (binds virtbench),
    `from virtbench.a import b`, `import vbleftovers`)."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name.split(".")[0] == "virtbench" or (root / "tests" / f"{a.name}.py").exists():
                    names.add(a.asname or a.name.split(".")[0])
        elif isinstance(node, ast.ImportFrom) and not node.level and (node.module or "").split(".")[0] == "virtbench":
            names.update(a.asname or a.name for a in node.names)
    return names


def private_reads(path: Path, root: Path = ROOT) -> list[str]:
    """`mod._x` (or `virtbench.a._x`) where mod names a virtbench module, and `monkeypatch.setattr(mod, "_x", ..)`
    or `setattr("virtbench.a._x", ..)`: another module's private name."""
    tree = ast.parse(path.read_text())
    mods = module_names(tree, root)

    def names_module(node: ast.expr) -> bool:
        while isinstance(node, ast.Attribute):
            node = node.value
        return isinstance(node, ast.Name) and node.id in mods

    def private(name: object) -> bool:
        return isinstance(name, str) and name.startswith("_") and not name.startswith("__")

    def patches_private(node: ast.Call) -> bool:  # (monkeypatch.)setattr(mod, "_x", ...) / ("virtbench.a._x", ...)
        if getattr(node.func, "id", getattr(node.func, "attr", None)) != "setattr" or not node.args:
            return False
        first, name = node.args[0], node.args[1] if len(node.args) > 1 else None
        if isinstance(first, ast.Constant) and isinstance(first.value, str):
            return first.value.startswith("virtbench.") and private(first.value.rsplit(".", 1)[-1])
        return names_module(first) and isinstance(name, ast.Constant) and private(name.value)

    return [f"{path.relative_to(root)}:{node.lineno} {ast.unparse(node)}" for node in ast.walk(tree)
            if (isinstance(node, ast.Attribute) and private(node.attr) and names_module(node.value))
            or (isinstance(node, ast.Call) and patches_private(node))]


def test_no_test_or_bench_script_reads_a_private_attribute():
    """What a test or bench script needs of a module is public: `mod._helper` after `from virtbench.x import
    mod` reaches past the API as much as importing `_helper` would (test it through the public function,
    or make the seam public); so is `monkeypatch.setattr(mod, "_helper", ...)`."""
    files = sorted([*(ROOT / "tests").glob("*.py"), *(ROOT / "bench").glob("*.py")])
    bad = [hit for path in files for hit in private_reads(path)]
    assert not bad, "private attributes of virtbench modules read (make them public, or use the public API):\n" + \
        "\n".join(bad)


def test_the_private_attribute_check_finds_each_way_of_naming_a_module_or_class(tmp_path):
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "helper.py").write_text("")
    script = tmp_path / "tests" / "test_x.py"
    script.write_text("import virtbench.render as r\nimport virtbench.run.checks\nimport helper\n"
                      "from virtbench.run import checks as c\nfrom virtbench import render\n"
                      "from virtbench.workloads.web import Web\n"
                      "r._a(); virtbench.run.checks._b; helper._c; c._d; render._e.f; Web._j\n"
                      "c.public; c.__name__; other._fine; import os; os._exit\n"
                      "mp.setattr(c, '_g', 1); mp.setattr('virtbench.render._h', 1); setattr(r, '_i', 1)\n"
                      "mp.setattr(c, 'public', 1); mp.setattr(other, '_fine', 1); mp.setattr('os._fine', 1)\n")
    assert sorted(hit.split(" ", 1)[1] for hit in private_reads(script, tmp_path)) == \
        ["Web._j", "c._d", "helper._c", "mp.setattr('virtbench.render._h', 1)", "mp.setattr(c, '_g', 1)", "r._a",
         "render._e", "setattr(r, '_i', 1)", "virtbench.run.checks._b"]


def test_no_unused_import_kept_for_the_linter():
    """An import kept only for its side effect or a fixture hides what a module uses (F401 silenced)."""
    silenced = re.compile(r"noqa" + r":[^#\n]*\bF401\b")
    bad = [f"{path.relative_to(ROOT)}:{n}" for path in PY_FILES
           for n, line in enumerate(path.read_text().splitlines(), 1) if silenced.search(line)]
    assert not bad, "imports kept with F401 silenced (import what you use; fixtures come from conftest.py):\n" + \
        "\n".join(bad)


def test_the_top_level_stays_small():
    """Issue 30's bar: at most 20 modules at the top of src/virtbench, and a driver's parts live in its
    package under drivers/ (no top-level vm/, pods/, cloud/, kubetestbed/, engine.py)."""
    top = sorted(p.name for p in (SRC / "virtbench").glob("*.py") if p.name not in ("__init__.py", "__main__.py"))
    assert len(top) <= 20, f"{len(top)} modules at the top of src/virtbench (at most 20; put new ones in a package): {top}"
    moved = [n for n in ("vm", "pods", "cloud", "kubetestbed", "engine.py") if (SRC / "virtbench" / n).exists()]
    assert not moved, f"driver parts at the top of src/virtbench, not in drivers/<name>/: {moved}"


def test_the_map_stays_one_page_and_points_to_the_package_readmes():
    text = DOC.read_text()
    assert len(text.splitlines()) <= 250, "docs/architecture.md is the one-page map: at most 250 lines"
    readmes = sorted(p.relative_to(ROOT).as_posix() for p in (SRC / "virtbench").rglob("README.md"))
    missing = [r for r in readmes if f"(../{r})" not in text]
    assert not missing, f"docs/architecture.md does not link these package READMEs: {missing}"


def test_string_registries_resolve():
    """The registries name what they load lazily as "module:attribute" strings (drivers, workloads,
    conditions, report sections, machine kinds): each must name something that exists, or a move or
    a rename breaks them only when that entry is first used."""
    import importlib

    bad = []
    for path in sorted((SRC / "virtbench").rglob("*.py")):
        for found in re.finditer(r'"(virtbench(?:\.\w+)+):(\w+)"', path.read_text()):
            module, attr = found.groups()
            try:
                if not hasattr(importlib.import_module(module), attr):
                    bad.append(f"{path.relative_to(ROOT)}: {module} has no {attr}")
            except ImportError as exc:
                bad.append(f"{path.relative_to(ROOT)}: {module}: {exc}")
    assert not bad, "registry entries that name nothing:\n" + "\n".join(bad)


def unresolved_imports(src: Path = SRC) -> list[str]:
    """Every import of virtbench's, module-level or inside a function (the lazy ones run only when
    that path is taken), that names a module which does not exist or a name its module lacks."""
    import importlib

    mods = modules(src)
    bad = []
    for mod, (path, is_pkg) in mods.items():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                wanted = [(a.name, None) for a in node.names if a.name.startswith("virtbench")]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = mod.split(".") if is_pkg else mod.split(".")[:-1]
                    target = ".".join(base[:len(base) - node.level + 1] + ([node.module] if node.module else []))
                else:
                    target = node.module or ""
                wanted = [(target, a.name) for a in node.names] if target.startswith("virtbench") else []
            else:
                continue
            for target, name in wanted:
                where = f"{path.relative_to(src)}:{node.lineno}"
                if target not in mods:
                    bad.append(f"{where}: no module {target}")
                elif name and f"{target}.{name}" not in mods and not hasattr(importlib.import_module(target), name):
                    bad.append(f"{where}: {target} has no {name}")
    return bad


def test_every_import_resolves_lazy_ones_too():
    """A rename that misses an import inside a function breaks only the command that reaches it."""
    bad = unresolved_imports()
    assert not bad, "imports that name nothing:\n" + "\n".join(bad)


def test_the_import_check_finds_a_lazy_import_of_a_renamed_module(tmp_path):
    pkg = tmp_path / "virtbench"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "backend.py").write_text("def f():\n    return 1\n")
    (pkg / "user.py").write_text("def g():\n    from .old_name import f\n    return f()\n")
    assert unresolved_imports(tmp_path) == ["virtbench/user.py:2: no module virtbench.old_name"]


def test_the_docs_show_these_layers():
    """docs/architecture.md's layer diagram has a row per entry of LAYERS, in this order, that starts
    with its title and names its modules (packages as `vm/`, `vm/lifecycle`)."""
    text = DOC.read_text()
    block = text[text.index("## Layers"):]
    block = block[block.index("```") + 3:]
    rows = [ln for ln in block[:block.index("```")].splitlines() if ln.strip()]
    assert [row.split("  ")[0] for row in rows] == [title for title, _ in LAYERS]
    for row, (title, names) in zip(rows, LAYERS):
        named = {n.replace("/", ".") for n in re.findall(r"[a-z_*]+(?:/[a-z_]+)*", row[len(title):])}
        assert set(names) <= named, f"layer {title!r}: docs/architecture.md does not name {set(names) - named}"


# -- the checks check, on small packages ----------------------------------------------------------

CASES = {
    "a lazy circle and an upward import under TYPE_CHECKING": (
        {"paths.py": "def f():\n    from . import kernels\n",
         "kernels.py": "from . import paths\n",
         "machines/__init__.py": "",
         "machines/base.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from ..drivers import x\n",
         "drivers/__init__.py": ""},
        ("virtbench.paths", {"virtbench.kernels": 2}),
        [["virtbench.kernels", "virtbench.paths"]],
        ["virtbench.machines.base (layer 'the seam', line 3) imports virtbench.drivers (layer 'make instances', "
         "above it)"]),
    "a submodule's import of its sibling is no dependency on its package": (
        {"monitor/__init__.py": "from .session import Session\n",
         "monitor/session.py": "from . import series\n",
         "monitor/series.py": ""},
        ("virtbench.monitor.session", {"virtbench.monitor.series": 1}), [], []),
    "importing a submodule from outside runs its package": (
        {"cli/__init__.py": "from ..cli_reproduce import reproduce\n",
         "cli/common.py": "",
         "cli_reproduce.py": "def reproduce():\n    from .cli.common import out\n"},
        ("virtbench.cli_reproduce", {"virtbench.cli": 2, "virtbench.cli.common": 2}),
        [["virtbench.cli", "virtbench.cli_reproduce"]], []),
}


@pytest.mark.parametrize("case", CASES)
def test_the_checks_on_a_small_package(tmp_path, case):
    files, (module, deps), found, bad = CASES[case]
    for rel, text in {"__init__.py": "", **files}.items():
        path = tmp_path / "src" / "virtbench" / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    graph = imports(tmp_path / "src")
    assert graph[module] == deps
    assert circles(graph) == found
    assert against_layers(graph) == bad


# -- C: no circle of calls between the translation units of one program ------------------------------

_DEF = re.compile(r"^[A-Za-z_][\w \t\*]*?\b(vb_\w+)\s*\([^;{]*\)\s*\{", re.M)
_USE = re.compile(r"\b(vb_\w+)\s*\(")


def c_units(directory: Path) -> dict[str, set[str]]:
    """Translation unit -> the other units whose vb_ functions it calls."""
    texts = {p.name: re.sub(r"/\*.*?\*/|//[^\n]*", "", p.read_text(), flags=re.S)
             for p in sorted(directory.glob("*.c"))}
    defined = {name: unit for unit, text in texts.items() for name in _DEF.findall(text)}
    return {unit: {defined[n] for n in _USE.findall(text) if defined.get(n, unit) != unit}
            for unit, text in texts.items()}


NATIVE_PROGRAMS = sorted(p.parent for p in (ROOT / "native").glob("*/Makefile") if list(p.parent.glob("*.c")))


@pytest.mark.parametrize("directory", NATIVE_PROGRAMS, ids=lambda p: p.name)
def test_no_c_circle(directory):
    found = circles(c_units(directory))
    assert not found, f"{directory.name}: translation units that call each other: {found}"


def test_the_c_check_finds_a_circle(tmp_path):
    (tmp_path / "harness.c").write_text("void vb_die(int s)\n{\n    vb_scratch_remove();\n}\n")
    (tmp_path / "scratch.c").write_text("/* vb_none() */\nvoid vb_scratch_remove(void) {\n    vb_die(1);\n}\n")
    assert c_units(tmp_path) == {"harness.c": {"scratch.c"}, "scratch.c": {"harness.c"}}
    assert circles(c_units(tmp_path)) == [["harness.c", "scratch.c"]]
