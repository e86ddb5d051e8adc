"""The experiments of `virtbench reproduce`: the built-in study files' (studies/NNN.toml), each naming a
suite, the environments and cells of it that bear on the studies' findings, and its tiers (scales)
with a prior estimate each, in priority order (reproduce.py plans and runs them); and the names of
the environments beyond this machine a reproduce run adds."""

from __future__ import annotations

from .studies import studyfile
from .studies.model import Experiment

REMOTE_ENV = "hosts"  # the environment of the inventory's SSH hosts in a reproduce run
CLOUD_ENV = "cloud"   # the environment of the --cloud settings' instances
PLATFORM_ENVS = (REMOTE_ENV, CLOUD_ENV)
CLOUD_SHAPE = "m1.small"  # the studies' instance type (EC2 and Eucalyptus name it; shape_map maps it elsewhere)


def builtin_experiments() -> tuple[Experiment, ...]:
    """The built-in studies' experiments in priority order: what a budget keeps first."""
    return tuple(sorted((e for s in studyfile.builtin() for e in s.experiments), key=lambda e: e.priority))


EXPERIMENTS: tuple[Experiment, ...] = builtin_experiments()
# Parts of the studies never run, and why (the study files' [[left_out]]).
LEFT_OUT_ALWAYS = {k: v for s in studyfile.builtin() for k, v in s.left_out.items()}
