"""TileLang's tile operations (issue 18) on the CPU, each against torch on random inputs: T.clamp / T.align_up,
T.cumsum / T.cummax, T.let, T.any_of / T.all_of, T.reshape / T.view, T.transpose, T.annotate_layout and
T.disable_warp_group_reg_alloc (accepted no-ops), T.atomic_max / T.atomic_min / T.atomic_addx2 / x4,
T.alloc_global, T.alloc_reducer / T.finalize_reducer, reduce_*(batch=, nan_propagate=), bool fragments,
T.get_thread_binding (refused here with a located error), unsupported names (located error pointing to
docs/compat.md), and the fp16-accumulate GEMM rounding once per k-step as tensor cores do.
The CUDA side of the same kernels: test_compat_language_ops_cuda.py (nvcc) and gpu/test_compat_ops.py (a GPU)."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest
import torch

import tilelang_core as tilelang
import tilelang_core.language as T
from tilelang_core.errors import TileLangCompileError

sys.path.insert(0, str(Path(__file__).resolve().parent))

import compat_ops_kernels as ops  # noqa: E402


def test_clamp_and_align_up():
    x = torch.randn(1000) * 2
    y = ops.clamp_rows(1000, -0.5, 0.75)(x)
    assert y.shape == (1024,)  # T.align_up(1000, 64)
    torch.testing.assert_close(y[:1000], x.clamp(-0.5, 0.75))
    assert T.align_up(100, 64) == 128 and T.align_up(128, 64) == 128


@pytest.mark.parametrize("scope", ["shared", "fragment"])
@pytest.mark.parametrize("dim,reverse", [(0, False), (1, False), (1, True), (0, True)])
def test_cumsum_and_cummax_match_torch(scope, dim, reverse):
    x = torch.randn(8, 16)

    def ref(op):
        xs = x.flip(dim) if reverse else x
        r = xs.cumsum(dim) if op == "sum" else xs.cummax(dim).values
        return r.flip(dim) if reverse else r

    torch.testing.assert_close(ops.scan_tile(8, 16, dim, reverse, "sum", scope)(x), ref("sum"))
    torch.testing.assert_close(ops.scan_tile(8, 16, dim, reverse, "max", scope)(x), ref("max"))


def test_cummax_propagates_nan_and_scans_into_another_tile():
    x = torch.randn(8, 16)
    x[2, 5] = math.nan
    y = ops.scan_tile(8, 16, 1, False, "max", "shared")(x)
    torch.testing.assert_close(y, x.cummax(1).values, equal_nan=True)
    assert torch.isnan(y[2, 5:]).all() and not torch.isnan(y[2, :5]).any()
    out = ops.scan_into_other(8, 16)(x.nan_to_num())
    torch.testing.assert_close(out[0], x.nan_to_num().cumsum(1))
    torch.testing.assert_close(out[1], x.nan_to_num())  # src untouched


def test_let_binds_a_variable_for_later_statements():
    x = torch.randn(8, 64)
    torch.testing.assert_close(ops.let_offset(8, 64, 16, 2)(x), x[:, 32:48])
    torch.testing.assert_close(ops.let_offset(8, 64, 16, 3)(x), x[:, 48:64])


def test_any_of_and_all_of():
    x = (torch.rand(16, 8) < 0.8).int() * torch.randint(1, 5, (16, 8), dtype=torch.int32)
    x[0] = 0
    x[1] = 3
    y = ops.any_all_rows(16, 8)(x)
    torch.testing.assert_close(y[:, 0], (x != 0).any(1).int())
    torch.testing.assert_close(y[:, 1], (x != 0).all(1).int())


def test_reshape_and_view_share_the_tile_memory():
    x = torch.randn(4, 8)
    torch.testing.assert_close(ops.reshape_shared(4, 8)(x), x.reshape(8, 4))
    v = torch.randn(64)
    torch.testing.assert_close(ops.view_bits(64)(v), v.view(torch.int32))
    torch.testing.assert_close(ops.reshape_param(4, 8)(x), x.reshape(8, 4))


def test_reshape_with_a_different_size_is_a_located_error():
    @tilelang.jit(out_idx=[-1])
    def bad(N):
        @T.prim_func
        def main(X: T.Tensor((N,), "float32"), Y: T.Tensor((N,), "float32")):
            with T.Kernel(1, threads=128):
                s = T.alloc_shared((N,), "float32")
                r = T.reshape(s, (N, 2))
                T.copy(X, r[0, 0:N])

        return main

    with pytest.raises(TileLangCompileError, match=r"T\.reshape: the view must cover the same memory") as e:
        bad(64)
    assert e.value.location is not None and e.value.location.line > 0


def test_transpose():
    x = torch.randn(16, 32)
    torch.testing.assert_close(ops.transpose_shared(16, 32)(x), x.t())


def test_layout_and_register_hints_are_accepted_and_change_nothing():
    x = torch.randn(16, 32)
    torch.testing.assert_close(ops.copy_with_hints(16, 32)(x), x)


def test_annotate_layout_rejects_what_is_not_a_layout_map():
    @tilelang.jit(out_idx=[-1])
    def bad(N):
        @T.prim_func
        def main(X: T.Tensor((N,), "float32"), Y: T.Tensor((N,), "float32")):
            with T.Kernel(1, threads=128):
                s = T.alloc_shared((N,), "float32")
                T.annotate_layout({s: None})
                T.copy(X, Y)

        return main

    with pytest.raises(TileLangCompileError, match=r"T\.annotate_layout layout_map\[s\]: expected a layout"):
        bad(64)


@pytest.mark.parametrize("dtype", ["float32", "float16", "int32"])
def test_atomic_max_and_min(dtype):
    tdt = getattr(torch, dtype)
    x = (torch.randn(16, 32) * 100).to(tdt)
    big = 1e4 if dtype != "int32" else 2**30
    y = torch.stack([torch.full((32,), -big), torch.full((32,), big)]).to(tdt)
    y[0, :4] = 1e3 if dtype != "int32" else 1000  # already larger than every value: stays
    ops.column_max_min(16, 32, dtype)(x, y)
    ref_max = torch.maximum(x.amax(0), torch.where(torch.arange(32) < 4, torch.tensor(1e3 if dtype != "int32"
                                                                                        else 1000).to(tdt),
                                                   torch.tensor(-big).to(tdt)))
    torch.testing.assert_close(y[0], ref_max)
    torch.testing.assert_close(y[1], x.amin(0))


def test_atomic_max_skips_nan_and_takes_tiles():
    x = torch.randn(16, 32)
    x[3, 7] = math.nan
    y = torch.full((2, 32), -1e30)
    y[1] = 1e30
    ops.column_max_min(16, 32)(x, y)
    torch.testing.assert_close(y[0], x.nan_to_num(-1e30).amax(0))
    t = torch.randn(64, 32)
    out = torch.full((16, 32), -1e30)
    ops.tile_max(64, 32, 16)(t, out)
    torch.testing.assert_close(out, t.reshape(4, 16, 32).amax(0))


@pytest.mark.parametrize("lanes", [2, 4])
def test_vectorised_atomic_adds(lanes):
    x = torch.randn(16, 32)
    y = torch.randn(32)
    ref = y + x.sum(0)
    ops.column_sums_vectorised(16, 32, lanes)(x, y)
    torch.testing.assert_close(y, ref)


def test_atomic_options_that_are_not_supported_are_refused():
    @tilelang.jit
    def bad(N, **kw):
        @T.prim_func
        def main(X: T.Tensor((N,), "float32"), Y: T.Tensor((N,), "float32")):
            with T.Kernel(1, threads=128):
                for i in T.Parallel(N):
                    T.atomic_max(Y[i], X[i], **kw)

        return main

    with pytest.raises(TileLangCompileError, match=r"memory_order='acquire': only relaxed atomics"):
        bad(8, memory_order="acquire")
    with pytest.raises(TileLangCompileError, match="return_prev=True"):
        bad(8, return_prev=True)


def test_alloc_global_workspace():
    x = torch.randn(16, 32)
    torch.testing.assert_close(ops.through_global_workspace(16, 32)(x), x * 2 + 1)


def test_alloc_reducer_and_finalize_reducer():
    x = torch.randn(32, 32)
    y = ops.reducer_sums(32, 32)(x)
    torch.testing.assert_close(y[0], x.sum(0), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(y[1], x.amax(1))


@pytest.mark.parametrize("kind", ["max", "min", "absmax"])
def test_reduce_batch_and_nan_propagate(kind):
    x = torch.randn(32, 64)
    x[5, 9] = math.nan
    ref = {"max": x.amax(1), "min": x.amin(1), "absmax": x.abs().amax(1)}[kind]
    y = ops.row_reduce_options(32, 64, kind, True, 4)(x)
    torch.testing.assert_close(y, ref, equal_nan=True)
    assert torch.isnan(y[5])
    skipped = ops.row_reduce_options(32, 64, kind, False, 2)(x)
    assert not torch.isnan(skipped).any()
    torch.testing.assert_close(ops.row_reduce_options(32, 64, "sum", False, 8)(x.nan_to_num()), x.nan_to_num().sum(1))


def test_reduce_batch_must_be_positive():
    with pytest.raises(TileLangCompileError, match="batch: expected a positive int, got 0"):
        ops.row_reduce_options(32, 64, "sum", False, 0)


def test_bool_fragment_mask():
    """A bool fragment compared with ``!= 0`` (was invalid LLVM IR on the CPU)."""
    x = torch.randn(16, 32)
    m = torch.randint(-2, 3, (32,), dtype=torch.int32)
    torch.testing.assert_close(ops.bool_mask_select(16, 32)(x, m), torch.where(m > 0, x, torch.zeros(())))


def test_single_thread_kernel():
    x = torch.randn(4, 64)
    torch.testing.assert_close(ops.single_thread_kernel(64)(x), x.cumsum(1), rtol=1e-5, atol=1e-5)


def test_get_thread_binding_is_a_located_error_on_the_cpu():
    with pytest.raises(TileLangCompileError, match="T.get_thread_binding: per-thread code") as e:
        ops.thread_ids(64)()
    assert e.value.location is not None and e.value.location.file.endswith("compat_ops_kernels.py")


def test_an_unsupported_tilelang_name_says_so_at_the_users_line():
    @tilelang.jit(out_idx=[-1])
    def uses_loop_break(N):
        @T.prim_func
        def main(X: T.Tensor((N,), "float32"), Y: T.Tensor((N,), "float32")):
            with T.Kernel(1, threads=128):
                T.loop_break()

        return main

    with pytest.raises(TileLangCompileError, match=r"T\.loop_break is not supported by tilelang_core.*docs/compat\.md"):
        uses_loop_break(8)
    with pytest.raises(AttributeError):
        T.no_such_name_anywhere  # noqa: B018 - a name TileLang does not have either stays an AttributeError


def _fp16_per_step_reference(a: torch.Tensor, b: torch.Tensor, step: int = 16) -> torch.Tensor:
    """C accumulated in fp16, rounded once per k-step of ``step`` products (summed exactly in fp32): what an
    mma.sync m16n8k16 with an fp16 accumulator computes."""
    c = torch.zeros(a.shape[0], b.shape[1], dtype=torch.float16)
    for k0 in range(0, a.shape[1], step):
        c = (c.float() + a[:, k0:k0 + step].float() @ b[k0:k0 + step].float()).half()
    return c


@pytest.mark.parametrize("M,N,K,bM,bN,bK,tb", [
    (64, 64, 512, 32, 32, 32, False),  # register-blocked kernel
    (64, 64, 512, 32, 32, 32, True),   # transposed B (packed)
    (2, 64, 512, 2, 32, 64, True),     # decode shape (the dot-product kernel is skipped for half accumulators)
    (32, 40, 96, 32, 40, 32, False),   # N no multiple of the SIMD width: element-wise path
    (32, 32, 40, 32, 32, 40, False),   # K no multiple of the step: a short last step
])
def test_fp16_accumulator_rounds_once_per_k_step(M, N, K, bM, bN, bK, tb):
    a = torch.randn(M, K).half()
    b = torch.randn(K, N).half()
    c = ops.gemm_fp16_accumulate(M, N, K, bM, bN, bK, tb)(a, b.t().contiguous() if tb else b)
    ref = _fp16_per_step_reference(a, b)
    # the fp32 partial sums may differ in order from torch's, so a value can land an ulp or two away; rounding after
    # every FMA instead puts two thirds of the elements further than 2 ulps (measured on these shapes)
    ulp = torch.finfo(torch.float16).eps * torch.pow(2, torch.floor(torch.log2(ref.float().abs().clamp_min(2**-14))))
    off = (c.float() - ref.float()).abs() / ulp
    assert off.max() <= 2 and (off > 0).float().mean() < 0.01
    exact = a.float() @ b.float()
    outside = ((c.float() - exact).abs() > 1e-2 + 1e-2 * exact.abs()).float().mean().item()
    assert outside < 0.01  # TileLang's tolerance for fp16 GEMMs (rounding every FMA: ~8% outside)



@pytest.mark.parametrize("kind", ["sum", "max", "min", "abssum", "absmax"])
def test_generic_reduce_spelling(kind):
    x = torch.randn(8, 32)
    ref = {"sum": x.sum(1), "max": x.amax(1), "min": x.amin(1), "abssum": x.abs().sum(1),
           "absmax": x.abs().amax(1)}[kind]
    torch.testing.assert_close(ops.generic_reduce(8, 32, kind)(x), ref, rtol=1e-5, atol=1e-5)
