"""Shared fixtures: an isolated kernel cache for the whole session, a seeded torch RNG per test, a runner for
checks that could crash the interpreter (they run in a child process, so a crash fails one test, not the run), and
one JupyterLab server for the real-browser tests (starting one takes 10-30 s on CI's 2 cores; each browser test
file opens its own notebooks on it, with a kernel and a Chromium page of its own), and the suite's tables for
pytest-xdist (``scripts/test.sh`` runs two workers): which test files share a worker, which start first
(tests/xdist_units.py applies them; docs/ci_time.md says why and what was measured)."""

from __future__ import annotations

import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from xdist_units import Units

TESTS_DIR = Path(__file__).resolve().parent

# Test files that must not run at the same time as each other, by unit name (under pytest-xdist a unit's tests run
# on one worker, one after another; every other file is a unit of its own, named by its path under tests/).
XDIST_GROUPS: dict[str, str] = {
    # the session fixture ``jupyter_lab`` below: one server per worker, so both browser files on the same worker
    "test_browser.py": "jupyter_lab",
    "test_browser_machine_views.py": "jupyter_lab",
    # each starts several worker processes of its own (a Ray cluster, the local executor's compile and timing
    # workers, eight cache-filling or lock-holding children), kills some and gives the others 0.5-5 s limits: one
    # such file at a time, so that on CI's 2 cores they meet one compile-bound worker, not each other
    "test_autotune_ray.py": "processes",
    "test_autotune_local_executor.py": "processes",
    "test_autotune_interrupt.py": "processes",
    "test_workbench_panel_executors.py": "processes",
    "test_cache_faults.py": "processes",
    "test_cache_processes.py": "processes",
}

# The units that take longest (CI's --durations, docs/ci_time.md), started first so that neither worker is left
# with one of them at the end while the other idles; the rest follow in collection order. A stale entry only costs
# time; a name that is neither a group of XDIST_GROUPS nor a test file is an error (``Units.check``).
XDIST_FIRST: tuple[str, ...] = (
    "processes",
    "jupyter_lab",
    "test_notebooks_workloads.py",
    "test_workbench_notebook.py",
    "test_differential_fuzz.py",
    "test_cuda_wgmma_attention.py",
    "test_cuda_emulator_tma.py",
    "test_cuda_dequant_fragments.py",
    "test_cuda_cluster.py",
    "test_cuda_gemm_pingpong.py",
)
XDIST_UNITS = Units(TESTS_DIR, XDIST_GROUPS, XDIST_FIRST)


def pytest_configure(config: pytest.Config) -> None:
    XDIST_UNITS.check()  # a renamed or deleted file in the tables stops every run, with the name


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """In a pytest-xdist worker only: the units of XDIST_FIRST first. A plain run keeps pytest's order."""
    XDIST_UNITS.order(config, items)


@pytest.hookimpl(optionalhook=True)  # a hook of pytest-xdist's: without it installed, never called
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """``--dist loadfile`` with XDIST_GROUPS: files are units, and a group's files share one. Other modes: xdist's."""
    return XDIST_UNITS.scheduler(config, log)


@pytest.fixture(scope="session", autouse=True)
def isolated_kernel_cache(tmp_path_factory: pytest.TempPathFactory):
    """Point the disk cache (and the tuning database) at a fresh directory before anything is compiled, so tests never
    touch the user's."""
    cache_root = tmp_path_factory.mktemp("tilelang_core_cache")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TILELANG_CORE_CACHE_DIR", str(cache_root))
        mp.setenv("TILELANG_CORE_TUNING_DB", str(cache_root / "tuning.sqlite3"))  # never the user's tuning database
        mp.delenv("TILELANG_CORE_DISABLE_CACHE", raising=False)
        yield cache_root


@pytest.fixture(autouse=True)
def seeded_rng():
    """Every test draws different-but-reproducible random inputs."""
    torch.manual_seed(1234)
    yield


