"""Running local processes with a timeout that kills the whole process group."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Mapping, Sequence

from .model import ExecResult


@contextlib.contextmanager
def interrupts_held():
    """Ctrl-C and SIGTERM ignored inside: for teardown, which a second Ctrl-C must not cut short
    (that would leak the instances not yet removed). A no-op outside the main thread."""
    try:
        old_int = signal.signal(signal.SIGINT, signal.SIG_IGN)
        old_term = signal.signal(signal.SIGTERM, signal.SIG_IGN)
    except ValueError:
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, old_int)
        signal.signal(signal.SIGTERM, old_term)


def fan_out(fn: Callable[[int], None], count: int) -> None:
    """fn(0) .. fn(count - 1), each in its own thread, all at once; returns when all have returned.
    Joins in short steps so that Ctrl-C reaches the calling thread meanwhile (a plain join() would
    hold it off until every thread ends); on Ctrl-C the caller tears down what the threads made."""
    threads = [threading.Thread(target=fn, args=(k,), daemon=True) for k in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        while t.is_alive():
            t.join(0.2)


def run(argv: Sequence[str], timeout: float | None = None, stdin: bytes | None = None,
        env: Mapping[str, str] | None = None, cwd: str | None = None) -> ExecResult:
    """Run argv (never through a shell); on timeout kill its process group, not just the leader."""
    argv = [str(a) for a in argv]
    full_env = None
    if env:
        full_env = dict(os.environ)
        full_env.update(env)
    started = time.time()
    try:
        proc = subprocess.Popen(argv, stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=full_env, cwd=cwd,
                                start_new_session=True)
    except FileNotFoundError as exc:
        now = time.time()
        return ExecResult(argv, 127, "", f"{exc.filename}: not found", started, now)
    timed_out = False
    try:
        out, err = proc.communicate(stdin, timeout=timeout)
    except subprocess.TimeoutExpired:
        timed_out = True
        kill_group(proc)
        out, err = proc.communicate()
    except BaseException:
        # Ctrl-C or any other interruption: leave nothing running behind us.
        kill_group(proc)
        proc.communicate()
        raise
    return ExecResult(argv, proc.returncode, out.decode(errors="replace"), err.decode(errors="replace"),
                      started, time.time(), timed_out)


def kill_group(proc: subprocess.Popen, grace: float = 2.0) -> None:
    """SIGTERM the group, then SIGKILL whatever is left after `grace` seconds."""
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue
