"""The driver interface lives in virtbench/instances.py (below drivers, vm/ and cpuset); these
names stay importable from here for drivers and their callers."""

from ..instances import (PHASES, DiskHotplug, Driver, DriverContext, Fleet, GuestRelay, Instance,  # noqa: F401
                         OptionSpec, Problem, Rebootable, ScratchSpace, SharedNfsMount, Snapshotting,
                         Traits, VolumeAttach)
