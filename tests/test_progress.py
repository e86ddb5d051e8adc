"""The progress bar's count (progress.Outlook): it starts from what the run is sure to do, grows when
a warm-up or the stop rule asks for more, shrinks when an environment stops early, never falls below
what is done, and ends at its total. Bookkeeping on its own, then real short runs on the host."""

import io

import pytest
from rich.console import Console

from virtbench.run import plan
from virtbench import suite
from virtbench.cli.run import progress_bar, ProgressEvents
from virtbench.model import Sample
from virtbench.run.progress import Eta, Outlook, hms
from virtbench.run.runner import Events, Runner
from virtbench.store import Store


def test_the_count_starts_from_the_sure_part_and_grows_with_extra_rounds():
    o = Outlook()
    for env in ("host", "vm"):
        o.expect("c1", env, warmups=1, rounds=2, seconds=1.0 if env == "host" else 9.0)
    assert (o.done, o.total) == (0, 6) and o.total_seconds == 30.0
    for env in ("host", "vm"):
        o.attempt("c1", env, warmup=True)
    for _ in range(2):
        for env in ("host", "vm"):
            o.attempt("c1", env, warmup=False)
    assert (o.done, o.total) == (6, 6)
    o.attempt("c1", "host", warmup=False)  # a third round: the vm takes it too
    assert (o.done, o.total) == (7, 8) and o.total_seconds == 30.0 + 10.0
    o.attempt("c1", "vm", warmup=False)
    o.stopped("c1", "host")
    o.stopped("c1", "vm")
    assert (o.done, o.total) == (8, 8) and o.done_seconds == o.total_seconds == 40.0


def test_auto_warmup_beyond_the_expected_two_and_an_early_end_of_the_warm_up():
    o = Outlook()
    o.expect("c1", "host", warmups=2, rounds=3, seconds=None)
    o.expect("c2", "host", warmups=2, rounds=3, seconds=None)
    for _ in range(4):  # not steady until the 4th
        o.attempt("c1", "host", warmup=True)
    assert (o.done, o.total) == (4, 4 + 3 + 5)
    o.attempt("c2", "host", warmup=True)  # a failed warm-up ends it after one
    o.attempt("c2", "host", warmup=False)
    assert o.total == 4 + 3 + 1 + 3
    assert o.total_seconds == o.total  # no estimate anywhere: a plain count


def test_a_skipped_or_given_up_environment_leaves_the_count_and_others_keep_theirs():
    o = Outlook()
    for env in ("a", "b"):
        o.expect("c1", env, warmups=0, rounds=10, seconds=2.0)
    o.attempt("c1", "b", warmup=False)
    o.stopped("c1", "b")  # skipped: a condition this machine lacks
    assert (o.done, o.total) == (1, 11)
    for _ in range(12):
        o.attempt("c1", "a", warmup=False)
    assert (o.done, o.total) == (13, 13)  # b, stopped, takes none of a's extra rounds
    # an unknown estimate weighs the mean of the known ones
    o.expect("c2", "a", warmups=0, rounds=1, seconds=None)
    assert o.total_seconds == 2.0 * 13 + 2.0


class _Watch(Events):
    def __init__(self):
        self.seen = []

    def planned(self, outlook):
        self.outlook = outlook
        self.seen.append(("planned", outlook.done, outlook.total))

    def attempt(self, cell, env, repetition, warmup, status, reason):
        self.seen.append(("attempt", self.outlook.done, self.outlook.total))


SUITE = """\
[suite]
name = "p"
baseline = "a"
warmup = {warmup}
monitor = false
min_repetitions = 6
max_repetitions = {max}
ci_target = {target}

[environments.a]
driver = "host"

[environments.b]
driver = "host"

[[workloads]]
name = "system"
params = {{ duration = 0.05, test = ["dhrystone", "syscall"], copies = "1" }}
"""


def _run(tmp_path, events, **kw):
    """A real run of two cells (one table of 2 comparisons: its stop rule cannot stop before 7
    rounds) on two host environments; the plan's lower count of runs beside it."""
    path = tmp_path / "p.toml"
    path.write_text(SUITE.format(**{"warmup": 1, "max": 9, "target": 1e-9, **kw}))
    store = Store(tmp_path / "r.sqlite")
    matrix = suite.load(path)
    sure = plan.make(matrix, store=store).repetitions[0]
    rid = Runner(store, matrix, events=events).start()
    return store, rid, sure


