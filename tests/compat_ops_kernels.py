"""Kernels written in TileLang's style with its tile operations (issue 18), shared by the CPU tests
(test_compat_language_ops.py), the CUDA compile tests (test_compat_language_ops_cuda.py) and the GPU suite
(gpu/test_compat_ops.py). Each factory comes with a torch reference in the test that uses it."""

from __future__ import annotations

import tilelang_core as tilelang
import tilelang_core.language as T


@tilelang.jit(out_idx=[-1])
def clamp_rows(N, lo, hi, block=128):
    """Y (padded to a multiple of 64 with T.align_up) = clamp(X, lo, hi) on the first N elements."""

    @T.prim_func
    def main(X: T.Tensor((N,), "float32"), Y: T.Tensor((T.align_up(N, 64),), "float32")):
        with T.Kernel(T.ceildiv(N, block), threads=128) as bx:
            for i in T.Parallel(block):
                if bx * block + i < N:
                    Y[bx * block + i] = T.clamp(X[bx * block + i], lo, hi)

    return main


@tilelang.jit(out_idx=[-1])
def scan_tile(M, N, dim, reverse, kind, scope, dtype="float32"):
    """Y = cumsum / cummax of X along ``dim`` through a ``scope`` ("shared" | "fragment") tile."""

    @T.prim_func
    def main(X: T.Tensor((M, N), dtype), Y: T.Tensor((M, N), dtype)):
        with T.Kernel(1, threads=128):
            if scope == "shared":
                t = T.alloc_shared((M, N), dtype)
            else:
                t = T.alloc_fragment((M, N), dtype)
            T.copy(X, t)
            if kind == "sum":
                T.cumsum(t, dim=dim, reverse=reverse)
            else:
                T.cummax(t, dim=dim, reverse=reverse)
            T.copy(t, Y)

    return main


@tilelang.jit(out_idx=[-1])
def scan_into_other(M, N):
    """T.cumsum(src=..., dst=...) from a shared tile into another one (src untouched: Y[1] = X)."""

    @T.prim_func
    def main(X: T.Tensor((M, N), "float32"), Y: T.Tensor((2, M, N), "float32")):
        with T.Kernel(1, threads=128):
            a = T.alloc_shared((M, N), "float32")
            b = T.alloc_shared((M, N), "float32")
            T.copy(X, a)
            T.cumsum(src=a, dst=b, dim=1)
            T.copy(b, Y[0, 0, 0])
            T.copy(a, Y[1, 0, 0])

    return main


@tilelang.jit(out_idx=[-1])
def let_offset(M, K, bk, step):
    """TileLang's alias test: ``off = T.int32(); T.let(off, step * bk)`` then a copy at that offset."""

    @T.prim_func
    def main(X: T.Tensor((M, K), "float32"), Y: T.Tensor((M, bk), "float32")):
        with T.Kernel(1, threads=128):
            s = T.alloc_shared((M, bk), "float32")
            off = T.int32()
            T.let(off, step * bk)
            T.copy(X[0, off], s)
            T.copy(s, Y)

    return main


@tilelang.jit(out_idx=[-1])
def any_all_rows(M, N):
    """Y[r] = (any(X[r, :] != 0), all(X[r, :] != 0)) from a per-thread tile."""

    @T.prim_func
    def main(X: T.Tensor((M, N), "int32"), Y: T.Tensor((M, 2), "int32")):
        with T.Kernel(M, threads=32) as bx:
            s = T.alloc_local((N,), "int32")
            for j in T.serial(N):
                s[j] = X[bx, j]
            Y[bx, 0] = T.if_then_else(T.any_of(s), 1, 0)
            Y[bx, 1] = T.if_then_else(T.all_of(s[0:N]), 1, 0)

    return main


