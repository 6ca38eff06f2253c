"""TileLang's launch queries inside ``T.Kernel`` (issue 18): ``T.get_block_binding(s)``, ``T.get_block_extent(s)``,
``T.get_thread_extent(s)`` read the enclosing launch (grid, block indices, ``threads``) while the program is built,
on every target; outside a ``T.Kernel`` or with a bad dimension they are located errors at the user's line. Before,
they were unknown names (an AttributeError from TVMScript's namespace)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

import tilelang_core as tilelang
import tilelang_core.language as T
from tilelang_core import TileLangCompileError

THIS_FILE = Path(__file__).resolve()


def marker_line(tag: str) -> int:
    hits = [n for n, text in enumerate(THIS_FILE.read_text().splitlines(), start=1)
            if text.rstrip().endswith(f"# DIAG:{tag}")]
    assert len(hits) == 1, hits
    return hits[0]


@tilelang.jit(out_idx=[-1], target="cpu")
def launch_facts(M, N, block_M=16):
    @T.prim_func
    def main(A: T.Tensor((M, N), "float32"), B: T.Tensor((M, N), "float32")):
        with T.Kernel(T.ceildiv(N, 32), T.ceildiv(M, block_M), threads=(64, 2)) as (bx, by):
            gx, gy, gz = T.get_block_extents()
            tx, ty, tz = T.get_thread_extents()
            for i, j in T.Parallel(block_M, 32):
                row = T.get_block_binding(1) * block_M + i
                B[row, bx * 32 + j] = (A[by * block_M + i, T.get_block_binding(0) * 32 + j]
                                       + gx * 1000 + gy * 100 + gz * 10 + tx + ty * 0.5 + tz * 0.25
                                       + T.get_block_binding(2))

    return main


def test_block_and_thread_queries_read_the_enclosing_launch():
    kernel = launch_facts(48, 64)
    a = torch.randn(48, 64)
    # grid (2, 3, 1), threads (64, 2, 1), block index z is 0
    torch.testing.assert_close(kernel(a), a + 2000 + 300 + 10 + 64 + 1.0 + 0.25, rtol=0, atol=1e-4)


@tilelang.jit(out_idx=[-1], target="cpu")
def grid_size_of_symbolic(block=32):
    n = T.symbolic("n")

    @T.prim_func
    def main(A: T.Tensor((n,), "float32"), B: T.Tensor((n,), "float32")):
        with T.Kernel(T.ceildiv(n, block)) as bx:
            for i in T.Parallel(block):
                B[bx * block + i] = A[bx * block + i] + T.cast(T.get_block_extent(0), "float32")

    return main


def test_block_extent_of_a_symbolic_grid_is_its_run_time_value():
    kernel = grid_size_of_symbolic()
    for n in (40, 100):
        a = torch.randn(n)
        torch.testing.assert_close(kernel(a), a + float(-(-n // 32)), rtol=0, atol=0)


@tilelang.jit(out_idx=[-1], target="cpu")
def query_outside_kernel(N):
    @T.prim_func
    def main(A: T.Tensor((N,), "float32"), B: T.Tensor((N,), "float32")):
        t = T.get_thread_extent(0)  # DIAG:outside
        with T.Kernel(1) as _bx:
            for i in T.Parallel(N):
                B[i] = A[i] * t

    return main


@tilelang.jit(out_idx=[-1], target="cpu")
def query_bad_dim(N):
    @T.prim_func
    def main(A: T.Tensor((N,), "float32"), B: T.Tensor((N,), "float32")):
        with T.Kernel(1) as _bx:
            for i in T.Parallel(N):
                B[i] = A[i] * T.get_block_extent(3)  # DIAG:bad-dim

    return main


@pytest.mark.parametrize("make, tag, words", [
    (query_outside_kernel, "outside", "only inside a `with T.Kernel(...)` block"),
    (query_bad_dim, "bad-dim", "T.get_block_extent dim: expected 0, 1 or 2, got 3"),
])
def test_a_launch_query_outside_a_kernel_or_with_a_bad_dimension_is_located(make, tag, words):
    with pytest.raises(TileLangCompileError) as e:
        make(64)
    assert words in str(e.value)
    loc = e.value.location
    assert loc is not None and Path(loc.file).resolve() == THIS_FILE and loc.line == marker_line(tag)


def test_cuda_program_with_launch_queries_generates_code():
    # compiled for CUDA here (no GPU): the queries are the same build-time values there
    from tilelang_core.backend.cuda import codegen as cuda_codegen

    func = launch_facts.get_program(48, 64)
    src = cuda_codegen.generate(cuda_codegen.lower(func)).source
    assert "blockIdx.y" in src and "64" in src, src[-1500:]  # the queries became the launch's values
