"""Split-K as a general CUDA transform (tl.SplitKCUDA), without a GPU: a ``T.gemm`` kernel whose grid cannot fill
the SMs gets a ``blockIdx.z`` that splits its K loop, and the last block of each tile reduces the partial sums and
runs the program's epilogue (bias, ReLU, cast) once, on the full sum.

Checked here: the lowered CUDA TIR in tests/cuda_emulator.py against torch (the emulator replays
``tl::splitk_global_reduce`` of include/tl/splitk.cuh block by block, below), the CUDA C nvcc compiles for sm_90,
the launch metadata (grid, ``serial_streams``), the ``pass_configs`` choices (auto / off / forced) and the notes
that say why a kernel was not split. On the GPU: gpu/test_split_k.py."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

import tilelang_core as tilelang
import tilelang_core.language as T
from tilelang_core.backend.cuda import find_nvcc
from tilelang_core.jit import _normalize_out_idx, _param_specs
from tilelang_core.jit.cuda import build_artifact

sys.path.insert(0, str(Path(__file__).resolve().parent))

import cuda_emulator  # noqa: E402

needs_nvcc = pytest.mark.skipif(find_nvcc() is None, reason="nvcc not found: the CUDA compile tests need the CUDA "
                                                             "toolkit, not a GPU")


@tilelang.jit(out_idx=[-1])
def gemm_bias_relu(M, N, K, block_M, block_N, block_K, num_stages=2, threads=128, dtype="float16",
                   out_dtype="float16"):
    """C = cast(relu(A @ B^T + bias)): an epilogue that is wrong if it runs on a partial sum or more than once."""

    @T.prim_func
    def main(A: T.Tensor((M, K), dtype), B: T.Tensor((N, K), dtype), bias: T.Tensor((N,), "float32"),
             C: T.Tensor((M, N), out_dtype)):
        with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=threads) as (bx, by):
            A_s = T.alloc_shared((block_M, block_K), dtype)
            B_s = T.alloc_shared((block_N, block_K), dtype)
            C_l = T.alloc_fragment((block_M, block_N), "float32")
            T.clear(C_l)
            for k in T.Pipelined(T.ceildiv(K, block_K), num_stages=num_stages):
                T.copy(A[by * block_M, k * block_K], A_s)
                T.copy(B[bx * block_N, k * block_K], B_s)
                T.gemm(A_s, B_s, C_l, transpose_B=True)
            for i, j in T.Parallel(block_M, block_N):
                C_l[i, j] = T.max(C_l[i, j] + bias[bx * block_N + j], 0.0)
            T.copy(C_l, C[by * block_M, bx * block_N])

    return main


@tilelang.jit(out_idx=[-1])
def gemm_from_bias(M, N, K, block_M, block_N, block_K):
    """The accumulator starts at the bias (not zero): splitting would add it once per block, so it must not split."""

    @T.prim_func
    def main(A: T.Tensor((M, K), "float16"), B: T.Tensor((N, K), "float16"), bias: T.Tensor((M, N), "float32"),
             C: T.Tensor((M, N), "float32")):
        with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=128) as (bx, by):
            A_s = T.alloc_shared((block_M, block_K), "float16")
            B_s = T.alloc_shared((block_N, block_K), "float16")
            C_l = T.alloc_fragment((block_M, block_N), "float32")
            T.copy(bias[by * block_M, bx * block_N], C_l)
            for k in T.Pipelined(T.ceildiv(K, block_K), num_stages=2):
                T.copy(A[by * block_M, k * block_K], A_s)
                T.copy(B[bx * block_N, k * block_K], B_s)
                T.gemm(A_s, B_s, C_l, transpose_B=True)
            T.copy(C_l, C[by * block_M, bx * block_N])

    return main


@tilelang.jit(out_idx=[-1])
def gemm_with_row_max(M, N, K, block_M, block_N, block_K):
    """A second running value (the max of A's tiles) written in the K loop and read after it: must not split."""

    @T.prim_func
    def main(A: T.Tensor((M, K), "float16"), B: T.Tensor((N, K), "float16"), C: T.Tensor((M, N), "float32")):
        with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=128) as (bx, by):
            A_s = T.alloc_shared((block_M, block_K), "float16")
            B_s = T.alloc_shared((block_N, block_K), "float16")
            C_l = T.alloc_fragment((block_M, block_N), "float32")
            m = T.alloc_fragment((block_M, block_N), "float32")
            T.clear(C_l)
            T.fill(m, 0.0)
            for k in T.Pipelined(T.ceildiv(K, block_K), num_stages=2):
                T.copy(A[by * block_M, k * block_K], A_s)
                T.copy(B[bx * block_N, k * block_K], B_s)
                T.gemm(A_s, B_s, C_l, transpose_B=True)
                for i, j in T.Parallel(block_M, block_N):
                    m[i, j] = T.max(m[i, j], C_l[i, j])
            for i, j in T.Parallel(block_M, block_N):
                C_l[i, j] = C_l[i, j] + m[i, j]
            T.copy(C_l, C[by * block_M, bx * block_N])

    return main


