"""LayerNorm forward ``y = (x - mean) * rsqrt(var + eps) * g + b`` over the rows of a 2-D tensor.

One row per block (``blk_m = 1``) in the classic tile style: the row is staged in a shared tile, widened into an
fp32 fragment, squared into a second fragment, and both are ``T.reduce_sum``-ed along the row (the sum of x and
the sum of x*x, one pass over the data). The mean and ``rstd = rsqrt(E[x^2] - mean^2 + eps)`` land in ``(blk_m,)``
fragments, and the epilogue normalises through a scalar temporary (``t = (x - mean) * rstd``) before the affine
``t * g + b``. ``via="input"`` writes the result back through the input's shared tile, ``via="own"`` through a
shared tile of its own; either way one coalesced ``T.copy`` stores it. ``Mean`` and ``Rstd`` (fp32, one per row)
are outputs too, as a backward pass needs them.

This is the program of the H200 report in docs/cuda.md ("LayerNorm: the wrong Y on the H200"): the epilogue's
scalar temporary inside a vectorised ``T.Parallel`` chunk once shared one register among the lanes.

Run ``python examples/layernorm.py`` to check it against ``torch.nn.functional.layer_norm`` on the CPU.
"""

from __future__ import annotations

import torch

import tilelang_core as tilelang
import tilelang_core.language as T
from tilelang_core.target import resolve_target

# where main() runs: the GPU when one is visible (target="auto" compiles for it), else the CPU
DEVICE = resolve_target("auto")

EPS = 1e-5


@tilelang.jit(out_idx=[-3, -2, -1])
def layer_norm(M, D, blk_m=1, threads=256, dtype="float16", eps=EPS, via="input"):
    """Y (M, D) in ``dtype``, Mean (M,) and Rstd (M,) in fp32, from X (M, D), g (D,), b (D,)."""
    acc = "float32"
    inv_d = 1.0 / D

    @T.prim_func
    def main(X: T.Tensor((M, D), dtype), G: T.Tensor((D,), dtype), Bias: T.Tensor((D,), dtype),
             Y: T.Tensor((M, D), dtype), Mean: T.Tensor((M,), acc), Rstd: T.Tensor((M,), acc)):
        with T.Kernel(T.ceildiv(M, blk_m), threads=threads) as bx:
            x_sh = T.alloc_shared((blk_m, D), dtype)
            g_sh = T.alloc_shared((D,), dtype)
            b_sh = T.alloc_shared((D,), dtype)
            x = T.alloc_fragment((blk_m, D), acc)
            xx = T.alloc_fragment((blk_m, D), acc)
            total = T.alloc_fragment((blk_m,), acc)
            total_sq = T.alloc_fragment((blk_m,), acc)
            mean = T.alloc_fragment((blk_m,), acc)
            rstd = T.alloc_fragment((blk_m,), acc)
            T.copy(X[bx * blk_m, 0], x_sh)
            T.copy(G, g_sh)
            T.copy(Bias, b_sh)
            for i, j in T.Parallel(blk_m, D):
                x[i, j] = T.cast(x_sh[i, j], acc)
            for i, j in T.Parallel(blk_m, D):
                xx[i, j] = x[i, j] * x[i, j]
            T.reduce_sum(x, total, dim=1)
            T.reduce_sum(xx, total_sq, dim=1)
            for i in T.Parallel(blk_m):
                mean[i] = total[i] * inv_d
                rstd[i] = T.rsqrt(total_sq[i] * inv_d - mean[i] * mean[i] + eps)
                Mean[bx * blk_m + i] = mean[i]
                Rstd[bx * blk_m + i] = rstd[i]
            if via == "input":
                for i, j in T.Parallel(blk_m, D):
                    t = (x[i, j] - mean[i]) * rstd[i]
                    x_sh[i, j] = T.cast(t * T.cast(g_sh[j], acc) + T.cast(b_sh[j], acc), dtype)
                T.copy(x_sh, Y[bx * blk_m, 0])
            else:
                y_sh = T.alloc_shared((blk_m, D), dtype)
                for i, j in T.Parallel(blk_m, D):
                    t = (x[i, j] - mean[i]) * rstd[i]
                    y_sh[i, j] = T.cast(t * T.cast(g_sh[j], acc) + T.cast(b_sh[j], acc), dtype)
                T.copy(y_sh, Y[bx * blk_m, 0])

    return main


def reference(X: torch.Tensor, G: torch.Tensor, B: torch.Tensor, eps: float = EPS) -> list[torch.Tensor]:
    """torch reference in float64: [Y, Mean, Rstd]."""
    x = X.double()
    mean = x.mean(-1)
    rstd = torch.rsqrt(x.var(-1, unbiased=False) + eps)
    y = torch.nn.functional.layer_norm(x, (x.shape[-1],), G.double(), B.double(), eps)
    return [y, mean, rstd]


def main() -> None:
    for M, D, dtype in ((64, 1024, "float16"), (64, 4096, "bfloat16"), (33, 333, "float16")):
        td = getattr(torch, dtype)
        x, g, b = torch.randn(M, D).to(td), torch.randn(D).to(td), torch.randn(D).to(td)
        for via in ("input", "own"):
            y, mean, rstd = (t.cpu() for t in layer_norm(M, D, dtype=dtype, via=via)(x.to(DEVICE), g.to(DEVICE),
                                                                                  b.to(DEVICE)))
            ref = reference(x, g, b)
            torch.testing.assert_close(y.double(), ref[0], rtol=2e-2, atol=2e-2)
            torch.testing.assert_close(mean.double(), ref[1], rtol=1e-5, atol=1e-5)
            torch.testing.assert_close(rstd.double(), ref[2], rtol=1e-4, atol=1e-4)
            print(f"layer_norm {M}x{D} {dtype} via {via}: OK")


if __name__ == "__main__":
    main()
