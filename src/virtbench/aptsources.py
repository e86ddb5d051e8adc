"""Where this machine's apt gets Debian packages: its sources for one suite and its proxies.

The guest image is built from the mirrors the machine's own apt uses, so a mirror or proxy the user
configured is honoured and no package host is written into virtbench. apt itself reads the
configuration (one-line `sources.list`, deb822 `*.sources`, `Dir::Etc` overrides): `apt-get
indextargets` prints every index it would fetch, `apt-config dump` every setting.
"""

from __future__ import annotations

from functools import lru_cache

from . import procs


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
    the image builder then uses its own documented default."""
    # --no-release-info: the configured sources, even on a machine that never ran `apt-get update`
    res = procs.run(["apt-get", "indextargets", "--no-release-info", "--format", INDEXTARGETS_FORMAT],
                    timeout=60)
    return parse_indextargets(res.stdout, suite) if res.ok else ()


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