@tilelang.jit(out_idx=[-2, -1])
def two_products(M, N, K, block_M, block_N, block_K):
    """Two accumulators in one K loop (attention's shape): not split-K's form, so no note unless a split is forced."""

    @T.prim_func
    def main(A: T.Tensor((M, K), "float16"), B: T.Tensor((N, K), "float16"), C: T.Tensor((M, N), "float32"),
             D: T.Tensor((M, N), "float32")):
        with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=128) as (bx, by):
            A_s = T.alloc_shared((block_M, block_K), "float16")
            B_s = T.alloc_shared((block_N, block_K), "float16")
            C_l = T.alloc_fragment((block_M, block_N), "float32")
            D_l = T.alloc_fragment((block_M, block_N), "float32")
            T.clear(C_l)
            T.clear(D_l)
            for k in T.Pipelined(T.ceildiv(K, block_K), num_stages=2):
                T.copy(A[by * block_M, k * block_K], A_s)
                T.copy(B[bx * block_N, k * block_K], B_s)
                T.gemm(A_s, B_s, C_l, transpose_B=True)
                T.gemm(A_s, B_s, D_l, transpose_B=True)
            T.copy(C_l, C[by * block_M, bx * block_N])
            T.copy(D_l, D[by * block_M, bx * block_N])

    return main


def _build(factory, args, kwargs, out: Path, pass_configs=None, compile_cubin: bool = True):
    func = factory.get_program(*args, **kwargs)
    specs = _param_specs(func)
    return build_artifact(func, out, {"kind": "cuda", "arch": "sm_90a"}, specs,
                          _normalize_out_idx(factory.out_idx, len(specs)), compile_cubin=compile_cubin,
                          pass_configs=pass_configs)


def _meta(art) -> dict:
    return json.loads((art.path / "meta.json").read_text())["extra"]


# -- the emulator: tl::splitk_global_reduce replayed from include/tl/splitk.cuh ---------------------------------------
class SplitKEmulator(cuda_emulator.Emulator):
    """The emulator plus the split-K reduction: each block stores its partials to the tile's workspace slots and
    bumps the tile's counter (thread 0, between the template's two barriers); the block that arrives last sums the
    slots in rank order in float32, resets the counter and reports 1. Blocks run one after another, in the order
    given by ``z_order`` (a permutation of blockIdx.z), so the last arrival need not be the last rank."""

    def __init__(self, func, z_order=None) -> None:
        super().__init__(func)
        self.z_order = z_order
        self.ws: dict[tuple[int, ...], dict[int, np.ndarray]] = {}
        self.sem: dict[tuple[int, ...], int] = {}
        self.arrivals: list[tuple[tuple[int, ...], int, bool]] = []  # (tile, rank, last)
        self.block_vars: dict[str, object] = {}  # "blockIdx.x" -> its variable

    def _launch(self, s, th):
        if str(s.node.thread_tag).startswith("blockIdx."):
            self.block_vars[str(s.node.thread_tag)] = s.node.var
        if str(s.node.thread_tag) == "blockIdx.z" and self.z_order is not None:
            n = self.scalar(s.value, th)
            assert sorted(self.z_order) == list(range(n))
            for b in self.z_order:
                inner = cuda_emulator._Thread(cuda_emulator._Block(), -1, th.env)
                inner.env[s.node.var] = np.array([b], dtype=np.int64)
                yield from self._gen(s.body, inner)
            return
        yield from super()._launch(s, th)

    def _block_index(self, th) -> dict[str, int]:
        return {tag: int(th.env[v][0]) for tag, v in self.block_vars.items()}

    def _extern(self, fname, args, th):
        m = re.fullmatch(r"tl::splitk_global_reduce<(\d+), (\d+), (\d+), (\d+)>", fname)
        if m is None:
            yield from super()._extern(fname, args, th)
            return
        R, S, threads = int(m[1]), int(m[2]), int(m[3])
        assert threads == self.threads and len(args) == 2
        idx = self._block_index(th)
        tile, rank = (idx.get("blockIdx.x", 0), idx.get("blockIdx.y", 0)), idx["blockIdx.z"]
        acc, flag = cuda_emulator._PtrBuf(self.pointer(args[0], th)), cuda_emulator._PtrBuf(self.pointer(args[1], th))
        mine = np.array([self._raw_load(th, acc, r).reshape(()) for r in range(R)], dtype=np.float32)
        self.ws.setdefault(tile, {}).setdefault(rank, np.zeros((threads, R), np.float32))[th.tid] = mine
        yield ("sync",)
        if th.tid == 0:
            self.sem[tile] = self.sem.get(tile, 0) + 1
            th.block.splitk_last = self.sem[tile] == S
            self.arrivals.append((tile, rank, th.block.splitk_last))
        yield ("sync",)
        last = th.block.splitk_last
        if last:
            for r in range(R):
                v = np.float32(0)
                for s in range(S):
                    v = np.float32(v + self.ws[tile][s][th.tid, r])
                self._raw_store(th, acc, r, v)
            if th.tid == 0:
                self.sem[tile] = 0
        self._raw_store(th, flag, 0, np.int64(1 if last else 0))


