"""Where the CUDA compiler's time goes, per generated kernel source, and which NVRTC options shorten it.

Why this script exists: a cold ``@jit`` compile on the H200 is 1.3-2.3 s and almost all of it is the CUDA compiler
(see ``compile_time.py``). This probe takes the CUDA C sources the product generated (``.cu`` files, made on any
machine with ``target="cuda"``) and compiles each one several ways, standalone (no TVM needed):

* ``nvcc``: the product's nvcc command line;
* ``nvrtc``: the product's NVRTC options;
* ``nvrtc-ptx``: NVRTC to PTX only (the front end and optimiser without ptxas);
* ``nvrtc+minimal``: with ``-minimal`` (drops runtime/texture declarations NVRTC otherwise parses);
* ``nvrtc+pch``: automatic precompiled headers (``-pch -pch-dir=D``) with the header cache already warm (made by
  compiling another source first), the steady state after a session's first kernel;
* ``nvrtc+pch+minimal``;

and checks the cubins from the PCH variants equal the plain NVRTC cubin byte for byte.

    python bench/gpu/compile_probe.py DIR_OF_CU_FILES [--repeat 3] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
INCLUDE = ROOT / "tilelang_core" / "backend" / "cuda" / "include"


def cuda_home() -> Path:
    nvcc = shutil.which("nvcc") or "/usr/local/cuda/bin/nvcc"
    return Path(os.path.realpath(nvcc)).parent.parent


def include_dirs() -> list[Path]:
    """CUDA's header folders for NVRTC, looked up as the product does (``backend/cuda/nvcc.py``)."""
    import platform

    triple = f"{platform.machine()}-{platform.system().lower()}"
    bases = [Path(b) for b in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda") if b]
    bases.append(cuda_home())
    found: list[Path] = []
    for base in bases:
        for inc in (base / "include", base / "targets" / triple / "include"):
            for d in (inc, inc / "cccl"):
                if d.is_dir() and d not in found:
                    found.append(d)
    return found


def nvrtc_base(arch: str) -> list[str]:
    return [f"--gpu-architecture={arch}", "-std=c++17", "-diag-suppress=177", f"-I{INCLUDE}", "-default-device",
            *(f"-I{d}" for d in include_dirs())]


def nvrtc_compile(src: bytes, name: str, opts: list[str], ptx_only: bool = False) -> tuple[float, bytes]:
    from cuda.bindings import nvrtc

    t0 = time.perf_counter()
    err, prog = nvrtc.nvrtcCreateProgram(src, name.encode(), 0, [], [])
    err, = nvrtc.nvrtcCompileProgram(prog, len(opts), [o.encode() for o in opts])
    if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
        _, size = nvrtc.nvrtcGetProgramLogSize(prog)
        log = b" " * size
        nvrtc.nvrtcGetProgramLog(prog, log)
        raise RuntimeError(f"{name} {opts[-3:]}: {log.decode(errors='replace')[-2000:]}")
    if ptx_only:
        _, size = nvrtc.nvrtcGetPTXSize(prog)
        out = b" " * size
        nvrtc.nvrtcGetPTX(prog, out)
    else:
        _, size = nvrtc.nvrtcGetCUBINSize(prog)
        out = b" " * size
        nvrtc.nvrtcGetCUBIN(prog, out)
    dt = time.perf_counter() - t0
    nvrtc.nvrtcDestroyProgram(prog)
    return dt, out


def nvcc_compile(path: Path, arch: str, scratch: Path) -> tuple[float, bytes]:
    code = arch.replace("sm_", "")
    out = scratch / (path.stem + ".cubin")
    cmd = ["nvcc", "-cubin", f"-gencode=arch=compute_{code},code=sm_{code}", "-O3", "-std=c++17",
           "-diag-suppress=177", f"-I{INCLUDE}", "-o", str(out), str(path)]
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, capture_output=True)
    return time.perf_counter() - t0, out.read_bytes()


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("dir", type=Path)
    p.add_argument("--arch", default="sm_90")
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--json", type=Path, default=None)
    p.add_argument("--include", type=Path, default=None, help="the tl/ headers' folder (default: the repo's)")
    args = p.parse_args()
    global INCLUDE
    INCLUDE = args.include.resolve() if args.include else INCLUDE
    files = sorted(args.dir.glob("*.cu"))
    scratch = Path(tempfile.mkdtemp(prefix="compile_probe_"))
    pch_dir = scratch / "pch"
    pch_dir.mkdir()
    base = nvrtc_base(args.arch)
    variants = {
        "nvrtc": base,
        "nvrtc+minimal": [*base, "-minimal"],
        "nvrtc+pch": [*base, "-pch", f"-pch-dir={pch_dir}"],
        "nvrtc+pch+minimal": [*base, "-minimal", "-pch", f"-pch-dir={pch_dir}/m"],
    }
    (pch_dir / "m").mkdir()
    # warm the header caches with a source that is not measured
    warm = files[-1].read_bytes()
    for name in ("nvrtc+pch", "nvrtc+pch+minimal"):
        t, _ = nvrtc_compile(warm, "warm.cu", variants[name])
        print(f"[probe] {name}: first compile (creates the header cache) {t:.2f} s", flush=True)
    rows = []
    print(f"[probe] {len(files)} sources, {args.arch}, median of {args.repeat}; nvcc at {shutil.which('nvcc')}",
          flush=True)
    for f in files:
        src = f.read_bytes()
        row: dict[str, object] = {"source": f.stem}
        times = [nvcc_compile(f, args.arch, scratch)[0] for _ in range(args.repeat)]
        row["nvcc"] = statistics.median(times)
        ref = None
        for name, opts in variants.items():
            ts = []
            for _ in range(args.repeat):
                t, cubin = nvrtc_compile(src, f.name, opts)
                ts.append(t)
            row[name] = statistics.median(ts)
            if name == "nvrtc":
                ref = cubin
            else:
                row[f"{name} same cubin"] = cubin == ref
        ptx_opts = [base[0].replace("sm_", "compute_"), *base[1:]]
        row["nvrtc-ptx"] = statistics.median(nvrtc_compile(src, f.name, ptx_opts, True)[0]
                                             for _ in range(args.repeat))
        rows.append(row)
        print("  " + f.stem.ljust(44) + "  ".join(
            f"{k} {v:.2f}" if isinstance(v, float) else f"{k}={v}" for k, v in row.items() if k != "source"),
            flush=True)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    shutil.rmtree(scratch, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
