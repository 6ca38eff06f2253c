"""The Ray executor end to end on a real local cluster: a head node and one more worker node (real Ray processes on
this host, started here and stopped after; CPU only), the quickstart GEMM over 64 configurations compiled as Ray
tasks and timed in a Ray actor, with one compile worker process and the timing actor SIGKILLed mid-sweep: no result
is lost, and the results are of the same kind as the local executor's; a compile task and a timing task that hang
are killed after ``tune(timeout=...)`` and the sweep goes on."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from autotune_sweep import EXPECTED_KIND, SHAPES, SPACE, TIMING, Killer, check_complete, kind_of

from tilelang_core.autotune import RayExecutor, TuningDB, tune
from tilelang_core.autotune.executors import COMPILE, TIME
from tilelang_core.quickstart import matmul_relu, reference

ray = pytest.importorskip("ray", reason="Ray is the optional extra '.[ray]' (scripts/setup-env.sh --ray)")
from ray.cluster_utils import Cluster  # noqa: E402

STARTS = 3  # Ray 2.60 gives a node a fixed 30 s to register; a busy 2-core machine sometimes needs another go
# first on the cluster's path: an rfc3987_syntax that is absent (its 3 s import made the raylet abort; ray_site/)
RAY_SITE = Path(__file__).resolve().parent / "ray_site"


def start_cluster() -> Cluster:
    """A head node (2 CPUs) and one more worker node (1 CPU) on this host; Ray picks the host's own address
    (node_ip_address="127.0.0.1" made Ray 2.60's nodes time out here). What made starts flaky: each node's raylet
    waits a fixed 15 s for its dashboard agent's port file, and the agent's ``import ray`` spent ~3 s of CPU building
    jsonschema's optional IRI grammar: at load 6 on 2 cores it took 15.4 s and the raylet aborted (2 of 2 starts
    measured), without it 3-7 s (2 of 2 started); this machine's Ray logs of the day: 31 of 69 head raylets never
    came up, each waiting for that file. The processes the nodes start inherit ``PYTHONPATH``."""
    old = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = os.pathsep.join([str(RAY_SITE), *([old] if old else [])])
    try:
        for attempt in range(STARTS):
            c = None
            try:
                c = Cluster(initialize_head=True, head_node_args={"num_cpus": 2, "include_dashboard": False})
                c.add_node(num_cpus=1)
                return c
            except Exception as e:
                if c is not None:
                    c.shutdown()
                if "timed out during startup" not in str(e) or attempt == STARTS - 1:
                    raise
        raise AssertionError("unreachable")
    finally:
        if old is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = old


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with pytest.MonkeyPatch.context() as mp:
        # a kernel cache of its own (Ray's workers inherit it): every configuration is really compiled, so a compile
        # task is in flight when the test kills one, whatever the session's cache already holds
        mp.setenv("TILELANG_CORE_CACHE_DIR", str(tmp_path_factory.mktemp("ray_kernel_cache")))
        c = start_cluster()
        try:
            ray.init(address=c.address, log_to_driver=False)
            yield c
        finally:
            ray.shutdown()
            c.shutdown()


def test_the_cluster_processes_start_without_the_iri_grammar(cluster):
    # what made node starts flaky (start_cluster): the dashboard agents and workers the raylets start import ray
    # without building jsonschema's optional IRI grammar
    @ray.remote
    def imported() -> tuple[bool, bool]:
        import sys

        return "ray" in sys.modules, "rfc3987_syntax" in sys.modules

    assert ray.get(imported.remote()) == (True, False)
    # the raylets start the agents and workers with their own environment (an agent's /proc environ is not
    # readable once it has retitled itself)
    for node in cluster.list_all_nodes():
        pid = node.all_processes["raylet"][0].process.pid
        env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        path = next((v.decode() for v in env if v.startswith(b"PYTHONPATH=")), "")
        assert path.startswith(f"PYTHONPATH={RAY_SITE}"), (pid, path)


def ray_task_pids(name: str) -> list[int]:
    """Processes whose title says they run the Ray task ``name`` right now (Ray retitles its workers)."""
    pids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                cmd = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")[0].decode(errors="replace")
            except OSError:
                continue
            if cmd.startswith(f"ray::{name}"):
                pids.append(int(entry))
    return pids


def _busy_pid(ex: RayExecutor, role: str) -> int | None:
    if role == COMPILE:
        pids = ray_task_pids("_compile")
        return pids[0] if pids else None
    busy = [n for n, w in ex.workers.items() if w.role == role and w.busy]
    return ex.actor_pids().get(busy[0]) if busy else None


def test_ray_sweep_of_64_configs_survives_a_killed_worker_and_actor(cluster, tmp_path):
    assert len([n for n in ray.nodes() if n["Alive"]]) == 2
    db = TuningDB(tmp_path / "t.sqlite3")
    killer = Killer(_busy_pid)
    ex = RayExecutor()
    result = tune(matmul_relu, SPACE, args=SHAPES, ref=lambda a, b: (a @ b).relu(), executor=ex, db=db,
                  progress=False, on_progress=killer, **TIMING)  # a lambda reference: Ray ships it
    assert set(killer.killed) == {"compile", "time"}
    check_complete(result, db, "ray")
    compile_workers = {m for m in result.workers if m.startswith("ray:")}
    assert len(compile_workers) >= 2  # compile tasks ran in several worker processes
    assert all(m.worker.startswith("ray-time-") for m in result.measurements)
    assert kind_of(result) == EXPECTED_KIND  # the same kind of result as the local executor's


def test_ray_timeout_cancels_a_hung_compile_task_and_kills_a_hung_timing_actor(cluster, tmp_path):
    from autotune_sweep import stuck_gemm

    from tilelang_core.autotune.record import COMPILE_ERROR, RUN_ERROR
    from tilelang_core.autotune.workers import compile_config, jitted

    space = [{"stuck": "compile"}, {"stuck": "run"}, {"stuck": ""}]
    for c in space[1:]:  # into the cluster's kernel cache: in the sweep these two compile in milliseconds
        compile_config(jitted(stuck_gemm), {**SHAPES, **c})
    ex = RayExecutor()
    # the limit is paid four times in a row (a CPU sweep times only once every compile is done): each hang, twice;
    # 5 s still leaves the third configuration's cached compile and its timing (~2.5 s at load 5) room
    result = tune(stuck_gemm, space, args=SHAPES, ref=reference, executor=ex, db=tmp_path / "t.sqlite3",
                  progress=False, finalists=0, timeout=5, **TIMING)
    compile_hang, run_hang, fine = result.measurements
    assert compile_hang.status == COMPILE_ERROR and compile_hang.attempts == 2
    assert "Ray compile task killed: its task ran past compile_timeout_s=5" in compile_hang.message
    assert run_hang.status == RUN_ERROR and run_hang.attempts == 2
    assert "killed: its task ran past time_timeout_s=5" in run_hang.message
    assert fine.ok and fine.latency_ms > 0, fine.message  # the sweep went on
    assert ex.timeouts == {COMPILE: 900.0, TIME: 900.0}
    assert not ray_task_pids("_compile")  # the hung compile's worker process was killed, not left sleeping
