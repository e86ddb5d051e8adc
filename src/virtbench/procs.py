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
def _handling(handler, signals=(signal.SIGINT, signal.SIGTERM)):
    """`handler` for `signals` inside the block, the previous handlers after it. Only the main
    thread may set handlers: elsewhere the block runs as it is."""
    try:
        previous = [(sig, signal.signal(sig, handler)) for sig in signals]
    except ValueError:  # not the main thread (the first signal call raises, so nothing was changed)
        yield
        return
    try:
        yield
    finally:
        for sig, old in previous:
            signal.signal(sig, old)


def interrupts_held():
    """Ctrl-C and SIGTERM ignored inside: for teardown, which a second Ctrl-C must not cut short
    (that would leak the instances not yet removed). A no-op outside the main thread."""
    return _handling(signal.SIG_IGN)


@contextlib.contextmanager
def interrupts_deferred():
    """Ctrl-C and SIGTERM held until the block ends, then raised as KeyboardInterrupt: for teardown
    in the normal course of a run, which an interrupt must neither cut in half (leaking what is not
    yet removed) nor lose. A no-op outside the main thread."""
    got: list[int] = []
    with _handling(lambda signum, frame: got.append(signum)):
        yield
    if got:  # reached only when the block ended without an exception of its own
        raise KeyboardInterrupt(f"signal {got[0]}")


def sigterm_as_interrupt():
    """SIGTERM raised as Ctrl-C (KeyboardInterrupt) in the main thread, so `kill` or a cancelled CI
    job tears everything down the way Ctrl-C does. A no-op outside the main thread."""
    def handler(signum, frame):
        raise KeyboardInterrupt(f"signal {signum}")
    return _handling(handler, (signal.SIGTERM,))


def fan_out(fn: Callable[[int], None], count: int, on_interrupt: Callable[[], None] | None = None) -> None:
    """fn(0) .. fn(count - 1), each in its own thread, all at once; returns when all have returned.
    Waits in short steps so that Ctrl-C reaches the calling thread meanwhile (a plain join() would
    hold it off until every thread ends). On Ctrl-C (or SIGTERM, see sigterm_as_interrupt) the
    threads' commands are stopped (`on_interrupt`, then every command procs.run has running) and the
    threads are waited for before the interrupt goes on, so that what they made is known to the
    caller, which tears it down, and no command started here finishes after that teardown.
    Each thread's end is its own Event: a Thread.join() cut short by KeyboardInterrupt can leave
    is_alive() False for a thread that still runs (CPython before 3.13)."""
    done = [threading.Event() for _ in range(count)]

    def body(k: int) -> None:
        try:
            fn(k)
        finally:
            done[k].set()

    threads = [threading.Thread(target=body, args=(k,), daemon=True) for k in range(count)]
    started: list[threading.Event] = []
    try:
        for k, t in enumerate(threads):
            t.start()
            started.append(done[k])
        for ev in done:
            while not ev.wait(0.2):
                pass
    except BaseException:
        with interrupts_held():
            if on_interrupt:
                on_interrupt()
            _stop_live(started)
        raise


_live: set[subprocess.Popen] = set()
_live_lock = threading.Lock()


def _stop_live(ends: list[threading.Event], grace: float = 10.0, bound: float = 120.0) -> None:
    """SIGTERM every process group procs.run has running, SIGKILL those of them still there after
    `grace` seconds, and wait (at most `bound` seconds) for every event of `ends` (the threads' ends).
    Commands the threads start after this (their own clean-up: removing what a stopped command half
    made) are let be."""
    deadline = time.monotonic() + bound
    with _live_lock:
        stopped = list(_live)
    for sig, until in ((signal.SIGTERM, time.monotonic() + grace), (signal.SIGKILL, deadline)):
        for proc in stopped:
            if proc.returncode is None:
                try:
                    os.killpg(proc.pid, sig)
                except (ProcessLookupError, PermissionError):
                    pass
        for ev in ends:
            ev.wait(max(0.0, until - time.monotonic()))
        if all(ev.is_set() for ev in ends):
            return


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
    with _live_lock:
        _live.add(proc)
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
    finally:
        with _live_lock:
            _live.discard(proc)
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
