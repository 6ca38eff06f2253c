"""Compile a kernel of each import-swap program for CUDA (sm_90a, nvcc), without a GPU.

``python tests/import_swap/compile_for_cuda.py`` installs ``tilelang_core`` as ``tilelang``, loads each program and
builds one of its kernels (the one exercising the most of it) with ``target="cuda"`` at the sizes its ``run`` uses
(the table below), printing one JSON line per kernel: ``{"name", "ok", "seconds", "error"}``. Running them needs a
GPU (tests/gpu/test_import_swap.py); this checks, on any machine with nvcc, that the programs go through the CUDA
code generator and nvcc.
"""

from __future__ import annotations

import importlib.util
import json
import sys
import time
import traceback
from pathlib import Path

HERE = Path(__file__).resolve().parent


def _cases(T) -> dict[str, list[tuple[str, tuple, dict]]]:  # noqa: N803 (the language module, as programs name it)
    f16, f32 = T.float16, T.float32
    return {
        "gemm_classic": [("matmul", (256, 192, 160, 64, 64, 32), {})],
        "gemm_eager": [("gemm_into", (), dict(M=192, N=160, K=128))],
        "gemm_transposes": [("matmul", (128, 96, 64, 32, 32, 32, True, True, f16, f32, f32), {})],
        "gemm_splitk": [("matmul", (), dict(M=128, N=128, K=256, block_M=64, block_N=64, block_K=32, split_k=4))],
        "softmax": [("softmax", (), dict(M=64, N=200))],
        "rmsnorm": [("rms_norm", (), dict(M=96, N=256, blk_m=8))],
        "layernorm": [("layer_norm", (100, 192, 8), {})],
        "gemv": [("gemv", (), dict(N=320, K=512, BLOCK_N=32, BLOCK_K=64))],
        "elementwise": [("axpy", (), {})],
        "flash_attention": [("flashattn", (), dict(batch=1, seq_len=64, heads=2, dim=32, is_causal=True,
                                                   dtype=f16))],
    }


def main() -> int:
    sys.path.insert(0, str(HERE))
    import tilelang_alias

    tilelang_alias.install()
    import tilelang
    import tilelang.language as T

    for prog, cases in _cases(T).items():
        spec = importlib.util.spec_from_file_location(f"import_swap_{prog}", HERE / "programs" / f"{prog}.py")
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        for i, (name, args, kwargs) in enumerate(cases):
            t0 = time.perf_counter()
            label = f"{prog}.{name}#{i}"
            try:
                f = getattr(mod, name)
                if getattr(f, "eager", False):
                    kernel = tilelang.jit(target="cuda")(f.factory).compile(*args, **kwargs)
                else:
                    kernel = tilelang.jit(out_idx=f.out_idx, target="cuda")(f.factory)(*args, **kwargs)
                cubin = kernel.artifact.path / kernel.artifact.extra["cuda"]["cubin"]
                assert cubin.stat().st_size > 0 and "__global__" in kernel.get_kernel_source()
                r = {"name": label, "ok": True, "error": None}
            except BaseException as e:  # noqa: BLE001 - reported per kernel
                r = {"name": label, "ok": False, "error": "".join(traceback.format_exception(e))[-3000:]}
            r["seconds"] = time.perf_counter() - t0
            print(json.dumps(r), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
