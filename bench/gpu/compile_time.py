"""Compile time through ``@jit`` (target CUDA) per configuration: cold, disk-cached, memory-cached; and Triton's.

Why this script exists: the goal is a cold compile of at most 1.0 s per configuration (lowering + codegen + the CUDA
compiler) on the GPU host, and the comparison a user makes is with Triton compiling a comparable GEMM. For the
quickstart GEMM (fp16 4096^3, three tile configs), flash attention (two configs) and W4A16 (per-channel and group
128) it measures, one compile at a time in this process (TVM imported and warmed up once first):

* cold: a fresh kernel cache, the wall time of the ``@jit`` call, split into "lower", "codegen", "nvcc" (the
  artifact's ``extra["timings"]``; "nvcc" is whichever CUDA compiler ran) and the rest (the factory's parse, the
  cache key, writing and loading the artifact) — the median of ``--repeat`` runs, each in its own fresh cache;
* disk: a new ``JITFactory`` on the same cache (what a new process pays once TVM is imported);
* memory: the same ``JITFactory`` called again;

with nvcc and with NVRTC where both are available (``pass_configs={"tl.cuda.compiler": ...}``; the artifact's
recorded command says which ran). Each cold run has an empty kernel cache; NVRTC's precompiled headers live for
the process (NVRTC deletes them at exit), made by the warm-up's compiles (a small kernel and a small wgmma GEMM:
``tl/tl.cuh`` and ``tl/tl_sm90.cuh``), so a cold row is a new configuration in a running session; the warm-up
line is what a process's first kernel pays. Triton (GPU host only: it compiles
for the visible GPU): the tutorial GEMM of ``triton_ref.py`` with the same tiles, cold (fresh ``TRITON_CACHE_DIR``),
from Triton's disk cache (a new ``JITFunction`` of the same function) and cached in memory (host time of a call).

    python bench/gpu/compile_time.py [--repeat 3] [--compilers nvcc nvrtc] [--only SUBSTR] [--no-triton]
                                     [--json out.json] [--log out.txt]

On a machine without a GPU it measures the compiles (nvcc needs no GPU) and says what it skipped.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import jit_build  # noqa: E402
from kernels import Entry, entries, load_factory  # noqa: E402

GOAL_S = 1.0
# entries of kernels.py: the quickstart GEMM (Triton compiles the same tiles), flash attention, W4A16
CONFIGS = (
    "gemm_f16_4096x4096x4096_128x128x32s4t128",
    "gemm_f16_4096x4096x4096_128x256x32s4t256",
    "gemm_f16_4096x4096x4096_128x128x32s3t128",
    "gemm_f16_4096x4096x4096_128x128x64s3t128",
    "fa_f16_8x16x4096x128_128x64s2t128",
    "fa_f16_8x32x2048x64_128x64s2t128",
    "dq_f16_16x8192x8192_g-1_16x128x256s3t128",
    "dq_f16_16x8192x8192_g128_16x128x256s3t128",
)
# compiled first (TVM's first-use costs and the header caches are not any config's): a small kernel, a small GEMM
WARMUP = ("t_add_1d_ragged", "gemm_f16_ragged_k")


@dataclass
class Row:
    """One configuration compiled by one CUDA compiler: medians in seconds."""

    config: str
    compiler: str
    cold: float = 0.0
    stages: dict[str, float] = field(default_factory=dict)  # lower, codegen, nvcc of the median cold run
    cold_all: list[float] = field(default_factory=list)
    disk: float = 0.0
    memory: float = 0.0
    ran: str = ""  # the compiler the artifact records (a check on the forcing)
    triton: dict[str, Any] = field(default_factory=dict)  # cold, disk, memory (medians), cold_all
    error: str = ""

    @property
    def other(self) -> float:
        return self.cold - sum(self.stages.values())


# -- choosing the CUDA compiler -----------------------------------------------------------------------------------
def available_compilers() -> dict[str, str]:
    """{"nvcc" / "nvrtc": "" when usable here, else why not}."""
    from tilelang_core.backend.cuda import nvcc as mod

    out = {"nvcc": "" if mod.find_nvcc() else "nvcc not found (PATH, $CUDA_HOME/bin, /usr/local/cuda/bin)"}
    probe = getattr(mod, "nvrtc_available", None)
    ok = probe() if probe is not None else _nvrtc_importable()
    out["nvrtc"] = "" if ok else "NVRTC unavailable (cuda-bindings or libnvrtc missing)"
    return out


def _nvrtc_importable() -> bool:
    try:
        from cuda.bindings import nvrtc

        return nvrtc.nvrtcVersion()[0] == nvrtc.nvrtcResult.NVRTC_SUCCESS
    except Exception:  # noqa: BLE001 - ImportError, or the library missing
        return False


@contextlib.contextmanager
def compiler(name: str) -> Iterator[None]:
    """Compile with ``name`` (``pass_configs={"tl.cuda.compiler": name}``, read by :func:`fresh_factory`)."""
    global COMPILER
    saved, COMPILER = COMPILER, name
    try:
        yield
    finally:
        COMPILER = saved


COMPILER = "auto"


def fresh_cache(scratch: Path, prefix: str) -> Path:
    """An empty kernel cache (NVRTC's precompiled headers are the process's own: see warm_up)."""
    return Path(tempfile.mkdtemp(prefix=prefix, dir=scratch))


# -- our compile times --------------------------------------------------------------------------------------------
def fresh_factory(entry: Entry, target: dict[str, Any]) -> Any:
    """A new ``@jit`` factory for the entry (an empty memory cache), with the entry's compiler options."""
    import tilelang_core

    base = load_factory(entry)
    configs = dict(entry.pass_configs or {})
    configs["tl.cuda.compiler"] = COMPILER
    return tilelang_core.jit(out_idx=base.out_idx, target=target, pass_configs=configs)(base.factory)


