"""Split-K as a general CUDA transform (tl.SplitKCUDA), without a GPU: a ``T.gemm`` kernel whose grid cannot fill
the SMs gets a ``blockIdx.z`` that splits its K loop, and the last block of each tile reduces the partial sums and
runs the program's epilogue (bias, ReLU, cast) once, on the full sum.

Checked here: the lowered CUDA TIR in tests/cuda_emulator.py against torch (the emulator replays
``tl::splitk_global_reduce`` of include/tl/splitk.cuh block by block, below, with the module's per-tile arrival
words kept between launches: a launch killed half-way, a stale word, launches back to back; the arrival protocol
under every interleaving of two and three blocks), the CUDA C nvcc compiles for sm_90a and sm_80, the launch
metadata (grid, ``serial_streams``), the ``pass_configs`` choices (auto / off / forced) and the notes
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


def _build(factory, args, kwargs, out: Path, pass_configs=None, compile_cubin: bool = True, arch: str = "sm_90a"):
    func = factory.get_program(*args, **kwargs)
    specs = _param_specs(func)
    return build_artifact(func, out, {"kind": "cuda", "arch": arch}, specs,
                          _normalize_out_idx(factory.out_idx, len(specs)), compile_cubin=compile_cubin,
                          pass_configs=pass_configs)


def _meta(art) -> dict:
    return json.loads((art.path / "meta.json").read_text())["extra"]


# -- the emulator: tl::splitk_global_reduce replayed from include/tl/splitk.cuh ---------------------------------------
COUNT_BITS = 16  # SPLITK_COUNT_BITS: the arrival word is epoch << 16 | count
COUNT_MASK = (1 << COUNT_BITS) - 1
WORD = (1 << 64) - 1


def _current(word: int, epoch: int, S: int) -> bool:
    """``tl::splitk_current<S>``: the word counts this epoch's arrivals and is not complete."""
    return word >> COUNT_BITS == epoch and word & COUNT_MASK < S


def epoch_arrival(gridid: int, S: int):
    """``tl::splitk_arrive<S>`` step by step: yields each atomic it issues on the tile's word — ``("add", 1)`` or
    ``("cas", expect, new)`` — is sent the value the word held before it, and returns the count of this launch's
    arrivals, this one included (``S``: the last)."""
    epoch = gridid & (WORD >> COUNT_BITS)
    old = yield ("add", 1)
    if _current(old, epoch, S):
        return (old & COUNT_MASK) + 1
    expect = (old + 1) & WORD
    while True:
        new = expect + 1 if _current(expect, epoch, S) else (epoch << COUNT_BITS) | 1
        seen = yield ("cas", expect, new)
        if seen == expect:
            return new & COUNT_MASK
        expect = seen


def reset_by_last_arrival(gridid: int, S: int):
    """The counter before the epoch (kept to show what the epoch fixes): add 1; the block that finds S - 1 is
    last and sets the word back to 0 for the next launch."""
    old = yield ("add", 1)
    if old + 1 == S:
        yield ("exch", 0)  # atomicExch(&sem, 0)
    return old + 1


def atomic(word: int, step: tuple) -> int:
    """The word after one atomic step (the step is sent the word as it was before)."""
    if step[0] == "add":
        return (word + step[1]) & WORD
    if step[0] == "exch":
        return step[1]
    return step[2] if word == step[1] else word


class LaunchKilledError(Exception):
    """The emulated launch died half-way (a trap, a killed process): blocks not yet run never run."""


