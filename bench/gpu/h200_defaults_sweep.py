"""The H200 tuning defaults: sweep the quickstart GEMM's sm_90a space at issue 15's shapes, fp16 and bf16, record
every measurement in a tuning database, re-time the finalists with the clean-L2 timer beside cuBLAS, and write the
shipped-defaults file (``tilelang_core/autotune/data/defaults.json``) from that database.

Why this script exists: the shipped defaults (docs/tuning.md#shipped-defaults) must be measured on the H200, in one
run, by the tuner the users have. For each dtype and shape (4096^3, 8192^3, 128x8192x28672, 16x8192x8192) it

1. takes ``gemm_space("cuda", M=..., N=..., K=..., dtype=..., level="quick")`` (tiles, stages, 1-3 consumer
   warpgroups with and without the producer warpgroup, persistent on/off, split-K for the small grids; 25-70
   configurations a problem, see ``--dry-run``); ``--options hopper`` (or some of ``cluster``, ``gemm_pingpong``,
   ``tma_store``) adds the sm_90a keys that are off by default and not yet measured, each where the compiler takes
   it (``gemm_space(options=...)``, docs/tuning.md: about twice as many configurations: raise ``--budget``);
2. sweeps it with ``tune(tilelang_core.quickstart.matmul_relu, ..., executor=LocalExecutor(...))``: compile
   processes (NVRTC/nvcc) beside one timing process on the GPU, each configuration checked against
   ``torch.relu(a @ b)`` (rtol 2e-2, atol 2e-1, as bench/gpu/gemm_shapes.py) and timed with the profiler's CUDA-event
   timer, clearly slower ones early-stopped, three finalists re-timed interleaved with cuBLAS; registers and spills
   from ptxas go into every record (``resources``);
3. re-times the finalists, then the tuner's fastest other configurations (``--clean-top`` in all), and cuBLAS in
   this process with ``bench/gpu/run.py``'s clean-L2 timer (the issue's headline timer) and records those as
   measurements of stage ``clean_l2``;
4. writes the defaults file: per problem, the configuration with the fastest clean-L2 median (the tuner's best where
   none was re-timed), as a row of the database's schema plus the architecture and the problem.

Every configuration's line — time, ratio to cuBLAS (cuBLAS time / ours: above 1 is faster), registers, spills,
compile time — is printed and written to the log. With ``$OUT`` set (the device tool), the log, the database and
the defaults file are written there so they come back; commit the file as tilelang_core/autotune/data/defaults.json.

    PYTHONPATH=/tmp/site python3 bench/gpu/h200_defaults_sweep.py [--dtypes float16 bfloat16]
        [--shapes 4096x4096x4096 ...] [--level quick|full] [--options hopper] [--budget 230] [--workers N]
        [--db F] [--out F]
    python bench/gpu/h200_defaults_sweep.py --dry-run [--dry-configs 2]   # no GPU: space sizes, compile 2 configs
    python bench/gpu/h200_defaults_sweep.py --dry-run --dry-all-forms     # ... one config of every form (~70)

Python 3.12, torch 2.11, no IPython needed. ``--budget`` (seconds, default 230) skips the problems not yet started
once the sweep has run that long, so a run stays inside its GPU time; what was measured is still written.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
sys.path.insert(0, str(ROOT))

SHAPES = ((4096, 4096, 4096), (8192, 8192, 8192), (128, 8192, 28672), (16, 8192, 8192))
DTYPES = ("float16", "bfloat16")
RTOL, ATOL = 2e-2, 2e-1
CLEAN_L2 = "clean_l2"  # stage of the clean-L2 re-timings
SECONDS_PER_CONFIG = 0.35  # rough GPU time of checking + timing one configuration (for the printed estimate)


def problem(M: int, N: int, K: int, dtype: str) -> dict[str, Any]:
    return {"M": M, "N": N, "K": K, "dtype": dtype, "accum_dtype": "float32"}


def label(config: dict[str, Any]) -> str:
    """``128x256x64 s4 t256 [ws off, persistent -1, split_k 2]``."""
    pcs = config.get("pass_configs") or {}
    names = {"tl.disable_warp_specialized": "ws off", "tl.cuda.persistent": "persistent",
             "tl.cuda.split_k": "split_k", "tl.cuda.cluster": "cluster", "tl.cuda.gemm_pingpong": "pingpong",
             "tl.cuda.tma_store": "tma store"}

    def value(v: Any) -> str:
        return "" if v is True else " " + ("x".join(map(str, v)) if isinstance(v, (list, tuple)) else str(v))

    extra = ", ".join(names.get(k, k) + value(v) for k, v in sorted(pcs.items()))
    text = (f"{config['block_M']}x{config['block_N']}x{config['block_K']} s{config['num_stages']} "
            f"t{config['threads']}")
    return text + (f" [{extra}]" if extra else "")


def parse_shape(text: str) -> tuple[int, int, int]:
    parts = text.lower().split("x")
    if len(parts) != 3 or not all(p.isdigit() and int(p) > 0 for p in parts):
        raise argparse.ArgumentTypeError(f"a shape is MxNxK with positive integers, got {text!r}")
    return int(parts[0]), int(parts[1]), int(parts[2])


def problems(shapes: list[tuple[int, int, int]], dtypes: list[str]) -> list[dict[str, Any]]:
    return [problem(M, N, K, dt) for dt in dtypes for (M, N, K) in shapes]


def space_for(prob: dict[str, Any], level: str, options: list[str] | None = None) -> list[dict[str, Any]]:
    from tilelang_core.autotune import gemm_space

    return gemm_space("cuda", M=prob["M"], N=prob["N"], K=prob["K"], dtype=prob["dtype"], level=level,
                      options=options or None)


class Log:
    """Lines to stdout and to the log file."""

    def __init__(self, path: Path):
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        self.f = path.open("a")

    def __call__(self, text: str = "") -> None:
        print(text, flush=True)
        self.f.write(text + "\n")
        self.f.flush()


def describe(m: Any) -> str:
    res = m.resources or {}
    regs = f"regs {res.get('registers', '?')} spills {res.get('spill_stores', '?')}/{res.get('spill_loads', '?')}"
    comp = f"compile {m.compile_s:.2f}s" if m.compile_s is not None else ""
    if m.status != "ok" or m.latency_ms is None:
        return f"  {label(m.config)}: {m.status}: {(m.message or '').splitlines()[0][:160] if m.message else ''}"
    ratio = f"{m.ref_ms / m.latency_ms:.2f}x cuBLAS" if m.ref_ms else "no cuBLAS time"
    check = "" if m.passed is not False else " WRONG"
    stage = f" [{m.stage}]" if m.stage else ""
    return f"  {label(m.config)}: {m.latency_ms * 1e3:8.1f} us  {ratio}{check}  {regs}  {comp}{stage}"


def kind_of(c: dict[str, Any]) -> int:
    """0 plain, 1 producer-less, 2 other pass_configs (persistent, split-K), 3 three warpgroups."""
    pcs = c.get("pass_configs") or {}
    if c["threads"] == 384:
        return 3
    return 1 if "tl.disable_warp_specialized" in pcs else 2 if pcs else 0


def one_of_each_kind(configs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``configs`` reordered: the first of each :func:`kind_of` kind, in kind order, then the rest."""
    firsts = [next((i for i, c in enumerate(configs) if kind_of(c) == k), None) for k in range(4)]
    order = dict.fromkeys([i for i in firsts if i is not None] + list(range(len(configs))))
    return [configs[i] for i in order]


