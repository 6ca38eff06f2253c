"""The harness that runs a module's crash-prone checks together in one child interpreter (tests/conftest.py,
``run_isolated_together``): a check that passes, one that fails with its traceback, one that kills the interpreter
(named by its signal) and one that the crash kept from running are each reported as such. The checks below are
this module's own; the module imports nothing heavy, so its child starts in a fraction of a second."""

from __future__ import annotations

import ctypes

import pytest


def check_passes() -> None:
    assert sum(range(5)) == 10


def check_fails() -> None:
    values = [3, 1, 2]
    assert sorted(values) == values, "the list is not sorted"


def check_crashes() -> None:
    ctypes.string_at(0)  # reads address 0: SIGSEGV


def check_after_the_crash() -> None:
    pass


@pytest.fixture(scope="module")
def results(run_isolated_together):
    return run_isolated_together([check_passes, check_fails, check_crashes, check_after_the_crash])


def test_a_passing_check_is_reported_as_passed(results):
    assert results["check_passes"] is None
    results.check(check_passes)


def test_a_failing_check_reports_its_traceback(results):
    assert "AssertionError: the list is not sorted" in results["check_fails"]
    with pytest.raises(pytest.fail.Exception, match="check_fails failed in the child interpreter"):
        results.check(check_fails)


def test_a_crash_names_the_signal_and_the_checks_it_kept_from_running(results):
    assert results["check_crashes"].startswith("crashed the interpreter with SIGSEGV while it ran")
    assert "Fatal Python error" in results["check_crashes"]  # faulthandler's report from the child's stderr
    assert results["check_after_the_crash"].startswith(
        "not run: crashed the interpreter with SIGSEGV before it (check_crashes)")


def test_checks_of_two_modules_are_refused(run_isolated_together):
    import json

    with pytest.raises(AssertionError, match="checks of one module only"):
        run_isolated_together([check_passes, json.dumps])