class SplitKEmulator(cuda_emulator.Emulator):
    """The emulator plus the split-K reduction and the module state it keeps between launches: each block stores
    its partials to the tile's workspace slots (zero-initialised module memory) and arrives at the tile's word
    (thread 0, between the template's two barriers; ``protocol`` replays the template's arrival, its atomics
    applied to ``self.words``); the block whose arrival count is S sums the slots in rank order in float32 and
    reports 1. Every ``run`` is one launch with the next %gridid (from ``gridid``). Blocks run one after another, in
    the order given by ``z_order`` (a permutation of blockIdx.z), so the last arrival need not be the last rank;
    ``kill_after``: the launch dies (:class:`LaunchKilledError`) right after that many arrivals."""

    def __init__(self, func, z_order=None, protocol=epoch_arrival, gridid=0x0000_FFFF_FFFF_FFFE,
                 pass_configs=None) -> None:
        super().__init__(func, pass_configs=pass_configs)
        self.z_order, self.protocol, self.gridid = z_order, protocol, gridid - 1
        self.kill_after: int | None = None
        self.ws: dict[tuple[int, ...], np.ndarray] = {}  # tile -> [rank, thread, r]
        self.words: dict[tuple[int, ...], int] = {}  # tile -> its arrival word (module memory: 0 at load)
        self.arrivals: list[tuple[tuple[int, ...], int, bool]] = []  # this launch's (tile, rank, last)
        self.block_vars: dict[str, object] = {}  # "blockIdx.x" -> its variable

    def run(self, tensors) -> None:
        self.gridid += 1  # the next launch in the context
        self.arrivals = []
        super().run(tensors)

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

    def _arrive(self, tile, S: int) -> int:
        steps = self.protocol(self.gridid, S)
        reply = None
        while True:
            try:
                step = steps.send(reply)
            except StopIteration as done:
                return done.value
            reply = self.words.get(tile, 0)
            self.words[tile] = atomic(reply, step)

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
        self.ws.setdefault(tile, np.zeros((S, threads, R), np.float32))[rank, th.tid] = mine
        yield ("sync",)
        if th.tid == 0:
            th.block.splitk_last = self._arrive(tile, S) == S
            self.arrivals.append((tile, rank, th.block.splitk_last))
            if self.kill_after is not None and len(self.arrivals) == self.kill_after:
                raise LaunchKilledError(f"launch {self.gridid} killed after {self.kill_after} arrivals")
        yield ("sync",)
        last = th.block.splitk_last
        if last:
            for r in range(R):
                v = np.float32(0)
                for s in range(S):
                    v = np.float32(v + self.ws[tile][s, th.tid, r])
                self._raw_store(th, acc, r, v)
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


# -- the arrival word across launches: a launch that died, launches back to back ------------------------------------
SMALL = (8, 8, 16, 8, 8, 4)  # one tile, 4 K steps, not pipelined: forced into 4 shares of 1 (cheap to emulate)
SPLIT4 = {"tl.cuda.split_k": 4}


@pytest.fixture(scope="module")
def small_program():
    return gemm_bias_relu.get_program(*SMALL, **{**EMU_KW, "num_stages": 1})


def _launch(emu, seed):
    """One emulated launch on fresh random inputs; (C, its float64 reference)."""
    A, B, bias = _inputs(8, 8, 16, seed=seed)
    C = torch.full((8, 8), float("nan"))
    emu.run([A, B, bias, C])
    return C, _reference(A, B, bias)


def _epoch(gridid: int) -> int:
    return gridid & (WORD >> COUNT_BITS)


@pytest.mark.parametrize("protocol", [epoch_arrival, reset_by_last_arrival], ids=["epoch", "reset_by_last"])
def test_a_launch_killed_half_way_leaves_the_next_launch_correct(small_program, protocol):
    emu = SplitKEmulator(small_program, z_order=[2, 0, 3, 1], protocol=protocol, pass_configs=SPLIT4)
    emu.kill_after = 2  # ranks 2 and 0 arrive, then the launch dies: ranks 3 and 1 never run
    with pytest.raises(LaunchKilledError):
        _launch(emu, seed=1)
    emu.kill_after = None
    C, ref = _launch(emu, seed=2)
    order = [(rank, last) for _, rank, last in emu.arrivals]
    if protocol is epoch_arrival:  # the dead launch's 2 arrivals carry its epoch: this launch counts from 0
        assert order == [(2, False), (0, False), (3, False), (1, True)]
        torch.testing.assert_close(C.double(), ref, rtol=1e-4, atol=1e-4)
        assert emu.words == {(0, 0): _epoch(emu.gridid) << COUNT_BITS | 4}
    else:  # the old counter took this launch's second arrival for the fourth: the epilogue ran on two shares
        assert order == [(2, False), (0, True), (3, False), (1, False)]
        assert not torch.allclose(C.double(), ref, rtol=1e-2, atol=1e-2)
        assert emu.words == {(0, 0): 2}  # and the count stays wrong for every later launch