def timed_call(factory: Any, entry: Entry) -> tuple[float, Any]:
    """Wall seconds of one ``@jit`` call and the kernel."""
    t0 = time.perf_counter()
    kern = factory(*entry.args, **entry.kwargs)
    return time.perf_counter() - t0, kern


def measure(entry: Entry, comp: str, target: dict[str, Any], scratch: Path, repeat: int) -> Row:
    """Cold (``repeat`` fresh caches), disk and memory times of one config with one compiler."""
    row = Row(entry.name, comp)
    colds: list[tuple[float, dict[str, float]]] = []
    cache = scratch
    with compiler(comp):
        for _ in range(repeat):
            cache = fresh_cache(scratch, f"{comp}-")
            with jit_build.environ({"TILELANG_CORE_CACHE_DIR": str(cache)}):
                secs, kern = timed_call(fresh_factory(entry, target), entry)
            if kern.cache_status != "compiled":
                raise RuntimeError(f"expected a cold compile in a fresh cache, got {kern.cache_status}")
            colds.append((secs, {k: float(v) for k, v in kern.artifact.extra.get("timings", {}).items()}))
            row.ran = jit_build.compiler_of(kern)
        with jit_build.environ({"TILELANG_CORE_CACHE_DIR": str(cache)}):
            disk = [timed_call(fresh_factory(entry, target), entry) for _ in range(3)]
            factory = fresh_factory(entry, target)
            timed_call(factory, entry)
            memory = [timed_call(factory, entry)[0] for _ in range(5)]
    if any(k.cache_status != "disk" for _, k in disk):
        raise RuntimeError("expected disk-cache hits on the second factory")
    colds.sort(key=lambda c: c[0])
    row.cold, row.stages = colds[len(colds) // 2]
    row.cold_all = [c[0] for c in colds]
    row.disk = statistics.median(s for s, _ in disk)
    row.memory = statistics.median(memory)
    return row


def warm_up(target: dict[str, Any], scratch: Path) -> float:
    """Import TVM and compile a small kernel and a small GEMM (into a throwaway kernel cache): the first call's
    one-time costs, NVRTC's precompiled headers included."""
    by_name = {e.name: e for e in entries()}
    t0 = time.perf_counter()
    with jit_build.environ({"TILELANG_CORE_CACHE_DIR": str(fresh_cache(scratch, "warmup-"))}):
        for name in WARMUP:
            timed_call(fresh_factory(by_name[name], target), by_name[name])
    return time.perf_counter() - t0


# -- Triton -------------------------------------------------------------------------------------------------------
def triton_skip_reason(args: argparse.Namespace) -> str:
    """"" when Triton can be measured here, else why not."""
    if args.no_triton:
        return "--no-triton"
    try:
        import torch

        if not torch.cuda.is_available():
            return "no GPU visible (Triton compiles for the visible GPU): Triton part skipped"
        import triton  # noqa: F401
    except Exception as ex:  # noqa: BLE001
        return f"Triton unavailable: {type(ex).__name__}: {ex}"
    return ""


def triton_tiles(entry: Entry) -> dict[str, int] | None:
    """The tutorial GEMM's meta-parameters for one of our GEMM configs (same tiles, stages, threads)."""
    if entry.factory != "matmul_relu":
        return None
    bm, bn, bk = entry.args[3:6]
    return {"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "GROUP_M": 8, "num_stages": entry.kwargs["num_stages"],
            "num_warps": entry.kwargs["threads"] // 32}


def _triton_cache(path: Path) -> None:
    """Point Triton's cache at ``path`` (the environment variable, and the knob where this Triton has one)."""
    os.environ["TRITON_CACHE_DIR"] = str(path)
    try:
        import triton

        triton.knobs.cache.dir = str(path)
    except Exception:  # noqa: BLE001 - older Triton: the environment variable is read at each compile
        pass


def triton_gemm(entry: Entry, scratch: Path, repeat: int) -> dict[str, Any]:
    """Cold / disk / memory seconds of Triton's tutorial GEMM at the entry's shape and tiles (each call synchronised
    except the memory one, which is the host time of a launch)."""
    import torch
    import triton
    import triton_ref

    M, N, K = entry.args[:3]
    meta = triton_tiles(entry)
    assert meta is not None
    raw = triton_ref._matmul_kernel.fn.fn  # the Python function under @autotune and @triton.jit
    a = torch.randn(M, K, device="cuda", dtype=torch.float16)
    b = torch.randn(K, N, device="cuda", dtype=torch.float16)
    c = torch.empty(M, N, device="cuda", dtype=torch.float16)
    grid = (triton.cdiv(M, meta["BLOCK_M"]) * triton.cdiv(N, meta["BLOCK_N"]),)

    def call(fn: Any, sync: bool = True) -> float:
        t0 = time.perf_counter()
        fn[grid](a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1),
                 RELU=True, **meta)
        if sync:
            torch.cuda.synchronize()
        return time.perf_counter() - t0

    colds = []
    for _ in range(repeat):
        _triton_cache(Path(tempfile.mkdtemp(prefix="triton-", dir=scratch)))
        colds.append(call(triton.jit(raw)))
    disk = statistics.median(call(triton.jit(raw)) for _ in range(3))
    fn = triton.jit(raw)
    call(fn)
    memory = statistics.median(call(fn, sync=False) for _ in range(5))
    torch.cuda.synchronize()
    return {"cold": statistics.median(colds), "disk": disk, "memory": memory, "cold_all": colds}


def triton_warm_up(scratch: Path) -> float:
    """Triton's one-time costs (driver, launcher helpers) on a trivial kernel, not charged to any config."""
    import torch
    import triton
    import triton.language as tl

    @triton.jit
    def _copy(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=offs < n), mask=offs < n)

    _triton_cache(Path(tempfile.mkdtemp(prefix="triton-warmup-", dir=scratch)))
    x = torch.randn(1000, device="cuda")
    y = torch.empty_like(x)
    t0 = time.perf_counter()
    _copy[(8,)](x, y, 1000, BLOCK=128)
    torch.cuda.synchronize()
    return time.perf_counter() - t0