@tilelang.jit(out_idx=[-1])
def reshape_shared(M, N):
    """Y (N, M) = X (M, N) read back through T.reshape of its shared tile."""

    @T.prim_func
    def main(X: T.Tensor((M, N), "float32"), Y: T.Tensor((N, M), "float32")):
        with T.Kernel(1, threads=128):
            s = T.alloc_shared((M, N), "float32")
            T.copy(X, s)
            r = T.reshape(s, (N, M))
            T.copy(r, Y)

    return main


@tilelang.jit(out_idx=[-1])
def view_bits(N):
    """Y = the bits of X as int32, through T.view(shared, dtype="int32")."""

    @T.prim_func
    def main(X: T.Tensor((N,), "float32"), Y: T.Tensor((N,), "int32")):
        with T.Kernel(1, threads=128):
            s = T.alloc_shared((N,), "float32")
            T.copy(X, s)
            T.copy(T.view(s, dtype="int32"), Y)

    return main


@tilelang.jit(out_idx=[-1])
def transpose_shared(M, N):
    @T.prim_func
    def main(X: T.Tensor((M, N), "float32"), Y: T.Tensor((N, M), "float32")):
        with T.Kernel(1, threads=128):
            s = T.alloc_shared((M, N), "float32")
            t = T.alloc_shared((N, M), "float32")
            T.copy(X, s)
            T.transpose(s, t)
            T.copy(t, Y)

    return main


@tilelang.jit(out_idx=[-1])
def copy_with_hints(M, N):
    """A copy through shared memory with T.annotate_layout and T.disable_warp_group_reg_alloc (accepted, no-ops)."""

    @T.prim_func
    def main(X: T.Tensor((M, N), "float32"), Y: T.Tensor((M, N), "float32")):
        with T.Kernel(1, threads=128):
            s = T.alloc_shared((M, N), "float32")
            T.annotate_layout({s: lambda i, j: (i, j)})
            T.disable_warp_group_reg_alloc()
            T.copy(X, s)
            T.copy(s, Y)

    return main


@tilelang.jit
def column_max_min(M, N, dtype="float32"):
    """Y[0] = max(Y[0], X[b, :]) and Y[1] = min(Y[1], X[b, :]) for every block b, through atomics (Y in/out)."""

    @T.prim_func
    def main(X: T.Tensor((M, N), dtype), Y: T.Tensor((2, N), dtype)):
        with T.Kernel(M, threads=128) as bx:
            for j in T.Parallel(N):
                T.atomic_max(Y[0, j], X[bx, j])
                T.atomic_min(Y[1, j], X[bx, j], memory_order="relaxed")

    return main


