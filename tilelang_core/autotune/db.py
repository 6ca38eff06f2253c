"""The tuning database: every measurement ever taken, in SQLite, shared by all sessions on the machine.

Why this module exists: tuning is slow and its results outlive a notebook. Every measurement (tuner or workbench
panel) is appended here — kernel identity, configuration, shapes, dtypes, target, device, library versions, latency
median and spread, error against the reference, timestamp — so the panel can plot history and
``best(kernel, shapes, target)`` can answer from earlier sessions.

Location: ``$TILELANG_CORE_TUNING_DB`` (a file path), else ``tuning.sqlite3`` under the kernel cache's root
(``$TILELANG_CORE_CACHE_DIR``, else ``$XDG_CACHE_HOME/tilelang_core``, else ``~/.cache/tilelang_core``).

Concurrency: two notebooks (processes) and background threads may write at once. The database runs in WAL mode
(readers never block writers), every operation opens its own short-lived connection (sqlite3 connections are not
shared between threads), writes are single ``BEGIN IMMEDIATE`` transactions, and a busy database is waited for
(``busy_timeout``) and retried rather than reported.

One source of truth: a sweep spread over worker processes or a Ray cluster records on the driver only. Every row
carries a ``uid`` (unique index), so the same result merged twice — a retried hand-over, or a worker's own database
merged with :meth:`TuningDB.merge` — is kept once. Schema version 2 added ``uid``, ``sweep``, ``worker``,
``driver``, ``clocks``, ``stage`` and ``attempts``; a version-1 file is migrated in place on first open (old rows get
``uid = "v1-<id>"``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import sqlite3
import statistics
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from .record import Measurement, jsonable, kernel_identity

SCHEMA_VERSION = 2
BUSY_TIMEOUT_MS = 30_000
THIS_DEVICE = "this"
_COLUMNS = ("kernel", "module", "source_hash", "config", "shapes", "dtypes", "target", "device", "host", "versions",
            "status", "message", "latency_ms", "p20_ms", "p80_ms", "min_ms", "runs", "ref_ms", "max_abs", "max_rel",
            "rtol", "atol", "passed", "flops", "bytes", "compile_s", "timestamp", "pid", "uid", "sweep", "worker",
            "driver", "clocks", "stage", "attempts", "resources")
_ADDED_IN_V2 = {"uid": "TEXT", "sweep": "TEXT", "worker": "TEXT", "driver": "TEXT", "clocks": "TEXT",
                "stage": "TEXT", "attempts": "INTEGER", "resources": "TEXT"}
_SCHEMA = """
CREATE TABLE IF NOT EXISTS measurements (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    kernel TEXT NOT NULL, module TEXT, source_hash TEXT,
    config TEXT NOT NULL, shapes TEXT NOT NULL, dtypes TEXT NOT NULL,
    target TEXT NOT NULL, device TEXT NOT NULL, host TEXT, versions TEXT,
    status TEXT NOT NULL, message TEXT,
    latency_ms REAL, p20_ms REAL, p80_ms REAL, min_ms REAL, runs INTEGER, ref_ms REAL,
    max_abs REAL, max_rel REAL, rtol REAL, atol REAL, passed INTEGER,
    flops REAL, bytes REAL, compile_s REAL,
    timestamp REAL NOT NULL, pid INTEGER,
    uid TEXT, sweep TEXT, worker TEXT, driver TEXT, clocks TEXT, stage TEXT, attempts INTEGER, resources TEXT
);
CREATE INDEX IF NOT EXISTS measurements_lookup ON measurements (kernel, target, shapes);
"""
_INDEXES = """
CREATE UNIQUE INDEX IF NOT EXISTS measurements_uid ON measurements (uid);
CREATE INDEX IF NOT EXISTS measurements_sweep ON measurements (sweep);
"""


def default_path() -> Path:
    """``$TILELANG_CORE_TUNING_DB``, else ``<kernel cache root>/tuning.sqlite3``."""
    env = os.environ.get("TILELANG_CORE_TUNING_DB")
    if env:
        return Path(env).expanduser()
    from ..jit.cache import cache_dir

    return cache_dir() / "tuning.sqlite3"


def _canon(value: Any) -> str:
    return json.dumps(jsonable(value), sort_keys=True, separators=(",", ":"))


def canonical_shapes(shapes: Any) -> str:
    """Parameter shapes as stored: ``[[512,512],[512,512],[512,512]]``."""
    return _canon([list(s) for s in shapes])


class TuningDB:
    """A handle on one tuning database file (cheap: it holds only the path)."""

    def __init__(self, path: str | Path | None = None):
        self.path = Path(path).expanduser() if path is not None else default_path()
        self._ready = False

    def __repr__(self) -> str:
        return f"<TuningDB {self.path}>"

    # -- connections -----------------------------------------------------------------------------------------
    @contextlib.contextmanager
    def connect(self) -> Iterator[sqlite3.Connection]:
        """A fresh connection (autocommit; callers open transactions), closed on exit."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_MS / 1000, isolation_level=None)
        try:
            conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
            if not self._ready:
                self._retry(lambda: self._init(conn))
                self._ready = True
            yield conn
        finally:
            conn.close()

    @staticmethod
    def _init(conn: sqlite3.Connection) -> None:
        conn.execute("PRAGMA journal_mode = WAL")  # persistent: once set, every later connection is in WAL mode
        conn.execute("PRAGMA synchronous = NORMAL")
        conn.execute("BEGIN IMMEDIATE")  # one process creates or migrates; the others wait, then find it done
        try:
            for statement in _SCHEMA.split(";"):
                if statement.strip():
                    conn.execute(statement)  # IF NOT EXISTS: an existing (maybe older) table is kept
            TuningDB._migrate(conn)
            for statement in _INDEXES.split(";"):
                if statement.strip():
                    conn.execute(statement)
            conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise

    @staticmethod
    def _migrate(conn: sqlite3.Connection) -> None:
        """Bring an older table up to this schema: add the columns it lacks; old rows get a uid of their own."""
        have = {row[1] for row in conn.execute("PRAGMA table_info(measurements)")}
        missing = [(c, t) for c, t in _ADDED_IN_V2.items() if c not in have]
        for column, kind in missing:
            conn.execute(f"ALTER TABLE measurements ADD COLUMN {column} {kind}")
        if missing:
            conn.execute("UPDATE measurements SET uid = 'v1-' || id WHERE uid IS NULL")
            conn.execute("UPDATE measurements SET attempts = 1 WHERE attempts IS NULL")

    @staticmethod
    def _retry(fn: Any, attempts: int = 20) -> Any:
        """Run ``fn``; a "database is locked/busy" error (past the busy timeout) is retried with back-off."""
        for i in range(attempts):
            try:
                return fn()
            except sqlite3.OperationalError as e:
                text = str(e).lower()
                if ("locked" not in text and "busy" not in text) or i == attempts - 1:
                    raise
                time.sleep(min(0.05 * 2**i, 1.0))
        return None

    # -- writing ---------------------------------------------------------------------------------------------
    def record(self, m: Measurement) -> int:
        """Append one measurement; returns its row id (also set on ``m.id``). A measurement whose ``uid`` is
        already stored is not added again (the stored row's id is returned)."""
        return self.record_many([m])[0]

    @staticmethod
    def _row(m: Measurement) -> dict[str, Any]:
        import socket

        return {
            "kernel": m.kernel, "module": m.module, "source_hash": m.source_hash, "config": _canon(m.config),
            "shapes": canonical_shapes(m.shapes), "dtypes": _canon(m.dtypes), "target": m.target,
            "device": m.device, "host": socket.gethostname(), "versions": _canon(m.versions), "status": m.status,
            "message": m.message, "latency_ms": m.latency_ms, "p20_ms": m.p20_ms, "p80_ms": m.p80_ms,
            "min_ms": m.min_ms, "runs": m.runs, "ref_ms": m.ref_ms, "max_abs": m.max_abs, "max_rel": m.max_rel,
            "rtol": m.rtol, "atol": m.atol, "passed": None if m.passed is None else int(bool(m.passed)),
            "flops": m.flops, "bytes": m.bytes, "compile_s": m.compile_s, "timestamp": m.timestamp,
            "pid": os.getpid(), "uid": m.uid, "sweep": m.sweep, "worker": m.worker, "driver": m.driver,
            "clocks": _canon(m.clocks), "stage": m.stage, "attempts": m.attempts,
            "resources": _canon(m.resources) if m.resources else None,
        }

    def record_many(self, ms: list[Measurement]) -> list[int]:
        """Append measurements in one transaction, skipping any whose ``uid`` is stored; returns their row ids."""
        rows = [self._row(m) for m in ms]
        sql = (f"INSERT OR IGNORE INTO measurements ({', '.join(_COLUMNS)}) "
               f"VALUES ({', '.join(':' + c for c in _COLUMNS)})")

        def write() -> list[int]:
            ids = []
            with self.connect() as conn:
                conn.execute("BEGIN IMMEDIATE")
                try:
                    for row in rows:
                        cur = conn.execute(sql, row)
                        if cur.rowcount:
                            ids.append(int(cur.lastrowid))
                        else:  # already stored: the existing row
                            ids.append(int(conn.execute("SELECT id FROM measurements WHERE uid = ?",
                                                        (row["uid"],)).fetchone()[0]))
                    conn.execute("COMMIT")
                except BaseException:
                    conn.execute("ROLLBACK")
                    raise
            return ids

        ids = self._retry(write)
        for m, i in zip(ms, ids):
            m.id = i
        return ids

    def merge(self, source: Any) -> int:
        """Add another database's rows (a :class:`TuningDB`, a path, or measurements), skipping rows already here
        (same ``uid``); returns how many were added. Merging the same worker database twice adds nothing."""
        if isinstance(source, (str, Path)):
            source = TuningDB(source)
        rows = source.query(device=None) if isinstance(source, TuningDB) else list(source)
        before = len(self)
        for m in rows:
            m.id = None
        self.record_many(rows)
        return len(self) - before

    def clear(self, kernel: str | None = None) -> int:
        """Delete every row (or one kernel's rows); returns how many."""
        def delete() -> int:
            with self.connect() as conn:
                if kernel is None:
                    cur = conn.execute("DELETE FROM measurements")
                else:
                    cur = conn.execute("DELETE FROM measurements WHERE kernel = ?", (kernel,))
                return cur.rowcount

        return int(self._retry(delete))

    # -- reading ---------------------------------------------------------------------------------------------
    def query(self, kernel: Any = None, shapes: Any = None, target: Any = None, device: str | None = THIS_DEVICE,
              status: str | None = None, source_hash: str | None = None,
              limit: int | None = None, sweep: str | None = None) -> list[Measurement]:
        """Measurements, oldest first, filtered by any of:

        - ``kernel``: a name (``"matmul_relu"`` or ``"module.matmul_relu"``) — any source; or the factory itself —
          its name *and* its current source (an edited kernel starts afresh);
        - ``shapes``: parameter shapes (``[(512, 512), (512, 512), (512, 512)]``), or factory arguments that must
          match (``{"M": 512, "N": 512, "K": 512}``);
        - ``target``: ``"cpu"``/``"cuda"`` (or a target dict); ``device``: a device name, ``"this"`` (default: this
          machine's device for the target) or ``None`` (any);
        - ``status``: e.g. ``"ok"``; ``sweep``: a sweep's key (:func:`~.record.sweep_key`).
        """
        where, params = [], []
        if kernel is not None:
            if isinstance(kernel, str):
                where.append("(kernel = ? OR module || '.' || kernel = ?)")
                params += [kernel, kernel]
            else:
                name, _module, digest = kernel_identity(kernel)
                where.append("kernel = ?")
                params.append(name)
                source_hash = source_hash or digest
        if source_hash is not None:
            where.append("source_hash = ?")
            params.append(source_hash)
        match: dict[str, Any] = {}
        if isinstance(shapes, dict):
            match = {k: jsonable(v) for k, v in shapes.items()}
        elif shapes is not None:
            where.append("shapes = ?")
            params.append(canonical_shapes(shapes))
        kind = None
        if target is not None:
            from ..machine import target_kind

            kind = target_kind(target)
            where.append("target = ?")
            params.append(kind)
        if device == THIS_DEVICE:
            from ..machine import device_name

            kinds = [kind] if kind else ["cpu", "cuda"]
            where.append("(" + " OR ".join("(target = ? AND device = ?)" for _ in kinds) + ")")
            for k in kinds:
                params += [k, device_name(k)]
        elif device is not None:
            where.append("device = ?")
            params.append(device)
        if status is not None:
            where.append("status = ?")
            params.append(status)
        if sweep is not None:
            where.append("sweep = ?")
            params.append(sweep)
        sql = "SELECT id, " + ", ".join(_COLUMNS) + " FROM measurements"
        if where:
            sql += " WHERE " + " AND ".join(where)
        sql += " ORDER BY timestamp, id"

        def read() -> list[tuple]:
            with self.connect() as conn:
                return conn.execute(sql, params).fetchall()

        rows = [self._measurement(r) for r in self._retry(read)]
        if match:
            rows = [m for m in rows if all(jsonable(m.config.get(k)) == v for k, v in match.items())]
        return rows[-limit:] if limit else rows

    def best(self, kernel: Any, shapes: Any = None, target: Any = None,
             device: str | None = THIS_DEVICE, source_hash: str | None = None) -> Measurement | None:
        """The best configuration known for ``kernel`` at ``shapes`` on ``target`` and ``device`` (see
        :meth:`query`), for one version of its source when ``source_hash`` is given (a factory implies its own).

        Only configurations that ran and matched the reference (or had none) count. A configuration measured more
        than once is ranked by the median of its measurements; the newest measurement of the winner is returned,
        with that median and the count on ``ranked_ms`` / ``ranked_runs`` (``describe()`` shows them).
        """
        rows = [m for m in self.query(kernel, shapes, target, device, source_hash=source_hash) if m.ok]
        by_config: dict[str, list[Measurement]] = {}
        for m in rows:
            by_config.setdefault(_canon(m.config), []).append(m)
        if not by_config:
            return None
        ranked = min(by_config.values(), key=lambda ms: statistics.median(m.latency_ms for m in ms))
        return dataclasses.replace(ranked[-1], ranked_ms=float(statistics.median(m.latency_ms for m in ranked)),
                                   ranked_runs=len(ranked))

    def kernels(self) -> list[str]:
        """Names of every kernel with measurements."""
        def read() -> list[tuple]:
            with self.connect() as conn:
                return conn.execute("SELECT DISTINCT kernel FROM measurements ORDER BY kernel").fetchall()

        return [r[0] for r in self._retry(read)]

    def __len__(self) -> int:
        def read() -> int:
            with self.connect() as conn:
                return int(conn.execute("SELECT COUNT(*) FROM measurements").fetchone()[0])

        return int(self._retry(read))

    @staticmethod
    def _measurement(row: tuple) -> Measurement:
        d = dict(zip(("id", *_COLUMNS), row))
        passed = d.pop("passed")
        d.pop("host")
        d.pop("pid")
        for key in ("config", "shapes", "dtypes", "versions", "clocks"):
            d[key] = json.loads(d[key]) if d[key] else ({} if key in ("config", "versions", "clocks") else [])
        for key in ("sweep", "worker", "driver", "stage"):
            d[key] = d[key] or ""
        d["attempts"] = d["attempts"] or 1
        d["resources"] = json.loads(d["resources"]) if d["resources"] else {}
        d["uid"] = d["uid"] or f"v1-{d['id']}"
        return Measurement(passed=None if passed is None else bool(passed), **d)


def best(kernel: Any, shapes: Any = None, target: Any = None, device: str | None = THIS_DEVICE,
         db: TuningDB | str | Path | None = None, source_hash: str | None = None) -> Measurement | None:
    """The best known configuration for ``kernel`` (name or factory) at ``shapes`` on ``target``, across sessions.

    ``best("matmul_relu", {"M": 512, "N": 512, "K": 512}, "cpu").config`` -> ``{"block_M": 128, ...}``; ``None``
    when nothing that passed has been measured.
    """
    handle = db if isinstance(db, TuningDB) else TuningDB(db)
    return handle.best(kernel, shapes, target, device, source_hash)


__all__ = ["TuningDB", "best", "default_path", "canonical_shapes", "THIS_DEVICE"]