def test_a_stale_count_one_short_of_complete_is_not_taken_for_this_launch(small_program):
    emu = SplitKEmulator(small_program, z_order=[3, 1, 0, 2], gridid=1000, pass_configs=SPLIT4)
    emu.words[(0, 0)] = 998 << COUNT_BITS | 3  # a launch two launches ago died with 3 of its 4 arrivals
    C, ref = _launch(emu, seed=3)
    assert [(rank, last) for _, rank, last in emu.arrivals] == [(3, False), (1, False), (0, False), (2, True)]
    torch.testing.assert_close(C.double(), ref, rtol=1e-4, atol=1e-4)


def test_back_to_back_launches_each_reduce_their_own_partials_and_nothing_resets_the_word(small_program):
    emu = SplitKEmulator(small_program, pass_configs=SPLIT4)  # %gridid starts 2 below the 48-bit epoch's wrap
    for seed, order in enumerate([[0, 1, 2, 3], [3, 2, 1, 0], [1, 3, 0, 2]]):
        emu.z_order = order
        C, ref = _launch(emu, seed=10 + seed)
        assert [rank for _, rank, last in emu.arrivals if last] == [order[-1]]
        torch.testing.assert_close(C.double(), ref, rtol=1e-4, atol=1e-4)
        # the word keeps "this epoch, 4" until the next launch's first arrival replaces it
        assert emu.words == {(0, 0): _epoch(emu.gridid) << COUNT_BITS | 4}
    assert _epoch(emu.gridid) == 0  # the third launch's epoch wrapped to 0 and was still told apart


# -- the arrival protocol under every interleaving of the S blocks' atomics -----------------------------------------
def _interleavings(protocol, S: int, gridid: int, word: int):
    """Every order in which the atomics of S blocks arriving at one tile can interleave: for each, the count each
    block returned, the position of each block's last atomic, and the final word."""
    def replay(path):
        steps = [protocol(gridid, S) for _ in range(S)]
        pending = [next(g) for g in steps]
        done: dict[int, tuple[int, int]] = {}
        w = word
        for pos, b in enumerate(path):
            before, w = w, atomic(w, pending[b])
            try:
                pending[b] = steps[b].send(before)
            except StopIteration as stop:
                done[b] = (stop.value, pos)
        return done, w

    stack = [[]]
    while stack:
        path = stack.pop()
        done, w = replay(path)
        if len(done) == S:
            yield done, w
        stack.extend(path + [b] for b in range(S) if b not in done)


@pytest.mark.parametrize("S", [2, 3])  # 4 blocks: over a million interleavings
def test_every_interleaving_counts_each_block_once_and_names_one_last_block_after_all_others(S):
    gridid = 77
    prev = 76 << COUNT_BITS
    starts = {"fresh module": 0, "previous launch complete": prev | S, "same epoch complete": 77 << COUNT_BITS | S,
              **{f"previous launch died after {k}": prev | k for k in range(S)}}
    for why, word in starts.items():
        n = 0
        for done, final in _interleavings(epoch_arrival, S, gridid, word):
            n += 1
            counts = sorted(c for c, _ in done.values())
            assert counts == list(range(1, S + 1)), (why, done)
            last = next(b for b, (c, _) in done.items() if c == S)
            assert all(pos < done[last][1] for b, (_, pos) in done.items() if b != last), (why, done)
            assert final == 77 << COUNT_BITS | S, why
        assert n >= 2, why


