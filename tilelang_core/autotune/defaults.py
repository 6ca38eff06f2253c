"""Shipped tuning defaults: the best configuration measured per program, problem, dtype and device, in a data file
of the package, used where the user's own tuning database knows nothing better.

Why this module exists: a sweep takes minutes on the GPU; a user who calls the quickstart GEMM on an H200 without
tile sizes (or asks ``@autotune(from_db=True)`` for a known answer) should get the configuration the project
measured there, not a guess. ``data/defaults.json`` holds those measurements: rows of the tuning database's
schema (the :class:`~.record.Measurement` fields: kernel, source hash, full config, shapes, dtypes, target, device,
latency, reference latency, resources, ...) plus three fields of their own — ``arch`` (the CUDA architecture the
kernel was built for, ``""`` for the CPU), ``problem`` (the factory's arguments that are the problem, not the
tuning: ``{"M": 4096, "N": 4096, "K": 4096, "dtype": "float16", "accum_dtype": "float32"}``) and ``shape_class``.
``bench/gpu/h200_defaults_sweep.py`` writes it on the GPU host (:func:`write_defaults`).

Which row answers a call (:func:`default_config`):

1. the user's tuning database first: its best measurement for this factory (same source), these problem
   arguments, target and device — the user's own results always win;
2. else a shipped row of the same kernel name *and source hash* (an edited program starts afresh), target kind,
   architecture and device name (``"NVIDIA H200"``: this machine's, unless ``device=`` says otherwise), whose
   non-numeric problem arguments (dtypes) are equal: the row of exactly these sizes when there is one;
3. else the nearest row of the same shape class — ``decode`` (M <= 16), ``skinny`` (M <= 256), ``square`` (larger
   M) — nearest by the sum of ``|log2(a / b)|`` over the sizes. A program without an ``M`` argument gets exact
   matches only.

A CPU target never gets a CUDA row (rows match on the target kind), and a machine whose GPU is not the row's
device gets none. A malformed file is a :class:`ShippedDefaultsError` naming the file, the row and the field.
"""

from __future__ import annotations

import dataclasses
import json
import math
import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .db import THIS_DEVICE, TuningDB
from .record import Measurement, jsonable, kernel_identity
from .space import factory_args, is_tunable
from .workers import PASS_CONFIGS

DATA_FILE = Path(__file__).resolve().parent / "data" / "defaults.json"
FORMAT = "tilelang_core tuning defaults"
VERSION = 1
SHAPE_CLASSES = ("decode", "skinny", "square")
DECODE_MAX_M = 16
SKINNY_MAX_M = 256
_OWN_FIELDS = {"arch": str, "problem": dict, "shape_class": str}
_REQUIRED = {"kernel": str, "source_hash": str, "config": dict, "target": str, "device": str, "status": str,
             "latency_ms": (int, float), "arch": str, "problem": dict}
_TYPES: dict[str, Any] = {"kernel": str, "module": str, "source_hash": str, "config": dict, "status": str,
                          "message": str, "shapes": list, "dtypes": list, "target": str, "device": str,
                          "versions": dict, "clocks": dict, "resources": dict, "sweep": str, "worker": str,
                          "driver": str, "stage": str, "uid": str}
_SKIPPED = ("id", "ranked_ms", "ranked_runs")  # a Measurement's fields that are not stored
_FIELDS = {f.name for f in dataclasses.fields(Measurement)} - set(_SKIPPED)


class ShippedDefaultsError(ValueError):
    """The shipped defaults file cannot be read as this module writes it."""


@dataclass(frozen=True)
class ShippedRow:
    """One shipped measurement and what it is the best for."""

    measurement: Measurement
    arch: str
    problem: dict[str, Any]
    shape_class: str

    @property
    def tuned(self) -> dict[str, Any]:
        """The configuration without the problem: the arguments (and ``pass_configs``) the sweep chose."""
        return {k: v for k, v in self.measurement.config.items() if k not in self.problem}


@dataclass(frozen=True)
class Default:
    """The answer of :func:`default_config`: the tuned arguments to compile with, and where they came from
    (``source``: ``"db"`` — the user's tuning database — or ``"shipped"``; ``match``: ``"exact"`` or ``"bucket"``,
    the nearest shipped row of the same shape class)."""

    config: dict[str, Any]
    source: str
    match: str
    measurement: Measurement


