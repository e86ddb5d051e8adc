"""Built-in instance shapes: the source studies' Eucalyptus instance types, plus 'native'."""

from __future__ import annotations

from .model import Shape

# From seeds/SUMMARY.md study 000: name -> (vCPUs, MB, GB disk).
BUILTIN: dict[str, Shape] = {
    "m1.small": Shape("m1.small", 1, 128, 2),
    "c1.medium": Shape("c1.medium", 1, 256, 5),
    "m1.large": Shape("m1.large", 2, 512, 10),
    "m1.xlarge": Shape("m1.xlarge", 2, 1024, 20),
    "c1.xlarge": Shape("c1.xlarge", 4, 2048, 20),
    # No limits: the instance sees the machine as the host does.
    "native": Shape("native", None, None, None),
}


def resolve(name: str, custom: dict[str, Shape] | None = None) -> Shape:
    """Look a shape up among the suite's own shapes first, then the built-in ones."""
    custom = custom or {}
    if name in custom:
        return custom[name]
    if name in BUILTIN:
        return BUILTIN[name]
    raise KeyError(name)


def names(custom: dict[str, Shape] | None = None) -> list[str]:
    return sorted(set(BUILTIN) | set(custom or {}))
