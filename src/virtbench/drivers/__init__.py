"""Driver registry: one line per driver, imported lazily so a missing tool never breaks the CLI.

A suite, a stored run and a study name an environment's driver by its kind (EnvSpec.driver). Most
kinds are one driver; `pods` is two (kube play here, a Kubernetes cluster), chosen by the option
`backend`: ALIASES maps the kind to the driver, here and nowhere else. Results keep the kind."""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import Any

from .base import set_traits_lookup
from .base import Driver, DriverContext, Instance, Traits
from ..model import EnvSpec

REGISTRY: dict[str, str] = {
    "host": "virtbench.drivers.host.driver:HostDriver",
    "container": "virtbench.drivers.container.driver:ContainerDriver",
    "vm": "virtbench.drivers.vm.driver:VmDriver",
    "ssh": "virtbench.drivers.ssh.driver:SshDriver",
    "cloud": "virtbench.drivers.cloud.driver:CloudDriver",
    "kube-play": "virtbench.drivers.pods.kubeplay_driver:KubePlayDriver",
    "kubernetes": "virtbench.drivers.pods.kubernetes_driver:KubernetesDriver",
}

# kind -> (the option that picks the driver, {its value: driver}, the default value)
ALIASES: dict[str, tuple[str, dict[str, str], str]] = {
    "pods": ("backend", {"kube-play": "kube-play", "kubernetes": "kubernetes"}, "kube-play"),
}


def names() -> list[str]:
    """The kinds a suite, a run or a study may name (pods, not its two drivers)."""
    aliased = {d for _, choices, _ in ALIASES.values() for d in choices.values()}
    return sorted({n for n in REGISTRY if n not in aliased} | set(ALIASES))


def implementations() -> list[str]:
    """Every driver of the registry (doctor checks each)."""
    return sorted(REGISTRY)


def resolve(kind: str, options: Mapping[str, Any] | None = None) -> str:
    """The driver that runs kind `kind` with `options` (KeyError: no such kind, or a bad alias value)."""
    if kind in ALIASES:
        key, choices, default = ALIASES[kind]
        return choices[(options or {}).get(key, default)]
    if kind not in REGISTRY:
        raise KeyError(kind)
    return kind


def driver_class(name: str, options: Mapping[str, Any] | None = None) -> type[Driver]:
    """The class of driver or kind `name` (an alias without options: its default driver)."""
    module, _, attr = REGISTRY[resolve(name, options)].partition(":")
    return getattr(importlib.import_module(module), attr)


def class_for(env: EnvSpec) -> type[Driver]:
    return driver_class(env.driver, env.options)


def traits_of(name: str) -> Traits:
    """What the instances of kind `name` are (Traits() for an unknown name; an alias: its default driver's)."""
    return driver_class(name).traits if name in REGISTRY or name in ALIASES else Traits()


def traits_for(env: EnvSpec) -> Traits:
    """What the instances of environment `env` are, its options included (Traits() for an unknown driver)."""
    try:
        cls = class_for(env)
    except KeyError:
        return Traits()
    return cls.traits_for(env)


set_traits_lookup(traits_for)


def make(name: str, context: DriverContext, options: Mapping[str, Any] | None = None) -> Driver:
    return driver_class(name, options)(context)


__all__ = ["Driver", "DriverContext", "Instance", "REGISTRY", "ALIASES", "names", "implementations", "resolve",
           "driver_class", "class_for", "make", "traits_of", "traits_for", "Traits"]