def test_a_real_run_that_goes_past_its_minimum_ends_at_its_total(tmp_path):
    """A target never met: each cell runs its 9 rounds where the count started at 7 (plus a warm-up),
    the plan's lower count."""
    watch = _Watch()
    store, rid, sure = _run(tmp_path, watch)
    attempts = len(store.attempts(rid))
    assert attempts == 2 * 2 * (1 + 9)
    assert watch.seen[0] == ("planned", 0, 2 * 2 * (1 + 7)) and sure == 2 * 2 * (1 + 7)
    counts = [s[1:] for s in watch.seen[1:]]
    assert [done for done, _ in counts] == list(range(1, attempts + 1))
    assert all(done <= total for done, total in counts)
    assert counts[-1] == (attempts, attempts)
    totals = [total for _, total in counts]
    assert totals == sorted(totals) and totals[0] < totals[-1]  # it grew as the rounds were asked for


def test_a_real_run_that_stops_at_its_minimum_keeps_its_first_count(tmp_path):
    watch = _Watch()
    store, rid, sure = _run(tmp_path, watch, target=10.0, warmup='"auto"')
    warm = sum(a["warmup"] for a in store.attempts(rid))
    assert watch.seen[0] == ("planned", 0, 2 * 2 * (2 + 7)) and sure == 2 * 2 * (2 + 7)
    assert watch.seen[-1][1:] == (len(store.attempts(rid)),) * 2 == (2 * 2 * 7 + warm,) * 2
    if warm == 2 * 2:  # every warm-up steady after two: nothing to learn
        assert {s[2] for s in watch.seen} == {sure}


def test_the_bar_the_cli_draws_ends_full_with_its_count(tmp_path):
    console = Console(file=io.StringIO(), force_terminal=True, width=160)
    with progress_bar(console) as progress:
        events = ProgressEvents(progress)
        store, rid, _ = _run(tmp_path, events, max=8)
        task = progress.tasks[0]
        assert task.total == task.completed > 0
        attempts = len(store.attempts(rid))
        assert task.fields["count"] == f"{attempts}/{attempts}" and task.fields["eta"] == "0:00:00"


def test_the_eta_keeps_its_pace_when_the_total_grows_and_reads_the_last_window():
    eta = Eta(window=100.0)
    assert eta.left(50.0) is None
    eta.add(0.0, 0.0)
    assert eta.left(50.0) is None  # no attempt has ended: no pace
    eta.add(10.0, 5.0)  # 5 estimated seconds in 10 s: half the estimates' pace
    assert eta.left(50.0) == 90.0
    assert eta.left(60.0) == 110.0  # the total grew: more time left, at the same pace
    eta.add(200.0, 105.0)  # one long stretch: the window starts at the last point before it
    assert eta.left(125.0) == pytest.approx(20.0 * 190.0 / 100.0)
    eta.add(210.0, 125.0)
    assert eta.left(125.0) == 0.0
    assert (hms(None), hms(0.4), hms(3725.0)) == ("-:--:--", "0:00:00", "1:02:05")


def test_a_retry_counts_only_the_failed_cells(tmp_path):
    """--retry-failed: the count starts from the retried cell's warm-up and rounds, not the whole run's."""
    path = tmp_path / "p.toml"
    path.write_text(SUITE.format(warmup=1, max=7, target=1e-9))
    matrix = suite.load(path)
    store = Store(tmp_path / "r.sqlite")
    rid = store.create_run(matrix.to_spec(), suite_name=matrix.name, suite_path=None, baseline=matrix.baseline,
                           command="t")
    good, bad = matrix.cells
    for r in range(7):
        for env in "ab":
            store.record_attempt(rid, good, env, r, warmup=False, status="ok", started=0, ended=1,
                                 samples_=[Sample("dhrystone", 1e6 + r, "lps", True, {})],
                                 sample_metadata={"repetition": r, "round": r})
    for env in "ab":
        store.record_attempt(rid, bad, env, 0, warmup=False, status="failed", started=0, ended=1,
                             reason="a fault that has gone since")
    store.set_status(rid, "completed")
    watch = _Watch()
    Runner(store, None, events=watch).resume(rid, retry_failed=True)
    new = len(store.attempts(rid)) - 7 * 2 - 2
    assert watch.seen[0] == ("planned", 0, 2 * (1 + 7)) and new == 2 * (1 + 7)
    assert watch.seen[-1][1:] == (new, new)