def dry_run(args: argparse.Namespace, probs: list[dict[str, Any]], log: Log) -> int:
    """Space sizes per problem (and what the filters dropped), then a real sm_90a build of a few configurations
    of different forms — no GPU needed."""
    from tilelang_core.autotune.spaces import gemm_candidates, summary
    from tilelang_core.autotune.workers import compile_config, jitted
    from tilelang_core.quickstart import matmul_relu

    total = 0
    for prob in probs:
        counts = summary(gemm_candidates("cuda", M=prob["M"], N=prob["N"], K=prob["K"], dtype=prob["dtype"],
                                         level=args.level, options=args.options or None))
        total += counts["kept"]
        dropped = ", ".join(f"{k} {v}" for k, v in counts.items() if k != "kept")
        log(f"{prob['M']}x{prob['N']}x{prob['K']} {prob['dtype']}: {counts['kept']} configs (dropped: {dropped})")
    log(f"space: {total} configs in all; about {total * SECONDS_PER_CONFIG:.0f} s of GPU time at "
        f"{SECONDS_PER_CONFIG} s a config")
    jobs: list[tuple[dict[str, Any], dict[str, Any]]] = []
    for prob in probs if args.dry_all_forms else probs[:1]:
        forms: dict[str, dict[str, Any]] = {}  # one configuration per (threads, pass_configs)
        for c in space_for(prob, args.level, args.options):
            forms.setdefault(f"{c['threads']} {json.dumps(c.get('pass_configs', {}), sort_keys=True)}", c)
        picks = list(forms.values())
        if not args.dry_all_forms:
            picks = one_of_each_kind(picks)[: args.dry_configs]
        jobs += [(prob, c) for c in picks]
    jf = jitted(matmul_relu, [-1], "cuda")
    failed = 0
    for prob, c in jobs:
        t0 = time.perf_counter()
        name = f"{prob['M']}x{prob['N']}x{prob['K']} {prob['dtype']} {label(c)}"
        try:
            kernel = compile_config(jf, {**prob, **c})
        except Exception as e:  # noqa: BLE001 - report the configuration and go on
            failed += 1
            log(f"  {name}: COMPILE FAILED: {str(e).splitlines()[0][:200]}")
            continue
        r = kernel.resources()
        log(f"  {name}: compiled for {kernel.target.get('arch')} in {time.perf_counter() - t0:.1f} s: "
            f"{r.threads} threads, {r.registers} registers, spills {r.spill_stores}/{r.spill_loads}, "
            f"{r.dynamic_smem} B dynamic shared memory")
    log(f"compiled {len(jobs) - failed} of {len(jobs)}")
    return 1 if failed else 0


