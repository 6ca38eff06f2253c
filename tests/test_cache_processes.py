"""Processes sharing one disk cache: several processes asking for one kernel at once compile it once (a file lock
per key, tilelang_core/jit/process_lock.py); a holder that died frees the key at once; a live holder that never
finishes is waited for only up to the timeout, then the waiter compiles the kernel itself, with a warning."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
import warnings
from pathlib import Path

import pytest
import torch
from kernel_cache import entries

import tilelang_core as tilelang
import tilelang_core.language as T
from tilelang_core.jit import cache, process_lock
from tilelang_core.jit.cache_location import CacheWarning

ROOT = Path(__file__).resolve().parents[1]
PROCESSES = 2  # each child imports TVM (seconds on a loaded 2-core CI box): two suffice for the race


def shift_kernel(N, c):
    @T.prim_func
    def main(X: T.Tensor((N,), "float32"), Y: T.Tensor((N,), "float32")):
        with T.Kernel(T.ceildiv(N, 64)) as bx:
            for i in T.Parallel(64):
                Y[bx * 64 + i] = X[bx * 64 + i] + c

    return main


CHILD = textwrap.dedent("""
    import json, os, sys, time
    from pathlib import Path
    sys.path.insert(0, {tests!r})
    import torch
    import tilelang_core as tilelang
    from test_cache_processes import shift_kernel
    func = shift_kernel(448, 1.25)
    Path(sys.argv[1]).touch()                      # ready: imported and parsed
    while not os.path.exists(sys.argv[2]):         # all start compiling together
        time.sleep(0.005)
    kernel = tilelang.compile(func, out_idx=[-1], target="cpu")
    x = torch.randn(448)
    ok = bool(torch.equal(kernel(x), x + 1.25))
    print(json.dumps({{"status": kernel.cache_status, "ok": ok, "stats": tilelang.cache_stats()}}))
""").format(tests=str(ROOT / "tests"))


def _env(cache_dir: Path) -> dict[str, str]:
    env = dict(os.environ, TILELANG_CORE_CACHE_DIR=str(cache_dir), PYTHONPATH=str(ROOT))
    env.pop("TILELANG_CORE_DISABLE_CACHE", None)
    return env


def test_processes_asking_for_one_kernel_at_once_compile_it_once(cache_dir, tmp_path):
    go = tmp_path / "go"
    ready = [tmp_path / f"ready{i}" for i in range(PROCESSES)]
    procs = [subprocess.Popen([sys.executable, "-c", CHILD, str(r), str(go)], env=_env(cache_dir),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for r in ready]
    try:
        while not all(r.exists() for r in ready):
            assert all(p.poll() is None for p in procs), [p.communicate() for p in procs]
            time.sleep(0.01)
        go.touch()
        outs = [p.communicate(timeout=240) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    results = []
    for p, (out, err) in zip(procs, outs):
        assert p.returncode == 0, err
        results.append(json.loads(out.strip().splitlines()[-1]))
    assert all(r["ok"] for r in results), results
    assert sorted(r["status"] for r in results) == ["compiled"] + ["disk"] * (PROCESSES - 1), results
    assert sum(r["stats"]["compiles"] for r in results) == 1, results
    assert len(entries(cache_dir)) == 1
    assert not list((cache_dir / "kernels").glob(process_lock.LOCK_PREFIX + "*")), "a lock file was left behind"


HOLDER = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    from tilelang_core.jit import process_lock
    with process_lock.hold(Path(sys.argv[1]), sys.argv[2]) as held:
        assert held
        Path(sys.argv[3]).touch()
        time.sleep(600)
""")


def _hold_key_in_another_process(cache_dir: Path, key: str, tmp_path: Path) -> subprocess.Popen:
    (cache_dir / "kernels").mkdir(parents=True, exist_ok=True)
    flag = tmp_path / "holding"
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(cache_dir / "kernels"), key, str(flag)],
                              env=_env(cache_dir), stderr=subprocess.PIPE, text=True)
    while not flag.exists():
        assert holder.poll() is None, holder.communicate()
        time.sleep(0.01)
    return holder


def _disk_key(func, out_idx) -> str:
    from tilelang_core.backend import cpu as cpu_backend

    toolchain = {"llvm": cpu_backend.llvm_version(), "cc": os.environ.get("CC", "gcc")}
    return cache.disk_key(func.script(), out_idx, cpu_backend.host_target(), tilelang.pass_config.DEFAULT, toolchain)


def test_a_key_whose_holder_was_killed_is_compiled_without_waiting_for_the_timeout(cache_dir, tmp_path, monkeypatch):
    func = shift_kernel(320, -0.5)
    key = _disk_key(func, [1])
    holder = _hold_key_in_another_process(cache_dir, key, tmp_path)
    holder.send_signal(signal.SIGKILL)  # dies holding the lock: the kernel releases it
    holder.wait()
    monkeypatch.setattr(process_lock, "WAIT_SECONDS", 3600.0)  # a wait for the dead holder would end the test run
    with warnings.catch_warnings():
        warnings.simplefilter("error", CacheWarning)
        kernel = tilelang.compile(func, out_idx=[-1], target="cpu")
    assert kernel.cache_status == "compiled"
    x = torch.randn(320)
    torch.testing.assert_close(kernel(x), x - 0.5, rtol=0, atol=0)


def test_a_holder_that_never_finishes_is_waited_for_until_the_timeout_then_the_kernel_compiles_here(
        cache_dir, tmp_path, monkeypatch):
    func = shift_kernel(192, 2.0)
    key = _disk_key(func, [1])
    holder = _hold_key_in_another_process(cache_dir, key, tmp_path)
    try:
        monkeypatch.setattr(process_lock, "WAIT_SECONDS", 0.5)
        with pytest.warns(CacheWarning, match="another process has been compiling this kernel"):
            kernel = tilelang.compile(func, out_idx=[-1], target="cpu")
        assert holder.poll() is None, "the holder was still holding the lock"
    finally:
        holder.kill()
        holder.wait()
    assert kernel.cache_status == "compiled"
    x = torch.randn(192)
    torch.testing.assert_close(kernel(x), x + 2.0, rtol=0, atol=0)
    assert len(entries(cache_dir)) == 1
