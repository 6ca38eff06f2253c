"""Clone a built GPU artifact with its CUDA source edited, for experiments on the device (no TVM needed).

Why this script exists: trying a schedule idea in the compiler takes a pass change, a rebuild and a device call;
trying it on the generated source first takes a text edit. This copies ``.gpu_artifacts/NAME`` to
``.gpu_artifacts/NEW``, applies ``--sub OLD=>NEW`` replacements (each must match) to ``kernel.cu``, recompiles the
cubin with the recorded nvcc command (optionally with ``-D`` defines), updates the hash, and adds the copy to the
manifest (as a measurement variant that is still checked unless ``--no-check``).

    python bench/gpu/variant.py dq_f16_16x8192x8192_g-1_16x64x256s4t128 v_hoist -D DQ4_DEPTH=2 \
        --sub 'ld.global.nc.L1::no_allocate=>ld.global.nc'
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from tilelang_core.runtime.artifact import sha256_file  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("name")
    p.add_argument("new")
    p.add_argument("--artifacts", default=str(ROOT / ".gpu_artifacts"))
    p.add_argument("--sub", action="append", default=[], help="OLD=>NEW replacement in kernel.cu (all occurrences)")
    p.add_argument("-D", dest="defines", action="append", default=[], help="extra nvcc -D define")
    p.add_argument("--include", default=None, help="an include directory searched before the recorded one")
    p.add_argument("--smem", type=int, default=None, help="launch with this much dynamic shared memory (caps the "
                   "blocks per SM)")
    p.add_argument("--no-check", action="store_true")
    args = p.parse_args(argv)
    root = Path(args.artifacts)
    src, dst = root / args.name, root / args.new
    if dst.exists():
        shutil.rmtree(dst)
    shutil.copytree(src, dst)
    cu = dst / "kernel.cu"
    text = cu.read_text()
    for s in args.sub:
        old, new = s.split("=>", 1)
        if old not in text:
            raise SystemExit(f"--sub: {old!r} not found in {args.name}/kernel.cu")
        text = text.replace(old, new)
    cu.write_text(text)
    meta = json.loads((dst / "meta.json").read_text())
    cmd = [str(c).replace(str(src), str(dst)) for c in meta["extra"]["cuda"]["nvcc_command"]]
    cmd[1:1] = [f"-D{d}" for d in args.defines] + ([f"-I{args.include}"] if args.include else [])
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode:
        print(r.stderr)
        return 1
    print([ln.strip() for ln in r.stderr.splitlines() if "registers" in ln][-1:])
    meta["library_sha256"] = sha256_file(dst / meta["library"])
    meta["extra"]["cuda"]["nvcc_command"] = cmd
    if args.smem is not None:
        meta["extra"]["cuda"]["dyn_smem"] = args.smem
    (dst / "meta.json").write_text(json.dumps(meta, indent=1))
    manifest = json.loads((root / "manifest.json").read_text())
    entry = dict(next(e for e in manifest["entries"] if e["name"] == args.name))
    entry.update(name=args.new, dir=args.new, variant_of=args.name)
    if args.no_check:
        entry["check"] = False
    manifest["entries"] = [e for e in manifest["entries"] if e["name"] != args.new] + [entry]
    (root / "manifest.json").write_text(json.dumps(manifest, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
