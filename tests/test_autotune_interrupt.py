"""Ctrl-C on a sweep's driver process: SIGINT sent from outside (as a terminal does) while its local executor's
workers compile; the driver raises KeyboardInterrupt, exits, and leaves no worker process behind."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

DRIVER = Path(__file__).with_name("autotune_interrupt_driver.py")


def alive(pid: int) -> bool:
    """Whether the process exists and is not a zombie (an exited child nobody reaped yet)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def test_sigint_to_the_driver_mid_sweep_exits_it_and_leaves_no_worker_processes(tmp_path):
    env = {**os.environ, "TILELANG_CORE_CACHE_DIR": str(tmp_path / "cache")}  # nothing cached: compiles run
    p = subprocess.Popen([sys.executable, str(DRIVER)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         env=env)
    try:
        line = p.stdout.readline()
        while line and not line.startswith("PIDS "):
            line = p.stdout.readline()
        assert line.startswith("PIDS "), p.stderr.read()
        pids = json.loads(line[5:])
        assert len(pids) == 3 and all(alive(pid) for pid in pids.values())
        p.send_signal(signal.SIGINT)
        out, err = p.communicate(timeout=120)  # a driver that hangs on Ctrl-C fails here
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 130 and "INTERRUPTED" in out, err
    assert "FINISHED" not in out
    end = time.monotonic() + 30  # idle workers notice their parent is gone within a second or two
    while any(alive(pid) for pid in pids.values()) and time.monotonic() < end:
        time.sleep(0.2)
    assert not [name for name, pid in pids.items() if alive(pid)]