def _emulate(factory, args, kwargs, inputs, z_order=None):
    func = factory.get_program(*args, **kwargs)
    specs = _param_specs(func)
    outs = _normalize_out_idx(factory.out_idx, len(specs))
    it = iter(inputs)
    tensors, results = [], []
    for i, sp in enumerate(specs):
        if i in outs:
            t = torch.full(sp.shape, float("nan"), dtype=getattr(torch, sp.dtype))
            results.append(t)
        else:
            t = next(it)
        tensors.append(t)
    emu = SplitKEmulator(func, z_order)
    emu.run(tensors)
    return results, emu


def _inputs(M, N, K, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    A = torch.randn(M, K, generator=g).to(dtype)
    B = torch.randn(N, K, generator=g).to(dtype)
    bias = torch.randn(N, generator=g)
    return A, B, bias


def _reference(A, B, bias):
    return torch.relu(A.double() @ B.double().T + bias.double())


# fp32 operands: T.gemm takes the FMA path, which the emulator runs (mma.sync is a template it does not know)
EMU_ARGS = (8, 8, 128, 8, 8, 4)  # one 8 x 8 tile, 32 K steps of 4: the automatic choice splits it 4 ways
EMU_KW = dict(num_stages=2, threads=32, dtype="float32", out_dtype="float32")


def test_split_gemm_with_bias_relu_epilogue_matches_torch_whichever_block_arrives_last():
    A, B, bias = _inputs(8, 8, 128)
    (C,), emu = _emulate(gemm_bias_relu, EMU_ARGS, EMU_KW, [A, B, bias], z_order=[2, 0, 3, 1])
    # four blocks, one epilogue: run by the last to arrive (rank 1), on the sum of all four shares
    assert [(rank, last) for _, rank, last in emu.arrivals] == [(2, False), (0, False), (3, False), (1, True)]
    torch.testing.assert_close(C.double(), _reference(A, B, bias), rtol=1e-4, atol=1e-4)


# -- CUDA C for sm_90 (nvcc), launch metadata, choices -----------------------------------------------------------
DECODE = (16, 1024, 4096, 16, 128, 64)  # 8 tiles of 16 x 128, 64 K steps of 64


@needs_nvcc
def test_decode_gemm_is_split_and_its_epilogue_runs_only_in_the_last_block(tmp_path):
    art = _build(gemm_bias_relu, DECODE, dict(num_stages=3), tmp_path)
    meta = _meta(art)
    assert meta["cuda"]["grid"] == [8, 1, 8] and meta["cuda"]["serial_streams"] is True
    src = (tmp_path / "kernel.cu").read_text()
    call = re.search(r"tl::splitk_global_reduce<(\d+), 8, 128, 8>\(\(&\(C_l_ptr\[0\]\)\), \(&\((\w+)\[0\]\)\)\);",
                     src)
    assert call, "the reduction of the accumulator's registers"
    after = src[call.end():]
    assert after.lstrip().startswith(f"if ({call[2]}[0] != 0) {{")  # the epilogue (bias, ReLU, store) guarded
    guarded = after[:after.index("\n  }\n")]
    assert "bias_ptr" in guarded and "max(" in guarded and "C_ptr" in guarded
    assert "for (int k = (((int)blockIdx.z) * 8); k < ((((int)blockIdx.z) * 8) + 8); ++k)" in src
    assert not any("split-K" in n for n in meta["notes"])


@pytest.mark.parametrize("split", [1, 4])
def test_pass_config_turns_split_k_off_or_forces_a_factor(tmp_path, split):
    art = _build(gemm_bias_relu, DECODE, dict(num_stages=3), tmp_path, {"tl.cuda.split_k": split},
                 compile_cubin=False)
    assert _meta(art)["cuda"]["grid"] == [8, 1, split]
    assert ("splitk_global_reduce" in (tmp_path / "kernel.cu").read_text()) == (split > 1)


def test_a_grid_that_fills_the_gpu_is_not_split(tmp_path):
    art = _build(gemm_bias_relu, (256, 2048, 4096, 64, 64, 64), dict(num_stages=3), tmp_path, compile_cubin=False)
    meta = _meta(art)
    assert meta["cuda"]["grid"] == [32, 4, 1]
    assert not any("split-K" in n for n in meta["notes"])


@pytest.mark.parametrize("factory,why", [
    (gemm_from_bias, "set to something else than zero before the K loop"),
    (gemm_with_row_max, "other than as a T.gemm destination"),
])
def test_kernels_split_k_would_change_are_left_whole_with_a_note(tmp_path, factory, why):
    art = _build(factory, (16, 1024, 4096, 16, 128, 64), {}, tmp_path, {"tl.cuda.split_k": 4}, compile_cubin=False)
    meta = _meta(art)
    assert meta["cuda"]["grid"] == [8, 1, 1]
    notes = [n for n in meta["notes"] if "split-K not applied" in n]
    assert len(notes) == 1 and why in notes[0] and notes[0].startswith("line "), meta["notes"]


def test_a_forced_factor_that_does_not_divide_the_k_loop_says_so(tmp_path):
    art = _build(gemm_bias_relu, (16, 1024, 4096 - 64 * 2, 16, 128, 64), dict(num_stages=3), tmp_path,
                 {"tl.cuda.split_k": 4}, compile_cubin=False)  # 62 K steps
    meta = _meta(art)
    assert meta["cuda"]["grid"] == [8, 1, 1]
    assert any("'tl.cuda.split_k'=4 needs a K loop whose 62 iterations divide by 4" in n for n in meta["notes"])


@pytest.mark.parametrize("split", [0, 2])
def test_a_kernel_not_of_split_k_form_is_noted_only_when_a_split_is_forced(tmp_path, split):
    art = _build(two_products, (16, 1024, 4096, 16, 128, 64), {}, tmp_path, {"tl.cuda.split_k": split},
                 compile_cubin=False)
    meta = _meta(art)
    assert meta["cuda"]["grid"] == [8, 1, 1]
    notes = [n for n in meta["notes"] if "split-K not applied" in n]
    assert notes == ([] if split == 0 else [notes[0]])
    assert split == 0 or "accumulate into 2 fragments" in notes[0]


def test_a_wgmma_gemm_at_a_small_grid_is_split_automatically_and_stays_warp_specialised(tmp_path):
    from tilelang_core.quickstart import matmul_relu

    # 128 x 2048 outputs in 128 x 128 tiles: 16 blocks for 132 SMs; 64 K steps -> split 8 ways, 8 steps each
    art = _build(matmul_relu, (128, 2048, 4096, 128, 128, 64, 4, 256, "float16", "float32"), {}, tmp_path,
                 compile_cubin=False)
    meta = _meta(art)
    assert meta["cuda"]["grid"] == [16, 1, 8] and meta["cuda"]["block"] == [384, 1, 1], meta["cuda"]
    src = (tmp_path / "kernel.cu").read_text()
    assert "tl::wgmma_gemm_ss" in src and "tl::splitk_global_reduce" in src and "tl::setmaxnreg_inc" in src
    assert not any("split-K" in n for n in meta["notes"])
