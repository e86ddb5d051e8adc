"""Owner files of remote scratch directories: which leftovers this controller may remove."""

import subprocess

from virtbench.machines.owners import controller, owner_dead


def _dead_pid() -> int:
    p = subprocess.Popen(["true"])
    p.wait()
    return p.pid


def test_a_live_run_of_this_controller_is_not_dead():
    assert owner_dead(controller()) is False


def test_a_gone_process_of_this_controller_is_dead():
    me = controller()
    assert owner_dead({**me, "pid": _dead_pid()}) is True


def test_a_reused_pid_is_dead():
    me = controller()
    assert owner_dead({**me, "pidstart": "1"}) is True  # our pid, but another process's start time


def test_a_reboot_since_makes_every_owner_dead():
    me = controller()
    assert owner_dead({**me, "boot": "00000000-0000-0000-0000-000000000000"}) is True


def test_another_controller_or_no_owner_is_never_judged():
    assert owner_dead({**controller(), "pid": _dead_pid(), "host": "another-controller"}) is False
    assert owner_dead({}) is False
    assert owner_dead({**controller(), "pid": "12"}) is False
