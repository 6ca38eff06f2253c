"""Kernels for the CUDA gaps of issue 18 that the CPU already ran: TileLang's reducers (``T.alloc_reducer`` /
``T.finalize_reducer``) and ``T.reshape`` / ``T.view`` of shared tiles. Shared by tests/test_cuda_reducers.py and
tests/test_cuda_tile_views.py (nvcc + the CUDA emulator, no GPU) and tests/gpu/test_cuda_gaps.py (the same
programs on the GPU)."""

from __future__ import annotations

import tilelang_core as tilelang
import tilelang_core.language as T


@tilelang.jit(out_idx=[-1])
def reducer_rows_from_global(M, N, block_m, op="sum", init=0.0, threads=64, dtype="float32"):
    """Y[b, j] = init (+ | max | min) over the rows of block b of X[:, j]: a reducer updated straight from global
    memory (a nest without fragments: its iterations are split over the threads), one block per ``block_m`` rows.
    ``init`` is the fill value (for a sum it is added once, as on the CPU)."""
    blocks = T.ceildiv(M, block_m)

    @T.prim_func
    def main(X: T.Tensor((M, N), dtype), Y: T.Tensor((blocks, N), dtype)):
        with T.Kernel(blocks, threads=threads) as bx:
            r = T.alloc_reducer((N,), dtype, op=op, replication="all")
            T.fill(r, init)
            for i, j in T.Parallel(block_m, N):
                if bx * block_m + i < M:
                    if op == "sum":
                        r[j] += X[bx * block_m + i, j]
                    elif op == "max":
                        r[j] = T.max(r[j], X[bx * block_m + i, j])
                    else:
                        r[j] = T.min(r[j], X[bx * block_m + i, j])
            T.finalize_reducer(r)
            T.copy(r, Y[bx, 0])

    return main


@tilelang.jit(out_idx=[-1])
def reducer_two_updates(M, N, threads=128):
    """Y[0] = column sums of X twice over (two nests update one reducer), Y[1] = row minima: a fragment source."""

    @T.prim_func
    def main(X: T.Tensor((M, N), "float32"), Y: T.Tensor((2, N), "float32")):
        with T.Kernel(1, threads=threads):
            x = T.alloc_fragment((M, N), "float32")
            s = T.alloc_reducer((N,), "float32", op="sum")
            m = T.alloc_reducer((M,), "float32", op="min")
            T.copy(X, x)
            T.clear(s)
            T.fill(m, T.infinity("float32"))
            for i, j in T.Parallel(M, N):
                s[j] += x[i, j]
            for i, j in T.Parallel(M, N):
                s[j] = s[j] + x[i, j]
                m[i] = T.min(m[i], x[i, j])
            T.finalize_reducer(s)
            T.finalize_reducer(m)
            T.copy(s, Y[0, 0])
            T.copy(m, Y[1, 0])

    return main


@tilelang.jit(out_idx=[-1])
def reducer_bad_update(N):
    """A reducer overwritten (not combined into) inside T.Parallel: a located error on CUDA."""

    @T.prim_func
    def main(X: T.Tensor((N,), "float32"), Y: T.Tensor((N,), "float32")):
        with T.Kernel(1, threads=32):
            r = T.alloc_reducer((N,), "float32", op="sum")
            T.clear(r)
            for j in T.Parallel(N):
                r[j] = X[j] * 2.0
            T.finalize_reducer(r)
            T.copy(r, Y)

    return main


@tilelang.jit(out_idx=[-1])
def reducer_written_outside_parallel(N):
    """A reducer updated by a plain loop every thread runs: a located error on CUDA."""

    @T.prim_func
    def main(X: T.Tensor((N,), "float32"), Y: T.Tensor((N,), "float32")):
        with T.Kernel(1, threads=32):
            r = T.alloc_reducer((N,), "float32", op="sum")
            T.clear(r)
            for j in T.serial(N):
                r[j] += X[j]
            T.finalize_reducer(r)
            T.copy(r, Y)

    return main


@tilelang.jit(out_idx=[-1])
def reducer_and_local_in_one_nest(N):
    """One T.Parallel nest updating a reducer and writing a per-thread tile: a located error on CUDA."""

    @T.prim_func
    def main(X: T.Tensor((N,), "float32"), Y: T.Tensor((N,), "float32")):
        with T.Kernel(1, threads=32):
            r = T.alloc_reducer((N,), "float32", op="sum")
            t = T.alloc_local((N,), "float32")
            T.clear(r)
            for j in T.Parallel(N):
                r[j] += X[j]
                t[j] = X[j]
            T.finalize_reducer(r)
            T.copy(r, Y)

    return main


# -- T.reshape / T.view of shared tiles ---------------------------------------------------------------------------

@tilelang.jit(out_idx=[-1])
def write_through_view(M, N):
    """Y (M, N) = X (N, M) written element by element into T.reshape(s, (N, M)) of a shared (M, N) tile, plus 1
    through T.fill of a one-row region of a second view, then the tile copied out: writes through views land in
    the tile."""

    @T.prim_func
    def main(X: T.Tensor((N, M), "float32"), Y: T.Tensor((M, N), "float32")):
        with T.Kernel(1, threads=64):
            s = T.alloc_shared((M, N), "float32")
            r = T.reshape(s, (N, M))
            for i, j in T.Parallel(N, M):
                r[i, j] = X[i, j] * 2.0
            flat = T.reshape(s, (M * N,))
            T.fill(flat[0:N], 1.0)
            T.copy(s, Y)

    return main