@tilelang.jit
def tile_max(M, N, bM):
    """Y = max over row blocks, a whole fragment tile at a time with T.atomic_max(Y, tile) (Y in/out)."""

    @T.prim_func
    def main(X: T.Tensor((M, N), "float32"), Y: T.Tensor((bM, N), "float32")):
        with T.Kernel(M // bM, threads=128) as bx:
            f = T.alloc_fragment((bM, N), "float32")
            T.copy(X[bx * bM, 0], f)
            T.atomic_max(Y, f)

    return main


@tilelang.jit
def column_sums_vectorised(M, N, lanes):
    """Y += column sums of X with T.atomic_addx2 / T.atomic_addx4 inside T.Parallel (Y in/out)."""

    @T.prim_func
    def main(X: T.Tensor((M, N), "float32"), Y: T.Tensor((N,), "float32")):
        with T.Kernel(M, threads=128) as bx:
            f = T.alloc_fragment((N,), "float32")
            T.copy(X[bx, 0], f)
            for j in T.Parallel(N // lanes):
                if lanes == 2:
                    T.atomic_addx2(Y[j * 2], f[j * 2])
                else:
                    T.atomic_addx4(Y[j * 4], f[j * 4])

    return main


@tilelang.jit(out_idx=[-1])
def through_global_workspace(M, N):
    """Y = 2 X + 1 through a workspace the program allocates with T.alloc_global."""

    @T.prim_func
    def main(X: T.Tensor((M, N), "float32"), Y: T.Tensor((M, N), "float32")):
        W = T.alloc_global((M, N), "float32")
        with T.Kernel(M, threads=128) as bx:
            for j in T.Parallel(N):
                W[bx, j] = X[bx, j] * 2
            for j in T.Parallel(N):
                Y[bx, j] = W[bx, j] + 1

    return main


@tilelang.jit(out_idx=[-1])
def reducer_sums(M, N):
    """Y[0] = column sums, Y[1] = row maxima, with T.alloc_reducer / T.finalize_reducer (TileLang's v1 reducer)."""

    @T.prim_func
    def main(X: T.Tensor((M, N), "float32"), Y: T.Tensor((2, N), "float32")):
        with T.Kernel(1, threads=128):
            x = T.alloc_fragment((M, N), "float32")
            r = T.alloc_reducer((N,), "float32", op="sum", replication="all")
            m = T.alloc_reducer((M,), "float32", op="max", replication="all")
            T.copy(X, x)
            T.clear(r)
            T.fill(m, -T.infinity("float32"))
            for i, j in T.Parallel(M, N):
                r[j] += x[i, j]
                m[i] = T.max(m[i], x[i, j])
            T.finalize_reducer(r)
            T.finalize_reducer(m)
            T.copy(r, Y[0, 0])
            T.copy(m, Y[1, 0])

    return main


@tilelang.jit(out_idx=[-1])
def row_reduce_options(M, N, kind, nan_propagate, batch, dtype="float32", threads=128):
    """Y = reduce_<kind>(X, dim=1) through fragments, with TileLang's batch= and nan_propagate= options."""

    @T.prim_func
    def main(X: T.Tensor((M, N), dtype), Y: T.Tensor((M,), dtype)):
        with T.Kernel(1, threads=threads):
            x = T.alloc_fragment((M, N), dtype)
            y = T.alloc_fragment((M,), dtype)
            T.copy(X, x)
            if kind == "max":
                T.reduce_max(x, y, dim=1, batch=batch, nan_propagate=nan_propagate)
            elif kind == "min":
                T.reduce_min(x, y, dim=1, batch=batch, nan_propagate=nan_propagate)
            elif kind == "absmax":
                T.reduce_absmax(x, y, dim=1, batch=batch, nan_propagate=nan_propagate)
            else:
                T.reduce_sum(x, y, dim=1, batch=batch)
            T.copy(y, Y)

    return main


@tilelang.jit(out_idx=[-1])
def bool_mask_select(M, N):
    """Y = X where mask != 0 else 0, with the mask held in a bool fragment (``mask[k] != 0`` as TileLang writes)."""

    @T.prim_func
    def main(X: T.Tensor((M, N), "float32"), Mask: T.Tensor((N,), "int32"), Y: T.Tensor((M, N), "float32")):
        with T.Kernel(1, threads=128):
            mask = T.alloc_fragment((N,), "bool")
            for k in T.Parallel(N):
                mask[k] = Mask[k] > 0
            for i, k in T.Parallel(M, N):
                Y[i, k] = T.if_then_else(mask[k] != 0, X[i, k], 0.0)

    return main


@tilelang.jit(out_idx=[-1])
def single_thread_kernel(N):
    """``threads=1``: one thread per block does a row's work serially (a prefix sum)."""

    @T.prim_func
    def main(X: T.Tensor((4, N), "float32"), Y: T.Tensor((4, N), "float32")):
        with T.Kernel(4, threads=1) as bx:
            acc = T.alloc_var("float32")
            acc[0] = 0.0
            for j in T.serial(N):
                acc[0] = acc[0] + X[bx, j]
                Y[bx, j] = acc[0]

    return main


@tilelang.jit(out_idx=[-1])
def thread_ids(threads):
    """Y[t] = t * 10 + (the thread's index along dim 0), written by each thread from T.get_thread_binding()."""

    @T.prim_func
    def main(Y: T.Tensor((threads,), "int32")):
        with T.Kernel(1, threads=threads):
            tx = T.get_thread_binding()
            Y[tx] = tx * 10 + T.get_thread_binding(0)

    return main


@tilelang.jit(out_idx=[-1])
def gemm_fp16_accumulate(M, N, K, bM, bN, bK, transpose_B=False):
    """C = A @ B with ``accum_dtype="float16"`` (TileLang's fp16-accumulate GEMM tests)."""

    @T.prim_func
    def main(A: T.Tensor((M, K), "float16"), B: T.Tensor(((N, K) if transpose_B else (K, N)), "float16"),
             C: T.Tensor((M, N), "float16")):
        with T.Kernel(T.ceildiv(N, bN), T.ceildiv(M, bM), threads=128) as (bx, by):
            As = T.alloc_shared((bM, bK), "float16")
            Bs = T.alloc_shared(((bN, bK) if transpose_B else (bK, bN)), "float16")
            Cl = T.alloc_fragment((bM, bN), "float16")
            T.clear(Cl)
            for k in T.Pipelined(T.ceildiv(K, bK), num_stages=2):
                T.copy(A[by * bM, k * bK], As)
                if transpose_B:
                    T.copy(B[bx * bN, k * bK], Bs)
                else:
                    T.copy(B[k * bK, bx * bN], Bs)
                T.gemm(As, Bs, Cl, transpose_B=transpose_B)
            T.copy(Cl, C[by * bM, bx * bN])

    return main


@tilelang.jit(out_idx=[-1])
def reverse_through_shared(N):
    """Per-thread code: each thread writes one element of a shared tile, T.sync_threads, then reads its mirror."""

    @T.prim_func
    def main(X: T.Tensor((N,), "float32"), Y: T.Tensor((N,), "float32")):
        with T.Kernel(1, threads=N):
            s = T.alloc_shared((N,), "float32")
            tx = T.get_thread_binding()
            s[tx] = X[tx]
            T.sync_threads()
            Y[tx] = s[N - 1 - tx]

    return main


@tilelang.jit(out_idx=[-1])
def generic_reduce(M, N, kind):
    """T.reduce(src, dst, kind, dim, clear) (TileLang's generic spelling)."""

    @T.prim_func
    def main(X: T.Tensor((M, N), "float32"), Y: T.Tensor((M,), "float32")):
        with T.Kernel(1, threads=128):
            x = T.alloc_fragment((M, N), "float32")
            y = T.alloc_fragment((M,), "float32")
            T.copy(X, x)
            T.reduce(x, y, kind, 1, True)
            T.copy(y, Y)

    return main


@tilelang.jit(out_idx=[-1])
def reshape_param(M, N):
    """Y (N, M) = X (M, N) read through T.reshape of the parameter itself."""

    @T.prim_func
    def main(X: T.Tensor((M, N), "float32"), Y: T.Tensor((N, M), "float32")):
        with T.Kernel(1, threads=128):
            r = T.reshape(X, (N, M))
            s = T.alloc_shared((N, M), "float32")
            T.copy(r, s)
            T.copy(s, Y)

    return main


@tilelang.jit(out_idx=[-1])
def small_block_gemm(threads, n=32, dtype="float32"):
    """An n x n x n T.gemm in a block of fewer than 32 threads (the FMA path: no mma without whole warps)."""

    @T.prim_func
    def main(A: T.Tensor((n, n), dtype), B: T.Tensor((n, n), dtype), C: T.Tensor((n, n), "float32")):
        with T.Kernel(1, threads=threads):
            As = T.alloc_shared((n, n), dtype)
            Bs = T.alloc_shared((n, n), dtype)
            Cl = T.alloc_fragment((n, n), "float32")
            T.copy(A, As)
            T.copy(B, Bs)
            T.clear(Cl)
            T.gemm(As, Bs, Cl)
            T.copy(Cl, C)

    return main