def clean_candidates(result: Any, top: int) -> list[Any]:
    """What :func:`clean_retime` re-times: the tuner's passing finalists (fastest first), then its fastest other
    passing measurements, one per configuration, ``top`` in all."""
    finals = sorted((m for m in result.finals if m.ok), key=lambda m: m.latency_ms)
    rest = sorted((m for m in result.measurements if m.ok), key=lambda m: m.latency_ms)
    seen: set[str] = set()
    picks = []
    for m in finals + rest:
        key = json.dumps(m.config, sort_keys=True, default=repr)
        if key not in seen:
            seen.add(key)
            picks.append(m)
    return picks[:top]


def clean_retime(result: Any, prob: dict[str, Any], db: Any, top: int, rep: int, log: Log) -> list[Any]:
    """The ``top`` fastest: the tuner's finalists first, then the fastest other passing configurations (the
    tuner's warm-L2 timer keeps three finalists, and at 8192³ it ranked a config the clean-L2 timer puts first
    outside them), and cuBLAS, timed with the clean-L2 timer; each re-timing recorded in ``db`` as a measurement of
    stage ``clean_l2``."""
    import torch
    from run import bench_ms_clean

    from tilelang_core.autotune.record import new_uid

    picks = clean_candidates(result, top)
    if not picks:
        return []
    tdt = getattr(torch, prob["dtype"])
    g = torch.Generator(device="cuda").manual_seed(0)
    a = torch.randn(prob["M"], prob["K"], device="cuda", generator=g).to(tdt)
    b = torch.randn(prob["K"], prob["N"], device="cuda", generator=g).to(tdt)
    ref = torch.relu(a @ b)
    t_ref = bench_ms_clean(lambda: torch.relu(a @ b), rep=rep)
    out = []
    for m in picks:
        kernel = result.kernel_for(m.config)
        ok = bool(torch.allclose(kernel(a, b).float(), ref.float(), rtol=RTOL, atol=ATOL))
        t = bench_ms_clean(lambda kernel=kernel: kernel(a, b), rep=rep)
        rec = dataclasses.replace(m, uid=new_uid(), stage=CLEAN_L2, latency_ms=t, ref_ms=t_ref, p20_ms=None,
                                  p80_ms=None, min_ms=None, runs=rep, passed=ok, timestamp=time.time(), id=None,
                                  ranked_ms=None, ranked_runs=0,
                                  message=f"clean-L2 timer (bench/gpu/run.py bench_ms_clean, rep {rep}); cuBLAS "
                                          "(torch.relu(a @ b)) timed the same way in the same run")
        db.record(rec)
        out.append(rec)
        log(describe(rec))
    return out


