"""``T.print`` on CUDA builds with nvcc whatever the message holds (newline, quotes, ``%``, backslash): the first
H200 run of the GPU suite found the format's newline written raw into the CUDA C, which did not compile."""

from __future__ import annotations

import pytest

import tilelang_core as tilelang
import tilelang_core.language as T
from tilelang_core.backend.cuda import find_nvcc


@tilelang.jit(out_idx=[-1], target="cuda")
def printing(N, msg):
    @T.prim_func
    def main(X: T.Tensor((N,), "float32"), Y: T.Tensor((N,), "float32")):
        with T.Kernel(1) as bx:
            x = T.alloc_shared((N,), "float32")
            T.copy(X[bx * N], x)
            T.print(x, msg=msg)
            T.print(x[1] + 1.0, msg=msg)
            T.copy(x, Y[bx * N])

    return main


@pytest.mark.skipif(find_nvcc() is None, reason="nvcc not found: the CUDA compile tests need the toolkit")
@pytest.mark.parametrize("msg", ["tile", 'a "quoted" 100% \\ msg', "two\nlines\t"])
def test_print_compiles_for_cuda_with_any_message(msg):
    kernel = printing(4, msg)
    src = kernel.get_kernel_source()
    lines = [ln for ln in src.splitlines() if "printf(" in ln]
    assert len(lines) == 2 and all(ln.rstrip().endswith(");") for ln in lines), lines  # one line per call
    assert "\\n\"" in lines[0]