def _run_isolated(func: Callable[[], None], timeout: float = 300) -> None:
    """Call ``func`` (a module-level function of a test module) in a fresh interpreter; fail on error or crash."""
    module = func.__module__
    code = (
        "import faulthandler, sys\n"
        "faulthandler.enable()\n"
        f"sys.path.insert(0, {str(TESTS_DIR)!r})\n"
        f"import {module} as m\n"
        f"m.{func.__name__}()\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout)
    if proc.returncode < 0:
        name = signal.Signals(-proc.returncode).name
        pytest.fail(f"{func.__name__} crashed the interpreter with {name}:\n{proc.stdout[-2000:]}\n"
                    f"{proc.stderr[-4000:]}", pytrace=False)
    assert proc.returncode == 0, f"{func.__name__} failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}"


@pytest.fixture
def run_isolated() -> Callable[..., None]:
    """``run_isolated(fn)`` runs a module-level check in a child process (inherits the isolated cache dir)."""
    return _run_isolated


_MARK = "@@isolated"


def _run_isolated_together(funcs: list[Callable[[], None]], timeout: float = 300) -> IsolatedResults:
    """Call the module-level checks ``funcs`` (all of one test module) one after another in ONE fresh interpreter;
    return, by function name, ``None`` for a check that passed, else what went wrong: its traceback, the signal
    that killed the interpreter while it ran, or that an earlier check's crash stopped it from running. A child
    interpreter costs its imports of torch and TVM (4-5 s on CI's 2 cores, 12 s at load 6): one per module
    instead of one per check, and a crash still fails only the checks it stopped."""
    module = funcs[0].__module__
    assert all(f.__module__ == module for f in funcs), "run_isolated_together: checks of one module only"
    names = [f.__name__ for f in funcs]
    code = (
        "import faulthandler, sys, traceback\n"
        "faulthandler.enable()\n"
        f"sys.path.insert(0, {str(TESTS_DIR)!r})\n"
        f"import {module} as m\n"
        f"for name in {names!r}:\n"
        f"    print({_MARK!r}, 'start', name, flush=True)\n"
        "    try:\n"
        "        getattr(m, name)()\n"
        "    except BaseException:\n"
        "        traceback.print_exc(file=sys.stdout)\n"
        f"        print({_MARK!r}, 'fail', name, flush=True)\n"
        "    else:\n"
        f"        print({_MARK!r}, 'ok', name, flush=True)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout)
    outcome = IsolatedResults()
    running, lines = None, []
    for line in proc.stdout.splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[0] == _MARK:
            _, what, name = parts
            if what == "start":
                running, lines = name, []
            else:
                outcome[name] = None if what == "ok" else "\n".join(lines)[-4000:]
                running = None
        else:
            lines.append(line)
    died = (f"crashed the interpreter with {signal.Signals(-proc.returncode).name}" if proc.returncode < 0
            else f"the interpreter exited with code {proc.returncode}")
    for name in names:
        if name in outcome:
            continue
        if name == running:
            outcome[name] = f"{died} while it ran:\n" + "\n".join(lines)[-2000:] + "\n" + proc.stderr[-4000:]
        else:
            outcome[name] = f"not run: {died} before it ({running or 'at import'}):\n{proc.stderr[-4000:]}"
    return outcome


class IsolatedResults(dict):
    """What :func:`_run_isolated_together` found, by check name; ``.check(func)`` fails the calling test with
    ``func``'s failure (nothing if it passed)."""

    def check(self, func: Callable[[], None]) -> None:
        message = self[func.__name__]
        if message is not None:
            pytest.fail(f"{func.__name__} failed in the child interpreter:\n{message}", pytrace=False)


@pytest.fixture(scope="session")
def run_isolated_together() -> Callable[..., IsolatedResults]:
    """``run_isolated_together([fn, ...])``: a module's checks in one child process (a module-scoped fixture of
    that module calls it; each test then calls ``results.check(fn)``)."""
    return _run_isolated_together


@pytest.fixture(scope="session")
def jupyter_lab(tmp_path_factory: pytest.TempPathFactory):
    """A JupyterLab server (tests/labdriver.py) for the whole session, serving a fresh folder; a test file copies or
    writes its notebooks under ``lab.root_dir`` (a sub-folder of its own) and shuts its kernels down when done
    (``lab.shutdown_kernels()``). The notebooks' kernels get their own tuning database and this checkout on
    PYTHONPATH. Started on first use only: a run without browser tests never pays for it."""
    from labdriver import JupyterLab, browser_available

    missing = browser_available()
    assert missing is None, missing  # the browser test files skip themselves first outside CI
    base = tmp_path_factory.mktemp("jupyter_lab")
    root = base / "root"
    root.mkdir()
    env = {"TILELANG_CORE_TUNING_DB": str(base / "tuning.sqlite3"), "PYTHONPATH": str(TESTS_DIR.parent)}
    with JupyterLab(root, env=env, log=base / "jupyter.log") as lab:
        yield lab


@pytest.fixture
def cache_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh, empty disk kernel cache for one test (``TILELANG_CORE_CACHE_DIR``), caching enabled."""
    d = tmp_path / "kcache"
    monkeypatch.setenv("TILELANG_CORE_CACHE_DIR", str(d))
    monkeypatch.delenv("TILELANG_CORE_DISABLE_CACHE", raising=False)
    return d
