"""Exported CUDA modules on the GPU host: correct, and safe when a stateful kernel changes streams.

Why this script exists: ``kernel.export(path)`` is how a tuned kernel leaves the workbench, and the GPU host is the
only place its launcher (``tilelang_core.runtime.exported``, copied into every module) really runs. Two of its
duties have no CPU test that can fail for the right reason: opting in to more than 48 KiB of shared memory
(dynamic plus the kernel's static bytes) before the first launch, and ordering launches of a kernel that keeps
state in its module (the W4A16 split-K workspace) when they come on different streams.

    python bench/gpu/export_check.py --build     # here (no GPU): compile and export into .gpu_artifacts/exported/
    python bench/gpu/export_check.py             # on the GPU host: import each module without tilelang_core or
                                                 # TVM on sys.path, check it against torch, then the stream test

The device part runs each module in a fresh interpreter whose ``sys.path`` holds only the module's folder and
``bench/gpu`` (for ``refs.py``), so an accidental import of tilelang_core or TVM fails the check.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
OUT = ROOT / ".gpu_artifacts" / "exported"

# name -> (module, factory, args, config); the shapes the issue benchmarks
KERNELS = {
    "w4a16_16x8192x8192_splitk": ("examples.dequant_gemm", "dequant_gemm", (16, 8192, 8192, -1),
                                  {"block_M": 16, "block_N": 128, "block_K": 512, "num_stages": 3, "threads": 128,
                                   "dtype": "float16"}),
    "flash_attention_2x4x1000x128": ("examples.flash_attention", "flash_attention", (2, 4, 1000, 128, False),
                                     {"block_M": 128, "block_N": 64, "num_stages": 2, "threads": 128,
                                      "dtype": "float16"}),
}


def build() -> int:
    sys.path.insert(0, str(ROOT))
    import importlib

    import tilelang_core

    OUT.mkdir(parents=True, exist_ok=True)
    manifest = {}
    for name, (mod, fac, args, cfg) in KERNELS.items():
        factory = getattr(importlib.import_module(mod), fac)
        prog = factory.get_program(*args, **cfg)
        kern = tilelang_core.compile(prog, out_idx=factory.out_idx, target="cuda", name=name)
        path = kern.export(OUT / f"{name}.py")
        cuda = kern.artifact.extra["cuda"]
        manifest[name] = {"args": list(args), "config": cfg, "dyn_smem": cuda["dyn_smem"],
                          "serial_streams": cuda.get("serial_streams", False)}
        print(f"exported {name}: {path.stat().st_size // 1024} KiB, dyn smem {cuda['dyn_smem']} B, "
              f"serial_streams={cuda.get('serial_streams', False)}")
    (OUT / "manifest.json").write_text(json.dumps(manifest, indent=1))
    return 0


# -- device side: runs in a fresh interpreter (see the module doc) ----------------------------------------------
CHILD = r'''
import importlib.util, json, sys
import torch
name, folder, bench = sys.argv[1], sys.argv[2], sys.argv[3]
sys.path[:] = [p for p in sys.path if "site-packages" in p or "dist-packages" in p or p.endswith(".zip")
               or "lib/python" in p] + [folder, bench]
spec = importlib.util.spec_from_file_location(name, f"{folder}/{name}.py")
m = importlib.util.module_from_spec(spec)
spec.loader.exec_module(m)
import refs
assert "tilelang_core" not in sys.modules and "tvm" not in sys.modules, "the module imported tilelang_core or TVM"
g = torch.Generator(device="cuda").manual_seed(0)
kern = m.kernel
out = {"name": name, "repr": repr(kern)}
if len(sys.argv) > 4 and sys.argv[4] == "no-order":  # the control: the launcher's stream ordering switched off
    kern.load().stream_order = None
if name.startswith("w4a16"):
    M, N, K = 16, 8192, 8192
    A = torch.randn(M, K, device="cuda", generator=g).half()
    B = torch.randint(0, 256, (N, K // 2), device="cuda", dtype=torch.uint8, generator=g)
    S = (torch.rand(N, 1, device="cuda", generator=g) * 0.1 + 0.01).half()
    C = kern(A, B, S)
    torch.cuda.synchronize()
    exact = refs.dequant_gemm_exact(A, B, S)[0]
    prog = refs.dequant_gemm(A, B, S)[0]
    tol = 2e-2 + 2e-2 * exact.abs() + (prog - exact).abs()
    out["ok"] = bool(((C.double() - exact).abs() <= tol).all())
    out["max_err"] = float((C.double() - exact).abs().max())
    # the stream test: 24 launches alternating between two streams, nothing synchronised in between by us, each
    # into its own output. In rounds of four, both streams first wait for one event that a ~2 ms spin on a third
    # stream records, so without the launcher's ordering the round's launches become ready at the same instant
    # and run at once, sharing the split-K workspace and counters (the control below switches the ordering off)
    streams = [torch.cuda.Stream(), torch.cuda.Stream()]
    gate = torch.cuda.Stream()
    As = [torch.randn(M, K, device="cuda", generator=g).half() for _ in range(4)]
    outs = []
    torch.cuda.synchronize()
    for r in range(6):
        with torch.cuda.stream(gate):
            torch.cuda._sleep(4_000_000)
            go = torch.cuda.Event()
            go.record(gate)
        for s in streams:
            s.wait_event(go)
        for i in range(4):
            with torch.cuda.stream(streams[i % 2]):
                outs.append((i, kern(As[i], B, S)))
    torch.cuda.synchronize()
    refs4 = [refs.dequant_gemm_exact(a, B, S)[0] for a in As]
    progs4 = [refs.dequant_gemm(a, B, S)[0] for a in As]
    bad = 0
    for j, c in outs:
        tol = 2e-2 + 2e-2 * refs4[j].abs() + (progs4[j] - refs4[j]).abs()
        bad += int(not bool(((c.double() - refs4[j]).abs() <= tol).all()))
    out["stream_launches"] = len(outs)
    out["stream_bad"] = bad
    out["ok"] = out["ok"] and bad == 0
else:
    Bz, S_, H, D = 2, 1000, 4, 128
    q, k, v = (torch.randn(Bz, S_, H, D, device="cuda", generator=g).half() for _ in range(3))
    o = kern(q, k, v)
    torch.cuda.synchronize()
    ref = torch.nn.functional.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2),
                                                            v.transpose(1, 2)).transpose(1, 2)
    err = (o.float() - ref.float()).abs().max().item()
    out["ok"] = err < 2e-2
    out["max_err"] = err
print("RESULT " + json.dumps(out))
'''


def _child(name: str, *extra: str) -> dict | None:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    r = subprocess.run([sys.executable, "-c", CHILD, name, str(OUT), str(HERE), *extra], capture_output=True,
                       text=True, env=env, timeout=300)
    line = next((ln for ln in r.stdout.splitlines() if ln.startswith("RESULT ")), None)
    if r.returncode or line is None:
        print(f"FAIL {name}: exit {r.returncode}\n{r.stdout[-2000:]}\n{r.stderr[-3000:]}")
        return None
    return json.loads(line[7:])


def device() -> int:
    manifest = json.loads((OUT / "manifest.json").read_text())
    fails = 0
    for name, info in manifest.items():
        res = _child(name)
        if res is None:
            fails += 1
            continue
        fails += not res["ok"]
        extra = (f", {res['stream_launches']} launches alternating two streams: {res['stream_bad']} wrong"
                 if "stream_launches" in res else "")
        print(f"{'PASS' if res['ok'] else 'FAIL'} {name}: max|err| {res['max_err']:.3e}{extra}  {res['repr']}")
        if info.get("serial_streams"):  # the control: can the stream test fail at all?
            ctl = _child(name, "no-order")
            if ctl is not None:
                verdict = "the test can fail" if ctl["stream_bad"] else "the test did not catch it this time"
                print(f"     control, launcher ordering switched off: {ctl['stream_bad']} of "
                      f"{ctl['stream_launches']} launches wrong ({verdict})")
    return 1 if fails else 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--build", action="store_true", help="compile and export (no GPU needed)")
    args = p.parse_args(argv)
    return build() if args.build else device()


if __name__ == "__main__":
    sys.exit(main())
