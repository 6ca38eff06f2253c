"""How the test suite is split between pytest-xdist's worker processes (``scripts/test.sh`` runs ``-n 2 --dist
loadfile --no-loadscope-reorder``; tests/conftest.py wires this module in with the suite's tables).

A *unit* is what one worker runs whole, one test after another, in collection order: by default one test file (its
tests then run as they would alone: module fixtures built once, whatever order the tests rely on); files named in a
group table share one unit (files that must not run beside each other, or that share a per-worker session fixture).
Units listed as *first* are handed out first, so a long one does not start last while the other worker idles.

Why not xdist's own ``xdist_group`` marks with ``--dist loadgroup``: pytest-xdist 3.8 puts the group into a test's
id by assigning ``item._nodeid``, which pytest 9.2 no longer reads (a node's id is ``item._id``), so the marks are
silently ignored and every test is scheduled on its own. A scheduler of our own (``pytest_xdist_make_scheduler``)
needs only the test ids' file parts."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest


class Units:
    """The unit table of one test folder: ``groups`` maps a file name (in ``tests_dir``) to its unit's name, ``first``
    lists the units to hand out first (group names or file names)."""

    def __init__(self, tests_dir: Path, groups: Mapping[str, str], first: Sequence[str] = ()):
        self.tests_dir = tests_dir.resolve()
        self.groups = dict(groups)
        self.first = tuple(first)

    def check(self) -> None:
        """Every name in the tables is a file of ``tests_dir`` or a group: a renamed file fails the run loudly
        instead of quietly leaving its group (called from ``pytest_configure``, in plain runs too)."""
        for name in self.groups:
            if not (self.tests_dir / name).is_file():
                raise pytest.UsageError(f"xdist units: the group table names {name!r}, which is not a file in "
                                        f"{self.tests_dir}")
        for unit in self.first:
            if unit not in self.groups.values() and not (self.tests_dir / unit).is_file():
                raise pytest.UsageError(f"xdist units: the first-units list names {unit!r}, which is neither a group "
                                        f"nor a file in {self.tests_dir}")

    def unit(self, nodeid: str, rootpath: Path) -> str:
        """The unit of the test ``nodeid`` (relative to ``rootpath``, as pytest writes it): its file's group, else
        the file's path under ``tests_dir`` (or under the root, for a file elsewhere)."""
        path = (rootpath / nodeid.split("::", 1)[0]).resolve()
        if path.parent == self.tests_dir and path.name in self.groups:
            return self.groups[path.name]
        try:
            return str(path.relative_to(self.tests_dir))
        except ValueError:
            return str(path.relative_to(rootpath.resolve()))

    def order(self, config: pytest.Config, items: list[pytest.Item]) -> None:
        """In a worker only (every worker sorts the same collection the same way, and the scheduler hands out units in
        that order): the ``first`` units first, in their order; the rest as collected. A plain run is left alone."""
        if not hasattr(config, "workerinput"):
            return
        rank = {unit: i for i, unit in enumerate(self.first)}
        key = {item.nodeid: rank.get(self.unit(item.nodeid, config.rootpath), len(rank)) for item in items}
        items.sort(key=lambda item: key[item.nodeid])  # stable: each unit keeps its tests' order

    def scheduler(self, config: pytest.Config, log: Any) -> Any:
        """For ``--dist loadfile``: xdist's scope scheduler with our units as its scopes; other modes: ``None``
        (xdist's own)."""
        if config.getvalue("dist") != "loadfile":
            return None
        from xdist.scheduler import LoadScopeScheduling

        units = self

        class LoadFileAndGroups(LoadScopeScheduling):
            def _split_scope(self, nodeid: str) -> str:
                return units.unit(nodeid, config.rootpath)

        return LoadFileAndGroups(config, log)