def shape_class(problem: dict[str, Any]) -> str | None:
    """``decode`` (M <= 16), ``skinny`` (M <= 256) or ``square``, by the problem's ``M`` (any case); None without
    an integer ``M``."""
    m = next((v for k, v in problem.items() if k.lower() == "m"), None)
    if not isinstance(m, int) or isinstance(m, bool):
        return None
    return "decode" if m <= DECODE_MAX_M else "skinny" if m <= SKINNY_MAX_M else "square"


def _is_size(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _distance(a: dict[str, Any], b: dict[str, Any]) -> float:
    return sum(abs(math.log2(max(1, a[k]) / max(1, b[k]))) for k in a if _is_size(a[k]))


def _fail(path: Path, where: str, what: str) -> ShippedDefaultsError:
    return ShippedDefaultsError(f"{path}: {where}: {what} (regenerate it with bench/gpu/h200_defaults_sweep.py, "
                                "docs/tuning.md#shipped-defaults)")


def _row(path: Path, i: int, raw: Any) -> ShippedRow:
    where = f"row {i}"
    if not isinstance(raw, dict):
        raise _fail(path, where, f"expected an object, got {type(raw).__name__}")
    for name, kind in _REQUIRED.items():
        if name not in raw:
            raise _fail(path, where, f"the field {name!r} is missing")
        if not isinstance(raw[name], kind) or isinstance(raw[name], bool):
            raise _fail(path, f"{where}, field {name!r}",
                        f"expected {getattr(kind, '__name__', 'a number')}, got {raw[name]!r}")
    unknown = sorted(set(raw) - _FIELDS - set(_OWN_FIELDS))
    if unknown:
        raise _fail(path, where, f"unknown field(s) {', '.join(map(repr, unknown))}")
    for name, kind in _TYPES.items():
        if raw.get(name) is not None and not isinstance(raw[name], kind):
            raise _fail(path, f"{where}, field {name!r}", f"expected {kind.__name__}, got {raw[name]!r}")
    if raw["target"] not in ("cpu", "cuda"):
        raise _fail(path, f"{where}, field 'target'", f"expected 'cpu' or 'cuda', got {raw['target']!r}")
    if raw["status"] != "ok" or not raw["latency_ms"] > 0:
        raise _fail(path, where, f"a default must be a measurement that passed (status 'ok', latency > 0), got "
                                 f"status {raw['status']!r}, latency {raw['latency_ms']!r}")
    problem = raw["problem"]
    missing = [k for k in problem if k not in raw["config"] or jsonable(raw["config"][k]) != jsonable(problem[k])]
    if missing:
        raise _fail(path, f"{where}, field 'problem'", f"{missing} are not the config's values")
    fields = {k: v for k, v in raw.items() if k in _FIELDS}
    try:
        m = Measurement(**fields)
    except TypeError as e:
        raise _fail(path, where, str(e)) from None
    cls = raw.get("shape_class") or shape_class(problem) or ""
    return ShippedRow(m, raw["arch"], dict(problem), cls)


_LOADED: dict[tuple[str, int, int], list[ShippedRow]] = {}


def load_defaults(path: str | Path | None = None) -> list[ShippedRow]:
    """The rows of a shipped defaults file (default: the package's ``data/defaults.json``), checked (see
    :class:`ShippedDefaultsError`). Read once per file version."""
    p = Path(path) if path is not None else DATA_FILE
    try:
        st = p.stat()
    except OSError as e:
        raise ShippedDefaultsError(f"{p}: cannot read the shipped tuning defaults: {e.strerror or e}") from None
    key = (str(p), st.st_mtime_ns, st.st_size)
    if key in _LOADED:
        return _LOADED[key]
    try:
        data = json.loads(p.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise _fail(p, "not JSON", str(e)) from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise _fail(p, "header", f"expected an object with \"format\": {FORMAT!r}")
    if data.get("version") != VERSION:
        raise _fail(p, "header", f"expected \"version\": {VERSION}, got {data.get('version')!r}")
    if not isinstance(data.get("rows"), list):
        raise _fail(p, "header", f"expected \"rows\": a list, got {type(data.get('rows')).__name__}")
    rows = [_row(p, i, r) for i, r in enumerate(data["rows"])]
    _LOADED[key] = rows
    return rows


def _where(target: Any) -> tuple[str, str]:
    """(kind, arch) of a target: ``("cuda", "sm_90a")``, ``("cpu", "")``."""
    from ..machine import target_kind
    from ..target import cuda_target, resolve_target

    kind = target_kind(resolve_target(target) if not isinstance(target, dict) else target)
    return kind, cuda_target(target)["arch"] if kind == "cuda" else ""


def shipped_match(rows: list[ShippedRow], kernel: str, source_hash: str, problem: dict[str, Any], kind: str,
                  arch: str, device: str) -> tuple[ShippedRow, str] | None:
    """The row for ``problem`` (exact sizes, else the nearest of its shape class; see the module docstring)."""
    fitting = []
    for r in rows:
        m = r.measurement
        if (m.kernel, m.source_hash, m.target, r.arch, m.device) != (kernel, source_hash, kind, arch, device):
            continue
        if set(r.problem) - set(problem):
            continue
        if any(not _is_size(v) and jsonable(problem[k]) != jsonable(v) for k, v in r.problem.items()):
            continue
        if all(jsonable(problem[k]) == jsonable(v) for k, v in r.problem.items()):
            return r, "exact"
        if all(_is_size(problem[k]) for k, v in r.problem.items() if _is_size(v)):
            fitting.append(r)
    cls = shape_class(problem)
    near = [r for r in fitting if cls is not None and r.shape_class == cls]
    if not near:
        return None
    return min(near, key=lambda r: _distance(r.problem, problem)), "bucket"


def _database(db: Any) -> TuningDB | None:
    if db is False:
        return None
    if db is None or db is True:
        return TuningDB()
    return db if isinstance(db, TuningDB) else TuningDB(db)


def _check_args(caller: str, factory: Any, args: Any) -> None:
    import inspect

    if not isinstance(args, dict):
        raise TypeError(f"{caller}: args must be a dict of the problem's arguments (M=..., N=..., ...), got "
                        f"{type(args).__name__}")
    params = inspect.signature(getattr(factory, "factory", factory)).parameters
    unknown = [k for k in args if k not in params and k != PASS_CONFIGS]
    if unknown and not any(p.kind is p.VAR_KEYWORD for p in params.values()):
        raise ValueError(f"{caller}: {', '.join(map(repr, unknown))} is not an argument of "
                         f"{kernel_identity(factory)[0]} (its arguments: {', '.join(params)})")


def default_config(factory: Any, args: dict[str, Any], target: Any = None, *, device: str | None = THIS_DEVICE,
                   db: Any = True, shipped: Any = True) -> Default | None:
    """The configuration to compile ``factory`` with for the problem ``args`` on ``target`` when none is given:
    the user's tuning database's best (``db``: True the default one, a path or :class:`TuningDB`, False none),
    else the shipped defaults (``shipped``: True the package's file, a path, False none). ``device``: the device
    the kernel will run on (default: this machine's). None when neither knows this program here.

    ``args`` are the problem's arguments (``M``, ``N``, ``K``, ``dtype``, ...); the factory's defaults fill the
    rest. ``Default.config`` holds the tuned arguments (and ``pass_configs``) only."""
    from ..machine import device_name

    _check_args("default_config", factory, args)
    kind, arch = _where(target if target is not None else getattr(factory, "target", "auto"))
    name, _module, source_hash = kernel_identity(factory)
    problem = {k: v for k, v in factory_args(factory, args).items() if k in args or not is_tunable(k)}
    problem.pop(PASS_CONFIGS, None)
    database = _database(db)
    if database is not None:
        known = database.best(factory, shapes=problem, target=kind, device=device)
        if known is not None:
            cfg = {k: v for k, v in known.config.items() if k not in problem}
            return Default(cfg, "db", "exact", known)
    if shipped is False:
        return None
    where = device_name(kind) if device == THIS_DEVICE else device
    if where is None:
        return None
    rows = load_defaults(None if shipped is True else shipped)
    hit = shipped_match(rows, name, source_hash, problem, kind, arch, where)
    if hit is None:
        return None
    row, how = hit
    return Default(row.tuned, "shipped", how, row.measurement)


def compile_default(factory: Any, args: dict[str, Any], target: Any = None, *, device: str | None = THIS_DEVICE,
                    db: Any = True, shipped: Any = True) -> Any:
    """Compile ``factory`` for the problem ``args`` with :func:`default_config`'s configuration (its own
    argument defaults where nothing is known): ``compile_default(matmul_relu, dict(M=4096, N=4096, K=4096,
    dtype="float16"), target="cuda")``. A required tuning argument that nothing supplies is a ``TypeError``
    naming it. The kernel's ``tuning_default`` says where its configuration came from (a :class:`Default`, or
    None)."""
    import inspect

    from .workers import compile_config, jitted

    jf = jitted(factory, None, target)
    found = default_config(factory, args, target if target is not None else jf.target, device=device, db=db,
                           shipped=shipped)
    call = {**args, **(found.config if found is not None else {})}
    given = factory_args(factory, call)
    sig = inspect.signature(getattr(factory, "factory", factory))
    missing = [n for n, p in sig.parameters.items() if p.default is p.empty and n not in given]
    if missing:
        raise TypeError(f"compile_default: no tuning default for {kernel_identity(factory)[0]} at {args} on this "
                        f"target and device, and the factory has no value for {', '.join(missing)}: pass them, "
                        "or tune it first (tilelang_core.autotune.tune)")
    kernel = compile_config(jf, call)
    kernel.tuning_default = found
    return kernel


def call_with_defaults(jf: Any, args: tuple, kwargs: dict[str, Any]) -> Any:
    """A ``@jit`` factory called without some of its tuning arguments (``matmul_relu(4096, 4096, 4096,
    dtype="float16")``): the kernel compiled with :func:`default_config`'s configuration for the call's problem on
    the factory's target, or None when the missing arguments are not all tuning arguments (``block_*``,
    ``num_stages``, ``threads``) or nothing known supplies them — the caller then raises its own ``TypeError``.
    The JIT's hook for the shipped defaults; the kernel's ``tuning_default`` says where its configuration came from."""
    import inspect

    from .workers import compile_config

    sig = inspect.signature(getattr(jf, "factory", jf))
    try:
        given = dict(sig.bind_partial(*args, **kwargs).arguments)
    except TypeError:
        return None
    missing = [n for n, p in sig.parameters.items() if p.default is p.empty and n not in given]
    if not missing or not all(is_tunable(n) for n in missing):
        return None
    try:
        found = default_config(jf, given, getattr(jf, "target", None))
    except (sqlite3.Error, OSError):  # an unreadable tuning database: no default, the caller's TypeError stands
        return None
    if found is None or not set(missing) <= set(found.config):
        return None
    kernel = compile_config(jf, {**found.config, **given})
    kernel.tuning_default = found
    return kernel


def write_defaults(path: str | Path, rows: list[tuple[Measurement, str, dict[str, Any]]],
                   generated: dict[str, Any] | None = None) -> Path:
    """Write a shipped defaults file: ``rows`` of ``(measurement, arch, problem)`` (each measurement ``ok``; its
    config must hold the problem's values), with ``generated`` (commit, date, device, script) in the header.
    The file is read back and checked before it replaces ``path``."""
    out = []
    for m, arch, problem in rows:
        d = {k: jsonable(v) for k, v in dataclasses.asdict(m).items() if k in _FIELDS}
        d.update(arch=arch, problem=jsonable(problem), shape_class=shape_class(problem) or "")
        out.append(d)
    out.sort(key=lambda d: (d["kernel"], d["device"], d["arch"], json.dumps(d["problem"], sort_keys=True)))
    data = {"format": FORMAT, "version": VERSION,
            "generated": jsonable({"at": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), **(generated or {})}),
            "rows": out}
    p = Path(path)
    tmp = p.with_name(p.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    load_defaults(tmp)  # what is written must read back
    tmp.replace(p)
    return p


__all__ = ["default_config", "compile_default", "call_with_defaults", "load_defaults", "write_defaults",
           "shipped_match", "shape_class", "Default", "ShippedRow", "ShippedDefaultsError", "DATA_FILE",
           "SHAPE_CLASSES"]
