"""Driver registry: one line per driver, imported lazily so a missing tool never breaks the CLI."""

from __future__ import annotations

import importlib

from .base import set_traits_lookup
from .base import Driver, DriverContext, Instance, Traits
from ..model import EnvSpec

REGISTRY: dict[str, str] = {
    "host": "virtbench.drivers.host.driver:HostDriver",
    "container": "virtbench.drivers.container.driver:ContainerDriver",
    "vm": "virtbench.drivers.vm.driver:VmDriver",
    "ssh": "virtbench.drivers.ssh.driver:SshDriver",
    "cloud": "virtbench.drivers.cloud.driver:CloudDriver",
    "pods": "virtbench.drivers.pods.driver:PodsDriver",
}


def names() -> list[str]:
    return sorted(REGISTRY)


def driver_class(name: str) -> type[Driver]:
    if name not in REGISTRY:
        raise KeyError(name)
    module, _, attr = REGISTRY[name].partition(":")
    return getattr(importlib.import_module(module), attr)


def traits_of(name: str) -> Traits:
    """What the instances of driver `name` are (Traits() for an unknown name)."""
    return driver_class(name).traits if name in REGISTRY else Traits()


def traits_for(env: EnvSpec) -> Traits:
    """What the instances of environment `env` are, its options included (Traits() for an unknown driver)."""
    return driver_class(env.driver).traits_for(env) if env.driver in REGISTRY else Traits()


set_traits_lookup(traits_of)


def make(name: str, context: DriverContext) -> Driver:
    return driver_class(name)(context)


__all__ = ["Driver", "DriverContext", "Instance", "REGISTRY", "names", "driver_class", "make", "traits_of",
           "traits_for", "Traits"]
