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
    now = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
    if getattr(now[0], "deferring", False) or now == (signal.SIG_IGN, signal.SIG_IGN):
        yield  # inside another such block (it raises at its end, after all it covers) or interrupts_held
        return
    got: list[int] = []

    def handler(signum, frame):
        got.append(signum)
    handler.deferring = True
    with _handling(handler):
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
    hold it off until every thread ends).

    On Ctrl-C (or SIGTERM, see sigterm_as_interrupt) without `on_interrupt`, the interrupt goes on at
    once and the caller tears down what the threads made. With it, `on_interrupt()` runs (it makes
    the threads give up: a driver's close() that stops QEMUs, a barrier's abort), then the threads
    are waited for, so that what they made is known to the caller and nothing they started comes up
    after its teardown: their commands are let finish for `settle` seconds (an engine command killed
    halfway can leave what the engine cannot remove, such as a start's network namespace), then
    stopped. Each thread's end is its own Event: a Thread.join() cut short by KeyboardInterrupt can
    leave is_alive() False for a thread that still runs (CPython before 3.13)."""
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
        if on_interrupt is not None:
            with interrupts_held():
                on_interrupt()
                _settle(started)
        raise


_live: set[subprocess.Popen] = set()
_live_lock = threading.Lock()


def _settle(ends: list[threading.Event], settle: float = 30.0, grace: float = 10.0, bound: float = 120.0) -> None:
    """Wait for every event of `ends` (the threads' ends): `settle` seconds as they are, then SIGTERM
    the commands procs.run had running by then, SIGKILL those still there after `grace` seconds, and
    wait until `bound` seconds have passed in all. Commands started after a signal (a thread's own
    clean-up of what a stopped command half made) are let be."""
    start = time.monotonic()

    def wait_until(t: float) -> bool:
        for ev in ends:
            ev.wait(max(0.0, t - time.monotonic()))
        return all(ev.is_set() for ev in ends)

    if wait_until(start + settle):
        return
    with _live_lock:
        stopped = list(_live)
    for sig, until in ((signal.SIGTERM, time.monotonic() + grace), (signal.SIGKILL, start + bound)):
        for proc in stopped:
            if proc.returncode is None:
                try:
                    os.killpg(proc.pid, sig)
                except (ProcessLookupError, PermissionError):
                    pass
        if wait_until(until):
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