def emit(db: Any, probs: list[dict[str, Any]], out: Path, arch: str, generated: dict[str, Any]) -> Path:
    """The defaults file from the database: per problem and device, the configuration with the fastest median
    clean-L2 re-timing, else the database's best (:meth:`TuningDB.best`)."""
    from tilelang_core.autotune.defaults import write_defaults
    from tilelang_core.quickstart import matmul_relu

    rows = []
    for prob in probs:
        found = db.query(matmul_relu, shapes=prob, target="cuda", device=None, status="ok")
        for device in sorted({m.device for m in found}):
            mine = [m for m in found if m.device == device and m.ok]
            clean = [m for m in mine if m.stage == CLEAN_L2]
            if clean:
                by: dict[str, list[Any]] = {}
                for m in clean:
                    by.setdefault(json.dumps(m.config, sort_keys=True, default=repr), []).append(m)
                group = min(by.values(), key=lambda ms: statistics.median(m.latency_ms for m in ms))
                pick = dataclasses.replace(group[-1], latency_ms=statistics.median(m.latency_ms for m in group))
            else:
                pick = db.best(matmul_relu, prob, "cuda", device=device)
            if pick is not None:
                rows.append((pick, arch, prob))
    return write_defaults(out, rows, generated=generated)


def git_commit() -> str:
    try:
        return subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True, timeout=10).stdout.strip() or "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dtypes", nargs="+", default=list(DTYPES), choices=DTYPES)
    p.add_argument("--shapes", nargs="+", type=parse_shape, default=list(SHAPES), help="MxNxK ...")
    p.add_argument("--level", choices=("quick", "full"), default="quick")
    p.add_argument("--options", nargs="*", default=[], choices=("hopper", "cluster", "gemm_pingpong", "tma_store"),
                   help="also sweep these sm_90a keys (off by default, not measured): gemm_space(options=...)")
    p.add_argument("--budget", type=float, default=230.0, help="seconds; later problems are skipped past it")
    p.add_argument("--workers", type=int, default=None, help="compile processes (default: one per core)")
    p.add_argument("--warmup", type=float, default=10.0, help="ms of warm-up per configuration (tuner timer)")
    p.add_argument("--rep", type=float, default=50.0, help="ms of timed runs per configuration (tuner timer)")
    p.add_argument("--clean-top", type=int, default=5, help="configurations re-timed with the clean-L2 timer (the "
                   "tuner's finalists, then its fastest others)")
    p.add_argument("--clean-rep", type=int, default=30, help="clean-L2 timed calls per finalist")
    out_dir = Path(os.environ["OUT"]) if os.environ.get("OUT") else None
    p.add_argument("--db", type=Path, default=(out_dir or Path(tempfile.gettempdir())) / "h200_tuning.sqlite3")
    p.add_argument("--out", type=Path, default=(out_dir / "defaults.json") if out_dir else
                   ROOT / "tilelang_core" / "autotune" / "data" / "defaults.json")
    p.add_argument("--log", type=Path, default=(out_dir or Path(tempfile.gettempdir())) / "h200_defaults_sweep.log")
    p.add_argument("--commit", default=None, help="the code's commit for the log and the defaults file's header "
                   "(default: git rev-parse in the repository, which a copied tree may not have or have stale)")
    p.add_argument("--dry-run", action="store_true", help="no GPU: print the space, compile --dry-configs configs")
    p.add_argument("--dry-configs", type=int, default=2, help="dry run: configs of the first problem to compile")
    p.add_argument("--dry-all-forms", action="store_true",
                   help="dry run: compile one config of every form (threads, pass_configs) of every problem")
    args = p.parse_args(argv)
    os.environ.setdefault("TILELANG_CORE_CACHE_DIR", tempfile.mkdtemp(prefix="h200_defaults_cache_"))
    log = Log(args.log)
    try:
        return run_sweep(args, log)
    finally:
        log.f.close()


