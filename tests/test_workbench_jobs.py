"""workbench.jobs.LatestOnly: debounce and stale-drop, driven deterministically (a manual timer, events)."""

from __future__ import annotations

import threading
from concurrent.futures import Future, ThreadPoolExecutor

import pytest

from workbench.jobs import LatestOnly


class ManualTimer:
    """``threading.Timer``'s interface; fires only when the test says so."""

    made: list[ManualTimer] = []

    def __init__(self, interval: float, fn, args=()):
        self.interval, self.fn, self.args = interval, fn, args
        self.started = self.cancelled = False
        ManualTimer.made.append(self)

    def start(self) -> None:
        self.started = True

    def cancel(self) -> None:
        self.cancelled = True

    def fire(self) -> None:
        self.fn(*self.args)


class InlineExecutor:
    """Runs each job at once, in the submitting thread."""

    def submit(self, fn, *args):
        f: Future = Future()
        try:
            f.set_result(fn(*args))
        except BaseException as e:  # noqa: BLE001
            f.set_exception(e)
        return f


@pytest.fixture(autouse=True)
def _fresh_timers():
    ManualTimer.made = []
    yield


def recorder(**kwargs):
    calls: dict[str, list] = {"work": [], "result": [], "error": [], "status": []}

    def work(request, ctx):
        calls["work"].append(request)
        ctx.status(f"working on {request}")
        if request == "boom":
            raise RuntimeError("does not compile")
        return f"result {request}"

    runner = LatestOnly(work, lambda r, res: calls["result"].append((r, res)),
                        lambda r, e: calls["error"].append((r, str(e))), calls["status"].append, **kwargs)
    return runner, calls


def test_requests_within_the_debounce_window_collapse_into_the_last():
    runner, calls = recorder(debounce_s=0.2, executor=InlineExecutor(), timer=ManualTimer)
    for value in (32, 64, 128):
        runner.submit(value)
    timers = ManualTimer.made
    assert [t.cancelled for t in timers] == [True, True, False]
    assert all(t.interval == 0.2 and t.started for t in timers)
    assert calls["work"] == [] and runner.busy
    timers[-1].fire()
    assert calls["work"] == [128] and calls["result"] == [(128, "result 128")]
    assert runner.dropped == 2 and not runner.busy and runner.wait(timeout=0)


def test_a_timer_that_fires_after_being_superseded_starts_nothing():
    runner, calls = recorder(debounce_s=0.2, executor=InlineExecutor(), timer=ManualTimer)
    runner.submit("old")
    runner.submit("new")
    ManualTimer.made[0].fire()  # raced past cancel(): must notice it is stale
    assert calls["work"] == []
    ManualTimer.made[1].fire()
    assert calls["work"] == ["new"] and calls["result"] == [("new", "result new")]


def test_supersede_cancels_a_pending_request():
    runner, calls = recorder(debounce_s=0.2, executor=InlineExecutor(), timer=ManualTimer)
    runner.submit(1)
    runner.supersede()  # e.g. the panel showed a cached result instead
    ManualTimer.made[0].fire()
    assert calls["work"] == [] and not runner.busy


def test_a_stale_result_is_dropped_and_the_newest_shown():
    pool = ThreadPoolExecutor(max_workers=1)
    started, release = threading.Event(), threading.Event()
    stale_seen = []
    shown = []

    def work(request, ctx):
        if request == "A":
            started.set()
            release.wait(10)
            stale_seen.append(ctx.stale())
        return request

    runner = LatestOnly(work, lambda r, res: shown.append(res), debounce_s=0, executor=pool)
    runner.submit("A")
    assert started.wait(10)
    runner.submit("B")  # while A is running
    release.set()
    assert runner.wait(10)
    assert stale_seen == [True]
    assert shown == ["B"]  # A finished, but its result was never shown
    assert runner.dropped == 1
    pool.shutdown()


def test_a_queued_request_that_went_stale_never_runs():
    pool = ThreadPoolExecutor(max_workers=1)
    gate = threading.Event()
    ran = []

    def work(request, ctx):
        ran.append(request)
        if request == 1:
            gate.wait(10)
        return request

    shown = []
    runner = LatestOnly(work, lambda r, res: shown.append(res), debounce_s=0, executor=pool)
    runner.submit(1)
    runner.submit(2)  # queued behind 1 ...
    runner.submit(3)  # ... and superseded before it starts
    gate.set()
    assert runner.wait(10)
    assert ran == [1, 3] and shown == [3]
    pool.shutdown()


def test_errors_are_reported_only_for_the_current_request():
    runner, calls = recorder(debounce_s=0, executor=InlineExecutor())
    runner.submit("boom")
    assert calls["error"] == [("boom", "does not compile")] and calls["result"] == []
    runner.submit(7)  # the runner keeps working after an error
    assert calls["result"] == [(7, "result 7")]
    assert calls["status"] == ["working on boom", "working on 7"]


def test_status_from_a_stale_job_is_ignored():
    pool = ThreadPoolExecutor(max_workers=1)
    started, release = threading.Event(), threading.Event()
    statuses = []

    def work(request, ctx):
        if request == "A":
            started.set()
            release.wait(10)
        ctx.status(f"phase of {request}")
        return request

    runner = LatestOnly(work, lambda r, res: None, on_status=statuses.append, debounce_s=0, executor=pool)
    runner.submit("A")
    started.wait(10)
    runner.submit("B")
    release.set()
    runner.wait(10)
    assert statuses == ["phase of B"]
    pool.shutdown()


def test_wait_times_out_while_a_request_is_pending():
    runner, _calls = recorder(debounce_s=0.2, executor=InlineExecutor(), timer=ManualTimer)
    runner.submit(1)
    assert runner.wait(timeout=0.01) is False
    ManualTimer.made[0].fire()
    assert runner.wait(timeout=0.01) is True


def test_run_later_is_counted_and_never_dropped():
    runner, _calls = recorder(debounce_s=0, executor=InlineExecutor())
    out = []
    runner.run_later(lambda: out.append(1))
    runner.submit(2)
    assert out == [1] and not runner.busy
