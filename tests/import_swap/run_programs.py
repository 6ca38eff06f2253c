"""Run import-swap programs in this interpreter with ``tilelang_core`` installed as ``tilelang``.

``python tests/import_swap/run_programs.py DEVICE [NAME ...]`` imports each ``programs/NAME.py`` (all of them when
no name is given), calls its ``run(device)`` (which checks its kernels against torch and raises on a mismatch) and
prints one JSON line per program: ``{"name", "ok", "seconds", "error"}``, after one for the pseudo-program
``__alias__`` (the alias itself checked: ``tilelang``'s modules are ``tilelang_core``'s own objects). One
interpreter for all programs keeps the suite quick (torch and TVM are imported once); a crash still fails the whole
run, which the caller reports.
"""

from __future__ import annotations

import importlib.util
import json
import sys
import time
import traceback
from pathlib import Path

HERE = Path(__file__).resolve().parent
PROGRAMS = HERE / "programs"


def program_names() -> list[str]:
    return sorted(p.stem for p in PROGRAMS.glob("*.py") if not p.stem.startswith("_"))


def run_one(name: str, device: str) -> dict:
    t0 = time.perf_counter()
    try:
        spec = importlib.util.spec_from_file_location(f"import_swap_{name}", PROGRAMS / f"{name}.py")
        mod = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = mod
        spec.loader.exec_module(mod)
        mod.run(device)
        return {"name": name, "ok": True, "seconds": time.perf_counter() - t0, "error": None}
    except BaseException as e:  # noqa: BLE001 - reported per program
        return {"name": name, "ok": False, "seconds": time.perf_counter() - t0,
                "error": "".join(traceback.format_exception(e))[-4000:]}


def run_in_child(device: str, cache_dir: str, names: list[str] | None = None,
                 timeout: float = 900) -> tuple[dict[str, dict], str]:
    """Run the programs in a fresh interpreter with an empty kernel cache of its own: (results by name, the
    child's stderr and exit status, for a report when a program is missing from the results)."""
    import os
    import subprocess

    env = {**os.environ, "TILELANG_CORE_CACHE_DIR": cache_dir}
    proc = subprocess.run([sys.executable, str(Path(__file__).resolve()), device, *(names or [])],
                          capture_output=True, text=True, timeout=timeout, env=env, cwd=str(HERE.parents[1]))
    results = {}
    for line in proc.stdout.splitlines():
        if line.startswith("{"):
            r = json.loads(line)
            results[r["name"]] = r
    return results, f"exit status {proc.returncode}; stderr:\n{proc.stderr[-4000:]}"


def check_alias(real_tilelang_absent: bool) -> dict:
    """The alias gives tilelang_core's own module objects (reported as the pseudo-program ``__alias__``)."""
    try:
        assert real_tilelang_absent, "a real TileLang is installed here: the import-swap results say nothing"
        import tilelang
        import tilelang.jit
        import tilelang.language as T

        import tilelang_core

        assert T is tilelang_core.language and tilelang.compile is tilelang_core.compile
        assert tilelang.jit is tilelang_core.jit and callable(tilelang.jit)  # the decorator, not the subpackage
        assert T.__spec__.name == "tilelang_core.language"
        from tilelang.jit.kernel import JITKernel

        assert JITKernel is tilelang_core.JITKernel
        try:
            import tilelang.no_such_module  # noqa: F401
        except ModuleNotFoundError as e:
            assert "tilelang.no_such_module" in str(e), str(e)
        else:
            raise AssertionError("a missing submodule imported")
        return {"name": "__alias__", "ok": True, "seconds": 0.0, "error": None}
    except BaseException as e:  # noqa: BLE001
        return {"name": "__alias__", "ok": False, "seconds": 0.0, "error": "".join(traceback.format_exception(e))}


def main(argv: list[str]) -> int:
    sys.path.insert(0, str(HERE))
    import tilelang_alias

    absent = importlib.util.find_spec("tilelang") is None
    tilelang_alias.install()
    print(json.dumps(check_alias(absent)), flush=True)
    device, names = argv[0], argv[1:] or program_names()
    for name in names:
        print(json.dumps(run_one(name, device)), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