def run_sweep(args: argparse.Namespace, log: Log) -> int:
    probs = problems(args.shapes, args.dtypes)
    commit = args.commit or git_commit()
    log(f"h200_defaults_sweep {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} commit {commit} "
        f"level {args.level}{f' options {args.options}' if args.options else ''}"
        f"{' (dry run)' if args.dry_run else ''}")
    if args.dry_run:
        return dry_run(args, probs, log)

    import torch

    from tilelang_core.autotune import LocalExecutor, TuningDB, tune
    from tilelang_core.autotune.device_info import device_facts
    from tilelang_core.quickstart import matmul_relu, reference
    from tilelang_core.target import cuda_target

    if not torch.cuda.is_available():
        log("no CUDA GPU visible: nothing can be timed here (use --dry-run to compile-check the space)")
        return 1
    sys.path.insert(0, str(HERE))  # bench/gpu/run.py: the clean-L2 timer
    facts = device_facts("cuda")
    arch = cuda_target("cuda")["arch"]
    log(f"device {facts.name} driver {facts.driver} clocks {facts.clocks} arch {arch} torch {torch.__version__}")
    db = TuningDB(args.db)
    executor = LocalExecutor(compile_workers=args.workers)
    t_start = time.perf_counter()
    done, skipped = [], []
    for prob in probs:
        name = f"{prob['M']}x{prob['N']}x{prob['K']} {prob['dtype']}"
        if time.perf_counter() - t_start > args.budget:
            skipped.append(name)
            continue
        configs = space_for(prob, args.level, args.options)
        log(f"\n{name}: {len(configs)} configs")
        t0 = time.perf_counter()
        try:
            result = tune(matmul_relu, configs, args=prob, ref=reference, rtol=RTOL, atol=ATOL, target="cuda",
                          executor=executor, db=db, progress=False, warmup=args.warmup, rep=args.rep,
                          on_result=lambda m: log(describe(m)))
            compiles = sorted(m.compile_s for m in result.measurements if m.compile_s is not None)
            median_compile = f"{statistics.median(compiles):.2f} s" if compiles else "?"
            log(f"  swept in {time.perf_counter() - t0:.1f} s: {sum(m.ok for m in result.measurements)} passed, "
                f"{result.pruned} early-stopped, {len(result.failures)} failed; cuBLAS {result.reference_ms} ms; "
                f"compile per config: median {median_compile}, max {f'{compiles[-1]:.2f} s' if compiles else '?'}")
            for m in result.finals:
                log("  final:" + describe(m)[1:])
            clean_retime(result, prob, db, args.clean_top, args.clean_rep, log)
        except Exception:  # noqa: BLE001 - one problem's failure must not lose the others' results
            log(f"  {name}: the sweep failed:\n{traceback.format_exc()}")
            continue
        done.append(prob)
    executor.shutdown()  # its compile and timing processes
    with db.connect() as conn:  # one self-contained file to bring back
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    out = emit(db, done, args.out, arch, {"commit": commit, "device": facts.name, "driver": facts.driver,
                                          "script": "bench/gpu/h200_defaults_sweep.py", "level": args.level,
                                          "options": list(args.options),
                                          "timer": "clean-L2 (bench/gpu/run.py bench_ms_clean)"})
    log(f"\nwrote {out} ({len(done)} problems; database {args.db}; log {args.log}); "
        f"{time.perf_counter() - t_start:.0f} s in all")
    for prob in done:
        from tilelang_core.autotune.defaults import load_defaults

        for r in load_defaults(out):
            if r.problem == prob:
                m = r.measurement
                log(f"  default {prob['M']}x{prob['N']}x{prob['K']} {prob['dtype']}: {label(m.config)} "
                    f"{m.latency_ms * 1e3:.1f} us, {m.ref_ms / m.latency_ms:.2f}x cuBLAS ({m.stage or 'tuner'})")
    if skipped:
        log(f"skipped past the {args.budget:.0f} s budget: {', '.join(skipped)}")
    return 0 if done else 1


if __name__ == "__main__":
    sys.exit(main())
