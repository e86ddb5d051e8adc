"""The one run session of `run`, `boot` and `check` (run/session.py): what it holds while a command
runs, and what its end does however the command ends. Quick: the host driver, no instances."""

from __future__ import annotations

import pytest

from virtbench.errors import UserError
from virtbench.machines import Pool, owners
from virtbench.run import checks
from virtbench.run.session import Session


@pytest.fixture
def drains(monkeypatch):
    """Pool.drain as it is, plus one leftover a late sweep removed, and a record of each call."""
    calls = []
    real = Pool.drain

    def drain(self, wait: float = 30.0):
        calls.append(self)
        return [*real(self, wait=0), "vb-late-leftover"]

    monkeypatch.setattr(Pool, "drain", drain)
    return calls


def test_a_session_owns_its_run_and_ends_with_the_drain_however_it_ends(drains):
    notes = []
    with pytest.raises(RuntimeError, match="the command failed"):
        with Session("test-session-1", note=notes.append) as session:
            workdir = session.workdir
            assert workdir.is_dir() and session.driver("host") is session.driver("host")
            assert owners.record()["run_id"] == "test-session-1"  # what it makes is the run's
            raise RuntimeError("the command failed")
    assert len(drains) == 1 and drains[0] is session.machines
    assert notes == ["removed a leftover of an earlier run: vb-late-leftover"]
    assert not workdir.exists()


def test_check_drains_the_pool_at_its_end(drains):
    """`virtbench check` used to close its pool without the final drain: what a sweep removed late
    never reached its log. The host driver offers no lifecycle checks, so it stops with that error;
    the session's end still drains and reports."""
    log = []
    with pytest.raises(UserError, match="offers no lifecycle checks"):
        checks.run_checks("host", log=log.append)
    assert len(drains) == 1
    assert "removed a leftover of an earlier run: vb-late-leftover" in log


def test_a_signal_inside_nested_deferral_is_raised_once_at_the_outer_end_and_held_stays_held():
    """What keeps a work directory and its owner file together (owners.local_workdir inside the
    monitor's or the session's own deferral; owners.remove_local inside the session's held end): a
    real SIGINT inside the inner block goes on only when the outer block ends, and never out of
    interrupts_held."""
    import os
    import signal

    from virtbench import procs

    reached, before = [], signal.getsignal(signal.SIGINT)
    with pytest.raises(KeyboardInterrupt):
        with procs.interrupts_deferred():
            with procs.interrupts_deferred():
                os.kill(os.getpid(), signal.SIGINT)
                reached.append("inner end")
            reached.append("outer end")  # the inner block did not raise
    assert reached == ["inner end", "outer end"]
    with procs.interrupts_held():
        with procs.interrupts_deferred():
            os.kill(os.getpid(), signal.SIGINT)
        reached.append("held")  # ignored, not raised by the deferral inside
    assert reached[-1] == "held" and signal.getsignal(signal.SIGINT) is before
