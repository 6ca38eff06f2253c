"""The suite's split between pytest-xdist workers (tests/xdist_units.py): a real ``pytest -n 2`` run in a child
process, over small generated test files that record which worker ran each test and in what order. A file's tests
run on one worker; the files of a group share one; a unit listed first is handed out first; a table that names a
missing file stops the run with the file's name. And the suite's own tables name files that exist."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from xdist_units import Units

pytest.importorskip("xdist", reason="pytest-xdist is in the dev extra (scripts/setup-env.sh)")

TESTS_DIR = Path(__file__).resolve().parent

CONFTEST = """
import sys
from pathlib import Path

import pytest

sys.path.insert(0, {tests_dir!r})
from xdist_units import Units

UNITS = Units(Path(__file__).parent, {groups!r}, {first!r})


def pytest_configure(config):
    UNITS.check()


def pytest_collection_modifyitems(config, items):
    UNITS.order(config, items)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    return UNITS.scheduler(config, log)
"""

# each test appends (worker, test id) to the log: the order of the lines is each worker's order of running them
TEST_FILE = """
import json
import os

import pytest


@pytest.mark.parametrize("i", range({n}))
def test_records_its_worker(i, request):
    with open(os.environ["UNITS_LOG"], "a") as f:
        f.write(json.dumps([os.environ["PYTEST_XDIST_WORKER"], request.node.nodeid]) + "\\n")
"""


def run_suite(tmp_path: Path, files: dict[str, int], groups: dict[str, str], first: tuple[str, ...],
              *args: str) -> tuple[subprocess.CompletedProcess, list[tuple[str, str]]]:
    (tmp_path / "pytest.ini").write_text("[pytest]\naddopts =\n")
    (tmp_path / "conftest.py").write_text(CONFTEST.format(tests_dir=str(TESTS_DIR), groups=groups, first=first))
    for name, n in files.items():
        (tmp_path / name).write_text(TEST_FILE.format(n=n))
    log = tmp_path / "units.log"
    env = {**os.environ, "UNITS_LOG": str(log)}
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "2", "--dist",
                           "loadfile", "--no-loadscope-reorder", *args], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=240)
    lines = [tuple(json.loads(line)) for line in log.read_text().splitlines()] if log.exists() else []
    return proc, lines


def test_a_files_tests_share_a_worker_a_groups_files_share_one_and_first_units_start_first(tmp_path):
    files = {"test_a.py": 3, "test_b.py": 3, "test_c.py": 4, "test_d.py": 2, "test_z.py": 3}
    proc, lines = run_suite(tmp_path, files, {"test_a.py": "pair", "test_b.py": "pair"}, ("test_z.py", "pair"))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert len(lines) == sum(files.values())
    worker_of: dict[str, set[str]] = {}
    for worker, nodeid in lines:
        worker_of.setdefault(nodeid.split("::")[0], set()).add(worker)
    assert all(len(w) == 1 for w in worker_of.values()), worker_of  # a file is never split
    assert worker_of["test_a.py"] == worker_of["test_b.py"], worker_of  # a group's files: one worker
    assert {w for ws in worker_of.values() for w in ws} == {"gw0", "gw1"}  # and both workers were used
    firsts = {}
    for worker, nodeid in lines:
        firsts.setdefault(worker, nodeid.split("::")[0])
    # the two first units (test_z, then the pair) went out first, one to each worker
    assert sorted(firsts.values()) == ["test_a.py", "test_z.py"], firsts
    pair = [nodeid for _, nodeid in lines if nodeid.startswith(("test_a.py", "test_b.py"))]
    assert pair == sorted(pair, key=lambda n: n.split("::")[0])  # a group's files back to back, in collection order


def test_a_group_table_naming_a_missing_file_stops_the_run_naming_it(tmp_path):
    proc, lines = run_suite(tmp_path, {"test_a.py": 1, "test_b.py": 1}, {"test_gone.py": "pair"}, ())
    assert proc.returncode != 0 and not lines
    assert "test_gone.py" in proc.stdout + proc.stderr and "not a file" in proc.stdout + proc.stderr


def test_a_first_unit_that_is_neither_a_group_nor_a_file_is_refused():
    units = Units(TESTS_DIR, {"test_browser.py": "jupyter_lab"}, ("jupyter_lab", "test_no_such_file.py"))
    with pytest.raises(pytest.UsageError, match="'test_no_such_file.py', which is neither a group nor a file"):
        units.check()


def test_the_suites_tables_name_files_that_exist_and_a_subfolder_file_is_its_own_unit():
    import conftest

    conftest.XDIST_UNITS.check()
    root = TESTS_DIR.parent
    unit = conftest.XDIST_UNITS.unit
    assert unit("tests/test_browser.py::t", root) == unit("tests/test_browser_machine_views.py::t[x]", root)
    assert unit("tests/gpu/test_fuzz.py::test_seed[3]", root) == "gpu/test_fuzz.py"
    assert unit("tests/test_gemm.py::test_x", root) == "test_gemm.py"
