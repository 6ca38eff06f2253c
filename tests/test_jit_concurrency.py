"""Compiling from several threads at once: one ``@jit`` factory (or one program given to ``compile``) called from
8 threads gives correct kernels and compiles each key once; the workbench's
forced rebuild bypasses the disk cache for its own compile only, without touching the process environment."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from typing import Any

import pytest
import torch
from kernel_cache import entries

import tilelang_core as tilelang
import tilelang_core.language as T

THREADS = 8


def scale_kernel(N, alpha):
    @T.prim_func
    def main(X: T.Tensor((N,), "float32"), Y: T.Tensor((N,), "float32")):
        with T.Kernel(T.ceildiv(N, 64)) as bx:
            for i in T.Parallel(64):
                Y[bx * 64 + i] = X[bx * 64 + i] * alpha

    return main


def all_at_once(work: Callable[[int], Any], n: int = THREADS) -> list[Any]:
    """Run ``work(i)`` for i in range(n) on n threads released together; re-raise the first failure."""
    barrier = threading.Barrier(n)
    results: list[Any] = [None] * n
    errors: list[BaseException] = []

    def run(i: int) -> None:
        barrier.wait()
        try:
            results[i] = work(i)
        except BaseException as e:  # noqa: BLE001 - reported below, with every thread's outcome
            errors.append(e)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise AssertionError(f"{len(errors)} of {n} threads failed: {errors!r}") from errors[0]
    return results


def stats_delta(before: dict[str, int]) -> dict[str, int]:
    now = tilelang.cache_stats()
    return {k: now[k] - before[k] for k in now}


def test_one_factory_called_from_eight_threads_compiles_each_key_once_and_every_kernel_is_correct(cache_dir):
    factory = tilelang.jit(out_idx=[-1])(scale_kernel)
    args = [(64 * (1 + i % 4), 0.5 + i % 4) for i in range(THREADS)]  # 4 distinct keys, each asked for twice
    before = tilelang.cache_stats()
    kernels = all_at_once(lambda i: factory(*args[i]))
    delta = stats_delta(before)
    assert delta["compiles"] == 4, delta
    assert delta["compiles"] + delta["disk_hits"] + delta["memory_hits"] == THREADS, delta
    for i in range(THREADS):
        twin = (i + 4) % THREADS
        assert kernels[i] is kernels[twin], "both callers of one key get the one kernel"
        n, alpha = args[i]
        x = torch.randn(n)
        torch.testing.assert_close(kernels[i](x), x * alpha, rtol=0, atol=0)
    assert len(entries(cache_dir)) == 4


def test_compile_of_one_program_from_eight_threads_builds_it_once(cache_dir):
    func = scale_kernel(320, -2.0)
    before = tilelang.cache_stats()
    kernels = all_at_once(lambda i: tilelang.compile(func, out_idx=[-1]))
    delta = stats_delta(before)
    assert delta["compiles"] == 1 and delta["disk_hits"] == THREADS - 1, delta
    assert sorted(k.cache_status for k in kernels) == ["compiled"] + ["disk"] * (THREADS - 1)
    x = torch.randn(320)
    for k in kernels:
        torch.testing.assert_close(k(x), -2.0 * x, rtol=0, atol=0)


def scale_eager(X, alpha):
    N = T.const("N")
    X: T.Tensor((N,), "float32")
    Y = T.empty((N,), "float32")
    with T.Kernel(T.ceildiv(N, 64)) as bx:
        for i in T.Parallel(64):
            Y[bx * 64 + i] = X[bx * 64 + i] * alpha
    return Y


def test_one_eager_function_called_from_eight_threads_compiles_each_key_once_and_counts_every_call(cache_dir):
    """The eager spelling goes through the same per-key lock and locked counters as a classic factory (it used to
    compile a key once per thread and bump the statistics without the lock)."""
    factory = tilelang.jit(scale_eager)
    args = [(64 * (1 + i % 4), 0.5 + i % 4) for i in range(THREADS)]  # 4 distinct keys, each asked for twice
    xs = [torch.randn(n) for n, _ in args]
    before = tilelang.cache_stats()
    kernels = all_at_once(lambda i: factory.compile(xs[i], args[i][1]))
    delta = stats_delta(before)
    assert delta["compiles"] == 4 and delta["disk_hits"] == 0, delta
    assert delta["compiles"] + delta["memory_hits"] == THREADS, delta
    for i in range(THREADS):
        assert kernels[i] is kernels[(i + 4) % THREADS], "both callers of one key get the one kernel"
    outs = all_at_once(lambda i: factory(xs[i], args[i][1]))  # calling runs the kernel
    for i in range(THREADS):
        torch.testing.assert_close(outs[i], xs[i] * args[i][1], rtol=0, atol=0)
    assert len(entries(cache_dir)) == 4


# -- the workbench's forced rebuild -----------------------------------------------------------------------------

def test_workbench_forced_build_bypasses_the_disk_cache_for_its_own_compile_only(cache_dir):
    """``%%tilekernel -f`` compiles on the workbench's background thread; while it runs, the process environment is
    unchanged and another thread's compile still reads and writes the disk cache."""
    from workbench.build import BuildCache
    from workbench.cell import FACTORY, CellProgram

    inside = threading.Event()
    release = threading.Event()
    seen_env: list[str | None] = []

    def forced_factory(N):
        seen_env.append(os.environ.get("TILELANG_CORE_DISABLE_CACHE"))
        inside.set()
        assert release.wait(60), "the main thread never released the forced build"
        return scale_kernel(N, 4.0)

    tilelang.jit(out_idx=[-1])(scale_kernel)(192, 4.0)  # the forced build's program, already on disk
    on_disk = len(entries(cache_dir))
    program = CellProgram(kind=FACTORY, obj=forced_factory, namespace={}, free_names=[])
    result: list[Any] = []
    worker = threading.Thread(target=lambda: result.append(
        BuildCache().build(program, "cell text", {"N": 192}, [-1], "cpu", "forced_factory", force=True)))
    worker.start()
    try:
        assert inside.wait(60), "the forced build never started"
        assert os.environ.get("TILELANG_CORE_DISABLE_CACHE") is None
        other = tilelang.jit(out_idx=[-1])(scale_kernel)(256, 1.5)  # meanwhile, on this thread
    finally:
        release.set()
        worker.join()
    assert other.cache_status == "compiled"
    assert len(entries(cache_dir)) == on_disk + 1, "the other thread's kernel was written to the disk cache"
    assert seen_env == [None]
    (build,) = result
    assert build.status == "compiled", "the forced build did not take the disk cache's copy"
    x = torch.randn(192)
    torch.testing.assert_close(build.kernel(x), 4.0 * x, rtol=0, atol=0)


@pytest.mark.parametrize("value", ["1", "0"])
def test_without_disk_cache_applies_to_the_calling_thread_and_leaves_the_environment_as_it_was(cache_dir,
                                                                                               monkeypatch, value):
    monkeypatch.setenv("TILELANG_CORE_DISABLE_CACHE", value)
    with tilelang.without_disk_cache():
        assert os.environ["TILELANG_CORE_DISABLE_CACHE"] == value
        kernel = tilelang.jit(out_idx=[-1])(scale_kernel)(448, 2.0)
        seen_elsewhere: list[int] = []
        t = threading.Thread(target=lambda: seen_elsewhere.append(
            len(entries(cache_dir)) if tilelang.jit(out_idx=[-1])(scale_kernel)(512, 2.0) else -1))
        t.start()
        t.join()
    assert kernel.cache_status == "compiled"
    # the other thread was not inside the context: it used the disk cache unless the environment turned it off
    assert seen_elsewhere == [0 if value == "1" else 1]
