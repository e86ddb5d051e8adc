"""Instance states by polling DescribeInstances, every `interval` seconds (0.1 by default).

One call per interval covers every instance being waited on (a filter on instance-id, which
unlike InstanceIds does not fail on an id the API does not list yet: EC2 is eventually
consistent right after RunInstances), so 8 concurrent starts load the API like one.
Each observation records when it arrived and the window in which the change happened: from the
previous call's request (state not yet reached) to this call's answer (reached).
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

from .ec2 import CloudApiError, Ec2

TERMINAL = ("terminated",)
FAILED = ("shutting-down", "terminated", "stopping", "stopped")  # a start that can no longer succeed


class StateTimeout(Exception):
    def __init__(self, instance_id: str, want: str, timeout: float, last: str):
        super().__init__(f"instance {instance_id} did not reach {want} within {timeout:g} s (last state: {last})")
        self.last_state = last


@dataclass
class _Watch:
    want: tuple[str, ...]
    give_up: tuple[str, ...]
    last: str
    done: threading.Event = field(default_factory=threading.Event)
    seen_at: float | None = None
    window: float | None = None
    error: Exception | None = None
    asked: float | None = None  # when the previous call that covered this instance was sent


class StatePoller:
    def __init__(self, ec2: Ec2, interval: float = 0.1):
        self.ec2 = ec2
        self.interval = interval
        self._watches: dict[str, _Watch] = {}
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def wait(self, instance_id: str, want: tuple[str, ...], timeout: float, last: str = "pending",
             give_up: tuple[str, ...] = ()) -> tuple[str, float, float]:
        """Block until the instance is in one of `want` (or `give_up`): (state, seen at, window s).
        Raises StateTimeout with the last state seen, or CloudApiError."""
        w = _Watch(want, give_up, last)
        with self._lock:
            self._watches[instance_id] = w
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._loop, name="vb-cloud-poller", daemon=True)
                self._thread.start()
        try:
            if not w.done.wait(max(0.0, timeout)):
                raise StateTimeout(instance_id, "/".join(want), timeout, w.last)
        finally:
            with self._lock:
                self._watches.pop(instance_id, None)
        if w.error:
            raise w.error
        return w.last, w.seen_at or time.time(), w.window or 0.0

    def _loop(self) -> None:
        while True:
            with self._lock:
                ids = [i for i, w in self._watches.items() if not w.done.is_set()]
                if not ids:
                    self._thread = None
                    return
            sent = time.time()
            try:
                # ids are few (the starts in flight): one page holds them all
                resp = self.ec2("describe_instances", Filters=[{"Name": "instance-id", "Values": ids}])
                found = {inst["InstanceId"]: inst["State"]["Name"]
                         for res in resp.get("Reservations", []) for inst in res.get("Instances", [])}
                error = None
            except CloudApiError as exc:  # after botocore's retries: every waiter learns it
                found, error = {}, exc
            arrived = time.time()
            with self._lock:
                for iid in ids:
                    w = self._watches.get(iid)
                    if w is None:
                        continue
                    if error is not None:
                        w.error = error
                        w.done.set()
                        continue
                    if iid in found:
                        w.last = found[iid]
                    if w.last in w.want or w.last in w.give_up:
                        w.seen_at = arrived
                        w.window = arrived - (w.asked if w.asked is not None else sent)
                        w.done.set()
                    w.asked = sent
            time.sleep(max(0.0, self.interval - (time.time() - sent)))
