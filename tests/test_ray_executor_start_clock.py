"""The Ray executor's start clock (``_StartClock``, the actor compile tasks tell when they have started): a reply the
driver never reads loses no start. A driver whose ``ray.get`` of the clock's answer timed out (the clock actor was
still starting: a new Ray worker process at load 6-8 took over 10 s) used to leave that call queued; it ran later and
emptied the clock, so the tasks it reported never had their clocks started and a compile that hung was cancelled
after the 300 s start allowance instead of its limit (the CI test's timeout=8 sweep took 374 s instead of 55 s).
The end-to-end check on a real cluster is tests/test_autotune_ray.py's timeout test; this one needs no Ray."""

from __future__ import annotations

from tilelang_core.autotune.ray_executor import _StartClock


def test_a_start_report_survives_a_reply_the_driver_never_read():
    clock = _StartClock()
    clock.started(3)
    clock.take(0)  # answered, but the driver had stopped waiting for it
    clock.started(5)
    assert clock.take(0) == [3, 5]  # the driver, which has read none yet, gets both
    assert clock.take(1) == [5]  # ... and after reading one, only the rest
    assert clock.take(2) == []


def test_the_driver_counts_the_keys_it_has_read_and_forgets_them_with_the_sweep():
    from tilelang_core.autotune.ray_executor import RayExecutor

    ex = RayExecutor()
    assert ex._keys_read == 0 and ex._take is None
    ex._keys_read, ex._take = 4, object()
    ex._drop_refs()  # what close() does at the end of a sweep: the next sweep's clock starts from zero
    assert ex._keys_read == 0 and ex._take is None
