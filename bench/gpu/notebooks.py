"""Run notebooks/01..05 headless on the GPU host, then time the tuning panel's slider moves on a CUDA GEMM.

Why this script exists: the notebooks run in CI on the CPU only; on a GPU, ``target = "auto"`` resolves to CUDA
and every part of the workbench takes its GPU path (inputs on the device, CUDA-event timings, the roofline measured
on the GPU, CUDA C in the Code view). This executes each notebook with nbclient and an ipykernel kernel (a
``python3`` kernel spec written into a temporary JUPYTER_PATH, pointing at this interpreter), reports pass/fail and
time per notebook and the target it resolved to, and saves the executed notebooks under ``$OUT`` when set. Then it
drives a real ``TuningPanel`` the way a user does — one slider at a time, by setting ``.value``, default debounce,
cold kernel cache — on a GEMM (fp16 on a GPU) and prints how long a new configuration (compile + check + time;
goal <= 1.5 s) and a configuration measured before (goal <= 0.1 s) take to show. With ``--target cpu`` the same
code runs on the CPU (what a machine without a GPU can check).

On the GPU host (docs/workbench.md, "On a GPU": TVM unpacked to /tmp/site, the wheels installed to /tmp/wbsite)::

    PYTHONPATH=/tmp/site:/tmp/wbsite:$PWD python3 bench/gpu/notebooks.py --only 01 02 --no-latency
    PYTHONPATH=/tmp/site:/tmp/wbsite:$PWD python3 bench/gpu/notebooks.py --no-notebooks
    python bench/gpu/notebooks.py --target cpu --small      # here: CI's small parameters, on the CPU
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = ROOT / "notebooks"
sys.path.insert(0, str(ROOT))

from bench.panel_timing import stats, timed_move  # noqa: E402

# CI's parameters cells (tests/test_workbench_notebook.py, tests/test_notebooks_workloads.py): small and quick
SMALL = {
    "01_quickstart": "size = 256",
    "02_tuning": 'size = 256\nrows, cols = 512, 256\nsweep_grid = "block_M=64,128 block_N=64,128"',
    "03_flash_attention": ("batch, heads, seq_len, dim = 1, 2, 200, 64\n"
                           "bench_batch, bench_heads, bench_seq = 1, 2, 128\nbench_dims = (64,)"),
    "04_dequant_gemm": "M, N, K, group_size = 4, 256, 512, 128\nbench_N, bench_K = 512, 512\nbench_Ms = (1, 4)",
    "05_memory_bound": "gemv_N, gemv_K = 512, 1000\nrows, cols = 64, 1000\ncopy_mib = 16",
}
GOALS = {"new": 1.5, "cached": 0.1}  # seconds, per slider move

GEMM = '''\
def matmul_relu(M, N, K, block_M=64, block_N=64, block_K=32, num_stages=2, threads=128, dtype="float32",
                accum_dtype="float32"):
    @T.prim_func
    def main(A: T.Tensor((M, K), dtype), B: T.Tensor((K, N), dtype), C: T.Tensor((M, N), dtype)):
        with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=threads) as (bx, by):
            A_s = T.alloc_shared((block_M, block_K), dtype)
            B_s = T.alloc_shared((block_K, block_N), dtype)
            C_f = T.alloc_fragment((block_M, block_N), accum_dtype)
            T.clear(C_f)
            for k in T.Pipelined(T.ceildiv(K, block_K), num_stages=num_stages):
                T.copy(A[by * block_M, k * block_K], A_s)
                T.copy(B[k * block_K, bx * block_N], B_s)
                T.gemm(A_s, B_s, C_f)
            for i, j in T.Parallel(block_M, block_N):
                C_f[i, j] = T.max(C_f[i, j], 0)
            T.copy(C_f, C[by * block_M, bx * block_N])
    return main
'''


# -- the Jupyter side ----------------------------------------------------------------------------------------------
def jupyter_env(tmp: Path) -> None:
    """A ``python3`` kernel spec for this interpreter in a private JUPYTER_PATH, and every Jupyter/IPython folder
    under ``tmp`` (the GPU host's home may not be writable, and nothing should leak between runs). The kernel
    inherits this process's environment: PYTHONPATH (TVM, the wheels, this checkout) and the cache folders."""
    spec_dir = tmp / "jupyter" / "kernels" / "python3"
    spec_dir.mkdir(parents=True, exist_ok=True)
    pythonpath = os.pathsep.join(p for p in [str(ROOT), os.environ.get("PYTHONPATH", "")] if p)
    spec = {"argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
            "display_name": "Python 3 (ipykernel)", "language": "python", "env": {"PYTHONPATH": pythonpath}}
    (spec_dir / "kernel.json").write_text(json.dumps(spec, indent=1))
    os.environ.update({"JUPYTER_PATH": str(tmp / "jupyter"), "JUPYTER_DATA_DIR": str(tmp / "jupyter-data"),
                       "JUPYTER_RUNTIME_DIR": str(tmp / "jupyter-runtime"), "JUPYTER_CONFIG_DIR": str(tmp / "jcfg"),
                       "IPYTHONDIR": str(tmp / "ipython"), "JUPYTER_PLATFORM_DIRS": "1", "PYTHONPATH": pythonpath})


def parameters(name: str, own: str, small: bool, target: str) -> str:
    """The parameters cell to run with: CI's small one or the notebook's own, with ``target`` set."""
    text = SMALL[name] if small else re.sub(r"(?m)^target = .*$", "", own).rstrip()
    return f"{text}\ntarget = {target!r}"


def outputs_text(cell: Any) -> str:
    parts = []
    for out in cell.get("outputs", []):
        if "text" in out:
            parts.append(out["text"])
        parts.extend(str(v) for k, v in out.get("data", {}).items() if k == "text/plain")
        parts.extend(out.get("traceback", []))
    return "\n".join(parts)


@dataclass
class NotebookRun:
    """One notebook's outcome."""

    name: str
    passed: bool
    seconds: float
    targets: list[str] = field(default_factory=list)  # the kernels' targets, from the summaries' status lines
    error: str = ""
    saved: str = ""


def run_notebook(path: Path, small: bool, target: str, workdir: Path, out: Path | None,
                 timeout: int) -> NotebookRun:
    """Execute one notebook with nbclient; pass = no cell raised and no output says FAIL."""
    import nbclient
    import nbformat

    nb = nbformat.read(path, as_version=4)
    assert nb.cells[1].source.startswith("# parameters"), f"{path.name}: cell 1 is not the parameters cell"
    nb.cells[1].source = parameters(path.stem, nb.cells[1].source, small, target)
    cwd = workdir / path.stem
    cwd.mkdir(parents=True, exist_ok=True)
    client = nbclient.NotebookClient(nb, timeout=timeout, kernel_name="python3",
                                     resources={"metadata": {"path": str(cwd)}})
    t0 = time.perf_counter()
    error = ""
    try:
        client.execute()
    except Exception as e:  # noqa: BLE001 - CellExecutionError, a dead kernel, a timeout: all a failure to report
        error = f"{type(e).__name__}: {str(e)[-3000:]}"
    seconds = time.perf_counter() - t0
    text = "\n".join(outputs_text(c) for c in nb.cells if c.cell_type == "code")
    if not error and re.search(r"\bFAIL\b", text):
        error = "an output says FAIL"
    kinds = r"(cuda \(sm_\d+a?\)|cpu \([^)]*\))"  # a summary's status line, or a tuning panel's text
    found = re.findall(rf"^\w+: {kinds}", text, re.M) + re.findall(rf"tuning panel for \w+ on {kinds}", text)
    targets = sorted(set(found))
    saved = ""
    if out is not None:
        saved = str(out / path.name)
        nbformat.write(nb, saved)
    return NotebookRun(path.stem, not error, seconds, targets, error, saved)


def run_notebooks(names: list[str], small: bool, target: str, tmp: Path, out: Path | None,
                  timeout: int) -> list[NotebookRun]:
    jupyter_env(tmp)
    results = []
    for name in names:
        path = next(NOTEBOOKS.glob(f"{name}*.ipynb"))
        print(f"[notebooks] {path.name} ...", flush=True)
        r = run_notebook(path, small, target, tmp / "work", out, timeout)
        verdict = "PASS" if r.passed else "FAIL"
        print(f"[notebooks] {path.name}: {verdict} in {r.seconds:.1f} s; kernels on {', '.join(r.targets) or '?'}"
              + (f"\n{r.error}" if r.error else ""), flush=True)
        results.append(r)
    return results


# -- the tuning panel's latency ------------------------------------------------------------------------------------
def walk(on_gpu: bool) -> tuple[dict[str, Any], list[tuple[str, Any]], dict[str, list[int]]]:
    """(start, moves, knobs): one slider per move, every move to a configuration not measured before."""
    if on_gpu:
        start = {"block_M": 128, "block_N": 128, "block_K": 32, "num_stages": 2}
        moves = [("block_N", 64), ("block_M", 64), ("block_N", 128), ("block_K", 64), ("block_M", 128),
                 ("block_N", 64), ("num_stages", 3), ("block_M", 64)]
        knobs = {"block_M": [64, 128], "block_N": [64, 128], "block_K": [32, 64], "num_stages": [2, 3, 4]}
    else:
        start = {"block_M": 64, "block_N": 64, "block_K": 32, "num_stages": 2}
        moves = [("block_M", 32), ("block_N", 32), ("block_M", 64), ("block_M", 128), ("block_N", 64),
                 ("block_N", 128), ("block_M", 64), ("block_M", 32)]
        knobs = {"block_M": [32, 64, 128], "block_N": [32, 64, 128], "block_K": [32, 64], "num_stages": [1, 2, 3]}
    return start, moves, knobs


def backwards(start: dict[str, Any], moves: list[tuple[str, Any]]) -> list[tuple[str, Any]]:
    """The moves that walk back from the end of ``moves`` to ``start``, one slider at a time (all measured)."""
    states = [dict(start)]
    for name, value in moves:
        states.append({**states[-1], name: value})
    return [(name, states[i][name]) for i, (name, _) in reversed(list(enumerate(moves)))]


def panel_latency(target: str, size: int | None, tmp: Path) -> dict[str, Any]:
    """Drive a real TuningPanel on a GEMM: new configurations (cold cache), then configurations measured before."""
    os.environ["TILELANG_CORE_CACHE_DIR"] = str(tmp / "latency-cache")  # cold: every new configuration compiles
    os.environ["TILELANG_CORE_TUNING_DB"] = str(tmp / "latency-tuning.sqlite3")
    from IPython.testing.globalipapp import get_ipython

    from tilelang_core.target import resolve_target

    backend = resolve_target(target)
    on_gpu = backend == "cuda"
    n = size or (2048 if on_gpu else 512)
    dtype = "float16" if on_gpu else "float32"
    start, moves, knobs = walk(on_gpu)
    ip = get_ipython()
    ip.run_line_magic("load_ext", "workbench")
    shapes = ",".join([f"M={n},N={n},K={n}", *(f"{k}={v}" for k, v in start.items())])
    ip.run_cell_magic("tilekernel", f'matmul_relu --shapes {shapes} --dtype {dtype} --ref "torch.relu(A @ B)" '
                                    f"--target {target} -q", GEMM)
    wk = ip.user_ns["matmul_relu"]
    t0 = time.perf_counter()
    panel = wk.panel(**knobs)
    panel.wait(600)  # the first measurement and the device's roofline (measured on the GPU for a CUDA kernel)
    first_s = time.perf_counter() - t0
    ceil = panel.explorer.ceilings()
    print(f"[latency] {backend} GEMM {n}^3 {dtype}; first measurement + roofline {first_s:.1f} s; roofline: "
          + (f"{ceil.device}: peak {ceil.peak_gflops / 1e3:.1f} TFLOP/s (for {dtype}), bandwidth "
             f"{ceil.bandwidth_gbs:.0f} GB/s [{ceil.method}]" if ceil else "unavailable"), flush=True)
    new, compile_s = [], []
    for name, value in moves:
        t, m = timed_move(panel, name, value)
        new.append(t)
        compile_s.append(m.compile_s or 0.0)
        print(f"[latency] new    {name}={value:<4} {t * 1e3:7.0f} ms (compile {(m.compile_s or 0) * 1e3:5.0f} ms; "
              f"{m.describe(panel.names)})", flush=True)
    cached = []
    for name, value in backwards(start, moves) + moves:
        t, m = timed_move(panel, name, value)
        cached.append(t)
    result = {"target": backend, "device": ceil.device if ceil else None, "size": n, "dtype": dtype,
              "debounce_s": panel.runner.debounce_s, "first_s": first_s, "new_s": stats(new),
              "compile_s": stats(compile_s), "cached_s": stats(cached),
              "ceilings": asdict(ceil) if ceil else None}
    for key, label, goal in (("new_s", "new configuration", GOALS["new"]), ("cached_s", "cached", GOALS["cached"])):
        s = result[key]
        verdict = "meets" if s["median"] <= goal else "MISSES"
        print(f"[latency] {label:18s} median {s['median'] * 1e3:7.1f} ms  p20 {s['p20'] * 1e3:7.1f}  p80 "
              f"{s['p80'] * 1e3:7.1f}  max {s['max'] * 1e3:7.1f}  (n={s['n']}; goal {goal * 1e3:.0f} ms: {verdict}; "
              + (f"debounce {panel.runner.debounce_s * 1e3:.0f} ms included)" if key == "new_s" else
                 "shown at once, no debounce)"), flush=True)
    print(f"[latency]   of which compiling: median {result['compile_s']['median'] * 1e3:.0f} ms", flush=True)
    return result


# -- main ----------------------------------------------------------------------------------------------------------
def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", default="auto", help="the notebooks' target: auto (CUDA when a GPU is visible), cpu")
    ap.add_argument("--only", nargs="*", default=None, metavar="NN", help="notebook numbers, e.g. 01 03")
    ap.add_argument("--small", action="store_true", help="CI's small parameters instead of the notebooks' own")
    ap.add_argument("--no-notebooks", action="store_true", help="only the slider latency")
    ap.add_argument("--no-latency", action="store_true", help="only the notebooks")
    ap.add_argument("--size", type=int, default=None, help="GEMM size for the latency (default 2048 GPU, 512 CPU)")
    ap.add_argument("--timeout", type=int, default=580, help="seconds per notebook cell")
    args = ap.parse_args(argv)

    out = Path(os.environ["OUT"]) if os.environ.get("OUT") else None
    tmp = Path(tempfile.mkdtemp(prefix="wb_gpu_notebooks_"))
    os.environ.setdefault("TILELANG_CORE_CACHE_DIR", str(tmp / "cache"))
    os.environ.setdefault("TILELANG_CORE_TUNING_DB", str(tmp / "tuning.sqlite3"))
    import torch

    from tilelang_core.target import resolve_target

    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no GPU visible"
    print(f"[notebooks] python {sys.version.split()[0]}, torch {torch.__version__}, {gpu}; target {args.target!r} "
          f"-> {resolve_target(args.target)}", flush=True)
    report: dict[str, Any] = {"target": args.target, "resolved": resolve_target(args.target), "gpu": gpu}
    failed = 0
    if not args.no_notebooks:
        names = [p.stem for p in sorted(NOTEBOOKS.glob("0*.ipynb"))
                 if args.only is None or any(p.name.startswith(o) for o in args.only)]
        runs = run_notebooks(names, args.small, args.target, tmp, out, args.timeout)
        report["notebooks"] = [asdict(r) for r in runs]
        failed = sum(not r.passed for r in runs)
        print(f"[notebooks] {len(runs) - failed} passed, {failed} failed", flush=True)
    if not args.no_latency:
        report["latency"] = panel_latency(args.target, args.size, tmp)
    if out is not None:
        (out / "notebooks.json").write_text(json.dumps(report, indent=1, default=str))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
