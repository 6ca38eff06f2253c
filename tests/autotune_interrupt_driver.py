"""A driver process for tests/test_autotune_interrupt.py: a 64-configuration sweep through a local executor of its
own that prints its worker processes' ids (``PIDS {...}``) once a compile is in flight, then waits for Ctrl-C.
Prints ``INTERRUPTED`` and exits 130 on ``KeyboardInterrupt``, ``FINISHED`` if the sweep ever ends."""

from __future__ import annotations

import json
import os
import signal
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def main() -> int:
    # Ctrl-C as in a terminal, whatever this process inherited: a job started in the background by a shell without
    # job control (a CI runner, `cmd &`) starts with SIGINT ignored, and Python then installs no handler of its own
    signal.signal(signal.SIGINT, signal.default_int_handler)
    from autotune_sweep import SHAPES, SPACE, TIMING

    from tilelang_core.autotune import tune
    from tilelang_core.autotune.executors import COMPILE
    from tilelang_core.autotune.local_executor import LocalExecutor
    from tilelang_core.quickstart import matmul_relu, reference

    ex = LocalExecutor(compile_workers=2)
    told: list[bool] = []

    def progress(e: LocalExecutor) -> None:
        busy = [w for w in e.workers.values() if w.role == COMPILE and w.busy]
        if busy and not told and len(e.pids()) == 3:
            told.append(True)
            print("PIDS " + json.dumps(e.pids()), flush=True)

    try:
        tune(matmul_relu, SPACE, args=SHAPES, ref=reference, executor=ex, db=False, progress=False,
             on_progress=progress, **TIMING)
    except KeyboardInterrupt:
        print("INTERRUPTED", flush=True)
        return 130
    print("FINISHED", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
