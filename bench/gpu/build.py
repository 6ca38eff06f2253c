"""Build every kernel of ``bench/gpu/kernels.py`` for CUDA into ``.gpu_artifacts/`` (no GPU needed).

Why this script exists: the GPU host has no TVM and the device lease is short, so compilation happens here —
TVM's CUDA codegen, then nvcc for ``--arch`` — and only the self-describing artifacts (cubin + ``meta.json``)
travel, with a ``manifest.json`` telling ``bench/gpu/run.py`` how to check and time each one.

    python bench/gpu/build.py                    # all entries, sm_90, into .gpu_artifacts/
    python bench/gpu/build.py --only gemm_f16    # entries whose name contains a substring
    python bench/gpu/build.py --arch sm_80 --out /tmp/a
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from dataclasses import asdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from kernels import entries, load_factory  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--arch", default="sm_90")
    p.add_argument("--out", default=str(ROOT / ".gpu_artifacts"))
    p.add_argument("--only", nargs="*", default=None, help="substrings of entry names to build")
    args = p.parse_args(argv)

    from tilelang_core.jit import _normalize_out_idx, _param_specs
    from tilelang_core.jit.cuda import build_artifact

    out = Path(args.out)
    if args.only is None and out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True, exist_ok=True)
    manifest_path = out / "manifest.json"
    manifest = json.loads(manifest_path.read_text()) if manifest_path.exists() else {"arch": args.arch,
                                                                                      "entries": []}
    by_name = {e["name"]: e for e in manifest["entries"]}
    failures = 0
    t_all = time.perf_counter()
    for entry in entries():
        if args.only and not any(s in entry.name for s in args.only):
            continue
        t0 = time.perf_counter()
        try:
            factory = load_factory(entry)
            func = factory.get_program(*entry.args, **entry.kwargs)
            specs = _param_specs(func)
            outs = _normalize_out_idx(factory.out_idx, len(specs))
            d = out / entry.name
            if d.exists():
                shutil.rmtree(d)
            d.mkdir(parents=True)
            art = build_artifact(func, d, {"kind": "cuda", "arch": args.arch}, specs, outs, name=entry.name,
                                 pass_configs=entry.pass_configs or None)
            rec = asdict(entry)
            rec["dir"] = entry.name
            rec["cuda"] = {k: v for k, v in art.extra["cuda"].items() if k != "ptxas_info"}
            regs = [ln for ln in art.extra["cuda"]["ptxas_info"].splitlines() if "registers" in ln]
            rec["ptxas"] = regs[-1].strip() if regs else ""
            by_name[entry.name] = rec
            print(f"built {entry.name:42s} {time.perf_counter() - t0:5.2f}s grid={art.extra['cuda']['grid']} "
                  f"{'cluster ' if '__cluster_dims__' in (d / art.sources['cuda']).read_text() else ''}"
                  f"block={art.extra['cuda']['block'][0]} smem={art.extra['cuda']['dyn_smem']} {rec['ptxas']}")
        except Exception as e:  # noqa: BLE001 - report every failure, keep building the rest
            failures += 1
            print(f"FAILED {entry.name}: {type(e).__name__}: {str(e)[:2000]}")
    manifest["arch"] = args.arch
    manifest["entries"] = list(by_name.values())
    manifest_path.write_text(json.dumps(manifest, indent=1))
    print(f"{len(manifest['entries'])} artifacts in {out} ({time.perf_counter() - t_all:.1f}s), {failures} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