# -- output -------------------------------------------------------------------------------------------------------
def _s(x: float | None) -> str:
    if x is None:
        return "-"
    return f"{x * 1e3:.2f} ms" if x < 0.01 else f"{x:.2f} s"


def table(rows: list[Row]) -> list[str]:
    """The markdown table: cold (stages, total, pass/fail against the goal), disk, memory, Triton."""
    out = [f"| config | compiler | cold: lower | codegen | nvcc/NVRTC | other | total | disk | memory | "
           f"Triton cold | Triton disk | Triton cached | cold <= {GOAL_S:.1f} s |",
           "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if r.error:
            out.append(f"| {r.config} | {r.compiler} | failed: {r.error[:200]} |" + " |" * 11)
            continue
        ran = r.compiler if r.ran == r.compiler else f"{r.compiler} (ran {r.ran})"
        t = r.triton
        out.append(f"| {r.config} | {ran} | {_s(r.stages.get('lower'))} | {_s(r.stages.get('codegen'))} | "
                   f"{_s(r.stages.get('nvcc'))} | {_s(r.other)} | {_s(r.cold)} | {_s(r.disk)} | {_s(r.memory)} | "
                   f"{_s(t.get('cold'))} | {_s(t.get('disk'))} | {_s(t.get('memory'))} | "
                   f"{'pass' if r.cold <= GOAL_S else 'FAIL'} |")
    return out


def verdict(rows: list[Row]) -> str:
    """One line per compiler: how many configs meet the goal cold."""
    parts = []
    for comp in sorted({r.compiler for r in rows}):
        mine = [r for r in rows if r.compiler == comp and not r.error]
        ok = sum(r.cold <= GOAL_S for r in mine)
        worst = max((r.cold for r in mine), default=0.0)
        parts.append(f"{comp}: {ok}/{len(mine)} configs within {GOAL_S:.1f} s cold (slowest {worst:.2f} s)")
    return f"goal (cold compile <= {GOAL_S:.1f} s per config): " + "; ".join(parts)


# -- the run ------------------------------------------------------------------------------------------------------
def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--arch", default=None, help="e.g. sm_90a; default: what target='cuda' resolves to")
    p.add_argument("--repeat", type=int, default=1,
                   help="cold compiles per config and compiler (median); default 1 (a repeat compiles the same "
                        "program again in this process, which NVRTC may serve faster than a new one)")
    p.add_argument("--compilers", nargs="*", default=["nvcc", "nvrtc"], choices=["nvcc", "nvrtc"])
    p.add_argument("--only", nargs="*", default=None, help="configs whose name contains a substring")
    p.add_argument("--no-triton", action="store_true")
    p.add_argument("--json", default=None)
    p.add_argument("--log", default=None)
    return p.parse_args(argv)


def measure_ours(args: argparse.Namespace, todo: list[Entry], scratch: Path) -> list[Row]:
    """Every config with every available compiler, printing each as it is measured."""
    target = {"kind": "cuda", "arch": args.arch} if args.arch else {"kind": "cuda"}
    avail = available_compilers()
    rows: list[Row] = []
    for comp in args.compilers:
        if avail[comp]:
            print(f"{comp}: skipped ({avail[comp]})", flush=True)
            continue
        with compiler(comp):
            print(f"{comp}: first @jit call of the process (TVM's first use, small kernel): "
                  f"{warm_up(target, scratch):.2f} s", flush=True)
        for entry in todo:
            try:
                row = measure(entry, comp, target, scratch, args.repeat)
            except Exception as ex:  # noqa: BLE001 - one failed config does not end the measurement
                row = Row(entry.name, comp, error=f"{type(ex).__name__}: {ex}")
            rows.append(row)
            print(f"  {entry.name:44s} {comp:5s} cold {', '.join(f'{c:.2f}' for c in row.cold_all) or '-'} s "
                  f"(median {row.cold:.2f}: {', '.join(f'{k} {v:.2f}' for k, v in row.stages.items())}), disk "
                  f"{row.disk * 1e3:.1f} ms, memory {row.memory * 1e6:.0f} us{'  ' + row.error if row.error else ''}",
                  flush=True)
    return rows


def measure_triton(args: argparse.Namespace, todo: list[Entry], rows: list[Row], scratch: Path) -> str:
    """Triton's times for the GEMM configs, attached to their rows; returns the note printed with the table."""
    why = triton_skip_reason(args)
    if why:  # said once, beside the table
        return f"Triton: {why}"
    import triton

    try:
        print(f"Triton {triton.__version__}: first call of the process (trivial kernel): "
              f"{triton_warm_up(scratch):.2f} s", flush=True)
    except Exception as ex:  # noqa: BLE001 - our rows stand without Triton's
        return f"Triton {triton.__version__}: failed on a trivial kernel: {type(ex).__name__}: {str(ex)[:300]}"
    for entry in todo:
        if triton_tiles(entry) is None:
            continue
        try:
            t = triton_gemm(entry, scratch, args.repeat)
        except Exception as ex:  # noqa: BLE001
            print(f"  Triton {entry.name}: failed: {type(ex).__name__}: {str(ex)[:300]}", flush=True)
            continue
        colds = ", ".join(f"{c:.2f}" for c in t["cold_all"])
        print(f"  Triton {entry.name:37s} cold {colds} s, disk {t['disk'] * 1e3:.1f} ms, "
              f"cached {t['memory'] * 1e6:.0f} us", flush=True)
        for r in rows:
            if r.config == entry.name:
                r.triton = t
    return (f"Triton {triton.__version__}: the tutorial GEMM of triton_ref.py with the same tiles (GROUP_M 8, "
            "num_warps = threads / 32), +ReLU; cold: a fresh TRITON_CACHE_DIR, everything Triton builds for a new "
            "kernel, one launch included; cached = host time of a launch")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.log:
        sys.stdout = jit_build.Tee(sys.stdout, Path(args.log))  # type: ignore[assignment]
    by_name = {e.name: e for e in entries()}
    todo = [by_name[n] for n in CONFIGS if not args.only or any(s in n for s in args.only)]
    t0 = time.perf_counter()
    import tvm

    import tilelang_core  # noqa: F401

    print(f"compile_time.py {' '.join(sys.argv[1:])}\n{jit_build.code_version(ROOT)}", flush=True)
    print(f"import tilelang_core + TVM {tvm.__version__}: {time.perf_counter() - t0:.2f} s; {len(todo)} configs, "
          f"{args.repeat} cold compile(s) each, {os.cpu_count()} CPUs", flush=True)
    scratch = Path(tempfile.mkdtemp(prefix="tilelang_core_compile_time_"))
    try:
        rows = measure_ours(args, todo, scratch)
        note = measure_triton(args, todo, rows, scratch)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    lines = table(rows)
    print("\n" + note + "\n")
    print("\n".join(lines))
    print("\n" + verdict(rows))
    if args.json:
        Path(args.json).write_text(json.dumps({"rows": [asdict(r) for r in rows], "note": note, "goal_s": GOAL_S},
                                              indent=1))
    return 1 if any(r.error for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