@tilelang.jit(out_idx=[-1])
def view_of_view_bits(N):
    """Y = the bits of X as int32 through a view of a reshape of a shared tile (a chain of views)."""

    @T.prim_func
    def main(X: T.Tensor((N,), "float32"), Y: T.Tensor((N // 4, 4), "int32")):
        with T.Kernel(1, threads=32):
            s = T.alloc_shared((N,), "float32")
            T.copy(X, s)
            r = T.reshape(s, (N // 4, 4))
            T.copy(T.view(r, dtype="int32"), Y)

    return main


@tilelang.jit(out_idx=[-2, -1])
def gemm_operand_viewed(M, N, K):
    """C = A @ B on the tensor cores, and A read back through a reshape of its (swizzled) shared tile."""

    @T.prim_func
    def main(A: T.Tensor((M, K), "float16"), B: T.Tensor((K, N), "float16"), C: T.Tensor((M, N), "float32"),
             A2: T.Tensor((M * K // 16, 16), "float16")):
        with T.Kernel(1, threads=128):
            a_s = T.alloc_shared((M, K), "float16")
            b_s = T.alloc_shared((K, N), "float16")
            c = T.alloc_fragment((M, N), "float32")
            T.copy(A, a_s)
            T.copy(B, b_s)
            T.clear(c)
            T.gemm(a_s, b_s, c)
            T.copy(c, C)
            T.copy(T.reshape(a_s, (M * K // 16, 16)), A2)

    return main


@tilelang.jit(out_idx=[-1])
def view_wider_dtype(N):
    """A float16 shared tile viewed as float32: a located error on CUDA (one element would be two)."""

    @T.prim_func
    def main(X: T.Tensor((N,), "float16"), Y: T.Tensor((N // 2,), "float32")):
        with T.Kernel(1, threads=32):
            s = T.alloc_shared((N,), "float16")
            T.copy(X, s)
            T.copy(T.view(s, (N // 2,), dtype="float32"), Y)

    return main


@tilelang.jit(out_idx=[-1])
def reduce_of_view(N):
    """T.reduce_sum of a reshaped shared tile: a located error on CUDA naming the alternative."""

    @T.prim_func
    def main(X: T.Tensor((N,), "float32"), Y: T.Tensor((4,), "float32")):
        with T.Kernel(1, threads=32):
            s = T.alloc_shared((N,), "float32")
            y = T.alloc_fragment((4,), "float32")
            T.copy(X, s)
            T.reduce_sum(T.reshape(s, (4, N // 4)), y, dim=1)
            T.copy(y, Y)

    return main


@tilelang.jit(out_idx=[-1])
def reshape_fragment(N):
    """T.reshape of a fragment: a located error on CUDA (its layout belongs to its shape)."""

    @T.prim_func
    def main(X: T.Tensor((N,), "float32"), Y: T.Tensor((4, N // 4), "float32")):
        with T.Kernel(1, threads=32):
            f = T.alloc_fragment((N,), "float32")
            T.copy(X, f)
            T.copy(T.reshape(f, (4, N // 4)), Y)

    return main


# -- T.alloc_global ---------------------------------------------------------------------------------------------

@tilelang.jit(out_idx=[-2, -1])
def workspace_tiles(M, N, block_m, threads=64):
    """Y = X + 1 and Z = the int32 row index of every element, through two workspaces (float16 and int32) that
    tile ops and T.Parallel nests write and read: X -> shared -> W (T.copy), W -> fragment (+1) -> Y; the row index
    through an int32 workspace written in a T.Parallel nest."""

    @T.prim_func
    def main(X: T.Tensor((M, N), "float16"), Y: T.Tensor((M, N), "float16"), Z: T.Tensor((M, N), "int32")):
        W = T.alloc_global((M, N), "float16")
        R = T.alloc_global((M, N), "int32")
        with T.Kernel(T.ceildiv(M, block_m), threads=threads) as bx:
            s = T.alloc_shared((block_m, N), "float16")
            f = T.alloc_fragment((block_m, N), "float16")
            T.copy(X[bx * block_m, 0], s)
            T.copy(s, W[bx * block_m, 0])
            for i, j in T.Parallel(block_m, N):
                R[bx * block_m + i, j] = bx * block_m + i
            T.copy(W[bx * block_m, 0], f)
            for i, j in T.Parallel(block_m, N):
                f[i, j] = f[i, j] + T.float16(1)
            T.copy(f, Y[bx * block_m, 0])
            for i, j in T.Parallel(block_m, N):
                Z[bx * block_m + i, j] = R[bx * block_m + i, j]

    return main


@tilelang.jit(out_idx=[-1])
def workspace_symbolic(N):
    """A workspace of symbolic shape: a located error on CUDA (its size is part of the program there)."""
    m = T.symbolic("m")

    @T.prim_func
    def main(X: T.Tensor((m, N), "float32"), Y: T.Tensor((m, N), "float32")):
        W = T.alloc_global((m, N), "float32")
        with T.Kernel(m, threads=32) as bx:
            for j in T.Parallel(N):
                W[bx, j] = X[bx, j]
            for j in T.Parallel(N):
                Y[bx, j] = W[bx, j]

    return main


@tilelang.jit(out_idx=[-1])
def finalize_plain_fragment(N):
    """T.finalize_reducer of a fragment T.alloc_reducer did not allocate: an error at the user's line."""

    @T.prim_func
    def main(X: T.Tensor((N,), "float32"), Y: T.Tensor((N,), "float32")):
        with T.Kernel(1, threads=32):
            f = T.alloc_fragment((N,), "float32")
            T.copy(X, f)
            T.finalize_reducer(f)
            T.copy(f, Y)

    return main
