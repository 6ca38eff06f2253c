"""``T.copy(..., eviction_policy=)``: TileLang's L2 priority of a copy's global loads.

On CUDA the loads of that copy carry an L2 cache policy (``createpolicy`` + ``.L2::cache_hint`` on cp.async or on
a 16-byte ``ld.global``), checked in the generated source and in the PTX nvcc/ptxas accept; the values are checked
in the CUDA emulator (the hint changes no value). The CPU accepts the argument with no effect. A bad value is an
error naming the argument."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

import tilelang_core as tilelang
import tilelang_core.language as T
from tilelang_core.backend.cuda import find_nvcc
from tilelang_core.errors import TileLangCompileError

sys.path.insert(0, str(Path(__file__).resolve().parent))

from cuda_emulator import emulate  # noqa: E402
from test_compat_language_ops_cuda import cuda_source  # noqa: E402

needs_nvcc = pytest.mark.skipif(find_nvcc() is None, reason="nvcc not found: the CUDA compile tests need it")


@tilelang.jit(out_idx=[-1])
def staged_scale(M, N, policy, block_M=64):
    """B = 2 * A through a shared tile loaded with ``eviction_policy=policy`` (ragged rows allowed)."""

    @T.prim_func
    def main(A: T.Tensor((M, N), "float16"), B: T.Tensor((M, N), "float16")):
        with T.Kernel(T.ceildiv(M, block_M), threads=128) as bx:
            s = T.alloc_shared((block_M, N), "float16")
            T.copy(A[bx * block_M, 0], s, eviction_policy=policy)
            for i, j in T.Parallel(block_M, N):
                s[i, j] = s[i, j] * T.float16(2)
            T.copy(s, B[bx * block_M, 0])

    return main


@tilelang.jit(out_idx=[-1])
def pipelined_gemm(M, N, K, policy):
    """C = A @ B with A's pipelined loads hinted ``policy`` (B's not)."""

    @T.prim_func
    def main(A: T.Tensor((M, K), "float16"), B: T.Tensor((K, N), "float16"), C: T.Tensor((M, N), "float32")):
        with T.Kernel(T.ceildiv(N, 64), T.ceildiv(M, 64), threads=128) as (bx, by):
            As = T.alloc_shared((64, 32), "float16")
            Bs = T.alloc_shared((32, 64), "float16")
            Cl = T.alloc_fragment((64, 64), "float32")
            T.clear(Cl)
            for k in T.Pipelined(T.ceildiv(K, 32), num_stages=2):
                T.copy(A[by * 64, k * 32], As, eviction_policy=policy)
                T.copy(B[k * 32, bx * 64], Bs)
                T.gemm(As, Bs, Cl)
            T.copy(Cl, C[by * 64, bx * 64])

    return main


@tilelang.jit(out_idx=[-1])
def w4a16(M, N, K, policy, block_M=16, block_N=64, block_K=128):
    """The W4A16 dequantising GEMM (the example's spelling, per-channel scales) with the packed weights' copy
    hinted ``policy`` (None: the program says nothing)."""

    @T.prim_func
    def main(A: T.Tensor((M, K), "float16"), B: T.Tensor((N, K // 2), "uint8"), Scale: T.Tensor((N, 1), "float16"),
             C: T.Tensor((M, N), "float16")):
        with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=128) as (bx, by):
            A_shared = T.alloc_shared((block_M, block_K), "float16")
            B_packed = T.alloc_shared((block_N, block_K // 2), "uint8")
            B_shared = T.alloc_shared((block_N, block_K), "float16")
            C_local = T.alloc_fragment((block_M, block_N), "float32")
            T.clear(C_local)
            for k in T.Pipelined(T.ceildiv(K, block_K), num_stages=2):
                T.copy(A[by * block_M, k * block_K], A_shared)
                T.copy(B[bx * block_N, k * (block_K // 2)], B_packed, eviction_policy=policy)
                for i, j in T.Parallel(block_N, block_K):
                    q = (B_packed[i, j // 2] >> (4 * (j % 2))) & 0xF
                    B_shared[i, j] = T.cast(T.cast(q, "int32") - 8, "float16") * Scale[bx * block_N + i, 0]
                T.gemm(A_shared, B_shared, C_local, transpose_B=True)
            T.copy(C_local, C[by * block_M, bx * block_N])

    return main


def test_cpu_copy_with_an_eviction_policy_computes_the_same_result():
    a = torch.randn(130, 64).half()
    torch.testing.assert_close(staged_scale(130, 64, "evict_first")(a), a * 2)


@pytest.mark.parametrize("bad", ["evict_sometimes", 1])
def test_bad_eviction_policy_is_an_error_naming_the_argument(bad):
    with pytest.raises((TileLangCompileError, ValueError), match=r"T\.copy eviction_policy: expected one of "
                                                                 r"'evict_normal', 'evict_first', 'evict_last'"):
        staged_scale.get_program(64, 64, bad)


@needs_nvcc
def test_cuda_pipelined_copy_carries_the_l2_hint_on_cp_async_before_hopper(tmp_path):
    (tmp_path / "a").mkdir(), (tmp_path / "b").mkdir()
    src = cuda_source(tmp_path / "a", pipelined_gemm, 128, 128, 128, "evict_first", arch="sm_80")
    hinted = [ln for ln in src.splitlines() if "cp_async_16" in ln]
    assert any("tl::cp_async_16_hint<1>" in ln and "A_ptr" in ln for ln in hinted)
    assert not any("_hint" in ln and "B_ptr" in ln for ln in hinted)  # only the copy that asked
    plain = cuda_source(tmp_path / "b", pipelined_gemm, 128, 128, 128, None, cubin=False, arch="sm_80")
    assert "_hint<" not in plain


@needs_nvcc
def test_cuda_pipelined_copies_on_sm90_leave_the_hint_off_and_say_why(tmp_path, monkeypatch):
    """ptxas 13.0 miscompiles some hinted cp.async loops on sm_90 (the SASS test below) and our TMA loads carry no
    hint: on sm_90 a wgmma loop's hinted loads go by TMA like unhinted ones, a 16-row (mma.sync) loop's by plain
    cp.async, and each kernel's note names the copy and the reason."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench" / "gpu"))
    from decode_gemm import matmul_relu_hinted

    monkeypatch.setenv("TILELANG_CORE_CACHE_DIR", str(tmp_path))
    hopper = tilelang.jit(out_idx=[-1], target="cuda -arch=sm_90a")
    wide = hopper(pipelined_gemm.factory)(128, 128, 128, "evict_first")
    assert "cp_async_16" not in wide.get_kernel_source() and "tma_load" in wide.get_kernel_source()
    assert any("T.copy eviction_policy not applied to the T.Pipelined loads on sm_90" in n for n in wide.notes)
    narrow = hopper(matmul_relu_hinted.factory)(16, 1024, 2048, 16, 64, 128, 5, 128, "float16", "float32", None,
                                                "evict_first")
    src = narrow.get_kernel_source()
    assert "cp_async_16" in src and "_hint<" not in src
    assert any("T.copy B -> B_s: eviction_policy=evict_first not applied to its cp.async loads on sm_90" in n
               for n in narrow.notes), narrow.notes


@needs_nvcc
def test_cuda_synchronous_copy_loads_with_an_l2_cache_policy(tmp_path):
    src = cuda_source(tmp_path, staged_scale, 100, 64, "evict_last")
    assert "tl::copy_16_hint<2>" in src
    kernel = tilelang.jit(out_idx=[-1], target="cuda")(staged_scale.factory)(100, 64, "evict_first")
    ptx = kernel.get_kernel_source("ptx")
    assert "createpolicy.fractional.L2::evict_first.b64" in ptx
    assert "ld.global.L1::no_allocate.L2::cache_hint.v4.u32" in ptx


@needs_nvcc
def test_fused_w4a16_weights_take_the_copys_eviction_policy(tmp_path):
    """The dequant fusion's weight loads are evict-first (.cs, its default) unless the weights' copy says
    otherwise: evict_normal gives plain loads, evict_last an L2 cache policy."""
    normal = cuda_source(tmp_path, w4a16, 16, 256, 1024, "evict_normal", cubin=False)
    assert normal.split("tl::gemm_dq4g<")[1].split(">")[0].endswith(", 0")  # EVICT = 0
    last = tilelang.jit(out_idx=[-1], target="cuda")(w4a16.factory)(16, 256, 1024, "evict_last")
    assert last.get_kernel_source().split("tl::gemm_dq4g<")[1].split(">")[0].endswith(", 2")
    ptx = last.get_kernel_source("ptx")
    assert "createpolicy.fractional.L2::evict_last.b64" in ptx and "ld.global.nc.L2::cache_hint.v4.u32" in ptx
    assert "ld.global.nc.cs.v4.u32" not in ptx


def test_cuda_hinted_copies_compute_the_same_values_in_the_emulator():
    a = torch.randn(100, 64).half()
    (b,) = emulate(staged_scale, (100, 64, "evict_first"), {}, [a])
    torch.testing.assert_close(b, a * 2)


def _ldgsts_reads_unwritten_uniform_registers(sass: str) -> set[str]:
    """The uniform registers an LDGSTS addresses through (``[R+URn]``, ``desc[URn]``) that no instruction of the
    kernel writes (a ``U*`` / ``S2UR`` / ``R2UR`` instruction's first operand, pairs for ``.64``)."""
    import re

    written: set[int] = set()
    for op, dst in re.findall(r"\s((?:U|S2UR|R2UR)[A-Z0-9_.]*)\s+UR(\d+)", sass):
        first = int(dst)
        written.update({first, first + 1} if ".64" in op else {first})
    read: set[int] = set()
    for line in sass.splitlines():
        if "LDGSTS" in line:
            read.update(int(n) for n in re.findall(r"\+UR(\d+)\]|desc\[UR(\d+)\]", line) for n in n if n)
    return {f"UR{n}" for n in sorted(read - written)}


@needs_nvcc
@pytest.mark.parametrize("a_policy, b_policy", [("evict_last", None), (None, "evict_first")])
def test_a_hinted_operand_copy_in_a_pipelined_gemm_reads_only_written_registers(a_policy, b_policy, tmp_path,
                                                                                 monkeypatch):
    import subprocess

    from test_cuda_wgmma import _cuobjdump

    dis = _cuobjdump()
    if dis is None:
        pytest.skip("no cuobjdump: the SASS check needs the disassembler")
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench" / "gpu"))
    from decode_gemm import matmul_relu_hinted

    monkeypatch.setenv("TILELANG_CORE_CACHE_DIR", str(tmp_path))
    kernel = tilelang.jit(out_idx=[-1], target="cuda -arch=sm_90a")(matmul_relu_hinted.factory)(
        16, 1024, 2048, 16, 64, 128, 5, 128, "float16", "float32", a_policy, b_policy)
    assert "_hint<" not in kernel.get_kernel_source()  # left off on sm_90, with a note
    cubin = Path(kernel.artifact.path) / kernel.artifact.library_path
    sass = subprocess.run([dis, "-sass", str(cubin)], capture_output=True, text=True, check=True).stdout
    assert "LDGSTS" in sass
    assert not _ldgsts_reads_unwritten_uniform_registers(sass)
