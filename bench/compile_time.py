"""Start-up and compile latency of tilelang_core, each measured in fresh Python processes.

Why this exists: a JIT compiler is only pleasant when importing it is cheap, a cold compile takes about a
second, and a second process that asks for the same kernel gets it from the disk cache at once. This script
keeps those numbers honest. Every measurement runs in a new subprocess (so nothing is warm that a user's
fresh process would not have warm), repeated ``--runs`` times; the table shows the median and the range.

Measured:

(a) ``import tilelang_core`` (should not import TVM or torch),
(b) ``import tilelang_core.language`` (imports TVM),
(c) cold compile of the quickstart ``matmul_relu`` 1024^3 with an empty cache dir, after the imports (this
    includes the one-off build of the C runtime shim into the new cache dir), then a second, different
    config in the same process (shim built, TVM warm), and a breakdown of that second compile by stage,
(d) a disk-cache hit for the same kernel in a new process, after the imports,
(e) a memory-cache hit (the same call again in that process).

Usage: ``python bench/compile_time.py [--runs 5] [--json PATH]``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
GEMM_ARGS = (1024, 1024, 1024, 64, 64, 64)
GEMM_ARGS_2 = (1024, 1024, 1024, 128, 128, 32)


# -- children (run in a fresh process each) -----------------------------------------------------------------
def _load_gemm() -> Any:
    import importlib.util

    spec = importlib.util.spec_from_file_location("tl_examples_gemm", ROOT / "examples" / "gemm.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def child(mode: str) -> dict[str, float]:
    t0 = time.perf_counter()
    if mode == "import_core":
        import tilelang_core  # noqa: F401

        out = {"import_core": time.perf_counter() - t0, "tvm_loaded": float("tvm" in sys.modules),
               "torch_loaded": float("torch" in sys.modules)}
        return out
    if mode == "import_language":
        import tilelang_core.language  # noqa: F401

        return {"import_language": time.perf_counter() - t0}
    # compile modes: imports first (not timed here), then the factory call
    import torch  # noqa: F401

    import tilelang_core
    import tilelang_core.language  # noqa: F401

    gemm = _load_gemm()
    t_imports = time.perf_counter() - t0
    out = {"imports": t_imports}
    t = time.perf_counter()
    k = gemm.matmul_relu(*GEMM_ARGS)
    first = time.perf_counter() - t
    expected = "compiled" if mode == "cold" else "disk"
    if k.cache_status != expected:
        raise SystemExit(f"expected a {expected} kernel, got cache_status={k.cache_status!r}")
    out["cold" if mode == "cold" else "disk_hit"] = first
    t = time.perf_counter()
    k2 = gemm.matmul_relu(*GEMM_ARGS)
    out["memory_hit"] = time.perf_counter() - t
    assert k2 is k
    if mode == "cold":
        t = time.perf_counter()
        k3 = gemm.matmul_relu(*GEMM_ARGS_2)
        out["cold_second"] = time.perf_counter() - t
        assert k3.cache_status == "compiled"
        out.update(stages())
    out["first_call"] = _first_call(k)
    out["cache_stats"] = tilelang_core.cache_stats()  # type: ignore[assignment]
    return out


def _first_call(k: Any) -> float:
    import torch

    a, b = torch.randn(1024, 1024), torch.randn(1024, 1024)
    t = time.perf_counter()
    k(a, b)
    return time.perf_counter() - t


def stages() -> dict[str, float]:
    """One more compile (a third config), split into parse, our passes, LLVM codegen and link."""
    from tilelang_core.backend import cpu
    from tilelang_core.jit import cache

    gemm = _load_gemm()
    t = time.perf_counter()
    func = gemm.matmul_relu.get_program(1024, 1024, 1024, 64, 128, 128)
    parse = time.perf_counter() - t
    t = time.perf_counter()
    mod = cpu.lower(func)
    lower = time.perf_counter() - t
    with tempfile.TemporaryDirectory() as d:
        build = cpu.build(mod, Path(d), cache.cache_dir())
    return {"stage_parse": parse, "stage_passes": lower, "stage_codegen": build.timings["codegen"],
            "stage_link": build.timings["link"], "stage_sources": build.timings["sources"]}


# -- parent -------------------------------------------------------------------------------------------------
def run_child(mode: str, cache_dir: str) -> dict[str, Any]:
    env = dict(os.environ, TILELANG_CORE_CACHE_DIR=cache_dir)
    env.pop("TILELANG_CORE_DISABLE_CACHE", None)
    res = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--child", mode], env=env, cwd=ROOT,
                         capture_output=True, text=True)
    if res.returncode != 0:
        raise RuntimeError(f"child {mode} failed:\n{res.stdout}\n{res.stderr}")
    return json.loads(res.stdout.strip().splitlines()[-1])


ROWS = [
    ("import_core", "(a) import tilelang_core", "s"),
    ("import_language", "(b) import tilelang_core.language (TVM)", "s"),
    ("imports", "    imports before compiling (torch, tilelang_core, language, example)", "s"),
    ("cold", "(c) cold compile, empty cache dir (incl. runtime shim build)", "s"),
    ("cold_second", "(c') cold compile of a 2nd config, same process", "s"),
    ("stage_parse", "    stage: factory + TVMScript parse", "s"),
    ("stage_passes", "    stage: tilelang_core CPU passes", "s"),
    ("stage_codegen", "    stage: TVM/LLVM codegen (tvm.compile)", "s"),
    ("stage_link", "    stage: link kernel.so (export_library)", "s"),
    ("stage_sources", "    stage: dump LLVM IR + asm sources", "s"),
    ("disk_hit", "(d) disk-cache hit, new process", "ms"),
    ("memory_hit", "(e) memory-cache hit", "us"),
    ("first_call", "    first call of the loaded kernel (1024^3)", "ms"),
]


def fmt(v: float, unit: str) -> str:
    scale = {"s": 1.0, "ms": 1e3, "us": 1e6}[unit]
    return f"{v * scale:.3f} {unit}" if unit != "us" else f"{v * scale:.1f} {unit}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--json", type=Path)
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        print(json.dumps(child(args.child)))
        return 0

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from cpu_kernels import run_info  # the same header as the kernel benchmark

    info = run_info()
    print(f"date:    {info['date']}")
    print(f"machine: {info['cpu']} (LLVM cpu {info['llvm_cpu']}), {info['cores']} cores")
    print(f"versions: torch {info['torch']}, tvm {info['tvm']}, tilelang_core {info['tilelang_core']}, "
          f"python {info['python']}")
    print(f"commit:  {info['commit']}")
    print(f"loadavg at start: {info['loadavg_start']}")
    print(f"runs: {args.runs} fresh processes per measurement\n", flush=True)

    samples: dict[str, list[float]] = {}
    lazy = []

    def add(d: dict[str, Any]) -> None:
        for k, v in d.items():
            if isinstance(v, (int, float)):
                samples.setdefault(k, []).append(float(v))

    with tempfile.TemporaryDirectory(prefix="tlc-compile-time-") as root:
        for i in range(args.runs):
            d = run_child("import_core", os.path.join(root, "unused"))
            lazy.append((d.pop("tvm_loaded"), d.pop("torch_loaded")))
            add(d)
            add(run_child("import_language", os.path.join(root, "unused")))
            cache = os.path.join(root, f"cache{i}")  # empty: a cold compile
            add(run_child("cold", cache))
            add(run_child("disk", cache))  # same dir, new process: a disk hit
            print(f"  run {i + 1}/{args.runs} done", flush=True)

    rows = []
    for key, label, unit in ROWS:
        xs = samples.get(key)
        if not xs:
            continue
        rows.append([label, fmt(statistics.median(xs), unit), fmt(min(xs), unit), fmt(max(xs), unit), str(len(xs))])
    widths = [max(len(r[i]) for r in rows + [["measurement", "median", "min", "max", "n"]]) for i in range(5)]
    header = ["measurement", "median", "min", "max", "n"]
    print("\n| " + " | ".join(h.ljust(w) for h, w in zip(header, widths)) + " |")
    print("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    for r in rows:
        print("| " + " | ".join(c.ljust(w) for c, w in zip(r, widths)) + " |")
    tvm_lazy = all(t == 0 for t, _ in lazy)
    torch_lazy = all(t == 0 for _, t in lazy)
    print(f"\n`import tilelang_core` leaves TVM unloaded: {tvm_lazy}; leaves torch unloaded: {torch_lazy}")
    info["loadavg_end"] = [round(x, 2) for x in os.getloadavg()]
    print(f"loadavg at end: {info['loadavg_end']}")
    if args.json:
        args.json.write_text(json.dumps({"info": info, "samples": samples}, indent=1))
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