def _random_interleaving(protocol, S: int, gridid: int, word: int, rng):
    """One interleaving of S blocks' atomics on one word, the next block to step drawn from ``rng``: as
    :func:`_interleavings` yields them."""
    steps = [protocol(gridid, S) for _ in range(S)]
    pending = {b: next(g) for b, g in enumerate(steps)}
    done: dict[int, tuple[int, int]] = {}
    pos = 0
    while pending:
        b = rng.choice(sorted(pending))
        before, word = word, atomic(word, pending[b])
        try:
            pending[b] = steps[b].send(before)
        except StopIteration as stop:
            done[b] = (stop.value, pos)
            del pending[b]
        pos += 1
    return done, word


@pytest.mark.parametrize("S", [4, 8])
def test_random_interleavings_of_four_and_eight_blocks_count_each_block_once(S):
    import random

    rng = random.Random(S)
    for word in (0, 76 << COUNT_BITS | S, 76 << COUNT_BITS | (S - 1), 76 << COUNT_BITS | 1, 77 << COUNT_BITS | S):
        for _ in range(300):
            done, final = _random_interleaving(epoch_arrival, S, 77, word, rng)
            assert sorted(c for c, _ in done.values()) == list(range(1, S + 1)), (word, done)
            last = next(b for b, (c, _) in done.items() if c == S)
            assert all(pos < done[last][1] for b, (_, pos) in done.items() if b != last), (word, done)
            assert final == 77 << COUNT_BITS | S


def test_the_interleaving_check_catches_the_reset_counter_after_a_dead_launch():
    bad = [done for done, _ in _interleavings(reset_by_last_arrival, 3, 77, 1)  # one stale arrival left
           if sorted(c for c, _ in done.values()) != [1, 2, 3]]
    assert bad  # (every interleaving is wrong: counts 2, 3, 4)


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


@needs_nvcc
def test_the_split_decode_gemm_compiles_for_sm_80_with_the_epoch_arrival(tmp_path):
    art = _build(gemm_bias_relu, DECODE, dict(num_stages=3), tmp_path, arch="sm_80")
    meta = _meta(art)
    assert meta["cuda"]["grid"] == [8, 1, 8] and meta["cuda"]["serial_streams"] is True  # 64 blocks <= 108 SMs
    assert "sm_80" in " ".join(meta["cuda"]["nvcc_command"]) and (tmp_path / meta["cuda"]["cubin"]).stat().st_size
    assert "tl::splitk_global_reduce<" in (tmp_path / "kernel.cu").read_text()


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


# -- the one-wave rule counts the blocks an SM holds ----------------------------------------------------------------

def _decode_grid(name: str, pass_configs: dict) -> list[int]:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench" / "gpu"))
    import dequant_variants as dv

    from tilelang_core.backend.cuda import codegen

    v = next(x for x in dv.VARIANTS if x.name == name)
    func = codegen.lower(dv.program(v, 16, 8192, 8192, **dv.tiles(16, v)), None, "sm_90a", pass_configs)["main"]
    return list(func.attrs["tl.cuda_launch"]["grid"])


@pytest.mark.parametrize("name,fragments,shared", [
    ("hi_first", 4, 2),  # int4: 96 KB with B fragments in registers (two blocks per SM), 160 KB with the tile
    ("bf16", 4, 2),
    ("int8", 2, 2),  # int8: the packed tile alone is 128 KB over 4 stages, one block per SM either way
])
def test_a_decode_whose_b_tile_is_not_materialised_splits_until_the_sms_are_full(name, fragments, shared):
    assert _decode_grid(name, {}) == [64, 1, fragments]  # tl.cuda.dequant_fragments on (the default)
    assert _decode_grid(name, {"tl.cuda.dequant_fragments": False}) == [64, 1, shared]
