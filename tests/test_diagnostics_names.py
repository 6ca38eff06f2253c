"""A misspelt ``T.*`` name: "did you mean", and the caret under the name itself (not the start of the statement)."""

from __future__ import annotations

import pytest

import tilelang_core as tilelang
import tilelang_core.language as T
from tilelang_core import TileLangCompileError


def test_unknown_language_name_suggests_the_close_ones():
    with pytest.raises(AttributeError, match=r"no attribute 'alloc_fragmnt'; did you mean T\.alloc_fragment\?"):
        T.alloc_fragmnt  # noqa: B018
    with pytest.raises(AttributeError, match=r"did you mean T\.Pipelined\?"):
        T.Pipelind  # noqa: B018
    with pytest.raises(AttributeError, match=r"did you mean T\.copy\?"):
        T.Copy  # noqa: B018 - a case slip
    with pytest.raises(AttributeError, match=r"did you mean T\.float16"):
        T.flot16  # noqa: B018 - dtypes are offered too
    with pytest.raises(AttributeError) as info:
        T.xyzzy  # noqa: B018
    assert "did you mean" not in str(info.value)


@tilelang.jit(out_idx=[-1], target="cpu")
def misspelt(n=256):
    @T.prim_func
    def main(A: T.Tensor((n,), "float32"), B: T.Tensor((n,), "float32")):
        with T.Kernel(T.ceildiv(n, 128)) as bx:
            a = T.alloc_fragmnt((128,), "float32")
            T.copy(A[bx * 128], a)
            T.copy(a, B[bx * 128])

    return main


@tilelang.jit(out_idx=[-1], target="cpu")
def misspelt_statement(n=256):
    @T.prim_func
    def main(A: T.Tensor((n,), "float32"), B: T.Tensor((n,), "float32")):
        with T.Kernel(T.ceildiv(n, 128)) as bx:
            a = T.alloc_fragment((128,), "float32")
            T.copyy(A[bx * 128], a)
            T.copy(a, B[bx * 128])

    return main


@pytest.mark.parametrize("factory, name", [(misspelt, "alloc_fragmnt"), (misspelt_statement, "copyy")])
def test_misspelt_name_in_a_kernel_points_at_the_name(factory, name):
    with pytest.raises(TileLangCompileError) as info:
        factory()
    err = info.value
    assert "did you mean T." in err.message and err.stage == "parse"
    line = err.location.source_line()
    assert line[err.location.column - 1:].startswith(name), (line, err.location.column)
    caret = str(err).splitlines()[-1]
    assert caret.strip() == "^" and caret.index("^") - 4 == line.index(name)  # under the name in str(err)
