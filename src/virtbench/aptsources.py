"""Where this machine's apt gets Debian packages: its sources for one suite and its proxies.

The guest image is built from the mirrors the machine's own apt uses, so a mirror or proxy the user
configured is honoured and no package host is written into virtbench. apt itself reads the
configuration (one-line `sources.list`, deb822 `*.sources`, `Dir::Etc` overrides): `apt-get
indextargets` prints every index it would fetch, `apt-config dump` every setting.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shlex
from functools import lru_cache
from pathlib import Path

from . import paths, procs


def parse_indextargets(text: str, suite: str) -> tuple[str, ...]:
    """One-line sources ("deb URI RELEASE COMPONENTS") for `suite` and its companions
    (`suite-updates`, `suite-security`, ...) from `apt-get indextargets --format` output of
    tab-separated TARGET_OF, REPO_URI, RELEASE, COMPONENT; in apt's order, components merged."""
    order: list[tuple[str, str]] = []
    components: dict[tuple[str, str], list[str]] = {}
    for line in text.splitlines():
        fields = line.split("\t")
        if len(fields) != 4 or fields[0] != "deb":
            continue
        _, uri, release, component = fields
        if release != suite and not release.startswith(suite + "-"):
            continue
        key = (uri.rstrip("/"), release)
        if key not in components:
            order.append(key)
            components[key] = []
        if component and component not in components[key]:
            components[key].append(component)
    return tuple(f"deb {uri} {release} {' '.join(components[(uri, release)]) or 'main'}"
                 for uri, release in order)


INDEXTARGETS_FORMAT = "$(TARGET_OF)\t$(REPO_URI)\t$(RELEASE)\t$(COMPONENT)"


@lru_cache(maxsize=None)
def sources(suite: str) -> tuple[str, ...]:
    """This machine's apt sources for `suite`; empty when apt has none (another release, or no apt):
    the image builder then uses its own documented default. Kept in the user's data directory while
    apt's source files stay as they are (`sources_key`): `apt-get indextargets` takes most of a
    second, and every command that looks for the guest image asks."""
    key = sources_key(suite)
    cache = paths.data_dir("images") / "apt-sources.json"
    with contextlib.suppress(OSError, ValueError):
        kept = json.loads(cache.read_text())
        if kept.get("key") == key:
            return tuple(kept["sources"])
    # --no-release-info: the configured sources, even on a machine that never ran `apt-get update`
    res = procs.run(["apt-get", "indextargets", "--no-release-info", "--format", INDEXTARGETS_FORMAT],
                    timeout=60)
    found = parse_indextargets(res.stdout, suite) if res.ok else ()
    if res.ok:
        tmp = cache.with_name(f"{cache.name}.partial-{os.getpid()}")
        tmp.write_text(json.dumps({"key": key, "sources": list(found)}))
        os.replace(tmp, cache)
    return found


def sources_key(suite: str) -> str | None:
    """What the sources depend on: the suite and each of apt's source files (where apt's own
    configuration puts them) with its size and modification time; None without apt."""
    res = procs.run(["apt-config", "shell", "L", "Dir::Etc::sourcelist/f", "P", "Dir::Etc::sourceparts/d"],
                    timeout=30)
    if not res.ok:
        return None
    where = dict(shlex.split(line)[0].split("=", 1) for line in res.stdout.splitlines() if "=" in line)
    files = [Path(where["L"])] if where.get("L") else []
    if where.get("P") and Path(where["P"]).is_dir():
        files += sorted(Path(where["P"]).iterdir())
    stats = [(str(f), st.st_size, st.st_mtime_ns) for f in files if (st := _stat(f))]
    return hashlib.sha256(json.dumps([suite, os.environ.get("APT_CONFIG"), stats]).encode()).hexdigest()


def _stat(path: Path) -> os.stat_result | None:
    try:
        return path.stat()
    except OSError:
        return None


PROXY_KEYS = ("Acquire::http::Proxy", "Acquire::https::Proxy", "Acquire::ftp::Proxy")


def parse_proxies(dump: str) -> tuple[str, ...]:
    """The proxy settings (global and per host) of `apt-config dump` output, as apt option lines."""
    return tuple(line.strip() for line in dump.splitlines()
                 if line.strip().split(" ", 1)[0].startswith(PROXY_KEYS))


@lru_cache(maxsize=1)
def proxies() -> tuple[str, ...]:
    """This machine's apt proxy settings (none when there are none or apt is not there)."""
    res = procs.run(["apt-config", "dump"], timeout=60)
    return parse_proxies(res.stdout) if res.ok else ()
