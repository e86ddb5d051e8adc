"""What a study file (studies/NNN.toml, or a user's own) holds once loaded: its experiments with their
tiers (what `virtbench reproduce` plans and runs) and its findings (what it scores). Plain data;
studyfile.py reads and validates the files."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class Tier:
    label: str                          # what this scale is, in words
    repeat: int                         # repetitions per cell and environment
    estimate_s: float                   # prior: seconds on a busy 2-core machine (TCG only)
    params: dict[str, Any] = field(default_factory=dict)      # overrides (workloads without the key ignore it)
    select: dict[str, Any] = field(default_factory=dict)      # extra cell filter: param -> allowed values
    conditions: tuple[dict[str, Any], ...] = ()               # replaces each cell's condition by each of these
    boot: dict[str, Any] = field(default_factory=dict)        # boot grids: sizes_gb, scale, concurrency
    # More repetitions of the largest scale where an interval reached both sides of a tolerance: the
    # planner takes it only once every kept experiment is at its largest ordinary scale.
    extra: bool = False


@dataclass(frozen=True)
class Experiment:
    id: str
    study: str
    title: str
    suite: str                          # the suite file as the study file names it
    envs: tuple[str, ...] = ()          # the suite's environment names (the first is the baseline if no host)
    workload: str = ""                  # which [[workloads]] entries: by name
    where: dict[str, Any] = field(default_factory=dict)       # cell filter: param -> allowed values (None: unset)
    condition_where: dict[str, Any] = field(default_factory=dict)
    tiers: tuple[Tier, ...] = ()
    needs: tuple[str, ...] = ()         # kvm, cluster, nfs, cloud (see studyfile.NEEDS)
    kvm_envs: tuple[str, ...] = ()      # environments added where KVM works (VMs under TCG count for nothing)
    boot: bool = False                  # a boot grid (`virtbench boot`) rather than a workload suite
                                        # (envs: its driver, the vm one when not given)
    same: tuple[str, ...] = ()          # params that must be equal in a kept cell (ranks = instances)
    note: str = ""                      # what differs from the study, beyond the suite's own comments
    # Instances on separate machines are the study's own layout: with --inventory the inventory's SSH
    # hosts (environment `hosts`, one instance per host) and with --cloud the cloud's instances
    # (environment `cloud`, the study's m1.small) also run every cell this environment runs.
    remote_like: str = ""
    remote_hosts: int = 0               # hosts the largest cell needs (one instance per host)
    suite_path: str = ""                # the suite file resolved against the study file ("" : suites/<suite>)
    priority: int = 100                 # what a budget keeps first: lower first, then file order

    @property
    def top(self) -> int:
        """The index of its largest ordinary tier (the extra ones, more repetitions, come after it)."""
        return max(i for i, t in enumerate(self.tiers) if not t.extra)

    def suite_file(self) -> Path:
        from .. import paths

        return Path(self.suite_path) if self.suite_path else paths.suites_dir() / self.suite


@dataclass(frozen=True)
class Revision:
    date: str        # YYYY-MM-DD
    change: str      # what changed in the finding
    why: str         # and why; a change made after results were seen says which result


@dataclass(frozen=True)
class PublishedGroup:
    """The study's own numbers for one measured group a rule reads (`of`: the rule's argument, e.g.
    num, den, select, chain.1, fine), scored as if measured (`reproduce --published`)."""
    of: str
    values: tuple[float, ...]
    params: dict[str, Any] = field(default_factory=dict)      # concrete values for "max"/"best" keys and x
    condition: dict[str, Any] = field(default_factory=dict)
    kind: str = ""                                            # "" : the selector's first kind


@dataclass(frozen=True)
class Published:
    source: str                          # where the numbers are printed (table, figure, text)
    groups: tuple[PublishedGroup, ...]
    repetitions: int | None = None       # runs behind each printed value, where the study says
    higher_is_better: bool = True        # the quantity's direction (a "best" selector picks by it)


@dataclass(frozen=True)
class Finding:
    id: str
    study: str
    finding: str          # the finding in short, in English
    quote: str            # the study's words, verbatim, in its own language
    quote_en: str         # an English rendering of the quote
    cite: str             # where the study says it: section, table or figure
    quantity: str         # what we compute
    tolerance: str        # the rule in words
    derivation: str       # where the tolerance's numbers come from (the study's numbers or words)
    could_fail: str       # what result on a user's platform would make it "differs"
    rule: str             # a rule of score.py
    args: dict[str, Any] = field(default_factory=dict)
    needs: tuple[str, ...] = ()
    unmeasurable: str = ""
    published: Published | None = None
    revised: tuple[Revision, ...] = ()


@dataclass(frozen=True)
class Study:
    id: str
    title: str
    path: str                           # the file it was read from
    sha256: str                         # of the file's bytes: what a scorecard was scored with
    experiments: tuple[Experiment, ...] = ()
    findings: tuple[Finding, ...] = ()
    left_out: dict[str, str] = field(default_factory=dict)    # parts of the study never run, and why
    source: str = ""                    # the publication
    builtin: bool = False
